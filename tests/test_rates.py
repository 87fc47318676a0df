"""Rate classes (network/rates.py): hand cases, and rates equal to progressive filling over all
flows after any sequence of starts, finishes, cap and capacity changes (hypothesis)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import event, example, given, settings
from hypothesis import strategies as st

from aiotsim.network.flows import progressive_filling
from aiotsim.network.rates import NEAR, RateClasses

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


DONE = 1e-9  # bytes: a flow with fewer left is finished (the network's DONE_BYTES)


def drive(
    caps: list[float], ops: list[tuple], check_rates: bool = True, last_rate: dict | None = None
) -> tuple[dict, list[bool]]:
    """Run rate classes through time as the network's controller does: jump to the next
    completion or op, finish the flows due, apply the ops due (("add", t, key, links, mults,
    nbytes, tcap), ("link", t, link, cap), ("cap", t, key, tcap)), solve; after every solve the
    rates equal progressive filling (``check_rates``). Returns each flow's finish time and, per
    solve, whether a component was on the shared clock (the common regime). A solve also
    reports each flow that starts or stops running at its cap (within NEAR: what TCP needs,
    ``report_near``). ``last_rate``: filled with each flow's rate when it finished (bytes/s)."""
    caps = list(caps)
    rc = RateClasses(list(caps), report_near=True)
    ops = sorted(ops, key=lambda op: op[1])
    flows: dict = {}
    done: dict = {}
    regime: list[bool] = []
    bound: dict = {}  # flow -> whether it ran at its cap after the last solve
    now = 0.0
    for _ in range(10_000):  # a loop that makes no progress fails below
        if not ops and not rc.flows:
            return done, regime
        now = min(rc.next_finish(now), ops[0][1] if ops else math.inf)
        assert math.isfinite(now)
        for key in rc.due(now, DONE):
            if last_rate is not None:
                last_rate[key] = rc.rate(key)
            rc.remove(key, now)
            done[key] = now
            del flows[key]
        while ops and ops[0][1] <= now:
            op = ops.pop(0)
            if op[0] == "add":
                _, _, key, links, mults, nbytes, tcap = op
                rc.add(key, tuple(links), tuple(map(float, mults)), nbytes, tcap, now)
                flows[key] = (links, mults, tcap)
            elif op[0] == "link":
                caps[op[2]] = op[3]
                rc.set_link_cap(op[2], op[3], now)
            elif op[2] in flows:
                rc.set_tcap(op[2], op[3], now)
                flows[op[2]] = (*flows[op[2]][:2], op[3])
        touched = set(rc.solve(now))
        regime.append(bool(rc._commons))
        for key in flows:
            at_cap = rc.rate(key) >= rc.cap_of(key) * (1.0 - NEAR)
            assert bound.get(key) == at_cap or key in touched, (now, key)
            bound[key] = at_cap
        if check_rates:
            for key, rate in reference(caps, flows).items():
                assert rc.rate(key) == pytest.approx(rate, rel=REL, abs=1e-12), (now, key)
    raise AssertionError("no progress")


def fluid(caps: list[float], ops: list[tuple]) -> dict:
    """The same runs by brute force: progressive filling over every live flow at every event, each
    flow drained at its rate until the next event (the reference for finish times)."""
    caps = list(caps)
    ops = sorted(ops, key=lambda op: op[1])
    flows: dict = {}
    left: dict = {}
    done: dict = {}
    now = 0.0
    while ops or left:
        while ops and ops[0][1] <= now:
            op = ops.pop(0)
            if op[0] == "add":
                flows[op[2]], left[op[2]] = (op[3], op[4], op[6]), float(op[5])
            elif op[0] == "link":
                caps[op[2]] = op[3]
            elif op[2] in flows:
                flows[op[2]] = (*flows[op[2]][:2], op[3])
        rates = reference(caps, flows)
        step = min([left[k] / rates[k] for k in left if rates[k] > 0] + [ops[0][1] - now if ops else math.inf])
        now += step
        for key in list(left):
            left[key] -= rates[key] * step
            if left[key] <= 1e-12:  # float residue of draining to its own finish time
                done[key] = now
                del left[key], flows[key]
    return done


