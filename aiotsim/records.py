"""Records: what a run reports, declared once.

A run leaves one :class:`MetricsRow` per iteration (``metrics.csv``), one :class:`EvalRow` per
evaluation (``evals.csv``) and one :class:`RunSummary` (``summary.json``). The CSV columns
(:data:`METRIC_FIELDS`, :data:`EVAL_FIELDS`) and the summary's fields, in their order, are the
fields of these dataclasses: adding a column means adding a field here, and the simulation (which
fills the records) and the results package (which writes and reads them) follow.

This module sits at the bottom of the package beside :mod:`aiotsim.schema` and
:mod:`aiotsim.errors`, so that ``sim`` and ``results`` can both import it without depending on each
other. Values are kept exactly as the simulation computed them (an ``int`` stays an ``int``), since
the CSV text is their ``str``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any


def _as_dict(record: Any) -> dict[str, Any]:
    """Field name -> value in declaration order, values as they are (no deep copy)."""
    return {f.name: getattr(record, f.name) for f in fields(record)}


@dataclass
class MetricsRow:
    """One iteration of a run: a row of ``metrics.csv``."""

    iteration: int
    sim_time_s: float  # simulated time at the end of the iteration, s
    iter_time_s: float  # simulated duration of the iteration, s
    loss: float  # mean training loss over the nodes that contributed
    bytes_up: int  # payload bytes, all nodes -> aggregator
    bytes_down: int  # payload bytes, aggregator -> all nodes
    wire_bytes_up: float  # payload + per-packet headers (+ expected retransmissions)
    wire_bytes_down: float
    compute_s: float  # mean simulated gradient computation time per node, s
    encode_s: float  # mean simulated encode time per node, s
    decode_s: float  # simulated server decode + aggregate + step time, s
    comm_s: float  # iteration time not spent computing/encoding/decoding on the critical path, s
    agg_nnz: int  # elements of the aggregated update (sparse codecs: the union of the index sets)
    agg_bytes: int  # its size as a message (sparse codecs: the union coded sparsely, seed 001's metric)
    contributors: int  # gradients aggregated this iteration
    staleness: float  # mean staleness (model versions) of the aggregated gradients
    energy_j: float  # energy charged to the sensor nodes since the previous row, J

    def as_dict(self) -> dict[str, Any]:
        """Column name -> value, in column order."""
        return _as_dict(self)


@dataclass
class EvalRow:
    """One evaluation of the global model on the held-out split: a row of ``evals.csv``."""

    iteration: int
    sim_time_s: float  # simulated time of the evaluation, s
    accuracy: float  # fraction of the test samples classified correctly
    loss: float  # mean test loss

    def as_dict(self) -> dict[str, Any]:
        """Column name -> value, in column order."""
        return _as_dict(self)


@dataclass
class RunSummary:
    """A run's ``summary.json`` (without ``schema_version``, which the writer adds first).

    ``reason`` explains a run that stopped early on its own (``status`` ``"diverged"`` or
    ``"stalled"``); it is left out of the JSON when there is none, so complete runs keep the
    fields they always had.
    """

    complete: bool
    status: str  # "complete", "diverged", "stalled", "interrupted" or "error: ..."
    reason: str | None
    scenario: str
    compressor: str
    compressor_params: dict[str, Any]
    topology: str
    mode: str
    iterations: int  # iterations completed (metrics rows written)
    nodes: int
    seed: int
    batch_size: int
    sim_time_s: float
    mean_iter_time_s: float | None
    throughput_samples_per_s: float | None
    bytes_up: int
    bytes_down: int
    wire_bytes_up: float
    wire_bytes_down: float
    compression_ratio: float | None  # dense fp32 bytes / payload bytes of the nodes' own uploads
    mean_agg_bytes: float | None
    compute_share: float | None  # fractions of the simulated time
    encode_share: float | None
    decode_share: float | None
    comm_share: float | None
    mean_staleness: float
    dropped_uploads: int
    final_accuracy: float | None
    final_eval_loss: float | None
    best_accuracy: float | None
    target_accuracy: float
    time_to_accuracy_s: float | None
    energy_j: float
    energy_per_node_j: list[float]
    energy_breakdown_j: dict[str, float]  # compute, radio_tx, radio_rx, idle
    stragglers: list[int]
    model: str
    dataset: str
    model_params: int
    flops_per_batch: float
    wall_time_s: float  # host seconds (not simulated)
    aiotsim_version: str
    torch_version: str
    device: str
    # engine = "ns3": what ns-3 measured (per link wire bytes, most packets queued, drops;
    # retransmissions), left out of the JSON for the flow engine
    ns3: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        """Field name -> value in field order, ``reason`` and ``ns3`` left out when there is none."""
        out = _as_dict(self)
        for optional in ("reason", "ns3"):
            if out[optional] is None:
                del out[optional]
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunSummary:
        """The summary of a ``summary.json`` (its ``schema_version`` and unknown keys ignored; a
        missing ``reason`` is ``None``)."""
        return cls(**{f.name: data.get(f.name) for f in fields(cls)})


@dataclass
class Progress:
    """What a progress display needs after each iteration, and during a long one (``gradients`` >
    0: the node gradients computed in the iteration under way; the other fields the last row's)."""

    iteration: int  # iterations completed
    total: int  # iterations asked for
    sim_time_s: float
    loss: float
    accuracy: float | None = None
    gradients: int = 0  # > 0: a report within an iteration (see aiotsim.sim.heartbeat)


METRIC_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(MetricsRow))
EVAL_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(EvalRow))
SUMMARY_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(RunSummary))

__all__ = [
    "MetricsRow",
    "EvalRow",
    "RunSummary",
    "Progress",
    "METRIC_FIELDS",
    "EVAL_FIELDS",
    "SUMMARY_FIELDS",
]
