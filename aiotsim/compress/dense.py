"""Dense baselines: ``none`` sends the fp32 gradient as it is; ``fp16`` sends it in half precision.

Neither keeps a residual: ``fp16`` rounding error is not fed back (the usual fp16 all-reduce). Both
encode one layer of one or many nodes at once (``[rows, n]`` rows, one per node): each message is a
row of one copy of the rows' bytes.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from aiotsim.compress.base import Codec, CodecState, LayerInfo, Payload, RowDecoder
from aiotsim.compress.memory import SentRows
from aiotsim.compress.packing import unpack_f16, unpack_f32, view_f32
from aiotsim.compress.registry import register


@register
class NoCompression(RowDecoder, Codec[CodecState]):
    """Dense fp32 gradients: the reference every compression ratio is measured against."""

    name = "none"
    summary = "dense fp32 gradient (no compression; the baseline)"
    unbiased = True
    encode_flops_per_element = 0.0

    def _encode_rows(
        self, acc: torch.Tensor, grads: torch.Tensor, layer: LayerInfo, states: list[CodecState]
    ) -> tuple[list[Payload], SentRows | None]:
        """Every row's fp32 bytes (:meth:`Codec._encode_rows`), in a copy: ``acc`` may be the
        caller's own gradient rows."""
        values = acc.clone(memory_format=torch.contiguous_format).view(torch.uint8)  # [rows, 4 n]
        return [Payload({"values": r}) for r in values], None

    def decode(self, payload: Payload, layer: LayerInfo) -> torch.Tensor:
        return unpack_f32(payload.buffers["values"]).view(layer.shape).to(layer.dtype)

    def decode_read(self, payload: Payload, layer: LayerInfo) -> torch.Tensor:
        # the payload's bytes viewed as fp32 (copied only if misaligned): no copy to be read once
        return self.decode_rows(payload.buffers, layer).view(layer.shape).to(layer.dtype)

    def decode_rows(self, buffers: Mapping[str, torch.Tensor], layer: LayerInfo) -> torch.Tensor:
        """The ``n`` fp32 values of ``buffers`` (``[..., 4 n]`` bytes: one message, or one per row
        for :meth:`~aiotsim.compress.base.Codec.decode_many`), a read-only view where aligned."""
        return view_f32(buffers["values"])


@register
class HalfPrecision(RowDecoder, Codec[CodecState]):
    """Dense fp16 gradients: 2 bytes per value, round-to-nearest (values beyond +-65504 overflow)."""

    name = "fp16"
    summary = "dense half-precision gradient (2 bytes per value)"
    encode_flops_per_element = 2.0

    def _encode_rows(
        self, acc: torch.Tensor, grads: torch.Tensor, layer: LayerInfo, states: list[CodecState]
    ) -> tuple[list[Payload], SentRows | None]:
        """Every row's fp16 bytes (:meth:`Codec._encode_rows`): straight from the gradient rows, so
        an fp16 gradient's bytes go out unchanged (NaN payloads too), in a copy (never the caller's
        gradient); fp32 and bf16 are rounded to nearest."""
        half = grads.to(torch.float16, memory_format=torch.contiguous_format, copy=True)  # [rows, n]
        return [Payload({"values": r}) for r in half.view(torch.uint8)], None

    def decode_rows(self, buffers: Mapping[str, torch.Tensor], layer: LayerInfo) -> torch.Tensor:
        """As :meth:`NoCompression.decode_rows`, from fp16 bytes (a new fp32 tensor)."""
        return unpack_f16(buffers["values"])