def test_gateways_in_and_out_of_the_common_regime_by_hand() -> None:
    # server link 0 (6 B/s) behind gateway 1 (3.5 B/s: flows a, b, c of 2, 10, 10 bytes) and
    # gateway 2 (10 B/s: flows d, e, f of 1, 10, 10 bytes), all from t = 0.
    # t in [0, 1]: server fill 6/6 = 1 < gateway 1's 3.5/3: the server link fills first, every
    #   flow at 1 B/s (common regime). d finishes at t = 1.
    # t in [1, 13/7]: server 6/5 = 1.2 > gateway 1's 3.5/3: gateway 1 fills first (a, b, c at
    #   7/6), e and f share the rest of the server link, (6 - 3.5) / 2 = 1.25: not common.
    #   a (1 byte left) finishes at 1 + 6/7 = 13/7.
    # then b, c (8 bytes left) and e, f (10 - 1 - 1.25 x 6/7 = 55.5/7 left): server 6/4 = 1.5 <
    #   gateway 1's 1.75: common again; e, f finish at 13/7 + 55.5/7/1.5 = 50/7, b and c have
    #   8 - 1.5 x 37/7 = 1/14 left, then alone behind gateway 1 at 1.75: done at 50/7 + 2/49.
    sizes = {"a": 2.0, "b": 10.0, "c": 10.0, "d": 1.0, "e": 10.0, "f": 10.0}
    ops = [("add", 0.0, k, [0, 1 if k in "abc" else 2], [1, 1], n, math.inf) for k, n in sizes.items()]
    done, regime = drive([6.0, 3.5, 10.0], ops)
    want = {"d": 1.0, "a": 13 / 7, "e": 50 / 7, "f": 50 / 7, "b": 352 / 49, "c": 352 / 49}
    assert done == pytest.approx(want, rel=1e-12)
    # solves at t = 0, 1, 13/7, 50/7, 352/49: common, not, common, a lone group, none left
    assert regime == [True, False, True, False, False]


def test_two_gateways_of_two_flows_behind_one_server_link_by_hand() -> None:
    # server 4 B/s; gateways 10 B/s: a (4 bytes), b (8) behind gateway 1, c (6), d (12) behind
    # gateway 2. The server link fills first: 1 B/s each until a is done at t = 4; then 4/3 each:
    # c (2 left) done at 5.5; b and d at 2 B/s: b (2 left) done at 6.5; d (4 left) alone at the
    # server's 4 B/s: done at 7.5. A flow crossing the server link twice (e, 6 bytes, starting at
    # t = 7.5 behind gateway 1) weighs 2 there: alone at 4 / 2 = 2 B/s, done at 10.5.
    sizes = {"a": (1, 4.0), "b": (1, 8.0), "c": (2, 6.0), "d": (2, 12.0)}
    ops = [("add", 0.0, k, [0, gw], [1, 1], n, math.inf) for k, (gw, n) in sizes.items()]
    ops.append(("add", 7.5, "e", [0, 1], [2, 1], 6.0, math.inf))
    done, regime = drive([4.0, 10.0, 10.0], ops)
    assert done == pytest.approx({"a": 4.0, "c": 5.5, "b": 6.5, "d": 7.5, "e": 10.5}, rel=1e-12)
    # solves at t = 0 and 4: common (at 4, b alone behind gateway 1 is a group of the server link
    # only, c and d another); from 5.5 b and d are each alone behind their gateway: one group
    # (the server link only), then no shared link at all
    assert regime == [True, True, False, False, False, False]


@st.composite
def timed_hierarchy(draw: st.DrawFn) -> tuple[list[float], list[tuple]]:
    """Gateways (links 1..G) behind a server link (link 0): flows start over time behind a
    gateway (or straight on the server link), some with a private link or a TCP-like cap, some
    crossing the server link twice; gateway and server capacities and flows' caps change over
    time, so components go in and out of the common regime and flows between capped and leveled."""
    gateways = draw(st.integers(2, 7))
    caps = [draw(st.sampled_from([4.0, 6.0, 10.0, 12.5]))] + [
        draw(st.sampled_from([1.0, 2.0, 3.5, 5.0, 20.0])) for _ in range(gateways)
    ]
    times = st.sampled_from([0.0, 0.0, 0.5, 1.0, 2.0, 3.0]) | st.floats(0.0, 4.0)
    ops: list[tuple] = []
    n_flows = draw(st.integers(1, 25))
    for key in range(n_flows):
        gw = draw(st.integers(0, gateways))
        links, mults = ([0, gw] if gw else [0]), [draw(st.sampled_from([1, 1, 1, 2]))] + ([1] if gw else [])
        if draw(st.integers(0, 3)) == 0:
            caps.append(draw(CAPS))  # its private link
            links, mults = [*links, len(caps) - 1], [*mults, 1]
        tcap = draw(st.sampled_from([math.inf, math.inf, 0.3, 0.7, 1.0, 2.0]))
        nbytes = draw(st.sampled_from([1.0, 2.0, 5.0, 10.0, 30.0]))
        ops.append(("add", draw(times), key, links, mults, nbytes, tcap))
    for _ in range(draw(st.integers(0, 6))):
        if draw(st.booleans()):
            ops.append(("link", draw(times), draw(st.integers(0, gateways)), draw(CAPS)))
        else:
            ops.append(
                ("cap", draw(times), draw(st.integers(0, n_flows - 1)), draw(st.sampled_from([math.inf, 0.5, 3.0])))
            )
    return caps, ops


