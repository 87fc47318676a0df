"""Levels of :class:`~aiotsim.network.rates.RateClasses` (a mixin; the state lives in the rate
classes): re-leveling the components a change touched and moving flows across the levels until
none moves.

A group whose shared links no other group uses has ``lam = min over its links of (capacity -
capped use) / (times crossed x leveled flows)`` (``_lone_level``). The groups of a component
(groups sharing links) are filled progressively, a group weighing its leveled flows (the same tie
tolerance, 1e-12 relative, as :func:`aiotsim.network.flows.progressive_filling`), unless a common
link fills first (the common regime: :mod:`aiotsim.network.rates_common`, which this builds on).

After a solve, capped flows whose cap exceeds the level become leveled and leveled flows below
it become capped (a cap within the tie tolerance of the level is a tie: it stays), until no flow
moves; the result is the max-min fair allocation (every leveled flow's group is frozen at a
saturated link where no flow is faster, every capped flow is below its level), so the rates
equal progressive filling over all flows up to that tie tolerance. With ``report_near`` the
leveled flows within ``NEAR`` of their cap before and after are reported too (``_near``).
Units: bytes, bytes/s, s.
"""

from __future__ import annotations

import heapq
import math
from typing import TYPE_CHECKING

from aiotsim.network.components import (
    CAP,
    CAPPED,
    LEV,
    LEVELED,
    NEAR,
    SPARE_TOL,
    TIE,
    Component,
    Group,
    Layout,
    clean,
)
from aiotsim.network.rates_common import CommonRegime


