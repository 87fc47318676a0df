"""Accounting: traffic and energy per metrics row, running totals, the summary, and where they go.

Bytes are counted when a transfer is *dispatched* (a downlink that waits for its backhaul copy is
counted at once), into the current :class:`Window`; a metrics row takes the window and starts a
new one, and adds it to the run's :class:`Totals`. At the end the totals and the nodes' energy
meters become the :class:`~aiotsim.records.RunSummary`.

Rows, evaluations, the trace and the summary leave the simulation through a :class:`RunSink`: the
simulation never writes files itself (``aiotsim.results.store.RunWriter`` is the sink that writes
a run directory; a test may collect rows in memory).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from aiotsim._version import __version__
from aiotsim.config import Scenario
from aiotsim.records import RunSummary
from aiotsim.sim.energy import EnergyMeter


class RunSink(Protocol):
    """Where a run's records go, as they are produced."""

    def write_metrics(self, row: dict[str, Any]) -> None:
        """One iteration's row (column -> value, in column order)."""

    def write_eval(self, row: dict[str, Any]) -> None:
        """One evaluation's row."""

    def write_trace(self, events: Iterable[dict[str, Any]]) -> None:
        """The run's Chrome/Perfetto trace events, once, at the end (made as they are read)."""

    def finish(self, summary: dict[str, Any]) -> Any:
        """The summary, once, last."""


@dataclass
class Window:
    """Traffic and energy since the last metrics row (counted when a send starts)."""

    bytes_up: int = 0  # payload bytes
    bytes_down: int = 0
    wire_up: float = 0.0  # wire bytes (payload + headers + expected retransmissions)
    wire_down: float = 0.0
    energy_j: float = 0.0  # charged to the sensor nodes, J


@dataclass
class Totals:
    """Running sums over the run, for the summary."""

    bytes_up: int = 0
    bytes_down: int = 0
    wire_up: float = 0.0
    wire_down: float = 0.0
    node_bytes_up: int = 0  # payload bytes of the sensor nodes' own uploads
    dense_up: int = 0  # what those uploads would have been as dense fp32
    compute_s: float = 0.0
    encode_s: float = 0.0
    decode_s: float = 0.0
    comm_s: float = 0.0
    agg_bytes: int = 0
    samples: int = 0
    iterations: int = 0
    dropped: int = 0  # uploads that arrived too late and were discarded (partial, late = drop)
    staleness_sum: float = 0.0
    contributions: int = 0
    evals: list[tuple[int, float, float, float]] = field(default_factory=list)  # (it, t, acc, loss)


def mean(xs: list[float]) -> float:
    """Arithmetic mean; 0.0 for an empty list."""
    return sum(xs) / len(xs) if xs else 0.0


@dataclass
class RunFacts:
    """What the summary reports about the run besides its totals."""

    sim_time_s: float
    meters: list[EnergyMeter]  # per node, in node order
    stragglers: list[int]
    model_params: int
    flops_per_batch: float
    wall_s: float
    device: str
    model: str | None = None  # model name reported (None: the scenario's model.name)
    dataset: str | None = None  # data set name reported (None: the scenario's data.dataset)
    ns3: dict[str, Any] | None = None  # the ns-3 engine's measurements (Ns3Network.facts)


def energy_breakdown(meters: list[EnergyMeter]) -> dict[str, float]:
    """The nodes' energy by kind, J: ``compute``, ``radio_tx``, ``radio_rx``, ``idle``."""
    return {
        "compute": sum(m.compute_j for m in meters),
        "radio_tx": sum(m.tx_j for m in meters),
        "radio_rx": sum(m.rx_j for m in meters),
        "idle": sum(m.idle_j for m in meters),
    }


def summarize(s: Scenario, t: Totals, facts: RunFacts, status: str, reason: str | None) -> RunSummary:
    """The run's summary. Closes the energy meters (idle energy up to the end of the run)."""
    sim_time = facts.sim_time_s
    meters = facts.meters
    for m in meters:
        m.close(sim_time, s.energy.include_idle)
    evals = t.evals
    target = s.training.target_accuracy
    iters = max(t.iterations, 1)

    def share(x: float) -> float | None:
        return x / sim_time if sim_time > 0 else None

    return RunSummary(
        complete=status == "complete",
        status=status,
        reason=reason,
        scenario=s.scenario.name,
        compressor=s.compressor.name,
        compressor_params=dict(s.compressor.params),
        topology=s.network.topology,
        mode=s.training.mode,
        iterations=t.iterations,
        nodes=len(meters),
        seed=s.scenario.seed,
        batch_size=s.data.batch_size,
        sim_time_s=sim_time,
        mean_iter_time_s=sim_time / iters if t.iterations else None,
        throughput_samples_per_s=t.samples / sim_time if sim_time > 0 else None,
        bytes_up=t.bytes_up,
        bytes_down=t.bytes_down,
        wire_bytes_up=t.wire_up,
        wire_bytes_down=t.wire_down,
        compression_ratio=t.dense_up / t.node_bytes_up if t.node_bytes_up else None,
        mean_agg_bytes=t.agg_bytes / iters if t.iterations else None,
        compute_share=share(t.compute_s),
        encode_share=share(t.encode_s),
        decode_share=share(t.decode_s),
        comm_share=share(t.comm_s),
        mean_staleness=t.staleness_sum / t.contributions if t.contributions else 0.0,
        dropped_uploads=t.dropped,
        final_accuracy=evals[-1][2] if evals else None,
        final_eval_loss=evals[-1][3] if evals else None,
        best_accuracy=max(e[2] for e in evals) if evals else None,
        target_accuracy=target,
        time_to_accuracy_s=next((time_s for _, time_s, acc, _ in evals if acc >= target), None),
        energy_j=sum(m.total_j for m in meters),
        energy_per_node_j=[round(m.total_j, 9) for m in meters],
        energy_breakdown_j=energy_breakdown(meters),
        stragglers=facts.stragglers,
        model=facts.model or s.model.name,
        dataset=facts.dataset or s.data.dataset,
        model_params=facts.model_params,
        flops_per_batch=facts.flops_per_batch,
        wall_time_s=facts.wall_s,
        aiotsim_version=__version__,
        torch_version=torch.__version__,
        device=facts.device,
        ns3=facts.ns3,
    )


__all__ = ["RunSink", "Window", "Totals", "RunFacts", "summarize", "energy_breakdown", "mean"]
