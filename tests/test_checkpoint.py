"""Checkpoint and resume: a run killed after a checkpoint and resumed leaves the same metrics,
evaluations and summary (wall time aside) as one that never stopped (flops mode)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

import aiotsim
from aiotsim.api import resume_run, run_scenario
from aiotsim.config import Scenario, load_scenario
from aiotsim.errors import ConfigError
from aiotsim.records import Progress
from aiotsim.results.fingerprint import fingerprint_run_dir
from aiotsim.results.store import read_csv, read_summary
from aiotsim.sim.checkpoint import CHECKPOINT_NAME, load


def kill_at(iteration: int):
    """An ``on_progress`` that stops the run like Ctrl-C once ``iteration`` rows are written."""

    def on_progress(p: Progress) -> None:
        if p.iteration == iteration:
            raise KeyboardInterrupt

    return on_progress


def killed_and_resumed(sc: Scenario, tmp_path: Path, every: int, kill: int) -> tuple[Path, Path]:
    """``(uninterrupted run dir, killed-then-resumed run dir)``."""
    ref, crash = tmp_path / "ref", tmp_path / "crash"
    run_scenario(sc, ref)
    with pytest.raises(KeyboardInterrupt):
        run_scenario(sc, crash, on_progress=kill_at(kill), checkpoint_every=every)
    assert read_summary(crash)["status"] == "interrupted"
    assert len(read_csv(crash / "metrics.csv")) == kill  # rows past the checkpoint, to be cut
    with open(crash / "metrics.csv", "a") as f:  # and a row cut by the crash mid-write
        f.write("1,0.5,")
    resume_run(crash)
    return ref, crash


def test_sync_topk_with_node_momentum_resumes_exactly(tiny_scenario: Path, tmp_path: Path) -> None:
    over = ["compressor.name=topk", "training.momentum=0.9", "training.momentum_at=nodes", "scenario.iterations=6"]
    sc = load_scenario(tiny_scenario, over)
    ref, crash = killed_and_resumed(sc, tmp_path, every=2, kill=5)  # checkpoint after iteration 3
    assert fingerprint_run_dir(crash) == fingerprint_run_dir(ref)
    # the timeline too: spans kept before the checkpoint come back as its event dicts
    assert (crash / "trace.json").read_bytes() == (ref / "trace.json").read_bytes()
    assert read_summary(crash)["complete"]
    assert not list(crash.glob("*.tmp"))  # written through a temporary file, then moved
    # the run finished after its checkpoint: resuming again cuts the rows after it and redoes them
    resume_run(crash)
    assert fingerprint_run_dir(crash) == fingerprint_run_dir(ref)


@pytest.mark.parametrize("codec", ["none", "topk"])
def test_batched_node_momentum_resumes_exactly(tiny_scenario: Path, tmp_path: Path, codec: str, monkeypatch) -> None:
    """Batched passes step their nodes' momentum a pass at a time, on velocities stored as one
    block per layer; a resumed run restores them node by node (its passes then step node by node)
    and still equals the run that never stopped."""
    import aiotsim.sim.batching as batching

    inner, whole = batching.step_pass_velocity, []  # per pass: stepped as blocks?

    def spy(*args):  # type: ignore[no-untyped-def]
        out = inner(*args)
        whole.append(out is not None)
        return out

    monkeypatch.setattr(batching, "step_pass_velocity", spy)
    over = [f"compressor.name={codec}", "training.momentum=0.9", "training.momentum_at=nodes"]
    over += ["nodes.count=4", "nodes.batched=true", "scenario.iterations=6"]
    ref, crash = killed_and_resumed(load_scenario(tiny_scenario, over), tmp_path, every=2, kill=5)
    assert fingerprint_run_dir(crash) == fingerprint_run_dir(ref)
    # as blocks: the uninterrupted run's 6 rounds and the killed run's 6 (it dispatched round 6
    # before writing row 5); node by node: the resumed run's rounds 5 and 6 (checkpoint after 4)
    assert whole == [True] * 12 + [False] * 2


def test_checkpoint_holds_the_run_state(tiny_scenario: Path, tmp_path: Path) -> None:
    over = ["compressor.name=topk", "training.momentum=0.9", "training.momentum_at=nodes", "scenario.iterations=4"]
    sc = load_scenario(tiny_scenario, over)
    run_scenario(sc, tmp_path / "run", checkpoint_every=3)
    state = load(tmp_path / "run" / CHECKPOINT_NAME)
    assert (state["iteration"], state["version"]) == (2, 3)
    assert state["now"] == read_csv(tmp_path / "run" / "metrics.csv")[2]["sim_time_s"]  # its row, same time
    node = state["nodes"][0]  # after its step, before the next dispatch: the row is still open
    assert all(c["residual"] is not None for c in node["codec"])  # top-k's error feedback
    assert isinstance(node["codec"][0]["generator"], torch.Tensor)  # torch.Generator.get_state()
    assert node["velocity"] is not None and node["stream"]["pos"] > 0
    assert state["optimizer"]["param_groups"] and state["trace"]["spans"]
    assert len(state["applied"]["uploads"]) == 2 and state["totals"]["iterations"] == 2


def test_hierarchical_powersgd_resumes_exactly(tiny_scenario: Path, tmp_path: Path) -> None:
    over = ["nodes.count=4", "network.topology=hierarchical", "network.gateways=2", "compressor.name=powersgd"]
    sc = load_scenario(tiny_scenario, [*over, "scenario.iterations=6", "scenario.trace_nodes=1"])
    ref, crash = killed_and_resumed(sc, tmp_path, every=2, kill=5)
    assert fingerprint_run_dir(crash) == fingerprint_run_dir(ref)
    # the tracks of node0, the gateways and the server only, before the checkpoint and after it
    assert (crash / "trace.json").read_bytes() == (ref / "trace.json").read_bytes()
    assert b'"node1"' not in (ref / "trace.json").read_bytes() and b'"node0"' in (ref / "trace.json").read_bytes()


def test_partial_with_dropouts_and_stragglers_resumes_exactly(tiny_scenario: Path, tmp_path: Path) -> None:
    over = [
        "nodes.count=4",
        "training.mode=partial",
        "training.partial_k=4",
        "nodes.dropout_prob=0.3",
        "nodes.rejoin_prob=0.5",
        "nodes.straggler_mode=transient",
        "nodes.straggler_fraction=0.25",
        "nodes.straggler_factor=3.0",
        "compressor.name=2bit",
        "scenario.iterations=8",
    ]
    sc = load_scenario(tiny_scenario, over)
    ref, crash = killed_and_resumed(sc, tmp_path, every=2, kill=7)
    assert load(crash / CHECKPOINT_NAME)["iteration"] == 5
    assert min(r["contributors"] for r in read_csv(ref / "metrics.csv")) < 4  # nodes did drop out
    assert fingerprint_run_dir(crash) == fingerprint_run_dir(ref)


def test_partial_uploads_tied_at_one_instant_keep_their_order_after_resume(tiny_scenario: Path, tmp_path: Path) -> None:
    # Alike nodes finish their uploads at one instant; the network finishes such flows in slot
    # order and reuses slots last-freed first. A resumed run that handed out fresh slots took a
    # different first 3 of 4 at iteration 7 (loss 2.2893 instead of 2.2840).
    over = ["nodes.count=4", "training.mode=partial", "training.partial_k=3", "nodes.dropout_prob=0.3",
            "compressor.name=2bit", "scenario.iterations=8"]  # fmt: skip
    ref, crash = killed_and_resumed(load_scenario(tiny_scenario, over), tmp_path, every=2, kill=7)
    assert load(crash / CHECKPOINT_NAME)["net_slots"]["free"]  # the order is in the checkpoint
    assert fingerprint_run_dir(crash) == fingerprint_run_dir(ref)


def test_federated_fleet_with_fedadam_and_topk_resumes_exactly(tiny_scenario: Path, tmp_path: Path) -> None:
    # 40 registered nodes, 3 per round with 2 local steps: the checkpoint keeps the nodes built so
    # far (by index), the selection generator and FedAdam's moments; top-k's residuals carry over
    over = ["training.mode=federated", "nodes.count=40", "nodes.per_round=3", "training.local_steps=2",
            "training.server_optimizer=adam", "training.server_lr=0.05", "compressor.name=topk",
            "data.samples_per_node=32", "scenario.iterations=6"]  # fmt: skip
    ref, crash = killed_and_resumed(load_scenario(tiny_scenario, over), tmp_path, every=2, kill=5)
    state = load(crash / CHECKPOINT_NAME)
    assert state["iteration"] == 3 and 3 <= len(state["node_index"]) < 40  # only the nodes that took part
    assert len(state["nodes"]) == len(state["node_index"])
    assert state["strategy"]["m"] is not None and state["strategy"]["samples"] > 0
    assert fingerprint_run_dir(crash) == fingerprint_run_dir(ref)
    assert (crash / "trace.json").read_bytes() == (ref / "trace.json").read_bytes()


def test_federated_nodes_dropping_off_resume_exactly(tiny_scenario: Path, tmp_path: Path) -> None:
    # every node goes offline for 5 s at its own time: updates are cut off (transfers stopped, TCP
    # connections reset), and the run resumed from a checkpoint between the drops equals the
    # uninterrupted one
    avail = tmp_path / "avail.csv"
    rows = "".join(f"{i},0,{3 + 2.7 * i}\n{i},{8 + 2.7 * i},1e9\n" for i in range(6))  # offline 5 s each
    avail.write_text("node,start_s,end_s\n" + rows)
    over = ["training.mode=federated", "nodes.count=6", "nodes.per_round=3", "compressor.name=topk",
            f"nodes.availability_trace={avail}", "scenario.iterations=8"]  # fmt: skip
    ref, crash = killed_and_resumed(load_scenario(tiny_scenario, over), tmp_path, every=2, kill=7)
    assert read_summary(ref)["dropped_uploads"] > 0
    assert fingerprint_run_dir(crash) == fingerprint_run_dir(ref)


def test_a_resume_that_cannot_start_leaves_the_run_directory_as_it_was(tiny_scenario: Path, tmp_path: Path) -> None:
    # the availability trace is read when the federated strategy is built: gone before the
    # resume, the resume is refused (ConfigError, exit 2 in the CLI) before any row is cut
    avail = tmp_path / "avail.csv"
    avail.write_text("node,start_s,end_s\n0,0,4\n0,9,1e9\n")
    over = ["training.mode=federated", "nodes.count=4", "nodes.per_round=2",
            f"nodes.availability_trace={avail}", "scenario.iterations=6"]  # fmt: skip
    run = tmp_path / "run"
    run_scenario(load_scenario(tiny_scenario, over), run, checkpoint_every=2)
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    assert "summary.json" in before and load(run / CHECKPOINT_NAME)["iteration"] < 5
    avail.unlink()
    with pytest.raises(ConfigError, match="nodes.availability_trace: .*avail.csv: cannot be read"):
        resume_run(run)
    assert {p.name: p.read_bytes() for p in run.iterdir()} == before


def test_federated_rounds_with_a_node_at_work_are_skipped(tiny_scenario: Path, tmp_path: Path) -> None:
    # 2 selected, a round closes at its first upload; node 1 is 10x slower, so it is still at work
    # when rounds 0, 2, 4, 6 close and its update lands late in rounds 1, 3, 5 (late = apply):
    # only those end with no node at work. Due every round, the last checkpoint before the kill
    # at row 7 is round 5's, and the run resumed from it equals the uninterrupted one.
    over = ["training.mode=federated", "nodes.count=2", "nodes.per_round=1", "nodes.overcommit=1.0",
            "nodes.group=[{count=1}, {count=1, slowdown=10.0}]", "training.late=apply",
            "scenario.iterations=8"]  # fmt: skip
    ref, crash = killed_and_resumed(load_scenario(tiny_scenario, over), tmp_path, every=1, kill=7)
    assert [r["contributors"] for r in read_csv(ref / "metrics.csv")] == [1, 2] * 4
    assert load(crash / CHECKPOINT_NAME)["iteration"] == 5
    assert fingerprint_run_dir(crash) == fingerprint_run_dir(ref)


@pytest.mark.parametrize(
    "over", [["training.mode=async"], ["network.topology=ring", "nodes.count=3"]], ids=["async", "ring"]
)
def test_strategies_without_a_quiescent_point_are_refused(tiny_scenario: Path, tmp_path: Path, over: list[str]) -> None:
    sc = load_scenario(tiny_scenario, over)
    with pytest.raises(ConfigError, match="checkpoints need a quiescent point between iterations"):
        run_scenario(sc, tmp_path / "run", checkpoint_every=2)


def test_resume_needs_a_checkpoint(tiny_scenario: Path, tmp_path: Path) -> None:
    sc = load_scenario(tiny_scenario, ["scenario.iterations=1", "training.eval_every=1"])
    run_scenario(sc, tmp_path / "run")
    with pytest.raises(ConfigError, match="no checkpoint"):
        resume_run(tmp_path / "run")
    with pytest.raises(ConfigError, match=r"checkpoint_every\(=-1\) must be >= 0"):
        run_scenario(sc, tmp_path / "run", checkpoint_every=-1)


def test_resume_needs_the_run_s_own_model_and_data(tiny_scenario: Path, tmp_path: Path) -> None:
    sc = load_scenario(tiny_scenario, ["scenario.iterations=3"])
    x, y = torch.randn(64, 5, generator=torch.Generator().manual_seed(0)), torch.arange(64) % 2
    model = nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 2))
    data = ((x[:48], y[:48]), (x[48:], y[48:]))
    ref = aiotsim.run(sc, model=model, dataset=data, out_dir=tmp_path / "ref")
    with pytest.raises(KeyboardInterrupt):
        aiotsim.run(
            sc, model=model, dataset=data, out_dir=tmp_path / "crash", on_progress=kill_at(2), checkpoint_every=1
        )
    with pytest.raises(ConfigError, match="trained model 'Sequential' on data set 'custom'"):
        resume_run(tmp_path / "crash")
    res = aiotsim.resume(tmp_path / "crash", model=model, dataset=data)
    assert res.summary.complete and res.summary.model == "Sequential"
    assert fingerprint_run_dir(res.run_dir) == fingerprint_run_dir(ref.run_dir)


def test_augmented_stream_resumes_exactly(tiny_scenario: Path, tmp_path: Path) -> None:
    """The crop-flip generator of every node's stream is part of the checkpoint: without it the
    resumed run would draw other crops than the uninterrupted one."""
    sc = load_scenario(tiny_scenario, ["data.augment=crop-flip", "scenario.iterations=6"])
    ref, crash = killed_and_resumed(sc, tmp_path, every=2, kill=5)
    assert fingerprint_run_dir(crash) == fingerprint_run_dir(ref)
    assert "aug_gen" in load(crash / CHECKPOINT_NAME)["nodes"][0]["stream"]


def test_state_encoding_round_trips_numpy_and_keeps_only_plain_data() -> None:
    """Tensors are copied onto the CPU, numpy arrays and scalars come back with their dtype and
    values; anything else (a named tuple, a set, an object) is refused when saved, since it could
    not be read back with ``weights_only=True``."""
    import numpy as np

    from aiotsim.sim.checkpoint_file import decode, encode

    t = torch.ones(2, requires_grad=True)
    state = {"l": [t, "x", 3, None], "t": (t, 2.5), 4: np.array([1.5, 2.0]), "s": np.float32(0.1)}
    back = decode(encode(state))
    assert back["l"][0] is not t and not back["l"][0].requires_grad and torch.equal(back["l"][0], t.detach())
    assert back["l"][1:] == ["x", 3, None] and type(back["t"]) is tuple and back["t"][1] == 2.5
    assert back[4].dtype == np.float64 and back[4].tolist() == [1.5, 2.0]
    assert type(back["s"]) is np.float32 and back["s"] == np.float32(0.1)  # not widened to a float
    for bad in ({1, 2}, object(), np.array([object()])):
        with pytest.raises(TypeError, match=r"state\['k'\]: .* cannot go into a checkpoint"):
            encode({"k": bad})


def test_pgc_statistics_come_back_as_their_named_tuple(tiny_scenario: Path, tmp_path: Path) -> None:
    # PGC keeps its latest Algorithm 1 quantities as a PGCThreshold (a named tuple): stored as a
    # plain tuple, rebuilt from the codec state's declared field type
    from aiotsim.compress.pgc import PGCThreshold
    from aiotsim.sim.checkpoint import restore
    from aiotsim.sim.world import Cluster

    sc = load_scenario(tiny_scenario, ["compressor.name=pgc", "scenario.iterations=4"])
    run_scenario(sc, tmp_path / "run", checkpoint_every=2)
    state = load(tmp_path / "run" / CHECKPOINT_NAME)
    saved = state["nodes"][0]["codec"][0]["last"]
    assert type(saved) is tuple and len(saved) == len(PGCThreshold._fields)
    c = Cluster(sc, device="cpu")
    restore(c, state)
    assert c.nodes[0].local.states[0].last == PGCThreshold(*saved)
    assert type(c.nodes[0].local.states[0].last) is PGCThreshold
