"""The ns-3 engine's worker process: one ns-3 world at a time, driven by JSON lines on stdin.

Run as ``python -m aiotsim.network.ns3_worker`` by :class:`~aiotsim.network.ns3_engine.Ns3Network`.
Why a child process and not the run's own: importing ns-3's bindings starts cppyy's C++
interpreter (Cling, with its own LLVM) and ns-3 keeps one global simulator per process. In a child,
neither shares a process with PyTorch, a run's ns-3 world is the only one in its process (compare
and sweeps run several runs in one process, one after another), and a crash in ns-3 is an error
message in the run, not the end of the run's process. A message costs one pipe round trip (tens of
microseconds) against the milliseconds ns-3 spends on its packets.

Protocol: one JSON object per line each way; every reply line starts with ``@@`` (anything else on
stdout is ns-3 or cppyy talking, and is skipped by the reader).

* ``{"op": "build", ..., "warmup_ns": ns, "warmup_max_ns": ns}``: :func:`build`'s spec, then the
  world runs alone until its radios have joined their cells (:func:`warm_up`); reply
  ``{"warmup_ns": ns, "unassociated": [radios that have not]}``.
* ``{"op": "run", "sends": [[id, src, dst, bytes, at_ns], ...], "until": ns}``: hand the messages to
  TCP at their times, run to ``until`` or the first completion; reply ``{"now": ns, "done": [[id,
  ns, retransmissions], ...], "failed": [id, ...], "progress": ns}`` (``now`` = -1: no ns-3 event
  left, nothing in flight can arrive; ``failed``: messages whose connection TCP gave up on;
  ``progress``: when a message's byte last arrived).
* ``{"op": "cancel", "id": id}``: stop a message's stream; reply ``{"ok": true}``.
* ``{"op": "reset"}``: end the world (ns-3's simulator, attribute defaults, global values and
  random stream numbers back to a new process's), ready for the next ``build``; reply
  ``{"ok": true}``. A reused worker saves the ~11 s of CPU that loading ns-3's bindings costs.
* ``{"op": "stats"}``: per device ``[max packets queued, drops, bytes sent, ns sending, ns receiving,
  radio energy J (-1: no energy model)]``; reply ``{"devices": ...}``.

An error becomes ``{"error": "..."}`` and the worker goes on reading (the parent decides).
"""

from __future__ import annotations

import json
import sys
from typing import Any

TCP_TYPES = {"cubic": "ns3::TcpCubic", "reno": "ns3::TcpLinuxReno", "newreno": "ns3::TcpNewReno"}


def build(engine: Any, spec: dict[str, Any]) -> None:
    """Make the world ``spec`` describes in ``engine`` (an ``aiotsim_engine::World``).

    ``spec``: ``run`` (ns-3's RngRun), ``tcp`` (congestion, initial_window, segment_bytes,
    buffer_bytes, min_rto_s, hystart, connection), ``vertices`` (count), ``wires`` (rows of
    :meth:`World::AddWire`'s arguments), ``wifi``, ``lte`` and ``lowpan`` (None or AddWifi's /
    AddLte's / AddLowPan's arguments as a dict).
    """
    import cppyy

    tcp = spec["tcp"]
    engine.Configure(
        int(spec["run"]), TCP_TYPES[tcp["congestion"]], int(tcp["initial_window"]), int(tcp["segment_bytes"]),
        int(tcp["buffer_bytes"]), float(tcp["min_rto_s"]), bool(tcp["hystart"]), str(tcp["connection"]),
    )  # fmt: skip
    engine.Build(int(spec["vertices"]))
    for a, b, bps_ab, bps_ba, delay_s, q_ab, q_ba, loss_ab, loss_ba, mtu in spec["wires"]:
        engine.AddWire(a, b, bps_ab, bps_ba, delay_s, q_ab, q_ba, loss_ab, loss_ba, mtu)
    wifi = spec.get("wifi")
    if wifi:
        ints, floats = cppyy.gbl.std.vector[int], cppyy.gbl.std.vector[float]
        engine.AddWifi(
            wifi["ap"], ints(wifi["stations"]), floats(wifi["x"]), floats(wifi["y"]), wifi["standard"],
            wifi["width_mhz"], wifi["manager"], wifi["queue_packets"],
        )  # fmt: skip
    lte = spec.get("lte")
    if lte:
        ints, floats = cppyy.gbl.std.vector[int], cppyy.gbl.std.vector[float]
        engine.AddLte(
            ints(lte["ues"]), floats(lte["x"]), floats(lte["y"]), lte["server"], lte["bps_up"], lte["bps_down"],
            lte["delay_s"], lte["queue_up"], lte["queue_down"], lte["rb"], lte["rlc_bytes"],
        )  # fmt: skip
    lowpan = spec.get("lowpan")
    if lowpan:
        ints, floats = cppyy.gbl.std.vector[int], cppyy.gbl.std.vector[float]
        engine.AddLowPan(
            lowpan["sink"], ints(lowpan["sensors"]), floats(lowpan["x"]), floats(lowpan["y"]), lowpan["server"],
            lowpan["bps_up"], lowpan["bps_down"], lowpan["delay_s"], lowpan["queue_up"], lowpan["queue_down"],
            lowpan["segment_bytes"],
        )  # fmt: skip
    engine.Finish()


