"""Batched node gradients in a round: computed once at dispatch, handed to each node's process.

In ``sync`` and ``partial`` rounds every node dispatched together works on the server's current
version (and in a ring every node does, every iteration), so with ``nodes.batched`` on
(:func:`aiotsim.learn.batched.use_batched`) :func:`prefetch`
draws each node's next batch from its own stream, computes their gradients in vectorized
passes (:class:`aiotsim.learn.batched.BatchedGradients`), a pass's nodes at a time
(:func:`gradient_group`), and parks each result on the node's
:class:`~aiotsim.sim.learning.LocalState`. The node's SimPy process asks for its gradient exactly
as before (:meth:`aiotsim.sim.world.Cluster.gradient`); it gets the parked one, with its BN
running-statistics update applied at that moment, so the order of those updates, the node
momentum, the divergence check and the simulated compute time all stay per node as in the looped
path. Simulated time is unchanged with ``compute_model = "flops"`` (FLOPs per batch); with
``"measured"`` a node is charged its share of the pass's wall time (pass / nodes in the pass).

In ``sync`` rounds the batch is also encoded at dispatch
(:func:`encode_group`): every layer of every node in one :meth:`~aiotsim.compress.base.Codec.encode_rows`
call, the same bytes as each node's own encode, after which the group's gradients are let go.
With fp32 momentum on the nodes the pass's momentum steps are taken together too
(:func:`pass_momentum`: each layer's velocities of a pass live as one block in the state pages);
the node's process sends the parked payloads at its own simulated time (an encode share of the
wall time, as above, in ``measured`` mode).

Not batched (the looped path runs): ``async`` (a node's version is its own), a dispatch of one
node, codecs that need per-sample squared gradients (Gradient Variance), and nodes whose batch
size differs from the rest (a shard smaller than ``batch_size``: grouped by batch size, groups of
one run looped).
"""

from __future__ import annotations

import math
import time

import torch

from aiotsim.compress.base import Payload
from aiotsim.learn.batched import NodeGradient
from aiotsim.learn.compute import draw_batches
from aiotsim.sim.learning import Learning, LocalState, sync_device
from aiotsim.sim.storage import hold_residual_rows, narrow_states, step_pass_velocity, widen_states
from aiotsim.sim.world import Cluster

BATCHED_MODES = ("sync", "partial")  # modes whose dispatched nodes all hold the current version


def prefetch(c: Cluster, nodes: list[int], encode: bool = True) -> int:
    """Compute the gradients of the dispatched ``nodes`` in batched passes, when on; returns how
    many nodes got one (0 when the looped path runs). ``encode``: also encode them at once where
    that is exact (:func:`encode_group`); the ring, which encodes chunks of its own, passes False."""
    batched = c.learning.batched
    if batched is None or c.mode not in BATCHED_MODES or len(nodes) < 2:
        return 0
    groups: dict[int, list[int]] = {}  # batch size -> nodes
    for i in nodes:
        local = c.nodes[i].local
        if local.pending is None:
            groups.setdefault(local.stream.batch_size, []).append(i)
    done = 0
    for size, members in groups.items():
        if len(members) < 2 or not batched.handles(size):
            continue
        step = batched.chunk_size(len(members), (size, *c.learning.data.input_shape))
        for start in range(0, len(members), step):
            gradient_group(c, members[start : start + step], encode)
        done += len(members)
    return done


def gradient_group(c: Cluster, members: list[int], encode: bool) -> None:
    """One group's batches drawn, gradients computed (:meth:`BatchedGradients.gradients`) and
    parked; in ``sync`` rounds (``encode``) also encoded, after which the group's gradients are
    let go: their payloads are what the nodes send, so a fleet holds one pass's gradients at a
    time, not every node's (10,000 LeNet-5 gradients are 2.5 GB). A group is one pass
    (:meth:`BatchedGradients.chunk_size`): larger groups held more and were no faster (iot1000,
    topk, 3 iterations, CPU: groups of 540 nodes 22.0 s and 2,101 MB peak, of one pass's 27 nodes
    19.7 s and 1,454 MB; looped 1,289 MB)."""
    assert c.learning.batched is not None
    xs, ys = draw_batches([c.nodes[i].local.stream for i in members])  # [nodes, B, C, H, W], [nodes, B]
    results = c.learning.batched.gradients(None, xs, ys, per_sample_sq=c.learning.codec.needs_sq_grad)
    del xs, ys
    for i, g in zip(members, results):
        c.nodes[i].local.pending = g
    if encode and c.mode == "sync" and encode_group(c, members, results):
        for g in results:
            g.grads, g.rows, g.sq_rows = [], [], []  # sent as the parked payloads; they pinned the pass's outputs


