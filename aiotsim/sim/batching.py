"""Batched node gradients in a round: computed once at dispatch, handed to each node's process.

In ``sync`` and ``partial`` rounds every node dispatched together works on the server's current
version (and in a ring every node does, every iteration), so with ``nodes.batched`` on
(:func:`aiotsim.learn.batched.use_batched`) :func:`prefetch`
draws each node's next batch from its own stream, computes all their gradients in vectorized
passes (:class:`aiotsim.learn.batched.BatchedGradients`) and parks each result on the node's
:class:`~aiotsim.sim.learning.LocalState`. The node's SimPy process asks for its gradient exactly
as before (:meth:`aiotsim.sim.world.Cluster.gradient`); it gets the parked one, with its BN
running-statistics update applied at that moment, so the order of those updates, the node
momentum, the divergence check and the simulated compute time all stay per node as in the looped
path. Simulated time is unchanged with ``compute_model = "flops"`` (FLOPs per batch); with
``"measured"`` a node is charged its share of the pass's wall time (pass / nodes in the pass).

Not batched (the looped path runs): ``async`` (a node's version is its own), a dispatch of one
node, codecs that need per-sample squared gradients (Gradient Variance), and nodes whose batch
size differs from the rest (a shard smaller than ``batch_size``: grouped by batch size, groups of
one run looped).
"""

from __future__ import annotations

import torch

from aiotsim.sim.world import Cluster

BATCHED_MODES = ("sync", "partial")  # modes whose dispatched nodes all hold the current version


def prefetch(c: Cluster, nodes: list[int]) -> int:
    """Compute the gradients of the dispatched ``nodes`` in batched passes, when on; returns how
    many nodes got one (0 when the looped path runs)."""
    batched = c.learning.batched
    if batched is None or c.mode not in BATCHED_MODES or c.learning.codec.needs_sq_grad or len(nodes) < 2:
        return 0
    groups: dict[int, list[int]] = {}  # batch size -> nodes
    for i in nodes:
        local = c.nodes[i].local
        if local.pending is None:
            groups.setdefault(local.stream.batch_size, []).append(i)
    done = 0
    for members in groups.values():
        if len(members) < 2:
            continue
        batches = [c.nodes[i].local.stream.next() for i in members]
        xs = torch.stack([x for x, _ in batches])  # [nodes, B, C, H, W]
        ys = torch.stack([y for _, y in batches])  # [nodes, B]
        for i, g in zip(members, batched.gradients(None, xs, ys)):
            c.nodes[i].local.pending = g
        done += len(members)
    return done


__all__ = ["prefetch", "BATCHED_MODES"]
