"""Benchmark: wall time of the ns-3 packet-level engine against the flow engine, per simulated MB and per message.

Workload: one synchronous training round, ``--rounds`` times (default 2): the server sends every
node a model of ``--bytes`` bytes at once (default 246,824 B, LeNet-5's 61,706 fp32 parameters),
each node uploads a gradient of the same size as soon as its model has arrived (no compute time),
and the next round starts when every upload has arrived: ``2 x nodes x rounds`` messages.

Topologies, N = ``--nodes`` (default 10, 100 and 1,000):

* ``star``: :meth:`Topology.star`, 10 Mbit/s up and down node links, 5 ms one way, a 100 Mbit/s
  server link (each direction) shared by every node's flows;
* ``wifi``: :meth:`Topology.shared_medium`, as ``scenarios/wifi10.toml``: under the ns-3 engine an
  802.11n cell (2.4 GHz, 20 MHz, Minstrel-HT, stations within 10 m of the access point, 1 s of
  warm-up to associate before time 0) and a 100 Mbit/s access point to server link; the flow engine
  shares a 50 Mbit/s channel (one station's TCP goodput in that cell) max-min fairly, 1 ms one way.
  Simulated times therefore differ between the engines; the cost per MB and per message compares.

Engines: ``flow`` (:class:`aiotsim.network.Network`, ``transport = "tcp"``) and ``ns3``
(:class:`aiotsim.network.ns3_engine.Ns3Network`, every packet through ns-3.44 in a worker process).
Each case builds its network (``build s``; for ns3 the world in the process's worker, which
started, importing ns-3 and compiling the engine, for the first case and is reused by the next),
then times ``env.run()`` alone (``wall s``). The worker's start-up is measured once, on its own (a
new worker and a one-node star), and printed above the table.
``--seed`` (default 1, ``scenarios/wifi10.toml``'s) seeds both engines; the Wi-Fi stations'
positions and ns-3's draws depend on it, the star (no loss) does not.

Reported per case: messages, simulated MB of payload, simulated seconds, wall seconds, wall s per
simulated MB, wall ms per message, and on the ns3 row ``ns3/flow``, the ratio of the two engines'
wall seconds on the same case.

Guards: a case whose cost, extrapolated linearly in messages from the same engine and topology at
the previous N, exceeds ``--max-wall`` (default 600 s) is skipped, and the skip and its
extrapolated cost are printed (with tenfold steps of N: skipped once the smaller N took more than
max-wall / 10); so is a case whose smaller N was not feasible. An ns-3 case still running after
``--max-wall`` wall seconds is stopped (its worker killed) and reported as not feasible with how far
it got, and so is a case where ns-3 fails to build or to deliver (the engine's ``Ns3Error``): the
benchmark does not crash. ``build s`` is not guarded.

How far it scales (2 cores shared with two other aiotsim jobs, 2026-11-28, docs/SCALE.md): the
flow engine runs every case, 1,000 nodes in 0.5 s (0.07 to 0.14 ms per message). The ns-3 star
runs 10 and 100 nodes at 0.2 to 0.4 wall s per simulated MB, 470 to 1,300 times the flow engine;
1,000 nodes reached 43 s of simulated time (half the messages) in the 400 s allowed. The ns-3 Wi-Fi
cell costs 0.6 s/MB at 10 stations and 2.9 s/MB at 100 (contention: more frames, collisions and
retries per delivered byte): 1,000 stations on one access point are not feasible here.

Run: ``python benchmarks/ns3_engine.py [--nodes 10 100 1000] [--rounds 2] [--bytes 246824]
[--topologies star wifi] [--engines flow ns3] [--seed 1] [--max-wall 600]``
"""

from __future__ import annotations

import argparse
import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import simpy

from aiotsim.network import Network, Topology
from aiotsim.network.ns3_engine import Ns3Network, close_idle_workers

NODE_BPS = 10e6  # bits/s, a star node's up and down link
LATENCY_S = 0.005  # s, one way
SERVER_BPS = 100e6  # bits/s, the server link (each direction)
CHANNEL_BPS = 50e6  # bits/s, the shared medium's channel (the flow engine's; ns-3 runs 802.11n)
WIFI_LATENCY_S = 0.001  # s, one way over the air (the flow engine's; ns-3 times the air itself)
HEADER_BYTES = 52  # IPv4 20 + TCP 20 + timestamps 12: ns-3's 1,448-byte segments
MODEL_BYTES = 61_706 * 4  # LeNet-5's fp32 parameters
TOPOLOGIES = ("star", "wifi")
ENGINES = ("flow", "ns3")
MB = 1e6  # bytes


