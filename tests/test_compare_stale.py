"""Comparisons into one directory stay apart: run directories keyed by the resolved scenario, only
identical runs reused (and counted), and `aiotsim plot DIR` draws exactly the last comparison's runs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from aiotsim.cli import app
from aiotsim.results.plots import collect

runner = CliRunner()
TESTS = Path(__file__).parent

# end-to-end runs: part of the full suite, not the quick subset
pytestmark = pytest.mark.slow


def _compare(out: Path, codecs: str, iterations: int) -> str:
    res = runner.invoke(
        app,
        ["compare", str(TESTS / "tiny.toml"), "-c", codecs, "-n", str(iterations), "-o", str(out), "-q", "-j", "1"],
        catch_exceptions=False,
    )
    assert res.exit_code == 0, res.output
    return res.output


def _drawn(out: Path, warnings: list[str] | None = None) -> dict[str, int]:
    """Codec -> iterations of every run `plot` would draw from ``out``."""
    runs, _ = collect([out], warn=(warnings.append if warnings is not None else lambda _: None))
    return {r.summary["compressor"]: r.summary["iterations"] for r in runs}


@pytest.fixture(scope="module")
def twice(tmp_path_factory) -> tuple[Path, dict[Path, int], str]:
    """`compare -c none,2bit,topk -n 3`, then `-c none,topk -n 2` into the same directory (the
    issue's sequence at tiny size); returns the directory, the first compare's summaries' mtimes and
    the second compare's output."""
    out = tmp_path_factory.mktemp("stale") / "cmp"
    _compare(out, "none,2bit,topk", 3)
    first = {p: p.stat().st_mtime_ns for p in out.rglob("summary.json")}
    assert len(first) == 3
    return out, first, _compare(out, "none,topk", 2)


def test_a_second_comparison_with_other_settings_keeps_the_first_runs(twice) -> None:
    out, first, output = twice
    # the first comparison's 3 runs are untouched, the second's 2 lie beside them
    assert {p: p.stat().st_mtime_ns for p in first} == first
    summaries = [json.loads(p.read_text()) for p in out.rglob("summary.json")]
    assert sorted((s["compressor"], s["iterations"]) for s in summaries) == [
        ("2bit", 3),
        ("none", 2),
        ("none", 3),
        ("topk", 2),
        ("topk", 3),
    ]
    assert "2 runs, 0 reused" in output
    record = json.loads((out / "comparison.json").read_text())
    assert record["reused"] == 0 and len(record["runs"]) == 2


def test_plot_draws_exactly_the_last_comparison(twice, tmp_path) -> None:
    out, _, _ = twice
    assert _drawn(out) == {"none": 2, "topk": 2}
    res = runner.invoke(app, ["plot", str(out), "-o", str(tmp_path / "fig"), "--formats", "png"])
    assert res.exit_code == 0, res.output
    timelines = {p.stem for p in (tmp_path / "fig").glob("timeline_*.png")}
    assert timelines == {"timeline_none", "timeline_topk"}  # no stale 2bit run
    md = (out / "comparison.md").read_text()
    assert "| none |" in md and "| topk |" in md and "| 2bit |" not in md


def test_an_identical_comparison_reuses_the_runs_and_says_so(twice, tmp_path) -> None:
    out, _, _ = twice
    copy = tmp_path / "cmp"  # the fixture's directory stays as the other tests expect it
    shutil.copytree(out, copy)
    before = {p: p.read_bytes() for p in copy.rglob("summary.json")}
    output = _compare(copy, "none,2bit", 3)  # the first comparison's settings: nothing runs
    assert "2 runs, 2 reused" in output
    assert {p: p.read_bytes() for p in copy.rglob("summary.json")} == before  # 5 runs, none rewritten
    assert _drawn(copy) == {"none": 3, "2bit": 3}
    assert "Runs: 2 (2 reused" in (copy / "comparison.md").read_text()
    assert json.loads((copy / "comparison.json").read_text())["reused"] == 2


def test_a_comparison_without_record_draws_every_run_and_says_so(twice, tmp_path) -> None:
    out, _, _ = twice
    old = tmp_path / "old"
    for p in out.rglob("*"):  # a copy without comparison.json: as an older aiotsim left it
        if p.is_file() and p.name != "comparison.json":
            (old / p.relative_to(out)).parent.mkdir(parents=True, exist_ok=True)
            (old / p.relative_to(out)).write_bytes(p.read_bytes())
    warnings: list[str] = []
    runs, _ = collect([old], warn=warnings.append)
    assert len(runs) == 5
    assert len(warnings) == 1 and "no comparison.json" in warnings[0] and "every run directory" in warnings[0]


@pytest.mark.parametrize(
    ("record", "problem"),
    [
        ("[1]", "a JSON object is expected"),
        ('{"schema_version": 7, "runs": []}', "schema_version 7"),
        ('{"schema_version": 1, "runs": [{"run_dir": "../../etc"}]}', "inside the comparison directory"),
        ('{"schema_version": 1, "runs": [{"run_dir": "/etc"}]}', "inside the comparison directory"),
        ("{", "not valid JSON"),
    ],
)
def test_a_damaged_record_is_refused_with_exit_2(tmp_path, record, problem) -> None:
    d = tmp_path / "cmp"
    d.mkdir()
    (d / "comparison.json").write_text(record)
    res = runner.invoke(app, ["plot", str(d), "-o", str(tmp_path / "fig")])
    assert res.exit_code == 2 and problem in res.output and "comparison.json" in res.output
    assert "Traceback" not in res.output


def test_a_listed_run_that_is_gone_is_skipped_with_a_warning(twice, tmp_path) -> None:
    out, _, _ = twice
    copy = tmp_path / "cmp"
    shutil.copytree(out, copy)
    record = json.loads((copy / "comparison.json").read_text())
    gone = copy / record["runs"][0]["run_dir"]
    shutil.rmtree(gone)
    warnings: list[str] = []
    drawn = _drawn(copy, warnings)
    assert drawn == {"topk": 2}  # the second comparison's none run is gone
    assert len(warnings) == 1 and str(gone) in warnings[0] and "no summary.json" in warnings[0]
