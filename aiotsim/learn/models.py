"""Models: the networks the simulated nodes train, and the static facts codecs need about them.

``lenet5``
    LeNet-5 (LeCun et al., 1998) in its common modern form, as used in gradient-compression papers:
    conv 6@5x5 -> ReLU -> max-pool 2 -> conv 16@5x5 -> ReLU -> max-pool 2 -> fc 120 -> ReLU ->
    fc 84 -> ReLU -> fc classes. The original takes 32x32 inputs; here the first conv is padded by 2
    so a 28x28 MNIST image keeps its size (28 -> 14 -> 10 -> 5, 16*5*5 = 400 features, as in the
    original). For small inputs (8x8 digits) the second conv is padded by 2 as well, so the maps
    stay non-empty (8 -> 4 -> 4 -> 2, 16*2*2 = 64 features); the layer structure is unchanged and
    ``fc1`` takes whatever the conv stack produces.
``mlp``
    Flatten -> fc 200 -> ReLU -> fc 200 -> ReLU -> fc classes (the 2NN of McMahan et al., 2017).

Initialization is PyTorch's default (Kaiming-uniform weights with ``a = sqrt(5)``, biases uniform
in +-1/sqrt(fan_in)) drawn from a private ``torch.Generator`` seeded with ``seed``: the model is
built on the meta device and then initialized, so the global RNG is neither reseeded nor advanced.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from aiotsim.compress.base import LayerInfo, LayerKind
from aiotsim.errors import ConfigError

MODELS: tuple[str, ...] = ("lenet5", "mlp")

MLP_HIDDEN: int = 200  # units per hidden layer of `mlp`


class LeNet5(nn.Module):
    """LeNet-5 for ``(C, H, W)`` inputs with H, W >= 4 (see the module docstring).

    Parameters
    ----------
    input_shape : tuple of int
        ``(C, H, W)``.
    num_classes : int
        Output logits.
    """

    def __init__(self, input_shape: tuple[int, ...], num_classes: int) -> None:
        super().__init__()
        c, h, w = input_shape
        h1, w1 = h // 2, w // 2  # after conv1 (size kept by padding 2) and pool
        # conv2 unpadded needs a >= 6x6 map to leave >= 1x1 after its pool; pad otherwise.
        pad2 = 0 if min(h1, w1) >= 6 else 2
        h2, w2 = (h1 + 2 * pad2 - 4) // 2, (w1 + 2 * pad2 - 4) // 2  # after conv2 and pool
        self.conv1 = nn.Conv2d(c, 6, kernel_size=5, padding=2)
        self.conv2 = nn.Conv2d(6, 16, kernel_size=5, padding=pad2)
        self.pool = nn.MaxPool2d(2)
        self.fc1 = nn.Linear(16 * h2 * w2, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: [B, C, H, W]
        x = self.pool(torch.relu(self.conv1(x)))  # [B, 6, H/2, W/2]
        x = self.pool(torch.relu(self.conv2(x)))  # [B, 16, h2, w2]
        x = torch.flatten(x, 1)  # [B, 16*h2*w2]
        x = torch.relu(self.fc1(x))  # [B, 120]
        x = torch.relu(self.fc2(x))  # [B, 84]
        return self.fc3(x)  # [B, classes] logits


class MLP(nn.Module):
    """Two hidden layers of :data:`MLP_HIDDEN` ReLU units.

    Parameters
    ----------
    input_shape : tuple of int
        Shape of one sample; flattened.
    num_classes : int
        Output logits.
    """

    def __init__(self, input_shape: tuple[int, ...], num_classes: int) -> None:
        super().__init__()
        d = math.prod(input_shape)
        self.fc1 = nn.Linear(d, MLP_HIDDEN)
        self.fc2 = nn.Linear(MLP_HIDDEN, MLP_HIDDEN)
        self.fc3 = nn.Linear(MLP_HIDDEN, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: [B, *input_shape]
        x = torch.flatten(x, 1)  # [B, D]
        x = torch.relu(self.fc1(x))  # [B, 200]
        x = torch.relu(self.fc2(x))  # [B, 200]
        return self.fc3(x)  # [B, classes] logits


_BUILDERS: dict[str, Callable[[tuple[int, ...], int], nn.Module]] = {"lenet5": LeNet5, "mlp": MLP}


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
    model = _meta_model(name, input_shape, num_classes)
    model = model.to_empty(device="cpu")
    _init_(model, torch.Generator().manual_seed(seed))
    return model.train()


def _meta_model(name: str, input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """The model on the meta device (shapes only), after checking name, shape and classes."""
    if name not in _BUILDERS:
        raise ConfigError(f"unknown model {name!r}; valid names: {', '.join(MODELS)}")
    shape = tuple(int(s) for s in input_shape)
    if len(shape) != 3 or min(shape) < 1:
        raise ConfigError(f"input_shape(={input_shape}) must be (C, H, W) with positive sizes")
    if name == "lenet5" and min(shape[1:]) < 4:
        raise ConfigError(f"lenet5 needs inputs of at least 4x4, got {shape[1]}x{shape[2]}")
    if num_classes < 2:
        raise ConfigError(f"num_classes(={num_classes}) must be >= 2")
    with torch.device("meta"):  # no storage, no RNG use: the default initializers do nothing real
        return _BUILDERS[name](shape, num_classes)


def parameter_count(name: str, input_shape: tuple[int, ...], num_classes: int) -> int:
    """Parameters of model ``name`` for ``(C, H, W)`` inputs, without allocating them.

    Raises
    ------
    ConfigError
        As :func:`build_model`.
    """
    return sum(p.numel() for p in _meta_model(name, input_shape, num_classes).parameters())


def _init_(model: nn.Module, g: torch.Generator) -> None:
    """PyTorch's default initialization of every parameter, drawn from ``g`` (in module order)."""
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
