"""The common shape of a data set read from files, before splitting and standardization."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class RawSplit:
    """A data set as its files hold it.

    Attributes
    ----------
    train_x : numpy.ndarray
        ``[N, C, H, W]`` pixels: uint8 in 0..255, or float32 in [0, 1] (LEAF JSON).
    train_y : numpy.ndarray
        ``[N]`` int64 labels in ``0..num_classes-1``.
    test_x, test_y : numpy.ndarray or None
        The official test split in the same layout, or ``None`` when the files have none (the
        caller then holds out ``test_fraction`` of the training data).
    num_classes : int
        Number of classes.
    train_writers : numpy.ndarray or None
        ``[N]`` int64 writer (client) index of every training sample, for per-writer data.
    """

    train_x: np.ndarray
    train_y: np.ndarray
    test_x: np.ndarray | None
    test_y: np.ndarray | None
    num_classes: int
    train_writers: np.ndarray | None = None


def freeze(*arrays: np.ndarray | None) -> None:
    """Mark arrays read-only: cached splits are shared by every caller."""
    for a in arrays:
        if a is not None:
            a.flags.writeable = False
