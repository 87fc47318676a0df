"""What a run passes around: messages to aggregators, applied steps, and each node's record.

Kept apart from :mod:`aiotsim.sim.world` (which re-exports them) so that the world stays about
the cluster itself.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from aiotsim.compress.base import Payload
from aiotsim.learn.compute import ComputeModel
from aiotsim.sim.energy import EnergyMeter
from aiotsim.sim.learning import LocalState
from aiotsim.sim.topologies import NodeSpec


@dataclass
class Upload:
    """One message arriving at an aggregator: a node's gradient, or a gateway's average."""

    source: str  # vertex that sent it
    nodes: list[int]  # sensor nodes whose gradients it carries
    version: int  # model version the gradients were computed on
    payloads: list[Payload]  # one per layer
    losses: list[float]  # training loss per contributing node
    compute_s: list[float]  # simulated compute time per contributing node, s
    encode_s: list[float]  # simulated encode time per contributing node, s
    dense: bool = False  # payloads are dense fp32 (gateway_mode = "dense")


@dataclass
class Applied:
    """An aggregation the server has applied, waiting for its metrics row."""

    iteration: int
    uploads: list[Upload]
    decode_s: float  # simulated decode + aggregate time, s
    agg_nnz: int
    agg_bytes: int


@dataclass
class NodeState:
    """What the simulation tracks about one sensor node between rounds."""

    spec: NodeSpec
    compute: ComputeModel
    energy: EnergyMeter
    rng: np.random.Generator  # availability and transient stragglers
    local: LocalState  # data stream, codec states, momentum
    held_version: int = 0  # model version the node holds
    dispatched_version: int = 0  # version of its latest dispatch (held once the download arrives)
    busy: bool = False  # dispatched and its upload not yet arrived
    online: bool = True


__all__ = ["Upload", "Applied", "NodeState"]
