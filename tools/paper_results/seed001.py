"""Seed 001, aggregation-aware sparsification (Wang, Liu, Wu, ICNCC 2018; abstract only): the size
of the union the server sends, the time per iteration and the convergence, against plain top-k."""

from __future__ import annotations

from .common import TARGET, reached
from .markdown import Claim, claim, claims_table, guarded, judge, kib, pct, seconds, table, untestable
from .runner import Runner, Spec

SCENARIO = "aggaware_ps16_reduced.toml"
METRICS = (
    ("top-k (metric=magnitude)", "magnitude"),
    ("agg-aware, metric=global", "global"),
    ("agg-aware, metric=persistence", "persistence"),
)
WORKERS = ((16, 300), (32, 100))  # (workers, iterations)


def specs(workers: int, iterations: int) -> dict[str, Spec]:
    """One run per selection metric at ``workers`` workers."""
    sets = (f"nodes.count={workers}", f"scenario.iterations={iterations}", "training.eval_every=25")
    return {
        metric: Spec(f"aggaware_ps{workers}-{metric}", SCENARIO, (f"compressor.metric={metric}", *sets))
        for _, metric in METRICS
    }


def rows(run: Runner, workers: int, iterations: int) -> list[list[str]]:
    """Union size at the server, time per iteration and convergence per selection metric."""
    got = specs(workers, iterations)
    base = run(got["magnitude"])
    out = []
    for label, metric in METRICS:
        s = run(got[metric])
        hit = reached(run, got[metric])
        out.append(
            [
                label,
                str(workers),
                kib(s["bytes_up"] / s["iterations"] / s["nodes"]),
                kib(s["mean_agg_bytes"]),
                f"{s['mean_agg_bytes'] / base['mean_agg_bytes']:.2f}",
                f"{s['mean_iter_time_s']:.3f}",
                seconds(hit[1] if hit else None),
                pct(s["final_accuracy"]),
                str(s["iterations"]),
                got[metric].command,
            ]
        )
    return out


def claims(run: Runner) -> list[Claim]:
    """The abstract's claims, judged on the runs (agg-aware's best metric against top-k)."""

    def by_metric(field: str) -> dict[int, dict[str, float]]:
        return {w: {m: float(run(s)[field]) for m, s in specs(w, it).items()} for w, it in WORKERS}

    def union() -> tuple[str, str]:
        got = by_metric("mean_agg_bytes")
        ratio = {w: min(v["global"], v["persistence"]) / v["magnitude"] for w, v in got.items()}
        measured = "; ".join(f"{w} workers: union {r:.2f}x top-k's" for w, r in ratio.items())
        return measured, judge(all(r < 1 for r in ratio.values()), "a smaller union at every worker count")

    def iteration_time() -> tuple[str, str]:
        got = by_metric("mean_iter_time_s")
        ratio = {w: min(v["global"], v["persistence"]) / v["magnitude"] for w, v in got.items()}
        measured = "; ".join(f"{w} workers: {r:.2f}x top-k's s/iteration" for w, r in ratio.items())
        return measured, judge(all(r < 1 for r in ratio.values()), "shorter iterations at every worker count")

    def convergence() -> tuple[str, str]:
        w, it = WORKERS[0]
        got = {m: reached(run, s) for m, s in specs(w, it).items()}
        measured = ", ".join(f"{m} {seconds(h[1] if h else None)}" for m, h in got.items())
        top = got["magnitude"][1] if got["magnitude"] else float("inf")
        best = min((h[1] for m, h in got.items() if m != "magnitude" and h), default=float("inf"))
        return (
            f"{w} workers, simulated time to {pct(TARGET)}: {measured}",
            judge(best < top, "an agg-aware metric reaches the target sooner than top-k"),
        )

    here = "LeNet-5, embedded MNIST digits, 1% per worker, sparse union down"
    return [
        claim(
            "our proposed method can reduce the aggregated size for server",
            "not stated",
            f"{here}; 16 and 32 workers",
            union,
        ),
        claim(
            "the reduction in time per iteration",
            "not stated",
            f"{here}; workers 10 Mbit/s, server 100 Mbit/s",
            iteration_time,
        ),
        claim(
            "can make the convergence rate faster than traditional sparsification",
            "not stated",
            f"{here}; 16 workers, 300 iterations",
            convergence,
        ),
        untestable(
            "only a few gradients are significantly large and in a short period of time",
            "not stated",
            "per-iteration sets of each worker's largest indices, which a run does not "
            "record: a hook on the codec's selection through the Python API",
        ),
    ]


def section(run: Runner) -> list[str]:
    """Seed 001: the server's union size with top-k vs aggregation-aware selection."""
    lines = [
        "## Seed 001: aggregation-aware sparsification (Wang, Liu, Wu, ICNCC 2018)",
        "",
        "The seed is the abstract: with a parameter server the server's send cost is the union of the "
        "workers' sparse gradients, and workers can choose their indices so that the union shrinks. "
        "No numbers, model or cluster are given. Here: LeNet-5 on the embedded MNIST digits, each "
        f"worker sends 1% of its elements, the server sends the sparse union down (`{SCENARIO}`).",
        "",
    ]
    lines += claims_table(claims(run))
    head = [
        "selection",
        "workers",
        "up per node/iter",
        "union at server/iter",
        "union vs top-k",
        "s/iteration",
        f"simulated s to {pct(TARGET)}",
        "final accuracy",
        "iterations",
        "command",
    ]
    body = [r for w, it in WORKERS for r in guarded(lambda w=w, it=it: rows(run, w, it), len(head))]
    lines += table(head, body)
    lines.append(
        "Differences: the paper's model, data and cluster are not in the abstract; LeNet-5 on 4,000 "
        "embedded digits, 16 and 32 workers (server link 100 Mbit/s, workers 10 Mbit/s) are "
        "aiotsim's choices."
    )
    return lines + [""]
