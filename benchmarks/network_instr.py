"""Benchmark: the network engine's cost in CPU instructions per flow, against the bare SimPy loop.

The noise-free companion of ``benchmarks/network.py`` (same workloads: its ``network_setup`` and
``timeout_setup``). On a shared machine wall and CPU times of one case move by up to 1.6x from
run to run; instructions retired do not depend on the load. Each case runs twice under
``valgrind --tool=callgrind`` (one process each): once building the workload only, once building
and running it; the difference divided by the flows is the engine's instructions per flow
(``env.run`` only, the caller's generator processes included, as in the SimPy loop). The
ratio to the SimPy loop's instructions per flow is the issue's slow-down measured without noise;
it is not the wall ratio (the engine's heaps and dicts miss caches more than the loop's few
objects), so ``network.py`` stays the measure of time.

Needs ``valgrind`` on the PATH (about 50x slower than native: 1,000 nodes take about 30 s per
case). ``PYTHONHASHSEED`` is fixed so that set and dict orders, and so the counts, repeat.

Run: ``python benchmarks/network_instr.py [--nodes 1000] [--rounds 3] [--topologies star own hier]
[--transports ideal tcp] [--jobs 2]``
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
COLLECTED = re.compile(r"Collected\s*:\s*(\d+)")


def case_main(kind: str, transport: str, nodes: int, rounds: int, run: bool) -> None:
    """In the measured process: build one workload (``kind == "simpy"``: the bare loop's), and run it."""
    sys.path.insert(0, str(HERE))
    import network  # the sibling benchmark: same workloads

    if kind == "simpy":
        env, _ = network.timeout_setup(nodes, rounds)
    else:
        env, _ = network.network_setup(nodes, rounds, kind, transport)
    if run:
        env.run()


def instructions(kind: str, transport: str, nodes: int, rounds: int, run: bool) -> int:
    """Instructions (callgrind's ``Collected``) of one measured process."""
    cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, __file__]
    cmd += ["--case", kind, transport, str(nodes), str(rounds), "run" if run else "setup"]
    env = {**os.environ, "PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    found = COLLECTED.search(proc.stderr)
    if proc.returncode != 0 or found is None:
        raise SystemExit(f"valgrind failed on {kind}/{transport}/{nodes}: {proc.stderr[-2000:]}")
    return int(found.group(1))


def per_flow(kind: str, transport: str, nodes: int, rounds: int) -> float:
    """The run's instructions beyond its setup, per flow."""
    return (
        instructions(kind, transport, nodes, rounds, True) - instructions(kind, transport, nodes, rounds, False)
    ) / (nodes * rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[1000])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--topologies", nargs="+", default=["star", "own", "hier"], choices=["star", "own", "hier"])
    parser.add_argument("--transports", nargs="+", default=["ideal", "tcp"], choices=["ideal", "tcp"])
    parser.add_argument("--jobs", type=int, default=1, help="cases measured at once (each one process)")
    parser.add_argument("--case", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:
        kind, transport, nodes, rounds, mode = args.case
        case_main(kind, transport, int(nodes), int(rounds), mode == "run")
        return
    if shutil.which("valgrind") is None:
        print("valgrind is not on the PATH: install it (e.g. apt install valgrind) to count instructions")
        raise SystemExit(2)
    cases = [("simpy", "-", n) for n in args.nodes]
    cases += [(k, t, n) for n in args.nodes for k in args.topologies for t in args.transports]
    with ThreadPoolExecutor(max(args.jobs, 1)) as pool:
        counts = list(pool.map(lambda c: per_flow(c[0], c[1], c[2], args.rounds), cases))
    ref = {n: counts[i] for i, n in enumerate(args.nodes)}
    header = f"{'topo':>6} {'nodes':>6} {'transport':>9} {'instr/flow':>11} {'x simpy':>8}"
    print(f"instructions per flow of env.run (valgrind callgrind), {args.rounds} uploads per node")
    print(header)
    print("-" * len(header))
    for (kind, transport, n), count in zip(cases, counts, strict=True):
        print(f"{kind:>6} {n:>6} {transport:>9} {count:>11.0f} {count / ref[n]:>7.1f}x")
    print("x simpy = instructions per flow / those of the bare SimPy loop with the same processes")


if __name__ == "__main__":
    main()
