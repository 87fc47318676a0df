"""Batched PGC (seed 002): Algorithm 1 and the T_alpha screening of many nodes' layer as
``[nodes, n]`` rows, byte-identical to each node's own encode
(:class:`~aiotsim.compress.pgc.PartitionGradientCompression`).

What runs over the rows at once: the momentum correction (:func:`~aiotsim.compress.rowwise.velocity_rows`),
Algorithm 1's float64 sums (``sum |G|``, ``sum G``, ``sum (G - mu)^2``, where ``mu`` is each row's
own float64 mean rounded to fp32 as the loop's scalar is) and extremes, one row-wise top-k whose
``k_i``-th value is each row's threshold (the ``k``-th largest magnitude is one value, however
ties are ordered), and one ``nonzero`` of ``|acc| >= alpha``. Reads of the host: the statistics,
the thresholds and the counts, once per layer each, not once per node. Per node, in Python: the
scalars of Algorithm 1 (:func:`~aiotsim.compress.pgc.algorithm1`, the loop's own function).

A row whose statistics are not finite (a diverging run: NaN, an overflowing sum of squares) or
whose accumulation holds a NaN takes the loop's own functions for its threshold, so that its
result is the loop's too.
"""

from __future__ import annotations

import math

import torch

from aiotsim.compress.base import Codec, CodecState, LayerInfo, Payload
from aiotsim.compress.packing import encode_index_ragged, pack_values
from aiotsim.compress.pgc import (
    PartitionGradientCompression,
    PGCThreshold,
    TopkReading,
    algorithm1,
    kth_largest,
    pgc_threshold,
)
from aiotsim.compress.rowwise import row_reduce, velocity_rows
from aiotsim.compress.sparsify import round_values

_F64 = torch.float64


def pgc_input(codec: Codec, x: torch.Tensor, layer: LayerInfo, states: list[CodecState]) -> torch.Tensor:
    """PGC's ``_feedback_input`` of every row: the velocity ``u <- m u + g`` (``m = 0``: ``g``)."""
    g = x if x.dtype == torch.float32 else x.float()
    m = codec.params.momentum  # type: ignore[attr-defined]
    return g if m == 0.0 else velocity_rows(g, states, layer, m)


def pgc_rows(codec: Codec, acc: torch.Tensor, layer: LayerInfo, states: list[CodecState], grad: torch.Tensor):
    """Every row's Algorithm-1 threshold (on the raw gradient rows ``grad``, or on ``acc`` where
    the loop reads the accumulation) and its screened values ``|acc| >= alpha``, as messages."""
    pgc: PartitionGradientCompression = codec  # type: ignore[assignment]
    p = pgc.params
    n = acc.shape[1]
    own = p.stats == "accumulated" or (not pgc.error_feedback and p.momentum == 0.0)  # as _encode's
    src = acc if own else (grad if grad.dtype == torch.float32 else grad.float())
    thr, mag = _algorithm1_rows(src, p.scale, p.topk_reading)
    if not own:  # |acc| instead of |src|: the one dropped before the other is made
        del mag
        mag = acc.abs()  # [nodes, n]
    thr = _alphas(thr, mag)
    for s, t in zip(states, thr):
        s.last = t  # type: ignore[attr-defined]
    alpha = torch.tensor([t.alpha for t in thr], dtype=torch.float32, device=acc.device).unsqueeze(1)
    keep = ~(mag < alpha)  # T_alpha, "not below": a NaN is sent, as in the loop
    del mag
    counts = keep.sum(dim=1).tolist()  # one host read for every row, and one nonzero
    flat = torch.nonzero(keep.view(-1)).reshape(-1)  # [m] ascending into [nodes * n]
    values = round_values(acc.view(-1).index_select(0, flat), p.value_dtype)
    coded = encode_index_ragged(flat.remainder(n), counts, n)
    payloads = [
        Payload({"indices": c.buf, "values": pack_values(v, p.value_dtype)}, {"indices": c.head})
        for c, v in zip(coded, values.split(counts))
    ]
    return payloads, ("flat", (flat, values))


def _algorithm1_rows(src: torch.Tensor, scale: float, reading: TopkReading) -> tuple[list[PGCThreshold], torch.Tensor]:
    """Algorithm 1 on every row of ``src`` (alpha left to :func:`_alphas`) and ``|src|``."""
    n = src.shape[1]
    total = row_reduce(lambda r: r.sum(dtype=_F64), src, lambda x: x.sum(dim=1, dtype=_F64))
    mu = (total / n).to(torch.float32).unsqueeze(1)  # the loop's Python mean, as its fp32 scalar
    dev = (src - mu).pow_(2)  # [nodes, n] (G - mu)^2 in fp32, as the loop's ``** 2``
    squares = row_reduce(lambda r: r.sum(dtype=_F64), dev, lambda x: x.sum(dim=1, dtype=_F64))
    del dev
    lo, hi = row_reduce(
        lambda r: torch.stack(torch.aminmax(r)), src, lambda x: torch.stack(torch.aminmax(x, dim=1), 1)
    ).T
    mag = src.abs()
    g_sum = row_reduce(lambda r: r.sum(dtype=_F64), mag, lambda x: x.sum(dim=1, dtype=_F64))
    stats = torch.stack([g_sum, total, squares, hi.double(), lo.double()], 1).tolist()  # one host read
    thr: list[PGCThreshold] = []
    for i, (a, t, q, top, low) in enumerate(stats):
        if all(math.isfinite(v) for v in (a, t, q, top, low)):
            thr.append(algorithm1(n, a, t, q, top, low, scale, reading))
        else:  # the loop's own function on this row (NaN, overflowing squares); its alpha: _alphas's
            thr.append(pgc_threshold(src[i], scale, reading))
    return thr, mag


def _alphas(thr: list[PGCThreshold], mag: torch.Tensor) -> list[PGCThreshold]:
    """``alpha`` of every row with ``k > 0``: the ``k``-th value of one sorted row-wise top-k of
    ``mag`` (``|acc|``); a row holding a NaN (top-k puts it first) takes
    :func:`~aiotsim.compress.pgc.kth_largest`, the loop's own."""
    ks = [t.k for t in thr]
    if not any(ks):
        return thr
    top = torch.topk(mag, max(ks), dim=1, sorted=True).values  # [nodes, k_max] descending
    rows = torch.arange(len(ks), device=mag.device)
    at = torch.tensor([max(k - 1, 0) for k in ks], device=mag.device)
    picked = torch.stack([top[rows, at], top[:, 0]], 1).tolist()  # one host read: the k-th and the first
    out = []
    for i, (t, (kth, first)) in enumerate(zip(thr, picked)):
        if not t.k:
            out.append(t)  # all-zero row: alpha = inf, nothing sent
        elif math.isnan(first):
            out.append(t._replace(alpha=kth_largest(mag[i], t.k)))
        else:
            out.append(t._replace(alpha=kth))
    return out


__all__ = ["pgc_input", "pgc_rows"]
