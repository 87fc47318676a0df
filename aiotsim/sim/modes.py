"""Training modes: how the server decides whom to dispatch and how many uploads make an iteration.

``sync``     every online node is dispatched; the server waits for all of their uploads.
``partial``  the server aggregates the first ``partial_k`` fresh uploads; uploads of older versions
             that arrive meanwhile are dropped or applied late (``training.late``) and their nodes
             are dispatched again at once with the current model.
``async``    each upload is applied on arrival (an iteration is one server update) and its node is
             dispatched again; staleness = versions the server moved on since the node's download.

The loops are a mixin of :class:`aiotsim.sim.engine.Simulation`: they use its dispatch, apply and
row-writing machinery and only decide the order of events. A ring all-reduce has no server and
runs :func:`aiotsim.sim.ring.ring_loop` instead.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import simpy

from aiotsim.sim.topologies import SERVER, node_name

if TYPE_CHECKING:
    from aiotsim.sim.engine import Upload

Proc = Generator[simpy.Event, Any, Any]


class ServerModes:
    """Server loops for ``sync``, ``partial`` and ``async`` training (mixed into Simulation)."""

    def _applied(self) -> tuple:
        """The iteration :meth:`apply` just completed (its row is written after the dispatch)."""
        assert self._pending is not None, "write_row before any apply()"
        return self._pending

    def _wait_for_someone(self) -> Proc:
        """Nobody could be dispatched (all offline): wait ``retry_s`` and try again."""
        yield self.env.timeout(self.sc.nodes.retry_s)

    def round_loop(self) -> Proc:
        """``sync`` and ``partial``: rounds of dispatch, collect, apply."""
        iters = self.sc.scenario.iterations
        if self.mode != "sync":
            self.snapshots[0] = [p.detach().clone() for p in self.params]
        for it in range(iters):
            uploads = yield from self.collect()
            yield from self.apply(it, uploads)
            if it + 1 < iters:
                self.dispatch_round(work=True)
                self.write_row(*self._applied())
        yield from self.final_broadcast()

    def collect(self) -> Proc:
        """Uploads for the current iteration (dispatching first where nodes are idle)."""
        box = self.mailbox[SERVER]
        while not any(st.busy for st in self.nodes):
            chosen, _ = self.dispatch_round(work=True)
            if not chosen:
                yield from self._wait_for_someone()
        if self.mode == "sync":
            expected = {
                self.aggregator[i] if self.aggregator[i] != SERVER else node_name(i)
                for i in range(self.n)
                if self.nodes[i].busy
            }
            got: list[Upload] = []
            while len(got) < len(expected):
                u = yield box.get()
                self._arrived(u)
                got.append(u)
            return got
        return (yield from self.collect_partial())

    def _arrived(self, u: Upload) -> None:
        for i in u.nodes:
            self.nodes[i].busy = False

    def collect_partial(self) -> Proc:
        """``partial``: the first ``partial_k`` fresh uploads, plus late ones if ``late = apply``."""
        k = self.sc.training.partial_k
        box = self.mailbox[SERVER]
        fresh: list[Upload] = []
        late: list[Upload] = []
        while True:
            outstanding = sum(1 for st in self.nodes if st.busy and st.held_version == self.version)
            need = min(k, len(fresh) + outstanding)
            if need > 0 and len(fresh) >= need:
                return fresh + late
            if not any(st.busy for st in self.nodes):
                chosen, _ = self.dispatch_round(work=True)
                if not chosen:
                    yield from self._wait_for_someone()
                continue
            u = yield box.get()
            self._arrived(u)
            if u.version == self.version:
                fresh.append(u)
            elif self.sc.training.late == "apply":
                late.append(u)
            else:
                self.totals.dropped += 1
            if u.version != self.version:
                # a late node is idle again: put it back to work on the current model
                self.dispatch([i for i in u.nodes if self.availability(i)], work=True)

    def async_loop(self) -> Proc:
        """``async``: apply each upload on arrival and send its node back to work."""
        iters = self.sc.scenario.iterations
        self.snapshots[0] = [p.detach().clone() for p in self.params]
        for i in range(self.n):
            self.env.process(self._async_dispatch(i))
        for it in range(iters):
            u = yield self.mailbox[SERVER].get()
            self._arrived(u)
            yield from self.apply(it, [u])
            if it + 1 < iters:
                for i in u.nodes:
                    self.env.process(self._async_dispatch(i))
                self.write_row(*self._applied())
        yield from self.final_broadcast()

    def _async_dispatch(self, i: int) -> Proc:
        while not self.availability(i):
            yield self.env.timeout(self.sc.nodes.retry_s)
        self.dispatch([i], work=True)

    def final_broadcast(self) -> Proc:
        """After the last step: every idle online node downloads the final model (counted in
        the last iteration's row), then the run ends."""
        nodes = [i for i in range(self.n) if not self.nodes[i].busy and self.nodes[i].online]
        procs = self.dispatch(nodes, work=False)
        self.write_row(*self._applied())
        if procs:
            yield self.env.all_of(procs)

    def main(self) -> Proc:
        """The whole run as one SimPy process."""
        if self.sc.network.topology == "ring":
            from aiotsim.sim.ring import ring_loop

            yield from ring_loop(self)
        elif self.mode == "async":
            yield from self.async_loop()
        else:
            yield from self.round_loop()
