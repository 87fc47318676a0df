"""Synchronous rounds: every online node is dispatched and the server waits for all of them.

An iteration is one round::

    collect : dispatch every idle online node (if none is at work), then wait for one upload per
              node, or per gateway when a node's aggregator is a gateway
    apply   : decode + aggregate (streamed: folded in during collect) + optimizer step (Cluster.apply)
    next    : dispatch the next round (its downlinks count in this iteration's row) or, after
              the last step, broadcast the final model
    row     : finish the iteration's metrics row

After each step, before the next dispatch, no node is at work: the quiescent point where a
checkpoint may be taken (:mod:`aiotsim.sim.checkpoint`), and where a resumed run starts.

When every node is offline the server waits ``nodes.retry_s`` and tries again, until the run
stalls (no node online for 1000 retries).
"""

from __future__ import annotations

from aiotsim.sim.checkpoint import quiescent_point
from aiotsim.sim.processes import arrived, dispatch_round, final_broadcast, wait_for_someone
from aiotsim.sim.strategies.base import Strategy, register
from aiotsim.sim.topologies import SERVER, node_name
from aiotsim.sim.world import Proc, Upload


@register
class SyncStrategy(Strategy):
    """``sync``: rounds of dispatch, collect every upload, apply."""

    name = "sync"

    def run(self) -> Proc:
        c = self.cluster
        iters = c.sc.scenario.iterations
        # a resumed run starts with the pending row of its checkpoint's iteration
        start, pending = c.resume_point or (0, None)
        if c.mode != "sync" and pending is None:  # nodes may work on older versions: keep v0
            c.snapshots[0] = c.learning.snapshot()
        for it in range(start, iters):
            if pending is not None:
                done, pending = pending, None
            else:
                uploads, aggregation = yield from self.collect()
                done = yield from c.apply(it, uploads, aggregation)
                quiescent_point(c, it, done)
            if it + 1 < iters:
                dispatch_round(c, work=True)
                c.finish_row(done)
            else:
                downloads = final_broadcast(c)
                c.finish_row(done)
                if downloads:
                    yield c.env.all_of(downloads)

    def ensure_work(self) -> Proc:
        """Dispatch a round if no node is at work, retrying while every node is offline."""
        c = self.cluster
        while not any(st.busy for st in c.nodes):
            chosen, _ = dispatch_round(c, work=True)
            if not chosen:
                yield from wait_for_someone(c)

    def collect(self) -> Proc:
        """The uploads of this iteration, one from each busy node's aggregator, and their
        :class:`~aiotsim.sim.aggregate.Aggregation` (streamed: each folded in as it arrives, its
        payloads dropped; stacked: in arrival order, as the list)."""
        c = self.cluster
        yield from self.ensure_work()
        busy = [i for i in range(c.n) if c.nodes[i].busy]
        expected = {c.aggregator[i] if c.aggregator[i] != SERVER else node_name(i) for i in busy}
        got: list[Upload] = []
        aggregation = c.learning.aggregation()
        while len(got) < len(expected):
            u = yield c.mailbox[SERVER].get()
            arrived(c, u)
            aggregation.take(u)
            got.append(u)
        return got, aggregation


__all__ = ["SyncStrategy"]
