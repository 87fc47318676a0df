"""Timing replay (aiotsim.replaying): a replay of run A under settings S equals a full run of A's
scenario with S, file for file, on every topology and transport; what cannot be replayed exactly
is refused, naming the key; the timing record is safe to read."""

from __future__ import annotations

import json
import pickle
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from aiotsim.api import resume_run, run_scenario
from aiotsim.config import Scenario, load_scenario
from aiotsim.errors import ConfigError, ResultsError
from aiotsim.replaying import REPLAY_NAME, is_replay_source, replay, replay_run
from aiotsim.sim.replay_rule import learning_key, replay_problem
from aiotsim.sim.tape import TIMING_NAME, Tape

ROOT = Path(__file__).resolve().parent.parent
TINY = Path(__file__).with_name("tiny.toml")
TRACE = ROOT / "scenarios" / "traces" / "cellular.up"
# the files a replay must reproduce; summary.json is compared without its wall-clock field
SAME = ("metrics.csv", "evals.csv", "trace.json", "scenario.toml")
WALL = ("wall_time_s",)

# (name, the recorded run's settings, the replay's settings): a small fleet with mixed links, so
# that the new settings reorder arrivals
FOUR = {"nodes.count": 4, "compressor.name": "topk", "scenario.iterations": 4}
GROUPS = [{"count": 2, "uplink_mbps": 0.5, "latency_ms": 40.0}, {"count": 2, "uplink_mbps": 4.0}]
CASES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("star-tcp", {**FOUR, "nodes.group": GROUPS}, {"network.uplink_mbps": 0.3, "network.latency_ms": 120.0}),
    ("star-ideal", {**FOUR, "network.transport": "ideal"}, {"network.uplink_mbps": 5.0, "network.server_mbps": 2.0}),
    ("loss-jitter", {**FOUR, "network.loss": 0.01}, {"network.loss": 0.05, "network.jitter_ms": 20.0}),
    ("hierarchical", {**FOUR, "network.topology": "hierarchical", "network.gateways": 2},
     {"network.backhaul_up_mbps": 0.5, "network.latency_ms": 60.0}),
    ("ring", {**FOUR, "network.topology": "ring"}, {"network.uplink_mbps": 0.2, "network.downlink_mbps": 0.4}),
    ("shared-medium", {**FOUR, "network.topology": "shared-medium"}, {"network.channel_mbps": 0.8}),
    ("trace", FOUR, {"network.uplink_trace": str(TRACE), "network.trace_stagger": "none"}),
    ("federated", {**FOUR, "training.mode": "federated", "nodes.per_round": 2, "training.local_steps": 2},
     {"network.uplink_mbps": 0.2, "network.latency_ms": 150.0}),
    ("devices-energy", FOUR, {"nodes.device": "jetson-nano", "nodes.radio": "wifi", "energy.include_idle": False}),
]  # fmt: skip


def tiny(**overrides: Any) -> Scenario:
    """tests/tiny.toml with ``overrides``."""
    return load_scenario(TINY).replace(**overrides)


def same_run(a: Path, b: Path) -> None:
    """``b`` equals ``a`` file for file (summary.json: wall-clock fields aside)."""
    for name in SAME:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    sa, sb = (json.loads((d / "summary.json").read_text()) for d in (a, b))
    for k in WALL:
        sa.pop(k), sb.pop(k)
    assert sa == sb


@pytest.mark.parametrize("name,recorded,new", CASES, ids=[c[0] for c in CASES])
def test_a_replay_equals_a_full_run_of_the_new_settings(
    tmp_path: Path, name: str, recorded: dict[str, Any], new: dict[str, Any]
) -> None:
    a = tiny(**recorded)
    s = a.replace(**new)
    assert learning_key(a) == learning_key(s) is not None
    run_scenario(a, tmp_path / "a", device="cpu")
    run_scenario(s, tmp_path / "full", device="cpu")
    replay_run(tmp_path / "a", s, tmp_path / "replay")
    same_run(tmp_path / "full", tmp_path / "replay")
    # the settings mattered: the clock moved (else the case would prove nothing)
    times = [json.loads((tmp_path / d / "summary.json").read_text())["sim_time_s"] for d in ("a", "full")]
    assert times[0] != times[1]
    assert json.loads((tmp_path / "replay" / REPLAY_NAME).read_text())["replayed_from"] == str(tmp_path / "a")


