"""Variance-based gradient compression (Tsuzuku, Imachi, Akiba 2018, arXiv 1802.06058).

The idea: delay an element's update until it is *unambiguous*, i.e. its accumulated amplitude is
large relative to its accumulated variance. Per node and layer, for every element ``i``::

    r_i <- r_i + g_i                 accumulated gradient (the residual, error feedback)
    v_i <- v_i + s_i                 accumulated variance estimate; s = state.sq_grad, the batch
                                     mean of per-sample squared gradients (filled by the engine)
    if r_i^2 > alpha * v_i:          unambiguous: send r_i (quantized), then
        r_i <- r_i - q(r_i);  v_i <- 0
    else:                            ambiguous: keep it; the stale variance evidence decays
        v_i <- zeta * v_i            (decay_residual = true: r_i <- zeta r_i, v_i <- zeta^2 v_i)

Reading of the paper, and the choices made here:

* ``v``: the paper estimates the variance of the mini-batch gradient from per-sample squared
  gradients at negligible cost. The engine supplies the batch *mean* of per-sample squares (the
  per-sample second moment, an upper bound on the per-sample variance); the variance of the
  batch-mean gradient is that divided by the batch size ``B``, which the codec does not know, so
  ``alpha`` here equals the paper's alpha divided by ``B``. An element with per-step mean ``mu`` and
  per-sample spread ``s`` is sent after about ``alpha * (1 + s^2 / mu^2)`` steps. Default
  ``alpha = 0.1`` (the paper's scale times 1/B at B ~ 16-32), measured on ``tests/tiny.toml``
  (MLP on digits, batch 16, 2 nodes, 30 iterations): 16.8x uplink compression and 85.8% accuracy
  against 82.7% for ``none``; ``alpha = 2`` gives 744x and 77.4%. On iot10 (LeNet-5, MNIST, 10
  nodes, 300 iterations): 8.1x and 96.4% (``none`` 95.8%). The PGC paper's Table 3 reports 18.3x
  for Gradient Variance on LeNet.
* without ``state.sq_grad`` (a compressed downlink, where the server re-encodes its aggregated
  update and has no per-sample gradients) the squared message itself is the one-sample proxy
  ``s = g^2``: an element is then sent once its sign has been consistent for about alpha steps.
* decay: the paper decays the accumulators of unsent elements by ``zeta``; its full text was not
  available when this was written, so which accumulators decay is a parameter. Default
  (``decay_residual = false``): only ``v`` decays, ``v <- zeta v``, as in a public
  re-implementation of the method; ``r`` is an exact error-feedback residual, so ``sent +
  residual_after == grad + residual_before`` holds. ``decay_residual = true`` also forgets stale
  amplitude, ``r <- zeta r`` and ``v <- zeta^2 v`` (variance scales with the square); the decayed
  part of ``r`` is then dropped by design. ``zeta = 1`` disables decay.
* quantization (``quantize = true``): the paper quantizes the sent values; its exact format could
  not be checked here, and this implements the reading of a sign and a power-of-two magnitude
  relative to the largest sent magnitude. Here ``M = max |r_i|`` over the sent
  set travels once as fp32 and each value as a 4-bit code: 1 sign bit and a 3-bit exponent ``e``
  (``|q| = M * 2**-e``, ``e`` = the nearest integer to ``log2(M / |r_i|)``, clipped to 0..7). The
  quantization error ``r_i - q(r_i)`` stays in the residual (error feedback) rather than being
  dropped; ``v_i`` restarts at 0. ``quantize = false`` sends exact values (``value_dtype``).

Wire format: the shared index coding of :mod:`aiotsim.compress.sparse`, then either ``scale``
(4 bytes) and ``codes`` (4 bits per sent element) or the exact ``values``.

The encoder works on one layer of one or many nodes as ``[rows, n]`` rows (one node is one row):
``v + s`` (in place where the variances are the rows of one block), the selection, the 4-bit codes
(each row relative to its own largest magnitude, :func:`quantize_pow2_rows`) and the decay and
clearing of ``v`` run over every row at once; ``r^2 - alpha v`` is formed row by row in one reused
buffer, and with ``decay_residual`` the residual's decay is the factor the error-feedback role
applies (:data:`~aiotsim.compress.memory.SentRows`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import torch

from aiotsim.compress.base import Codec, CodecState, LayerInfo, Payload
from aiotsim.compress.memory import SentRows, rows_block
from aiotsim.compress.packing import (
    encode_index_ragged,
    index_bound,
    pack_bits,
    pack_f32,
    unpack_bits,
    unpack_f32,
)
from aiotsim.compress.registry import register
from aiotsim.compress.sparse import Sizes, SparseDecoder, ValuesOf, padded_values, sparse_bound
from aiotsim.compress.sparsify import ValueDtype, mask_hits, ragged_rows, value_dtype_opt
from aiotsim.schema import opt, positive, unit_interval

_EXP_BITS = 3  # exponent bits of a 4-bit code (1 sign bit + 3)
_MAX_EXP = (1 << _EXP_BITS) - 1
_SQRT_HALF = 2.0**-0.5  # mantissa below which log2 rounds the exponent up


@dataclass
class VarianceState(CodecState):
    """Per-node, per-layer state: ``residual`` is ``r``; ``variance`` is ``v``."""

    variance: torch.Tensor | None = None  # v, shape of the gradient (fp32)
    # scratch [n] fp32 buffer for r^2 - alpha v, reused every step: a fresh [n] temporary costs a
    # page fault per 4 KB on CPU; its contents do not outlive one encode
    scratch: torch.Tensor | None = None

    def score_buffer(self, n: int, device: torch.device) -> torch.Tensor:
        """The scratch buffer as ``[n]`` fp32 on ``device`` (allocated on first use)."""
        if self.scratch is None or self.scratch.numel() != n or self.scratch.device != device:
            self.scratch = torch.empty(n, dtype=torch.float32, device=device)
        return self.scratch


def quantize_pow2_rows(values: torch.Tensor, counts: list[int]) -> tuple[torch.Tensor, torch.Tensor, list[float]]:
    """The 4-bit codes of several messages' values laid end to end (``values``: ``[m]`` fp32,
    ``counts[i]`` of them message ``i``'s), each relative to its own message's largest magnitude
    ``M``.

    Returns the ``[m]`` uint8 codes (bit 3 = sign, 1 negative; bits 0..2 = exponent ``e``), the
    ``[m]`` fp32 values the receivers decode (``sign * M * 2**-e``) and each message's ``M``
    (0.0 for one that holds no value).
    """
    rows, device = len(counts), values.device
    mag = values.abs()
    owner = None  # one message: its scalars broadcast over its values, no per-value row numbers
    if rows == 1:
        top = mag.amax(dim=0, keepdim=True) if values.numel() else torch.zeros(1, device=device)
    else:
        owner = torch.repeat_interleave(torch.arange(rows, device=device), torch.tensor(counts, device=device))
        top = torch.zeros(rows, dtype=torch.float32, device=device).scatter_reduce_(0, owner, mag, "amax")
    scales = top.tolist()  # exact fp32 values, one host read
    # Nearest power of two in log scale: e = round(log2(M / |v|)), clamped to the 3-bit range.
    # With |v| / M = m * 2**E (frexp: m in [0.5, 1)), -log2(|v| / M) = -E - log2(m) and
    # -log2(m) in (0, 1] rounds up exactly when m < 2**-0.5: no division or log2 per element.
    # Zero magnitudes cannot be selected (r^2 > alpha v >= 0). 1 / M in double, rounded to fp32.
    inv = torch.where(top != 0, 1.0 / top.double(), 0.0).float()  # [rows] (0 for an empty message)
    m, big_e = torch.frexp(mag.mul_(inv if owner is None else inv.index_select(0, owner)))  # [m], [m] int32
    e = (m < _SQRT_HALF).to(torch.int32).sub_(big_e).clamp_(0, _MAX_EXP)  # [m]
    codes = e.to(torch.uint8) | ((values < 0).to(torch.uint8) << _EXP_BITS)
    # each message's 16-entry table (dequantize_pow2 of every code at its M), then one gather
    every = torch.arange(1 << (_EXP_BITS + 1), device=device).to(torch.uint8).expand(rows, -1)
    tables = dequantize_pow2(every, top.unsqueeze(1))  # [rows, 16]
    entry = codes.to(torch.int32)  # [m] each value's entry in the table (int32: the fastest CPU gather)
    if owner is not None:  # ... in its own message's table
        entry.add_(owner.to(torch.int32), alpha=1 << (_EXP_BITS + 1))
    deq = tables.reshape(-1).index_select(0, entry)
    return codes, deq, scales


def dequantize_pow2(codes: torch.Tensor, scale: float | torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`quantize_pow2_rows`: ``[k]`` fp32 values from 4-bit codes and ``M`` (a float,
    or a one-element fp32 tensor: the same products)."""
    # 16-entry table: code -> sign * M * 2**-e; index_select with int32 is the fastest CPU gather.
    code = torch.arange(1 << (_EXP_BITS + 1), device=codes.device)
    table = torch.exp2(-(code & _MAX_EXP).float()) * (1.0 - 2.0 * (code >> _EXP_BITS).float())
    table = table.mul(scale)  # [16], or [..., 16] for a scale per message ([..., 1]) and codes [..., k]
    if table.dim() == 1:
        return table.index_select(0, codes.reshape(-1).to(torch.int32)).view(codes.shape)
    return torch.gather(table, -1, codes.to(torch.int64))


