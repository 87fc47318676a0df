"""Multi-level quantizers: MXNet 2-bit (with residual), TernGrad and QSGD.

``2bit`` (MXNet's ``GradientCompression`` type ``2bit``, Huilgol 2018; the baseline of seeds 000/004)
    Per element the node keeps a residual ``r``. Each step ``r += g``; then ``r >= t`` sends the code
    for ``+t`` and ``r -= t``, ``r <= -t`` sends the code for ``-t`` and ``r += t``, anything in
    between sends 0 and keeps ``r``. Codes follow MXNet: ``0b11 = +t``, ``0b10 = -t``, ``0b00 = 0``
    (``0b01`` is never sent and decodes to 0). They are packed 4 per byte with
    :func:`~aiotsim.compress.packing.pack_bits` (code ``j`` of a byte at bits ``2j..2j+1``; MXNet
    packs 16 per 32-bit word, most significant first: same size, different bit order). The threshold
    is a kvstore parameter known to both sides, so the payload is the codes alone:
    ``ceil(n / 4)`` bytes.

``terngrad`` (Wen et al., "TernGrad: Ternary Gradients to Reduce Communication in Distributed Deep
Learning", NeurIPS 2017)
    Optional clipping of the layer's gradient to ``[-c*sigma, c*sigma]`` (sigma: its population
    standard deviation about the mean, as in the authors' ``clip_gradients_by_stddev``; c = 2.5), then
    ``s = max|g|`` and ``g_i -> s * sign(g_i) * b_i`` with ``b_i ~ Bernoulli(|g_i| / s)``: unbiased
    with respect to the (clipped) gradient. Wire: 2-bit two's-complement codes (``0b00 = 0``,
    ``0b01 = +s``, ``0b11 = -s``), 4 per byte, plus ``s`` as fp32. The paper's *scaler sharing* (every worker uses the max of the workers'
    scalers) needs a round of communication before encoding; here each worker sends its own ``s``,
    which keeps each message decodable on its own and unbiased.

``qsgd`` (Alistarh et al., "QSGD: Communication-Efficient SGD via Gradient Quantization and
Encoding", NeurIPS 2017)
    The gradient is cut into buckets of ``d`` consecutive elements (the last may be shorter); each
    bucket sends its L2 norm as fp32 and, per element, ``sign(v_i)`` and a level ``l_i`` in
    ``0..s``: with ``u = s |v_i| / ||v||``, ``l_i = floor(u) + Bernoulli(u - floor(u))``, so
    ``E[||v|| sign(v_i) l_i / s] = v_i`` (unbiased). Wire formats:

    * fixed width (default): a code ``l_i | sign_i << w`` of ``w + 1`` bits per element, with
      ``w = bit_length(s)``, bit-packed (little-endian bit order, the layout of
      :func:`~aiotsim.compress.packing.pack_uint`);
    * ``elias=True``: each level is Elias-gamma coded as ``l_i + 1`` (``0 -> "1"``, ``1 -> "010"``,
      ``2 -> "011"``, ...), followed by a sign bit only where ``l_i > 0``. The bits of the stream are
      laid out as three sections: the unary length prefixes of every code (``L-1`` zeros then a one),
      then the ``L-1`` mantissa bits of every code (most significant first), then the sign bits of the
      non-zero levels. The size is exactly that of the interleaved gamma stream; the layout lets both
      sides work with cumulative sums instead of a sequential bit reader (no Python loop over
      elements). The paper's own coding (its Section 3.1) additionally codes the *gaps between
      non-zero positions* with recursive Elias codes and skips the zeros; per-element gamma coding of
      the levels spends one bit per zero level instead and is what ``elias`` selects here.

All three compute in fp32 on the gradient's device and draw randomness only from the state's
generator.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from aiotsim.compress import memory
from aiotsim.compress.base import Codec, CodecState, LayerInfo, Payload, as_float
from aiotsim.compress.packing import pack_bits, pack_f32, unpack_bits, unpack_f32
from aiotsim.compress.registry import register
from aiotsim.errors import CodecError

_U8 = torch.uint8

# MXNet 2-bit code assignment.
CODE_ZERO, CODE_NEG, CODE_POS = 0b00, 0b10, 0b11
# TernGrad code assignment: the 2-bit two's complement of the ternary value.
TERN_ZERO, TERN_POS, TERN_NEG = 0b00, 0b01, 0b11


# ---- small helpers shared by the quantizers ----------------------------------------------------
def _flat(grad: torch.Tensor) -> torch.Tensor:
    """The gradient as a flat fp32 tensor (a view when it already is fp32 and contiguous)."""
    return as_float(grad).reshape(-1)


def _uniform(n: int, state: CodecState, device: torch.device) -> torch.Tensor:
    """``n`` draws of U[0, 1) from the state's generator (never the global RNG)."""
    return torch.empty(n, dtype=torch.float32, device=device).uniform_(generator=state.generator)


