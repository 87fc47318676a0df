"""The gate reads the files a scenario names (bandwidth traces, availability traces) as the run
does, within stated bounds, and refuses what the run could not use: exit 2 with a message naming
the path and the reason, never a traceback, a hang, a huge allocation, or the file's content
(issue 43, "The gate leaks")."""

from __future__ import annotations

import os
import re
import time
import tracemalloc
from pathlib import Path

import pytest
from typer.testing import CliRunner

import aiotsim.network.traces as traces
from aiotsim.cli import app
from aiotsim.config import load_scenario
from aiotsim.errors import ConfigError
from aiotsim.network.topology import Topology
from aiotsim.network.traces import MAHIMAHI_PACKET_BYTES, load_trace
from aiotsim.sim.availability import AvailabilityTrace
from aiotsim.validate import load_validated

runner = CliRunner()
SECRET = "HUNTER2_SECRET"  # content that must never appear in a message


def _refused(path: Path, *sets: str) -> str:
    """Run ``aiotsim validate`` and ``aiotsim run`` on ``path``: both exit 2 with no traceback;
    the validate output."""
    outs = []
    for cmd in (["validate", str(path)], ["run", str(path), "--out", str(path.parent / "out")]):
        args = cmd + [x for s in sets for x in ("--set", s)]
        res = runner.invoke(app, args)
        assert res.exit_code == 2, (cmd, res.output, res.exception)
        assert isinstance(res.exception, SystemExit), res.exception
        assert "Traceback" not in res.output
        outs.append(res.output)
    assert not (path.parent / "out").exists()  # refused before a run directory was made
    return outs[0]


def _traced(tmp_path: Path, tiny_scenario: Path, trace: str, body: bytes | str) -> tuple[Path, Path]:
    """The tiny scenario with its uplink trace at ``tmp_path/trace`` holding ``body``."""
    t = tmp_path / trace
    t.write_bytes(body if isinstance(body, bytes) else body.encode())
    s = tmp_path / "s.toml"
    s.write_text(tiny_scenario.read_text() + f'uplink_trace = "{trace}"\n')
    return s, t


# ---- Mahimahi lines and sizes ----------------------------------------------------------------------
def test_superscript_digit_is_not_a_timestamp(tmp_path, tiny_scenario) -> None:
    s, t = _traced(tmp_path, tiny_scenario, "sup.trace", "1\n\u00b2\n")  # '²'.isdigit() is True, int() fails
    out = _refused(s)
    assert f"{t.name}:2: not a timestamp" in out


def test_a_far_timestamp_is_refused_without_allocating(tmp_path) -> None:
    # 14 bytes whose last timestamp (the period) is 1e11 ms: one entry per ms would be 745 GiB
    p = tmp_path / "far.trace"
    p.write_text("1\n100000000000\n")
    t0 = time.perf_counter()
    with pytest.raises(ConfigError, match=r"far.trace:2: the timestamp is over 1,000,000,000 ms"):
        load_trace(p)
    assert time.perf_counter() - t0 < 1.0


def test_a_long_sparse_period_is_held_in_a_few_segments(tmp_path) -> None:
    # 500 packets in ms 0..499, the last line at 5e7 ms (13.9 h, the period) falls on ms 0 again:
    # ms 0 carries 2 packets, ms 1..499 one each, the rest of the period none -> 3 segments (a
    # dense array was 5e7 entries, ~0.8 GB with its temporaries)
    p = tmp_path / "sparse.trace"
    p.write_text("\n".join(map(str, range(500))) + "\n50000000\n")
    tracemalloc.start()  # numpy reports its buffers to tracemalloc
    try:
        tr = load_trace(p)
        peak = tracemalloc.get_traced_memory()[1]  # B
    finally:
        tracemalloc.stop()
    assert peak < 10e6  # the dense array alone was 400 MB
    assert tr.starts.tolist() == [0.0, 0.001, 0.5]
    assert tr.rates.tolist() == [2 * MAHIMAHI_PACKET_BYTES / 1e-3, MAHIMAHI_PACKET_BYTES / 1e-3, 0.0]
    assert tr.period_bytes == 501 * MAHIMAHI_PACKET_BYTES and tr.period_s == 5e4


