"""Batched decoding: one layer of many messages decoded at once, bit for bit what decoding each
message on its own gives.

The server decodes every message of every layer. One at a time, that is a dozen or two small
torch calls per message and layer: on the 2-core development CPU about 170 us of dispatch for a
2-bit LeNet-5 bias of 6 values (290 us for ``fc1``'s 48,000), so at 1,000 nodes about 1.8 s of
decoding per iteration for 2 ms gradients per node; on a GPU one kernel launch per call,
hundreds of thousands per iteration at 10,000 nodes. :func:`decode_batch` stacks the messages'
buffers into ``[messages, bytes]`` and runs the decoder's element-wise work once over them.

The decoders are the codecs' own: each batched codec's ``decode_rows``
(:class:`~aiotsim.compress.base.RowDecoder`) takes its buffers with leading dimensions (one message
per row) and its ``decode`` is ``decode_rows`` of one message, so both paths run the same
operations; a message's scalars (a scale, bucket norms, column means) broadcast over its row.
Sparse payloads (top-k, agg-aware, DGC, PGC, threshold and variance, quantized or not) are
grouped by their index coding (form and bit width, from the header's host copy): each group's
index sets are unpacked as one ``[rows, bytes]`` tensor (zero-padded where counts differ) and
scattered through flat indices, a bitmap group through its ``[rows, n]`` masks. Random-k's index
sets are regenerated from each message's seed (on the CPU generator, one by one by design) and
its values scattered at once.

Messages are decoded in chunks of at most :data:`CHUNK_ELEMENTS` values, which bounds the
temporaries. Hylo's dense and 2-bit layers stack as rows (each row's threshold broadcast over its
codes); its conv layers' kernel sets are decoded one by one. FFT messages of one schedule step
decode their range-based floats as rows, each inverse FFT still the message's own. Any payload
this path does not cover (another codec: powersgd; a codec
subclass; buffers of differing sizes; Elias-coded QSGD or code widths of 3, 5, 6 or 7 bits) is
decoded message by message, so :func:`decode_batch` is always correct to call and a malformed
payload raises the per-message decoder's own error.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import torch
from torch.nn.utils.rnn import pad_sequence

from aiotsim.compress.aggaware import AggregationAware
from aiotsim.compress.base import Codec, LayerInfo, Payload
from aiotsim.compress.dense import HalfPrecision, NoCompression
from aiotsim.compress.dgc import DeepGradientCompression
from aiotsim.compress.fft import FFTSparsification, fft_decode_rows
from aiotsim.compress.fourbit import FourBit
from aiotsim.compress.hylo import Hylo, two_bit_dequantize
from aiotsim.compress.packing import (
    _IDX_HEADER,
    IDX_BITMAP,
    VALUE_BYTES,
    decode_indices,
    index_header,
    unpack_bits,
    unpack_values,
)
from aiotsim.compress.pgc import PartitionGradientCompression, PartitionGradientCompressionPaper
from aiotsim.compress.quantize import QSGD, TernGrad, TwoBit
from aiotsim.compress.sign import EFSignSGD, OneBitSGD, SignSGD
from aiotsim.compress.sparsify import RandomK, Threshold, TopK, k_of, mask_indices
from aiotsim.compress.variance import VarianceCompression

CHUNK_ELEMENTS = 1 << 22  # decoded values per pass (16 MB of fp32 per temporary)

# Codecs whose decode_rows decodes [rows, bytes] buffers (QSGD only with fixed-width codes that
# fill whole bytes: checked in _covered)
_ROWS = (NoCompression, HalfPrecision, TwoBit, TernGrad, QSGD, SignSGD, EFSignSGD, OneBitSGD, FourBit)
# Sparse codecs: an index set and its values (plain, or threshold's signs, variance's 4-bit codes)
_SPARSE = (TopK, AggregationAware, DeepGradientCompression, Threshold, VarianceCompression)
_SPARSE += (PartitionGradientCompression, PartitionGradientCompressionPaper)


def decode_batch(
    codec: Codec, payloads: Sequence[Payload], layer: LayerInfo, out: torch.Tensor | None = None
) -> torch.Tensor:
    """Layer ``layer`` of every message, decoded into ``[messages, *layer.shape]``.

    Parameters
    ----------
    codec : Codec
        The codec that encoded the messages.
    payloads : sequence of Payload
        One message's payload of this layer each, all of ``codec``.
    layer : LayerInfo
        The layer.
    out : torch.Tensor, optional
        Where to write, ``[messages, *layer.shape]`` of any dtype: row ``i`` receives
        ``codec.decode_read(payloads[i], layer)`` as ``out[i].copy_`` would cast it. Default: a new
        tensor of ``layer.dtype`` on the payloads' device.

    Returns
    -------
    torch.Tensor
        ``out``, bit for bit the per-message decodes.
    """
    if not payloads:
        raise ValueError("decode_batch: no payloads")
    if out is None:
        device = next(iter(payloads[0].buffers.values())).device
        out = torch.empty((len(payloads), *layer.shape), dtype=layer.dtype, device=device)
    fn = _rows_fn(codec, payloads, layer)
    if fn is None:
        for i, p in enumerate(payloads):
            out[i].copy_(codec.decode_read(p, layer))
        return out
    step = max(1, CHUNK_ELEMENTS // layer.numel)
    for a in range(0, len(payloads), step):
        chunk = payloads[a : a + step]
        rows = fn(chunk, layer)  # [chunk, n] fp32
        if rows is None:
            for i, p in enumerate(chunk, start=a):
                out[i].copy_(codec.decode_read(p, layer))
        else:
            out[a : a + len(chunk)].copy_(rows.view(len(chunk), *layer.shape).to(layer.dtype))
    return out


def decodes_in_batch(codec: Codec) -> bool:
    """Whether :func:`decode_batch` has a batched path for ``codec`` (its exact type and
    parameters; its payloads may still be decoded one by one where their buffers differ)."""
    kind = type(codec)
    if kind in _ROWS:
        return _covered(codec)
    return kind in _SPARSE or kind in (RandomK, Hylo, FFTSparsification)


def _rows_fn(
    codec: Codec, payloads: Sequence[Payload], layer: LayerInfo
) -> Callable[[Sequence[Payload], LayerInfo], torch.Tensor | None] | None:
    """The chunk decoder for these payloads, or None where they are decoded one by one."""
    if layer.numel == 0 or not decodes_in_batch(codec):
        return None
    if type(codec) in _ROWS:
        rows_of = codec.decode_rows  # type: ignore[attr-defined]
        return (lambda chunk, layer: rows_of(_stacked(chunk), layer)) if _same_layout(payloads) else None
    if isinstance(codec, FFTSparsification):  # the range-based floats at once, the FFTs one by one
        return lambda chunk, layer: fft_decode_rows(codec, chunk, layer)
    if isinstance(codec, Hylo):  # its dense and 2-bit routes are element-wise; kernel sets one by one
        route = codec.route(layer)
        if route == "kernels" or not _same_layout(payloads):
            return None
        return lambda chunk, layer: _hylo_rows(_stacked(chunk), layer, route)
    if isinstance(codec, RandomK):
        return lambda chunk, layer: _randomk_rows(codec, chunk, layer)
    sizes, values_of = _value_coding(codec)
    return lambda chunk, layer: _sparse_rows(chunk, layer.numel, sizes, values_of)


def _hylo_rows(buffers: Mapping[str, torch.Tensor], layer: LayerInfo, route: str) -> torch.Tensor:
    """:meth:`Hylo.decode` of stacked ``[messages, bytes]`` buffers on its ``dense`` or ``2bit``
    route: each row's fp32 values, or its codes times its own threshold (``[messages, 1]``)."""
    if route == "dense":
        return buffers["values"].view(torch.float32)  # [messages, n]: stacked, so aligned
    codes = unpack_bits(buffers["codes"], 2, layer.numel)  # [messages, n]
    return two_bit_dequantize(codes, buffers["threshold"].view(torch.float32))


