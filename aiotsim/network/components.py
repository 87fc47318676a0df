"""Groups and components of :class:`~aiotsim.network.rates.RateClasses` (see its module docstring).

A **group** is the flows with one set of shared links; a **component** the groups connected
through shared links. A component is *fast* when every link crossed by more than one of its
groups is crossed by all of them (gateways behind one server link): it then keeps sums over those
common links and heaps over its groups, so that the level of the common regime (a common link
fills first, every group at one level) and the groups whose flows cross it are found in
O(log groups), not by a pass over every group.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

PENDING, LEVELED, CAPPED, WAITING = 0, 1, 2, 3
TIE = 1e-12  # relative: links filling this close to the level freeze together (progressive filling)
NEAR = 1e-9  # relative: a leveled flow this close to its cap is reported as touched (see _near)
SPARE_TOL = 1e-12  # relative: a link's spare capacity this close to 0 counts as exactly used


@dataclass(eq=False, slots=True)
class Group:
    """Flows with one set of shared links; ``key``: ((link, times crossed), ...)."""

    key: tuple[tuple[int, float], ...]
    lam: float = 0.0  # bytes/s, the level of its leveled flows
    v: float = 0.0  # bytes drained per leveled flow, as of time t
    t: float = 0.0  # s
    n: int = 0  # leveled flows
    capped: int = 0  # capped flows
    s: float = 0.0  # bytes/s, sum of the capped flows' caps (with s_err: compensated, see add_cap)
    s_err: float = 0.0  # bytes/s, rounding error of s so far (Neumaier)
    thr: list[tuple[float, int, int]] = field(default_factory=list)  # (threshold, version, fid)
    lev: list[tuple[float, int, int]] = field(default_factory=list)  # (cap, version, fid), min first
    cap: list[tuple[float, int, int]] = field(default_factory=list)  # (-cap, version, fid), max first
    comp: Component | None = None  # its component (None: to be found again)
    common: Component | None = None  # the component whose shared clock it runs on (None: its own clock)
    base: float = 0.0  # bytes, on a shared clock: v = base + the clock's w
    wkey: float = math.inf  # bytes, on a shared clock: its earliest threshold - base (inf: none)
    # component sums: what it adds to them (leveled flows, capped use bytes/s, capped flows)
    cn: int = 0
    cu: float = 0.0
    cc: int = 0
    keys: list[float] = field(default_factory=lambda: [math.nan] * 4)  # FILL, LEV, CAP, CLOCK (see Component)
    seqs: list[int] = field(default_factory=lambda: [-1] * 4)  # sequence of its live entry in each heap
    chops: tuple[tuple[int, float], ...] = ()  # (position in Component.clinks, times crossed)
    own: tuple[tuple[int, float], ...] = ()  # (link, times crossed) of the links no other group crosses

    def add_cap(self, x: float) -> None:
        """``s += x`` with the rounding error kept (caps of very different sizes come and go:
        a plain running sum would leave residues that a link at capacity 0 turns into rates)."""
        t = self.s + x
        self.s_err += (self.s - t) + x if abs(self.s) >= abs(x) else (x - t) + self.s
        self.s = t
        if not self.capped:
            self.s = self.s_err = 0.0

    @property
    def used(self) -> float:
        """Sum of the capped flows' caps, bytes/s."""
        return self.s + self.s_err

    def advance(self, now: float) -> None:
        """Move the virtual clock to ``now`` at the current level (on a shared clock: move that
        one, and read ``v``, ``t`` and ``lam`` from it)."""
        c = self.common
        if c is not None:
            c.advance(now)
            self.v, self.t, self.lam = self.base + c.w, c.t, c.lam
            return
        if now > self.t:
            if self.n and self.lam > 0:
                self.v += self.lam * (now - self.t)
            self.t = now


@dataclass(slots=True)
class Layout:
    """How a component's groups use its links, found once per component (positions index
    ``links``; a link is *own* to a group when no other group of the component crosses it)."""

    links: list[int]  # the component's links, in order of first use
    hops: list[tuple[tuple[int, float], ...]]  # per group: (position, times crossed) of each of its links
    common: list[int]  # positions of the links that every group crosses (a server link behind gateways)
    shared: list[tuple[tuple[int, float], ...]]  # per group: its hops on links other groups cross too
    own: list[tuple[tuple[float, float], ...]]  # per group: (capacity index, times crossed) of its own links
    shared_pos: list[int]  # positions of the links crossed by more than one group


