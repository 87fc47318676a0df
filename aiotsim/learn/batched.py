"""Batched node gradients: every node's gradient at one parameter version in one vectorized pass.

When many nodes hold the same model version (a synchronous or partial round), their gradients
differ only in the batch. :class:`BatchedGradients` stacks the nodes' batches into
``[nodes, B, ...]`` and maps ``torch.func.grad_and_value`` of the loss over the node dimension with
``torch.func.vmap`` (the parameters are shared, ``in_dims=None``; the per-sample-gradient recipe of
``torch.func``, one level up: a "sample" is a node's whole batch). Each node's result is the
gradient of the mean loss over *its own* batch, exactly what the looped path
(:meth:`aiotsim.learn.compute.GradientComputer.gradient`) computes, up to float rounding. Nodes
are processed in chunks so that memory stays within a budget (:meth:`BatchedGradients.chunk_size`).

Batch normalization, per node, as in the looped path:

* **Forward statistics.** Inside the map every BN layer normalizes each node's batch with that
  batch's own mean and variance (BN runs in training mode without running statistics for the
  pass, :func:`~aiotsim.learn.compute.batch_stats_only`): a node's gradient never sees another
  node's samples.
* **Running statistics.** The looped path updates the shared model's running mean and variance
  once per node gradient, in the order the simulation asks for them. The batched pass records each
  node's batch mean and unbiased variance per BN layer (a forward pre-hook returns them through the
  map) and :meth:`NodeGradient.take` applies that node's update (PyTorch's exponential average, or
  the cumulative one when ``momentum`` is ``None``) when the node's gradient is handed out, so the
  running statistics see the same updates in the same order as looped, up to float rounding.

Where it wins: on a GPU, where one pass over thousands of small batches replaces thousands of
kernel launches. On the first 2-core development CPU (before 2026-11-25) it depended on the model
(``benchmarks/batched.py``, CPU time at one thread, batched / looped, chunks of the 128 MiB
budget): the batch-norm-free
lenet5 0.84x, mlp 0.60x, lenet-caffe 0.80x; alexnet 1.21x at the one node per pass that budget
holds (0.95x at 7); resnet20 and mobilenetv2 (batch norm) 1.2-1.6x. ``nodes.batched = "auto"``
therefore batches on CUDA, and on the CPU only fleets (:data:`CPU_MIN_NODES`) of models built from
the layer kinds measured faster (:func:`cpu_batches`); see :func:`use_batched`.

On the CPU the mapped pass wins only for small batches: one node's forward and backward at a time
is faster from :data:`CPU_LOOPED_PASS_BATCH` samples per node (measured on the AMD EPYC machine,
where a single LeNet-5 gradient at batch 32 takes 2.2 ms and its share of a mapped pass 3.9 ms).
There ``auto`` still makes the round's passes, for what they do beyond the gradients (one momentum
operation per layer for the pass's nodes, the batched encodes of
:mod:`aiotsim.sim.batching`), but fills each pass's ``[nodes, *shape]`` blocks node by node
(:meth:`BatchedGradients.gradients`): the looped path's gradients, bit for bit, so such a run's
results are those of ``nodes.batched = false``, and ``auto`` does so at any fleet size
(:func:`cpu_fills`; iot10 ``topk``: 37-38 ms per iteration instead of 44-46).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.func import functional_call, grad_and_value, vmap

from aiotsim.errors import ConfigError
from aiotsim.learn.compute import GradientComputer, GradResult, batch_stats_only
from aiotsim.learn.devices import sync

if TYPE_CHECKING:
    from aiotsim.config import NodesSection

# Device memory a batched pass may use when no chunk size is given: on CUDA this fraction of the
# free memory (torch.cuda.mem_get_info) ...
CUDA_BUDGET_FRACTION = 0.5
# ... and on the CPU a fixed budget, B (the process shares the host with everything else). Smaller
# passes run from cache: lenet5 at 128 nodes, CPU ms per node, budget 64 / 128 / 256 / 512 MiB:
# 8.07 / 8.13 / 8.29 / 8.97 (looped 9.62); mlp 1.39 / 1.19 / 1.24 / 1.24 (looped 1.99).
CPU_BUDGET_BYTES = 128 << 20
# "auto" on the CPU: the fleet size from which it maps passes (below, a round's gradients take well
# under a second either way, and small runs keep the looped path's results, which the documented
# results were measured with; mapped gradients differ from looped ones by float rounding; passes
# filled node by node, cpu_fills, give the looped values and run at any size) ...
CPU_MIN_NODES = 100
# ... the fewest nodes per pass (the budget's chunk) at which vmap's per-pass cost is amortized
# (alexnet, CPU ms per node: 1 node per pass 58.0, 3 nodes 48.7, looped 47.9) ...
CPU_MIN_CHUNK = 8
# ... and the only layer kinds a model may have (measured batched faster: lenet5, mlp, lenet-caffe,
# alexnet; batch norm slower: resnet20 1.24x, mobilenetv2 1.6x; others unmeasured, so looped).
CPU_LAYER_KINDS: tuple[type[nn.Module], ...] = (nn.Conv2d, nn.Linear, nn.MaxPool2d, nn.ReLU)
# ... and the batch size from which "auto" on the CPU computes a pass's gradients node by node
# (:meth:`BatchedGradients.gradients`; the pass stays a pass for the momentum and the encode): one
# node's forward and backward then beats the mapped pass (lenet5, 100 nodes, CPU ms per node at
# batch 4 / 8 / 16 / 32: node by node 0.64 / 0.86 / 1.29 / 2.20, mapped 0.33 / 0.69 / 1.65 / 3.86;
# AMD EPYC, one thread, torch 2.13).
CPU_LOOPED_PASS_BATCH = 16
# Memory a node's pass holds, relative to the bytes of its batch's forward outputs (every module's
# output): the saved outputs, their gradients and vmap's own copies. Measured with torch 2.13 on the
# CPU (peak RSS growth of one pass, minus one copy of the parameters, per node): lenet5 at batch 32
# 3.2x, resnet20 at batch 8 2.4x; 4 leaves a margin.
ACTIVATION_FACTOR = 4
# Copies of the parameters a node's pass holds: its gradient, and the per-node weight-gradient
# intermediates of the backward.
PARAM_FACTOR = 3
# Per-sample gradients (Gradient Variance's squares) mapped in one call, B: about 128 LeNet-5
# samples, where one call was fastest (CPU, 1 thread, s for 106 nodes: batch 4 by 4 / 16 / 32 / 106
# nodes per call 0.104 / 0.098 / 0.106 / 0.135, node by node 0.207; batch 32 by 1 / 2 / 4 / 8 nodes
# 0.61 / 0.55 / 0.45 / 0.72, node by node 0.59).
PER_SAMPLE_BUDGET_BYTES = 32 << 20


def use_batched(
    option: str | bool,
    device: torch.device,
    model: nn.Module | None = None,
    nodes: int = 0,
    batch_shape: tuple[int, ...] = (),
) -> bool:
    """Whether ``nodes.batched = option`` batches the node gradients on ``device``.

    ``True``/``False`` decide; ``"auto"`` batches on CUDA, and on the CPU when
    :func:`cpu_batches` says the fleet of ``nodes`` nodes training ``model`` on batches of
    ``batch_shape`` (``(B, C, H, W)``) is faster mapped, or :func:`cpu_fills` that its passes are
    faster filled node by node (without a model: looped).
    """
    if option is True or option is False:
        return option
    if option != "auto":
        raise ConfigError(f"nodes.batched(={option!r}) must be 'auto', true or false")
    if torch.device(device).type == "cuda":
        return True
    return model is not None and (cpu_batches(model, nodes, batch_shape) or cpu_fills(model, batch_shape))


def cpu_batches(model: nn.Module, nodes: int, batch_shape: tuple[int, ...]) -> bool:
    """``"auto"``'s choice on the CPU: batched for at least :data:`CPU_MIN_NODES` nodes of a model
    built only from :data:`CPU_LAYER_KINDS` (no batch norm) when :data:`CPU_BUDGET_BYTES` holds at
    least :data:`CPU_MIN_CHUNK` of its nodes per pass (the measurements are in those constants)."""
    if nodes < CPU_MIN_NODES or not _cpu_layer_kinds(model):
        return False
    return CPU_BUDGET_BYTES // node_pass_bytes(model, batch_shape) >= CPU_MIN_CHUNK


def cpu_fills(model: nn.Module, batch_shape: tuple[int, ...]) -> bool:
    """``"auto"``'s other choice on the CPU: passes filled node by node (the looped path's values
    bit for bit, so at any fleet size) for a model built only from :data:`CPU_LAYER_KINDS` (no batch
    norm, no random layers) at batches of at least :data:`CPU_LOOPED_PASS_BATCH` samples."""
    return bool(batch_shape) and batch_shape[0] >= CPU_LOOPED_PASS_BATCH and _cpu_layer_kinds(model)


def _cpu_layer_kinds(model: nn.Module) -> bool:
    """Whether ``model`` is built from :data:`CPU_LAYER_KINDS` alone."""
    leaves = [m for m in model.modules() if not list(m.children())]
    return bool(leaves) and all(isinstance(m, CPU_LAYER_KINDS) for m in leaves)


def node_pass_bytes(model: nn.Module, batch_shape: tuple[int, ...], sample_bytes: int | None = None) -> int:
    """Bytes one node's share of a batched pass holds: ``ACTIVATION_FACTOR x B x`` one sample's
    forward outputs (``sample_bytes``, measured by :func:`forward_bytes` when not given) plus
    ``PARAM_FACTOR x`` the parameters (``batch_shape`` is ``(B, C, H, W)``)."""
    if sample_bytes is None:
        sample_bytes = forward_bytes(model, tuple(batch_shape[1:]))
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    return max(1, ACTIVATION_FACTOR * batch_shape[0] * sample_bytes + PARAM_FACTOR * params)


def forward_bytes(model: nn.Module, sample_shape: tuple[int, ...]) -> int:
    """Bytes of every module output of a one-sample fp32 forward of ``model`` (on its device; the
    meta device measures without memory)."""
    total = 0

    def count(_m: nn.Module, _i: Any, out: Any) -> None:
        nonlocal total
        if isinstance(out, torch.Tensor):
            total += out.numel() * out.element_size()

    leaves = [m for m in model.modules() if not list(m.children())]
    handles = [m.register_forward_hook(count) for m in leaves]
    device = next(model.parameters(), torch.empty(0)).device  # (a model without parameters: the CPU)
    try:
        # 2 samples: a BN layer in training mode refuses a batch of one with 1x1 maps
        x = torch.zeros((2, *sample_shape), device=device)
        with torch.no_grad(), batch_stats_only(model):
            model(x)
    finally:
        for h in handles:
            h.remove()
    return total // 2


def per_sample_nodes(batch: int, param_bytes: int) -> int:
    """Nodes whose per-sample gradients one call of :meth:`BatchedGradients.per_sample_sq` maps at
    once: as many as :data:`PER_SAMPLE_BUDGET_BYTES` of per-sample gradients hold (at least one)."""
    return max(1, PER_SAMPLE_BUDGET_BYTES // max(1, batch * param_bytes))


def pass_nodes(nodes: int, chunk: int, budget_nodes: Callable[[], int]) -> int:
    """Nodes per pass for a fleet of ``nodes``: ``chunk`` (``nodes.batch_chunk``) when set, else
    ``budget_nodes()`` (as many as the memory budget holds; only then computed), at least one and at
    most ``nodes``. :meth:`BatchedGradients.chunk_size` and ``validate``'s estimate share it."""
    return max(1, min(nodes, chunk or budget_nodes()))


