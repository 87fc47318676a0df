"""Sparse messages: a set of indices plus their values, the wire format every sparsifier shares.

The index set is coded by :func:`aiotsim.compress.packing.encode_indices` (cheapest exact form per
message); values follow in index order as fp32 or fp16 (``value_dtype``, a codec parameter known to
both sides by protocol).
"""

from __future__ import annotations

import torch

from aiotsim.compress.base import LayerInfo, Payload
from aiotsim.compress.packing import decode_indices, encode_indices, pack_values, unpack_values


def sparse_payload(indices: torch.Tensor, values: torch.Tensor, n: int, value_dtype: str = "fp32") -> Payload:
    """Payload for ``values`` at flat ``indices`` of an ``n``-element tensor.

    ``indices`` need not be sorted; they are sorted here (with their values) because every
    index coding is of a sorted set.
    """
    indices = indices.reshape(-1).to(torch.int64)
    values = values.reshape(-1)
    # every sparsifier selects with nonzero() (ascending); sort only when needed (one pass to check)
    if indices.numel() > 1 and not bool((indices[1:] > indices[:-1]).all()):
        order = torch.argsort(indices)
        indices, values = indices[order], values[order]
    return Payload({"indices": encode_indices(indices, n), "values": pack_values(values, value_dtype)})


def decode_sparse_parts(payload: Payload, n: int, value_dtype: str = "fp32") -> tuple[torch.Tensor, torch.Tensor]:
    """``(indices, values)`` of a sparse payload; indices sorted, values fp32."""
    idx = decode_indices(payload.buffers["indices"], n)
    return idx, unpack_values(payload.buffers["values"], value_dtype)


def decode_sparse(payload: Payload, layer: LayerInfo, value_dtype: str = "fp32") -> torch.Tensor:
    """Dense gradient of ``layer`` with the payload's values scattered at its indices."""
    idx, vals = decode_sparse_parts(payload, layer.numel, value_dtype)
    out = torch.zeros(layer.numel, dtype=torch.float32, device=vals.device)
    out[idx] = vals
    return out.view(layer.shape).to(layer.dtype)


def payload_indices(payload: Payload, n: int) -> torch.Tensor:
    """The index set of a sparse payload (for the server's union size, seed 001's metric)."""
    return decode_indices(payload.buffers["indices"], n)
