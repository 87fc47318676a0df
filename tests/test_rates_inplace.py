"""Cap changes done in place (:meth:`RateClasses.lift_tcap`, and a capped flow with every link
private taking its new cap at once) must leave exactly the state that taking the flow out and
placing it again leaves: whole TCP runs with and without the in-place paths deliver the same
transfers at the same times, bit for bit, and a hand case keeps its rates and bytes left."""

from __future__ import annotations

import math
import random

import pytest
from test_flows_engine import gateway_fleet, run, topology, workload

from aiotsim.network import Link, Network, Topology
from aiotsim.network.rates import RateClasses


def without_inplace(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every cap change by taking the flow out and placing it again at the next solve."""
    monkeypatch.setattr(RateClasses, "lift_tcap", RateClasses.set_tcap)
    monkeypatch.setattr(RateClasses, "_recap_alone", lambda *_args: False)


def own_links(n: int, rng: random.Random) -> Topology:
    """Every node on its own links to the server (no link shared: every flow capped alone)."""
    topo = Topology("own")
    topo.add_node("s", "server")
    for k in range(n):
        topo.add_node(f"n{k}", "node")
        topo.add_link(f"n{k}", "s", Link(f"n{k}.up", rng.choice([1e6, 10e6]), rng.choice([0.005, 0.05])))
        topo.add_link("s", f"n{k}", Link(f"n{k}.down", 10e6, 0.005, loss=rng.choice([0.0, 0.02])))
    return topo


def cases() -> list[tuple[str, Topology, list[tuple[float, str, str, int]]]]:
    out = []
    for kind in ("star", "hier", "medium", "traced", "own", "fleet"):
        for case in range(8):
            rng = random.Random(f"inplace/{kind}/{case}")
            if kind == "fleet":
                topo, sends = gateway_fleet(rng)
            else:
                n = rng.randint(3, 8)
                topo = own_links(n, rng) if kind == "own" else topology(kind, n, rng.choice([0.0, 0.01]), 0.0)
                sends = workload(rng, topo)
                # a second wave on the same connections (reused: first rounds placed, then lifted)
                sends += [(at + 3.0, src, dst, n) for at, src, dst, n in sends]
            out.append((f"{kind}/{case}", topo, sends))
    return out


@pytest.mark.parametrize(("name", "topo", "sends"), cases(), ids=lambda x: x if isinstance(x, str) else "")
def test_tcp_runs_are_bit_identical_without_the_in_place_cap_changes(
    name: str, topo: Topology, sends: list[tuple[float, str, str, int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    got = run(Network, topo, sends, "tcp", seed=3)
    without_inplace(monkeypatch)
    want = run(Network, topo, sends, "tcp", seed=3)
    assert [(t.tag, t.end_s, t.wire_bytes) for t in got] == [(t.tag, t.end_s, t.wire_bytes) for t in want], name


def test_the_in_place_paths_are_taken_in_a_star_and_on_private_links() -> None:
    """Guard against the fast paths silently never applying (the test above would still pass)."""
    calls = {"kept": 0, "alone": 0}
    original_recap = RateClasses._recap_alone
    original_near = RateClasses._near_into

    def recap(self: RateClasses, *args: object) -> bool:
        done = original_recap(self, *args)  # type: ignore[arg-type]
        calls["alone"] += done
        return done

    def near(self: RateClasses, g: object, out: list[int]) -> None:
        calls["kept"] += out is self._reported  # lift_tcap kept a flow in place
        original_near(self, g, out)  # type: ignore[arg-type]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(RateClasses, "_recap_alone", recap)
        mp.setattr(RateClasses, "_near_into", near)
        star = Topology.star(20, 10e6, 10e6, 0.01, 10e6)
        sends = [(w * 2.0, f"node{k}", "server", 80_000) for w in range(2) for k in range(20)]
        run(Network, star, sends, "tcp", seed=0)
        assert calls["kept"] >= 20  # the second wave's reused connections go fluid in place
        own = own_links(4, random.Random(1))
        run(Network, own, [(w * 3.0, f"n{k}", "s", 200_000) for w in range(2) for k in range(4)], "tcp", seed=0)
        assert calls["alone"] >= 8


def test_lift_tcap_keeps_a_leveled_flow_and_its_bytes_left() -> None:
    # link 0 (10 bytes/s) shared by flows 1 and 2, each also on a private link (100 bytes/s)
    rc = RateClasses([10.0, 100.0, 100.0], report_near=True)
    rc.add(1, (0, 1), (1.0, 1.0), 40.0, 50.0, 0.0)
    rc.add(2, (0, 2), (1.0, 1.0), 60.0, math.inf, 0.0)
    assert set(rc.solve(0.0)) == {1, 2}  # placed (and moved: listed again)
    assert rc.rate(1) == rc.rate(2) == 5.0  # level 10 / 2, both below their caps
    rc.due(2.0, 1e-9)  # 10 bytes drained each
    rc.lift_tcap(1, 70.0, 2.0)  # cap 50 -> 70: the level (5) does not move
    assert rc.is_leveled(1) and rc.rate(1) == 5.0 and rc.cap_of(1) == 70.0
    assert rc.remaining(1, 2.0) == 30.0 and rc.remaining(2, 2.0) == 50.0
    assert set(rc.solve(2.0)) == {1}  # reported as if placed again; nothing else to do
    assert rc.next_finish(2.0) == 8.0  # 30 bytes at 5 bytes/s
    rc.lift_tcap(1, 2.0, 8.0)  # below the level: taken out and capped at the next solve
    assert set(rc.solve(8.0)) == {1}
    assert rc.rate(1) == 2.0 and rc.rate(2) == 8.0  # 2 capped, the other gets 10 - 2


def test_a_flow_alone_on_its_links_takes_a_new_cap_at_once() -> None:
    rc = RateClasses([100.0, 40.0])
    rc.add(7, (0, 1), (1.0, 1.0), 200.0, math.inf, 0.0)
    rc.solve(0.0)
    assert rc.rate(7) == 40.0  # its slowest link
    rc.set_tcap(7, 10.0, 1.0)  # 40 bytes drained; now a window of 10 bytes/s
    assert rc.rate(7) == 10.0 and rc.remaining(7, 1.0) == 160.0
    assert rc.solve(1.0) == [7]
    assert rc.next_finish(1.0) == 17.0  # 160 bytes at 10 bytes/s
    rc.set_tcap(7, math.inf, 2.0)  # window off: the link binds again
    assert rc.rate(7) == 40.0 and rc.remaining(7, 2.0) == 150.0
    assert rc.due(5.75, 1e-9) == [7]  # 150 / 40 = 3.75 s later
