"""Model listings: size, cost and layer counts of every model for one input shape.

This is what ``aiotsim models`` prints. FLOPs are those of one training step (forward +
backward) per sample, counted exactly as the ``flops`` compute model counts them
(:meth:`aiotsim.learn.compute.GradientComputer.train_flops`: matrix products and convolutions, a
multiply-add = 2 FLOP), on a batch of :data:`FLOP_BATCH` divided by its size (batch
normalization needs more than one sample per channel in training mode).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from aiotsim.errors import ConfigError
from aiotsim.learn.compute import GradientComputer
from aiotsim.learn.models.registry import MODELS, build_model, layer_infos

FLOP_BATCH: int = 2  # samples per FLOP count


@dataclass(frozen=True)
class ModelInfo:
    """One model at one input shape.

    Attributes
    ----------
    name : str
        Registry key.
    params : int
        Trainable parameters (0 when the shape is not supported).
    train_flops : float
        FLOP of forward + backward per sample (0 when not supported).
    conv_layers, fc_layers, norm_layers : int
        Convolutions, fully connected layers and normalization layers (modules, not tensors).
    summary : str
        First line of the model class's docstring, or why the shape is not supported.
    supported : bool
        Whether the model accepts the shape.
    """

    name: str
    params: int
    train_flops: float
    conv_layers: int
    fc_layers: int
    norm_layers: int
    summary: str
    supported: bool = True


def _count_modules(model: nn.Module) -> tuple[int, int, int]:
    """``(convolutions, linear layers, normalization layers)`` among the model's modules."""
    conv = sum(isinstance(m, nn.modules.conv._ConvNd) for m in model.modules())
    fc = sum(isinstance(m, nn.Linear) for m in model.modules())
    norm = sum(isinstance(m, (nn.modules.batchnorm._NormBase, nn.LayerNorm, nn.GroupNorm)) for m in model.modules())
    return conv, fc, norm


def describe_model(name: str, input_shape: tuple[int, ...], num_classes: int) -> ModelInfo:
    """:class:`ModelInfo` of model ``name`` (``supported=False`` if it refuses the shape)."""
    try:
        model = build_model(name, input_shape, num_classes)
    except ConfigError as exc:
        if name not in MODELS:
            raise
        return ModelInfo(name, 0, 0.0, 0, 0, 0, str(exc), supported=False)
    params = sum(L.numel for L in layer_infos(model))
    computer = GradientComputer(model, torch.device("cpu"))
    flops = computer.train_flops((FLOP_BATCH, *input_shape)) / FLOP_BATCH  # FLOP per sample
    summary = (type(model).__doc__ or name).strip().splitlines()[0]
    return ModelInfo(name, params, flops, *_count_modules(model), summary=summary)


def describe_models(input_shape: tuple[int, ...], num_classes: int) -> list[ModelInfo]:
    """Describe every registered model at one input shape, in :data:`MODELS` order.

    Parameters
    ----------
    input_shape : tuple of int
        ``(C, H, W)`` of one sample.
    num_classes : int
        Output logits.

    Returns
    -------
    list of ModelInfo
        One per model; models that refuse the shape have ``supported=False`` and the reason as
        their summary.
    """
    return [describe_model(name, tuple(input_shape), num_classes) for name in MODELS]


def describe_module(model: nn.Module) -> dict[str, Any]:
    """What a model given as an object is, as plain JSON data (a run records it: it cannot be
    rebuilt from files).

    Returns
    -------
    dict
        ``class`` (its class name), ``params`` (trainable parameters, counted as
        :func:`describe_model` counts them), ``layers`` (``"name: repr"`` of every module without
        submodules, in order) and ``tensors`` (every parameter's name, shape and kind:
        ``conv``, ``fc``, ``bias``, ``norm`` or ``other``).
    """
    infos = layer_infos(model)
    leaves = [(n, m) for n, m in model.named_modules() if not any(True for _ in m.children())]
    return {
        "class": type(model).__name__,
        "params": sum(L.numel for L in infos),
        "layers": [f"{n or type(m).__name__}: {m!r}" for n, m in leaves],
        "tensors": [{"name": L.name, "shape": list(L.shape), "kind": L.kind} for L in infos],
    }
