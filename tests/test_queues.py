"""Drop-tail FIFO queues under TCP windows (aiotsim/network/queues.py), hand-computed."""

from __future__ import annotations

import math

import pytest
import simpy

from aiotsim.errors import ConfigError
from aiotsim.network import Link, Network, Topology
from aiotsim.network.droptail import fifo_delay, overflow_positions
from aiotsim.network.queues import QueueLinks
from aiotsim.network.tcp import Connection, QueueView, TcpParams, plan_round

C = 1_250_000.0  # bytes/s: 10 Mbit/s


def test_fifo_delay_one_rtt_class_is_windows_over_capacity_less_base() -> None:
    # 60,000 bytes in flight at 1.25 MB/s take 48 ms to drain; 20 ms of it is the pipe: q = 28 ms
    assert fifo_delay({0.02: 60_000.0}, C) == pytest.approx(0.028, rel=1e-12)


def test_fifo_delay_zero_when_windows_do_not_fill_the_link() -> None:
    # the windows ask 20,000 / 0.02 + 50,000 / 0.1 = 1.5 MB/s: no queue on 2.5 MB/s, one on 1.25
    assert fifo_delay({0.02: 20_000.0, 0.1: 50_000.0}, 2 * C) == 0.0
    assert fifo_delay({0.02: 20_000.0, 0.1: 50_000.0}, C) > 0.0


def test_fifo_delay_two_rtt_classes_solves_the_fill_equation() -> None:
    windows = {0.01: 50_000.0, 0.04: 50_000.0}
    q = fifo_delay(windows, C)
    # 50,000 / (0.01 + q) + 50,000 / (0.04 + q) = C: a quadratic, solved by hand
    # C q^2 + (0.05 C - 100,000) q + (0.0004 C - 2,500) = 0
    a, b, c = C, 0.05 * C - 100_000.0, 0.0004 * C - 2_500.0
    assert q == pytest.approx((-b + math.sqrt(b * b - 4 * a * c)) / (2 * a), rel=1e-9)


def test_two_flows_rtt_ratio_4_share_one_fifo_by_window_over_rtt() -> None:
    """Equal windows at base RTTs of 10 and 40 ms through one FIFO: each sends W / (d + q)."""
    queues = QueueLinks([C, 100 * C, 100 * C], [1e9, 1e9, 1e9])
    w = 50_000.0
    queues.join(0, (1, 0), (1.0, 1.0), (), 0.01)
    queues.join(1, (2, 0), (1.0, 1.0), (), 0.04)
    queues.send(0, w)
    trip = queues.send(1, w)
    q = fifo_delay({0.01: w, 0.04: w}, C)
    fast, slow = queues.rate(0), queues.rate(1)
    assert trip.queued and trip.rtt == pytest.approx(0.04 + q)
    assert fast == pytest.approx(w / (0.01 + q)) and slow == pytest.approx(w / (0.04 + q))
    assert fast + slow == pytest.approx(C, rel=1e-9)  # the FIFO stays full
    assert fast / slow == pytest.approx((0.04 + q) / (0.01 + q))  # not max-min's 1:1


def test_a_window_joining_a_queue_reprices_the_flows_already_there() -> None:
    """Two equal windows offered 0.1 ms apart at one FIFO: the first was priced at its own queue
    (60 ms); the second's window doubles it (140 ms), which moves the delay by far more than 10%
    of a round trip, so the first is repriced at once: both send W / (d + q), as in one FIFO."""
    queues = QueueLinks([C, 100 * C, 100 * C], [1e9, 1e9, 1e9])
    w = 100_000.0
    queues.join(0, (1, 0), (1.0, 1.0), (), 0.02)
    queues.join(1, (2, 0), (1.0, 1.0), (), 0.02)
    first = queues.send(0, w)
    assert first.rtt == pytest.approx(w / C)  # 20 ms of pipe + 60 ms of its own queue
    second = queues.send(1, w)
    assert second.rtt == pytest.approx(2 * w / C)  # both windows: 140 ms of queue
    assert queues.stale() == [0]
    assert queues.rate(0) == pytest.approx(queues.rate(1)) == pytest.approx(C / 2)


def test_queueing_delay_enters_a_second_flows_round_trip() -> None:
    """A flow joining a loaded link waits behind its queue: its round trip is base + q."""
    queues = QueueLinks([C, 100 * C, 100 * C], [1e9, 1e9, 1e9])
    queues.join(0, (1, 0), (1.0, 1.0), (), 0.02)
    queues.send(0, 100_000.0)  # 100 KB in flight over a 25 KB pipe: 60 ms of queue
    assert queues.links_delay((0,)) == pytest.approx(100_000.0 / C - 0.02)
    queues.join(1, (2, 0), (1.0, 1.0), (), 0.02)
    trip = queues.send(1, 15_000.0)  # its initial window
    assert trip.rtt == pytest.approx(0.02 + (115_000.0 / C - 0.02))  # both windows queue now
    assert trip.rtt > 4 * 0.02


