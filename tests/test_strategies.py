"""Each strategy against a two- or three-node case computed by hand, and how runs stop early.

Every case runs the MLP on the 8x8 digits (55,210 fp32 parameters: 220,840 B per dense message)
with the ``none`` codec (0 FLOP to encode or decode, so encode and decode take 0 s) and the
``flops`` compute model on ``rpi4`` profiles, so:

* compute time ``c`` = FLOPs of one batch / the profile's FLOP/s (x the node's slowdown);
* a message of B payload bytes is B + ceil(B / (1500 - 40)) x 40 wire bytes (1500 B MTU, 40 B of
  headers per packet); over a 1 Mbit/s node link with 10 ms latency it takes
  ``hop`` = wire x 8 / 1e6 + 0.010 s. The 100 Mbit/s server link is never the bottleneck.

Records go to an in-memory :class:`RunSink`, so the tests also show the sink protocol.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from typing import Any

import pytest

from aiotsim.config import Scenario, scenario_from_dict
from aiotsim.errors import ConfigError
from aiotsim.learn.devices import get_profile
from aiotsim.records import METRIC_FIELDS, SUMMARY_FIELDS
from aiotsim.sim.runner import run_cluster
from aiotsim.sim.strategies import STRATEGIES, get_strategy, strategy_name
from aiotsim.sim.strategies.partial import PartialStrategy
from aiotsim.sim.strategies.ring import chunk_layers
from aiotsim.sim.world import STALL_RETRIES, Cluster

DENSE = 220_840  # B, the MLP's fp32 gradient (and model)


def wire(payload: int, mtu: int = 1500, header: int = 40) -> int:
    """Payload + one header per packet of (mtu - header) payload bytes."""
    return payload + max(1, math.ceil(payload / (mtu - header))) * header


HOP = wire(DENSE) * 8 / 1e6 + 0.010  # s, one dense message over a 1 Mbit/s, 10 ms node link


class MemorySink:
    """A RunSink that keeps everything in memory."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self.evals: list[dict[str, Any]] = []
        self.trace: list[dict[str, Any]] = []
        self.summary: dict[str, Any] | None = None

    def write_metrics(self, row: dict[str, Any]) -> None:
        self.rows.append(row)

    def write_eval(self, row: dict[str, Any]) -> None:
        self.evals.append(row)

    def write_trace(self, events: list[dict[str, Any]]) -> None:
        self.trace = events

    def finish(self, summary: dict[str, Any]) -> None:
        self.summary = summary


def scenario(iterations: int = 2, **sections: dict[str, Any]) -> Scenario:
    base: dict[str, Any] = {
        "scenario": {"name": "s", "seed": 5, "iterations": iterations},
        "data": {"dataset": "digits", "batch_size": 16},
        "model": {"name": "mlp"},
        "training": {"lr": 0.1, "momentum": 0.0, "eval_every": iterations},
        "compressor": {"name": "none"},
        "nodes": {"count": 2, "device": "rpi4", "compute_model": "flops"},
        # the hand-computed times below are those of the fluid model (TCP windows: tests/test_tcp.py)
        "network": {
            "uplink_mbps": 1.0, "downlink_mbps": 1.0, "latency_ms": 10.0, "server_mbps": 100.0, "transport": "ideal",
        },  # fmt: skip
    }
    for name, values in sections.items():
        base[name] = {**base.get(name, {}), **values}
    return scenario_from_dict(base)


def run(sc: Scenario) -> tuple[float, list[dict[str, Any]], dict[str, Any]]:
    """``(c, rows, summary)``: the unslowed compute time, the metrics rows and the summary."""
    cluster = Cluster(sc, device="cpu")
    sink = MemorySink()
    summary = run_cluster(cluster, sink)
    assert sink.summary == summary
    c = cluster.learning.flops_per_batch / get_profile("rpi4").flops_per_s
    return c, sink.rows, summary


def slow_node(count: int, slowdown: float) -> dict[str, Any]:
    """``count - 1`` nodes at full speed, then one computing ``slowdown`` times slower."""
    return {"count": count, "group": [{"count": count - 1}, {"count": 1, "slowdown": slowdown}]}