def test_custom_topology_and_a_replay_of_a_replay(tmp_path: Path) -> None:
    a = load_scenario(ROOT / "scenarios" / "custom.toml").replace(**{"scenario.iterations": 3})
    s1 = a.replace(**{"network.latency_ms": 80.0})
    s2 = s1.replace(**{"network.uplink_mbps": 0.7})
    run_scenario(a, tmp_path / "a", device="cpu")
    replay_run(tmp_path / "a", s1, tmp_path / "r1")
    replay_run(tmp_path / "r1", s2, tmp_path / "r2")  # the replay's own record, replayed in turn
    run_scenario(s2, tmp_path / "full", device="cpu")
    same_run(tmp_path / "full", tmp_path / "r2")


def test_a_replay_costs_no_learning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No model is built, no gradient or codec runs in a replay (it reads the tape)."""
    a = tiny(**FOUR)
    run_scenario(a, tmp_path / "a", device="cpu")
    import aiotsim.sim.world as world

    def no_learning(*args: object, **kwargs: object) -> None:
        raise AssertionError("a replay built a Learning")

    monkeypatch.setattr(world, "Learning", no_learning)
    replay_run(tmp_path / "a", a.replace(**{"network.latency_ms": 90.0}), tmp_path / "r")


@pytest.mark.parametrize(
    "key,value,named",
    [
        ("training.lr", 0.05, "training.lr"),
        ("compressor.name", "2bit", "compressor.name"),
        ("compressor.ratio", 0.05, "compressor.ratio"),
        ("data.batch_size", 8, "data.batch_size"),
        ("model.name", "lenet5", "model.name"),
        ("scenario.seed", 4, "scenario.seed"),
        ("scenario.iterations", 5, "scenario.iterations"),
        ("nodes.count", 3, "nodes.count"),
        ("nodes.dropout_prob", 0.2, "nodes.dropout_prob"),
        ("nodes.straggler_fraction", 0.5, "nodes.straggler_fraction"),
        ("network.topology", "ring", "network.topology"),
        ("network.gateway_mode", "dense", "network.gateway_mode"),
        ("training.mode", "async", "training.mode"),
    ],
)
def test_a_setting_that_changes_learning_is_refused_by_name(key: str, value: Any, named: str) -> None:
    a = tiny(**FOUR)
    problem = replay_problem(a, a.replace(**{key: value}))
    assert problem is not None and problem.startswith(named)


@pytest.mark.parametrize(
    "recorded,named",
    [
        ({"training.mode": "async"}, "training.mode = 'async'"),
        ({"training.mode": "partial", "training.partial_k": 2}, "training.mode = 'partial'"),
        ({"training.mode": "federated", "training.round_deadline_s": 5.0}, "training.round_deadline_s"),
        ({"training.mode": "federated", "nodes.per_round": 2, "nodes.overcommit": 0.5}, "nodes.overcommit"),
    ],
)
def test_a_run_whose_learning_depends_on_time_is_never_replayed(recorded: dict[str, Any], named: str) -> None:
    a = tiny(**FOUR, **recorded)
    assert learning_key(a) is None
    problem = replay_problem(a, a.replace(**{"network.latency_ms": 50.0}))
    assert problem is not None and named in problem


def test_group_links_are_timing_but_group_sizes_are_learning() -> None:
    a = tiny(**FOUR, **{"nodes.group": GROUPS})
    faster = [{**GROUPS[0], "uplink_mbps": 8.0}, GROUPS[1]]
    assert replay_problem(a, a.replace(**{"nodes.group": faster})) is None
    resized = [{**GROUPS[0], "count": 1}, {**GROUPS[1], "count": 3}]
    problem = replay_problem(a, a.replace(**{"nodes.group": resized}))
    assert problem is not None and problem.startswith("nodes.group")


def test_streamed_aggregation_refuses_a_reordering_replay_and_allows_the_same_order(tmp_path: Path) -> None:
    slow_first = [{"count": 2, "uplink_mbps": 0.3}, {"count": 2, "uplink_mbps": 3.0}]
    a = tiny(**FOUR, **{"training.aggregation": "streamed", "nodes.group": slow_first})
    run_scenario(a, tmp_path / "a", device="cpu")
    # the same order (the fast pair first, slower overall): exact
    same_order = a.replace(**{"network.latency_ms": 70.0})
    replay_run(tmp_path / "a", same_order, tmp_path / "ok")
    run_scenario(same_order, tmp_path / "full", device="cpu")
    same_run(tmp_path / "full", tmp_path / "ok")
    # swapped rates: the slow pair now arrives first, and float64 sums in arrival order differ
    swapped = a.replace(
        **{"nodes.group": [{**slow_first[0], "uplink_mbps": 3.0}, {**slow_first[1], "uplink_mbps": 0.3}]}
    )
    with pytest.raises(ConfigError, match="another order"):
        replay_run(tmp_path / "a", swapped, tmp_path / "bad")


def test_stacked_aggregation_is_independent_of_arrival_order(tmp_path: Path) -> None:
    """The same swap, stacked: the learning columns (loss, accuracy, bytes) are unchanged."""
    slow_first = [{"count": 2, "uplink_mbps": 0.3}, {"count": 2, "uplink_mbps": 3.0}]
    swapped = [{**slow_first[0], "uplink_mbps": 3.0}, {**slow_first[1], "uplink_mbps": 0.3}]
    a = tiny(**FOUR, **{"training.aggregation": "stacked", "nodes.group": slow_first})
    run_scenario(a, tmp_path / "a", device="cpu")
    run_scenario(a.replace(**{"nodes.group": swapped}), tmp_path / "b", device="cpu")
    ea, eb = ((tmp_path / d / "evals.csv").read_text().splitlines() for d in ("a", "b"))
    assert [r.split(",")[2:] for r in ea] == [r.split(",")[2:] for r in eb]  # accuracy, loss; not the time
    assert ea != eb  # the time column moved


def test_a_resumed_run_records_the_whole_timing(tmp_path: Path) -> None:
    a = tiny(**{**FOUR, "scenario.iterations": 6})
    run_scenario(a, tmp_path / "whole", device="cpu")
    run_scenario(a, tmp_path / "resumed", device="cpu", checkpoint_every=2)
    resume_run(tmp_path / "resumed", device="cpu")  # from its last checkpoint (iteration 4)
    s = a.replace(**{"network.latency_ms": 66.0})
    replay_run(tmp_path / "resumed", s, tmp_path / "r")
    run_scenario(s, tmp_path / "full", device="cpu")
    same_run(tmp_path / "full", tmp_path / "r")


def test_python_api_replay(tmp_path: Path) -> None:
    import aiotsim

    run_scenario(tiny(**FOUR), tmp_path / "a", device="cpu")
    res = aiotsim.replay(tmp_path / "a", overrides={"network.uplink_mbps": 0.25}, out_dir=tmp_path / "r")
    assert res.run_dir == tmp_path / "r" and is_replay_source(res.run_dir)
    assert aiotsim.replay is replay
    with pytest.raises(ConfigError, match="training.momentum"):
        aiotsim.replay(tmp_path / "a", overrides={"training.momentum": 0.5}, out_dir=tmp_path / "x")
    assert not (tmp_path / "x").exists()  # refused before anything was written


# ---- the timing record as an input file ---------------------------------------------------------
@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("rec") / "a"
    run_scenario(tiny(**FOUR), d, device="cpu")
    return d


def copy_with(
    recorded: Path, tmp_path: Path, edit: dict[str, np.ndarray] | None = None, raw: bytes | None = None
) -> Path:
    d = tmp_path / "src"
    shutil.copytree(recorded, d)
    if raw is not None:
        (d / TIMING_NAME).write_bytes(raw)
    elif edit is not None:
        with np.load(recorded / TIMING_NAME) as z:
            arrays = {k: z[k] for k in z.files}
        arrays.update(edit)
        with open(d / TIMING_NAME, "wb") as f:
            np.savez(f, **arrays)
    return d


def test_the_record_holds_per_node_values_in_order(recorded: Path) -> None:
    tape = Tape.load(recorded / TIMING_NAME)
    owners = tape.streams["gradient"].owner.tolist()
    assert sorted(owners) == sorted(list(range(4)) * 4)  # 4 nodes x 4 iterations
    assert len(tape.streams["evaluate"].owner) == 2  # eval_every = 2 over 4 iterations
    losses = tape.streams["gradient"].values[0].tolist()
    metrics = (recorded / "metrics.csv").read_text().splitlines()
    head = metrics[0].split(",")
    first_row_loss = float(metrics[1].split(",")[head.index("loss")])
    assert first_row_loss == pytest.approx(sum(losses[:4]) / 4, rel=1e-12)  # the row's mean of the first 4


@pytest.mark.parametrize(
    "case,match",
    [
        ("pickle", "not a readable timing record"),
        ("truncated", "not a readable timing record"),
        ("dtype", "missing or malformed"),
        ("length", "missing or malformed"),
        ("negative", "negative"),
        ("meta", "meta"),
        ("missing", "no timing record"),
    ],
)
def test_a_bad_record_is_refused_with_its_reason(recorded: Path, tmp_path: Path, case: str, match: str) -> None:
    marker = tmp_path / "ran"
    with np.load(recorded / TIMING_NAME) as z:
        n = len(z["encode.owner"])
    if case == "pickle":

        class Boom:
            def __reduce__(self) -> tuple[Any, ...]:
                return (Path.touch, (marker,))

        src = copy_with(recorded, tmp_path, raw=pickle.dumps(Boom()))
    elif case == "truncated":
        src = copy_with(recorded, tmp_path, raw=(recorded / TIMING_NAME).read_bytes()[:200])
    elif case == "dtype":
        src = copy_with(recorded, tmp_path, {"encode.nbytes": np.zeros(n, np.float32)})
    elif case == "length":
        src = copy_with(recorded, tmp_path, {"encode.nbytes": np.zeros(n + 1, np.int64)})
    elif case == "negative":
        src = copy_with(recorded, tmp_path, {"encode.nbytes": -np.ones(n, np.int64)})
    elif case == "meta":
        src = copy_with(recorded, tmp_path, {"meta": np.array('{"format": 1}')})
    else:
        src = copy_with(recorded, tmp_path)
        (src / TIMING_NAME).unlink()
    with pytest.raises(ResultsError, match=match):
        replay_run(src, tiny(**FOUR), tmp_path / "out")
    assert not marker.exists()


def test_a_pickled_object_array_in_the_record_is_refused_unrun(recorded: Path, tmp_path: Path) -> None:
    marker = tmp_path / "ran"

    class Boom:
        def __reduce__(self) -> tuple[Any, ...]:
            return (Path.touch, (marker,))

    src = copy_with(recorded, tmp_path, {"encode.nbytes": np.array([Boom()], dtype=object)})
    with pytest.raises(ResultsError, match="not a readable timing record"):
        replay_run(src, tiny(**FOUR), tmp_path / "out")
    assert not marker.exists()


def test_a_record_of_another_run_is_refused(recorded: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    run_scenario(tiny(**{**FOUR, "compressor.name": "2bit"}), other, device="cpu")
    src = copy_with(recorded, tmp_path)
    shutil.copyfile(other / TIMING_NAME, src / TIMING_NAME)
    with pytest.raises(ResultsError, match="not this run's"):
        replay_run(src, tiny(**FOUR), tmp_path / "out")


def test_an_incomplete_run_and_its_own_directory_are_refused(recorded: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="output directory is the recorded run"):
        replay_run(recorded, tiny(**FOUR), recorded)
    src = copy_with(recorded, tmp_path)
    summary = json.loads((src / "summary.json").read_text())
    (src / "summary.json").write_text(json.dumps({**summary, "complete": False, "status": "interrupted"}))
    with pytest.raises(ResultsError, match="not complete"):
        replay_run(src, tiny(**FOUR), tmp_path / "out")


def test_cli_replay_and_its_refusal(recorded: Path, tmp_path: Path) -> None:
    cli = [sys.executable, "-m", "aiotsim.cli", "replay", str(recorded), "-q"]
    ok = subprocess.run(
        [*cli, "--set", "network.latency_ms=30", "-o", str(tmp_path / "r")], capture_output=True, text=True
    )
    assert ok.returncode == 0, ok.stderr
    assert is_replay_source(tmp_path / "r")
    bad = subprocess.run([*cli, "--set", "training.lr=0.5", "-o", str(tmp_path / "x")], capture_output=True, text=True)
    assert bad.returncode == 2
    assert "training.lr cannot be replayed" in bad.stderr and "Traceback" not in bad.stderr


def test_a_federated_run_with_an_availability_trace_is_never_replayed(tmp_path: Path) -> None:
    trace = tmp_path / "avail.csv"
    trace.write_text("node,start_s,end_s\n0,0,5\n1,2,100\n")
    a = tiny(**FOUR, **{"training.mode": "federated", "nodes.availability_trace": str(trace)})
    assert learning_key(a) is None
    problem = replay_problem(a, a.replace(**{"network.latency_ms": 50.0}))
    assert problem is not None and "nodes.availability_trace" in problem


def test_a_run_of_a_model_given_in_python_is_refused(tmp_path: Path) -> None:
    import torch

    import aiotsim

    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 10))  # digits: 1x8x8 inputs
    aiotsim.run(TINY, model=model, out_dir=tmp_path / "a", device="cpu")
    with pytest.raises(ConfigError, match="model or data set given in Python"):
        aiotsim.replay(tmp_path / "a", overrides={"network.latency_ms": 50.0}, out_dir=tmp_path / "r")
