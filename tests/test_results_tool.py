"""tools/results.py: verdicts follow the numbers by their stated rules, the gradient-shape
statistics match a normal and a Laplace sample, --check compares real reruns with the document
line by line (and catches a changed number), and --full refuses clearly without data or a GPU."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import ROOT, load_script
from test_datasets_files import write_idx_dir

TOOL = ROOT / "tools" / "results.py"
CLI = load_script(TOOL, "results_cli")  # puts tools/ on sys.path
from paper_results import full, gradients, runner, seed000, seed001, seed002, seed004  # noqa: E402


class Fake(runner.Runner):
    """A runner whose runs are hand-made summaries and evaluations, by key; others are missing."""

    def __init__(
        self, summaries: dict[str, dict[str, Any]], evals: dict[str, list[tuple[int, float, float]]] | None = None
    ) -> None:
        super().__init__(Path("/nonexistent"), run_missing=False)
        self.summaries, self.evals_of = summaries, evals or {}

    def __call__(self, spec: Any) -> dict[str, Any]:
        if spec.key not in self.summaries:
            raise runner.Missing(spec)
        return self.summaries[spec.key]

    def evals(self, spec: Any) -> list[tuple[int, float, float]]:
        return self.evals_of.get(spec.key, [])


def _fourbit_speed(four: float) -> str:
    keys = {c: s.key for c, s in seed000.bytes_specs().items()}
    run = Fake(
        {
            keys["2bit"]: {"throughput_samples_per_s": 100.0},
            keys["4bit"]: {"throughput_samples_per_s": four},
            keys["none"]: {"throughput_samples_per_s": 50.0},
        }
    )
    return seed000.claims(run)[0].verdict


def test_4bit_acceleration_verdict_follows_its_rule() -> None:
    # "slightly lower than 2Bit in acceleration": 4bit slower than 2bit by less than 20%
    assert _fourbit_speed(90.0).startswith("**holds**")
    assert _fourbit_speed(70.0).startswith("**does not hold**")  # far slower
    assert _fourbit_speed(105.0).startswith("**does not hold**")  # not lower at all


def test_a_claim_whose_run_is_missing_says_so_and_gives_no_verdict() -> None:
    c = seed000.claims(Fake({}))[1]
    assert c.measured.startswith("not run yet: `aiotsim run scenarios/paper/fourbit_cifar10_reduced.toml")
    assert c.verdict == "-"


def test_hylo_accuracy_loss_verdict_is_half_a_point() -> None:
    keys = {c: s.key for c, s in seed004.accuracy_specs().items()}

    def verdict(hylo: float) -> str:
        run = Fake({keys["hylo"]: {"final_accuracy": hylo}, keys["none"]: {"final_accuracy": 0.950}})
        return seed004.claims(run)[0].verdict

    assert verdict(0.946).startswith("**holds**")  # 0.4 points lost
    assert verdict(0.944).startswith("**does not hold**")  # 0.6 points lost
    assert (
        "-0.60 points"
        in seed004.claims(Fake({keys["hylo"]: {"final_accuracy": 0.944}, keys["none"]: {"final_accuracy": 0.950}}))[
            0
        ].measured
    )


def test_aggaware_union_verdict_needs_a_smaller_union_at_every_worker_count() -> None:
    def verdict(union32: float) -> str:
        sums = {}
        for w, it in seed001.WORKERS:
            for metric, spec in seed001.specs(w, it).items():
                agg = 1000.0 if metric == "magnitude" else (800.0 if w == 16 else union32)
                sums[spec.key] = {"mean_agg_bytes": agg, "mean_iter_time_s": 1.0}
        return seed001.claims(Fake(sums))[0].verdict

    assert verdict(900.0).startswith("**holds**")
    assert verdict(1100.0).startswith("**does not hold**")


def test_gradient_shape_of_a_normal_and_a_laplace_sample() -> None:
    g = torch.Generator().manual_seed(0)
    normal = gradients.shape_of("n", torch.randn(2_000_000, generator=g))
    assert normal.within_1 == pytest.approx(0.6827, abs=0.002)  # P(|z| <= 1) of a normal
    assert normal.within_3 == pytest.approx(0.9973, abs=0.0005)
    assert normal.kurtosis == pytest.approx(0.0, abs=0.02)
    u = torch.rand(2_000_000, generator=g, dtype=torch.float64) - 0.5
    laplace = gradients.shape_of("l", -torch.sign(u) * torch.log1p(-2 * u.abs()))  # inverse CDF, b = 1
    # std = b sqrt(2): P(|x| <= std) = 1 - exp(-sqrt 2) = 0.7569; excess kurtosis 3
    assert laplace.within_1 == pytest.approx(0.7569, abs=0.002)
    assert laplace.kurtosis == pytest.approx(3.0, abs=0.1)


def test_data_rows_are_the_measured_rows_only() -> None:
    lines = [
        "| codec | ratio |",
        "| :--- | ---: |",
        "| 2bit | 16.0x |",
        "| not run yet: `aiotsim run x` | - |",
        "",
        "text",
    ]
    assert CLI.data_rows(lines) == ["| 2bit | 16.0x |"]


def _tool(*args: str, home: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    if home is not None:
        env["HOME"] = str(home)  # no download cache: ~/.cache/aiotsim is empty
    return subprocess.run(
        [sys.executable, str(TOOL), *args], capture_output=True, text=True, env=env, cwd=ROOT, timeout=900
    )


def test_check_reruns_the_cheap_rows_and_equals_results_md(tmp_path: Path) -> None:
    """CI's guard on docs/RESULTS.md: the cheap rows rerun on this code equal the document's lines;
    a document with one of those numbers changed fails, naming the row."""
    runs = tmp_path / "runs"
    done = _tool("--check", "--runs", str(runs))
    if done.returncode == CLI.OTHER_MACHINE:
        pytest.skip(done.stdout.splitlines()[-1])  # RESULTS.md was made on another kind of CPU
    assert done.returncode == 0, done.stdout + done.stderr
    counted = next(ln for ln in done.stdout.splitlines() if "rows from" in ln)
    equal, total = (int(x) for x in counted.split()[1:4:2])
    assert equal == total >= 8  # the 4bit bytes table, PGC's AlexNet rows, claims rows
    doc = (ROOT / "docs" / "RESULTS.md").read_text().splitlines()
    row = next(ln for ln in doc if ln.startswith("| 4bit |"))  # a row --check makes
    changed = row.replace("x |", "1x |", 1)
    tampered = tmp_path / "RESULTS.md"
    # ... as made on this machine, whose rows it reproduced above (else a differing row on a CPU of
    # another name is OTHER_MACHINE, not a failure)
    here = f"{CLI.MACHINE}{CLI.machine_name()}."
    lines = [changed if ln == row else here if ln.startswith(CLI.MACHINE) else ln for ln in doc]
    tampered.write_text("\n".join(lines))
    again = _tool("--check", "--runs", str(runs), "--out", str(tampered))  # the runs are cached now
    assert again.returncode == 1
    assert f"not in RESULTS.md: {row}" in again.stdout


def test_full_without_data_files_is_a_clear_exit_2(tmp_path: Path) -> None:
    done = _tool("--full", "--estimate", "--device", "cpu", home=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "cannot start" in done.stdout and "data.path" in done.stdout
    assert "Traceback" not in done.stdout + done.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_full_on_cuda_without_a_gpu_is_a_clear_exit_2() -> None:
    done = _tool("--full", "--estimate", "--device", "cuda")
    assert done.returncode == 2 and "no CUDA GPU" in done.stdout


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--only", "pgc,nope"), "unknown section(s) nope"),
        (("--jobs", "0"), "0 must be at least 1"),
        (("--jobs", "two"), "'two' is not a whole number"),
        (("--full", "--device", "gpu"), "invalid choice: 'gpu'"),
        (("--check", "--out", "/nonexistent/RESULTS.md"), "which does not exist"),
        (("--runs", "README.md"), "is a file, not a directory of runs"),
    ],
)
def test_bad_arguments_are_a_clear_exit_2(args: tuple[str, ...], says: str) -> None:
    done = _tool(*args)
    assert done.returncode == 2 and says in done.stderr
    assert "Traceback" not in done.stderr


def test_full_estimate_times_a_row_and_extrapolates_to_its_iterations(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--full's estimate on a real row (LeNet/MNIST, 1,000 iterations) with small MNIST files in
    the download cache: a 5-iteration probe, extrapolated to the row's iterations and evaluations."""
    monkeypatch.setenv("HOME", str(tmp_path))  # the scenario reads ~/.cache/aiotsim/mnist-idx
    write_idx_dir(tmp_path / ".cache" / "aiotsim" / "mnist-idx", n_train=300, n_test=50, gz=True)
    spec = seed002.specs("pgc_lenet_mnist", full=True)["none"]
    assert spec.path.name == "pgc_lenet_mnist.toml"  # the paper-scale scenario, not the reduced one
    per, whole = full.estimate(spec, "cpu", tmp_path / "estimate")
    assert per > 0
    assert whole >= 1000 * per  # 1,000 iterations, plus start-up and evaluations