def test_queue_on_the_reverse_path_delays_the_acks() -> None:
    """A download whose ACKs cross a loaded uplink waits that uplink's queue too."""
    up, down = 250_000.0, 2_500_000.0  # 2 / 20 Mbit/s
    queues = QueueLinks([up, down], [1e9, 1e9])
    queues.join(0, (0,), (1.0,), (1,), 0.1)  # the upload; its ACKs go down
    queues.send(0, 100_000.0)
    q_up = 100_000.0 / up - 0.1
    queues.join(1, (1,), (1.0,), (0,), 0.1)  # the download; its ACKs go up
    trip = queues.send(1, 15_000.0)
    assert not trip.queued  # the downlink is not full
    assert trip.rtt == pytest.approx(0.1 + q_up)


def test_only_the_first_of_two_equal_links_queues() -> None:
    """Behind two equal links the queue stands at the first: the second receives at its rate."""
    queues = QueueLinks([C, C], [1e9, 1e9])
    queues.join(0, (0, 1), (1.0, 1.0), (), 0.02)
    trip = queues.send(0, 60_000.0)
    assert trip.rtt == pytest.approx(60_000.0 / C)  # base + one queue, not two
    assert queues.links_delay((1,)) == 0.0


def test_a_buffer_that_holds_the_burst_drops_nothing_and_one_it_overflows_drops_the_excess() -> None:
    base = 0.1  # s
    cap = 125_000.0  # 1 Mbit/s
    seg = 1514.0
    holds = QueueLinks([cap], [20 * seg])
    holds.join(0, (0,), (1.0,), (), base)
    trip = holds.send(0, 20 * seg)  # 20 segments over a 8.3-segment pipe: 11.7 queued <= 20
    assert trip.loss == 0.0 and trip.rtt == pytest.approx(20 * seg / cap)
    small = QueueLinks([cap], [5 * seg])
    small.join(0, (0,), (1.0,), (), base)
    trip = small.send(0, 20 * seg)
    full = 5 * seg / cap  # s, a full buffer's delay
    offered = 20 * seg / (base + full)  # bytes/s the window sends at a full buffer
    assert trip.rtt == pytest.approx(base + full)
    assert trip.loss == pytest.approx(1.0 - cap / offered)
    assert trip.rate == pytest.approx(cap)  # what is not dropped is what the link carries


def test_overflow_positions_are_every_other_segment_at_the_tail() -> None:
    assert overflow_positions(20, 3) == [15, 17, 19]
    assert overflow_positions(10, 0) == []
    assert overflow_positions(6, 4) == [2, 3, 4, 5]  # more than half: the contiguous tail
    assert overflow_positions(4, 9) == [0, 1, 2, 3]


def test_an_overflowing_round_is_recovered_by_sack_and_cuts_the_window() -> None:
    """Slow start overshoots: 2 of 20 segments dropped mid-transfer cost one recovery round trip
    and a CUBIC cut (x 0.7); the same drops in the transfer's last round are found by a timeout."""
    params = TcpParams()
    conn = Connection(cwnd=20.0)
    rd = plan_round(conn, params, 0.0, 200.0, 0.1, 50.0, 1e9, lambda n: None, queue=QueueView(dropped=0.1))
    assert not rd.final and rd.duration_s == pytest.approx(0.1)  # SACK recovery: one RTT
    assert conn.cwnd == pytest.approx(14.0)  # 0.7 x 20
    last = Connection(cwnd=20.0)
    rd = plan_round(last, params, 0.0, 20.0, 0.1, 50.0, 1e9, lambda n: None, queue=QueueView(dropped=0.1))
    assert rd.final and rd.extra_delay_s >= params.loss_rto(0.1, 0.0)  # the tail: a timeout
    clean = Connection(cwnd=20.0)
    rd = plan_round(clean, params, 0.0, 200.0, 0.1, 50.0, 1e9, lambda n: None)
    assert clean.cwnd == 40.0  # no drop: slow start doubles


def _two_rtt_star(sharing: str, queue: int = 1000) -> list[float]:
    """Two 1 MB uploads at one-way 5 and 20 ms through a 10 Mbit/s server link: completion times."""
    topo = Topology("two")
    topo.add_node("server", "server")
    topo.add_node("hub", "relay")
    topo.add_link("hub", "server", Link("core", 10e6, 0.0, queue_packets=queue))
    for i, ms in enumerate((5.0, 20.0)):
        topo.add_node(f"n{i}", "node")
        topo.add_link(f"n{i}", "hub", Link(f"n{i}.up", 100e6, ms * 1e-3, queue_packets=queue))
        topo.add_link("hub", f"n{i}", Link(f"n{i}.down", 100e6, ms * 1e-3, queue_packets=queue))
    topo.add_link("server", "hub", Link("core.out", 10e6, 0.0, queue_packets=queue))
    env = simpy.Environment()
    net = Network(env, topo, transport="tcp", sharing=sharing)
    done = [0.0, 0.0]

    def up(i: int):  # type: ignore[no-untyped-def]
        t = yield net.send(f"n{i}", "server", 1_000_000)
        done[i] = t.end_s

    env.process(up(0))
    env.process(up(1))
    env.run()
    return done


