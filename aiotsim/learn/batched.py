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
kernel launches. On the 2-core development CPU it depends on the model (``benchmarks/batched.py``,
CPU seconds at one thread): lenet5 ~0.7x the looped time, resnet20 (conv + BN) ~1.3x. On the CPU
``nodes.batched = "auto"`` stays looped: batching there changes every existing run's numbers by
float rounding, and ``true`` opts in (see :func:`use_batched`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.func import functional_call, grad_and_value, vmap

from aiotsim.errors import ConfigError
from aiotsim.learn.compute import GradientComputer, GradResult, batch_stats_only

# Device memory a batched pass may use when no chunk size is given: on CUDA this fraction of the
# free memory (torch.cuda.mem_get_info) ...
CUDA_BUDGET_FRACTION = 0.5
# ... and on the CPU a fixed budget, B (the process shares the host with everything else).
CPU_BUDGET_BYTES = 1 << 30
# Memory a node's pass holds, relative to the bytes of its batch's forward outputs (every module's
# output): the saved outputs, their gradients and vmap's own copies. Measured with torch 2.13 on the
# CPU (peak RSS growth of one pass, minus one copy of the parameters, per node): lenet5 at batch 32
# 3.2x, resnet20 at batch 8 2.4x; 4 leaves a margin.
ACTIVATION_FACTOR = 4
# Copies of the parameters a node's pass holds: its gradient, and the per-node weight-gradient
# intermediates of the backward.
PARAM_FACTOR = 3


def use_batched(option: str | bool, device: torch.device) -> bool:
    """Whether ``nodes.batched = option`` batches the node gradients on ``device``.

    ``True``/``False`` decide; ``"auto"`` batches on CUDA only. On the 2-core development CPU the
    batched pass measured faster for lenet5 (about 0.7x the looped CPU time at 10 to 1,000 nodes)
    but slower for resnet20 (about 1.3x; ``benchmarks/batched.py``, numbers in
    docs/ARCHITECTURE.md), and batching by default would move every existing CPU run's results
    by float rounding, so ``auto`` keeps the looped path there.
    """
    if option is True or option is False:
        return option
    if option != "auto":
        raise ConfigError(f"nodes.batched(={option!r}) must be 'auto', true or false")
    return torch.device(device).type == "cuda"


def node_batcher(computer: GradientComputer, option: str | bool, chunk: int = 0) -> BatchedGradients | None:
    """The batched pass for ``computer`` when ``nodes.batched = option`` batches on its device
    (:func:`use_batched`), else ``None`` (the looped path)."""
    return BatchedGradients(computer, chunk) if use_batched(option, computer.device) else None


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
    """

    grads: list[torch.Tensor]
    loss: float
    wall_s: float
    norms: list[tuple[nn.Module, torch.Tensor, torch.Tensor]] = field(default_factory=list)

    def take(self) -> GradResult:
        """Apply this node's BN running-statistics update to the shared model (as the looped
        forward would have) and return its gradient as a :class:`GradResult`."""
        with torch.no_grad():
            for module, mean, var in self.norms:
                _update_running_stats(module, mean, var)
        self.norms = []  # applied once
        return GradResult(grads=self.grads, loss=self.loss, wall_s=self.wall_s)


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
    """

    def __init__(self, computer: GradientComputer, chunk: int = 0) -> None:
        if chunk < 0:
            raise ConfigError(f"nodes.batch_chunk(={chunk}) must be >= 0")
        self.computer = computer
        self.chunk = int(chunk)
        self.model = computer.model
        self.norm_modules = [
            m for m in self.model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.track_running_stats
        ]
        self._sample_bytes: dict[tuple[int, ...], int] = {}  # sample shape -> forward output bytes

    # -- memory ---------------------------------------------------------------------------------
    def activation_bytes(self, sample_shape: tuple[int, ...]) -> int:
        """Bytes of every module output of a one-sample forward (fp32), measured once per shape."""
        key = tuple(int(s) for s in sample_shape)
        if key not in self._sample_bytes:
            total = 0

            def count(_m: nn.Module, _i: Any, out: Any) -> None:
                nonlocal total
                if isinstance(out, torch.Tensor):
                    total += out.numel() * out.element_size()

            leaves = [m for m in self.model.modules() if not list(m.children())]
            handles = [m.register_forward_hook(count) for m in leaves]
            try:
                # 2 samples: a BN layer in training mode refuses a batch of one with 1x1 maps
                x = torch.zeros((2, *key), device=self.computer.device)
                with torch.no_grad(), batch_stats_only(self.model):
                    self.model(x)
            finally:
                for h in handles:
                    h.remove()
            self._sample_bytes[key] = total // 2
        return self._sample_bytes[key]

    def budget_bytes(self) -> int:
        """Memory one chunk may use: half the free CUDA memory, or :data:`CPU_BUDGET_BYTES`."""
        dev = self.computer.device
        if dev.type == "cuda":
            free, _ = torch.cuda.mem_get_info(dev)
            return int(free * CUDA_BUDGET_FRACTION)
        return CPU_BUDGET_BYTES

    def chunk_size(self, nodes: int, batch_shape: tuple[int, ...]) -> int:
        """Nodes per pass: ``nodes.batch_chunk`` when set, else as many as the budget holds.

        A node costs about ``ACTIVATION_FACTOR x B x`` (one sample's forward outputs) plus
        ``PARAM_FACTOR x`` the parameters' bytes; ``batch_shape`` is ``(B, C, H, W)``.
        """
        if self.chunk:
            return max(1, min(self.chunk, nodes))
        params = sum(p.numel() * p.element_size() for p in self.model.parameters())
        per_node = ACTIVATION_FACTOR * batch_shape[0] * self.activation_bytes(tuple(batch_shape[1:]))
        per_node += PARAM_FACTOR * params
        return max(1, min(nodes, self.budget_bytes() // max(per_node, 1)))

    # -- the pass -------------------------------------------------------------------------------
    def gradients(self, params: list[torch.Tensor] | None, xs: torch.Tensor, ys: torch.Tensor) -> list[NodeGradient]:
        """Every node's gradient of its batch-mean loss at ``params``.

        Parameters
        ----------
        params : list of torch.Tensor or None
            The version the nodes hold, in ``model.parameters()`` order; ``None``: the model's own.
        xs : torch.Tensor
            ``[nodes, B, C, H, W]``: node ``i``'s batch is ``xs[i]``.
        ys : torch.Tensor
            ``[nodes, B]`` int64 targets.

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
        pdict = {n: p.detach() for n, p in zip(self.computer.names, leaves)}
        step = self.chunk_size(nodes, tuple(xs.shape[1:]))
        out: list[NodeGradient] = []
        for start in range(0, nodes, step):
            out.extend(self._chunk(pdict, xs[start : start + step], ys[start : start + step]))
        return out

    def _chunk(self, pdict: dict[str, torch.Tensor], xs: torch.Tensor, ys: torch.Tensor) -> list[NodeGradient]:
        """One vectorized pass over ``xs.shape[0]`` nodes."""
        n = int(xs.shape[0])
        device = self.computer.device
        calls: list[nn.Module] = []  # BN modules in call order (the same for every traced call)
        with self._recording(calls) as loss_fn:
            _sync(device)
            t0 = time.perf_counter()
            grads, (loss, stats) = vmap(grad_and_value(loss_fn, has_aux=True), in_dims=(None, 0, 0))(pdict, xs, ys)
            losses = loss.tolist()  # the pass's one host sync, [n] floats
            _sync(device)
            wall = (time.perf_counter() - t0) / n
        per_name = [grads[name] for name in self.computer.names]  # [n, *shape] each
        result = []
        for i in range(n):
            norms = [(m, mean[i], var[i]) for m, (mean, var) in zip(calls, stats)]
            result.append(NodeGradient([g[i] for g in per_name], float(losses[i]), wall, norms))
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


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


__all__ = ["BatchedGradients", "NodeGradient", "use_batched", "node_batcher"]