# ---- the registry --------------------------------------------------------------------------------
def test_registry_names_and_miss() -> None:
    assert set(STRATEGIES) >= {"sync", "partial", "async", "ring"}
    assert get_strategy("partial") is PartialStrategy
    assert strategy_name(scenario()) == "sync"
    assert strategy_name(scenario(network={"topology": "ring"})) == "ring"
    with pytest.raises(ConfigError, match="unknown strategy 'asycn' \\(did you mean 'async'\\?\\); valid: async, "):
        get_strategy("asycn")


def test_records_declare_the_columns() -> None:
    assert METRIC_FIELDS[:3] == ("iteration", "sim_time_s", "iter_time_s") and METRIC_FIELDS[-1] == "energy_j"
    assert SUMMARY_FIELDS[:3] == ("complete", "status", "reason")


# ---- sync ------------------------------------------------------------------------------------------
def test_sync_waits_for_the_slowest_node() -> None:
    c, rows, summary = run(scenario(nodes=slow_node(2, 2.0)))
    # iteration 0: both compute (node1 takes 2c), then upload over their own links
    assert rows[0]["sim_time_s"] == pytest.approx(2 * c + HOP, rel=1e-9)
    assert rows[0]["compute_s"] == pytest.approx(1.5 * c, rel=1e-9)  # mean over the two nodes
    assert rows[0]["comm_s"] == pytest.approx(HOP, rel=1e-9)  # iteration - slowest compute
    # the next round's model downloads are dispatched before row 0 is finished: counted in it
    assert (rows[0]["bytes_up"], rows[0]["bytes_down"]) == (2 * DENSE, 2 * DENSE)
    assert rows[0]["wire_bytes_up"] == 2 * wire(DENSE)
    # iteration 1: download, compute, upload; then the final broadcast
    assert rows[1]["iter_time_s"] == pytest.approx(HOP + 2 * c + HOP, rel=1e-9)
    assert (rows[1]["bytes_up"], rows[1]["bytes_down"]) == (2 * DENSE, 2 * DENSE)
    assert summary["sim_time_s"] == pytest.approx(rows[1]["sim_time_s"] + HOP, rel=1e-9)
    assert [r["contributors"] for r in rows] == [2, 2] and [r["staleness"] for r in rows] == [0.0, 0.0]
    assert summary["status"] == "complete" and "reason" not in summary


# ---- partial ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("late", ["drop", "apply"])
def test_partial_two_of_three_with_a_late_upload(late: str) -> None:
    """node2 computes 1000x slower. Iteration 0 takes the uploads of node0 and node1 at
    T0 = c + HOP. node2's version-0 upload arrives at 1000c + HOP, during node0/node1's second
    round (T0 + HOP + c + HOP): it is dropped or kept, and node2 is sent the model again.
    Iteration 1 ends when node0 and node1 are back at T1 = 2c + 3 HOP; the final broadcast to
    them ends at T1 + HOP."""
    sc = scenario(nodes=slow_node(3, 1000.0), training={"mode": "partial", "partial_k": 2, "late": late})
    c, rows, summary = run(sc)
    assert c + HOP < 1000 * c < 1000 * c + HOP < 2 * c + 3 * HOP  # the order argued above holds
    assert rows[0]["sim_time_s"] == pytest.approx(c + HOP, rel=1e-9)
    assert rows[1]["sim_time_s"] == pytest.approx(2 * c + 3 * HOP, rel=1e-9)
    assert summary["sim_time_s"] == pytest.approx(2 * c + 4 * HOP, rel=1e-9)
    # row 0: two uploads (node2's starts at 1000c, after T0), two model downloads for round 2
    assert (rows[0]["bytes_up"], rows[0]["bytes_down"]) == (2 * DENSE, 2 * DENSE)
    # row 1: node0, node1 and node2's late upload; node2's new model and the final broadcast
    assert (rows[1]["bytes_up"], rows[1]["bytes_down"]) == (3 * DENSE, 3 * DENSE)
    if late == "drop":
        assert [r["contributors"] for r in rows] == [2, 2] and summary["dropped_uploads"] == 1
        assert rows[1]["staleness"] == 0.0
    else:  # node2's gradient (version 0) lands on version 1 -> 2: staleness 1
        assert [r["contributors"] for r in rows] == [2, 3] and summary["dropped_uploads"] == 0
        assert rows[1]["staleness"] == pytest.approx(1 / 3)


