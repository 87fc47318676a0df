"""The controller's SimPy events: fired timers are re-armed instead of new ones made, one update
event serves every instant, and records share their pair's path lists. The times must be those
of the fluid model whatever the timer history: hand-computed cases where a later start moves the
next completion later and a finish moves it earlier."""

from __future__ import annotations

import pytest
import simpy

from aiotsim.network import Link, Network, Topology
from aiotsim.network import flows as flows_mod

REL = 1e-12


def two_vertex(bps: float = 8e6, latency_s: float = 0.0) -> Topology:
    """a -> b over one link of ``bps`` bits/s; no header bytes, so wire bytes = payload bytes."""
    topo = Topology()
    topo.add_node("a", "node")
    topo.add_node("b", "server")
    topo.add_link("a", "b", Link("l", bps, latency_s, mtu=1500, header_bytes=0))
    return topo


def run(topo: Topology, sends: list[tuple[float, int]]) -> tuple[Network, dict[str, float]]:
    env = simpy.Environment()
    net = Network(env, topo)

    def proc(at: float, n: int, tag: str):  # type: ignore[no-untyped-def]
        yield env.timeout(at)
        yield net.send("a", "b", n, tag)

    for i, (at, n) in enumerate(sends):
        env.process(proc(at, n, "ABCD"[i]))
    env.run()
    return net, {t.tag: t.end_s for t in net.transfers}


def test_completion_moves_later_then_earlier() -> None:
    # One link of 1e6 B/s, no latency, wire bytes = payload bytes.
    # A: 1,000,000 B at 0: alone it would end at 1.0 (the first timer).
    # B:   250,000 B at 0.5: A has 500,000 left; 500,000 B/s each; B ends at 0.5 + 0.5 = 1.0
    #   (the next completion keeps its time, on a new timer), A has 250,000 left, alone again.
    # C:   100,000 B at 1.1: A has 150,000 left, its end moves from 1.25 to later; 500,000 B/s
    #   each: C ends at 1.3, A (50,000 left) is alone again: its end moves earlier, from
    #   1.3 + 0.1 to 1.3 + 0.05 = 1.35.
    _, ends = run(two_vertex(), [(0.0, 1_000_000), (0.5, 250_000), (1.1, 100_000)])
    assert ends == pytest.approx({"A": 1.35, "B": 1.0, "C": 1.3}, rel=REL)


def test_a_start_makes_the_pending_timer_stale() -> None:
    # A: 1,000,000 B at 0 (alone: timer at 1.0). B: 1,000,000 B at 0.5 makes that timer stale:
    # both have 500,000 B / 1,000,000 B left at 500,000 B/s: A ends at 1.5, B alone from
    # then on (500,000 B at 1e6 B/s): 2.0. Then a 10 ms latency: arrivals 10 ms later.
    _, ends = run(two_vertex(latency_s=0.01), [(0.0, 1_000_000), (0.5, 1_000_000)])
    assert ends == pytest.approx({"A": 1.51, "B": 2.01}, rel=REL)


def test_timers_are_recycled(monkeypatch: pytest.MonkeyPatch) -> None:
    # 200 transfers back to back (each starts when the previous arrives): 400 controller steps,
    # each with a timer, yet only the few timer objects in the queue at once are ever made.
    made = []

    def counting(env: simpy.Environment) -> simpy.Event:
        made.append(1)
        return armed(env)

    armed = flows_mod._armed
    monkeypatch.setattr(flows_mod, "_armed", counting)
    env = simpy.Environment()
    net = Network(env, two_vertex(latency_s=0.001))

    def proc():  # type: ignore[no-untyped-def]
        for _ in range(200):
            yield net.send("a", "b", 1000)

    env.process(proc())
    env.run()
    # each: 1,000 B at 1e6 B/s = 1 ms, + 1 ms of latency
    assert net.transfers[-1].end_s == pytest.approx(200 * 0.002, rel=1e-9)
    assert len(made) <= 4  # the update event, and at most the timers pending at one time (+1)


def test_records_of_a_pair_share_its_path_lists() -> None:
    net, _ = run(two_vertex(), [(0.0, 1000), (0.0, 2000)])
    first, second = net.transfers
    assert first.path == ["l"] and first.nodes == ["a", "b"]
    assert first.path is second.path and first.nodes is second.nodes  # no copy per transfer