def fleet_batcher(
    computer: GradientComputer, section: NodesSection, nodes: int, batch_shape: tuple[int, ...]
) -> BatchedGradients | None:
    """:func:`node_batcher` for a scenario's ``[nodes]`` section (``batched``, ``batch_chunk``) and
    a fleet of ``nodes`` with batches of ``batch_shape``, filling passes below a fleet where
    :func:`fills_below_fleet` allows it."""
    small = fills_below_fleet(section)
    return node_batcher(computer, section.batched, section.batch_chunk, nodes, batch_shape, small)


def fills_below_fleet(section: NodesSection) -> bool:
    """Whether ``"auto"`` may fill passes below a fleet: only where the simulated compute time is
    not the host's wall time (``compute_model = "measured"`` would charge a node its share of a
    batched encode, less than its own encode's, so such runs stay looped, as they were)."""
    return section.compute_model != "measured"


def node_batcher(
    computer: GradientComputer,
    option: str | bool,
    chunk: int = 0,
    nodes: int = 0,
    batch_shape: tuple[int, ...] = (),
    fill_small: bool = True,
) -> BatchedGradients | None:
    """The batched pass for ``computer`` when ``nodes.batched = option`` batches on its device for a
    fleet of ``nodes`` with batches of ``batch_shape`` (:func:`use_batched`), else ``None`` (looped).
    ``fill_small``: ``"auto"`` on the CPU may fill passes below a fleet (False: those runs loop)."""
    on = use_batched(option, computer.device, computer.model, nodes, batch_shape)
    if not on:
        return None
    if option == "auto" and computer.device.type == "cpu":  # mapped only where cpu_batches says so
        maps = cpu_batches(computer.model, nodes, batch_shape)
        if not maps and not fill_small:
            return None
        return BatchedGradients(computer, chunk, loop_from=CPU_LOOPED_PASS_BATCH, maps=maps)
    return BatchedGradients(computer, chunk)


