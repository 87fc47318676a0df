"""Drop-tail FIFO queues under TCP windows: queueing delay, sharing by window and RTT, overflow.

The fluid model's links carry no backlog: ``sharing = "fair"`` keeps it so (a per-flow fair queue,
as fq_codel gives, shares a bottleneck max-min and holds each flow's excess window in its own
queue). ``sharing = "fifo"`` (the default) models what a plain drop-tail router does, which is what
ns-3's point-to-point devices and most IoT gateways are:

* **Where a queue stands.** A TCP flow with window ``W`` (wire bytes in flight) and base round trip
  ``d`` (s) asks its path for ``W / d`` bytes/s. A link whose flows ask more than its capacity
  ``C`` (bytes/s) is *congested*; the excess windows stand in its buffer. A flow's queue is at the
  tightest congested link of its path (the largest demand / capacity, the first of equals in path
  order: behind two equal links only the first queues, the second receives at most its rate).
* **FIFO sharing.** Every packet through a FIFO waits the same delay ``q``; a window-limited flow
  then sends ``W / (d + q)``, so the flows queued at a link fill it when
  ``sum W_i / (d_i + q) = C - A`` (``A``: the rate of flows queued elsewhere that cross it), which
  fixes ``q`` (:func:`fifo_delay`). Rates go by window and RTT: a 5 ms flow beside a 150 ms flow
  with the same window gets ~the ratio of their RTTs, not max-min's equal shares.
* **Backlog left behind.** A flow whose queue moves on to a later link of its path, no faster than
  the one it stood at (a newcomer fills the shared link behind a sensor's access link), leaves the
  bytes it had standing there (``held``): they drain into the later link at the earlier link's rate
  less what the flow feeds it (brought up to date whenever a window meets the later link's queue,
  :meth:`QueueLinks._migrate`), so the newcomer meets only what has reached the shared queue, the
  earlier link's delay includes them for every flow crossing it, and the flow's ACKs come at its
  share of the later link (:meth:`QueueLinks._held`).
* **Queueing delay.** Every round trip a flow sees includes ``q`` of the links on its forward path
  and of the links its ACKs cross on the way back (the reverse route): its windows' rounds, its
  timers and its handshake (:meth:`QueueLinks.links_delay`).
* **Overflow.** A buffer holds ``B`` bytes, so ``q <= B / C``. Windows that ask more than a full
  buffer drains lose the excess: the fraction ``p = 1 - (C - A) / sum W_i / (d_i + B / C)`` of what
  arrives is dropped, per flow, at the tail of its round (drop-tail drops arrivals once full). TCP
  sees those losses in :func:`aiotsim.network.tcp.plan_round` (SACK recovery, or a timeout when the
  tail of a transfer is lost) and cuts its window; slow start overshoots a shallow buffer this way.

State is kept per link as sums of ``W`` per distinct base RTT of its queued flows, so a queue's
delay costs O(distinct RTTs at the link), not O(flows): a star of 1,000 equal nodes solves in one
step. Units: bytes, bytes/s, s.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from aiotsim.network.droptail import built_level, fifo_delay, fill_burst, written_level

# when a window joins a queue, or a flow leaves it for good, and its delay moves by more than this
# fraction of a round trip (the smallest base RTT queued there plus the delay they were priced at),
# the flows queued there are repriced at once (O(members)): packets in one FIFO wait alike, so
# rounds offered a fraction of a millisecond apart must not get their delays in offer order
# (8 x 250 KB with starts jittered by 1 ms: 6% slow before). Smaller changes reach each flow at its
# next round, as its ACK clock would (repricing on every change cost 1.3x at 1,000 flows)
REPRICE = 0.1
MIN_ROOM = 0.01  # fraction of a link kept for the flows queued at it (see _settle)
HELD_MAX = 0.9  # fraction of a window that may stand behind at an earlier link (_held)
_NO_WRITTEN = (0.0, 0.0, 0.0)  # _LinkQueue.written of a link nothing was written into
_NO_BUILT = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0)  # _LinkQueue.built of a link no burst queued at


class RoundTrip(NamedTuple):
    """What one round of a TCP flow meets at the queues (:meth:`QueueLinks.send`)."""

    rtt: float  # s, base round trip + the queues of its forward and reverse paths
    rate: float  # bytes/s, window / rtt, less what a full buffer drops
    loss: float  # fraction of the round's segments a full buffer drops
    queued: bool  # its window stands in a congested link's queue
    # its losses are those of a window written at once, at its sender's own link, which drains
    # while the sender waits for ACKs (not a slow-start round's, which goes on filling it)
    at_sender: bool = False


@dataclass(slots=True)
class _LinkQueue:
    """One link's queue: its capacity and buffer, and the flows whose queue it is."""

    capacity: float  # bytes/s
    buffer: float  # bytes
    demand: float = 0.0  # bytes/s, sum of m W / d of every TCP flow crossing it (at q = 0)
    queued: dict[float, float] = field(default_factory=dict)  # base RTT s -> sum of m W (queued here)
    elsewhere: float = 0.0  # bytes/s, sum of m x rate of the flows crossing it, queued at another link
    delay: float = 0.0  # s, the queueing delay as last solved
    loss: float = 0.0  # fraction of arrivals dropped (buffer full), as last solved
    members: dict[int, None] = field(default_factory=dict)  # flows queued here
    # What bursts leave behind (QueueLinks._bursts), kept until the network is idle:
    # the windows last written at once into it (a sender's own link), above its fluid queue:
    # bytes, when (s), the drain rate (bytes/s); a window written while they drain stands on them
    written: tuple[float, float, float] = _NO_WRITTEN
    # the queue the last ACK-clocked burst built: bytes when it began, when it began (s), the rate it
    # rose at (bytes/s), bytes at its top, when its arrival ends (s), the rate it drains at after
    # (bytes/s); the fluid queue or this, whichever is longer, stands
    built: tuple[float, float, float, float, float, float] = _NO_BUILT
    # bursts still arriving: (when they end, s; bytes/s above their flows' fluid rates)
    arrivals: list[tuple[float, float]] = field(default_factory=list)
    foreign: dict[int, None] = field(default_factory=dict)  # flows crossing it, queued elsewhere (or nowhere)
    member_rate: float = 0.0  # bytes/s, sum of m x rate of its members
    slow_rate: float = 0.0  # bytes/s, the part of member_rate whose windows burst (_Member.slow)
    held: float = 0.0  # bytes standing in it of flows now queued further on (_Member.held)
    holders: dict[int, None] = field(default_factory=dict)  # its members with bytes held at an earlier link
    priced: float = 0.0  # s, the delay its members' rates were last computed at


