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

With ``transport="tcp"`` each flow also has a congestion window (:mod:`aiotsim.network.tcp`): its
rate is capped at one window per round trip, the caps take part in progressive filling (one
extra link per capped flow), the controller also wakes at the round boundaries of window-limited
or lossy flows, loss is drawn per round instead of charged as one RTT per expected lost packet,
and the last packet pays its store-and-forward time on the path's non-bottleneck hops.

Engine: one controller inside :class:`Network` (SimPy callbacks, no process per flow) over
:class:`~aiotsim.network.rates.RateClasses`: flows grouped by the links they share with other
flows (a link crossed by one flow only is a per-flow cap, as is a TCP window), each group draining
its leveled flows by one virtual clock, capped flows timed on their own, completions, TCP round
ends and trace changes in heaps. A flow start asks for one zero-delay update (flows starting at
the same instant cost one re-leveling); the controller then finishes the flows drained now (in
slot order), reads the traced capacities and plans the TCP rounds due now (in slot order: the
order of the loss draws), re-levels only the groups touched and schedules a single timer at the
next event; a timer made stale by a later update is ignored (fired timers and the one update
event are re-armed, not made anew). A drained flow's caller's event is
itself scheduled at the arrival time (its record appended to :attr:`Network.transfers` by its
first callback), one SimPy event per arrival. An event costs O(log flows) per flow whose rate
class changes plus, for a touched component of groups, O(log groups) while a link all its groups
cross fills first (gateways behind a server link, see :mod:`aiotsim.network.components`) and
O(its groups) otherwise: not work over every flow in flight. Rates equal progressive filling
over all flows (:func:`progressive_filling`, kept as the reference) up to its 1e-12 tie tolerance.
Time lives in the network: callers only ``yield`` the event that :meth:`Network.send` returns.

Time-varying links (a :class:`~aiotsim.network.traces.RateTrace` on a link): capacities are
piecewise constant, so the controller also wakes at the next capacity change of every traced link
carrying a live flow, reads the new capacities and recomputes the rates; between two events every
rate is constant and flows still drain linearly, so a transfer ends exactly when the integral of
its rate reaches its bytes. Links with a Gilbert-Elliott ``loss_model`` get the number of lost
packets of each transfer sampled per packet (from a generator seeded by ``[seed, 0x6E55]``, apart
from the jitter's): the wire bytes grow by the lost packets and the delay by one RTT per loss.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from collections import deque
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import NamedTuple, TypeVar

import numpy as np
import simpy
from simpy.events import NORMAL

from aiotsim.errors import ConfigError
from aiotsim.network.flow_records import Flight, PathCost, TcpFlight
from aiotsim.network.flows_links import LinkVariation
from aiotsim.network.flows_tcp import TcpRounds
from aiotsim.network.maxmin import max_min_rates, progressive_filling
from aiotsim.network.overhead import (
    PathFormat,
    path_format,
    retransmission_delay,
    wire_bytes,
    wire_total,
)
from aiotsim.network.queues import QueueLinks
from aiotsim.network.rates import RateClasses
from aiotsim.network.tcp import Connection, LossSampler, TcpParams, transport_options
from aiotsim.network.topology import Topology
from aiotsim.network.traces import SNAP_S

K = TypeVar("K", bound=Hashable)
__all__ = ["FlowState", "Network", "Transfer", "max_min_rates", "progressive_filling", "transport_options"]

# A flow is finished when fewer than this many wire bytes remain (guards float rounding).
DONE_BYTES = 1e-9
TRANSPORTS = ("tcp", "ideal")
SHARINGS = ("fifo", "fair")  # how TCP flows share a bottleneck (see :mod:`aiotsim.network.queues`)


def _armed(env: simpy.Environment) -> simpy.Event:
    """An event that is triggered (ok, value None) but not scheduled: the controller schedules it
    with ``env.schedule``, exactly where ``env.timeout`` would put a new one, and re-arms it after
    it fired (SimPy sets its callbacks to None then)."""
    event = simpy.Event(env)
    event._ok, event._value = True, None
    return event


def _checked_bytes(nbytes: object) -> int:
    """A payload size (bytes) as an int; ConfigError unless an integer >= 0 (bool refused)."""
    if type(nbytes) is int and nbytes >= 0:  # the usual case
        return nbytes
    if isinstance(nbytes, bool) or not isinstance(nbytes, (int, np.integer)) or nbytes < 0:
        raise ConfigError(f"nbytes(={nbytes!r}) must be an integer >= 0")
    return int(nbytes)


class Transfer(NamedTuple):
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

    Notes
    -----
    ``path`` and ``nodes`` are the network's lists for the (src, dst) pair, shared by every record
    of that pair (no copy per transfer): read them, do not modify them. A named tuple, not a
    dataclass: a record is made per flow and kept (by :attr:`Network.transfers` and the run's
    trace) for the whole run, and a tuple is made in a third of a frozen dataclass's time (0.8
    against 2.3 us, which sets each field through ``object.__setattr__``) and is smaller (232
    against 264 bytes with its numbers; a 10,000-node run of 20 iterations keeps 400,000).
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