def _covered(codec: Codec) -> bool:
    """QSGD's rows need fixed-width codes of 1, 2, 4 or 8 bits (whole codes per byte)."""
    if isinstance(codec, QSGD):
        return not codec.params.elias and codec.level_bits + 1 in (1, 2, 4, 8)
    return True


def _same_layout(payloads: Sequence[Payload]) -> bool:
    """Whether every payload has the first one's buffers, of the same byte counts (stackable)."""
    first = payloads[0].layout
    return all(p.layout == first for p in payloads)


def _stacked(chunk: Sequence[Payload]) -> dict[str, torch.Tensor]:
    """Each buffer of the chunk's messages as one ``[messages, bytes]`` tensor."""
    return {k: torch.stack([p.buffers[k] for p in chunk]) for k in chunk[0].buffers}


Sizes = Callable[[int], dict[str, int]]
# a group's messages' buffers and value counts -> their values in row order, fp32 [sum(counts)]
ValuesOf = Callable[[list[Mapping[str, torch.Tensor]], list[int]], torch.Tensor]


def _value_coding(codec: Codec) -> tuple[Sizes, ValuesOf]:
    """How a sparse codec's messages carry their values: the byte count of each buffer besides
    the indices for ``count`` values, and how a group of messages' values are decoded (plain
    values: their bytes concatenated; quantized ones: the per-message decoder's own
    ``quantized_values`` over zero-padded ``[rows, bytes]`` buffers)."""
    if getattr(codec.params, "quantize", False):
        quantized = codec.quantized_values  # type: ignore[attr-defined]
        per_byte = 8 if isinstance(codec, Threshold) else 2  # threshold: a sign bit; variance: 4-bit codes
        scale = {} if isinstance(codec, Threshold) else {"scale": 4}  # variance: an fp32 scale

        def sizes(count: int) -> dict[str, int]:
            return {**scale, "signs" if per_byte == 8 else "codes": math.ceil(count / per_byte)}

        return sizes, lambda bufs, counts: _padded(quantized, bufs, counts)
    vd = codec.params.value_dtype  # type: ignore[attr-defined]
    per_value = VALUE_BYTES[vd]
    return (lambda c: {"values": c * per_value}), lambda bufs, _: unpack_values(
        torch.cat([b["values"] for b in bufs]), vd
    )


