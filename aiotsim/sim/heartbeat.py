"""Progress reports of a run: after every iteration, and during a long one.

A fleet's iteration computes thousands of real gradients (90 s for 10,000 LeNet-5 nodes on a
2-core CPU) before its row is written; a progress display with nothing to show for that long looks
hung. So a run also reports, at most every :data:`HEARTBEAT_S` wall seconds, how many gradients
the iteration under way has computed (:attr:`~aiotsim.records.Progress.gradients`). What the run
computes does not depend on it.

The same count paces the C heap's trims in a fleet run (:mod:`aiotsim.sim.allocator`): a
streamed aggregation may trim at each result, and within a round the heap could still grow by the
holes that gradients and encodes leave between messages (iot10k with ``topk``: 6.0 -> 7.1 GB in
one round of twenty, given back at its end); every :data:`~aiotsim.sim.allocator.TRIM_EVERY`
gradients the run's :class:`~aiotsim.sim.allocator.HeapTrimmer` is asked too, and trims when the
resident memory has set a new high (10,000 nodes: about 10 ms a trim).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import replace

from aiotsim.records import Progress
from aiotsim.sim.allocator import TRIM_EVERY, HeapTrimmer
from aiotsim.sim.stops import check_stop, clear_stop

HEARTBEAT_S = 1.0  # wall seconds between reports within an iteration


class Heartbeat:
    """Calls ``on_progress`` with each row's :class:`Progress`, and with the gradients computed
    since (``gradients`` > 0, the other fields the last row's) at a gradient that comes
    :data:`HEARTBEAT_S` or more after the iteration's first one or the last such call; asks
    ``trimmer`` (a streamed aggregation's run) to trim every :data:`~aiotsim.sim.allocator.TRIM_EVERY`
    gradients of an iteration."""

    def __init__(
        self, on_progress: Callable[[Progress], None] | None, total: int, trimmer: HeapTrimmer | None = None
    ) -> None:
        self.on_progress = on_progress
        self.trimmer = trimmer
        self.trim_every = TRIM_EVERY if trimmer is not None else 0  # gradients between trim checks (0: none)
        self.last = Progress(0, total, 0.0, math.nan)
        self.gradients = 0
        self.due = math.inf  # wall time (time.monotonic) of the next report within an iteration
        clear_stop()  # a new run: an earlier run's stop in this process is not this one's

    def gradient(self, completed: int) -> None:
        """A node's gradient was computed; ``completed``: the run's iterations done before it.
        Raises a stop recorded while SimPy holds it for another process (:func:`~aiotsim.sim.stops.check_stop`)."""
        check_stop()  # no further gradients once a stop has come: every mode's nodes pass here
        self.gradients += 1
        if self.trimmer is not None and self.gradients % self.trim_every == 0:
            self.trimmer.maybe_trim()
        if self.gradients == 1:  # the interval starts with the iteration's work, not with setup
            self.due = time.monotonic() + HEARTBEAT_S
        elif self.on_progress is not None and time.monotonic() >= self.due:
            self.due = time.monotonic() + HEARTBEAT_S
            self.on_progress(replace(self.last, iteration=completed, accuracy=None, gradients=self.gradients))

    def row(self, progress: Progress) -> None:
        """An iteration's row was written: report it, and count the next one's gradients from 0."""
        self.last, self.gradients = progress, 0
        if self.on_progress is not None:
            self.on_progress(progress)
