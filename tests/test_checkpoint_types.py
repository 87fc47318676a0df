"""The declared-type checks of a checkpoint's plain data (aiotsim.sim.checkpoint_types)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch

from aiotsim.sim.checkpoint_types import Rules, bit_generator, record, typed


class Pair(NamedTuple):
    a: float
    k: int


@dataclass
class Rec:
    n: int
    t: float
    xs: list[float]
    pair: Pair | None = None


def test_numbers_follow_the_rules() -> None:
    assert typed(3, float, "x") == [] and typed(3.5, float, "x") == []  # an int is a float's value
    assert typed(True, int, "x") == ["x (=True) must be a int"]  # never a bool
    assert typed(2.0, int, "x") == ["x (=2.0) must be a int"]
    assert typed(float("nan"), float, "x") == ["x (=nan) must be a finite number >= 0"]
    assert typed(float("inf"), float, "x") != [] and typed(float("inf"), float, "x", Rules(inf=True)) == []
    assert typed(-1, int, "x") == ["x (=-1) must be a finite number >= 0"]
    assert typed(-1.5, float, "x", Rules(nonneg=False)) == []


def test_containers_unions_named_tuples_and_records() -> None:
    assert typed([1.0, "a"], list[float], "l") == ["l[1] (='a') must be a float"]
    assert typed((1, "s", 2), tuple[int, str, int], "t") == [] and typed([1, "s"], tuple[int, str, int], "t") != []
    assert typed({"k": 1}, dict[str, int], "d") == [] and typed({1: 1}, dict[str, int], "d") == [
        "d key (=1) must be a str"
    ]
    assert typed(None, Pair | None, "p") == [] and typed((0.5, 2), Pair | None, "p") == []  # stored as a tuple
    assert typed((0.5, "2"), Pair, "p") == ["p[1] (='2') must be a int"]
    assert typed(torch.tensor([1.0, float("inf")]), torch.Tensor | None, "g") == ["g holds NaN or infinite values"]
    ok = {"n": 1, "t": 0.5, "xs": [], "pair": None}
    assert record(ok, Rec, "r") == []
    assert record({**ok, "extra": 1}, Rec, "r") == ["r must hold exactly the fields n, pair, t, xs"]
    assert record({**ok, "xs": None}, Rec, "r") == ["r.xs must be a list, not NoneType"]


def test_generator_states_are_tried_on_a_scratch_generator() -> None:
    rng = np.random.default_rng(5)
    good = rng.bit_generator.state
    assert bit_generator(good, rng, "g") == []
    assert bit_generator({**good, "bit_generator": "MT19937"}, rng, "g") == [
        "g is not a PCG64 generator state (ValueError)"
    ]
    assert bit_generator(7, rng, "g") != [] and rng.bit_generator.state == good  # the real one untouched
