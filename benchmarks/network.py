"""Benchmark: speed of the network engine alone (no learning), against a bare SimPy loop.

Three topologies of N nodes (10 Mbit/s uplinks, 10 ms): ``star``, whose uploads all cross one
shared server link (100 Mbit/s); ``own``, where each node has only its own links to and from the
server (no shared link); ``hier``, gateways of 100 nodes each (a 20 Mbit/s backhaul per gateway, a
100 Mbit/s server link shared by all). Two workloads (``--workload``):

* ``uploads`` (default): each node uploads ``ROUNDS`` payloads back to back to the server, sizes
  drawn from a seeded uniform 50..150 KB, so N flows are in flight at once and they start and
  finish at distinct times;
* ``sync``: a synchronous round's traffic, ``ROUNDS`` times: the server sends a LeNet-5 model
  (61,706 fp32 parameters, 246,824 B) to every node at once, each node computes for 50 ms and
  uploads a gradient of the same size, and the next round starts when every upload has arrived
  (``scenarios/iot10k.toml`` with ``none``: N equal flows start together, twice a round).

Measured: :class:`aiotsim.network.Network` under ``transport = "ideal"`` and ``"tcp"`` (windows,
rounds, slow start), and ``tcp-fifo`` (TCP with ``sharing = "fifo"``: drop-tail queues, every flow
stepped round by round), against ``simpy``: the same processes with each "flow" one bare
``env.timeout``. ``--collector run`` runs both sides under the simulator's garbage-collector
policy (:func:`aiotsim.sim.runner.quiet_collector`, as ``aiotsim run`` does) instead of Python's
default.

Reported: flows completed per wall second and the slow-down against the plain SimPy loop (target
of issue 13: <= 10x at 1,000 and 10,000 concurrent flows), in wall time and in CPU time (the
process's, which other load on a shared machine disturbs less). One run is at the mercy of the
machine's noise (and a process's first run pays its warm-up: a star of 1,000 nodes took 0.20 to
0.32 s from run to run), so the loop's time is the best of ``--ref-repeats`` runs and each network
case's the best of ``--repeats``: both sides measured alike.

Run: ``python benchmarks/network.py [--nodes 1000 10000] [--rounds 3] [--topologies star own hier]
[--transports ideal tcp tcp-fifo] [--workload uploads|sync] [--collector default|run] [--ref-repeats 5]
[--repeats 3]``
"""

from __future__ import annotations

import argparse
import contextlib
import time
from collections.abc import Iterator

import numpy as np
import simpy

from aiotsim.network import Link, Network, Topology

UPLINK_BPS = 10e6  # bits/s, each node's own uplink
SERVER_BPS = 100e6  # bits/s, the shared server ingress link
BACKHAUL_BPS = 20e6  # bits/s, a gateway's uplink
GATEWAY_NODES = 100  # nodes per gateway (hier)
LATENCY_S = 0.01  # s, one way
MODEL_BYTES = 61_706 * 4  # LeNet-5's fp32 parameters: the sync workload's download and upload
COMPUTE_S = 0.05  # s, a node's compute between its download and its upload (sync workload)
WORKLOADS = ("uploads", "sync")
TRANSPORTS = ("ideal", "tcp", "tcp-fifo")  # tcp-fifo: TCP through drop-tail FIFO queues (sharing = "fifo")


def own_links(n_nodes: int) -> Topology:
    """Each node with its own uplink and downlink to the server and nothing shared."""
    topo = Topology("own")
    topo.add_node("server", "server")
    for i in range(n_nodes):
        topo.add_node(f"node{i}", "node")
        topo.add_link(f"node{i}", "server", Link(f"node{i}.up", UPLINK_BPS, LATENCY_S))
        topo.add_link("server", f"node{i}", Link(f"node{i}.down", UPLINK_BPS, LATENCY_S))
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


def network_run(
    n_nodes: int, rounds: int, kind: str, transport: str, workload: str = "uploads", policy: str = "default"
) -> tuple[int, float, float]:
    """Run the workload on :class:`Network`; return (flows completed, wall s, CPU s)."""
    env, net = network_setup(n_nodes, rounds, kind, transport, workload=workload)
    wall, cpu = timed_run(env, policy)
    return len(net.transfers), wall, cpu


def timed_run(env: simpy.Environment, policy: str) -> tuple[float, float]:
    """Run ``env`` to its end under the collector ``policy``; return (wall s, CPU s)."""
    with collector(policy):
        t0, c0 = time.perf_counter(), time.process_time()
        env.run()
        return time.perf_counter() - t0, time.process_time() - c0


def make_network(env: simpy.Environment, topo: Topology, seed: int, transport: str) -> Network:
    """The network of a case: ``tcp-fifo`` is TCP through drop-tail FIFO queues (default
    1,000-packet buffers, ``sharing = "fifo"``), ``tcp`` and ``ideal`` the default sharing."""
    if transport == "tcp-fifo":
        return Network(env, topo, seed=seed, transport="tcp", sharing="fifo")
    return Network(env, topo, seed=seed, transport=transport)


def network_setup(
    n_nodes: int, rounds: int, kind: str, transport: str, seed: int = 0, workload: str = "uploads"
) -> tuple[simpy.Environment, Network]:
    """The workload's environment, network and node processes, not yet run."""
    if workload == "sync":
        return sync_setup(n_nodes, rounds, kind, transport, seed)
    rng = np.random.default_rng(seed)
    sizes = rng.integers(50_000, 150_001, size=(n_nodes, rounds))  # bytes
    env = simpy.Environment()
    topo = make_topology(kind, n_nodes)
    net = make_network(env, topo, seed, transport)
    nodes = list(topo.nodes)[:n_nodes]

    def node(i: int):  # type: ignore[no-untyped-def]
        for r in range(rounds):
            yield net.send(nodes[i], "server", int(sizes[i, r]), tag=f"{i}/{r}")

    for i in range(len(nodes)):
        env.process(node(i))
    return env, net


