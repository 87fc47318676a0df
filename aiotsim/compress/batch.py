"""Batched encoding: one layer of many nodes encoded as a ``[nodes, n]`` tensor, byte-identical to
encoding each node on its own.

:func:`encode_batch` runs :meth:`Codec.encode`'s template (error feedback around the codec's own
``_encode``) for every node at once: the accumulations ``grad + residual`` are one ``[nodes, n]``
tensor, the codec's element-wise work (magnitudes, comparisons, codes, stochastic rounding) runs
once over it, codes are bit-packed in one pass when every node's codes fill whole bytes, and the new
residuals are rows of one tensor, copied into each node's previous residual where it has one (the
loop sums into it in place, so a node's state keeps its storage). Top-k's messages are packed for
all nodes at once (:func:`~aiotsim.compress.packing.encode_index_rows`): one host read per layer
picks every message's index coding (plain, delta or bitmap, chosen per message as in the loop),
not one per message, which on a GPU would wait for the device each time. What cannot be
vectorized stays per node: each node's random draws come from its own generator (so the draws
are the same as looped).

Byte-identity with the per-node path is the contract (tests/test_compress_batch.py checks payload
bytes, residuals and generator states for random inputs): every element-wise operation is the one
the codec applies, in the same order. Per-node scalar reductions (norms, means, maxima) are taken
over ``dim=1`` of the ``[nodes, n]`` tensor on the CPU, where torch reduces a contiguous row exactly
as it reduces the same values as a 1-D tensor (checked by the tests); on other devices they run row
by row, since a GPU may split a long 1-D reduction differently from a row reduction.

Batched: ``topk``, ``agg-aware``, ``2bit``, ``signsgd``, ``efsignsgd``, ``terngrad``, ``qsgd`` (fixed-width
codes), ``randomk``, ``threshold``, ``none``, ``fp16``, ``onebit``, ``4bit``, ``dgc`` (its clipping and
momentum correction over the rows, its sampled thresholds from each node's generator in order) and
``pgc`` / ``pgc-paper`` (Algorithm 1 over the rows: :mod:`aiotsim.compress.batch_pgc`) and ``hylo``
(each layer's route over the rows: :mod:`aiotsim.compress.batch_hylo`) and ``fft`` (the chunked
FFTs, top-k and range-based floats over the rows: :mod:`aiotsim.compress.batch_fft`) and
``variance`` (:mod:`aiotsim.compress.batch_variance`).
Every other codec (and ``qsgd`` with ``elias``, ``variance`` with ``decay_residual``, ``fp16`` of
gradients that are not fp32, an empty
layer, a codec subclass) falls back to the per-node loop, so :func:`encode_batch` is always correct
to call. Sums of squares come from
``vector_norm``, never BLAS's ``dot``, whose rounding depends on where a row lies in memory.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

from aiotsim.compress.aggaware import AggAwareState, AggregationAware
from aiotsim.compress.base import Codec, CodecState, LayerInfo, Payload
from aiotsim.compress.batch_fft import fft_rows
from aiotsim.compress.batch_hylo import hylo_rows
from aiotsim.compress.batch_pgc import pgc_input, pgc_rows
from aiotsim.compress.batch_variance import variance_rows
from aiotsim.compress.dense import HalfPrecision, NoCompression
from aiotsim.compress.dgc import _MIN_SAMPLE, DeepGradientCompression
from aiotsim.compress.fft import FFTSparsification
from aiotsim.compress.fourbit import FourBit, first_threshold, quantize_levels
from aiotsim.compress.hylo import Hylo
from aiotsim.compress.memory import rows_block
from aiotsim.compress.packing import (
    encode_index_ragged,
    encode_index_rows,
    pack_bits,
    pack_f32,
    pack_rows,
    pack_value_rows,
    pack_values,
)
from aiotsim.compress.pgc import PartitionGradientCompression, PartitionGradientCompressionPaper
from aiotsim.compress.quantize import QSGD, TernGrad, TwoBit, _round_stochastic_, _signed_to_f32, pack_fixed
from aiotsim.compress.rowwise import row_reduce as _rows
from aiotsim.compress.rowwise import top_rows as _top_rows
from aiotsim.compress.rowwise import velocity_rows
from aiotsim.compress.sign import EFSignSGD, OneBitSGD, SignSGD, _reconstruct, side_means
from aiotsim.compress.sparsify import (
    _BRACKET_MIN_NUMEL,
    RandomK,
    Threshold,
    TopK,
    exact_topk_mask,
    k_of,
    round_values,
)
from aiotsim.compress.variance import VarianceCompression

_U8 = torch.uint8

# What a batched encoder returns: the payloads and, with error feedback, what each node sent:
# ("dense", [nodes, n] fp32), ("sparse", ([nodes, k] int64 indices, [nodes, k] fp32 values)) or,
# for counts that differ by node, ("flat", ([m] int64 indices into the [nodes * n] rows, [m] fp32)).
SentRows = tuple[str, object] | None
BatchEncoder = Callable[[Codec, torch.Tensor, LayerInfo, list[CodecState]], tuple[list[Payload], SentRows]]


def encode_batch(
    codec: Codec,
    grads: Sequence[torch.Tensor] | torch.Tensor,
    layer: LayerInfo,
    states: Sequence[CodecState],
    *,
    always: bool = False,
) -> list[Payload]:
    """Encode one layer's gradients of several nodes; the same payloads and state changes as
    ``[codec.encode(g, layer, s) for g, s in zip(grads, states)]``.

    Parameters
    ----------
    codec : Codec
        The codec (its hyperparameters; one instance serves every node).
    grads : list of torch.Tensor or torch.Tensor
        Per node a gradient of ``layer.shape`` (or one ``[nodes, *layer.shape]`` tensor).
    layer : LayerInfo
        The layer all of them belong to.
    states : list of CodecState
        Per node its state of this layer (residual, generator, step), updated as ``encode`` would.
    always : bool
        Take the batched path wherever one exists, also where the loop is faster (top-k of a large
        layer on the CPU, see :func:`_loop_is_faster`); for tests and benchmarks.

    Returns
    -------
    list of Payload
        One per node, in order.
    """
    nodes = len(states)
    if len(grads) != nodes:
        raise ValueError(f"{len(grads)} gradients for {nodes} states")
    fn = _BATCHED.get(type(codec))
    if fn is None or nodes == 0 or layer.numel == 0 or _looped_variant(codec):
        return [codec.encode(g, layer, s) for g, s in zip(grads, states)]
    x = grads if isinstance(grads, torch.Tensor) else torch.stack(list(grads))
    if (not always and _loop_is_faster(codec, layer, x.device)) or (
        isinstance(codec, HalfPrecision) and x.dtype != torch.float32  # sends a half gradient's own bytes
    ):
        return [codec.encode(g, layer, s) for g, s in zip(grads, states)]
    typed = [codec.typed_state(s) for s in states]
    before = [s.residual for s in typed]  # their storage takes the new residuals, as in the loop
    x = grad_rows = x.reshape(nodes, -1)  # [nodes, n], the gradient's dtype
    feed = _INPUTS.get(type(codec))
    if feed is not None:  # the codec's _feedback_input, every row at once
        x = feed(codec, x, layer, typed)
    acc = _compensate(x, typed) if codec.error_feedback else x if x.dtype == torch.float32 else x.float()
    if type(codec) in _READS_GRADIENT:  # its _encode reads the raw gradient beside the accumulation
        payloads, sent = fn(codec, acc, layer, typed, grad_rows)  # type: ignore[call-arg]
    else:
        payloads, sent = fn(codec, acc, layer, typed)
    if codec.error_feedback:
        _remember(acc, sent, typed, layer, before)
    for s in typed:
        s.step += 1
    return payloads


def _looped_variant(codec: Codec) -> bool:
    """Settings without a batched path: Elias-coded QSGD, Gradient Variance's residual decay."""
    if isinstance(codec, QSGD):
        return codec.params.elias
    return isinstance(codec, VarianceCompression) and codec.params.decay_residual


