"""The TCP half of :class:`aiotsim.network.flows.Network`: windows as rate caps, round by round.

A mixin of :class:`~aiotsim.network.flows.Network` (its state lives there): attaching TCP state
to a new flow (connection reuse, idle restart, the handshake), planning every round trip that ends
(:func:`aiotsim.network.tcp.plan_round`: the window becomes a rate cap, losses are drawn in slot
order), pacing windows on traced paths, letting a flow whose window no longer binds go fluid, and,
under ``sharing = "fifo"``, the round trips through the drop-tail queues
(:class:`aiotsim.network.queues.QueueLinks`), each flow on its bottleneck's clock
(:func:`bottleneck_ahead`: its handshake and rounds are priced when its SYN and windows reach the
queue). Units: bytes, bytes/s, s, segments.
"""

from __future__ import annotations

import heapq
import math
from typing import TYPE_CHECKING

import numpy as np
import simpy

from aiotsim.network.flow_records import Flight, PathCost, TcpFlight
from aiotsim.network.queues import QueueLinks, RoundTrip
from aiotsim.network.rates import RateClasses
from aiotsim.network.tcp import (
    NO_QUEUE,
    Connection,
    LossSampler,
    QueueView,
    TcpParams,
    handshake_s,
    plan_round,
    round_segments,
)
from aiotsim.network.tcp_window import restart_window
from aiotsim.network.traces import GilbertElliott

ROUND_EPS_S = 1e-9  # s; a round boundary this close to now is due (float rounding of timers)


def bottleneck_ahead(path: PathCost) -> float:
    """Under ``sharing = "fifo"``, s: the propagation from a flow's sender to its path's bottleneck,
    the last of its links of smallest capacity per crossing (where a backlog queued at an equal
    link before it drains at line rate: a sensor's 10 Mbit/s uplink into a gateway's shared 10
    Mbit/s link meets the other sensors at the gateway). The flow's rounds run on the bottleneck's
    clock, this much behind its sender's: a window is priced at the queue when it reaches it, not
    when it leaves (a 150 ms sensor's first window meets the queue as it stands 150 ms after the
    send, once others' overshoot has drained), and its last byte then has only the rest of the
    path to go. A lone flow ends when it did; flows with the same lead all shift alike."""
    ahead = reach = 0.0  # s: to the last smallest link so far; to the link at hand
    for link in path.links:
        if link.capacity_Bps / path.names.count(link.name) <= path.bottleneck_Bps * (1.0 + 1e-12):
            ahead = reach
        reach += link.latency_s
    return ahead


def _never_lost(_segments: int) -> None:
    """The loss draw of a loss-free path (``Network._lose`` with no loss draws nothing): no loss."""
    return None


