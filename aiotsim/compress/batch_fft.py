"""Batched FFT sparsification (seed 003): one layer of many nodes as ``[nodes, n]`` rows,
byte-identical to each node's own encode (:class:`~aiotsim.compress.fft.FFTSparsification`).

Over the rows at once: the bins' power, the top-k of every row that keeps the same ``k``
(:func:`~aiotsim.compress.rowwise.top_rows`, lower bin first among ties, as
:func:`~aiotsim.compress.sparsify.topk_indices`), the range-based float of every row with its own
exponent range (:func:`~aiotsim.compress.fft.range_float_rows`), the headers and index sets, and
with error feedback the spectra of what the server will see.
Per node: its FFTs and the packing of its words at its own width.

The FFTs themselves run node by node, each over the node's own ``[chunks, length]``: one call over
every node's rows transforms differently at times (measured on the CPU: one 70,000-point FFT per
node, and odd lengths with two intra-op threads, differ in their last bits), so the loop's exact
calls are kept. A row whose spectrum holds a NaN (a diverging run) is encoded by the loop's own
``_encode``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from aiotsim.compress.base import Codec, CodecState, LayerInfo, Payload
from aiotsim.compress.fft import (
    _EXP_BIAS,
    FFTSparsification,
    pack_words,
    range_float_decode,
    range_float_rows,
)
from aiotsim.compress.packing import encode_index_rows, pack_uint
from aiotsim.compress.rowwise import top_rows


def fft_rows(codec: Codec, acc: torch.Tensor, layer: LayerInfo, states: list[CodecState]):
    """Every row's message; with error feedback also what each sent (the inverse of its kept bins)."""
    f: FFTSparsification = codec  # type: ignore[assignment]
    nodes, n = acc.shape
    chunks, length = f.chunking(n)
    pad = chunks * length - n
    x = torch.nn.functional.pad(acc, (0, pad)) if pad else acc  # [nodes, chunks * length]
    spec = _by_node(lambda t: torch.fft.rfft(t, dim=1), x.reshape(nodes * chunks, length), nodes)
    spec = spec.reshape(nodes, -1)  # [nodes, bins] complex64
    bins = spec.shape[1]
    ri = torch.view_as_real(spec)  # [nodes, bins, 2]
    power = ri[..., 0].square().addcmul_(ri[..., 1], ri[..., 1])  # |X|^2, as the loop's
    nan = torch.isnan(power).any(dim=1).tolist()
    ks = [f.kept_bins(bins, s.step) for s in states]
    payloads: list[Payload | None] = [None] * nodes
    sent = torch.empty_like(acc) if f.error_feedback else None
    for k in sorted(set(ks)):
        rows = [i for i in range(nodes) if ks[i] == k and not nan[i]]
        if rows:
            _encode_rows(f, spec, power, rows, k, n, payloads, sent)
    for i in (i for i in range(nodes) if nan[i]):  # the loop's own encode of this row
        payloads[i], one = f._encode(acc[i].view(layer.shape), acc[i], layer, states[i])
        if sent is not None:
            sent[i] = one.dense.reshape(-1)  # type: ignore[union-attr]
    return payloads, (("dense", sent) if sent is not None else None)


def _encode_rows(
    f: FFTSparsification,
    spec: torch.Tensor,
    power: torch.Tensor,
    rows: list[int],
    k: int,
    n: int,
    payloads: list[Payload | None],
    sent: torch.Tensor | None,
) -> None:
    """The messages of ``rows`` (all keeping ``k`` bins) into ``payloads``, their inverse into ``sent``."""
    p = f.params
    at = torch.tensor(rows, device=spec.device)
    if len(rows) < spec.shape[0]:  # the usual pass keeps one k in every row: no copy of its rows
        spec, power = spec.index_select(0, at), power.index_select(0, at)
    idx = top_rows(power, k)  # [r, k] ascending
    kept = spec.gather(1, idx)  # [r, k] complex64
    words, e_lo, exp_bits = range_float_rows(
        torch.cat([kept.real, kept.imag], dim=1), p.mantissa_bits, p.max_exponent_bits
    )
    fields = [[lo + _EXP_BIAS, e] for lo, e in zip(e_lo, exp_bits)]  # two 16-bit fields per header
    headers = pack_uint(torch.tensor(fields, device=spec.device), 16).view(len(rows), 4)
    coded = encode_index_rows(idx, spec.shape[1])
    for j, i in enumerate(rows):
        width = 1 + exp_bits[j] + p.mantissa_bits
        payloads[i] = Payload(
            {"header": headers[j], "indices": coded[j].buf, "values": pack_words(words[j], width)},
            {"header": b"".join(v.to_bytes(2, "little") for v in fields[j]), "indices": coded[j].head},
        )
    if sent is not None:
        cols = torch.tensor(fields, dtype=torch.int64, device=spec.device)
        deq = range_float_decode(words, cols[:, :1] - _EXP_BIAS, cols[:, 1:], p.mantissa_bits)  # [r, 2k]
        sent.index_copy_(0, at, _inverse_rows(f, idx, deq[:, :k], deq[:, k:], n))


def fft_decode_rows(f: FFTSparsification, chunk: Sequence[Payload], layer: LayerInfo) -> torch.Tensor | None:
    """:meth:`FFTSparsification.decode` of a chunk of messages that keep the same number of bins
    (one schedule step): the range-based floats of all at once and their spectra scattered as
    rows, each inverse FFT the message's own. ``[messages, n]`` fp32, or None (counts differ, or
    none kept): then one by one."""
    parsed = [f.parse(p, layer.numel) for p in chunk]  # (bins, words, e_lo, exp_bits)
    counts = {int(x[0].numel()) for x in parsed}
    if len(counts) != 1 or 0 in counts:
        return None
    k = counts.pop()
    idx, words = torch.stack([x[0] for x in parsed]), torch.stack([x[1] for x in parsed])
    fmt = torch.tensor([[x[2], x[3]] for x in parsed], dtype=torch.int64, device=words.device)  # [m, 2]
    deq = range_float_decode(words, fmt[:, :1], fmt[:, 1:], f.params.mantissa_bits)  # [m, 2k]
    return _inverse_rows(f, idx.to(words.device), deq[:, :k], deq[:, k:], layer.numel)


def _inverse_rows(f: FFTSparsification, idx: torch.Tensor, re: torch.Tensor, im: torch.Tensor, n: int) -> torch.Tensor:
    """:meth:`FFTSparsification._inverse` of every row: ``[rows, n]`` fp32 signals."""
    rows = idx.shape[0]
    chunks, length = f.chunking(n)
    spec = torch.zeros(rows, chunks * (length // 2 + 1), dtype=torch.complex64, device=re.device)
    spec.scatter_(1, idx, torch.complex(re, im))
    signal = _by_node(lambda t: torch.fft.irfft(t, n=length, dim=1), spec.view(rows * chunks, -1), rows)
    return signal.reshape(rows, -1)[:, :n]


def _by_node(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, nodes: int) -> torch.Tensor:
    """``fn`` over each node's ``[chunks, m]`` rows of ``[nodes x chunks, m]``, node by node: one
    call over every node's rows can transform differently (module docstring)."""
    return torch.cat([fn(part) for part in x.view(nodes, -1, x.shape[1])])


__all__ = ["fft_rows", "fft_decode_rows"]