def test_fifo_favours_the_short_rtt_flow_and_fair_does_not() -> None:
    fair = _two_rtt_star("fair")
    fifo = _two_rtt_star("fifo")
    # max-min: equal shares, both end together (the short flow a little sooner: its rounds are shorter)
    assert abs(fair[0] - fair[1]) / fair[1] < 0.1
    # FIFO: the 5 ms flow's rounds are shorter, it sends more per second and ends clearly first
    assert fifo[0] < 0.85 * fifo[1]
    # both respect the link: 2 MB plus headers need >= 1.6 s at 10 Mbit/s
    assert min(max(fair), max(fifo)) >= 2e6 * 8 / 10e6


def test_sharing_is_checked() -> None:
    with pytest.raises(ConfigError, match="sharing"):
        Network(simpy.Environment(), Topology.star(2, 1e6, 1e6, 0.01, 1e7), transport="tcp", sharing="lifo")


def test_link_queue_packets_is_checked() -> None:
    with pytest.raises(ConfigError, match="queue_packets"):
        Link("x", 1e6, queue_packets=0)
    assert Link("x", 1e6, mtu=1500, framing_bytes=14, queue_packets=10).buffer_bytes == 15_140.0


def test_initial_windows_bursting_together_overflow_a_shallow_buffer() -> None:
    """Eight initial windows of 10 segments leave at the 10 Mbit/s line rate at once toward a
    10 Mbit/s link with a 10-packet buffer: they arrive at 80 Mbit/s for 12 ms, the link drains an
    eighth of it, so 7/8 of the 80 segments pile up and all but the buffer's 10 are dropped:
    (0.875 x 80 - 10) / 80 = 75% of each window, though the windows fit the pipe as a fluid."""
    seg = 1514.0
    n = 8
    queues = QueueLinks([C] * (n + 1), [10 * seg] * (n + 1))
    for i in range(n):
        queues.join(i, (i + 1, 0), (1.0, 1.0), (), 0.1)
        queues.offer(i, 10 * seg, C)  # its first window, at line rate
    trips = queues.trips()
    assert all(t.loss == pytest.approx(0.75) for t in trips.values())
    assert not any(t.queued for t in trips.values())  # as a fluid: 8 x 15 KB / 0.1 s < 1.25 MB/s
    deep = QueueLinks([C] * (n + 1), [1000 * seg] * (n + 1))
    for i in range(n):
        deep.join(i, (i + 1, 0), (1.0, 1.0), (), 0.1)
        deep.offer(i, 10 * seg, C)
    assert all(t.loss == 0.0 for t in deep.trips().values())  # 70 packets fit 1,000


def test_a_paced_round_does_not_burst() -> None:
    queues = QueueLinks([C, C], [10 * 1514.0, 10 * 1514.0])
    queues.join(0, (1, 0), (1.0, 1.0), (), 0.1)
    queues.offer(0, 100 * 1514.0, 0.0)  # ACK-paced: no burst, only the fluid queue counts
    (trip,) = queues.trips().values()
    full = 10 * 1514.0 / C
    assert trip.loss == pytest.approx(1.0 - C / (100 * 1514.0 / (0.1 + full)))


@pytest.mark.parametrize(("stack", "exits_at"), [("linux", 0.1 + 0.0125), ("ns3", 0.1 + 0.1)])
def test_hystart_delay_test_of_each_stack(stack: str, exits_at: float) -> None:
    """Slow start ends once a round trip exceeds the smallest seen (100 ms) by clamp(min / 8,
    4 ms, 16 ms) = 12.5 ms in Linux, by clamp(min, 4 ms, 1 s) = 100 ms in ns-3; not below. The
    test decides after 8 samples (ACKs of 2 segments) of the round: the window leaves at
    20 + 16 = 36."""
    from aiotsim.network.tcp_window import grow

    params = TcpParams(stack=stack)
    for rtt, leaves in ((exits_at - 1e-4, False), (exits_at + 1e-4, True)):
        conn = Connection(cwnd=20.0, min_rtt_s=0.1)
        grow(conn, params, 1.0, rtt, 1e6, rtt)  # HyStart samples this round trip
        assert (conn.ssthresh == 36.0) is leaves, (rtt, conn)
        assert conn.cwnd == (36.0 if leaves else 40.0)  # grown by 16 segments, or doubled