def _padded(
    values_of: Callable[[Mapping[str, torch.Tensor], int], torch.Tensor],
    bufs: list[Mapping[str, torch.Tensor]],
    counts: list[int],
) -> torch.Tensor:
    """``values_of`` (a per-message decoder of ``count`` values) over the group's buffers padded
    into ``[rows, bytes]``, each row's own values kept, in row order."""
    most = max(counts)
    rows = values_of({k: pad_rows([b[k] for b in bufs]) for k in bufs[0] if k != "indices"}, most)  # [m, most]
    if min(counts) == most:
        return rows.reshape(-1)
    return _own_entries(rows, counts)


def _sparse_rows(chunk: Sequence[Payload], n: int, sizes: Sizes, values_of: ValuesOf) -> torch.Tensor | None:
    """:func:`~aiotsim.compress.sparse.decode_sparse` (or its quantized forms) of every message of
    ``chunk``: ``[chunk, n]`` fp32. Messages are grouped by index coding (form and bit width); a
    group's buffers, of counts that may differ, are decoded as ``[rows, bytes]`` tensors padded
    with zero bytes (a row's own values come first, and the padding's are left out), and its
    values are written in row order through flat indices (a bitmap group: through its masks)."""
    heads = [index_header(p.buffers["indices"], p.heads.get("indices")) for p in chunk]
    for p, (_, _, count) in zip(chunk, heads):
        if {k: b.numel() for k, b in p.buffers.items()} != {"indices": p.buffers["indices"].numel(), **sizes(count)}:
            return None  # decoded one by one: the per-message decoder says what is wrong
    device = chunk[0].buffers["indices"].device
    out = torch.zeros(len(chunk), n, dtype=torch.float32, device=device)
    groups: dict[tuple[int, int], list[int]] = {}
    for i, (mode, width, count) in enumerate(heads):
        if count:
            groups.setdefault((mode, width), []).append(i)
    for (mode, width), rows in groups.items():
        counts = [heads[i][2] for i in rows]
        values = values_of([chunk[i].buffers for i in rows], counts).to(device)  # [sum(counts)], row order
        index = pad_rows([chunk[i].buffers["indices"] for i in rows])  # [m, bytes]
        at = torch.tensor(rows, dtype=torch.int64, device=device)  # [m] rows of out
        if mode == IDX_BITMAP:  # every bitmap is ceil(n / 8) bytes: no padding
            mask = unpack_bits(index[:, _IDX_HEADER:], 1, n).view(torch.bool).to(device)  # [m, n]
            if len(rows) == len(chunk):  # every row: straight into out
                out.masked_scatter_(mask, values)
            else:
                out[at] = out.new_zeros(len(rows), n).masked_scatter_(mask, values)
            continue
        most = max(counts)
        flat = decode_indices(index, n, (mode, width, most)).to(device) + at[:, None] * n  # [m, most]
        if min(counts) < most:  # the padding's zero codes decode to indices of their own
            flat = _own_entries(flat, counts)
        out.view(-1)[flat.reshape(-1)] = values
    return out


