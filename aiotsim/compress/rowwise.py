"""Helpers of the codecs' row encoders (``Codec._encode_rows``) over a layer of one or many nodes as
``[nodes, n]`` rows: per-row reductions that equal each row's own 1-D reduction, each node's own
uniform draws, the momentum correction of every row's velocity and each row's top-k."""

from __future__ import annotations

from collections.abc import Callable

import torch

from aiotsim.compress.base import CodecState, LayerInfo
from aiotsim.compress.memory import rows_block


def row_reduce(
    fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, batched: Callable[[torch.Tensor], torch.Tensor]
) -> torch.Tensor:
    """Per-row scalar reduction: ``batched(x)`` on the CPU at one intra-op thread (bit-identical
    to the 1-D reductions there), else ``fn`` row by row (with several threads torch splits a long
    1-D reduction across them, which sums in another order than a row of ``[nodes, n]``).
    Returns ``[nodes]``."""
    if x.device.type == "cpu" and torch.get_num_threads() == 1:
        return batched(x)
    return torch.stack([fn(r) for r in x])


F64 = torch.float64
# Values per row from which a float64 sum runs row by row: a dim=1 sum of long rows is slower than
# their 1-D sums (CPU, one thread, ms: 1 x 1,000,000 1.5 / 0.85, 3 x 1,000,000 3.7 / 2.5,
# 10 x 65,536 0.63 / 0.54; below it the one call wins: 100 x 1,000 0.03 / 0.35). The same values.
LONG_ROW = 1 << 16


def row_sums64(x: torch.Tensor) -> torch.Tensor:
    """``[rows]`` sums of the fp32 rows of ``x``, accumulated in float64: a codec's scale of a
    large layer keeps every digit of its statistics (float32 accumulation loses them: the L1 norm
    of 10M values came out 7.7e-3 low through ``vector_norm``)."""
    if x.shape[1] >= LONG_ROW:
        return torch.stack([r.sum(dtype=F64) for r in x])
    return row_reduce(lambda r: r.sum(dtype=F64), x, lambda b: b.sum(dim=1, dtype=F64))


def row_norms64(x: torch.Tensor, order: float = 2) -> torch.Tensor:
    """``[rows]`` L1 (``order=1``) or L2 norms of the fp32 rows of ``x``, accumulated in float64
    (see :func:`row_sums64`)."""

    def one(r: torch.Tensor) -> torch.Tensor:
        return torch.linalg.vector_norm(r, order, dtype=F64)

    if x.shape[1] >= LONG_ROW:
        return torch.stack([one(r) for r in x])
    return row_reduce(one, x, lambda b: torch.linalg.vector_norm(b, order, dim=1, dtype=F64))


def abs_max(acc: torch.Tensor) -> torch.Tensor:
    """``[rows]`` max ``|acc|`` per row, from ``aminmax`` (without forming ``|acc|``), each the row's
    own 1-D value (as a node encoded alone takes it). One row by that 1-D reduction, which torch
    runs about 7x faster than the row form (1M fp32, one thread: 0.23 vs 1.6 ms); several by
    :func:`row_reduce`, whose row form differs from the 1-D one only where the maximum is zero (its
    sign) or NaN (its bits): on the CPU, where the row form runs, such rows are taken again alone."""

    def one(x: torch.Tensor) -> torch.Tensor:
        lo, hi = torch.aminmax(x)
        return torch.maximum(hi, -lo)

    if acc.shape[0] == 1:
        return one(acc[0]).reshape(1)
    lo, hi = row_reduce(
        lambda r: torch.stack(torch.aminmax(r)), acc, lambda x: torch.stack(torch.aminmax(x, dim=1), 1)
    ).T
    out = torch.maximum(hi, -lo)
    if acc.device.type == "cpu":
        for i in torch.nonzero(~(out > 0)).reshape(-1).tolist():  # zero or NaN: rare
            out[i] = one(acc[i])
    return out


def uniform_rows(states: list[CodecState], nodes: int, n: int, device: torch.device) -> torch.Tensor:
    """``[nodes, n]`` U[0, 1): row ``i`` drawn from node ``i``'s generator (its own draws, in order)."""
    q = torch.empty((nodes, n), dtype=torch.float32, device=device)
    for i, s in enumerate(states):
        q[i].uniform_(generator=s.generator)
    return q


def velocity_rows(g: torch.Tensor, states: list[CodecState], layer: LayerInfo, m: float) -> torch.Tensor:
    """The momentum correction ``u <- m u + g`` (Lin et al. 2018), formed in the previous velocity's
    storage, of every row of the fp32 ``[nodes, n]`` ``g``, in each state's ``momentum``: one ``mul_`` and
    ``add_`` over the rows where the velocities are the rows of one block (their previous batched
    step), else node by node; a first step keeps a copy of the rows as the velocities (one block,
    which :func:`aiotsim.sim.storage.hold_residual_rows` may move into the state pages). Returns
    ``u`` as ``[nodes, n]``."""
    velocity = [s.momentum for s in states]  # type: ignore[attr-defined]
    if all(v is None for v in velocity):
        u = g.clone()
        for s, row in zip(states, u):
            s.momentum = row.view(layer.shape)  # type: ignore[attr-defined]
        return u
    block = rows_block([v.reshape(-1) for v in velocity]) if all(v is not None for v in velocity) else None
    if block is not None and block.numel() == g.numel():
        return block.view(g.shape).mul_(m).add_(g)
    for i, s in enumerate(states):  # node by node; a node's first velocity is a copy of its row
        row = g[i].view(layer.shape)
        s.momentum = row.clone() if s.momentum is None else s.momentum.mul_(m).add_(row)  # type: ignore[attr-defined]
    return torch.stack([s.momentum.reshape(-1) for s in states])  # type: ignore[attr-defined]


def top_rows(mag: torch.Tensor, k: int) -> torch.Tensor | None:
    """``[nodes, k]`` ascending indices of each row's ``k`` largest scores, lower index first among
    equals: :func:`~aiotsim.compress.sparsify.topk_indices` of every row of ``mag``; None when a
    row holds a NaN (its k-th score is NaN, so it selects nothing)."""
    nodes, n = mag.shape
    if k >= n:
        return torch.arange(n, device=mag.device).expand(nodes, n)
    kth = torch.topk(mag, k, dim=1, sorted=False).values.min(dim=1, keepdim=True).values  # [nodes, 1]
    above = mag > kth
    need = k - above.sum(dim=1, keepdim=True)  # ties at the k-th magnitude that still fit
    ties = mag == kth
    # int32 counts (n < 2**31): half the bytes of int64's, and a pass's [nodes, n] of them stays
    # under glibc's largest heap block (32 MiB), so its memory is reused, not mapped and faulted
    # in afresh each call (iot1000 topk, 106 nodes x 48,000: 40.7 -> 20.3 MB)
    mask = above | (ties & (torch.cumsum(ties, dim=1, dtype=torch.int32) <= need))  # k per row
    hits = torch.nonzero(mask)[:, 1]  # ascending per row (lower index wins ties)
    return hits.view(nodes, k) if hits.numel() == nodes * k else None