def test_fair_sharing_ignores_the_buffers() -> None:
    """A per-flow fair queue holds no shared backlog: every buffer size gives the same times."""
    assert _two_rtt_star("fair", queue=10) == _two_rtt_star("fair", queue=1000)
    assert _two_rtt_star("fifo", queue=10) != _two_rtt_star("fifo", queue=1000)


@pytest.mark.parametrize(("connection", "handshakes"), [("reuse", 1), ("duplex", 0)])
def test_a_duplex_connection_carries_the_reply_without_a_handshake(connection: str, handshakes: int) -> None:
    """After an upload opened the pair's connection, the download pays one more round trip of
    handshake under 'reuse' (a connection per direction) and none under 'duplex' (one shared)."""
    topo = Topology.star(1, 10e6, 10e6, 0.05, 100e6)
    env = simpy.Environment()
    net = Network(env, topo, transport="tcp", tcp=TcpParams(connection=connection))
    took: list[float] = []

    def client():  # type: ignore[no-untyped-def]
        yield net.send("node0", "server", 10_000)
        t = yield net.send("server", "node0", 10_000)
        took.append(t.end_s - t.start_s)

    env.process(client())
    env.run()
    rtt = 2 * 0.05  # s; 10 KB fit the initial window: one burst, then one one-way latency
    burst = (10_000 + 7 * 40) * 8 / 10e6  # 7 packets' headers; s at the 10 Mbit/s downlink
    assert took[0] == pytest.approx(handshakes * rtt + burst + 0.05, abs=2e-3)


def test_a_window_written_at_once_queues_whole_at_the_senders_link_and_a_later_burst_stands_on_it() -> None:
    """A server writes a download's window of 92 segments into its own 100 Mbit/s link with a
    100-packet buffer at once: it fits (92 <= 100), and drains at 12.5 MB/s. A second window of
    92 written 2 ms later finds 92 - 2 ms x 12.5 MB/s / 1,514 B = 75.5 segments still there:
    75.5 + 92 - 100 = 67.5 of its 92 are dropped (ns-3.44: downloads that start 1.6 ms apart
    lose most of their windows at the server's queue). 20 ms later the first has drained."""
    seg = 1514.0
    cap = 12_500_000.0  # bytes/s, 100 Mbit/s
    queues = QueueLinks([cap, cap / 5, cap / 5], [100 * seg] * 3)
    for i in range(2):  # the server's link 0, then each client's 20 Mbit/s link
        queues.join(i, (0, 1 + i), (1.0, 1.0), (), 0.1)
    first = queues.send(0, 92 * seg, math.inf, now=1.0)
    assert first.loss == 0.0
    second = queues.send(1, 92 * seg, math.inf, now=1.002)
    left = 92 - 0.002 * cap / seg  # segments of the first window still queued
    assert second.loss == pytest.approx((left + 92 - 100) / 92)
    later = QueueLinks([cap, cap / 5, cap / 5], [100 * seg] * 3)
    for i in range(2):
        later.join(i, (0, 1 + i), (1.0, 1.0), (), 0.1)
    later.send(0, 92 * seg, math.inf, now=1.0)
    assert later.send(1, 92 * seg, math.inf, now=1.02).loss == 0.0


def test_a_burst_still_arriving_holds_the_link_and_a_full_fifo_drops_every_arrival_alike() -> None:
    """Flow 0's initial window of 10 segments crosses its access link and then link 0 (10 Mbit/s,
    a 5-packet buffer) at the 10 Mbit/s line rate: it fills link 0 for 10 x 1,514 B / 1.25 MB/s =
    12.1 ms, though its fluid rate is only 15,140 B / 0.1 s. Flow 1's window, 1 ms later, meets
    the link busy: for the 11.1 ms flow 0 still arrives, both come at 1.25 MB/s into a 1.25 MB/s
    drain, so the queue gains 1.25 MB/s, fills its 7,570 B in 6.06 ms, and for the other 5.04 ms
    the FIFO drops the excess from both arrivals alike: flow 1 loses half, 5.04 ms x 1.25 MB/s / 2
    = 3,152 B. In its last 1 ms only it (1.25 MB/s) and flow 0's fluid rate (151.4 kB/s) arrive:
    the queue, still full, drops 151.4 kB/s, flow 1's share 1.25 / 1.4014 of it: 135 B. In all
    3,287 B of its 15,140 = 21.7%. Read at the fluid rate alone, the link would drain all but 1.2
    segments and drop nothing. Once both windows have arrived and drained, a third meets no queue;
    and once every flow has left, no queue is left at all."""
    seg = 1514.0
    queues = QueueLinks([C, C, C, C], [5 * seg, 1000 * seg, 1000 * seg, 1000 * seg])
    for i in range(3):
        queues.join(i, (i + 1, 0), (1.0, 1.0), (), 0.1)
    assert queues.send(0, 10 * seg, C, now=1.0).loss == 0.0
    over_s = (10 * seg / C - 0.001) - 5 * seg / C  # s both arrive with the queue full (it fills in 5 seg / C)
    fluid0 = 10 * seg / 0.1  # B/s, flow 0's fluid rate
    lost = over_s * C / 2 + 0.001 * fluid0 * C / (C + fluid0)  # B of flow 1's window
    loss = queues.send(1, 10 * seg, C, now=1.001).loss
    assert loss == pytest.approx(lost / (10 * seg))
    assert loss == pytest.approx(0.217, abs=0.001)  # the docstring's figure
    assert queues.send(2, 10 * seg, C, now=1.03).loss == 0.0
    for i in range(3):
        queues.leave(i)
    queues.join(3, (1, 0), (1.0, 1.0), (), 0.1)
    assert queues.send(3, 10 * seg, C, now=1.0011).loss == 0.0  # no trace of flow 0's burst


