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
rather than the gradient: :meth:`DeepGradientCompression._feedback_input` clips and applies the
momentum correction, the role adds ``v``, and ``_encode`` selects and masks the momentum.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from aiotsim.compress.base import Codec, CodecState, LayerInfo, Payload, as_float
from aiotsim.compress.memory import Sent, momentum_velocity
from aiotsim.compress.registry import register
from aiotsim.compress.sparse import decode_sparse, sparse_bound, sparse_payload
from aiotsim.compress.sparsify import ValueDtype, exact_topk_mask, k_of, mask_indices, round_values, value_dtype_opt
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
class DeepGradientCompression(Codec[DGCState]):
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

    def _select(self, mag: torch.Tensor, k: int, gen: torch.Generator) -> torch.Tensor:
        """Indices (ascending) of the entries of ``mag`` ([n]) passing the sampled threshold."""
        n = mag.numel()
        if k >= n:
            return torch.arange(n, device=mag.device)
        m = max(_MIN_SAMPLE, math.ceil(self.params.sample_ratio * n))
        if m >= n:  # small layer: the exact top-k is as cheap as sampling
            return mask_indices(exact_topk_mask(mag, k), k)
        pos = torch.randint(0, n, (m,), generator=gen, device=gen.device).to(mag.device)  # [m]
        sample = mag[pos]
        k_sample = max(1, math.ceil(m * k / n))  # the same density in the sample
        thr = torch.topk(sample, k_sample, sorted=False).values.min()
        idx = torch.nonzero(mag >= thr).reshape(-1)  # [c] ascending, c >= 1
        if idx.numel() > self.params.fallback_factor * k:
            idx = idx[exact_topk_mask(mag[idx], k)]
        return idx

    def _feedback_input(self, grad: torch.Tensor, state: DGCState) -> torch.Tensor:
        """Local clipping, then momentum correction: the velocity ``u <- m u + g`` (fp32, kept in
        the state) is what error feedback accumulates into ``v``."""
        g = as_float(grad)
        if self.params.clip_norm > 0 and g.numel():
            norm = float(torch.linalg.vector_norm(g))
            if norm > self.params.clip_norm:
                g = g * (self.params.clip_norm / norm)
        state.momentum = momentum_velocity(g, state.momentum, self.params.momentum)
        return state.momentum

    def _encode(
        self, acc: torch.Tensor, grad: torch.Tensor, layer: LayerInfo, state: DGCState
    ) -> tuple[Payload, Sent | None]:
        flat = acc.reshape(-1)  # [n] fp32: v + u, the accumulated velocity
        n = flat.numel()
        k = k_of(1.0 - self.current_sparsity(state), n)
        idx = self._select(flat.abs(), k, state.generator)
        values = round_values(flat[idx], self.params.value_dtype)
        if state.momentum is not None:
            state.momentum.view(-1)[idx] = 0.0  # momentum factor masking
        # the role then keeps v <- v - sent (0 where sent)
        return sparse_payload(idx, values, n, self.params.value_dtype, ascending=True), Sent.sparse(idx, values)

    def message_bound(self, layer: LayerInfo) -> int:
        """The most :meth:`_select` passes: at the lowest sparsity (the warm-up's first stage), k
        or up to ``fallback_factor`` x k through the sampled threshold (more: the exact k)."""
        n, p = layer.numel, self.params
        lowest = min(p.sparsity, WARMUP_SPARSITIES[0]) if p.warmup_steps > 0 else p.sparsity
        k = k_of(1.0 - lowest, n)
        return sparse_bound(n, min(n, max(k, math.floor(p.fallback_factor * k))), p.value_dtype)

    def decode(self, payload: Payload, layer: LayerInfo) -> torch.Tensor:
        return decode_sparse(payload, layer, self.params.value_dtype)
