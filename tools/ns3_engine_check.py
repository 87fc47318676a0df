"""Equality with ns-3 alone: the ns-3 engine against the standalone calibration driver, case by case.

    python tools/ns3_engine_check.py                  # the 75 lossless grid cases, flow by flow
    python tools/ns3_engine_check.py --quick          # a handful of them
    python tools/ns3_engine_check.py --jobs 2         # cases in parallel (each thread's ns-3 worker reused)
    python tools/ns3_engine_check.py --case 10000000,16,10   # chosen lossless cases (size,flows,ms)
    python tools/ns3_engine_check.py --lossy --quick  # lossy cases: means over realisations

Both sides build the same ns-3 world: the calibration's star (``aiotsim.network.calibrate_ns3``,
``flows`` clients on their own point-to-point links to a hub, a hub -> server link at the server's
rate with no delay, drop-tail queues of 1,000 packets, no queue disc) and TCP from the same
``set_up_tcp`` (CUBIC, IW 10, 1,448-byte segments, 4 MiB buffers, Linux's timers). The calibration
drives it with ``BulkSend`` applications in one C++ function; the engine
(:class:`~aiotsim.network.ns3_engine.Ns3Network`) builds it from an aiotsim
:class:`~aiotsim.network.topology.Topology` (``Topology.star``: ``switch`` is the hub, ``server.in``
/ ``server.out`` the server link) and carries every node's ``size`` bytes to ``server`` as
SimPy messages sent at t = 0, one new connection per message (``connection = "per-transfer"``,
as BulkSend). The socket buffers are set to the calibration's 4,194,304 bytes (``TcpParams``'
default is 4e6). Each flow's completion time (from its start) is compared with the calibration's,
flow by flow in sorted order: the issue asks for 1%.

One difference between the two set-ups is known: the calibration's ``PacketSink`` calls
``ShutdownSend`` on its listening socket, so each accepted socket closes when the client's FIN
arrives (the server sends FIN, the client ACKs it: one more 54-byte packet on the shared server link
per finished flow); the engine's receiving socket stays half open (no FIN, no ACK of it). A case
where one flow still sends after others have finished then differs by 43.2 us per finished flow on
a 10 Mbit/s server link, and where the shared queue overflows (16 flows x 10 MB) that shift changes
which packets drop. Half-closing the engine's listening sockets as PacketSink does makes every one
of those cases equal to the nanosecond.

With ``--lossy`` the lossy cases (1% and 5% packet loss on the data direction only: the node's up
link; its down link, which carries the server's ACKs, is lossless as in the calibration) are
compared by their mean makespan over R realisations: calibration RngRun 1..R, engine seeds 0..R-1
(RngRun 1..R as well). They are *not expected to agree draw for draw*: the engine numbers its
error models' random streams differently (``1000 + device index`` against the calibration's flow
index), so the same RngRun loses different packets. The difference of the means is reported in
units of its standard error (the two sides' standard errors combined); |z| <= 2 is agreement.
Each realisation is one engine world (a worker, about 10 s to start, is reused: up to two stay
idle per process, ns3_engine.IDLE_MAX), so the full lossy grid takes hours: use ``--quick``.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import simpy  # noqa: E402

from aiotsim.network.calibrate_ns3 import Ns3Case, grid, makespan, makespan_se, run_ns3  # noqa: E402
from aiotsim.network.link import Link  # noqa: E402
from aiotsim.network.ns3_engine import Ns3Network  # noqa: E402
from aiotsim.network.tcp import TcpParams  # noqa: E402
from aiotsim.network.topology import Topology  # noqa: E402

CAL_BUFFER_BYTES = 4_194_304  # the calibration's SndBufSize / RcvBufSize (4 MiB)
TOLERANCE = 0.01  # the bound on the relative difference per flow
QUICK_LOSSLESS = (  # (size, flows, latency_ms): one of each regime
    (100_000, 4, 10.0),
    (1_000_000, 1, 50.0),
    (10_000, 16, 1.0),
    (1_000, 1, 300.0),
    (10_000_000, 4, 150.0),
)
QUICK_LOSSY = (  # (size, flows, latency_ms, loss)
    (100_000, 1, 50.0, 0.01),
    (100_000, 4, 10.0, 0.05),
)


def case_topology(case: Ns3Case) -> Topology:
    """The calibration's star as an aiotsim topology: ``Topology.star`` without loss; with loss, the
    same star by hand with the loss on each node's up link only (the calibration's data direction)."""
    rate, server, latency = case.rate_mbps * 1e6, case.server_mbps * 1e6, case.latency_ms * 1e-3
    if case.loss == 0:
        return Topology.star(case.flows, rate, rate, latency, server, mtu=1500, header_bytes=52,
                             queue_packets=case.queue_packets)  # fmt: skip
    topo = Topology("custom")
    topo.add_node("server", "server")
    topo.add_node("switch", "relay")
    q = case.queue_packets
    topo.add_link("switch", "server", Link("server.in", server, 0.0, 1500, 52, queue_packets=q))
    topo.add_link("server", "switch", Link("server.out", server, 0.0, 1500, 52, queue_packets=q))
    for i in range(case.flows):
        node = f"node{i}"
        topo.add_node(node, "node", aggregator="server")
        topo.add_link(node, "switch", Link(f"{node}.up", rate, latency, 1500, 52, loss=case.loss, queue_packets=q))
        topo.add_link("switch", node, Link(f"{node}.down", rate, latency, 1500, 52, queue_packets=q))
    return topo


def engine_times(case: Ns3Case, seed: int = 0) -> list[float]:
    """Every flow's completion time (s, from its start) through one :class:`Ns3Network`, by node."""
    env = simpy.Environment()
    tcp = TcpParams(connection="per-transfer", buffer_bytes=CAL_BUFFER_BYTES)
    net = Ns3Network(env, case_topology(case), seed=seed, tcp=tcp, keep_records=True)
    try:
        events = [net.send(f"node{i}", "server", case.size) for i in range(case.flows)]
        env.run()
        return [e.value.end_s - e.value.start_s for e in events]
    finally:
        net.close()


