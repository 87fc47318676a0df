"""Max-min fair rates kept incrementally, as rate classes with virtual clocks.

The engine of :class:`aiotsim.network.flows.Network`. Each flow is reduced to

* its **shared links** (crossed by at least one other live flow), with how many times it crosses
  each, and
* its **cap** (bytes/s): the smallest of its TCP window cap and capacity / times crossed of its
  *private* links (crossed by it alone): a link carried by one flow only is a per-flow cap.

Flows with the same shared links form a **group** (one for a star's server link, one per gateway
in a hierarchy, none when every link is private). In a max-min allocation a group's flows whose
cap is below the group's water level ``lam`` are *capped* (rate = cap), the others are *leveled*
(rate = ``lam``). A flow with no shared link runs at its cap.

Draining is lazy: a group keeps a virtual clock ``V`` (bytes drained per leveled flow since the
group was made; ``V += lam x dt``) and a min-heap of leveled flows' thresholds ``V at join +
wire bytes left``; a capped flow keeps (bytes left, time) and sits in one heap of finish times.
So the bytes left of any flow are O(1) to read, the next completion is a heap top, and a flow's
rate changes only when it *moves*: a link it crosses goes from one user to two (or back), its
cap changes (TCP window, trace), or its group's level crosses its cap. Heaps use lazy deletion
(an entry is stale when its version differs from the flow's).

Groups sharing links form a **component** (:mod:`aiotsim.network.components`), found once and
kept until a group of it or next to it is made or dropped. The pieces:

* this module: the flows, their groups and heaps (placing, moving, draining), the queries and
  :meth:`RateClasses.solve`, and finding components;
* :mod:`aiotsim.network.rates_levels`: the levels of a touched component and the flows moved
  across them until none moves (the max-min fair allocation, equal to progressive filling);
* :mod:`aiotsim.network.rates_common`: the common regime, gateways behind one server link at one
  level on one shared clock.

Cost of an event: O(log flows) per flow that moves, plus O(log groups) in an attached component
and O(groups of the touched component x their links) otherwise (and once per component found): it
does not grow with the number of flows in flight for fleets of alike nodes, nor with the number of
gateways while the server link is the bottleneck.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

from aiotsim.network.components import (
    CAPPED,
    CLOCK,
    LEVELED,
    NEAR,
    PENDING,
    WAITING,
    Component,
    Group,
    Layout,
    clean,
    layout,
    search,
)
from aiotsim.network.rates_levels import Leveling


@dataclass(eq=False, slots=True)
class _Flow:
    links: tuple[int, ...]  # distinct link indices
    mults: tuple[float, ...]  # times crossed
    tcap: float  # bytes/s, the TCP window cap (inf: none; 0: waiting, rate 0)
    rem: float  # wire bytes left as of t0 (PENDING, WAITING, CAPPED)
    t0: float = 0.0  # s
    mode: int = PENDING
    group: Group | None = None
    c: float = math.inf  # bytes/s, effective cap when placed
    thr: float = 0.0  # LEVELED: threshold on the group's clock
    ver: int = 0
    r: float = 0.0  # bytes/s, PENDING: the rate it had (it moves within the instant)


class RateClasses(Leveling):
    """Max-min fair rates of flows over capacitated links, kept incrementally (module docstring).

    Parameters
    ----------
    cap : list of float
        Capacity of each link, bytes/s (> 0, or 0 for a traced link momentarily off).
    report_near : bool
        :meth:`solve` also returns the leveled flows within ``NEAR`` of their cap before and after
        a re-leveling (TCP needs them: its window binds at ``rate >= cap x (1 - NEAR)``).

    Notes
    -----
    Mutations (:meth:`add`, :meth:`remove`, :meth:`set_tcap`, :meth:`set_link_cap`) record what
    changed; :meth:`solve` places the flows that moved and re-levels the touched groups once, so
    flows starting at one instant cost one solve. Until then a moved flow keeps draining at its old
    rate; a new one has rate 0. Two cap changes that move no other flow's rate are done at once
    (a capped flow with every link private takes its new cap; :meth:`lift_tcap` keeps a leveled
    flow in place): the same state as the solve would leave, and the solve still returns them.
    """

    def __init__(self, cap: list[float], report_near: bool = False) -> None:
        self.report_near = report_near  # solve() also returns flows leveled within NEAR of their cap
        self.cap = [float(c) for c in cap]
        self.users = [0] * len(cap)  # live flows crossing each link
        self._on_link: dict[int, dict[int, None]] = {}  # link -> fids crossing it
        self._link_groups: dict[int, dict[Group, None]] = {}
        self._groups: dict[tuple[tuple[int, float], ...], Group] = {}
        self.flows: dict[int, _Flow] = {}
        self._pending: dict[int, None] = {}
        self._dirty: dict[Group, None] = {}
        self._fin: list[tuple[float, int, int]] = []  # capped flows: (finish s, version, fid)
        self._ver = 0
        self._solo: dict[Group, None] = {}  # groups on their own clock
        self._commons: dict[Component, None] = {}  # attached components (their groups on the shared clock)
        self._reported: list[int] = []  # fids kept in place by lift_tcap: the next solve returns them

    # ------------------------------------------------------------------ mutations
    def add(
        self, fid: int, links: tuple[int, ...], mults: tuple[float, ...], nbytes: float, tcap: float, now: float
    ) -> None:
        """Start flow ``fid`` with ``nbytes`` wire bytes over ``links`` (crossed ``mults`` times)."""
        self.add_exact(fid, tuple(links), tuple(map(float, mults)), float(nbytes), float(tcap), now)

    def add_exact(
        self, fid: int, links: tuple[int, ...], mults: tuple[float, ...], nbytes: float, tcap: float, now: float
    ) -> None:
        """:meth:`add` of arguments already of its types (a path's tuples, float bytes and cap):
        the network's call, once per flow, without the conversions."""
        f = _Flow(links, mults, tcap, nbytes, now)
        self.flows[fid] = f
        on_link, count = self._on_link, self.users
        for link in f.links:
            users = on_link.get(link)
            if users is None:
                users = on_link[link] = {}
            elif len(users) == 1:  # the link stops being private to its other flow
                self._unplace(next(iter(users)), now)
            users[fid] = None
            count[link] += 1
        self._pending[fid] = None

    def remove(self, fid: int, now: float) -> None:
        """Finish flow ``fid``."""
        f = self.flows.pop(fid)  # its heap entries go stale with it
        self._pending.pop(fid, None)
        if f.mode != PENDING:
            self._leave(f, now)
        on_link, count = self._on_link, self.users
        for link in f.links:
            users = on_link[link]
            del users[fid]
            count[link] -= 1
            if len(users) == 1:  # the link becomes private to its last flow
                self._unplace(next(iter(users)), now)
            elif not users:
                del on_link[link]

    def set_tcap(self, fid: int, tcap: float, now: float) -> None:
        """Change flow ``fid``'s TCP cap (bytes/s; inf: none; 0: waiting)."""
        f = self.flows[fid]
        if f.tcap == tcap:
            return
        if f.mode == CAPPED and f.group is None and tcap > 0 and self._recap_alone(f, fid, float(tcap), now):
            return
        self._unplace(fid, now)
        f.tcap = float(tcap)

    def _recap_alone(self, f: _Flow, fid: int, tcap: float, now: float) -> bool:
        """A capped flow with no group (every link private) re-placed at once: no other flow's
        rate depends on its cap, so the next solve would only put it back, capped at the new cap.
        Done here with the same float operations and versions as :meth:`_unplace` then
        :meth:`_place`; the next solve returns it. False (nothing done) if a link became shared."""
        cap = tcap
        for link, m in zip(f.links, f.mults, strict=True):
            if self.users[link] > 1:
                return False
            cap = min(cap, self.cap[link] / m)
        rem = f.rem - f.c * (now - f.t0)  # bytes, remaining() of a capped flow
        self._ver += 2  # _unplace's version, then _put's
        f.tcap, f.c, f.rem, f.t0, f.r, f.ver = tcap, cap, rem, now, 0.0, self._ver
        heapq.heappush(self._fin, (now + rem / cap if cap > 0 else math.inf, f.ver, fid))
        self._reported.append(fid)
        return True

    def lift_tcap(self, fid: int, tcap: float, now: float) -> None:
        """:meth:`set_tcap` where the flow's rate stays: a leveled flow of a settled lone group
        (not dirty, not its only flow) whose new effective cap stays above the level (not within
        ``NEAR`` of it) keeps its rate, so it keeps its place: no re-placement and no re-leveling
        of its group. Its threshold and version are re-taken as a re-placement takes them
        (``v + bytes left``, two versions), and the flows a re-leveling would report (it, and
        with ``report_near`` its group's flows near their caps) join the next :meth:`solve`'s
        result: the same state and the same result as :meth:`set_tcap` then :meth:`solve`, float
        for float. Otherwise it is :meth:`set_tcap`."""
        f = self.flows[fid]
        g = f.group
        if f.tcap == tcap:
            return
        c = g.comp if g is not None else None
        if (
            f.mode != LEVELED or g is None or c is None or c.lay is not None or g.common is not None
            or g in self._dirty or g.n + g.capped < 2
        ):  # fmt: skip
            self.set_tcap(fid, tcap, now)
            return
        cap = float(tcap)
        for link, m in zip(f.links, f.mults, strict=True):  # as _place: private links cap it
            if self.users[link] <= 1:
                cap = min(cap, self.cap[link] / m)
        lam = g.lam
        if not (cap >= lam and cap * (1.0 - NEAR) > lam and lam == self._lone_level(g)):
            self.set_tcap(fid, tcap, now)
            return
        rem = self.remaining(fid, now)  # bytes, as _unplace takes it, then _put
        g.advance(now)
        self._ver += 2  # _unplace's version, then _put's
        f.tcap, f.c, f.rem, f.t0, f.r, f.ver = float(tcap), cap, rem, now, 0.0, self._ver
        f.thr = g.v + rem
        heapq.heappush(g.thr, (f.thr, f.ver, fid))
        heapq.heappush(g.lev, (f.c, f.ver, fid))
        self._reported.append(fid)
        if self.report_near:
            self._near_into(g, self._reported)

    def set_link_cap(self, link: int, cap: float, now: float) -> None:
        """Change a link's capacity (bytes/s)."""
        if self.cap[link] == cap:
            return
        self.cap[link] = float(cap)
        users = self._on_link.get(link, {})
        if len(users) == 1:
            self._unplace(next(iter(users)), now)
        for g in self._link_groups.get(link, {}):
            self._dirty[g] = None

    # ------------------------------------------------------------------ queries
    def remaining(self, fid: int, now: float) -> float:
        """Wire bytes flow ``fid`` has left at ``now``."""
        f = self.flows[fid]
        if f.mode == LEVELED:
            g = f.group
            assert g is not None
            c = g.common
            if c is not None:  # the shared clock: the same expression as due() and next_finish()
                return (f.thr - g.base) - (c.w + c.lam * (now - c.t))
            return f.thr - (g.v + g.lam * (now - g.t))
        if f.mode == CAPPED:
            return f.rem - f.c * (now - f.t0)
        return f.rem

    def rate(self, fid: int) -> float:
        """Current rate of flow ``fid``, bytes/s (0 until placed, or while waiting)."""
        f = self.flows[fid]
        if f.mode == LEVELED:
            g = f.group
            assert g is not None
            return max(g.lam if g.common is None else g.common.lam, 0.0)
        if f.mode == CAPPED:
            return f.c
        return f.r if f.mode == PENDING else 0.0

    def is_leveled(self, fid: int) -> bool:
        """Whether flow ``fid``'s rate is its group's level (its cap does not bind)."""
        return self.flows[fid].mode == LEVELED

    def cap_of(self, fid: int) -> float:
        """Effective cap of a placed flow, bytes/s (TCP window and private links)."""
        return self.flows[fid].c

    def advance(self, now: float) -> None:
        """Move every virtual clock to ``now``."""
        for g in self._solo:
            if now > g.t:  # Group.advance, inlined: once per group per event
                if g.n and g.lam > 0:
                    g.v += g.lam * (now - g.t)
                g.t = now
        for c in self._commons:
            c.advance(now)

    def due(self, now: float, min_bytes: float, snap_s: float = -math.inf) -> list[int]:
        """Flows whose drain is complete at ``now``, any order: fewer than ``min_bytes`` left, or
        so few that no float time step can drain them (``now + left / rate <= now``), or few
        enough to drain within ``snap_s`` s; a capped flow also once its finish time has come.
        Moves every group's virtual clock to ``now`` on the way (:meth:`advance`)."""
        flows, out = self.flows, []
        if self._pending:
            for fid in self._pending:
                f = flows[fid]
                if f.r > 0:
                    eta = f.rem / f.r  # s
                    if f.rem < min_bytes or now + eta <= now or eta <= snap_s:
                        out.append(fid)
            for fid in out:
                self._pending.pop(fid)
        pop = heapq.heappop
        for c in self._commons:
            self._due_common(c, now, min_bytes, snap_s, out)
        for g in self._solo:
            if now > g.t:  # Group.advance, inlined
                if g.n and g.lam > 0:
                    g.v += g.lam * (now - g.t)
                g.t = now
            thr, lam, v = g.thr, g.lam, g.v
            if not (g.n and lam > 0):
                continue
            while thr:
                at, ver, fid = thr[0]
                f = flows.get(fid)
                if f is None or f.ver != ver or f.mode != LEVELED:
                    pop(thr)
                    continue
                rem = at - v  # bytes
                eta = rem / lam  # s
                if not (rem < min_bytes or now + eta <= now or eta <= snap_s):
                    break
                pop(thr)
                out.append(fid)
        fin = self._fin
        while fin:
            at, ver, fid = fin[0]
            f = flows.get(fid)
            if f is None or f.ver != ver or f.mode != CAPPED:
                pop(fin)
                continue
            if not f.c > 0:
                break
            # its finish time (the timer's) has come, whatever float residue rem - c * dt leaves:
            # else a residue that drains in under an ulp of the clock re-arms a timer at `now`
            rem = f.rem - f.c * (now - f.t0)  # bytes
            eta = rem / f.c  # s
            if not (at <= now or rem < min_bytes or now + eta <= now or eta <= snap_s):
                break
            pop(fin)
            out.append(fid)
        return out

    def next_finish(self, now: float) -> float:
        """Earliest time (s) at which a flow could be drained at the current rates (inf: none)."""
        best = math.inf
        flows = self.flows
        for c in self._commons:
            if c.lam > 0 and (entry := self._clock_top(c)) is not None:
                best = min(best, now + (entry[0] - (c.w + c.lam * (now - c.t))) / c.lam)
        for g in self._solo:
            thr, lam = g.thr, g.lam
            if not (g.n and lam > 0 and thr):
                continue
            top, ver, fid = thr[0]
            f = flows.get(fid)
            if f is None or f.ver != ver or f.mode != LEVELED:  # a stale top: clean the heap
                if not clean(thr, LEVELED, flows):
                    continue
                top = thr[0][0]
            at = now + (top - g.v - lam * (now - g.t)) / lam
            if at < best:
                best = at
        if self._fin and clean(self._fin, CAPPED, flows) and self._fin[0][0] < best:
            best = self._fin[0][0]
        return best

    # ------------------------------------------------------------------ solve
    def solve(self, now: float) -> list[int]:
        """Place the flows that moved, re-level the touched groups; return the fids placed or moved
        (in no particular order)."""
        touched: list[int] = []
        if self._reported:
            touched, self._reported = self._reported, []
        if self._pending:
            pending, self._pending = self._pending, {}
            for fid in sorted(pending) if len(pending) > 1 else pending:
                self._place(fid, now)
                touched.append(fid)
        while self._dirty:  # a settle may drop a group and so dirty its neighbours: again
            dirty, self._dirty = self._dirty, {}
            if len(dirty) == 1:  # the usual case
                g = next(iter(dirty))
                touched.extend(self._settle(self._component(g), [g], now))
                continue
            by_comp: dict[Component, list[Group]] = {}  # in order of first dirty group
            for g in dirty:
                by_comp.setdefault(self._component(g), []).append(g)
            for comp, groups in by_comp.items():
                touched.extend(self._settle(comp, groups, now))
        return touched

    # ------------------------------------------------------------------ internals
    def _unplace(self, fid: int, now: float) -> None:
        """Take a flow out of its class (its bytes left frozen at ``now``) until the next solve."""
        f = self.flows[fid]
        if f.mode == PENDING:
            self._pending[fid] = None
            return
        f.rem, f.t0, f.r = self.remaining(fid, now), now, self.rate(fid)
        self._leave(f, now)
        f.mode, f.group = PENDING, None
        self._ver += 1
        f.ver = self._ver
        self._pending[fid] = None

    def _leave(self, f: _Flow, now: float) -> None:
        """Take a placed flow out of its group's counts (the group re-leveled at the next solve,
        dropped when empty); what it had left is :meth:`_unplace`'s business, not a finished
        flow's."""
        g = f.group
        if g is not None:
            g.advance(now)
            if f.mode == LEVELED:
                g.n -= 1
            else:
                g.capped -= 1
                g.add_cap(-f.c)
            self._dirty[g] = None
            if g.n == 0 and g.capped == 0:
                self._drop_group(g)

    def _drop_group(self, g: Group) -> None:
        self._forget(g.comp)
        del self._groups[g.key]
        del self._solo[g]
        self._dirty.pop(g, None)
        for link, _ in g.key:
            groups = self._link_groups[link]
            del groups[g]
            for h in groups:  # their links have room again
                self._dirty[h] = None
            if not groups:
                del self._link_groups[link]

    def _place(self, fid: int, now: float) -> None:
        """Put a pending flow into its class: waiting, capped alone, or into its group."""
        f = self.flows[fid]
        f.r = 0.0
        if f.tcap <= 0:
            f.mode, f.c = WAITING, 0.0
            return
        shared, cap = [], f.tcap
        users, caps = self.users, self.cap
        for link, m in zip(f.links, f.mults):  # equal lengths (add)
            if users[link] > 1:
                shared.append((link, m))
            else:
                x = caps[link] / m
                if x < cap:  # min(cap, x), which keeps cap on a tie or a NaN x
                    cap = x
        f.c = cap
        if not shared:
            self._put(f, fid, None, False, now)
            return
        key = tuple(shared)
        g = self._groups.get(key)
        if g is None:
            g = self._groups[key] = Group(key, t=now)
            self._solo[g] = None
            for link, _ in key:
                groups = self._link_groups.setdefault(link, {})
                for h in groups:  # their component grows: found again
                    if h.comp is not None:
                        self._forget(h.comp)
                groups[g] = None
            g.lam = self._lone_level(g) if self._alone(g) else math.inf
        g.advance(now)
        self._put(f, fid, g, cap >= g.lam, now)
        self._dirty[g] = None

    def _put(self, f: _Flow, fid: int, g: Group | None, leveled: bool, now: float) -> None:
        """Enter ``f`` (bytes left ``f.rem`` at ``now``) as leveled or capped (group clock at now)."""
        self._ver += 1
        f.ver, f.group = self._ver, g
        if leveled:
            assert g is not None
            f.mode, f.thr = LEVELED, g.v + f.rem
            g.n += 1
            heapq.heappush(g.thr, (f.thr, f.ver, fid))
            heapq.heappush(g.lev, (f.c, f.ver, fid))
            c = g.common
            if c is not None and f.thr - g.base < g.wkey:  # its next threshold on the shared clock
                g.wkey = f.thr - g.base
                c.push(g, CLOCK, g.wkey)
            return
        f.mode, f.t0 = CAPPED, now
        heapq.heappush(self._fin, (now + f.rem / f.c if f.c > 0 else math.inf, f.ver, fid))
        if g is not None:
            g.capped += 1
            g.add_cap(f.c)
            heapq.heappush(g.cap, (-f.c, f.ver, fid))

    def _move(self, fid: int, leveled: bool, now: float) -> None:
        """Switch a placed flow between leveled and capped within its group."""
        f = self.flows[fid]
        g = f.group
        assert g is not None
        f.rem = self.remaining(fid, now)
        if f.mode == LEVELED:
            g.n -= 1
        else:
            g.capped -= 1
            g.add_cap(-f.c)
        self._put(f, fid, g, leveled, now)

    def _alone(self, g: Group) -> bool:
        return all(len(self._link_groups[link]) == 1 for link, _ in g.key)

    def _component(self, g: Group) -> Component:
        """``g``'s component, found again after a group of it or next to it was made or dropped
        (the set of groups and their links is what defines it)."""
        c = g.comp
        if c is None:
            groups = [g] if self._alone(g) else search(g, self._link_groups)
            c = Component(groups)
            for h in groups:
                h.comp = c
            if len(groups) > 1:
                c.lay = layout(groups)
                c.fast = len(c.lay.common) == len(c.lay.shared_pos)  # every shared link is common
                if c.fast:
                    c.init_sums(self.cap, self.flows)
        return c

    def _forget(self, c: Component | None) -> None:
        """Drop a component whose groups change (its groups back on their own clocks)."""
        if c is not None:
            if c.attached:
                self._detach(c)
            for h in c.groups:
                h.comp = None

    def _view(self, c: Component, g: Group) -> tuple[list[Group], Layout | None]:
        """The component's groups in order of discovery from ``g`` and their layout: progressive
        filling sums in that order (the first dirty group's, as before components were kept)."""
        if g is c.groups[0]:
            return c.groups, c.lay
        view = c.views.get(g)
        if view is None:
            groups = search(g, self._link_groups)
            view = c.views[g] = (groups, layout(groups))
        return view