def test_bursts_still_arriving_pile_up_together_and_a_later_one_loses_more() -> None:
    """Three initial windows of 10 segments at the 10 Mbit/s line rate into link 0 (a 5-packet
    buffer), 1 ms apart: flow 2's window comes while flows 0 and 1 still arrive (each at 1.25 MB/s,
    1.0986 MB/s above its 151.4 kB/s fluid rate). By hand: the
    queue flow 1's window began 1 ms earlier holds 1.25 MB/s x 1 ms = 1,250 B. For 10.11 ms all
    three arrive, 3.75 MB/s into 1.25: the queue gains 2.5 MB/s, fills in 2.53 ms and then drops
    2.5 MB/s, a third of it flow 2's: 6,320 B; for 1 ms flows 1 and 2 (2.65 MB/s): 661 B; for its
    last 1 ms flow 2 and the fluid rates (1.55 MB/s): 244 B. 7,225 B of its 15,140: 47.7%,
    against flow 1's 21.7%, which met one burst. Before the pieces were summed, flow 2 met only
    its own pile-up over the queue flow 1's burst had built by then."""
    seg = 1514.0
    queues = QueueLinks([C] * 4, [5 * seg, 1000 * seg, 1000 * seg, 1000 * seg])
    for i in range(3):
        queues.join(i, (i + 1, 0), (1.0, 1.0), (), 0.1)
    span = 10 * seg / C  # s, one window's arrival at the line rate
    fluid = 10 * seg / 0.1  # B/s, one flow's fluid rate
    above = C - fluid  # B/s, a burst above its fluid rate
    queues.send(0, 10 * seg, C, now=1.0)
    queues.send(1, 10 * seg, C, now=1.001)
    pieces = [  # (s, B/s arriving) while flow 2's window arrives, the queue full after its fill
        (span - 0.002, 2 * fluid + C + 2 * above),
        (0.001, 2 * fluid + C + above),
        (0.001, 2 * fluid + C),
    ]
    fill_s = (5 * seg - C * 0.001) / (pieces[0][1] - C)
    lost = (pieces[0][0] - fill_s) * (pieces[0][1] - C) * C / pieces[0][1]
    lost += sum(dt * (total - C) * C / total for dt, total in pieces[1:])
    loss = queues.send(2, 10 * seg, C, now=1.002).loss
    assert loss == pytest.approx(lost / (10 * seg))
    assert loss == pytest.approx(0.477, abs=0.001)  # the docstring's figure


def test_only_a_window_written_alone_loses_its_tail_at_its_senders_own_link() -> None:
    """A server writes a 150-segment window at once into its 100-packet link: the tail of 50
    that does not fit is the window's own (RoundTrip.at_sender: TCP finds it a round trip late).
    Two windows of 75 written at the same instant also overflow it by 50, but how a stack orders
    them is not modelled: the loss is spread over both as interleaved drops (at_sender False)."""
    seg = 1514.0
    cap = 12_500_000.0
    alone = QueueLinks([cap, cap], [100 * seg, 1000 * seg])
    alone.join(0, (0, 1), (1.0, 1.0), (), 0.1)
    trip = alone.send(0, 150 * seg, math.inf, now=1.0)
    assert trip.loss == pytest.approx(50 / 150) and trip.at_sender
    two = QueueLinks([cap, cap, cap], [100 * seg, 1000 * seg, 1000 * seg])
    for i in range(2):
        two.join(i, (0, 1 + i), (1.0, 1.0), (), 0.1)
        two.offer(i, 75 * seg, math.inf)
    trips = two.trips(1.0)
    assert all(t.loss == pytest.approx(50 / 150) and not t.at_sender for t in trips.values())


