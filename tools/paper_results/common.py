"""Tables several seeds share: one row per codec of a scenario (bytes and throughput), and the
accuracy runs on the embedded MNIST digits."""

from __future__ import annotations

from collections.abc import Sequence

from .markdown import first_at, kib, pct, seconds, speedup, times
from .runner import Runner, Spec, Summary

TARGET = 0.90  # accuracy at which "convergence speed" claims are judged (LeNet-class on MNIST digits)
ACCURACY_ITERATIONS = 300


def mnist(model: str, iterations: int = ACCURACY_ITERATIONS, lr: float = 0.02) -> tuple[str, ...]:
    """Overrides that turn a reduced CIFAR-shaped scenario into an accuracy run on the embedded
    MNIST digits (4,000 train, 1,000 test) with ``model``, evaluated every 25 iterations."""
    return (
        "data.dataset=mnist",
        f"model.name={model}",
        f"scenario.iterations={iterations}",
        f"training.lr={lr}",
        "training.eval_every=25",
    )


Codecs = Sequence[tuple[str, tuple[str, ...]]]  # (label, overrides naming the codec and its parameters)


def plain(*names: str) -> list[tuple[str, tuple[str, ...]]]:
    """Codecs at their scenario's or their default parameters."""
    return [(n, (f"compressor.name={n}",)) for n in names]


def codec_specs(
    scenario: str, codecs: Codecs, extra: tuple[str, ...] = (), tag: str = "", check: bool = False
) -> dict[str, Spec]:
    """One spec per codec of ``scenario`` (+ ``extra`` overrides), keyed by the codec's label."""
    stem = scenario.removesuffix(".toml")
    return {c: Spec(f"{stem}{tag}-{slug(c)}", scenario, (*own, *extra), check=check) for c, own in codecs}


def slug(label: str) -> str:
    """A codec label as a directory name: ``fft keep=0.05`` -> ``fft-keep0.05``."""
    return label.replace(" ", "-").replace("=", "")


def compare_header(first: str) -> list[str]:
    """Header of :func:`compare_rows`."""
    return ["codec", "uplink ratio", "up per node/iter", "samples/s", f"vs {first}", "iterations", "command"]


def compare_rows(run: Runner, specs: dict[str, Spec]) -> list[list[str]]:
    """One row per codec: ratio, uplink bytes per node and iteration, throughput and its ratio to
    the first codec's."""
    got = {c: run(s) for c, s in specs.items()}
    base = next(iter(got.values()))
    rows = []
    for c, s in got.items():
        per_node = s["bytes_up"] / s["iterations"] / s["nodes"]
        rows.append(
            [
                c,
                times(s["compression_ratio"]),
                kib(per_node),
                f"{s['throughput_samples_per_s']:.1f}",
                times(speedup(s, base), 2),
                str(s["iterations"]),
                specs[c].command,
            ]
        )
    return rows


def accuracy_header() -> list[str]:
    """Header of :func:`accuracy_rows`."""
    return [
        "codec",
        "uplink ratio",
        "final accuracy",
        f"iterations to {pct(TARGET)}",
        f"simulated s to {pct(TARGET)}",
        "samples/s",
        "iterations",
        "command",
    ]


def reached(run: Runner, spec: Spec) -> tuple[int, float] | None:
    """``(iterations, simulated s)`` at which ``spec``'s run first evaluated at :data:`TARGET` or above."""
    run(spec)  # the run must exist (or be recorded) before its evaluations are read
    return first_at(run.evals(spec), TARGET)


def accuracy_rows(run: Runner, specs: dict[str, Spec]) -> list[list[str]]:
    """One row per codec: ratio, final accuracy and when :data:`TARGET` was first reached."""
    rows = []
    for c, spec in specs.items():
        s: Summary = run(spec)
        hit = reached(run, spec)
        rows.append(
            [
                c,
                times(s["compression_ratio"]),
                pct(s["final_accuracy"]),
                str(hit[0]) if hit else "never",
                seconds(hit[1] if hit else None),
                f"{s['throughput_samples_per_s']:.1f}",
                str(s["iterations"]),
                spec.command,
            ]
        )
    return rows
