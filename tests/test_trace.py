"""trace.json: Chrome/Perfetto trace events with the required fields, a track per node and per link,
spans that tile each iteration as the engine ran it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aiotsim.api import run_scenario
from aiotsim.config import load_scenario
from aiotsim.errors import ConfigError
from aiotsim.network import Transfer
from aiotsim.results import store
from aiotsim.results.fingerprint import fingerprint_run_dir
from aiotsim.sim.trace import TraceRecorder, kept_nodes

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


def test_kept_spans_become_the_documented_events() -> None:
    """A compute span and a transfer, kept as tuples during the run, by hand as event dicts; time
    order, ties by process then track; a span restored from a checkpoint comes back as it was."""
    rec = TraceRecorder()
    tr = Transfer("node0", "server", "up", 1000, 1080.0, 0.25, 0.75, ["node0.up"], ["node0", "server"])
    rec.transfer(tr, "upload", version=3)
    rec.span("node0", "compute", 0.125, 0.125, version=3)
    rec.span("server", "aggregate", 0.75, 0.0)
    events = list(rec.events())
    meta, spans = events[:5], events[5:]
    assert [m["args"]["name"] for m in meta] == ["compute", "network", "node0 -> server", "node0", "server"]
    assert spans == [
        {"name": "compute", "cat": "compute", "ph": "X", "ts": 125_000.0, "dur": 125_000.0, "pid": 1, "tid": 2,
         "args": {"version": 3}},
        {"name": "upload", "cat": "network", "ph": "X", "ts": 250_000.0, "dur": 500_000.0, "pid": 2, "tid": 1,
         "args": {"bytes": 1000, "wire_bytes": 1080.0, "version": 3}},
        {"name": "aggregate", "cat": "compute", "ph": "X", "ts": 750_000.0, "dur": 0.0, "pid": 1, "tid": 3,
         "args": {}},
    ]  # fmt: skip
    again = TraceRecorder()
    again.load_state(rec.state())
    assert list(again.events()) == list(rec.events())
    assert all(isinstance(e, tuple) for e in rec._spans)  # dicts only when read


@pytest.mark.parametrize("n", [0, 1, 2, 3, 4, 7])
def test_trace_json_in_pieces_is_json_dumps_of_the_whole(n: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Pieces of 3 events joined: the bytes of one json.dumps, at every count around a piece's end."""
    monkeypatch.setattr(store, "TRACE_CHUNK", 3)
    events = [{"name": f"e{i}", "ts": i * 0.1, "args": {"k": [i, None]}} for i in range(n)]
    assert "".join(store._trace_json(iter(events))) == json.dumps({"traceEvents": events, "displayTimeUnit": "ms"})


def test_a_trace_that_fails_midway_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    """Pieces written through a temporary file: an error while they are made keeps the previous
    trace.json whole and removes the half-written temporary."""
    target = tmp_path / "trace.json"
    target.write_text("old")

    def events():  # noqa: ANN202
        yield {"name": "a"}
        raise RuntimeError("made midway")

    with pytest.raises(RuntimeError, match="made midway"):
        store.atomic_write(target, store._trace_json(events()))
    assert target.read_text() == "old" and not list(tmp_path.glob("*.tmp"))


# ---- scenario.trace_nodes: the tracks of some nodes only ------------------------------------------
def test_kept_nodes_are_spread_evenly_over_the_fleet() -> None:
    assert kept_nodes(10, 3) == {0, 3, 6}  # 10 * k // 3 for k = 0, 1, 2
    assert kept_nodes(1000, 4) == {0, 250, 500, 750}
    assert kept_nodes(7, 6) == {0, 1, 2, 3, 4, 5}  # distinct while trace_nodes <= count
    assert kept_nodes(5, 0) == frozenset()
    assert kept_nodes(5, -1) is None and kept_nodes(5, 5) is None and kept_nodes(5, 9) is None  # all
    assert kept_nodes(1000, [17, 3, 999]) == {3, 17, 999} and kept_nodes(5, []) == frozenset()  # named


def test_a_recorder_keeps_a_kept_node_s_tracks_and_those_that_name_no_node() -> None:
    rec = TraceRecorder(nodes={3})
    tracks = ["node3", "node4", "node3 -> gw0", "gw0 -> node4", "node2 -> node3", "node4 -> node5",
              "gw0", "gw0 -> server", "server", "node30", "node3x"]  # fmt: skip
    for t in tracks:
        rec.span(t, "compute", 0.0, 1.0)
    kept = [m["args"]["name"] for m in rec.events() if m["name"] == "thread_name"]
    # node30 is not node 3; node3x is no sensor node's name
    assert kept == ["node3", "node3 -> gw0", "node2 -> node3", "gw0", "gw0 -> server", "server", "node3x"]
    spans = [e for e in rec.events() if e["ph"] == "X"]
    assert sorted(e["tid"] for e in spans) == list(range(1, len(kept) + 1))  # ids of kept tracks only
    rec.span("node4", "compute", 2.0, 1.0)  # a dropped track stays dropped
    assert len([e for e in rec.events() if e["ph"] == "X"]) == len(kept)