def _loop_is_faster(codec: Codec, layer: LayerInfo, device: torch.device) -> bool:
    """Top-k of a large layer on the CPU: the per-node :func:`~aiotsim.compress.sparsify.topk_indices`
    brackets the k-th magnitude on a sample and runs the exact top-k on a few candidates, while a
    row-wise ``torch.topk`` over ``[nodes, n]`` selects over every full row (measured on mlp's
    layers, 156,800 elements the largest, 10 nodes: 47 ms of CPU looped, 89 ms batched); on CUDA
    the row-wise top-k is one kernel."""
    if not isinstance(codec, (TopK, AggregationAware)) or device.type == "cuda":
        return False
    n = layer.numel
    return n >= _BRACKET_MIN_NUMEL and 4 * k_of(codec.params.ratio, n) <= n


def batched_codecs() -> list[str]:
    """Names of the codecs with a batched path."""
    return sorted(c.name for c in _BATCHED)


# ---- the error-feedback role, for [nodes, n] -----------------------------------------------------
def _compensate(x: torch.Tensor, states: list[CodecState]) -> torch.Tensor:
    """``grad + residual`` per row in fp32 (:func:`memory.compensate` adds the same two fp32
    values, and fp32 addition is commutative): formed in the residuals' own memory where they are
    the rows of one block (:func:`memory.rows_block`: a batched pass's state, as the loop forms
    each node's sum in its residual), else in a fresh tensor."""
    residuals = [s.residual for s in states]
    block = rows_block(residuals) if all(r is not None for r in residuals) else None  # type: ignore[arg-type]
    if block is not None and block.numel() == x.numel():
        for s in states:
            s.residual = None  # consumed, as in Codec.encode
        return block.view(x.shape).add_(x)
    acc = x.float().clone() if x.dtype == torch.float32 else x.float()
    with_res = [i for i, s in enumerate(states) if s.residual is not None]
    if with_res:
        res = torch.stack([states[i].residual.reshape(-1).float() for i in with_res])  # type: ignore[union-attr]
        rows = torch.tensor(with_res, device=acc.device)
        acc.index_copy_(0, rows, acc.index_select(0, rows).add_(res))
    for s in states:
        s.residual = None  # consumed, as in Codec.encode
    return acc


