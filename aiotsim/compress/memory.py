"""Error feedback (GRACE's Memory): what a codec did not send is kept on the node and added to
the next gradient, so nothing is lost, only delayed (Seide 2014; Strom 2015; Karimireddy 2019).

This is a role around a codec, applied by :meth:`aiotsim.compress.base.Codec.encode_rows` to one
layer of one or many nodes as ``[rows, n]`` rows: :func:`compensate_rows` before the codec's own
encoder and :func:`remember_rows` after it. A codec only reports what it sent (a :class:`Sent` per
row, or :data:`SentRows` for all rows at once); no codec calls these functions itself. They work on
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


# What a rows encoder (``Codec._encode_rows``) says it sent, for ``[rows, n]`` accumulations:
# ("dense", [rows, n] fp32), ("sparse", ([rows, k] int64 indices, [rows, k] fp32 values)), for
# counts that differ by row ("flat", ([m] int64 indices into the [rows * n] block, [m] fp32)), or
# ("rows", [Sent per row]) from a codec that encodes row by row; an optional third item is a
# [rows, n] factor applied to the new residuals (as Sent.decay).
SentRows = tuple


def compensate_rows(x: torch.Tensor, residuals: list[torch.Tensor | None]) -> torch.Tensor:
    """``grad + residual`` per row of ``x`` (``[rows, n]``) in fp32; ``x`` is not modified.

    The sum is formed in the residuals' own memory where they are the rows of one block
    (:func:`rows_block`: one node's contiguous fp32 residual, or a batched pass's state), so a step
    allocates no fresh gradient-sized tensor once residuals exist (on CPU a fresh 100 MB tensor
    costs a page fault per 4 KB, more than the addition); the caller drops its references, the new
    residuals come from :func:`remember_rows`. Else a fresh fp32 copy with each residual added
    (fp32 addition is commutative: the same values either way).
    """
    block = rows_block(residuals) if all(r is not None for r in residuals) else None  # type: ignore[arg-type]
    if block is not None and block.numel() == x.numel():
        return block.view(x.shape).add_(x)
    acc = x.float().clone() if x.dtype == torch.float32 else x.float()
    with_res = [i for i, r in enumerate(residuals) if r is not None]
    if len(with_res) == len(residuals):
        acc += torch.stack([r.reshape(-1).float() for r in residuals])  # type: ignore[union-attr]
    elif with_res:
        res = torch.stack([residuals[i].reshape(-1).float() for i in with_res])  # type: ignore[union-attr]
        rows = torch.tensor(with_res, device=acc.device)
        acc.index_copy_(0, rows, acc.index_select(0, rows).add_(res))
    return acc


def remember_rows(
    acc: torch.Tensor, sent: SentRows | None, before: list[torch.Tensor | None], shape: tuple[int, ...]
) -> list[torch.Tensor]:
    """The new residuals ``acc - sent`` (times the decay where given), one per row, fp32 of ``shape``.

    ``acc`` (the accumulation from :func:`compensate_rows`) is modified in place; a sparse ``sent``
    is subtracted at its indices only (distinct, so an accumulating ``index_put_`` subtracts each
    once). A row's residual keeps the storage of its previous one where :func:`compensate_rows`
    summed in it or it is fp32, contiguous and of the same size (a node's state pages), else it is
    a view of the row.
    """
    if sent is None:
        raise CodecError("a codec with error feedback must report what it sent")
    kind, value = sent[0], sent[1]
    rows = acc.unbind(0)  # once: a tensor's own iteration unbinds it anew each time
    if kind == "dense":
        acc.sub_(value.view(acc.shape))
    elif kind == "rows":  # each row's own Sent, subtracted in its row (no [rows, n] stack)
        for row, s in zip(rows, value):
            if s.dense is not None:
                row.sub_(s.dense.reshape(-1))
            elif s.indices is not None and s.values is not None:
                row.index_put_((s.indices.reshape(-1),), -s.values.reshape(-1).to(acc.dtype), accumulate=True)
            else:
                raise CodecError("Sent needs either `dense` or both `indices` and `values`")
            if s.decay is not None:
                row.mul_(s.decay.reshape(-1))
    elif kind in ("sparse", "flat"):
        idx, vals = value
        if kind == "sparse" and acc.shape[0] > 1:
            idx = idx + acc.shape[1] * torch.arange(acc.shape[0], device=acc.device).unsqueeze(1)  # into [rows * n]
        acc.view(-1).index_put_((idx.reshape(-1),), -vals.reshape(-1).to(acc.dtype), accumulate=True)
    else:
        raise CodecError(f"unknown kind of sent rows {kind!r}: 'dense', 'sparse', 'flat' or 'rows'")
    if len(sent) > 2:
        acc.mul_(sent[2])
    out = []
    for old, row in zip(before, rows):
        if old is not None and old.data_ptr() == row.data_ptr():
            out.append(old)  # acc was formed in the residuals' block: updated in place
        elif old is not None and old.dtype == torch.float32 and old.is_contiguous() and old.numel() == row.numel():
            out.append(old.view(shape).copy_(row.view(shape)))
        else:
            out.append(row.view(shape))
    return out


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
