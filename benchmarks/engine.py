"""Simulator overhead on the default scenario (issue 2's speed target).

Runs ``scenarios/iot10.toml`` (10 nodes, LeNet-5, MNIST, 10 Mbit/s) end to end, then times the same
number of gradient computations alone (same model, same batch streams) in the same process, and
prints both wall times and their ratio. Target: ratio <= 1.3, i.e. the simulator, codecs and
bookkeeping add under 30% on top of the learning itself.

    python benchmarks/engine.py [--iterations 300] [--compressor none] [--repeats 3]

The two measurements alternate (run, gradients alone, run, ...) and the medians are compared, so
a slow spell of this shared machine hits both sides.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from aiotsim.config import load_scenario
from aiotsim.results.store import RunWriter
from aiotsim.sim.runner import run_cluster
from aiotsim.sim.world import Cluster


def gradients_alone(sim: Cluster, iterations: int) -> float:
    """Wall seconds of ``nodes x iterations`` gradient computations with nothing else around them."""
    t0 = time.perf_counter()
    for _ in range(iterations):
        for i in range(sim.n):
            x, y = sim.nodes[i].local.stream.next()
            sim.learning.computer.gradient(None, x, y)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default=str(Path(__file__).parents[1] / "scenarios" / "iot10.toml"))
    ap.add_argument("--iterations", type=int, default=300)
    ap.add_argument("--compressor", action="append", default=None, help="repeatable; default: none, topk, 2bit")
    ap.add_argument("--repeats", type=int, default=3, help="alternating measurements of each side")
    args = ap.parse_args()
    codecs = args.compressor or ["none", "topk", "2bit"]

    rows = []
    for codec in codecs:
        sc = load_scenario(args.scenario, compressor=codec, iterations=args.iterations)
        runs, alone = [], []
        for _ in range(args.repeats):
            with tempfile.TemporaryDirectory() as tmp:
                sim = Cluster(sc, device="cpu")
                t0 = time.perf_counter()
                run_cluster(sim, RunWriter(Path(tmp) / "run", sc.to_toml()))
                runs.append(time.perf_counter() - t0)
            ref = Cluster(sc, device="cpu")  # fresh streams and model: the same work, alone
            alone.append(gradients_alone(ref, args.iterations))
        run_s, alone_s = statistics.median(runs), statistics.median(alone)
        rows.append((codec, run_s, alone_s, run_s / alone_s, max(alone) / min(alone)))

    print(
        f"{sc.scenario.name}, {args.iterations} iterations x {sc.nodes.count} nodes, device cpu, "
        f"median of {args.repeats}"
    )
    print(f"{'compressor':<12}{'run wall s':>12}{'grads alone s':>15}{'ratio':>8}{'alone spread':>14}  target <= 1.30")
    for codec, run_s, alone_s, ratio, spread in rows:
        verdict = "ok" if ratio <= 1.3 else "OVER"
        print(f"{codec:<12}{run_s:>12.2f}{alone_s:>15.2f}{ratio:>8.2f}{spread:>13.2f}x  {verdict}")


if __name__ == "__main__":
    main()
