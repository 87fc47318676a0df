"""Sparsification with residuals: top-k, random-k and threshold codecs, and the exact selection
helper the other sparse families (DGC, PGC, aggregation-aware) share.

* ``topk`` (Aji & Heafield 2017, "Sparse communication for distributed gradient descent"): add the
  residual to the gradient (error feedback), send the ``k = ceil(ratio * n)`` entries of largest
  magnitude, keep the rest for the next step. Ties at the k-th magnitude are broken
  deterministically: **among equal magnitudes the lower flat index wins**, so the same input always
  gives the same index set on every device.
* ``randomk``: ``k`` indices drawn uniformly without replacement from a 32-bit seed that travels in
  the payload, so the server regenerates them and **no indices are sent** (payload = 4-byte seed +
  ``k`` values). With ``scale = true`` (the default) the values are multiplied by ``n / k``,
  which makes the message an unbiased estimate of its input (the scaled rand-k estimator; Stich,
  Cordonnier & Jaggi 2018 discuss both forms) and keeps no residual; ``scale = false`` sends the
  raw values and keeps the unsent entries in the residual (error feedback, Stich et al.'s
  "sparsified SGD with memory").
  Why the unbiased form is the default (iot10: LeNet-5, 10 nodes, lr 0.02, momentum 0.9 on the
  nodes, 300 iterations, ratio 0.01; ``none`` 95.8%): scaled 96.3%, error feedback 10% (it
  diverges; 35.3% with ``training.momentum_masking``). With error feedback a coordinate's
  accumulated update leaves in one burst every ``1 / ratio`` steps on average, an update delayed
  by ~100 steps; stacked on momentum that diverges, and without momentum it is stable but slow
  (ratio 0.1, momentum 0: 89.1%; ratio 0.01: 79.9%). The scaled
  form's variance (about ``n / k`` times the input's) is averaged down by the ten nodes' distinct
  subsets and by the momentum. With few nodes and a large step the order reverses:
  ``tests/tiny.toml`` (2 nodes, lr 0.1, 30 iterations; ``none`` 82.7%) diverges scaled (10%) and
  reaches 51% with error feedback.
* ``threshold`` (Strom 2015, "Scalable distributed DNN training using commodity GPU cloud
  computing"; Aji & Heafield 2017): every entry of the accumulated gradient with ``|acc| >= tau``
  is sent, the rest stays in the residual. By default the exact values go out (threshold
  sparsification with residuals); ``quantize = true`` is Strom's form, each entry sent as
  ``+-tau`` (1 sign bit plus its index) with ``acc -+ tau`` kept. Measured on iot10 (LeNet-5, 300
  iterations, ``none`` 95.8%): exact values at the default tau reach 95.7% at 2.9x (with
  ``training.momentum_masking = true``: 90.8%). Strom's form never settled in our iot10 runs,
  because an entry whose velocity exceeds tau per step can only shed tau per step and its residual
  grows without bound (tau = 0.01: 10%, diverged; 0.1: 75%, oscillating; 0.5: diverged).

Error feedback is the role :meth:`aiotsim.compress.base.Codec.encode` applies around each codec;
``topk`` and ``threshold`` have it on by default and switch it off with ``error_feedback = false``
(then the unsent entries are dropped); ``randomk`` ties it to ``scale`` as described above.

Every payload uses the shared sparse wire format of :mod:`aiotsim.compress.sparse`: the index set in
its cheapest exact coding, then the values as fp32 or fp16 (``value_dtype``).

Each codec encodes a layer of one or many nodes at once, one row per node (``_encode_rows``): the
element-wise work runs once over the ``[rows, n]`` accumulations and the messages of all rows are
packed together (one host read per layer for every row's index coding), while each node's random
draws come from its own generator, so a row's bytes are the same alone or among others.

Selection speed: ``torch.topk`` over tens of millions of elements is slow on CPU, so
:func:`topk_indices` first brackets the k-th magnitude on a strided sample, keeps the candidates at or
above that bracket (one compare and one ``nonzero`` over the tensor) and runs the exact top-k only
on the candidates; when the bracket holds fewer than ``k`` candidates it falls back to the full
tensor. The result is always exactly the top-k with the lower-index tie rule. :func:`topk_rows`
selects every row of a large CPU layer that way, one row at a time, and any other layer with one
row-wise top-k over all rows (:func:`~aiotsim.compress.rowwise.top_rows`, the same indices).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import torch

from aiotsim.compress.base import Codec, CodecState, FeedbackParams, LayerInfo, Payload
from aiotsim.compress.memory import SentRows
from aiotsim.compress.packing import (
    VALUE_BYTES,
    encode_index_ragged,
    encode_index_rows,
    index_bound,
    mask_indices,
    pack_bits,
    pack_u32,
    pack_value_rows,
    pack_values,
    unpack_bits,
    unpack_u32,
    unpack_values,
)
from aiotsim.compress.registry import register
from aiotsim.compress.rowwise import top_rows
from aiotsim.compress.sparse import Sizes, SparseDecoder, ValuesOf, padded_values, sparse_bound
from aiotsim.errors import CodecError
from aiotsim.schema import opt, positive, unit_interval

ValueDtype = Literal["fp32", "fp16"]

_FP16_MAX = 65504.0
# Tensors at least this large use the sampled bracket before the exact top-k.
_BRACKET_MIN_NUMEL = 1 << 16
# Elements in the strided sample used to bracket the k-th magnitude.
_BRACKET_SAMPLE = 1 << 16


# ---- shared helpers ----------------------------------------------------------------------------
def value_dtype_opt(help: str = "precision of the sent values: fp32 or fp16") -> ValueDtype:
    """The ``value_dtype`` field every sparsifier declares (fp32 by default; the ``Literal`` type
    is what :func:`aiotsim.schema.check_fields` checks the value against)."""
    return opt("fp32", help)


# Float products within this of a whole number are that number: a ratio written with up to 6
# decimals times n <= 1e8 lands on multiples of 1e-6, and the product's float error is below
# 1e8 * 2**-52 ~ 2.2e-8, so the snap removes the error and nothing else.
_WHOLE = 1e-7


def k_of(ratio: float, n: int) -> int:
    """Elements kept out of ``n`` at density ``ratio``: ``ceil(ratio * n)`` of the ratio as written,
    clipped to ``[0, n]`` (at least 1 for a non-empty tensor). The float product is snapped to a
    whole number it is within ``_WHOLE`` of: ``0.07 * 100`` is 7.000000000000001 in floats, and a
    plain ``ceil`` kept 8 elements; DGC's density ``1 - 0.999`` is 0.0010000000000000009, which
    kept 49 of 48,000."""
    if n == 0:
        return 0
    x = ratio * n
    whole = round(x)
    return min(n, max(1, whole if abs(x - whole) < _WHOLE else math.ceil(x)))


def exact_topk_mask(mag: torch.Tensor, k: int) -> torch.Tensor:
    """Boolean mask of the ``k`` largest entries of the 1-D ``mag``; among equal values at the
    k-th position the lower indices win. ``mag`` must be free of NaN."""
    n = mag.numel()
    if k >= n:
        return torch.ones(n, dtype=torch.bool, device=mag.device)
    if k <= 0:
        return torch.zeros(n, dtype=torch.bool, device=mag.device)
    kth = torch.topk(mag, k, sorted=False).values.min()  # the k-th largest value (scalar)
    above = mag > kth  # [n]: certainly kept
    need = k - above.sum()  # 0-d: how many of the ties at kth still fit (a tensor: no host read)
    ties = mag == kth
    # cumsum over the tie mask counts ties from the left: the first `need` of them win.
    return above | (ties & (torch.cumsum(ties, dim=0, dtype=torch.int64) <= need))


def topk_indices(mag: torch.Tensor, k: int) -> torch.Tensor:
    """Flat indices (ascending, ``int64``) of the ``k`` largest entries of the 1-D ``mag``, ties
    broken by lower index. Exact; uses a sampled bracket to avoid a full top-k on large inputs.

    Parameters
    ----------
    mag : Tensor
        ``[n]`` non-negative scores (magnitudes), fp32, without NaN.
    k : int
        How many to keep; clipped to ``[0, n]``.
    """
    n = mag.numel()
    k = max(0, min(k, n))
    if k == n:
        return torch.arange(n, device=mag.device)
    if k == 0:
        return torch.zeros(0, dtype=torch.int64, device=mag.device)
    if _brackets(mag.device, n, k):
        stride = max(1, n // _BRACKET_SAMPLE)
        sample = mag[::stride]  # [~_BRACKET_SAMPLE], deterministic (no randomness consumed)
        m = sample.numel()
        # Twice the expected number of sample entries above the k-th magnitude, plus slack for
        # sampling noise: the bracket usually holds about 2k candidates.
        m_above = min(m, 2 * math.ceil(k * m / n) + 16)
        if m_above < m:
            bracket = torch.topk(sample, m_above, sorted=False).values.min()
            cand = torch.nonzero(mag >= bracket).reshape(-1)  # [c] ascending
            if k <= cand.numel() <= n // 2:
                keep = exact_topk_mask(mag[cand], k)  # ties: lower candidate index = lower index
                return cand[keep]
    return mask_indices(exact_topk_mask(mag, k), k)


def _brackets(device: torch.device, n: int, k: int) -> bool:
    """Whether :func:`topk_indices` brackets the k-th score on a sample: a CPU saving for a large
    layer and a small ``k``. The candidates' count is data-dependent, a host read (on a GPU a sync),
    where the full top-k is one kernel; both give the same indices."""
    return device.type == "cpu" and n >= _BRACKET_MIN_NUMEL and 4 * k <= n


def topk_rows(mag: torch.Tensor, k: int) -> torch.Tensor | list[torch.Tensor]:
    """``[rows, k]`` ascending indices of the ``k`` largest scores of each row of ``mag``
    (``[rows, n]``, without NaN), lower index first among equals: :func:`topk_indices` row by row
    where it brackets (a large CPU layer: mlp's 156,800-element layer, 10 rows, one thread, 47 ms
    row by row, 89 ms in one row-wise ``torch.topk`` over the full rows), else one
    :func:`~aiotsim.compress.rowwise.top_rows` over all rows (on a GPU one kernel).
    A row holding a NaN (a diverging run) selects as :func:`topk_indices` does, maybe fewer than
    ``k``: then each row's indices come as a list."""
    if mag.shape[0] == 1:  # one row (a node's own encode): topk_indices, the cheaper call for it
        return topk_indices(mag[0], k).unsqueeze(0)
    idx = None if _brackets(mag.device, mag.shape[1], k) else top_rows(mag, k)
    if idx is not None:
        return idx
    return stack_if_equal([topk_indices(row, k) for row in mag])


