"""Incremental max-min fairness: recompute only the flows whose bottleneck can change.

The max-min fair allocation of a set of flows over capacitated links decomposes over the
*components* of the flow/link graph: two flows are in one component when they share a link, or
transitively through other flows. A flow's rate depends only on the flows of its component, so when
a flow starts, finishes or changes its per-flow cap, only that component's rates can change; every
other flow keeps its rate. :class:`MaxMinAllocator` keeps the components and, on :meth:`update`,
runs progressive filling (:func:`aiotsim.network.flows.progressive_filling`, the engine's own
routine) over the dirty components only.

Components are merged when a new flow bridges them (smaller into larger) and split lazily: after a
removal a component may be a union of several true components, which changes no rate (max-min fair
rates of a disjoint union are the rates of each part) but costs work, so a component is re-split
exactly (breadth-first over its flows) when it is small or when at least half of its flows were
removed since its last split (amortized O(1) per removal).

A per-flow rate cap (e.g. a TCP window over the round-trip time, bytes/s) acts exactly like a
private link of that capacity crossed once by that flow alone.

Cost per :meth:`update_slots`: O(flows in the dirty components x hops x levels) in numpy (plus
one scan of the slot labels per multi-flow component), no Python per changed flow; a flow alone in
its component (per-node links, no shared link) costs a few Python operations. Rates equal
progressive filling over all flows up to the relative tie tolerance (1e-12) that progressive
filling uses to freeze links filling at the same level. When one shared link joins every flow in
one component (a star's server link) every event still recomputes all of them: O(flows) per
event; :mod:`aiotsim.network.rates` avoids that with rate classes and virtual clocks.

Not the engine of :class:`aiotsim.network.flows.Network`: that is
:class:`aiotsim.network.rates.RateClasses` (rate classes with virtual clocks), whose cost per event
does not grow with the flows of a component. This allocator remains a small general-purpose
API (named flows and links, rates of the changed flows per update), property tested against
progressive filling.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

from aiotsim.errors import ConfigError
from aiotsim.network.flows import progressive_filling

# Components with at most this many flows are re-split exactly at every recomputation (cheap).
SMALL_COMPONENT = 32


@dataclass
class _Flow:
    slot: int
    links: tuple[int, ...]  # distinct link indices
    comp: _Component


_ids = iter(range(1 << 62))


@dataclass(eq=False)
class _Component:
    cid: int = field(default_factory=lambda: next(_ids))  # label in the allocator's slot array
    members: dict[Hashable, None] = field(default_factory=dict)  # flow keys, ordered (determinism)
    links: set[int] = field(default_factory=set)  # link indices (a superset after removals)
    removed: int = 0  # flows removed since the last exact split


class MaxMinAllocator:
    """Exact max-min fair rates, maintained incrementally as flows come and go.

    Parameters
    ----------
    capacity : mapping of hashable to float
        Capacity of each link (any unit, e.g. bytes/s), > 0 (``inf`` allowed).

    Notes
    -----
    Mutations (:meth:`add_flow`, :meth:`remove_flow`, :meth:`set_cap`) only record what changed;
    :meth:`update` recomputes the touched components once, so flows starting at the same instant
    cost one recomputation. Until the next :meth:`update`, a new flow has rate 0.

    Examples
    --------
    >>> alloc = MaxMinAllocator({"a": 10.0, "b": 4.0})
    >>> for key, links in [("x", ["a"]), ("y", ["a", "b"]), ("z", ["b"])]:
    ...     _ = alloc.add_flow(key, links)
    >>> alloc.update() == {"x": 8.0, "y": 2.0, "z": 2.0}
    True
    >>> alloc.remove_flow("z"); alloc.update() == {"x": 6.0, "y": 4.0}
    True
    """

    def __init__(self, capacity: Mapping[Hashable, float]) -> None:
        self._index = {name: i for i, name in enumerate(capacity)}
        caps = [float(c) for c in capacity.values()]
        if any(not c > 0 for c in caps):
            raise ConfigError("link capacities must be > 0")
        self._dummy = len(caps)  # padding index: an infinite link no flow really crosses
        self._cap = np.array(caps + [math.inf])
        self._flows: dict[Hashable, _Flow] = {}
        self._link_comp: dict[int, _Component] = {}  # link index -> component using it
        self._users = np.zeros(len(caps) + 1, dtype=np.int64)  # flows crossing each link
        self._dirty: set[_Component] = set()
        # slot arrays, [slots] and [slots, hops]; slots are reused
        self._hops = np.full((0, 1), self._dummy, dtype=np.intp)
        self._mult = np.zeros((0, 1))
        self._fcap = np.zeros(0)  # per-flow cap (inf: none)
        self._rate = np.zeros(0)
        self._comp_of = np.zeros(0, dtype=np.int64)  # component label of each slot (-1: free)
        self._key_of: list[Hashable] = []  # flow key of each slot
        self._free: list[int] = []
        self.recomputed = 0  # flows whose rate was recomputed so far (a cost counter)

    # ------------------------------------------------------------------ mutations
    def add_flow(
        self, key: Hashable, links: Iterable[Hashable], mults: Iterable[float] | None = None,
        cap: float = math.inf,
    ) -> int:  # fmt: skip
        """Start a flow.

        Parameters
        ----------
        key : hashable
            The flow's name; must not be active.
        links : iterable of hashable
            Distinct links the flow crosses (names given to the constructor), at least one unless
            ``cap`` is finite.
        mults : iterable of float, optional
            How many times the flow crosses each link (default 1 each), > 0.
        cap : float
            Per-flow rate cap, in the unit of the capacities (``inf``: none), > 0.

        Returns
        -------
        int
            The flow's slot: its index in the arrays :meth:`update_slots` returns, stable while
            the flow is active (a caller may index its own per-flow arrays with it, growing them
            to :attr:`n_slots`).
        """
        if key in self._flows:
            raise ConfigError(f"flow {key!r} is already active")
        names = list(links)
        mult = [1.0] * len(names) if mults is None else [float(m) for m in mults]
        idx = tuple(self._link(n) for n in names)
        if len(mult) != len(idx) or len(set(idx)) != len(idx) or any(not m > 0 for m in mult):
            raise ConfigError(f"flow {key!r}: links must be distinct with one multiplicity > 0 each")
        if not idx and math.isinf(cap):
            raise ConfigError(f"flow {key!r} crosses no link and has no cap")
        self._check_cap(key, cap)
        slot = self._slot(len(idx))
        self._hops[slot] = self._dummy
        self._mult[slot] = 0.0
        self._hops[slot, : len(idx)] = idx
        self._mult[slot, : len(idx)] = mult
        self._fcap[slot] = cap
        self._rate[slot] = 0.0
        comp = self._merge({self._link_comp[i] for i in idx if self._users[i] > 0})
        comp.members[key] = None
        for i in idx:
            comp.links.add(i)
            self._link_comp[i] = comp
            self._users[i] += 1
        self._flows[key] = _Flow(slot, idx, comp)
        self._comp_of[slot] = comp.cid
        self._key_of[slot] = key
        self._dirty.add(comp)
        return slot

    def remove_flow(self, key: Hashable) -> None:
        """Finish flow ``key``; the rates of its component are recomputed at the next update."""
        flow = self._flows.pop(key)
        comp = flow.comp
        del comp.members[key]
        comp.removed += 1
        for i in flow.links:
            self._users[i] -= 1
        self._rate[flow.slot] = 0.0
        self._comp_of[flow.slot] = -1
        self._free.append(flow.slot)
        if comp.members:
            self._dirty.add(comp)
        else:
            self._dirty.discard(comp)
            for i in comp.links:
                if self._link_comp.get(i) is comp:
                    del self._link_comp[i]

    def set_cap(self, key: Hashable, cap: float) -> None:
        """Change flow ``key``'s rate cap (``inf``: none)."""
        flow = self._flows[key]
        self._check_cap(key, cap)
        if not flow.links and math.isinf(cap):
            raise ConfigError(f"flow {key!r} crosses no link and cannot lose its cap")
        self._fcap[flow.slot] = cap
        self._dirty.add(flow.comp)

    # ------------------------------------------------------------------ queries
    def update(self) -> dict[Hashable, float]:
        """Recompute the rates of the components touched since the last update.

        Returns
        -------
        dict
            ``{key: new rate}`` of every flow whose rate changed (new flows included); flows not
            listed keep their rate.
        """
        slots, rates = self.update_slots()
        return {self._key_of[s]: r for s, r in zip(slots.tolist(), rates.tolist(), strict=True)}

    def update_slots(self) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`update` as arrays, with no Python work per changed flow.

        Returns
        -------
        slots : ndarray of int, shape [changed]
            Slots (see :meth:`add_flow`) of the flows whose rate changed, new flows included.
        rates : ndarray of float, shape [changed]
            Their new rates.
        """
        out: list[np.ndarray] = []
        dirty, self._dirty = self._dirty, set()
        for comp in sorted(dirty, key=lambda c: c.cid):  # a fixed order: deterministic runs
            if not comp.members:
                continue
            parts = self._split(comp) if self._should_split(comp) else [comp]
            for part in parts:
                out.append(self._recompute(part))
        if not out:
            return np.zeros(0, dtype=np.intp), np.zeros(0)
        slots = np.concatenate(out)
        return slots, self._rate[slots]

    @property
    def n_slots(self) -> int:
        """Number of slots allocated so far (every slot returned by :meth:`add_flow` is below it)."""
        return len(self._rate)

    def slot(self, key: Hashable) -> int:
        """Slot of active flow ``key``."""
        return self._flows[key].slot

    def rate(self, key: Hashable) -> float:
        """Current rate of flow ``key`` (as of the last :meth:`update`)."""
        return float(self._rate[self._flows[key].slot])

    def rates(self) -> dict[Hashable, float]:
        """Current rate of every active flow (as of the last :meth:`update`)."""
        return {key: float(self._rate[f.slot]) for key, f in self._flows.items()}

    def __len__(self) -> int:
        return len(self._flows)

    def __contains__(self, key: object) -> bool:
        return key in self._flows

    # ------------------------------------------------------------------ internals
    def _link(self, name: Hashable) -> int:
        try:
            return self._index[name]
        except KeyError:
            raise ConfigError(f"unknown link {name!r}") from None

    @staticmethod
    def _check_cap(key: Hashable, cap: float) -> None:
        if not cap > 0:
            raise ConfigError(f"flow {key!r}: cap(={cap!r}) must be > 0 (inf for none)")

    def _slot(self, hops: int) -> int:
        """A free slot with room for ``hops`` links (arrays grow by doubling)."""
        if hops > self._hops.shape[1]:
            pad = hops - self._hops.shape[1]
            self._hops = np.hstack([self._hops, np.full((len(self._rate), pad), self._dummy, np.intp)])
            self._mult = np.hstack([self._mult, np.zeros((len(self._rate), pad))])
        if not self._free:
            old = len(self._rate)
            grow = max(8, old)
            self._free.extend(range(old + grow - 1, old - 1, -1))
            self._hops = np.vstack([self._hops, np.full((grow, self._hops.shape[1]), self._dummy, np.intp)])
            self._mult = np.vstack([self._mult, np.zeros((grow, self._mult.shape[1]))])
            self._fcap = np.append(self._fcap, np.full(grow, math.inf))
            self._rate = np.append(self._rate, np.zeros(grow))
            self._comp_of = np.append(self._comp_of, np.full(grow, -1, dtype=np.int64))
            self._key_of.extend([None] * grow)
        return self._free.pop()

    def _merge(self, comps: set[_Component]) -> _Component:
        """One component out of ``comps`` (a new one if empty), smaller merged into larger."""
        if not comps:
            return _Component()
        ordered = sorted(comps, key=lambda c: len(c.members), reverse=True)
        big = ordered[0]
        for small in ordered[1:]:
            for key in small.members:
                flow = self._flows[key]
                flow.comp = big
                self._comp_of[flow.slot] = big.cid
            for i in small.links:
                if self._link_comp.get(i) is small:
                    self._link_comp[i] = big
            big.members.update(small.members)
            big.links |= small.links
            big.removed += small.removed
            self._dirty.discard(small)
        return big

    def _should_split(self, comp: _Component) -> bool:
        return comp.removed > 0 and (len(comp.members) <= SMALL_COMPONENT or 2 * comp.removed >= len(comp.members))

    def _split(self, comp: _Component) -> list[_Component]:
        """The true components of ``comp``'s flows (breadth-first over shared links)."""
        users: dict[int, list[Hashable]] = {}
        for key in comp.members:
            for i in self._flows[key].links:
                users.setdefault(i, []).append(key)
        parts: list[_Component] = []
        unseen = dict(comp.members)  # ordered, so that runs are deterministic
        for first in comp.members:
            if first not in unseen:
                continue
            part = _Component()
            del unseen[first]
            stack = [first]
            part.members[first] = None
            while stack:
                for i in self._flows[stack.pop()].links:
                    if i in part.links:
                        continue
                    part.links.add(i)
                    self._link_comp[i] = part
                    for other in users[i]:
                        if other in unseen:
                            del unseen[other]
                            part.members[other] = None
                            stack.append(other)
            for key in part.members:
                flow = self._flows[key]
                flow.comp = part
                self._comp_of[flow.slot] = part.cid
            parts.append(part)
        for i in comp.links:
            if self._link_comp.get(i) is comp:  # a link no active flow crosses any more
                del self._link_comp[i]
        return parts

    def _recompute(self, comp: _Component) -> np.ndarray:
        """Progressive filling over one component; return the slots whose rate changed."""
        self.recomputed += len(comp.members)
        if len(comp.members) == 1:  # alone: the tightest of its links and its cap (no numpy scan)
            flow = self._flows[next(iter(comp.members))]
            slot, width = flow.slot, len(flow.links)
            fill = self._cap[self._hops[slot, :width]] / self._mult[slot, :width]
            new_rate = min(float(fill.min(initial=math.inf)), float(self._fcap[slot]))
            if new_rate == self._rate[slot]:
                return np.zeros(0, dtype=np.intp)
            self._rate[slot] = new_rate
            return np.array([slot], dtype=np.intp)
        slots = np.flatnonzero(self._comp_of == comp.cid)  # in slot order
        hops, mult, cap = self._hops[slots], self._mult[slots], self._cap
        fcap = self._fcap[slots]
        capped = np.isfinite(fcap)
        if capped.any():  # caps as private links, numbered after the dummy
            private = np.arange(len(slots)) + len(cap)
            hops = np.hstack([hops, np.where(capped, private, self._dummy)[:, None]])
            mult = np.hstack([mult, capped[:, None].astype(float)])
            cap = np.concatenate([cap, fcap])
        new = progressive_filling(cap, hops, mult)
        moved = new != self._rate[slots]
        self._rate[slots] = new
        return slots[moved]
