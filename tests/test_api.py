"""The Python API for notebooks and scripts: ``aiotsim.run`` with scenarios as files, objects or
dicts, with the user's own ``nn.Module`` and tensors, and its agreement with ``run_scenario``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset
from typer.testing import CliRunner

import aiotsim
from aiotsim.api import as_dataset, resume_run, run_scenario
from aiotsim.cli import app
from aiotsim.config import load_scenario, read_toml
from aiotsim.errors import ConfigError, ResultsError
from aiotsim.records import Progress, RunSummary
from aiotsim.results.compare import compare_runs
from aiotsim.results.custom import resume_scenario
from aiotsim.results.fingerprint import fingerprint_run_dir
from aiotsim.results.plots import plot_all

TESTS = Path(__file__).parent


class TwoLayer(nn.Module):
    """A user's model: 2-layer MLP on flat feature vectors."""

    def __init__(self, features: int, hidden: int, classes: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(features, hidden)
        self.fc2 = nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: [B, features]
        return self.fc2(torch.relu(self.fc1(x)))


def blobs(n: int, features: int, classes: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` samples around one random centre per class: ``([n, features] fp32, [n] int64)``."""
    g = torch.Generator().manual_seed(seed)
    centres = 3 * torch.randn(classes, features, generator=g)
    y = torch.arange(n) % classes
    return centres[y] + torch.randn(n, features, generator=g), y


def test_user_module_on_user_tensors(tiny_scenario: Path, tmp_path: Path) -> None:
    torch.manual_seed(0)  # the user's model, the user's seed
    model = TwoLayer(6, 16, 3)
    before = [p.detach().clone() for p in model.parameters()]
    x, y = blobs(300, 6, 3, seed=1)
    train, test = TensorDataset(x[:240], y[:240]), (x[240:], y[240:])
    res = aiotsim.run(
        tiny_scenario,
        model=model,
        dataset=(train, test),
        overrides={"network.uplink_mbps": 5, "scenario.iterations": 10, "training.eval_every": 5},
        out_dir=tmp_path / "run",
    )
    assert isinstance(res.rows, pd.DataFrame) and isinstance(res.evals, pd.DataFrame)
    assert list(res.rows["iteration"]) == list(range(10))
    assert list(res.evals["iteration"]) == [4, 9]
    s = res.summary
    assert isinstance(s, RunSummary) and s.complete
    assert (s.model, s.dataset, s.compressor) == ("TwoLayer", "custom", "none")
    assert s.model_params == 6 * 16 + 16 + 16 * 3 + 3
    assert s.flops_per_batch > 0  # counted like a built-in model's
    assert s.final_accuracy is not None and s.final_accuracy > 0.6  # it learns the blobs
    assert read_toml(res.run_dir / "scenario.toml")["network"]["uplink_mbps"] == 5
    for p, q in zip(model.parameters(), before):  # the user's module is not trained in place
        assert torch.equal(p, q)


def test_builtin_model_matches_run_scenario(tiny_scenario: Path, tmp_path: Path) -> None:
    sc = load_scenario(tiny_scenario)
    run_scenario(sc, tmp_path / "cli")
    res = aiotsim.run(read_toml(tiny_scenario), out_dir=tmp_path / "api")  # a dict this time
    assert fingerprint_run_dir(tmp_path / "api") == fingerprint_run_dir(tmp_path / "cli")
    assert res.summary.model == "mlp" and len(res.rows) == sc.scenario.iterations


def test_out_dir_none_is_a_kept_temporary_directory(tiny_scenario: Path) -> None:
    sc = load_scenario(tiny_scenario, ["scenario.iterations=1", "training.eval_every=1"])
    res = aiotsim.run(sc)
    assert (res.run_dir / "summary.json").is_file() and res.run_dir.name.startswith("aiotsim-tiny-")


def test_model_with_wrong_output_is_a_config_error(tiny_scenario: Path) -> None:
    data = (blobs(40, 6, 3, seed=1), blobs(10, 6, 3, seed=2))
    with pytest.raises(ConfigError, match=r"TwoLayer must map a batch of shape \[2, 6\] to logits"):
        aiotsim.run(tiny_scenario, model=TwoLayer(6, 8, 5), dataset=data)
    with pytest.raises(ConfigError, match="TwoLayer cannot run on a batch of shape"):
        aiotsim.run(tiny_scenario, model=TwoLayer(7, 8, 3), dataset=data)


def test_bad_data_lists_every_problem() -> None:
    x = torch.zeros(10, 4)
    with pytest.raises(ConfigError) as err:
        as_dataset(((x, torch.zeros(10)), (x, torch.zeros(9, dtype=torch.int64))))
    text = str(err.value)
    assert "train labels must be a 1-D tensor of integer class ids" in text
    assert "test x [10, 4] and y [9] must hold the same number" in text
    with pytest.raises(ConfigError, match=r"labels must lie in \[0, 2\)"):
        as_dataset(((x, torch.arange(10) % 3), (x, torch.zeros(10, dtype=torch.int64))), num_classes=2)


def test_bad_scenario_argument() -> None:
    with pytest.raises(ConfigError, match="a scenario must be a TOML path, a Scenario or a dict"):
        aiotsim.run(42)  # type: ignore[arg-type]


@pytest.mark.parametrize(("nodes", "batched"), [(2, "false"), (4, "false"), (4, "true")])
def test_progress_within_iterations_counts_their_gradients(
    tiny_scenario: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, nodes: int, batched: str
) -> None:
    """With reports due at once, every gradient of a sync iteration after its first reports the
    count so far with the last row's fields; rows report as before, gradients 0; the results are
    those of a run that reported nothing."""
    from aiotsim.records import Progress
    from aiotsim.sim import heartbeat

    sc = load_scenario(tiny_scenario, [f"nodes.count={nodes}", f"nodes.batched={batched}"], iterations=3)
    quiet = run_scenario(sc, tmp_path / "quiet")
    monkeypatch.setattr(heartbeat, "HEARTBEAT_S", 0.0)
    seen: list[Progress] = []
    run_scenario(sc, tmp_path / "beat", on_progress=seen.append)
    rows = [p for p in seen if p.gradients == 0]
    want = []
    for k in range(3):
        want += [(k, g) for g in range(2, nodes + 1)] + [(k + 1, 0)]
    assert [(p.iteration, p.gradients) for p in seen] == want
    for p in seen:
        if p.gradients:  # the fields of the row before it (nan / 0 before the first)
            before = ([r for r in rows if r.iteration == p.iteration] or [Progress(0, 3, 0.0, float("nan"))])[0]
            assert (p.sim_time_s, p.accuracy, p.total) == (before.sim_time_s, None, 3)
            assert p.loss == before.loss or (p.loss != p.loss and before.loss != before.loss)  # nan
    assert fingerprint_run_dir(tmp_path / "beat") == fingerprint_run_dir(tmp_path / "quiet")
    assert quiet["complete"]


def test_progress_within_federated_rounds_counts_local_steps(
    tiny_scenario: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """2 nodes x 3 local steps a round: reports at the 2nd to 6th gradient of each round."""
    from aiotsim.sim import heartbeat

    monkeypatch.setattr(heartbeat, "HEARTBEAT_S", 0.0)
    over = ["training.mode=federated", "training.local_steps=3", "nodes.per_round=0"]
    seen: list[Progress] = []
    run_scenario(load_scenario(tiny_scenario, over, iterations=2), tmp_path / "run", on_progress=seen.append)
    want = [(0, g) for g in range(2, 7)] + [(1, 0)] + [(1, g) for g in range(2, 7)] + [(2, 0)]
    assert [(p.iteration, p.gradients) for p in seen] == want


def test_a_batch_job_passes_its_reports_within_iterations_on(
    tiny_scenario: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A compare/sweep job's events carry the gradient counts (the batch bars show them)."""
    from aiotsim.results import parallel
    from aiotsim.sim import heartbeat

    monkeypatch.setattr(heartbeat, "HEARTBEAT_S", 0.0)
    sc = load_scenario(tiny_scenario, ["nodes.count=3"], iterations=2)
    events: list[parallel.Event] = []
    parallel._run_job(parallel.Job("tiny", sc.to_toml(), str(tmp_path / "run")), 5, events.append)
    iters = [(e.iteration, e.gradients) for e in events if e.kind == "iter"]
    assert iters == [(0, 2), (0, 3), (1, 0), (1, 2), (1, 3), (2, 0)]
    assert events[0].kind == "start" and all(e.index == 5 for e in events)


# ---- what a run with the user's model and data records ---------------------------------------------
def _stop_at(iteration: int):
    """An ``on_progress`` that stops the run like Ctrl-C once ``iteration`` rows are written."""

    def on_progress(p: Progress) -> None:
        if p.iteration == iteration:
            raise KeyboardInterrupt

    return on_progress


@pytest.fixture(scope="module")
def custom_run(tmp_path_factory) -> Path:
    """A 4-iteration run of TwoLayer(6, 16, 3) on 240 + 60 blob samples, stopped after 2 iterations
    with a checkpoint every iteration."""
    torch.manual_seed(0)
    x, y = blobs(300, 6, 3, seed=1)
    d = tmp_path_factory.mktemp("custom") / "run"
    with pytest.raises(KeyboardInterrupt):
        aiotsim.run(
            TESTS / "tiny.toml",
            model=TwoLayer(6, 16, 3),
            dataset=((x[:240], y[:240]), (x[240:], y[240:])),
            out_dir=d,
            on_progress=_stop_at(2),
            checkpoint_every=1,
        )
    return d


def test_a_custom_run_records_what_ran_not_the_scenario_s_names(custom_run: Path) -> None:
    text = (custom_run / "scenario.toml").read_text()
    sc = read_toml(custom_run / "scenario.toml")
    assert (sc["model"]["name"], sc["data"]["dataset"]) == ("custom", "custom")  # not the file's mlp / digits
    assert "lenet5" not in text and "mlp" not in text and "digits" not in text
    assert text.startswith("#") and "custom.json" in text.splitlines()[0] + text.splitlines()[1]
    record = json.loads((custom_run / "custom.json").read_text())
    assert record["model"]["class"] == "TwoLayer"
    assert record["model"]["params"] == 6 * 16 + 16 + 16 * 3 + 3
    assert record["model"]["layers"] == [
        "fc1: Linear(in_features=6, out_features=16, bias=True)",
        "fc2: Linear(in_features=16, out_features=3, bias=True)",
    ]
    assert [(t["name"], t["shape"]) for t in record["model"]["tensors"]] == [
        ("fc1.weight", [16, 6]),
        ("fc1.bias", [16]),
        ("fc2.weight", [3, 16]),
        ("fc2.bias", [3]),
    ]
    assert record["data"] == {
        "name": "custom",
        "train_samples": 240,
        "test_samples": 60,
        "input_shape": [6],
        "classes": 3,
    }
    assert record["scenario_names"] == {"model.name": "mlp", "data.dataset": "digits"}


def test_resume_from_the_cli_of_a_custom_run_is_refused_with_exit_2(custom_run: Path) -> None:
    before = {p.name: p.read_bytes() for p in custom_run.iterdir() if p.is_file()}
    res = CliRunner().invoke(app, ["run", "--resume", str(custom_run), "-q"])
    assert res.exit_code == 2, res.output
    flat = " ".join(res.output.split())
    assert "trained model 'TwoLayer' on data set 'custom'" in flat and "aiotsim.resume(" in flat
    assert "Traceback" not in res.output
    assert {p.name: p.read_bytes() for p in custom_run.iterdir() if p.is_file()} == before  # nothing cut
    with pytest.raises(ConfigError, match="cannot continue it"):  # the model without the data: refused too
        resume_run(custom_run, model=TwoLayer(6, 16, 3))


def test_a_custom_run_resumes_from_python_to_the_uninterrupted_result(custom_run: Path, tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = TwoLayer(6, 16, 3)  # the same initial weights as the stopped run's
    x, y = blobs(300, 6, 3, seed=1)
    data = ((x[:240], y[:240]), (x[240:], y[240:]))
    crash = tmp_path / "crash"
    shutil.copytree(custom_run, crash)
    ref = aiotsim.run(TESTS / "tiny.toml", model=model, dataset=data, out_dir=tmp_path / "ref")
    res = aiotsim.resume(crash, model=model, dataset=data)
    assert res.summary.complete and fingerprint_run_dir(crash) == fingerprint_run_dir(ref.run_dir)
    assert (crash / "scenario.toml").read_text() == (ref.run_dir / "scenario.toml").read_text()
    assert res.custom is not None and res.custom["model"]["class"] == "TwoLayer"
    # the finished run directory compares and plots like any other
    c = compare_runs([crash, ref.run_dir])
    assert [r.compressor for r in c.rows] == ["none"] and c.rows[0].seeds == 2
    written = plot_all([crash], tmp_path / "fig", formats=("png",))
    assert {p.stem for p in written} >= {"throughput", "convergence_time", "timeline_none"}


def test_a_plain_run_over_a_custom_one_drops_its_record(tmp_path: Path) -> None:
    d = tmp_path / "run"
    over = {"scenario.iterations": 1, "training.eval_every": 1}
    digits = nn.Sequential(nn.Flatten(), nn.Linear(64, 10))  # built-in data, the user's model
    aiotsim.run(TESTS / "tiny.toml", model=digits, overrides=over, out_dir=d)
    sc = read_toml(d / "scenario.toml")
    assert (sc["model"]["name"], sc["data"]["dataset"]) == ("custom", "digits")
    record = json.loads((d / "custom.json").read_text())
    assert record["data"] is None and record["model"]["params"] == 64 * 10 + 10
    assert record["scenario_names"] == {"model.name": "mlp"}
    plain = aiotsim.run(TESTS / "tiny.toml", overrides=over, out_dir=d)
    assert not (d / "custom.json").exists() and read_toml(d / "scenario.toml")["model"]["name"] == "mlp"
    assert plain.custom is None


@pytest.mark.parametrize(
    ("content", "problem"),
    [("[]", "a JSON object is expected"), ('{"schema_version": 1, "model": 3}', "must be objects or null")],
)
def test_a_damaged_custom_record_is_refused(tmp_path: Path, content: str, problem: str) -> None:
    (tmp_path / "custom.json").write_text(content)
    with pytest.raises(ResultsError, match=problem):
        resume_scenario(tmp_path, None, None)
