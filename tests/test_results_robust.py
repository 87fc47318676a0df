"""Damaged run and sweep directories, and unwritable output paths: `plot` and `compare` never show a
traceback. Each damaged directory is skipped with a warning line naming it and its problem, the good
ones are used; when none is good, a ResultsError (exit 2). Readers raise nothing but ResultsError,
with a message naming the file."""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from aiotsim.cli import app
from aiotsim.errors import ResultsError
from aiotsim.results.compare import compare_runs, plan_comparison, write_comparison
from aiotsim.results.parallel import run_local
from aiotsim.results.plots import collect, load_run, load_trace, plot_all
from aiotsim.results.store import read_evals, read_metrics, read_summary
from aiotsim.results.sweep import read_manifest

runner = CliRunner()
TESTS = Path(__file__).parent


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> Path:
    """A comparison directory of real tiny runs: none/seed3-HASH and 2bit/seed3-HASH (see :func:`_run`)."""
    out = tmp_path_factory.mktemp("robust") / "cmp"
    jobs = plan_comparison(TESTS / "tiny.toml", ["none", "2bit"], 1, out, ["training.eval_every=1"], iterations=2)
    assert all(r.ok for r in run_local(jobs, workers=1))
    return out


def _run(root: Path, codec: str) -> Path:
    """The seed-3 run directory of ``codec`` in comparison directory ``root`` (``CODEC/seed3-HASH``)."""
    (d,) = (root / codec).glob("seed3-*")
    return d


def _summary_edit(edit: Callable[[dict], object]) -> Callable[[Path], None]:
    def damage(d: Path) -> None:
        data = json.loads((d / "summary.json").read_text())
        (d / "summary.json").write_text(json.dumps(edit(data)))

    return damage


def _without(key: str) -> Callable[[dict], dict]:
    return lambda s: {k: v for k, v in s.items() if k != key}


def _nulls(*keys: str) -> Callable[[dict], dict]:
    return lambda s: {**s, **{k: None for k in keys}}


def _cut(name: str) -> Callable[[Path], None]:
    def damage(d: Path) -> None:
        data = (d / name).read_bytes()
        (d / name).write_bytes(data[: len(data) - 7])  # mid-way through the last row

    return damage


def _not_utf8(name: str) -> Callable[[Path], None]:
    def damage(d: Path) -> None:
        (d / name).write_bytes(b"\xff\xfe\x00garbage" + (d / name).read_bytes())

    return damage


def _short_row(name: str) -> Callable[[Path], None]:
    def damage(d: Path) -> None:
        lines = (d / name).read_bytes().split(b"\r\n")
        lines[1] = b",".join(lines[1].split(b",")[:2])  # a row with too few fields
        (d / name).write_bytes(b"\r\n".join(lines))

    return damage


# damage kind -> (how, the file its message must name)
DAMAGE: dict[str, tuple[Callable[[Path], None], str]] = {
    "summary_list": (lambda d: (d / "summary.json").write_text("[1, 2, 3]"), "summary.json"),
    "summary_string": (lambda d: (d / "summary.json").write_text('"a string"'), "summary.json"),
    "summary_not_utf8": (_not_utf8("summary.json"), "summary.json"),
    "summary_not_json": (lambda d: (d / "summary.json").write_text("{ nope"), "summary.json"),
    "summary_no_compressor": (_summary_edit(_without("compressor")), "summary.json"),
    "summary_null_fields": (_summary_edit(_nulls("target_accuracy", "wire_bytes_up", "compressor")), "summary.json"),
    "summary_text_number": (_summary_edit(lambda s: {**s, "final_accuracy": "high"}), "summary.json"),
    "summary_no_complete": (_summary_edit(_without("complete")), "summary.json"),
    "evals_cut_mid_row": (_cut("evals.csv"), "evals.csv"),
    "evals_short_row": (_short_row("evals.csv"), "evals.csv"),
    "evals_not_utf8": (_not_utf8("evals.csv"), "evals.csv"),
    "evals_missing": (lambda d: (d / "evals.csv").unlink(), "evals.csv"),
    "metrics_cut_mid_row": (_cut("metrics.csv"), "metrics.csv"),
    "metrics_not_utf8": (_not_utf8("metrics.csv"), "metrics.csv"),
    "evals_nan_time": (
        lambda d: (d / "evals.csv").write_bytes(
            b"iteration,sim_time_s,accuracy,loss\r\n0,nan,0.5,1.0\r\n"
        ),
        "evals.csv",
    ),
    "metrics_text_value": (
        lambda d: (d / "metrics.csv").write_bytes((d / "metrics.csv").read_bytes().replace(b"\r\n0,", b"\r\nzero,", 1)),
        "metrics.csv",
    ),
}


