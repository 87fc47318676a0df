"""Benchmark: speed of the network engine alone (no learning).

A star of N nodes (10 Mbit/s uplinks, 10 ms) whose uploads all cross one shared server link
(100 Mbit/s). Each node uploads ``ROUNDS`` payloads back to back, sizes drawn from a seeded uniform
50..150 KB, so flows start and finish at distinct times and every finish recomputes the max-min
rates of all flows in flight. Reported: flows completed per second of wall time, next to a plain
SimPy loop with the same number of processes and events (each "flow" a bare ``env.timeout``),
measured in the same run, and the ratio of the two.

Run: ``python benchmarks/network.py [--nodes 10 100 1000] [--rounds 5]``
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import simpy

from aiotsim.network import Network, Topology

UPLINK_BPS = 10e6  # bits/s, each node's own uplink
SERVER_BPS = 100e6  # bits/s, the shared server ingress link
LATENCY_S = 0.01  # s, one way


def network_run(n_nodes: int, rounds: int, seed: int = 0) -> tuple[int, float, float]:
    """Run the star workload; return (flows completed, wall s, simulated s)."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(50_000, 150_001, size=(n_nodes, rounds))  # bytes
    env = simpy.Environment()
    topo = Topology.star(n_nodes, UPLINK_BPS, UPLINK_BPS, LATENCY_S, SERVER_BPS)
    net = Network(env, topo, seed=seed)

    def node(i: int):  # type: ignore[no-untyped-def]
        for r in range(rounds):
            yield net.send(f"node{i}", "server", int(sizes[i, r]))

    for i in range(n_nodes):
        env.process(node(i))
    t0 = time.perf_counter()
    env.run()
    wall = time.perf_counter() - t0
    return len(net.transfers), wall, env.now


def timeout_run(n_nodes: int, rounds: int, seed: int = 0) -> tuple[int, float]:
    """The reference: same processes, each 'flow' one plain timeout; return (events, wall s)."""
    rng = np.random.default_rng(seed)
    durations = rng.uniform(0.05, 0.15, size=(n_nodes, rounds))  # s
    env = simpy.Environment()
    count = [0]

    def node(i: int):  # type: ignore[no-untyped-def]
        for r in range(rounds):
            yield env.timeout(float(durations[i, r]))
            count[0] += 1

    for i in range(n_nodes):
        env.process(node(i))
    t0 = time.perf_counter()
    env.run()
    return count[0], time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print(
        f"star, {UPLINK_BPS / 1e6:g} Mbit/s uplinks,"
        f" shared {SERVER_BPS / 1e6:g} Mbit/s server link,"
        f" {args.rounds} uploads of 50-150 KB per node"
    )
    header = (
        f"{'nodes':>6} {'flows':>7} {'sim s':>8} {'net wall s':>11} {'flows/s':>10}"
        f" {'simpy wall s':>13} {'timeouts/s':>11} {'ratio':>7}"
    )
    print(header)
    print("-" * len(header))
    for n in args.nodes:
        flows, wall, sim = network_run(n, args.rounds)
        events, ref_wall = timeout_run(n, args.rounds)
        assert flows == events == n * args.rounds
        rate, ref_rate = flows / wall, events / ref_wall
        print(
            f"{n:>6} {flows:>7} {sim:>8.2f} {wall:>11.3f} {rate:>10.0f}"
            f" {ref_wall:>13.4f} {ref_rate:>11.0f} {ref_rate / rate:>6.1f}x"
        )
    print("ratio = plain SimPy timeouts per wall second / network flows per wall second")


if __name__ == "__main__":
    main()
