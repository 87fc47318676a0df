"""The simulation engine: SimPy processes for nodes and the aggregator around real learning.

One synchronous iteration on a star (DESIGN.md):

    node i : gradient on its batch (real torch) -> timeout(compute time) -> encode every layer
             (real codec) -> timeout(encode time) -> network.send(node i -> server, payload bytes)
    server : wait for the uploads -> decode + aggregate (real) -> timeout(decode time) ->
             optimizer step -> network.send(server -> node i, downlink bytes) for every node

Simulated time advances only through the compute model (``timeout``) and the network (``send``);
the real computations run in between, in wall-clock time that the compute model may measure.
Every node holds the same model version in synchronous mode, so the engine keeps one global model.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import simpy
import torch

import aiotsim
from aiotsim.compress.base import Codec, CodecState, LayerInfo, Payload
from aiotsim.compress.registry import build_codec
from aiotsim.compress.sparse import sparse_payload
from aiotsim.config import Scenario
from aiotsim.learn.compute import BatchStream, ComputeModel, GradientComputer, get_profile, resolve_device
from aiotsim.learn.datasets import load_dataset
from aiotsim.learn.models import build_model, layer_infos
from aiotsim.learn.partition import partition
from aiotsim.network.flows import Network
from aiotsim.network.topology import Topology
from aiotsim.results.store import RunWriter
from aiotsim.sim.trace import TraceRecorder

SERVER = "server"


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
    """One node's contribution to an iteration."""

    node: int
    payloads: list[Payload]
    loss: float
    compute_s: float
    encode_s: float
    bytes: int
    wire_bytes: float


@dataclass
class Totals:
    """Running sums over the run, for the summary."""

    bytes_up: int = 0
    bytes_down: int = 0
    wire_up: float = 0.0
    wire_down: float = 0.0
    compute_s: float = 0.0
    encode_s: float = 0.0
    decode_s: float = 0.0
    comm_s: float = 0.0
    agg_bytes: int = 0
    samples: int = 0
    iterations: int = 0
    evals: list[tuple[int, float, float, float]] = field(default_factory=list)  # (it, t, acc, loss)


