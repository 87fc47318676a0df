"""Storage precision of the per-node state kept between rounds (``nodes.state_dtype``).

A node keeps, per layer, an error-feedback residual (codecs with error feedback), a momentum
velocity (``training.momentum_at = "nodes"``, or a codec's own, DGC/PGC ``momentum``): two or three
model-sized fp32 tensors per node, the bulk of a large fleet's memory (LeNet-5: 247 KB each). With
``state_dtype = "float16"`` they are stored in half precision between rounds and widened to fp32
for the arithmetic of one step (one node at a time), so a step computes exactly as in fp32 from the
rounded state; only the rounding of what is kept differs. ``"float32"`` (the default) changes
nothing: no conversion is made.

Measured (``aiotsim run scenarios/iot10.toml -c CODEC --set nodes.state_dtype=...``, 300
iterations, final accuracy fp32 -> fp16): topk 96.2% -> 96.1%; dgc 94.7% -> 93.1% (DGC's
residual accumulates small velocity terms that fp16 rounds away: prefer fp32 for it).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from aiotsim.compress.base import CodecState
from aiotsim.compress.memory import rows_block
from aiotsim.sim.pages import StatePages

# CodecState fields that hold model-sized state between rounds (residual: error feedback;
# momentum: DGC's and PGC's velocity)
STATE_FIELDS = ("residual", "momentum")
DTYPES = {"float32": torch.float32, "float16": torch.float16}


def widen_states(states: Sequence[CodecState]) -> list[dict[str, torch.Tensor]]:
    """Make every stored state tensor fp32 again before a step (in place on the states); returns
    the narrow tensors replaced, per state, for :func:`narrow_states` to store the next into."""
    kept: list[dict[str, torch.Tensor]] = []
    for st in states:
        narrow: dict[str, torch.Tensor] = {}
        for name in STATE_FIELDS:
            t = getattr(st, name, None)
            if t is not None and t.dtype == torch.float16:
                narrow[name] = t
                setattr(st, name, t.float())
        kept.append(narrow)
    return kept


def narrow_states(
    states: Sequence[CodecState],
    dtype: torch.dtype,
    kept: Sequence[dict[str, torch.Tensor]] | None = None,
    pages: StatePages | None = None,
) -> None:
    """Store every fp32 state tensor as ``dtype`` after a step: into the narrow tensor it was
    widened from (``kept``, from :func:`widen_states`) when the shape still fits, else a new one;
    with ``pages``, every state tensor ends up held there (:class:`StatePages`: a first residual
    or momentum is moved once; fp32 state is updated in place afterwards, so it stays)."""
    for k, st in enumerate(states):
        for name in STATE_FIELDS:
            t = getattr(st, name, None)
            if t is None:
                continue
            if dtype != torch.float32 and t.dtype == torch.float32:
                old = kept[k].get(name) if kept else None
                t = old.copy_(t) if old is not None and old.shape == t.shape else t.to(dtype)
            setattr(st, name, pages.hold(t) if pages is not None else t)


def step_velocity(
    velocity: list[torch.Tensor] | None,
    grads: list[torch.Tensor],
    m: float,
    dtype: torch.dtype,
    pages: StatePages | None = None,
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Momentum correction ``u <- m u + g`` per layer: ``(u in fp32 for this step, u as stored)``.

    In fp32 the stored velocity is updated in place and is the step's own (one batched op per
    step for all layers, as before); in fp16 the step's velocity is a fp32 copy and the stored one
    its rounding, written into the stored tensors. With ``pages`` the first velocity is stored
    there (:class:`StatePages`), where the in-place updates keep it.
    """
    if velocity is not None and pages is not None and not all(pages.holds(v) for v in velocity):
        velocity = [pages.hold(v) for v in velocity]  # restored from a checkpoint: moved in once
    if velocity is None and pages is not None and dtype == torch.float32 and all(g.is_cpu for g in grads):
        step = [pages.hold(g) for g in grads]  # copied into the pages: no owned copy first (batched rows)
    elif velocity is None:
        step = _owned(grads)
        if pages is not None and dtype == torch.float32:
            step = [pages.hold(u) for u in step]  # CPU tensors move into the pages (CUDA stays)
    elif dtype == torch.float32:
        torch._foreach_mul_(velocity, m)
        torch._foreach_add_(velocity, grads)
        step = velocity
    else:
        step = [v.float() for v in velocity]
        torch._foreach_mul_(step, m)
        torch._foreach_add_(step, grads)
    if dtype == torch.float32:
        return step, step
    if velocity is not None:
        return step, [v.copy_(u) for v, u in zip(velocity, step, strict=True)]
    return step, [pages.hold(u.to(dtype)) if pages is not None else u.to(dtype) for u in step]


