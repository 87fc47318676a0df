"""The arithmetic of one drop-tail FIFO under TCP windows: the queueing delay that window-limited
flows build (:func:`fifo_delay`) and which of a round's segments a full buffer drops
(:func:`overflow_positions`). :mod:`aiotsim.network.queues` keeps a network's queues with these;
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
