"""Incremental max-min allocator against progressive filling over all flows, and hand cases."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiotsim.errors import ConfigError
from aiotsim.network.fairness import MaxMinAllocator
from aiotsim.network.flows import progressive_filling

REL = 1e-9


def reference(caps: list[float], flows: dict) -> dict:
    """Progressive filling over every flow; a flow's cap is a private link crossed once."""
    keys = list(flows)
    n_links = len(caps)
    cap = list(caps) + [math.inf]  # dummy padding link
    rows = []
    for key in keys:
        links, mults, fcap = flows[key]
        hops, mult = list(links), [float(m) for m in mults]
        if math.isfinite(fcap):
            cap.append(fcap)
            hops.append(len(cap) - 1)
            mult.append(1.0)
        rows.append((hops, mult))
    width = max((len(h) for h, _ in rows), default=1)
    hop_arr = np.full((len(keys), width), n_links, dtype=np.intp)
    mult_arr = np.zeros((len(keys), width))
    for r, (hops, mult) in enumerate(rows):
        hop_arr[r, : len(hops)] = hops
        mult_arr[r, : len(mult)] = mult
    rates = progressive_filling(np.array(cap), hop_arr, mult_arr) if keys else []
    return dict(zip(keys, (float(x) for x in rates), strict=True))


def assert_rates(got: dict, want: dict) -> None:
    assert set(got) == set(want)
    for key, rate in want.items():
        assert got[key] == pytest.approx(rate, rel=REL), key


def test_doc_example_by_hand() -> None:
    # a=10 shared by x,y; b=4 shared by y,z: b fills first at 2 (y, z), x takes 10 - 2 = 8
    alloc = MaxMinAllocator({"a": 10.0, "b": 4.0})
    alloc.add_flow("x", ["a"])
    alloc.add_flow("y", ["a", "b"])
    alloc.add_flow("z", ["b"])
    assert alloc.update() == {"x": 8.0, "y": 2.0, "z": 2.0}
    alloc.remove_flow("z")
    assert alloc.update() == {"x": 6.0, "y": 4.0}  # y alone on b takes all 4, x the rest of a
    alloc.remove_flow("x")
    assert alloc.update() == {}  # y alone: the tighter of a (10) and b (4), unchanged
    assert alloc.rates() == {"y": 4.0}


def test_cap_acts_as_private_link() -> None:
    # x capped at 2 on a 10 link shared with y: y takes the remaining 8
    alloc = MaxMinAllocator({"a": 10.0})
    alloc.add_flow("x", ["a"], cap=2.0)
    alloc.add_flow("y", ["a"])
    assert alloc.update() == {"x": 2.0, "y": 8.0}
    alloc.set_cap("x", math.inf)
    assert alloc.update() == {"x": 5.0, "y": 5.0}
    alloc.set_cap("y", 20.0)  # a cap above the fair share changes nothing
    assert alloc.update() == {}


def test_link_crossed_twice_counts_twice() -> None:
    # a radio channel crossed up and down (mult 2) next to a one-way flow: 2r + r = 9 -> r = 3
    alloc = MaxMinAllocator({"ch": 9.0})
    alloc.add_flow("relay", ["ch"], [2])
    alloc.add_flow("direct", ["ch"], [1])
    assert alloc.update() == pytest.approx({"relay": 3.0, "direct": 3.0})


def test_only_the_touched_component_is_recomputed() -> None:
    # 100 flows each on its own link, and one pair sharing a link: starting a flow on link 7
    # recomputes only the two flows on link 7
    caps = {i: 1.0 + i for i in range(100)}
    alloc = MaxMinAllocator(caps)
    for i in range(100):
        alloc.add_flow(i, [i])
    alloc.update()
    before = alloc.recomputed
    alloc.add_flow("new", [7])
    assert alloc.update() == {7: 4.0, "new": 4.0}  # link 7 has capacity 8, halved
    assert alloc.recomputed - before == 2
    alloc.remove_flow("new")
    assert alloc.update() == {7: 8.0}
    assert alloc.recomputed - before == 3


