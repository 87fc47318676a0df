"""Flows: transfers that share links max-min fairly, as a fluid (no packets, no per-byte events).

A transfer of ``nbytes`` from ``src`` to ``dst`` becomes a *flow* of wire bytes (payload plus
per-packet headers, framing, ACK charge and expected retransmissions, see
:mod:`aiotsim.network.overhead`) along the topology's route. At every instant each active flow has
a rate; rates are the **max-min fair** allocation over every link of every path, found by
progressive filling: all unfrozen flows grow at the same rate until some link is full; the flows
through that link are frozen at that rate; repeat with the capacity left (a flow that crosses one
link twice, e.g. up and down a shared radio channel, uses it twice). Rates change only when a flow
starts or finishes, so between such events every flow drains linearly.

The last byte of a flow arrives ``latency`` after it is drained, where ``latency`` = the sum of the
path's one-way latencies + the expected loss-recovery delay (:func:`overhead.retransmission_delay`)
+ seeded jitter (one exponential draw of scale ``jitter_s`` per link with jitter, per transfer,
from a ``numpy.random.Generator`` seeded by the network's ``seed``). A flow stops using bandwidth
once drained; its latency does not hold capacity.

Engine: one controller inside :class:`Network` (SimPy callbacks, no process per flow) keeps the
active flows in a dict. A flow start asks for one zero-delay update (so flows starting at the same
instant cost one recomputation); the controller then advances every flow to now, finishes the
drained ones, recomputes the rates (O(sum of path lengths x log links)) and schedules a single
timer at the next completion; a timer made stale by a later recomputation is ignored. Time lives in
the network: callers only ``yield`` the event that :meth:`Network.send` returns.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import simpy

from aiotsim.errors import ConfigError
from aiotsim.network.overhead import path_format, retransmission_delay, wire_bytes
from aiotsim.network.topology import Topology

K = TypeVar("K", bound=Hashable)

# A flow is finished when fewer than this many wire bytes remain (guards float rounding).
DONE_BYTES = 1e-9


def max_min_rates(capacity: Mapping[str, float], usage: Mapping[K, Mapping[str, int]]) -> dict[K, float]:
    """Max-min fair rates by progressive filling.

    Parameters
    ----------
    capacity : mapping of str to float
        Capacity of each link (any unit, e.g. bytes/s), > 0.
    usage : mapping of flow key to (mapping of link name to int)
        The links each flow crosses and how many times (a flow crossing a link twice uses twice its
        rate there). Every flow must cross at least one link.

    Returns
    -------
    dict
        Rate of each flow, in the unit of ``capacity``.

    Examples
    --------
    >>> max_min_rates({"a": 10.0, "b": 4.0}, {"x": {"a": 1}, "y": {"a": 1, "b": 1}, "z": {"b": 1}})
    {'y': 2.0, 'z': 2.0, 'x': 8.0}
    """
    on_link: dict[str, list[K]] = {}
    weight: dict[str, int] = {}  # sum of multiplicities of the unfrozen flows on each link
    for flow, links in usage.items():
        if not links:
            raise ConfigError(f"flow {flow!r} crosses no link")
        for name, mult in links.items():
            on_link.setdefault(name, []).append(flow)
            weight[name] = weight.get(name, 0) + mult
    used = {name: 0.0 for name in on_link}  # capacity taken by frozen flows
    heap = [(capacity[name] / w, name) for name, w in weight.items()]
    heapq.heapify(heap)
    rates: dict[K, float] = {}
    while heap:
        level, name = heapq.heappop(heap)
        w = weight[name]
        if w == 0 or level != _fill_level(capacity[name], used[name], w):
            continue  # stale entry: this link changed since it was pushed
        for flow in on_link[name]:
            if flow in rates:
                continue
            rates[flow] = level
            for other, mult in usage[flow].items():
                used[other] += level * mult
                weight[other] -= mult
                if other != name and weight[other] > 0:
                    new = max(level, _fill_level(capacity[other], used[other], weight[other]))
                    heapq.heappush(heap, (new, other))
        weight[name] = 0
    return rates


def _fill_level(cap: float, used: float, weight: int) -> float:
    """Rate at which the unfrozen flows on a link fill it."""
    return (cap - used) / weight


@dataclass(frozen=True)
class Transfer:
    """A completed transfer, for traces and accounting.

    Attributes
    ----------
    src, dst : str
        End points.
    tag : str
        Caller's label (e.g. ``"grad/it3"``).
    nbytes : int
        Payload bytes.
    wire_bytes : float
        Expected bytes on the wire (payload + overhead + retransmissions).
    start_s, end_s : float
        Simulated time of the send and of the last byte's arrival, s.
    path : list of str
        Names of the links crossed, in order.
    nodes : list of str
        Vertices along the route, both ends included.
    """

    src: str
    dst: str
    tag: str
    nbytes: int
    wire_bytes: float
    start_s: float
    end_s: float
    path: list[str]
    nodes: list[str]

    @property
    def duration_s(self) -> float:
        """``end_s - start_s``, s."""
        return self.end_s - self.start_s


@dataclass(frozen=True)
class FlowState:
    """Snapshot of an active flow: its current rate (bits/s) and wire bytes left."""

    src: str
    dst: str
    tag: str
    rate_bps: float
    remaining_bytes: float


class _Flow:
    __slots__ = (
        "id", "src", "dst", "tag", "nbytes", "wire", "remaining", "rate", "start", "delay",
        "usage", "path", "nodes", "event",
    )  # fmt: skip

    def __init__(self, **kw: object) -> None:
        for key, value in kw.items():
            setattr(self, key, value)


class Network:
    """A topology's links shared max-min fairly by the transfers in flight.

    Parameters
    ----------
    env : simpy.Environment
        The simulation's environment; the network schedules its own events in it.
    topology : Topology
        Nodes, links and routes.
    seed : int
        Seed of the jitter generator (``numpy.random.default_rng(seed)``).

    Attributes
    ----------
    transfers : list of Transfer
        Every completed transfer, in order of arrival.
    link_bytes : dict of str to float
        Wire bytes carried so far per link name (counted when a flow is drained; a link crossed
        twice counts twice).
    """

    def __init__(self, env: simpy.Environment, topology: Topology, seed: int = 0) -> None:
        self.env = env
        self.topology = topology
        self.seed = seed
        self._rng = np.random.default_rng(seed)
        self._capacity = {name: link.capacity_Bps for name, link in topology.links.items()}  # B/s
        self.link_bytes: dict[str, float] = {name: 0.0 for name in self._capacity}
        self.transfers: list[Transfer] = []
        self._active: dict[int, _Flow] = {}
        self._next_id = 0
        self._last = env.now  # s, time the flows' `remaining` refers to
        self._gen = 0  # generation of the pending completion timer
        self._update_pending = False

    # ------------------------------------------------------------------ public
    def send(self, src: str, dst: str, nbytes: int, tag: str = "") -> simpy.Event:
        """Start a transfer of ``nbytes`` payload bytes from ``src`` to ``dst``.

        Parameters
        ----------
        src, dst : str
            Vertices of the topology.
        nbytes : int
            Payload bytes, >= 0 (0 still costs one header-only packet).
        tag : str
            Label kept in the :class:`Transfer` record.

        Returns
        -------
        simpy.Event
            Fires when the last byte has arrived at ``dst``; its value is the :class:`Transfer`.
            A transfer from a vertex to itself arrives at once and costs nothing.
        """
        if isinstance(nbytes, bool) or not isinstance(nbytes, (int, np.integer)) or nbytes < 0:
            raise ConfigError(f"nbytes(={nbytes!r}) must be an integer >= 0")
        nbytes = int(nbytes)
        links = self.topology.route(src, dst)
        event = self.env.event()
        now = self.env.now
        if not links:
            record = Transfer(src, dst, tag, nbytes, 0.0, now, now, [], [src])
            self.transfers.append(record)
            event.succeed(record)
            return event
        fmt = path_format(links)
        wire = wire_bytes(
            nbytes, fmt.mtu, fmt.header_bytes, fmt.loss, fmt.framing_bytes, fmt.acks_per_packet
        )  # bytes
        delay = fmt.latency_s + retransmission_delay(
            nbytes, fmt.mtu, fmt.header_bytes, fmt.loss, 2.0 * fmt.latency_s
        )  # s
        for link in links:
            if link.jitter_s > 0:
                delay += float(self._rng.exponential(link.jitter_s))
        self._advance()
        flow = _Flow(
            id=self._next_id, src=src, dst=dst, tag=tag, nbytes=nbytes, wire=wire,
            remaining=wire, rate=0.0, start=now, delay=delay,
            usage=dict(Counter(link.name for link in links)),
            path=[link.name for link in links], nodes=self.topology.route_nodes(src, dst),
            event=event,
        )  # fmt: skip
        self._next_id += 1
        self._active[flow.id] = flow
        if not self._update_pending:
            self._update_pending = True
            self.env.timeout(0).callbacks.append(self._on_update)
        return event

    @property
    def active_flows(self) -> list[FlowState]:
        """Flows being drained now, with their current rates (bits/s) and remaining wire bytes."""
        self._advance()
        return [
            FlowState(f.src, f.dst, f.tag, f.rate * 8.0, f.remaining) for f in self._active.values()
        ]

    # ------------------------------------------------------------------ controller
    def _on_update(self, _event: simpy.Event) -> None:
        self._update_pending = False
        self._step()

    def _on_timer(self, event: simpy.Event) -> None:
        if event.value == self._gen:
            self._step()

    def _advance(self) -> None:
        """Drain every active flow at its rate from the last update to now."""
        now = self.env.now
        dt = now - self._last  # s
        if dt > 0:
            for f in self._active.values():
                f.remaining -= f.rate * dt
        self._last = now

    def _step(self) -> None:
        """Advance, finish drained flows, recompute rates, schedule the next completion."""
        self._advance()
        now = self.env.now
        done = [
            f
            for f in self._active.values()
            if f.rate > 0 and (f.remaining < DONE_BYTES or now + f.remaining / f.rate <= now)
        ]
        for f in done:
            del self._active[f.id]
            self._finish(f)
        self._gen += 1
        if not self._active:
            return
        rates = max_min_rates(self._capacity, {f.id: f.usage for f in self._active.values()})
        next_dt = float("inf")
        for f in self._active.values():
            f.rate = rates[f.id]  # bytes/s
            next_dt = min(next_dt, f.remaining / f.rate)
        self.env.timeout(max(next_dt, 0.0), value=self._gen).callbacks.append(self._on_timer)

    def _finish(self, f: _Flow) -> None:
        """Account a drained flow and deliver its event after the path's latency."""
        for name, mult in f.usage.items():
            self.link_bytes[name] += f.wire * mult
        now = self.env.now
        record = Transfer(
            f.src, f.dst, f.tag, f.nbytes, f.wire, f.start, now + f.delay, f.path, f.nodes
        )
        event = f.event

        def arrive(_e: simpy.Event | None = None) -> None:
            self.transfers.append(record)
            event.succeed(record)

        if f.delay > 0:
            self.env.timeout(f.delay).callbacks.append(arrive)
        else:
            arrive()
