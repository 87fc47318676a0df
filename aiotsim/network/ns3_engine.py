"""The packet-level engine: aiotsim's messages carried by ns-3, co-simulated with SimPy.

``network.engine = "ns3"`` replaces the flow model (:class:`~aiotsim.network.flows.Network`) by
:class:`Ns3Network`, which has the same interface (``send`` returns a SimPy event that fires with
the :class:`~aiotsim.network.flows.Transfer` when the last byte has arrived; ``cancel``;
``wire_bytes_for``), so every strategy (sync, partial, async, federated, ring) runs unchanged.

**Co-simulation (conservative).** ns-3 lives in a child process (:mod:`aiotsim.network.ns3_worker`,
which says why) and its clock never runs ahead of what SimPy may still do: one SimPy process, the
*pump*, owns it. While messages are in flight the pump asks SimPy for its next event (``env.peek()``,
the horizon: nothing in SimPy can happen before it, so nothing can send before it), hands ns-3 the
messages sent so far with their send times, and runs ns-3 to the horizon or to the first message's
completion, whichever is first. It then sleeps in SimPy until that instant and fires the completed
messages' events. A message therefore enters ns-3 at its exact simulated start, with its real
payload size, and SimPy sees its arrival at ns-3's arrival time: both clocks agree to ns-3's
resolution (1 ns; a Wi-Fi cell's ns-3 clock runs :data:`WARMUP_S` ahead, the time its
stations had to associate before the simulation's time 0; ns-3's counters start after it). With
nothing in flight the pump waits for the next send; ns-3's clock then lags SimPy's, and catches up
(in order) when the next message is handed over at its start time.

**Bytes.** ns-3 sends the payload with its own headers (see :mod:`aiotsim.network.ns3_spec`). The
wire bytes a run *accounts* at dispatch are the flow model's estimate (``wire_bytes_for``, used by
the metrics as with the flow engine); what ns-3 really put on each link is in :meth:`facts`, beside
it, per link: bytes, most packets queued, drops. A zero-byte message is sent as one byte (TCP sends
nothing for zero bytes).

**Limits.** A cancelled message (a federated node that drops out mid-upload) stops its stream: no
more bytes are handed to TCP, and what its socket buffer already holds still drains in ns-3 but is
delivered to nobody. TCP state lives in ns-3, which cannot be saved: runs on this engine do not
checkpoint.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import math
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Generator
from typing import IO, Any, NamedTuple

import numpy as np
import simpy

from aiotsim.errors import AiotsimError
from aiotsim.network.flows import Transfer, _checked_bytes
from aiotsim.network.ns3_spec import RadioOptions, world_spec
from aiotsim.network.overhead import path_format, wire_total
from aiotsim.network.tcp import TcpParams
from aiotsim.network.topology import Topology

NS_PER_S = 1_000_000_000
# s of ns-3 time a radio cell runs before the simulation's time 0: Wi-Fi stations find the access
# point (a beacon every 102.4 ms) and associate, LTE UEs attach (tens of ms), as a deployed sensor's
# radio has before training starts; without it the first uploads' SYNs are lost, resent 1 s later
WARMUP_S = 1.0
WARMUP_MAX_S = 30.0  # s: a crowded cell gets more, in steps of WARMUP_S, until every radio has joined
# s: how long ns-3 may run without any SimPy event due and with no message completing before the
# run is declared stuck (a connection that gave up, a station out of range)
STUCK_S = 3600.0


class Ns3Error(AiotsimError):
    """ns-3 failed, or a message can never arrive."""


def _ns(t_s: float) -> int:
    """Simulated seconds as ns-3's integer nanoseconds (rounded to the nearest)."""
    return round(t_s * NS_PER_S)


