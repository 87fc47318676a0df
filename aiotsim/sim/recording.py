"""Recording a run's timing: what a :class:`~aiotsim.sim.tape.Tape` is saved with.

The tape holds the per-event values; :func:`timing_meta` adds the run's constants that a
:class:`~aiotsim.sim.replay_learning.ReplayLearning` is built from (the inverse of its
constructor), and :func:`save_timing` writes both as the run directory's ``timing.npz``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aiotsim.sim.replay_rule import learning_key
from aiotsim.sim.tape import TIMING_NAME
from aiotsim.sim.world import Cluster


def timing_meta(c: Cluster) -> dict[str, Any]:
    """The run's constants a replay needs besides the tape (:data:`~aiotsim.sim.tape.META_KEYS`)."""
    learning = c.learning
    return {
        "learning_key": learning_key(c.sc),
        "device": str(c.device),
        "model": c.model_name,
        "dataset": c.dataset_name,
        "elements": learning.elements,
        "dense_model_bytes": learning.dense_model_bytes,
        "flops_per_batch": learning.flops_per_batch,
        "encode_flops_per_element": learning.codec.encode_flops_per_element,
        "aggregation_mode": learning.aggregation_mode,
        "shard_sizes": [len(sh) for sh in learning.shards],
    }


def save_timing(c: Cluster, out_dir: str | Path) -> None:
    """Write the run's timing record into its run directory (``timing.npz``)."""
    c.tape.save(Path(out_dir) / TIMING_NAME, timing_meta(c))


__all__ = ["timing_meta", "save_timing"]