def _randomk_rows(codec: RandomK, chunk: Sequence[Payload], layer: LayerInfo) -> torch.Tensor | None:
    """Random-k messages, ``[chunk, n]`` fp32: each message's index set regenerated from its seed
    (:meth:`RandomK.indices`, on the CPU generator, one per message by design), the values of all
    of them written through flat indices at once."""
    n, vd = layer.numel, codec.params.value_dtype
    k = k_of(codec.params.ratio, n)
    if any(p.buffers["values"].numel() != k * VALUE_BYTES[vd] or set(p.buffers) != {"seed", "values"} for p in chunk):
        return None  # decoded one by one: the per-message decoder says what is wrong
    values = unpack_values(torch.stack([p.buffers["values"] for p in chunk]), vd)  # [m, k]
    device = values.device
    index = torch.stack([codec.indices(p, layer) for p in chunk]).to(device)  # [m, k] ascending per row
    out = torch.zeros(len(chunk), n, dtype=torch.float32, device=device)
    out.view(-1)[(index + torch.arange(len(chunk), device=device)[:, None] * n).reshape(-1)] = values.reshape(-1)
    return out


def _own_entries(rows: torch.Tensor, counts: list[int]) -> torch.Tensor:
    """The first ``counts[i]`` entries of each row of ``rows`` (``[m, most]``), in row order:
    ``[sum(counts)]``. The total is known on the host, so off the CPU no read is needed
    (:func:`~aiotsim.compress.sparsify.mask_indices`), where a boolean mask index would sync."""
    valid = torch.arange(rows.shape[1], device=rows.device) < torch.tensor(counts, device=rows.device)[:, None]
    return rows.reshape(-1)[mask_indices(valid.view(-1), sum(counts))]


def pad_rows(bufs: list[torch.Tensor], *, by_copies: bool | None = None) -> torch.Tensor:
    """1-D byte buffers as the rows of one ``[len(bufs), longest]`` tensor, zero-padded.

    Equal lengths are one ``stack``. Otherwise, on the CPU, ``pad_sequence`` (a copy per buffer,
    in C++); elsewhere one ``cat`` and one scatter through positions built from the lengths, so
    that a GPU gets three kernels instead of one per buffer (on the CPU the int64 positions cost
    ~15x the copies). ``by_copies`` forces one or the other (tests)."""
    lens = [b.numel() for b in bufs]
    if min(lens) == max(lens):
        return torch.stack(bufs)
    if by_copies if by_copies is not None else bufs[0].device.type == "cpu":
        return pad_sequence(bufs, batch_first=True)
    flat = torch.cat(bufs)
    device, longest = flat.device, max(lens)
    sizes = torch.tensor(lens, device=device)
    row = torch.repeat_interleave(torch.arange(len(bufs), device=device), sizes, output_size=flat.numel())
    start = torch.cumsum(sizes, 0) - sizes  # [rows] first byte of each buffer in flat
    out = torch.zeros(len(bufs), longest, dtype=flat.dtype, device=device)
    out.view(-1)[row * longest + torch.arange(flat.numel(), device=device) - start[row]] = flat
    return out


__all__ = ["CHUNK_ELEMENTS", "decode_batch", "decodes_in_batch", "pad_rows"]
