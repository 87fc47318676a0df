"""Multi-level quantizers: MXNet 2-bit (with residual), TernGrad and QSGD.

``2bit`` (MXNet's ``GradientCompression`` type ``2bit``, Huilgol 2018; the baseline of seeds 000/004)
    Per element the node keeps a residual ``r``. Each step ``r += g``; then ``r >= t`` sends the code
    for ``+t`` and ``r -= t``, ``r <= -t`` sends the code for ``-t`` and ``r += t``, anything in
    between sends 0 and keeps ``r``. Codes follow MXNet: ``0b11 = +t``, ``0b10 = -t``, ``0b00 = 0``
    (``0b01`` is never sent and decodes to 0). They are packed 4 per byte with
    :func:`~aiotsim.compress.packing.pack_bits` (code ``j`` of a byte at bits ``2j..2j+1``; MXNet
    packs 16 per 32-bit word, most significant first: same size, different bit order). The threshold
    is a kvstore parameter known to both sides, so the payload is the codes alone:
    ``ceil(n / 4)`` bytes. ``error_feedback = false`` (not MXNet's form, for ablations) keeps no
    residual: what is below the threshold is lost.

``terngrad`` (Wen et al., "TernGrad: Ternary Gradients to Reduce Communication in Distributed Deep
Learning", NeurIPS 2017)
    Optional clipping of the layer's gradient to ``[-c*sigma, c*sigma]`` (sigma: its population
    standard deviation about the mean, as in the authors' ``clip_gradients_by_stddev``; c = 2.5), then
    ``s = max|g|`` and ``g_i -> s * sign(g_i) * b_i`` with ``b_i ~ Bernoulli(|g_i| / s)``: unbiased
    with respect to the (clipped) gradient. Wire: 2-bit two's-complement codes (``0b00 = 0``,
    ``0b01 = +s``, ``0b11 = -s``), 4 per byte, plus ``s`` as fp32. The paper's *scaler sharing*
    (every worker uses the max of the workers' scalers) needs a round of communication before
    encoding; here each worker sends its own ``s``, which keeps each message decodable on its own
    and unbiased.

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
      ``2 -> "011"``, ...), followed by a sign bit only where ``l_i > 0``. The bits are laid out in
      three sections: the unary length prefixes of every code (``L-1`` zeros then a one), the
      ``L-1`` mantissa bits of every code (most significant first), the sign bits of the non-zero
      levels; a 4-byte header gives the number of prefix zeros so the decoder knows where the
      sections start. Apart from that header the size is exactly that of the interleaved gamma
      stream; the layout lets both sides work with cumulative sums and run detection over the
      non-zero codes instead of a sequential bit reader (no Python loop over elements). The
      paper's own coding (its Section 3.1) additionally codes the *gaps between non-zero
      positions* with recursive Elias codes and skips the zeros; per-element gamma coding of
      the levels spends one bit per zero level instead and is what ``elias`` selects here.

Each encodes one layer of one or many nodes at once, as ``[rows, n]`` rows (one per node;
``Codec._encode_rows``): the element-wise work runs once over all rows, per-row statistics (norms,
maxima, sums) are row reductions equal to each row's own (:mod:`aiotsim.compress.rowwise`), and
codes are bit-packed for all rows in one pass where every row ends on a byte (Elias streams, whose
lengths differ, row by row). All three compute in fp32 on the gradient's device and draw randomness
only from each row's own state generator, so a row's bytes are the same alone or beside others.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from aiotsim.compress.base import Codec, CodecState, FeedbackParams, LayerInfo, Payload, RowDecoder
from aiotsim.compress.memory import SentRows
from aiotsim.compress.packing import pack_bits, pack_f32, pack_rows, pack_uint, unpack_bits, unpack_f32, unpack_uint
from aiotsim.compress.registry import register
from aiotsim.compress.rowwise import abs_max, row_norms64, row_reduce, row_sums64, uniform_rows
from aiotsim.errors import CodecError
from aiotsim.schema import at_least, between, opt, positive

_U8 = torch.uint8

# MXNet 2-bit code assignment.
CODE_ZERO, CODE_NEG, CODE_POS = 0b00, 0b10, 0b11
# TernGrad code assignment: the 2-bit two's complement of the ternary value.
TERN_ZERO, TERN_POS, TERN_NEG = 0b00, 0b01, 0b11


# ---- small helpers shared by the quantizers ----------------------------------------------------
def _round_stochastic_(q: torch.Tensor, bound: float) -> torch.Tensor:
    """``q`` holds ``t + U`` (``U ~ U[0, 1)``); turn it, in place, into ``floor(t + U)`` clamped to
    ``[-bound, bound]`` and return it as ``int8``.

    ``floor(t + U)`` is ``ceil(t)`` with probability ``t - floor(t)`` and ``floor(t)`` otherwise, so
    its mean is ``t``; for ``t < 0`` it has the law of ``-floor(|t| + U)``, i.e. sign times a
    stochastically rounded magnitude. The clamp guards fp32 rounding at ``|t| = bound`` (and does the
    clipping of TernGrad, since ``floor(clip(t) + U) == clip(floor(t + U))`` for integer bounds).
    """
    return q.floor_().clamp_(-bound, bound).to(torch.int8)


def _signed_to_f32(q8: torch.Tensor) -> torch.Tensor:
    """fp32 copy of an ``int8`` tensor (a fresh buffer filled by ``copy_``, the fast cast)."""
    return torch.empty(q8.shape, dtype=torch.float32, device=q8.device).copy_(q8)


def _sign_magnitude_(level: torch.Tensor, negative: torch.Tensor) -> torch.Tensor:
    """In place: ``level`` (``uint8``) becomes the ``int8`` value ``-level`` where ``negative``
    (``0``/``1`` ``uint8``, overwritten) is 1. ``(l xor -n) + n`` is two's complement negation for
    ``n = 1`` and the identity for ``n = 0``. Returns the ``int8`` view of ``level``."""
    minus = negative.view(torch.int8).neg_()  # 0 or -1 (all bits set)
    return level.view(torch.int8).bitwise_xor_(minus).sub_(minus)


# Multipliers that gather the low bits of every byte of a little-endian word into its top byte:
# byte j (value < 2**bits, at bit 8j) times 2**(top - (8 - bits) * j) lands at bit top + bits*j, and
# no two partial products overlap, so the product has no carries into the top byte.
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
    tmp = torch.empty_like(word)
    for j in range(8):  # code j of each group into bits j*width.. of its 64-bit word, in place
        tmp.copy_(groups[:, j])
        word.bitwise_or_(tmp.bitwise_left_shift_(j * width))
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
    tmp = torch.empty_like(word)
    for j in range(8):
        torch.bitwise_right_shift(word, j * width, out=tmp)
        out[:, j].copy_(tmp.bitwise_and_(mask))
    return out.reshape(-1)[:count]


# ---- row helpers (also sign.py and fourbit.py) --------------------------------------------------
def pack_code_rows(codes: torch.Tensor, width: int) -> list[torch.Tensor]:
    """:func:`pack_fixed` of every row of ``codes`` (``uint8 [rows, n]`` of ``width`` bits): one
    packing pass over all rows where each row's codes end on a byte (the bit stream then splits at
    the rows), else row by row."""
    n = codes.shape[1]
    return pack_rows(codes, lambda c: pack_fixed(c, width), n * width % 8 == 0)


def f32_rows(values: torch.Tensor) -> list[torch.Tensor]:
    """Every row's fp32 values (``[rows]`` or ``[rows, m]``) as its :func:`pack_f32` bytes: views of
    one copy."""
    return list(pack_f32(values).view(values.shape[0], -1))


# ---- MXNet 2-bit ---------------------------------------------------------------------------------
@register
class TwoBit(RowDecoder, Codec[CodecState]):
    """MXNet 2-bit threshold quantization with the residual kept on the node.

    Wire: ``codes`` only (``ceil(n/4)`` bytes); the threshold is known to both sides. With
    ``error_feedback = false`` (not MXNet's form) values below the threshold are simply lost.
    """

    name = "2bit"
    summary = "MXNet 2-bit: +-threshold or 0 per element, residual kept locally"
    has_residual = True
    encode_flops_per_element = 8.0  # add residual, 2 compares, code, sent, residual, decode

    @dataclass(frozen=True)
    class Params(FeedbackParams):
        threshold: float = opt(0.5, "quantization threshold t: codes stand for -t, 0, +t", check=positive)

    def _encode_rows(
        self, acc: torch.Tensor, grads: torch.Tensor, layer: LayerInfo, states: list[CodecState]
    ) -> tuple[list[Payload], SentRows | None]:
        """Every row's 2-bit codes (:meth:`Codec._encode_rows`); sent: ``{-t, 0, t}`` per element."""
        t = float(self.params.threshold)
        pos, neg = acc >= t, acc <= -t  # [rows, n] bool: r + g
        codes = (pos | neg).view(_U8).bitwise_left_shift_(1).bitwise_or_(pos.view(_U8))
        # codes [rows, n] uint8: 0b11 = +t, 0b10 = -t, 0b00 = 0
        step = pos.view(torch.int8).sub_(neg.view(torch.int8))  # [rows, n] int8 in {-1, 0, 1} (reuses pos)
        sent = _signed_to_f32(step).mul_(t)  # [rows, n] fp32 in {-t, 0, t}
        return [Payload({"codes": c}) for c in pack_code_rows(codes, 2)], ("dense", sent)

    def decode_rows(self, buffers: Mapping[str, torch.Tensor], layer: LayerInfo) -> torch.Tensor:
        """The ``n`` fp32 values of a message's ``buffers`` (``[..., bytes]`` each: one message, or
        one per row for :meth:`~aiotsim.compress.base.Codec.decode_many`): ``[..., n]``."""
        n = layer.numel
        t = float(self.params.threshold)
        codes = unpack_bits(buffers["codes"], 2, n).view(torch.int8)  # [..., n]
        # high bit h: non-zero; low bit l: positive. step = h * (2l - 1) = 2(h & l) - h, so
        # 0b11 -> +1, 0b10 -> -1, 0b00 and the never-sent 0b01 -> 0 (int8 arithmetic)
        high = codes >> 1
        step = codes.bitwise_and_(high).bitwise_left_shift_(1).sub_(high)  # [..., n] int8 in {-1, 0, 1}
        return _signed_to_f32(step).mul_(t)


# ---- TernGrad ------------------------------------------------------------------------------------
@register
class TernGrad(RowDecoder, Codec[CodecState]):
    """Stochastic ternary gradients {-s, 0, +s} with a per-layer scale s = max|g| (Wen et al. 2017).

    Wire: ``scale`` (fp32, 4 bytes) and ``codes`` (2 bits per element).
    """

    name = "terngrad"
    summary = "TernGrad: stochastic ternary {-s,0,s}, s=max|g| after 2.5-sigma clipping; unbiased"
    unbiased = True  # w.r.t. the clipped gradient; exactly unbiased with clip=False
    encode_flops_per_element = 8.0  # random draw, scale, floor, clamp, code, decode

    @dataclass(frozen=True)
    class Params:
        clip: bool = opt(True, "clip the gradient to +-clip_factor*sigma before ternarizing")
        clip_factor: float = opt(2.5, "c in the clipping bound c*sigma (sigma: std of the layer)", check=positive)

    def _encode_rows(
        self, acc: torch.Tensor, grads: torch.Tensor, layer: LayerInfo, states: list[CodecState]
    ) -> tuple[list[Payload], SentRows | None]:
        """Every row's scale and ternary codes (:meth:`Codec._encode_rows`), each row's draws from
        its own generator."""
        nodes, n = acc.shape  # acc: the gradients (no error feedback)
        s = abs_max(acc) if n else acc.new_zeros(nodes)  # [rows] max|g|; an empty layer sends 0
        if self.params.clip and n:
            # population std from two float64 reductions, no [rows, n] temporary: var = E[g^2] -
            # E[g]^2, with sum g^2 = |g|_2^2 from torch's own reduction: BLAS's dot rounds
            # differently with the address of the data (two sigmas in two places in memory)
            mean = row_sums64(acc) / n
            sq = row_norms64(acc).square()
            sigma = torch.sqrt(torch.clamp(sq / n - mean * mean, min=0.0))
            bound = (self.params.clip_factor * sigma).float()
            # The clipped gradient's max is min(max|g|, bound). A constant layer has sigma = 0 and
            # is left unclipped rather than erased.
            s = torch.where(bound > 0, torch.minimum(s, bound), s)
        inv = torch.where(s > 0, 1.0 / s, torch.zeros_like(s))
        # q = floor(g/s + U) clamped to [-1, 1]: the clamp is the clipping, and
        # P(q = sign(g)) = |clip(g)| / s as in TernGrad
        q = uniform_rows(states, nodes, n, acc.device).addcmul_(acc, inv.unsqueeze(1))  # [rows, n]: g/s + U
        # [rows, n] 2-bit two's complement: 0b00 = 0, 0b01 = +s, 0b11 = -s
        codes = _round_stochastic_(q, 1.0).bitwise_and_(0b11).view(_U8)
        return [Payload({"scale": b, "codes": c}) for b, c in zip(f32_rows(s), pack_code_rows(codes, 2))], None

    def decode_rows(self, buffers: Mapping[str, torch.Tensor], layer: LayerInfo) -> torch.Tensor:
        """As :meth:`TwoBit.decode_rows`: ``[..., n]`` fp32."""
        n = layer.numel
        s = unpack_f32(buffers["scale"])  # [..., 1]: each message's scale, broadcast over its row
        codes = unpack_bits(buffers["codes"], 2, n)  # [..., n] uint8
        # sign-extend the 2-bit code through the int8 sign bit: {0, 1, -1}
        tern = codes.bitwise_left_shift_(6).view(torch.int8).bitwise_right_shift_(6)
        return _signed_to_f32(tern).mul_(s)


# ---- QSGD ----------------------------------------------------------------------------------------
def _bucket_norms(x: torch.Tensor, d: int) -> torch.Tensor:
    """L2 norm of each bucket of ``d`` consecutive elements of every row of ``x`` (``[rows, n]``;
    the last bucket may be short): ``[rows, nb]``."""
    rows, n = x.shape
    nf = n // d
    norm = torch.linalg.vector_norm
    parts = []
    if nf:
        full = x[:, : nf * d]
        parts.append(
            row_reduce(lambda r: norm(r.view(nf, d), dim=1), full, lambda t: norm(t.unflatten(1, (nf, d)), dim=2))
        )
    if n > nf * d:
        parts.append(row_reduce(norm, x[:, nf * d :], lambda t: norm(t, dim=1)).unsqueeze(1))
    return torch.cat(parts, dim=1) if parts else x.new_zeros(rows, 0)


def _by_bucket(x: torch.Tensor, d: int) -> list[tuple[torch.Tensor, slice]]:
    """``x`` (``[..., n]``) as ``[(full buckets [..., nf, d], rows 0..nf), (tail [..., 1, n - nf*d],
    row nf)]`` views."""
    n = x.shape[-1]
    nf = n // d
    parts = []
    if nf:
        parts.append((x[..., : nf * d].unflatten(-1, (nf, d)), slice(0, nf)))
    if n > nf * d:
        parts.append((x[..., nf * d :].unflatten(-1, (1, -1)), slice(nf, nf + 1)))
    return parts


def _index_dtype(limit: int) -> torch.dtype:
    """The narrower integer type that can hold bit positions up to ``limit``."""
    return torch.int32 if limit < 2**31 else torch.int64


def elias_gamma_encode(levels: torch.Tensor, negative: torch.Tensor) -> torch.Tensor:
    """Sectioned Elias-gamma stream of ``levels + 1`` with a sign bit per non-zero level.

    Parameters
    ----------
    levels : Tensor
        ``[n]`` non-negative integer levels (``uint8``, at most 254).
    negative : Tensor
        ``[n]`` bool, the sign of each element (read only where the level is non-zero).

    Returns
    -------
    Tensor
        ``uint8``: a 4-byte little-endian header ``M`` (the number of zeros in the prefix section,
        ``sum(L_i - 1)``), then the packed bits: prefixes of all codes (``L_i - 1`` zeros and a one
        each, ``n + M`` bits), mantissas (``M`` bits, most significant first), signs of the ``k``
        non-zero levels. Size ``4 + ceil((n + 2M + k) / 8)`` bytes, ``L_i = bit_length(l_i + 1)``.

    Notes
    -----
    A zero level costs one bit (a lone one in the prefix section), so only the ``k`` non-zero
    elements need index arithmetic: the work beyond a byte fill of ``n + M`` bits is ``O(k)``.
    """
    device = levels.device
    n = levels.numel()
    nz = torch.nonzero(levels).reshape(-1)  # [k] positions of non-zero levels, ascending
    k = nz.numel()
    val = levels[nz].to(torch.int32) + 1  # [k] gamma-coded integers in 2..255
    # L - 1 = floor(log2(val)): the biased exponent of the exact fp32 value, minus 127
    extra = (val.to(torch.float32).view(torch.int32) >> 23) - 127  # [k] mantissa bits = zeros
    zeros_total = int(extra.sum()) if k else 0  # M
    total = n + 2 * zeros_total + k
    idx = _index_dtype(total)
    nz, extra = nz.to(idx), extra.to(idx)
    ends = nz + torch.cumsum(extra, dim=0, dtype=idx)  # [k] position of each non-zero code's one
    bits = torch.ones(total, dtype=_U8, device=device)  # every prefix bit defaults to a one
    bits[n + zeros_total :] = 0
    mant_start = n + zeros_total + ends - nz - extra  # [k] exclusive cumsum of extra, shifted
    for j in range(int(extra.max()) if k else 0):  # <= 7 passes over the k non-zero codes
        has = extra > j
        bits[(ends - 1 - j)[has]] = 0  # the zeros that open the prefix, right to left
        shift = (extra - 1 - j).clamp_(min=0)
        bits[(mant_start + j)[has]] = ((val >> shift) & 1).to(_U8)[has]
    bits[n + 2 * zeros_total :] = negative[nz].to(_U8)
    header = torch.tensor([zeros_total], dtype=torch.int64, device=device)
    return torch.cat([pack_uint(header, 32), pack_bits(bits, 1)])


def elias_gamma_decode(buf: torch.Tensor, count: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Inverse of :func:`elias_gamma_encode`: ``(levels uint8 [count], negative bool [count])``."""
    device = buf.device
    if buf.numel() < 4:
        raise CodecError(f"Elias stream of {buf.numel()} bytes is shorter than its 4-byte header")
    zeros_total = int(unpack_uint(buf[:4], 32, 1)[0])  # M
    body = buf[4:]
    prefix = count + zeros_total
    idx = _index_dtype(prefix + zeros_total + count)
    levels = torch.zeros(count, dtype=_U8, device=device)
    negative = torch.zeros(count, dtype=torch.bool, device=device)
    if count == 0:
        return levels, negative
    bits = unpack_bits(body, 1, body.numel() * 8)
    z = torch.nonzero(bits[:prefix] == 0).reshape(-1).to(idx)  # [M] zeros of the prefix section
    if z.numel() != zeros_total:
        raise CodecError(f"Elias stream has {z.numel()} prefix zeros, its header says {zeros_total}")
    # Each non-zero code opens with a run of L-1 zeros; runs are separated by at least one one.
    starts = torch.ones(z.numel(), dtype=torch.bool, device=device)
    starts[1:] = torch.diff(z) != 1
    run_first = torch.nonzero(starts).reshape(-1).to(idx)  # [k] rank of each run's first zero
    extra = torch.diff(run_first, append=run_first.new_tensor([z.numel()]))  # [k] L - 1
    element = z[run_first] - run_first  # [k] ones before the run = index of its element
    k = element.numel()
    mant_start = prefix + run_first  # [k] exclusive cumsum of extra, shifted by the prefix
    need = prefix + zeros_total + k
    if need > bits.numel():
        raise CodecError(f"Elias stream of {bits.numel()} bits is shorter than the {need} it declares")
    val = torch.ones(k, dtype=torch.int32, device=device)  # the implicit leading one
    for j in range(int(extra.max()) if k else 0):
        has = extra > j
        bit = torch.zeros(k, dtype=torch.int32, device=device)
        bit[has] = bits[(mant_start + j)[has]].to(torch.int32)
        val = torch.where(has, val * 2 + bit, val)
    levels[element] = (val - 1).to(_U8)
    negative[element] = bits[prefix + zeros_total : need].bool()
    return levels, negative


@register
class QSGD(RowDecoder, Codec[CodecState]):
    """QSGD: per-bucket norms, s levels with unbiased stochastic rounding (Alistarh et al. 2017).

    Wire: ``norms`` (one fp32 per bucket of ``bucket_size`` elements) and ``codes`` (sign + level at
    ``1 + bit_length(levels)`` bits, or the Elias-gamma stream when ``elias`` is set).
    """

    name = "qsgd"
    summary = "QSGD: s levels of |g|/||g|| per bucket, stochastic rounding, optional Elias coding; unbiased"
    unbiased = True
    encode_flops_per_element = 10.0  # norm, random draw, scale, floor, clamp, code, decode

    @dataclass(frozen=True)
    class Params:
        # levels <= 127: a signed level must fit the int8 of the stochastic rounding
        levels: int = opt(7, "number of quantization levels s (1..127)", check=between(1, 127))
        bucket_size: int = opt(512, "elements per bucket d; one fp32 norm is sent per bucket", check=at_least(1))
        elias: bool = opt(False, "Elias-gamma code the levels instead of a fixed width")

    @property
    def level_bits(self) -> int:
        """Bits of a level at fixed width; a code adds one sign bit above them."""
        return int(self.params.levels).bit_length()

    def _encode_rows(
        self, acc: torch.Tensor, grads: torch.Tensor, layer: LayerInfo, states: list[CodecState]
    ) -> tuple[list[Payload], SentRows | None]:
        """Every row's bucket norms and codes (:meth:`Codec._encode_rows`), each row's draws from
        its own generator; fixed-width codes are packed for all rows at once, Elias streams (of
        every length) row by row."""
        s, d = int(self.params.levels), int(self.params.bucket_size)
        nodes, n = acc.shape  # acc: the gradients (no error feedback)
        norms = _bucket_norms(acc, d)  # [rows, nb]
        factor = torch.where(norms > 0, s / norms, torch.zeros_like(norms))  # [rows, nb]: levels per unit
        q = uniform_rows(states, nodes, n, acc.device)  # [rows, n] U[0, 1)
        for (qb, cols), (xb, _) in zip(_by_bucket(q, d), _by_bucket(acc, d)):
            qb.addcmul_(xb, factor[:, cols, None])  # s * g / ||bucket|| + U
        q8 = _round_stochastic_(q, float(s))  # [rows, n] int8 signed level in [-s, s], s <= 127
        negative = (q8 < 0).view(_U8)
        level = q8.abs_().view(_U8)
        if self.params.elias:
            codes = [elias_gamma_encode(lv, neg.view(torch.bool)) for lv, neg in zip(level, negative)]
        else:
            # sign-magnitude code: level | sign << w (in place on the level)
            w = self.level_bits
            codes = pack_code_rows(level.bitwise_or_(negative.bitwise_left_shift_(w)), w + 1)
        return [Payload({"norms": b, "codes": c}) for b, c in zip(f32_rows(norms), codes)], None

    def decodes_rows(self) -> bool:
        """Messages decode together (:meth:`Codec.decode_many`) with fixed-width codes of 1, 2, 4 or
        8 bits, whole codes per byte (:func:`unpack_fixed` of other widths and Elias streams take
        one message at a time)."""
        return not self.params.elias and self.level_bits + 1 in (1, 2, 4, 8)

    def _decode_rows(self, payloads: Sequence[Payload], layer: LayerInfo) -> torch.Tensor | None:
        """:meth:`RowDecoder._decode_rows` where :meth:`decodes_rows`, else None (one by one)."""
        return super()._decode_rows(payloads, layer) if self.decodes_rows() else None

    def decode_rows(self, buffers: Mapping[str, torch.Tensor], layer: LayerInfo) -> torch.Tensor:
        """As :meth:`TwoBit.decode_rows`: ``[..., n]`` fp32 (Elias-coded codes: one message only)."""
        n = layer.numel
        s, d = int(self.params.levels), int(self.params.bucket_size)
        norms = unpack_f32(buffers["norms"])  # [..., nb]
        if norms.shape[-1] != math.ceil(n / d):
            raise CodecError(f"qsgd payload has {norms.shape[-1]} norms, expected {math.ceil(n / d)}")
        if self.params.elias:
            level, negative = elias_gamma_decode(buffers["codes"], n)
            negative = negative.view(_U8)
        else:
            w = self.level_bits
            codes = unpack_fixed(buffers["codes"], w + 1, n)  # [..., n] uint8
            negative = codes >> w
            level = codes.bitwise_and_((1 << w) - 1)
        out = _signed_to_f32(_sign_magnitude_(level, negative))  # [..., n] signed level
        unit = norms / s  # [..., nb] value of one level in each bucket
        for ob, rows in _by_bucket(out, d):
            ob.mul_(unit[..., rows, None])
        return out
