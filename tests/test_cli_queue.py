"""`aiotsim validate` bounds and explains the drop-tail buffers and the sharing (issue 38): a bad
value is exit 2 with one line naming the key and what it may be, never a traceback; a good
scenario's report gives each kind of link's buffer in packets and in ms at its rate."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import TESTS, invoke_cli

TINY = TESTS / "tiny.toml"


def _validate(path: Path, *sets: str):  # type: ignore[no-untyped-def]
    return invoke_cli("validate", str(path), *[x for s in sets for x in ("--set", s)])


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("network.queue_packets=0", "network.queue_packets: must be in [1, 100000], got 0"),
        ("network.queue_packets=-1", "network.queue_packets: must be in [1, 100000], got -1"),
        ("network.queue_packets=1.5", "network.queue_packets: must be an integer, got 1.5"),
        ("network.queue_packets=x", "network.queue_packets: must be an integer, got 'x'"),
        ("network.queue_packets=1000000000", "network.queue_packets: must be in [1, 100000], got 1000000000"),
        ("network.server_queue_packets=-5", "network.server_queue_packets: must be in [0, 100000], got -5"),
        ("network.backhaul_queue_packets=1e9", "network.backhaul_queue_packets: must be an integer, got 1000000000.0"),
        ("network.sharing=lifo", "network.sharing: unknown value 'lifo' (did you mean 'fifo'?); valid: fifo, fair"),
    ],
)
def test_a_bad_buffer_or_sharing_is_exit_2_naming_the_key(override: str, message: str) -> None:
    res = _validate(TINY, override)
    assert res.exit_code == 2, res.output
    assert f"{TINY}: {message}" in res.output


def test_bad_group_and_custom_link_buffers_are_named(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(
        TINY.read_text()
        + 'topology = "custom"\n'
        + '[[network.link]]\nfrom = "node0"\nto = "server"\nmbps = 1\nqueue_packets = 0\n'
        + '[[network.link]]\nfrom = "node1"\nto = "server"\nmbps = 1\nqueue_packets = "deep"\n'
        + "[[nodes.group]]\ncount = 2\nqueue_packets = 1.5\n"
    )
    res = _validate(path)
    assert res.exit_code == 2
    assert "network.link[0].queue_packets: must be in [1, 100000], got 0" in res.output
    assert "network.link[1].queue_packets: must be an integer, got 'deep'" in res.output
    assert "nodes.group[0].queue_packets: must be an integer, got 1.5" in res.output


def test_validate_reports_the_buffers_in_packets_and_ms() -> None:
    res = _validate(TINY, "network.queue_packets=50", "network.sharing=fifo")
    assert res.exit_code == 0, res.output
    network = next(line for line in res.output.splitlines() if line.startswith("network: "))
    # tiny.toml: 1 Mbit/s node uplinks, a 10 Mbit/s server link; 50 x 1,500 B x 8 / rate
    assert "sharing 'fifo'" in network
    assert "node uplinks 50 packets (75.0 KB, 600 ms at 1 Mbit/s)" in network
    assert "server links 50 packets (75.0 KB, 60 ms at 10 Mbit/s)" in network


def test_validate_reports_a_custom_network_link_by_link(tmp_path: Path) -> None:
    path = tmp_path / "custom.toml"
    path.write_text(
        TINY.read_text()
        + 'topology = "custom"\n'
        + '[[network.link]]\nfrom = "node0"\nto = "server"\nmbps = 2\nqueue_packets = 20\n'
        + '[[network.link]]\nfrom = "node1"\nto = "server"\nmbps = 1\n'
    )
    res = _validate(path)
    assert res.exit_code == 0, res.output
    assert "node0->server 20 packets (30.0 KB, 120 ms at 2 Mbit/s)" in res.output
    assert "node1->server 1,000 packets (1.5 MB, 12,000 ms at 1 Mbit/s)" in res.output
