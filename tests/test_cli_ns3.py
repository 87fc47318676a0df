"""The ns-3 engine from the command line: what it cannot run is exit 2 naming the key and the fix,
before anything runs; a run and a comparison on it write the same run directories as the flow
engine, plus ns-3's own counts in the summary (runs skip where the ns-3 bindings are missing)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import TESTS, invoke_cli

from aiotsim.network.calibrate_ns3 import ns3_available

TINY = TESTS / "tiny.toml"
NS3 = "network.engine=ns3"
needs_ns3 = pytest.mark.skipif(not ns3_available(), reason="ns-3's Python bindings (aiotsim[ns3]) are not installed")


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("network.transport=ideal", "network.transport: 'ideal' has no packet-level counterpart; ns-3 runs TCP"),
        ("network.jitter_ms=2", "network.jitter_ms: jitter has no ns-3 counterpart"),
        ("network.loss_model=gilbert-elliott", "network.loss_model: 'gilbert-elliott' is not supported by the ns-3"),
        ("network.engine=packets", "network.engine: unknown value 'packets'"),
        ("network.wifi_width_mhz=30", "network.wifi_width_mhz"),
        ("network.lte_resource_blocks=7", "network.lte_resource_blocks"),
        ("network.wifi_positions=[[1,2]]", "network.wifi_positions: 1 positions for 2 nodes"),
        ("network.wifi_positions=[[1,2,3],[0,0]]", "network.wifi_positions: entry 0 must be [x, y]"),
        ("network.wifi_positions=[1,2]", "network.wifi_positions: must be a list of lists of numbers, got [1, 2]"),
        ("network.wifi_positions=[[inf,0],[0,0]]", "network.wifi_positions: must be a finite number"),
        ("network.wifi_radius_m=inf", "network.wifi_radius_m: must be a finite number, got inf"),
        ("nodes.radio=4g network.topology=ring", "runs radio '4g' as one LTE cell, for a star"),
        ("nodes.radio=802.15.4 network.topology=hierarchical", "runs radio '802.15.4' as one 802.15.4 PAN"),
    ],
)
def test_what_the_ns3_engine_cannot_run_is_exit_2_with_the_fix(override: str, message: str) -> None:
    sets = [x for o in override.split() for x in ("--set", o)]
    for command in ("validate", "run"):  # run refuses before it builds anything
        res = invoke_cli(command, str(TINY), "--set", NS3, *sets)
        assert res.exit_code == 2, res.output
        assert message in res.output


def test_validate_says_what_the_ns3_engine_runs() -> None:
    res = invoke_cli("validate", str(TINY), "--set", NS3, "--set", "network.topology=shared-medium")
    assert res.exit_code == 0, res.output
    assert "engine 'ns3' (packet by packet in ns-3.44: every link a drop-tail FIFO" in res.output
    assert "an 802.11n cell (20 MHz, minstrel-ht rate control, stations within 10 m" in res.output


@needs_ns3
def test_a_run_and_a_comparison_on_ns3_write_the_flow_engines_files_and_ns3s_counts(tmp_path: Path) -> None:
    res = invoke_cli("compare", str(TINY), "-c", "none,topk", "--set", NS3, "--jobs", "2", "-o", str(tmp_path), "-q")
    assert res.exit_code == 0, res.output
    summaries = sorted(tmp_path.rglob("summary.json"))
    assert len(summaries) == 2
    for path in summaries:
        d = json.loads(path.read_text())
        assert d["status"] == "complete" and d["iterations"] == 4
        links = d["ns3"]["links"]
        assert set(links) == {"node0.up", "node0.down", "node1.up", "node1.down", "server.in", "server.out"}
        # what ns-3 sent (its headers and PPP framing) is at least the payload the run counted
        assert links["node0.up"]["wire_bytes"] + links["node1.up"]["wire_bytes"] >= d["bytes_up"]
        for name in ("metrics.csv", "evals.csv", "trace.json"):
            assert (path.parent / name).stat().st_size > 0
    ck = invoke_cli("run", str(TINY), "--set", NS3, "--checkpoint-every", "1", "-o", str(tmp_path / "ck"))
    assert ck.exit_code == 2 and "do not checkpoint: TCP's connections live in ns-3" in ck.output


def test_a_flow_engine_summary_has_no_ns3_counts(tmp_path: Path) -> None:
    res = invoke_cli("run", str(TINY), "-o", str(tmp_path), "-q")
    assert res.exit_code == 0, res.output
    assert "ns3" not in json.loads((tmp_path / "summary.json").read_text())
