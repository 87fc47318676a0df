"""Timelines in Chrome/Perfetto trace-event format: a track per node and per link.

Spans are complete events (``"ph": "X"``) with ``ts`` and ``dur`` in microseconds of *simulated*
time. Nodes (and the server) are threads of process 1 ("compute"); each directed link route
(``node3 -> server``) is a thread of process 2 ("network"), so a run's timeline opens in
https://ui.perfetto.dev or chrome://tracing as one row per node and one per link.
``scenario.trace_nodes`` keeps the tracks of some nodes only (a fleet's timeline costs about 1.2 KB
per node and iteration of memory until the run ends, and its file the same order on disk).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence, Set
from typing import Any

US = 1e6  # trace time unit: microseconds per simulated second

PID_COMPUTE, PID_NETWORK = 1, 2
NODE_VERTEX = re.compile(r"node(\d+)")  # a sensor node's vertex name (sim.topologies.node_name)


def spread(count: int, k: int) -> list[int]:
    """``k`` indices spread evenly over ``0..count-1`` for ``k <= count``: ``j * count // k``, so 0
    and every ``count/k``-th (distinct, since ``count/k >= 1``)."""
    return [j * count // k for j in range(k)]


def kept_nodes(count: int, trace_nodes: int | Sequence[int]) -> frozenset[int] | None:
    """Indices of the nodes whose tracks a run's trace keeps (``scenario.trace_nodes``): the
    listed ones when it is a list; None for all of them (``trace_nodes`` < 0 or >= ``count``),
    else ``trace_nodes`` indices spread evenly over ``0..count-1`` (``k * count // trace_nodes``:
    node0 and every ``count/trace_nodes``-th, so a fleet split into groups by index shows each
    group)."""
    if not isinstance(trace_nodes, int):
        return frozenset(trace_nodes)
    if trace_nodes < 0 or trace_nodes >= count:
        return None
    return frozenset(spread(count, trace_nodes))


class TraceRecorder:
    """Collects spans during a run; :meth:`events` yields the trace-event dicts.

    A run keeps every span until its end (four per node and iteration: 800,000 for 10,000 nodes
    x 20 iterations), so a span is kept as one tuple and becomes its event dict only when the
    trace is written: ``(pid, tid, name, start, duration, arg names, *arg values)`` where a
    compute span's start and duration are its floats (s) and a transfer's start is its
    :class:`~aiotsim.network.flows.Transfer` record (the network keeps it anyway) with duration
    ``None``. About 110 bytes a span instead of 550 for the dicts; spans restored from a
    checkpoint stay the event dicts they were saved as.

    Parameters
    ----------
    nodes : set of int, optional
        Keep only a kept node's tracks (see :func:`kept_nodes`): its own and its links' in and out
        (``node3``, ``node3 -> gw0``, ``node2 -> node3`` on a ring, for node 3), and every track
        that names no sensor node (``gw0``, ``gw0 -> server``). None keeps all.
    """

    def __init__(self, nodes: Set[int] | None = None) -> None:
        self._spans: list[tuple[Any, ...] | dict[str, Any]] = []
        self._tids: dict[tuple[int, str], int] = {}
        self._names: dict[tuple[str, ...], tuple[str, ...]] = {}  # one tuple per set of arg names
        self._nodes = nodes
        self._dropped: set[tuple[int, str]] = set()  # tracks left out (see ``nodes``)

    def _tid(self, pid: int, track: str) -> int:
        """The track's id (numbered from 1 in order of first use), 0 for a track left out."""
        key = (pid, track)
        tid = self._tids.get(key)
        if tid is None:
            if key in self._dropped or not self._keeps(track):
                self._dropped.add(key)
                return 0
            tid = self._tids[key] = len(self._tids) + 1
        return tid

    def _keeps(self, track: str) -> bool:
        """Whether the track names a kept node or no sensor node (as an end of ``a -> b``)."""
        if self._nodes is None:
            return True
        named = [int(m[1]) for m in map(NODE_VERTEX.fullmatch, track.split(" -> ")) if m]
        return not named or any(i in self._nodes for i in named)

    def _keys(self, args: dict[str, Any]) -> tuple[str, ...]:
        keys = tuple(args)
        return self._names.setdefault(keys, keys)

    def span(self, track: str, name: str, start_s: float, dur_s: float, **args: Any) -> None:
        """A compute-side span (compute, encode, aggregate) on ``track`` (a node or the server)."""
        tid = self._tid(PID_COMPUTE, track)
        if tid:
            self._spans.append((PID_COMPUTE, tid, name, start_s, dur_s, self._keys(args), *args.values()))

    def transfer(self, tr: Any, name: str, **args: Any) -> None:
        """A network transfer (a ``Transfer`` record) on the track of its route."""
        tid = self._tid(PID_NETWORK, f"{tr.src} -> {tr.dst}")
        if tid:
            self._spans.append((PID_NETWORK, tid, name, tr, None, self._keys(args), *args.values()))

    def state(self) -> dict[str, Any]:
        """The spans and track ids so far, as plain data (for a checkpoint)."""
        spans = [dict(e) if isinstance(e, dict) else _event(e) for e in self._spans]
        return {"spans": spans, "tids": [[p, t, i] for (p, t), i in self._tids.items()]}

    def load_state(self, state: dict[str, Any]) -> None:
        """Continue from a :meth:`state` (track ids keep their numbers and order)."""
        self._spans = [dict(e) for e in state["spans"]]
        self._tids = {(p, t): i for p, t, i in state["tids"]}

    def events(self) -> Iterator[dict[str, Any]]:
        """Metadata events naming processes and tracks, then every span in time order (ties: by
        process and track, then as recorded), each made as it is read."""
        yield {"name": "process_name", "ph": "M", "pid": PID_COMPUTE, "tid": 0, "args": {"name": "compute"}}
        yield {"name": "process_name", "ph": "M", "pid": PID_NETWORK, "tid": 0, "args": {"name": "network"}}
        for (pid, track), tid in self._tids.items():
            yield {"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": track}}
        for e in sorted(self._spans, key=_order):
            yield _event(e)


def _order(e: tuple[Any, ...] | dict[str, Any]) -> tuple[float, int, int]:
    """Sort key of a kept span: (ts us, pid, tid), the floats its event has."""
    if isinstance(e, dict):
        return e["ts"], e["pid"], e["tid"]
    pid, tid, _, start = e[:4]
    return (start.start_s * US if pid == PID_NETWORK else start * US), pid, tid


def _event(e: tuple[Any, ...] | dict[str, Any]) -> dict[str, Any]:
    """The trace-event dict of a kept span (see :class:`TraceRecorder`)."""
    if isinstance(e, dict):
        return e
    pid, tid, name, start, dur, keys, *values = e
    args = dict(zip(keys, values, strict=True))
    if pid == PID_NETWORK:  # a transfer: times and bytes from its record
        ts, dur_us, cat = start.start_s * US, (start.end_s - start.start_s) * US, "network"
        args = {"bytes": start.nbytes, "wire_bytes": start.wire_bytes, **args}
        retransmissions = getattr(start, "retransmissions", None)  # the ns-3 engine's transfers
        if retransmissions is not None:
            args["retransmissions"] = retransmissions
    else:
        ts, dur_us, cat = start * US, dur * US, "compute"
    return {"name": name, "cat": cat, "ph": "X", "ts": ts, "dur": dur_us, "pid": pid, "tid": tid, "args": args}
