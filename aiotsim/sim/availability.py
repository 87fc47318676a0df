"""Availability traces: when each node of a federated fleet is online, from a CSV file.

The file lists online intervals, one per line (a header line and ``#`` comments are allowed)::

    node,start_s,end_s
    0,0,120.5
    node3,30,1e9

``node`` is an index (``7``) or a network name (``node7``); times are simulated seconds with
``0 <= start_s < end_s``. Overlapping or touching intervals of a node are merged. A node the file
lists is online exactly inside its intervals (half-open, ``[start, end)``) and offline elsewhere,
also after its last interval; a node it does not list follows ``nodes.dropout_prob``'s chain
(always online by default). In a federated round a listed node that is offline at any moment
between its download starting and its upload arriving loses that update (a device that drops
mid-upload does not deliver it). It stops at that moment: a transfer it is in is cut (the bytes not
yet sent never load the links), and the round learns of the loss then. Lookups cost
``O(log intervals)``: a fleet of 100,000 nodes with a trace costs nothing for the nodes a round
does not touch.
"""

from __future__ import annotations

import bisect
import csv
import math
from pathlib import Path

from aiotsim.errors import ConfigError
from aiotsim.inputfiles import MIB, read_input_text

# The most bytes an availability file may hold: 32 MiB is about 1.5 million intervals (~22 bytes a
# row), 15 per node of a 100,000-node fleet; Python's csv reads it in a few seconds.
MAX_AVAILABILITY_BYTES = 32 * MIB
AVAILABILITY_FORMAT = "give a CSV file of node,start_s,end_s rows"
MAX_PROBLEMS = 20  # bad rows listed in one message (a wrong file may have millions)


class AvailabilityTrace:
    """Per-node online intervals.

    Parameters
    ----------
    intervals : dict of int to list of (float, float)
        Node index -> online ``[start_s, end_s)`` intervals (any order; merged here).
    """

    def __init__(self, intervals: dict[int, list[tuple[float, float]]]) -> None:
        self._starts: dict[int, list[float]] = {}
        self._ends: dict[int, list[float]] = {}
        for node, spans in intervals.items():
            merged: list[list[float]] = []
            for a, b in sorted(spans):
                if merged and a <= merged[-1][1]:
                    merged[-1][1] = max(merged[-1][1], b)
                else:
                    merged.append([a, b])
            self._starts[node] = [a for a, _ in merged]
            self._ends[node] = [b for _, b in merged]

    @classmethod
    def from_csv(cls, path: str | Path, n_nodes: int) -> AvailabilityTrace:
        """Read a trace file; raises :class:`ConfigError` naming the file and line of a bad row, or
        the path and the reason when it is not a readable regular UTF-8 file of at most
        :data:`MAX_AVAILABILITY_BYTES` (a FIFO, a device, a binary file), never quoting its content."""
        p = Path(path)
        where = f"nodes.availability_trace: {p}"
        try:
            text = read_input_text(p, "availability trace", MAX_AVAILABILITY_BYTES, AVAILABILITY_FORMAT)
        except ConfigError as exc:
            raise ConfigError([f"nodes.availability_trace: {line}" for line in exc.problems]) from None
        out: dict[int, list[tuple[float, float]]] = {}
        problems: list[str] = []
        rows = csv.reader(text.splitlines())
        try:
            for lineno, row in enumerate(rows, start=1):
                cells = [x.strip() for x in row]
                if not cells or not cells[0] or cells[0].startswith("#") or (lineno == 1 and cells[0] == "node"):
                    continue
                try:
                    node, span = _row(cells, n_nodes)
                except ValueError as exc:
                    problems.append(f"{where}:{lineno}: {exc}")
                    continue
                out.setdefault(node, []).append(span)
        except csv.Error:  # a field over csv's size limit, an unbalanced quote ...
            problems.append(f"{where}:{rows.line_num}: not a CSV row; {AVAILABILITY_FORMAT}")
        if len(problems) > MAX_PROBLEMS:
            problems[MAX_PROBLEMS:] = [f"{where}: ... and {len(problems) - MAX_PROBLEMS} more bad rows"]
        if problems:
            raise ConfigError(problems)
        return cls(out)

    def listed(self, i: int) -> bool:
        """True when the trace decides node ``i``'s availability."""
        return i in self._starts

    def online(self, i: int, t: float) -> bool:
        """Node ``i`` (listed) is online at simulated time ``t``."""
        k = bisect.bisect_right(self._starts[i], t) - 1
        return k >= 0 and t < self._ends[i][k]

    def online_through(self, i: int, t0: float, t1: float) -> bool:
        """Node ``i`` is online at every moment of ``[t0, t1]`` (unlisted nodes: always True)."""
        return t1 < self.offline_from(i, t0)

    def offline_from(self, i: int, t: float) -> float:
        """The first moment at or after ``t`` (s) at which node ``i`` is offline: ``t`` itself when
        it is offline at ``t``, the end of its interval when online (inf: an unlisted node)."""
        if i not in self._starts:
            return math.inf
        k = bisect.bisect_right(self._starts[i], t) - 1
        return self._ends[i][k] if k >= 0 and t < self._ends[i][k] else t


def _row(cells: list[str], n_nodes: int) -> tuple[int, tuple[float, float]]:
    """One CSV row as ``(node, (start_s, end_s))``; ValueError says what is wrong."""
    if len(cells) != 3:
        raise ValueError(f"expected 3 fields node,start_s,end_s, got {len(cells)}")
    name = cells[0].removeprefix("node")
    if not (name.isascii() and name.isdigit()) or len(name) > 6 or int(name) >= n_nodes:  # < MAX_NODES = 1e5
        raise ValueError(f"the node is not a node index 0..{n_nodes - 1} (or node0..)")
    try:
        start, end = float(cells[1]), float(cells[2])
    except ValueError:
        raise ValueError("start_s and end_s must be numbers") from None
    if not (math.isfinite(start) and start >= 0 and end > start):
        raise ValueError(f"need 0 <= start_s < end_s, got {start:g}, {end:g}")
    return int(name), (start, end)


__all__ = ["AvailabilityTrace"]
