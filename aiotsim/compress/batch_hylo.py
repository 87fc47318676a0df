"""Batched Hylo (seed 004): one layer of many nodes as ``[nodes, n]`` rows, byte-identical to each
node's own encode (:class:`~aiotsim.compress.hylo.Hylo`). A layer's route depends on the layer
alone, so every row of it takes the same one:

* ``dense``: every row's fp32 bytes (the residual becomes zero, as the loop's ``acc - acc``);
* ``kernels``: every row's kernel importances (``[nodes, kernels]``, a norm over each kernel's
  contiguous elements, as the loop's ``[kernels, cols]`` norm), one row-wise top-k of the same k,
  and the index coding of every row at once (:func:`~aiotsim.compress.packing.encode_index_rows`);
* ``2bit``: every row's adaptive threshold (:meth:`Hylo.fc_threshold`'s statistic per row, read
  from the host once per layer), then the comparisons and codes over the rows; a row whose
  threshold is not positive sends nothing, as :func:`~aiotsim.compress.hylo.two_bit_quantize`.
"""

from __future__ import annotations

import torch

from aiotsim.compress.base import Codec, CodecState, LayerInfo, Payload
from aiotsim.compress.hylo import CODE_NEG, CODE_POS, Hylo
from aiotsim.compress.packing import encode_index_rows, pack_bits, pack_rows, pack_value_rows
from aiotsim.compress.quantize import _signed_to_f32
from aiotsim.compress.rowwise import row_reduce

_U8 = torch.uint8
assert (CODE_POS, CODE_NEG) == (1, 2)  # the bit layout _two_bit writes


def hylo_rows(codec: Codec, acc: torch.Tensor, layer: LayerInfo, states: list[CodecState]):
    """Every row's Hylo message and what it sent (the residual role's ``Sent``, as rows)."""
    hylo: Hylo = codec  # type: ignore[assignment]
    route = hylo.route(layer)
    if route == "dense":  # pack_f32 of each row (a copy: acc becomes the zero residual in place)
        return [Payload({"values": r}) for r in acc.clone().view(_U8)], ("dense", acc)
    if route == "kernels":
        return _kernels(hylo, acc, layer)
    return _two_bit(hylo, acc)


def _kernels(hylo: Hylo, acc: torch.Tensor, layer: LayerInfo):
    """:meth:`Hylo._encode_kernels` of every row: the ``k`` most important kernels, exactly."""
    nodes = acc.shape[0]
    rows, cols = hylo.kernel_grid(layer)
    kernels = acc.view(nodes, rows, cols)
    order = 1 if hylo.params.importance_norm == "l1" else 2
    importance = torch.linalg.vector_norm(kernels, ord=order, dim=2)  # [nodes, kernels]
    k = hylo.kernels_sent(layer)
    idx = torch.topk(importance, k, dim=1, sorted=False).indices.sort(dim=1).values  # [nodes, k] ascending
    picked = kernels.gather(1, idx.unsqueeze(2).expand(nodes, k, cols))  # [nodes, k, cols]
    packed = pack_value_rows(picked.reshape(nodes, k * cols), hylo.params.value_dtype)
    # what the server decodes: the packed values (fp16-rounded where sent as fp16)
    kept = picked.to(torch.float16).float() if hylo.params.value_dtype == "fp16" else picked
    sent = torch.zeros_like(kernels).scatter_(1, idx.unsqueeze(2).expand(nodes, k, cols), kept)
    coded = encode_index_rows(idx, rows)
    payloads = [Payload({"indices": c.buf, "values": b}, {"indices": c.head}) for c, b in zip(coded, packed)]
    return payloads, ("dense", sent.view(nodes, -1))


def _two_bit(hylo: Hylo, acc: torch.Tensor):
    """:func:`~aiotsim.compress.hylo.two_bit_quantize` of every row at its own threshold."""
    stat = hylo.params.fc_stat
    if stat == "mean_abs":
        s = row_reduce(lambda r: r.abs().mean(), acc, lambda x: x.abs().mean(dim=1))
    elif stat == "rms":
        s = row_reduce(lambda r: r.square().mean().sqrt(), acc, lambda x: x.square().mean(dim=1).sqrt())
    else:
        s = acc.abs().amax(dim=1)  # a maximum: the same in any order
    ts = (hylo.params.fc_factor * s).to(torch.float32).tolist()  # one host read: every row's threshold
    t = torch.tensor(ts, dtype=torch.float32, device=acc.device).unsqueeze(1)  # [nodes, 1]
    pos, neg = acc >= t, acc <= -t  # [nodes, n]
    off = [i for i, v in enumerate(ts) if v <= 0.0]  # two_bit_quantize sends nothing at t <= 0
    if off:
        rows = torch.tensor(off, device=acc.device)
        pos[rows], neg[rows] = False, False
    # codes pos | neg << 1 (CODE_POS = 1, CODE_NEG = 2); then pos - neg in pos's own bytes
    codes = neg.view(_U8).bitwise_left_shift(1).bitwise_or_(pos.view(_U8))
    sent = _signed_to_f32(pos.view(torch.int8).sub_(neg.view(torch.int8))).mul_(t)  # {-t, 0, t}
    if off:
        sent[rows] = 0.0  # zeros_like(acc): +0, whatever the threshold's sign of zero
    packed = pack_rows(codes, lambda c: pack_bits(c, 2), acc.shape[1] % 8 == 0)
    thresholds = t.view(_U8)  # [nodes, 4]: pack_f32([t]) of each row
    return [Payload({"threshold": h, "codes": c}) for h, c in zip(thresholds, packed)], ("dense", sent)


__all__ = ["hylo_rows"]