class Network(TcpRounds, LinkVariation):
    """A topology's links shared max-min fairly by the transfers in flight.

    Parameters
    ----------
    env : simpy.Environment
        The simulation's environment; the network schedules its own events in it.
    topology : Topology
        Nodes, links and routes.
    seed : int
        Seed of the jitter generator (``numpy.random.default_rng(seed)``) and of the TCP loss
        draws (:class:`~aiotsim.network.tcp.LossSampler`).
    transport : str
        ``"ideal"``: the fluid model alone (a flow gets its fair share from its first byte, loss
        costs expected extra bytes and one RTT per lost packet); ``"tcp"``: congestion windows on
        top of it (:mod:`aiotsim.network.tcp`).
    tcp : TcpParams, optional
        TCP settings (default :class:`TcpParams()`), used with ``transport="tcp"``.
    keep_records : bool
        Keep every transfer's record in :attr:`transfers` (default). A simulation whose caller keeps
        the records it needs (the run's trace) passes False: 232 bytes a flow less for the whole run.
    sharing : str
        Under TCP, how flows share a bottleneck: ``"fair"`` (default), a per-flow fair queue:
        max-min shares and no shared backlog (the model the ns-3 calibration validates);
        ``"fifo"``, one drop-tail queue per link of ``Link.queue_packets``: windows stand in it,
        every round trip through it includes its delay, flows share it by window and RTT and lose
        what overflows it (:mod:`aiotsim.network.queues`; not yet closer to ns-3 than ``"fair"``
        in every class, see ``docs/CALIBRATION.md``). Ignored under ``transport="ideal"``.

    Attributes
    ----------
    transfers : list of Transfer
        Every completed transfer, in order of arrival (empty with ``keep_records=False``).
    link_bytes : dict of str to float
        Wire bytes carried so far per link name (counted when a flow is drained; a link crossed
        twice counts twice).

    Notes
    -----
    Flows in flight are numbered by *slots* (reused lowest first, so flows finishing at one instant
    are delivered in slot order); their rates and bytes left live in a
    :class:`~aiotsim.network.rates.RateClasses`, so an event costs O(log flows) per flow whose rate
    class changes, not work over every flow in flight.
    """

    def __init__(
        self,
        env: simpy.Environment,
        topology: Topology,
        seed: int = 0,
        transport: str = "ideal",
        tcp: TcpParams | None = None,
        keep_records: bool = True,
        sharing: str = "fair",
    ) -> None:
        if transport not in TRANSPORTS:
            raise ConfigError(f"transport(={transport!r}) must be one of {', '.join(TRANSPORTS)}")
        if sharing not in SHARINGS:
            raise ConfigError(f"sharing(={sharing!r}) must be one of {', '.join(SHARINGS)}")
        self.sharing = sharing
        self.env = env
        self.transport = transport
        self._tcp_on = transport == "tcp"  # read at every step
        self.tcp = tcp or TcpParams()
        self._loss = LossSampler(seed)
        self._conns: dict[tuple[str, str], Connection] = {}  # TCP state per (src, dst)
        self.topology = topology
        self.seed = seed
        self._rng = np.random.default_rng(seed)
        all_links = topology.links
        self._link_names = list(all_links)
        self._link_index = {name: i for i, name in enumerate(self._link_names)}
        # bytes/s per link, plus a dummy link of infinite capacity (kept for indexing by path)
        self._cap = np.array([all_links[n].capacity_Bps for n in self._link_names] + [np.inf])
        # [links + 1] bytes/s; traced links: their nominal (mean) rate (Python floats: read per pair)
        self._nominal = self._cap.tolist()
        self._rates = RateClasses(self._cap[:-1].tolist(), report_near=transport == "tcp")
        # drop-tail queues under TCP windows (None: no shared backlog, the per-flow fair queue)
        buffers = [all_links[n].buffer_bytes for n in self._link_names]
        fifo = transport == "tcp" and sharing == "fifo"  # none at Graph.unqueued_links
        unqueued = [self._link_index[n] for n in topology.unqueued_links()] if fifo else []
        self._queues = QueueLinks(self._cap[:-1].tolist(), buffers, unqueued) if fifo else None
        self._overflow_rng = np.random.default_rng([seed, 0xF1F0])  # fifo: a first retransmission's fate
        self._carried = np.zeros(len(self._link_names) + 1)  # wire bytes per link (change in place only)
        self._carried_mv = memoryview(self._carried)  # the same buffer: Python float adds, no numpy scalars
        self.transfers: list[Transfer] = []
        self._keep = keep_records
        self._paths: dict[tuple[str, str], PathCost] = {}
        self._flows: list[Flight | None] = []  # by slot
        self._free: list[int] = []
        self._tcp_flows: list[TcpFlight | None] = []  # by slot
        self._rounds: list[tuple[float, int, int, TcpFlight]] = []  # (round end s, slot, seq, flow)
        self._seq = 0
        # (round end s, slot, 0, flow) of first rounds due now (a reused connection): heap entries
        # that need no heap, all due at the next step
        self._starting: list[tuple[float, int, int, TcpFlight]] = []
        self._paced: dict[int, None] = {}  # slots of TCP flows on traced paths
        self._timer: simpy.Event | None = None  # the pending controller timer (others in the queue are stale)
        self._spare: list[simpy.Event] = []  # fired timers, re-armed instead of new ones
        self._update = _armed(env)  # the zero-delay update after sends, re-armed for each instant
        # callback lists of the timers and of the update: SimPy only reads them, so one list each
        self._timer_callbacks = [self._on_timer]
        self._update_callbacks = [self._on_update]
        self._update_pending = False
        self._init_time_varying(all_links)

    # ------------------------------------------------------------------ public
    @property
    def link_bytes(self) -> dict[str, float]:
        """Wire bytes carried so far per link name."""
        return {name: float(self._carried[i]) for i, name in enumerate(self._link_names)}

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
        nbytes = _checked_bytes(nbytes)
        path = self._paths.get((src, dst)) or self._path(src, dst)
        env = self.env
        event = simpy.Event(env)
        now = env.now
        if not path.links:
            record = Transfer(src, dst, tag, nbytes, 0.0, now, now, [], [src])
            if self._keep:
                self.transfers.append(record)
            event.succeed(record)
            return event
        fmt = path.fmt
        wire = self._wire(path, nbytes)
        delay = fmt.latency_s  # s
        if fmt.loss > 0 and self.transport == "ideal":  # TCP draws its losses round by round
            delay += retransmission_delay(nbytes, fmt.mtu, fmt.header_bytes, fmt.loss, 2.0 * fmt.latency_s)
        if path.bursty:  # Gilbert-Elliott links: this transfer's own losses instead of the expectation
            wire, sampled_delay = self._take_sampled_loss(src, dst, path, nbytes)
            if self.transport == "ideal":  # TCP's rounds time the recovery of their own draws
                delay = sampled_delay
        for jitter in path.jitters:  # one draw per link with jitter, in path order
            delay += float(self._rng.exponential(jitter))
        slot = self._free.pop() if self._free else self._slot()
        self._flows[slot] = Flight(src, dst, tag, nbytes, wire, now, delay, path, event)
        self._rates.add_exact(slot, path.links_t, path.mults_t, wire, math.inf, now)
        for i in path.traced_t:  # a traced link's capacity is read again when it carries a flow
            if self._rates.users[i] == 1:
                heapq.heappush(self._due_heap, (float(self._due[i]), i))
        if self._tcp_on:
            self._tcp_start(slot, src, dst, path, wire, now)
        if not self._update_pending:
            self._request_update()
        return event

    def cancel(self, event: simpy.Event) -> Transfer | None:
        """Stop a transfer whose sender is gone (a node that drops off mid-upload): the bytes not
        yet drained never cross the network, so the flows sharing its links speed up from now.

        Parameters
        ----------
        event : simpy.Event
            What :meth:`send` returned.

        Returns
        -------
        Transfer or None
            What was carried (``wire_bytes``: the wire bytes drained so far, ``end_s``: now; the
            links' :attr:`link_bytes` count them, :attr:`transfers` does not list it), or None
            when nothing is left to stop: its last byte has left the sender (it still arrives)
            or it has arrived. A stopped transfer's event never fires. Under TCP its connection
            dies with it: the pair's next transfer opens a new one (handshake, initial window).

        Notes
        -----
        A pass over the slots in flight: cancelling is rare, so the per-flow path stays as it is.
        """
        if event.triggered:
            return None
        slot = next((k for k, f in enumerate(self._flows) if f is not None and f.event is event), None)
        if slot is None:
            return None
        f = self._flows[slot]
        assert f is not None
        now = self.env.now
        sent = min(max(f.wire - self._rates.remaining(slot, now), 0.0), f.wire)  # wire bytes drained
        self._rates.remove(slot, now)
        self._flows[slot] = None
        self._paced.pop(slot, None)
        self._free.append(slot)
        t = self._tcp_flows[slot]
        if t is not None:
            self._tcp_flows[slot] = None
            if self._queues is not None:
                self._queues.leave(slot)
            t.conn.busy = False
            if self._conns.get((f.src, f.dst)) is t.conn:  # a reset connection is not reused
                del self._conns[(f.src, f.dst)]
        for i, m in zip(f.path.links_t, f.path.mults_t, strict=True):
            self._carried_mv[i] += sent * m
        if not self._update_pending:  # re-level the flows it shared links with, now
            self._request_update()
        return Transfer(f.src, f.dst, f.tag, f.nbytes, sent, f.start, now, f.path.names, f.path.nodes)

    def _request_update(self) -> None:
        """Schedule the controller's step at this instant (as env.timeout(0): the same queue entry,
        one re-armed object for all the changes of an instant)."""
        self._update_pending = True
        self._update.callbacks = self._update_callbacks
        self.env.schedule(self._update, NORMAL, 0.0)

    def tcp_state(self) -> dict[str, object]:
        """What a checkpoint must keep of the TCP transport at a quiescent point (no flow in
        flight): each connection's window state and the loss generators' states."""
        conns = {f"{src}\x00{dst}": dataclasses.asdict(c) for (src, dst), c in self._conns.items()}
        return {"conns": conns, "loss_rng": self._loss.state, "overflow_rng": self._overflow_rng.bit_generator.state}

    def restore_tcp_state(self, state: Mapping[str, object] | None) -> None:
        """Restore :meth:`tcp_state` (None: a checkpoint from before the TCP transport, kept as is)."""
        if not state:
            return
        conns = state["conns"]
        assert isinstance(conns, dict)
        self._conns = {tuple(k.split("\x00", 1)): Connection(**v) for k, v in conns.items()}  # type: ignore[misc]
        self._loss.state = state["loss_rng"]
        self._overflow_rng.bit_generator.state = state["overflow_rng"]

    def slot_state(self) -> dict[str, object]:
        """What a checkpoint must keep of the slot bookkeeping at a quiescent point (no flow in
        flight): how many slots exist and the order free slots are handed out in. Flows that
        finish at one instant finish in slot order, and slots are reused last-freed first, so a
        resumed run that handed out fresh slots would break ties differently from the run it
        continues."""
        return {"n": len(self._flows), "free": list(self._free)}

    def restore_slot_state(self, state: Mapping[str, object] | None) -> None:
        """Restore :meth:`slot_state` (None: a checkpoint from before it, kept as is)."""
        if not state:
            return
        n, free = state["n"], state["free"]
        assert isinstance(n, int) and isinstance(free, list)
        self._flows = [None] * n
        self._tcp_flows = [None] * n
        self._free = [int(x) for x in free]

    def wire_bytes_for(self, src: str, dst: str, nbytes: int) -> float:
        """Wire bytes a transfer of ``nbytes`` from ``src`` to ``dst`` would put on its path
        (the same figure :meth:`send` charges), without sending anything. On a path with
        Gilbert-Elliott links this samples the losses of the next :meth:`send` of the same
        ``(src, dst, nbytes)`` (kept for it, first in first out), so both see the same bytes."""
        nbytes = _checked_bytes(nbytes)
        path = self._paths.get((src, dst)) or self._path(src, dst)  # computed once per pair, as in send
        if not path.links:
            return 0.0
        if path.bursty:
            sample = self._sampled_loss(path, nbytes)
            self._presampled.setdefault((src, dst, nbytes), deque()).append(sample)
            return sample[0]
        return self._wire(path, nbytes)

    @property
    def active_flows(self) -> list[FlowState]:
        """Flows being drained now, with their current rates (bits/s) and remaining wire bytes."""
        now, out = self.env.now, []
        for slot, f in enumerate(self._flows):
            if f is not None:
                rate, rem = self._rates.rate(slot), self._rates.remaining(slot, now)
                out.append(FlowState(f.src, f.dst, f.tag, rate * 8.0, rem))
        return out

    # ------------------------------------------------------------------ controller
    def _path(self, src: str, dst: str) -> PathCost:
        """The path of a (src, dst) pair and what it costs, computed once per pair (plain loops,
        not generators: a 10,000-node fleet builds 20,000 of them)."""
        links, nodes = self.topology.route_with_nodes(src, dst)
        names = [link.name for link in links]
        counts: dict[str, int] = {}  # link name -> times crossed, in order of first crossing
        for name in names:
            counts[name] = counts.get(name, 0) + 1
        link_index, cap = self._link_index, self._nominal  # cap: a traced link's nominal (mean) rate
        index, mults = [], []
        bottleneck = math.inf  # bytes/s, smallest capacity / times crossed (the first of equals, as min())
        for name, c in counts.items():
            i = link_index[name]
            index.append(i)
            mults.append(float(c))
            bottleneck = min(bottleneck, cap[i] / c)
        fmt = path_format(links) if links else PathFormat(1, 0, 0, 0.0, 0.0, 0.0)
        valid = fmt.mtu > fmt.header_bytes and 0.0 <= fmt.loss < 1.0  # else wire_bytes raises at send
        path = PathCost(
            links, names, nodes, fmt, bottleneck, sum([1.0 / link.capacity_Bps for link in links]),
            links_t=tuple(index),
            mults_t=tuple(mults),
            seg=fmt.mtu - fmt.header_bytes if valid else 0,
            per_packet=fmt.header_bytes + fmt.framing_bytes,
            ack_factor=1.0 + fmt.acks_per_packet,
            keep=1.0 - fmt.loss,
        )  # fmt: skip
        if not self._plain.issuperset(index):  # loss models, traces, jitter: the usual path has none
            path.bursty = tuple(link.loss_model for link in links if link.loss_model is not None)
            path.traced = any(link.trace is not None and link.trace.rates.size > 1 for link in links)
            path.jitters = tuple(link.jitter_s for link in links if link.jitter_s > 0)
            path.traced_t = tuple(i for i in index if self._is_traced[i])
        self._paths[(src, dst)] = path
        return path

    @staticmethod
    def _wire(path: PathCost, nbytes: int) -> float:
        """Wire bytes of ``nbytes`` payload on ``path``: :func:`overhead.wire_bytes` on the path's
        constants (its checks passed once, at the path), or wire_bytes itself where they failed
        (it says why)."""
        if path.seg > 0:
            return wire_total(nbytes, path.seg, path.per_packet, path.ack_factor, path.keep)
        fmt = path.fmt
        return wire_bytes(nbytes, fmt.mtu, fmt.header_bytes, fmt.loss, fmt.framing_bytes, fmt.acks_per_packet)

    def _slot(self) -> int:
        """A free slot, lowest first (the slot list grows by doubling, as the arrays once did)."""
        if not self._free:
            old = len(self._flows)
            new = max(8, 2 * old)
            self._flows.extend([None] * (new - old))
            self._tcp_flows.extend([None] * (new - old))
            self._free.extend(range(new - 1, old - 1, -1))
        return self._free.pop()

    def _on_update(self, _event: simpy.Event) -> None:
        self._update_pending = False
        self._step()

    def _on_timer(self, event: simpy.Event) -> None:
        self._spare.append(event)  # fired: it may be re-armed (even by the step it runs)
        if event is self._timer:
            self._step()

    def _step(self) -> None:
        """Finish the drained flows, apply capacity changes and TCP rounds due now, re-level the
        rate classes that changed, schedule one timer at the next event."""
        now = self.env.now
        traced = bool(self._traces)
        # due() moves the groups' clocks to now. Done: under DONE_BYTES left, or so little that no
        # float time step can drain it; on a traced path a rounding residue must not wait out a
        # zero-rate gap of a trace
        done = self._rates.due(now, DONE_BYTES, SNAP_S if traced else -math.inf)
        if len(done) > 1:
            done.sort()  # slot order
        for slot in done:
            self._finish(slot)
        self._timer = None  # a timer still in the queue is stale now
        if not self._rates.flows:
            return
        if traced:
            self._refresh_capacity(now)
        tcp = self._tcp_on
        planned = self._tcp_rounds(now) if tcp else []
        if tcp and traced:
            self._pace_traced(now)
        if self._queues is not None:
            self._reprice(now)
        touched = self._rates.solve(now)
        if tcp:
            self._tcp_settle(touched + planned, now)
        next_dt = self._next_event_s(now) - now  # s
        # as env.timeout(max(next_dt, 0)): the same queue entry, on a fired timer re-armed
        timer = self._spare.pop() if self._spare else _armed(self.env)
        timer.callbacks = self._timer_callbacks
        self._timer = timer
        self.env.schedule(timer, NORMAL, max(next_dt, 0.0))

    def _next_event_s(self, now: float) -> float:
        """Time (s) of the next event: a completion, the end of a TCP round of a window-limited
        flow, or a capacity change of a traced link in use (a flow on a link at capacity 0, or a
        TCP flow waiting out a handshake or timeout, has no completion of its own)."""
        at = self._rates.next_finish(now)
        while self._rounds and not self._round_valid(self._rounds[0]):
            heapq.heappop(self._rounds)
        if self._rounds:
            at = min(at, self._rounds[0][0])
        while self._due_heap and not self._due_valid(self._due_heap[0]):
            heapq.heappop(self._due_heap)
        if self._due_heap:
            at = min(at, self._due_heap[0][0])
        return at

    def _finish(self, slot: int) -> None:
        """Free a drained flow's slot, account its bytes, deliver its event after its delay."""
        f = self._flows[slot]
        assert f is not None
        now = self.env.now
        self._rates.remove(slot, now)
        self._flows[slot] = None
        if self._paced:
            self._paced.pop(slot, None)
        self._free.append(slot)
        delay = f.delay
        t = self._tcp_flows[slot]
        if t is not None:
            self._tcp_flows[slot] = None
            t.conn.busy, t.conn.last_active_s = False, now
            delay += t.extra_delay  # a FIFO share is the bottleneck's service: no queue wait after it
            if self._queues is not None:
                self._queues.leave(slot)
        carried, wire = self._carried_mv, f.wire
        for i, m in zip(f.path.links_t, f.path.mults_t):  # a few hops, equal lengths (_path): no numpy call
            carried[i] += wire * m
        record = Transfer(f.src, f.dst, f.tag, f.nbytes, f.wire, f.start, now + delay, f.path.names, f.path.nodes)
        event = f.event
        if delay > 0:  # the caller's event itself fires at arrival: one event, not a timer and a succeed
            event._ok, event._value = True, record
            if self._keep:
                event.callbacks.insert(0, self._deliver)  # before its waiters
            self.env.schedule(event, NORMAL, delay)
        else:
            if self._keep:
                self.transfers.append(record)
            event.succeed(record)

    def _deliver(self, event: simpy.Event) -> None:
        """First callback of an arriving transfer's event: its record joins :attr:`transfers`."""
        self.transfers.append(event._value)