def _remember(
    acc: torch.Tensor, sent: SentRows, states: list[CodecState], layer: LayerInfo, before: list[torch.Tensor | None]
) -> None:
    """New residual rows ``acc - sent`` (:func:`memory.remember`'s arithmetic), one per node: into
    the node's previous residual where :func:`memory.compensate` would have summed in place (fp32,
    contiguous, same size), so its storage (a node's state pages) is kept as in the loop (where
    ``acc`` is that memory already, nothing is copied); else a view of the row."""
    if sent is None:
        raise ValueError("a codec with error feedback must report what it sent")
    kind, value = sent
    if kind == "dense":
        acc.sub_(value)  # type: ignore[arg-type]
    else:
        idx, vals = value  # type: ignore[misc]
        n = acc.shape[1]
        flat = idx if kind == "flat" else (idx + n * torch.arange(acc.shape[0], device=acc.device).unsqueeze(1))
        acc.view(-1).index_put_((flat.reshape(-1),), -vals.reshape(-1).to(acc.dtype), accumulate=True)
    for s, old, row in zip(states, before, acc):
        if old is not None and old.data_ptr() == row.data_ptr():
            s.residual = old  # acc was formed in the residuals' block (_compensate): updated in place
        elif old is not None and old.dtype == torch.float32 and old.is_contiguous() and old.numel() == row.numel():
            s.residual = old.view(layer.shape).copy_(row.view(layer.shape))
        else:
            s.residual = row.view(layer.shape)


# ---- shared helpers ------------------------------------------------------------------------------
def _abs_max(acc: torch.Tensor) -> torch.Tensor:
    """``[nodes]`` max ``|acc|`` per row, as the codecs take it: from ``aminmax``, without ``|acc|``."""
    lo, hi = _rows(lambda r: torch.stack(torch.aminmax(r)), acc, lambda x: torch.stack(torch.aminmax(x, dim=1), 1)).T
    return torch.maximum(hi, -lo)


def _uniform_rows(states: list[CodecState], nodes: int, n: int, device: torch.device) -> torch.Tensor:
    """``[nodes, n]`` U[0, 1): row ``i`` drawn from node ``i``'s generator, as ``_uniform`` does."""
    q = torch.empty((nodes, n), dtype=torch.float32, device=device)
    for i, s in enumerate(states):
        q[i].uniform_(generator=s.generator)
    return q


# ---- the codecs ----------------------------------------------------------------------------------
def _topk(codec: Codec, acc: torch.Tensor, layer: LayerInfo, states: list[CodecState]):
    return _sparse_rows(codec, acc, _top_rows(acc.abs(), k_of(codec.params.ratio, acc.shape[1])))


