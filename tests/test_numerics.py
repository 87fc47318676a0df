"""Numerics that decide bytes on the wire (issue 42): a codec's scale of a large layer keeps every
digit of its statistics (float64 accumulation, compared with an independent float64 computation
on 10M values), and ``k_of`` keeps ``ceil(ratio * n)`` of the ratio as written."""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from aiotsim.compress import build_codec
from aiotsim.compress.base import LayerInfo
from aiotsim.compress.packing import unpack_f32
from aiotsim.compress.rowwise import row_norms64, row_sums64
from aiotsim.compress.sparsify import k_of

N = 10_000_000
CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def big() -> torch.Tensor:
    """10M gradient-like values: N(0, 0.01) with a positive mean, so that sums do not cancel."""
    return torch.randn(N, generator=torch.Generator().manual_seed(0)) * 0.01 + 0.003


def _exact(values: np.ndarray) -> float:
    """numpy's pairwise float64 sum (independent of torch; within ~1e-15 relative of the exact sum,
    far below the fp32 ulp the checks compare at)."""
    return float(np.sum(values, dtype=np.float64))


def _ulps(got: float, want: float) -> float:
    """How many fp32 units in the last place ``got`` is from ``want``."""
    return abs(got - want) / np.spacing(np.float32(abs(want)))


def test_row_reductions_accumulate_in_float64(big: torch.Tensor) -> None:
    x = big.numpy().astype(np.float64)
    l1, total = _exact(np.abs(x)), _exact(x)
    l2 = math.sqrt(_exact(x * x))
    rows = big.view(1, -1)
    assert row_norms64(rows, 1).item() == pytest.approx(l1, rel=1e-12)
    assert row_norms64(rows).item() == pytest.approx(l2, rel=1e-12)
    assert row_sums64(rows).item() == pytest.approx(total, rel=1e-12)
    two = big[: 2 * (N // 2)].view(2, -1)  # rows of a batch: each its own float64 reduction
    halves = [_exact(np.abs(h)) for h in np.split(x[: 2 * (N // 2)], 2)]
    assert row_norms64(two, 1).tolist() == pytest.approx(halves, rel=1e-12)


def test_efsignsgd_and_4bit_scales_of_10m_values_are_the_float64_ones(big: torch.Tensor) -> None:
    """The scale a message carries is the float64 statistic rounded once to fp32 (within one fp32
    ulp of the float64 value; float32 accumulation was 16,867 ulps off)."""
    layer = LayerInfo("w", (N,), kind="fc", index=0)
    x = big.numpy().astype(np.float64)
    mean_abs = _exact(np.abs(x)) / N
    rms = math.sqrt(_exact(x * x) / N)
    cases = [("efsignsgd", {}, "scale", mean_abs), ("4bit", {"statistic": "mean"}, "anchor", mean_abs)]
    cases.append(("4bit", {"statistic": "std"}, "anchor", rms))
    for name, params, field, want in cases:
        codec = build_codec(name, params, seed=1)
        payload = codec.encode(big, layer, codec.init_state(layer, CPU, node=0))
        got = unpack_f32(payload.buffers[field]).item()
        assert _ulps(got, want) <= 1.0, (name, params, got, want)


def test_onebit_column_means_are_the_float64_ones() -> None:
    """1-bit SGD's side means of a long column (a 1-D layer is one column of n values)."""
    n = 2_000_000
    g = torch.randn(n, generator=torch.Generator().manual_seed(1)) * 0.01 + 0.002
    layer = LayerInfo("b", (n,), kind="bias", index=0)
    codec = build_codec("onebit", {}, seed=1)
    payload = codec.encode(g, layer, codec.init_state(layer, CPU, node=0))
    means = unpack_f32(payload.buffers["means"]).view(-1, 2)  # [cols, (pos, neg)]
    x = g.numpy().astype(np.float64)
    pos, neg = x[x >= 0], x[x < 0]
    assert means.shape[0] == 1  # one column: the whole layer
    assert _ulps(means[0, 0].item(), _exact(pos) / pos.size) <= 1.0
    assert _ulps(means[0, 1].item(), _exact(neg) / neg.size) <= 1.0


# ---- k_of ---------------------------------------------------------------------------------------
@given(
    digits=st.integers(min_value=1, max_value=999_999),
    places=st.integers(min_value=1, max_value=6),
    n=st.integers(min_value=1, max_value=100_000_000),
)
def test_k_of_is_the_ceiling_of_the_ratio_as_written(digits: int, places: int, n: int) -> None:
    ratio = Decimal(digits).scaleb(-places)  # e.g. 7, 2 -> 0.07
    if ratio > 1:
        return
    want = min(n, max(1, math.ceil(Fraction(ratio) * n)))
    assert k_of(float(ratio), n) == want


def test_k_of_hand_cases() -> None:
    assert k_of(0.07, 100) == 7  # 0.07 * 100 = 7.000000000000001 in floats
    assert k_of(0.07, 2400) == 168
    assert k_of(1 - 0.999, 48_000) == 48  # DGC's final density: 0.0010000000000000009
    assert k_of(0.01, 150) == 2  # 1.5 rounds up
    assert k_of(0.001, 10) == 1 and k_of(0.5, 0) == 0 and k_of(1.0, 7) == 7
