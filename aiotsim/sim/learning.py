"""Learning: what the nodes and the server compute, apart from when it happens.

A node's round is a gradient on its next batch (with the node's momentum when the scenario puts
momentum on the nodes), then every layer encoded with the codec (its residuals and other state
kept per node and layer), then optionally momentum factor masking. The server decodes the uploads,
aggregates them per layer, prepares what the nodes will download (the model, the sparse union of
the updates, or the update re-encoded) and steps its optimizer.

:class:`Learning` does exactly that real work and returns values plus their costs (CUDA-
synchronized wall seconds, FLOPs per batch); it never touches simulated time or SimPy. The
simulation (:mod:`aiotsim.sim.world`) turns those costs into simulated seconds with each device's
compute model. Keeping the computation in one place is what lets the gradients of all nodes be
batched into one pass later without touching the strategies.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass

import torch

from aiotsim.compress.base import Codec, CodecState, LayerInfo, Payload
from aiotsim.compress.registry import build_codec
from aiotsim.compress.sparse import sparse_payload
from aiotsim.config import Scenario
from aiotsim.errors import ConfigError
from aiotsim.learn.batched import NodeGradient, fleet_batcher
from aiotsim.learn.compute import BatchStream, GradientComputer
from aiotsim.learn.data.transforms import augmentation
from aiotsim.learn.datasets import Dataset, SyntheticSpec, load_dataset
from aiotsim.learn.models import build_model, layer_infos
from aiotsim.learn.partition import node_shards
from aiotsim.sim.aggregate import Aggregation, StackBuffer, aggregation_mode, sync_device
from aiotsim.sim.allocator import HeapTrimmer
from aiotsim.sim.pages import StatePages
from aiotsim.sim.stops import Diverged
from aiotsim.sim.storage import DTYPES, narrow_states, step_velocity, widen_states


@dataclass
class LocalState:
    """What one node keeps for learning between rounds."""

    stream: BatchStream  # its shard's batches
    states: list[CodecState]  # codec state per layer (residuals, ...)
    velocity: list[torch.Tensor] | None = None  # momentum_at = "nodes": momentum buffer per layer
    pending: NodeGradient | None = None  # its next gradient, from a batched pass (sim/batching.py)
    encoded: tuple[list[Payload], float] | None = None  # its pending gradient's payloads, wall s
    stepped: bool = False  # its pending gradient already holds its momentum step (taken at dispatch)


@dataclass
class Gradient:
    """A node's gradient on one batch and what it cost."""

    grads: list[torch.Tensor]  # per layer (the momentum buffer when momentum is on the nodes)
    loss: float  # training loss of the batch
    wall_s: float  # host seconds of forward + backward
    flops: float  # FLOPs of forward + backward on one batch
    sq: list[torch.Tensor] | None  # mean per-sample squared gradients (codecs that need them)


@dataclass
class Update:
    """What the server applies after an aggregation, and its message sizes."""

    applied: list[torch.Tensor]  # per layer, what the optimizer steps with
    nbytes: int  # payload bytes an up-to-date node downloads
    agg_nnz: int  # non-zeros of the applied update
    agg_bytes: int  # its size as one sparse message per layer (dense codecs: the model)