@dataclass
class Case:
    """One engine on one topology of ``nodes`` nodes: what it simulated and what it cost."""

    engine: str
    topo: str
    nodes: int
    messages: int = 0  # delivered
    payload: int = 0  # bytes delivered
    sim_s: float = 0.0
    wall_s: float = 0.0
    build_s: float = 0.0
    problem: str = ""  # why it is not feasible ("" when it ran to its end)


def make_topology(kind: str, n_nodes: int) -> Topology:
    """The case's topology (module docstring); ns-3's headers (52 B) in the flow engine's accounting."""
    if kind == "star":
        return Topology.star(n_nodes, NODE_BPS, NODE_BPS, LATENCY_S, SERVER_BPS, header_bytes=HEADER_BYTES)
    return Topology.shared_medium(
        n_nodes, CHANNEL_BPS, WIFI_LATENCY_S, server_bps=SERVER_BPS, header_bytes=HEADER_BYTES
    )


def make_network(engine: str, env: simpy.Environment, topo: Topology, seed: int) -> Any:
    if engine == "ns3":
        return Ns3Network(env, topo, seed=seed)
    return Network(env, topo, seed=seed, transport="tcp")


def sync_rounds(env: simpy.Environment, net: Any, nodes: list[str], rounds: int, nbytes: int, case: Case) -> None:
    """Start the workload (module docstring) in ``env``; ``case`` counts what arrives."""

    def arrived(transfer: Any) -> None:
        assert transfer.end_s >= transfer.start_s, transfer
        case.messages += 1
        case.payload += transfer.nbytes

    def node(name: str, r: int):  # type: ignore[no-untyped-def]
        arrived((yield net.send("server", name, nbytes, tag=f"model/{r}")))
        arrived((yield net.send(name, "server", nbytes, tag=f"grad/{r}")))

    def server():  # type: ignore[no-untyped-def]
        for r in range(rounds):
            yield env.all_of([env.process(node(name, r)) for name in nodes])

    env.process(server())


@contextlib.contextmanager
def watchdog(net: Any, seconds: float) -> Iterator[list[bool]]:
    """Kill an ns-3 network's worker after ``seconds`` of wall time: the pump's read then fails
    (Ns3Error) and the run ends. Yields a flag list, ``[True]`` once it fired."""
    fired = [False]
    proc = getattr(getattr(net, "_worker", None), "_proc", None)  # the engine's worker (private: no public handle)

    def kill() -> None:
        fired[0] = True
        proc.kill()

    timer = threading.Timer(seconds, kill) if proc is not None else None
    if timer is not None:
        timer.daemon = True
        timer.start()
    try:
        yield fired
    finally:
        if timer is not None:
            timer.cancel()


def run_case(engine: str, kind: str, n_nodes: int, args: argparse.Namespace) -> Case:
    """Build the case's network, then time ``env.run()`` alone; a failure or a run stopped by the
    watchdog becomes the case's ``problem``."""
    case = Case(engine, kind, n_nodes)
    rounds, max_wall = args.rounds, args.max_wall
    env = simpy.Environment()
    topo = make_topology(kind, n_nodes)
    t0 = time.perf_counter()
    try:
        net = make_network(engine, env, topo, args.seed)
    except Exception as exc:  # reported in the table, not raised
        case.build_s = time.perf_counter() - t0
        case.problem = f"build failed: {type(exc).__name__}: {str(exc)[:200]}"
        return case
    case.build_s = time.perf_counter() - t0
    try:
        sync_rounds(env, net, list(topo.nodes)[:n_nodes], rounds, args.bytes, case)
        with watchdog(net, max_wall) as fired:
            t0 = time.perf_counter()
            try:
                env.run()
            except Exception as exc:  # Ns3Error, or the worker killed by the watchdog
                case.problem = (
                    f"stopped after {max_wall:g} s of wall time"
                    if fired[0]
                    else f"{type(exc).__name__}: {str(exc)[:200]}"
                )
            case.wall_s = time.perf_counter() - t0
        case.sim_s = env.now
        expected = 2 * n_nodes * rounds
        if not case.problem and case.messages != expected:
            case.problem = f"only {case.messages} of {expected} messages arrived"
    finally:
        if engine == "ns3":
            net.close()
    return case


def startup_s(seed: int) -> float:
    """Wall seconds to start an ns-3 worker (import ns-3, compile the engine) and build a one-node star."""
    env = simpy.Environment()
    topo = make_topology("star", 1)
    close_idle_workers()  # a new worker, not one kept from an earlier world
    t0 = time.perf_counter()
    net = Ns3Network(env, topo, seed=seed)
    elapsed = time.perf_counter() - t0
    net.close()
    return elapsed