def _stochastic_round_(t: torch.Tensor, state: CodecState, bound: float) -> torch.Tensor:
    """Unbiased stochastic rounding of ``t`` to integers in ``[-bound, bound]``.

    ``floor(t + U)`` with ``U ~ U[0, 1)`` is ``ceil(t)`` with probability ``t - floor(t)`` and
    ``floor(t)`` otherwise, so ``E = t``; for ``t < 0`` it has the same law as
    ``-round_stochastic(|t|)``, i.e. sign times a stochastically rounded magnitude. The clamp only
    guards the fp32 rounding of ``t`` at the edges. Returns a new fp32 tensor of integers.
    """
    q = _uniform(t.numel(), state, t.device)
    q += t
    q.floor_()
    return q.clamp_(-bound, bound)


def pack_fixed(codes: torch.Tensor, width: int) -> torch.Tensor:
    """Bit-pack unsigned codes of ``width`` bits (1..8), ``ceil(n * width / 8)`` bytes.

    The layout is :func:`~aiotsim.compress.packing.pack_uint`'s (code ``i`` at bits
    ``i*width .. i*width+width-1`` of a little-endian bit stream), built eight codes at a time in one
    64-bit word instead of through a ``[n, width]`` bit-plane tensor.
    """
    if not 1 <= width <= 8:
        raise CodecError(f"width(={width}) must be in 1..8 bits")
    codes = codes.reshape(-1).to(_U8)
    if width in (1, 2, 4, 8):
        return pack_bits(codes, width)
    n = codes.numel()
    if n == 0:
        return codes.new_zeros(0)
    pad = (-n) % 8
    if pad:
        codes = torch.cat([codes, codes.new_zeros(pad)])
    groups = codes.view(-1, 8)  # [n/8, 8]
    word = torch.zeros(groups.shape[0], dtype=torch.int64, device=codes.device)  # [n/8]
    for j in range(8):  # code j of each group into bits j*width.. of its 64-bit word
        word |= groups[:, j].to(torch.int64) << (j * width)
    out = word.view(_U8).view(-1, 8)[:, :width].reshape(-1)  # little-endian bytes of each word
    return out[: math.ceil(n * width / 8)].clone()


def unpack_fixed(buf: torch.Tensor, width: int, count: int) -> torch.Tensor:
    """Inverse of :func:`pack_fixed`: the first ``count`` codes as ``uint8``."""
    if not 1 <= width <= 8:
        raise CodecError(f"width(={width}) must be in 1..8 bits")
    if width in (1, 2, 4, 8):
        return unpack_bits(buf, width, count)
    need = math.ceil(count * width / 8)
    if buf.numel() < need:
        raise CodecError(f"buffer of {buf.numel()} bytes is too short for {count} {width}-bit codes")
    if count == 0:
        return buf.new_zeros(0)
    rows = math.ceil(count / 8)
    body = torch.zeros(rows * width, dtype=_U8, device=buf.device)
    body[:need] = buf[:need]
    words = torch.zeros(rows, 8, dtype=_U8, device=buf.device)
    words[:, :width] = body.view(rows, width)
    word = words.view(torch.int64).reshape(-1)  # [rows]
    mask = (1 << width) - 1
    out = torch.empty(rows, 8, dtype=_U8, device=buf.device)
    for j in range(8):
        out[:, j] = ((word >> (j * width)) & mask).to(_U8)
    return out.reshape(-1)[:count]


def _flops(step: str) -> float:
    return {"2bit": 7.0, "terngrad": 10.0, "qsgd": 12.0}[step]


