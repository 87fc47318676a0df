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
v_before + u``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from aiotsim.compress import memory
from aiotsim.compress.base import Codec, CodecState, LayerInfo, Payload, as_float
from aiotsim.compress.registry import register
from aiotsim.compress.sparse import decode_sparse, sparse_payload
from aiotsim.compress.sparsify import (
    ValueDtype,
    exact_topk_mask,
    finish_sparse,
    k_of,
    round_values,
    value_dtype_problems,
)
from aiotsim.errors import CodecError

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
class DeepGradientCompression(Codec):
    """DGC: momentum correction, local clipping, momentum factor masking, warm-up, sampled threshold."""

    @dataclass(frozen=True)
    class Params:
        sparsity: float = field(default=0.999, metadata={"help": "final fraction of elements not sent, in [0, 1)"})
        momentum: float = field(default=0.9, metadata={"help": "momentum factor m of the local momentum correction"})
        warmup_steps: int = field(
            default=100, metadata={"help": "encode calls of sparsity warm-up (75% .. 99.6% in 4 stages); 0 = none"}
        )
        sample_ratio: float = field(
            default=0.01, metadata={"help": "fraction of elements sampled to estimate the threshold"}
        )
        fallback_factor: float = field(
            default=1.3, metadata={"help": "re-select the exact top-k when more than this times k pass the threshold"}
        )
        clip_norm: float = field(
            default=0.0, metadata={"help": "local gradient clipping: max L2 norm of a layer's gradient; 0 = off"}
        )
        value_dtype: ValueDtype = field(default="fp32", metadata={"help": "precision of the sent values: fp32 or fp16"})

    name = "dgc"
    summary = "Deep Gradient Compression: momentum correction and masking, clipping, warm-up, sampled threshold"
    has_residual = True
    sparse = True
    absorbs_momentum = True
    encode_flops_per_element = 12.0

    def validate(self) -> list[str]:
        p = self.params
        problems = []
        if not 0.0 <= p.sparsity < 1.0:
            problems.append(f"sparsity(={p.sparsity}) must be in [0, 1)")
        if not 0.0 <= p.momentum < 1.0:
            problems.append(f"momentum(={p.momentum}) must be in [0, 1)")
        if p.warmup_steps < 0:
            problems.append(f"warmup_steps(={p.warmup_steps}) must be >= 0")
        if not 0.0 < p.sample_ratio <= 1.0:
            problems.append(f"sample_ratio(={p.sample_ratio}) must be in (0, 1]")
        if not p.fallback_factor >= 1.0:
            problems.append(f"fallback_factor(={p.fallback_factor}) must be >= 1")
        if not (p.clip_norm >= 0.0 and math.isfinite(p.clip_norm)):
            problems.append(f"clip_norm(={p.clip_norm}) must be a finite number >= 0")
        return problems + value_dtype_problems(p.value_dtype)

    def init_state(self, layer: LayerInfo, device: torch.device, node: int) -> DGCState:
        return DGCState(generator=self.make_generator(layer, device, node))

    def current_sparsity(self, state: CodecState) -> float:
        """The sparsity the next :meth:`encode` on ``state`` will use."""
        return warmup_sparsity(state.step, self.params.warmup_steps, self.params.sparsity)

    def _select(self, mag: torch.Tensor, k: int, gen: torch.Generator) -> torch.Tensor:
        """Indices (ascending) of the entries of ``mag`` ([n]) passing the sampled threshold."""
        n = mag.numel()
        if k >= n:
            return torch.arange(n, device=mag.device)
        m = max(_MIN_SAMPLE, math.ceil(self.params.sample_ratio * n))
        if m >= n:  # small layer: the exact top-k is as cheap as sampling
            return torch.nonzero(exact_topk_mask(mag, k)).reshape(-1)
        pos = torch.randint(0, n, (m,), generator=gen, device=gen.device).to(mag.device)  # [m]
        sample = mag[pos]
        k_sample = max(1, math.ceil(m * k / n))  # the same density in the sample
        thr = torch.topk(sample, k_sample, sorted=False).values.min()
        idx = torch.nonzero(mag >= thr).reshape(-1)  # [c] ascending, c >= 1
        if idx.numel() > self.params.fallback_factor * k:
            idx = idx[exact_topk_mask(mag[idx], k)]
        return idx

    def encode(self, grad: torch.Tensor, layer: LayerInfo, state: CodecState) -> Payload:
        if not isinstance(state, DGCState):
            raise CodecError(f"dgc needs the state from its own init_state(), got {type(state).__name__}")
        g = as_float(grad)
        if self.params.clip_norm > 0 and g.numel():
            norm = float(torch.linalg.vector_norm(g))
            if norm > self.params.clip_norm:
                g = g * (self.params.clip_norm / norm)
        u = g.clone() if state.momentum is None else state.momentum.mul_(self.params.momentum).add_(g)
        acc = memory.compensate(u, state)  # v + u: the accumulated velocity, fp32
        flat = acc.view(-1)  # [n]
        n = flat.numel()
        k = k_of(1.0 - self.current_sparsity(state), n)
        idx = self._select(flat.abs(), k, state.generator)
        values = round_values(flat[idx], self.params.value_dtype)
        finish_sparse(acc, idx, values, state, keep_residual=True)  # v <- v - sent (0 where sent)
        u.view(-1)[idx] = 0.0  # momentum factor masking
        state.momentum = u
        return sparse_payload(idx, values, n, self.params.value_dtype)

    def decode(self, payload: Payload, layer: LayerInfo) -> torch.Tensor:
        return decode_sparse(payload, layer, self.params.value_dtype)
