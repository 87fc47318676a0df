"""The divergence check: :func:`aiotsim.sim.stops.non_finite` finds every NaN and infinity."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from aiotsim.sim.stops import non_finite

DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.complex64, torch.int64)
BAD = (math.nan, math.inf, -math.inf)


@settings(max_examples=200, deadline=None)
@given(
    shapes=st.lists(st.lists(st.integers(0, 7), min_size=0, max_size=3), min_size=1, max_size=5),
    dtype=st.sampled_from(DTYPES),
    bad=st.sampled_from((None, *BAD)),
    where=st.integers(0, 10_000),
    imag=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_non_finite_agrees_with_isfinite(
    shapes: list[list[int]], dtype: torch.dtype, bad: float | None, where: int, imag: bool, seed: int
) -> None:
    gen = torch.Generator().manual_seed(seed)
    tensors = [(torch.randn(s, generator=gen, dtype=torch.float64) * 1e3).to(dtype) for s in shapes]
    sizes = [t.numel() for t in tensors]
    if bad is not None and dtype.is_floating_point | dtype.is_complex and sum(sizes):
        flat = where % sum(sizes)  # the element that turns bad, across the tensors
        k = next(k for k in range(len(sizes)) if flat < sum(sizes[: k + 1]))
        value = complex(0.0, bad) if imag and dtype.is_complex else bad
        tensors[k].view(-1)[flat - sum(sizes[:k])] = value
    expected = all(bool(torch.isfinite(t).all()) for t in tensors)
    assert (non_finite([], tensors) is None) == expected


def test_a_large_float64_value_is_finite() -> None:
    # beyond float32's range: a check that compared in float32 would call it infinite
    assert non_finite([], [torch.tensor([1e300, -1e300], dtype=torch.float64), torch.zeros(3)]) is None


@pytest.mark.parametrize("bad", BAD)
def test_one_bad_element_among_many(bad: float) -> None:
    update = [torch.zeros(6, 1, 5, 5), torch.zeros(48_000)]
    update[1][31_337] = bad
    assert non_finite([0.5], update) == "the aggregated update is not finite"
    assert non_finite([bad], update) == f"training loss is {bad}"  # the losses are named first


def test_empty_and_missing_updates_are_finite() -> None:
    assert non_finite([0.1, 2.0]) is None
    assert non_finite([], []) is None
    assert non_finite([], [torch.zeros(0), torch.zeros(0, 3)]) is None