def test_a_trace_slower_than_the_slowest_link_is_refused(tmp_path, tiny_scenario) -> None:
    # 2 opportunities in 50,000 s: 3,000 B / 5e4 s = 4.8e-7 Mbit/s, under 1e-4 (as uplink_mbps)
    s, _ = _traced(tmp_path, tiny_scenario, "slow.trace", "1\n50000000\n")
    assert "4.8e-07 Mbit/s on average" in _refused(s)
    p = tmp_path / "slow.csv"
    p.write_text("0, 1e-12\n1, 5\n")  # mean 1e-12 Mbit/s over its 1 s period
    with pytest.raises(ConfigError, match="under the slowest link allowed"):
        load_trace(p)
    p.write_text("0, 1e-4\n1, 5\n")  # exactly the bound: accepted
    assert load_trace(p).mean_rate == pytest.approx(12.5)  # B/s


def test_a_trace_faster_than_the_fastest_link_is_refused(tmp_path, tiny_scenario) -> None:
    # 1e300 Mbit/s for 0.9e6 s: the period's bytes overflowed to inf; validate said ok and run
    # refused the link ("bandwidth_bps(=inf) must be > 0"): accepted, then failed
    s, t = _traced(tmp_path, tiny_scenario, "fast.csv", "0, 1e300\n900000, 1\n1000000, 1\n")
    assert f"{t.name}:1: mbps(=1e+300) is over 1e+06 Mbit/s, the fastest link allowed" in _refused(s)
    p = tmp_path / "edge.csv"
    p.write_text("0, 1e6\n1, 5\n")  # exactly the bound: accepted
    assert load_trace(p).rates[0] == 1e6 * 1e6 / 8  # B/s
    # Mahimahi: 100,000 delivery opportunities in ms 0 (1.2e6 Mbit/s) then an idle ms
    p = tmp_path / "burst.trace"
    p.write_text("0\n" * 100_000 + "1\n")
    with pytest.raises(ConfigError, match=r"reaches 1\.2e\+06 Mbit/s, over the fastest link allowed"):
        load_trace(p)


def test_a_csv_period_over_the_bound_is_refused(tmp_path, tiny_scenario) -> None:
    s, t = _traced(tmp_path, tiny_scenario, "huge.csv", "0, 5\n1e300, 5\n")
    assert f"{t.name}:2: time_s(=1e+300) is over 1e+06 s" in _refused(s)


def test_a_file_over_the_size_bound_is_refused(tmp_path, monkeypatch) -> None:
    p = tmp_path / "big.trace"
    p.write_text("1\n" * 20)  # 40 bytes
    monkeypatch.setattr(traces, "MAX_TRACE_FILE_BYTES", 32)
    with pytest.raises(ConfigError, match="big.trace: the trace is larger than"):
        load_trace(p)


def test_validate_applies_the_resolution_the_run_applies(tmp_path, tiny_scenario) -> None:
    # 1 s period at 1e-9 ms windows: 1e12 windows (a MemoryError in run); validate used to
    # load the trace without the resolution and say ok
    s, _ = _traced(tmp_path, tiny_scenario, "one.csv", "0, 5\n1000, 5\n")
    out = _refused(s, "network.trace_resolution_ms=0.1")
    assert "10,000,000 windows" in out and "set network.trace_resolution_ms >= 0.5" in out
    # at the bound's window it loads, with that many windows (merged: the rate is constant)
    assert load_scenario(s, ["network.trace_resolution_ms=0.5"]).network.trace_resolution_ms == 0.5


@pytest.mark.parametrize("ms", [1e-9, 5e-324, 0.000999])
def test_a_resolution_under_a_microsecond_is_refused(tmp_path, tiny_scenario, ms) -> None:
    # 5e-324 ms is a 0 s grid in seconds: validate said ok, run divided by zero in the trace stagger
    s, _ = _traced(tmp_path, tiny_scenario, "one.csv", "0, 5\n1, 5\n")
    out = _refused(s, f"network.trace_resolution_ms={ms!r}")
    assert f"network.trace_resolution_ms: must be 0 or in [0.001, 1e+06], got {ms!r}" in out


