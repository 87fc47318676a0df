"""Rate classes (network/rates.py): hand cases, and rates equal to progressive filling over all
flows after any sequence of starts, finishes, cap and capacity changes (hypothesis)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiotsim.network.flows import progressive_filling
from aiotsim.network.rates import RateClasses

REL = 1e-9


def reference(caps: list[float], flows: dict) -> dict:
    """Progressive filling over every running flow (a cap: a private link; cap 0: rate 0)."""
    running = [k for k in flows if flows[k][2] > 0]
    cap = list(caps) + [math.inf]  # dummy padding link
    rows = []
    for key in running:
        links, mults, tcap = flows[key]
        hops, mult = list(links), [float(m) for m in mults]
        if math.isfinite(tcap):
            cap.append(tcap)
            hops.append(len(cap) - 1)
            mult.append(1.0)
        rows.append((hops, mult))
    width = max((len(h) for h, _ in rows), default=1)
    hop_arr = np.full((len(running), width), len(caps), dtype=np.intp)
    mult_arr = np.zeros((len(running), width))
    for r, (hops, mult) in enumerate(rows):
        hop_arr[r, : len(hops)] = hops
        mult_arr[r, : len(mult)] = mult
    rates = progressive_filling(np.array(cap), hop_arr, mult_arr) if running else []
    want = dict.fromkeys(flows, 0.0)
    want.update(zip(running, (float(x) for x in rates), strict=True))
    return want


def test_a_capped_flow_is_due_at_its_finish_time_whatever_the_float_residue() -> None:
    # Found by a 2-iteration AlexNet run that never ended: two uploads of 18,553,296 wire bytes
    # from t0 = 148.7461632 s, each capped by its own 125,000 B/s link under a 250,000 B/s server
    # link, finish at 148.7461632 + 148.426368 = 297.1725312 s; there rem - c * (now - t0) leaves
    # 3.7e-9 bytes (above DONE_BYTES) that drain in 3e-14 s, more than half an ulp of the clock
    # (5.7e-14 s at 297 s), so the residue test alone never fired and the timer re-armed at now.
    t0, nbytes = 148.7461632, 18553296.0
    rc = RateClasses([250_000.0, 125_000.0, 125_000.0])
    rc.add(0, (0, 1), (1.0, 1.0), nbytes, math.inf, t0)
    rc.add(1, (0, 2), (1.0, 1.0), nbytes, math.inf, t0)
    rc.solve(t0)
    assert [rc.rate(0), rc.rate(1)] == [125_000.0, 125_000.0] and not rc.is_leveled(0)
    end = rc.next_finish(t0)
    assert end == 297.1725312 and rc.remaining(0, end) > 1e-9  # the residue is really there
    rc.advance(end)
    assert sorted(rc.due(end, 1e-9)) == [0, 1]


def test_star_by_hand_with_a_capped_flow_and_virtual_clock() -> None:
    # link 0 (the server, 9 B/s) shared by three flows; flow 2 also crosses its own link 1 (2 B/s):
    # flow 2 is capped at 2, the other two share the rest: (9 - 2) / 2 = 3.5 each
    rc = RateClasses([9.0, 2.0, 100.0, 100.0])
    rc.add(0, (0, 2), (1.0, 1.0), 35.0, math.inf, 0.0)
    rc.add(1, (0, 3), (1.0, 1.0), 70.0, math.inf, 0.0)
    rc.add(2, (0, 1), (1.0, 1.0), 100.0, math.inf, 0.0)
    rc.solve(0.0)
    assert [rc.rate(k) for k in range(3)] == [3.5, 3.5, 2.0]
    assert not rc.is_leveled(2) and rc.is_leveled(0)
    assert rc.next_finish(0.0) == pytest.approx(10.0)  # 35 bytes at 3.5 B/s
    rc.advance(10.0)
    assert rc.due(10.0, 1e-9) == [0]
    rc.remove(0, 10.0)
    rc.solve(10.0)
    # flow 1 alone with flow 2 on link 0: 9 - 2 = 7; it drained 35 bytes of 70 so far
    assert rc.rate(1) == 7.0 and rc.remaining(1, 10.0) == pytest.approx(35.0)
    assert rc.remaining(2, 10.0) == pytest.approx(80.0)
    assert rc.next_finish(10.0) == pytest.approx(15.0)


def test_link_crossed_twice_and_waiting_flow() -> None:
    # a flow crossing link 0 twice uses twice its rate there: 6 / (2 + 1) = 2 each; a waiting
    # flow (cap 0) takes nothing
    rc = RateClasses([6.0])
    rc.add(0, (0,), (2.0,), 1.0, math.inf, 0.0)
    rc.add(1, (0,), (1.0,), 1.0, math.inf, 0.0)
    rc.add(2, (0,), (1.0,), 1.0, 0.0, 0.0)
    rc.solve(0.0)
    assert (rc.rate(0), rc.rate(1), rc.rate(2)) == (2.0, 2.0, 0.0)
    rc.set_tcap(2, 1.0, 0.0)  # the waiting flow starts, capped at 1: (6 - 1) / 3 each
    rc.solve(0.0)
    assert rc.rate(2) == 1.0 and rc.rate(1) == pytest.approx(5.0 / 3.0)


CAPS = st.sampled_from([1.0, 2.0, 3.0, 5.0, 10.0, 0.7, 12.5])  # ties are common


@st.composite
def scenario(draw: st.DrawFn) -> tuple[list[float], list[tuple]]:
    n_links = draw(st.integers(1, 6))
    caps = [draw(CAPS) for _ in range(n_links)]
    ops: list[tuple] = []
    live: list[int] = []
    for key in range(draw(st.integers(1, 40))):
        kind = draw(st.sampled_from(["add", "add", "add", "remove", "cap", "link", "solve"]))
        if kind == "add" or not live:
            links = draw(st.lists(st.integers(0, n_links - 1), min_size=1, max_size=4, unique=True))
            mults = [draw(st.sampled_from([1, 1, 2])) for _ in links]
            tcap = draw(st.one_of(st.just(math.inf), st.just(math.inf), st.just(0.0), CAPS))
            ops.append(("add", key, links, mults, tcap))
            live.append(key)
        else:
            ops.append(other_op(draw, kind, live, n_links - 1))
    return caps, ops


def other_op(draw: st.DrawFn, kind: str, live: list[int], last_link: int) -> tuple:
    """A drawn op that is not a start: a finish (taken off ``live``), a flow's cap, a link's
    capacity (links 0..last_link) or a solve."""
    if kind == "remove":
        return ("remove", live.pop(draw(st.integers(0, len(live) - 1))))
    if kind == "cap":
        return ("cap", draw(st.sampled_from(live)), draw(st.one_of(st.just(math.inf), st.just(0.0), CAPS)))
    if kind == "link":
        return ("link", draw(st.integers(0, last_link)), draw(CAPS))
    return ("solve",)


@settings(max_examples=150, deadline=None)
@given(scenario())
def test_rates_equal_progressive_filling_after_every_solve(case: tuple[list[float], list[tuple]]) -> None:
    check_against_filling(*case)


def check_against_filling(caps: list[float], ops: list[tuple]) -> None:
    """Apply ``ops`` to rate classes; after every solve, rates equal progressive filling."""
    caps = list(caps)
    rc = RateClasses(caps)
    flows: dict = {}
    for op in [*ops, ("solve",)]:
        if op[0] == "add":
            _, key, links, mults, tcap = op
            rc.add(key, tuple(links), tuple(float(m) for m in mults), 1e6, tcap, 0.0)
            flows[key] = (links, mults, tcap)
        elif op[0] == "remove":
            rc.remove(op[1], 0.0)
            del flows[op[1]]
        elif op[0] == "cap":
            rc.set_tcap(op[1], op[2], 0.0)
            flows[op[1]] = (*flows[op[1]][:2], op[2])
        elif op[0] == "link":
            caps[op[1]] = op[2]
            rc.set_link_cap(op[1], op[2], 0.0)
        else:
            rc.solve(0.0)
            want = reference(caps, flows)
            for key, rate in want.items():
                assert rc.rate(key) == pytest.approx(rate, rel=REL, abs=1e-12), key


@settings(max_examples=60, deadline=None)
@given(scenario(), st.lists(st.floats(0.01, 2.0), min_size=40, max_size=40))
def test_bytes_left_follow_the_rates_between_events(case: tuple[list[float], list[tuple]], gaps: list[float]) -> None:
    """Draining lazily (virtual clocks, capped finish times) leaves every flow exactly the bytes
    that the rates of each interval drained."""
    caps, ops = case
    rc = RateClasses(list(caps))
    left: dict = {}
    now = 0.0
    for op, gap in zip(ops, gaps, strict=False):
        if op[0] != "add":
            continue
        rc.add(op[1], tuple(op[2]), tuple(float(m) for m in op[3]), 1e6, op[4], now)
        left[op[1]] = 1e6
        rc.solve(now)
        rates = {k: rc.rate(k) for k in left}
        now += gap
        rc.advance(now)
        for key in left:
            left[key] -= rates[key] * gap
            assert rc.remaining(key, now) == pytest.approx(left[key], rel=1e-9, abs=1e-6)


@st.composite
def hierarchy(draw: st.DrawFn) -> tuple[list[float], list[tuple]]:
    """Gateways behind one server link (link 0): each flow crosses the server link, its gateway's
    link (1..gateways) and often a private link of its own, so its group shares the server link
    with every other gateway's group (one component, the shape of a hierarchical fleet)."""
    gateways = draw(st.integers(2, 5))
    n_links = 1 + gateways + 30
    caps = [draw(CAPS) for _ in range(n_links)]
    ops: list[tuple] = []
    live: list[int] = []
    for key in range(draw(st.integers(1, 30))):
        kind = draw(st.sampled_from(["add", "add", "add", "remove", "cap", "link", "solve"]))
        if kind == "add" or not live:
            links = [0, draw(st.integers(1, gateways))]
            if draw(st.booleans()):
                links.append(1 + gateways + key)  # its own link: a per-flow cap
            tcap = draw(st.one_of(st.just(math.inf), st.just(math.inf), st.just(0.0), CAPS))
            ops.append(("add", key, links, [1] * len(links), tcap))
            live.append(key)
        else:
            ops.append(other_op(draw, kind, live, gateways))
    return caps, ops