def _damaged_copy(good: Path, root: Path, kind: str) -> Path:
    d = root / kind
    shutil.copytree(_run(good, "2bit"), d)
    DAMAGE[kind][0](d)
    return d


def _load_all(d: Path) -> None:
    read_summary(d)
    read_metrics(d)
    read_evals(d)


@pytest.mark.parametrize("kind", sorted(DAMAGE))
def test_readers_raise_only_results_error_naming_the_file(good, tmp_path, kind) -> None:
    d = _damaged_copy(good, tmp_path, kind)
    with pytest.raises(ResultsError) as info:
        _load_all(d)
    assert DAMAGE[kind][1] in info.value.message and str(d) in info.value.message
    with pytest.raises(ResultsError):
        load_run(d)


@pytest.mark.parametrize("kind", sorted(DAMAGE))
def test_compare_skips_a_damaged_run_with_a_warning(good, tmp_path, kind) -> None:
    d = _damaged_copy(good, tmp_path, kind)
    warnings: list[str] = []
    if DAMAGE[kind][1] == "metrics.csv":  # compare reads summary.json and evals.csv only
        c = compare_runs([_run(good, "none"), d], warn=warnings.append)
        assert [r.compressor for r in c.rows] == ["none", "2bit"] and not warnings
        return
    c = compare_runs([_run(good, "none"), d], warn=warnings.append)
    assert [r.compressor for r in c.rows] == ["none"] and c.run_dirs == [_run(good, "none")]
    assert len(warnings) == 1 and str(d) in warnings[0] and DAMAGE[kind][1] in warnings[0]
    with pytest.raises(ResultsError) as info:  # nothing usable: an error listing the problem
        compare_runs([d])
    assert "no usable run directory" in info.value.message and str(d) in info.value.message


def test_compare_skips_an_incomplete_run(good, tmp_path) -> None:
    d = tmp_path / "inc"
    shutil.copytree(_run(good, "2bit"), d)
    _summary_edit(lambda s: {**s, "complete": False, "status": "interrupted"})(d)
    warnings: list[str] = []
    c = compare_runs([_run(good, "none"), d], warn=warnings.append)
    assert len(c.rows) == 1 and "incomplete (interrupted)" in warnings[0]


@pytest.mark.slow
def test_plot_uses_the_good_runs_and_names_every_damaged_one(good, tmp_path, caplog) -> None:
    root = tmp_path / "mixed"
    shutil.copytree(good, root)
    damaged = {kind: _damaged_copy(good, root / "bad", kind) for kind in DAMAGE}
    trace_dir = _run(root, "2bit")  # a trace event without ts: its timeline is skipped, the run is used
    trace = json.loads((trace_dir / "trace.json").read_text())
    span = next(e for e in trace["traceEvents"] if e.get("ph") == "X")
    del span["ts"]
    (trace_dir / "trace.json").write_text(json.dumps(trace))
    with caplog.at_level(logging.WARNING, logger="aiotsim.results"):
        res = runner.invoke(
            app, ["plot", str(root), "-o", str(tmp_path / "fig"), "--formats", "png"], catch_exceptions=False
        )
    assert res.exit_code == 0, res.output
    assert "Traceback" not in res.output
    stems = {p.stem for p in (tmp_path / "fig").glob("*.png")}
    assert "throughput" in stems and "timeline_none" in stems and "timeline_2bit" not in stems
    lines = [r.getMessage() for r in caplog.records]
    assert all(m.startswith("warning: ") for m in lines)
    for kind, d in damaged.items():
        assert sum(str(d) in m and DAMAGE[kind][1] in m for m in lines) == 1, kind
    assert any("timeline_2bit" in m and "trace.json" in m and "ts" in m for m in lines)


def test_plot_with_only_damaged_runs_exits_2_naming_each(good, tmp_path) -> None:
    dirs = [_damaged_copy(good, tmp_path / "bad", kind) for kind in ("summary_list", "evals_cut_mid_row")]
    res = runner.invoke(app, ["plot", *map(str, dirs), "-o", str(tmp_path / "fig")], catch_exceptions=False)
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert all(str(d) in res.output.replace("\n", "") or d.name in res.output for d in dirs)
    assert not (tmp_path / "fig").exists()