def node_name(i: int) -> str:
    """Network name of sensor node ``i``."""
    return f"node{i}"


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Simulation:
    """A scenario made runnable: data, model, codecs, network and the SimPy processes.

    Parameters
    ----------
    scenario : the validated scenario.
    device : ``"auto"``, ``"cpu"`` or ``"cuda"`` (where the real learning runs).
    on_progress : called after every iteration.
    """

    def __init__(self, scenario: Scenario, device: str = "auto", on_progress: Callable[[Progress], None] | None = None) -> None:
        self.sc = scenario
        self.device = resolve_device(device)
        self.on_progress = on_progress
        s = scenario
        seed = s.scenario.seed
        self.n = s.nodes.count

        # ---- learning ------------------------------------------------------------------------
        self.data = load_dataset(s.data.dataset, seed=seed, test_fraction=s.data.test_fraction)
        self.model = build_model(s.model.name, self.data.input_shape, self.data.num_classes, seed=seed).to(self.device)
        self.layers: list[LayerInfo] = layer_infos(self.model)
        self.params = list(self.model.parameters())
        shards = partition(self.data.train_y, self.n, s.data.partition, s.data.alpha, seed=seed)
        self.streams = [
            BatchStream(self.data.train_x, self.data.train_y, shard, s.data.batch_size, seed=seed * 1000 + i, device=self.device)
            for i, shard in enumerate(shards)
        ]
        self.computer = GradientComputer(self.model, self.device)
        self.flops_per_batch = self.computer.train_flops((s.data.batch_size, *self.data.input_shape))
        test_n = s.data.eval_samples or len(self.data.test_y)
        self.test_x = self.data.test_x[:test_n].to(self.device)
        self.test_y = self.data.test_y[:test_n].to(self.device)

        # ---- codecs: one instance serves every node; state per node and layer ----------------
        self.codec: Codec = build_codec(s.compressor.name, s.compressor.params, seed=seed)
        dense = build_codec("none", seed=seed)
        self.layer_codecs = [self.codec if L.numel >= s.compressor.min_size else dense for L in self.layers]
        self.states: list[list[CodecState]] = [
            [c.init_state(L, self.device, node=i) for c, L in zip(self.layer_codecs, self.layers)] for i in range(self.n)
        ]
        # the server's own states, for a compressed (bidirectional) downlink
        self.server_states = [c.init_state(L, self.device, node=-1) for c, L in zip(self.layer_codecs, self.layers)]
        momentum = 0.0 if self.codec.absorbs_momentum else s.training.momentum
        if s.training.optimizer == "sgd":
            self.optimizer: torch.optim.Optimizer = torch.optim.SGD(
                self.params, lr=s.training.lr, momentum=momentum, weight_decay=s.training.weight_decay
            )
        else:
            self.optimizer = torch.optim.Adam(self.params, lr=s.training.lr, weight_decay=s.training.weight_decay)

        # ---- compute-time models ----------------------------------------------------------------
        self.node_compute = ComputeModel(s.nodes.compute_model, get_profile(s.nodes.device))
        self.server_compute = ComputeModel(s.nodes.compute_model, get_profile(s.nodes.server_device))

        # ---- network ----------------------------------------------------------------------------
        self.env = simpy.Environment()
        self.topology = self._build_topology()
        self.net = Network(self.env, self.topology, seed=seed)
        self.trace = TraceRecorder()
        self.totals = Totals()

    # ------------------------------------------------------------------------------------------
    def _build_topology(self) -> Topology:
        nw = self.sc.network
        mbps = 1e6  # bits/s per Mbit/s
        return Topology.star(
            self.n,
            uplink_bps=nw.uplink_mbps * mbps,
            downlink_bps=nw.downlink_mbps * mbps,
            latency_s=nw.latency_ms / 1e3,
            server_bps=nw.server_mbps * mbps,
            mtu=nw.mtu,
            header_bytes=nw.header_bytes,
            loss=nw.loss,
            jitter_s=nw.jitter_ms / 1e3,
        )

    # ---- node side ---------------------------------------------------------------------------
    def compute_gradient(self, i: int) -> tuple[list[torch.Tensor], float, float, list[torch.Tensor] | None]:
        """Node ``i``'s real gradient on its next batch: ``(grads, loss, simulated compute s, sq)``."""
        x, y = self.streams[i].next()
        res = self.computer.gradient(None, x, y, per_sample_sq=self.codec.needs_sq_grad)
        t = self.node_compute.compute_time(res.wall_s, self.flops_per_batch)
        return res.grads, res.loss, t, res.sq_grads

    def encode(self, i: int, grads: list[torch.Tensor], sq: list[torch.Tensor] | None) -> tuple[list[Payload], float]:
        """Encode every layer of node ``i``'s gradient: ``(payloads, simulated encode s)``."""
        states = self.states[i]
        _sync(self.device)
        t0 = time.perf_counter()
        payloads = []
        for j, (codec, layer, g) in enumerate(zip(self.layer_codecs, self.layers, grads)):
            if sq is not None:
                states[j].sq_grad = sq[j]
            payloads.append(codec.encode(g, layer, states[j]))
        _sync(self.device)
        wall = time.perf_counter() - t0
        return payloads, self._codec_time(self.node_compute, wall, 1)

    def _codec_time(self, model: ComputeModel, wall_s: float, copies: int) -> float:
        elements = sum(L.numel for L in self.layers) * copies
        return model.codec_time(wall_s, elements, self.codec.encode_flops_per_element)

    def node_process(self, i: int, it: int) -> Generator[simpy.Event, Any, Upload]:
        """SimPy process: one node's compute, encode and upload for iteration ``it``."""
        name = node_name(i)
        t0 = self.env.now
        grads, loss, compute_s, sq = self.compute_gradient(i)
        yield self.env.timeout(compute_s)
        self.trace.span(name, "compute", t0, compute_s, iteration=it)
        payloads, encode_s = self.encode(i, grads, sq)
        t1 = self.env.now
        yield self.env.timeout(encode_s)
        self.trace.span(name, "encode", t1, encode_s, iteration=it)
        nbytes = sum(p.nbytes for p in payloads)
        tr = yield self.net.send(name, SERVER, nbytes, tag=f"up{it}")
        self.trace.transfer(tr, "upload", iteration=it)
        return Upload(i, payloads, loss, compute_s, encode_s, nbytes, tr.wire_bytes)

    # ---- server side ---------------------------------------------------------------------------
    def aggregate(self, uploads: list[Upload]) -> tuple[list[torch.Tensor], float]:
        """Decode and aggregate every layer: ``(aggregated update per layer, simulated s)``."""
        _sync(self.device)
        t0 = time.perf_counter()
        agg = []
        for j, (codec, layer) in enumerate(zip(self.layer_codecs, self.layers)):
            decoded = [codec.decode(u.payloads[j], layer) for u in uploads]
            agg.append(codec.aggregate(decoded, layer))
        _sync(self.device)
        wall = time.perf_counter() - t0
        return agg, self._codec_time(self.server_compute, wall, len(uploads))

    def downlink(self, agg: list[torch.Tensor]) -> tuple[list[torch.Tensor], int]:
        """What the server sends back and applies: ``(update to apply, payload bytes per node)``.

        ``model``: the dense fp32 parameters after the step (the update applied is ``agg``).
        ``union``: the aggregated update as a sparse message (its index set is the union).
        ``compressed``: ``agg`` re-encoded with the codec and the server's own residuals; the
        server applies what the nodes decode, so every replica stays identical.
        """
        mode = self.sc.compressor.downlink
        if mode == "model":
            return agg, sum(L.dense_nbytes for L in self.layers)
        if mode == "union":
            nbytes = sum(self._sparse_message(a).nbytes for a in agg)
            return agg, nbytes
        applied, nbytes = [], 0
        for j, (codec, layer) in enumerate(zip(self.layer_codecs, self.layers)):
            p = codec.encode(agg[j], layer, self.server_states[j])
            nbytes += p.nbytes
            applied.append(codec.decode(p, layer))
        return applied, nbytes

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

    def iteration(self, it: int, writer: RunWriter) -> Generator[simpy.Event, Any, None]:
        """SimPy process body of one synchronous iteration."""
        env, s = self.env, self.sc
        t_start = env.now
        procs = [env.process(self.node_process(i, it)) for i in range(self.n)]
        done = yield env.all_of(procs)
        uploads = [done[p] for p in procs]

        t_dec = env.now
        agg, decode_s = self.aggregate(uploads)
        applied, down_bytes = self.downlink(agg)
        yield env.timeout(decode_s)
        self.trace.span(SERVER, "aggregate", t_dec, decode_s, iteration=it)
        self.step(applied)
        agg_msgs = [self._sparse_message(a) for a in applied]
        agg_nnz = sum(int(torch.count_nonzero(a)) for a in applied)
        agg_bytes = sum(m.nbytes for m in agg_msgs)

        sends = [self.net.send(SERVER, node_name(i), down_bytes, tag=f"down{it}") for i in range(self.n)]
        got = yield env.all_of(sends)
        wire_down = 0.0
        for ev in sends:
            tr = got[ev]
            wire_down += tr.wire_bytes
            self.trace.transfer(tr, "download", iteration=it)
        for i in range(self.n):
            for j, (codec, layer) in enumerate(zip(self.layer_codecs, self.layers)):
                codec.observe_global(applied[j], layer, self.states[i][j])

        iter_s = env.now - t_start
        critical = max(u.compute_s + u.encode_s for u in uploads) + decode_s
        row = {
            "iteration": it,
            "sim_time_s": env.now,
            "iter_time_s": iter_s,
            "loss": sum(u.loss for u in uploads) / len(uploads),
            "bytes_up": sum(u.bytes for u in uploads),
            "bytes_down": down_bytes * self.n,
            "wire_bytes_up": sum(u.wire_bytes for u in uploads),
            "wire_bytes_down": wire_down,
            "compute_s": sum(u.compute_s for u in uploads) / len(uploads),
            "encode_s": sum(u.encode_s for u in uploads) / len(uploads),
            "decode_s": decode_s,
            "comm_s": max(iter_s - critical, 0.0),
            "agg_nnz": agg_nnz,
            "agg_bytes": agg_bytes,
            "contributors": len(uploads),
            "staleness": 0.0,
        }
        writer.write_metrics(row)
        self._accumulate(row, s.data.batch_size * len(uploads))

        acc = None
        if (it + 1) % s.training.eval_every == 0 or it + 1 == s.scenario.iterations:
            acc, loss = self.evaluate()
            writer.write_eval({"iteration": it, "sim_time_s": env.now, "accuracy": acc, "loss": loss})
            self.totals.evals.append((it, env.now, acc, loss))
        if self.on_progress:
            self.on_progress(Progress(it + 1, s.scenario.iterations, env.now, row["loss"], acc))

    def _accumulate(self, row: dict[str, Any], samples: int) -> None:
        t = self.totals
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

    def main(self, writer: RunWriter) -> Generator[simpy.Event, Any, None]:
        """SimPy process: every iteration in turn."""
        for it in range(self.sc.scenario.iterations):
            yield self.env.process(self.iteration(it, writer))

    # ---- running -------------------------------------------------------------------------------
    def run(self, out_dir: str | Path) -> dict[str, Any]:
        """Run the whole scenario, writing the run directory as it goes. Returns the summary.

        On Ctrl-C or an error, the rows written so far stay and ``summary.json`` is written with
        ``complete: false`` and the reason, then the exception propagates.
        """
        writer = RunWriter(out_dir, self.sc.to_toml())
        wall0 = time.perf_counter()
        status = "complete"
        try:
            self.env.process(self.main(writer))
            self.env.run()
        except KeyboardInterrupt:
            status = "interrupted"
            raise
        except Exception as exc:
            status = f"error: {type(exc).__name__}: {exc}"
            raise
        finally:
            summary = self.summary(time.perf_counter() - wall0, status)
            writer.write_trace(self.trace.events())
            writer.finish(summary)
        return summary

    def summary(self, wall_s: float, status: str) -> dict[str, Any]:
        """The run's ``summary.json`` content (without ``schema_version``)."""
        s, t = self.sc, self.totals
        sim_time = self.env.now
        dense_up = sum(L.dense_nbytes for L in self.layers) * self.n * t.iterations
        evals = t.evals
        target = s.training.target_accuracy
        tta = next((time_s for _, time_s, acc, _ in evals if acc >= target), None)
        iters = max(t.iterations, 1)
        mean_iter = sim_time / iters
        return {
            "complete": status == "complete",
            "status": status,
            "scenario": s.scenario.name,
            "compressor": s.compressor.name,
            "compressor_params": dict(s.compressor.params),
            "topology": s.network.topology,
            "iterations": t.iterations,
            "nodes": self.n,
            "seed": s.scenario.seed,
            "batch_size": s.data.batch_size,
            "sim_time_s": sim_time,
            "mean_iter_time_s": mean_iter if t.iterations else None,
            "throughput_samples_per_s": t.samples / sim_time if sim_time > 0 else None,
            "bytes_up": t.bytes_up,
            "bytes_down": t.bytes_down,
            "wire_bytes_up": t.wire_up,
            "wire_bytes_down": t.wire_down,
            "compression_ratio": dense_up / t.bytes_up if t.bytes_up else None,
            "mean_agg_bytes": t.agg_bytes / iters if t.iterations else None,
            "compute_share": t.compute_s / sim_time if sim_time > 0 else None,
            "encode_share": t.encode_s / sim_time if sim_time > 0 else None,
            "decode_share": t.decode_s / sim_time if sim_time > 0 else None,
            "comm_share": t.comm_s / sim_time if sim_time > 0 else None,
            "final_accuracy": evals[-1][2] if evals else None,
            "final_eval_loss": evals[-1][3] if evals else None,
            "best_accuracy": max(e[2] for e in evals) if evals else None,
            "target_accuracy": target,
            "time_to_accuracy_s": tta,
            "model": s.model.name,
            "dataset": s.data.dataset,
            "model_params": sum(L.numel for L in self.layers),
            "flops_per_batch": self.flops_per_batch,
            "wall_time_s": wall_s,
            "aiotsim_version": aiotsim.__version__,
            "torch_version": torch.__version__,
            "device": str(self.device),
        }


def run_scenario(scenario: Scenario, out_dir: str | Path, device: str = "auto", on_progress: Callable[[Progress], None] | None = None) -> dict[str, Any]:
    """Build and run a :class:`Simulation`; returns its summary."""
    return Simulation(scenario, device=device, on_progress=on_progress).run(out_dir)


__all__ = ["Simulation", "Progress", "run_scenario", "node_name", "SERVER"]
