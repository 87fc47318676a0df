"""Benchmark: speed of the network engine alone (no learning), against a bare SimPy loop.

Three topologies of N nodes (10 Mbit/s uplinks, 10 ms): ``star``, whose uploads all cross one
shared server link (100 Mbit/s); ``own``, where each node has only its own link to the server (no
shared link); ``hier``, gateways of 100 nodes each (a 20 Mbit/s backhaul per gateway, a 100 Mbit/s
server link shared by all). Each node uploads ``ROUNDS`` payloads back to back to the server, sizes
drawn from a seeded uniform 50..150 KB, so N flows are in flight at once and they start and finish
at distinct times. Measured: :class:`aiotsim.network.Network` under ``transport = "ideal"`` and
``"tcp"`` (windows, rounds, slow start), against ``simpy``: the same processes with each "flow" one
bare ``env.timeout``.

Reported: flows completed per wall second and the slow-down against the plain SimPy loop (target
of issue 13: <= 10x at 1,000 and 10,000 concurrent flows), in wall time and in CPU time (the
process's, which other load on a shared machine disturbs less). One run is at the mercy of the
machine's noise (and a process's first run pays its warm-up: a star of 1,000 nodes took 0.20 to
0.32 s from run to run), so the loop's time is the best of ``--ref-repeats`` runs and each network
case's the best of ``--repeats``: both sides measured alike.

Run: ``python benchmarks/network.py [--nodes 1000 10000] [--rounds 3] [--topologies star own hier]
[--transports ideal tcp] [--ref-repeats 5] [--repeats 3]``
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import simpy

from aiotsim.network import Link, Network, Topology

UPLINK_BPS = 10e6  # bits/s, each node's own uplink
SERVER_BPS = 100e6  # bits/s, the shared server ingress link
BACKHAUL_BPS = 20e6  # bits/s, a gateway's uplink
GATEWAY_NODES = 100  # nodes per gateway (hier)
LATENCY_S = 0.01  # s, one way


def own_links(n_nodes: int) -> Topology:
    """Each node with its own uplink to the server and nothing shared."""
    topo = Topology("own")
    topo.add_node("server", "server")
    for i in range(n_nodes):
        topo.add_node(f"node{i}", "node")
        topo.add_link(f"node{i}", "server", Link(f"node{i}.up", UPLINK_BPS, LATENCY_S))
    return topo


def make_topology(kind: str, n_nodes: int) -> Topology:
    if kind == "star":
        return Topology.star(n_nodes, UPLINK_BPS, UPLINK_BPS, LATENCY_S, SERVER_BPS)
    if kind == "hier":
        groups = [GATEWAY_NODES] * (n_nodes // GATEWAY_NODES) or [n_nodes]
        return Topology.hierarchical(
            groups, UPLINK_BPS, UPLINK_BPS, LATENCY_S, BACKHAUL_BPS, BACKHAUL_BPS, LATENCY_S, server_bps=SERVER_BPS
        )
    return own_links(n_nodes)


def network_run(n_nodes: int, rounds: int, kind: str, transport: str, seed: int = 0) -> tuple[int, float, float]:
    """Run the workload on :class:`Network`; return (flows completed, wall s, CPU s)."""
    env, net = network_setup(n_nodes, rounds, kind, transport, seed)
    t0, c0 = time.perf_counter(), time.process_time()
    env.run()
    return len(net.transfers), time.perf_counter() - t0, time.process_time() - c0


def network_setup(
    n_nodes: int, rounds: int, kind: str, transport: str, seed: int = 0
) -> tuple[simpy.Environment, Network]:
    """The workload's environment, network and node processes, not yet run."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(50_000, 150_001, size=(n_nodes, rounds))  # bytes
    env = simpy.Environment()
    topo = make_topology(kind, n_nodes)
    net = Network(env, topo, seed=seed, transport=transport)
    nodes = list(topo.nodes)[:n_nodes]

    def node(i: int):  # type: ignore[no-untyped-def]
        for r in range(rounds):
            yield net.send(nodes[i], "server", int(sizes[i, r]), tag=f"{i}/{r}")

    for i in range(len(nodes)):
        env.process(node(i))
    return env, net


def timeout_run(n_nodes: int, rounds: int, seed: int = 0) -> tuple[int, float, float]:
    """The reference: same processes, each 'flow' one plain timeout; return (events, wall s, CPU s)."""
    env, count = timeout_setup(n_nodes, rounds, seed)
    t0, c0 = time.perf_counter(), time.process_time()
    env.run()
    return count[0], time.perf_counter() - t0, time.process_time() - c0


def timeout_setup(n_nodes: int, rounds: int, seed: int = 0) -> tuple[simpy.Environment, list[int]]:
    """The reference's environment and processes, not yet run, and its counter of finished 'flows'."""
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
    return env, count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--topologies", nargs="+", default=["star", "own", "hier"], choices=["star", "own", "hier"])
    parser.add_argument("--transports", nargs="+", default=["ideal", "tcp"], choices=["ideal", "tcp"])
    parser.add_argument("--ref-repeats", type=int, default=5, help="runs of the SimPy loop (its best is kept)")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each network case (its best is kept)")
    args = parser.parse_args()
    print(
        f"{UPLINK_BPS / 1e6:g} Mbit/s node uplinks; star: shared {SERVER_BPS / 1e6:g} Mbit/s server link;"
        f" own: no shared link; hier: {GATEWAY_NODES} nodes per {BACKHAUL_BPS / 1e6:g} Mbit/s gateway;"
        f" {args.rounds} uploads of 50-150 KB per node"
    )
    header = f"{'topo':>5} {'nodes':>6} {'flows':>7} {'transport':>9} {'wall s':>8} {'flows/s':>9}"
    header += f" {'simpy s':>8} {'x simpy':>8} {'cpu x':>6}"
    print(header)
    print("-" * len(header))
    for n in args.nodes:
        runs = [timeout_run(n, args.rounds) for _ in range(max(args.ref_repeats, 1))]
        events, ref_wall, ref_cpu = runs[0][0], min(r[1] for r in runs), min(r[2] for r in runs)
        for kind in args.topologies:
            for transport in args.transports:
                reps = [network_run(n, args.rounds, kind, transport) for _ in range(max(args.repeats, 1))]
                flows, wall, cpu = reps[0][0], min(r[1] for r in reps), min(r[2] for r in reps)
                assert flows == events == n * args.rounds
                print(
                    f"{kind:>5} {n:>6} {flows:>7} {transport:>9} {wall:>8.3f} {flows / wall:>9.0f}"
                    f" {ref_wall:>8.4f} {wall / ref_wall:>7.1f}x {cpu / ref_cpu:>5.1f}x"
                )
    print("x simpy = wall / wall of a plain SimPy loop with the same processes and events;")
    print("cpu x = the same ratio in CPU time (process_time), less sensitive to other load on the machine")


if __name__ == "__main__":
    main()