# ---- MXNet 2-bit ---------------------------------------------------------------------------------
@register
class TwoBit(Codec):
    """MXNet 2-bit threshold quantization with the residual kept on the node.

    Wire: ``codes`` only (``ceil(n/4)`` bytes); the threshold is known to both sides.
    """

    name = "2bit"
    summary = "MXNet 2-bit: +-threshold or 0 per element, residual kept locally"
    has_residual = True
    encode_flops_per_element = _flops("2bit")

    @dataclass(frozen=True)
    class Params:
        threshold: float = field(
            default=0.5, metadata={"help": "quantization threshold t: codes stand for -t, 0, +t"}
        )

    def validate(self) -> list[str]:
        t = self.params.threshold
        if not (math.isfinite(t) and t > 0):
            return [f"threshold(={t}) must be a finite number > 0"]
        return []

    def encode(self, grad: torch.Tensor, layer: LayerInfo, state: CodecState) -> Payload:
        t = float(self.params.threshold)
        acc = memory.compensate(grad, state).reshape(-1)  # [n] fp32: r + g
        pos = acc >= t  # [n] bool
        neg = acc <= -t
        step = pos.to(torch.int8) - neg.to(torch.int8)  # [n] int8 in {-1, 0, 1}
        codes = (step != 0).to(_U8) * 2 + pos.to(_U8)  # [n] uint8: 0b11 = +t, 0b10 = -t, 0b00 = 0
        sent = step.to(torch.float32).mul_(t)  # [n] fp32 in {-t, 0, t}
        memory.remember(acc, sent, state)
        state.residual = state.residual.view(layer.shape)
        state.step += 1
        state.elements_in += acc.numel()
        state.elements_out += acc.numel()
        return Payload({"codes": pack_bits(codes, 2)})

    def decode(self, payload: Payload, layer: LayerInfo) -> torch.Tensor:
        t = float(self.params.threshold)
        codes = unpack_bits(payload.buffers["codes"], 2, layer.numel).view(torch.int8)  # [n]
        # high bit: non-zero; low bit: positive. 0b11 -> +1, 0b10 -> -1, 0b0x -> 0 (int8 arithmetic)
        step = (codes >> 1) * ((codes & 1) * 2 - 1)  # [n] int8 in {-1, 0, 1}
        return step.to(torch.float32).mul_(t).view(layer.shape).to(layer.dtype)


# ---- TernGrad ------------------------------------------------------------------------------------
@register
class TernGrad(Codec):
    """Stochastic ternary gradients {-s, 0, +s} with a per-layer scale s = max|g| (Wen et al. 2017).

    Wire: ``scale`` (fp32, 4 bytes) and ``codes`` (2 bits per element).
    """

    name = "terngrad"
    summary = "TernGrad: stochastic ternary {-s,0,s}, s=max|g| after 2.5-sigma clipping; unbiased"
    unbiased = True  # w.r.t. the clipped gradient; exactly unbiased with clip=False
    encode_flops_per_element = _flops("terngrad")

    @dataclass(frozen=True)
    class Params:
        clip: bool = field(
            default=True, metadata={"help": "clip the gradient to +-clip_factor*sigma before ternarizing"}
        )
        clip_factor: float = field(
            default=2.5, metadata={"help": "c in the clipping bound c*sigma (sigma: std of the layer)"}
        )

    def validate(self) -> list[str]:
        c = self.params.clip_factor
        if not (math.isfinite(c) and c > 0):
            return [f"clip_factor(={c}) must be a finite number > 0"]
        return []

    def encode(self, grad: torch.Tensor, layer: LayerInfo, state: CodecState) -> Payload:
        x = _flat(grad)  # [n] fp32
        n = x.numel()
        state.step += 1
        state.elements_in += n
        state.elements_out += n
        if n == 0:
            return Payload({"scale": pack_f32([0.0], x.device), "codes": pack_bits(x.new_empty(0, dtype=_U8), 2)})
        if self.params.clip and n > 1:
            sigma = torch.sqrt(torch.mean(torch.square(x - x.mean())))  # population std, scalar
            # A constant layer has sigma = 0: clipping it would erase it, so it is left as is.
            bound = torch.where(sigma > 0, self.params.clip_factor * sigma, torch.full_like(sigma, math.inf))
            x = torch.clamp(x, -bound, bound)
        s = x.abs().max()  # scalar fp32
        inv = torch.where(s > 0, 1.0 / s, torch.zeros_like(s))
        q = _stochastic_round_(x * inv, state, 1.0)  # [n] in {-1, 0, 1}; P(|q|=1) = |x|/s
        codes = q.to(torch.int8) & 0b11  # [n] two's complement: 0 -> 0b00, 1 -> 0b01, -1 -> 0b11
        return Payload({"scale": pack_f32(s.reshape(1)), "codes": pack_bits(codes, 2)})

    def decode(self, payload: Payload, layer: LayerInfo) -> torch.Tensor:
        s = unpack_f32(payload.buffers["scale"])  # [1]
        codes = unpack_bits(payload.buffers["codes"], 2, layer.numel)  # [n] uint8
        tern = (codes << 6).view(torch.int8) >> 6  # sign-extend the 2-bit code: {0, 1, -1}
        return tern.to(torch.float32).mul_(s).view(layer.shape).to(layer.dtype)


