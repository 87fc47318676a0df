"""VGG-16 (with batch normalization) and MobileNetV2, for CIFAR-sized and ImageNet-sized inputs.

Shapes in comments are ``[B, C, H, W]``. Neither model has dropout: the simulator's forward
pass draws no randomness (dropout would draw from the global RNG).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

# VGG-16 (configuration D) conv stages: (channels, 3x3 convs), each stage ending in a 2x2 max-pool
VGG16_STAGES: tuple[tuple[int, int], ...] = ((64, 2), (128, 2), (256, 3), (512, 3), (512, 3))
# MobileNetV2 inverted residual settings: expansion t, output channels c, repeats n, stride s
MOBILENETV2_SETTINGS: tuple[tuple[int, int, int, int], ...] = (
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)
MOBILENETV2_LAST: int = 1280  # channels of the last 1x1 conv
SMALL_INPUT: int = 64  # px: inputs up to this size get the CIFAR strides


class VGG16(nn.Module):
    """VGG-16 with batch normalization and a CIFAR head, for inputs of at least 32x32.

    The conv stack of Simonyan & Zisserman (2015), configuration D: 3x3 convs (with bias) of 64,
    64, M, 128, 128, M, 256 x3, M, 512 x3, M, 512 x3, M (M: 2x2 max-pool), each conv followed by
    BN and ReLU (torchvision's ``vgg16_bn`` features), then a global average pool and one fc
    512 -> classes (the CIFAR head of kuangliu/pytorch-cifar; on 32x32 the stack ends at 1x1, so
    the pool is the identity there). BN is used because plain VGG-16 barely trains from scratch
    with default initialization. Parameters: conv stack 14,714,688 (torchvision's ``vgg16``
    features) + 8,448 BN + 5,130 head = 14,728,266 on 32x32x3 with 10 classes.

    Parameters
    ----------
    input_shape : tuple of int
        ``(C, H, W)``.
    num_classes : int
        Output logits.
    """

    MIN_SIZE = 32  # px: five 2x2 max-pools

    def __init__(self, input_shape: tuple[int, ...], num_classes: int) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        cin = input_shape[0]
        for channels, convs in VGG16_STAGES:
            for _ in range(convs):
                layers += [nn.Conv2d(cin, channels, kernel_size=3, padding=1), nn.BatchNorm2d(channels), nn.ReLU()]
                cin = channels
            layers.append(nn.MaxPool2d(2))
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(512, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: [B, C, H, W]
        x = self.features(x)  # [B, 512, H/32, W/32]
        x = torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)  # [B, 512]
        return self.fc(x)  # [B, classes] logits


def conv_bn(cin: int, cout: int, kernel: int, stride: int = 1, groups: int = 1, act: bool = True) -> nn.Sequential:
    """Conv (no bias, 'same' padding) + BN (+ ReLU6): torchvision's ``Conv2dNormActivation``."""
    layers: list[nn.Module] = [
        nn.Conv2d(cin, cout, kernel, stride, padding=kernel // 2, groups=groups, bias=False),
        nn.BatchNorm2d(cout),
    ]
    if act:
        layers.append(nn.ReLU6())
    return nn.Sequential(*layers)


class InvertedResidual(nn.Module):
    """1x1 expand (x t, ReLU6; skipped when t = 1) -> 3x3 depthwise (stride) -> 1x1 linear project."""

    def __init__(self, cin: int, cout: int, stride: int, t: int) -> None:
        super().__init__()
        hidden = cin * t
        layers: list[nn.Module] = [conv_bn(cin, hidden, 1)] if t != 1 else []
        layers += [conv_bn(hidden, hidden, 3, stride, groups=hidden), conv_bn(hidden, cout, 1, act=False)]
        self.conv = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv(x) if self.residual else self.conv(x)


class MobileNetV2(nn.Module):
    """MobileNetV2, width 1.0 (Sandler et al., CVPR 2018; torchvision's layer structure).

    conv 32@3x3 stride 2 -> inverted residual stages (t, c, n, s) = :data:`MOBILENETV2_SETTINGS`
    -> conv 1280@1x1 -> global average pool -> fc classes; every conv is followed by BN (ReLU6
    except after the projections). Torchvision's dropout before the fc is left out (no randomness
    in the forward pass; it holds no parameters). For inputs of at most :data:`SMALL_INPUT` px the
    CIFAR variant (as in kuangliu/pytorch-cifar): stride 1 in the stem conv and in the first
    strided stage (t, c, n, s) = (6, 24, 2, 2) -> s = 1, so a 32x32 image ends at 4x4 rather
    than 1x1. Strides hold no parameters: 3,504,872 at 1000 classes on 224x224x3 (torchvision's
    count), 2,236,682 at 10 classes on 32x32x3.

    Parameters
    ----------
    input_shape : tuple of int
        ``(C, H, W)``.
    num_classes : int
        Output logits.
    """

    MIN_SIZE = 1

    def __init__(self, input_shape: tuple[int, ...], num_classes: int) -> None:
        super().__init__()
        c, h, w = input_shape
        small = max(h, w) <= SMALL_INPUT
        layers: list[nn.Module] = [conv_bn(c, 32, 3, stride=1 if small else 2)]
        cin = 32
        for k, (t, cout, n, s) in enumerate(MOBILENETV2_SETTINGS):
            s = 1 if (small and k == 1) else s
            for i in range(n):
                layers.append(InvertedResidual(cin, cout, s if i == 0 else 1, t))
                cin = cout
        layers.append(conv_bn(cin, MOBILENETV2_LAST, 1))
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(MOBILENETV2_LAST, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: [B, C, H, W]
        x = self.features(x)  # [B, 1280, H/8, W/8] (CIFAR variant), H/32 otherwise
        x = torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)  # [B, 1280]
        return self.fc(x)  # [B, classes] logits