def test_bridge_merges_then_removal_splits() -> None:
    alloc = MaxMinAllocator({"a": 4.0, "b": 6.0})
    alloc.add_flow("x", ["a"])
    alloc.add_flow("y", ["b"])
    assert alloc.update() == {"x": 4.0, "y": 6.0}
    alloc.add_flow("bridge", ["a", "b"])  # a fills first: x = bridge = 2, y = 6 - 2 = 4
    assert alloc.update() == {"x": 2.0, "y": 4.0, "bridge": 2.0}
    alloc.remove_flow("bridge")
    assert alloc.update() == {"x": 4.0, "y": 6.0}
    before = alloc.recomputed
    alloc.add_flow("z", ["b"])  # split again: only y and z are recomputed
    assert alloc.update() == {"y": 3.0, "z": 3.0}
    assert alloc.recomputed - before == 2


def test_bad_input_is_a_config_error() -> None:
    alloc = MaxMinAllocator({"a": 1.0})
    with pytest.raises(ConfigError, match="unknown link"):
        alloc.add_flow("x", ["nope"])
    with pytest.raises(ConfigError, match="no link and has no cap"):
        alloc.add_flow("x", [])
    with pytest.raises(ConfigError, match="cap"):
        alloc.add_flow("x", ["a"], cap=0.0)
    alloc.add_flow("x", ["a"])
    with pytest.raises(ConfigError, match="already active"):
        alloc.add_flow("x", ["a"])
    with pytest.raises(ConfigError, match="must be > 0"):
        MaxMinAllocator({"a": 0.0})


# capacities from a small set so that ties (several links filling at one level) are common
CAPS = st.sampled_from([1.0, 2.0, 3.0, 5.0, 10.0, 0.7, 12.5])


@st.composite
def scenario(draw: st.DrawFn) -> tuple[list[float], list[tuple]]:
    n_links = draw(st.integers(1, 7))
    caps = [draw(CAPS) for _ in range(n_links)]
    ops: list[tuple] = []
    live: list[int] = []
    for key in range(draw(st.integers(1, 40))):
        kind = draw(st.sampled_from(["add", "add", "add", "remove", "cap", "update"]))
        if kind == "add" or not live:
            links = draw(st.lists(st.integers(0, n_links - 1), min_size=1, max_size=4, unique=True))
            mults = [draw(st.sampled_from([1, 1, 2])) for _ in links]
            cap = draw(st.one_of(st.just(math.inf), st.just(math.inf), CAPS))
            ops.append(("add", key, links, mults, cap))
            live.append(key)
        elif kind == "remove":
            ops.append(("remove", live.pop(draw(st.integers(0, len(live) - 1)))))
        elif kind == "cap":
            ops.append(("cap", draw(st.sampled_from(live)), draw(st.one_of(st.just(math.inf), CAPS))))
        else:
            ops.append(("update",))
    return caps, ops


@settings(max_examples=40, deadline=None)
@given(scenario())
def test_matches_progressive_filling_over_all_flows(case: tuple[list[float], list[tuple]]) -> None:
    """After every update: same rates as filling over all flows, and `changed` lists exactly the
    flows whose rate moved (new flows included)."""
    check_sequence(case)


@pytest.mark.slow
@settings(max_examples=1500, deadline=None)
@given(scenario())
def test_matches_progressive_filling_many_sequences(case: tuple[list[float], list[tuple]]) -> None:
    check_sequence(case)


def check_sequence(case: tuple[list[float], list[tuple]]) -> None:
    """Replay ``case``'s operations on the allocator and on a dict; compare at every update."""
    caps, ops = case
    alloc = MaxMinAllocator(dict(enumerate(caps)))
    flows: dict = {}
    seen: dict = {}  # rates as of the last update
    for op in ops:
        if op[0] == "add":
            _, key, links, mults, cap = op
            alloc.add_flow(key, links, mults, cap=cap)
            flows[key] = (links, mults, cap)
        elif op[0] == "remove":
            alloc.remove_flow(op[1])
            del flows[op[1]]
        elif op[0] == "cap":
            alloc.set_cap(op[1], op[2])
            flows[op[1]] = (*flows[op[1]][:2], op[2])
        else:
            changed = alloc.update()
            want = reference(caps, flows)
            assert_rates(alloc.rates(), want)
            moved = {k for k in want if k not in seen or not want[k] == pytest.approx(seen[k], rel=REL)}
            assert moved <= set(changed)
            assert set(changed) <= set(want)
            seen = want
    alloc.update()
    assert_rates(alloc.rates(), reference(caps, flows))