def _aggaware(codec: Codec, acc: torch.Tensor, layer: LayerInfo, states: list[CodecState]):
    nodes, n = acc.shape
    k = k_of(codec.params.ratio, n)
    typed: list[AggAwareState] = states  # type: ignore[assignment]
    if math.ceil(codec.params.reserve * k) < k and any(s.globalness is not None for s in typed):
        # some slots by |acc| alone, the rest by score among the others: each node's own selection
        return _sparse_rows(codec, acc, torch.stack([codec.select(r, s, k) for r, s in zip(acc, typed)]))
    scores = acc.abs()  # AggregationAware.scores, row by row where a node has learned globalness
    boosted = [i for i, s in enumerate(typed) if s.globalness is not None]
    if boosted and codec.params.metric != "magnitude" and codec.params.boost != 0:
        p = torch.stack([typed[i].globalness.to(acc.device) for i in boosted])  # type: ignore[union-attr]
        rows = torch.tensor(boosted, device=acc.device)
        scores.index_copy_(0, rows, scores.index_select(0, rows) * (1.0 + codec.params.boost * p))
    return _sparse_rows(codec, acc, _top_rows(scores, k))


def _sparse_rows(codec: Codec, acc: torch.Tensor, idx: torch.Tensor):
    """The sparse messages of the ``[nodes, k]`` ascending indices ``idx`` into ``acc``."""
    n = acc.shape[1]
    values = round_values(acc.gather(1, idx), codec.params.value_dtype)  # [nodes, k]
    # sparse_payload's bytes for every row at once (rows sorted already): one host read per layer
    coded = encode_index_rows(idx, n)
    value_bufs = pack_value_rows(values, codec.params.value_dtype)
    payloads = [Payload({"indices": c.buf, "values": b}, {"indices": c.head}) for c, b in zip(coded, value_bufs)]
    return payloads, ("sparse", (idx, values))


def _twobit(codec: Codec, acc: torch.Tensor, layer: LayerInfo, states: list[CodecState]):
    t = float(codec.params.threshold)
    pos, neg = acc >= t, acc <= -t  # [nodes, n]
    codes = (pos | neg).view(_U8).bitwise_left_shift_(1).bitwise_or_(pos.view(_U8))
    step = pos.view(torch.int8).sub_(neg.view(torch.int8))
    sent = _signed_to_f32(step).mul_(t)
    packed = pack_rows(codes, lambda c: pack_bits(c, 2), acc.shape[1] % 8 == 0)
    return [Payload({"codes": p}) for p in packed], ("dense", sent)


def _signsgd(codec: Codec, acc: torch.Tensor, layer: LayerInfo, states: list[CodecState]):
    signs = pack_rows((acc < 0).view(_U8), lambda c: pack_bits(c, 1), acc.shape[1] % 8 == 0)
    if codec.params.scale != "mean":
        return [Payload({"signs": s}) for s in signs], None
    scale = _rows(lambda r: r.abs().mean(), acc, lambda x: x.abs().mean(dim=1))  # [nodes]
    return [Payload({"signs": s, "scale": pack_f32(scale[i].reshape(1))}) for i, s in enumerate(signs)], None


def _efsignsgd(codec: Codec, acc: torch.Tensor, layer: LayerInfo, states: list[CodecState]):
    n = acc.shape[1]
    norm1 = _rows(lambda r: torch.linalg.vector_norm(r, ord=1), acc, lambda x: torch.linalg.vector_norm(x, 1, dim=1))
    scale = norm1 / max(n, 1)  # [nodes]
    negative = (acc < 0).view(_U8)
    signs = pack_rows(negative, lambda c: pack_bits(c, 1), n % 8 == 0)
    # unpack_signs(...) * scale: 1 - 2 bit as fp32, times the scale
    delta = _signed_to_f32(negative.view(torch.int8).mul(-2).add_(1)).mul_(scale.unsqueeze(1))
    payloads = [Payload({"scale": pack_f32(scale[i].reshape(1)), "signs": s}) for i, s in enumerate(signs)]
    return payloads, ("dense", delta)


