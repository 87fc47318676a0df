"""The ns-3 engine (network.engine = "ns3"): times by hand on a point-to-point link, the
co-simulation's ordering, Wi-Fi airtime sharing, cancelling, and the refusals (skips only where the
ns-3 bindings cannot be imported; CI installs them).

Packet sizes on ns-3's point-to-point link, from its headers (PPP 2 B; IPv4 20 B; TCP 20 B plus
options padded to 4 B): a SYN and a SYN-ACK carry window scale (3), SACK-permitted (2) and a
timestamp (10): 2 + 20 + 20 + 16 = 58 B; a pure ACK carries the timestamp: 2 + 20 + 20 + 12 = 54 B;
a data segment of n bytes 2 + 52 + n. At 10 Mbit/s a byte takes 0.8 us.
"""

from __future__ import annotations

import os
import subprocess
import tempfile

import pytest
import simpy

from aiotsim.errors import ConfigError
from aiotsim.network import ns3_engine
from aiotsim.network.calibrate_ns3 import ns3_available
from aiotsim.network.link import Link
from aiotsim.network.ns3_engine import Ns3Error, Ns3Network, Ns3Worker
from aiotsim.network.ns3_spec import RadioOptions, world_spec
from aiotsim.network.tcp import TcpParams
from aiotsim.network.topology import Topology

needs_ns3 = pytest.mark.skipif(not ns3_available(), reason="ns-3's Python bindings (aiotsim[ns3]) are not installed")
BYTE_S = 8 / 10e6  # s per byte at 10 Mbit/s
SYN, ACK, DATA_HEADER = 58, 54, 54  # bytes on the wire (see the module docstring)
NS = 1e-9


def pair(delay_s: float = 0.01, rate_bps: float = 10e6, **link: object) -> Topology:
    """``node0`` <-> ``server`` over one point-to-point link each way."""
    topo = Topology("custom")
    topo.add_node("server", "server")
    topo.add_node("node0", "node", aggregator="server")
    topo.add_link("node0", "server", Link("up", rate_bps, delay_s, header_bytes=52, **link))  # type: ignore[arg-type]
    topo.add_link("server", "node0", Link("down", rate_bps, delay_s, header_bytes=52, **link))  # type: ignore[arg-type]
    return topo


@needs_ns3
def test_times_on_a_point_to_point_link_by_hand_and_the_clocks_agree() -> None:
    env = simpy.Environment()
    net = Ns3Network(env, pair(), seed=1, tcp=TcpParams(connection="reuse"))
    seen: dict[str, tuple[float, float, float]] = {}  # tag -> (start, end, SimPy's clock at the event)
    try:

        def sender(tag: str, at: float, src: str, dst: str, nbytes: int):  # type: ignore[no-untyped-def]
            yield env.timeout(at)
            t = yield net.send(src, dst, nbytes, tag=tag)
            seen[tag] = (t.start_s, t.end_s, env.now)
            if tag == "first":  # sent the instant the first one arrives: starts at its arrival
                t2 = yield net.send(src, dst, 1000, tag="chained")
                seen["chained"] = (t2.start_s, t2.end_s, env.now)

        ticks: list[float] = []

        def clock():  # type: ignore[no-untyped-def]
            for at in (0.005, 0.015, 0.0301):  # SimPy events while ns-3 carries the first message
                yield env.timeout(at - env.now)
                ticks.append(env.now)

        env.process(sender("first", 0.0, "node0", "server", 1000))
        env.process(sender("later", 0.2, "node0", "server", 1000))
        env.process(sender("back", 0.02, "server", "node0", 1000))
        env.process(clock())
        env.run()
    finally:
        net.close()
    # a new connection: SYN, SYN-ACK, then the ACK and the data back to back: three one-way delays
    handshake = 0.03 + (SYN + SYN + ACK + DATA_HEADER + 1000) * BYTE_S
    assert seen["first"][1] == pytest.approx(handshake, abs=2 * NS)
    # the reused connection: one segment and one delay, from whenever it is sent
    for tag, start in (("chained", seen["first"][1]), ("later", 0.2)):
        assert seen[tag][0] == pytest.approx(start, abs=NS)
        assert seen[tag][1] == pytest.approx(start + (DATA_HEADER + 1000) * BYTE_S + 0.01, abs=2 * NS)
    # the other direction opens its own connection (reuse: one per direction) at its own start
    assert seen["back"][0] == 0.02
    assert seen["back"][1] == pytest.approx(0.02 + handshake, abs=2 * NS)
    for _start, end, now in seen.values():  # SimPy sees each arrival at ns-3's arrival time
        assert now == pytest.approx(end, abs=NS)
    assert ticks == pytest.approx([0.005, 0.015, 0.0301], abs=1e-15)


