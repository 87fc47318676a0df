"""4Bit: MXNet's 2-bit threshold scheme widened to 4-bit codes with per-layer thresholds (seed 000).

Jiang, Fu, Peng, Zhu, "4Bit-based Gradient Compression Method for Distributed Deep Learning System",
Computer Science 47(7):220-226, 2020 (doi:10.11896/jsjkx.200300097). The abstract fixes three things:
four bits per gradient value instead of MXNet's two; several approximation thresholds per layer,
chosen from that layer's gradient statistics; and, as in 2Bit, what is not sent stays in a local
residual (error feedback). A summary of the full text adds that the authors designed three groups of
thresholds to fit differently distributed layers; the exact groups are not public.

Algorithm (our reading). Per layer and step, with residual ``r`` and gradient ``g``:

1. ``acc = r + g`` (error feedback, :mod:`aiotsim.compress.memory`).
2. One anchor statistic ``a`` of ``|acc|`` (``statistic``): ``max`` (default) or ``mean``.
3. Seven thresholds ``0 < t_1 < ... < t_7`` from the anchor (``spacing``):

   ==========  ======================================  ======================================
   spacing     statistic = "max" (a is t_7)            statistic = "mean" (a is t_1)
   ==========  ======================================  ======================================
   linear      ``t_k = k * a / 7``                     ``t_k = k * a``
   log2        ``t_k = a * 2**(k - 7)``                ``t_k = a * 2**(k - 1)``
   ==========  ======================================  ======================================

4. Each element sends ``sign(acc) * t_l`` where ``l`` is the number of thresholds ``<= |acc|``
   (``l = 0``: send 0), exactly MXNet's rule ``r >= t -> send t`` with seven rungs instead of one;
   ``r = acc - sent`` is kept.

The code is sign-magnitude: ``code = l | negative << 3``, so ``0..7`` are ``0, +t_1 .. +t_7`` and
``9..15`` are ``-t_1 .. -t_7`` (8, a negative zero, is never sent and decodes to 0); two codes per
byte, low nibble first. The decoder needs only the anchor, sent as one fp32; ``statistic`` and
``spacing`` are protocol parameters known to both sides. Level and threshold are computed
arithmetically (``floor(|acc| / step)`` for linear rungs, the binary exponent of ``|acc| / t_1``
for log2 rungs), so ``t_l <= |acc|`` holds up to fp32 rounding at the exact boundaries; sent values
are recomputed by the decoder with the same fp32 operations, so sent + residual == accumulated
exactly.

Readings not chosen, and why. The default (``max``, ``linear``) never clips: the largest element is
always representable, small ones wait in the residual as MXNet's do, and the thresholds follow the
layer's scale as the abstract asks. ``mean`` anchors the first rung at the layer's typical magnitude
(MXNet's single threshold made adaptive, as seed 004 does for 2-bit) and clips outliers into the
residual; ``log2`` spreads the rungs over a 64x range for heavy-tailed layers. The paper's "three
groups" could be three such ladders chosen per layer by a statistic; with the groups unknown we
expose the ladder as a parameter instead of inventing a selection rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import torch

from aiotsim.compress import memory
from aiotsim.compress.base import Codec, CodecState, LayerInfo, Payload
from aiotsim.compress.packing import pack_bits, pack_f32, unpack_bits, unpack_f32
from aiotsim.compress.registry import register

_U8 = torch.uint8
LEVELS = 7  # non-zero magnitudes; 3 bits of level + 1 sign bit = 4 bits
SIGN_BIT = 8


def first_threshold(anchor: torch.Tensor, spacing: str, statistic: str) -> torch.Tensor:
    """``t_1``, the rung every other threshold is a multiple of: ``t_k = t_1 * k`` (linear) or
    ``t_1 * 2**(k - 1)`` (log2). ``anchor`` is a 0-d fp32 tensor; so is the result."""
    if statistic == "mean":
        return anchor
    return anchor / LEVELS if spacing == "linear" else anchor * 2.0 ** (1 - LEVELS)


def magnitudes(level: torch.Tensor, t1: torch.Tensor, spacing: str) -> torch.Tensor:
    """``t_level`` (0 for level 0) in fp32 for integer ``level`` given as fp32: [n]."""
    if spacing == "linear":
        return level * t1
    # t_1 * 2**(l - 1) for l >= 1; exp2 of an integer is exact in fp32
    return torch.where(level > 0, torch.exp2(level - 1.0) * t1, torch.zeros_like(level))


@register
class FourBit(Codec):
    """4Bit (Jiang et al. 2020): sign + 3-bit level over 7 per-layer thresholds, with residual.

    Wire: ``anchor`` (fp32, 4 bytes) and ``codes`` (4 bits per element, ``ceil(n/2)`` bytes).
    """

    name = "4bit"
    summary = "4Bit (seed 000): sign + 3-bit level over 7 per-layer thresholds, residual kept locally"
    has_residual = True
    encode_flops_per_element = 10.0

    @dataclass(frozen=True)
    class Params:
        statistic: Literal["max", "mean"] = field(
            default="max",
            metadata={"help": "anchor from |r+g| of the layer: 'max' is the top threshold, 'mean' the first"},
        )
        spacing: Literal["linear", "log2"] = field(
            default="linear", metadata={"help": "thresholds k*t1 ('linear') or t1*2**(k-1) ('log2'), k=1..7"}
        )

    def validate(self) -> list[str]:
        problems = []
        if self.params.statistic not in ("max", "mean"):
            problems.append(f"statistic(={self.params.statistic!r}) must be 'max' or 'mean'")
        if self.params.spacing not in ("linear", "log2"):
            problems.append(f"spacing(={self.params.spacing!r}) must be 'linear' or 'log2'")
        return problems

    def thresholds(self, anchor: float) -> list[float]:
        """The seven thresholds ``t_1..t_7`` for an anchor value (for reports and tests)."""
        a = torch.tensor(anchor, dtype=torch.float32)
        t1 = first_threshold(a, self.params.spacing, self.params.statistic)
        lv = torch.arange(1, LEVELS + 1, dtype=torch.float32)
        return magnitudes(lv, t1, self.params.spacing).tolist()

    def encode(self, grad: torch.Tensor, layer: LayerInfo, state: CodecState) -> Payload:
        spacing, statistic = self.params.spacing, self.params.statistic
        acc = memory.compensate(grad, state).reshape(-1)  # [n] fp32: r + g
        n = acc.numel()
        if n == 0:
            anchor = acc.new_zeros(())
        elif statistic == "max":
            lo, hi = torch.aminmax(acc)
            anchor = torch.maximum(hi, -lo)  # max |acc| without materializing |acc|
        else:
            anchor = torch.linalg.vector_norm(acc, ord=1) / n  # mean |acc|
        t1 = first_threshold(anchor, spacing, statistic)  # 0-d fp32
        # |acc| / t1 in units of the first rung. A zero t1 means a zero layer (|acc| = 0 everywhere,
        # or an anchor below fp32's range): dividing by 1 instead keeps every level at 0. Division,
        # not multiplication by 1/t1, so that the max element lands exactly on level 7.
        level = acc.abs().div_(torch.where(t1 > 0, t1, torch.ones_like(t1)))  # [n] fp32
        if spacing == "linear":
            level.floor_()
        else:
            # |acc| / t1 = m * 2**e with m in [0.5, 1): l = e (t_e <= |acc| < t_{e+1}); e <= 0 -> 0
            level = torch.frexp(level).exponent.to(torch.float32)
        level.clamp_(0, LEVELS)  # [n] fp32 integers 0..7
        sent = torch.copysign(magnitudes(level, t1, spacing), acc)  # [n] fp32
        memory.remember(acc, sent, state)
        state.residual = state.residual.view(layer.shape)
        state.step += 1
        state.elements_in += n
        state.elements_out += n
        codes = level.to(_U8) | ((sent < 0).to(_U8) << 3)  # [n] sign-magnitude 4-bit codes
        return Payload({"anchor": pack_f32(anchor.reshape(1)), "codes": pack_bits(codes, 4)})

    def decode(self, payload: Payload, layer: LayerInfo) -> torch.Tensor:
        spacing, statistic = self.params.spacing, self.params.statistic
        anchor = unpack_f32(payload.buffers["anchor"]).reshape(())
        t1 = first_threshold(anchor, spacing, statistic)
        codes = unpack_bits(payload.buffers["codes"], 4, layer.numel)  # [n] uint8
        level = (codes & LEVELS).to(torch.float32)
        mag = magnitudes(level, t1, spacing)
        out = torch.where(codes >= SIGN_BIT, -mag, mag)
        return out.view(layer.shape).to(layer.dtype)