def _tracks_and_spans(run_dir: Path) -> tuple[set[str], list[tuple]]:
    """Track names and the spans as (track, name, ts, dur, args), tids replaced by names."""
    events = json.loads((run_dir / "trace.json").read_text())["traceEvents"]
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}
    spans = [(names[(e["pid"], e["tid"])], e["name"], e["ts"], e["dur"], json.dumps(e["args"]))
             for e in events if e["ph"] == "X"]  # fmt: skip
    return set(names.values()), spans


def _traced_and_full(tmp_path: Path, over: list[str], trace_nodes: str) -> tuple[Path, tuple, tuple]:
    """Runs of tiny.toml with ``over`` (2 iterations), every node traced and ``trace_nodes``; checks
    their results are the same; returns the traced run's directory and each run's tracks and spans."""
    over = [*over, "scenario.iterations=2"]
    full, some = tmp_path / "full", tmp_path / "some"
    run_scenario(load_scenario(TESTS / "tiny.toml", over), full, device="cpu")
    run_scenario(load_scenario(TESTS / "tiny.toml", [*over, f"scenario.trace_nodes={trace_nodes}"]), some, device="cpu")
    assert fingerprint_run_dir(some) == fingerprint_run_dir(full)
    return some, _tracks_and_spans(full), _tracks_and_spans(some)


@pytest.mark.parametrize("topology", ["hierarchical", "ring"])
def test_a_run_tracing_some_nodes_keeps_their_spans_and_the_same_results(topology: str, tmp_path: Path) -> None:
    """trace_nodes = 2 of 4: the same metrics and summary as the full trace, and the full trace's
    spans on the kept tracks (node0 and node2, their links, gateways, server), no others."""
    over = ["nodes.count=4", f"network.topology={topology}", "network.gateways=2"]
    some, (all_tracks, all_spans), (tracks, spans) = _traced_and_full(tmp_path, over, "2")
    expected = {t for t in all_tracks if not ({"node1", "node3"} & set(t.split(" -> ")))}
    if topology == "ring":  # node0 -> node1 is node0's; node1 -> node2 is node2's
        expected |= {"node0 -> node1", "node1 -> node2", "node2 -> node3", "node3 -> node0"} & all_tracks
    assert tracks == expected and "node0" in tracks and "node2" in tracks and "node1" not in tracks
    assert spans == [s for s in all_spans if s[0] in expected]
    named = tmp_path / "named"  # the same two nodes by index: the same trace, byte for byte
    run_scenario(
        load_scenario(TESTS / "tiny.toml", [*over, "scenario.iterations=2", "scenario.trace_nodes=[2, 0]"]),
        named,
        device="cpu",
    )
    assert (named / "trace.json").read_bytes() == (some / "trace.json").read_bytes()


def test_a_run_keeps_the_tracks_of_the_nodes_it_names(tmp_path: Path) -> None:
    """trace_nodes = [1, 3] of 5 on a star: node1's and node3's tracks and links, the server's; no
    other node's; the same results as the full trace."""
    _, (all_tracks, all_spans), (tracks, spans) = _traced_and_full(tmp_path, ["nodes.count=5"], "[3, 1]")
    nodes = {v for t in tracks for v in t.split(" -> ") if v.startswith("node")}
    assert nodes == {"node1", "node3"} and {"node1", "node3", "server", "node1 -> server"} <= tracks
    assert spans == [s for s in all_spans if s[0] in tracks] and tracks < all_tracks


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("[1, 5]", "node 5 is not in the fleet of 5 nodes (nodes.count); list indices 0..4"),
        ("[2, 0, 2]", "node 2 is listed twice; name each node once"),
        ("[-1]", "node indices must be in [0, 99999], got -1"),
        ("[0.5]", "must be an integer or a list of integers, got [0.5]"),
    ],
)
def test_named_trace_nodes_outside_the_fleet_are_refused(value: str, problem: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_scenario(TESTS / "tiny.toml", ["nodes.count=5", f"scenario.trace_nodes={value}"])
    assert any(p.endswith(f"scenario.trace_nodes: {problem}") for p in err.value.problems), err.value.problems
