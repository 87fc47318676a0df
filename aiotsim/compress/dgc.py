"""Deep Gradient Compression (Lin, Han, Mao, Wang, Dally, ICLR 2018, arXiv 1712.01887).

Per node and layer, with momentum factor ``m`` (the codec applies momentum; the engine then steps
the server optimizer without it, ``absorbs_momentum = True``)::

    g <- g * min(1, clip_norm / ||g||_2)        local gradient clipping (skipped when clip_norm = 0)
    u <- m * u + g                              momentum correction: accumulate the velocity...
    v <- v + u                                  ...not the raw gradient
    thr <- k-th largest |v| on a random sample  threshold estimated on ~sample_ratio of v
    mask <- |v| >= thr                          (exact top-k of the selected if far too many pass)
    send v[mask];  v[mask] <- 0;  u[mask] <- 0  momentum factor masking

The sparsity follows the paper's exponential warm-up: over the first ``warmup_steps`` encode calls,
in four equal stages, 75%, 93.75%, 98.4375%, 99.6% (``1 - 0.25**stage``), then ``sparsity``
(default 99.9%). The kept count is ``k = ceil((1 - sparsity) * n)``.

Threshold estimation (paper section 5, "System performance"): the threshold is the k-th largest
magnitude of a uniform random sample of ``ceil(sample_ratio * n)`` entries (at least 1000, drawn
with replacement from ``state.generator``), scaled to the sample. If more than
``fallback_factor * k`` entries pass it, the exact top-k is selected among those that passed (the
paper's "top-k selection again on the selected gradients"); fewer than ``k`` passing is accepted,
as sampling noise. The accumulated ``v`` is the error-feedback residual: ``sent + v_after ==
v_before + u``. In aiotsim's terms, error feedback (always on) accumulates the velocity ``u``
rather than the gradient: :meth:`DeepGradientCompression._feedback_rows` clips and applies the
momentum correction, the role adds ``v``, and ``_encode_rows`` selects and masks the momentum.

A layer of one or many nodes is encoded at once, one row per node: clipping, the momentum
correction, magnitudes and comparisons run over the ``[rows, n]`` block, and the rows that keep the
same ``k`` (all of them, unless their nodes are at different warm-up steps) are thresholded together,
each from its own sample drawn from its own node's generator, so a row's bytes and draws are the same
alone or among others.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from aiotsim.compress.base import Codec, CodecState, LayerInfo, Payload, as_float
from aiotsim.compress.memory import SentRows
from aiotsim.compress.registry import register
from aiotsim.compress.rowwise import row_norms64, velocity_rows
from aiotsim.compress.sparse import SparseDecoder, sparse_bound
from aiotsim.compress.sparsify import (
    ValueDtype,
    exact_topk_mask,
    k_of,
    mask_hits,
    sparse_rows,
    topk_rows,
    value_dtype_opt,
)
from aiotsim.schema import at_least, fraction, non_negative, opt, unit_interval

# Sparsities of the four warm-up stages: 1 - 0.25**(stage + 1).
WARMUP_SPARSITIES = (0.75, 0.9375, 0.984375, 0.99609375)
_MIN_SAMPLE = 1000  # smallest threshold sample; layers no larger are thresholded exactly


@dataclass
class DGCState(CodecState):
    """DGC's per-node, per-layer state: ``residual`` is the accumulated velocity ``v``."""

    momentum: torch.Tensor | None = None  # u, the local velocity, shape of the gradient (fp32)