@register
class VarianceCompression(SparseDecoder, Codec[VarianceState]):
    """Gradient Variance (Tsuzuku et al. 2018): send an element once r^2 > alpha * v."""

    @dataclass(frozen=True)
    class Params:
        alpha: float = opt(0.1, "send element i once r_i^2 > alpha * v_i; > 0", check=positive)
        zeta: float = opt(
            0.999, "per-step decay of unsent accumulators (see decay_residual), in (0, 1]", check=unit_interval
        )
        decay_residual: bool = opt(False, "false: only v decays (v <- zeta v); true: r <- zeta r and v <- zeta^2 v")
        quantize: bool = opt(True, "4-bit sign + power-of-two exponent codes; false sends exact values")
        value_dtype: ValueDtype = value_dtype_opt("precision of exact values (used when quantize = false)")

    name = "variance"
    summary = "Gradient Variance: delay each element until unambiguous (r^2 > alpha v), 4-bit pow2 codes"
    State = VarianceState
    has_residual = True  # r is the method's accumulated amplitude: not switchable
    sparse = True
    needs_sq_grad = True
    encode_flops_per_element = 10.0

    def _encode_rows(
        self, acc: torch.Tensor, grads: torch.Tensor, layer: LayerInfo, states: list[VarianceState]
    ) -> tuple[list[Payload], SentRows]:
        """Every row's selection ``r^2 > alpha v`` and its message. ``acc``: ``r + g`` (fp32
        ``[rows, n]``); ``grads``: the raw gradient rows, squared where a node has no ``sq_grad``."""
        p = self.params
        nodes, n = acc.shape
        var = _add_squares(states, _squares(states, grads), layer)  # v + s, [rows, n]
        # r^2 - alpha v row by row in one reused [n] buffer (a fresh temporary costs a page fault
        # per 4 KB on CPU; addcmul_ may fuse its multiply-add differently in a vectorized body and
        # tail, so each row is its own [n] call); only the [rows, n] booleans are kept
        send = torch.empty((nodes, n), dtype=torch.bool, device=acc.device)
        score = states[0].score_buffer(n, acc.device)
        for i in range(nodes):
            torch.mul(var[i], -p.alpha, out=score).addcmul_(acc[i], acc[i])
            torch.gt(score, 0, out=send[i])
        flat, cols, counts = mask_hits(send)  # [m] into [rows * n], each row's indices, counts: one host read
        if p.quantize:
            codes, values, scales = quantize_pow2_rows(acc.view(-1).index_select(0, flat), counts)
            coded = encode_index_ragged(cols, counts, n, send)  # one host read for all rows
            payloads = [
                Payload(
                    {"indices": c.buf, "scale": pack_f32([m], acc.device), "codes": pack_bits(k, 4)},
                    {"indices": c.head},
                )
                for c, m, k in zip(coded, scales, codes.split(counts))
            ]
            sent: SentRows = ("flat", (flat, values))
        else:
            payloads, sent = ragged_rows(acc, flat, cols, counts, p.value_dtype, send)
        zeta = p.zeta
        v_decay = zeta * zeta if p.decay_residual else zeta
        # v <- 0 where sent, decayed elsewhere (in place: no [rows, n] factor tensor)
        if v_decay != 1.0:
            var.mul_(v_decay)
        var.masked_fill_(send, 0.0)
        # the role keeps r <- r - q(r) where sent, and with decay_residual r <- zeta r where unsent
        if p.decay_residual and zeta < 1.0:
            return payloads, (*sent, torch.where(send, 1.0, zeta))
        return payloads, sent

    def message_bound(self, layer: LayerInfo) -> int:
        """Every element may pass ``r^2 > alpha v``: n indices, and n values (or a scale and n
        4-bit codes)."""
        n = layer.numel
        if self.params.quantize:
            return index_bound(n, n) + 4 + math.ceil(n / 2)
        return sparse_bound(n, n, self.params.value_dtype)

    def value_coding(self) -> tuple[Sizes, ValuesOf]:
        """Exact values, or (quantized) an fp32 scale and a 4-bit code per index."""
        if not self.params.quantize:
            return super().value_coding()
        return (lambda count: {"scale": 4, "codes": math.ceil(count / 2)}), padded_values(self.quantized_values)

    def quantized_values(self, buffers: Mapping[str, torch.Tensor], count: int) -> torch.Tensor:
        """The ``count`` fp32 values of quantized messages' scale and 4-bit codes (``[..., bytes]``
        each: one message, or one per row): ``[..., count]``."""
        scale = unpack_f32(buffers["scale"])  # [..., 1] fp32, applied on the device: no host read
        return dequantize_pow2(unpack_bits(buffers["codes"], 4, count), scale)


