"""Time-varying links and sampled losses of :class:`aiotsim.network.flows.Network` (a mixin; the
state lives in the network): the capacity of a link with a :class:`~aiotsim.network.traces.RateTrace`
read again when it changes under a live flow, and Gilbert-Elliott losses sampled per transfer
(wire bytes and delay), with the generator state a checkpoint keeps. Units: bytes, bytes/s, s.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Mapping

import numpy as np

from aiotsim.network.flow_records import PathCost
from aiotsim.network.link import Link
from aiotsim.network.overhead import packets, wire_bytes
from aiotsim.network.queues import QueueLinks
from aiotsim.network.rates import RateClasses
from aiotsim.network.traces import SNAP_S, GilbertElliott, RateTrace, retransmitted_packets


class LinkVariation:
    """Traced capacities and sampled losses of a :class:`~aiotsim.network.flows.Network` (module
    docstring); the attributes below are the network's."""

    seed: int
    _link_index: dict[str, int]
    _link_names: list[str]
    _cap: np.ndarray
    _rates: RateClasses
    _queues: QueueLinks | None
    _traces: dict[int, RateTrace]

    def loss_state(self) -> dict[str, object]:
        """What a checkpoint must keep of sampled (Gilbert-Elliott) losses: the generator the
        chains draw from and the samples :meth:`wire_bytes_for` took for sends still to come."""
        pre = [[src, dst, n, [list(s) for s in q]] for (src, dst, n), q in self._presampled.items()]
        return {"rng": self._loss_rng.bit_generator.state, "presampled": pre}

    def restore_loss_state(self, state: Mapping[str, object]) -> None:
        """Restore :meth:`loss_state`."""
        pre = state["presampled"]
        assert isinstance(pre, list)
        self._loss_rng.bit_generator.state = state["rng"]
        self._presampled = {(src, dst, int(n)): deque((float(b), float(d)) for b, d in q) for src, dst, n, q in pre}

    def _init_time_varying(self, links: Mapping[str, Link]) -> None:
        """Index the links with a capacity trace; a separate generator for sampled losses."""
        self._traces = {self._link_index[n]: lk.trace for n, lk in links.items() if lk.trace is not None}
        # links with no trace, loss model or jitter (a path of only these needs none of their tuples)
        self._plain = {
            self._link_index[n]
            for n, lk in links.items()
            if lk.trace is None and lk.loss_model is None and not lk.jitter_s > 0
        }
        self._is_traced = np.zeros(len(self._link_names) + 1, dtype=bool)  # [links + 1]
        self._is_traced[list(self._traces)] = True
        # [links + 1] s: when each traced link's capacity next changes, as of its last refresh (it
        # goes stale, i.e. into the past, while the link is idle); -inf: never read
        self._due = np.full(len(self._link_names) + 1, -np.inf)
        self._due_heap: list[tuple[float, int]] = []  # (due s, link) of traced links in use
        self._loss_rng = np.random.default_rng([self.seed, 0x6E55])
        # (src, dst, nbytes) -> (wire bytes, delay s) sampled by wire_bytes_for, not yet sent
        self._presampled: dict[tuple[str, str, int], deque[tuple[float, float]]] = {}

    def _due_valid(self, entry: tuple[float, int]) -> bool:
        due, i = entry
        return self._rates.users[i] > 0 and due == self._due[i]

    def _refresh_capacity(self, now: float) -> None:
        """Set the capacity (bytes/s) of every traced link that carries a live flow and whose
        capacity changed since it was last read (only those: one trace lookup per change)."""
        snap = max(SNAP_S, 4.0 * math.ulp(now))  # a timer may land a few ulps short of a change
        while self._due_heap and self._due_heap[0][0] <= now + snap:
            entry = heapq.heappop(self._due_heap)
            if not self._due_valid(entry):
                continue
            i = entry[1]
            trace = self._traces[i]
            self._cap[i] = trace.rate_at(now)
            self._due[i] = trace.next_change(now)
            self._rates.set_link_cap(i, float(self._cap[i]), now)
            if self._queues is not None:
                self._queues.set_capacity(i, float(self._cap[i]))
            heapq.heappush(self._due_heap, (float(self._due[i]), i))

    def _take_sampled_loss(self, src: str, dst: str, path: PathCost, nbytes: int) -> tuple[float, float]:
        """The losses :meth:`wire_bytes_for` sampled for this transfer, else a fresh sample."""
        queue = self._presampled.get((src, dst, nbytes))
        return queue.popleft() if queue else self._sampled_loss(path, nbytes)

    def _sampled_loss(self, path: PathCost, nbytes: int) -> tuple[float, float]:
        """Wire bytes and delay (s) of one transfer with its lost packets sampled: every packet of
        the lossless wire size, plus one more packet's worth per loss; one RTT of delay per loss.
        Bernoulli links on the same path are sampled too (a chain whose states lose alike)."""
        fmt = path.fmt
        n = packets(nbytes, fmt.mtu, fmt.header_bytes)
        base = wire_bytes(nbytes, fmt.mtu, fmt.header_bytes, 0.0, fmt.framing_bytes, fmt.acks_per_packet)  # bytes
        models = list(path.bursty)
        if fmt.loss > 0:
            models.append(GilbertElliott(0.5, 0.5, fmt.loss, fmt.loss))
        lost = retransmitted_packets(models, n, self._loss_rng)
        return base * (n + lost) / n, fmt.latency_s + lost * 2.0 * fmt.latency_s