class TcpRounds:
    """TCP rounds of a :class:`~aiotsim.network.flows.Network` (module docstring); the attributes
    below are the network's."""

    env: simpy.Environment
    tcp: TcpParams
    _rates: RateClasses
    _queues: QueueLinks | None
    _conns: dict[tuple[str, str], Connection]
    _paths: dict[tuple[str, str], PathCost]
    _flows: list[Flight | None]
    _tcp_flows: list[TcpFlight | None]
    _rounds: list[tuple[float, int, int, TcpFlight]]
    _starting: list[tuple[float, int, int, TcpFlight]]
    _paced: dict[int, None]
    _seq: int
    _loss: LossSampler
    _loss_rng: np.random.Generator
    _overflow_rng: np.random.Generator

    if TYPE_CHECKING:

        def _path(self, src: str, dst: str) -> PathCost: ...  # the network's

    def _tcp_start(self, slot: int, src: str, dst: str, path: PathCost, wire: float, now: float) -> None:
        """Attach TCP state to a new flow: its connection (fresh or reused, idle restart), and a
        handshake round trip when the connection is new."""
        p, fmt = self.tcp, path.fmt
        if fmt.latency_s <= 0:
            return  # no round trip: the window never limits, the fluid model is exact
        rtt, seg_wire, bdp, max_window, hop_s = path.tcp or self._tcp_path(path)
        conn = self._conns.get((src, dst))
        fresh = conn is None or conn.busy or p.connection == "per-transfer"
        # duplex: the pair's first connection, opened in the other direction, carries this one too
        # (its own window from the initial one, no handshake of its own)
        opened = fresh and conn is None and p.connection == "duplex" and (dst, src) in self._conns
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
        pipeline = min(seg_wire, wire) * hop_s  # s; min(...): the last packet's wire bytes
        t = TcpFlight(conn, rtt, seg_wire, bdp, max_window, fmt.loss, max(pipeline, 0.0), path.bursty, path.traced)
        self._tcp_flows[slot] = t
        if path.traced:
            self._paced[slot] = None
        ahead = 0.0  # s, how far the flow's clock runs behind its sender's (bottleneck_ahead)
        if self._queues is not None:
            back = self._paths.get((dst, src)) or self._path(dst, src)
            self._queues.join(slot, path.links_t, path.mults_t, back.links_t, rtt)
            ahead = bottleneck_ahead(path)
            t.extra_delay -= ahead  # its last byte is at the bottleneck: the rest of the path is left
        t.hello = fresh and not opened
        if t.hello and ahead <= 0:
            self._handshake(slot, t, now)
        elif ahead > 0:  # its SYN, or its first window, reaches the bottleneck later
            self._set_round(slot, t, now + ahead, 0.0, now)
        else:  # its first round is due now (its cap is already none); no heap entry needed
            t.round_end = now
            self._starting.append((now, slot, 0, t))

    def _handshake(self, slot: int, t: TcpFlight, now: float) -> None:
        """SYN, SYN-ACK before a new connection's first data (+ 1 s, 2 s, ... per lost SYN), through
        the queues as they stand ``now`` (s, on the flow's clock: as its SYN reaches the bottleneck)."""
        f = self._flows[slot]
        assert f is not None
        path = f.path
        queued = 0.0  # s, the queues the SYN and the SYN-ACK wait in
        if self._queues is not None:
            back = self._paths.get((f.dst, f.src)) or self._path(f.dst, f.src)
            queued = self._queues.links_delay(path.links_t) + self._queues.links_delay(back.links_t)
        t.hello = False
        end = now + handshake_s(t.rtt + queued, lambda n: self._lose(path.fmt.loss, n, path.bursty))
        self._set_round(slot, t, end, 0.0, now)

    def _tcp_path(self, path: PathCost) -> tuple[float, float, float, float, float]:
        """A path's TCP constants (:attr:`PathCost.tcp`), computed once."""
        fmt = path.fmt
        rtt = 2.0 * fmt.latency_s  # s
        seg_wire = fmt.mtu + fmt.framing_bytes + (fmt.header_bytes + fmt.framing_bytes) * fmt.acks_per_packet
        bdp = path.bottleneck_Bps * rtt / seg_wire  # segments
        max_window = max(self.tcp.buffer_bytes / (fmt.mtu - fmt.header_bytes), 1.0)  # segments
        path.tcp = (rtt, seg_wire, bdp, max_window, path.inv_cap_sum - 1.0 / path.bottleneck_Bps)
        return path.tcp

    def _set_round(self, slot: int, t: TcpFlight, end: float, cap: float, now: float) -> None:
        """Set a TCP flow's next round boundary (s; inf: none) and window cap (bytes/s)."""
        t.round_end, t.cap = end, cap
        if math.isfinite(end):
            self._seq += 1
            heapq.heappush(self._rounds, (end, slot, self._seq, t))
        self._rates.set_tcap(slot, cap, now)

    def _round_valid(self, entry: tuple[float, int, int, TcpFlight]) -> bool:
        end, slot, _, t = entry
        return self._tcp_flows[slot] is t and t.round_end == end

    def _tcp_rounds(self, now: float) -> list[int]:
        """Start a new round trip for every flow whose round ended (window -> rate cap), in slot
        order (the order of the loss draws); return their slots."""
        if not self._starting and not (self._rounds and self._rounds[0][0] <= now + ROUND_EPS_S):
            return []  # the usual step: no round ends now
        due = {entry[1] for entry in self._starting if self._round_valid(entry)}
        self._starting.clear()
        while self._rounds and self._rounds[0][0] <= now + ROUND_EPS_S:
            entry = heapq.heappop(self._rounds)
            if self._round_valid(entry):
                due.add(entry[1])
        for slot in list(due):  # a SYN reaching the bottleneck: the handshake begins on its clock
            t = self._tcp_flows[slot]
            if t is not None and t.hello:
                self._handshake(slot, t, now)
                due.discard(slot)
        slots = sorted(due)
        trips, met = self._offer_rounds(slots, now) if self._queues is not None else ({}, {})
        for slot in slots:
            t = self._tcp_flows[slot]
            assert t is not None
            lossy = t.loss > 0 or t.bursty
            # bytes/s; below the window's cap: the fair share limited it (read only where losses are drawn)
            rate = self._rates.rate(slot) if lossy else 0.0
            held = lossy and 0 < rate < t.cap * (1 - 1e-9)
            share = rate * t.rtt / t.seg_wire if held else np.inf  # segments per round trip
            left = self._rates.remaining(slot, now)  # wire bytes
            rtt, fifo_cap, queue = t.rtt, np.inf, NO_QUEUE
            if self._queues is not None:  # the round trip through the queues, its share and its drops
                trip = trips[slot]
                rtt, share = trip.rtt, np.inf
                # whether the buffer drops the round's first retransmission (tcp.QueueView); not
                # where a window written at once overflowed its sender's own link: that drains
                # while the sender waits for ACKs, and the retransmission finds room
                draw = float(self._overflow_rng.random()) if trip.loss > 0 else 1.0
                draw = 1.0 if trip.at_sender else draw
                # HyStart's first samples of the window grown now are the RTTs of this round's
                # first segments: what they meet at the queues (QueueLinks.head_delay)
                sample = t.rtt + met[slot]
                queue = QueueView(trip.loss, sample, t.rtt, draw, trip.at_sender)
                fifo_cap = trip.rate if trip.queued and trip.rate > 0 else np.inf
                t.queued = trip.queued
            rd = plan_round(
                t.conn, self.tcp, now, left / t.seg_wire, rtt, t.bdp, t.max_window,
                (lambda n, loss=t.loss, bursty=t.bursty: self._lose(loss, n, bursty)) if lossy else _never_lost,
                share, t.rtt / t.bdp, queue,
            )  # fmt: skip
            if rd.final:  # the last window leaves in one burst, at the fair share (its FIFO share if queued)
                t.extra_delay += rd.extra_delay_s
                self._set_round(slot, t, np.inf, fifo_cap, now)
            else:
                t.budget, t.rem0 = rd.segments * t.seg_wire, left
                self._set_round(slot, t, now + rd.duration_s, rd.segments * t.seg_wire / rd.duration_s, now)
        return slots

    def _offer_rounds(self, slots: list[int], now: float) -> tuple[dict[int, RoundTrip], dict[int, float]]:
        """Under FIFO sharing: the windows of the rounds starting now go into the queues together
        (they burst together), each with the rate it is emitted at: a transfer's first window at
        once (inf: into its sender's link), a slow-start round at twice its last round's rate, a round in
        congestion avoidance paced by its ACKs (0: no burst). Also returns, per flow, the queueing
        delay the round's first segments meet (s, :meth:`QueueLinks.head_delay` before any window
        of now joins)."""
        queues = self._queues
        assert queues is not None
        met = {slot: queues.head_delay(slot) for slot in slots}  # s
        for slot in slots:
            t = self._tcp_flows[slot]
            assert t is not None
            _, sent = round_segments(t.conn, self._rates.remaining(slot, now) / t.seg_wire, t.max_window)
            if not t.started:
                burst = math.inf  # the first window is written into the sender's link at once
            elif t.conn.cwnd < t.conn.ssthresh and math.isfinite(t.cap):
                burst = 2.0 * t.cap  # slow start: two segments per ACK
            else:
                burst = 0.0
            t.started = True
            queues.offer(slot, sent * t.seg_wire, burst)
        return queues.trips(now), met

    def _reprice(self, now: float) -> None:
        """Under FIFO sharing: the flows whose queue's delay moved take their new rate (window /
        round trip through the queues) as their cap from now; a link with a standing queue stays
        full (the caps of the flows queued at it sum to what it has left for them)."""
        for slot in self._queues.stale():  # type: ignore[union-attr]
            t = self._tcp_flows[slot]
            if t is None or not t.cap > 0 or slot not in self._rates.flows:
                continue  # gone, or waiting out a handshake or a timeout
            if math.isinf(t.cap) and math.isinf(t.round_end) and not t.queued:
                continue  # a last window that left in one burst (no queue when it did)
            rate = self._queues.rate(slot)  # type: ignore[union-attr]
            if rate > 0:
                t.cap = rate
                self._rates.set_tcap(slot, t.cap, now)

    def _pace_traced(self, now: float) -> None:
        """On a traced path the window is what it is in TCP: a byte budget per round trip, not a
        rate. A trace at 1 ms resolution alternates delivery opportunities and empty
        milliseconds; a window paced as a steady rate would lose every empty millisecond for
        good. So the cap of a flow in a window-limited round is recomputed at every step as
        (budget left) / (time left in the round): behind after an empty millisecond, it may use
        the next opportunity in a burst, as packets queued at the bottleneck would. On a
        constant link the flow always gets its cap and this leaves the cap unchanged."""
        for slot in sorted(self._paced):
            t = self._tcp_flows[slot]
            if t is None or not math.isfinite(t.round_end) or not t.cap > 0 or t.budget <= 0:
                continue
            left = t.budget - (t.rem0 - self._rates.remaining(slot, now))  # wire bytes
            time_left = t.round_end - now  # s
            if time_left > ROUND_EPS_S:
                t.cap = max(left, 0.0) / time_left
                self._rates.set_tcap(slot, t.cap, now)

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

    def _tcp_settle(self, slots: list[int], now: float) -> None:
        """Per-RTT steps only where the window limits: a lossless flow whose window covers its
        fair share goes fluid; a fluid flow held at its window cap steps again from now. Flows on
        traced paths (capacity changing under them) or Gilbert-Elliott paths (losses drawn per
        round) keep stepping round by round. Only flows whose rate class changed (``slots``) can
        switch: a level moving between two caps changes no flow's binding. Under FIFO sharing every
        flow steps round by round to its end: its window keeps growing into the queue."""
        if self._queues is not None:
            return
        changed: set[int] = set()  # each flow switches at most once per step (no ping-pong)
        while slots:
            relax = False
            for slot in sorted(set(slots) - changed):
                t = self._tcp_flows[slot]
                if t is None or slot not in self._rates.flows:
                    continue
                bound = self._rates.rate(slot) >= t.cap * (1.0 - 1e-9)  # held at its window
                stepping = math.isfinite(t.round_end)
                if stepping and not bound and t.cap > 0 and t.loss == 0.0 and not t.bursty and not t.traced:
                    t.round_end, t.cap = np.inf, t.conn.cwnd * t.seg_wire / t.rtt  # window no longer binds
                    self._rates.lift_tcap(slot, t.cap, now)  # where its rate stays: kept in place
                    relax = True
                    changed.add(slot)
                elif not stepping and bound and math.isfinite(t.cap):
                    t.round_end = now  # the window binds again: step from now
                    self._seq += 1
                    heapq.heappush(self._rounds, (now, slot, self._seq, t))
                    changed.add(slot)
            slots = self._rates.solve(now) if relax else []