def _terngrad(codec: Codec, acc: torch.Tensor, layer: LayerInfo, states: list[CodecState]):
    nodes, n = acc.shape
    s = _abs_max(acc)  # [nodes]
    if codec.params.clip:
        total = _rows(lambda r: r.sum(), acc, lambda x: x.sum(dim=1))
        sq = _rows(lambda r: torch.linalg.vector_norm(r), acc, lambda x: torch.linalg.vector_norm(x, dim=1)).square()
        mean = total / n
        sigma = torch.sqrt(torch.clamp(sq / n - mean * mean, min=0.0))
        bound = codec.params.clip_factor * sigma
        s = torch.where(bound > 0, torch.minimum(s, bound), s)
    inv = torch.where(s > 0, 1.0 / s, torch.zeros_like(s))
    q = _uniform_rows(states, nodes, n, acc.device).addcmul_(acc, inv.unsqueeze(1))
    codes = _round_stochastic_(q, 1.0).bitwise_and_(0b11).view(_U8)
    packed = pack_rows(codes, lambda c: pack_bits(c, 2), n % 8 == 0)
    return [Payload({"scale": pack_f32(s[i].reshape(1)), "codes": p}) for i, p in enumerate(packed)], None


def _qsgd(codec: Codec, acc: torch.Tensor, layer: LayerInfo, states: list[CodecState]):
    nodes, n = acc.shape
    s, d = int(codec.params.levels), int(codec.params.bucket_size)
    nf = n // d
    norm = torch.linalg.vector_norm
    parts = []  # [nodes, buckets] norms: full buckets, then the short tail
    if nf:
        full = acc[:, : nf * d].reshape(nodes, nf, d)
        parts.append(_rows(lambda r: norm(r.view(nf, d), dim=1), full.reshape(nodes, -1), lambda x: norm(full, dim=2)))
    if n > nf * d:
        tail = acc[:, nf * d :]
        parts.append(_rows(lambda r: norm(r), tail, lambda x: norm(x, dim=1)).reshape(nodes, 1))
    norms = torch.cat(parts, dim=1)  # [nodes, nb]
    factor = torch.where(norms > 0, s / norms, torch.zeros_like(norms))
    q = _uniform_rows(states, nodes, n, acc.device)
    if nf:
        q[:, : nf * d].view(nodes, nf, d).addcmul_(acc[:, : nf * d].reshape(nodes, nf, d), factor[:, :nf, None])
    if n > nf * d:
        q[:, nf * d :].addcmul_(acc[:, nf * d :], factor[:, nf:])
    q8 = _round_stochastic_(q, float(s))  # [nodes, n] int8
    negative = (q8 < 0).view(_U8)
    level = q8.abs_().view(_U8)
    w = codec.level_bits
    codes = level.bitwise_or_(negative.bitwise_left_shift_(w))
    packed = pack_rows(codes, lambda c: pack_fixed(c, w + 1), n % 8 == 0)
    return [Payload({"norms": pack_f32(norms[i]), "codes": p}) for i, p in enumerate(packed)], None


def _randomk(codec: Codec, acc: torch.Tensor, layer: LayerInfo, states: list[CodecState]):
    nodes, n = acc.shape
    k = k_of(codec.params.ratio, n)
    draws = [RandomK.draw(s, n, k, acc.device) for s in states]  # each node's own generator, in order
    idx = torch.stack([i for _, i in draws])  # [nodes, k] sorted per row
    picked = acc.gather(1, idx)
    if codec.params.scale:
        picked = picked * (n / max(k, 1))
    values = round_values(picked, codec.params.value_dtype)
    packed = pack_value_rows(values, codec.params.value_dtype)
    return [RandomK.payload(seed, p) for (seed, _), p in zip(draws, packed)], ("sparse", (idx, values))


def _threshold(codec: Codec, acc: torch.Tensor, layer: LayerInfo, states: list[CodecState]):
    nodes, n = acc.shape
    send = acc.abs() >= codec.params.tau  # [nodes, n]
    hits = torch.nonzero(send)  # [m, 2] (node, index): row by row, indices ascending as each node's
    counts = send.sum(dim=1).tolist()  # one host read for every row's count
    flat = hits[:, 0] * n + hits[:, 1]  # [m] into [nodes * n]
    values, negative = codec.sent_values(acc.view(-1).index_select(0, flat))  # type: ignore[attr-defined]
    coded = encode_index_ragged(hits[:, 1], counts, n, send)  # one more host read, for every row
    signs = negative.split(counts) if negative is not None else [None] * nodes
    payloads = [codec.payload(c, v, s) for c, v, s in zip(coded, values.split(counts), signs)]  # type: ignore[attr-defined]
    return payloads, ("flat", (flat, values))