@needs_ns3
def test_a_wifi_cell_shares_its_airtime_and_a_cancelled_message_never_arrives() -> None:
    size = 500_000  # bytes per upload
    times: dict[str, list[float]] = {"alone": [], "together": []}
    env = simpy.Environment()
    net = Ns3Network(env, Topology.shared_medium(3, 10e6, 0.001), seed=3, tcp=TcpParams(connection="reuse"))
    cancelled: list[bool] = []
    try:

        def upload(node: str, at: float, key: str):  # type: ignore[no-untyped-def]
            yield env.timeout(at - env.now)
            t = yield net.send(node, "server", size)
            times[key].append(t.end_s - t.start_s)

        def dropout():  # type: ignore[no-untyped-def]
            yield env.timeout(30.0)
            event = net.send("node2", "server", 50_000_000)  # would take seconds of airtime
            yield env.timeout(0.05)
            part = net.cancel(event)
            cancelled.append(part is not None and not event.triggered)
            yield env.timeout(5.0)
            cancelled.append(not event.triggered)
            t = yield net.send("node2", "server", 1000)  # the pair's next message gets through
            cancelled.append(t.end_s > t.start_s)

        env.process(upload("node0", 0.5, "alone"))  # warm: the stations have associated by then
        env.process(upload("node0", 10.0, "alone"))
        env.process(upload("node0", 20.0, "together"))
        env.process(upload("node1", 20.0, "together"))
        env.process(dropout())
        env.run()
        facts = net.facts()
    finally:
        net.close()
    alone = times["alone"][-1]  # the second: the connection is open and its window grown
    assert len(times["together"]) == 2
    slow, fast = max(times["together"]), min(times["together"])
    # one channel: two uploads at once each take about twice as long as one alone, and neither
    # starves the other
    assert 1.5 * alone < slow < 2.6 * alone
    assert fast > 0.6 * slow
    assert cancelled == [True, True, True]
    channel = facts["links"]["channel"]
    assert channel["wire_bytes"] > 4 * size  # four uploads crossed the air, with 802.11 framing


def test_what_ns3_cannot_carry_is_refused_with_the_fix() -> None:
    tcp = TcpParams()
    with pytest.raises(ConfigError, match="jitter has no ns-3 counterpart"):
        world_spec(pair(jitter_s=0.001), tcp, 0)
    one_way = Topology("custom")
    one_way.add_node("server", "server")
    one_way.add_node("node0", "node", aggregator="server")
    one_way.add_link("node0", "server", Link("up", 1e6))
    with pytest.raises(ConfigError, match="no link back"):
        world_spec(one_way, tcp, 0)
    shared = Topology("custom")  # one channel on several edges, outside a shared-medium cell
    for v, role in (("server", "server"), ("a", "node"), ("b", "node")):
        shared.add_node(v, role, aggregator=None if role == "server" else "server")
    air = Link("air", 1e6)
    for v in ("a", "b"):
        shared.add_link(v, "server", air)
        shared.add_link("server", v, air)
    with pytest.raises(ConfigError, match="shared by 4 edges"):
        world_spec(shared, tcp, 0)


def test_wifi_stations_stand_where_the_scenario_puts_them_or_at_seeded_spots() -> None:
    topo = Topology.shared_medium(2, 50e6, 0.001)
    placed, _ = world_spec(topo, TcpParams(), 0, RadioOptions(positions=((3.0, 4.0), (-2.5, 1.0))))
    assert (placed["wifi"]["x"], placed["wifi"]["y"]) == ([3.0, -2.5], [4.0, 1.0])
    seeded, _ = world_spec(topo, TcpParams(), 0, RadioOptions(radius_m=10.0))
    assert all(x * x + y * y <= 100.0 for x, y in zip(seeded["wifi"]["x"], seeded["wifi"]["y"], strict=True))
    assert seeded["wifi"] == world_spec(topo, TcpParams(), 0, RadioOptions(radius_m=10.0))[0]["wifi"]  # seeded
    with pytest.raises(ConfigError, match="3 positions for 2 stations"):
        world_spec(topo, TcpParams(), 0, RadioOptions(positions=((0.0, 1.0),) * 3))


