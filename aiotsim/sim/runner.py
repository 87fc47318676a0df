"""Running a cluster: the strategy's process, from the first dispatch to the summary.

:func:`run_cluster` picks the scenario's strategy from the registry, runs it in the cluster's SimPy
environment and hands every record to a :class:`~aiotsim.sim.accounting.RunSink` as it is made.
However the run ends, the rows written so far stay and the sink gets the trace and a summary:

``complete``     every iteration ran.
``diverged``     the training loss or the aggregated update became NaN/inf; the run stops at once
                 (``reason`` names the iteration). Returned, not raised.
``stalled``      no node was online for ``1000 x nodes.retry_s`` simulated seconds, so no iteration
                 could complete. Returned, not raised.
``interrupted``  Ctrl-C; the ``KeyboardInterrupt`` propagates after the summary is written.
``error: ...``   any other exception; it propagates after the summary is written.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from aiotsim.sim.accounting import RunSink
from aiotsim.sim.stops import RunStopped
from aiotsim.sim.strategies import Strategy, get_strategy, strategy_name
from aiotsim.sim.world import Cluster


def build_strategy(cluster: Cluster) -> Strategy:
    """The scenario's strategy on ``cluster``. Building it may read files (a federated run's
    availability trace) and fail with a :class:`~aiotsim.errors.ConfigError`: a caller builds it
    before it opens a run directory's files, so that a failure leaves them as they were."""
    return get_strategy(strategy_name(cluster.sc))(cluster)


def run_cluster(cluster: Cluster, sink: RunSink, strategy: Strategy | None = None) -> dict[str, Any]:
    """Run the scenario's strategy on ``cluster`` to the end, writing records to ``sink``.

    Parameters
    ----------
    cluster : Cluster
        A freshly built cluster (a cluster runs once).
    sink : RunSink
        Receives metrics and evaluation rows as they are made, then the trace and the summary.
    strategy : Strategy, optional
        :func:`build_strategy`'s result for ``cluster``, when the caller built it first.

    Returns
    -------
    dict
        The summary (``RunSummary.as_dict()``), also for a diverged or stalled run.
    """
    strategy = strategy or build_strategy(cluster)
    cluster.sink = sink
    wall0 = time.perf_counter()
    status, reason = "complete", None
    # the collector stays quiet over the trace and the summary too: restored before them, a full
    # collection set off by their allocations walked every object of the run (1,000 nodes: 0.36 s)
    with quiet_collector():
        try:
            done = cluster.env.process(strategy.run())
            cluster.env.run(until=done)
        except RunStopped as stop:
            status, reason = stop.status, stop.reason
        except KeyboardInterrupt:
            status = "interrupted"
            raise
        except Exception as exc:
            status = f"error: {type(exc).__name__}: {exc}"
            raise
        finally:
            summary = cluster.summary(time.perf_counter() - wall0, status, reason).as_dict()
            sink.write_trace(cluster.trace.events())
            sink.finish(summary)
    return summary


@contextmanager
def quiet_collector(full_every: int = 100) -> Iterator[None]:
    """Python's cyclic garbage collector, tuned for the length of a run, then restored.

    The objects that exist before the run (imported modules, the cluster's per-node state: ~340k
    at 1,000 nodes) are frozen, so full collections skip them (each walked them all: ~0.2 s at
    1,000 nodes, several per iteration). The objects a run makes grow with the fleet (payloads,
    processes, trace events) and are nearly all freed by reference counting (a 1,000-node,
    3-iteration run left 31 objects of cyclic garbage), so a full collection is considered after
    ``full_every`` middle-generation ones instead of 10 (at 10,000 nodes the default made 11 full
    collections in one iteration, 4.5 s). Nothing is computed differently; only when unreachable
    cycles are freed. A caller that froze objects of its own (``gc.freeze()`` before forking
    workers, say) keeps them frozen: then the run freezes and unfreezes nothing.
    """
    threshold = gc.get_threshold()  # (young, middle, full)
    freeze = gc.get_freeze_count() == 0  # unfreeze() would thaw a caller's frozen objects too
    if freeze:
        gc.freeze()
    gc.set_threshold(threshold[0], threshold[1], max(threshold[2], full_every))
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
        if freeze:
            gc.unfreeze()


__all__ = ["run_cluster", "build_strategy", "quiet_collector"]