def _line(first_ms: float, second_ms: float, *, equal: bool = False) -> Topology:
    """node -> gw -> server: a 100 Mbit/s access link (10 Mbit/s when ``equal``) into a 10 Mbit/s
    gateway link, one-way latencies ``first_ms`` and ``second_ms``, and the way back alike."""
    topo = Topology("line")
    for name, role in (("server", "server"), ("gw", "relay"), ("node", "node")):
        topo.add_node(name, role)
    access = 10e6 if equal else 100e6
    topo.add_link("node", "gw", Link("node.up", access, first_ms * 1e-3, queue_packets=20))
    topo.add_link("gw", "server", Link("gw.up", 10e6, second_ms * 1e-3, queue_packets=20))
    topo.add_link("server", "gw", Link("gw.down", 10e6, second_ms * 1e-3, queue_packets=20))
    topo.add_link("gw", "node", Link("node.down", access, first_ms * 1e-3, queue_packets=20))
    return topo


def test_the_bottleneck_clock_leads_by_the_propagation_before_the_last_smallest_link() -> None:
    from aiotsim.network.flows_tcp import bottleneck_ahead

    net = Network(simpy.Environment(), _line(150.0, 2.0), transport="tcp", sharing="fifo")
    assert bottleneck_ahead(net._path("node", "server")) == pytest.approx(0.150)  # the gateway's link
    assert bottleneck_ahead(net._path("server", "node")) == 0.0  # gw.down is the first hop
    equal = Network(simpy.Environment(), _line(150.0, 2.0, equal=True), transport="tcp", sharing="fifo")
    # two equal 10 Mbit/s links: the later one, where the access link's backlog drains at line rate
    assert bottleneck_ahead(equal._path("node", "server")) == pytest.approx(0.150)


def _upload_rounds(topo: Topology, sharing: str, nbytes: int = 400_000) -> tuple[float, list[float]]:
    """One upload node -> server from t = 0: its end (s) and when each of its rounds began (s)."""
    import aiotsim.network.flows_tcp as flows_tcp

    starts: list[float] = []
    plan = flows_tcp.plan_round

    def spy(conn, params, now, *args, **kwargs):  # type: ignore[no-untyped-def]
        starts.append(now)
        return plan(conn, params, now, *args, **kwargs)

    env = simpy.Environment()
    net = Network(env, topo, transport="tcp", sharing=sharing)
    flows_tcp.plan_round = spy
    try:
        done = net.send("node", "server", nbytes)
        env.run()
    finally:
        flows_tcp.plan_round = plan
    return done.value.end_s, starts


def test_a_lone_flow_ends_alike_wherever_its_latency_lies_and_its_rounds_run_on_the_bottlenecks_clock() -> None:
    """The same 160 ms round trip, 75 + 5 ms or 5 + 75 ms one way: under fifo each round is
    priced when its window reaches the gateway's queue, 75 ms or 5 ms after it leaves (the first:
    handshake 0.160 s + 0.075 s, or + 0.005 s), so every round of the first comes 70 ms later, and
    the transfer ends at the same instant, as under fair (whose rounds run on the sender's clock)."""
    before, rounds_before = _upload_rounds(_line(75.0, 5.0), "fifo")
    after, rounds_after = _upload_rounds(_line(5.0, 75.0), "fifo")
    assert rounds_before[0] == pytest.approx(0.160 + 0.075)
    assert rounds_after[0] == pytest.approx(0.160 + 0.005)
    assert [b - a for a, b in zip(rounds_after, rounds_before)] == pytest.approx([0.070] * len(rounds_after))
    assert before == pytest.approx(after, rel=1e-12)
    fair, rounds_fair = _upload_rounds(_line(75.0, 5.0), "fair")
    assert rounds_fair[0] == pytest.approx(0.160)  # fair prices nothing at a queue: the sender's clock
    assert fair == pytest.approx(_upload_rounds(_line(5.0, 75.0), "fair")[0], rel=1e-12)