# found by a random run: flow 13 starts 1e-9 s after the others of its group and is within DONE
# bytes of them when they finish, so it finishes with them, 2.25e-9 s early (DONE / 0.29 B/s allows 3.5e-9)
_LATE_BY_A_NANOSECOND = (
    [4.0] + [1.0] * 13,
    [("add", 0.0, k, [0], [1], 1.0, math.inf) for k in range(3)]
    + [("add", 0.0, 3, [0, 4], [1, 1], 1.0, math.inf), ("add", 0.0, 4, [0, 5], [1, 1], 1.0, 0.3)]
    + [("add", 0.5, k, [0, k + 1], [1, 1], 1.0, math.inf) for k in (5, 6, 7)]
    + [("add", 1.0, 8, [0], [1], 1.0, math.inf)]
    + [("add", 1.0, k, [0, k], [1, 1], 1.0, math.inf) for k in (9, 10)]
    + [("add", 2.0, k, [0, k], [1, 1], 1.0, math.inf) for k in (11, 12)]
    + [("add", 1e-09, 13, [0, 13], [1, 1], 1.0, math.inf)],
)


@settings(max_examples=200, deadline=None)
@given(timed_hierarchy())
@example(_LATE_BY_A_NANOSECOND)
def test_gateway_runs_over_time_equal_brute_force_filling(case: tuple[list[float], list[tuple]]) -> None:
    """Hierarchies driven through time: after every event the rates equal progressive filling
    over every flow, and every flow finishes when the brute-force fluid run says (1e-9), through
    switches in and out of the common regime (shared clock attached and detached)."""
    caps, ops = case
    rate: dict = {}
    done, regime = drive(caps, ops, last_rate=rate)
    want = fluid(caps, ops)
    assert done.keys() == want.keys()
    for key, at in want.items():
        # a flow is finished with fewer than DONE bytes left: up to DONE / its rate seconds early
        # (1 B/s flows here: 1e-9 s; a real link's 1e5+ B/s: below 1e-14 s)
        early = DONE / rate[key] if rate[key] > 0 else 0.0
        assert done[key] == pytest.approx(at, rel=1e-9, abs=1e-9 + early), key
    left = any(a and not b for a, b in zip(regime, regime[1:], strict=False))
    event(f"common regime: {'entered' if any(regime) else 'never'}{', left' if left else ''}")


def test_a_fleet_behind_a_full_server_link_settles_without_a_pass_over_its_gateways(monkeypatch) -> None:
    # 200 gateways (links 1..200, 10 B/s each) of 3 flows behind a 60 B/s server link (0): the
    # server link fills first (0.1 B/s per flow, a gateway carries 0.3), so every group is on the
    # shared clock. A finish and a start behind one gateway then cost one refresh (that group's)
    # and no progressive filling over the gateways; due() and next_finish() see one component,
    # no group on its own clock.
    gateways = 200
    rc = RateClasses([60.0] + [10.0] * gateways)
    for k in range(3 * gateways):
        rc.add(k, (0, 1 + k % gateways), (1.0, 1.0), 1.0 + k, math.inf, 0.0)
    rc.solve(0.0)
    assert len(rc._commons) == 1 and not rc._solo
    assert {rc.rate(k) for k in range(3 * gateways)} == {0.1}
    first = rc.next_finish(0.0)
    assert first == pytest.approx(10.0)  # flow 0: 1 byte at 0.1 B/s

    from aiotsim.network.components import Component

    def no_filling(*_args: object) -> None:
        raise AssertionError("progressive filling over the gateways")

    refreshed: list[object] = []
    refresh = Component.refresh
    monkeypatch.setattr(RateClasses, "_fill_levels", no_filling)
    monkeypatch.setattr(Component, "refresh", lambda c, g, *a: (refreshed.append(g), refresh(c, g, *a))[1])
    assert rc.due(first, 1e-9) == [0]
    rc.remove(0, first)
    rc.add(10_000, (0, 1), (1.0, 1.0), 5.0, math.inf, first)  # a new upload behind gateway 1
    rc.solve(first)
    assert len(refreshed) == 1 and len(rc._commons) == 1 and not rc._solo
    assert rc.rate(10_000) == rc.rate(1) == 0.1  # still 600 flows on 60 B/s
    # flow 1 (2 bytes) drained 1 byte by t = 10: done at 20
    assert rc.next_finish(first) == pytest.approx(20.0) and rc.remaining(1, first) == pytest.approx(1.0)
