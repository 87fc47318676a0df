"""The arithmetic of one drop-tail FIFO under TCP windows: the queueing delay that window-limited
flows build (:func:`fifo_delay`) and which of a round's segments a full buffer drops
(:func:`overflow_positions`), and how a burst fills it and what of the burst it drops
(:func:`fill_burst`, with the levels bursts leave behind: :func:`built_level`,
:func:`written_level`). :mod:`aiotsim.network.queues` keeps a network's queues with these;
:mod:`aiotsim.network.tcp` places a round's overflow losses. Units: bytes, bytes/s, s."""

from __future__ import annotations

import math

MAX_NEWTON = 60
SOLVE_TOL = 1e-12  # relative tolerance of the FIFO delay's Newton steps


def fifo_delay(windows: dict[float, float], capacity: float) -> float:
    """The queueing delay ``q`` (s) of a FIFO link at ``capacity`` (bytes/s) carrying window-limited
    flows: the ``q >= 0`` with ``sum_d W_d / (d + q) = capacity``, 0 when the windows do not fill
    the link at ``q = 0``.

    Parameters
    ----------
    windows : dict of float to float
        Base round trip ``d`` (s) -> the summed windows (wire bytes) of the flows with that round trip.
    capacity : float
        What the link has left for these flows, bytes/s.

    Examples
    --------
    One RTT class: ``q = W / C - d``; 30,000 bytes in flight at 125,000 bytes/s over 0.1 s:

    >>> round(fifo_delay({0.1: 30_000.0}, 125_000.0), 12)
    0.14
    """
    if capacity <= 0:
        return math.inf
    demand = sum(w / d if d > 0 else math.inf for d, w in windows.items() if w > 0)
    if demand <= capacity:
        return 0.0
    if len(windows) == 1:
        ((d, w),) = windows.items()
        return max(w / capacity - d, 0.0)
    # f(q) = sum W/(d+q) - C is convex and decreasing: Newton from below converges monotonically
    q = 0.0 if all(d > 0 for d in windows) else 1e-12  # s; a zero base RTT needs q > 0 to start
    for _ in range(MAX_NEWTON):
        f = -capacity
        df = 0.0
        for d, w in windows.items():
            x = d + q
            f += w / x
            df -= w / (x * x)
        step = f / df  # <= 0 while f >= 0
        q -= step
        if -step <= SOLVE_TOL * max(q, 1e-9):
            break
    return q


def overflow_positions(sent: int, lost: int) -> list[int]:
    """Which of a round's ``sent`` segments (0-based) a full drop-tail buffer drops when ``lost``
    of them do not fit: the tail of the round, every other one (in slow start and at a standing
    queue, each ACK releases two segments while the link drains one, so once the buffer is full
    every second arrival finds it full); contiguous when more than half must go."""
    lost = min(max(lost, 0), sent)
    if lost == 0:
        return []
    if 2 * lost <= sent:
        return [sent - 1 - 2 * k for k in range(lost)][::-1]
    return list(range(sent - lost, sent))


def fill_burst(
    level: float,
    buffer: float,
    capacity: float,
    fluid: float,
    rate: float,
    arriving: list[tuple[float, float]],
    now: float,
    span: float,
) -> tuple[float, float, float]:
    """A burst arriving at ``rate`` for ``span`` s from ``now`` into a link draining ``capacity``
    (bytes/s) whose queue holds ``level`` of its ``buffer`` (bytes), besides the other flows'
    ``fluid`` rate and the bursts still ``arriving`` ((end s, bytes/s above their fluid rate)
    each): the queue piles at the arrivals' excess over the capacity, piece by piece as the other
    bursts end, and once full drops every arrival alike, so the burst loses its share, ``rate /
    arrivals``, of the excess. Returns the queue when the burst ends (bytes, at most the buffer),
    the bytes of the burst dropped and the rate the queue gains at first (bytes/s). Eight initial
    windows 0.1 ms apart into one 10-packet queue: each comes while the others still arrive, and
    the later ones lose most of theirs."""
    ends = sorted((e, x) for e, x in arriving if e > now)  # the other bursts, as they end
    total = fluid + rate + sum(x for _, x in ends)  # bytes/s arriving now
    rise = max(total - capacity, 0.0)
    t, end, dropped, k = now, now + span, 0.0, 0
    while t < end:
        stop = min(ends[k][0], end) if k < len(ends) else end
        excess = total - capacity  # bytes/s the queue gains in [t, stop]
        dt = stop - t
        if excess > 0:
            fills = (buffer - level) / excess if level < buffer else 0.0  # s until it is full
            if fills < dt:
                dropped += (dt - fills) * excess * rate / total
            level = min(level + excess * dt, buffer)
        else:
            level = max(level + excess * dt, 0.0)
        t = stop
        while k < len(ends) and ends[k][0] <= t:  # a burst that ended: its rate leaves the sum
            total -= ends[k][1]
            k += 1
    return level, dropped, rise


def written_level(written: tuple[float, float, float], now: float) -> float:
    """Bytes the windows last written at once into a sender's own link still hold above its fluid
    queue at ``now`` (s): they have drained since."""
    top, since, drain = written
    return max(top - (now - since) * drain, 0.0) if top > 0 else 0.0


def built_level(built: tuple[float, float, float, float, float, float], now: float) -> float:
    """The queue (bytes) the last ACK-clocked burst at a link built, at ``now`` (s): rising from
    where it began at the rate it began with until it reaches its top, held there until its
    arrival ends, draining after."""
    base, start, rise, top, end, drain = built
    if now < end:
        return min(base + max(now - start, 0.0) * rise, top)
    return max(top - (now - end) * drain, 0.0)