def warm_up(engine: Any, at_least_ns: int, at_most_ns: int) -> dict[str, Any]:
    """Run the new world alone until every radio has joined its cell, in steps of ``at_least_ns``
    (ns of ns-3 time), at most ``at_most_ns``: stations that contend to associate take longer in a
    crowded cell (20 stations: 7 not associated after 1 s). The reply: ``warmup_ns`` (when the
    simulation's time 0 is, in ns-3's time) and the radios still out then."""
    lost: list[int] = []
    t = 0
    while t < at_most_ns or t == 0:
        t = min(t + at_least_ns, at_most_ns) if at_least_ns else 0
        lost = [int(i) for i in engine.WarmUp(t)]
        if not lost or at_least_ns == 0:
            break
    return {"warmup_ns": t, "unassociated": lost}


def _reply(obj: dict[str, Any]) -> None:
    sys.stdout.write("@@" + json.dumps(obj) + "\n")
    sys.stdout.flush()


def main() -> None:  # pragma: no cover - runs in the child process (tests drive it through Ns3Network)
    """Serve worlds, one at a time, until stdin closes."""
    import cppyy
    from ns import ns  # noqa: F401  (loads ns-3's libraries and headers into cppyy)

    from aiotsim.network.calibrate_ns3 import NS3_PRELUDE
    from aiotsim.network.ns3_program import ENGINE_SOURCE
    from aiotsim.network.ns3_radios import RADIO_SOURCE

    cppyy.cppdef(NS3_PRELUDE)
    cppyy.cppdef(ENGINE_SOURCE)
    cppyy.cppdef(RADIO_SOURCE)
    world = cppyy.gbl.aiotsim_engine.World()
    _reply({"ready": True})
    for line in sys.stdin:
        msg = json.loads(line)
        try:
            op = msg["op"]
            if op == "build":
                build(world, msg)
                _reply(warm_up(world, int(msg["warmup_ns"]), int(msg.get("warmup_max_ns", msg["warmup_ns"]))))
            elif op == "run":
                for k, src, dst, nbytes, at_ns in msg["sends"]:
                    world.Send(k, src, dst, nbytes, at_ns)
                now = int(world.RunUntil(int(msg["until"])))
                done = [[int(k), int(t), int(r)] for k, t, r in zip(world.done_id, world.done_ns, world.done_retx)]
                failed = [int(k) for k in world.failed_id]
                _reply({"now": now, "done": done, "failed": failed, "progress": int(world.last_progress_ns)})
            elif op == "reset":
                world.Destroy()
                world = cppyy.gbl.aiotsim_engine.World()
                _reply({"ok": True})
            elif op == "cancel":
                world.Cancel(int(msg["id"]))
                _reply({"ok": True})
            elif op == "stats":
                rows = zip(world.max_queue, world.drops, world.tx_bytes, world.tx_ns, world.rx_ns)
                _reply({"devices": [[int(q), int(d), int(b), int(tx), int(rx), float(world.EnergyJ(k))]
                                    for k, (q, d, b, tx, rx) in enumerate(rows)]})  # fmt: skip
            else:
                _reply({"error": f"unknown op {op!r}"})
        except Exception as exc:  # reported to the parent, which raises it there
            _reply({"error": f"{type(exc).__name__}: {exc}"})
    world.Destroy()


if __name__ == "__main__":  # pragma: no cover
    main()
