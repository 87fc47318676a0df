"""The world a run happens in: a :class:`Cluster` of nodes, gateways and a server on a network.

Building a :class:`Cluster` turns a scenario into everything a strategy drives:

* sensor nodes (:class:`NodeState`): data stream and codec states (their :class:`LocalState`),
  compute model, energy meter, and a seeded availability chain (on/off with ``dropout_prob`` and
  ``rejoin_prob``, also the source of transient stragglers);
* gateways (their codec states and compute model) and the server (model, optimizer and the real
  computations, all in :class:`~aiotsim.sim.learning.Learning`);
* the SimPy environment, the network, a mailbox per aggregator, the trace, the accounting and
  the progress reports (:mod:`aiotsim.sim.heartbeat`).

Its interface is small: availability, a node's gradient with its simulated cost, traffic
accounting (:meth:`Cluster.send`, :meth:`Cluster.account`), :meth:`Cluster.apply` (decode,
aggregate, step: a SimPy process), :meth:`Cluster.finish_row` / :meth:`Cluster.emit_row` and
:meth:`Cluster.evaluate`. A strategy (:mod:`aiotsim.sim.strategies`) decides the order of events;
the node and gateway processes (:mod:`aiotsim.sim.processes`) move the bytes. The messages and
per-node records it passes around are in :mod:`aiotsim.sim.messages`.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

import numpy as np
import simpy
import torch

from aiotsim.compress.base import CodecState
from aiotsim.config import Scenario
from aiotsim.learn.compute import ComputeModel
from aiotsim.learn.datasets import Dataset
from aiotsim.learn.devices import get_profile, resolve_device
from aiotsim.network.engines import build_network, finish_network
from aiotsim.records import EvalRow, MetricsRow, Progress, RunSummary
from aiotsim.sim.accounting import RunFacts, RunSink, Totals, Window, mean, summarize
from aiotsim.sim.aggregate import Aggregation
from aiotsim.sim.energy import EnergyMeter, get_radio
from aiotsim.sim.fleet import NodeTable
from aiotsim.sim.heartbeat import Heartbeat
from aiotsim.sim.learning import Learning
from aiotsim.sim.messages import Applied, NodeState, Upload
from aiotsim.sim.observe import before_step, observe_global
from aiotsim.sim.replay_learning import ReplayLearning
from aiotsim.sim.stops import Diverged, Stalled, non_finite
from aiotsim.sim.tape import Tape
from aiotsim.sim.topologies import SERVER, NodeSpec, build_topology, node_layout, node_name
from aiotsim.sim.trace import TraceRecorder, kept_nodes

Proc = Generator[simpy.Event, Any, Any]
STALL_RETRIES = 1000  # a run with no node online for this many retry_s periods has stalled


class Cluster:
    """A scenario made runnable: nodes, gateways, server, network, trace and accounting.

    Parameters
    ----------
    scenario : Scenario
        The validated scenario.
    device : str
        ``"auto"``, ``"cpu"`` or ``"cuda"`` (where the real learning runs).
    on_progress : callable, optional
        Called with a :class:`~aiotsim.records.Progress` after every iteration.
    model, data : torch.nn.Module, Dataset, optional
        A ready model (deep-copied) and data set instead of ``model.name``/``data.dataset``.
    replay : (ReplayLearning, Tape), optional
        Replay a recorded run (:mod:`aiotsim.replaying`): no learning, every learning value from
        the tape. Otherwise the run records its tape (:func:`aiotsim.sim.recording.save_timing`).
    """

    def __init__(
        self,
        scenario: Scenario,
        device: str = "auto",
        on_progress: Callable[[Progress], None] | None = None,
        model: torch.nn.Module | None = None,
        data: Dataset | None = None,
        replay: tuple[ReplayLearning, Tape] | None = None,
    ) -> None:
        self.sc = s = scenario
        self.n = s.nodes.count
        self.mode = s.training.mode
        self.layout = node_layout(s)
        # the timing record: written as the run goes (recording), or read back (a replay)
        self.tape = replay[1] if replay else Tape()
        self.learning: Learning | ReplayLearning
        if replay:
            self.learning = replay[0]
            self.device = replay[0].device
            self.model_name, self.dataset_name = replay[0].model_name, replay[0].dataset_name
        else:
            self.device = resolve_device(device)
            self.learning = Learning(s, self.device, [spec.share for spec in self.layout], model, data)
            self.model_name = s.model.name if model is None else type(model).__name__
            self.dataset_name = s.data.dataset if data is None else data.name
        self.heartbeat = Heartbeat(on_progress, s.scenario.iterations, self.learning.trimmer)
        self.nodes = NodeTable(self.n, lambda i: self._node_state(self.layout[i]), eager=self.mode != "federated")
        self.server_compute = ComputeModel(s.nodes.compute_model, get_profile(s.nodes.server_device))
        self.gateway_compute = ComputeModel(s.nodes.compute_model, get_profile(s.nodes.gateway_device))
        self.topology = build_topology(s, self.layout)
        ring = s.network.topology == "ring"
        self.gateways: list[str] = [] if ring else self.topology.gateways
        self.gateway_index = {gw: k for k, gw in enumerate(self.gateways)}  # a gateway's tape owner
        self.start_clock(0.0)
        self.aggregator = {} if ring else {i: self.topology.aggregator_of(node_name(i)) for i in range(self.n)}
        self.gateway_states: dict[str, list[CodecState]] = {
            gw: self.learning.new_states(100_000 + k) for k, gw in enumerate(self.gateways)
        }
        self.trace = TraceRecorder(kept_nodes(self.n, s.scenario.trace_nodes))
        self.totals = Totals()
        self.window = Window()
        self.version = 0  # model version the server holds
        self.snapshots: dict[int, list[torch.Tensor]] = {}  # versions nodes still work on
        self.update_bytes = self.learning.dense_model_bytes  # latest update message, B
        self.last_row_s = 0.0  # simulated time of the latest metrics row
        self.last_activity_s = 0.0  # latest dispatch, upload arrival or row (stall detection)
        # without any node online for this long, no iteration can complete (see check_stall)
        self.stall_limit_s = STALL_RETRIES * s.nodes.retry_s
        self.sink: RunSink | None = None
        # checkpointing (sim/checkpoint.py): called at a strategy's quiescent points
        self.on_checkpoint: Callable[[int, Applied, dict[str, Any]], None] | None = None
        self.resume_point: tuple[int, Applied] | None = None  # (iteration, its applied step)
        self.resume_strategy: dict[str, Any] = {}  # the strategy's own state at that point

    def start_clock(self, now: float) -> None:
        """A fresh SimPy environment starting at ``now`` (s), with its network and mailboxes;
        nothing may be in flight (a new cluster, or a resumed one at a quiescent point)."""
        self.env = simpy.Environment(initial_time=now)
        radios = {node_name(spec.index): spec.radio for spec in self.layout}
        self.net = build_network(self.env, self.topology, self.sc.network, self.sc.scenario.seed, radios)
        self.mailbox: dict[str, simpy.Store] = {v: simpy.Store(self.env) for v in [SERVER, *self.gateways]}

    def _node_state(self, spec: NodeSpec) -> NodeState:
        s = self.sc
        profile = get_profile(spec.device)
        meter = EnergyMeter(profile.power_active_w, profile.power_idle_w, get_radio(spec.radio))
        compute = ComputeModel(s.nodes.compute_model, profile, slowdown=spec.compute_slowdown)
        rng = np.random.default_rng([s.scenario.seed, 0xA11, spec.index])
        return NodeState(spec, compute, meter, rng, self.learning.local_state(spec.index))

    # ---- nodes ---------------------------------------------------------------------------------
    def availability(self, i: int) -> bool:
        """One step of node ``i``'s seeded on/off Markov chain; True if it can work now."""
        st, nd = self.nodes[i], self.sc.nodes
        if nd.dropout_prob == 0.0 and st.online:
            return True
        u = st.rng.random()
        was_online = st.online
        st.online = u >= nd.dropout_prob if was_online else u < nd.rejoin_prob
        if st.online and not was_online and nd.residual_on_rejoin == "reset":
            for state in st.local.states:
                state.residual = None
        return st.online

    def gradient(
        self, i: int, params: list[torch.Tensor] | None
    ) -> tuple[list[torch.Tensor], float, float, list[torch.Tensor] | None]:
        """Node ``i``'s real gradient on its next batch: ``(grads, loss, simulated s, sq grads)``.

        Raises :class:`Diverged` when the loss is not finite.
        """
        st, nd = self.nodes[i], self.sc.nodes
        g = self.learning.gradient(st.local, params)
        loss, wall_s, flops = self.tape.gradient(i, g.loss, g.wall_s, g.flops)
        self.heartbeat.gradient(self.totals.iterations)
        bad = non_finite([loss])
        if bad:
            raise Diverged(f"iteration {self.totals.iterations}: node {i}'s {bad}")
        t = st.compute.compute_time(wall_s, flops)
        if nd.straggler_mode == "transient" and nd.straggler_fraction > 0 and st.rng.random() < nd.straggler_fraction:
            t *= nd.straggler_factor
        return g.grads, loss, t, g.sq

    def codec_time(self, model: ComputeModel, wall_s: float, copies: int = 1) -> float:
        """Simulated seconds of encoding/decoding the whole model ``copies`` times on ``model``."""
        return model.codec_time(wall_s, self.learning.elements * copies, self.learning.codec.encode_flops_per_element)

    def downlink_bytes(self, i: int) -> int:
        """Payload bytes node ``i`` must download to hold the current version: the update
        (``union``/``compressed`` downlink) when it holds the previous version, else the model."""
        if self.sc.compressor.downlink != "model" and self.nodes[i].held_version == self.version - 1:
            return self.update_bytes
        return self.learning.dense_model_bytes

    def check_stall(self) -> None:
        """Raise :class:`Stalled` when no node is at work and nothing has been dispatched, has
        arrived or completed for ``stall_limit_s`` simulated seconds (1000 x ``nodes.retry_s``):
        every node is offline and the clock would otherwise race on without end."""
        if not any(st.busy for st in self.nodes) and self.env.now - self.last_activity_s >= self.stall_limit_s:
            raise Stalled(
                f"no node online for {self.stall_limit_s:g} simulated seconds "
                f"({STALL_RETRIES} x nodes.retry_s) before iteration {self.totals.iterations}"
            )

    # ---- traffic accounting ------------------------------------------------------------------
    def send(self, src: str, dst: str, nbytes: int, direction: str, tag: str) -> simpy.Event:
        """Start a transfer now and count it in the current metrics window (``up``/``down``)."""
        self.account(src, dst, nbytes, direction)
        return self.net.send(src, dst, nbytes, tag=tag)

    def account(self, src: str, dst: str, nbytes: int, direction: str) -> None:
        """Count a transfer's payload and wire bytes, and the nodes' radio energy, in the current
        metrics window. Downlinks are counted when dispatched, even if a hop starts later."""
        wire = self.net.wire_bytes_for(src, dst, nbytes)
        w = self.window
        if direction == "up":
            w.bytes_up += nbytes
            w.wire_up += wire
        else:
            w.bytes_down += nbytes
            w.wire_down += wire
        for end, charge in ((src, "sent"), (dst, "received")):
            if end.startswith("node") and end[4:].isdigit():
                w.energy_j += getattr(self.nodes[int(end[4:])].energy, charge)(wire)

    # ---- server --------------------------------------------------------------------------------
    def apply(self, it: int, uploads: list[Upload], aggregation: Aggregation | None = None) -> Proc:
        """SimPy process: decode + aggregate (or finish ``aggregation``), step; its row's :class:`Applied`.

        Raises :class:`Diverged` when the aggregated update is not finite.
        """
        env, learning = self.env, self.learning
        t_dec = env.now
        agg, wall = (aggregation or learning.aggregation().take_all(uploads)).result()
        update = learning.prepare_update(agg)
        bad = non_finite([x for u in uploads for x in u.losses], update.applied)
        if bad:
            raise Diverged(f"iteration {it}: {bad}")
        wall = self.tape.decode(wall)
        self.update_bytes, agg_nnz, agg_bytes = self.tape.update(update.nbytes, update.agg_nnz, update.agg_bytes)
        decode_s = self.codec_time(self.server_compute, wall, len(uploads))
        yield env.timeout(decode_s)
        self.trace.span(SERVER, "aggregate", t_dec, decode_s, iteration=it)
        before = before_step(learning)  # downlink "model": nodes derive the step from the models
        try:
            learning.step(update.applied)
        except Diverged as stop:
            raise Diverged(f"iteration {it}: {stop.reason}") from None
        self.version += 1
        if self.mode != "sync":
            self.snapshots[self.version] = learning.snapshot()
            keep = {st.dispatched_version for st in self.nodes} | {self.version}
            self.snapshots = {v: p for v, p in self.snapshots.items() if v in keep}
        observe_global(learning, update.applied, [st.local for st in self.nodes], before)
        return Applied(it, uploads, decode_s, agg_nnz, agg_bytes)

    def finish_row(self, done: Applied) -> None:
        """The metrics row of an applied iteration: traffic and energy since the previous row,
        so downlinks dispatched after the step count in it."""
        uploads = done.uploads
        compute = [x for u in uploads for x in u.compute_s]
        encode = [x for u in uploads for x in u.encode_s]
        losses = [x for u in uploads for x in u.losses]
        stale = [self.version - 1 - u.version for u in uploads for _ in u.nodes]
        now, w = self.env.now, self.window
        iter_s = now - self.last_row_s
        critical = max((c + e for c, e in zip(compute, encode)), default=0.0) + done.decode_s
        row = MetricsRow(
            iteration=done.iteration,
            sim_time_s=now,
            iter_time_s=iter_s,
            loss=mean(losses),
            bytes_up=w.bytes_up,
            bytes_down=w.bytes_down,
            wire_bytes_up=w.wire_up,
            wire_bytes_down=w.wire_down,
            compute_s=mean(compute),
            encode_s=mean(encode),
            decode_s=done.decode_s,
            comm_s=max(iter_s - critical, 0.0) if self.mode == "sync" else max(iter_s - done.decode_s, 0.0),
            agg_nnz=done.agg_nnz,
            agg_bytes=done.agg_bytes,
            contributors=len(losses),
            staleness=mean([float(x) for x in stale]),
            energy_j=w.energy_j,
        )
        self.emit_row(row, samples=self.sc.data.batch_size * len(losses))
        self.totals.staleness_sum += sum(stale)
        self.totals.contributions += len(stale)

    def emit_row(self, row: MetricsRow, samples: int) -> None:
        """Write a metrics row, start a new window, add it to the totals, evaluate if due, report
        progress."""
        assert self.sink is not None, "emit_row outside a run"
        s, t, now = self.sc, self.totals, self.env.now
        self.sink.write_metrics(row.as_dict())
        self.window = Window()
        self.last_row_s = self.last_activity_s = now
        t.bytes_up += row.bytes_up
        t.bytes_down += row.bytes_down
        t.wire_up += row.wire_bytes_up
        t.wire_down += row.wire_bytes_down
        t.compute_s += row.compute_s
        t.encode_s += row.encode_s
        t.decode_s += row.decode_s
        t.comm_s += row.comm_s
        t.agg_bytes += row.agg_bytes
        t.samples += samples
        t.iterations += 1
        it, acc = row.iteration, None
        if (it + 1) % s.training.eval_every == 0 or it + 1 == s.scenario.iterations:
            acc, loss = self.evaluate()
            self.sink.write_eval(EvalRow(it, now, acc, loss).as_dict())
            t.evals.append((it, now, acc, loss))
        self.heartbeat.row(Progress(it + 1, s.scenario.iterations, now, row.loss, acc))

    def evaluate(self) -> tuple[float, float]:
        """Accuracy and loss of the global model on the held-out test split."""
        return self.tape.evaluate(*self.learning.evaluate())

    def summary(self, wall_s: float, status: str, reason: str | None = None) -> RunSummary:
        """The run's summary as it stands (closes the nodes' energy meters)."""
        facts = RunFacts(
            sim_time_s=self.env.now,
            meters=[st.energy for st in self.nodes],
            stragglers=[st.spec.index for st in self.nodes if st.spec.straggler],
            model_params=self.learning.elements,
            flops_per_batch=self.learning.flops_per_batch,
            wall_s=wall_s,
            device=str(self.device),
            model=self.model_name,
            dataset=self.dataset_name,
            ns3=finish_network(self.net),
        )
        return summarize(self.sc, self.totals, facts, status, reason)


__all__ = ["Cluster", "NodeState", "Upload", "Applied", "STALL_RETRIES"]