@dataclass
class NodeGradient:
    """One node's share of a batched pass, handed out with :meth:`take`.

    Attributes
    ----------
    grads : list of torch.Tensor
        Per parameter, the node's gradient (a view into the pass's ``[nodes, *shape]`` output).
    loss : float
        Mean loss over the node's batch.
    wall_s : float
        The node's share of the pass's wall time, s: the chunk's time / nodes in the chunk.
    norms : list of (module, mean, var)
        Per BN call of the forward, in call order: the node's batch mean and unbiased variance.
    rows : list of torch.Tensor
        The pass's ``[nodes, *shape]`` outputs per parameter (shared by the pass's nodes), of which
        ``grads`` is row ``row``; for whole-pass steps on them (empty: not from a pass).
    row : int
        This node's row in ``rows`` (and in ``sq_rows``).
    sq_rows : list of torch.Tensor
        With ``per_sample_sq``: per parameter the pass's ``[nodes, *shape]`` batch means of
        squared per-sample gradients (Gradient Variance's input), else empty.
    """

    grads: list[torch.Tensor]
    loss: float
    wall_s: float
    norms: list[tuple[nn.Module, torch.Tensor, torch.Tensor]] = field(default_factory=list)
    rows: list[torch.Tensor] = field(default_factory=list)
    row: int = 0
    sq_rows: list[torch.Tensor] = field(default_factory=list)

    def take(self) -> GradResult:
        """Apply this node's BN running-statistics update to the shared model (as the looped
        forward would have) and return its gradient as a :class:`GradResult`."""
        if self.norms:  # (entering no_grad costs ~5 us: a 1,000-node round of a BN-free model skips it)
            with torch.no_grad():
                for module, mean, var in self.norms:
                    _update_running_stats(module, mean, var)
            self.norms = []  # applied once
        sq = [r[self.row] for r in self.sq_rows] if self.sq_rows else None
        return GradResult(grads=self.grads, loss=self.loss, wall_s=self.wall_s, sq_grads=sq)