FILL, LEV, CAP, CLOCK = 0, 1, 2, 3  # the heaps of a Component over its groups (index into Group.keys/seqs)


@dataclass(eq=False, slots=True)
class Component:
    """Groups connected through shared links, kept until a group of it is made or dropped.

    *Fast* when every link crossed by more than one of its groups is crossed by all of them (a
    server link behind gateways): then it also keeps, updated in O(log groups) per group that
    changes, the sums over those *common* links (``ws``: leveled flows x times crossed, whole
    numbers; ``ss``: capped use, bytes/s, Neumaier-compensated, ``se`` its error) and min-heaps over
    its groups of ``(key, seq, group)``: FILL, a group's own-link fill level (bytes/s); LEV, its
    lowest leveled cap; CAP, minus its highest capped cap; CLOCK, on the shared clock, its next
    threshold - base (bytes). An entry is live while its seq is the group's (``Group.seqs``).
    *Attached* (in the common regime: a common link fills first, every group at one level
    ``lam``): its groups drain by one shared clock ``w`` (bytes per leveled flow, ``w += lam x
    dt``), a group's clock being ``base + w``."""

    groups: list[Group]
    lay: Layout | None = None  # None: a lone group
    fast: bool = False
    views: dict[Group, tuple[list[Group], Layout | None]] = field(default_factory=dict)
    clinks: list[int] = field(default_factory=list)  # the common links
    ws: list[float] = field(default_factory=list)
    ss: list[float] = field(default_factory=list)
    se: list[float] = field(default_factory=list)
    empty: int = 0  # groups with no leveled flow
    ncap: int = 0  # capped flows
    nflows: int = 0  # placed flows
    heaps: list[list[tuple[float, int, Group]]] = field(default_factory=lambda: [[], [], [], []])
    attached: bool = False
    w: float = 0.0  # bytes per leveled flow since attached
    t: float = 0.0  # s
    lam: float = 0.0  # bytes/s, the common level
    seq: int = 0  # entries pushed onto its heaps

    def advance(self, now: float) -> None:
        """Move the shared clock to ``now``."""
        if now > self.t:
            if self.lam > 0:
                self.w += self.lam * (now - self.t)
            self.t = now

    def top(self, which: int) -> tuple[float, int, Group] | None:
        """The live top entry of heap ``which`` (stale entries dropped), or None."""
        heap = self.heaps[which]
        while heap:
            entry = heap[0]
            g = entry[2]
            if g.comp is self and g.seqs[which] == entry[1]:
                return entry
            heapq.heappop(heap)
        return None

    def push(self, g: Group, which: int, key: float) -> None:
        """Make ``key`` ``g``'s live entry in heap ``which`` (inf: no entry)."""
        if key == math.inf:
            g.keys[which], g.seqs[which] = key, 0
            return
        self.seq += 1
        g.keys[which], g.seqs[which] = key, self.seq
        heapq.heappush(self.heaps[which], (key, self.seq, g))

    def init_sums(self, cap: list[float], flows: Mapping[int, Any]) -> None:
        """Set up a fast component's sums and heaps from its groups (O(groups))."""
        lay = self.lay
        assert lay is not None
        pos = {k: j for j, k in enumerate(lay.common)}
        self.clinks = [lay.links[k] for k in lay.common]
        self.ws, self.ss, self.se = ([0.0] * len(pos) for _ in range(3))
        self.empty = len(self.groups)
        for g, hop, own in zip(self.groups, lay.hops, lay.own, strict=True):
            g.chops, g.own = tuple((pos[k], m) for k, m in hop if k in pos), own
            g.cn, g.cu, g.cc = 0, 0.0, 0
            g.keys, g.seqs = [math.nan] * 4, [-1] * 4
            self.refresh(g, cap, flows)

    def refresh(self, g: Group, cap: list[float], flows: Mapping[int, Any]) -> None:
        """Bring a fast component's sums and heap entries up to date with group ``g``."""
        n, used, capped = g.n, g.s + g.s_err, g.capped  # g.used
        if n != g.cn or used != g.cu or capped != g.cc:
            ws, ss, se = self.ws, self.ss, self.se
            for j, m in g.chops:
                ws[j] += m * (n - g.cn)  # whole numbers (times crossed x flows): exact
                if used != g.cu:  # add the new use and take the old one off (compensated)
                    ss[j], se[j] = acc(ss[j], se[j], m * used)
                    ss[j], se[j] = acc(ss[j], se[j], -m * g.cu)
            self.empty += (not n) - (not g.cn)
            self.ncap += capped - g.cc
            self.nflows += n + capped - g.cn - g.cc
            if not self.ncap and (any(ss) or any(se)):  # no capped flow left: no use, whatever residue
                # the sums kept (sums of +-0 stay: cap - (ss + se) and acc give the same values)
                self.ss, self.se = [0.0] * len(ss), [0.0] * len(se)
            g.cn, g.cu, g.cc = n, used, capped
        fill = math.inf  # bytes/s, the level at which its own links fill (as in _fill_common)
        if n:
            for link, m in g.own:
                x = (cap[link] - m * used) / (0.0 + m * n)
                if x < fill:
                    fill = x
        keys, seqs = g.keys, g.seqs
        if fill != keys[FILL] or seqs[FILL] < 0:
            self.push(g, FILL, fill)
        lev = math.inf
        if n and g.lev:  # the live top of its leveled caps (checked inline: it usually is live)
            low, ver, fid = g.lev[0]
            f = flows.get(fid)
            if f is not None and f.ver == ver and f.mode == LEVELED:
                lev = low
            elif clean(g.lev, LEVELED, flows):
                lev = g.lev[0][0]
        if lev != keys[LEV] or seqs[LEV] < 0:
            self.push(g, LEV, lev)
        top = g.cap[0][0] if capped and clean(g.cap, CAPPED, flows) else math.inf  # -(its highest cap)
        if top != keys[CAP] or seqs[CAP] < 0:
            self.push(g, CAP, top)

    def common_level(self, cap: list[float]) -> float | None:
        """``RateClasses._fill_common`` of a fast component from its sums and heaps, O(common
        links + log groups): the level if a common link is among the first to fill, else None."""
        if self.empty:
            return None
        common = math.inf
        for j, link in enumerate(self.clinks):
            x = (cap[link] - (self.ss[j] + self.se[j])) / self.ws[j]
            if x < common:
                common = x
        own = self.top(FILL)
        fill = own[0] if own is not None else math.inf
        low = fill if fill < common else common  # min(common, fill)
        level = low if low > 0.0 else 0.0  # max(0.0, low)
        return level if common <= level * (1.0 + TIE) else None


