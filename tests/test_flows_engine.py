"""The incremental engine against the vectorized one it replaced (tests/flows_reference.py: the
engine as it was, progressive filling over every flow at every event): whole runs on random
topologies and workloads, both transports, with loss, jitter, bursty loss and bandwidth traces,
deliver the same transfers in the same order at the same times (1e-9 relative: draining by
virtual clocks rounds differently in the last bits)."""

from __future__ import annotations

import random

import pytest
import simpy
from flows_reference import Network as Reference

from aiotsim.network import Link, Network, Topology
from aiotsim.network.traces import GilbertElliott, parse_mahimahi

RTOL = 1e-9
# Seeded cases where the TCP transport diverged from the reference are all fixed: traced/tcp 7, 9,
# 66 and 74 (a leveled cap within the tie tolerance of its level moved back and forth in rates.py)
# and hier/tcp 60 (the reference's bytes left were 1e-12 segments above a window of 40: one more
# round trip for a float residue; tcp.FINAL_TOL). Listed here, none left, so that a new one is
# added with its reason rather than hidden.
KNOWN_DIVERGENT: set[tuple[str, str, int]] = set()


def run(cls: type, topo: Topology, sends: list[tuple[float, str, str, int]], transport: str, seed: int) -> list:
    env = simpy.Environment()
    net = cls(env, topo, seed=seed, transport=transport)

    def proc(at: float, src: str, dst: str, n: int, tag: str):  # type: ignore[no-untyped-def]
        yield env.timeout(at)
        yield net.send(src, dst, n, tag)

    for i, (at, src, dst, n) in enumerate(sends):
        env.process(proc(at, src, dst, n, str(i)))
    env.run()
    return net.transfers


def topology(kind: str, n: int, loss: float, jitter: float) -> Topology:
    if kind == "star":
        return Topology.star(n, 10e6, 10e6, 0.01, 30e6, loss=loss, jitter_s=jitter)
    if kind == "hier":
        groups = [n // 3, n // 3, n - 2 * (n // 3)]
        return Topology.hierarchical(groups, 10e6, 10e6, 0.005, 20e6, 20e6, 0.01, server_bps=30e6, loss=loss)
    if kind == "medium":
        return Topology.shared_medium(n, 20e6, 0.005, server_bps=50e6)
    trace = parse_mahimahi([str(ms) for ms in range(1, 21, 2)] + ["20"], "alt.trace")  # on/off every ms
    topo = Topology()
    topo.add_node("b", "server")
    for k in range(n):
        topo.add_node(f"n{k}", "node", aggregator="b")
        model = GilbertElliott(0.02, 0.3) if k % 2 else None
        lk = Link(f"n{k}.up", 6e6, 0.004, trace=trace.shifted(0.001 * k) if k % 3 else None, loss_model=model)
        topo.add_link(f"n{k}", "b", lk)
        topo.add_link("b", f"n{k}", Link(f"n{k}.down", 8e6, 0.004))
    return topo


def workload(rng: random.Random, topo: Topology) -> list[tuple[float, str, str, int]]:
    verts = list(topo.vertices)
    sends = []
    for _ in range(rng.randint(1, 25)):
        src, dst = rng.sample(verts, 2)
        at = rng.choice([0.0, 0.0, rng.uniform(0, 0.5)])
        sends.append((at, src, dst, rng.choice([1000, 50_000, 120_000, rng.randint(1, 300_000)])))
    return sends


@pytest.mark.parametrize("kind", ["star", "hier", "medium", "traced"])
@pytest.mark.parametrize("transport", ["ideal", "tcp"])
def test_whole_runs_match_the_vectorized_engine(kind: str, transport: str) -> None:
    compare_runs(kind, transport, range(6))


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["star", "hier", "medium", "traced"])
@pytest.mark.parametrize("transport", ["ideal", "tcp"])
def test_many_whole_runs_match_the_vectorized_engine(kind: str, transport: str) -> None:
    # traced links: the vectorised reference steps every trace millisecond (0.8 s a tcp case, 2.7x
    # the engine): 34 cases there, 74 elsewhere, to keep the suite under its 10-minute budget
    compare_runs(kind, transport, range(6, 40 if kind == "traced" else 80))


