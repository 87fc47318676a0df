"""Hylo: a layer-type hybrid compressor for a parameter server (seed 004).

Reference: J. Peng, "Communication Optimization of Distributed Deep Learning System Based on Model
Structure Characteristics", Master's thesis, Huazhong University of Science and Technology (2021).
Only its abstract is public; each reading below stands beside the seed's words, and where two are
plausible the other is a parameter (defaults: the first reading of each).

Each layer is routed by its type and parameter count (:meth:`Hylo.route`); the route depends only on
the static :class:`LayerInfo` and the parameters, so the server knows it without a flag on the wire.

* **small**: "When the parameter scale of the layer is larger than a certain threshold value, it
  means that the transmission cost is considerable and the layer needs to be optimized." Parameter
  scale = element count; ``size_rule="at_least"`` (default) compresses ``numel >= size_threshold``,
  ``"above"`` the literal "larger than", ``numel > size_threshold``. Smaller layers (any kind) go
  uncompressed as fp32.
* **conv kernels**: "For a convolution layer, an adaptive transmission rate is set according to the
  parameter scale of the layer. Only the gradients of some important convolution kernels are
  selected to be transmitted ..., and the gradients of the remaining convolution kernels are
  accumulated locally." A conv layer (``kind == "conv"``, at least 3-D ``[out, in, k...]``) is
  viewed as a set of kernels, ``kernel_unit="kernel"``: one ``[kh, kw]`` slice per ``(out, in)``
  pair, ``[out * in, kh * kw]``; ``kernel_unit="filter"``: one ``[in, kh, kw]`` filter per output
  channel, ``[out, in * kh * kw]``. The importance of a kernel is the ``importance_norm`` (L1 or L2)
  of its *accumulated* gradient (gradient + residual), so a kernel left out keeps growing until it
  is sent. The ``ceil(rate * kernels)`` most important kernels are sent (their indices in the shared
  index coding, their values fp32 or fp16); the others stay in the residual. The abstract does not
  say how the rate depends on the scale; we read "the transmission cost is considerable" as: larger
  layers send a smaller share. With ``s = numel / size_threshold`` (>= 1 on this route) and the
  result clipped to ``[min_rate, max_rate]`` (``rate_rule``)::

      "log10"   rate = max_rate - rate_decay * log10(s)   every tenfold more parameters: -rate_decay
      "sqrt"    rate = max_rate / sqrt(s)                 sent elements grow as sqrt(numel)
      "inverse" rate = max_rate / s                       a fixed budget of ~max_rate * size_threshold
                                                          elements per layer

  With the defaults (log10; 0.3, 0.1, 0.05, threshold 1000): LeNet-5's conv2 (2,400 weights) sends
  26.2% of its 96 kernels, a 3x3x256x256 ResNet layer 5%; "sqrt" 19.4%, "inverse" 12.5% for conv2.
* **2-bit**: "For a fully-connected layer, a threshold is adaptively set according to the overall
  size of all gradient values in this layer. This threshold is used to quantize and compress all
  the gradients ... into 2 bits ... The gradient bias caused by quantization is accumulated
  locally." MXNet's 2-bit threshold quantization with error feedback (``kind == "fc"``, and the
  fallback of large layers of any other kind): ``acc = grad + residual``, ``t = fc_factor *
  stat(acc)``, the "overall size" read as (``fc_stat``) the mean absolute value (default), the RMS,
  or the largest absolute value (``max_abs``: with ``fc_factor`` 1 only the largest elements are
  sent; meant with a factor like 0.5) of the layer's accumulated gradient. (The L2 norm itself is
  not offered: ``||acc|| >= max|acc|``, so at any factor near 1 it would send almost nothing.)
  Elements with ``acc >= t`` send code 1 (decoded ``+t``), elements with ``acc <= -t`` code 2
  (``-t``), the others code 0 (``0``); ``residual = acc - decoded``. Codes are packed 4 per byte;
  ``t`` travels as an fp32 field.

The encoder works on one layer of one or many nodes at once, one row per node (``[rows, n]``): the
route depends on the layer alone, so every row takes the same one, and each row's importances,
top-k kernels, threshold and codes are those of the row alone (its own statistic, its own index
coding), whichever rows it is encoded with.

Large layers that are neither conv nor fc (big embeddings, large norm or bias vectors, conv layers
whose shape has no kernel dimension) take the ``fallback`` route: ``"2bit"`` (default) or
``"dense"``. Only worker-to-server traffic is compressed (as in MXNet, which Hylo is built on).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch

from aiotsim.compress.base import Codec, CodecState, LayerInfo, Payload, RowDecoder
from aiotsim.compress.memory import SentRows
from aiotsim.compress.packing import (
    VALUE_BYTES,
    decode_bitmap,
    decode_indices,
    encode_index_rows,
    index_bound,
    index_header,
    pack_bits,
    pack_rows,
    pack_value_rows,
    unpack_bits,
    unpack_f32,
    unpack_values,
)
from aiotsim.compress.quantize import _signed_to_f32
from aiotsim.compress.registry import register
from aiotsim.compress.rowwise import row_reduce
from aiotsim.errors import CodecError
from aiotsim.schema import non_negative, opt, positive, unit_interval

Route = Literal["dense", "kernels", "2bit"]

# 2-bit codes (MXNet's meaning: zero, +threshold, -threshold); the encoder writes pos | neg << 1
CODE_ZERO, CODE_POS, CODE_NEG = 0, 1, 2
_U8 = torch.uint8


def two_bit_dequantize(codes: torch.Tensor, threshold: float | torch.Tensor) -> torch.Tensor:
    """The 2-bit route's decoded values: fp32 ``{0, +t, -t}`` from ``uint8`` codes
    (``threshold``: a float, a one-element fp32 tensor, or a ``[messages, 1]`` column for
    ``[messages, n]`` codes)."""
    unit = (codes == CODE_POS).to(torch.int8) - (codes == CODE_NEG).to(torch.int8)  # {-1, 0, 1}
    return unit.to(torch.float32).mul_(threshold)


@register
class Hylo(RowDecoder, Codec[CodecState]):
    """Layer-type hybrid: small layers dense, conv layers top kernels, fc layers adaptive 2-bit."""

    name = "hylo"
    summary = "layer-type hybrid: small layers dense, conv top-importance kernels, fc adaptive 2-bit (seed 004)"
    has_residual = True
    # kernel norms + top-k over kernels, or |acc| mean + two compares + packing
    encode_flops_per_element = 8.0

    @dataclass(frozen=True)
    class Params:
        size_threshold: int = opt(1000, "layers with fewer parameters go uncompressed (fp32)", check=non_negative)
        size_rule: Literal["at_least", "above"] = opt(
            "at_least", "compress layers with numel >= size_threshold ('at_least') or > it ('above')"
        )
        max_rate: float = opt(
            0.3, "conv kernel transmission rate of a layer at the size threshold", check=unit_interval
        )
        min_rate: float = opt(0.05, "lowest conv kernel transmission rate", check=unit_interval)
        rate_decay: float = opt(0.1, "log10 rule: rate decrease per tenfold more conv parameters", check=non_negative)
        rate_rule: Literal["log10", "sqrt", "inverse"] = opt(
            "log10",
            "conv rate vs s = numel / size_threshold: max_rate - rate_decay*log10(s), max_rate/sqrt(s), max_rate/s",
        )
        kernel_unit: Literal["kernel", "filter"] = opt(
            "kernel", "importance unit: [kh,kw] kernel per (out,in) or whole output filter"
        )
        importance_norm: Literal["l1", "l2"] = opt("l1", "norm of the accumulated kernel gradient used as importance")
        value_dtype: Literal["fp32", "fp16"] = opt("fp32", "precision of the sent kernel values")
        fc_factor: float = opt(1.0, "fc 2-bit threshold = fc_factor * stat(accumulated gradient)", check=positive)
        fc_stat: Literal["mean_abs", "rms", "max_abs"] = opt(
            "mean_abs", "layer statistic of the accumulated gradient the fc threshold scales"
        )
        fallback: Literal["2bit", "dense"] = opt("2bit", "route of large layers that are neither conv nor fc")

    @classmethod
    def validate(cls, params: Any) -> list[str]:
        if params.min_rate > params.max_rate:
            return [f"min_rate: must be <= max_rate (={params.max_rate}), got {params.min_rate}"]
        return []

    # ---- routing (static: both sides compute it from LayerInfo + params) ----------------------
    def kernel_view(self, layer: LayerInfo) -> tuple[int, int] | None:
        """``(kernels, elements per kernel)`` of a conv layer, or ``None`` if it has no kernels."""
        shape = layer.shape
        if self.params.kernel_unit == "kernel":
            if len(shape) < 3:
                return None
            rows = shape[0] * shape[1]
        else:
            if len(shape) < 2:
                return None
            rows = shape[0]
        if rows == 0:
            return None
        return rows, layer.numel // rows

    def kernel_grid(self, layer: LayerInfo) -> tuple[int, int]:
        """:meth:`kernel_view` of a layer on the ``"kernels"`` route (which only such layers take)."""
        view = self.kernel_view(layer)
        if view is None:
            raise CodecError(f"hylo: layer {layer.name} of shape {layer.shape} has no kernels")
        return view

    def route(self, layer: LayerInfo) -> Route:
        """Which path ``layer`` takes: ``"dense"``, ``"kernels"`` or ``"2bit"``."""
        n, limit = layer.numel, self.params.size_threshold
        small = n <= limit if self.params.size_rule == "above" else n < limit
        if small or n == 0:
            return "dense"
        if layer.kind == "conv" and self.kernel_view(layer) is not None:
            return "kernels"
        if layer.kind == "fc":
            return "2bit"
        return "2bit" if self.params.fallback == "2bit" else "dense"

    def conv_rate(self, numel: int) -> float:
        """Kernel transmission rate of a conv layer of ``numel`` parameters (formula in the module doc)."""
        p = self.params
        scale = max(numel / max(p.size_threshold, 1), 1.0)  # s >= 1: layer size in thresholds
        if p.rate_rule == "log10":
            rate = p.max_rate - p.rate_decay * math.log10(scale)
        elif p.rate_rule == "sqrt":
            rate = p.max_rate / math.sqrt(scale)
        else:  # inverse: about max_rate * size_threshold elements per layer
            rate = p.max_rate / scale
        return min(p.max_rate, max(p.min_rate, rate))

    def kernels_sent(self, layer: LayerInfo) -> int:
        """Number of kernels a conv layer sends per iteration."""
        rows = self.kernel_grid(layer)[0]
        return min(rows, max(1, math.ceil(self.conv_rate(layer.numel) * rows)))

    def fc_thresholds(self, acc: torch.Tensor) -> list[float]:
        """Every row's adaptive 2-bit threshold ``fc_factor * stat(row)`` of ``acc`` (fp32
        ``[rows, n]``), fp32-rounded as it is sent; one host read for all rows. Each row's
        statistic equals its own 1-D reduction (:func:`~aiotsim.compress.rowwise.row_reduce`)."""
        if self.params.fc_stat == "mean_abs":
            stat = row_reduce(lambda r: r.abs().mean(), acc, lambda x: x.abs().mean(dim=1))
        elif self.params.fc_stat == "rms":
            stat = row_reduce(lambda r: r.square().mean().sqrt(), acc, lambda x: x.square().mean(dim=1).sqrt())
        else:
            stat = acc.abs().amax(dim=1)  # a maximum: the same in any order
        ts = (self.params.fc_factor * stat).to(torch.float32).tolist()
        if self.params.fc_stat == "max_abs":  # a diverged row: the NaN bits of its own 1-D max
            for i in [i for i, t in enumerate(ts) if math.isnan(t)]:  # (amax's NaN has other bits)
                ts[i] = float((self.params.fc_factor * acc[i].abs().max()).to(torch.float32))
        return ts

    # ---- node side: every node's row of one layer at once ---------------------------------
    def _encode_rows(
        self, acc: torch.Tensor, grads: torch.Tensor, layer: LayerInfo, states: list[CodecState]
    ) -> tuple[list[Payload], SentRows]:
        # acc: r + g, fp32 [rows, n]; the route depends on the layer alone, so every row takes it
        route = self.route(layer)
        if route == "dense":  # each row's fp32 bytes, a copy; sent exactly, so the residual is zero
            return [Payload({"values": r}) for r in acc.clone().view(_U8)], ("dense", acc)
        if route == "kernels":
            return self._kernel_rows(acc, layer)
        return self._two_bit_rows(acc)

    def _kernel_rows(self, acc: torch.Tensor, layer: LayerInfo) -> tuple[list[Payload], SentRows]:
        """The conv route: each row's ``k`` most important kernels, exactly (fp32) or as fp16."""
        nodes = acc.shape[0]
        rows, cols = self.kernel_grid(layer)
        kernels = acc.view(nodes, rows, cols)  # [nodes, kernels, elements per kernel]
        order = 1 if self.params.importance_norm == "l1" else 2
        importance = torch.linalg.vector_norm(kernels, ord=order, dim=2)  # [nodes, kernels]
        k = self.kernels_sent(layer)
        idx = torch.topk(importance, k, dim=1, sorted=False).indices.sort(dim=1).values  # [nodes, k] ascending
        at = idx.unsqueeze(2).expand(nodes, k, cols)
        picked = kernels.gather(1, at)  # [nodes, k, cols]
        packed = pack_value_rows(picked.reshape(nodes, k * cols), self.params.value_dtype)
        # what the server decodes: the packed values (fp16-rounded where sent as fp16)
        kept = picked.to(torch.float16).float() if self.params.value_dtype == "fp16" else picked
        sent = torch.zeros_like(kernels).scatter_(1, at, kept)
        coded = encode_index_rows(idx, rows)
        payloads = [Payload({"indices": c.buf, "values": b}, {"indices": c.head}) for c, b in zip(coded, packed)]
        return payloads, ("dense", sent.view(nodes, -1))

    def _two_bit_rows(self, acc: torch.Tensor) -> tuple[list[Payload], SentRows]:
        """The 2-bit route: every row quantized at its own threshold ``t`` (codes 1 for ``acc >= t``,
        2 for ``acc <= -t``, else 0); a row whose ``t`` is not positive sends nothing (all codes 0)."""
        ts = self.fc_thresholds(acc)
        t = torch.tensor(ts, dtype=torch.float32, device=acc.device).unsqueeze(1)  # [nodes, 1]
        pos, neg = acc >= t, acc <= -t  # [nodes, n]
        off = [i for i, v in enumerate(ts) if v <= 0.0]
        if off:
            rows = torch.tensor(off, device=acc.device)
            pos[rows], neg[rows] = False, False
        # codes pos | neg << 1 in one uint8 pass; then pos - neg in pos's own bytes, as fp32 times t
        codes = neg.view(_U8).bitwise_left_shift(1).bitwise_or_(pos.view(_U8))
        sent = _signed_to_f32(pos.view(torch.int8).sub_(neg.view(torch.int8))).mul_(t)  # {-t, 0, t}
        if off:
            sent[rows] = 0.0  # +0 whatever the sign of a zero threshold
        packed = pack_rows(codes, lambda c: pack_bits(c, 2), acc.shape[1] % 8 == 0)  # 4 codes per byte
        thresholds = t.view(_U8)  # [nodes, 4]: each row's fp32 threshold field
        return [Payload({"threshold": h, "codes": c}) for h, c in zip(thresholds, packed)], ("dense", sent)

    def message_bound(self, layer: LayerInfo) -> int:
        """The kernel route: its k kernels' values and k indices in the costliest form the index
        coding may pick; the others send a fixed number of codes or values (the default's probe)."""
        if self.route(layer) != "kernels":
            return super().message_bound(layer)
        rows, cols = self.kernel_grid(layer)
        k = self.kernels_sent(layer)
        return index_bound(k, rows) + k * cols * VALUE_BYTES[self.params.value_dtype]

    def decode(self, payload: Payload, layer: LayerInfo) -> torch.Tensor:
        """The kernel route's sparse kernels; the other routes' as :meth:`decode_rows`."""
        if self.route(layer) != "kernels":
            return super().decode(payload, layer)
        rows, cols = self.kernel_grid(layer)
        index_buf = payload.buffers["indices"]
        header = index_header(index_buf, payload.heads.get("indices"))
        vals = unpack_values(payload.buffers["values"], self.params.value_dtype).view(-1, cols)
        out = torch.zeros(rows, cols, dtype=torch.float32, device=vals.device)
        bitmap = decode_bitmap(index_buf, rows, header)
        if bitmap is None:
            out[decode_indices(index_buf, rows, header)] = vals
        else:  # the kept rows in order, filled from vals row by row: no index list (a GPU sync)
            out.masked_scatter_(bitmap[0].to(vals.device).unsqueeze(1).expand(rows, cols), vals)
        return out.reshape(layer.shape).to(layer.dtype)

    def decode_rows(self, buffers: Mapping[str, torch.Tensor], layer: LayerInfo) -> torch.Tensor:
        """The dense and 2-bit routes, element-wise over buffers with leading dimensions (one
        message, or one per row): each row's fp32 values, or its codes times its own threshold
        (applied on the device: no host read). ``[..., n]`` fp32."""
        if self.route(layer) == "dense":
            return unpack_f32(buffers["values"])
        return two_bit_dequantize(unpack_bits(buffers["codes"], 2, layer.numel), unpack_f32(buffers["threshold"]))

    def _decode_rows(self, payloads: Sequence[Payload], layer: LayerInfo) -> torch.Tensor | None:
        """Dense and 2-bit messages as :class:`~aiotsim.compress.base.RowDecoder` decodes them; kernel
        sets one by one."""
        return None if self.route(layer) == "kernels" else super()._decode_rows(payloads, layer)