def warmup_sparsity(step: int, warmup_steps: int, final: float) -> float:
    """Sparsity at encode call ``step`` (0-based): four equal stages of 75%, 93.75%, 98.4375%,
    99.6% over ``warmup_steps`` calls, then ``final`` (never above ``final``)."""
    if step >= warmup_steps:
        return final
    stage = min(3, (4 * step) // warmup_steps)
    return min(final, WARMUP_SPARSITIES[stage])


@register
class DeepGradientCompression(SparseDecoder, Codec[DGCState]):
    """DGC: momentum correction, local clipping, momentum factor masking, warm-up, sampled threshold."""

    @dataclass(frozen=True)
    class Params:
        sparsity: float = opt(0.999, "final fraction of elements not sent, in [0, 1)", check=fraction)
        momentum: float = opt(0.9, "momentum factor m of the local momentum correction", check=fraction)
        warmup_steps: int = opt(
            100, "encode calls of sparsity warm-up (75% .. 99.6% in 4 stages); 0 = none", check=non_negative
        )
        sample_ratio: float = opt(0.01, "fraction of elements sampled to estimate the threshold", check=unit_interval)
        fallback_factor: float = opt(
            1.3, "re-select the exact top-k when more than this times k pass the threshold", check=at_least(1.0)
        )
        clip_norm: float = opt(
            0.0, "local gradient clipping: max L2 norm of a layer's gradient; 0 = off", check=non_negative
        )
        value_dtype: ValueDtype = value_dtype_opt()

    name = "dgc"
    summary = "Deep Gradient Compression: momentum correction and masking, clipping, warm-up, sampled threshold"
    State = DGCState
    has_residual = True  # v is the algorithm's own accumulator: not switchable
    sparse = True
    absorbs_momentum = True
    encode_flops_per_element = 12.0

    def current_sparsity(self, state: DGCState) -> float:
        """The sparsity the next :meth:`encode` on ``state`` will use."""
        return warmup_sparsity(state.step, self.params.warmup_steps, self.params.sparsity)

    def _feedback_rows(self, x: torch.Tensor, layer: LayerInfo, states: list[DGCState]) -> torch.Tensor:
        """Local clipping, then momentum correction, of every row: the velocity ``u <- m u + g``
        (fp32, kept in each state, :func:`~aiotsim.compress.rowwise.velocity_rows`) is what error
        feedback accumulates into ``v``. A row whose L2 norm exceeds ``clip_norm`` is scaled by
        ``clip_norm / norm``. Returns ``u`` as ``[rows, n]``."""
        p = self.params
        g = as_float(x)
        if p.clip_norm > 0 and g.shape[1]:
            norms = row_norms64(g).tolist()  # L2 norms accumulated in float64
            scales = [p.clip_norm / v if v > p.clip_norm else 1.0 for v in norms]  # 1.0: the row as is (exact)
            if any(v != 1.0 for v in scales):
                g = g * torch.tensor(scales, dtype=torch.float32, device=g.device).unsqueeze(1)
        return velocity_rows(g, states, layer, p.momentum)

    def _encode_rows(
        self, acc: torch.Tensor, grads: torch.Tensor, layer: LayerInfo, states: list[DGCState]
    ) -> tuple[list[Payload], SentRows]:
        rows, n = acc.shape  # acc: v + u, the accumulated velocity
        p = self.params
        mag = acc.abs()  # [rows, n]
        m = max(_MIN_SAMPLE, math.ceil(p.sample_ratio * n))  # threshold sample size
        by_k: dict[int, list[int]] = {}  # k -> rows (one group unless the rows' warm-up stages differ)
        for i, s in enumerate(states):
            by_k.setdefault(k_of(1.0 - self.current_sparsity(s), n), []).append(i)
        idx: list[torch.Tensor] = [mag.new_empty(0, dtype=torch.int64)] * rows  # ascending per row
        mask = None  # the selection as a [rows, n] mask, where it is what passed the thresholds
        for k, members in by_k.items():
            sub = mag if len(members) == rows else mag.index_select(0, torch.tensor(members, device=mag.device))
            if k < n and m < n:
                chosen, passed = self._sampled(sub, k, m, [states[i].generator for i in members])
                mask = passed if len(members) == rows else None
            else:  # every entry, or a small layer's exact top-k (as cheap as sampling)
                chosen = list(topk_rows(sub, k))
            for i, sel in zip(members, chosen):
                idx[i] = sel
        payloads, sent = sparse_rows(acc, idx, p.value_dtype, mask)  # the role then keeps v <- v - sent
        for s, i in zip(states, idx):
            if s.momentum is not None:
                s.momentum.view(-1)[i] = 0.0  # momentum factor masking
        return payloads, sent

    def _sampled(
        self, mag: torch.Tensor, k: int, m: int, gens: list[torch.Generator]
    ) -> tuple[list[torch.Tensor], torch.Tensor | None]:
        """Each row's indices (ascending) of the entries of ``mag`` (``[rows, n]``) passing its sampled
        threshold: the k-th largest of ``m`` entries drawn from the row's generator, scaled to the
        sample; where more than ``fallback_factor * k`` pass, the exact top-k of those that passed.
        Also the ``[rows, n]`` mask of what passed, unless a row fell back to its exact top-k."""
        n = mag.shape[1]
        pos = torch.stack([torch.randint(0, n, (m,), generator=g, device=g.device) for g in gens])  # [rows, m]
        sample = mag.gather(1, pos.to(mag.device))
        kth = torch.topk(sample, max(1, math.ceil(m * k / n)), dim=1, sorted=False).values.min(dim=1, keepdim=True)
        passed = mag >= kth.values  # [rows, n]
        _, cols, counts = mask_hits(passed)  # one nonzero and one host read for every row
        idx = list(cols.split(counts))
        exact = passed
        for i, sel in enumerate(idx):
            if sel.numel() > self.params.fallback_factor * k:  # the exact top-k among those that passed
                idx[i] = sel[exact_topk_mask(mag[i][sel], k)]
                exact = None
        return idx, exact

    def message_bound(self, layer: LayerInfo) -> int:
        """The most :meth:`_encode_rows` selects: at the lowest sparsity (the warm-up's first stage), k
        or up to ``fallback_factor`` x k through the sampled threshold (more: the exact k)."""
        n, p = layer.numel, self.params
        lowest = min(p.sparsity, WARMUP_SPARSITIES[0]) if p.warmup_steps > 0 else p.sparsity
        k = k_of(1.0 - lowest, n)
        return sparse_bound(n, min(n, max(k, math.floor(p.fallback_factor * k))), p.value_dtype)
