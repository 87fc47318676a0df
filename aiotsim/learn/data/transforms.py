"""Standardization of images and the seeded per-batch augmentation.

``normalize``: per-channel mean and standard deviation of the training split (over samples and
pixels), applied to both splits. ``crop-flip``: the standard light CIFAR augmentation (He et al.,
2016): pad each image by 4 pixels of zeros on every side (zero is the channel mean after
standardization), take a random crop of the original size, and flip it horizontally with
probability 1/2. The random numbers come from the calling stream's own ``torch.Generator``, so a
node's batches are the same in every run of a scenario.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F

from aiotsim.errors import ConfigError

Transform = Callable[[torch.Tensor, torch.Generator], torch.Tensor]

AUGMENTS: tuple[str, ...] = ("none", "crop-flip")
CROP_PADDING: int = 4  # pixels on every side
_STATS_CHUNK = 4096  # samples per chunk when computing channel statistics (bounds float64 memory)


def unit_scale(x: np.ndarray) -> np.ndarray:
    """Pixels as a new float32 array in [0, 1]: uint8 / 255; floats as they are (copied)."""
    out = x.astype(np.float32)  # always a copy: the input may be a shared, read-only cache
    if x.dtype == np.uint8:
        out /= 255.0
    return out


def channel_stats(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel mean and std of ``[N, C, H, W]`` images scaled to [0, 1]: two ``[C]`` float64.

    Accumulated in float64 over chunks, so a large uint8 set is never copied whole in float64.
    A channel with zero spread gets std 1 (no division by zero).
    """
    c = x.shape[1]
    total, sq, count = np.zeros(c), np.zeros(c), 0
    for start in range(0, x.shape[0], _STATS_CHUNK):
        part = unit_scale(x[start : start + _STATS_CHUNK]).astype(np.float64)  # [n, C, H, W]
        total += part.sum(axis=(0, 2, 3))
        sq += np.square(part).sum(axis=(0, 2, 3))
        count += part.shape[0] * part.shape[2] * part.shape[3]
    mean = total / max(count, 1)
    var = np.maximum(sq / max(count, 1) - mean**2, 0.0)
    std = np.sqrt(var)
    return mean, np.where(std > 0, std, 1.0)


def to_tensor(x: np.ndarray, mean: np.ndarray | None, std: np.ndarray | None) -> torch.Tensor:
    """``[N, C, H, W]`` float32 tensor in [0, 1], standardized per channel when ``mean`` is given."""
    out = unit_scale(x)  # [N, C, H, W] float32, a fresh array: standardized in place
    if mean is not None and std is not None:
        out -= mean.astype(np.float32).reshape(1, -1, 1, 1)
        out /= std.astype(np.float32).reshape(1, -1, 1, 1)
    return torch.from_numpy(np.ascontiguousarray(out))


def crop_flip(x: torch.Tensor, gen: torch.Generator, padding: int = CROP_PADDING) -> torch.Tensor:
    """Random crop with zero padding and random horizontal flip of a batch.

    Parameters
    ----------
    x : torch.Tensor
        ``[B, C, H, W]`` batch (any device).
    gen : torch.Generator
        CPU generator; draws ``2B`` offsets and ``B`` flips per call.
    padding : int
        Pixels of zero padding on each side (crop offsets are 0..2*padding).

    Returns
    -------
    torch.Tensor
        ``[B, C, H, W]`` on ``x``'s device.
    """
    b, c, h, w = x.shape
    offsets = torch.randint(0, 2 * padding + 1, (2, b), generator=gen).to(x.device)  # [2, B] rows, cols
    flips = (torch.rand(b, generator=gen) < 0.5).to(x.device)  # [B]
    padded = F.pad(x, (padding, padding, padding, padding))  # [B, C, H + 2p, W + 2p]
    rows = offsets[0, :, None] + torch.arange(h, device=x.device)  # [B, H]
    cols = offsets[1, :, None] + torch.arange(w, device=x.device)  # [B, W]
    batch = torch.arange(b, device=x.device)[:, None, None, None]
    chan = torch.arange(c, device=x.device)[None, :, None, None]
    out = padded[batch, chan, rows[:, None, :, None], cols[:, None, None, :]]  # [B, C, H, W]
    return torch.where(flips[:, None, None, None], out.flip(3), out)


def augmentation(name: str) -> Transform | None:
    """The per-batch transform called ``name`` (``None`` for ``"none"``)."""
    if name not in AUGMENTS:
        raise ConfigError(f"unknown augmentation {name!r}; valid names: {', '.join(AUGMENTS)}")
    return crop_flip if name == "crop-flip" else None
