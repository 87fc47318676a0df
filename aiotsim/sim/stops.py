"""Why a run stops before its last iteration without anything being wrong with the program.

A run *diverges* when the training loss or the aggregated update stops being finite (a NaN or an
infinity never recovers: the optimizer spreads it to every parameter), or when the optimizer step
overflows the parameters' dtype (a learning rate of 1e300). It *stalls* when no node is online
for long enough that no iteration can complete. Both are outcomes of the scenario, reported in
the summary's ``status`` and ``reason``; they are raised inside the SimPy processes to stop the
simulation at once and caught by :func:`aiotsim.sim.runner.run_cluster`.
"""

from __future__ import annotations


class RunStopped(Exception):
    """The run cannot go on: ``status`` (the summary's) and ``reason`` (a sentence) say why."""

    status = "stopped"

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Diverged(RunStopped):
    """The training loss or the aggregated update is no longer finite."""

    status = "diverged"


class Stalled(RunStopped):
    """No node has been online for the stall limit: no iteration can complete."""

    status = "stalled"


__all__ = ["RunStopped", "Diverged", "Stalled"]
