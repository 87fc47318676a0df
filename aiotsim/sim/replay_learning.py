"""The learning of a replayed run: no model, no data, only the recorded run's constants.

A replay (:mod:`aiotsim.replaying`) drives the same :class:`~aiotsim.sim.world.Cluster` and
strategies as a run, with a :class:`ReplayLearning` in place of :class:`~aiotsim.sim.learning.Learning`.
Its methods do no work and return empty values (no tensors); the numbers the clock needs are handed back
by the :class:`~aiotsim.sim.tape.Tape` at the points where the simulation reads them. So a replay
touches no tensor: its cost is the SimPy events and the network.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from aiotsim.compress.base import Codec, CodecState, Payload
from aiotsim.compress.registry import build_codec
from aiotsim.config import Scenario
from aiotsim.sim.learning import Gradient, LocalState, Update


@dataclass(frozen=True)
class _Shard:
    """What a replay reads of a node's batch stream: its shard's size (federated local epochs)."""

    n: int
    batch_size: int


class _NoAggregation:
    """An aggregation that combines nothing (its cost comes from the tape)."""

    def take(self, upload: Any) -> None:
        """Accept an upload; nothing is decoded."""

    def take_all(self, uploads: Any) -> _NoAggregation:
        return self

    def add(self, payloads: Any, weight: int, dense: bool = False, key: int | None = None) -> None:
        """Accept a message; nothing is decoded."""

    def result(self) -> tuple[list[torch.Tensor], float]:
        return [], 0.0


class ReplayLearning:
    """Stands in for :class:`~aiotsim.sim.learning.Learning` in a replay.

    Parameters
    ----------
    scenario : Scenario
        The scenario being replayed (its codec is built for its declared costs and roles).
    meta : dict
        The recorded run's constants (:data:`aiotsim.sim.tape.META_KEYS`).
    """

    batched = None  # no batched gradient passes: every value comes from the tape
    trimmer = None
    dense = None
    layers: list[Any] = []  # no layers: observing the global update (codec state) does nothing
    layer_codecs: list[Codec] = []
    params: list[torch.Tensor] = []

    def __init__(self, scenario: Scenario, meta: dict[str, Any]) -> None:
        self.sc = scenario
        self.meta = meta
        self.device = torch.device(meta["device"])
        self.model_name: str = meta["model"]
        self.dataset_name: str = meta["dataset"]
        self.elements: int = meta["elements"]
        self.dense_model_bytes: int = meta["dense_model_bytes"]
        self.flops_per_batch: float = meta["flops_per_batch"]
        self.aggregation_mode: str = meta["aggregation_mode"]
        self.shards = [range(n) for n in meta["shard_sizes"]]  # only their lengths are read
        c = scenario.compressor
        self.codec: Codec = build_codec(c.name, c.params, seed=scenario.scenario.seed)
        self.node_momentum = 0.0

    def new_states(self, owner: int) -> list[CodecState]:
        return []

    def local_state(self, i: int) -> LocalState:
        shard = _Shard(self.meta["shard_sizes"][i], self.sc.data.batch_size)
        return LocalState(stream=shard, states=[])  # type: ignore[arg-type]

    def gradient(self, local: LocalState, params: Any) -> Gradient:
        return Gradient([], 0.0, 0.0, 0.0, None)

    def encode(self, grads: Any, states: Any, sq: Any = None, codecs: Any = None) -> tuple[list[Payload], float]:
        return [], 0.0

    def mask_momentum(self, local: LocalState, payloads: Any) -> float:
        return 0.0

    def aggregation(self) -> _NoAggregation:
        return _NoAggregation()

    def decode_aggregate(self, messages: Any, weights: Any, dense: Any, keys: Any) -> tuple[list[torch.Tensor], float]:
        return [], 0.0

    def prepare_update(self, agg: Any) -> Update:
        return Update([], 0, 0, 0)

    def aggregated_size(self, applied: Any) -> tuple[int, int]:
        return 0, 0

    def step(self, update: Any) -> None:
        """The step is not taken: what it changes is in the record."""

    def snapshot(self) -> None:
        return None

    def evaluate(self) -> tuple[float, float]:
        return 0.0, 0.0


__all__ = ["ReplayLearning"]