def test_a_backlog_left_in_an_access_queue_drains_into_the_shared_link_and_the_newcomer_meets_only_its_own() -> None:
    """Flow 0 (100 KB window, 20 ms base) fills its own 10 Mbit/s access link (link 0) into a shared
    10 Mbit/s link (2): the first of equals queues, 100,000 / C - 0.02 = 60 ms of it, 75,000 bytes
    (its rate C x 60 ms). A round trip later flow 1 joins the shared link with its 15,000-byte
    window: the shared link is tighter now and flow 0 queues there, but its 75,000 bytes stay in
    its access queue, so the shared queue holds 25,000 + 15,000 bytes: 40,000 / C - 0.02 = 12 ms,
    not the 72 ms of both whole windows. Flow 0's access link still delays everything crossing it
    by 60 ms; flow 0 sends its share of the shared link, 25,000 / 32 ms, flow 1 15,000 / 32 ms:
    together C. From then on flow 0's backlog drains into the shared queue at C less what flow 0
    sends (781,250 bytes/s, then its new share): each window that meets the shared queue meets
    what has drained into it by then."""
    queues = QueueLinks([C, C, C], [1e9, 1e9, 1e9])
    queues.join(0, (0, 2), (1.0, 1.0), (), 0.02)
    queues.join(1, (1, 2), (1.0, 1.0), (), 0.02)
    assert queues.send(0, 100_000.0, now=0.0).rtt == pytest.approx(0.08)
    assert queues.send(0, 100_000.0, now=0.1).rtt == pytest.approx(0.08)  # a round trip at its own link
    joined = queues.send(1, 15_000.0, now=0.2)
    assert queues.links_delay((2,)) == pytest.approx(0.012)
    assert joined.rtt == pytest.approx(0.032)  # base + 12 ms, not base + 72 ms
    assert queues.links_delay((0,)) == pytest.approx(0.06)  # the backlog left behind
    share = 25_000.0 / 0.032
    assert queues.rate(0) == pytest.approx(share)
    assert queues.rate(0) + queues.rate(1) == pytest.approx(C)
    # flow 1's next round, 50 ms on: what drained from flow 0's access queue meets it at the shared one
    queues.send(1, 15_000.0, now=0.25)
    held = 75_000.0 - 0.05 * (C - share)
    assert queues.links_delay((0,)) == pytest.approx(held / C)
    assert queues.links_delay((2,)) == pytest.approx((100_000.0 - held + 15_000.0) / C - 0.02)
    assert 0 in queues.stale()  # flow 0's rate moved with it
    sent = queues.rate(0)
    later = queues.send(0, 100_000.0, now=0.3)
    held -= 0.05 * (C - sent)  # bytes still in its access queue
    assert queues.links_delay((0,)) == pytest.approx(held / C)
    assert queues.links_delay((2,)) == pytest.approx((100_000.0 - held + 15_000.0) / C - 0.02)
    assert later.rate == pytest.approx((100_000.0 - held) / (0.02 + queues.links_delay((2,))))


def test_a_backlog_moves_with_its_flow_to_a_faster_link() -> None:
    """A backlog that drains at 10 Mbit/s into a 20 Mbit/s link cannot queue there: when the
    faster shared link becomes the tighter one, the flow's whole window queues there (as before)."""
    queues = QueueLinks([C, 4 * C, 2 * C], [1e9, 1e9, 1e9])
    queues.join(0, (0, 2), (1.0, 1.0), (), 0.02)
    queues.join(1, (1, 2), (1.0, 1.0), (), 0.02)
    queues.send(0, 100_000.0, now=0.0)
    queues.send(0, 100_000.0, now=0.1)
    # flow 1 asks 4.8 MB/s: 1.2x its own link, (100 + 120) KB / 20 ms = 4.4x the shared one,
    # which is now tighter than flow 0's access link (4x) too
    queues.send(1, 120_000.0, now=0.2)
    assert queues.links_delay((0,)) == 0.0
    assert queues.links_delay((2,)) == pytest.approx(220_000.0 / (2 * C) - 0.02)


def _two_uploads(sizes: tuple[int, int], starts: tuple[float, float]) -> tuple[dict[int, float], Network]:
    """Two uploads (bytes, starting at s) over 10 Mbit/s access links (10 ms one way) into one
    10 Mbit/s link, 1,000-packet queues, TCP as ns-3 runs it (calibrate_classes' set-up): each
    one's completion time from its start, s, and the network."""
    topo = Topology.star(2, 10e6, 10e6, 0.0, 10e6, mtu=1500, header_bytes=52,
                         per_node=[{"latency_s": 0.01, "framing_bytes": 2}] * 2, queue_packets=1000)  # fmt: skip
    env = simpy.Environment()
    net = Network(env, topo, transport="tcp", sharing="fifo",
                  tcp=TcpParams(connection="per-transfer", idle_restart=False, stack="ns3"))  # fmt: skip
    done: dict[int, float] = {}

    def upload(i: int):  # type: ignore[no-untyped-def]
        yield env.timeout(starts[i])
        t = yield net.send(f"node{i}", "server", sizes[i])
        done[i] = t.end_s - t.start_s

    for i in range(2):
        env.process(upload(i))
    env.run()
    return done, net


def test_a_flow_joining_a_loaded_link_goes_through_what_reached_the_shared_queue_as_in_ns3() -> None:
    """ns-3.44 (calibrate_classes' set-up, traced): a 250 KB upload that joins a 4 MB upload 1 s
    after it started, both over 10 Mbit/s access links into one 10 Mbit/s link with 1,000-packet
    queues (10 ms one way), takes 0.594 s; the first upload's backlog sits in its own access
    queue and reaches the shared one over half a second. Before the model left it there, the
    newcomer waited behind all of it: 1.53 s."""
    done, _ = _two_uploads((4_000_000, 250_000), (0.0, 1.0))
    assert done[1] == pytest.approx(0.594, rel=0.25)
    assert done[0] == pytest.approx(3.570, rel=0.05)  # ns-3: the long upload


