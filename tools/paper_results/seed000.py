"""Seed 000, 4Bit (Jiang, Fu, Peng, Zhu, Computer Science 2020; abstract only): 4Bit against MXNet's
2Bit in speed, accuracy and convergence, on models of three sizes."""

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
from .markdown import Claim, claim, claims_table, guarded, judge, pct, points, speedup, table, times, untestable
from .runner import Runner, Spec

SCENARIO = "fourbit_cifar10_reduced.toml"
CODECS = plain("2bit", "4bit", "none")
MODELS = ("lenet5", "lenet-caffe", "alexnet")  # 62 k, 431 k and 1.37 M parameters


def bytes_specs() -> dict[str, Spec]:
    """resnet20 on CIFAR-10-shaped data, 4 workers: bytes and throughput (cheap: ``--check``)."""
    return codec_specs(SCENARIO, CODECS, check=True)


def model_specs(model: str) -> dict[str, Spec]:
    """The accuracy runs of one model on the embedded MNIST digits."""
    return codec_specs(SCENARIO, CODECS, mnist(model), tag=f"-mnist-{model}")


def claims(run: Runner) -> list[Claim]:
    """The abstract's claims, judged on the runs."""

    def acceleration() -> tuple[str, str]:
        got = {c: run(s) for c, s in bytes_specs().items()}
        r = speedup(got["4bit"], got["2bit"])
        measured = (
            f"4bit/2bit throughput {times(r, 2)} (4bit/none {times(speedup(got['4bit'], got['none']), 2)}, "
            f"2bit/none {times(speedup(got['2bit'], got['none']), 2)})"
        )
        return measured, judge(0.8 <= r < 1.0, "4bit slower than 2bit by less than 20%")

    def accuracy() -> tuple[str, str]:
        acc = {m: {c: run(s)["final_accuracy"] for c, s in model_specs(m).items()} for m in MODELS}
        measured = "; ".join(f"{m}: 4bit {pct(a['4bit'])}, 2bit {pct(a['2bit'])}" for m, a in acc.items())
        return measured, judge(all(a["4bit"] > a["2bit"] for a in acc.values()), "4bit above 2bit on every model")

    def convergence() -> tuple[str, str]:
        hits = {m: {c: reached(run, s) for c, s in model_specs(m).items()} for m in MODELS}
        never = 10**9

        def it(h: tuple[int, float] | None) -> int:
            return h[0] if h else never

        measured = "; ".join(
            f"{m}: 4bit {h['4bit'][0] if h['4bit'] else 'never'}, 2bit {h['2bit'][0] if h['2bit'] else 'never'}"
            for m, h in hits.items()
        )
        ok = all(it(h["4bit"]) <= it(h["2bit"]) for h in hits.values()) and any(h["4bit"] for h in hits.values())
        return f"iterations to {pct(TARGET)}: {measured}", judge(ok, "4bit reaches the target no later on every model")

    def larger() -> tuple[str, str]:
        gap = {
            m: run(s["none"])["final_accuracy"] - run(s["2bit"])["final_accuracy"]
            for m, s in ((m, model_specs(m)) for m in MODELS)
        }
        adv = {
            m: run(s["4bit"])["final_accuracy"] - run(s["2bit"])["final_accuracy"]
            for m, s in ((m, model_specs(m)) for m in MODELS)
        }
        measured = "; ".join(f"{m}: 2bit {points(-gap[m])} vs none, 4bit {points(adv[m])} vs 2bit" for m in MODELS)
        ok = gap[MODELS[-1]] > gap[MODELS[0]] and adv[MODELS[-1]] > adv[MODELS[0]]
        return measured, judge(ok, f"2bit's loss and 4bit's gain both larger on {MODELS[-1]} than on {MODELS[0]}")

    here = f"{', '.join(MODELS)} on the embedded MNIST digits, 4 workers, 300 iterations"
    return [
        claim(
            "although 4Bit is slightly lower than the 2Bit method in terms of acceleration",
            "not stated (MXNet cluster)",
            "resnet20, CIFAR-10-shaped data, 4 workers at 10 Mbit/s",
            acceleration,
        ),
        claim("its accuracy is higher", "not stated", here, accuracy),
        claim(
            "this method can approximate the gradient more finely, thus improving the accuracy of training "
            "results and convergence speed",
            "not stated",
            here,
            convergence,
        ),
        claim(
            "too high compression ratio will lead to decline in accuracy and convergence speed, especially for "
            "larger network models",
            "not stated",
            here,
            larger,
        ),
        untestable(
            "different approximation thresholds are selected according to the gradient characteristics of each "
            "layer of the network model, which makes the compressed values more reasonable, and finally improves "
            "the convergence speed and final accuracy",
            "not stated",
            "an ablation: 4Bit with one threshold set for every layer, which aiotsim's codec does not offer (its "
            "thresholds come from each layer's statistics by construction); the 4bit/2bit rows above mix the two "
            "effects (bits and thresholds)",
        ),
    ]


def section(run: Runner) -> list[str]:
    """Seed 000 (4Bit vs 2Bit)."""
    lines = [
        "## Seed 000: 4Bit (Jiang, Fu, Peng, Zhu, Computer Science 2020)",
        "",
        "The seed is the abstract: 4 bits per value with several thresholds chosen per layer from the "
        "layer's gradient statistics, against MXNet's 2Bit (one threshold, 0.5 by default). No "
        "numbers, models or data sets are given, so every setting here is aiotsim's choice: CIFAR-10-"
        "shaped random data for bytes and speed; three models of growing size on the embedded MNIST "
        "digits for accuracy and convergence. Only the uplink is compressed (as in MXNet).",
        "",
    ]
    lines += claims_table(claims(run))
    lines += [f"Bytes and throughput: resnet20, 4 workers, random CIFAR-10-shaped data (`{SCENARIO}`):", ""]
    lines += table(compare_header("2bit"), guarded(lambda: compare_rows(run, bytes_specs()), 7))
    for model in MODELS:
        lines += [f"Accuracy and convergence, {model} on the embedded MNIST digits, 300 iterations:", ""]
        lines += table(accuracy_header(), guarded(lambda model=model: accuracy_rows(run, model_specs(model)), 8))
    lines.append(
        "Differences: the paper's models, data sets and cluster are not in the abstract. 2Bit uses "
        "MXNet's default threshold 0.5 at every layer; with gradients of 1e-3 to 1e-2 most values stay "
        "in its residual for many steps, which is MXNet's behaviour and the weakness 4Bit's per-layer "
        "thresholds address."
    )
    return lines + [""]
