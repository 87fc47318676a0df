"""Simulator overhead on the default scenario (issue 2's speed target).

Runs ``scenarios/iot10.toml`` (10 nodes, LeNet-5, MNIST, 10 Mbit/s) end to end, then times the same
number of gradient computations alone (same model, same batch streams) in the same process, and
prints both wall times and their ratio. Target: ratio <= 1.3, i.e. the simulator, codecs and
bookkeeping add under 30% on top of the learning itself.

    python benchmarks/engine.py [--iterations 300] [--compressor none] [--scenario scenarios/iot10.toml]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from aiotsim.config import load_scenario
from aiotsim.sim.engine import Simulation


def gradients_alone(sim: Simulation, iterations: int) -> float:
    """Wall seconds of ``nodes x iterations`` gradient computations with nothing else around them."""
    t0 = time.perf_counter()
    for _ in range(iterations):
        for i in range(sim.n):
            x, y = sim.streams[i].next()
            sim.computer.gradient(None, x, y)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default=str(Path(__file__).parents[1] / "scenarios" / "iot10.toml"))
    ap.add_argument("--iterations", type=int, default=300)
    ap.add_argument("--compressor", action="append", default=None, help="repeatable; default: none, topk, 2bit")
    args = ap.parse_args()
    codecs = args.compressor or ["none", "topk", "2bit"]

    rows = []
    for codec in codecs:
        sc = load_scenario(args.scenario, compressor=codec, iterations=args.iterations)
        with tempfile.TemporaryDirectory() as tmp:
            sim = Simulation(sc, device="cpu")
            t0 = time.perf_counter()
            sim.run(Path(tmp) / "run")
            run_s = time.perf_counter() - t0
        ref = Simulation(sc, device="cpu")  # fresh streams and model: the same work, alone
        alone_s = gradients_alone(ref, args.iterations)
        rows.append((codec, run_s, alone_s, run_s / alone_s))

    print(f"iot10, {args.iterations} iterations x {sc.nodes.count} nodes, device cpu")
    print(f"{'compressor':<12}{'run wall s':>12}{'grads alone s':>15}{'ratio':>8}  target <= 1.30")
    for codec, run_s, alone_s, ratio in rows:
        print(f"{codec:<12}{run_s:>12.2f}{alone_s:>15.2f}{ratio:>8.2f}  {'ok' if ratio <= 1.3 else 'OVER'}")


if __name__ == "__main__":
    main()