@dataclass(slots=True)
class _Member:
    """A TCP flow known to the queues."""

    fid: int
    links: tuple[int, ...]
    mults: tuple[float, ...]
    reverse: tuple[int, ...]  # links its ACKs cross (the reverse route), each once
    rtt: float  # s, base round trip
    window: float = 0.0  # wire bytes in flight this round
    rate: float = 0.0  # bytes/s, what it sends this round (counted in ``elsewhere`` of other links)
    at: int = -1  # the link it queues at (-1: none)
    counted_w: float = 0.0  # bytes of its window in its queue link's sums (the window less ``held``)
    held: float = 0.0  # bytes of its window still standing at an earlier link of its path (held_at)
    held_at: int = -1
    held_t: float = 0.0  # s, when ``held`` was last brought up to date
    was: int = -1  # the link it queued at before its window was last taken
    backlog: float = 0.0  # bytes it had standing there
    sent: float = 0.0  # bytes/s, its rate before its window was last taken (what it feeds ``held_at``)
    since: float = 0.0  # s, since when it has queued at that link
    slow: bool = False  # its window this round bursts (slow start, or a first window written at once)


class QueueLinks:
    """The drop-tail queues of a network's links under TCP (module docstring).

    Parameters
    ----------
    capacity : sequence of float
        Each link's capacity, bytes/s.
    buffer : sequence of float
        Each link's drop-tail buffer, wire bytes.
    unqueued : collection of int
        Links that never hold a queue, whatever the windows ask
        (:meth:`~aiotsim.network.graph.Graph.unqueued_links`): no flow queues there, no burst
        overflows there.
    """

    def __init__(self, capacity: Sequence[float], buffer: Sequence[float], unqueued: Collection[int] = ()) -> None:
        self._links = [_LinkQueue(float(c), float(b)) for c, b in zip(capacity, buffer, strict=True)]
        self._members: dict[int, _Member] = {}
        self._stale: dict[int, None] = {}  # flows whose rate moved with their queue's delay
        self._offered: dict[int, tuple[float, float]] = {}  # fid -> (window bytes, burst bytes/s) not yet priced
        self._now = 0.0  # s, the instant of the rounds being priced
        self._unqueued = frozenset(unqueued)

    def set_capacity(self, link: int, capacity: float) -> None:
        """A traced link's capacity changed (bytes/s): read at the next solve of its queue."""
        self._links[link].capacity = float(capacity)

    def join(
        self, fid: int, links: tuple[int, ...], mults: tuple[float, ...], reverse: tuple[int, ...], rtt: float
    ) -> None:
        """A TCP flow starts (no window in flight yet)."""
        self._members[fid] = _Member(fid, links, mults, tuple(reverse), rtt)

    def leave(self, fid: int) -> None:
        """A flow is done: its window leaves its links. The last one out leaves every queue empty
        (all its bytes arrived): what bursts left behind goes too, so a run resumed from an idle
        network's checkpoint continues as the run it came from."""
        m = self._members.pop(fid, None)
        if m is not None:
            self._take(m, reprice=True)
            if m.held > 0:
                self._hold(m.held_at, -m.held)
        self._stale.pop(fid, None)
        if not self._members:
            for q in self._links:
                q.written, q.built, q.arrivals, q.held = _NO_WRITTEN, _NO_BUILT, [], 0.0

    def links_delay(self, links: Sequence[int], mults: Sequence[float] | None = None) -> float:
        """Summed queueing delay of ``links`` (each crossed ``mults`` times, default once) as last
        solved, s: what a packet along them waits (a handshake's SYN, a round's data or ACKs)."""
        if mults is None:
            return sum(self._links[i].delay for i in links)
        return sum(self._links[i].delay * k for i, k in zip(links, mults, strict=True))

    def path_delay(self, fid: int) -> float:
        """The queueing delay flow ``fid``'s packets meet on its forward path and its ACKs on the
        reverse path, as last solved, s (what an RTT sample of it measures above the base)."""
        m = self._members[fid]
        return self.links_delay(m.links, m.mults) + self.links_delay(m.reverse)

    def head_delay(self, fid: int) -> float:
        """The queueing delay the first segments of flow ``fid``'s next window meet on its paths,
        as last solved, s: what HyStart's first RTT samples of the round measure above the base.
        A queue's bytes from windows that burst (slow start: two segments per ACK) are, when the
        next window's first segments arrive, half served (the burst came at twice the rate it
        drains); the rest of the queue (flows clocked by their ACKs, backlogs held upstream)
        stands whole. ns-3.44, a 1 MB flow joining a 10 Mbit/s link that another 1 MB flow keeps
        full: its delay test fires at 55 segments, at the first round whose first samples are
        twice the base (47.6 ms against 20.4 ms)."""
        m, links, met = self._members[fid], self._links, self._met
        forward = sum(k * met(links[i]) for i, k in zip(m.links, m.mults, strict=True))
        return forward + sum(met(links[i]) for i in m.reverse)

    @staticmethod
    def _met(q: _LinkQueue) -> float:
        """s, what a packet arriving now waits at ``q``: its delay less half of its bursting share."""
        return q.delay * (1.0 - 0.5 * min(q.slow_rate / q.capacity, 1.0)) if q.capacity > 0 else 0.0

    def send(self, fid: int, window: float, burst: float = 0.0, now: float = 0.0) -> RoundTrip:
        """Flow ``fid`` starts a round at ``now`` (s) with ``window`` wire bytes in flight, sent at
        ``burst`` bytes/s (0: paced by its ACKs, no burst): :meth:`offer` then :meth:`trips` for it
        alone."""
        self.offer(fid, window, burst)
        return self.trips(now)[fid]

    def offer(self, fid: int, window: float, burst: float = 0.0) -> None:
        """Flow ``fid`` starts a round with ``window`` wire bytes in flight, emitted at ``burst``
        bytes/s: a transfer's first window is written into the sender's own link at once (inf),
        a slow-start round leaves at twice the rate its ACKs come back (two segments per ACK); 0
        for a round paced by its ACKs. The rounds offered at one instant burst together;
        :meth:`trips` prices them."""
        m = self._members[fid]
        self._take(m)
        m.slow = burst > 0
        self._offered[fid] = (float(window), float(burst))

    def trips(self, now: float = 0.0) -> dict[int, RoundTrip]:
        """What each round offered since the last call meets: the round trip it sees (base + the
        queues of its forward and reverse paths), what it sends (``window / rtt``, less what a full
        buffer drops) and the fraction of its segments the buffer drops: the standing queue's
        overflow, or the burst's when the rounds offered together arrive faster than the link
        drains them and pile up beyond its buffer (slow start overshooting a shallow buffer), or
        at a sender's own link on top of the windows written into it before ``now`` (s)."""
        offered, self._offered = self._offered, {}
        self._now = now
        links = self._links
        for i in {i for fid in offered for i in self._members[fid].links}:
            self._migrate(i, offered)
        standing = {}  # link -> bytes queued by the flows not offered now (before their windows come)
        for fid in offered:
            for i in self._members[fid].links:
                standing[i] = links[i].delay * links[i].capacity
        for fid, (window, _) in offered.items():  # every window asks first: then each finds its tightest link
            m = self._members[fid]
            m.window = window
            for i, k in zip(m.links, m.mults, strict=True):
                links[i].demand += k * window / m.rtt
        for fid, (window, _) in offered.items():
            self._put(self._members[fid], window, counted=True)
        for fid in offered:
            m = self._members[fid]
            if m.at >= 0:
                self._gather(m.at)
        burst_loss = self._bursts(offered, standing, now)  # fid -> (fraction, link)
        writers: dict[int, int] = {}  # link -> windows written at once into it now (its senders' first link)
        for fid, (_, burst) in offered.items():
            if math.isinf(burst):
                first = self._members[fid].links[0]
                writers[first] = writers.get(first, 0) + 1
        out = {}
        for fid in offered:
            m = self._members[fid]
            self._stale.pop(fid, None)
            rtt, loss = self._price(m)
            burst, link = burst_loss.get(fid, (0.0, -1))
            # a window written alone at its instant loses its tail there (QueueView.written);
            # several written at one instant are spread as interleaved drops, as before
            own = burst > loss and link == m.links[0] and math.isinf(offered[fid][1]) and writers[link] == 1
            loss = max(loss, burst)
            out[fid] = RoundTrip(rtt, m.window / rtt * (1.0 - loss) if rtt > 0 else m.rate, loss, m.at >= 0, own)
        return out

    def _bursts(
        self, offered: dict[int, tuple[float, float]], standing: dict[int, float], now: float
    ) -> dict[int, tuple[float, int]]:
        """Per flow offered now, the fraction of its window a buffer drops in the burst, and the
        link that drops it: the bursting windows reach each link of their paths at their emission
        rate (no faster than the links before it on their own path); where they and the other
        flows through a link arrive faster than it drains, what piles above its buffer is dropped
        (:meth:`_burst_drop`), spread over the bursts' bytes, and the first link of a path that
        drops counts. A window written at once (rate inf) queues whole at its sender's own link,
        which holds it while it drains: a server's downloads that start a millisecond apart meet
        in its queue."""
        links = self._links
        arriving: dict[int, list[float]] = {}  # link -> [bytes, bytes/s] of the bursts reaching it
        fresh: dict[int, float] = {}  # link -> bytes/s the flows offered now are counted at in its sums
        for fid in offered:
            m = self._members[fid]
            for i, k in zip(m.links, m.mults, strict=True):
                fresh[i] = fresh.get(i, 0.0) + k * m.rate
        reach: dict[int, list[tuple[int, float, float]]] = {}  # fid -> (link, bytes, bytes/s) in path order
        for fid, (window, burst) in offered.items():
            if burst <= 0:
                continue
            m = self._members[fid]
            rate = burst
            hops = reach[fid] = []
            for i, k in zip(m.links, m.mults, strict=True):
                acc = arriving.setdefault(i, [0.0, 0.0])
                acc[0] += k * window
                acc[1] += k * rate
                hops.append((i, k * window, k * rate))
                rate = min(rate, links[i].capacity / k)  # what leaves this link of it
        drop = {  # link -> fraction of the bursts arriving there that it drops
            i: self._burst_drop(links[i], nbytes, rate, standing.get(i, 0.0), fresh.get(i, 0.0), now)
            for i, (nbytes, rate) in arriving.items()
            if i not in self._unqueued
        }
        out = {}
        for fid, hops in reach.items():
            for i, _, _ in hops:
                if drop.get(i, 0.0) > 0:  # the first link that drops from the burst
                    out[fid] = (drop[i], i)
                    break
        return out

    @staticmethod
    def _burst_drop(q: _LinkQueue, nbytes: float, rate: float, standing: float, fresh: float, now: float) -> float:
        """The fraction of ``nbytes`` of bursts arriving at ``rate`` (bytes/s; inf: written at
        once) that link ``q`` drops at ``now`` (s), on top of its fluid queue ``standing`` (bytes);
        ``fresh``: the fluid rate (bytes/s) its sums count these flows at.

        The other flows arrive at their fluid rates, and bursts still arriving at theirs
        (``arrivals``: eight initial windows 0.1 ms apart each hold a 10 Mbit/s link for 12 ms,
        not at their 1.2 Mbit/s average). The bursts stand on the fluid queue or on what the last
        burst built (``built``), whichever is longer, and on windows written into a sender's own
        link (``written``). The queue piles at what all of them bring above the link's rate,
        piece by piece as the bursts still arriving end (:func:`~aiotsim.network.droptail.fill_burst`),
        and what comes once it is full is dropped from every arrival alike, so a burst loses its
        share of it, ``rate / arrivals``: a window that meets a full buffer shared with others
        loses part of itself, not all, and one that comes while several others still arrive
        loses more than one that meets a single one."""
        q.arrivals = [(end, x) for end, x in q.arrivals if end > now]
        fluid = max(q.elsewhere + q.member_rate - fresh, 0.0)  # bytes/s of the other flows, on average
        others = fluid + sum(x for _, x in q.arrivals)  # bytes/s, with the bursts still arriving
        drain = q.capacity - min(others, q.capacity)  # bytes/s left to drain the bursts while they last
        after = q.capacity - min(fluid, q.capacity)  # ... and once every burst has arrived
        at_once = math.isinf(rate)
        arriving = list(q.arrivals)  # the other bursts, before this one joins them
        if not at_once:
            q.arrivals.append((now + nbytes / rate, max(rate - fresh, 0.0)))
        if rate <= drain:
            return 0.0
        level = max(standing, built_level(q.built, now)) + written_level(q.written, now)  # bytes queued now
        if at_once:  # windows written at once: the fluid queue does not hold them
            peak = level + nbytes * (1.0 - drain / rate)
            q.written = (min(peak, q.buffer) - standing, now, after)
            return min(max(peak - q.buffer, 0.0) / nbytes, 1.0)
        span = nbytes / rate  # s, how long this burst arrives
        top, dropped, rise = fill_burst(level, q.buffer, q.capacity, fluid, rate, arriving, now, span)
        q.built = (level, now, rise, top, now + span, after)
        return min(dropped / nbytes, 1.0)

    def _put(self, m: _Member, window: float, at: int | None = None, counted: bool = False) -> None:
        """Add a flow's window to its links' sums (``counted``: its demand already is), queued at
        ``at`` (None: its tightest link)."""
        links = self._links
        m.window = window
        if not counted:
            for i, k in zip(m.links, m.mults, strict=True):
                links[i].demand += k * window / m.rtt
        m.at = self._tightest(m) if at is None else at
        for i in m.links:
            if i != m.at:
                links[i].foreign[m.fid] = None
        if m.at >= 0:
            q = links[m.at]
            m.counted_w = window - self._held(m, window)
            q.queued[m.rtt] = q.queued.get(m.rtt, 0.0) + self._mult(m, m.at) * m.counted_w
            q.members[m.fid] = None
            self._solve(q, reprice=True)
        m.rate = 0.0
        self._price(m)

    def _gather(self, link: int) -> None:
        """Flows crossing ``link`` but queued at a looser link move their queue here: a flow that
        joins downstream of another's queue makes this link the tighter one (the other would see
        it at its next round; until then this link would count it as arriving at full speed)."""
        q = self._links[link]
        ratio = q.demand / q.capacity if q.capacity > 0 else math.inf
        for fid in list(q.foreign):
            m = self._members[fid]
            if m.window <= 0:
                continue
            old = self._links[m.at] if m.at >= 0 else None
            if old is None or old.demand / old.capacity < ratio * (1.0 - 1e-12):
                window = m.window
                self._take(m)
                self._put(m, window, link)
                self._stale[fid] = None

    def stale(self) -> list[int]:
        """The queued flows whose rate moved (by more than ``REPRICE`` of their round trip) since
        it was last read, because their queue's delay did (a window came, went or changed); each
        is repriced (:meth:`rate`) and listed once."""
        out = list(self._stale)
        self._stale.clear()
        return out

    def rate(self, fid: int) -> float:
        """Flow ``fid``'s rate at its queue's delay as last solved, bytes/s (``window / rtt``,
        less what a full buffer drops)."""
        self._price(self._members[fid])
        return self._members[fid].rate

    def _price(self, m: _Member) -> tuple[float, float]:
        """Set a flow's rate from the queues of its paths; (rtt s, loss fraction)."""
        links = self._links
        rtt = m.rtt + self.path_delay(m.fid)
        loss = links[m.at].loss if m.at >= 0 else 0.0
        if m.held > 0 and m.at >= 0:  # it sends what its queue passes of the rest: ACKs at that rate
            # less its own backlog's wait (never below its base: a full earlier buffer caps that wait)
            rtt = max(rtt - m.held / links[m.held_at].capacity, m.rtt) * m.window / max(m.counted_w, 1e-9)
        old, m.rate = m.rate, m.window / rtt * (1.0 - loss) if rtt > 0 else math.inf
        self._count(m, m.rate - old)
        return rtt, loss

    def _count(self, m: _Member, change: float) -> None:
        """A flow's rate changed by ``change`` bytes/s: its links' sums of rates follow."""
        links = self._links
        for i, k in zip(m.links, m.mults, strict=True):
            if i == m.at:
                links[i].member_rate = max(links[i].member_rate + k * change, 0.0)
                if m.slow:
                    links[i].slow_rate = max(links[i].slow_rate + k * change, 0.0)
            else:
                links[i].elsewhere = max(links[i].elsewhere + k * change, 0.0)

    # ------------------------------------------------------------------ internals
    @staticmethod
    def _mult(m: _Member, link: int) -> float:
        return m.mults[m.links.index(link)]

    def _take(self, m: _Member, reprice: bool = False) -> None:
        """Withdraw a flow's current window from its links' sums (``reprice``: for good, so the
        others queued with it may speed up now, :meth:`_solve`)."""
        if m.window <= 0:
            return
        links = self._links
        self._count(m, -m.rate)
        for i, k in zip(m.links, m.mults, strict=True):
            q = links[i]
            q.foreign.pop(m.fid, None)
            q.demand = max(q.demand - k * m.window / m.rtt, 0.0)
        m.was, m.backlog, m.sent = -1, 0.0, m.rate
        if m.at >= 0:
            q = links[m.at]
            m.was, m.backlog = m.at, m.rate * q.delay  # bytes standing there (Little's law)
            q.members.pop(m.fid, None)
            q.holders.pop(m.fid, None)
            left = q.queued.get(m.rtt, 0.0) - self._mult(m, m.at) * m.counted_w
            if left > 1e-9 * m.window:
                q.queued[m.rtt] = left
            else:
                q.queued.pop(m.rtt, None)
            self._solve(q, reprice)
        m.window, m.rate, m.at = 0.0, 0.0, -1

    def _held(self, m: _Member, window: float) -> float:
        """The bytes of flow ``m``'s window still standing at an earlier link of its path than the
        one it queues at now (``m.at``), brought up to now: a flow whose queue moves on to a later
        link no faster than the one it stood at for a round trip or more (a newcomer filled a
        shared link behind its own access link) leaves its backlog where it stood. The backlog
        drains from there at that link's rate less what the flow feeds it, into the later link's
        queue, not at once (ns-3: a 4 MB upload's 200 packets in its access queue took half a
        second to reach the shared link, while a 250 KB flow that joined it went through an
        almost empty queue). A faster later link cannot queue what an earlier one drains into it
        at line rate: there the flow's backlog moves with it, as before."""
        now, links = self._now, self._links
        old, at = m.held, m.held_at
        if m.held > 0:
            drain = max(links[m.held_at].capacity - m.sent, 0.0)  # bytes/s
            m.held = max(m.held - (now - m.held_t) * drain, 0.0)
        if m.at < 0 or m.at == m.held_at:
            m.held = 0.0
        elif (m.held <= 0 and m.was >= 0 and m.at != m.was and now - m.since >= m.rtt
              and m.links.index(m.was) < m.links.index(m.at)
              and links[m.at].capacity <= links[m.was].capacity):  # fmt: skip
            m.held, m.held_at = m.backlog, m.was
        m.held, m.held_t = min(m.held, HELD_MAX * window), now
        if m.at != m.was:
            m.since = now
        if at >= 0 and (at != m.held_at or m.held != old):
            self._hold(at, -old)
        if m.held > 0 and (at != m.held_at or m.held != old):
            self._hold(m.held_at, m.held)
        if m.held <= 0:
            m.held_at = -1
        elif m.at >= 0:
            links[m.at].holders[m.fid] = None
        return m.held

    def _migrate(self, link: int, offered: dict[int, tuple[float, float]]) -> None:
        """Bring the backlogs that ``link``'s members left at earlier links up to now (``_held``)
        before windows meet its queue: what has drained from them since stands here now."""
        for fid in list(self._links[link].holders):
            if fid not in offered:
                m = self._members[fid]
                window = m.window
                self._take(m)
                self._put(m, window, link)
                self._stale[fid] = None

    def _hold(self, link: int, change: float) -> None:
        """Bytes held at ``link`` by flows queued further on changed by ``change``: its delay follows."""
        q = self._links[link]
        q.held = max(q.held + change, 0.0)
        self._settle(q)

    def _tightest(self, m: _Member) -> int:
        """The congested link of the flow's path with the largest demand / capacity (the first of
        equals; never an unqueued one), or -1 when its windows fill no link."""
        best, at = 1.0, -1
        for i in m.links:
            if i in self._unqueued:
                continue
            q = self._links[i]
            ratio = q.demand / q.capacity if q.capacity > 0 else math.inf
            if ratio > best * (1.0 + 1e-12):
                best, at = ratio, i
        return at

    def _solve(self, q: _LinkQueue, reprice: bool = False) -> None:
        """Re-solve one link's queue (its delay, capped by the buffer, and loss fraction). With
        ``reprice`` (a window joined it, or a flow left it for good), its members become stale
        when the delay moved by more than ``REPRICE`` of a round trip: a departure must not leave
        a standing queue's link idle till their next rounds, nor an arrival leave them the delay
        of the windows offered before it."""
        self._settle(q)
        moved = abs(q.delay - q.priced)
        if reprice and moved > 0 and q.members:
            shortest = min(q.queued) if q.queued else 0.0  # s, the smallest base RTT queued here
            if moved > REPRICE * (shortest + q.priced):
                self._stale.update(q.members)
                q.priced = q.delay

    def _settle(self, q: _LinkQueue) -> None:
        """One link's queueing delay (s, capped by its buffer; with what flows queued further on
        still hold in it) and loss fraction."""
        if q.capacity <= 0:  # a traced link momentarily off: the rate engine stalls its flows
            q.delay, q.loss = 0.0, 0.0
            return
        held = q.held / q.capacity  # s
        if not q.queued:
            q.delay, q.loss = min(held, q.buffer / q.capacity), 0.0
            return
        # bytes/s left for the flows queued here; flows queued upstream that fill it alone move
        # here at their next round (_gather), until then its own keep a sliver
        room = max(q.capacity - q.elsewhere, MIN_ROOM * q.capacity)
        delay = fifo_delay(q.queued, room)
        full = q.buffer / q.capacity  # s, the delay of a full buffer
        if delay + held <= full:
            q.delay, q.loss = delay + held, 0.0
            return
        offered = sum(w / (d + full) for d, w in q.queued.items())  # bytes/s arriving at a full buffer
        q.delay, q.loss = full, max(0.0, 1.0 - room / offered)
