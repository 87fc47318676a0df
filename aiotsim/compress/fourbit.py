"""4Bit: MXNet's 2-bit threshold scheme widened to 4-bit codes with per-layer thresholds (seed 000).

Jiang, Fu, Peng, Zhu, "4Bit-based Gradient Compression Method for Distributed Deep Learning System",
Computer Science 47(7):220-226, 2020 (doi:10.11896/jsjkx.200300097). The seed's words and how we
read each of them:

* "Four bits are used to represent a specific gradient value. Compared with 2Bit, this method can
  approximate the gradient more finely": a 4-bit code per element, sign + 3-bit level, so seven
  non-zero magnitudes per sign where MXNet's 2Bit has one.
* "different approximation thresholds are selected according to the gradient characteristics of
  each layer of the network model" and "by using more bits and multiple thresholds": the seven
  magnitudes are a *ladder of thresholds* ``t_1 < ... < t_7`` computed per layer and step from one
  statistic of the layer (``statistic``), spaced by a fixed rule (``spacing``). Which statistic and
  which spacing the abstract does not say; both are parameters (table below). A summary of the full
  text adds that the authors designed three groups of thresholds for differently distributed
  layers; the groups are not public, so none is invented here.
* "such as 2Bit method in MXNet" (the method 4Bit refines; the seed list: "residual kept locally
  (error feedback)"): what is not sent stays in a local residual, MXNet's ``r >= t -> send t,
  r -= t`` rule with seven rungs.

Algorithm (our reading). Per layer and step, with residual ``r`` and gradient ``g``:

1. ``acc = r + g`` (error feedback, the role :meth:`aiotsim.compress.base.Codec.encode_rows` applies).
2. One anchor statistic ``a`` of ``acc`` (``statistic``, same units as the gradient): ``max``
   (default) ``max |acc|``; ``mean`` ``mean |acc|``; ``std`` ``sqrt(mean acc**2)``, the layer's
   standard deviation about zero (the sigma of zero-mean gradients ~ N(0, sigma**2); about the
   mean instead, a constant or one-element layer would get sigma = 0 and never send anything).
3. Seven thresholds ``0 < t_1 < ... < t_7`` from the anchor (``spacing``: ``linear`` is evenly
   spaced, ``log2`` geometric with ratio 2):

   ==========  ======================================  ======================================
   spacing     statistic = "max" (a is t_7)            statistic = "mean" or "std" (a is t_1)
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
residual; ``std`` does the same at one sigma, weighting large elements more than ``mean`` does
(for Gaussian gradients ``std = 1.25 * mean|g|``); ``log2`` spreads the rungs over a 64x range
for heavy-tailed layers. The paper's "three groups" could be three such ladders chosen per layer
by a statistic; with the groups unknown we expose the ladder as parameters instead of inventing a
selection rule.

The encoder works on one layer of one or many nodes at once, as ``[rows, n]`` rows (one per node):
each row's anchor is a row reduction equal to the row's own, and the rungs, codes and sent values
are computed for all rows in one pass.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

import torch

from aiotsim.compress.base import Codec, CodecState, LayerInfo, Payload, RowDecoder
from aiotsim.compress.memory import SentRows
from aiotsim.compress.packing import unpack_bits, unpack_f32
from aiotsim.compress.quantize import _sign_magnitude_, _signed_to_f32, f32_rows, pack_code_rows
from aiotsim.compress.registry import register
from aiotsim.compress.rowwise import abs_max, row_norms64
from aiotsim.schema import opt

_U8 = torch.uint8
LEVELS = 7  # non-zero magnitudes; 3 bits of level + 1 sign bit = 4 bits


def first_threshold(anchor: torch.Tensor, spacing: str, statistic: str) -> torch.Tensor:
    """``t_1``, the rung every other threshold is a multiple of: ``t_k = t_1 * k`` (linear) or
    ``t_1 * 2**(k - 1)`` (log2). ``anchor`` is fp32 (0-d, or one per message); so is the result."""
    if statistic in ("mean", "std"):
        return anchor
    return anchor / LEVELS if spacing == "linear" else anchor * 2.0 ** (1 - LEVELS)


def _log2_rungs_(level: torch.Tensor) -> torch.Tensor:
    """In place on an ``int32`` level tensor (values 0..7): the fp32 ``2**(l - 1)`` for ``l >= 1``
    and 0 for ``l = 0``, built from exponent bits (``(l + 126) << 23`` is ``2**(l - 1)``; for
    ``l = 0`` that is 0.5, which ``floor`` turns into 0). Returns the fp32 view of the buffer."""
    level.add_(126).bitwise_left_shift_(23)
    return level.view(torch.float32).floor_()


def quantize_levels(acc: torch.Tensor, t1: torch.Tensor, spacing: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``acc`` (fp32 ``[..., n]``) on the rungs of ``t1`` (its first threshold, broadcast over the
    last dimension: 0-d for one layer, ``[nodes, 1]`` for a batch): ``(codes, sent)``, the 4-bit
    sign-magnitude codes (``uint8``, one per element) and the fp32 values they stand for."""
    # |acc| / t1 in units of the first rung. A zero t1 means a zero layer (|acc| = 0 everywhere,
    # or an anchor below fp32's range): dividing by 1 instead keeps every level at 0. Division,
    # not multiplication by 1/t1, so that the max element lands exactly on level 7.
    ratio = torch.abs(acc).div_(torch.where(t1 > 0, t1, torch.ones_like(t1)))  # [..., n] fp32
    if spacing == "linear":
        sent = ratio.clamp_(max=LEVELS).floor_()  # level l as fp32 (t_l = l * t1)
        level = sent.to(_U8)
    else:
        # ratio = 1.f * 2**(E - 127) lies in [t_k, t_{k+1}) / t1 for k = E - 126: the level is the
        # biased exponent minus 126, clamped to 0..7 (zero and subnormals give 0)
        ex = (ratio.view(torch.int32) >> 23).sub_(126).clamp_(0, LEVELS)  # int32
        level = ex.to(_U8)
        sent = _log2_rungs_(ex)  # fp32 2**(l - 1), 0 for l = 0
    sent.mul_(t1).copysign_(acc)  # fp32: sign(acc) * t_l
    # sign-magnitude 4-bit codes (-0.0 is not < 0), in place on the level
    return level.bitwise_or_((sent < 0).view(_U8).bitwise_left_shift_(3)), sent