def _none(codec: Codec, acc: torch.Tensor, layer: LayerInfo, states: list[CodecState]):
    # pack_f32(grad): its 4 bytes each, in a copy (acc may be the caller's own gradient tensor)
    return [Payload({"values": r}) for r in acc.clone().view(_U8)], None


def _fp16(codec: Codec, acc: torch.Tensor, layer: LayerInfo, states: list[CodecState]):
    # pack_f16(grad): fp32 rounded to fp16, its 2 bytes each (acc is the fp32 gradient: no feedback)
    return [Payload({"values": r}) for r in acc.to(torch.float16).view(_U8)], None


def _onebit(codec: Codec, acc: torch.Tensor, layer: LayerInfo, states: list[CodecState]):
    nodes, n = acc.shape
    rows, cols = codec._grid(layer)  # type: ignore[attr-defined]
    mat = acc.view(nodes, rows, cols)
    negative = mat < 0  # [nodes, rows, cols]
    # per node and column: the sums of the values and of their magnitudes
    total = _rows(lambda r: r.view(rows, cols).sum(dim=0), acc, lambda x: mat.sum(dim=1))
    magnitude = _rows(
        lambda r: torch.linalg.vector_norm(r.view(rows, cols), ord=1, dim=0),
        acc,
        lambda x: torch.linalg.vector_norm(mat, ord=1, dim=1),
    )
    means = side_means(total, magnitude, torch.count_nonzero(negative, dim=1), rows)  # [nodes, cols, 2]
    sent = _reconstruct(negative.view(_U8), means).view(nodes, n)
    signs = pack_rows(negative.view(nodes, n).view(_U8), lambda c: pack_bits(c, 1), n % 8 == 0)
    return [Payload({"means": pack_f32(means[i]), "signs": s}) for i, s in enumerate(signs)], ("dense", sent)


def _fourbit(codec: Codec, acc: torch.Tensor, layer: LayerInfo, states: list[CodecState]):
    nodes, n = acc.shape
    spacing, statistic = codec.params.spacing, codec.params.statistic
    norm = torch.linalg.vector_norm
    if statistic == "max":
        anchor = _abs_max(acc)
    elif statistic == "mean":
        anchor = _rows(lambda r: norm(r, ord=1), acc, lambda x: norm(x, ord=1, dim=1)) / n
    else:  # FourBit._encode's |acc|_2 / sqrt(n)
        anchor = _rows(lambda r: norm(r), acc, lambda x: norm(x, dim=1)).div_(math.sqrt(n))
    codes, sent = quantize_levels(acc, first_threshold(anchor, spacing, statistic).unsqueeze(1), spacing)
    packed = pack_rows(codes, lambda c: pack_bits(c, 4), n % 2 == 0)
    payloads = [Payload({"anchor": pack_f32(anchor[i].reshape(1)), "codes": p}) for i, p in enumerate(packed)]
    return payloads, ("dense", sent)


def _dgc_input(codec: Codec, x: torch.Tensor, layer: LayerInfo, states: list[CodecState]) -> torch.Tensor:
    """DGC's :meth:`~aiotsim.compress.dgc.DeepGradientCompression._feedback_input` of every row:
    local clipping (a row whose L2 norm exceeds ``clip_norm`` scaled by ``clip_norm / norm``, the
    same Python float as the loop's scalar), then the momentum correction ``u <- m u + g`` in each
    node's velocity (:func:`~aiotsim.compress.rowwise.velocity_rows`). Returns ``u`` as ``[nodes, n]``."""
    p = codec.params  # type: ignore[attr-defined]
    g = x if x.dtype == torch.float32 else x.float()
    if p.clip_norm > 0 and g.shape[1]:
        norms = _rows(torch.linalg.vector_norm, g, lambda t: torch.linalg.vector_norm(t, dim=1)).tolist()
        scales = [p.clip_norm / v if v > p.clip_norm else 1.0 for v in norms]  # 1.0: kept as is (exact)
        if any(v != 1.0 for v in scales):
            g = g * torch.tensor(scales, dtype=torch.float32, device=g.device).unsqueeze(1)
    return velocity_rows(g, states, layer, p.momentum)


