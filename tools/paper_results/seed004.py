"""Seed 004, Hylo (Peng, HUST master's thesis 2021; abstract only): the accuracy loss and the
speed-up over existing methods, on the largest model that trains here in minutes (alexnet)."""

from __future__ import annotations

from .common import (
    TARGET,
    accuracy_header,
    accuracy_rows,
    codec_specs,
    compare_header,
    compare_rows,
    mnist,
    plain,
    reached,
)
from .markdown import (
    Claim,
    claim,
    claims_table,
    guarded,
    judge,
    pct,
    points,
    seconds,
    speedup,
    table,
    times,
    untestable,
)
from .runner import Runner, Spec

EXISTING = ("2bit", "terngrad", "topk")  # MXNet's 2Bit (the thesis's platform) and two other standard codecs
CODECS = plain("hylo", *EXISTING, "none")


def bytes_specs(classes: int) -> dict[str, Spec]:
    """alexnet on CIFAR-10/100-shaped data, 4 workers: bytes and throughput."""
    return codec_specs(f"hylo_cifar{classes}_reduced.toml", CODECS)


def accuracy_specs() -> dict[str, Spec]:
    """alexnet on the embedded MNIST digits, 300 iterations (hylo, 2bit and none)."""
    codecs = plain("hylo", "2bit", "none")
    return codec_specs("hylo_cifar10_reduced.toml", codecs, mnist("alexnet", lr=0.01), tag="-mnist")


def claims(run: Runner) -> list[Claim]:
    """The abstract's claims, judged on the runs."""

    def accuracy_loss() -> tuple[str, str]:
        spec = accuracy_specs()
        h, n = run(spec["hylo"])["final_accuracy"], run(spec["none"])["final_accuracy"]
        return f"hylo {pct(h)}, none {pct(n)} ({points(h - n)})", judge(n - h < 0.005, "a loss under 0.5 points")

    def acceleration() -> tuple[str, str]:
        got = {c: {k: run(s) for k, s in bytes_specs(c).items()} for c in (10, 100)}
        up = {c: speedup(g["hylo"], g["none"]) for c, g in got.items()}
        measured = "; ".join(f"CIFAR-{c}-shaped: hylo/none {times(u, 2)}" for c, u in up.items())
        return measured, judge(all(u >= 1.2 for u in up.values()), "at least 1.2x none's throughput")

    def over_existing() -> tuple[str, str]:
        got = {c: {k: run(s) for k, s in bytes_specs(c).items()} for c in (10, 100)}
        up = {(c, e): speedup(g["hylo"], g[e]) for c, g in got.items() for e in EXISTING}
        measured = "; ".join(f"CIFAR-{c}: hylo/{e} {times(u, 2)}" for (c, e), u in up.items())
        return measured, judge(
            max(up.values()) > 1.0, f"faster than at least one existing method (best {times(max(up.values()), 2)})"
        )

    def time_to_accuracy() -> tuple[str, str]:
        spec = accuracy_specs()
        hit = {c: reached(run, spec[c]) for c in ("hylo", "2bit", "none")}
        measured = ", ".join(f"{c} {seconds(h[1] if h else None)}" for c, h in hit.items())
        t = {c: h[1] if h else float("inf") for c, h in hit.items()}
        return (
            f"simulated time to {pct(TARGET)}: {measured}",
            judge(t["hylo"] < t["2bit"], "hylo reaches the target before 2bit"),
        )

    return [
        claim(
            "the losses of accuracies are less than 0.5%",
            "CIFAR-10, CIFAR-100, ImageNet-1K on MXNet",
            "alexnet, embedded MNIST digits, 4 workers, 300 iterations",
            accuracy_loss,
        ),
        claim(
            "Hylo brings significant accelerations to distributed deep learning training tasks",
            "MXNet cluster",
            "alexnet, CIFAR-10/100-shaped data, 4 workers at 10 Mbit/s",
            acceleration,
        ),
        claim(
            "Compared with existing methods, Hylo can increase deep learning training speeds up to 30%",
            "MXNet cluster",
            "the same runs, against 2bit, terngrad and topk",
            over_existing,
        ),
        claim(
            "Compared with existing methods, Hylo can increase deep learning training speeds up to 30%",
            "MXNet cluster",
            "as training time: alexnet, embedded MNIST digits, against 2bit",
            time_to_accuracy,
        ),
        untestable(
            "Some representative data-sets (such as CIFAR10, CIFAR100 and ImageNet-1K (ILSVRC 2012))",
            "ImageNet-1K",
            "the ImageNet files (~150 GB) and GPUs; CIFAR-10/100 files and a GPU for the CIFAR rows at full length",
        ),
    ]


def section(run: Runner) -> list[str]:
    """Seed 004 (Hylo against existing codecs)."""
    lines = [
        "## Seed 004: Hylo (Peng, HUST thesis 2021)",
        "",
        "The seed is the thesis abstract: layers below a parameter-count threshold go uncompressed; "
        "conv layers send their most important kernels at a rate adapted to the layer's size, the "
        "rest accumulated locally; fully-connected layers are 2-bit quantized with a threshold "
        "adapted to the layer's gradients, the error accumulated locally. Its numbers are two "
        "bounds: accuracy loss under 0.5%, training up to 30% faster than existing methods. Here "
        "alexnet (conv layers and large fc layers, the two kinds Hylo treats differently) is the "
        "largest model that trains in minutes on this CPU.",
        "",
    ]
    lines += claims_table(claims(run))
    for c in (10, 100):
        lines += [f"CIFAR-{c}-shaped random data, alexnet, 4 workers (`hylo_cifar{c}_reduced.toml`):", ""]
        lines += table(compare_header("hylo"), guarded(lambda c=c: compare_rows(run, bytes_specs(c)), 7))
    lines += ["Accuracy and convergence, alexnet on the embedded MNIST digits, 4 workers, 300 iterations:", ""]
    lines += table(accuracy_header(), guarded(lambda: accuracy_rows(run, accuracy_specs()), 8))
    lines.append(
        "Differences: the thesis's models and cluster are not in the abstract; alexnet and 4 workers "
        "at 10 Mbit/s are aiotsim's choices; the CIFAR-shaped runs use random labels, so accuracy is "
        "measured on MNIST digits instead."
    )
    return lines + [""]
