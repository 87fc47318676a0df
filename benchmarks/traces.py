"""Benchmark: cost of time-varying links in the network engine (no learning).

A star of N nodes whose uplinks replay a 1 ms-resolution Mahimahi trace (the shipped synthetic
``scenarios/traces/cellular.up``: ~2.2 Mbit/s mean, 271 rate changes per second),
each node from its own seeded offset, through a 100 Mbit/s server link. Every node uploads
``ROUNDS`` payloads of 250 KB back to back. The engine wakes at every capacity change of a traced
link carrying a flow, so its events grow with the number of traced links in use. Reported:
controller steps (rate recomputations) per simulated second, wall time per simulated second, for
the file's 1 ms resolution, the trace averaged over coarser windows (``network.trace_resolution_ms``)
and the same workload on constant links at the trace's mean rate.

Run: ``python benchmarks/traces.py [--nodes 1 10 100] [--rounds 4]``
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import simpy

from aiotsim.network import Link, Network, Topology
from aiotsim.network.traces import load_trace

TRACE = Path(__file__).resolve().parent.parent / "scenarios" / "traces" / "cellular.up"
SERVER_BPS = 100e6  # bits/s, the shared server ingress link
PAYLOAD = 250_000  # bytes per upload (LeNet-5's fp32 gradient is ~247 KB)


def star(n: int, traced: bool, resolution_s: float, seed: int = 0) -> Topology:
    """Nodes -> switch -> server; node uplinks traced (seeded offsets) or constant at the mean."""
    trace = load_trace(TRACE, resolution_s)
    rng = np.random.default_rng(seed)
    topo = Topology("star")
    topo.add_node("server", "server")
    topo.add_node("switch", "relay")
    topo.add_link("switch", "server", Link("server.in", SERVER_BPS))
    for i in range(n):
        topo.add_node(f"node{i}", "node", aggregator="server")
        # a whole number of trace windows (1 ms, or the resolution), as sim.topologies.stagger does
        grid = resolution_s or 1e-3
        up = trace.shifted(int(rng.integers(int(trace.period_s / grid))) * grid) if traced else None
        topo.add_link(f"node{i}", "switch", Link(f"node{i}.up", trace.mean_rate * 8, 0.03, trace=up))
    return topo


def run(n: int, rounds: int, traced: bool, resolution_s: float = 0.0) -> tuple[int, float, float]:
    """``(controller steps, wall s, simulated s)`` of the upload workload."""
    env = simpy.Environment()
    net = Network(env, star(n, traced, resolution_s))
    steps = [0]
    step = net._step

    def counted() -> None:
        steps[0] += 1
        step()

    net._step = counted  # type: ignore[method-assign]

    def node(i: int):
        for _ in range(rounds):
            yield net.send(f"node{i}", "server", PAYLOAD)

    for i in range(n):
        env.process(node(i))
    t0 = time.perf_counter()
    env.run()
    return steps[0], time.perf_counter() - t0, env.now


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, nargs="+", default=[1, 10, 100])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--resolution-ms", type=float, nargs="+", default=[0.0, 10.0, 100.0],
                    help="trace averaging windows to compare (0 = the file's 1 ms)")  # fmt: skip
    args = ap.parse_args()
    trace = load_trace(TRACE)
    changes = int(np.count_nonzero(np.diff(trace.rates))) + 1
    print(f"trace {TRACE.name}: {trace.starts.size} segments in {trace.period_s:g} s "
          f"({changes / trace.period_s:.0f} changes/s), mean {trace.mean_rate * 8 / 1e6:.3f} Mbit/s")  # fmt: skip
    print(f"{'nodes':>6} {'links':>12} {'sim s':>8} {'steps':>8} {'steps/sim s':>12} {'wall s':>8} {'wall/sim s':>10}")
    cases = [("constant", False, 0.0)] + [(f"trace {r:g} ms", True, r) for r in args.resolution_ms]
    for n in args.nodes:
        for kind, traced, res_ms in cases:
            steps, wall, sim = run(n, args.rounds, traced, res_ms * 1e-3)
            print(f"{n:>6} {kind:>12} {sim:>8.2f} {steps:>8} {steps / sim:>12.0f} {wall:>8.3f} {wall / sim:>10.4f}")


if __name__ == "__main__":
    main()
