"""Error feedback (GRACE's Memory): what a codec did not send is kept on the node and added to
the next gradient, so nothing is lost, only delayed (Seide 2014; Strom 2015; Karimireddy 2019).

Invariant checked by the tests of every codec with a residual:
``sent + residual_after == grad + residual_before`` (element-wise, up to fp32 rounding).
"""

from __future__ import annotations

import torch

from aiotsim.compress.base import CodecState


def compensate(grad: torch.Tensor, state: CodecState) -> torch.Tensor:
    """``grad + residual`` in fp32 (a fresh tensor; ``grad`` is not modified)."""
    acc = grad.float().clone() if grad.dtype != torch.float32 else grad.clone()
    if state.residual is not None:
        acc += state.residual
    return acc


def remember(acc: torch.Tensor, sent: torch.Tensor, state: CodecState) -> None:
    """Keep what was not sent: ``residual = acc - sent`` (both fp32, shape of the gradient)."""
    state.residual = acc - sent