def compare_runs(kind: str, transport: str, cases: range) -> None:
    """Same arrival order, times within RTOL, same bytes, for each seeded random case."""
    for case in cases:
        if (kind, transport, case) in KNOWN_DIVERGENT:
            continue
        rng = random.Random(f"{kind}/{transport}/{case}")
        n = rng.randint(3, 8)
        topo = topology(kind, n, rng.choice([0.0, 0.01]), rng.choice([0.0, 0.002]))
        sends = workload(rng, topo)
        want = run(Reference, topo, sends, transport, seed=case)
        got = run(Network, topo, sends, transport, seed=case)
        assert [t.tag for t in got] == [t.tag for t in want], case  # same arrival order
        for a, b in zip(want, got, strict=True):
            assert b.end_s == pytest.approx(a.end_s, rel=RTOL), (case, a.tag)
            assert (b.wire_bytes, b.start_s) == (a.wire_bytes, a.start_s)


def gateway_fleet(rng: random.Random) -> tuple[Topology, list[tuple[float, str, str, int]]]:
    """Many gateways of a few nodes each behind one server link, every node uploading to the
    server once or twice (one upload at a time): the server link is often the first to fill (the
    rate classes' common regime, one shared clock) and stops being so as gateways empty or a slow
    backhaul binds."""
    groups = [rng.randint(1, 6) for _ in range(rng.randint(4, 9))]
    topo = Topology.hierarchical(
        groups, 10e6, 10e6, 0.005, rng.choice([20e6, 4e6]), 20e6, 0.01,
        server_bps=rng.choice([8e6, 30e6]), loss=rng.choice([0.0, 0.01]),
    )  # fmt: skip
    nodes = [v for v in topo.vertices if v.startswith("node")]
    sends = []
    for node in nodes:
        at = rng.choice([0.0, 0.0, rng.uniform(0, 0.3)])
        sends.append((at, node, "server", rng.choice([20_000, 60_000, rng.randint(1, 150_000)])))
        if rng.random() < 0.5:  # a second upload once the first has surely arrived
            sends.append((at + 2.0, node, "server", rng.choice([20_000, rng.randint(1, 150_000)])))
    return topo, sends


@pytest.mark.parametrize("transport", ["ideal", "tcp"])
def test_gateway_fleets_match_the_vectorized_engine(transport: str) -> None:
    compare_fleets(transport, range(4))


@pytest.mark.slow
@pytest.mark.parametrize("transport", ["ideal", "tcp"])
def test_many_gateway_fleets_match_the_vectorized_engine(transport: str) -> None:
    compare_fleets(transport, range(4, 40))


def compare_fleets(transport: str, cases: range) -> None:
    """:func:`compare_runs` for :func:`gateway_fleet` workloads."""
    for case in cases:
        topo, sends = gateway_fleet(random.Random(f"fleet/{transport}/{case}"))
        want = run(Reference, topo, sends, transport, seed=case)
        got = run(Network, topo, sends, transport, seed=case)
        assert [t.tag for t in got] == [t.tag for t in want], case
        for a, b in zip(want, got, strict=True):
            assert b.end_s == pytest.approx(a.end_s, rel=RTOL), (case, a.tag)
            assert (b.wire_bytes, b.start_s) == (a.wire_bytes, a.start_s)


def test_equal_flows_started_together_finish_together_in_slot_order() -> None:
    # 50 equal uploads over one shared link: one instant, delivered in the order they were sent
    topo = Topology.star(50, 10e6, 10e6, 0.01, 20e6)
    sends = [(0.0, f"node{i}", "server", 40_000) for i in range(50)]
    got = run(Network, topo, sends, "ideal", seed=0)
    assert [t.tag for t in got] == [str(i) for i in range(50)]
    assert len({t.end_s for t in got}) == 1


