"""Compute: a node's real gradient, its cost in simulated seconds, and the node's stream of batches.

The learning is real: :class:`GradientComputer` evaluates the shared model at the parameter
version a node holds (``torch.func.functional_call``, so the shared model is never overwritten),
and returns the gradient, the loss and the CUDA-synchronized wall time of forward + backward.

Batch normalization (the rule for models that have it: the ResNets, VGG-16, MobileNetV2):

* **Gradients use batch statistics.** A node's forward pass runs in training mode, so every BN
  layer normalizes with the mean and variance of that node's own batch; its gradient depends only
  on the parameters it holds and its batch, never on running statistics or on other nodes.
* **The global model's running statistics follow the nodes' batches.** Each gradient computation
  also updates the shared model's BN running mean and variance (PyTorch's exponential average,
  momentum 0.1) from its batch, in the order the simulation computes the gradients, which is
  deterministic: the running statistics are an average over all nodes' recent batches, as if one
  model had seen them in that order. (Per-sample passes and FLOP counts leave them untouched; a
  per-sample pass normalizes each sample with its own statistics, a batch of one, so every BN
  layer's maps must then be larger than 1x1.)
* **Evaluation uses the running statistics** (the model in eval mode), as a trained model is
  deployed; evaluation never changes them.

Models without normalization layers (lenet5, mlp, ...) are unaffected by this rule.

Simulated time is separate: :class:`ComputeModel` turns that work into seconds on a simulated
device described by a :class:`~aiotsim.learn.devices.DeviceProfile`:

``measured``
    wall time on this host x ``profile.measured_scale`` x ``slowdown``. Realistic (captures
    framework overheads), but noisy and host-dependent.
``flops``
    FLOPs of one batch, counted once with :class:`torch.utils.flop_counter.FlopCounterMode`,
    / ``profile.flops_per_s`` x ``slowdown``. Deterministic: the same scenario gives the same
    timeline on every machine.

Profiles are calibrated against a reference host (the 2-core CPU this project is developed on),
see :data:`aiotsim.learn.devices.PROFILES` for every figure and its source. This module never calls
``torch.set_num_threads``: the thread count is the caller's decision.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, vmap
from torch.utils.flop_counter import FlopCounterMode, conv_backward_flop

from aiotsim.errors import ConfigError, DataError
from aiotsim.learn.devices import DeviceProfile, full_fp32_on_cuda, sync

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

# ---------------------------------------------------------------------------------------------
# Gradients
# ---------------------------------------------------------------------------------------------


_TORCH_CONV_BACKWARD_FLOP = conv_backward_flop.__wrapped__  # type: ignore[attr-defined]  # on shapes


def _conv_backward_flop(*args: Any, **kwargs: Any) -> int:
    """torch's ``convolution_backward`` FLOP formula, with the weight gradient of a grouped conv
    divided by its ``groups``: torch 2.x counts it as if every output channel saw every input
    channel, which makes MobileNetV2's depthwise backward ~100x too costly. Ungrouped convs
    (``groups == 1``) count exactly as torch counts them."""
    groups = int(args[9])  # (grad_out, x, w, bias, stride, padding, dilation, transposed, out_pad, groups, mask)
    if groups == 1:
        return int(_TORCH_CONV_BACKWARD_FLOP(*args, **kwargs))
    mask = list(args[10])  # [grad_input, grad_weight, grad_bias]
    inp = _TORCH_CONV_BACKWARD_FLOP(*args[:10], [mask[0], False, False], *args[11:], **kwargs)
    weight = _TORCH_CONV_BACKWARD_FLOP(*args[:10], [False, mask[1], False], *args[11:], **kwargs)
    return int(inp + weight // groups)


FLOP_FORMULAS = {torch.ops.aten.convolution_backward: _conv_backward_flop}  # corrections to torch's


@contextmanager
def batch_stats_only(model: nn.Module) -> Iterator[None]:
    """Within the block, BN layers in training mode use batch statistics without updating their
    running statistics (nor ``num_batches_tracked``): for FLOP counts and per-sample passes."""
    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.track_running_stats]
    for m in norms:
        m.track_running_stats = False
    try:
        yield
    finally:
        for m in norms:
            m.track_running_stats = True


@contextmanager
def eval_mode(model: nn.Module) -> Iterator[None]:
    """Within the block the model is in eval mode (BN uses running statistics); restored after."""
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


@dataclass
class GradResult:
    """One node's gradient on one batch.

    Attributes
    ----------
    grads : list of torch.Tensor
        One per parameter, in ``model.parameters()`` order, on the computer's device.
    loss : float
        Mean loss of the batch.
    wall_s : float
        Wall time of forward + backward, s (CUDA-synchronized).
    sq_grads : list of torch.Tensor or None
        With ``per_sample_sq``: per parameter, the batch mean of squared per-sample gradients.
    sq_wall_s : float
        Wall time of the per-sample pass, s (0 without ``per_sample_sq``); it is codec work
        (Gradient Variance), so it is reported apart from ``wall_s``.
    """

    grads: list[torch.Tensor]
    loss: float
    wall_s: float
    sq_grads: list[torch.Tensor] | None = None
    sq_wall_s: float = 0.0


class GradientComputer:
    """Computes a node's real gradient on a batch, and how long it takes.

    One instance serves every node: parameters are passed per call, the shared model's own
    parameters are never written. Batch normalization follows the module docstring's rule:
    gradients use each batch's own statistics, :meth:`gradient` updates the model's running
    statistics in call order, :meth:`evaluate` uses them.

    Parameters
    ----------
    model : torch.nn.Module
        The model architecture (and default parameters), already on ``device``.
    device : torch.device
        Where batches and parameters live.
    loss_fn : callable
        ``loss_fn(logits, targets) -> scalar`` batch-mean loss; cross entropy by default.
    """

    def __init__(self, model: nn.Module, device: torch.device, loss_fn: LossFn = F.cross_entropy) -> None:
        self.model = model
        self.device = torch.device(device)
        if self.device.type == "cuda":
            full_fp32_on_cuda()
        self.loss_fn = loss_fn
        self.names: list[str] = [n for n, _ in model.named_parameters()]
        # the model's own parameters, listed once rather than by a module walk per gradient (6.6 us
        # for LeNet-5). Moving the model (``.to``) and loading a state dict keep these Parameter
        # objects, as the server optimizer relies on too.
        self._own: list[torch.Tensor] = list(model.parameters())
        self.buffers: dict[str, torch.Tensor] = dict(model.named_buffers())
        self._flops: dict[tuple[int, ...], float] = {}  # batch shape -> FLOP per fwd+bwd

    # -- helpers ------------------------------------------------------------------------------
    def _leaves(self, params: list[torch.Tensor] | None) -> list[torch.Tensor]:
        """Tensors to differentiate: the model's own, or detached views of ``params`` (no copy)."""
        if params is None:
            return list(self._own)
        if len(params) != len(self.names):
            raise ValueError(f"got {len(params)} parameter tensors, the model has {len(self.names)}")
        return [p.detach().requires_grad_(True) for p in params]

    def _call(self, leaves: list[torch.Tensor], x: torch.Tensor, own: bool = False) -> torch.Tensor:
        """The model's output on ``x`` with ``leaves`` as its parameters; ``own``: they are the
        model's own, so it runs as it is (``functional_call`` would swap every parameter for
        itself: 42 us of module walks per call, measured on a batch-1 LeNet-5 forward, 172 vs 130 us)."""
        if own:
            return self.model(x)  # type: ignore[no-any-return]
        state = dict(zip(self.names, leaves))
        if self.buffers:
            state.update(self.buffers)
        return functional_call(self.model, state, (x,))

    # -- public API -----------------------------------------------------------------------------
    def gradient(
        self,
        params: list[torch.Tensor] | None,
        x: torch.Tensor,
        y: torch.Tensor,
        *,
        per_sample_sq: bool = False,
    ) -> GradResult:
        """Gradient of the batch-mean loss at ``params``.

        Parameters
        ----------
        params : list of torch.Tensor or None
            The parameter version the node holds, in ``model.parameters()`` order; ``None`` uses
            the model's current parameters.
        x : torch.Tensor
            ``[B, C, H, W]`` inputs on the device.
        y : torch.Tensor
            ``[B]`` int64 targets on the device.
        per_sample_sq : bool
            Also compute the batch mean of squared per-sample gradients (``torch.func.vmap`` of
            ``torch.func.grad``), as the Gradient Variance codec needs.

        Returns
        -------
        GradResult
        """
        leaves = self._leaves(params)
        sync(self.device)
        t0 = time.perf_counter()
        loss = self.loss_fn(self._call(leaves, x, own=params is None), y)  # scalar
        grads = list(torch.autograd.grad(loss, leaves))
        loss_value = loss.item()  # the one host sync (waits for backward on the same stream)
        sync(self.device)
        wall_s = time.perf_counter() - t0
        if not per_sample_sq:
            return GradResult(grads=grads, loss=loss_value, wall_s=wall_s)
        t1 = time.perf_counter()
        sq = self._per_sample_sq([p.detach() for p in leaves], x, y)
        sync(self.device)
        return GradResult(grads, loss_value, wall_s, sq, time.perf_counter() - t1)

    def _per_sample_sq(self, params: list[torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
        per_sample = self.per_sample_grads(params, x, y)  # name -> [B, *shape], ours alone
        # squared in place: a second [B, *shape] tensor (B x the model's size) costs page faults
        return [per_sample[n].square_().mean(dim=0) for n in self.names]

    def per_sample_grads(self, params: list[torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
        """Each sample's own gradient of its loss at ``params`` (detached, in ``model.parameters()``
        order): ``torch.func.vmap`` of ``torch.func.grad`` over the samples of ``x`` (``[S, C, H,
        W]``) and ``y`` (``[S]``); parameter name -> ``[S, *shape]``. A sample's gradient does not
        depend on the other samples mapped with it (each is a batch of one, batch norm on its own
        statistics), so nodes' batches may be mapped together
        (:meth:`aiotsim.learn.batched.BatchedGradients.gradients`)."""

        def sample_loss(p: dict[str, torch.Tensor], xi: torch.Tensor, yi: torch.Tensor) -> torch.Tensor:
            state = {**p, **self.buffers} if self.buffers else p
            out = functional_call(self.model, state, (xi.unsqueeze(0),))  # [1, classes]
            return self.loss_fn(out, yi.unsqueeze(0))

        pdict = dict(zip(self.names, params))
        with batch_stats_only(self.model):  # vmap cannot update shared running statistics
            return vmap(grad(sample_loss), in_dims=(None, 0, 0))(pdict, x, y)  # type: ignore[no-any-return]

    def train_flops(self, batch_shape: tuple[int, ...] | torch.Size) -> float:
        """FLOPs of one forward + backward pass on a batch of this shape.

        Counted once per shape with :class:`~torch.utils.flop_counter.FlopCounterMode` on a
        zero batch, exactly as :meth:`gradient` runs it, then cached. FlopCounterMode counts matrix
        products and convolutions (a multiply-add is 2 FLOP), not elementwise ops or the loss; no
        gradient is computed for the input, so the first layer has no input-gradient product.
        The weight gradient of a grouped (depthwise) conv is counted per group (see
        :data:`FLOP_FORMULAS`).

        Parameters
        ----------
        batch_shape : tuple of int
            ``(B, C, H, W)``.

        Returns
        -------
        float
            FLOP per batch.
        """
        key = tuple(int(s) for s in batch_shape)
        if key not in self._flops:
            x = torch.zeros(key, device=self.device)
            y = torch.zeros(key[0], dtype=torch.long, device=self.device)
            leaves = self._leaves(None)
            counter = FlopCounterMode(display=False, custom_mapping=FLOP_FORMULAS)
            with batch_stats_only(self.model), counter:
                loss = self.loss_fn(self._call(leaves, x, own=True), y)
                torch.autograd.grad(loss, leaves)
            self._flops[key] = float(counter.get_total_flops())
        return self._flops[key]

    def evaluate(
        self, params: list[torch.Tensor] | None, x: torch.Tensor, y: torch.Tensor, batch_size: int = 1000
    ) -> tuple[float, float]:
        """Accuracy and mean loss of ``params`` on a data set, without gradients, in eval mode.

        Parameters
        ----------
        params : list of torch.Tensor or None
            Parameters to evaluate; ``None`` uses the model's own.
        x, y : torch.Tensor
            ``[N, C, H, W]`` inputs and ``[N]`` targets (moved to the device chunk by chunk if
            they are elsewhere).
        batch_size : int
            Samples per forward pass.

        Returns
        -------
        tuple of float
            ``(accuracy in [0, 1], mean loss)``.
        """
        n = int(y.shape[0])
        if n == 0:
            raise DataError("cannot evaluate on an empty data set")
        leaves = list(self.model.parameters()) if params is None else list(params)
        correct = torch.zeros((), dtype=torch.long, device=self.device)
        loss_sum = torch.zeros((), device=self.device)
        with torch.no_grad(), eval_mode(self.model):  # BN: running statistics, left unchanged
            for start in range(0, n, batch_size):
                xb = x[start : start + batch_size].to(self.device, non_blocking=True)
                yb = y[start : start + batch_size].to(self.device, non_blocking=True)
                logits = self._call(leaves, xb, own=params is None)  # [b, classes]
                correct += (logits.argmax(dim=1) == yb).sum()
                loss_sum += self.loss_fn(logits, yb) * yb.shape[0]  # batch mean -> batch sum
        return correct.item() / n, loss_sum.item() / n


# ---------------------------------------------------------------------------------------------
# Simulated compute time
# ---------------------------------------------------------------------------------------------


class ComputeModel:
    """Turns real work into simulated seconds on a device profile.

    Parameters
    ----------
    mode : {"measured", "flops"}
        ``measured``: host wall time x ``profile.measured_scale`` x ``slowdown``; ``flops``:
        counted FLOPs / ``profile.flops_per_s`` x ``slowdown`` (deterministic).
    profile : DeviceProfile
        The simulated device.
    slowdown : float
        Extra factor (> 0) for heterogeneous or throttled nodes; 1 means as profiled.
    """

    MODES: tuple[str, ...] = ("measured", "flops")

    def __init__(self, mode: Literal["measured", "flops"], profile: DeviceProfile, slowdown: float = 1.0) -> None:
        if mode not in self.MODES:
            raise ConfigError(f"unknown compute_model {mode!r}; valid names: {', '.join(self.MODES)}")
        if not (math.isfinite(slowdown) and slowdown > 0):
            raise ConfigError(f"slowdown(={slowdown}) must be a finite number > 0")
        self.mode = mode
        self.profile = profile
        self.slowdown = float(slowdown)

    def compute_time(self, wall_s: float, flops: float) -> float:
        """Simulated seconds of a gradient computation that took ``wall_s`` s here and ``flops`` FLOP."""
        if self.mode == "measured":
            return wall_s * self.profile.measured_scale * self.slowdown  # s
        return flops / self.profile.flops_per_s * self.slowdown  # FLOP / (FLOP/s) = s

    def codec_time(self, wall_s: float, elements: int, flops_per_element: float) -> float:
        """Simulated seconds of encoding or decoding ``elements`` values.

        ``measured``: ``wall_s`` scaled like a gradient; ``flops``: ``elements x flops_per_element``
        (the codec's modeled cost) at the profile's throughput.
        """
        if self.mode == "measured":
            return wall_s * self.profile.measured_scale * self.slowdown
        return elements * flops_per_element / self.profile.flops_per_s * self.slowdown


# ---------------------------------------------------------------------------------------------
# Batches
# ---------------------------------------------------------------------------------------------


class BatchStream:
    """A node's deterministic, infinite stream of mini-batches from its shard.

    When ``x`` and ``y`` already live on ``device`` the stream keeps a reference to them and the
    shard's indices (a batch gathers ``x[shard[sel]]``, the same values), not a copy per node: the
    copies were most of a large fleet's data memory (10,000 nodes x 32 MNIST digits drawn with
    replacement: 1 GB of copies of a 13 MB set). Otherwise the shard is copied to ``device`` once.

    Each epoch is a fresh permutation of the shard drawn from the stream's own
    ``torch.Generator``; a batch that crosses an epoch boundary takes the
    rest of one epoch and the head of the next, so every batch has exactly
    ``min(batch_size, shard size)`` samples (constant shapes keep FLOP counts cached) and the
    concatenated stream is a sequence of whole permutations.

    Parameters
    ----------
    x, y : torch.Tensor
        The full training set, ``[N, C, H, W]`` and ``[N]``.
    indices : numpy.ndarray
        The node's shard: indices into ``x`` and ``y`` (non-empty).
    batch_size : int
        Samples per batch (>= 1).
    seed : int
        Seed of the stream's generator.
    device : torch.device
        Where the shard and the batches live.
    transform : callable, optional
        ``transform(x, generator) -> x`` applied to every batch's inputs (data augmentation, e.g.
        :func:`aiotsim.learn.data.transforms.crop_flip`), drawing from a second CPU generator of the
        stream's own (seeded from ``seed``), so the batch order is the same with or without it.
    """

    def __init__(
        self,
        x: torch.Tensor,
        y: torch.Tensor,
        indices: np.ndarray,
        batch_size: int,
        seed: int,
        device: torch.device,
        transform: Callable[[torch.Tensor, torch.Generator], torch.Tensor] | None = None,
    ) -> None:
        idx = np.asarray(indices, dtype=np.int64)
        if idx.ndim != 1 or idx.size == 0:
            raise DataError(f"a node's shard must be a non-empty 1-D index array, got shape {idx.shape}")
        if idx.min() < 0 or idx.max() >= x.shape[0]:
            raise DataError(f"shard indices must lie in [0, {x.shape[0]}), got [{idx.min()}, {idx.max()}]")
        if batch_size < 1:
            raise ConfigError(f"batch_size(={batch_size}) must be >= 1")
        self.device = torch.device(device)
        sel = torch.from_numpy(idx).to(x.device)
        self._shard: torch.Tensor | None = None  # [n] indices into x, y when they are shared
        if x.device == self.device and y.device == self.device:
            self.x, self.y, self._shard = x, y, sel  # the full set, shared with the other streams
        else:
            self.x = x.index_select(0, sel).to(self.device)  # [n, C, H, W], once
            self.y = y.index_select(0, sel.to(y.device)).to(self.device)  # [n]
        self.n = int(idx.size)
        self.batch_size = min(int(batch_size), self.n)
        self.epoch = 0  # completed permutations drawn so far
        self._gen = torch.Generator().manual_seed(seed)
        self._perm = self._new_perm()  # [n] on device
        self._pos = 0
        self.transform = transform
        self._aug_gen = torch.Generator().manual_seed(seed + 0x5EED)  # the transform's own draws

    def _new_perm(self) -> torch.Tensor:
        return torch.randperm(self.n, generator=self._gen).to(self.device)

    def state_dict(self) -> dict[str, Any]:
        """Where the stream stands (generators, permutation, position), for checkpoints; the
        shard itself is rebuilt from the scenario."""
        return {
            "gen": self._gen.get_state(),
            "aug_gen": self._aug_gen.get_state(),
            "perm": self._perm.cpu(),
            "pos": self._pos,
            "epoch": self.epoch,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue exactly where :meth:`state_dict` was taken."""
        self._gen.set_state(state["gen"])
        self._aug_gen.set_state(state["aug_gen"])
        self._perm = state["perm"].to(self.device)
        self._pos = int(state["pos"])
        self.epoch = int(state["epoch"])

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The next batch: ``([b, C, H, W], [b])`` on the device, ``b = min(batch_size, n)``."""
        sel = self.next_rows()
        x = self.x.index_select(0, sel)  # [b, C, H, W]
        if self.transform is not None:
            x = self.transform(x, self._aug_gen)
        return x, self.y.index_select(0, sel)

    def next_rows(self) -> torch.Tensor:
        """The rows of ``self.x`` and ``self.y`` the next batch takes (``[b]`` int64), drawn as
        :meth:`next` draws them (it gathers these rows): the stream moves on by one batch."""
        end = self._pos + self.batch_size
        if end <= self.n:
            sel = self._perm[self._pos : end]
            self._pos = end
        else:  # cross into the next epoch
            head = self._perm[self._pos :]
            self._perm = self._new_perm()
            self.epoch += 1
            self._pos = self.batch_size - head.numel()
            sel = torch.cat([head, self._perm[: self._pos]])
        if self._pos == self.n:  # epoch exactly used up: draw the next permutation now
            self._perm = self._new_perm()
            self.epoch += 1
            self._pos = 0
        if self._shard is not None:
            sel = self._shard[sel]  # shard positions -> rows of the shared set
        return sel


def draw_batches(streams: Sequence[BatchStream]) -> tuple[torch.Tensor, torch.Tensor]:
    """Each stream's next batch, stacked: ``([n, b, C, H, W], [n, b])``, the same tensors as
    stacking each :meth:`BatchStream.next`. Streams over one shared set, with equal batch sizes and
    no transform, are gathered at once (one ``index_select`` for the lot, not two per stream and a
    stack: a 1,000-node round draws 1,000 batches)."""
    first = streams[0]
    x, y, b = first.x, first.y, first.batch_size
    if all(s.x is x and s.y is y and s.batch_size == b and s.transform is None for s in streams):
        sel = torch.cat([s.next_rows() for s in streams])  # [n * b]
        n = len(streams)
        return x.index_select(0, sel).view(n, b, *x.shape[1:]), y.index_select(0, sel).view(n, b)
    batches = [s.next() for s in streams]
    return torch.stack([bx for bx, _ in batches]), torch.stack([by for _, by in batches])
