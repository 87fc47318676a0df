"""A codec of your own: top-k with 8-bit values (the tutorial of docs/CODECS.md)."""

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from aiotsim.compress import Codec, CodecState, LayerInfo, Payload, Sent
from aiotsim.compress.packing import pack_f32, unpack_f32
from aiotsim.schema import opt, unit_interval


class EightBitTopK(Codec[CodecState]):
    """Top-k magnitudes, each sent as one signed byte times a shared fp32 scale; error feedback."""

    @dataclass(frozen=True)
    class Params:
        ratio: float = opt(0.01, "fraction of elements sent, k = ceil(ratio * n)", check=unit_interval)

    name = "eightbit-topk"
    summary = "top-k with 8-bit values and error feedback (tutorial codec)"
    has_residual = True  # the base class keeps the residual: _encode only says what it sent
    sparse = True

    def _encode(self, acc: Tensor, grad: Tensor, layer: LayerInfo, state: CodecState) -> tuple[Payload, Sent]:
        flat = acc.reshape(-1)  # [n] fp32: gradient + residual
        idx = flat.abs().topk(math.ceil(self.params.ratio * flat.numel())).indices.sort().values  # [k]
        scale = (flat[idx].abs().max() / 127).clamp_min(1e-30) if len(idx) else flat.new_ones(())
        codes = (flat[idx] / scale).round().clamp(-127, 127).to(torch.int8)  # [k], 1 B each
        wire = {"scale": pack_f32(scale), "indices": idx.int().view(torch.uint8), "codes": codes.view(torch.uint8)}
        return Payload(wire), Sent.sparse(idx, codes.float() * scale)  # exactly what decode rebuilds

    def decode(self, payload: Payload, layer: LayerInfo) -> Tensor:
        b = payload.buffers  # bytes only: 4 B scale, 4 B per index, 1 B per value
        values = b["codes"].view(torch.int8).float() * unpack_f32(b["scale"])
        out = torch.zeros(layer.numel, device=values.device)
        out[b["indices"].view(torch.int32).long()] = values
        return out.view(layer.shape).to(layer.dtype)
