"""`aiotsim compare`: the table's numbers are the runs' own numbers; bad input exits 2 cleanly."""

from __future__ import annotations

import csv
import json
import statistics
from pathlib import Path

import pytest
from typer.testing import CliRunner

from aiotsim.cli import app
from aiotsim.results.compare import compare_runs, time_to_accuracy
from aiotsim.results.store import read_csv

runner = CliRunner()
TESTS = Path(__file__).parent
CODECS = ("none", "2bit")
SEEDS = 2


# end-to-end runs of several codecs: part of the full suite, not the quick subset
pytestmark = pytest.mark.slow

@pytest.fixture(scope="module")
def compared(tmp_path_factory) -> tuple[Path, str]:
    """One comparison of 2 codecs x 2 seeds on the tiny scenario, in 2 worker processes."""
    out = tmp_path_factory.mktemp("cmp") / "cmp"
    res = runner.invoke(
        app,
        [
            "compare",
            str(TESTS / "tiny.toml"),
            "-c",
            ",".join(CODECS),
            "--seeds",
            str(SEEDS),
            "--jobs",
            "2",
            "-n",
            "2",
            "--set",
            "training.eval_every=1",
            "--out",
            str(out),
            "-q",
        ],
        catch_exceptions=False,
    )
    assert res.exit_code == 0, res.output
    return out, res.output


def _csv(path: Path) -> dict[str, dict[str, str]]:
    with open(path, newline="") as f:
        return {r["compressor"]: r for r in csv.DictReader(f)}


def _run_dir(out: Path, codec: str, seed: int) -> Path:
    """The one run directory of ``codec`` and ``seed``: ``OUT/CODEC/seedK-HASH``."""
    (d,) = (out / codec).glob(f"seed{seed}-*")
    return d


def _summaries(out: Path, codec: str) -> list[dict]:
    return [json.loads((_run_dir(out, codec, s) / "summary.json").read_text()) for s in (3, 4)]


def test_comparison_numbers_equal_the_run_summaries(compared) -> None:
    out, output = compared
    rows = _csv(out / "comparison.csv")
    assert list(rows) == list(CODECS)
    tp_none = statistics.fmean(s["throughput_samples_per_s"] for s in _summaries(out, "none"))
    for codec in CODECS:
        sums = _summaries(out, codec)
        assert [s["seed"] for s in sums] == [3, 4] and all(s["compressor"] == codec for s in sums)
        row = rows[codec]
        assert int(row["seeds"]) == SEEDS
        for key in (
            "throughput_samples_per_s",
            "bytes_up",
            "bytes_down",
            "wire_bytes_up",
            "wire_bytes_down",
            "compression_ratio",
            "compute_share",
            "comm_share",
            "sim_time_s",
        ):
            assert float(row[key]) == pytest.approx(statistics.fmean(s[key] for s in sums), rel=1e-12), key
        accs = [s["final_accuracy"] for s in sums]
        assert float(row["final_accuracy"]) == pytest.approx(statistics.fmean(accs), rel=1e-12)
        assert float(row["final_accuracy_std"]) == pytest.approx(statistics.stdev(accs), rel=1e-9, abs=1e-15)
        tp = statistics.fmean(s["throughput_samples_per_s"] for s in sums)
        assert float(row["speedup"]) == pytest.approx(tp / tp_none, rel=1e-12)
        assert row["baseline"] == "none"
        assert codec in output
    # 2bit sends 16x fewer uplink payload bytes than fp32 (2 bits per element, plus small headers)
    assert float(rows["2bit"]["compression_ratio"]) > 10
    md = (out / "comparison.md").read_text()
    assert "| none |" in md and "| 2bit |" in md and "speed-up vs none" in md