def flow_difference(calibration: Sequence[float], engine: Sequence[float]) -> float:
    """Largest relative difference |engine - calibration| / calibration over the flows, sorted."""
    if any(t < 0 for t in calibration):
        return math.inf  # a flow the calibration saw unfinished
    return max(abs(e - c) / c for c, e in zip(sorted(calibration), sorted(engine), strict=True))


def lossless_cases(quick: bool, picked: Sequence[str] = ()) -> list[Ns3Case]:
    """The grid's lossless cases (75), the quick handful, or those ``picked`` ("size,flows,latency_ms")."""
    if picked:
        return [Ns3Case(int(s), int(f), float(lat), 0.0) for s, f, lat in (p.split(",") for p in picked)]
    if quick:
        return [Ns3Case(s, f, lat, 0.0) for s, f, lat in QUICK_LOSSLESS]
    return [c for c in grid() if c.loss == 0]


def lossy_cases(quick: bool, realisations: int) -> list[Ns3Case]:
    """The grid's lossy cases (150; R realisations as the grid sets them), or the quick few."""
    if quick:
        return [c for c in grid(realisations=realisations) if (c.size, c.flows, c.latency_ms, c.loss) in QUICK_LOSSY]
    return [c for c in grid(realisations=realisations) if c.loss > 0]


def calibration_runs(cases: Sequence[Ns3Case], pool: ThreadPoolExecutor, jobs: int) -> list[list[list[float]]]:
    """``run_ns3`` of the cases, split over ``jobs`` worker processes; ``[case][run][flow]``."""
    chunks = [list(range(k, len(cases), jobs)) for k in range(jobs)]
    futures = [(chunk, pool.submit(run_ns3, [cases[i] for i in chunk])) for chunk in chunks if chunk]
    out: list[list[list[float]]] = [[] for _ in cases]
    for chunk, future in futures:
        for i, runs in zip(chunk, future.result(), strict=True):
            out[i] = runs
    return out


class Failed(str):
    """A task's error message, in place of its result (a case that fails is reported, not fatal)."""


def parallel(tasks: Sequence[Callable[[], Any]], pool: ThreadPoolExecutor) -> list[Any]:
    """Run the tasks on the pool (each drives its own ns-3 process), results in order; a task that
    raises gives :class:`Failed` with its message (only the text is kept: a kept exception's
    traceback would keep its frames, and with them an ns-3 worker process, alive)."""
    futures = [pool.submit(task) for task in tasks]
    out: list[Any] = []
    for f in futures:
        try:
            out.append(f.result())
        except Exception as exc:  # an engine that cannot finish a case: report it with the others
            out.append(Failed(f"{type(exc).__name__}: {exc}"))
    return out


def _cost(case: Ns3Case) -> int:
    return case.size * case.flows


