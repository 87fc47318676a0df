"""`aiotsim export`: every run's metrics and evaluations as Parquet tables (with run-id, codec and
seed columns) or TensorBoard scalars against the iteration; a missing optional package exits 2
with the pip command."""

from __future__ import annotations

import csv
import importlib.util
import re
from pathlib import Path

import pytest
import typer
from conftest import run_tiny_sweep
from typer.testing import CliRunner

from aiotsim.cli_report import register
from aiotsim.results import export as export_module
from aiotsim.results.compare import plan_comparison, write_comparison_record
from aiotsim.results.parallel import run_local

TESTS = Path(__file__).parent
HAS_PYARROW = importlib.util.find_spec("pyarrow") is not None
HAS_TENSORBOARD = importlib.util.find_spec("tensorboard") is not None

runner = CliRunner()
app = typer.Typer()
register(app)


@pytest.fixture(scope="module")
def comparison(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """none and 2bit, seeds 3 and 4, 3 iterations each, evaluated every iteration."""
    out = tmp_path_factory.mktemp("export") / "cmp"
    jobs = plan_comparison(TESTS / "tiny.toml", ["none", "2bit"], 2, out, ["training.eval_every=1"], iterations=3)
    assert all(r.ok for r in run_local(jobs, workers=1))
    write_comparison_record(out, jobs, reused=0)
    return out


def _csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def _run_dirs(comparison: Path) -> dict[str, Path]:
    """``"2bit/seed3-..."`` -> its directory, read from the file system, not from the exporter."""
    return {d.parent.relative_to(comparison).as_posix(): d.parent for d in sorted(comparison.glob("*/*/summary.json"))}


@pytest.mark.skipif(not HAS_PYARROW, reason="pyarrow not installed (pip install 'aiotsim[parquet]')")
def test_parquet_holds_every_row_of_every_run_named_by_run_codec_and_seed(comparison: Path, tmp_path: Path) -> None:
    import pandas as pd

    res = runner.invoke(app, ["export", str(comparison), "--format", "parquet", "-o", str(tmp_path / "pq")])
    assert res.exit_code == 0, res.output
    metrics = pd.read_parquet(tmp_path / "pq" / "metrics.parquet")
    evals = pd.read_parquet(tmp_path / "pq" / "evals.parquet")
    runs = pd.read_parquet(tmp_path / "pq" / "runs.parquet")
    dirs = _run_dirs(comparison)
    assert len(dirs) == 4 and sorted(runs["run_id"]) == sorted(dirs)
    for run_id, d in dirs.items():
        codec, seed = re.fullmatch(r"([^/]+)/seed(\d+)-[0-9a-f]+", run_id).groups()  # compare's layout
        m = metrics[metrics["run_id"] == run_id]
        rows = _csv(d / "metrics.csv")
        assert len(m) == len(rows) == 3  # one per iteration
        assert set(m["codec"]) == {codec} and set(m["seed"]) == {int(seed)}
        assert list(m["loss"]) == pytest.approx([float(r["loss"]) for r in rows])
        assert list(m["wire_bytes_up"]) == pytest.approx([float(r["wire_bytes_up"]) for r in rows])
        e = evals[evals["run_id"] == run_id]
        assert list(e["accuracy"]) == pytest.approx([float(r["accuracy"]) for r in _csv(d / "evals.csv")])
    assert set(runs["codec"]) == {"none", "2bit"} and set(runs["seed"]) == {3, 4}


@pytest.mark.skipif(not HAS_PYARROW, reason="pyarrow not installed (pip install 'aiotsim[parquet]')")
def test_parquet_of_a_sweep_has_a_column_per_swept_key(tmp_path: Path) -> None:
    import pandas as pd

    run_tiny_sweep(tmp_path, '"network.uplink_mbps" = [1, 4]')
    export_module.export_parquet(tmp_path / "sw", tmp_path / "pq")
    metrics = pd.read_parquet(tmp_path / "pq" / "metrics.parquet")
    assert sorted(metrics["network.uplink_mbps"]) == [1, 1, 4, 4]  # 2 iterations per point
    # the slower uplink takes longer per iteration: the column tells the points apart
    last = metrics.groupby("network.uplink_mbps")["sim_time_s"].max()
    assert last[1] > last[4]


@pytest.mark.skipif(not HAS_TENSORBOARD, reason="tensorboard not installed (pip install 'aiotsim[tensorboard]')")
def test_tensorboard_scalars_per_run_against_the_iteration(comparison: Path, tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    log_dir = tmp_path / "tb"
    for _ in range(2):  # a second export replaces the first's events: no point twice
        res = runner.invoke(app, ["export", str(comparison), "--format", "tensorboard", "-o", str(log_dir)])
        assert res.exit_code == 0, res.output
    for run_id, d in _run_dirs(comparison).items():
        acc = EventAccumulator(str(log_dir / run_id))
        acc.Reload()
        rows = _csv(d / "metrics.csv")
        loss = acc.Scalars("train/loss")
        assert [s.step for s in loss] == [int(r["iteration"]) for r in rows] == [0, 1, 2]
        assert [s.value for s in loss] == pytest.approx([float(r["loss"]) for r in rows], rel=1e-6)  # float32
        assert [s.wall_time for s in loss] == pytest.approx([float(r["sim_time_s"]) for r in rows])
        evals = _csv(d / "evals.csv")
        assert [s.value for s in acc.Scalars("eval/accuracy")] == pytest.approx(
            [float(r["accuracy"]) for r in evals], rel=1e-6
        )


@pytest.mark.parametrize(("fmt", "package"), [("parquet", "pyarrow"), ("tensorboard", "tensorboard")])
def test_a_missing_package_exits_2_with_the_pip_command(
    comparison: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str, package: str
) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == package else real(name, *a))
    res = runner.invoke(app, ["export", str(comparison), "--format", fmt, "-o", str(tmp_path / "x")])
    assert res.exit_code == 2
    assert f"pip install {package}" in res.output and f"aiotsim[{fmt}]" in res.output
    assert "Traceback" not in res.output and not (tmp_path / "x").exists()


def test_export_bad_input_exits_2(comparison: Path, tmp_path: Path) -> None:
    res = runner.invoke(app, ["export", str(comparison), "--format", "csv", "-o", str(tmp_path / "x")])
    assert res.exit_code == 2 and "--format 'csv': unknown; valid: parquet, tensorboard" in res.output
    (tmp_path / "empty").mkdir()
    res = runner.invoke(app, ["export", str(tmp_path / "empty"), "--format", "parquet"])
    expected = "no complete run directory found" if HAS_PYARROW else "pip install pyarrow"
    assert res.exit_code == 2 and expected in res.output