def stack_if_equal(rows: list[torch.Tensor]) -> torch.Tensor | list[torch.Tensor]:
    """Rows' index sets as one ``[rows, k]`` tensor when they are of one size, else the list."""
    return torch.stack(rows) if all(r.numel() == rows[0].numel() for r in rows) else rows


def sparse_rows(
    acc: torch.Tensor, idx: torch.Tensor | list[torch.Tensor], value_dtype: str, mask: torch.Tensor | None = None
) -> tuple[list[Payload], SentRows]:
    """The sparse messages (:func:`~aiotsim.compress.sparse.sparse_payload`'s bytes) of the rows of
    ``acc`` (fp32 ``[rows, n]``) at their ``[rows, k]`` ascending indices ``idx``, and what they send.
    Every row's index coding is picked with one host read for all rows
    (:func:`~aiotsim.compress.packing.encode_index_rows`); the values of all rows are one fresh
    buffer, which the messages share (views of its rows). Index sets that may differ in size (a
    list: from :func:`topk_rows` where a row diverged, or DGC's thresholds) are coded as ragged rows
    (:func:`ragged_rows`; ``mask``: the sets as a ``[rows, n]`` boolean tensor, when the caller has one)."""
    if isinstance(idx, list):
        cols, counts = torch.cat(idx), [int(i.numel()) for i in idx]
        # each row's offset into the [rows * n] block, in one op for all rows (not one add per row)
        starts = torch.arange(len(idx), device=acc.device) * acc.shape[1]
        flat = cols + torch.repeat_interleave(starts, torch.tensor(counts, device=acc.device))
        return ragged_rows(acc, flat, cols, counts, value_dtype, mask)
    values = round_values(acc.gather(1, idx), value_dtype)  # [rows, k] fp32
    coded = encode_index_rows(idx, acc.shape[1])
    payloads = [
        Payload({"indices": c.buf, "values": v}, {"indices": c.head})
        for c, v in zip(coded, pack_value_rows(values, value_dtype))
    ]
    return payloads, ("sparse", (idx, values))