def encode_group(c: Cluster, members: list[int], results: list[NodeGradient]) -> bool:
    """Encode the batched gradients of ``members`` now, every layer as ``[nodes, n]``
    (:meth:`~aiotsim.compress.base.Codec.encode_rows`, byte-identical to each node's own encode), and
    park each node's payloads with its gradient (its process sends them instead of encoding).

    Only in ``sync`` rounds, where nothing touches a node's codec state or momentum between
    dispatch and its encode (the server steps, and codecs observe the step, only once every
    upload is in). With momentum on the nodes, each node's step ``u = m u + g`` is taken here
    (:meth:`Learning.momentum_step`, as :meth:`Learning.gradient` would at the node's turn;
    ``LocalState.stepped`` tells it not to again) and ``u`` is encoded; momentum masking stays at
    the node's turn. States stored narrow (``nodes.state_dtype``) are widened and stored
    back as :meth:`Learning.encode` does. A group with a non-finite loss is left to the looped
    path, after the divergence check that stops the run. Returns whether the group was encoded.
    """
    if any(not math.isfinite(g.loss) for g in results):
        return False
    learning = c.learning
    locals_ = [c.nodes[i].local for i in members]
    steps = pass_momentum(learning, locals_, results)
    sync_device(learning.device)
    t0 = time.perf_counter()
    narrow = [widen_states(local.states) for local in locals_]
    per_node: list[list[Payload]] = [[] for _ in members]
    for j, (codec, layer) in enumerate(zip(learning.layer_codecs, learning.layers)):
        states = [local.states[j] for local in locals_]
        for state, g in zip(states, results):  # Gradient Variance's squares, as Learning.encode sets them
            if g.sq_rows:
                state.sq_grad = g.sq_rows[j][g.row]
        grads = steps[j] if steps is not None else [g.grads[j] for g in results]
        for out, p in zip(per_node, codec.encode_rows(grads, layer, states)):
            out.append(p)
        for state in states:
            state.sq_grad = None  # read by the encode only (Learning.encode lets it go too)
    if learning.state_dtype == torch.float32:
        hold_residual_rows([local.states for local in locals_], learning.pages)
    for local, kept in zip(locals_, narrow):
        narrow_states(local.states, learning.state_dtype, kept, learning.pages)
    sync_device(learning.device)
    wall = (time.perf_counter() - t0) / len(members)  # each node's share, s
    for local, payloads in zip(locals_, per_node):
        local.encoded = (payloads, wall)
    return True


def pass_momentum(
    learning: Learning, locals_: list[LocalState], results: list[NodeGradient]
) -> list[torch.Tensor] | None:
    """Each node's momentum step (as :meth:`Learning.gradient` would take it at the node's turn;
    ``LocalState.stepped`` tells it not to again), and what the nodes send per layer as one
    ``[nodes, *shape]`` tensor where ``results`` are one whole pass (node ``k`` in row ``k``):
    then with fp32 node momentum one operation per layer steps them all
    (:func:`~aiotsim.sim.storage.step_pass_velocity`; on a GPU 2 kernel launches per pass, not
    2 per node), and the encode takes the pass's rows as they are, not a stack of them. None:
    the nodes stepped one by one (fp16 state, velocities stored apart, e.g. after a checkpoint
    restore)."""
    rows = results[0].rows
    whole = (
        bool(rows)
        and rows[0].shape[0] == len(results)
        and all(g.rows is rows and g.row == k for k, g in enumerate(results))
    )
    steps = rows if whole else None
    if learning.node_momentum:
        pages, fp32 = learning.pages, learning.state_dtype == torch.float32
        if steps is not None and fp32:
            steps = step_pass_velocity([local.velocity for local in locals_], rows, learning.node_momentum, pages)
        else:
            steps = None
        if steps is None:
            for local, g in zip(locals_, results):
                g.grads = learning.momentum_step(local, g.grads)
        else:
            per_node = list(zip(*(s.unbind(0) for s in steps)))  # node k's row of every layer
            for local, g, mine in zip(locals_, results, per_node):
                g.grads = local.velocity = list(mine)
    for local in locals_:
        local.stepped = True
    return steps


__all__ = ["prefetch", "gradient_group", "encode_group", "pass_momentum", "BATCHED_MODES"]