def _squares(states: list[VarianceState], grads: torch.Tensor) -> torch.Tensor:
    """``[rows, n]`` fp32: each node's ``sq_grad`` (the rows of a batched pass's block as they
    are), or its gradient squared where it has none (the one-sample proxy)."""
    sq = [s.sq_grad for s in states]
    if all(t is not None for t in sq):
        block = rows_block([t.reshape(-1) for t in sq])  # type: ignore[union-attr]
        if block is not None:
            return block
        return torch.stack([t.reshape(-1).float() for t in sq])  # type: ignore[union-attr]
    return torch.stack([t.reshape(-1).float() if t is not None else g.float().square() for t, g in zip(sq, grads)])


def _add_squares(states: list[VarianceState], sq: torch.Tensor, layer: LayerInfo) -> torch.Tensor:
    """``v + s`` per row, into each node's variance where it has one, else a copy of ``s``; every
    state's ``variance`` is then its row of the result. Returns ``[rows, n]``."""
    old = [s.variance for s in states]
    if all(v is None for v in old):
        var = sq.clone()
    else:
        block = rows_block([v.reshape(-1) for v in old]) if all(v is not None for v in old) else None  # type: ignore[union-attr]
        if block is not None:
            var = block.view(sq.shape).add_(sq)
        else:  # mixed: each node's own tensor, their rows copied into one block after
            for s, row in zip(states, sq):
                s.variance = (
                    row.view(layer.shape).clone() if s.variance is None else s.variance.add_(row.view(layer.shape))
                )
            var = torch.stack([s.variance.reshape(-1) for s in states])  # type: ignore[union-attr]
    for s, row in zip(states, var):
        s.variance = row.view(layer.shape)
    return var
