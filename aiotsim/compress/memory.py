"""Error feedback (GRACE's Memory): what a codec did not send is kept on the node and added to
the next gradient, so nothing is lost, only delayed (Seide 2014; Strom 2015; Karimireddy 2019).

This is a role around a codec, applied by :meth:`aiotsim.compress.base.Codec.encode`: it calls
:func:`compensate` before the codec's own ``_encode`` and :func:`remember` after it. A codec only
reports what it sent (a :class:`Sent`); no codec calls these functions itself. They work on
tensors, not on states, so this module depends on nothing else in the package but its errors.

Invariant checked by the tests of every codec with a residual:
``sent + residual_after == grad + residual_before`` (element-wise, up to fp32 rounding).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from aiotsim.errors import CodecError


@dataclass(frozen=True)
class Sent:
    """What the receiver will decode from a message, as its encoder knows it.

    Either ``dense`` (fp32, the accumulation's shape or flat) or a sparse message: ``indices``
    (``[k]`` distinct flat int64 indices) and ``values`` (``[k]`` fp32 decoded there), zero
    elsewhere; the sparse form needs no dense ``[n]`` tensor. ``decay``: an optional ``[n]``
    factor applied to the new residual (forgetting, as Gradient Variance's ``r <- zeta r``).
    """

    dense: torch.Tensor | None = None
    indices: torch.Tensor | None = None
    values: torch.Tensor | None = None
    decay: torch.Tensor | None = None

    @staticmethod
    def sparse(indices: torch.Tensor, values: torch.Tensor, decay: torch.Tensor | None = None) -> Sent:
        """A sparse message: ``values`` at ``indices``."""
        return Sent(indices=indices, values=values, decay=decay)


def compensate(grad: torch.Tensor, residual: torch.Tensor | None) -> torch.Tensor:
    """``grad + residual`` in fp32, shaped like ``grad``; ``grad`` is not modified.

    The sum is formed in the residual's own storage when it can be (the caller drops its reference:
    the new residual comes from :func:`remember`), so a step allocates no fresh gradient-sized
    tensor once a residual exists; on CPU a fresh 100 MB tensor costs a page fault per 4 KB, more
    than the addition. Without a residual it is a fp32 copy of ``grad``.
    """
    res = residual
    if res is None or res.dtype != torch.float32 or res.numel() != grad.numel() or not res.is_contiguous():
        acc = grad.float().clone() if grad.dtype != torch.float32 else grad.clone()
        if res is not None:
            acc += res.reshape(acc.shape)
        return acc
    return res.view(grad.shape).add_(grad)


def remember(acc: torch.Tensor, sent: Sent) -> torch.Tensor:
    """The new residual, ``acc - sent`` (times ``sent.decay`` when given), fp32, shape of ``acc``.

    ``acc`` (the role's own accumulation from :func:`compensate`) becomes the residual, modified
    in place. A sparse ``sent`` is subtracted at its indices only (they are distinct, so an
    accumulating ``index_put_`` subtracts each once).
    """
    if sent.dense is not None:
        res = acc.sub_(sent.dense.view(acc.shape))
    elif sent.indices is not None and sent.values is not None:
        acc.view(-1).index_put_((sent.indices,), -sent.values.to(acc.dtype), accumulate=True)
        res = acc
    else:
        raise CodecError("Sent needs either `dense` or both `indices` and `values`")
    if sent.decay is not None:
        res.view(-1).mul_(sent.decay)
    return res


def momentum_velocity(g: torch.Tensor, previous: torch.Tensor | None, m: float) -> torch.Tensor:
    """Momentum correction (Lin et al. 2018): the velocity ``u <- m u + g``, formed in the previous
    velocity's storage (``g`` is copied the first time); fp32, shape of ``g``."""
    return g.clone() if previous is None else previous.mul_(m).add_(g)


def rows_block(rows: list[torch.Tensor]) -> torch.Tensor | None:
    """``rows`` (per-node state tensors of one layer, fp32) as one ``[len(rows), *shape]`` tensor
    when they are consecutive rows of the same memory, as a batched pass stores its nodes' state
    (:meth:`aiotsim.sim.pages.StatePages.hold_rows`), else None: then one operation over the
    block updates every node's row."""
    first = rows[0]
    size = first.numel() * first.element_size()  # B per row
    start, storage = first.data_ptr(), first.untyped_storage().data_ptr()
    for k, r in enumerate(rows):
        if (
            r.data_ptr() != start + k * size
            or r.untyped_storage().data_ptr() != storage
            or not r.is_contiguous()
            or r.shape != first.shape
            or r.dtype != torch.float32
        ):
            return None
    inner = first.stride() if first.dim() else ()
    return first.as_strided((len(rows), *first.shape), (first.numel(), *inner), first.storage_offset())
