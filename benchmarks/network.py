"""Benchmark: speed of the network engine alone (no learning).

Two topologies of N nodes (10 Mbit/s uplinks, 10 ms): ``star``, whose uploads all cross one
shared server link (100 Mbit/s), and ``own``, where each node has only its own link to the server
(no shared link: every flow is alone in its max-min component). Each node uploads ``ROUNDS``
payloads back to back, sizes drawn from a seeded uniform 50..150 KB, so N flows are in flight at
once and they start and finish at distinct times. Three engines run the same workload:

- ``simpy``: a plain SimPy loop, the same processes, each "flow" one bare ``env.timeout``;
- ``engine``: today's :class:`aiotsim.network.Network` (progressive filling over all flows in
  flight at every event);
- ``incr``: :class:`IncrementalNetwork` below, a minimal fluid engine over
  :class:`aiotsim.network.fairness.MaxMinAllocator` (rates recomputed per touched component,
  each flow drained lazily, completions in a heap); its arrival times are checked against the
  engine's (same wire bytes and latencies; max relative difference printed).

Reported: flows completed per wall second and the slow-down against the plain SimPy loop.

Run: ``python benchmarks/network.py [--nodes 10 100 1000] [--rounds 5] [--topologies star own]``
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import simpy

from aiotsim.network import Link, Network, Topology
from aiotsim.network.fairness import MaxMinAllocator
from aiotsim.network.overhead import PathFormat, path_format, wire_bytes

UPLINK_BPS = 10e6  # bits/s, each node's own uplink
SERVER_BPS = 100e6  # bits/s, the shared server ingress link
LATENCY_S = 0.01  # s, one way


class IncrementalNetwork:
    """A fluid engine over :class:`MaxMinAllocator` (no loss, no jitter: enough for this workload).

    The shape proposed for :class:`aiotsim.network.Network`: per-flow arrays indexed by the
    allocator's slots; a send adds a flow and asks for one zero-delay update; an update finishes
    the flows due now, asks the allocator which flows changed rate (``update_slots``), drains only
    those to now (each flow remembers when its bytes were last counted), sets their completion
    times, and keeps one timer at the earliest completion.
    """

    def __init__(self, env: simpy.Environment, topology: Topology) -> None:
        self.env = env
        self.topology = topology
        self.alloc = MaxMinAllocator({n: link.capacity_Bps for n, link in topology.links.items()})
        self.arrivals: list[tuple[str, float]] = []  # (tag, arrival s)
        self._meta: dict[int, tuple[int, float, str, simpy.Event]] = {}  # slot -> (key, delay s, tag, event)
        self._rem = np.zeros(0)  # wire bytes left at time _last, per slot
        self._rate = np.zeros(0)  # bytes/s
        self._last = np.zeros(0)  # s
        self._fin = np.zeros(0)  # s, completion time at the current rate (inf: none)
        self._routes: dict[tuple[str, str], tuple[PathFormat, dict[str, int]]] = {}
        self._next = 0
        self._timer_at = float("inf")
        self._pending = False

    def send(self, src: str, dst: str, nbytes: int, tag: str = "") -> simpy.Event:
        if (src, dst) not in self._routes:  # computed once per pair, as the engine does
            links = self.topology.route(src, dst)
            names: dict[str, int] = {}
            for link in links:
                names[link.name] = names.get(link.name, 0) + 1
            self._routes[src, dst] = (path_format(links), names)
        fmt, names = self._routes[src, dst]
        wire = wire_bytes(nbytes, fmt.mtu, fmt.header_bytes, fmt.loss, fmt.framing_bytes, fmt.acks_per_packet)
        key, self._next = self._next, self._next + 1
        slot = self.alloc.add_flow(key, list(names), list(names.values()))
        if slot >= len(self._rem):
            grow = self.alloc.n_slots - len(self._rem)
            arrays = (self._rem, self._rate, self._last)
            self._rem, self._rate, self._last = (np.append(a, np.zeros(grow)) for a in arrays)
            self._fin = np.append(self._fin, np.full(grow, np.inf))
        event = self.env.event()
        self._rem[slot], self._rate[slot], self._last[slot] = wire, 0.0, self.env.now
        self._meta[slot] = (key, fmt.latency_s, tag, event)
        if not self._pending:
            self._pending = True
            self.env.timeout(0).callbacks.append(self._step)
        return event

    def _step(self, _event: simpy.Event | None = None) -> None:
        self._pending = False
        now = self.env.now
        for slot in np.flatnonzero(self._fin <= now).tolist():
            self._finish(slot)
        slots, rates = self.alloc.update_slots()
        if slots.size:
            self._rem[slots] -= self._rate[slots] * (now - self._last[slots])  # old rate up to now
            self._rate[slots], self._last[slots] = rates, now
            self._fin[slots] = now + self._rem[slots] / rates
        nxt = float(self._fin.min(initial=np.inf))
        if nxt < self._timer_at:
            self._timer_at = nxt
            self.env.timeout(nxt - now).callbacks.append(self._on_timer)

    def _on_timer(self, _event: simpy.Event) -> None:
        if self.env.now >= self._timer_at:
            self._timer_at = float("inf")
            self._step()

    def _finish(self, slot: int) -> None:
        key, delay, tag, event = self._meta.pop(slot)
        self.alloc.remove_flow(key)
        self._fin[slot], self._rate[slot] = np.inf, 0.0

        def arrive(_e: simpy.Event | None = None) -> None:
            self.arrivals.append((tag, self.env.now))
            event.succeed()

        self.env.timeout(delay).callbacks.append(arrive)


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
    return own_links(n_nodes)


def network_run(
    n_nodes: int, rounds: int, seed: int = 0, kind: str = "star", engine: str = "engine"
) -> tuple[int, float, float, dict[str, float]]:
    """Run the workload; return (flows completed, wall s, simulated s, {tag: arrival s})."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(50_000, 150_001, size=(n_nodes, rounds))  # bytes
    env = simpy.Environment()
    topo = make_topology(kind, n_nodes)
    net = Network(env, topo, seed=seed) if engine == "engine" else IncrementalNetwork(env, topo)

    def node(i: int):  # type: ignore[no-untyped-def]
        for r in range(rounds):
            yield net.send(f"node{i}", "server", int(sizes[i, r]), tag=f"{i}/{r}")

    for i in range(n_nodes):
        env.process(node(i))
    t0 = time.perf_counter()
    env.run()
    wall = time.perf_counter() - t0
    if isinstance(net, Network):
        arrivals = {t.tag: t.end_s for t in net.transfers}
    else:
        arrivals = dict(net.arrivals)
    return len(arrivals), wall, env.now, arrivals


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
    parser.add_argument("--topologies", nargs="+", default=["star", "own"], choices=["star", "own"])
    parser.add_argument("--engines", nargs="+", default=["engine", "incr"], choices=["engine", "incr"])
    args = parser.parse_args()
    print(
        f"{UPLINK_BPS / 1e6:g} Mbit/s node uplinks; star: shared {SERVER_BPS / 1e6:g} Mbit/s server"
        f" link; own: no shared link; {args.rounds} uploads of 50-150 KB per node"
    )
    header = (
        f"{'topo':>5} {'nodes':>6} {'flows':>7} {'engine':>7} {'wall s':>8} {'flows/s':>9}"
        f" {'simpy wall s':>13} {'x simpy':>8} {'max rel diff':>13}"
    )
    print(header)
    print("-" * len(header))
    for kind in args.topologies:
        for n in args.nodes:
            events, ref_wall = timeout_run(n, args.rounds)
            base: dict[str, float] | None = None
            for engine in args.engines:
                flows, wall, _sim, arrivals = network_run(n, args.rounds, kind=kind, engine=engine)
                assert flows == events == n * args.rounds
                diff = "" if base is None else f"{max_rel_diff(base, arrivals):.1e}"
                base = base or arrivals
                print(
                    f"{kind:>5} {n:>6} {flows:>7} {engine:>7} {wall:>8.3f} {flows / wall:>9.0f}"
                    f" {ref_wall:>13.4f} {wall / ref_wall:>7.1f}x {diff:>13}"
                )
    print("x simpy = wall / wall of a plain SimPy loop with the same processes and events;")
    print("max rel diff = largest relative difference of an arrival time from the first engine's")


def max_rel_diff(a: dict[str, float], b: dict[str, float]) -> float:
    """Largest relative difference between the arrival times of the same tags."""
    return max(abs(a[k] - b[k]) / max(abs(a[k]), 1e-300) for k in a)


if __name__ == "__main__":
    main()