def _dgc(codec: Codec, acc: torch.Tensor, layer: LayerInfo, states: list[CodecState]):
    """DGC's selection for every row: the threshold samples are each node's own draws, in order;
    where every row keeps the same ``k`` by sampling, the samples' top-k, the comparisons and the
    selection run over ``[nodes, n]`` at once; the rest (the exact top-k of a small layer, every
    entry, a row with too many passing) per row as the loop selects."""
    dgc: DeepGradientCompression = codec  # type: ignore[assignment]
    nodes, n = acc.shape
    p = dgc.params
    ks = [k_of(1.0 - dgc.current_sparsity(s), n) for s in states]  # type: ignore[arg-type]
    mag = acc.abs()  # [nodes, n]
    m = max(_MIN_SAMPLE, math.ceil(p.sample_ratio * n))
    if len(set(ks)) == 1 and ks[0] < n and m < n:
        k = ks[0]
        pos = torch.stack([torch.randint(0, n, (m,), generator=s.generator, device=s.generator.device) for s in states])
        sample = mag.gather(1, pos.to(acc.device))  # [nodes, m]
        kth = torch.topk(sample, max(1, math.ceil(m * k / n)), dim=1, sorted=False).values.min(dim=1, keepdim=True)
        passed = mag >= kth.values  # [nodes, n]
        counts = passed.sum(dim=1).tolist()  # one host read for every row (and one nonzero, not one per row)
        idx = list(torch.nonzero(passed.view(-1)).reshape(-1).remainder_(n).split(counts))  # ascending per row
        for i, sel in enumerate(idx):
            if sel.numel() > p.fallback_factor * k:  # the exact top-k among those that passed
                idx[i] = sel[exact_topk_mask(mag[i][sel], k)]
    else:
        idx = [dgc._select(mag[i], ks[i], s.generator) for i, s in enumerate(states)]
    counts = [int(i.numel()) for i in idx]
    cols = torch.cat(idx)
    owner = torch.repeat_interleave(torch.arange(nodes, device=acc.device), torch.tensor(counts, device=acc.device))
    flat = owner * n + cols  # [m] into [nodes * n]
    values = round_values(acc.view(-1).index_select(0, flat), p.value_dtype)
    for s, i in zip(states, idx):
        if s.momentum is not None:  # type: ignore[attr-defined]
            s.momentum.view(-1)[i] = 0.0  # type: ignore[attr-defined]  # momentum factor masking
    coded = encode_index_ragged(cols, counts, n)
    # pack_values copies a split of the pass's values (packing._own_bytes): each message owns its
    # bytes, so the pass's values do not live until its last message is aggregated
    payloads = [
        Payload({"indices": c.buf, "values": pack_values(v, p.value_dtype)}, {"indices": c.head})
        for c, v in zip(coded, values.split(counts))
    ]
    return payloads, ("flat", (flat, values))


_INPUTS: dict[type[Codec], Callable[[Codec, torch.Tensor, LayerInfo, list[CodecState]], torch.Tensor]] = {
    DeepGradientCompression: _dgc_input,
    PartitionGradientCompression: pgc_input,
    PartitionGradientCompressionPaper: pgc_input,
}
# encoders that also take the gradient rows (PGC's Algorithm 1 reads the raw gradient; Gradient
# Variance squares it where a node has no per-sample squares)
_READS_GRADIENT = (PartitionGradientCompression, PartitionGradientCompressionPaper, VarianceCompression)

_BATCHED: dict[type[Codec], BatchEncoder] = {
    TopK: _topk,
    AggregationAware: _aggaware,
    TwoBit: _twobit,
    SignSGD: _signsgd,
    EFSignSGD: _efsignsgd,
    TernGrad: _terngrad,
    QSGD: _qsgd,
    RandomK: _randomk,
    Threshold: _threshold,
    NoCompression: _none,
    HalfPrecision: _fp16,
    OneBitSGD: _onebit,
    FourBit: _fourbit,
    DeepGradientCompression: _dgc,
    PartitionGradientCompression: pgc_rows,  # type: ignore[dict-item]
    PartitionGradientCompressionPaper: pgc_rows,  # type: ignore[dict-item]
    Hylo: hylo_rows,
    FFTSparsification: fft_rows,
    VarianceCompression: variance_rows,  # type: ignore[dict-item]
}

__all__ = ["encode_batch", "batched_codecs"]