def test_load_trace_damage_is_a_results_error(good, tmp_path) -> None:
    d = tmp_path / "t"
    shutil.copytree(_run(good, "none"), d)
    for text in (b"[]", b"{}", b'{"traceEvents": 3}', b"\xff\xfe", b'{"traceEvents": [{"ph": "X", "dur": 1}]}'):
        (d / "trace.json").write_bytes(text)
        with pytest.raises(ResultsError) as info:
            load_trace(d)
        assert "trace.json" in info.value.message
    (d / "trace.json").unlink()
    with pytest.raises(ResultsError):
        load_trace(d)


SWEEP_DAMAGE = {
    "empty_object": "{}",
    "garbage": "\x00\x01 not json",
    "list": "[1]",
    "no_points": '{"name": "s", "grid": {"scenario.seed": [1]}}',
    "point_missing_values": '{"name": "s", "grid": {"scenario.seed": [1]}, "points": [{"run_dir": "runs/x"}]}',
    "run_dir_outside": (
        '{"name": "s", "grid": {"scenario.seed": [1]}, "points": [{"values": {"scenario.seed": 1}, "run_dir": "/etc"}]}'
    ),
    "grid_of_objects": '{"name": "s", "grid": {"a.b": [{"x": 1}]}, "points": []}',
}


@pytest.mark.parametrize("kind", sorted(SWEEP_DAMAGE))
def test_damaged_sweep_json_is_skipped_or_reported(good, tmp_path, kind, caplog) -> None:
    sw = tmp_path / "sw"
    sw.mkdir()
    (sw / "sweep.json").write_text(SWEEP_DAMAGE[kind])
    with pytest.raises(ResultsError) as info:
        read_manifest(sw)
    assert "sweep.json" in info.value.message
    with pytest.raises(ResultsError) as info:  # alone: nothing to plot
        collect([sw])
    assert str(sw / "sweep.json") in info.value.message
    warnings: list[str] = []
    runs, sweeps = collect([sw, good], warn=warnings.append)  # with good runs: skipped, named
    assert len(runs) == 2 and not sweeps
    assert len(warnings) == 1 and str(sw / "sweep.json") in warnings[0]


def test_sweep_json_not_utf8_exits_2_without_traceback(tmp_path) -> None:
    sw = tmp_path / "sw"
    sw.mkdir()
    (sw / "sweep.json").write_bytes(b"\xff\xfe\xfd")
    res = runner.invoke(app, ["plot", str(sw), "-o", str(tmp_path / "fig")], catch_exceptions=False)
    assert res.exit_code == 2 and "Traceback" not in res.output and "not UTF-8" in res.output


# ---- output paths ------------------------------------------------------------------------------------
def _unwritable(tmp_path: Path) -> list[Path]:
    existing = tmp_path / "a_file"
    existing.write_text("x")
    return [existing, Path("/proc/aiotsim-x"), existing / "below"]


def test_plot_to_an_unwritable_path_exits_2(good, tmp_path) -> None:
    for target in _unwritable(tmp_path):
        with pytest.raises(ResultsError, match=f"cannot write to {target}"):
            plot_all([good], target, formats=("png",))
        res = runner.invoke(app, ["plot", str(good), "-o", str(target)], catch_exceptions=False)
        assert res.exit_code == 2 and "cannot write to" in res.output and "Traceback" not in res.output


def test_compare_outputs_to_an_unwritable_path_raise_results_error(good, tmp_path) -> None:
    c = compare_runs([_run(good, "none")])
    for target in _unwritable(tmp_path):
        with pytest.raises(ResultsError, match=f"cannot write to {target}"):
            write_comparison(c, target)
        with pytest.raises(ResultsError, match="cannot write to"):
            plan_comparison(TESTS / "tiny.toml", ["none"], 1, target)
        res = runner.invoke(app, ["compare", str(TESTS / "tiny.toml"), "-c", "none", "-o", str(target), "-q"])
        assert res.exit_code == 2 and "cannot write to" in res.output and "Traceback" not in res.output


def test_sweep_to_an_unwritable_path_exits_2(tmp_path) -> None:
    p = tmp_path / "s.toml"
    p.write_text(f'[sweep]\nbase = "{TESTS / "tiny.toml"}"\n[grid]\n"scenario.seed" = [1]\n')
    for target in _unwritable(tmp_path):
        res = runner.invoke(app, ["sweep", str(p), "--out", str(target), "-q"], catch_exceptions=False)
        assert res.exit_code == 2, res.output
        assert f"cannot write to {target}" in res.output.replace("\n", "") and "Traceback" not in res.output