def test_the_spec_keeps_each_directions_rate_queue_and_loss_and_ns3s_segment() -> None:
    topo = Topology.star(2, 2e6, 20e6, 0.05, 100e6, mtu=1280, loss=0.01, queue_packets=30, server_queue_packets=7)
    spec, devices = world_spec(topo, TcpParams(initial_window=4, congestion="reno", connection="duplex"), seed=6)
    index = {v: i for i, v in enumerate(topo.vertices)}

    def between(x: str, y: str) -> list[object]:
        """x -> y's rate, y -> x's, the delay, x -> y's queue, y -> x's, the losses so, the MTU."""
        for a, b, ab, ba, delay, qab, qba, lab, lba, mtu in spec["wires"]:
            if (a, b) == (index[x], index[y]):
                return [ab, ba, delay, qab, qba, lab, lba, mtu]
            if (a, b) == (index[y], index[x]):
                return [ba, ab, delay, qba, qab, lba, lab, mtu]
        raise AssertionError(f"no wire {x} -- {y}")

    assert between("node0", "switch") == [2e6, 20e6, 0.05, 30, 30, 0.01, 0.01, 1280]
    assert between("switch", "server") == [100e6, 100e6, 0.0, 7, 7, 0.0, 0.0, 1280]
    assert spec["tcp"]["segment_bytes"] == 1280 - 52  # ns-3's headers, not header_bytes
    assert (spec["tcp"]["initial_window"], spec["tcp"]["congestion"], spec["tcp"]["connection"]) == (
        4,
        "reno",
        "duplex",
    )
    assert spec["run"] == 7
    assert len(devices) == 2 * len(spec["wires"]) and ("node1.up", "node1") in devices


@needs_ns3
def test_a_message_that_cannot_arrive_is_an_error_not_a_hang() -> None:
    # the only link loses every packet but one in 10^6 (a loss of 1 is refused by Link): the SYN is
    # never answered, TCP gives up on the connection, and the pump names the message at once
    env = simpy.Environment()
    net = Ns3Network(env, pair(loss=0.999999), seed=1)
    try:
        env.process((lambda: (yield net.send("node0", "server", 10_000)))())
        with pytest.raises(Ns3Error, match="TCP gave up on 1 message"):
            env.run()
    finally:
        net.close()
    assert env.now < 120.0  # ConnCount 6 SYNs, backed off from 1 s: about a minute, not STUCK_S


def test_a_star_on_4g_is_one_lte_cell_and_mixed_radios_are_refused() -> None:
    per_node = [{"uplink_bps": 8e6, "downlink_bps": 20e6, "latency_s": 0.025, "queue_packets": 7}] * 2
    topo = Topology.star(2, 8e6, 20e6, 0.025, 1e9, per_node=per_node, server_queue_packets=1000)
    spec, devices = world_spec(topo, TcpParams(), 0, radios={"node0": "4g", "node1": "4g"})
    lte = spec["lte"]
    assert spec["wires"] == []  # the node links and the switch give way to the cell and its EPC
    assert (lte["rb"], lte["rlc_bytes"], lte["delay_s"], lte["bps_up"]) == (25, 7 * 1500, 0.025, 1e9)
    assert devices == [("server.in", "pgw"), ("server.out", "server")]
    with pytest.raises(ConfigError, match="one LTE cell, for a star whose nodes are all on it"):
        world_spec(topo, TcpParams(), 0, radios={"node0": "4g", "node1": "wifi"})


@needs_ns3
def test_lte_uplinks_share_the_cell() -> None:
    per_node = [{"latency_s": 0.01, "queue_packets": 700}] * 2  # a 1 MB RLC buffer: no RLC drops
    topo = Topology.star(2, 8e6, 20e6, 0.01, 1e9, per_node=per_node)
    env = simpy.Environment()
    net = Ns3Network(env, topo, seed=1, radios={"node0": "4g", "node1": "4g"})
    took: dict[str, list[float]] = {"alone": [], "together": []}
    try:

        def upload(node: str, at: float, key: str):  # type: ignore[no-untyped-def]
            yield env.timeout(at - env.now)
            t = yield net.send(node, "server", 500_000)
            took[key].append(t.end_s - t.start_s)

        env.process(upload("node0", 0.0, "alone"))  # opens the connection
        env.process(upload("node0", 5.0, "alone"))
        env.process(upload("node0", 10.0, "together"))
        env.process(upload("node1", 10.0, "together"))
        env.run()
    finally:
        net.close()
    alone = took["alone"][-1]
    # 500 KB at the cell's ~8 Mbit/s uplink (5 MHz) takes about half a second; two at once share it
    assert 0.2 < alone < 2.0
    assert 1.5 * alone < max(took["together"]) < 3.0 * alone


