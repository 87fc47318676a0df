"""Batched Gradient Variance (:class:`~aiotsim.compress.variance.VarianceCompression`): one layer
of many nodes as ``[nodes, n]`` rows, the same bytes and state changes as each node's encode.

Element-wise over the rows: ``v + s`` (each node's variance, in place where the variances are the
rows of one block), the selection ``r^2 > alpha v``, the 4-bit power-of-two codes (each row's own
largest magnitude, a segment maximum) and the decay and clearing of ``v``. Two steps stay per row,
for their rounding: ``r^2 - alpha v`` (``addcmul_`` may fuse its multiply-add differently in a
row's vectorized body and tail, so each row runs the loop's call on its own ``[n]``) and packing
each message's codes. With ``decay_residual`` (a residual decay per element) the encode is the
loop's (:func:`aiotsim.compress.batch.encode_batch` leaves it there).
"""

from __future__ import annotations

import torch

from aiotsim.compress.base import LayerInfo, Payload
from aiotsim.compress.memory import rows_block
from aiotsim.compress.packing import encode_index_ragged, pack_bits, pack_f32
from aiotsim.compress.sparse import sparse_payload
from aiotsim.compress.sparsify import round_values
from aiotsim.compress.variance import (
    _EXP_BITS,
    _MAX_EXP,
    _SQRT_HALF,
    VarianceCompression,
    VarianceState,
    dequantize_pow2,
)


def variance_rows(
    codec: VarianceCompression, acc: torch.Tensor, layer: LayerInfo, states: list[VarianceState], grads: torch.Tensor
) -> tuple[list[Payload], tuple[str, tuple[torch.Tensor, torch.Tensor]]]:
    """:meth:`VarianceCompression._encode` of every row of ``acc`` (``r + g``, fp32 ``[nodes, n]``;
    ``grads``: the raw gradient rows, the squares' stand-in where a node has no ``sq_grad``).
    Returns the payloads and what was sent (``("flat", (indices into [nodes * n], values))``)."""
    p = codec.params
    nodes, n = acc.shape
    var = _add_squares(states, _squares(states, grads), layer)  # v + s, [nodes, n]
    score = torch.empty_like(acc)
    for i in range(nodes):  # the loop's own call on each row (see the module docstring)
        torch.mul(var[i], -p.alpha, out=score[i]).addcmul_(acc[i], acc[i])
    send = score > 0
    del score
    flat = torch.nonzero(send.view(-1)).squeeze(1)  # [m] into [nodes * n]: row by row, ascending
    owner, cols = flat // n, flat % n
    counts = torch.bincount(owner, minlength=nodes).tolist()  # the one host read of the selection
    picked = acc.view(-1).index_select(0, flat)
    if p.quantize:
        codes, values, scales = _quantize_rows(picked, owner, nodes)
        coded = encode_index_ragged(cols, counts, n, send)
        payloads = [
            Payload(
                {"indices": c.buf, "scale": pack_f32([s], acc.device), "codes": pack_bits(k, 4)}, {"indices": c.head}
            )
            for c, s, k in zip(coded, scales, codes.split(counts))
        ]
    else:
        values = round_values(picked, p.value_dtype)
        payloads = [
            sparse_payload(i, v, n, p.value_dtype, m, ascending=True)
            for i, v, m in zip(cols.split(counts), values.split(counts), send)
        ]
    v_decay = p.zeta * p.zeta if p.decay_residual else p.zeta
    if v_decay != 1.0:
        var.mul_(v_decay)
    var.masked_fill_(send, 0.0)
    return payloads, ("flat", (flat, values))


def _squares(states: list[VarianceState], grads: torch.Tensor) -> torch.Tensor:
    """``[nodes, n]`` fp32: each node's ``sq_grad`` (the rows of a batched pass's block as they
    are), or its gradient squared where it has none (the codec's one-sample stand-in)."""
    sq = [s.sq_grad for s in states]
    if all(t is not None for t in sq):
        block = rows_block([t.reshape(-1) for t in sq])  # type: ignore[union-attr]
        if block is not None:
            return block
        return torch.stack([t.reshape(-1).float() for t in sq])  # type: ignore[union-attr]
    rows = [t.reshape(-1).float() if t is not None else g.float().square() for t, g in zip(sq, grads)]
    return torch.stack(rows)


def _add_squares(states: list[VarianceState], sq: torch.Tensor, layer: LayerInfo) -> torch.Tensor:
    """``v + s`` per row, into each node's variance where it has one (the loop's ``add_``), else a
    copy of ``s``; every state's ``variance`` is then its row of the result. Returns ``[nodes, n]``."""
    old = [s.variance for s in states]
    if all(v is None for v in old):
        var = sq.clone()
    else:
        block = rows_block([v.reshape(-1) for v in old]) if all(v is not None for v in old) else None  # type: ignore[union-attr]
        if block is not None:
            var = block.view(sq.shape).add_(sq)
        else:  # mixed: each node's own tensor as in the loop, their rows copied into one block after
            for s, row in zip(states, sq):
                s.variance = (
                    row.view(layer.shape).clone() if s.variance is None else s.variance.add_(row.view(layer.shape))
                )
            var = torch.stack([s.variance.reshape(-1) for s in states])  # type: ignore[union-attr]
    for s, row in zip(states, var):
        s.variance = row.view(layer.shape)
    return var


def _quantize_rows(
    values: torch.Tensor, owner: torch.Tensor, nodes: int
) -> tuple[torch.Tensor, torch.Tensor, list[float]]:
    """:func:`~aiotsim.compress.variance.quantize_pow2` of each row's picked ``values`` (``owner``:
    each value's row), relative to its row's largest magnitude: the codes and dequantized values in
    row order, and each row's scale (0.0 for a row that picked nothing)."""
    mag = values.abs()
    top = torch.zeros(nodes, dtype=torch.float32, device=values.device).scatter_reduce_(0, owner, mag, "amax")
    scales = top.tolist()  # exact fp32 values, as float(mag.max()) reads them
    # 1 / scale in double, rounded to fp32: the factor mul_(1.0 / scale) applies (0 for an empty row)
    inv = torch.where(top != 0, 1.0 / top.double(), 0.0).float()
    m, big_e = torch.frexp(mag.mul_(inv.index_select(0, owner)))
    e = (m < _SQRT_HALF).to(torch.int32).sub_(big_e).clamp_(0, _MAX_EXP)
    codes = e.to(torch.uint8) | ((values < 0).to(torch.uint8) << _EXP_BITS)
    # each row's 16-entry table (dequantize_pow2 of every code at the row's scale), then a gather
    every = torch.arange(1 << (_EXP_BITS + 1), device=values.device).to(torch.uint8).expand(nodes, -1)
    tables = dequantize_pow2(every, top.unsqueeze(1))
    deq = tables.reshape(-1).index_select(0, owner * (1 << (_EXP_BITS + 1)) + codes.to(torch.int64))
    return codes, deq, scales


__all__ = ["variance_rows"]
