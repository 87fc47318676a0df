"""Models: the networks the simulated nodes train, and the static facts codecs need about them.

The zoo (registry keys; :data:`MODELS` lists them; each class docstring gives its architecture,
source and parameter count at its reference setting; "CIFAR" below means 32x32x3, 10 classes):

``lenet5``
    LeNet-5, modern form (:mod:`.small`): 61,706 parameters on 28x28x1, 10 classes.
``mlp``
    The 2NN, 200-200 ReLU (:mod:`.small`): 199,210 on 28x28x1.
``lenet-caffe``
    Caffe's/MXNet's LeNet 20-50-500 (:mod:`.small`): 431,080 on 28x28x1 (PGC paper: 0.45 M).
``alexnet``
    Five-conv AlexNet for small inputs (:mod:`.small`): 1,367,306 on 28x28x1 (PGC: 1.39 M),
    4,514,634 on CIFAR (PGC: 4.56 M).
``resnet20``, ``resnet32``, ``resnet56``
    He et al.'s CIFAR ResNets, option A shortcuts (:mod:`.resnet`): 269,722 / 464,154 / 853,018
    on CIFAR (paper: 0.27 / 0.46 / 0.85 M).
``resnet18``, ``resnet50``
    torchvision's ResNets, CIFAR stem up to 64 px (:mod:`.resnet`): 11,689,512 / 25,557,032 on
    224x224x3 with 1000 classes (torchvision's counts); 11,173,962 / 23,520,842 on CIFAR.
``vgg16``
    VGG-16 with BN and a one-layer CIFAR head (:mod:`.vgg_mobilenet`): 14,728,266 on CIFAR.
``mobilenetv2``
    MobileNetV2 1.0, CIFAR strides up to 64 px (:mod:`.vgg_mobilenet`): 3,504,872 on 224x224x3
    with 1000 classes (torchvision's count); 2,236,682 on CIFAR.

Models that need a minimum input size (``MIN_SIZE`` px, for H and W) refuse smaller inputs with a
:class:`~aiotsim.errors.ConfigError`. None has dropout: a forward pass draws no randomness.

Initialization is PyTorch's default (Kaiming-uniform weights with ``a = sqrt(5)``, biases uniform
in +-1/sqrt(fan_in)) drawn from a private ``torch.Generator`` seeded with ``seed``, in module
order; batch normalization starts at weight 1, bias 0, running mean 0, running variance 1. The
model is built on the meta device and then initialized, so the global RNG is neither reseeded nor
advanced.
"""

from aiotsim.learn.models.describe import ModelInfo, describe_models
from aiotsim.learn.models.registry import MODELS, build_model, layer_infos, meta_model, min_input_size, parameter_count
from aiotsim.learn.models.small import MLP_HIDDEN

__all__ = [
    "MLP_HIDDEN",
    "MODELS",
    "ModelInfo",
    "build_model",
    "describe_models",
    "layer_infos",
    "meta_model",
    "min_input_size",
    "parameter_count",
]