def test_a_trace_with_more_segments_than_the_bound_is_refused_as_written(tmp_path, monkeypatch) -> None:
    # 5 segments (ms 0, 2, 4 busy; 1, 3 idle) in a 5 ms period, with a bound of 3: refused as
    # written; at 5 ms / 3 = 1.67 ms windows it is 3 segments and loads
    monkeypatch.setattr(traces, "MAX_TRACE_SEGMENTS", 3)
    p = tmp_path / "busy.trace"
    p.write_text("0\n2\n4\n5\n")
    with pytest.raises(ConfigError, match=r"changes rate 5 times in its 0.005 s period, more than the 3 segments"):
        load_trace(p)
    with pytest.raises(ConfigError, match=r"set network.trace_resolution_ms >= 1.66667$"):
        load_trace(p)
    assert load_trace(p, 5e-3 / 3).starts.size == 3


# ---- what a path may name --------------------------------------------------------------------------
def _not_files(tmp_path: Path) -> list[tuple[Path | str, str]]:
    loop = tmp_path / "loop"
    loop.symlink_to(tmp_path / "loop")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    (tmp_path / "dir").mkdir()
    return [
        (loop, "symlink loop"),
        (f"{tmp_path}/a\x00b", "NUL byte"),
        (fifo, "a FIFO (named pipe), not a regular file"),
        ("/dev/zero", "a character device, not a regular file"),
        (tmp_path / "dir", "a directory, not a regular file"),
    ]


def test_traces_that_are_not_regular_files_are_refused(tmp_path) -> None:
    for path, why in _not_files(tmp_path):
        with pytest.raises(ConfigError, match=re.escape(why)):
            load_trace(path)


def test_availability_files_that_are_not_regular_files_are_refused(tmp_path) -> None:
    for path, why in _not_files(tmp_path):
        with pytest.raises(ConfigError, match=f"nodes.availability_trace: .*{re.escape(why)}"):
            AvailabilityTrace.from_csv(path, 4)


def test_a_fifo_availability_trace_is_refused_by_validate_and_run(tmp_path, tiny_scenario) -> None:
    os.mkfifo(tmp_path / "avail.csv")  # validate used to block on it forever
    s = tmp_path / "s.toml"
    text = tiny_scenario.read_text().replace("[nodes]\n", f'[nodes]\navailability_trace = "{tmp_path}/avail.csv"\n')
    s.write_text(text.replace("[training]\n", '[training]\nmode = "federated"\n'))
    assert "a FIFO (named pipe), not a regular file" in _refused(s)


def test_a_binary_availability_trace_is_refused(tmp_path) -> None:
    p = tmp_path / "avail.csv"
    p.write_bytes(b"node,start_s,end_s\n0,0,1\n\xff\xfe\x00\x01")
    with pytest.raises(ConfigError, match="avail.csv: the availability trace is not UTF-8 text .byte 25"):
        AvailabilityTrace.from_csv(p, 4)


def test_availability_rows_are_checked_without_a_traceback(tmp_path) -> None:
    p = tmp_path / "avail.csv"
    p.write_text(f"node,start_s,end_s\n\u00b2,0,1\n{SECRET},0,1\n0,{SECRET},1\n0,1\n0,0,1,{'x' * 200_000}\n")
    with pytest.raises(ConfigError) as exc:
        AvailabilityTrace.from_csv(p, 4)
    lines = exc.value.problems
    assert [line.split(": ", 2)[1].rsplit(":", 1)[1] for line in lines] == ["2", "3", "4", "5", "6"]
    assert "is not a node index 0..3" in lines[0] and "must be numbers" in lines[2]
    assert "expected 3 fields" in lines[3] and "not a CSV row" in lines[4]  # a field over csv's limit
    assert SECRET not in exc.value.message


def test_many_bad_availability_rows_are_summed_up(tmp_path) -> None:
    p = tmp_path / "avail.csv"
    p.write_text("x,0,1\n" * 1000)
    with pytest.raises(ConfigError) as exc:
        AvailabilityTrace.from_csv(p, 4)
    assert len(exc.value.problems) == 21 and exc.value.problems[-1].endswith("... and 980 more bad rows")


