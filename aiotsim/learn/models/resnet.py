"""Residual networks: He et al.'s CIFAR ResNets (20, 32, 56) and torchvision's ResNet-18 and -50.

Every convolution here has no bias and is followed by batch normalization, as in both sources.
Batch normalization normalizes with the statistics of the batch at hand during training (see
:mod:`aiotsim.learn.compute` for what the simulator does with running statistics). Shapes in
comments are ``[B, C, H, W]``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

SMALL_INPUT: int = 64  # px: inputs up to this size get the CIFAR stem (3x3 conv, no max-pool)


def conv3x3(cin: int, cout: int, stride: int = 1) -> nn.Conv2d:
    """3x3 convolution, padding 1, no bias (output ``ceil(H / stride)``)."""
    return nn.Conv2d(cin, cout, kernel_size=3, stride=stride, padding=1, bias=False)


class ShortcutA(nn.Module):
    """Option A identity shortcut: subsample by ``stride`` and zero-pad the new channels."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.stride, self.extra = stride, cout - cin

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [B, cin, H, W]
        x = x[:, :, :: self.stride, :: self.stride]  # [B, cin, ceil(H/s), ceil(W/s)]
        return F.pad(x, (0, 0, 0, 0, 0, self.extra))  # [B, cout, ...]: zeros appended


class CifarBlock(nn.Module):
    """Two 3x3 conv-BN layers with an option A shortcut (He et al. 2016, section 4.2)."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1, self.bn1 = conv3x3(cin, cout, stride), nn.BatchNorm2d(cout)
        self.conv2, self.bn2 = conv3x3(cout, cout), nn.BatchNorm2d(cout)
        self.shortcut = ShortcutA(cin, cout, stride) if (stride != 1 or cin != cout) else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + self.shortcut(x))


class CifarResNet(nn.Module):
    """He et al.'s CIFAR ResNet of depth ``6 n + 2`` (resnet20, resnet32, resnet56).

    conv 16@3x3 -> BN -> ReLU -> three stages of ``n`` basic blocks with 16, 32, 64 channels (the
    first block of stages 2 and 3 has stride 2) -> global average pool -> fc classes. Shortcuts
    are option A (identity; subsampled and zero-padded where the shape changes), so they carry no
    parameters, as in the paper's CIFAR experiments ("Deep Residual Learning for Image
    Recognition", CVPR 2016, section 4.2). Parameters on 32x32x3 with 10 classes: resnet20
    269,722 (paper: 0.27 M), resnet32 464,154 (0.46 M), resnet56 853,018 (0.85 M). Any input size
    works (the pool is global).

    Parameters
    ----------
    input_shape : tuple of int
        ``(C, H, W)``.
    num_classes : int
        Output logits.
    depth : int
        ``6 n + 2``.
    """

    MIN_SIZE = 1

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, depth: int) -> None:
        super().__init__()
        n = (depth - 2) // 6
        self.conv1, self.bn1 = conv3x3(input_shape[0], 16), nn.BatchNorm2d(16)
        blocks: list[nn.Module] = []
        cin = 16
        for stage, cout in enumerate((16, 32, 64)):
            for i in range(n):
                blocks.append(CifarBlock(cin, cout, 2 if (stage > 0 and i == 0) else 1))
                cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(64, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: [B, C, H, W]
        x = torch.relu(self.bn1(self.conv1(x)))  # [B, 16, H, W]
        x = self.blocks(x)  # [B, 64, H/4, W/4]
        x = torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)  # [B, 64]
        return self.fc(x)  # [B, classes] logits


def projection(cin: int, cout: int, stride: int) -> nn.Sequential:
    """Option B shortcut of torchvision: 1x1 conv (stride) + BN."""
    return nn.Sequential(nn.Conv2d(cin, cout, kernel_size=1, stride=stride, bias=False), nn.BatchNorm2d(cout))


class BasicBlock(nn.Module):
    """torchvision's BasicBlock: two 3x3 conv-BN layers, projection shortcut where shapes change."""

    expansion = 1

    def __init__(self, cin: int, planes: int, stride: int) -> None:
        super().__init__()
        self.conv1, self.bn1 = conv3x3(cin, planes, stride), nn.BatchNorm2d(planes)
        self.conv2, self.bn2 = conv3x3(planes, planes), nn.BatchNorm2d(planes)
        self.downsample = projection(cin, planes, stride) if (stride != 1 or cin != planes) else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + self.downsample(x))


