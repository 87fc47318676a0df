"""Sparse messages: a set of indices plus their values, the wire format every sparsifier shares.

The index set is coded by :func:`aiotsim.compress.packing.encode_indices` (cheapest exact form per
message); values follow in index order as fp32 or fp16 (``value_dtype``, a codec parameter known to
both sides by protocol).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from aiotsim.compress.base import LayerInfo, Payload
from aiotsim.compress.packing import (
    VALUE_BYTES,
    decode_bitmap,
    decode_indices,
    encode_index_set,
    index_bound,
    index_header,
    mask_indices,
    pack_values,
    pad_rows,
    unpack_values,
    view_f32,
)
from aiotsim.errors import CodecError


def sparse_payload(
    indices: torch.Tensor, values: torch.Tensor, n: int, value_dtype: str = "fp32", *, ascending: bool = False
) -> Payload:
    """Payload for ``values`` at flat ``indices`` of an ``n``-element tensor.

    ``indices`` need not be sorted; they are sorted here (with their values) because every
    index coding is of a sorted set. ``ascending``: the caller's indices are strictly ascending
    already (a selection by ``nonzero``), so the check that would find it out, a host read (on a
    GPU a sync per message and layer), is skipped.
    """
    indices = indices.reshape(-1).to(torch.int64)
    values = values.reshape(-1)
    # every sparsifier selects with nonzero() (ascending); sort only when needed (one pass to check)
    if not ascending and indices.numel() > 1 and not bool((indices[1:] > indices[:-1]).all()):
        order = torch.argsort(indices)
        indices, values = indices[order], values[order]
    coded = encode_index_set(indices, n)
    return Payload({"indices": coded.buf, "values": pack_values(values, value_dtype)}, {"indices": coded.head})


def sparse_bound(n: int, most: int, value_dtype: str = "fp32") -> int:
    """Most bytes :func:`sparse_payload` takes for at most ``most`` values of an ``n``-element
    tensor, whatever they are: the index bound plus the values (both non-decreasing in the count)."""
    return index_bound(most, n) + most * VALUE_BYTES[value_dtype]


# A sparse codec's value coding: the byte count of each buffer besides the indices for ``count``
# values, and the values of a group of messages (their buffers, their counts), fp32 in row order.
Sizes = Callable[[int], dict[str, int]]
ValuesOf = Callable[[list[Mapping[str, torch.Tensor]], list[int]], torch.Tensor]


def plain_values(value_dtype: str) -> tuple[Sizes, ValuesOf]:
    """The value coding of exact values (``value_dtype``): their bytes, concatenated."""
    per_value = VALUE_BYTES[value_dtype]

    def values(bufs: list[Mapping[str, torch.Tensor]], counts: list[int]) -> torch.Tensor:
        raw = bufs[0]["values"] if len(bufs) == 1 else torch.cat([b["values"] for b in bufs])
        # only read (scattered into a new tensor): an fp32 view of the bytes will do, no copy
        return view_f32(raw) if value_dtype == "fp32" else unpack_values(raw, value_dtype)

    return (lambda c: {"values": c * per_value}), values


def padded_values(values_of: Callable[[Mapping[str, torch.Tensor], int], torch.Tensor]) -> ValuesOf:
    """The value coding of quantized values: ``values_of`` (a decoder of ``count`` values from a
    message's buffers, with leading dimensions) over the group's buffers zero-padded into
    ``[rows, bytes]``, each row's own values kept, in row order."""

    def values(bufs: list[Mapping[str, torch.Tensor]], counts: list[int]) -> torch.Tensor:
        most = max(counts)
        rows = values_of({k: pad_rows([b[k] for b in bufs]) for k in bufs[0] if k != "indices"}, most)
        return rows.reshape(-1) if min(counts) == most else _own_entries(rows, counts)

    return values


def decode_sparse_rows(
    payloads: Sequence[Payload], layer: LayerInfo, sizes: Sizes, values_of: ValuesOf
) -> torch.Tensor:
    """Sparse messages of ``layer`` (an index set and its values) decoded into ``[messages, n]``
    fp32. Messages are grouped by index coding (form and bit width, from each header); a group's
    buffers, of counts that may differ, are decoded as ``[rows, bytes]`` tensors padded with zero
    bytes (a row's own values come first, the padding's are left out), and its values written in
    row order through flat indices (a bitmap group: through its masks, without materializing the
    indices). One message is a group of one: the same code decodes one message and many.

    Raises
    ------
    CodecError
        A message whose buffers do not hold what its index set's count says.
    """
    n = layer.numel
    heads = [index_header(p.buffers["indices"], p.heads.get("indices")) for p in payloads]
    for p, (_, _, count) in zip(payloads, heads):
        want = {"indices": p.buffers["indices"].numel(), **sizes(count)}
        if {k: b.numel() for k, b in p.buffers.items()} != want:
            got = ", ".join(f"{k} {b.numel()} B" for k, b in p.buffers.items())
            raise CodecError(f"sparse payload for {layer.name} has {got} for {count} indices (expected {want})")
    device = payloads[0].buffers["indices"].device
    out = torch.zeros(len(payloads), n, dtype=torch.float32, device=device)
    groups: dict[tuple[int, int], list[int]] = {}
    for i, (mode, width, count) in enumerate(heads):
        if count:
            groups.setdefault((mode, width), []).append(i)
    for (mode, width), rows in groups.items():
        counts = [heads[i][2] for i in rows]
        values = values_of([payloads[i].buffers for i in rows], counts).to(device)  # [sum(counts)], row order
        index = pad_rows([payloads[i].buffers["indices"] for i in rows])  # [m, bytes]
        bitmap = decode_bitmap(index, n, (mode, width, max(counts)))  # every bitmap is ceil(n / 8) B
        if bitmap is not None:
            mask = bitmap[0].to(device)  # [m, n]
            if len(rows) == len(payloads):  # every row: straight into out
                out.masked_scatter_(mask, values)
            else:
                out[torch.tensor(rows, device=device)] = out.new_zeros(len(rows), n).masked_scatter_(mask, values)
            continue
        most = max(counts)
        flat = decode_indices(index, n, (mode, width, most)).to(device)  # [m, most]
        if len(payloads) > 1:
            flat = flat + torch.tensor(rows, dtype=torch.int64, device=device)[:, None] * n
        if min(counts) < most:  # the padding's zero codes decode to indices of their own
            flat = _own_entries(flat, counts)
        out.view(-1)[flat.reshape(-1)] = values
    return out


def _own_entries(rows: torch.Tensor, counts: list[int]) -> torch.Tensor:
    """The first ``counts[i]`` entries of each row of ``rows`` (``[m, most]``), in row order:
    ``[sum(counts)]``. The total is known on the host, so off the CPU no read is needed
    (:func:`~aiotsim.compress.sparsify.mask_indices`), where a boolean mask index would sync."""
    valid = torch.arange(rows.shape[1], device=rows.device) < torch.tensor(counts, device=rows.device)[:, None]
    return rows.reshape(-1)[mask_indices(valid.view(-1), sum(counts))]


class SparseDecoder:
    """Mixin for a codec whose messages are an index set and its values (:func:`sparse_payload`'s
    form): :meth:`decode` is :meth:`_decode_rows` of one message, so one message and many are
    decoded by the same code (:func:`decode_sparse_rows`). A codec whose values are coded
    otherwise (quantized) overrides :meth:`value_coding`."""

    params: Any

    def value_coding(self) -> tuple[Sizes, ValuesOf]:
        """How the messages carry their values (default: exact values of ``params.value_dtype``)."""
        return plain_values(self.params.value_dtype)

    def _decode_rows(self, payloads: Sequence[Payload], layer: LayerInfo) -> torch.Tensor:
        return decode_sparse_rows(payloads, layer, *self.value_coding())

    def decode(self, payload: Payload, layer: LayerInfo) -> torch.Tensor:
        """Dense gradient of ``layer`` with the payload's values scattered at its indices."""
        return self._decode_rows([payload], layer).view(layer.shape).to(layer.dtype)


def payload_indices(payload: Payload, n: int) -> torch.Tensor:
    """The index set of a payload's ``indices`` buffer, of an ``n``-element tensor (FFT's kept bins)."""
    buf = payload.buffers["indices"]
    return decode_indices(buf, n, index_header(buf, payload.heads.get("indices")))