def step_pass_velocity(
    velocities: Sequence[list[torch.Tensor] | None], rows: list[torch.Tensor], m: float, pages: StatePages
) -> list[torch.Tensor] | None:
    """Momentum ``u <- m u + g`` of a batched pass's nodes at once (fp32 state; on the CPU in
    ``pages``, on a GPU in blocks of its own): per layer ``[nodes, *shape]`` with node ``k``'s
    step in row ``k``, or None where their velocities are not the rows of common blocks (the
    caller steps node by node, :func:`step_velocity`).

    ``velocities`` are the nodes' stored velocities in pass order (all None at their first step),
    ``rows`` the pass's gradients per layer (``[nodes, *shape]``). A first step stores each layer
    as one block (:meth:`StatePages.hold_rows`), whose rows are the nodes' velocities from then
    on; a later step of the same nodes in the same order is one ``mul_`` and one ``add_`` per
    layer over the block: the same fp32 operations, element by element, as each node's own
    :func:`step_velocity` (a round of 1,000 LeNet-5 nodes: 2,000 ``_foreach`` calls over 10
    tensors each -> 2 over 10 blocks per pass of 27 nodes; measured 0.14 -> 0.11 s a round, and
    0.48 -> 0.14 s the first round, which stores them: 270 pages copies per pass -> 10).
    """
    if all(v is None for v in velocities):
        return [pages.hold_rows(r) if r.is_cpu else r.clone() for r in rows]
    if any(v is None for v in velocities):
        return None
    blocks = [rows_block([v[j] for v in velocities]) for j in range(len(rows))]  # type: ignore[index]
    if any(b is None for b in blocks):
        return None
    steps: list[torch.Tensor] = blocks  # type: ignore[assignment]
    torch._foreach_mul_(steps, m)
    torch._foreach_add_(steps, rows)
    return steps


def hold_residual_rows(states: Sequence[Sequence[CodecState]], pages: StatePages) -> None:
    """Store a pass's fp32 residuals and codec velocities (``states[k][j]``: node ``k``, layer
    ``j``; :data:`STATE_FIELDS`) as one block per layer and field in ``pages`` where they are the
    rows of one fresh tensor (a batched encode's first residuals or DGC velocities,
    :meth:`aiotsim.compress.base.Codec.encode_rows`): one copy per layer, not one per node, and the
    next batched encode updates the block in place (``grad + residual``:
    :func:`aiotsim.compress.memory.compensate_rows`; ``m u + g``:
    :func:`aiotsim.compress.rowwise.velocity_rows`). Others are left to
    :func:`narrow_states`."""
    for j in range(len(states[0]) if states else 0):
        for name in STATE_FIELDS:
            rows = [getattr(node[j], name, None) for node in states]
            if any(r is None or not r.is_cpu or pages.holds(r) for r in rows):
                continue
            block = rows_block(rows)  # type: ignore[arg-type]
            if block is not None:
                for node, row in zip(states, pages.hold_rows(block).unbind(0), strict=True):
                    setattr(node[j], name, row)


def _owned(grads: list[torch.Tensor]) -> list[torch.Tensor]:
    """The first velocity: the gradients themselves when each owns its memory (fresh autograd
    outputs, which nothing else keeps), else copies. A view (a node's row of a batched pass, an
    expanded scalar) or one tensor serving two layers (autograd returns the same tensor for both
    leaves of an addition) must not become state updated in place. A view that spans the whole of
    its storage, contiguously, is that memory's only tensor too: autograd returns a linear layer's
    weight and bias gradients as such views of its own temporaries. Skipping the copy saves a
    model-sized allocation and copy per node (10,000 nodes: 2.5 GB of fresh pages)."""
    storages = {g.untyped_storage().data_ptr() for g in grads}
    if len(storages) == len(grads) and all(_owns_memory(g) for g in grads):
        return list(grads)
    return [g.detach().clone() for g in grads]


def _owns_memory(g: torch.Tensor) -> bool:
    """Whether ``g`` is the only tensor on its memory: not a view, or a contiguous view of all of
    its storage from offset 0 (nothing else can then address a byte of it but its base)."""
    if g.requires_grad:
        return False
    if g._base is None:
        return True
    whole = g.untyped_storage().nbytes() == g.numel() * g.element_size()
    return whole and g.storage_offset() == 0 and g.is_contiguous()
