"""Aggregation-aware sparsification (Wang, Liu, Wu, ICNCC 2018, "Communication usage optimization of
gradient sparsification with aggregation in deep learning"; seed 001).

With a parameter server, each worker uploads a sparse gradient of ``k`` entries, but the server
sends back the *aggregate*, whose size is the union of the workers' index sets: up to ``W * k``
entries. The paper observes that only a few gradients are significantly large and that they stay
large for a short time, and lets workers choose *which* large gradients to send so that the union
shrinks, at an unchanged per-worker ``k``.

Per node and layer (error feedback on, as in top-k)::

    acc   = grad + residual
    score = |acc| * (1 + boost * p)        p in [0, 1]: how "global" each index has been
    send the k = ceil(ratio * n) entries of largest score (ties: lower index), their exact values
    residual = acc - sent

and after the server's aggregated update comes back, :meth:`observe_global` reads its nonzero
pattern (the union ``U``) and updates ``p``. Selection metrics (``metric``):

* ``"magnitude"``: ``p = 0``, plain top-k; the reference, every worker picks independently.
* ``"global"``: ``p = 1`` on the previous round's union, else 0: prefer indices that were globally
  selected last round (they are likely still large for the other workers too).
* ``"persistence"``: ``p <- decay * p + (1 - decay) * 1[i in U]``, an exponentially decayed
  frequency of global selection over recent rounds; since large gradients persist for a short
  time, indices selected repeatedly are the ones every worker will want again.
* ``"consensus"``: ``p = |U_i| / max |U|``, the previous aggregate's normalized magnitude: an index
  sent by every worker aggregates to about W times one sent by a single worker, so workers converge
  on the indices they agreed on ("globally large in the previous rounds").

On 4 workers sharing 60 persistently large coordinates (``tests/test_codecs_sparse.py``), k = 20 of
2,000 each, the union over rounds 2-6 is about 15% (global, boost 2) to 20% (consensus or global,
boost 4) smaller than independent top-k. Error feedback bounds the gain: a coordinate a worker skips
keeps growing in its residual until it is sent, so the metrics mostly synchronize *when* workers
send a coordinate rather than avoid sending it.

The boost only re-ranks: an index enters the message only if its magnitude is within a factor
``1 + boost`` of the plain top-k's, so workers trade a little magnitude for overlap. The union size
at the server (seed 001's metric) is measured from the payloads' index sets
(:func:`aiotsim.compress.sparse.payload_indices`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import torch

from aiotsim.compress import memory
from aiotsim.compress.base import Codec, CodecState, LayerInfo, Payload
from aiotsim.compress.registry import register
from aiotsim.compress.sparse import decode_sparse, sparse_payload
from aiotsim.compress.sparsify import (
    ValueDtype,
    finish_sparse,
    k_of,
    ratio_problems,
    round_values,
    topk_indices,
    value_dtype_problems,
)
from aiotsim.errors import CodecError

Metric = Literal["magnitude", "global", "persistence", "consensus"]


@dataclass
class AggAwareState(CodecState):
    """Per-node, per-layer state: ``globalness`` is p, learned from the server's aggregates."""

    globalness: torch.Tensor | None = None  # [n] fp32 in [0, 1]
    rounds_observed: int = 0  # statistics: observe_global() calls


@register
class AggregationAware(Codec):
    """Seed 001: top-k re-ranked toward indices in recent aggregated unions, to shrink the union."""

    @dataclass(frozen=True)
    class Params:
        ratio: float = field(
            default=0.01, metadata={"help": "fraction of elements each worker sends, k = ceil(ratio * n)"}
        )
        metric: Metric = field(
            default="global",
            metadata={
                "help": "magnitude (plain top-k), global (last union), persistence (decayed union count), "
                "consensus (last aggregate's normalized magnitude)"
            },
        )
        boost: float = field(
            default=2.0, metadata={"help": "score = |acc| * (1 + boost * p); p = how global an index has been"}
        )
        decay: float = field(
            default=0.5, metadata={"help": "persistence: p <- decay * p + (1 - decay) * [index in union], in [0, 1)"}
        )
        value_dtype: ValueDtype = field(default="fp32", metadata={"help": "precision of the sent values: fp32 or fp16"})

    name = "agg-aware"
    summary = "aggregation-aware top-k (seed 001): prefer recently global indices so the server's union shrinks"
    has_residual = True
    sparse = True
    encode_flops_per_element = 10.0

    def validate(self) -> list[str]:
        p = self.params
        problems = ratio_problems("ratio", p.ratio)
        if p.metric not in ("magnitude", "global", "persistence", "consensus"):
            problems.append(f"metric(={p.metric!r}) must be 'magnitude', 'global', 'persistence' or 'consensus'")
        if not (p.boost >= 0 and math.isfinite(p.boost)):
            problems.append(f"boost(={p.boost}) must be a finite number >= 0")
        if not 0.0 <= p.decay < 1.0:
            problems.append(f"decay(={p.decay}) must be in [0, 1)")
        return problems + value_dtype_problems(p.value_dtype)

    def init_state(self, layer: LayerInfo, device: torch.device, node: int) -> AggAwareState:
        return AggAwareState(generator=self.make_generator(layer, device, node))

    def scores(self, acc: torch.Tensor, state: CodecState) -> torch.Tensor:
        """Selection scores ``[n]`` of the accumulated gradient under the configured metric."""
        mag = acc.reshape(-1).abs()
        p = getattr(state, "globalness", None)
        if self.params.metric == "magnitude" or p is None or self.params.boost == 0:
            return mag
        return mag * (1.0 + self.params.boost * p.to(mag.device))

    def encode(self, grad: torch.Tensor, layer: LayerInfo, state: CodecState) -> Payload:
        acc = memory.compensate(grad, state)  # fp32, shape of grad
        flat = acc.view(-1)  # [n]
        n = flat.numel()
        idx = topk_indices(self.scores(acc, state), k_of(self.params.ratio, n))  # [k]
        values = round_values(flat[idx], self.params.value_dtype)
        finish_sparse(acc, idx, values, state, keep_residual=True)
        return sparse_payload(idx, values, n, self.params.value_dtype)

    def decode(self, payload: Payload, layer: LayerInfo) -> torch.Tensor:
        return decode_sparse(payload, layer, self.params.value_dtype)

    def observe_global(self, update: torch.Tensor, layer: LayerInfo, state: CodecState) -> None:
        """Learn the union from the server's aggregated ``update`` (its nonzero pattern)."""
        if not isinstance(state, AggAwareState):
            raise CodecError(f"agg-aware needs the state from its own init_state(), got {type(state).__name__}")
        in_union = (update.reshape(-1) != 0).to(torch.float32)  # [n] 1 on the union
        if self.params.metric == "consensus":
            mag = update.reshape(-1).abs().to(torch.float32)
            top = float(mag.max()) if mag.numel() else 0.0
            state.globalness = mag / top if top > 0 else mag
        elif self.params.metric == "persistence" and state.globalness is not None:
            state.globalness.mul_(self.params.decay).add_(in_union, alpha=1.0 - self.params.decay)
        elif self.params.metric == "persistence":
            state.globalness = in_union * (1.0 - self.params.decay)
        else:
            state.globalness = in_union
        state.rounds_observed += 1
