"""What both sides know of a layer by protocol: its name, shape, dtype, kind and index."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

LayerKind = Literal["conv", "fc", "bias", "norm", "other"]


@dataclass(frozen=True)
class LayerInfo:
    """Static facts about one parameter tensor, known to both sides by protocol.

    Parameters
    ----------
    name : str
        Parameter name, e.g. ``"conv1.weight"``.
    shape : tuple of int
        Shape of the gradient tensor.
    dtype : torch.dtype
        dtype the decoded gradient must have.
    kind : {"conv", "fc", "bias", "norm", "other"}
        Layer type; hybrid codecs (Hylo) route on it.
    index : int
        Position of the layer in the model's parameter list (used to derive per-layer seeds).
    """

    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype = torch.float32
    kind: LayerKind = "other"
    index: int = 0

    @property
    def numel(self) -> int:
        """Number of elements of the gradient."""
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def dense_nbytes(self) -> int:
        """Bytes of the uncompressed fp32 gradient: the reference for compression ratios."""
        return 4 * self.numel