# ---- QSGD ----------------------------------------------------------------------------------------
def _bucket_norms(x: torch.Tensor, d: int) -> torch.Tensor:
    """L2 norm of each bucket of ``d`` consecutive elements (last bucket may be short): [nb]."""
    n = x.numel()
    nf = n // d
    parts = []
    if nf:
        parts.append(torch.linalg.vector_norm(x[: nf * d].view(nf, d), dim=1))
    if n > nf * d:
        parts.append(torch.linalg.vector_norm(x[nf * d :]).reshape(1))
    return torch.cat(parts) if parts else x.new_zeros(0)


def _bucket_mul(x: torch.Tensor, per_bucket: torch.Tensor, d: int) -> torch.Tensor:
    """``x[i] * per_bucket[i // d]`` without materializing the per-element factor: [n]."""
    n = x.numel()
    nf = n // d
    out = torch.empty_like(x)
    if nf:
        torch.mul(x[: nf * d].view(nf, d), per_bucket[:nf, None], out=out[: nf * d].view(nf, d))
    if n > nf * d:
        torch.mul(x[nf * d :], per_bucket[nf], out=out[nf * d :])
    return out


def elias_gamma_encode(levels: torch.Tensor, negative: torch.Tensor) -> torch.Tensor:
    """Sectioned Elias-gamma stream of ``levels + 1`` with a sign bit per non-zero level.

    Parameters
    ----------
    levels : Tensor
        ``[n]`` non-negative integer levels (uint8, at most 254).
    negative : Tensor
        ``[n]`` bool, the sign of each element (read only where the level is non-zero).

    Returns
    -------
    Tensor
        Packed bits (``uint8``): prefixes of all codes, then mantissas, then signs (see the module
        docstring). Its size is ``ceil((sum(2 L_i - 1) + nnz) / 8)`` bytes, ``L_i = bit_length(l_i + 1)``.
    """
    device = levels.device
    n = levels.numel()
    nz = torch.nonzero(levels).reshape(-1)  # [k] positions of non-zero levels
    val = levels[nz].to(torch.int64) + 1  # [k] gamma-coded integers >= 2
    lengths = torch.ones(n, dtype=torch.int64, device=device)  # L_i: 1 for a zero level
    nz_len = torch.floor(torch.log2(val.to(torch.float64))).to(torch.int64) + 1  # [k], exact for <= 255
    lengths[nz] = nz_len
    ends = torch.cumsum(lengths, dim=0)  # [n] one past each prefix's terminating one
    prefix_bits = int(ends[-1]) if n else 0
    mant_len = nz_len - 1  # [k] mantissa bits of each non-zero code
    mant_start = prefix_bits + torch.cumsum(mant_len, dim=0) - mant_len  # [k] exclusive cumsum
    mant_bits = int(mant_len.sum()) if nz.numel() else 0
    total = prefix_bits + mant_bits + nz.numel()
    bits = torch.zeros(total, dtype=_U8, device=device)
    bits[ends - 1] = 1  # the one that ends each unary prefix
    max_len = int(nz_len.max()) if nz.numel() else 1
    for j in range(max_len - 1):  # bit j (from the top, after the implicit leading one): <= 7 passes
        has = mant_len > j  # [k]
        shift = (mant_len - 1 - j).clamp_(min=0)
        bits[mant_start[has] + j] = ((val[has] >> shift[has]) & 1).to(_U8)
    bits[prefix_bits + mant_bits :] = negative[nz].to(_U8)
    return pack_bits(bits, 1)