def ragged_rows(
    acc: torch.Tensor,
    flat: torch.Tensor,
    cols: torch.Tensor,
    counts: list[int],
    value_dtype: str,
    mask: torch.Tensor | None = None,
) -> tuple[list[Payload], SentRows]:
    """The sparse messages (:func:`~aiotsim.compress.sparse.sparse_payload`'s bytes) of index sets of
    differing sizes, and what they send: row ``i`` of ``acc`` (fp32 ``[rows, n]``) sends its values at
    ``counts[i]`` ascending column indices, the rows' laid end to end in ``cols`` (``flat``: the same
    entries' indices into the ``[rows * n]`` block). ``mask``: the sets as a ``[rows, n]`` boolean
    tensor, when the caller has one. One host read for every row's index coding
    (:func:`~aiotsim.compress.packing.encode_index_ragged`); ``pack_values`` copies each row's
    values, so a message owns its bytes and the pass's values do not live until its last one is
    aggregated."""
    values = round_values(acc.view(-1).index_select(0, flat), value_dtype)
    payloads = [
        Payload({"indices": c.buf, "values": pack_values(v, value_dtype)}, {"indices": c.head})
        for c, v in zip(encode_index_ragged(cols, counts, acc.shape[1], mask), values.split(counts))
    ]
    return payloads, ("flat", (flat, values))