@register
class FourBit(RowDecoder, Codec[CodecState]):
    """4Bit (Jiang et al. 2020): sign + 3-bit level over 7 per-layer thresholds, with residual.

    Wire: ``anchor`` (fp32, 4 bytes) and ``codes`` (4 bits per element, ``ceil(n/2)`` bytes).
    """

    name = "4bit"
    summary = "4Bit (seed 000): sign + 3-bit level over 7 per-layer thresholds, residual kept locally"
    has_residual = True
    encode_flops_per_element = 10.0

    @dataclass(frozen=True)
    class Params:
        statistic: Literal["max", "mean", "std"] = opt(
            "max",
            "anchor from r+g of the layer: 'max' |.| is the top threshold; 'mean' |.| or 'std' "
            "(sqrt(mean (r+g)**2)) is the first",
        )
        spacing: Literal["linear", "log2"] = opt("linear", "thresholds k*t1 ('linear') or t1*2**(k-1) ('log2'), k=1..7")

    def thresholds(self, anchor: float) -> list[float]:
        """The seven thresholds ``t_1..t_7`` for an anchor value (for reports and tests)."""
        a = torch.tensor(anchor, dtype=torch.float32)
        t1 = first_threshold(a, self.params.spacing, self.params.statistic)
        level = torch.arange(1, LEVELS + 1, dtype=torch.int32)
        rungs = level.float() if self.params.spacing == "linear" else _log2_rungs_(level)
        return (rungs * t1).tolist()

    def _encode_rows(
        self, acc: torch.Tensor, grads: torch.Tensor, layer: LayerInfo, states: list[CodecState]
    ) -> tuple[list[Payload], SentRows | None]:
        """Every row's anchor and 4-bit codes (:meth:`Codec._encode_rows`); sent: each element's
        signed rung."""
        spacing, statistic = self.params.spacing, self.params.statistic
        nodes, n = acc.shape  # acc: r + g
        if n == 0:
            anchor = acc.new_zeros(nodes)
        elif statistic == "max":
            anchor = abs_max(acc)  # max |acc| without materializing |acc|
        elif statistic == "mean":
            anchor = (row_norms64(acc, 1) / n).float()  # mean |acc|, accumulated in float64
        else:
            # std about zero, sqrt(mean acc**2) = |acc|_2 / sqrt(n): torch's own reduction in
            # float64, which (unlike BLAS's dot) rounds alike wherever the data lies in memory
            anchor = (row_norms64(acc) / math.sqrt(n)).float()
        t1 = first_threshold(anchor, spacing, statistic).unsqueeze(1)  # [rows, 1] fp32
        codes, sent = quantize_levels(acc, t1, spacing)
        payloads = [Payload({"anchor": a, "codes": c}) for a, c in zip(f32_rows(anchor), pack_code_rows(codes, 4))]
        return payloads, ("dense", sent)

    def decode_rows(self, buffers: Mapping[str, torch.Tensor], layer: LayerInfo) -> torch.Tensor:
        """The ``n`` fp32 values of a message's ``buffers`` (``[..., bytes]`` each: one message, or
        one per row for :meth:`~aiotsim.compress.base.Codec.decode_many`): ``[..., n]``."""
        n = layer.numel
        spacing, statistic = self.params.spacing, self.params.statistic
        anchor = unpack_f32(buffers["anchor"])  # [..., 1]: each message's anchor
        t1 = first_threshold(anchor, spacing, statistic)
        codes = unpack_bits(buffers["codes"], 4, n)  # [..., n] uint8
        if spacing == "linear":
            negative = codes >> 3  # the signed level (negated where the sign bit is set), then * t1
            out = _signed_to_f32(_sign_magnitude_(codes.bitwise_and_(LEVELS), negative)).mul_(t1)
        else:
            ex = (codes & LEVELS).to(torch.int32)
            out = _log2_rungs_(ex).mul_(t1)
            # sign bit of the code -> sign bit of the fp32 word (reusing a second int32 buffer)
            sign = torch.empty_like(ex).copy_(codes.bitwise_right_shift_(3)).bitwise_left_shift_(31)
            out.view(torch.int32).bitwise_or_(sign)
        return out