# ---- messages never quote the file --------------------------------------------------------------
@pytest.mark.parametrize("name", ["secret.trace", "secret.csv"])
def test_a_trace_error_names_the_path_not_the_content(tmp_path, tiny_scenario, name) -> None:
    s, t = _traced(tmp_path, tiny_scenario, name, f"root:x:0:0:{SECRET}:/root:/bin/bash\n")
    out = _refused(s)
    assert str(t) in out.replace("\n", "") or t.name in out
    assert SECRET not in out and "root:x" not in out


# ---- custom topologies -------------------------------------------------------------------------
CUSTOM = """
[network]
topology = "custom"
[[network.vertex]]
name = "node1"
role = "node"
aggregator = "{agg}"
[[network.link]]
from = "node0"
to = "server"
mbps = 1.0
latency_ms = 1.0
[[network.link]]
from = "node1"
to = "node0"
mbps = 1.0
latency_ms = 1.0
"""


def test_a_node_aggregating_for_another_node_is_refused(tmp_path, tiny_scenario) -> None:
    # the run used to die in a KeyError: only a gateway or the server sums updates
    base = tiny_scenario.read_text().split("[network]")[0]
    s = tmp_path / "s.toml"
    s.write_text(base + CUSTOM.format(agg="node0"))
    out = _refused(s)
    assert "node 'node1' has aggregator 'node0', a node; a node's aggregator must be a server or a gateway" in out
    s.write_text(base + CUSTOM.format(agg="server"))  # through node0 to the server: fine
    assert load_validated(s).network.topology == "custom"


def test_trace_paths_with_a_nul_byte_or_a_loop_in_a_scenario_file(tmp_path, tiny_scenario) -> None:
    # the scenario file's relative paths are made absolute when read: that resolve() raised
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    s = tmp_path / "s.toml"
    s.write_text(tiny_scenario.read_text() + 'uplink_trace = "a\\u0000b"\ndownlink_trace = "loop"\n')
    out = _refused(s)
    assert "network.uplink_trace: " in out and "the trace path holds a NUL byte" in out
    assert "network.downlink_trace: " in out and "the trace path is a symlink loop" in out


def _star(n: int, extra: int = 0) -> Topology:
    """A custom star: ``n`` nodes linked both ways to the server, ``extra`` vertices with no link."""
    nodes = [{"name": "server", "role": "server"}] + [{"name": f"node{i}", "aggregator": "server"} for i in range(n)]
    nodes += [{"name": f"lone{i}", "role": "relay"} for i in range(extra)]
    links = [{"from": f"node{i}", "to": "server", "mbps": 1.0, "latency_ms": 1.0} for i in range(n)]
    return Topology.from_links(nodes, links)


def test_validating_a_large_custom_topology_is_linear(tmp_path) -> None:
    # one search per aggregator and direction, not one per node (fuzz finding F3: 100,000 nodes
    # took 2m44s): 4,000 nodes used to take 2 x 4,000 searches over 4,000 vertices
    topo = _star(4000)
    t0 = time.perf_counter()
    assert topo.validate() == []
    assert time.perf_counter() - t0 < 1.0
    # one node cut off from the server (its link goes to a relay that leads nowhere)
    vertices = [{"name": "server", "role": "server"}, {"name": "r", "role": "relay"}]
    vertices += [{"name": f"node{i}", "aggregator": "server"} for i in (0, 1)]
    link = {"mbps": 1.0, "latency_ms": 1.0}
    links = [{"from": "node0", "to": "server", **link}, {"from": "node1", "to": "r", **link}]
    cut = Topology.from_links(vertices, links)
    assert cut.validate() == ["node 'node1' is unroutable: no route to 'server' and from 'server' (its aggregator)"]


def test_many_disconnected_vertices_are_counted_not_listed() -> None:
    problems = _star(3, extra=100).validate()
    assert problems[:2] == [f"node 'lone{i}' is disconnected: it has no link" for i in (0, 1)]
    assert len(problems) == 21 and problems[-1] == "... and 80 more vertices with no link"