def test_the_next_windows_first_segments_meet_an_ack_clocked_backlog_whole_and_a_burst_half_served() -> None:
    """One FIFO at 10 Mbit/s, base RTT 100 ms: flow 0's 150,000-byte window is clocked by its ACKs,
    flow 1's 100,000-byte window bursts (slow start). q = 250,000 / C - 0.1 = 100 ms; flow 1 sends
    100,000 / 0.2 s = 40% of the link, so 40% of the queue is its burst, which is half served when
    the next window's first segments arrive: they meet 0.1 x (1 - 0.4 / 2) = 80 ms (HyStart's
    samples), while the round trip stays 200 ms. A lone burst: half its queue."""
    queues = QueueLinks([C, 100 * C, 100 * C], [1e9, 1e9, 1e9])
    queues.join(0, (1, 0), (1.0, 1.0), (), 0.1)
    queues.join(1, (2, 0), (1.0, 1.0), (), 0.1)
    queues.offer(0, 150_000.0, 0.0)
    queues.offer(1, 100_000.0, 2 * C)
    trips = queues.trips()
    assert trips[1].rtt == pytest.approx(0.2)
    assert queues.path_delay(0) == queues.path_delay(1) == pytest.approx(0.1)
    assert queues.head_delay(0) == queues.head_delay(1) == pytest.approx(0.08)
    queues.leave(0)
    alone = queues.send(1, 100_000.0, 2 * C)  # below the pipe's 125,000 bytes: no queue
    assert alone.rtt == pytest.approx(0.1) and queues.head_delay(1) == 0.0
    assert queues.send(1, 250_000.0, 2 * C).rtt == pytest.approx(0.2)  # 100 ms of queue, all its burst
    assert queues.head_delay(1) == pytest.approx(0.05)


def test_a_flow_joining_a_link_kept_full_leaves_slow_start_where_ns3s_does() -> None:
    """ns-3.44 (calibrate_classes' set-up, traced per socket): flow 0 uploads 1 MB and keeps its
    10 Mbit/s access link and the shared 10 Mbit/s link full; flow 1 uploads 1 MB from 0.3 s (10
    ms one way, 1,000-packet queues). Flow 1's round trips grow with its own packets in the shared
    queue: the first samples of its window of 40 measure 47.6 ms, over twice its smallest (20.4
    ms), and HyStart ends slow start at 55 segments; flow 0 takes 1.141 s, flow 1 1.403 s. When
    the model sampled the queue as the round before began, flow 1 left slow start at 96 and flow
    0 took 1.246 s (+9%)."""
    done, net = _two_uploads((1_000_000, 1_000_000), (0.0, 0.3))
    conns = net.tcp_state()["conns"]
    assert isinstance(conns, dict)
    assert conns["node1\x00server"]["ssthresh"] == pytest.approx(55.0, abs=3.0)
    assert done[0] == pytest.approx(1.141, rel=0.03)
    assert done[1] == pytest.approx(1.403, rel=0.03)


def test_an_unqueued_link_holds_no_queue_even_where_the_windows_ask_most_of_it() -> None:
    """Two flows cross their own 10 Mbit/s link and then a 5 Mbit/s one that asks the most
    (demand / capacity twice their own links'). Marked unqueued, it is passed over: each flow
    queues at its own link, W / C - d, and no burst overflows it."""
    queues = QueueLinks([C, C, C / 2], [1e9, 1e9, 15_000.0], unqueued={2})
    queues.join(0, (0, 2), (1.0, 1.0), (), 0.02)
    queues.join(1, (1, 2), (1.0, 1.0), (), 0.02)
    queues.offer(0, 100_000.0, 2 * C)
    queues.offer(1, 100_000.0, 2 * C)
    trips = queues.trips()
    assert queues.links_delay((2,)) == 0.0
    assert queues.links_delay((0,)) == queues.links_delay((1,)) == pytest.approx(100_000.0 / C - 0.02)
    assert trips[0].loss == trips[1].loss == 0.0


def test_a_hierarchy_whose_core_drains_both_backhauls_shares_nothing_there_as_in_ns3() -> None:
    """ns-3.44 (calibrate_classes' hierarchy, 1,000-packet queues, realisation 1 of its start
    jitter): 2 gateways x 4 sensors x 500 KB, 10 Mbit/s backhauls into a 20 Mbit/s core link; all
    eight finish within 1.752-1.767 s, and the model within 3%. The core never queues (20 = 10 +
    10). When the model let windows queue there, one gateway's four flows shared it with the
    other's, and took 2.06-2.29 s (the same seed)."""
    from aiotsim.network import calibrate_classes as cc

    case = next(c for c in cc.grid() if c.label == "2 gateways x 4 x 500 KB, queue 1000")
    ns3 = [1.766, 1.760, 1.765, 1.752, 1.767, 1.761, 1.753, 1.767]
    model = cc.model_times(cc.realisations(case)[1], seed=2, sharing="fifo")
    assert model == pytest.approx(ns3, rel=0.03)