def worker_error(stderr: str) -> str:
    """What a dead worker said that explains its end: ns-3's assertion or fatal error, or Python's
    last exception line, without cppyy's stack dump of the abort (lines of frames and registers)."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip() and "materialize symbols" not in ln]
    said = [ln for ln in lines if ln.startswith(("NS_ASSERT", "NS_FATAL", "msg=", "assert failed"))]
    if said:
        return " ".join(said)[:2000]
    plain = [ln for ln in lines if not ln.startswith(("#", "Thread ", "***")) and "entry=" not in ln]
    return " ".join(plain[-3:])[:2000] or "no message"


class Ns3Worker:
    """The child process that runs ns-3 worlds, one at a time (JSON lines over its stdin and
    stdout). Use :meth:`open` and :meth:`release`: a released worker is reset and kept for the
    process's next world (loading ns-3's bindings costs ~11 s of CPU, a reset milliseconds)."""

    def __init__(self) -> None:
        self._err: IO[str] = tempfile.TemporaryFile("w+")  # cppyy's and ns-3's chatter, kept for errors
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "aiotsim.network.ns3_worker"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._err, text=True, bufsize=1,
        )  # fmt: skip
        self.built: dict[str, Any] = {}
        self._owner = os.getpid()  # a forked child must not drive its parent's worker
        self._waiting = False  # a request sent whose reply was not read (an interrupted call)
        self._released = False  # its world ended: it is idle, or ended
        try:
            self._read()  # {"ready": true}: ns-3 loaded and the program compiled
        except BaseException:
            self.close()
            raise

    @classmethod
    def open(cls, spec: dict[str, Any]) -> Ns3Worker:
        """A worker with the world ``spec`` built: an idle one of this process's, else a new one.
        If the build fails the worker is ended (a half-built world is not reused)."""
        with _IDLE_LOCK:
            mine = [w for w in _IDLE if w._owner == os.getpid()]
            worker = mine[-1] if mine else None
            _IDLE[:] = mine[:-1]
        worker = worker or cls()
        worker._released = False
        try:
            worker.built = worker.call(spec)
        except BaseException:  # else the worker (~700 MB) lives on until this process ends
            worker.close()
            raise
        return worker

    def release(self) -> None:
        """End this worker's world and keep the worker for the next :meth:`open` (at most
        :data:`IDLE_MAX` wait, ~650 MB each, until the process exits); else end the worker."""
        if self._released:  # a network closed twice must not park its worker twice
            return
        self._released = True
        if self._waiting or self._owner != os.getpid():  # its next reply is an old request's
            self.close()
            return
        try:
            self.call({"op": "reset"})
        except Ns3Error:  # it died, or cannot reset: a new world gets a new worker
            self.close()
            return
        with _IDLE_LOCK:
            if len(_IDLE) < IDLE_MAX:
                _IDLE.append(self)
                return
        self.close()

    def _read(self) -> dict[str, Any]:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            if line.startswith("@@"):
                reply: dict[str, Any] = json.loads(line[2:])
                if "error" in reply:
                    raise Ns3Error(f"ns-3: {reply['error']}")
                return reply
        self._err.seek(0)
        raise Ns3Error(f"the ns-3 worker stopped (exit {self._proc.wait()}): {worker_error(self._err.read())}")

    def call(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Send one request, return its reply (Ns3Error when the worker reports an error)."""
        assert self._proc.stdin is not None
        self._waiting = True
        with contextlib.suppress(BrokenPipeError):  # a dead worker: _read reports its own error
            self._proc.stdin.write(json.dumps(msg) + "\n")
            self._proc.stdin.flush()
        reply = self._read()  # an Ns3Error from the worker is a reply read: the protocol is in step
        self._waiting = False
        return reply

    def close(self) -> None:
        """End the worker (it destroys its simulator when its stdin closes)."""
        if self._proc.poll() is None:
            assert self._proc.stdin is not None
            self._proc.stdin.close()
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
        self._err.close()


# Workers with no world, ready for the next Ns3Worker.open in this process (compare and sweeps run
# their runs one after another in a process; the ns-3 engine check runs two cases at a time).
IDLE_MAX = 2
_IDLE: list[Ns3Worker] = []
_IDLE_LOCK = threading.Lock()


@atexit.register
def close_idle_workers() -> None:
    """End every idle worker of this process (at its exit, or when a caller wants the memory back)."""
    with _IDLE_LOCK:
        idle = [w for w in _IDLE if w._owner == os.getpid()]  # a forked child leaves its parent's be
        _IDLE.clear()
    for worker in idle:
        worker.close()