def test_full_report_lays_out_table_1_from_its_runs() -> None:
    """What --full writes once its runs exist: Tables 2 and 3 and the throughput at full scale,
    the paper's numbers beside the runs' (hand-made summaries here)."""
    summaries = {}
    for spec in full.specs():
        codec = spec.key.rsplit("-", 1)[1]
        summaries[spec.key] = {"final_accuracy": {"none": 0.95, "variance": 0.94, "pgc": 0.96}[codec],
                               "compression_ratio": {"none": 1.0, "variance": 20.0, "pgc": 30.0}[codec],
                               "throughput_samples_per_s": {"none": 10.0, "variance": 15.0, "pgc": 18.0}[codec],
                               "iterations": 1000, "model_params": 431_080, "model": "lenet-caffe"}  # fmt: skip
    assert all(s.path.name.startswith("pgc_") and "_reduced" not in s.path.name for s in full.specs())
    text = "\n".join(full.report(Fake(summaries)))
    assert "| MNIST LeNet, pgc | 96.86% | 96.00% | 1000 |" in text  # paper beside the run
    assert "| MNIST AlexNet | 1.39 M / 0.43 M (lenet-caffe) | 23.7x | 20.0x | 29.1x | 30.0x | - | 1000 |" in text
    assert "| MNIST ResNet | 10.0 | 1.50x | 1.80x | 1.30x | 1.20x | 1.50x |" in text