class Bottleneck(nn.Module):
    """torchvision's Bottleneck (v1.5: stride on the 3x3): 1x1 -> 3x3 -> 1x1 (x4 channels)."""

    expansion = 4

    def __init__(self, cin: int, planes: int, stride: int) -> None:
        super().__init__()
        cout = planes * self.expansion
        self.conv1, self.bn1 = nn.Conv2d(cin, planes, 1, bias=False), nn.BatchNorm2d(planes)
        self.conv2, self.bn2 = conv3x3(planes, planes, stride), nn.BatchNorm2d(planes)
        self.conv3, self.bn3 = nn.Conv2d(planes, cout, 1, bias=False), nn.BatchNorm2d(cout)
        self.downsample = projection(cin, cout, stride) if (stride != 1 or cin != cout) else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        out = torch.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return torch.relu(out + self.downsample(x))


class ResNet(nn.Module):
    """torchvision's ResNet (He et al. 2016, ImageNet) with BasicBlock or Bottleneck blocks.

    Stem, then four stages of 64, 128, 256, 512 planes (stride 1, 2, 2, 2; blocks per stage
    ``layers``), global average pool, fc classes. Shortcuts where the shape changes are option B
    (1x1 conv + BN projections). Stem: for inputs of at most :data:`SMALL_INPUT` px (CIFAR, MNIST)
    the common CIFAR stem, a 3x3 stride-1 conv and no max-pool (as in kuangliu/pytorch-cifar);
    above, the ImageNet stem: 7x7 stride-2 conv + 3x3 stride-2 max-pool. Parameters at 224x224x3
    with 1000 classes: resnet18 11,689,512 and resnet50 25,557,032 (torchvision's counts); on
    32x32x3 with 10 classes (CIFAR stem) 11,173,962 and 23,520,842.

    Parameters
    ----------
    input_shape : tuple of int
        ``(C, H, W)``.
    num_classes : int
        Output logits.
    block : type
        :class:`BasicBlock` or :class:`Bottleneck`.
    layers : tuple of int
        Blocks per stage: ``(2, 2, 2, 2)`` for resnet18, ``(3, 4, 6, 3)`` for resnet50.
    """

    MIN_SIZE = 1

    def __init__(
        self,
        input_shape: tuple[int, ...],
        num_classes: int,
        block: type[BasicBlock | Bottleneck],
        layers: tuple[int, ...],
    ) -> None:
        super().__init__()
        c, h, w = input_shape
        small = max(h, w) <= SMALL_INPUT
        self.conv1 = conv3x3(c, 64) if small else nn.Conv2d(c, 64, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.maxpool: nn.Module = nn.Identity() if small else nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        stages: list[nn.Module] = []
        cin = 64
        for i, (planes, count) in enumerate(zip((64, 128, 256, 512), layers)):
            for j in range(count):
                stages.append(block(cin, planes, 2 if (i > 0 and j == 0) else 1))
                cin = planes * block.expansion
        self.layers = nn.Sequential(*stages)
        self.fc = nn.Linear(512 * block.expansion, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: [B, C, H, W]
        x = self.maxpool(torch.relu(self.bn1(self.conv1(x))))  # [B, 64, H', W'] (H/4 ImageNet stem)
        x = self.layers(x)  # [B, 512 * expansion, H'/8, W'/8]
        x = torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)  # [B, 512 * expansion]
        return self.fc(x)  # [B, classes] logits
