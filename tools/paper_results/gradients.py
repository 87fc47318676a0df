"""How normal are a model's gradients? PGC's premise (Section 3), measured on one batch.

PGC partitions each layer's gradient by mu +- sigma and mu +- 3 sigma because "the gradient
distribution in the neural network is approximately normal". A normal distribution puts 68.27% of
its mass within one sigma of the mean and 99.73% within three, with excess kurtosis 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from aiotsim.learn.datasets import load_dataset
from aiotsim.learn.models.registry import build_model

NORMAL_1SIGMA = 0.6827
NORMAL_3SIGMA = 0.9973


@dataclass(frozen=True)
class LayerShape:
    """One layer's gradient: the fractions within 1 and 3 standard deviations of its mean, and
    its excess kurtosis (0 for a normal distribution; > 0: heavier tails, a sharper peak)."""

    name: str
    within_1: float
    within_3: float
    kurtosis: float


def gradient_shapes(model: str = "lenet-caffe", batch: int = 128, seed: int = 1) -> list[LayerShape]:
    """The gradient of ``model`` (initialised with ``seed``) on the first ``batch`` embedded MNIST
    training digits, per weight tensor (biases are too short for a distribution)."""
    data = load_dataset("mnist", seed=seed)
    net = build_model(model, data.input_shape, data.num_classes, seed=seed)
    loss = F.cross_entropy(net(data.train_x[:batch]), data.train_y[:batch])
    loss.backward()
    return [shape_of(name, p.grad) for name, p in net.named_parameters() if p.grad is not None and p.dim() >= 2]


def shape_of(name: str, values: torch.Tensor) -> LayerShape:
    """:class:`LayerShape` of ``values`` (in float64: a layer has up to millions of values)."""
    g = values.detach().double().reshape(-1)
    z = (g - g.mean()) / g.std()
    a = z.abs()
    return LayerShape(name, float((a <= 1).double().mean()), float((a <= 3).double().mean()), float((z**4).mean() - 3))
