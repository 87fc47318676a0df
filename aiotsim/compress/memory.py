"""Error feedback (GRACE's Memory): what a codec did not send is kept on the node and added to
the next gradient, so nothing is lost, only delayed (Seide 2014; Strom 2015; Karimireddy 2019).

Invariant checked by the tests of every codec with a residual:
``sent + residual_after == grad + residual_before`` (element-wise, up to fp32 rounding).
"""

from __future__ import annotations

import torch

from aiotsim.compress.base import CodecState


def compensate(grad: torch.Tensor, state: CodecState) -> torch.Tensor:
    """``grad + residual`` in fp32, shaped like ``grad``; ``grad`` is not modified.

    The sum is formed in the residual's own storage (the previous residual is consumed: every
    codec derives its new residual from this sum), so a step allocates no fresh gradient-sized
    tensor once a residual exists; on CPU a fresh 100 MB tensor costs a page fault per 4 KB, more
    than the addition. Without a residual it is a fp32 copy of ``grad``.
    """
    res = state.residual
    if res is None or res.dtype != torch.float32 or res.numel() != grad.numel() or not res.is_contiguous():
        acc = grad.float().clone() if grad.dtype != torch.float32 else grad.clone()
        if res is not None:
            acc += res.reshape(acc.shape)
        return acc
    state.residual = None  # consumed: the codec stores the new residual
    return res.view(grad.shape).add_(grad)


# One scratch buffer per device, reused across codec calls (encoding is sequential in a process).
_WORKSPACE: dict[torch.device, torch.Tensor] = {}


def workspace(n: int, device: torch.device) -> torch.Tensor:
    """A scratch fp32 ``[n]`` tensor, valid until the next call: for temporaries that do not
    outlive one encode (reusing it avoids a fresh allocation and its page faults per step)."""
    buf = _WORKSPACE.get(device)
    if buf is None or buf.numel() < n:
        buf = torch.empty(n, dtype=torch.float32, device=device)
        _WORKSPACE[device] = buf
    return buf[:n]


def remember(acc: torch.Tensor, sent: torch.Tensor, state: CodecState) -> None:
    """Keep what was not sent: ``residual = acc - sent`` (both fp32, shape of the gradient).

    ``acc`` (the codec's own accumulation from :func:`compensate`) becomes the residual, modified
    in place: callers must not use it afterwards.
    """
    state.residual = acc.sub_(sent.view(acc.shape))