def test_partial_k_zero_means_half_the_nodes_rounded_up() -> None:
    sc = scenario(nodes={"count": 3}, training={"mode": "partial", "partial_k": 2})
    sc = dataclasses.replace(sc, training=dataclasses.replace(sc.training, partial_k=0))
    assert PartialStrategy(Cluster(sc, device="cpu")).k == 2


# ---- async -----------------------------------------------------------------------------------------
def test_async_applies_each_upload_on_arrival() -> None:
    """node1 computes 3x slower. node0's upload (version 0) is applied at c + HOP and node0 goes
    back to work; node1's upload (version 0) lands at 3c + HOP on version 1 (staleness 1), which
    is the last iteration: node1, idle, downloads the final model while node0 still works."""
    c, rows, summary = run(scenario(nodes=slow_node(2, 3.0), training={"mode": "async"}))
    assert 3 * c + HOP < c + HOP + HOP + c  # node0's second upload starts after row 1
    assert rows[0]["sim_time_s"] == pytest.approx(c + HOP, rel=1e-9)
    assert rows[1]["sim_time_s"] == pytest.approx(3 * c + HOP, rel=1e-9)
    assert summary["sim_time_s"] == pytest.approx(3 * c + 2 * HOP, rel=1e-9)
    # both first uploads started before row 0; node0's re-dispatch (its model download) starts
    # once row 0 is written, so it counts in row 1 with node1's final model
    assert (rows[0]["bytes_up"], rows[0]["bytes_down"]) == (2 * DENSE, 0)
    assert (rows[1]["bytes_up"], rows[1]["bytes_down"]) == (0, 2 * DENSE)
    assert [r["contributors"] for r in rows] == [1, 1]
    assert [r["staleness"] for r in rows] == [0.0, 1.0] and summary["mean_staleness"] == 0.5


# ---- ring ------------------------------------------------------------------------------------------
def test_ring_three_nodes_uneven_chunks() -> None:
    """55,210 elements in 3 chunks: 18,404 + 18,403 + 18,403 (73,616 / 73,612 / 73,612 B, 51
    packets each). Every step sends all three chunks at once, each on its own link, so a step
    lasts as long as the largest chunk's hop; 2 (n-1) = 4 steps follow the compute."""
    assert [L.numel for L in chunk_layers(55_210, 3)] == [18_404, 18_403, 18_403]
    c, rows, summary = run(scenario(nodes={"count": 3}, network={"topology": "ring"}))
    step = wire(4 * 18_404) * 8 / 1e6 + 0.010
    assert rows[0]["iter_time_s"] == pytest.approx(c + 4 * step, rel=1e-9)
    assert rows[1]["sim_time_s"] == pytest.approx(2 * (c + 4 * step), rel=1e-9)
    # each reduce-scatter step moves every chunk once: (n-1) x the dense gradient per phase
    assert (rows[0]["bytes_up"], rows[0]["bytes_down"]) == (2 * DENSE, 2 * DENSE)
    assert rows[0]["agg_bytes"] == DENSE and rows[0]["contributors"] == 3 and rows[0]["staleness"] == 0.0
    assert summary["sim_time_s"] == rows[1]["sim_time_s"]  # no final broadcast: every node holds it


# ---- runs that stop early --------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("lr", "sections"),
    [
        (1e3, {}),  # the largest lr validation accepts: finite step, NaN loss soon after
        (1e300, {}),  # the step itself overflows fp32 (only a scenario built past validation)
        (1e3, {"training": {"mode": "partial", "partial_k": 1}}),
        (1e3, {"training": {"mode": "async"}}),
        (1e3, {"network": {"topology": "ring"}}),
    ],
)
def test_divergence_stops_the_run_and_keeps_the_rows(lr: float, sections: dict[str, Any]) -> None:
    others = {k: v for k, v in sections.items() if k != "training"}
    sc = scenario(iterations=20, training=sections.get("training", {}), **others)
    # set lr past validation (its bound is 1e3): the engine must stop whatever it is handed
    sc = dataclasses.replace(sc, training=dataclasses.replace(sc.training, lr=lr))
    cluster = Cluster(sc, device="cpu")
    sink = MemorySink()
    summary = run_cluster(cluster, sink)
    assert summary["status"] == "diverged" and summary["complete"] is False
    assert summary["iterations"] == len(sink.rows) < 20  # stopped early, every row before it kept
    assert summary["reason"].startswith(f"iteration {len(sink.rows)}: ")
    # reason in its place; ns3 (what the ns-3 engine measured) is there only on that engine
    assert list(summary) == [f for f in SUMMARY_FIELDS if f != "ns3"]


