"""Small convolutional and fully connected models: LeNet-5, the 2NN MLP, Caffe's LeNet, AlexNet.

None of these models has normalization layers or dropout: a forward pass draws no randomness, so
a gradient depends only on the parameters and the batch. Shapes in comments are ``[B, C, H, W]``.
"""

from __future__ import annotations

import math

import torch
from torch import nn

MLP_HIDDEN: int = 200  # units per hidden layer of `mlp`
ALEXNET_HIDDEN: int = 4096  # units of AlexNet's hidden fully connected layer


class LeNet5(nn.Module):
    """LeNet-5 for ``(C, H, W)`` inputs with H, W >= 4.

    conv 6@5x5 (padding 2) -> ReLU -> max-pool 2 -> conv 16@5x5 -> ReLU -> max-pool 2 -> fc 120 ->
    ReLU -> fc 84 -> ReLU -> fc classes (LeCun et al., 1998, in its common modern form). Below 12x12
    the second conv is padded by 2 so its maps stay non-empty. 61,706 parameters on 28x28x1 with
    10 classes.

    Parameters
    ----------
    input_shape : tuple of int
        ``(C, H, W)``.
    num_classes : int
        Output logits.
    """

    MIN_SIZE = 4  # px, smallest H and W

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
    """Two hidden layers of :data:`MLP_HIDDEN` ReLU units (the 2NN of McMahan et al., 2017).

    Flatten -> fc 200 -> ReLU -> fc 200 -> ReLU -> fc classes. 199,210 parameters on 28x28x1 with
    10 classes.

    Parameters
    ----------
    input_shape : tuple of int
        Shape of one sample; flattened.
    num_classes : int
        Output logits.
    """

    MIN_SIZE = 1

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


class LeNetCaffe(nn.Module):
    """The LeNet of Caffe's and MXNet's MNIST examples, for inputs of at least 16x16.

    conv 20@5x5 -> max-pool 2 -> conv 50@5x5 -> max-pool 2 -> fc 500 -> ReLU -> fc classes (Caffe
    ``examples/mnist/lenet.prototxt``: no activation after the convolutions, unpadded convs). On
    28x28x1 with 10 classes: 28 -> 24 -> 12 -> 8 -> 4, 50*4*4 = 800 features, and
    520 + 25,050 + 400,500 + 5,010 = 431,080 parameters, the 0.45 M "gradient size" of the PGC
    paper's Table 3 (Guo et al., Sensors 2021, seed 002). On 32x32x3: 1,250 features, 657,080.

    Parameters
    ----------
    input_shape : tuple of int
        ``(C, H, W)``.
    num_classes : int
        Output logits.
    """

    MIN_SIZE = 16  # px: ((16 - 4) // 2 - 4) // 2 = 1

    def __init__(self, input_shape: tuple[int, ...], num_classes: int) -> None:
        super().__init__()
        c, h, w = input_shape
        h2, w2 = ((h - 4) // 2 - 4) // 2, ((w - 4) // 2 - 4) // 2  # after both conv+pool pairs
        self.conv1 = nn.Conv2d(c, 20, kernel_size=5)
        self.conv2 = nn.Conv2d(20, 50, kernel_size=5)
        self.pool = nn.MaxPool2d(2)
        self.fc1 = nn.Linear(50 * h2 * w2, 500)
        self.fc2 = nn.Linear(500, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: [B, C, H, W]
        x = self.pool(self.conv1(x))  # [B, 20, (H-4)/2, (W-4)/2]
        x = self.pool(self.conv2(x))  # [B, 50, h2, w2]
        x = torch.relu(self.fc1(torch.flatten(x, 1)))  # [B, 500]
        return self.fc2(x)  # [B, classes] logits


class AlexNet(nn.Module):
    """An AlexNet for small inputs (28x28 and up), sized like the PGC paper's Table 3.

    Five convolutions and a 4096-unit hidden layer, as in Krizhevsky et al. (2012), scaled to
    small images: conv 32@5x5 (pad 2) -> ReLU -> max-pool 2 -> conv 64@5x5 (pad 2) -> ReLU ->
    max-pool 2 -> conv 64@3x3 -> ReLU -> conv 64@3x3 -> ReLU -> conv 256@3x3 -> ReLU (the last
    three unpadded) -> fc 4096 -> ReLU -> fc classes. No dropout (the forward pass draws no
    randomness). The PGC paper (Guo et al., Sensors 2021, seed 002) does not give its layers,
    only the sizes 1.39 M (MNIST) and 4.56 M (CIFAR-10); the unpadded tail makes the conv maps
    1x1 on 28x28 and 2x2 on 32x32, which is what the paper's 3.3x ratio between the two needs.
    Parameters with 10 classes: 28x28x1: 273,664 conv + 1,052,672 fc1 + 40,970 fc2 = 1,367,306
    (1.6% under 1.39 M); 32x32x3: 275,264 + 4,198,400 + 40,970 = 4,514,634 (1.0% under 4.56 M).

    Parameters
    ----------
    input_shape : tuple of int
        ``(C, H, W)``.
    num_classes : int
        Output logits.
    """

    MIN_SIZE = 28  # px: 28 -> 14 -> 7 -> 5 -> 3 -> 1

    def __init__(self, input_shape: tuple[int, ...], num_classes: int) -> None:
        super().__init__()
        c, h, w = input_shape
        h3, w3 = h // 4 - 6, w // 4 - 6  # two pools, then three unpadded 3x3 convs
        self.features = nn.Sequential(
            nn.Conv2d(c, 32, kernel_size=5, padding=2),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(32, 64, kernel_size=5, padding=2),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(64, 64, kernel_size=3),
            nn.ReLU(),
            nn.Conv2d(64, 64, kernel_size=3),
            nn.ReLU(),
            nn.Conv2d(64, 256, kernel_size=3),
            nn.ReLU(),
        )
        self.fc1 = nn.Linear(256 * h3 * w3, ALEXNET_HIDDEN)
        self.fc2 = nn.Linear(ALEXNET_HIDDEN, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: [B, C, H, W]
        x = torch.flatten(self.features(x), 1)  # [B, 256*h3*w3]
        x = torch.relu(self.fc1(x))  # [B, 4096]
        return self.fc2(x)  # [B, classes] logits
