"""Aggregation-aware sparsification (Wang, Liu, Wu, ICNCC 2018, "Communication usage optimization of
gradient sparsification with aggregation in deep learning"; seed 001).

With a parameter server, each worker uploads a sparse gradient of ``k`` entries, but the server
sends back the *aggregate*, whose size is the union of the workers' index sets: up to ``W * k``
entries. The paper observes that only a few gradients are significantly large and that they stay
large for a short time, and lets workers choose *which* large gradients to send so that the union
shrinks, at an unchanged per-worker ``k``.

Per node and layer (error feedback on by default, as in top-k; ``error_feedback = false`` drops the
unsent entries, the paper leaves it open)::

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
from dataclasses import dataclass
from typing import Literal

import torch

from aiotsim.compress.base import Codec, CodecState, FeedbackParams, LayerInfo, Payload
from aiotsim.compress.memory import Sent
from aiotsim.compress.registry import register
from aiotsim.compress.sparse import decode_sparse, sparse_payload
from aiotsim.compress.sparsify import ValueDtype, k_of, round_values, topk_indices, value_dtype_opt
from aiotsim.schema import fraction, non_negative, opt, unit_interval

Metric = Literal["magnitude", "global", "persistence", "consensus"]


def _closed_unit(v: float) -> str | None:
    """Range check: ``0 <= v <= 1``."""
    return None if 0 <= v <= 1 else f"must be in [0, 1], got {v!r}"


@dataclass
class AggAwareState(CodecState):
    """Per-node, per-layer state: ``globalness`` is p, learned from the server's aggregates."""

    globalness: torch.Tensor | None = None  # [n] fp32 in [0, 1]
    rounds_observed: int = 0  # statistics: observe_global() calls


@register
class AggregationAware(Codec[AggAwareState]):
    """Seed 001: top-k re-ranked toward indices in recent aggregated unions, to shrink the union."""

    @dataclass(frozen=True)
    class Params(FeedbackParams):
        ratio: float = opt(0.01, "fraction of elements each worker sends, k = ceil(ratio * n)", check=unit_interval)
        metric: Metric = opt(
            "global",
            "magnitude (plain top-k), global (last union), persistence (decayed union count), "
            "consensus (last aggregate's normalized magnitude)",
        )
        boost: float = opt(2.0, "score = |acc| * (1 + boost * p); p = how global an index has been", check=non_negative)
        decay: float = opt(
            0.5, "persistence: p <- decay * p + (1 - decay) * [index in union], in [0, 1)", check=fraction
        )
        reserve: float = opt(
            1.0,
            "fraction of k chosen by the boosted score; the other slots go to the plain top |acc| "
            "first, so locally large entries are never starved (0: plain top-k, 1: all boosted)",
            check=_closed_unit,
        )
        value_dtype: ValueDtype = value_dtype_opt()

    name = "agg-aware"
    summary = "aggregation-aware top-k (seed 001): prefer recently global indices so the server's union shrinks"
    State = AggAwareState
    has_residual = True
    sparse = True
    encode_flops_per_element = 10.0

    def scores(self, acc: torch.Tensor, state: AggAwareState) -> torch.Tensor:
        """Selection scores ``[n]`` of the accumulated gradient under the configured metric."""
        mag = acc.reshape(-1).abs()
        p = state.globalness
        if self.params.metric == "magnitude" or p is None or self.params.boost == 0:
            return mag
        return mag * (1.0 + self.params.boost * p.to(mag.device))

    def select(self, flat: torch.Tensor, state: AggAwareState, k: int) -> torch.Tensor:
        """The ``k`` indices sent (ascending): ``k - ceil(reserve * k)`` by ``|acc|`` alone, the
        other ``ceil(reserve * k)`` by the boosted score among the rest (``reserve`` 1: all)."""
        scores = self.scores(flat, state)
        boosted = math.ceil(self.params.reserve * k)
        if boosted >= k or state.globalness is None:
            return topk_indices(scores, k)
        own = topk_indices(flat.abs(), k - boosted)  # [k - boosted] locally largest
        rest = torch.ones_like(flat, dtype=torch.bool)
        rest[own] = False
        rest_idx = torch.nonzero(rest, as_tuple=False).reshape(-1)  # [n - k + boosted]
        extra = rest_idx[topk_indices(scores[rest_idx], boosted)]
        return torch.sort(torch.cat([own, extra])).values

    def _encode(
        self, acc: torch.Tensor, grad: torch.Tensor, layer: LayerInfo, state: AggAwareState
    ) -> tuple[Payload, Sent | None]:
        flat = acc.reshape(-1)  # [n] fp32: r + g (or g without error feedback)
        n = flat.numel()
        idx = self.select(flat, state, k_of(self.params.ratio, n))  # [k]
        values = round_values(flat[idx], self.params.value_dtype)
        return sparse_payload(idx, values, n, self.params.value_dtype), Sent.sparse(idx, values)

    def decode(self, payload: Payload, layer: LayerInfo) -> torch.Tensor:
        return decode_sparse(payload, layer, self.params.value_dtype)

    def observe_global(self, update: torch.Tensor, layer: LayerInfo, state: CodecState) -> None:
        """Learn the union from the server's aggregated ``update`` (its nonzero pattern)."""
        st = self.typed_state(state)
        in_union = (update.reshape(-1) != 0).to(torch.float32)  # [n] 1 on the union
        if self.params.metric == "consensus":
            mag = update.reshape(-1).abs().to(torch.float32)
            top = float(mag.max()) if mag.numel() else 0.0
            st.globalness = mag / top if top > 0 else mag
        elif self.params.metric == "persistence" and st.globalness is not None:
            st.globalness.mul_(self.params.decay).add_(in_union, alpha=1.0 - self.params.decay)
        elif self.params.metric == "persistence":
            st.globalness = in_union * (1.0 - self.params.decay)
        else:
            st.globalness = in_union
        st.rounds_observed += 1
