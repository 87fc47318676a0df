"""The simulation engine: SimPy processes for nodes, gateways and the server around real learning.

One synchronous iteration on a star (DESIGN.md):

    node i : [download the model] -> gradient on its batch (real torch) -> timeout(compute) ->
             encode every layer (real codec) -> timeout(encode) -> send(node i -> aggregator)
    server : wait for the uploads -> decode + aggregate (real) -> timeout(decode) -> optimizer
             step -> dispatch the next round (downlink + work) to every online node

A *dispatch* is one node round: the downlink that brings the node the model version it will work
on, then compute, encode and upload. The server loops of :mod:`aiotsim.sim.modes` (``sync``,
``partial``, ``async``) decide whom to dispatch and how many uploads make an iteration.

In ``hierarchical`` (and custom topologies with gateways) a node's aggregator is its gateway: the
gateway decodes and averages its nodes' uploads, re-encodes the result with the codec (its own
residuals) or sends it dense, and the server averages the gateways weighted by node counts; the
downlink crosses the backhaul once per gateway and fans out from there. A ``ring`` runs a ring
all-reduce instead (:mod:`aiotsim.sim.ring`).

Simulated time advances only through the compute model (``timeout``) and the network (``send``);
the real computations run in between, in wall-clock time that the ``measured`` model scales.
Nodes that work on an older version (partial, async) compute on a snapshot of that version.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import simpy
import torch

import aiotsim
from aiotsim.compress.base import Codec, CodecState, LayerInfo, Payload
from aiotsim.compress.registry import build_codec
from aiotsim.compress.sparse import sparse_payload
from aiotsim.config import Scenario
from aiotsim.learn.compute import BatchStream, ComputeModel, GradientComputer, get_profile, resolve_device
from aiotsim.learn.datasets import SyntheticSpec, load_dataset
from aiotsim.learn.models import build_model, layer_infos
from aiotsim.learn.partition import partition
from aiotsim.network.flows import Network
from aiotsim.results.store import RunWriter
from aiotsim.sim.energy import EnergyMeter, get_radio
from aiotsim.sim.modes import ServerModes
from aiotsim.sim.topologies import SERVER, NodeSpec, build_topology, node_layout, node_name
from aiotsim.sim.trace import TraceRecorder

Proc = Generator[simpy.Event, Any, Any]


@dataclass
class Progress:
    """What a progress display needs after each iteration."""

    iteration: int
    total: int
    sim_time_s: float
    loss: float
    accuracy: float | None = None


@dataclass
class Upload:
    """One message arriving at an aggregator: a node's gradient, or a gateway's average."""

    source: str  # vertex that sent it
    nodes: list[int]  # sensor nodes whose gradients it carries
    version: int  # model version the gradients were computed on
    payloads: list[Payload]  # one per layer
    losses: list[float]  # training loss per contributing node
    compute_s: list[float]  # simulated compute time per contributing node
    encode_s: list[float]  # simulated encode time per contributing node
    dense: bool = False  # payloads are dense fp32 (gateway_mode = "dense")


@dataclass
class NodeState:
    """What the engine tracks about one sensor node between rounds."""

    spec: NodeSpec
    compute: ComputeModel
    energy: EnergyMeter
    rng: np.random.Generator  # availability and transient stragglers
    velocity: list[torch.Tensor] | None = None  # momentum_at = "nodes": the node's momentum buffers
    held_version: int = 0  # model version the node holds
    dispatched_version: int = 0  # version of its latest dispatch (held once the download arrives)
    busy: bool = False  # dispatched and its upload not yet arrived
    online: bool = True


@dataclass
class Window:
    """Traffic and energy since the last metrics row (counted when a send starts)."""

    bytes_up: int = 0
    bytes_down: int = 0
    wire_up: float = 0.0
    wire_down: float = 0.0
    energy_j: float = 0.0


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


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


class Simulation(ServerModes):
    """A scenario made runnable: data, model, codecs, network and the SimPy processes.

    Parameters
    ----------
    scenario : the validated scenario.
    device : ``"auto"``, ``"cpu"`` or ``"cuda"`` (where the real learning runs).
    on_progress : called after every iteration.
    """

    def __init__(
        self, scenario: Scenario, device: str = "auto", on_progress: Callable[[Progress], None] | None = None
    ) -> None:
        self.sc = s = scenario
        self.device = resolve_device(device)
        self.on_progress = on_progress
        seed = s.scenario.seed
        self.n = s.nodes.count
        self.mode = s.training.mode

        # ---- learning ------------------------------------------------------------------------
        self.layout = node_layout(s)
        d = s.data
        spec = SyntheticSpec(
            tuple(d.synthetic_shape),
            d.synthetic_classes,
            d.synthetic_train_size,
            d.synthetic_test_size,
            d.synthetic_noise,
        )
        self.data = load_dataset(d.dataset, seed=seed, test_fraction=d.test_fraction, synthetic=spec)
        self.model = build_model(s.model.name, self.data.input_shape, self.data.num_classes, seed=seed).to(self.device)
        self.layers: list[LayerInfo] = layer_infos(self.model)
        self.params = list(self.model.parameters())
        shares = [spec.share for spec in self.layout]
        shards = partition(self.data.train_y, self.n, s.data.partition, s.data.alpha, seed=seed, shares=shares)
        self.streams = [
            BatchStream(
                self.data.train_x, self.data.train_y, shard, s.data.batch_size, seed=seed * 1000 + i, device=self.device
            )
            for i, shard in enumerate(shards)
        ]
        self.computer = GradientComputer(self.model, self.device)
        self.flops_per_batch = self.computer.train_flops((s.data.batch_size, *self.data.input_shape))
        test_n = s.data.eval_samples or len(self.data.test_y)
        self.test_x = self.data.test_x[:test_n].to(self.device)
        self.test_y = self.data.test_y[:test_n].to(self.device)
        self.dense_model_bytes = sum(L.dense_nbytes for L in self.layers)

        # ---- codecs: one instance serves every node; state per node and layer ----------------
        self.codec: Codec = build_codec(s.compressor.name, s.compressor.params, seed=seed)
        self.dense: Codec = build_codec("none", seed=seed)
        self.layer_codecs = [self.codec if L.numel >= s.compressor.min_size else self.dense for L in self.layers]
        self.states: list[list[CodecState]] = [self.new_states(i) for i in range(self.n)]
        self.server_states = self.new_states(-1)  # compressed (bidirectional) downlink
        # momentum lives on the server optimizer, unless the codec applies it itself (DGC) or the
        # scenario puts it on the nodes
        self.node_momentum = (
            s.training.momentum if (s.training.momentum_at == "nodes" and not self.codec.absorbs_momentum) else 0.0
        )
        momentum = 0.0 if (self.codec.absorbs_momentum or self.node_momentum) else s.training.momentum
        if s.training.optimizer == "sgd":
            self.optimizer: torch.optim.Optimizer = torch.optim.SGD(
                self.params, lr=s.training.lr, momentum=momentum, weight_decay=s.training.weight_decay
            )
        else:
            self.optimizer = torch.optim.Adam(self.params, lr=s.training.lr, weight_decay=s.training.weight_decay)

        # ---- nodes: compute models, energy, availability ---------------------------------------
        self.nodes = [self._node_state(spec) for spec in self.layout]
        self.server_compute = ComputeModel(s.nodes.compute_model, get_profile(s.nodes.server_device))
        self.gateway_compute = ComputeModel(s.nodes.compute_model, get_profile(s.nodes.gateway_device))

        # ---- network ----------------------------------------------------------------------------
        self.env = simpy.Environment()
        self.topology = build_topology(s, self.layout)
        self.net = Network(self.env, self.topology, seed=seed)
        self.gateways = self.topology.gateways if s.network.topology != "ring" else []
        self.aggregator = (
            {i: self.topology.aggregator_of(node_name(i)) for i in range(self.n)}
            if s.network.topology != "ring"
            else {}
        )
        self.gateway_states = {gw: self.new_states(100_000 + k) for k, gw in enumerate(self.gateways)}
        self.mailbox: dict[str, simpy.Store] = {v: simpy.Store(self.env) for v in [SERVER, *self.gateways]}
        self.trace = TraceRecorder()
        self.totals = Totals()
        self.window = Window()
        self.version = 0
        self.snapshots: dict[int, list[torch.Tensor]] = {}
        # payload bytes of the latest update message (what an up-to-date node downloads)
        self._update_bytes = self.dense_model_bytes
        # the applied iteration whose metrics row is written once its downlinks are dispatched
        self._pending: tuple[int, list[Upload], list[torch.Tensor], float, tuple[int, int]] | None = None
        self._last_row_time = 0.0
        self._writer: RunWriter | None = None

    # ------------------------------------------------------------------------------------------
    def new_states(self, owner: int) -> list[CodecState]:
        """Fresh codec states, one per layer, for node (or gateway/server) id ``owner``."""
        return [c.init_state(L, self.device, node=owner) for c, L in zip(self.layer_codecs, self.layers)]

    def _node_state(self, spec: NodeSpec) -> NodeState:
        s = self.sc
        profile = get_profile(spec.device)
        meter = EnergyMeter(profile.power_active_w, profile.power_idle_w, get_radio(spec.radio))
        compute = ComputeModel(s.nodes.compute_model, profile, slowdown=spec.compute_slowdown)
        rng = np.random.default_rng([s.scenario.seed, 0xA11, spec.index])
        return NodeState(spec, compute, meter, rng)

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

    # ---- node side ---------------------------------------------------------------------------
    def availability(self, i: int) -> bool:
        """One step of node ``i``'s seeded on/off Markov chain; True if it can work now."""
        st, nd = self.nodes[i], self.sc.nodes
        if nd.dropout_prob == 0.0 and st.online:
            return True
        u = st.rng.random()
        was_online = st.online
        st.online = u >= nd.dropout_prob if was_online else u < nd.rejoin_prob
        if st.online and not was_online and nd.residual_on_rejoin == "reset":
            for state in self.states[i]:
                state.residual = None
        return st.online

    def compute_gradient(
        self, i: int, params: list[torch.Tensor] | None
    ) -> tuple[list[torch.Tensor], float, float, list[torch.Tensor] | None]:
        """Node ``i``'s real gradient on its next batch: ``(grads, loss, simulated s, sq grads)``."""
        st = self.nodes[i]
        x, y = self.streams[i].next()
        res = self.computer.gradient(params, x, y, per_sample_sq=self.codec.needs_sq_grad)
        grads = res.grads
        if self.node_momentum:
            # momentum correction: the node accumulates u = m u + g and sends (a compression of) u
            if st.velocity is None:
                st.velocity = [g.detach().clone() for g in grads]
            else:  # one batched op per step for all layers
                torch._foreach_mul_(st.velocity, self.node_momentum)
                torch._foreach_add_(st.velocity, grads)
            grads = st.velocity
        t = st.compute.compute_time(res.wall_s, self.flops_per_batch)
        nd = self.sc.nodes
        if nd.straggler_mode == "transient" and nd.straggler_fraction > 0 and st.rng.random() < nd.straggler_fraction:
            t *= nd.straggler_factor
        return grads, res.loss, t, res.sq_grads

    def encode_layers(
        self,
        grads: list[torch.Tensor],
        states: list[CodecState],
        sq: list[torch.Tensor] | None = None,
        codecs: list[Codec] | None = None,
    ) -> tuple[list[Payload], float]:
        """Encode every layer: ``(payloads, wall seconds)``."""
        codecs = codecs or self.layer_codecs
        _sync(self.device)
        t0 = time.perf_counter()
        payloads = []
        for j, (codec, layer, g) in enumerate(zip(codecs, self.layers, grads)):
            if sq is not None:
                states[j].sq_grad = sq[j]
            payloads.append(codec.encode(g, layer, states[j]))
        _sync(self.device)
        return payloads, time.perf_counter() - t0

    def mask_momentum(self, st: NodeState, payloads: list[Payload]) -> float:
        """Momentum factor masking (Lin et al. 2018), when ``training.momentum_masking`` is on: with
        momentum on the nodes and a sparse codec, the velocity of every coordinate just sent is
        cleared, so stale momentum does not refill the residual it was sent from. Off by default:
        it also strips the momentum of every coordinate sent at most steps, which on iot10 slows
        the dense-ish sparsifiers (threshold 90.8% vs 95.4%, variance 91.9% vs 95.x%). Returns
        the wall seconds it took."""
        masking = self.sc.training.momentum_masking
        if not (masking and self.node_momentum and self.codec.sparse and st.velocity is not None):
            return 0.0
        t0 = time.perf_counter()
        for j, (codec, layer) in enumerate(zip(self.layer_codecs, self.layers)):
            if codec is self.codec:
                sent = codec.decode(payloads[j], layer) != 0
                st.velocity[j].masked_fill_(sent, 0.0)
        return time.perf_counter() - t0

    def codec_time(self, model: ComputeModel, wall_s: float, copies: int = 1) -> float:
        """Simulated seconds of encoding/decoding the whole model ``copies`` times."""
        elements = sum(L.numel for L in self.layers) * copies
        return model.codec_time(wall_s, elements, self.codec.encode_flops_per_element)

    def downlink_bytes(self, i: int) -> int:
        """Payload bytes node ``i`` must download to hold the current version: the update
        (``union``/``compressed`` downlink) when it holds the previous version, else the model."""
        if self.sc.compressor.downlink != "model" and self.nodes[i].held_version == self.version - 1:
            return self._update_bytes
        return self.dense_model_bytes

    def node_round(self, i: int, version: int, download: simpy.Event | None, work: bool) -> Proc:
        """SimPy process: node ``i`` receives model ``version`` (if ``download``) and, if ``work``,
        computes, encodes and uploads a gradient on it."""
        env, st, name = self.env, self.nodes[i], node_name(i)
        if download is not None:
            yield download
        st.held_version = version
        if not work:
            st.busy = False
            return
        t0 = env.now
        params = self.snapshots.get(version) if self.mode != "sync" else None
        grads, loss, compute_s, sq = self.compute_gradient(i, params)
        yield env.timeout(compute_s)
        self.trace.span(name, "compute", t0, compute_s, version=version)
        payloads, wall = self.encode_layers(grads, self.states[i], sq)
        wall += self.mask_momentum(st, payloads)
        encode_s = st.compute.codec_time(wall, sum(L.numel for L in self.layers), self.codec.encode_flops_per_element)
        t1 = env.now
        yield env.timeout(encode_s)
        self.trace.span(name, "encode", t1, encode_s, version=version)
        self.window.energy_j += st.energy.busy(compute_s + encode_s)
        nbytes = sum(p.nbytes for p in payloads)
        self.totals.node_bytes_up += nbytes
        self.totals.dense_up += self.dense_model_bytes
        dst = self.aggregator[i]
        tr = yield self.send(name, dst, nbytes, "up", f"up v{version}")
        self.trace.transfer(tr, "upload", version=version)
        yield self.mailbox[dst].put(Upload(name, [i], version, payloads, [loss], [compute_s], [encode_s]))

    def dispatch(self, nodes: list[int], work: bool = True) -> list[simpy.Process]:
        """Start a round on each of ``nodes``: downlink (via its gateway) and, if ``work``, the
        gradient. Nodes already holding the current version download nothing."""
        procs = []
        fanout: dict[str, simpy.Event] = {}
        for i in nodes:
            st = self.nodes[i]
            st.busy = work
            st.dispatched_version = self.version
            download = None
            if st.held_version != self.version:
                nbytes = self.downlink_bytes(i)
                gw = self.aggregator[i]
                if gw != SERVER:
                    if gw not in fanout:  # one copy crosses the backhaul, then fans out
                        fanout[gw] = self._hop(SERVER, gw, nbytes)
                    download = self._hop(gw, node_name(i), nbytes, after=fanout[gw])
                else:
                    download = self._hop(SERVER, node_name(i), nbytes)
            procs.append(self.env.process(self.node_round(i, self.version, download, work)))
        return procs

    def _hop(self, src: str, dst: str, nbytes: int, after: simpy.Event | None = None) -> simpy.Process:
        """One downlink hop: counted now (at dispatch), sent once ``after`` has fired."""
        self.account(src, dst, nbytes, "down")
        return self.env.process(self._send_after(src, dst, nbytes, after, self.version))

    def _send_after(self, src: str, dst: str, nbytes: int, after: simpy.Event | None, version: int) -> Proc:
        if after is not None:
            yield after
        tr = yield self.net.send(src, dst, nbytes, tag=f"down v{version}")
        self.trace.transfer(tr, "download", version=version)
        return tr

    def dispatch_round(self, work: bool = True) -> tuple[list[int], list[simpy.Process]]:
        """Dispatch every idle node that is online; returns ``(nodes, processes)``."""
        chosen = [i for i in range(self.n) if not self.nodes[i].busy and self.availability(i)]
        procs = self.dispatch(chosen, work)
        if work:
            self._start_gateways(chosen)
        return chosen, procs

    # ---- gateways ---------------------------------------------------------------------------
    def _start_gateways(self, chosen: list[int]) -> None:
        by_gw: dict[str, list[int]] = {}
        for i in chosen:
            if self.aggregator[i] != SERVER:
                by_gw.setdefault(self.aggregator[i], []).append(i)
        for gw, members in by_gw.items():
            self.env.process(self.gateway_round(gw, members))

    def gateway_round(self, gw: str, members: list[int]) -> Proc:
        """SimPy process: gateway ``gw`` waits for its ``members``' uploads, averages them, and
        forwards one message (re-encoded with its own residuals, or dense) to the server."""
        env = self.env
        ups: list[Upload] = []
        while len(ups) < len(members):
            ups.append((yield self.mailbox[gw].get()))
        t0 = env.now
        agg, wall = self.decode_aggregate(ups)
        if self.sc.network.gateway_mode == "dense":
            payloads, enc_wall = self.encode_layers(
                agg, self.gateway_states[gw], codecs=[self.dense] * len(self.layers)
            )
        else:
            payloads, enc_wall = self.encode_layers(agg, self.gateway_states[gw])
        busy = self.codec_time(self.gateway_compute, wall + enc_wall, len(ups) + 1)
        yield env.timeout(busy)
        self.trace.span(gw, "aggregate", t0, busy)
        nbytes = sum(p.nbytes for p in payloads)
        tr = yield self.send(gw, self.topology.aggregator_of(gw), nbytes, "up", f"up v{ups[0].version}")
        self.trace.transfer(tr, "upload", version=ups[0].version)
        merged = Upload(
            gw,
            [i for u in ups for i in u.nodes],
            min(u.version for u in ups),
            payloads,
            [x for u in ups for x in u.losses],
            [x for u in ups for x in u.compute_s],
            [x for u in ups for x in u.encode_s],
            dense=self.sc.network.gateway_mode == "dense",
        )
        yield self.mailbox[SERVER].put(merged)

    # ---- server side ---------------------------------------------------------------------------
    def decode_aggregate(self, uploads: list[Upload]) -> tuple[list[torch.Tensor], float]:
        """Decode every upload and aggregate per layer, weighting each by its node count.

        Returns ``(aggregate per layer, wall seconds)``. A codec whose aggregation is not a mean
        (signSGD's majority vote) aggregates the messages unweighted.
        """
        _sync(self.device)
        t0 = time.perf_counter()
        weights = [len(u.nodes) for u in uploads]
        mean_codec = self.codec.supports_ring()
        agg = []
        for j, (codec, layer) in enumerate(zip(self.layer_codecs, self.layers)):
            decoded = [(self.dense if u.dense else codec).decode(u.payloads[j], layer) for u in uploads]
            if len(set(weights)) > 1 and mean_codec:
                w = torch.tensor(weights, dtype=torch.float32, device=decoded[0].device)
                stacked = torch.stack([d.float() for d in decoded])  # [uploads, *shape]
                agg.append((torch.tensordot(w / w.sum(), stacked, dims=1)).to(layer.dtype))
            else:
                agg.append(codec.aggregate(decoded, layer))
        _sync(self.device)
        return agg, time.perf_counter() - t0

    def prepare_update(self, agg: list[torch.Tensor]) -> tuple[list[torch.Tensor], int, tuple[int, int]]:
        """What the server applies and what an up-to-date node downloads:
        ``(update per layer, payload bytes of the update message, (non-zeros, bytes) of the update)``.

        ``model``: the dense fp32 parameters (the update applied is ``agg``).
        ``union``: the aggregated update as a sparse message (its index set is the union).
        ``compressed``: ``agg`` re-encoded with the codec and the server's own residuals; the
        server applies what the nodes decode, so every replica stays identical.
        The third item is :meth:`aggregated_size` of the applied update, computed once: the
        ``union`` message is that size.
        """
        mode = self.sc.compressor.downlink
        if mode != "compressed":
            size = self.aggregated_size(agg)
            return agg, (self.dense_model_bytes if mode == "model" else size[1]), size
        applied, nbytes = [], 0
        for j, (codec, layer) in enumerate(zip(self.layer_codecs, self.layers)):
            p = codec.encode(agg[j], layer, self.server_states[j])
            nbytes += p.nbytes
            applied.append(codec.decode(p, layer))
        return applied, nbytes, self.aggregated_size(applied)

    def aggregated_size(self, applied: list[torch.Tensor]) -> tuple[int, int]:
        """``(non-zeros, bytes)`` of the aggregated update as one sparse message per layer: for a
        sparse codec the union of the workers' index sets (seed 001's aggregated size). A dense
        codec's aggregate is dense, so its size is the fp32 model size (no message is built)."""
        if self.codec.sparse or self.sc.compressor.downlink == "union":
            return (
                sum(int(torch.count_nonzero(a)) for a in applied),
                sum(self._sparse_message(a).nbytes for a in applied),
            )
        return sum(L.numel for L in self.layers), self.dense_model_bytes

    @staticmethod
    def _sparse_message(update: torch.Tensor) -> Payload:
        flat = update.reshape(-1)
        idx = torch.nonzero(flat, as_tuple=False).reshape(-1)
        return sparse_payload(idx, flat[idx].float(), flat.numel())

    def step(self, update: list[torch.Tensor]) -> None:
        """Apply the aggregated update with the server optimizer (the same step on every replica)."""
        for p, g in zip(self.params, update):
            p.grad = g.to(p.dtype)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def evaluate(self) -> tuple[float, float]:
        """Accuracy and loss of the global model on the held-out test split."""
        return self.computer.evaluate(None, self.test_x, self.test_y)

    def apply(self, it: int, uploads: list[Upload]) -> Proc:
        """SimPy process: decode, aggregate, step; then the metrics row and any evaluation."""
        env = self.env
        t_dec = env.now
        agg, wall = self.decode_aggregate(uploads)
        applied, self._update_bytes, size = self.prepare_update(agg)
        decode_s = self.codec_time(self.server_compute, wall, len(uploads))
        yield env.timeout(decode_s)
        self.trace.span(SERVER, "aggregate", t_dec, decode_s, iteration=it)
        self.step(applied)
        self.version += 1
        if self.mode != "sync":
            self.snapshots[self.version] = [p.detach().clone() for p in self.params]
            keep = {st.dispatched_version for st in self.nodes} | {self.version}
            self.snapshots = {v: p for v, p in self.snapshots.items() if v in keep}
        for i in range(self.n):
            for j, (codec, layer) in enumerate(zip(self.layer_codecs, self.layers)):
                codec.observe_global(applied[j], layer, self.states[i][j])
        self._pending = (it, uploads, applied, decode_s, size)

    def write_row(
        self, it: int, uploads: list[Upload], applied: list[torch.Tensor], decode_s: float, size: tuple[int, int]
    ) -> None:
        """The metrics row of iteration ``it`` (traffic and energy since the previous row)."""
        env, s, w = self.env, self.sc, self.window
        agg_nnz, agg_bytes = size
        compute = [x for u in uploads for x in u.compute_s]
        encode = [x for u in uploads for x in u.encode_s]
        losses = [x for u in uploads for x in u.losses]
        stale = [self.version - 1 - u.version for u in uploads for _ in u.nodes]
        iter_s = env.now - self._last_row_time
        self._last_row_time = env.now
        critical = max((c + e for c, e in zip(compute, encode)), default=0.0) + decode_s
        row = {
            "iteration": it,
            "sim_time_s": env.now,
            "iter_time_s": iter_s,
            "loss": _mean(losses),
            "bytes_up": w.bytes_up,
            "bytes_down": w.bytes_down,
            "wire_bytes_up": w.wire_up,
            "wire_bytes_down": w.wire_down,
            "compute_s": _mean(compute),
            "encode_s": _mean(encode),
            "decode_s": decode_s,
            "comm_s": max(iter_s - critical, 0.0) if self.mode == "sync" else max(iter_s - decode_s, 0.0),
            "agg_nnz": agg_nnz,
            "agg_bytes": agg_bytes,
            "contributors": len(losses),
            "staleness": _mean([float(x) for x in stale]),
            "energy_j": w.energy_j,
        }
        self.emit_row(row, samples=s.data.batch_size * len(losses))
        self.totals.staleness_sum += sum(stale)
        self.totals.contributions += len(stale)

    def emit_row(self, row: dict[str, Any], samples: int) -> None:
        """Write a metrics row, add it to the totals, evaluate if due, report progress."""
        assert self._writer is not None
        s, t = self.sc, self.totals
        self._writer.write_metrics(row)
        self.window = Window()
        t.bytes_up += row["bytes_up"]
        t.bytes_down += row["bytes_down"]
        t.wire_up += row["wire_bytes_up"]
        t.wire_down += row["wire_bytes_down"]
        t.compute_s += row["compute_s"]
        t.encode_s += row["encode_s"]
        t.decode_s += row["decode_s"]
        t.comm_s += row["comm_s"]
        t.agg_bytes += row["agg_bytes"]
        t.samples += samples
        t.iterations += 1
        it = row["iteration"]
        acc = None
        if (it + 1) % s.training.eval_every == 0 or it + 1 == s.scenario.iterations:
            acc, loss = self.evaluate()
            self._writer.write_eval({"iteration": it, "sim_time_s": self.env.now, "accuracy": acc, "loss": loss})
            t.evals.append((it, self.env.now, acc, loss))
        if self.on_progress:
            self.on_progress(Progress(it + 1, s.scenario.iterations, self.env.now, row["loss"], acc))

    # ---- running -------------------------------------------------------------------------------
    def run(self, out_dir: str | Path) -> dict[str, Any]:
        """Run the whole scenario, writing the run directory as it goes. Returns the summary.

        On Ctrl-C or an error, the rows written so far stay and ``summary.json`` is written with
        ``complete: false`` and the reason, then the exception propagates.
        """
        self._writer = RunWriter(out_dir, self.sc.to_toml())
        wall0 = time.perf_counter()
        status = "complete"
        try:
            done = self.env.process(self.main())
            self.env.run(until=done)
        except KeyboardInterrupt:
            status = "interrupted"
            raise
        except Exception as exc:
            status = f"error: {type(exc).__name__}: {exc}"
            raise
        finally:
            summary = self.summary(time.perf_counter() - wall0, status)
            self._writer.write_trace(self.trace.events())
            self._writer.finish(summary)
        return summary

    def summary(self, wall_s: float, status: str) -> dict[str, Any]:
        """The run's ``summary.json`` content (without ``schema_version``)."""
        s, t = self.sc, self.totals
        sim_time = self.env.now
        for st in self.nodes:
            st.energy.close(sim_time, s.energy.include_idle)
        evals = t.evals
        target = s.training.target_accuracy
        tta = next((time_s for _, time_s, acc, _ in evals if acc >= target), None)
        iters = max(t.iterations, 1)
        share = (lambda x: x / sim_time) if sim_time > 0 else (lambda x: None)
        return {
            "complete": status == "complete",
            "status": status,
            "scenario": s.scenario.name,
            "compressor": s.compressor.name,
            "compressor_params": dict(s.compressor.params),
            "topology": s.network.topology,
            "mode": self.mode,
            "iterations": t.iterations,
            "nodes": self.n,
            "seed": s.scenario.seed,
            "batch_size": s.data.batch_size,
            "sim_time_s": sim_time,
            "mean_iter_time_s": sim_time / iters if t.iterations else None,
            "throughput_samples_per_s": t.samples / sim_time if sim_time > 0 else None,
            "bytes_up": t.bytes_up,
            "bytes_down": t.bytes_down,
            "wire_bytes_up": t.wire_up,
            "wire_bytes_down": t.wire_down,
            "compression_ratio": t.dense_up / t.node_bytes_up if t.node_bytes_up else None,
            "mean_agg_bytes": t.agg_bytes / iters if t.iterations else None,
            "compute_share": share(t.compute_s),
            "encode_share": share(t.encode_s),
            "decode_share": share(t.decode_s),
            "comm_share": share(t.comm_s),
            "mean_staleness": t.staleness_sum / t.contributions if t.contributions else 0.0,
            "dropped_uploads": t.dropped,
            "final_accuracy": evals[-1][2] if evals else None,
            "final_eval_loss": evals[-1][3] if evals else None,
            "best_accuracy": max(e[2] for e in evals) if evals else None,
            "target_accuracy": target,
            "time_to_accuracy_s": tta,
            "energy_j": sum(st.energy.total_j for st in self.nodes),
            "energy_per_node_j": [round(st.energy.total_j, 9) for st in self.nodes],
            "energy_breakdown_j": {
                "compute": sum(st.energy.compute_j for st in self.nodes),
                "radio_tx": sum(st.energy.tx_j for st in self.nodes),
                "radio_rx": sum(st.energy.rx_j for st in self.nodes),
                "idle": sum(st.energy.idle_j for st in self.nodes),
            },
            "stragglers": [st.spec.index for st in self.nodes if st.spec.straggler],
            "model": s.model.name,
            "dataset": s.data.dataset,
            "model_params": sum(L.numel for L in self.layers),
            "flops_per_batch": self.flops_per_batch,
            "wall_time_s": wall_s,
            "aiotsim_version": aiotsim.__version__,
            "torch_version": torch.__version__,
            "device": str(self.device),
        }


def run_scenario(
    scenario: Scenario, out_dir: str | Path, device: str = "auto", on_progress: Callable[[Progress], None] | None = None
) -> dict[str, Any]:
    """Build and run a :class:`Simulation`; returns its summary."""
    return Simulation(scenario, device=device, on_progress=on_progress).run(out_dir)


__all__ = ["Simulation", "Progress", "Upload", "run_scenario"]