# A :class:`~aiotsim.network.flows.Transfer` carried by ns-3: the same fields in the same order, then
# ``retransmissions``, the TCP segments its stream retransmitted while it was in flight (a run's
# trace shows them beside the transfer's bytes). Built from Transfer's fields, so they stay one list.
Ns3Transfer = NamedTuple("Ns3Transfer", [*Transfer.__annotations__.items(), ("retransmissions", int)])  # type: ignore[misc]


class _Message:
    __slots__ = ("src", "dst", "tag", "nbytes", "wire", "start", "event")

    def __init__(self, src: str, dst: str, tag: str, nbytes: int, wire: float, start: float, event: simpy.Event):
        self.src, self.dst, self.tag, self.nbytes, self.wire = src, dst, tag, nbytes, wire
        self.start, self.event = start, event


class Ns3Network:
    """A topology's links simulated packet by packet by ns-3; the interface of
    :class:`~aiotsim.network.flows.Network`.

    Parameters
    ----------
    env : simpy.Environment
        The simulation's environment; the pump process runs in it.
    topology : Topology
        Vertices, links and routes (see :func:`~aiotsim.network.ns3_spec.world_spec` for what ns-3
        builds from it and what it refuses).
    seed : int
        The run's seed: ns-3's RngRun (seed + 1), the loss models' and Wi-Fi's draws.
    tcp : TcpParams, optional
        The scenario's TCP settings.
    keep_records : bool
        Keep every transfer in :attr:`transfers`.
    options : RadioOptions, optional
        The 802.11 cell of a shared-medium topology, the LTE cell of a star on 4G.
    radios : dict of str to str, optional
        Each node's radio preset: a star all on ``"4g"`` runs as one LTE cell.

    Attributes
    ----------
    transfers : list of Transfer
        Completed transfers in order of arrival (with ``keep_records``).
    retransmissions : list of int
        Per completed transfer (same order as its arrivals), TCP segments retransmitted on its
        stream while it was in flight.
    """

    def __init__(
        self,
        env: simpy.Environment,
        topology: Topology,
        seed: int = 0,
        tcp: TcpParams | None = None,
        keep_records: bool = True,
        options: RadioOptions | None = None,
        radios: dict[str, str] | None = None,
    ) -> None:
        self.env = env
        self.topology = topology
        self.tcp = tcp or TcpParams()
        spec, self._devices = world_spec(topology, self.tcp, seed, options, radios)
        self._index = {v: i for i, v in enumerate(topology.vertices)}
        # ns-3's clock = SimPy's + the warm-up (ns)
        cells = bool(spec["wifi"] or spec["lte"])
        spec["warmup_ns"] = _ns(WARMUP_S) if cells else 0
        spec["warmup_max_ns"] = _ns(WARMUP_MAX_S) if cells else 0
        self._worker = Ns3Worker.open(spec)
        self._offset_ns = int(self._worker.built["warmup_ns"])
        lost = self._worker.built["unassociated"]
        if lost:
            self._worker.release()
            what = "LTE UE(s) did not attach to the eNB" if spec["lte"] else "Wi-Fi station(s) did not associate"
            raise Ns3Error(f"{len(lost)} {what} within {WARMUP_MAX_S:g} s (node{lost[0]}, ...): the cell is too "
                           "crowded or too large (network.wifi_radius_m)")  # fmt: skip
        self.transfers: list[Transfer | Ns3Transfer] = []
        self.retransmissions: list[int] = []
        self._retx = 0  # retransmitted segments of every completed transfer
        self._keep = keep_records
        self._messages: dict[int, _Message] = {}  # in flight, by id
        self._next_id = 0
        self._sends: list[list[int]] = []  # handed to ns-3 with the pump's next run
        self._wake: simpy.Event | None = None
        self._ns3_ns = self._offset_ns  # ns-3's clock, ns
        self._link_names = list(topology.links)
        self._carried = np.zeros(len(self._link_names) + 1)  # wire bytes per link (the model's estimate)
        self._link_index = {name: i for i, name in enumerate(self._link_names)}
        self._paths: dict[tuple[str, str], tuple[list[str], list[str], Any]] = {}
        env.process(self._pump())

    # ------------------------------------------------------------------ the flow engine's interface
    @property
    def link_bytes(self) -> dict[str, float]:
        """Wire bytes per link name, as the flow model estimates them for the messages carried."""
        return {name: float(self._carried[i]) for i, name in enumerate(self._link_names)}

    def send(self, src: str, dst: str, nbytes: int, tag: str = "") -> simpy.Event:
        """Start a transfer of ``nbytes`` payload bytes from ``src`` to ``dst`` now; the event fires
        with its :class:`Transfer` when ns-3 has delivered the last byte."""
        nbytes = _checked_bytes(nbytes)
        names, nodes, _ = self._path(src, dst)
        event = simpy.Event(self.env)
        now = self.env.now
        wire = self.wire_bytes_for(src, dst, nbytes)
        if not names:
            record = Transfer(src, dst, tag, nbytes, 0.0, now, now, [], [src])
            self._arrived(record, 0)
            event.succeed(record)
            return event
        k = self._next_id
        self._next_id += 1
        self._messages[k] = _Message(src, dst, tag, nbytes, wire, now, event)
        at = max(_ns(now) + self._offset_ns, self._ns3_ns)
        self._sends.append([k, self._index[src], self._index[dst], max(nbytes, 1), at])
        if self._wake is not None and not self._wake.triggered:
            self._wake.succeed()
        return event

    def cancel(self, event: simpy.Event) -> Transfer | None:
        """Stop a transfer whose sender is gone (see the module's notes); None if it has arrived.
        The record's ``wire_bytes`` is 0: ns-3 is not asked how much of it had crossed."""
        if event.triggered:
            return None
        k = next((k for k, m in self._messages.items() if m.event is event), None)
        if k is None:
            return None
        m = self._messages.pop(k)
        queued = [s for s in self._sends if s[0] == k]
        if queued:  # never reached ns-3
            self._sends.remove(queued[0])
        else:
            self._worker.call({"op": "cancel", "id": k})
        names, nodes, _ = self._path(m.src, m.dst)
        return Transfer(m.src, m.dst, m.tag, m.nbytes, 0.0, m.start, self.env.now, names, nodes)

    def wire_bytes_for(self, src: str, dst: str, nbytes: int) -> float:
        """The flow model's estimate of the wire bytes of ``nbytes`` on the path (what the run's
        metrics count at dispatch; ns-3's own counts are in :meth:`facts`)."""
        nbytes = _checked_bytes(nbytes)
        names, _, fmt = self._path(src, dst)
        if not names:
            return 0.0
        return wire_total(nbytes, fmt.mtu - fmt.header_bytes, fmt.header_bytes + fmt.framing_bytes,
                          1.0 + fmt.acks_per_packet, 1.0 - fmt.loss)  # fmt: skip

    def facts(self) -> dict[str, Any]:
        """What ns-3 measured so far: per link, wire bytes sent (with ns-3's headers and framing),
        the most packets its queue held and its drops; retransmitted segments in all; on a Wi-Fi cell
        (``"radio"``) each station's energy on ns-3's Wi-Fi radio energy model (J, idle included:
        its default currents, 3 V) and the seconds its radio sent and received."""
        rows = self._worker.call({"op": "stats"})["devices"]
        links: dict[str, dict[str, int]] = {}
        radios: dict[str, dict[str, float]] = {}
        for (name, sender), (queued, drops, sent, tx_ns, rx_ns, joules) in zip(self._devices, rows, strict=True):
            row = links.setdefault(name, {"wire_bytes": 0, "max_queue_packets": 0, "drops": 0})
            row["wire_bytes"] += sent
            row["max_queue_packets"] = max(row["max_queue_packets"], queued)
            row["drops"] += drops
            if joules >= 0:  # a station on ns-3's Wi-Fi radio energy model
                radios[sender] = {"energy_j": joules, "tx_s": tx_ns / NS_PER_S, "rx_s": rx_ns / NS_PER_S}
        out: dict[str, Any] = {"engine": "ns3", "links": links, "retransmissions": self._retx}
        if radios:
            out["radio"] = radios
        return out

    def close(self) -> None:
        """End this network's ns-3 world; its worker is kept for the process's next one."""
        self._worker.release()

    # checkpoints (sim/checkpoint.py) save the flow engine's state; ns-3's cannot be saved
    def tcp_state(self) -> dict[str, object]:
        raise Ns3Error("runs on the ns-3 engine do not checkpoint: TCP's state lives in ns-3, which cannot save it")

    # ------------------------------------------------------------------ internals
    def _path(self, src: str, dst: str) -> tuple[list[str], list[str], Any]:
        cached = self._paths.get((src, dst))
        if cached is None:
            links, nodes = self.topology.route_with_nodes(src, dst)
            cached = ([link.name for link in links], nodes, path_format(links) if links else None)
            self._paths[(src, dst)] = cached
        return cached

    def _listed(self, messages: dict[int, _Message]) -> str:
        """``3 message(s): a -> b (1,000 B, sent at 0.5 s), ...`` (the first five)."""
        shown = ", ".join(f"{m.src} -> {m.dst} ({m.nbytes:,} B, sent at {m.start:.6f} s)"
                          for m in list(messages.values())[:5])  # fmt: skip
        return f"{len(messages)} message(s): {shown}"

    def _gave_up(self, ids: list[int], t_ns: int) -> None:
        """Raise for the messages whose TCP connection was aborted (DataRetries spent, or it could
        not open)."""
        lost = {k: self._messages[k] for k in ids if k in self._messages}
        raise Ns3Error(
            f"TCP gave up on {self._listed(lost)} at {(t_ns - self._offset_ns) / NS_PER_S:.6f} s: "
            "its connection could not open, or was aborted after 15 retransmissions of a segment"
        )

    def _arrived(self, record: Transfer | Ns3Transfer, retransmissions: int) -> None:
        self._retx += retransmissions
        for name in record.path:
            self._carried[self._link_index[name]] += record.wire_bytes
        if self._keep:
            self.transfers.append(record)
            self.retransmissions.append(retransmissions)

    def _pump(self) -> Generator[simpy.Event, Any, None]:
        """The co-simulation loop (see the module's docstring)."""
        env = self.env
        while True:
            if not self._messages:
                self._wake = env.event()
                yield self._wake
                self._wake = None
            horizon = env.peek()
            if horizon <= env.now:  # others are due now and may send: let them go first
                yield env.timeout(0.0)
                continue
            now_ns = _ns(env.now) + self._offset_ns  # in ns-3's time
            stuck = max(now_ns, self._ns3_ns) + _ns(STUCK_S)
            until = _ns(horizon) + self._offset_ns if math.isfinite(horizon) else stuck
            reply = self._worker.call({"op": "run", "sends": self._sends, "until": max(until, self._ns3_ns)})
            self._sends = []
            t_ns, done = int(reply["now"]), reply["done"]
            if reply["failed"]:
                self._gave_up(reply["failed"], t_ns)
            stalled = not done and not math.isfinite(horizon) and int(reply["progress"]) <= now_ns
            if t_ns < 0 or stalled:
                why = "ns-3 has no event left" if t_ns < 0 else f"no byte arrived in {STUCK_S:g} s of simulated time"
                raise Ns3Error(f"ns-3 cannot deliver {self._listed(self._messages)} ({why})")
            self._ns3_ns = t_ns
            # SimPy follows ns-3 to the completion, else to the horizon ns-3 has run to
            target = (t_ns - self._offset_ns) / NS_PER_S if done or not math.isfinite(horizon) else horizon
            if target > env.now:
                yield env.timeout(target - env.now)
            for k, end_ns, retx in done:
                m = self._messages.pop(k, None)
                if m is None:
                    continue  # cancelled after ns-3 had delivered it
                names, nodes, _ = self._path(m.src, m.dst)
                end = (end_ns - self._offset_ns) / NS_PER_S
                record = Ns3Transfer(m.src, m.dst, m.tag, m.nbytes, m.wire, m.start, end, names, nodes, retx)
                self._arrived(record, retx)
                m.event.succeed(record)