class Learning:
    """The scenario's data, model, codecs and optimizer, and the computations on them.

    Parameters
    ----------
    scenario : Scenario
        The validated scenario.
    device : torch.device
        Where the real learning runs.
    shares : list of float
        Relative data share of each node (the node layout's).
    model : torch.nn.Module, optional
        A ready model used instead of ``model.name`` (deep-copied: the caller's module is never
        written; its initialization is the caller's).
    data : Dataset, optional
        A ready data set used instead of ``data.dataset``.
    """

    def __init__(
        self,
        scenario: Scenario,
        device: torch.device,
        shares: list[float],
        model: torch.nn.Module | None = None,
        data: Dataset | None = None,
    ) -> None:
        s = self.sc = scenario
        self.device = device
        seed = s.scenario.seed
        self.data: Dataset = data if data is not None else _load_data(s)
        if model is None:
            model = build_model(s.model.name, self.data.input_shape, self.data.num_classes, seed=seed)
        else:
            model = copy.deepcopy(model).cpu().train()
            check_model_output(model, self.data)
        self.model = model.to(device)
        self.layers: list[LayerInfo] = layer_infos(self.model)
        self.params = list(self.model.parameters())
        self.shards = node_shards(
            self.data.train_y,
            len(shares),
            s.data.partition,
            s.data.alpha,
            seed,
            s.data.samples_per_node,  # > 0: drawn with replacement, per node, on first use
            shares=shares,
            writers=self.data.train_writers,
        )
        self.computer = GradientComputer(self.model, device)
        batch_shape = (s.data.batch_size, *self.data.input_shape)  # a node's batch, (B, C, H, W)
        self.batched = fleet_batcher(self.computer, s.nodes, len(shares), batch_shape)
        self.flops_per_batch = self.computer.train_flops(batch_shape)
        test_n = s.data.eval_samples or len(self.data.test_y)
        self.test_x, self.test_y = self.data.test_x[:test_n].to(device), self.data.test_y[:test_n].to(device)
        self.dense_model_bytes = sum(L.dense_nbytes for L in self.layers)  # fp32 model, B
        self.elements = sum(L.numel for L in self.layers)
        # one codec instance serves every node; its state lives per node and layer
        self.codec: Codec = build_codec(s.compressor.name, s.compressor.params, seed=seed)
        self.dense: Codec = build_codec("none", seed=seed)
        self.layer_codecs = [self.codec if L.numel >= s.compressor.min_size else self.dense for L in self.layers]
        self.server_states = self.new_states(-1)  # compressed (bidirectional) downlink
        self.aggregation_mode = aggregation_mode(s.training.aggregation, len(shares), self.elements, type(self.codec))
        self.stack_buffer = StackBuffer()  # stacked aggregations reuse its pages round after round
        self.trimmer = HeapTrimmer() if self.aggregation_mode == "streamed" else None  # the run's heap trims
        self.state_dtype = DTYPES[s.nodes.state_dtype]  # storage of residuals and velocities
        self.pages = StatePages()  # where that state lives (CPU): off the C heap
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

    # ---- nodes ---------------------------------------------------------------------------------
    def new_states(self, owner: int) -> list[CodecState]:
        """Fresh codec states, one per layer, for node (or gateway/server) id ``owner``."""
        return [c.init_state(L, self.device, node=owner) for c, L in zip(self.layer_codecs, self.layers)]

    def local_state(self, i: int) -> LocalState:
        """Node ``i``'s batch stream (seeded per node) and fresh codec states."""
        s = self.sc
        stream = BatchStream(
            self.data.train_x, self.data.train_y, self.shards[i], s.data.batch_size,
            seed=s.scenario.seed * 1000 + i, device=self.device, transform=augmentation(s.data.augment),
        )  # fmt: skip
        return LocalState(stream, self.new_states(i))

    def gradient(self, local: LocalState, params: list[torch.Tensor] | None) -> Gradient:
        """The gradient on the node's next batch, at ``params`` (``None``: the current model), or
        the one a batched pass computed for it at dispatch (on the same batch and version)."""
        stepped, local.stepped = local.stepped, False
        if local.pending is not None:
            res, local.pending = local.pending.take(), None
        else:
            x, y = local.stream.next()
            res = self.computer.gradient(params, x, y, per_sample_sq=self.codec.needs_sq_grad)
        grads = res.grads if stepped else self.momentum_step(local, res.grads)
        return Gradient(grads, res.loss, res.wall_s, self.flops_per_batch, res.sq_grads)

    def momentum_step(self, local: LocalState, grads: list[torch.Tensor]) -> list[torch.Tensor]:
        """Momentum correction with momentum on the nodes: the node accumulates ``u = m u + g`` (its
        velocity, stored as ``state_dtype``) and sends (a compression of) ``u``; returns ``u`` in fp32
        for this step, or ``grads`` themselves without node momentum."""
        if not self.node_momentum:
            return grads
        u, local.velocity = step_velocity(local.velocity, grads, self.node_momentum, self.state_dtype, self.pages)
        return u

    def encode(
        self,
        grads: list[torch.Tensor],
        states: list[CodecState],
        sq: list[torch.Tensor] | None = None,
        codecs: list[Codec] | None = None,
    ) -> tuple[list[Payload], float]:
        """Encode every layer: ``(payloads, wall seconds)``."""
        codecs = codecs or self.layer_codecs
        sync_device(self.device)
        t0 = time.perf_counter()
        payloads = []
        narrow = widen_states(states)
        for j, (codec, layer, g) in enumerate(zip(codecs, self.layers, grads)):
            states[j].sq_grad = sq[j] if sq is not None else None
            payloads.append(codec.encode(g, layer, states[j]))
            states[j].sq_grad = None  # read by this encode only: not a model-sized tensor per node until the next
        narrow_states(states, self.state_dtype, narrow, self.pages)
        sync_device(self.device)
        return payloads, time.perf_counter() - t0

    def mask_momentum(self, local: LocalState, payloads: list[Payload]) -> float:
        """Momentum factor masking (Lin et al. 2018), when ``training.momentum_masking`` is on: with
        momentum on the nodes and a sparse codec, the velocity of every coordinate just sent is
        cleared, so stale momentum does not refill the residual it was sent from. Off by default:
        it also strips the momentum of every coordinate sent at most steps, which on iot10 slows
        the dense-ish sparsifiers (threshold 90.8% vs 95.4%, variance 91.9% vs 95.x%). Returns
        the wall seconds it took."""
        masking = self.sc.training.momentum_masking
        if not (masking and self.node_momentum and self.codec.sparse and local.velocity is not None):
            return 0.0
        t0 = time.perf_counter()
        for j, (codec, layer) in enumerate(zip(self.layer_codecs, self.layers)):
            if codec is self.codec:
                sent = codec.decode(payloads[j], layer) != 0
                local.velocity[j].masked_fill_(sent, 0.0)
        return time.perf_counter() - t0

    # ---- server -------------------------------------------------------------------------------
    def aggregation(self) -> Aggregation:
        """An empty aggregation of uploads (``training.aggregation``: stacked or streamed)."""
        return Aggregation(
            self.layer_codecs, self.dense, self.layers, self.device,
            streamed=self.aggregation_mode == "streamed",
            weighted=self.codec.supports_ring(),  # a mean; signSGD's vote counts each message once
            buffer=self.stack_buffer,
            trimmer=self.trimmer,
        )  # fmt: skip

    def decode_aggregate(
        self, messages: list[list[Payload]], weights: list[int], dense: list[bool], keys: list[int]
    ) -> tuple[list[torch.Tensor], float]:
        """Decode every message and aggregate per layer, weighting each by its node count.

        ``messages[u][j]`` is message ``u``'s payload of layer ``j``; ``dense[u]`` marks a message
        sent as dense fp32 (a gateway in ``dense`` mode). Returns ``(aggregate per layer, wall
        seconds)``; signSGD's majority vote counts each message once; ``keys[u]`` (first node) orders them."""
        agg = self.aggregation()
        for m, w, d, k in zip(messages, weights, dense, keys):
            agg.add(m, w, d, key=k)
        return agg.result()

    def prepare_update(self, agg: list[torch.Tensor]) -> Update:
        """What the server applies and what an up-to-date node downloads.

        ``model``: the dense fp32 parameters (the update applied is ``agg``).
        ``union``: the aggregated update as a sparse message (its index set is the union).
        ``compressed``: ``agg`` re-encoded with the codec and the server's own residuals; the
        server applies what the nodes decode, so every replica stays identical.
        """
        mode = self.sc.compressor.downlink
        if mode != "compressed":
            nnz, size = self.aggregated_size(agg)
            return Update(agg, self.dense_model_bytes if mode == "model" else size, nnz, size)
        applied, nbytes = [], 0
        for j, (codec, layer) in enumerate(zip(self.layer_codecs, self.layers)):
            p = codec.encode(agg[j], layer, self.server_states[j])
            nbytes += p.nbytes
            applied.append(codec.decode(p, layer))
        return Update(applied, nbytes, *self.aggregated_size(applied))

    def aggregated_size(self, applied: list[torch.Tensor]) -> tuple[int, int]:
        """``(non-zeros, bytes)`` of the aggregated update as one sparse message per layer: for a
        sparse codec the union of the workers' index sets (seed 001's aggregated size). A dense
        codec's aggregate is dense, so its size is the fp32 model size (no message is built)."""
        if self.codec.sparse or self.sc.compressor.downlink == "union":
            return (
                sum(int(torch.count_nonzero(a)) for a in applied),
                sum(_sparse_message(a).nbytes for a in applied),
            )
        return self.elements, self.dense_model_bytes

    def step(self, update: list[torch.Tensor]) -> None:
        """Apply the aggregated update with the server optimizer (the same step on every replica).

        Raises :class:`~aiotsim.sim.stops.Diverged` when the step overflows the parameters' dtype.
        """
        for p, g in zip(self.params, update):
            p.grad = g.to(p.dtype)
        try:
            self.optimizer.step()
        except RuntimeError as exc:  # torch refuses a step size its dtype cannot hold
            if "overflow" not in str(exc):
                raise
            raise Diverged(f"the optimizer step overflows the parameters ({exc})") from None
        self.optimizer.zero_grad(set_to_none=True)

    def snapshot(self) -> list[torch.Tensor]:
        """A copy of the current parameters (for nodes that work on this version later)."""
        return [p.detach().clone() for p in self.params]

    def evaluate(self) -> tuple[float, float]:
        """Accuracy and loss of the global model on the held-out test split."""
        return self.computer.evaluate(None, self.test_x, self.test_y)