HEADER = (
    f"{'engine':>6} {'topo':>5} {'nodes':>6} {'msgs':>6} {'sim MB':>8} {'sim s':>8} {'build s':>8}"
    f" {'wall s':>8} {'s/MB':>8} {'ms/msg':>8} {'ns3/flow':>8}"
)


def row(case: Case, flow: Case | None) -> str:
    """The table's line for a case (``flow``: the flow engine's run of the same case, for the ratio)."""
    head = f"{case.engine:>6} {case.topo:>5} {case.nodes:>6}"
    if case.problem and case.messages == 0:
        return f"{head}  not feasible: {case.problem} (build {case.build_s:.1f} s)"
    mb = case.payload / MB
    line = (
        f"{head} {case.messages:>6} {mb:>8.1f} {case.sim_s:>8.2f} {case.build_s:>8.2f} {case.wall_s:>8.3f}"
        f" {case.wall_s / mb:>8.4f} {1e3 * case.wall_s / case.messages:>8.2f}"
    )
    if case.problem:
        return f"{line}  not feasible: {case.problem} (reached {case.sim_s:.2f} s simulated)"
    if case.engine == "ns3" and flow is not None and not flow.problem and flow.wall_s > 0:
        line += f" {case.wall_s / flow.wall_s:>7.0f}x"
    return line


def skip_reason(prev: Case | None, n_nodes: int, rounds: int, max_wall: float) -> str:
    """Why the case of ``n_nodes`` is skipped, given the same engine and topology's previous case; "" to run it."""
    if prev is None:
        return ""
    if prev.problem:
        return f"not feasible at {prev.nodes} nodes ({prev.problem[:90]})"
    messages = 2 * n_nodes * rounds
    extrapolated = prev.wall_s * messages / max(prev.messages, 1)
    if extrapolated > max_wall:
        return (
            f"{prev.nodes} nodes took {prev.wall_s:.1f} s: ~{extrapolated:,.0f} s extrapolated"
            f" (linear in messages) > --max-wall {max_wall:g} s"
        )
    return ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--bytes", type=int, default=MODEL_BYTES, help="model and gradient size, bytes")
    parser.add_argument("--topologies", nargs="+", default=list(TOPOLOGIES), choices=TOPOLOGIES)
    parser.add_argument("--engines", nargs="+", default=list(ENGINES), choices=ENGINES)
    parser.add_argument("--seed", type=int, default=1, help="both engines' seed (ns-3: RngRun seed + 1, positions)")
    parser.add_argument("--max-wall", type=float, default=600.0, help="wall seconds a case may take (see docstring)")
    args = parser.parse_args()
    print(
        f"star: {NODE_BPS / 1e6:g} Mbit/s node links, {LATENCY_S * 1e3:g} ms, {SERVER_BPS / 1e6:g} Mbit/s server link;"
        f" wifi: shared medium (flow: {CHANNEL_BPS / 1e6:g} Mbit/s channel; ns3: 802.11n HT20 cell);"
        f" {args.rounds} sync rounds of {args.bytes:,} B down and up per node; flow: transport tcp; seed {args.seed}"
    )
    if "ns3" in args.engines:
        print(f"ns-3 worker start-up (import + compile + a one-node world): {startup_s(args.seed):.2f} s", flush=True)
    print(HEADER)
    print("-" * len(HEADER), flush=True)
    run_table(args)
    print("wall s: env.run() only (build s: the network's construction; the ns-3 worker starts once, above);")
    print("s/MB: wall s per simulated MB of payload; ms/msg: wall ms per message; ns3/flow: ratio of wall s")


def run_table(args: argparse.Namespace) -> None:
    """Every case in order of topology, N, engine, printing each row as it ends."""
    last: dict[tuple[str, str], Case] = {}  # (engine, topology) -> its case at the previous N
    for kind in args.topologies:
        for n in sorted(args.nodes):
            flow: Case | None = None
            for engine in args.engines:
                reason = skip_reason(last.get((engine, kind)), n, args.rounds, args.max_wall)
                if reason:
                    print(f"{engine:>6} {kind:>5} {n:>6}  skipped: {reason}", flush=True)
                    continue
                case = run_case(engine, kind, n, args)
                last[(engine, kind)] = case
                flow = case if engine == "flow" else flow
                print(row(case, flow), flush=True)


if __name__ == "__main__":
    main()
