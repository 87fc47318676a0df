"""Partial aggregation: the server aggregates the first ``partial_k`` fresh uploads.

Rounds as in :mod:`~aiotsim.sim.strategies.sync`, but an iteration ends once ``k`` uploads computed
on the current version have arrived (fewer if fewer nodes are at work on it). Uploads of older
versions that arrive meanwhile are dropped (``training.late = "drop"``, counted in the summary's
``dropped_uploads``) or applied late with the fresh ones (``"apply"``, their staleness counted),
and their nodes are dispatched again at once with the current model. ``partial_k = 0`` means
``ceil(nodes / 2)``.
"""

from __future__ import annotations

import math

from aiotsim.sim.processes import arrived, dispatch, dispatch_round, wait_for_someone
from aiotsim.sim.strategies.base import register
from aiotsim.sim.strategies.sync import SyncStrategy
from aiotsim.sim.topologies import SERVER
from aiotsim.sim.world import Proc, Upload


@register
class PartialStrategy(SyncStrategy):
    """``partial``: the first ``partial_k`` fresh uploads, plus late ones if ``late = apply``."""

    name = "partial"

    @property
    def k(self) -> int:
        """Fresh uploads per iteration (``partial_k``, or half the nodes rounded up when 0)."""
        c = self.cluster
        return c.sc.training.partial_k or math.ceil(c.n / 2)

    def collect(self) -> Proc:
        c = self.cluster
        yield from self.ensure_work()
        fresh: list[Upload] = []
        late: list[Upload] = []
        aggregation = c.learning.aggregation()
        while True:
            outstanding = sum(1 for st in c.nodes if st.busy and st.held_version == c.version)
            need = min(self.k, len(fresh) + outstanding)
            if need > 0 and len(fresh) >= need:
                if not aggregation.streamed:  # stacked: fresh, then late, as the list always was
                    aggregation.take_all(fresh + late)
                return fresh + late, aggregation
            if not any(st.busy for st in c.nodes):
                chosen, _ = dispatch_round(c, work=True)
                if not chosen:
                    yield from wait_for_someone(c)
                continue
            u = yield c.mailbox[SERVER].get()
            arrived(c, u)
            kept = u.version == c.version or c.sc.training.late == "apply"
            if kept and aggregation.streamed:  # folded in now, its payloads dropped
                aggregation.take(u)
            if u.version == c.version:
                fresh.append(u)
            elif kept:
                late.append(u)
            else:
                c.totals.dropped += 1
            if u.version != c.version:
                # a late node is idle again: put it back to work on the current model
                dispatch(c, [i for i in u.nodes if c.availability(i)], work=True)


__all__ = ["PartialStrategy"]
