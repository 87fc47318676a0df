"""One bit per value: signSGD with majority vote, EF-signSGD and 1-bit SGD.

``signsgd`` (Bernstein, Wang, Azizzadenesheli, Anandkumar, "signSGD: Compressed Optimisation for
Non-Convex Problems", ICML 2018; majority vote as in its Algorithm 3 / "signSGD with Majority Vote is
Communication Efficient and Fault Tolerant", ICLR 2019)
    Each worker sends ``sign(g)``, one bit per value. The server aggregates by majority vote,
    ``sign(sum_i sign(g_i))``, with 0 where the vote ties (possible with an even number of
    workers). Parameter ``scale``: ``"none"`` is the paper's form, decoded as ``+-1`` so the step
    is ``lr * sign(.)`` and a scenario needs a sign-sized learning rate (1e-4..1e-3 with SGD);
    ``"mean"`` (the default) also sends the layer's mean ``|g|`` (one fp32 per layer) and the vote's
    sign is scaled by the workers' mean scale, so the same learning rate as uncompressed SGD works
    (measured on iot10: ``"none"`` at lr 0.05 diverges to chance).

``efsignsgd`` (Karimireddy, Rebjock, Stich, Jaggi, "Error Feedback Fixes SignSGD and other Gradient
Compression Schemes", ICML 2019, Algorithm 1)
    ``p = g + e``; ``delta = (||p||_1 / d) * sign(p)``; ``e = p - delta``. Wire: the sign bits plus
    the scale ``||p||_1 / d`` as fp32. The server averages the decoded ``delta``.

``onebit`` (Seide, Fu, Droppo, Li, Yu, "1-Bit Stochastic Gradient Descent and its Application to
Data-Parallel Distributed Training of Speech DNNs", Interspeech 2014)
    Quantize ``acc = g + r`` to one bit per value with error feedback (threshold 0), and reconstruct
    each bit with the mean of the ``acc`` values that fell on its side, so the reconstruction keeps
    each part's mass; ``r = acc - reconstruction``. Wire: the bits plus two fp32 means (for
    ``granularity = "tensor"``, the default) or two fp32 means per column (``"column"``, the paper's
    choice for weight matrices: CNTK stores a weight as ``[out, in]`` column-major and quantizes each
    column, i.e. each of the ``in`` columns of ``out`` values; a torch tensor of shape
    ``[out, ...]`` is viewed as ``[out, prod(rest)]`` and its columns are the slices ``[:, j]``; 1-D
    tensors fall back to one pair of means).

Bit convention for all three: 1 = negative, 0 = non-negative (so ``sign(0)`` is ``+1``), 8 values per
byte, value ``j`` of a byte at bit ``j``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

import torch

from aiotsim.compress.base import Codec, CodecState, LayerInfo, Payload, RowDecoder, RunningAggregate
from aiotsim.compress.memory import Sent
from aiotsim.compress.packing import pack_bits, pack_f32, unpack_bits, unpack_f32
from aiotsim.compress.registry import register
from aiotsim.errors import CodecError
from aiotsim.schema import opt

_U8 = torch.uint8


def sign_bits(x: torch.Tensor) -> torch.Tensor:
    """Packed sign bits of a flat fp32 tensor: 1 where ``x < 0``. ``ceil(n/8)`` bytes."""
    return pack_bits((x < 0).view(_U8), 1)


def unpack_signs(buf: torch.Tensor, count: int) -> torch.Tensor:
    """``+-1`` as fp32 from packed sign bits: [count]."""
    bits = unpack_bits(buf, 1, count).view(torch.int8)  # [..., count] 0 / 1 (rows: one message each)
    signs = (bits << 1).neg_().add_(1)  # [..., count] int8: 1 - 2 * bit
    return torch.empty(signs.shape, dtype=torch.float32, device=buf.device).copy_(signs)


@register
class SignSGD(RowDecoder, Codec[CodecState]):
    """signSGD: 1 bit per value, decoded as +-1; the server aggregates by majority vote.

    Wire: ``signs`` (``ceil(n/8)`` bytes).
    """

    name = "signsgd"
    summary = "signSGD: 1 sign bit per value, majority vote at the server (optionally mean-|g| scaled)"
    encode_flops_per_element = 2.0

    @dataclass(frozen=True)
    class Params:
        scale: Literal["mean", "none"] = opt(
            "mean", "'mean': send the layer's mean |g| and scale the vote by it; 'none': +-1 (the paper)"
        )

    def _encode(
        self, acc: torch.Tensor, grad: torch.Tensor, layer: LayerInfo, state: CodecState
    ) -> tuple[Payload, Sent | None]:
        x = acc.reshape(-1)  # [n] fp32: the gradient (no error feedback)
        out = {"signs": sign_bits(x)}
        if self.params.scale == "mean":
            out["scale"] = pack_f32(x.abs().mean().reshape(1) if x.numel() else x.new_zeros(1))
        return Payload(out), None

    def decode_rows(self, buffers: Mapping[str, torch.Tensor], layer: LayerInfo) -> torch.Tensor:
        """The ``n`` fp32 values of a message's ``buffers`` (``[..., bytes]`` each: one message, or
        one per row for :func:`~aiotsim.compress.batch_decode.decode_batch`): ``[..., n]``."""
        n = layer.numel
        out = unpack_signs(buffers["signs"], n)
        if self.params.scale == "mean":
            out = out.mul_(unpack_f32(buffers["scale"]))  # [..., 1]: each message's scale
        return out

    def aggregate(self, decoded: list[torch.Tensor], layer: LayerInfo) -> torch.Tensor:
        """Majority vote ``sign(sum of the workers' signs)`` (0 on a tie), times the workers' mean
        scale (1 for ``scale = "none"``); dtype of the inputs."""
        if not decoded:
            raise CodecError(f"aggregate({layer.name}): no gradients to aggregate")
        votes = torch.zeros(decoded[0].shape, dtype=torch.float32, device=decoded[0].device)
        size = torch.zeros_like(votes)
        for d in decoded:  # one pass per worker, not per element
            votes += torch.sign(d)
            size += d.abs()
        # |d| is the worker's scale wherever d != 0 (sign(0) is sent as +1, so d is never 0
        # unless the scale is)
        return (torch.sign(votes) * size / len(decoded)).to(decoded[0].dtype)

    def aggregate_add(self, acc: RunningAggregate, decoded: torch.Tensor, weight: float = 1.0) -> None:
        """Streamed vote: add the message's signs and ``|d|`` (unweighted, as :meth:`aggregate`)."""
        d = decoded.to(torch.float64)
        acc.total.add_(torch.sign(d))
        acc.extra = d.abs() if acc.extra is None else acc.extra.add_(d.abs())
        acc.weight += 1.0
        acc.count += 1

    def aggregate_finish(self, acc: RunningAggregate, layer: LayerInfo) -> torch.Tensor:
        """``sign(sum of signs) x mean |d|``, as :meth:`aggregate` computes from the full list."""
        if not acc.count or acc.extra is None:
            raise CodecError(f"aggregate({layer.name}): no gradients to aggregate")
        return (torch.sign(acc.total) * acc.extra / acc.count).to(layer.dtype)


@register
class EFSignSGD(RowDecoder, Codec[CodecState]):
    """EF-signSGD: scaled sign ``(||p||_1 / d) sign(p)`` of ``p = g + e``, error kept in ``e``.

    Wire: ``scale`` (fp32) and ``signs`` (``ceil(n/8)`` bytes).
    """

    name = "efsignsgd"
    summary = "EF-signSGD: sign bits scaled by mean |g+e|, error feedback"
    has_residual = True
    encode_flops_per_element = 6.0

    def _encode(
        self, acc: torch.Tensor, grad: torch.Tensor, layer: LayerInfo, state: CodecState
    ) -> tuple[Payload, Sent | None]:
        p = acc.reshape(-1)  # [n] fp32: g + e
        n = p.numel()
        scale = torch.linalg.vector_norm(p, ord=1) / max(n, 1)  # 0-d: ||p||_1 / d
        signs = sign_bits(p)
        delta = unpack_signs(signs, n).mul_(scale)  # [n] fp32: scale * sign(p), sign(0) = +1
        return Payload({"scale": pack_f32(scale.reshape(1)), "signs": signs}), Sent(dense=delta)

    def decode_rows(self, buffers: Mapping[str, torch.Tensor], layer: LayerInfo) -> torch.Tensor:
        """As :meth:`SignSGD.decode_rows`: ``[..., n]`` fp32."""
        n = layer.numel
        scale = unpack_f32(buffers["scale"])  # [..., 1]
        return unpack_signs(buffers["signs"], n).mul_(scale)


@register
class OneBitSGD(RowDecoder, Codec[CodecState]):
    """1-bit SGD: sign bits with error feedback, each side reconstructed by its mean.

    Wire: ``means`` (fp32 ``[mean_nonneg, mean_neg]`` per group, groups = 1 or the columns) and
    ``signs`` (``ceil(n/8)`` bytes).
    """

    name = "onebit"
    summary = "1-bit SGD: sign bits with error feedback, reconstructed by the mean of each sign's part"
    has_residual = True
    encode_flops_per_element = 8.0

    @dataclass(frozen=True)
    class Params:
        granularity: Literal["tensor", "column"] = opt(
            "tensor", "one pair of means per tensor, or per column of [out, in...] (paper)"
        )

    def _grid(self, layer: LayerInfo) -> tuple[int, int]:
        """``(rows, cols)``: the tensor as a matrix whose columns are the quantization groups."""
        n = layer.numel
        if n == 0:
            return 0, 0  # nothing to send, not even means
        if self.params.granularity == "column" and len(layer.shape) >= 2:
            return layer.shape[0], n // layer.shape[0]
        return n, 1

    def _encode(
        self, acc: torch.Tensor, grad: torch.Tensor, layer: LayerInfo, state: CodecState
    ) -> tuple[Payload, Sent | None]:
        rows, cols = self._grid(layer)
        mat = acc.reshape(rows, cols)  # [rows, cols] fp32: g + r
        negative = mat < 0  # [rows, cols] bool
        # per column: sum of the values and of their magnitudes give both sides' sums
        total = mat.sum(dim=0)  # [cols]
        magnitude = torch.linalg.vector_norm(mat, ord=1, dim=0)  # [cols]
        means = side_means(total, magnitude, torch.count_nonzero(negative, dim=0), rows)  # [cols, (pos, neg)]
        sent = _reconstruct(negative.view(_U8), means)  # [rows, cols]
        payload = Payload({"means": pack_f32(means), "signs": pack_bits(negative.reshape(-1).view(_U8), 1)})
        return payload, Sent(dense=sent)

    def decode_rows(self, buffers: Mapping[str, torch.Tensor], layer: LayerInfo) -> torch.Tensor:
        """As :meth:`RowDecoder.decode_rows`."""
        rows, cols = self._grid(layer)
        means = unpack_f32(buffers["means"])
        lead = means.shape[:-1]  # (): one message; (messages,): one per row
        if rows * cols == 0:
            return torch.zeros((*lead, layer.numel), dtype=torch.float32, device=means.device)
        means = means.view(*lead, cols, 2)  # [..., cols, (pos, neg)]
        bits = unpack_bits(buffers["signs"], 1, layer.numel).view(*lead, rows, cols)
        return _reconstruct(bits, means).view(*lead, layer.numel)


def side_means(total: torch.Tensor, magnitude: torch.Tensor, neg_cnt: torch.Tensor, rows: int) -> torch.Tensor:
    """``[..., cols, (pos, neg)]``: the mean of each column's non-negative and negative values, from
    the column's sum, its L1 norm and its count of negatives (``[..., cols]`` each) over ``rows``
    values; a side with no element has mean 0 (never used by any element)."""
    mean_neg = (total - magnitude) / 2 / neg_cnt.clamp(min=1)
    mean_pos = (total + magnitude) / 2 / (rows - neg_cnt).clamp(min=1)
    return torch.stack([mean_pos, mean_neg], dim=-1)


def _reconstruct(bits: torch.Tensor, means: torch.Tensor) -> torch.Tensor:
    """``mean_neg`` where the bit is 1, ``mean_pos`` where it is 0, column by column.

    ``bits`` is ``[..., rows, cols]`` ``uint8``; ``means`` is ``[..., cols, (pos, neg)]``. Computed
    as ``mean_pos + bit * (mean_neg - mean_pos)``, written in place into one fresh fp32 buffer; the
    product is exact for bit 0 and the sum rounds ``mean_neg`` at most by one ulp, the same on both
    sides (encoder and decoder run this same function)."""
    out = torch.empty(bits.shape, dtype=torch.float32, device=bits.device).copy_(bits)
    return out.mul_((means[..., 1] - means[..., 0]).unsqueeze(-2)).add_(means[..., 0].unsqueeze(-2))
