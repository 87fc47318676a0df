"""Asynchronous updates: each upload is applied on arrival and its node sent back to work.

An iteration is one server update from one node's gradient. Every node runs its own loop of
dispatches; a node that is offline retries every ``nodes.retry_s`` (its availability chain steps
at each try). Staleness is the number of versions the server moved on between the node's dispatch
and the upload's application.
"""

from __future__ import annotations

from aiotsim.sim.processes import arrived, dispatch, final_broadcast
from aiotsim.sim.strategies.base import Strategy, register
from aiotsim.sim.topologies import SERVER
from aiotsim.sim.world import Proc


@register
class AsyncStrategy(Strategy):
    """``async``: apply each upload on arrival and send its node back to work."""

    name = "async"

    def run(self) -> Proc:
        c = self.cluster
        iters = c.sc.scenario.iterations
        c.snapshots[0] = c.learning.snapshot()
        for i in range(c.n):
            c.env.process(self.redispatch(i))
        for it in range(iters):
            u = yield c.mailbox[SERVER].get()
            arrived(c, u)
            done = yield from c.apply(it, [u])
            if it + 1 < iters:
                for i in u.nodes:  # they start once this process yields: next row's downlinks
                    c.env.process(self.redispatch(i))
                c.finish_row(done)
            else:
                downloads = final_broadcast(c)
                c.finish_row(done)
                if downloads:
                    yield c.env.all_of(downloads)

    def redispatch(self, i: int) -> Proc:
        """SimPy process: dispatch node ``i`` as soon as it is online (stall-checked)."""
        c = self.cluster
        while not c.availability(i):
            c.check_stall()
            yield c.env.timeout(c.sc.nodes.retry_s)
        dispatch(c, [i], work=True)


__all__ = ["AsyncStrategy"]
