"""Models: the networks the simulated nodes train, and the static facts codecs need about them.

The zoo (registry keys; :data:`MODELS` lists them; each class docstring gives its architecture,
source and parameter count at its reference setting):

============  ===================================================  =============================
name          architecture (module)                                parameters (reference input)
============  ===================================================  =============================
lenet5        LeNet-5, modern form (:mod:`.small`)                 61,706 (28x28x1, 10 classes)
mlp           2NN, 200-200 (:mod:`.small`)                         199,210 (28x28x1, 10)
lenet-caffe   Caffe/MXNet LeNet 20-50-500 (:mod:`.small`)          431,080 (28x28x1, 10)
alexnet       5-conv AlexNet for small inputs (:mod:`.small`)      1,367,306 (28x28x1), 4,514,634 (32x32x3)
resnet20/32/56  CIFAR ResNets, option A (:mod:`.resnet`)           269,722 / 464,154 / 853,018 (32x32x3, 10)
resnet18/50   torchvision ResNets (:mod:`.resnet`)                 11,689,512 / 25,557,032 (224x224x3, 1000)
vgg16         VGG-16-BN, CIFAR head (:mod:`.vgg_mobilenet`)        14,728,266 (32x32x3, 10)
mobilenetv2   MobileNetV2 1.0 (:mod:`.vgg_mobilenet`)              3,504,872 (224x224x3, 1000)
============  ===================================================  =============================

Models that need a minimum input size (``MIN_SIZE`` px, for H and W) refuse smaller inputs with a
:class:`~aiotsim.errors.ConfigError`. None has dropout: a forward pass draws no randomness.

Initialization is PyTorch's default (Kaiming-uniform weights with ``a = sqrt(5)``, biases uniform
in +-1/sqrt(fan_in)) drawn from a private ``torch.Generator`` seeded with ``seed``, in module
order; batch normalization starts at weight 1, bias 0, running mean 0, running variance 1. The
model is built on the meta device and then initialized, so the global RNG is neither reseeded nor
advanced.
"""

from aiotsim.learn.models.describe import ModelInfo, describe_models
from aiotsim.learn.models.registry import MODELS, build_model, layer_infos, min_input_size
from aiotsim.learn.models.small import MLP_HIDDEN

__all__ = [
    "MLP_HIDDEN",
    "MODELS",
    "ModelInfo",
    "build_model",
    "describe_models",
    "layer_infos",
    "min_input_size",
]