def acc(s: float, e: float, x: float) -> tuple[float, float]:
    """Neumaier summation: ``s + x`` and the rounding error ``e`` so far."""
    t = s + x
    e += (s - t) + x if abs(s) >= abs(x) else (x - t) + s
    return t, e


def clean(heap: list[tuple[float, int, int]], mode: int, flows: Mapping[int, Any]) -> bool:
    """Drop stale entries (version or mode no longer the flow's) from the top of a group's
    ``heap`` of ``(key, version, fid)``; whether a live entry is left."""
    while heap:
        _, ver, fid = heap[0]
        f = flows.get(fid)
        if f is not None and f.ver == ver and f.mode == mode:
            return True
        heapq.heappop(heap)
    return False


def search(g: Group, link_groups: Mapping[int, Mapping[Group, None]]) -> list[Group]:
    """The groups connected to ``g`` through shared links (``link_groups``: link -> the groups
    crossing it), in order of discovery from ``g``; each link's groups are scanned once."""
    seen: dict[Group, None] = {g: None}
    scanned: set[int] = set()
    stack = [g]
    while stack:
        for link, _ in stack.pop().key:
            if link in scanned:
                continue
            scanned.add(link)
            for h in link_groups[link]:
                if h not in seen:
                    seen[h] = None
                    stack.append(h)
    return list(seen)


def layout(comp: list[Group]) -> Layout:
    """The links of a component (in order of first use), each group's (position in them,
    times crossed) and the positions of the links that every group crosses (e.g. a server
    link behind gateways); kept with the component."""
    pos: dict[int, int] = {}
    hops = [tuple((pos.setdefault(link, len(pos)), m) for link, m in g.key) for g in comp]
    links = list(pos)
    users = [0] * len(links)
    for hop in hops:
        for k, _ in hop:
            users[k] += 1
    common = [k for k, u in enumerate(users) if u == len(comp)]
    shared = [tuple((k, m) for k, m in hop if users[k] > 1) for hop in hops]
    own = [tuple((links[k], m) for k, m in hop if users[k] == 1) for hop in hops]
    shared_pos = [k for k, u in enumerate(users) if u > 1]
    return Layout(links, hops, common, shared, own, shared_pos)