def test_no_node_online_stalls_the_run() -> None:
    sc = scenario(iterations=5, nodes={"dropout_prob": 0.9, "rejoin_prob": 1e-300, "retry_s": 0.5})
    cluster = Cluster(sc, device="cpu")
    sink = MemorySink()
    summary = run_cluster(cluster, sink)
    assert summary["status"] == "stalled" and summary["complete"] is False
    limit = STALL_RETRIES * 0.5
    assert summary["reason"].startswith(f"no node online for {limit:g} simulated seconds")
    assert summary["sim_time_s"] >= limit and len(sink.rows) < 5


@pytest.mark.slow
def test_async_stalls_too() -> None:
    sc = scenario(iterations=5, training={"mode": "async"}, nodes={"dropout_prob": 0.9, "rejoin_prob": 1e-300})
    summary = run_cluster(Cluster(sc, device="cpu"), MemorySink())
    assert summary["status"] == "stalled"


# ---- the library entry point -----------------------------------------------------------------------
def test_run_scenario_fixes_the_thread_count_and_restores_it(tmp_path) -> None:
    import torch

    from aiotsim.api import run_scenario

    seen: list[int] = []
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        summary = run_scenario(
            scenario(), tmp_path / "run", device="cpu", on_progress=lambda p: seen.append(torch.get_num_threads())
        )
        assert seen == [1, 1] and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    assert summary["complete"] and (tmp_path / "run" / "summary.json").is_file()
    header = (tmp_path / "run" / "metrics.csv").read_text().splitlines()[0]
    assert header == ",".join(METRIC_FIELDS)


# ---- the garbage collector during a run ------------------------------------------------------------
class FreezeSink(MemorySink):
    """Notes the collector's frozen objects and thresholds whenever a row or the trace is
    written (the trace too: its events are built at the end, over every span of the run)."""

    def __init__(self) -> None:
        super().__init__()
        self.frozen: list[int] = []
        self.thresholds: list[tuple[int, int, int]] = []

    def note(self) -> None:
        import gc

        self.frozen.append(gc.get_freeze_count())
        self.thresholds.append(gc.get_threshold())

    def write_metrics(self, row: dict[str, Any]) -> None:
        self.note()
        super().write_metrics(row)

    def write_trace(self, events: Iterable[dict[str, Any]]) -> None:
        self.note()
        super().write_trace(events)


@pytest.mark.parametrize("lr", [0.1, 1e3])  # a complete run, and one stopped by divergence
def test_run_tunes_the_collector_and_restores_it(lr: float) -> None:
    import gc

    sc = scenario(iterations=2 if lr == 0.1 else 20)
    sc = dataclasses.replace(sc, training=dataclasses.replace(sc.training, lr=lr))
    cluster = Cluster(sc, device="cpu")
    sink = FreezeSink()
    before = gc.get_threshold()
    assert gc.get_freeze_count() == 0
    summary = run_cluster(cluster, sink)
    # during the run the objects that existed before it (the cluster among them) were frozen,
    # so full collections skipped them, and full collections were considered 10x less often;
    # afterwards nothing stays frozen and the thresholds are the caller's, whatever the outcome
    assert sink.frozen and all(n > 1000 for n in sink.frozen)
    assert all(t == (before[0], before[1], max(before[2], 100)) for t in sink.thresholds)
    assert gc.get_freeze_count() == 0 and gc.get_threshold() == before
    assert summary["status"] == ("complete" if lr == 0.1 else "diverged")


def test_run_leaves_a_callers_frozen_objects_frozen() -> None:
    import gc

    kept = [[i] for i in range(100_000)]  # the caller's objects, alive throughout
    gc.freeze()  # e.g. a parent process before forking workers
    try:
        run_cluster(Cluster(scenario(iterations=1), device="cpu"), MemorySink())
        # thawed, the count would be 0 (objects freed since may lower it, never below kept's)
        assert gc.get_freeze_count() >= len(kept)
    finally:
        gc.unfreeze()
