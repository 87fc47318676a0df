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
byte, value ``j`` of a byte at bit ``j``. Each encodes one layer of one or many nodes at once, as
``[rows, n]`` rows (one per node): the signs, scales and means of every row in one pass, each equal
to the row's own (:func:`~aiotsim.compress.rowwise.row_reduce`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

import torch

from aiotsim.compress.aggregation import RunningAggregate
from aiotsim.compress.base import Codec, CodecState, LayerInfo, Payload, RowDecoder
from aiotsim.compress.memory import SentRows
from aiotsim.compress.packing import unpack_bits, unpack_f32
from aiotsim.compress.quantize import _signed_to_f32, f32_rows, pack_code_rows
from aiotsim.compress.registry import register
from aiotsim.compress.rowwise import F64, row_norms64, row_reduce
from aiotsim.errors import CodecError
from aiotsim.schema import opt

_U8 = torch.uint8


def unpack_signs(buf: torch.Tensor, count: int) -> torch.Tensor:
    """``+-1`` as fp32 from packed sign bits: [count]."""
    bits = unpack_bits(buf, 1, count).view(torch.int8)  # [..., count] 0 / 1 (rows: one message each)
    return _signed_to_f32((bits << 1).neg_().add_(1))  # [..., count]: 1 - 2 * bit


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

    def _encode_rows(
        self, acc: torch.Tensor, grads: torch.Tensor, layer: LayerInfo, states: list[CodecState]
    ) -> tuple[list[Payload], SentRows | None]:
        """Every row's sign bits (:meth:`Codec._encode_rows`), with its mean ``|g|`` for ``scale = "mean"``."""
        nodes, n = acc.shape  # acc: the gradients (no error feedback)
        signs = pack_code_rows((acc < 0).view(_U8), 1)
        if self.params.scale != "mean":
            return [Payload({"signs": b}) for b in signs], None
        # mean |g| per row; an empty layer sends 0
        scale = row_reduce(lambda r: r.abs().mean(), acc, lambda x: x.abs().mean(dim=1)) if n else acc.new_zeros(nodes)
        return [Payload({"signs": b, "scale": c}) for b, c in zip(signs, f32_rows(scale))], None

    def decode_rows(self, buffers: Mapping[str, torch.Tensor], layer: LayerInfo) -> torch.Tensor:
        """The ``n`` fp32 values of a message's ``buffers`` (``[..., bytes]`` each: one message, or
        one per row for :meth:`~aiotsim.compress.base.Codec.decode_many`): ``[..., n]``."""
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

    def _encode_rows(
        self, acc: torch.Tensor, grads: torch.Tensor, layer: LayerInfo, states: list[CodecState]
    ) -> tuple[list[Payload], SentRows | None]:
        """Every row's scale ``||p||_1 / d`` and sign bits (:meth:`Codec._encode_rows`); sent:
        ``scale * sign(p)``, with ``sign(0) = +1``."""
        n = acc.shape[1]  # acc: p = g + e
        scale = (row_norms64(acc, 1) / max(n, 1)).float()  # [rows]: ||p||_1 in float64, then fp32
        negative = (acc < 0).view(_U8)  # [rows, n] 0 / 1
        # as the decoder's unpack_signs(...) * scale: 1 - 2 bit as fp32, times the row's scale
        delta = _signed_to_f32(negative.view(torch.int8).mul(-2).add_(1)).mul_(scale.unsqueeze(1))
        payloads = [Payload({"scale": c, "signs": b}) for c, b in zip(f32_rows(scale), pack_code_rows(negative, 1))]
        return payloads, ("dense", delta)

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

    def _encode_rows(
        self, acc: torch.Tensor, grads: torch.Tensor, layer: LayerInfo, states: list[CodecState]
    ) -> tuple[list[Payload], SentRows | None]:
        """Every row's sign bits and side means (:meth:`Codec._encode_rows`); sent: each element's
        side mean."""
        nodes, n = acc.shape  # acc: g + r
        rows, cols = self._grid(layer)
        mat = acc.reshape(nodes, rows, cols)
        negative = mat < 0  # [nodes, rows, cols] bool
        # per node and column, in float64: the sums of the values and of their magnitudes
        total = row_reduce(
            lambda r: r.view(rows, cols).sum(dim=0, dtype=F64), acc, lambda x: mat.sum(dim=1, dtype=F64)
        )  # [nodes, cols]
        magnitude = row_reduce(
            lambda r: torch.linalg.vector_norm(r.view(rows, cols), ord=1, dim=0, dtype=F64),
            acc,
            lambda x: torch.linalg.vector_norm(mat, ord=1, dim=1, dtype=F64),
        )
        negatives = torch.count_nonzero(negative, dim=1)
        means = side_means(total, magnitude, negatives, rows).float()  # [nodes, cols, (pos, neg)]
        sent = _reconstruct(negative.view(_U8), means).view(nodes, n)
        signs = pack_code_rows(negative.view(nodes, n).view(_U8), 1)
        return [Payload({"means": m, "signs": b}) for m, b in zip(f32_rows(means), signs)], ("dense", sent)

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