def test_the_callers_event_fires_at_arrival_with_its_record_already_kept() -> None:
    # one upload of 10,000 payload bytes over a lone 1 MB/s link with 50 ms latency: drained at
    # wire / 1e6 s, arrives 50 ms later. The caller's event is the one scheduled at arrival: when
    # its waiter (and an all_of over it) resumes, the time is the arrival time and the record is
    # already in net.transfers; a second process waiting on the same event sees the same record.
    topo = Topology()
    topo.add_node("a", "node")
    topo.add_node("b", "server")
    topo.add_link("a", "b", Link("a.up", 8e6, 0.05))
    env = simpy.Environment()
    net = Network(env, topo, transport="ideal")
    seen = []

    def sender():  # type: ignore[no-untyped-def]
        ev = net.send("a", "b", 10_000, "x")
        env.process(watcher(ev))
        assert not ev.processed
        got = yield env.all_of([ev])
        record = got[ev]
        seen.append(("sender", env.now, record, list(net.transfers)))

    def watcher(ev):  # type: ignore[no-untyped-def]
        record = yield ev
        seen.append(("watcher", env.now, record, list(net.transfers)))

    env.process(sender())
    env.run()
    (record,) = net.transfers
    arrival = record.wire_bytes / 1e6 + 0.05  # s: drain at 1 MB/s, then the latency
    assert record.end_s == pytest.approx(arrival, rel=1e-12) and record.wire_bytes > 10_000
    assert sorted(who for who, *_ in seen) == ["sender", "watcher"]
    for _, at, got, kept in seen:
        assert at == record.end_s and got is record and kept == [record]


def run_with_cancels(kind: str, transport: str, case: int) -> tuple[Network, dict, dict, dict]:
    """A seeded random workload in which some senders stop their transfer after a random delay
    (0: at once; up to 3 s: often after it arrived). Returns the network, the events by tag, the
    full wire bytes by tag, and (cancel's record, when) by tag of each stop."""
    rng = random.Random(f"cancel/{kind}/{transport}/{case}")
    topo = topology(kind, rng.randint(3, 8), rng.choice([0.0, 0.01]), rng.choice([0.0, 0.002]))
    sends = workload(rng, topo)
    env = simpy.Environment()
    net = Network(env, topo, seed=case, transport=transport)
    events: dict[str, simpy.Event] = {}
    full: dict[str, float] = {}
    cut: dict[str, tuple[object, float]] = {}

    def proc(at: float, src: str, dst: str, n: int, tag: str, stop: float | None):  # type: ignore[no-untyped-def]
        yield env.timeout(at)
        full[tag] = net.wire_bytes_for(src, dst, n)
        ev = events[tag] = net.send(src, dst, n, tag)
        if stop is not None:
            yield env.timeout(stop)
            cut[tag] = (net.cancel(ev), env.now)

    for i, (at, src, dst, n) in enumerate(sends):
        stop = rng.choice([None, 0.0, rng.uniform(0.0, 0.3), rng.uniform(0.0, 3.0)])
        env.process(proc(at, src, dst, n, str(i), stop))
    env.run()
    return net, events, full, cut


@pytest.mark.parametrize("kind", ["star", "hier", "medium", "traced"])
@pytest.mark.parametrize("transport", ["ideal", "tcp"])
def test_cancelled_transfers_leave_the_engine_consistent(kind: str, transport: str) -> None:
    """Random transfers, some stopped at random times (before, during or after their drain): every
    other transfer still arrives; a stopped one never does and its record holds what it drained
    (0 <= wire <= its full wire, ended at the stop); the links carried exactly the arrived
    transfers' wire bytes plus the stopped ones' drained bytes, per crossing."""
    seen = [0, 0]  # transfers stopped mid-flow, cancels that found nothing to stop
    for case in range(8):
        net, events, full, cut = run_with_cancels(kind, transport, case)
        stopped = {tag: rec for tag, (rec, _) in cut.items() if rec is not None}
        seen[0] += len(stopped)
        seen[1] += len(cut) - len(stopped)
        assert {t.tag for t in net.transfers} == set(events) - set(stopped), case  # the rest all arrived
        carried = {name: 0.0 for name in net.link_bytes}
        for t in [*net.transfers, *stopped.values()]:
            for name in t.path:
                carried[name] += t.wire_bytes
        for tag, rec in stopped.items():
            assert not events[tag].triggered
            assert 0.0 <= rec.wire_bytes <= full[tag] * (1 + 1e-12)
            assert rec.end_s == cut[tag][1]
        assert net.link_bytes == pytest.approx(carried, rel=1e-9, abs=1e-6), case
    assert seen[0] >= 5 and seen[1] >= 5  # stops mid-flow and stops that found nothing to stop