def test_time_to_accuracy_recomputed_for_any_target(compared) -> None:
    out, _ = compared
    dirs = [_run_dir(out, c, s) for c in CODECS for s in (3, 4)]
    # A target of 0 is reached at the first evaluation; an unreachable one never.
    low = compare_runs(dirs, target_accuracy=0.0)
    for row in low.rows:
        firsts = [read_csv(_run_dir(out, row.compressor, s) / "evals.csv")[0]["sim_time_s"] for s in (3, 4)]
        assert row.time_to_accuracy_s == pytest.approx(statistics.fmean(firsts)) and row.reached == 2
    high = compare_runs(dirs, target_accuracy=1.0)
    for row in high.rows:
        evals = [read_csv(_run_dir(out, row.compressor, s) / "evals.csv") for s in (3, 4)]
        expect = [time_to_accuracy(e, 1.0) for e in evals]
        assert row.reached == sum(t is not None for t in expect)
    # Without `none`, the first codec is the baseline.
    only = compare_runs([_run_dir(out, "2bit", 3), _run_dir(out, "2bit", 4)])
    assert only.baseline == "2bit" and only.rows[0].speedup == pytest.approx(1.0)


def test_rerun_reuses_complete_runs(compared, tiny_scenario) -> None:
    out, _ = compared
    before = {p: p.stat().st_mtime_ns for p in out.rglob("summary.json")}
    res = runner.invoke(
        app,
        [
            "compare",
            str(tiny_scenario),
            "-c",
            ",".join(CODECS),
            "--seeds",
            str(SEEDS),
            "-n",
            "2",
            "--set",
            "training.eval_every=1",
            "--out",
            str(out),
            "-q",
            "--target-accuracy",
            "0.05",
        ],
        catch_exceptions=False,
    )
    assert res.exit_code == 0, res.output
    assert {p: p.stat().st_mtime_ns for p in out.rglob("summary.json")} == before
    assert "sim s to 5%" in (out / "comparison.md").read_text()
    # every run was reused, and both the console and the comparison's files say so
    assert "4 runs, 4 reused" in res.output and "Runs: 4 (4 reused" in res.output
    assert "Runs: 4 (4 reused" in (out / "comparison.md").read_text()
    assert json.loads((out / "comparison.json").read_text())["reused"] == 4


def test_unknown_compressor_exits_2_without_traceback(tiny_scenario, tmp_path) -> None:
    out = tmp_path / "cmp"
    res = runner.invoke(
        app, ["compare", str(tiny_scenario), "-c", "none,bogus,2bitt", "--out", str(out)], catch_exceptions=False
    )
    assert res.exit_code == 2
    assert "unknown compressor 'bogus'" in res.output and "unknown compressor '2bitt'" in res.output
    assert "did you mean '2bit'" in res.output and "valid:" in res.output
    assert "Traceback" not in res.output
    assert not out.exists()  # validated before anything ran


def test_bad_override_exits_2(tiny_scenario, tmp_path) -> None:
    res = runner.invoke(
        app,
        [
            "compare",
            str(tiny_scenario),
            "-c",
            "none",
            "--set",
            "network.uplink_mbps=-1",
            "--set",
            "nosuch",
            "--out",
            str(tmp_path / "c"),
        ],
        catch_exceptions=False,
    )
    assert res.exit_code == 2
    assert "nosuch" in res.output and "Traceback" not in res.output


def test_more_runs_than_the_bound_are_refused_before_any_is_planned(tiny_scenario, tmp_path) -> None:
    """2 codecs x 1,000,000 seeds planned silently for hours (~9 ms of validation a run): refused at
    once, exit 2, with the product named; nothing is written."""
    out = tmp_path / "c"
    res = runner.invoke(app, ["compare", str(tiny_scenario), "-c", "none,2bit", "--seeds", "1000000", "-o", str(out)])
    assert res.exit_code == 2, res.output
    flat = " ".join(res.output.split())
    assert "2 codecs x 1,000,000 seeds = 2,000,000 runs, over the bound of 10,000" in flat
    assert "Traceback" not in res.output and not out.exists()
    # exactly the bound (2 x 5,000) is not refused by it: here the bad --set stops the planning at once
    res = runner.invoke(
        app, ["compare", str(tiny_scenario), "-c", "none,bogus", "--seeds", "5000", "-o", str(out), "--set", "x"]
    )
    assert res.exit_code == 2 and "over the bound" not in res.output