def elias_gamma_decode(buf: torch.Tensor, count: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Inverse of :func:`elias_gamma_encode`: ``(levels uint8 [count], negative bool [count])``."""
    device = buf.device
    if count == 0:
        return torch.zeros(0, dtype=_U8, device=device), torch.zeros(0, dtype=torch.bool, device=device)
    bits = unpack_bits(buf, 1, buf.numel() * 8)  # [8 * nbytes]
    # The prefix section holds exactly `count` ones and comes first, so the first `count` ones of
    # the stream terminate the prefixes, in element order.
    ones = torch.nonzero(bits[: 8 * count]).reshape(-1)
    if ones.numel() < count:
        raise CodecError(f"Elias stream holds {ones.numel()} codes, expected {count}")
    ends = ones[:count] + 1  # [count]
    lengths = torch.diff(ends, prepend=ends.new_zeros(1))  # [count] L_i
    prefix_bits = int(ends[-1])
    nz = torch.nonzero(lengths > 1).reshape(-1)  # [k] elements with a non-zero level
    mant_len = lengths[nz] - 1
    mant_start = prefix_bits + torch.cumsum(mant_len, dim=0) - mant_len
    mant_bits = int(mant_len.sum()) if nz.numel() else 0
    need = prefix_bits + mant_bits + nz.numel()
    if need > bits.numel():
        raise CodecError(f"Elias stream of {bits.numel()} bits is shorter than the {need} it declares")
    val = torch.ones_like(mant_len)  # the implicit leading one
    max_len = int(mant_len.max()) + 1 if nz.numel() else 1
    for j in range(max_len - 1):
        has = mant_len > j
        bit = torch.zeros_like(val)
        bit[has] = bits[mant_start[has] + j].to(torch.int64)
        val = torch.where(has, val * 2 + bit, val)
    levels = torch.zeros(count, dtype=_U8, device=device)
    levels[nz] = (val - 1).to(_U8)
    negative = torch.zeros(count, dtype=torch.bool, device=device)
    negative[nz] = bits[prefix_bits + mant_bits : need].bool()
    return levels, negative


@register
class QSGD(Codec):
    """QSGD: per-bucket norms, s levels with unbiased stochastic rounding (Alistarh et al. 2017).

    Wire: ``norms`` (one fp32 per bucket of ``bucket_size`` elements) and ``codes`` (sign + level at
    ``1 + bit_length(levels)`` bits, or the Elias-gamma stream when ``elias`` is set).
    """

    name = "qsgd"
    summary = "QSGD: s levels of |g|/||g|| per bucket, stochastic rounding, optional Elias coding; unbiased"
    unbiased = True
    encode_flops_per_element = _flops("qsgd")

    @dataclass(frozen=True)
    class Params:
        levels: int = field(default=7, metadata={"help": "number of quantization levels s (1..127)"})
        bucket_size: int = field(
            default=512, metadata={"help": "elements per bucket d; one fp32 norm is sent per bucket"}
        )
        elias: bool = field(
            default=False, metadata={"help": "Elias-gamma code the levels instead of a fixed width"}
        )

    def validate(self) -> list[str]:
        p = self.params
        problems = []
        if not 1 <= p.levels <= 127:
            problems.append(f"levels(={p.levels}) must be in 1..127")
        if p.bucket_size < 1:
            problems.append(f"bucket_size(={p.bucket_size}) must be >= 1")
        return problems

    @property
    def level_bits(self) -> int:
        """Bits of a level at fixed width; a code adds one sign bit above them."""
        return int(self.params.levels).bit_length()

    def encode(self, grad: torch.Tensor, layer: LayerInfo, state: CodecState) -> Payload:
        s, d = int(self.params.levels), int(self.params.bucket_size)
        x = _flat(grad)  # [n] fp32
        n = x.numel()
        state.step += 1
        state.elements_in += n
        state.elements_out += n
        norms = _bucket_norms(x, d)  # [nb]
        factor = torch.where(norms > 0, s / norms, torch.zeros_like(norms))  # [nb]: levels per unit
        q = _stochastic_round_(_bucket_mul(x, factor, d), state, float(s))  # [n] signed level
        q8 = q.to(torch.int8)  # [n] signed level in [-s, s], |s| <= 127
        negative = q8 < 0
        level = q8.abs_().view(_U8)
        if self.params.elias:
            codes = elias_gamma_encode(level, negative)
        else:
            # sign-magnitude code: level | sign << w
            codes = pack_fixed(level | (negative.to(_U8) << self.level_bits), self.level_bits + 1)
        return Payload({"norms": pack_f32(norms), "codes": codes})

    def decode(self, payload: Payload, layer: LayerInfo) -> torch.Tensor:
        s, d = int(self.params.levels), int(self.params.bucket_size)
        n = layer.numel
        norms = unpack_f32(payload.buffers["norms"])  # [nb]
        if norms.numel() != math.ceil(n / d):
            raise CodecError(f"qsgd payload has {norms.numel()} norms, expected {math.ceil(n / d)}")
        if self.params.elias:
            level, negative = elias_gamma_decode(payload.buffers["codes"], n)
            neg8 = negative.view(torch.int8)
        else:
            w = self.level_bits
            codes = unpack_fixed(payload.buffers["codes"], w + 1, n)  # [n] uint8
            level = codes & ((1 << w) - 1)
            neg8 = (codes >> w).view(torch.int8)
        # two's complement negation where negative: (l xor -1) + 1 == -l, all in int8
        q8 = (level.view(torch.int8) ^ -neg8) + neg8  # [n] signed level
        out = _bucket_mul(q8.to(torch.float32), norms / s, d)
        return out.view(layer.shape).to(layer.dtype)