def sync_setup(
    n_nodes: int, rounds: int, kind: str, transport: str, seed: int = 0
) -> tuple[simpy.Environment, Network]:
    """The sync workload on :class:`Network`: ``rounds`` rounds of a model to every node at once,
    a compute, and a gradient of the same size back; not yet run."""
    env = simpy.Environment()
    topo = make_topology(kind, n_nodes)
    net = make_network(env, topo, seed, transport)
    nodes = list(topo.nodes)[:n_nodes]

    def node(name: str, r: int):  # type: ignore[no-untyped-def]
        yield net.send("server", name, MODEL_BYTES, tag=f"model/{r}")
        yield env.timeout(COMPUTE_S)
        yield net.send(name, "server", MODEL_BYTES, tag=f"grad/{r}")

    def server():  # type: ignore[no-untyped-def]
        for r in range(rounds):
            yield env.all_of([env.process(node(name, r)) for name in nodes])

    env.process(server())
    return env, net


def timeout_run(
    n_nodes: int, rounds: int, workload: str = "uploads", policy: str = "default"
) -> tuple[int, float, float]:
    """The reference: same processes, each 'flow' one plain timeout; return (events, wall s, CPU s)."""
    env, count = timeout_setup(n_nodes, rounds, workload=workload)
    wall, cpu = timed_run(env, policy)
    return count[0], wall, cpu


def timeout_setup(
    n_nodes: int, rounds: int, seed: int = 0, workload: str = "uploads"
) -> tuple[simpy.Environment, list[int]]:
    """The reference's environment and processes, not yet run, and its counter of finished 'flows'."""
    if workload == "sync":
        return sync_timeout_setup(n_nodes, rounds)
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


def sync_timeout_setup(n_nodes: int, rounds: int) -> tuple[simpy.Environment, list[int]]:
    """The sync workload's reference: the same processes, each transfer one timeout of the time
    the model takes on a node's own link (equal for all, as the flows are)."""
    env = simpy.Environment()
    count = [0]
    transfer_s = MODEL_BYTES * 8 / UPLINK_BPS + LATENCY_S  # s

    def node():  # type: ignore[no-untyped-def]
        yield env.timeout(transfer_s)
        count[0] += 1
        yield env.timeout(COMPUTE_S)
        yield env.timeout(transfer_s)
        count[0] += 1

    def server():  # type: ignore[no-untyped-def]
        for _ in range(rounds):
            yield env.all_of([env.process(node()) for _ in range(n_nodes)])

    env.process(server())
    return env, count


@contextlib.contextmanager
def collector(policy: str) -> Iterator[None]:
    """Python's garbage collector as it is (``default``) or as ``aiotsim run`` tunes it (``run``)."""
    if policy == "run":
        from aiotsim.sim.runner import quiet_collector

        with quiet_collector():
            yield
    else:
        yield


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--topologies", nargs="+", default=["star", "own", "hier"], choices=["star", "own", "hier"])
    parser.add_argument("--transports", nargs="+", default=["ideal", "tcp"], choices=TRANSPORTS)
    parser.add_argument("--workload", default="uploads", choices=WORKLOADS, help="the traffic (module docstring)")
    parser.add_argument("--collector", default="default", choices=("default", "run"), help="garbage-collector policy")
    parser.add_argument("--ref-repeats", type=int, default=5, help="runs of the SimPy loop (its best is kept)")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each network case (its best is kept)")
    args = parser.parse_args()
    print(
        f"{UPLINK_BPS / 1e6:g} Mbit/s node uplinks; star: shared {SERVER_BPS / 1e6:g} Mbit/s server link;"
        f" own: no shared link; hier: {GATEWAY_NODES} nodes per {BACKHAUL_BPS / 1e6:g} Mbit/s gateway;"
        + (
            f" {args.rounds} uploads of 50-150 KB per node"
            if args.workload == "uploads"
            else f" {args.rounds} sync rounds: {MODEL_BYTES:,} B to every node at once and back"
        )
        + f"; garbage collector: {args.collector}"
    )
    header = f"{'topo':>5} {'nodes':>6} {'flows':>7} {'transport':>9} {'wall s':>8} {'flows/s':>9}"
    header += f" {'simpy s':>8} {'x simpy':>8} {'cpu x':>6}"
    print(header)
    print("-" * len(header))
    for n in args.nodes:
        flows_per_node = args.rounds * (2 if args.workload == "sync" else 1)
        runs = [timeout_run(n, args.rounds, args.workload, args.collector) for _ in range(max(args.ref_repeats, 1))]
        events, ref_wall, ref_cpu = runs[0][0], min(r[1] for r in runs), min(r[2] for r in runs)
        for kind in args.topologies:
            for transport in args.transports:
                reps = [
                    network_run(n, args.rounds, kind, transport, args.workload, args.collector)
                    for _ in range(max(args.repeats, 1))
                ]
                flows, wall, cpu = reps[0][0], min(r[1] for r in reps), min(r[2] for r in reps)
                assert flows == events == n * flows_per_node
                print(
                    f"{kind:>5} {n:>6} {flows:>7} {transport:>9} {wall:>8.3f} {flows / wall:>9.0f}"
                    f" {ref_wall:>8.4f} {wall / ref_wall:>7.1f}x {cpu / ref_cpu:>5.1f}x"
                )
    print("x simpy = wall / wall of a plain SimPy loop with the same processes and events;")
    print("cpu x = the same ratio in CPU time (process_time), less sensitive to other load on the machine")


if __name__ == "__main__":
    main()
