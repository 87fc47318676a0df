"""The common regime of :class:`~aiotsim.network.rates.RateClasses` (a mixin; the state lives in
the rate classes): gateways behind one server link, at one level on one shared clock.

In a *fast* component (:mod:`aiotsim.network.components`), where every link crossed by more than
one group is crossed by all of them (*common* links), running sums over the common links (leveled
flows x times crossed, capped use; compensated) and a heap of the groups' own-link fill levels
give, in O(log groups), whether a common link is among the first to fill; if so every group is at
that one level and the component is *attached*: its groups drain by one shared clock ``w`` (a
group's clock is ``base + w``, ``base`` set when it joins), a heap over the groups keyed by their
next threshold - base gives the next completion, and heaps of the groups' lowest leveled and
highest capped caps give the groups whose flows the level crosses. When the common link stops
filling first (a gateway's own link binds, a group has no leveled flow: the tail of a round) the
component is detached (each group back on its own clock, exactly where the shared one was) and
filled progressively over all its groups; it attaches again when the common link fills first
again.

Here: the regime of a component and the switch (:meth:`~CommonRegime._level`, ``_attach``,
``_detach``), completions and near-cap reports on the shared clock (``_due_common``,
``_clock_top``, ``_rekey``, ``_near_common``), and the common-link test that opens progressive
filling when the sums are not kept (``_fill_common``). Units: bytes, bytes/s, s.
"""

from __future__ import annotations

import heapq
import math
from typing import TYPE_CHECKING, Any

from aiotsim.network.components import CLOCK, LEV, LEVELED, NEAR, TIE, Component, Group, Layout, clean


class CommonRegime:
    """The common regime of :class:`~aiotsim.network.rates.RateClasses` (module docstring); the
    attributes below are the rate classes'."""

    cap: list[float]  # bytes/s per link
    flows: dict[int, Any]  # fid -> its record (rates._Flow)
    _solo: dict[Group, None]  # groups on their own clock
    _commons: dict[Component, None]  # attached components

    if TYPE_CHECKING:

        def _near(self, g: Group) -> list[int]: ...  # the leveling's (rates_levels)

    def _level(self, c: Component, now: float) -> bool:
        """The common regime of a fast component: if a common link fills first, its groups on
        the shared clock (attached if they were not) at that level: True. Else False, its groups
        on their own clocks (detached if they were not), to be filled progressively."""
        if c.fast and (level := c.common_level(self.cap)) is not None:
            if not c.attached:
                self._attach(c, now)
            c.lam = level
            return True
        if c.attached:
            self._detach(c)
        return False

    def _attach(self, c: Component, now: float) -> None:
        """Put a component's groups on one shared clock (they are all at one level)."""
        for g in c.groups:
            g.advance(now)
        c.attached, c.w, c.t, c.heaps[CLOCK] = True, 0.0, now, []
        for g in c.groups:
            g.base, g.common = g.v, c
            del self._solo[g]
            self._rekey(c, g)
        self._commons[c] = None

    def _detach(self, c: Component) -> None:
        """Give a component's groups their own clocks again (as of the shared clock's time)."""
        for g in c.groups:
            g.v, g.t, g.lam, g.common = g.base + c.w, c.t, c.lam, None
            g.wkey, g.seqs[CLOCK] = math.inf, -1
            self._solo[g] = None
        c.attached, c.heaps[CLOCK] = False, []
        del self._commons[c]

    def _due_common(self, c: Component, now: float, min_bytes: float, snap_s: float, out: list[int]) -> None:
        """:meth:`due` over an attached component: its groups' next thresholds in one heap."""
        c.advance(now)
        lam, w = c.lam, c.w
        if not lam > 0:
            return
        while (entry := self._clock_top(c)) is not None:
            g = entry[2]
            rem = entry[0] - w  # bytes: (threshold - base) - w, as in remaining()
            eta = rem / lam  # s
            if not (rem < min_bytes or now + eta <= now or eta <= snap_s):
                return
            out.append(heapq.heappop(g.thr)[2])
            self._rekey(c, g)

    def _clock_top(self, c: Component) -> tuple[float, int, Group] | None:
        """The live top of an attached component's CLOCK heap whose group's top threshold is live
        (a stale one: the group re-keyed)."""
        flows = self.flows
        while (entry := c.top(CLOCK)) is not None:
            g = entry[2]
            if g.thr:
                _, ver, fid = g.thr[0]
                f = flows.get(fid)
                if f is not None and f.ver == ver and f.mode == LEVELED:
                    return entry
            self._rekey(c, g)
        return None

    def _rekey(self, c: Component, g: Group) -> None:
        """Push ``g``'s next threshold (its heap's live top) - base onto ``c``'s CLOCK heap."""
        if clean(g.thr, LEVELED, self.flows):
            g.wkey = g.thr[0][0] - g.base
            c.push(g, CLOCK, g.wkey)
        else:
            g.wkey, g.seqs[CLOCK] = math.inf, -1

    def _near_common(self, c: Component, out: list[int]) -> None:
        """:meth:`_near` of every group of an attached component with a leveled cap near its level."""
        lam, heap, popped = c.lam, c.heaps[LEV], []
        while (top := c.top(LEV)) is not None and top[0] * (1.0 - NEAR) <= lam:
            popped.append(heapq.heappop(heap))
        for entry in popped:
            heapq.heappush(heap, entry)
            g = entry[2]
            g.lam = lam
            out.extend(self._near(g))

    def _fill_common(self, comp: list[Group], lay: Layout) -> bool:
        """The first round of :meth:`_fill_levels` when every group has leveled flows, with the
        same sums in the same order; if a link that every group crosses is among the first to
        fill, every group freezes at that level: set it and return True (else False, nothing
        set). A group's own links need no list: their spare and weight are the group's alone."""
        cap = self.cap
        spare = [cap[link] for link in lay.links]
        weight = [0.0] * len(spare)
        level = math.inf  # the smallest fill so far, bytes/s per flow
        for g, shared, own in zip(comp, lay.shared, lay.own, strict=True):
            used, n = g.s + g.s_err, g.n  # g.used
            if not n:
                return False
            for k, m in shared:
                spare[k] -= m * used
                weight[k] += m * n
            for link, m in own:
                x = (cap[link] - m * used) / (0.0 + m * n)
                if x < level:
                    level = x
        for k in lay.shared_pos:
            x = spare[k] / weight[k]
            if x < level:
                level = x
        level = max(0.0, level)
        top = level * (1.0 + TIE)
        if not any(spare[k] / weight[k] <= top for k in lay.common):
            return False
        for g in comp:  # a link every group crosses is full: all freeze at this level
            g.lam = level
        return True