def mask_hits(mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """The ``True`` entries of the ``[rows, n]`` boolean ``mask``: their ascending flat indices into
    the ``[rows * n]`` block, their column indices (each row's ascending, the rows' end to end) and
    each row's count. One ``nonzero`` and one host read for all rows; the counts come from a binary
    search in the sorted indices, not from another pass over the mask (which costs as much as the
    ``nonzero`` on a sparse mask)."""
    rows, n = mask.shape
    flat = torch.nonzero(mask.view(-1)).reshape(-1)  # [c] ascending
    counts = torch.searchsorted(flat, torch.arange(rows + 1, device=mask.device) * n).diff().tolist()
    return flat, flat if rows == 1 else flat.remainder(max(n, 1)), counts


def round_values(values: torch.Tensor, value_dtype: str) -> torch.Tensor:
    """What the receiver will read back for ``values`` (fp32) sent as ``value_dtype``: fp16 values
    are clamped to fp16's finite range and rounded, so the residual keeps the difference."""
    if value_dtype == "fp16":
        return values.clamp(-_FP16_MAX, _FP16_MAX).half().float()
    return values


# ---- top-k -------------------------------------------------------------------------------------
@register
class TopK(SparseDecoder, Codec[CodecState]):
    """Top-k sparsification with error feedback (Aji & Heafield 2017); ties: lower index wins."""

    @dataclass(frozen=True)
    class Params(FeedbackParams):
        ratio: float = opt(0.01, "fraction of elements sent, k = ceil(ratio * n)", check=unit_interval)
        value_dtype: ValueDtype = value_dtype_opt()

    name = "topk"
    summary = "top-k magnitudes with error feedback (Aji & Heafield 2017)"
    has_residual = True
    sparse = True
    encode_flops_per_element = 8.0

    def _encode_rows(
        self, acc: torch.Tensor, grads: torch.Tensor, layer: LayerInfo, states: list[CodecState]
    ) -> tuple[list[Payload], SentRows]:
        # acc: [rows, n] fp32, r + g (or g without error feedback)
        idx = topk_rows(acc.abs(), k_of(self.params.ratio, acc.shape[1]))  # [rows, k]
        return sparse_rows(acc, idx, self.params.value_dtype)

    def message_bound(self, layer: LayerInfo) -> int:
        """k values, and k indices in the costliest form the index coding may pick."""
        return sparse_bound(layer.numel, k_of(self.params.ratio, layer.numel), self.params.value_dtype)


# ---- random-k ----------------------------------------------------------------------------------
def random_subset(seed: int, n: int, k: int, device: torch.device) -> torch.Tensor:
    """``k`` distinct indices into ``[0, n)`` drawn uniformly from ``seed``, sorted ascending.

    The draw runs on a CPU generator so encoder and decoder get the same set on any device. For
    ``k <= n / 4`` it draws with replacement and keeps first occurrences in draw order (sequential
    sampling without replacement, a uniform k-subset) in a few vectorized rounds, far cheaper than
    a full permutation of ``n``; denser subsets take a prefix of ``randperm(n)``.
    """
    gen = torch.Generator(device="cpu")
    gen.manual_seed(seed)
    if k == 0:
        return torch.zeros(0, dtype=torch.int64, device=device)
    if 4 * k > n:
        idx = torch.randperm(n, generator=gen)[:k]
    else:
        draws = torch.zeros(0, dtype=torch.int64)
        distinct = 0
        while distinct < k:
            # Expected duplicates among k draws are about k^2 / (2n); draw with margin.
            extra = k - distinct + (k * k) // n + 64
            draws = torch.cat([draws, torch.randint(0, n, (extra,), generator=gen)])
            distinct = int(torch.unique(draws).numel())
        uniq, inverse = torch.unique(draws, return_inverse=True)  # [u], [m]
        pos = torch.arange(draws.numel(), dtype=torch.int64)
        first = torch.full((uniq.numel(),), draws.numel(), dtype=torch.int64)
        first.scatter_reduce_(0, inverse, pos, reduce="amin")  # first draw position of each value
        idx = uniq[torch.argsort(first)[:k]]  # the first k distinct values in draw order
    return torch.sort(idx).values.to(device)


@register
class RandomK(Codec[CodecState]):
    """Random-k sparsification: indices regenerated from a seed in the payload, none sent.

    Error feedback is not a separate switch: ``scale`` picks between the two forms of the
    literature, the unbiased scaled estimator (no residual) and sparsified SGD with memory.
    """

    @dataclass(frozen=True)
    class Params:
        ratio: float = opt(0.01, "fraction of elements sent, k = ceil(ratio * n)", check=unit_interval)
        scale: bool = opt(True, "multiply values by n/k (unbiased, no residual, default); false keeps a residual")
        value_dtype: ValueDtype = value_dtype_opt()

    name = "randomk"
    summary = "random-k indices from a seed shared with the server (no indices sent); unbiased when scaled"
    # Depend on `scale`: the class attributes describe the default (scale = true); the instance
    # attributes set in __init__ describe the chosen parameters.
    unbiased = True
    has_residual = False
    sparse = True
    encode_flops_per_element = 2.0

    def __init__(self, params: object = None, seed: int = 0) -> None:
        super().__init__(params, seed)
        # Instance-level truth for the chosen parameters (contract tests read the class default).
        self.unbiased = bool(self.params.scale)

    def _keeps_residual(self) -> bool:
        """The unscaled form keeps the unsent entries (Stich et al.'s memory); the scaled one none."""
        return not self.params.scale

    def _encode_rows(
        self, acc: torch.Tensor, grads: torch.Tensor, layer: LayerInfo, states: list[CodecState]
    ) -> tuple[list[Payload], SentRows]:
        n = acc.shape[1]
        k = k_of(self.params.ratio, n)
        draws = [self.draw(s, n, k, acc.device) for s in states]  # each row's own generator
        idx = torch.stack([i for _, i in draws])  # [rows, k], ascending per row
        picked = acc.gather(1, idx)  # [rows, k] fp32
        if self.params.scale:  # unbiased: E[n/k * 1{i in idx}] = 1
            picked = picked * (n / max(k, 1))
        values = round_values(picked, self.params.value_dtype)
        packed = pack_value_rows(values, self.params.value_dtype)  # views of one fresh buffer
        return [self.payload(seed, p) for (seed, _), p in zip(draws, packed)], ("sparse", (idx, values))

    @staticmethod
    def draw(state: CodecState, n: int, k: int, device: torch.device) -> tuple[int, torch.Tensor]:
        """This step's seed, from the node's generator, and the ``k`` sorted indices it stands for."""
        seed = int(torch.randint(0, 2**32, (1,), generator=state.generator, device=state.generator.device))
        return seed, random_subset(seed, n, k, device)

    @staticmethod
    def payload(seed: int, values: torch.Tensor) -> Payload:
        """The message: the seed (4 bytes, with its host copy, as the receiver reads it on the
        host) and the packed ``values``."""
        return Payload(
            {"seed": pack_u32([seed], values.device), "values": values}, {"seed": seed.to_bytes(4, "little")}
        )

    def indices(self, payload: Payload, layer: LayerInfo) -> torch.Tensor:
        """The index set of a payload (regenerated from its seed): the server's union uses it."""
        head = payload.heads.get("seed")  # the seed's host copy, else one host read of the buffer
        seed = int(unpack_u32(payload.buffers["seed"])[0]) if head is None else int.from_bytes(head[:4], "little")
        return random_subset(seed, layer.numel, k_of(self.params.ratio, layer.numel), payload.buffers["seed"].device)

    def decode(self, payload: Payload, layer: LayerInfo) -> torch.Tensor:
        return self._decode_rows([payload], layer).view(layer.shape).to(layer.dtype)

    def _decode_rows(self, payloads: Sequence[Payload], layer: LayerInfo) -> torch.Tensor:
        """``[messages, n]`` fp32: each message's index set regenerated from its seed (on the CPU
        generator, one per message by design), the values of all written through flat indices."""
        n, vd = layer.numel, self.params.value_dtype
        k = k_of(self.params.ratio, n)
        for p in payloads:
            if set(p.buffers) != {"seed", "values"} or p.buffers["values"].numel() != k * VALUE_BYTES[vd]:
                got = ", ".join(f"{key} {b.numel()} B" for key, b in p.buffers.items())
                raise CodecError(f"randomk payload for {layer.name} has {got}, expected seed 4 B, values {k} x {vd}")
        device = payloads[0].buffers["values"].device
        if k == 0:  # an empty layer: no values (and none to view as floats)
            return torch.zeros(len(payloads), n, dtype=torch.float32, device=device)
        values = unpack_values(torch.stack([p.buffers["values"] for p in payloads]), vd)  # [m, k]
        index = torch.stack([self.indices(p, layer) for p in payloads]).to(device)  # [m, k] ascending per row
        out = torch.zeros(len(payloads), n, dtype=torch.float32, device=device)
        rows = torch.arange(len(payloads), device=device)[:, None] * n
        out.view(-1)[(index + rows).reshape(-1)] = values.reshape(-1)
        return out


# ---- threshold (Strom) -------------------------------------------------------------------------
@register
class Threshold(SparseDecoder, Codec[CodecState]):
    """Threshold sparsification: send ``|acc| >= tau`` exactly, or as ``+-tau`` (Strom 2015)."""

    @dataclass(frozen=True)
    class Params(FeedbackParams):
        tau: float = opt(0.01, "threshold on |gradient + residual|; > 0", check=positive)
        quantize: bool = opt(False, "true: send +-tau as 1 sign bit per index (Strom); false: exact values")
        value_dtype: ValueDtype = value_dtype_opt("precision of exact values (used when quantize = false)")

    name = "threshold"
    summary = "threshold sparsification: |acc| >= tau sent (exact, or +-tau as in Strom), residual kept"
    has_residual = True
    sparse = True
    encode_flops_per_element = 4.0

    def _encode_rows(
        self, acc: torch.Tensor, grads: torch.Tensor, layer: LayerInfo, states: list[CodecState]
    ) -> tuple[list[Payload], SentRows]:
        p = self.params
        send = acc.abs() >= p.tau  # [rows, n]: r + g (or g without error feedback) passing
        flat, cols, counts = mask_hits(send)  # [m] into the [rows * n] block, each row's indices, counts
        if not p.quantize:
            return ragged_rows(acc, flat, cols, counts, p.value_dtype, send)
        # Strom's form: 1 sign bit per index (True: negative), read back as +-tau (known to both sides)
        negative = acc.view(-1).index_select(0, flat) < 0
        payloads = [
            Payload({"indices": c.buf, "signs": pack_bits(s.to(torch.uint8), 1)}, {"indices": c.head})
            for c, s in zip(encode_index_ragged(cols, counts, acc.shape[1], send), negative.split(counts))
        ]
        return payloads, ("flat", (flat, torch.where(negative, -p.tau, p.tau).to(torch.float32)))

    def message_bound(self, layer: LayerInfo) -> int:
        """Every element may pass tau: n indices, and n values (or n sign bits)."""
        n = layer.numel
        if self.params.quantize:
            return index_bound(n, n) + math.ceil(n / 8)
        return sparse_bound(n, n, self.params.value_dtype)

    def value_coding(self) -> tuple[Sizes, ValuesOf]:
        """Exact values, or (quantized) a sign bit per index."""
        if not self.params.quantize:
            return super().value_coding()
        return (lambda count: {"signs": math.ceil(count / 8)}), padded_values(self.quantized_values)

    def quantized_values(self, buffers: Mapping[str, torch.Tensor], count: int) -> torch.Tensor:
        """The ``count`` values (``+-tau``, fp32) of quantized messages' sign bits (``[..., bytes]``:
        one message, or one per row): ``[..., count]``."""
        negative = unpack_bits(buffers["signs"], 1, count).bool()
        return torch.where(negative, -self.params.tau, self.params.tau).to(torch.float32)
