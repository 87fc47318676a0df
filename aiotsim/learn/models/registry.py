"""The model registry: names to builders, seeded initialization, and layer facts for codecs."""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

import torch
from torch import nn

from aiotsim.compress.layer import LayerInfo, LayerKind
from aiotsim.errors import ConfigError
from aiotsim.learn.models.resnet import BasicBlock, Bottleneck, CifarResNet, ResNet
from aiotsim.learn.models.small import MLP, AlexNet, LeNet5, LeNetCaffe
from aiotsim.learn.models.vgg_mobilenet import VGG16, MobileNetV2

Builder = Callable[[tuple[int, ...], int], nn.Module]

# name -> (builder(input_shape, num_classes), smallest H and W in px)
_BUILDERS: dict[str, tuple[Builder, int]] = {
    "lenet5": (LeNet5, LeNet5.MIN_SIZE),
    "mlp": (MLP, MLP.MIN_SIZE),
    "lenet-caffe": (LeNetCaffe, LeNetCaffe.MIN_SIZE),
    "alexnet": (AlexNet, AlexNet.MIN_SIZE),
    "resnet20": (partial(CifarResNet, depth=20), CifarResNet.MIN_SIZE),
    "resnet32": (partial(CifarResNet, depth=32), CifarResNet.MIN_SIZE),
    "resnet56": (partial(CifarResNet, depth=56), CifarResNet.MIN_SIZE),
    "resnet18": (partial(ResNet, block=BasicBlock, layers=(2, 2, 2, 2)), ResNet.MIN_SIZE),
    "resnet50": (partial(ResNet, block=Bottleneck, layers=(3, 4, 6, 3)), ResNet.MIN_SIZE),
    "vgg16": (VGG16, VGG16.MIN_SIZE),
    "mobilenetv2": (MobileNetV2, MobileNetV2.MIN_SIZE),
}

MODELS: tuple[str, ...] = tuple(_BUILDERS)


def min_input_size(name: str) -> int:
    """Smallest H and W (px) model ``name`` accepts."""
    if name not in _BUILDERS:
        raise ConfigError(f"unknown model {name!r}; valid names: {', '.join(MODELS)}")
    return _BUILDERS[name][1]


def build_model(name: str, input_shape: tuple[int, ...], num_classes: int, seed: int = 0) -> nn.Module:
    """Build a model by name with a seeded, reproducible initialization on the CPU.

    Parameters
    ----------
    name : str
        One of :data:`MODELS`.
    input_shape : tuple of int
        ``(C, H, W)`` of one sample.
    num_classes : int
        Number of output logits (>= 2).
    seed : int
        Seed of the model's own initialization generator (the global RNG is not touched).

    Returns
    -------
    torch.nn.Module
        The model in training mode, float32, on the CPU (move it with ``.to(device)``).

    Raises
    ------
    ConfigError
        Unknown name (valid names listed), or a shape the model cannot take.
    """
    model = meta_model(name, input_shape, num_classes).to_empty(device="cpu")
    _init_(model, torch.Generator().manual_seed(seed))
    return model.train()


def meta_model(name: str, input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """The model on the meta device (shapes only), after checking name, shape and classes."""
    size = min_input_size(name)
    shape = tuple(int(s) for s in input_shape)
    if len(shape) != 3 or min(shape) < 1:
        raise ConfigError(f"input_shape(={input_shape}) must be (C, H, W) with positive sizes")
    if min(shape[1:]) < size:
        raise ConfigError(f"{name} needs inputs of at least {size}x{size}, got {shape[1]}x{shape[2]}")
    if num_classes < 2:
        raise ConfigError(f"num_classes(={num_classes}) must be >= 2")
    with torch.device("meta"):  # no storage, no RNG use: the default initializers do nothing real
        return _BUILDERS[name][0](shape, num_classes)


def parameter_count(name: str, input_shape: tuple[int, ...], num_classes: int) -> int:
    """Parameters of model ``name`` for ``(C, H, W)`` inputs, without allocating them.

    Raises
    ------
    ConfigError
        As :func:`build_model`.
    """
    return sum(p.numel() for p in meta_model(name, input_shape, num_classes).parameters())


def model_layers(name: str, input_shape: tuple[int, ...], num_classes: int) -> list[LayerInfo]:
    """:func:`layer_infos` of model ``name`` for ``(C, H, W)`` inputs, without allocating it
    (raises as :func:`build_model`)."""
    return layer_infos(meta_model(name, input_shape, num_classes))


def _init_(model: nn.Module, g: torch.Generator) -> None:
    """PyTorch's default initialization of every parameter, drawn from ``g`` (in module order).

    Conv and Linear: Kaiming-uniform weights (``a = sqrt(5)``), biases uniform in +-1/sqrt(fan_in)
    (depthwise convs: fan_in = 1 x k x k). Normalization layers draw nothing: weight 1, bias 0,
    running mean 0, running variance 1, ``num_batches_tracked`` 0. Any other module that holds
    parameters is refused, so no parameter is left uninitialized (built on the meta device).
    """
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, (nn.Linear, nn.modules.conv._ConvNd)):
                nn.init.kaiming_uniform_(module.weight, a=math.sqrt(5), generator=g)
                if module.bias is not None:
                    fan_in, _ = nn.init._calculate_fan_in_and_fan_out(module.weight)
                    bound = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0
                    nn.init.uniform_(module.bias, -bound, bound, generator=g)
            elif isinstance(module, (nn.modules.batchnorm._NormBase, nn.LayerNorm, nn.GroupNorm)):
                module.reset_parameters()  # deterministic: ones, zeros, running stats reset
            elif not list(module.children()) and list(module.parameters(recurse=False)):
                raise ConfigError(f"no seeded initializer for module {type(module).__name__}")


def layer_infos(model: nn.Module) -> list[LayerInfo]:
    """Static facts about every parameter, in ``model.parameters()`` order.

    Kinds: parameters of normalization layers (BatchNorm, LayerNorm, GroupNorm, weight and bias)
    are ``"norm"``; otherwise a parameter named ``bias`` is ``"bias"``; a conv weight is ``"conv"``;
    a Linear weight is ``"fc"``; anything else is ``"other"``.

    Parameters
    ----------
    model : torch.nn.Module

    Returns
    -------
    list of LayerInfo
        One per parameter; ``index`` is the position in ``model.parameters()``.
    """
    infos = []
    for index, (name, param) in enumerate(model.named_parameters()):
        owner_name, _, attr = name.rpartition(".")
        owner = model.get_submodule(owner_name) if owner_name else model
        kind: LayerKind
        if isinstance(owner, (nn.modules.batchnorm._NormBase, nn.LayerNorm, nn.GroupNorm)):
            kind = "norm"
        elif attr == "bias":
            kind = "bias"
        elif isinstance(owner, nn.modules.conv._ConvNd):
            kind = "conv"
        elif isinstance(owner, nn.Linear):
            kind = "fc"
        else:
            kind = "other"
        infos.append(LayerInfo(name=name, shape=tuple(param.shape), dtype=param.dtype, kind=kind, index=index))
    return infos