class Leveling(CommonRegime):
    """Levels of :class:`~aiotsim.network.rates.RateClasses` (module docstring); the attributes
    below are the rate classes'."""

    report_near: bool
    _groups: dict[tuple[tuple[int, float], ...], Group]

    if TYPE_CHECKING:  # the rate classes' (rates)

        def _move(self, fid: int, leveled: bool, now: float) -> None: ...

        def _drop_group(self, g: Group) -> None: ...

        def _view(self, c: Component, g: Group) -> tuple[list[Group], Layout | None]: ...

    def _lone_level(self, g: Group) -> float:
        """Level of a group whose shared links carry no other group (bytes/s)."""
        lam, used, cap = math.inf, g.s + g.s_err, self.cap  # used: g.used
        for link, m in g.key:
            spare = cap[link] - m * used
            if g.n:
                lam = min(lam, spare / (m * g.n))
            elif spare < -SPARE_TOL * self.cap[link]:
                lam = -math.inf
        return max(lam, 0.0) if g.n else lam

    def _settle_lone(self, c: Component, now: float) -> list[int]:
        """:meth:`_settle` of a component of one group (its level: :meth:`_lone_level`)."""
        g = c.groups[0]
        moved: list[int] = []
        near = self.report_near
        if now > g.t:
            g.advance(now)
        if near:
            self._near_into(g, moved)  # at their cap now: they may not be after the re-leveling
        g.lam = self._lone_level(g)
        settled = self._settled(c, c.groups)  # the usual case: no flow moves, no loop
        for _ in range(0 if settled else 4 * (g.n + g.capped) + 8):  # bound: float ties cannot cycle
            g.lam = self._lone_level(g)  # the same value on the first pass
            if self._settled(c, c.groups):
                break
            step: list[int] = []
            self._fix_group(g, now, True, step)
            if not step:
                self._fix_group(g, now, False, step)
            if not step:
                break
            moved.extend(step)
        if g.n == 0 and g.capped == 0 and g.key in self._groups:
            self._drop_group(g)
        elif near:
            self._near_into(g, moved)
        return moved

    def _settle(self, c: Component, dirty: list[Group], now: float) -> list[int]:
        """Re-level a component whose groups ``dirty`` changed and move flows across the levels
        until none moves."""
        if c.lay is None:
            return self._settle_lone(c, now)
        groups, lay = ([], c.lay) if c.attached else self._view(c, dirty[0])  # attached: not needed
        moved: list[int] = []
        near = self.report_near
        if c.fast:
            for g in dirty:
                c.refresh(g, self.cap, self.flows)
        if c.attached:
            c.advance(now)
            if near:
                self._near_common(c, moved)
        else:
            for g in groups:
                if now > g.t:
                    g.advance(now)
                if near:
                    self._near_into(g, moved)  # at their cap now: they may not be after the re-leveling
        rounds, bound = 0, 0
        while True:
            if not self._level(c, now):
                if not groups:
                    groups, lay = self._view(c, dirty[0])
                assert lay is not None
                self._fill_levels(groups, lay, not c.fast)
            if self._settled(c, groups):
                break
            step = self._fix(c, groups, now, up=True) or self._fix(c, groups, now, up=False)
            if not step:
                break
            moved.extend(step)
            rounds += 1
            # bound: float ties cannot cycle (moves keep each group's flow count: computed once)
            bound = bound or 4 * (c.nflows if c.fast else sum(g.n + g.capped for g in groups)) + 8
            if rounds >= bound:
                break
        if c.attached and near:
            self._near_common(c, moved)
        for g in dirty if c.attached else list(groups):
            if g.n == 0 and g.capped == 0 and g.key in self._groups:
                self._drop_group(g)
            elif near and g.common is None:
                self._near_into(g, moved)
        return moved

    def _near_into(self, g: Group, out: list[int]) -> None:
        """Append :meth:`_near` of ``g`` to ``out``; the usual case (a live top entry not near
        the level: nothing near) checked inline."""
        if g.lev:
            cap, ver, fid = g.lev[0]
            f = self.flows.get(fid)
            if f is not None and f.ver == ver and f.mode == LEVELED and not cap * (1.0 - NEAR) <= g.lam:
                return
        out.extend(self._near(g))

    def _near(self, g: Group) -> list[int]:
        """Leveled flows whose cap is within ``NEAR`` (relative) above the level: their rate is
        their cap for a caller testing ``rate >= cap x (1 - NEAR)`` (TCP's window binding)."""
        near = []
        while clean(g.lev, LEVELED, self.flows) and g.lev[0][0] * (1.0 - NEAR) <= g.lam:
            near.append(heapq.heappop(g.lev))
        for entry in near:
            heapq.heappush(g.lev, entry)
        return [entry[2] for entry in near]

    def _settled(self, c: Component, groups: list[Group]) -> bool:
        """Whether no flow of the component has to move (:meth:`_fix` both ways would move
        none): every group's top capped flow is at or below its level and its top leveled flow
        at or above it, checked on live top entries (a stale top: not known, False); in an
        attached component, on the tops of its CAP and LEV heaps."""
        if c.attached:
            top = c.top(CAP)
            if top is not None and -top[0] > c.lam:
                return False
            top = c.top(LEV)
            return top is None or top[0] >= c.lam * (1.0 - TIE)
        flows = self.flows
        for g in groups:
            lam = g.lam
            if g.capped:
                cap, ver, fid = g.cap[0]
                f = flows.get(fid)
                if f is None or f.ver != ver or f.mode != CAPPED or -cap > lam:
                    return False
            if g.n:
                cap, ver, fid = g.lev[0]
                f = flows.get(fid)
                if f is None or f.ver != ver or f.mode != LEVELED or cap < lam * (1.0 - TIE):
                    return False
        return True

    def _fix(self, c: Component, groups: list[Group], now: float, up: bool) -> list[int]:
        """``up``: capped flows whose cap exceeds the level become leveled; else leveled flows
        whose cap is below the level become capped (a tie stays leveled: the same rate, and a
        group keeps a leveled flow to define its level; a cap within TIE below the level is a tie:
        else a level rounded up by an ulp caps flows that, once capped, leave the group a level
        below their caps, and they move back and forth). Returns the fids moved. An attached
        component visits only the groups its CAP or LEV heap puts across the level."""
        moved: list[int] = []
        if c.attached:
            which, lam, low = (CAP if up else LEV), c.lam, c.lam * (1.0 - TIE)
            while (top := c.top(which)) is not None and ((-top[0] > lam) if up else (top[0] < low)):
                heapq.heappop(c.heaps[which])
                g = top[2]
                g.seqs[which] = -1
                g.advance(now)  # its clock and level from the shared clock
                self._fix_group(g, now, up, moved)
                c.refresh(g, self.cap, self.flows)
            return moved
        for g in groups:
            self._fix_group(g, now, up, moved)
        if c.fast and moved:  # keep the sums and heaps (the common regime may begin next round)
            for g in dict.fromkeys(self.flows[fid].group for fid in moved):
                assert g is not None
                c.refresh(g, self.cap, self.flows)
        return moved

    def _fix_group(self, g: Group, now: float, up: bool, moved: list[int]) -> None:
        """:meth:`_fix` within one group at its level ``g.lam``; appends the fids moved."""
        heap, mode = (g.cap, CAPPED) if up else (g.lev, LEVELED)
        if not (g.capped if up else g.n):  # no live entry: only stale ones, drop them at once
            heap.clear()
            return
        lam, low = g.lam, g.lam * (1.0 - TIE)
        top = heap[0] if heap else None  # the usual case: a live top entry that does not move
        flows = self.flows
        if top is not None and ((-top[0] <= lam) if up else (top[0] >= low)):
            f = flows.get(top[2])
            if f is not None and f.ver == top[1] and f.mode == mode:
                return
        while clean(heap, mode, flows) and ((-heap[0][0] > lam) if up else (heap[0][0] < low)):
            fid = heapq.heappop(heap)[2]
            self._move(fid, up, now)
            moved.append(fid)

    def _fill_levels(self, comp: list[Group], lay: Layout, try_common: bool) -> None:
        """Progressive filling over the groups of a component (each weighs its leveled flows,
        capped flows' caps are fixed use); a group with no leveled flow gets the level at which
        its tightest link is full (inf: a link of it has room, -inf: over-committed).
        ``try_common``: first see whether a common link fills first (:meth:`_fill_common`)."""
        if try_common and lay.common and self._fill_common(comp, lay):
            return
        links, hops = lay.links, lay.hops
        cap = self.cap
        spare = [cap[link] for link in links]  # bytes/s left on each link of the component
        weight = [0.0] * len(links)  # leveled flows x times crossed, per link
        for g, hop in zip(comp, hops, strict=True):
            used, n = g.s + g.s_err, g.n  # g.used
            for k, m in hop:
                spare[k] -= m * used
                weight[k] += m * n
        active = [(g, hop) for g, hop in zip(comp, hops, strict=True) if g.n]
        level, frozen = 0.0, {}
        while active:
            fill = {k: spare[k] / w for k, w in enumerate(weight) if w > 0}
            level = max(level, min(fill.values()))
            top = level * (1.0 + TIE)
            full = {k for k, x in fill.items() if x <= top}
            rest = []
            for g, hop in active:
                for k, _ in hop:
                    if k in full:
                        break
                else:
                    rest.append((g, hop))
                    continue
                g.lam, n = level, g.n
                for k, m in hop:
                    spare[k] -= m * n * level
                    weight[k] -= m * n
            for k in full:
                frozen.setdefault(k, level)
            active = rest
        for g, hop in zip(comp, hops, strict=True):
            if not g.n:
                g.lam = min(
                    frozen.get(k, math.inf if spare[k] >= -SPARE_TOL * cap[links[k]] else -math.inf) for k, _ in hop
                )
