"""Sparse messages: a set of indices plus their values, the wire format every sparsifier shares.

The index set is coded by :func:`aiotsim.compress.packing.encode_indices` (cheapest exact form per
message); values follow in index order as fp32 or fp16 (``value_dtype``, a codec parameter known to
both sides by protocol).
"""

from __future__ import annotations

import torch

from aiotsim.compress.base import LayerInfo, Payload
from aiotsim.compress.packing import (
    VALUE_BYTES,
    decode_bitmap,
    decode_indices,
    encode_index_set,
    index_bound,
    index_header,
    pack_values,
    unpack_values,
    view_f32,
)
from aiotsim.errors import CodecError


def sparse_payload(
    indices: torch.Tensor,
    values: torch.Tensor,
    n: int,
    value_dtype: str = "fp32",
    mask: torch.Tensor | None = None,
    *,
    ascending: bool = False,
) -> Payload:
    """Payload for ``values`` at flat ``indices`` of an ``n``-element tensor.

    ``indices`` need not be sorted; they are sorted here (with their values) because every
    index coding is of a sorted set. ``mask``: the same selection as a boolean tensor of ``n``
    elements, when the caller has one (lets a dense set be bitmap-coded straight from it).
    ``ascending``: the caller's indices are strictly ascending already (a selection by
    ``nonzero``), so the check that would find it out, a host read (on a GPU a sync per message
    and layer), is skipped.
    """
    indices = indices.reshape(-1).to(torch.int64)
    values = values.reshape(-1)
    # every sparsifier selects with nonzero() (ascending); sort only when needed (one pass to check)
    if not ascending and indices.numel() > 1 and not bool((indices[1:] > indices[:-1]).all()):
        order = torch.argsort(indices)
        indices, values = indices[order], values[order]
    coded = encode_index_set(indices, n, mask)
    return Payload({"indices": coded.buf, "values": pack_values(values, value_dtype)}, {"indices": coded.head})


def sparse_bound(n: int, most: int, value_dtype: str = "fp32") -> int:
    """Most bytes :func:`sparse_payload` takes for at most ``most`` values of an ``n``-element
    tensor, whatever they are: the index bound plus the values (both non-decreasing in the count)."""
    return index_bound(most, n) + most * VALUE_BYTES[value_dtype]


def scatter_sparse(
    index_buf: torch.Tensor, values: torch.Tensor, layer: LayerInfo, head: bytes | None = None
) -> torch.Tensor:
    """Dense fp32 ``[n]`` tensor with ``values`` (``[k]``, in index order) at the index set coded in
    ``index_buf`` (``head``: the host copy of its header, when the payload has one). A bitmap-coded
    set is scattered through its mask (``masked_scatter_``), without materializing ``k`` int64
    indices."""
    n = layer.numel
    out = torch.zeros(n, dtype=torch.float32, device=values.device)
    header = index_header(index_buf, head)  # parsed once, for both decoders (without head: a GPU sync)
    bitmap = decode_bitmap(index_buf, n, header)
    if bitmap is not None:
        mask, count = bitmap
        if count != values.numel():
            raise CodecError(f"sparse payload for {layer.name} has {values.numel()} values for {count} indices")
        out.masked_scatter_(mask.to(values.device), values)
    else:
        out[decode_indices(index_buf, n, header).to(values.device)] = values
    return out


def decode_sparse(payload: Payload, layer: LayerInfo, value_dtype: str = "fp32") -> torch.Tensor:
    """Dense gradient of ``layer`` with the payload's values scattered at its indices."""
    buf = payload.buffers["values"]
    # the values are only read (scattered into a new tensor): an fp32 view of the payload will do
    vals = view_f32(buf) if value_dtype == "fp32" else unpack_values(buf, value_dtype)
    dense = scatter_sparse(payload.buffers["indices"], vals, layer, payload.heads.get("indices"))
    return dense.view(layer.shape).to(layer.dtype)


def payload_indices(payload: Payload, n: int) -> torch.Tensor:
    """The index set of a sparse payload (for the server's union size, seed 001's metric)."""
    buf = payload.buffers["indices"]
    return decode_indices(buf, n, index_header(buf, payload.heads.get("indices")))