@needs_ns3
def test_an_802_15_4_pan_carries_tcp_over_6lowpan_no_faster_than_its_250_kbits() -> None:
    topo = Topology.star(2, 0.1e6, 0.1e6, 0.01, 100e6)
    spec, _ = world_spec(topo, TcpParams(), 0, radios={"node0": "802.15.4", "node1": "802.15.4"})
    assert spec["wires"] == [] and spec["tcp"]["segment_bytes"] == 76 and spec["lowpan"]["sink"] == 1
    env = simpy.Environment()
    net = Ns3Network(env, topo, seed=2, radios={"node0": "802.15.4", "node1": "802.15.4"})
    took: list[float] = []
    try:

        def both_ways(node: str):  # type: ignore[no-untyped-def]
            for src, dst in ((node, "server"), ("server", node)):
                t = yield net.send(src, dst, 2000)
                took.append(t.end_s - t.start_s)

        env.process(both_ways("node0"))
        env.process(both_ways("node1"))
        env.run()
        facts = net.facts()
    finally:
        net.close()
    assert len(took) == 4
    # 2,000 B in 27 frames of 76 B plus headers cannot cross a 250 kbit/s channel in under 64 ms
    assert min(took) > 2000 * 8 / 250e3
    assert facts["links"]["pan"]["wire_bytes"] > 2 * 2 * 2000  # every byte crossed the air, with headers


def _worker_pids() -> set[int]:
    """The ns-3 workers this process has started and not ended."""
    found = subprocess.run(["pgrep", "-P", str(os.getpid()), "-f", "aiotsim.network.ns3_worker"], capture_output=True)
    return {int(pid) for pid in found.stdout.split()}


@needs_ns3
def test_a_world_that_cannot_be_built_leaves_no_worker_behind() -> None:
    with pytest.raises(Ns3Error):
        Ns3Worker.open({"op": "build"})  # no spec: the worker answers with an error
    # what lives on is only the idle workers kept for the next world, none of them the failed one
    assert _worker_pids() == {w._proc.pid for w in ns3_engine._IDLE}


def _uploads(topo: Topology, seed: int, size: int) -> tuple[list[tuple[str, float]], int, int]:
    """Every node's upload of ``size`` B at 0.1 s + 10 ms per node: (node, arrival) sorted, and
    the segments retransmitted; with the pid of the worker that carried them."""
    env = simpy.Environment()
    net = Ns3Network(env, topo, seed=seed, tcp=TcpParams(connection="reuse"))
    arrivals: list[tuple[str, float]] = []

    def upload(node: str, at: float):  # type: ignore[no-untyped-def]
        yield env.timeout(at)
        t = yield net.send(node, "server", size)
        arrivals.append((node, t.end_s))

    pid = net._worker._proc.pid
    try:
        for i, node in enumerate(v for v in topo.vertices if v.startswith("node")):
            env.process(upload(node, 0.1 + 0.01 * i))
        env.run()
        retx = net.facts()["retransmissions"]
    finally:
        net.close()
    return sorted(arrivals), retx, pid


@needs_ns3
def test_a_reused_worker_carries_a_world_exactly_as_a_new_one() -> None:
    ns3_engine.close_idle_workers()  # the first world below gets a new worker
    cell = Topology.shared_medium(3, 10e6, 0.001)  # Wi-Fi: MAC addresses, backoff draws, association
    first = _uploads(cell, seed=3, size=60_000)
    lossy = _uploads(pair(loss=0.02), seed=3, size=60_000)  # random losses draw from ns-3's streams
    again = _uploads(cell, seed=3, size=60_000)
    assert first[2] == lossy[2] == again[2]  # one worker carried all three, one world at a time
    assert lossy[1] > 0  # its losses drew from the streams the reset must rewind
    assert again[:2] == first[:2]  # to the nanosecond, retransmissions included
    assert len(first[0]) == 3
    env = simpy.Environment()
    net = Ns3Network(env, pair(), seed=1)
    net.close()
    net.close()  # a second close must not park the worker twice: two networks would share it
    idle = [w._proc.pid for w in ns3_engine._IDLE]
    assert len(idle) == len(set(idle)) == 1


def test_a_worker_whose_reply_is_pending_is_ended_not_kept() -> None:
    class Proc:  # what release() sees of an interrupted worker's process
        pid, stdin = -1, None

        def __init__(self) -> None:
            self.ended = False

        def poll(self) -> int | None:
            return 0 if self.ended else None

    worker = Ns3Worker.__new__(Ns3Worker)
    worker._proc, worker._owner, worker._waiting, worker._released = Proc(), os.getpid(), True, False  # type: ignore[assignment]
    worker._err = tempfile.TemporaryFile("w+")
    worker.close = lambda: setattr(worker._proc, "ended", True)  # type: ignore[method-assign]
    worker.release()  # a reset now would read the interrupted request's reply as its own
    assert worker._proc.ended and worker not in ns3_engine._IDLE
