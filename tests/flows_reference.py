"""TEST REFERENCE ONLY: the vectorized flow engine as it was before network/rates.py (progressive
filling over every flow in flight at every event), kept verbatim so that tests/test_flows_engine.py
can compare whole runs of the incremental engine against it. Not part of the product.

Flows: transfers that share links max-min fairly, as a fluid (no packets, no per-byte events).

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

Engine: one controller inside :class:`Network` (SimPy callbacks, no process per flow) keeps the
active flows in a dict. A flow start asks for one zero-delay update (so flows starting at the same
instant cost one recomputation); the controller then advances every flow to now, finishes the
drained ones, recomputes the rates (O(sum of path lengths x log links)) and schedules a single
timer at the next completion; a timer made stale by a later recomputation is ignored. Time lives in
the network: callers only ``yield`` the event that :meth:`Network.send` returns.

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
import math
from collections import Counter, deque
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import simpy

from aiotsim.errors import ConfigError
from aiotsim.network.flows import FlowState, Transfer, progressive_filling
from aiotsim.network.link import Link
from aiotsim.network.overhead import PathFormat, packets, path_format, retransmission_delay, wire_bytes
from aiotsim.network.tcp import (
    Connection,
    LossSampler,
    TcpParams,
    handshake_s,
    plan_round,
)
from aiotsim.network.tcp_window import restart_window
from aiotsim.network.topology import Topology
from aiotsim.network.traces import SNAP_S, GilbertElliott, retransmitted_packets

__all__ = ["Network"]

# A flow is finished when fewer than this many wire bytes remain (guards float rounding).
DONE_BYTES = 1e-9
TRANSPORTS = ("tcp", "ideal")
ROUND_EPS_S = 1e-9  # s; a round boundary this close to now is due (float rounding of timers)


@dataclass(frozen=True)
class _Path:
    """What a (src, dst) pair costs, computed once per pair."""

    links: list[Link]
    names: list[str]  # link names crossed, in order
    nodes: list[str]  # vertices, both ends included
    index: np.ndarray  # [hops] distinct link indices
    mult: np.ndarray  # [hops] times each is crossed
    fmt: PathFormat
    bottleneck_Bps: float  # smallest capacity / times crossed along the path, bytes/s
    inv_cap_sum: float  # s/byte: sum over the path's hops of 1 / capacity (store and forward)
    bursty: tuple[GilbertElliott, ...] = ()  # loss models sampled per transfer (empty: expected loss)
    traced: bool = False  # a link of the path has a bandwidth trace that varies


@dataclass
class _TcpFlow:
    """TCP state of one flow in flight (see :mod:`aiotsim.network.tcp`)."""

    conn: Connection
    rtt: float  # s, twice the path's one-way latency
    seg_wire: float  # wire bytes of one full segment (MTU + framing + its ACK charge)
    bdp: float  # segments, bottleneck rate x RTT
    max_window: float  # segments, the socket buffer
    loss: float  # end-to-end packet loss probability
    extra_delay: float = 0.0  # s, loss recovery of the last round
    bursty: tuple[GilbertElliott, ...] = ()  # Gilbert-Elliott links of the path (their losses too)
    traced: bool = False  # on a traced path the window is a byte budget per round (see _pace_traced)
    budget: float = 0.0  # wire bytes the window allows in the current round
    rem0: float = 0.0  # wire bytes left when the current round began


@dataclass
class _Flow:
    """Bookkeeping of one flow in flight; its remaining bytes and rate live in the slot arrays."""

    src: str
    dst: str
    tag: str
    nbytes: int
    wire: float  # bytes
    start: float  # s
    delay: float  # s, latency + loss recovery + jitter after the last byte is drained
    path: _Path
    event: simpy.Event


class Network:
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

    Attributes
    ----------
    transfers : list of Transfer
        Every completed transfer, in order of arrival.
    link_bytes : dict of str to float
        Wire bytes carried so far per link name (counted when a flow is drained; a link crossed
        twice counts twice).

    Notes
    -----
    Flows in flight occupy *slots* of a few arrays (remaining wire bytes, rate, the links of the
    path), so draining, finding finished flows and progressive filling are vectorized: one event
    costs a handful of numpy calls over the flows in flight, not Python loops over them.
    """

    def __init__(
        self,
        env: simpy.Environment,
        topology: Topology,
        seed: int = 0,
        transport: str = "ideal",
        tcp: TcpParams | None = None,
    ) -> None:
        if transport not in TRANSPORTS:
            raise ConfigError(f"transport(={transport!r}) must be one of {', '.join(TRANSPORTS)}")
        self.env = env
        self.transport = transport
        self.tcp = tcp or TcpParams()
        self._loss = LossSampler(seed)
        self._conns: dict[tuple[str, str], Connection] = {}  # TCP state per (src, dst)
        self.topology = topology
        self.seed = seed
        self._rng = np.random.default_rng(seed)
        all_links = topology.links
        self._link_names = list(all_links)
        self._link_index = {name: i for i, name in enumerate(self._link_names)}
        # bytes/s per link, plus a dummy link of infinite capacity that pads short paths
        self._cap = np.array([all_links[n].capacity_Bps for n in self._link_names] + [np.inf])
        self._carried = np.zeros(len(self._link_names) + 1)  # wire bytes per link
        self.transfers: list[Transfer] = []
        self._paths: dict[tuple[str, str], _Path] = {}
        # slot arrays: [slots] and [slots, hops]
        self._flows: list[_Flow | None] = []
        self._free: list[int] = []
        self._remaining = np.zeros(0)  # wire bytes left
        self._rate = np.zeros(0)  # bytes/s (0 until the next recomputation)
        self._alive = np.zeros(0, dtype=bool)
        self._hops = np.zeros((0, 1), dtype=np.intp)
        self._mult = np.zeros((0, 1))
        self._flow_cap = np.zeros(0)  # bytes/s, TCP window cap (inf: none; 0: waiting)
        self._round_end = np.zeros(0)  # s, next round boundary of a window-limited flow (inf: none)
        self._tcp_flows: list[_TcpFlow | None] = []
        self._last = env.now  # s, time `_remaining` refers to
        self._gen = 0  # generation of the pending completion timer
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
        if isinstance(nbytes, bool) or not isinstance(nbytes, (int, np.integer)) or nbytes < 0:
            raise ConfigError(f"nbytes(={nbytes!r}) must be an integer >= 0")
        nbytes = int(nbytes)
        path = self._path(src, dst)
        event = self.env.event()
        now = self.env.now
        if not path.links:
            record = Transfer(src, dst, tag, nbytes, 0.0, now, now, [], [src])
            self.transfers.append(record)
            event.succeed(record)
            return event
        fmt = path.fmt
        wire = wire_bytes(nbytes, fmt.mtu, fmt.header_bytes, fmt.loss, fmt.framing_bytes, fmt.acks_per_packet)  # bytes
        delay = fmt.latency_s  # s
        if fmt.loss > 0 and self.transport == "ideal":  # TCP draws its losses round by round
            delay += retransmission_delay(nbytes, fmt.mtu, fmt.header_bytes, fmt.loss, 2.0 * fmt.latency_s)
        if path.bursty:  # Gilbert-Elliott links: this transfer's own losses instead of the expectation
            wire, sampled_delay = self._take_sampled_loss(src, dst, path, nbytes)
            if self.transport == "ideal":  # TCP's rounds time the recovery of their own draws
                delay = sampled_delay
        for link in path.links:
            if link.jitter_s > 0:
                delay += float(self._rng.exponential(link.jitter_s))
        self._advance()
        slot = self._slot(len(path.index))
        self._flows[slot] = _Flow(src, dst, tag, nbytes, wire, now, delay, path, event)
        self._remaining[slot] = wire
        self._rate[slot] = 0.0
        self._alive[slot] = True
        self._hops[slot] = len(self._link_names)  # dummy padding
        self._mult[slot] = 0.0
        self._hops[slot, : len(path.index)] = path.index
        self._mult[slot, : len(path.index)] = path.mult
        self._flow_cap[slot] = np.inf
        self._round_end[slot] = np.inf
        if self.transport == "tcp":
            self._tcp_start(slot, src, dst, path, now)
        if not self._update_pending:
            self._update_pending = True
            self.env.timeout(0).callbacks.append(self._on_update)
        return event

    def tcp_state(self) -> dict[str, object]:
        """What a checkpoint must keep of the TCP transport at a quiescent point (no flow in
        flight): each connection's window state and the loss generator's state."""
        conns = {f"{src}\x00{dst}": dataclasses.asdict(c) for (src, dst), c in self._conns.items()}
        return {"conns": conns, "loss_rng": self._loss.state}

    def restore_tcp_state(self, state: Mapping[str, object] | None) -> None:
        """Restore :meth:`tcp_state` (None: a checkpoint from before the TCP transport, kept as is)."""
        if not state:
            return
        conns = state["conns"]
        assert isinstance(conns, dict)
        self._conns = {tuple(k.split("\x00", 1)): Connection(**v) for k, v in conns.items()}  # type: ignore[misc]
        self._loss.state = state["loss_rng"]

    def wire_bytes_for(self, src: str, dst: str, nbytes: int) -> float:
        """Wire bytes a transfer of ``nbytes`` from ``src`` to ``dst`` would put on its path
        (the same figure :meth:`send` charges), without sending anything. On a path with
        Gilbert-Elliott links this samples the losses of the next :meth:`send` of the same
        ``(src, dst, nbytes)`` (kept for it, first in first out), so both see the same bytes."""
        path = self._path(src, dst)
        if not path.links:
            return 0.0
        if path.bursty:
            sample = self._sampled_loss(path, nbytes)
            self._presampled.setdefault((src, dst, nbytes), deque()).append(sample)
            return sample[0]
        fmt = path.fmt
        return wire_bytes(nbytes, fmt.mtu, fmt.header_bytes, fmt.loss, fmt.framing_bytes, fmt.acks_per_packet)

    @property
    def active_flows(self) -> list[FlowState]:
        """Flows being drained now, with their current rates (bits/s) and remaining wire bytes."""
        self._advance()
        out = []
        for slot in np.flatnonzero(self._alive):
            f = self._flows[slot]
            assert f is not None
            out.append(
                FlowState(f.src, f.dst, f.tag, float(self._rate[slot]) * 8.0,
                          float(self._remaining[slot]))
            )  # fmt: skip
        return out

    # ------------------------------------------------------------------ controller
    def _path(self, src: str, dst: str) -> _Path:
        key = (src, dst)
        path = self._paths.get(key)
        if path is None:
            links = self.topology.route(src, dst)
            counts = Counter(link.name for link in links)
            path = _Path(
                links=links,
                names=[link.name for link in links],
                nodes=self.topology.route_nodes(src, dst),
                index=np.array([self._link_index[n] for n in counts], dtype=np.intp),
                mult=np.array(list(counts.values()), dtype=float),
                fmt=path_format(links) if links else PathFormat(1, 0, 0, 0.0, 0.0, 0.0),
                # nominal rates (a traced link's mean), as the engine under test: not the trace's rate of the moment
                bottleneck_Bps=min((link.capacity_Bps / counts[link.name] for link in links), default=np.inf),
                inv_cap_sum=sum(1.0 / link.capacity_Bps for link in links),
                bursty=tuple(link.loss_model for link in links if link.loss_model is not None),
                traced=any(link.trace is not None and link.trace.rates.size > 1 for link in links),
            )
            self._paths[key] = path
        return path

    def _slot(self, hops: int) -> int:
        """A free slot with room for ``hops`` distinct links (arrays grow by doubling)."""
        if hops > self._hops.shape[1]:
            pad = hops - self._hops.shape[1]
            dummy = len(self._link_names)
            self._hops = np.hstack([self._hops, np.full((len(self._flows), pad), dummy, np.intp)])
            self._mult = np.hstack([self._mult, np.zeros((len(self._flows), pad))])
        if not self._free:
            old = len(self._flows)
            new = max(8, 2 * old)
            self._flows.extend([None] * (new - old))
            self._free.extend(range(new - 1, old - 1, -1))
            grow = new - old
            self._remaining = np.append(self._remaining, np.zeros(grow))
            self._rate = np.append(self._rate, np.zeros(grow))
            self._alive = np.append(self._alive, np.zeros(grow, dtype=bool))
            self._flow_cap = np.append(self._flow_cap, np.full(grow, np.inf))
            self._round_end = np.append(self._round_end, np.full(grow, np.inf))
            self._tcp_flows.extend([None] * grow)
            dummy = len(self._link_names)
            pad_rows = np.full((grow, self._hops.shape[1]), dummy, np.intp)
            self._hops = np.vstack([self._hops, pad_rows])
            self._mult = np.vstack([self._mult, np.zeros((grow, self._mult.shape[1]))])
        return self._free.pop()

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
            self._remaining -= self._rate * dt  # dead slots have rate 0
        self._last = now

    def _step(self) -> None:
        """Advance, finish drained flows, recompute rates, schedule the next completion."""
        self._advance()
        now = self.env.now
        live = np.flatnonzero(self._alive)
        rate, rem = self._rate[live], self._remaining[live]
        started = rate > 0  # a flow added since the last step has no rate yet
        # finished: under DONE_BYTES left, or so little that no float time step can drain it
        eta = np.divide(rem, rate, out=np.full(live.size, np.inf), where=started)  # s
        done = started & ((rem < DONE_BYTES) | (now + eta <= now))
        if self._traces:  # a rounding residue must not wait out a zero-rate gap of a trace
            done |= started & (eta <= SNAP_S)
        if done.any():
            for slot in live[done]:
                self._finish(int(slot))
            live = live[~done]
        self._gen += 1
        if live.size == 0:
            return
        tcp = self.transport == "tcp"
        if self._traces:
            self._refresh_capacity(live)
        if tcp:
            self._tcp_rounds(live, now)
            if self._traces:
                self._pace_traced(live, now)
        rates = self._fill(live)
        self._rate[live] = rates
        if tcp:
            self._tcp_settle(live, rates, now)
        next_dt = self._next_event_dt(live, rates, now)  # s
        self.env.timeout(max(next_dt, 0.0), value=self._gen).callbacks.append(self._on_timer)

    def _fill(self, live: np.ndarray) -> np.ndarray:
        """Max-min fair rates (bytes/s) of the flows in ``live`` slots, TCP window caps included.

        The links the live flows cross are first renumbered 0..k-1 (k <= sum of their path
        lengths), so the cost scales with the flows in flight, not with the topology's size. A
        TCP window cap is one more link of the flow's own; a flow waiting (cap 0) gets rate 0.
        """
        hops = self._hops[live]  # [flows, hops] global link indices (dummy padding included)
        used, compact = np.unique(hops, return_inverse=True)
        links = compact.reshape(hops.shape)
        cap = self._cap[used]  # [k] bytes/s; the dummy (if present) keeps its infinite capacity
        if self.transport == "ideal":
            return progressive_filling(cap, links, self._mult[live])
        fcap = self._flow_cap[live]  # [flows] bytes/s
        rates = np.zeros(live.size)
        run = fcap > 0
        if run.any():
            own = len(used) + np.arange(int(run.sum()))[:, None]  # [running, 1] a cap link each
            rates[run] = progressive_filling(
                np.append(cap, fcap[run]),
                np.hstack([links[run], own]),
                np.hstack([self._mult[live][run], np.ones((own.shape[0], 1))]),
            )
        return rates

    # ------------------------------------------------------------------ TCP
    def _tcp_start(self, slot: int, src: str, dst: str, path: _Path, now: float) -> None:
        """Attach TCP state to a new flow: its connection (fresh or reused, idle restart), and a
        handshake round trip when the connection is new."""
        p, fmt = self.tcp, path.fmt
        rtt = 2.0 * fmt.latency_s  # s
        if rtt <= 0:
            return  # no round trip: the window never limits, the fluid model is exact
        seg_wire = fmt.mtu + fmt.framing_bytes + (fmt.header_bytes + fmt.framing_bytes) * fmt.acks_per_packet
        conn = self._conns.get((src, dst))
        fresh = conn is None or conn.busy or p.connection == "per-transfer"
        if fresh:
            conn = Connection(cwnd=float(p.initial_window), last_active_s=now)
            if (src, dst) not in self._conns or p.connection == "per-transfer":
                self._conns[(src, dst)] = conn
        elif p.idle_restart:
            restart_window(conn, now - conn.last_active_s, p.rto(rtt), float(p.initial_window))
        assert conn is not None
        conn.busy = True
        # store and forward: the last packet is also serialized on every hop but the bottleneck,
        # whose time the fluid drain already counts (s)
        last = min(seg_wire, self._remaining[slot])  # wire bytes
        pipeline = last * (path.inv_cap_sum - 1.0 / path.bottleneck_Bps)
        self._tcp_flows[slot] = _TcpFlow(
            conn, rtt, seg_wire, path.bottleneck_Bps * rtt / seg_wire,
            max(p.buffer_bytes / (fmt.mtu - fmt.header_bytes), 1.0), fmt.loss, extra_delay=max(pipeline, 0.0),
            bursty=path.bursty, traced=path.traced,
        )  # fmt: skip
        # SYN, SYN-ACK before the first data (+ 1 s, 2 s, ... per lost SYN)
        self._round_end[slot] = now + handshake_s(rtt, lambda n: self._lose(fmt.loss, n, path.bursty)) if fresh else now
        self._flow_cap[slot] = 0.0 if fresh else np.inf

    def _tcp_rounds(self, live: np.ndarray, now: float) -> None:
        """Start a new round trip for every live flow whose round ended (window -> rate cap)."""
        for slot in live[self._round_end[live] <= now + ROUND_EPS_S]:
            t = self._tcp_flows[slot]
            assert t is not None
            rate = self._rate[slot]  # bytes/s; below the window's cap: the fair share limited it
            held = (t.loss > 0 or t.bursty) and 0 < rate < self._flow_cap[slot] * (1 - 1e-9)
            share = rate * t.rtt / t.seg_wire if held else np.inf  # segments per round trip
            rd = plan_round(
                t.conn, self.tcp, now, self._remaining[slot] / t.seg_wire, t.rtt, t.bdp, t.max_window,
                lambda n, loss=t.loss, bursty=t.bursty: self._lose(loss, n, bursty), share,
                segment_s=t.rtt / t.bdp,  # the TCP model's HyStart ACK spacing, as the engine passes it
            )  # fmt: skip
            if rd.final:  # the last window leaves in one burst, at the fair share
                self._flow_cap[slot], self._round_end[slot] = np.inf, np.inf
                t.extra_delay += rd.extra_delay_s
            else:
                self._flow_cap[slot] = rd.segments * t.seg_wire / rd.duration_s
                self._round_end[slot] = now + rd.duration_s
                t.budget, t.rem0 = rd.segments * t.seg_wire, self._remaining[slot]

    def _pace_traced(self, live: np.ndarray, now: float) -> None:
        """On a traced path the window is what it is in TCP: a byte budget per round trip, not a
        rate. A trace at 1 ms resolution alternates delivery opportunities and empty
        milliseconds; a window paced as a steady rate would lose every empty millisecond for
        good. So the cap of a flow in a window-limited round is recomputed at every step as
        (budget left) / (time left in the round): behind after an empty millisecond, it may use
        the next opportunity in a burst, as packets queued at the bottleneck would. On a
        constant link the flow always gets its cap and this leaves the cap unchanged."""
        for slot in live[np.isfinite(self._round_end[live]) & (self._flow_cap[live] > 0)]:
            t = self._tcp_flows[slot]
            if t is None or not t.traced or t.budget <= 0:
                continue
            left = t.budget - (t.rem0 - self._remaining[slot])  # wire bytes
            time_left = self._round_end[slot] - now  # s
            if time_left > ROUND_EPS_S:
                self._flow_cap[slot] = max(left, 0.0) / time_left

    def _lose(self, loss: float, segments: int, bursty: tuple[GilbertElliott, ...] = ()) -> int | None:
        """Index of the first segment lost among ``segments``, or None: the one random loss model
        of the TCP transport (independent losses with the path's probability; on a path with
        Gilbert-Elliott links, the first loss of their chains over this round's segments)."""
        first = self._loss.first_loss(loss, segments)
        if bursty and segments > 0:
            lost = np.zeros(segments, dtype=bool)
            for model in bursty:
                lost |= model.mask(segments, self._loss_rng)
            hits = np.flatnonzero(lost)
            if hits.size and (first is None or hits[0] < first):
                first = int(hits[0])
        return first

    def _tcp_settle(self, live: np.ndarray, rates: np.ndarray, now: float) -> None:
        """Per-RTT steps only where the window limits: a lossless flow whose window covers its
        fair share goes fluid; a fluid flow held at its window cap steps again from now. Flows on
        traced paths (capacity changing under them) or Gilbert-Elliott paths (losses drawn per
        round) keep stepping round by round."""
        cap, ends = self._flow_cap[live], self._round_end[live]
        bound = rates >= cap * (1.0 - 1e-9)  # held at its window
        for i in np.flatnonzero(np.isfinite(ends) & ~bound & (cap > 0)):
            t = self._tcp_flows[live[i]]
            if t is not None and t.loss == 0.0 and not t.bursty and not t.traced:
                self._round_end[live[i]] = np.inf  # window no longer binds
                self._flow_cap[live[i]] = t.conn.cwnd * t.seg_wire / t.rtt
        for i in np.flatnonzero(~np.isfinite(ends) & bound & np.isfinite(cap)):
            self._round_end[live[i]] = now  # the window binds again: step from now

    def _finish(self, slot: int) -> None:
        """Free a drained flow's slot, account its bytes, deliver its event after its delay."""
        f = self._flows[slot]
        assert f is not None
        self._flows[slot] = None
        self._alive[slot] = False
        self._rate[slot] = 0.0
        self._remaining[slot] = 0.0
        self._free.append(slot)
        delay = f.delay
        t = self._tcp_flows[slot]
        if t is not None:
            self._tcp_flows[slot] = None
            t.conn.busy, t.conn.last_active_s = False, self.env.now
            delay += t.extra_delay
        np.add.at(self._carried, f.path.index, f.wire * f.path.mult)
        now = self.env.now
        record = Transfer(
            f.src, f.dst, f.tag, f.nbytes, f.wire, f.start, now + delay,
            list(f.path.names), list(f.path.nodes),
        )  # fmt: skip
        event = f.event

        def arrive(_e: simpy.Event | None = None) -> None:
            self.transfers.append(record)
            event.succeed(record)

        if delay > 0:
            self.env.timeout(delay).callbacks.append(arrive)
        else:
            arrive()

    # ------------------------------------------------------------------ time-varying links
    def _init_time_varying(self, links: Mapping[str, Link]) -> None:
        """Index the links with a capacity trace; a separate generator for sampled losses."""
        self._traces = {self._link_index[n]: lk.trace for n, lk in links.items() if lk.trace is not None}
        self._is_traced = np.zeros(len(self._link_names) + 1, dtype=bool)  # [links + 1]
        self._is_traced[list(self._traces)] = True
        # [links + 1] s: when each traced link's capacity next changes, as of its last refresh (it
        # goes stale, i.e. into the past, while the link is idle); -inf: never read
        self._due = np.full(len(self._link_names) + 1, -np.inf)
        self._traced_live = np.zeros(0, dtype=np.intp)  # traced links carrying a live flow
        self._loss_rng = np.random.default_rng([self.seed, 0x6E55])
        # (src, dst, nbytes) -> (wire bytes, delay s) sampled by wire_bytes_for, not yet sent
        self._presampled: dict[tuple[str, str, int], deque[tuple[float, float]]] = {}

    def _refresh_capacity(self, live: np.ndarray) -> None:
        """Set the capacity (bytes/s) of every traced link that carries a live flow and whose
        capacity changed since it was last read (only those: one trace lookup per change)."""
        now = self.env.now
        hops = self._hops[live].ravel()
        self._traced_live = hops[self._is_traced[hops]]  # may repeat a link shared by flows
        snap = max(SNAP_S, 4.0 * math.ulp(now))  # a timer may land a few ulps short of a change
        for i in set(self._traced_live[self._due[self._traced_live] <= now + snap].tolist()):
            trace = self._traces[i]
            self._cap[i] = trace.rate_at(now)
            self._due[i] = trace.next_change(now)

    def _next_event_dt(self, live: np.ndarray, rates: np.ndarray, now: float) -> float:
        """Seconds to the next event of the live flows: a completion, the end of a TCP round of a
        window-limited flow, or a capacity change of a traced link in use (a flow on a link at
        capacity 0, or a TCP flow waiting out a handshake or timeout, has no completion of its own)."""
        eta = np.divide(self._remaining[live], rates, out=np.full(live.size, np.inf), where=rates > 0)  # s
        dt = float(eta.min())
        if self.transport == "tcp":
            dt = min(dt, float(np.min(self._round_end[live])) - now)
        if self._traced_live.size:
            dt = min(dt, float(self._due[self._traced_live].min()) - now)
        return dt

    def _take_sampled_loss(self, src: str, dst: str, path: _Path, nbytes: int) -> tuple[float, float]:
        """The losses :meth:`wire_bytes_for` sampled for this transfer, else a fresh sample."""
        queue = self._presampled.get((src, dst, nbytes))
        return queue.popleft() if queue else self._sampled_loss(path, nbytes)

    def _sampled_loss(self, path: _Path, nbytes: int) -> tuple[float, float]:
        """Wire bytes and delay (s) of one transfer with its lost packets sampled: every packet of
        the lossless wire size, plus one more packet's worth per loss; one RTT of delay per loss.
        Bernoulli links on the same path are sampled too (a chain whose states lose alike)."""
        fmt = path.fmt
        n = packets(nbytes, fmt.mtu, fmt.header_bytes)
        base = wire_bytes(nbytes, fmt.mtu, fmt.header_bytes, 0.0, fmt.framing_bytes, fmt.acks_per_packet)  # bytes
        models = list(path.bursty)
        if fmt.loss > 0:
            models.append(GilbertElliott(0.5, 0.5, fmt.loss, fmt.loss))
        lost = retransmitted_packets(models, n, self._loss_rng)
        return base * (n + lost) / n, fmt.latency_s + lost * 2.0 * fmt.latency_s
