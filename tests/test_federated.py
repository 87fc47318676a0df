"""Federated rounds against hand-computed cases: the sync special case, round timing with local
steps, deadlines and late updates, lost uploads, selection, server optimizers, availability traces,
sampled shards for fleets larger than the data set, and the options' validation.

Timing cases use the MLP on the 8x8 digits (220,840 B dense model), the ``none`` codec (encode
and decode take 0 s) and ``flops`` compute on ``rpi4`` over 1 Mbit/s, 10 ms node links and a
100 Mbit/s server link (never the bottleneck): a dense message takes ``HOP`` s each way on the fluid transport
(``network.transport = "ideal"``: the hand computation has no congestion window).
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from aiotsim.config import Scenario, scenario_from_dict
from aiotsim.config_checks import per_round_count
from aiotsim.errors import ConfigError
from aiotsim.learn.devices import get_profile
from aiotsim.learn.partition import SampledShards, node_shards, partition
from aiotsim.sim.availability import AvailabilityTrace
from aiotsim.sim.fleet import NodeTable
from aiotsim.sim.runner import run_cluster
from aiotsim.sim.selection import select
from aiotsim.sim.server_opt import ServerOptimizer
from aiotsim.sim.world import Cluster
from aiotsim.validate import validate_scenario
from tests.test_strategies import HOP, MemorySink, wire

DENSE = 220_840  # B, the MLP's fp32 model on digits


def fed(iterations: int = 2, **sections: dict[str, Any]) -> Scenario:
    base: dict[str, Any] = {
        "scenario": {"name": "f", "seed": 5, "iterations": iterations},
        "data": {"dataset": "digits", "batch_size": 16},
        "model": {"name": "mlp"},
        "training": {"lr": 0.1, "momentum": 0.0, "eval_every": iterations, "mode": "federated"},
        "compressor": {"name": "none"},
        "nodes": {"count": 2, "device": "rpi4", "compute_model": "flops"},
        "network": {"uplink_mbps": 1.0, "downlink_mbps": 1.0, "latency_ms": 10.0, "server_mbps": 100.0,
                    "transport": "ideal"},
    }
    for name, values in sections.items():
        base[name] = {**base.get(name, {}), **values}
    return scenario_from_dict(base)


def run(s: Scenario) -> tuple[Cluster, MemorySink, dict[str, Any]]:
    c = Cluster(s, "cpu")
    sink = MemorySink()
    summary = run_cluster(c, sink)
    return c, sink, summary


def batch_s(c: Cluster) -> float:
    """Simulated seconds of one local step on an rpi4."""
    return c.learning.flops_per_batch / get_profile("rpi4").flops_per_s


# ---- the sync special case ----------------------------------------------------------------------
def test_one_local_step_every_node_plain_sgd_equals_sync() -> None:
    # 4 nodes x 100 samples: equal FedAvg weights, so the weighted mean is sync's plain mean
    common = {
        "data": {"dataset": "synthetic", "synthetic_shape": [1, 8, 8], "synthetic_train_size": 400,
                 "synthetic_test_size": 200, "batch_size": 16},
        "nodes": {"count": 4},
        "training": {"lr": 0.1, "momentum": 0.0, "eval_every": 3},
    }  # fmt: skip
    sync = fed(6, **{**common, "training": {**common["training"], "mode": "sync"}})
    f = fed(6, **{**common, "training": {**common["training"], "local_steps": 1, "server_lr": 1.0}})
    _, s_sink, _ = run(sync)
    _, f_sink, _ = run(f)
    assert [r["contributors"] for r in f_sink.rows] == [4] * 6
    assert [r["loss"] for r in f_sink.rows] == pytest.approx([r["loss"] for r in s_sink.rows], rel=1e-5)
    assert [e["accuracy"] for e in f_sink.evals] == [e["accuracy"] for e in s_sink.evals]
    assert [e["loss"] for e in f_sink.evals] == pytest.approx([e["loss"] for e in s_sink.evals], rel=1e-5)


# ---- timing and bytes ---------------------------------------------------------------------------
def test_round_time_is_download_local_steps_upload() -> None:
    c, sink, summary = run(fed(2, training={"local_steps": 3}))
    round_s = 2 * HOP + 3 * batch_s(c)  # both nodes in parallel on their own links
    assert [r["iter_time_s"] for r in sink.rows] == pytest.approx([round_s, round_s])
    assert [r["bytes_up"] for r in sink.rows] == [2 * DENSE] * 2
    assert [r["bytes_down"] for r in sink.rows] == [2 * DENSE] * 2
    assert [r["wire_bytes_up"] for r in sink.rows] == [2 * wire(DENSE)] * 2
    assert summary["throughput_samples_per_s"] == pytest.approx(2 * 2 * 3 * 16 / (2 * round_s))


def test_local_epochs_sets_the_steps_from_the_shard() -> None:
    c, sink, _ = run(fed(1, training={"local_epochs": 0.1}))
    shard = len(c.learning.shards[0])  # digits: 1,437 training samples, 719 / 718 per node
    steps = math.ceil(0.1 * shard / 16)
    assert sink.rows[0]["iter_time_s"] == pytest.approx(2 * HOP + steps * batch_s(c))


def test_per_round_selects_that_many_and_only_those_download() -> None:
    c, sink, _ = run(fed(3, nodes={"count": 6, "per_round": 2}))
    assert [r["contributors"] for r in sink.rows] == [2, 2, 2]
    assert [r["bytes_down"] for r in sink.rows] == [2 * DENSE] * 3
    assert c.nodes.built <= 6


# ---- deadline, late updates, over-commitment -----------------------------------------------------
def slow_second(**training: Any) -> Scenario:
    """Node 1 computes 10x slower; 1 local step."""
    return fed(
        3,
        training={"local_steps": 1, **training},
        nodes={"count": 2, "group": [{"count": 1}, {"count": 1, "slowdown": 10.0}]},
    )


def test_deadline_drops_the_late_update() -> None:
    probe = Cluster(slow_second(), "cpu")
    c0 = batch_s(probe)
    deadline = 2 * HOP + 5 * c0  # after node 0 (2 hops + c0), before node 1 (2 hops + 10 c0)
    _, sink, summary = run(slow_second(round_deadline_s=deadline, late="drop"))
    assert sink.rows[0]["contributors"] == 1
    assert sink.rows[0]["sim_time_s"] == pytest.approx(deadline)
    assert summary["dropped_uploads"] >= 1
    assert all(r["staleness"] == 0.0 for r in sink.rows)


def test_deadline_with_late_apply_carries_a_stale_update() -> None:
    probe = Cluster(slow_second(), "cpu")
    deadline = 2 * HOP + 5 * batch_s(probe)
    _, sink, summary = run(slow_second(round_deadline_s=deadline, late="apply"))
    assert summary["dropped_uploads"] == 0
    # node 1's round-0 update arrives in round 1 (node 1 is busy then, so round 1 selects node 0 only)
    assert sink.rows[1]["contributors"] == 2
    assert sink.rows[1]["staleness"] == pytest.approx(0.5)  # one fresh (0) and one a round old (1)


def test_overcommit_closes_at_per_round_uploads() -> None:
    # 2 selected, the round closes at the first upload: node 0's (node 1 is 10x slower)
    probe = Cluster(slow_second(), "cpu")
    c0 = batch_s(probe)
    groups = [{"count": 1}, {"count": 1, "slowdown": 10.0}]
    s = fed(1, training={"local_steps": 1}, nodes={"count": 2, "per_round": 1, "overcommit": 1.0, "group": groups})
    _, sink, _ = run(s)
    assert sink.rows[0]["contributors"] == 1
    assert sink.rows[0]["iter_time_s"] == pytest.approx(2 * HOP + c0)


# ---- availability traces ------------------------------------------------------------------------
def test_offline_mid_upload_loses_the_update(tmp_path: Path) -> None:
    probe = Cluster(fed(1), "cpu")
    c0 = batch_s(probe)
    gone = HOP + c0 + HOP / 2  # node 1 leaves half-way through its upload
    trace = tmp_path / "avail.csv"
    trace.write_text(f"node,start_s,end_s\n0,0,1e9\nnode1,0,{gone!r}\n")
    _, sink, summary = run(fed(1, training={"local_steps": 1}, nodes={"availability_trace": str(trace)}))
    assert sink.rows[0]["contributors"] == 1
    assert summary["dropped_uploads"] == 1
    assert sink.rows[0]["bytes_up"] == 2 * DENSE  # its bytes went out before it dropped


SHARED = {"server_mbps": 1.0}  # both nodes' transfers share a 1 Mbit/s server link (C below)
C = 1e6 / 8  # B/s


def cut_run(trace: Path) -> Scenario:
    """One round of one local step over the shared server link, with an availability trace."""
    return fed(1, training={"local_steps": 1}, network=SHARED, nodes={"availability_trace": str(trace)})


def test_a_cut_upload_frees_the_shared_link(tmp_path: Path) -> None:
    # Both uploads start at s and share C; node 1 drops off tau later. Its unsent bytes never
    # load the link: node 0 runs at C from then on (its own uplink is C too), so its W wire bytes
    # are drained at s + tau + (W - tau C / 2) / C = s + tau / 2 + W / C, not at s + 2 W / C.
    w = wire(DENSE)
    c0 = batch_s(Cluster(fed(1), "cpu"))
    s = 2 * w / C + 0.010 + c0  # downloads share C too; then one local step (none: encode 0 s)
    _, sink, _ = run(fed(1, training={"local_steps": 1}, network=SHARED))
    assert sink.rows[0]["iter_time_s"] == pytest.approx(s + 2 * w / C + 0.010)  # the hand model
    tau = w / C
    trace = tmp_path / "avail.csv"
    trace.write_text(f"node,start_s,end_s\n1,0,{s + tau!r}\n")
    c, sink, summary = run(cut_run(trace))
    assert sink.rows[0]["iter_time_s"] == pytest.approx(s + tau / 2 + w / C + 0.010)
    assert (sink.rows[0]["contributors"], summary["dropped_uploads"]) == (1, 1)
    assert c.net.link_bytes["node1.up"] == pytest.approx(tau * C / 2)  # what it sent before it left
    assert c.net.link_bytes["node0.up"] == pytest.approx(w)
    cut = [e for e in c.trace.events() if e["name"] == "upload (cut)"]
    assert len(cut) == 1 and cut[0]["dur"] == pytest.approx(tau * 1e6)  # us


def test_a_node_gone_mid_download_does_not_train(tmp_path: Path) -> None:
    # node 1 leaves at t_c, half-way through the shared download: node 0's download then runs at C
    # (drained at t_c / 2 + W / C), it trains and uploads alone over an idle link
    w = wire(DENSE)
    c0 = batch_s(Cluster(fed(1), "cpu"))
    t_c = (2 * w / C + 0.010) / 2
    trace = tmp_path / "avail.csv"
    trace.write_text(f"node,start_s,end_s\n1,0,{t_c!r}\n")
    c, sink, summary = run(cut_run(trace))
    assert sink.rows[0]["iter_time_s"] == pytest.approx(t_c / 2 + w / C + 0.010 + c0 + w / C + 0.010)
    assert (sink.rows[0]["contributors"], summary["dropped_uploads"]) == (1, 1)
    assert c.net.link_bytes["node1.down"] == pytest.approx(t_c * C / 2)
    spans = [(e["name"], e["tid"]) for e in c.trace.events() if e.get("ph") == "X"]
    assert sum(name == "compute" for name, _ in spans) == 1  # node 0's only: node 1 never trained
    assert sum(name == "download (cut)" for name, _ in spans) == 1


def test_trace_offline_nodes_are_never_selected(tmp_path: Path) -> None:
    trace = tmp_path / "avail.csv"
    trace.write_text("node,start_s,end_s\n" + "".join(f"{i},1e6,2e6\n" for i in range(1, 6)))
    _, sink, _ = run(fed(3, nodes={"count": 6, "per_round": 3, "availability_trace": str(trace)}))
    assert [r["contributors"] for r in sink.rows] == [1, 1, 1]  # only node 0 is online


def test_trace_lookup_and_merging() -> None:
    t = AvailabilityTrace({3: [(5.0, 8.0), (0.0, 2.0), (1.5, 3.0)]})
    assert t.listed(3) and not t.listed(0)
    assert [t.online(3, x) for x in (0.0, 2.9, 3.0, 4.0, 5.0, 7.99, 8.0, 100.0)] == [
        True, True, False, False, True, True, False, False,
    ]  # fmt: skip
    assert t.online_through(3, 0.5, 2.5)  # [0, 2) and [1.5, 3) merged into [0, 3)
    assert not t.online_through(3, 2.5, 5.5)
    assert t.online_through(0, 0.0, 1e9)  # unlisted: always
    assert [t.offline_from(3, x) for x in (0.0, 2.5, 3.0, 4.0, 6.0, 9.0)] == [3.0, 3.0, 3.0, 4.0, 8.0, 9.0]
    assert t.offline_from(0, 5.0) == math.inf


def test_trace_file_errors_name_the_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("node,start_s,end_s\n0,0,5\n7,0,5\n1,5,2\n2,x,3\n")
    with pytest.raises(ConfigError) as err:
        AvailabilityTrace.from_csv(bad, 4)
    text = str(err.value)
    assert "bad.csv:3" in text and "0..3" in text
    assert "bad.csv:4" in text and "start_s < end_s" in text
    assert "bad.csv:5" in text and "numbers" in text
    with pytest.raises(ConfigError, match="cannot be read"):
        AvailabilityTrace.from_csv(tmp_path / "missing.csv", 4)


def test_validate_reads_the_availability_trace(tmp_path: Path) -> None:
    # the gate: a scenario whose trace file is missing or bad is refused by validate, as run would
    bad = tmp_path / "bad.csv"
    bad.write_text("node,start_s,end_s\n0,0,5\n7,0,5\n")
    for path, why in ((tmp_path / "missing.csv", "cannot be read"), (bad, "bad.csv:3: the node is not a node index")):
        with pytest.raises(ConfigError, match=why):
            validate_scenario(fed(nodes={"availability_trace": str(path)}), "s.toml")
    good = tmp_path / "good.csv"
    good.write_text("node,start_s,end_s\n1,0,5\n")
    validate_scenario(fed(nodes={"availability_trace": str(good)}), "s.toml")


# ---- selection -------------------------------------------------------------------------------
def test_selection_counts_and_only_eligible() -> None:
    rng = np.random.default_rng(0)
    online = {1, 4, 7, 8}
    for want in range(7):
        got = select(rng, 10, want, lambda i: i in online)
        assert len(got) == min(want, 4) and len(set(got)) == len(got) and set(got) <= online
    assert select(rng, 10, 3, lambda i: False) == []


def test_selection_is_seeded() -> None:
    a = select(np.random.default_rng(7), 1000, 10, lambda i: i % 3 == 0)
    b = select(np.random.default_rng(7), 1000, 10, lambda i: i % 3 == 0)
    assert a == b and all(i % 3 == 0 for i in a)


def test_selection_is_uniform_among_eligible() -> None:
    # 2 of the 4 eligible among 6: each of the 6 pairs with probability 1/6
    rng = np.random.default_rng(1)
    counts = Counter(frozenset(select(rng, 6, 2, lambda i: i in {0, 2, 3, 5})) for _ in range(6000))
    assert set(counts) == {frozenset(p) for p in itertools.combinations([0, 2, 3, 5], 2)}
    for c in counts.values():
        assert abs(c - 1000) < 4 * math.sqrt(1000 * 5 / 6)  # 4 sigma of a binomial(6000, 1/6)


def test_selection_examines_candidates_not_the_fleet() -> None:
    asked: list[int] = []

    def eligible(i: int) -> bool:
        asked.append(i)
        return True

    got = select(np.random.default_rng(0), 100_000, 100, eligible)
    assert len(got) == 100 and len(asked) == 100


# ---- server optimizers ------------------------------------------------------------------------
def test_server_optimizers_by_hand() -> None:
    d = [torch.tensor([0.2, -0.4])]
    p = [torch.tensor([1.0, 1.0])]
    ServerOptimizer(p, "avg", lr=0.5).step(d)
    assert p[0].tolist() == pytest.approx([0.9, 1.2])
    p = [torch.tensor([1.0, 1.0])]
    opt = ServerOptimizer(p, "momentum", lr=1.0, beta1=0.5)
    opt.step(d)  # v = d
    opt.step(d)  # v = 0.5 d + d = 1.5 d; x = 1 - d - 1.5 d = 1 - 2.5 d
    assert p[0].tolist() == pytest.approx([0.5, 2.0])
    p = [torch.tensor([1.0, 1.0])]
    ServerOptimizer(p, "adam", lr=0.1, beta1=0.9, beta2=0.99, tau=1e-3).step(d)
    # m = 0.1 d, v = 0.01 d^2: x = 1 - 0.1 * 0.1 d / (0.1 |d| + 1e-3)
    want = [1 - 0.1 * 0.1 * g / (0.1 * abs(g) + 1e-3) for g in (0.2, -0.4)]
    assert p[0].tolist() == pytest.approx(want)


def test_fedadam_and_momentum_runs_learn() -> None:
    for kind, lr in (("momentum", 1.0), ("adam", 0.01)):
        _, sink, _ = run(fed(8, training={"local_steps": 2, "server_optimizer": kind, "server_lr": lr}))
        assert sink.rows[-1]["loss"] < sink.rows[0]["loss"]


# ---- data for fleets larger than the data set -------------------------------------------------
def test_sampled_shards_sizes_seeded_lazy() -> None:
    labels = np.arange(100) % 4
    sh = SampledShards(labels, 1_000_000, 30, "iid", seed=3)
    assert len(sh) == 1_000_000 and len(sh[999_999]) == 30 and sh[5].max() < 100
    assert sh[5].tolist() == SampledShards(labels, 1_000_000, 30, "iid", seed=3)[5].tolist()
    assert len(sh._cache) == 2  # only the nodes asked for
    with pytest.raises(IndexError):
        sh[1_000_000]


def test_sampled_dirichlet_is_label_skewed() -> None:
    labels = np.arange(1000) % 10
    skewed = SampledShards(labels, 50, 200, "dirichlet", alpha=0.05, seed=0)
    flat = SampledShards(labels, 50, 200, "dirichlet", alpha=1000.0, seed=0)
    top = [np.bincount(labels[skewed[i]], minlength=10).max() / 200 for i in range(50)]
    top_flat = [np.bincount(labels[flat[i]], minlength=10).max() / 200 for i in range(50)]
    assert np.mean(top) > 0.6 and np.mean(top_flat) < 0.2


def test_more_nodes_than_samples_needs_samples_per_node() -> None:
    with pytest.raises(ConfigError, match="data.samples_per_node"):
        partition(np.zeros(5, dtype=np.int64), 6)
    with pytest.raises(ConfigError, match="'iid' or 'dirichlet'"):
        node_shards(np.zeros(5, dtype=np.int64), 6, "by-writer", 0.5, 0, samples_per_node=3)
    shards = node_shards(np.zeros(5, dtype=np.int64), 6, "iid", 0.5, 0, samples_per_node=3)
    assert all(len(shards[i]) == 3 for i in range(6))


def test_large_fleet_builds_only_the_nodes_that_train() -> None:
    s = fed(2, nodes={"count": 5000, "per_round": 3}, data={"samples_per_node": 20, "partition": "iid"})
    c, sink, _ = run(s)
    assert [r["contributors"] for r in sink.rows] == [3, 3]
    assert 3 <= c.nodes.built <= 6 and len(c.learning.shards._cache) == c.nodes.built


def test_node_table_is_lazy_or_eager() -> None:
    made: list[int] = []
    lazy = NodeTable(10, lambda i: made.append(i) or i * 10, eager=False)
    assert made == [] and len(lazy) == 10
    assert lazy[7] == 70 and lazy[2] == 20 and lazy[7] == 70
    assert made == [7, 2] and list(lazy) == [20, 70] and lazy.built == 2
    with pytest.raises(IndexError):
        lazy[10]
    eager = NodeTable(3, lambda i: i, eager=True)
    assert list(eager) == [0, 1, 2] and eager.built == 3


# ---- options --------------------------------------------------------------------------------
def test_per_round_forms_and_errors() -> None:
    assert per_round_count(fed(nodes={"count": 10, "per_round": 0.25})) == 3
    assert per_round_count(fed(nodes={"count": 10, "per_round": 4})) == 4
    assert per_round_count(fed(nodes={"count": 10})) == 10
    with pytest.raises(ConfigError, match=r"per_round: must be at most nodes.count \(=10\)"):
        fed(nodes={"count": 10, "per_round": 11})
    with pytest.raises(ConfigError, match="whole"):
        fed(nodes={"count": 10, "per_round": 2.5})
    with pytest.raises(ConfigError, match="topology = 'star'"):
        fed(network={"topology": "hierarchical", "gateways": 1})
    with pytest.raises(ConfigError, match="downlink = 'model'"):
        fed(compressor={"name": "topk", "downlink": "union"})
    with pytest.raises(ConfigError, match="mode = 'federated'"):
        fed(training={"mode": "sync"}, nodes={"availability_trace": "x.csv"})
    with pytest.raises(ConfigError, match="server_optimizer"):
        fed(training={"server_optimizer": "sgd"})


# ---- compare across modes -----------------------------------------------------------------------
def test_compare_puts_sync_and_federated_runs_in_one_table_and_plot(tmp_path: Path) -> None:
    from aiotsim.api import run_scenario
    from aiotsim.results.compare import compare_runs
    from aiotsim.results.plots import load_run, plot_modes

    dirs = []
    for mode in ("sync", "federated"):
        for codec in ("none", "2bit"):
            s = fed(2, training={"mode": mode}, compressor={"name": codec})
            dirs.append(tmp_path / f"{mode}-{codec}")
            run_scenario(s, dirs[-1], device="cpu")
    c = compare_runs(dirs)
    assert [r.compressor for r in c.rows] == ["sync/none", "federated/none", "sync/2bit", "federated/2bit"]
    assert c.baseline == "sync/none"
    # federated rounds of the same codec move the same bytes here (2 nodes, both each round)
    by = {r.compressor: r for r in c.rows}
    assert by["federated/2bit"].bytes_up == by["sync/2bit"].bytes_up
    assert [p.name for p in plot_modes([load_run(d) for d in dirs], tmp_path, ["png"])] == ["modes_accuracy.png"]
    single = compare_runs(dirs[2:])  # one mode: rows keep the plain codec names
    assert [r.compressor for r in single.rows] == ["none", "2bit"]


@pytest.mark.parametrize("late", ["drop", "apply"])
def test_deadline_before_every_upload_still_ends(late: str) -> None:
    # both nodes miss every deadline; a round with nobody idle waits for the late answers
    # instead of retrying forever, then selects whoever is free again
    probe = Cluster(fed(1), "cpu")
    deadline = HOP + batch_s(probe) / 2  # no node can have uploaded yet
    _, sink, summary = run(fed(4, training={"local_steps": 1, "round_deadline_s": deadline, "late": late}))
    assert len(sink.rows) == 4 and sink.rows[0]["contributors"] == 0
    # no update is ever fresh: every row is empty (drop) or holds only stale updates (apply)
    if late == "drop":
        assert [r["contributors"] for r in sink.rows] == [0, 0, 0, 0]
        assert summary["dropped_uploads"] >= 2
    else:
        assert summary["dropped_uploads"] == 0
        assert sum(r["contributors"] for r in sink.rows) >= 2
        assert all(r["staleness"] >= 1.0 for r in sink.rows if r["contributors"])
