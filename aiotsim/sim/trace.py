"""Timelines in Chrome/Perfetto trace-event format: a track per node and per link.

Spans are complete events (``"ph": "X"``) with ``ts`` and ``dur`` in microseconds of *simulated*
time. Nodes (and the server) are threads of process 1 ("compute"); each directed link route
(``node3 -> server``) is a thread of process 2 ("network"), so a run's timeline opens in
https://ui.perfetto.dev or chrome://tracing as one row per node and one per link.
"""

from __future__ import annotations

from typing import Any

US = 1e6  # trace time unit: microseconds per simulated second

PID_COMPUTE, PID_NETWORK = 1, 2


class TraceRecorder:
    """Collects spans during a run; :meth:`events` returns the trace-event list."""

    def __init__(self) -> None:
        self._spans: list[dict[str, Any]] = []
        self._tids: dict[tuple[int, str], int] = {}

    def _tid(self, pid: int, track: str) -> int:
        key = (pid, track)
        if key not in self._tids:
            self._tids[key] = len(self._tids) + 1
        return self._tids[key]

    def span(self, track: str, name: str, start_s: float, dur_s: float, **args: Any) -> None:
        """A compute-side span (compute, encode, aggregate) on ``track`` (a node or the server)."""
        self._spans.append(
            {
                "name": name,
                "cat": "compute",
                "ph": "X",
                "ts": start_s * US,
                "dur": dur_s * US,
                "pid": PID_COMPUTE,
                "tid": self._tid(PID_COMPUTE, track),
                "args": args,
            }
        )

    def transfer(self, tr: Any, name: str, **args: Any) -> None:
        """A network transfer (a ``Transfer`` record) on the track of its route."""
        track = f"{tr.src} -> {tr.dst}"
        self._spans.append(
            {
                "name": name,
                "cat": "network",
                "ph": "X",
                "ts": tr.start_s * US,
                "dur": (tr.end_s - tr.start_s) * US,
                "pid": PID_NETWORK,
                "tid": self._tid(PID_NETWORK, track),
                "args": {"bytes": tr.nbytes, "wire_bytes": tr.wire_bytes, **args},
            }
        )

    def state(self) -> dict[str, Any]:
        """The spans and track ids so far, as plain data (for a checkpoint)."""
        return {"spans": [dict(e) for e in self._spans], "tids": [[p, t, i] for (p, t), i in self._tids.items()]}

    def load_state(self, state: dict[str, Any]) -> None:
        """Continue from a :meth:`state` (track ids keep their numbers and order)."""
        self._spans = [dict(e) for e in state["spans"]]
        self._tids = {(p, t): i for p, t, i in state["tids"]}

    def events(self) -> list[dict[str, Any]]:
        """Metadata events naming processes and tracks, then every span in time order."""
        meta: list[dict[str, Any]] = [
            {"name": "process_name", "ph": "M", "pid": PID_COMPUTE, "tid": 0, "args": {"name": "compute"}},
            {"name": "process_name", "ph": "M", "pid": PID_NETWORK, "tid": 0, "args": {"name": "network"}},
        ]
        for (pid, track), tid in self._tids.items():
            meta.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": track}})
        return meta + sorted(self._spans, key=lambda e: (e["ts"], e["pid"], e["tid"]))