def _update_running_stats(m: nn.Module, mean: torch.Tensor, var: torch.Tensor) -> None:
    """PyTorch's BN running-statistics update from one batch's ``mean`` and unbiased ``var``."""
    assert isinstance(m, nn.modules.batchnorm._BatchNorm)
    m.num_batches_tracked.add_(1)
    factor = 1.0 / float(m.num_batches_tracked) if m.momentum is None else float(m.momentum)
    m.running_mean.mul_(1 - factor).add_(mean.to(m.running_mean.dtype), alpha=factor)
    m.running_var.mul_(1 - factor).add_(var.to(m.running_var.dtype), alpha=factor)


class BatchedGradients:
    """Every node's gradient at one parameter version, in vectorized chunks of nodes.

    Parameters
    ----------
    computer : GradientComputer
        The looped computer whose model, buffers and loss this pass shares.
    chunk : int
        Nodes per vectorized pass; 0 picks it from a memory budget (:meth:`chunk_size`).
    loop_from : int
        Batch size from which a pass computes its nodes' gradients one node at a time, through
        the looped computer, instead of mapped (0: always mapped). Only for models without batch
        normalization: there the looped path's values come out bit for bit (``auto`` on the CPU,
        :data:`CPU_LOOPED_PASS_BATCH`).
    maps : bool
        Whether smaller batches are mapped; False: they are not this pass's (:meth:`handles`),
        the looped path computes them (``auto`` on the CPU below :data:`CPU_MIN_NODES`).
    """

    def __init__(self, computer: GradientComputer, chunk: int = 0, loop_from: int = 0, maps: bool = True) -> None:
        if chunk < 0:
            raise ConfigError(f"nodes.batch_chunk(={chunk}) must be >= 0")
        self.computer = computer
        self.chunk = int(chunk)
        self.model = computer.model
        self.norm_modules = [
            m for m in self.model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.track_running_stats
        ]
        self.loop_from = 0 if self.norm_modules else int(loop_from)
        self.maps = maps or not self.loop_from  # a pass that cannot loop maps
        self._sample_bytes: dict[tuple[int, ...], int] = {}  # sample shape -> forward output bytes

    # -- memory ---------------------------------------------------------------------------------
    def activation_bytes(self, sample_shape: tuple[int, ...]) -> int:
        """Bytes of every module output of a one-sample forward (fp32), measured once per shape."""
        key = tuple(int(s) for s in sample_shape)
        if key not in self._sample_bytes:
            self._sample_bytes[key] = forward_bytes(self.model, key)
        return self._sample_bytes[key]

    def budget_bytes(self) -> int:
        """Memory one chunk may use: half the free CUDA memory, or :data:`CPU_BUDGET_BYTES`."""
        dev = self.computer.device
        if dev.type == "cuda":
            free, _ = torch.cuda.mem_get_info(dev)
            return int(free * CUDA_BUDGET_FRACTION)
        return CPU_BUDGET_BYTES

    def chunk_size(self, nodes: int, batch_shape: tuple[int, ...]) -> int:
        """Nodes per pass: ``nodes.batch_chunk`` when set, else as many as the budget holds
        (:func:`node_pass_bytes` each; ``batch_shape`` is ``(B, C, H, W)``)."""

        def budget_nodes() -> int:
            per_node = node_pass_bytes(self.model, batch_shape, self.activation_bytes(tuple(batch_shape[1:])))
            return self.budget_bytes() // per_node

        return pass_nodes(nodes, self.chunk, budget_nodes)

    # -- the pass -------------------------------------------------------------------------------
    def gradients(
        self, params: list[torch.Tensor] | None, xs: torch.Tensor, ys: torch.Tensor, per_sample_sq: bool = False
    ) -> list[NodeGradient]:
        """Every node's gradient of its batch-mean loss at ``params``.

        Parameters
        ----------
        params : list of torch.Tensor or None
            The version the nodes hold, in ``model.parameters()`` order; ``None``: the model's own.
        xs : torch.Tensor
            ``[nodes, B, C, H, W]``: node ``i``'s batch is ``xs[i]``.
        ys : torch.Tensor
            ``[nodes, B]`` int64 targets.
        per_sample_sq : bool
            Also each node's batch mean of squared per-sample gradients (``NodeGradient.sq_rows``,
            :meth:`per_sample_sq`), as the looped ``GradientComputer.gradient`` computes it.

        Returns
        -------
        list of NodeGradient
            One per node, in order; their BN updates are applied by :meth:`NodeGradient.take`.
        """
        nodes = int(xs.shape[0])
        if ys.shape[:1] != xs.shape[:1]:
            raise ValueError(f"xs has {nodes} node batches, ys {int(ys.shape[0])}")
        leaves = list(self.model.parameters()) if params is None else list(params)
        if len(leaves) != len(self.computer.names):
            raise ValueError(f"got {len(leaves)} parameter tensors, the model has {len(self.computer.names)}")
        if not self.handles(int(xs.shape[1])):
            raise ValueError(f"batches of {int(xs.shape[1])} are left to the looped path (handles())")
        step = self.chunk_size(nodes, tuple(xs.shape[1:]))
        if self.loops(int(xs.shape[1])):
            return [
                g
                for start in range(0, nodes, step)
                for g in self._looped(params, xs[start : start + step], ys[start : start + step], per_sample_sq)
            ]
        pdict = {n: p.detach() for n, p in zip(self.computer.names, leaves)}
        out: list[NodeGradient] = []
        for start in range(0, nodes, step):
            chunk = self._chunk(pdict, xs[start : start + step], ys[start : start + step])
            if per_sample_sq:
                sq_rows = self.per_sample_sq(leaves, xs[start : start + step], ys[start : start + step])
                for g in chunk:
                    g.sq_rows = sq_rows
            out.extend(chunk)
        return out

    def per_sample_sq(self, params: list[torch.Tensor], xs: torch.Tensor, ys: torch.Tensor) -> list[torch.Tensor]:
        """Per parameter, ``[nodes, *shape]``: each node's mean over its batch of the squared
        per-sample gradients at ``params``, the looped ``GradientComputer._per_sample_sq`` of
        every node at once. The nodes' samples are mapped together
        (:meth:`GradientComputer.per_sample_grads` of ``xs`` flattened to ``[nodes x B, ...]``),
        :func:`per_sample_nodes` nodes at a time, and each node's ``B`` rows averaged: node by
        node's values up to float rounding (a conv's batched backward may sum in another order;
        tests/test_batched.py), with the pass's per-sample gradients within
        :data:`PER_SAMPLE_BUDGET_BYTES`."""
        nodes, batch = int(xs.shape[0]), int(xs.shape[1])
        params = [p.detach() for p in params]
        step = per_sample_nodes(batch, sum(p.numel() * p.element_size() for p in params))
        parts: list[list[torch.Tensor]] = []
        for a in range(0, nodes, step):
            m = min(step, nodes - a)
            per = self.computer.per_sample_grads(params, xs[a : a + m].flatten(0, 1), ys[a : a + m].flatten(0, 1))
            # squared in place (the per-sample gradients are ours alone): no second [m x batch, *shape]
            parts.append([per[n].view(m, batch, *per[n].shape[1:]).square_().mean(dim=1) for n in self.computer.names])
        return [torch.cat(col) if len(col) > 1 else col[0] for col in zip(*parts)]

    def loops(self, batch: int) -> bool:
        """Whether a pass of batches of ``batch`` samples computes its gradients node by node."""
        return 0 < self.loop_from <= batch

    def handles(self, batch: int) -> bool:
        """Whether batches of ``batch`` samples are this pass's (mapped or node by node)."""
        return self.maps or self.loops(batch)

    def _looped(
        self, params: list[torch.Tensor] | None, xs: torch.Tensor, ys: torch.Tensor, per_sample_sq: bool
    ) -> list[NodeGradient]:
        """A pass's nodes one at a time through :meth:`GradientComputer.gradient` (the looped
        path's own values, bit for bit), each gradient (and its squares) copied into row ``k`` of
        ``[nodes, *shape]`` blocks, as a mapped pass returns them."""
        n = int(xs.shape[0])
        rows: list[torch.Tensor] = []
        sq_rows: list[torch.Tensor] = []
        out: list[NodeGradient] = []
        for k in range(n):
            res = self.computer.gradient(params, xs[k], ys[k], per_sample_sq=per_sample_sq)
            if not rows:
                rows = [torch.empty((n, *g.shape), dtype=g.dtype, device=g.device) for g in res.grads]
                sq_rows = [torch.empty((n, *q.shape), dtype=q.dtype, device=q.device) for q in res.sq_grads or []]
            for block, g in zip(rows, res.grads):
                block[k].copy_(g)
            for block, q in zip(sq_rows, res.sq_grads or []):
                block[k].copy_(q)
            out.append(NodeGradient([], res.loss, res.wall_s, rows=rows, row=k, sq_rows=sq_rows))
        per_row = [block.unbind(0) for block in rows]  # views, one call per parameter
        for g in out:
            g.grads = [r[g.row] for r in per_row]
        return out

    def _chunk(self, pdict: dict[str, torch.Tensor], xs: torch.Tensor, ys: torch.Tensor) -> list[NodeGradient]:
        """One vectorized pass over ``xs.shape[0]`` nodes."""
        n = int(xs.shape[0])
        device = self.computer.device
        calls: list[nn.Module] = []  # BN modules in call order (the same for every traced call)
        with self._recording(calls) as loss_fn:
            sync(device)
            t0 = time.perf_counter()
            grads, (loss, stats) = _mapped(loss_fn)(pdict, xs, ys)
            losses = loss.tolist()  # the pass's one host sync, [n] floats
            sync(device)
            wall = (time.perf_counter() - t0) / n
        per_name = [grads[name] for name in self.computer.names]  # [n, *shape] each
        rows = [g.unbind(0) for g in per_name]  # per parameter, each node's row (views; one call, not n)
        result = []
        for i in range(n):
            norms = [(m, mean[i], var[i]) for m, (mean, var) in zip(calls, stats)]
            result.append(NodeGradient([r[i] for r in rows], float(losses[i]), wall, norms, per_name, i))
        return result

    @contextmanager
    def _recording(self, calls: list[nn.Module]) -> Iterator[Callable[..., Any]]:
        """The per-node loss function (returns ``loss, BN stats``), with BN pre-hooks that
        record each call's batch mean and unbiased variance, and BN without running statistics."""
        computer = self.computer
        captured: list[tuple[torch.Tensor, torch.Tensor]] = []

        def hook(module: nn.Module, inputs: tuple[torch.Tensor, ...]) -> None:
            x = inputs[0].detach()  # the node's [B, C, ...] (a batched tensor inside the map)
            dims = [0, *range(2, x.dim())]
            calls.append(module)
            captured.append((x.mean(dim=dims), x.var(dim=dims, unbiased=True)))

        def node_loss(p: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> Any:
            calls.clear()
            captured.clear()
            state = {**p, **computer.buffers} if computer.buffers else p
            loss = computer.loss_fn(functional_call(self.model, state, (x,)), y)
            return loss, list(captured)

        handles = [m.register_forward_pre_hook(hook) for m in self.norm_modules]
        try:
            with batch_stats_only(self.model):
                yield node_loss
        finally:
            for h in handles:
                h.remove()


def _mapped(loss_fn: Callable[..., Any]) -> Callable[..., Any]:
    """``grad_and_value(loss_fn)`` mapped over the node dimension of the batches (the parameters
    shared). Random layers (dropout) draw each node's own values (``randomness="different"``), as
    independent nodes would, though not the looped path's draws. A model that ``vmap`` cannot map
    raises :class:`ConfigError` naming the way out."""
    mapped = vmap(grad_and_value(loss_fn, has_aux=True), in_dims=(None, 0, 0), randomness="different")

    def call(*args: Any) -> Any:
        try:
            return mapped(*args)
        except RuntimeError as e:
            if "vmap" not in str(e):
                raise
            raise ConfigError(
                f"nodes.batched: torch.func.vmap cannot batch this model's gradients ({e}); "
                "set nodes.batched = false (the looped path)"
            ) from e

    return call


__all__ = [
    "BatchedGradients",
    "NodeGradient",
    "cpu_batches",
    "cpu_fills",
    "fills_below_fleet",
    "fleet_batcher",
    "forward_bytes",
    "node_batcher",
    "pass_nodes",
    "per_sample_nodes",
    "node_pass_bytes",
    "use_batched",
]