def check_model_output(model: torch.nn.Module, data: Dataset) -> None:
    """Raise :class:`ConfigError` unless ``model`` maps a sample batch of ``data`` to logits of
    shape ``[B, num_classes]`` (the model runs on the CPU, on a copy's parameters as they are)."""
    x = data.train_x[:2]  # [2, *input_shape]
    try:
        with torch.no_grad():
            out = model.eval()(x)
    except Exception as exc:  # a user module that cannot take the data's inputs
        raise ConfigError(
            f"model {type(model).__name__} cannot run on a batch of shape {list(x.shape)}: {exc}"
        ) from None
    finally:
        model.train()
    want = [x.shape[0], data.num_classes]
    if not isinstance(out, torch.Tensor) or list(out.shape) != want:
        got = list(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise ConfigError(
            f"model {type(model).__name__} must map a batch of shape {list(x.shape)} to logits "
            f"[B, num_classes] = {want}, got {got}"
        )


def _load_data(s: Scenario) -> Dataset:
    d = s.data
    spec = SyntheticSpec(
        tuple(d.synthetic_shape), d.synthetic_classes, d.synthetic_train_size, d.synthetic_test_size, d.synthetic_noise
    )
    return load_dataset(
        d.dataset,
        seed=s.scenario.seed,
        test_fraction=d.test_fraction,
        synthetic=spec,
        path=d.path or None,
        download=d.download,
        cache_dir=d.cache_dir,
        normalize=d.normalize,
    )


def _sparse_message(update: torch.Tensor) -> Payload:
    flat = update.reshape(-1)
    idx = torch.nonzero(flat, as_tuple=False).reshape(-1)
    return sparse_payload(idx, flat[idx].float(), flat.numel(), ascending=True)


__all__ = ["Learning", "LocalState", "Gradient", "Update", "sync_device", "check_model_output"]