@settings(max_examples=150, deadline=None)
@given(hierarchy())
def test_gateway_components_equal_progressive_filling(case: tuple[list[float], list[tuple]]) -> None:
    """Groups that all cross one link (the server link behind gateways) are leveled together, and
    all at once when that link is the first to fill: the same rates as progressive filling over
    every flow, whatever the order of starts, finishes and changes (groups made and dropped)."""
    check_against_filling(*case)


def test_gateways_behind_a_full_server_link_by_hand() -> None:
    # server link 0 (12 B/s) behind gateway links 1 (10 B/s) and 2 (10 B/s): 3 flows behind
    # gateway 1, 1 behind gateway 2. The server link fills first at 12 / 4 = 3 each (gateway 1
    # carries 9 < 10): every group at the server's level. Then gateway 1's link drops to 4.5:
    # its flows get 1.5 each, the lone flow behind gateway 2 the rest of the server link, 7.5.
    rc = RateClasses([12.0, 10.0, 10.0])
    for k in range(3):
        rc.add(k, (0, 1), (1.0, 1.0), 100.0, math.inf, 0.0)
    rc.add(3, (0, 2), (1.0, 1.0), 100.0, math.inf, 0.0)
    rc.solve(0.0)
    assert [rc.rate(k) for k in range(4)] == [3.0, 3.0, 3.0, 3.0]
    rc.set_link_cap(1, 4.5, 0.0)
    rc.solve(0.0)
    assert [rc.rate(k) for k in range(4)] == [1.5, 1.5, 1.5, 7.5]
    rc.remove(3, 0.0)  # gateway 2's group is dropped: gateway 1 alone, still held by its link
    rc.solve(0.0)
    assert [rc.rate(k) for k in range(3)] == [1.5, 1.5, 1.5]
