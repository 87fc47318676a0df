"""scenarios/paper/: every file validates, the PGC files carry Table 1, each reduced variant runs,
and tools/results.py asks only for runs that validate."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest
from conftest import ROOT, load_script

from aiotsim.api import run_scenario
from aiotsim.config import load_scenario

PAPER = ROOT / "scenarios" / "paper"
FILES = sorted(PAPER.glob("*.toml"))
REDUCED = [f for f in FILES if f.stem.endswith("_reduced")]
FULL = [f for f in FILES if not f.stem.endswith("_reduced")]
# a full scenario whose reduced variant has another name (fewer workers as well as other data)
REDUCED_OF = {"aggaware_ps32": "aggaware_ps16_reduced"}
# reduced variants whose 2 iterations take more than a few seconds on a 2-core CPU
SLOW_MODELS = ("resnet18", "resnet32", "alexnet")

# Seed 002, Table 1: (scenario stem, model, file data set, iterations, learning rate)
TABLE_1 = [
    ("pgc_lenet_mnist", "lenet-caffe", "mnist-idx", 1000, 0.01),
    ("pgc_alexnet_mnist", "alexnet", "mnist-idx", 3000, 0.01),
    ("pgc_resnet_mnist", "resnet18", "mnist-idx", 300, 0.01),
    ("pgc_alexnet_cifar10", "alexnet", "cifar10", 6000, 0.001),
    ("pgc_resnet_cifar10", "resnet18", "cifar10", 10000, 0.001),
]


def _results_tool() -> ModuleType:
    return load_script(ROOT / "tools" / "results.py", "results_cli")


def test_the_directory_has_every_seed_experiment() -> None:
    stems = {f.stem for f in FULL}
    assert {row[0] for row in TABLE_1} <= stems
    assert {"fourbit_cifar10", "hylo_cifar10", "hylo_cifar100", "fft_resnet_cifar10", "aggaware_ps32"} <= stems


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_every_file_validates(path: Path) -> None:
    scenario = load_scenario(path)
    assert scenario.scenario.name == path.stem


@pytest.mark.parametrize("path", FULL, ids=lambda p: p.stem)
def test_every_full_scenario_has_a_reduced_variant_on_local_data(path: Path) -> None:
    full = load_scenario(path)
    reduced = load_scenario(PAPER / f"{REDUCED_OF.get(path.stem, path.stem + '_reduced')}.toml")
    assert full.data.dataset in ("mnist-idx", "cifar10", "cifar100")  # files the user supplies
    assert reduced.data.dataset in ("mnist", "synthetic")  # embedded or generated: runs anywhere
    assert reduced.model.name == full.model.name
    assert reduced.compressor.name == full.compressor.name


@pytest.mark.parametrize(("stem", "model", "dataset", "iterations", "lr"), TABLE_1)
def test_pgc_files_carry_table_1(stem: str, model: str, dataset: str, iterations: int, lr: float) -> None:
    s = load_scenario(PAPER / f"{stem}.toml")
    assert (s.model.name, s.data.dataset, s.scenario.iterations, s.training.lr) == (model, dataset, iterations, lr)
    assert (s.data.batch_size, s.nodes.count, s.training.momentum) == (128, 2, 0.0)
    assert s.network.uplink_mbps == s.network.downlink_mbps == s.network.server_mbps == 10.0
    reduced = load_scenario(PAPER / f"{stem}_reduced.toml")
    assert (reduced.data.batch_size, reduced.nodes.count, reduced.training.lr) == (128, 2, lr)


def _reduced_params() -> list[object]:
    params: list[object] = []
    for path in REDUCED:
        slow = load_scenario(path).model.name in SLOW_MODELS
        params.append(pytest.param(path, id=path.stem, marks=[pytest.mark.slow] if slow else []))
    return params


@pytest.mark.parametrize("path", _reduced_params())
def test_reduced_variant_runs_two_iterations(path: Path, tmp_path: Path) -> None:
    # the file as written, at a small batch: the check is that it runs, not its numbers (resnet18 at
    # batch 128 x 2 workers takes about a minute per iteration on a 2-core CPU)
    sets = ["scenario.iterations=2", "training.eval_every=2", "data.batch_size=8", "data.eval_samples=64"]
    scenario = load_scenario(path, sets)
    summary = run_scenario(scenario, tmp_path / "run", device="cpu", threads=1)
    assert summary["complete"] and summary["iterations"] == 2
    assert summary["bytes_up"] > 0 and summary["throughput_samples_per_s"] > 0


def test_results_tool_asks_only_for_valid_runs() -> None:
    tool = _results_tool()
    recorder = tool.Recorder()
    for name in tool.SECTIONS:
        assert tool.body(recorder, [name])[0].startswith("## ")  # each section lays out on dry-run summaries
    keys = [s.key for s in recorder.specs]
    assert len(keys) == len(set(keys))  # one run directory per distinct run
    for spec in recorder.specs:
        load_scenario(ROOT / spec.path, list(spec.overrides))


def test_results_tool_reuses_only_a_complete_run_of_the_same_spec(tmp_path: Path) -> None:
    _results_tool()  # puts tools/ on sys.path
    from paper_results import runner

    wanted = {"scenario": "scenarios/paper/x.toml", "overrides": ["compressor.name=pgc"]}
    (tmp_path / "spec.json").write_text(json.dumps(wanted))
    (tmp_path / "summary.json").write_text(json.dumps({"complete": True, "iterations": 3}))
    assert runner.cached_summary(tmp_path, wanted) == {"complete": True, "iterations": 3}
    assert runner.cached_summary(tmp_path, {**wanted, "overrides": []}) is None
    (tmp_path / "summary.json").write_text(json.dumps({"complete": False}))
    assert runner.cached_summary(tmp_path, wanted) is None


def test_results_tool_keys_a_run_by_the_code_that_made_it(tmp_path: Path) -> None:
    """A complete run of the same scenario and overrides made by other code is not reused."""
    _results_tool()  # puts tools/ on sys.path
    from paper_results import runner

    spec = runner.Spec("k", "pgc_lenet_mnist_reduced.toml", ("compressor.name=pgc",))
    record = runner.spec_record(spec)
    assert record["scenario"] == "scenarios/paper/pgc_lenet_mnist_reduced.toml"
    assert len(record["code"]) == 64 and record == runner.spec_record(spec)  # a digest, stable
    (tmp_path / "spec.json").write_text(json.dumps(record))
    (tmp_path / "summary.json").write_text(json.dumps({"complete": True}))
    assert runner.cached_summary(tmp_path, record) == {"complete": True}
    older = {**record, "code": "0" * 64}  # what a run of earlier code recorded
    (tmp_path / "spec.json").write_text(json.dumps(older))
    assert runner.cached_summary(tmp_path, record) is None
    (tmp_path / "spec.json").write_text(json.dumps({k: v for k, v in record.items() if k != "code"}))
    assert runner.cached_summary(tmp_path, record) is None  # a run from before runs were keyed by code
