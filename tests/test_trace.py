"""trace.json: Chrome/Perfetto trace events with the required fields, a track per node and per link,
spans that tile each iteration as the engine ran it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aiotsim.api import run_scenario
from aiotsim.config import load_scenario

TESTS = Path(__file__).parent
NODES, ITERATIONS = 2, 3


@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> tuple[dict, dict]:
    out = tmp_path_factory.mktemp("trace") / "run"
    sc = load_scenario(TESTS / "tiny.toml", ["training.eval_every=1"], compressor="2bit", iterations=ITERATIONS)
    summary = run_scenario(sc, out, device="cpu")
    return json.loads((out / "trace.json").read_text()), summary


def test_events_have_the_required_fields(trace) -> None:
    data, _ = trace
    events = data["traceEvents"]
    assert events
    for e in events:
        assert {"name", "ph", "pid", "tid"} <= set(e), e
        assert e["ph"] in ("X", "M")
        if e["ph"] == "X":
            assert {"ts", "dur"} <= set(e), e
            assert e["ts"] >= 0 and e["dur"] >= 0  # microseconds of simulated time
    json.dumps(data)  # round-trips


def test_a_track_per_node_and_per_link(trace) -> None:
    data, _ = trace
    events = data["traceEvents"]
    tracks = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    names = set(tracks.values())
    for i in range(NODES):
        assert {f"node{i}", f"node{i} -> server", f"server -> node{i}"} <= names
    assert "server" in names
    assert len(tracks) == len(names)  # one track each
    spans = [e for e in events if e["ph"] == "X"]
    assert all((e["pid"], e["tid"]) in tracks for e in spans)
    for i in range(NODES):
        up = [e for e in spans if tracks[(e["pid"], e["tid"])] == f"node{i} -> server"]
        assert [e["name"] for e in up] == ["upload"] * ITERATIONS
        assert [e["ts"] for e in up] == sorted(e["ts"] for e in up)
        computes = [e for e in spans if tracks[(e["pid"], e["tid"])] == f"node{i}" and e["name"] == "compute"]
        assert len(computes) == ITERATIONS


def test_spans_end_with_the_simulated_time(trace) -> None:
    data, summary = trace
    spans = [e for e in data["traceEvents"] if e["ph"] == "X"]
    end_s = max(e["ts"] + e["dur"] for e in spans) / 1e6  # us -> s
    assert end_s == pytest.approx(summary["sim_time_s"], rel=1e-9)
    ups = [e for e in spans if e["name"] == "upload"]
    assert sum(e["args"]["bytes"] for e in ups) == summary["bytes_up"]