def check_lossless(cases: Sequence[Ns3Case], jobs: int) -> int:
    """Compare every lossless case flow by flow; print the table and the summary; exit status."""
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        cal = calibration_runs(cases, pool, jobs)
        order = sorted(range(len(cases)), key=lambda i: -_cost(cases[i]))  # the long ones first
        got = parallel([lambda c=cases[i]: engine_times(c) for i in order], pool)
    engine: list[Any] = [None] * len(cases)
    for i, times in zip(order, got, strict=True):
        engine[i] = times
    print(f"{'size':>10} {'flows':>5} {'lat ms':>6} {'calib s':>12} {'engine s':>12} {'max |rel diff|':>15}")
    diffs = []
    for case, runs, times in zip(cases, cal, engine, strict=True):
        head = f"{case.size:>10,} {case.flows:>5} {case.latency_ms:>6g} {max(runs[0]):>12.7f}"
        if isinstance(times, Failed):
            diffs.append(math.inf)
            print(f"{head} {'failed':>12} {times[:300]}")
            continue
        diffs.append(flow_difference(runs[0], times))
        print(f"{head} {max(times):>12.7f} {diffs[-1]:>15.3e}")
    within = sum(d <= TOLERANCE for d in diffs)
    worst = max(range(len(cases)), key=lambda i: diffs[i])
    w = cases[worst]
    print(f"\nwithin {TOLERANCE:.0%} on every flow: {within} of {len(cases)} cases; exactly equal: "
          f"{sum(d == 0 for d in diffs)}; worst: {w.size:,} B x {w.flows} at {w.latency_ms:g} ms, "
          f"max per-flow relative difference {diffs[worst]:.3e}")  # fmt: skip
    return 0 if within == len(cases) else 1


def _z(cal: Sequence[float], eng: Sequence[float]) -> tuple[float, float]:
    """(engine mean - calibration mean) / combined standard error of the makespans, and that se."""
    se = math.hypot(statistics.stdev(cal) / len(cal) ** 0.5, statistics.stdev(eng) / len(eng) ** 0.5)
    diff = statistics.fmean(eng) - statistics.fmean(cal)
    return (diff / se if se > 0 else (0.0 if diff == 0 else math.inf)), se


def check_lossy(cases: Sequence[Ns3Case], jobs: int) -> int:
    """Compare every lossy case's mean makespan over its realisations; print the table; exit status."""
    tasks = [(i, seed) for i, c in enumerate(cases) for seed in range(c.realisations)]
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        cal = calibration_runs(cases, pool, jobs)
        got = parallel([lambda i=i, s=s: engine_times(cases[i], s) for i, s in tasks], pool)
    engine: list[list[Any]] = [[] for _ in cases]
    for (i, _), times in zip(tasks, got, strict=True):
        engine[i].append(times)
    print("not draw for draw: the engine's error models draw from other ns-3 streams than the calibration's")
    print(f"{'size':>10} {'flows':>5} {'lat ms':>6} {'loss':>5} {'R':>3} {'calib s':>10} {'+-se':>8} "
          f"{'engine s':>10} {'+-se':>8} {'z':>6}")  # fmt: skip
    zs = []
    for case, runs, eng in zip(cases, cal, engine, strict=True):
        head = f"{case.size:>10,} {case.flows:>5} {case.latency_ms:>6g} {case.loss:>5g} {case.realisations:>3}"
        failed = [e for e in eng if isinstance(e, Failed)]
        if failed or any(t < 0 for run in runs for t in run):
            zs.append(math.inf)
            print(f"{head} failed: {failed[0] if failed else 'a calibration flow did not finish'}")
            continue
        z, _ = _z([max(r) for r in runs], [max(r) for r in eng])
        zs.append(z)
        print(f"{head} {makespan(runs):>10.4f} {makespan_se(runs):>8.4f} {makespan(eng):>10.4f} "
              f"{makespan_se(eng):>8.4f} {z:>+6.2f}")  # fmt: skip
    near = sum(abs(z) <= 2 for z in zs)
    worst = max(range(len(cases)), key=lambda i: abs(zs[i]))
    w = cases[worst]
    print(f"\nmeans within 2 standard errors: {near} of {len(cases)} cases; worst: {w.size:,} B x {w.flows} at "
          f"{w.latency_ms:g} ms, loss {w.loss:g}: z = {zs[worst]:+.2f}")  # fmt: skip
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a handful of cases instead of the grid's")
    parser.add_argument("--lossy", action="store_true", help="the lossy cases: means over realisations")
    parser.add_argument("--jobs", type=int, default=1, help="ns-3 processes at once (default 1)")
    parser.add_argument("--case", action="append", default=[], metavar="SIZE,FLOWS,LATENCY_MS",
                        help="a lossless case to run instead of the grid's (repeatable), e.g. 100000,4,10")  # fmt: skip
    parser.add_argument("--realisations", type=int, default=5,
                        help="--lossy: the grid's base R (4 R where at most 2 MB move in all; default 5)")  # fmt: skip
    args = parser.parse_args(argv)
    jobs = max(1, args.jobs)
    start = time.perf_counter()
    if args.lossy:
        status = check_lossy(lossy_cases(args.quick, args.realisations), jobs)
    else:
        status = check_lossless(lossless_cases(args.quick, args.case), jobs)
    print(f"wall time {time.perf_counter() - start:.0f} s with {jobs} job(s)")
    return status


if __name__ == "__main__":
    sys.exit(main())
