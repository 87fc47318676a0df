"""benchmarks/replay.py times a full run against its replay under slower links: the smallest case
end to end (iot10, 20 iterations), a full run reused, and the targets' verdicts by hand."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, load_script

SCRIPT = ROOT / "benchmarks" / "replay.py"


def replay_module():
    """benchmarks/replay.py as a module."""
    return load_script(SCRIPT, "replay_benchmark")


def test_the_quick_case_replays_its_full_run_under_the_new_links(tmp_path: Path) -> None:
    """iot10 x 20 iterations with topk: the row's ratio and bytes per node-iteration are its own
    measurements' quotients; the replay directory is a run of the new links (2 Mbit/s, 50 ms
    instead of 10 Mbit/s, 5 ms), so the same learning takes longer simulated time and the same
    bytes; a second call with ``reuse`` keeps the full run and reports its summary's wall time,
    and the replay child's peak memory is its own, not this process's."""
    rb = replay_module()
    row = rb.run_case(rb.CASES["iot10-quick"], tmp_path)
    full, replay = tmp_path / "iot10-quick" / "full", tmp_path / "iot10-quick" / "replay"
    assert (row["nodes"], row["iterations"], row["reused"]) == (10, 20, False)
    assert row["full_s"] > 0 and row["replay_s"] > 0
    assert row["ratio"] == row["replay_s"] / row["full_s"]
    assert row["npz_bytes"] == (full / "timing.npz").stat().st_size
    assert row["bytes_per_node_it"] == row["npz_bytes"] / 200
    assert 0 < row["base_mb"] <= row["peak_mb"]
    assert row["target"] == "1/20" and row["ok"] == (row["ratio"] <= 1 / 20)

    a, b = (json.loads((d / "summary.json").read_text()) for d in (full, replay))
    assert a["complete"] is True and b["complete"] is True
    assert b["sim_time_s"] > a["sim_time_s"]
    assert b["bytes_up"] == a["bytes_up"]
    changed = json.loads((replay / "replay.json").read_text())["changed"]
    assert changed == {"network.latency_ms": 50.0, "network.uplink_mbps": 2.0}

    # 768 MB more in this process: a child's ru_maxrss would start above it; its VmHWM does not
    held = b"\x01" * (768 * 2**20)
    again = rb.run_case(rb.CASES["iot10-quick"], tmp_path, reuse=True)
    assert rb._status_mb("VmHWM") > 768 and again["peak_mb"] < 768
    del held
    assert again["reused"] is True and again["full_s"] == a["wall_time_s"]
    assert "*" in rb.format_row(again).split()[4]  # the full s column marks a reused run


def test_targets_are_met_or_missed_by_each_bound() -> None:
    """iot10: 1/20 of the full run; iot10k: 60 s and 2 GB (2048 MB), each bound on its own."""
    rb = replay_module()
    iot10, big = rb.CASES["iot10"], rb.CASES["iot10k"]
    assert (iot10.target(), rb.CASES["resnet20"].target(), big.target()) == ("1/20", "1/500", "<=60s <=2GB")
    assert iot10.meets(0.05, 1e6, 1e6) and not iot10.meets(0.051, 0.1, 1.0)
    assert big.meets(1.0, 60.0, 2048.0)
    assert not big.meets(0.001, 60.5, 100.0) and not big.meets(0.001, 1.0, 2049.0)


def test_a_row_prints_the_ratio_as_one_over_n() -> None:
    """A replay of 0.5 s after a full run of 100 s: 1/200; 1,000 nodes x 20 iterations and a record
    of 880,000 B: 44.0 B per node-iteration."""
    rb = replay_module()
    row = {
        **{"case": "x", "nodes": 1000, "iterations": 20, "full_s": 100.0, "reused": False, "replay_s": 0.5},
        **{"ratio": 0.005, "target": "1/20", "ok": True, "peak_mb": 700.0, "base_mb": 300.0},
        **{"npz_bytes": 880_000, "bytes_per_node_it": 44.0},
    }
    cells = rb.format_row(row).split()
    assert cells[1:4] == ["1000", "x", "20"]
    assert cells[4:7] == ["100.00", "0.50", "1/200"]
    assert cells[-2:] == ["880,000", "44.0"]
    assert len(rb.format_row(row)) == len(rb.HEAD)


def test_reuse_without_a_workdir_is_a_usage_error() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--reuse"], capture_output=True, text=True, check=False)
    assert done.returncode == 2
    assert "--reuse needs --workdir" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("name", ["iot10", "resnet20", "iot10k"])
def test_each_case_is_a_valid_scenario_a_replay_may_retime(name: str) -> None:
    """Every case's scenario validates and its learning does not depend on the network (a
    learning key), and the replay's new links keep that key: the replay is not refused."""
    from aiotsim.sim.replay_rule import learning_key, replay_problem

    rb = replay_module()
    scenario = rb.scenario_of(rb.CASES[name])
    assert learning_key(scenario) is not None
    assert replay_problem(scenario, scenario.replace(**rb.CHANGES)) is None
