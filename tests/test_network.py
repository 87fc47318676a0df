"""Network model against hand-computed transfer times, fair shares, loss and jitter."""

from __future__ import annotations

import subprocess
import sys

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from aiotsim.errors import ConfigError, TopologyError
from aiotsim.network import Link, Network, Topology, max_min_rates, packets, wire_bytes

REL = 1e-9


def two_vertex(link: Link) -> Topology:
    """a -> b over one link (and nothing back)."""
    topo = Topology()
    topo.add_node("a", "node")
    topo.add_node("b", "server")
    topo.add_link("a", "b", link)
    return topo


def run_sends(topo: Topology, sends: list[tuple[float, str, str, int]], seed: int = 0) -> dict:
    """Start each (at_s, src, dst, nbytes) send at its time; return {index: Transfer}."""
    env = simpy.Environment()
    net = Network(env, topo, seed=seed)
    out: dict = {}

    def sender(i: int, at: float, src: str, dst: str, n: int):  # type: ignore[no-untyped-def]
        yield env.timeout(at)
        out[i] = yield net.send(src, dst, n, tag=str(i))

    for i, (at, src, dst, n) in enumerate(sends):
        env.process(sender(i, at, src, dst, n))
    env.run()
    return out


def test_packets_and_wire_bytes_by_hand() -> None:
    # 10,000 B with 1460 B of payload per packet: 6 full packets + 1,240 B -> 7 packets.
    assert packets(10_000, 1500, 40) == 7
    assert wire_bytes(10_000, 1500, 40) == 10_000 + 7 * 40 == 10_280
    assert packets(1460, 1500, 40) == 1 and packets(1461, 1500, 40) == 2
    assert packets(0, 1500, 40) == 1 and wire_bytes(0, 1500, 40) == 40
    # framing (14 B/packet) and one ACK of 40+14 B per two packets: 10,000 + 7*54*1.5 = 10,567.
    assert wire_bytes(10_000, 1500, 40, framing_bytes=14, acks_per_packet=0.5) == 10_567


def test_one_transfer_is_latency_plus_wire_time() -> None:
    topo = two_vertex(Link("l", bandwidth_bps=1e6, latency_s=0.05))
    [t] = run_sends(topo, [(0.0, "a", "b", 10_000)]).values()
    # 10,280 wire bytes * 8 / 1e6 bit/s = 0.08224 s, + 0.05 s latency.
    assert t.wire_bytes == 10_280
    assert t.end_s == pytest.approx(0.13224, rel=REL)
    assert t.path == ["l"] and t.nodes == ["a", "b"]


def test_zero_bytes_cost_one_header_packet() -> None:
    topo = two_vertex(Link("l", bandwidth_bps=1e6, latency_s=0.01))
    [t] = run_sends(topo, [(0.0, "a", "b", 0)]).values()
    assert t.wire_bytes == 40
    assert t.end_s == pytest.approx(0.01 + 40 * 8 / 1e6, rel=REL)  # 0.01032 s


def test_multi_hop_rate_is_the_bottleneck_and_latencies_add() -> None:
    topo = Topology.star(1, uplink_bps=2e6, downlink_bps=2e6, latency_s=0.02, server_bps=100e6)
    [t] = run_sends(topo, [(0.0, "node0", "server", 10_000)]).values()
    # path node0.up (2 Mbit/s, 20 ms) + server.in (100 Mbit/s, 0 ms): 10,280*8/2e6 = 0.04112 s.
    assert t.path == ["node0.up", "server.in"]
    assert t.end_s == pytest.approx(0.02 + 0.04112, rel=REL)


@pytest.mark.parametrize("n", [1, 4, 10])
def test_equal_flows_through_shared_server_link_finish_together(n: int) -> None:
    topo = Topology.star(n, uplink_bps=100e6, downlink_bps=100e6, latency_s=0.01, server_bps=1e6)
    done = run_sends(topo, [(0.0, f"node{i}", "server", 10_000) for i in range(n)])
    # each gets 1/n of 1 Mbit/s: n * 10,280 B * 8 / 1e6 = n * 0.08224 s, + 10 ms of uplink latency.
    expected = n * 0.08224 + 0.01
    assert [t.end_s for t in done.values()] == pytest.approx([expected] * n, rel=REL)


def test_late_flow_gets_its_fair_share() -> None:
    # One 1 Mbit/s link = 125,000 B/s, no latency.
    # A: 14,600 B = 10 packets -> 15,000 wire B, starts at 0.
    # B:  7,300 B =  5 packets ->  7,500 wire B, starts at 0.04 s.
    # 0 .. 0.04 s: A alone at 125,000 B/s drains 5,000 B (10,000 left).
    # then each gets 62,500 B/s: B needs 7,500 / 62,500 = 0.12 s -> B ends at 0.16 s;
    # A drained 7,500 B meanwhile (2,500 left), alone again: 2,500 / 125,000 = 0.02 s -> 0.18 s
    # (= all 22,500 wire bytes / 125,000 B/s: the link never idles).
    topo = two_vertex(Link("l", bandwidth_bps=1e6))
    done = run_sends(topo, [(0.0, "a", "b", 14_600), (0.04, "a", "b", 7_300)])
    assert done[0].wire_bytes == 15_000 and done[1].wire_bytes == 7_500
    assert done[1].end_s == pytest.approx(0.16, rel=REL)
    assert done[0].end_s == pytest.approx(0.18, rel=REL)


def chain() -> Topology:
    """x -> y over link1 (10 Mbit/s), y -> z over link2 (4 Mbit/s)."""
    topo = Topology()
    for v in ("x", "y", "z"):
        topo.add_node(v, "node")
    topo.add_link("x", "y", Link("link1", 10e6))
    topo.add_link("y", "z", Link("link2", 4e6))
    return topo


def test_max_min_across_two_bottlenecks() -> None:
    # A: link1; B: link1 + link2; C: link2. Progressive filling: at 2 Mbit/s each, link2
    # (4 Mbit/s) is full -> B = C = 2 Mbit/s frozen; A grows alone to 10 - 2 = 8 Mbit/s.
    env = simpy.Environment()
    net = Network(env, chain())
    net.send("x", "y", 14_600, "A")  # 15,000 wire B
    net.send("x", "z", 7_300, "B")  # 7,500 wire B
    net.send("y", "z", 7_300, "C")  # 7,500 wire B
    env.run(until=1e-6)
    rates = {f.tag: f.rate_bps for f in net.active_flows}
    assert rates == pytest.approx({"A": 8e6, "B": 2e6, "C": 2e6}, rel=REL)
    env.run()
    ends = {t.tag: t.end_s for t in net.transfers}
    # A: 15,000 B at 1e6 B/s = 0.015 s. B, C: 7,500 B at 250,000 B/s = 0.03 s (link2 still
    # splits 2/2 after A leaves).
    assert ends == pytest.approx({"A": 0.015, "B": 0.03, "C": 0.03}, rel=REL)
    assert net.link_bytes == pytest.approx({"link1": 15_000 + 7_500, "link2": 7_500 * 2}, rel=REL)


def test_max_min_rates_function_by_hand() -> None:
    # D crosses link l twice (up and down a shared channel), E once: D uses 2x, E x; 3x = 9.
    assert max_min_rates({"l": 9.0}, {"D": {"l": 2}, "E": {"l": 1}}) == pytest.approx({"D": 3.0, "E": 3.0})
    # Three links: u (6) shared by P, Q; v (1) only Q; so Q = 1 (v full), P = 5.
    assert max_min_rates({"u": 6.0, "v": 1.0}, {"P": {"u": 1}, "Q": {"u": 1, "v": 1}}) == (
        pytest.approx({"P": 5.0, "Q": 1.0})
    )


@settings(max_examples=60, deadline=None)
@given(
    caps=st.lists(st.floats(0.5, 100.0), min_size=1, max_size=5),
    paths=st.lists(st.lists(st.integers(0, 4), min_size=1, max_size=3), min_size=1, max_size=8),
)
def test_max_min_is_feasible_and_every_flow_has_a_bottleneck(caps: list[float], paths: list[list[int]]) -> None:
    capacity = {f"l{i}": c for i, c in enumerate(caps)}
    usage: dict[int, dict[str, int]] = {}
    for k, path in enumerate(paths):
        links: dict[str, int] = {}
        for j in path:
            name = f"l{j % len(caps)}"
            links[name] = links.get(name, 0) + 1
        usage[k] = links
    rates = max_min_rates(capacity, usage)
    load = {name: 0.0 for name in capacity}
    for k, links in usage.items():
        for name, mult in links.items():
            load[name] += rates[k] * mult
    for name, c in capacity.items():
        assert load[name] <= c * (1 + 1e-9)
    # Max-min: every flow crosses a saturated link on which no flow has a larger rate.
    for k, links in usage.items():
        assert any(
            load[name] >= capacity[name] * (1 - 1e-9)
            and all(rates[o] <= rates[k] * (1 + 1e-9) for o in usage if name in usage[o])
            for name in links
        )


def test_loss_adds_expected_wire_bytes_and_recovery_delay() -> None:
    topo = two_vertex(Link("l", bandwidth_bps=1e6, latency_s=0.05, loss=0.2))
    [t] = run_sends(topo, [(0.0, "a", "b", 10_000)]).values()
    # 10,280 B / (1 - 0.2) = 12,850 wire B -> 0.1028 s on the wire. Expected lost packets:
    # 7 * 0.2 / 0.8 = 1.75, one RTT (2 * 0.05 s) each: 0.175 s. Total 0.05 + 0.1028 + 0.175.
    assert t.wire_bytes == pytest.approx(12_850, rel=REL)
    assert t.end_s == pytest.approx(0.3278, rel=REL)


def test_jitter_follows_its_seed() -> None:
    topo = two_vertex(Link("l", bandwidth_bps=1e6, latency_s=0.05, jitter_s=0.01))
    sends = [(0.1 * i, "a", "b", 1_000) for i in range(5)]

    def ends(seed: int) -> list[float]:
        return [t.end_s for t in run_sends(topo, sends, seed=seed).values()]

    base = [0.1 * i + 0.05 + (1_000 + 40) * 8 / 1e6 for i in range(5)]  # no jitter
    assert ends(7) == ends(7)
    assert ends(7) != ends(8)
    assert all(e > b for e, b in zip(ends(7), base, strict=True))  # jitter only delays


def test_link_and_network_validation_messages_name_the_value() -> None:
    with pytest.raises(ConfigError, match=r"bandwidth_bps\(=-3\) must be > 0"):
        Link("l", bandwidth_bps=-3)
    with pytest.raises(ConfigError, match=r"latency_s\(=-0.1\) must be >= 0"):
        Link("l", 1e6, latency_s=-0.1)
    with pytest.raises(ConfigError, match=r"loss\(=1.0\) must be in \[0, 1\)"):
        Link("l", 1e6, loss=1.0)
    with pytest.raises(ConfigError, match=r"mtu\(=40\) must be an integer > header_bytes\(=40\)"):
        Link("l", 1e6, mtu=40)
    with pytest.raises(ConfigError, match=r"jitter_s\(=-1\) must be >= 0"):
        Link("l", 1e6, jitter_s=-1)
    env = simpy.Environment()
    net = Network(env, two_vertex(Link("l", 1e6)))
    with pytest.raises(ConfigError, match=r"nbytes\(=-5\) must be an integer >= 0"):
        net.send("a", "b", -5)
    with pytest.raises(TopologyError, match="no route from 'b' to 'a'"):
        net.send("b", "a", 10)
    with pytest.raises(TopologyError, match="unknown node 'q'"):
        net.send("a", "q", 10)


def test_network_package_does_not_import_torch() -> None:
    code = "import sys, aiotsim.network; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


# ---- cancel: a sender that is gone -------------------------------------------------------------
def test_cancel_stops_a_flow_and_frees_its_share() -> None:
    # two 1 MB transfers share a 1 MB/s server link (fast uplinks, no latency); node0's sender is
    # gone at 0.5 s, after 0.25 MB of wire at half the link: node1 then has W - 0.25 MB at 1 MB/s
    env = simpy.Environment()
    net = Network(env, Topology.star(2, 80e6, 80e6, 0.0, 8e6), transport="ideal")
    w = wire_bytes(1_000_000, 1500, 40)  # 1,027,400 B
    a = net.send("node0", "server", 1_000_000, tag="a")
    b = net.send("node1", "server", 1_000_000, tag="b")
    out = {}

    def gone():  # type: ignore[no-untyped-def]
        yield env.timeout(0.5)
        out["cut"] = net.cancel(a)
        out["again"] = net.cancel(a)

    env.process(gone())
    env.run()
    cut = out["cut"]
    assert (cut.tag, cut.nbytes, cut.start_s, cut.end_s) == ("a", 1_000_000, 0.0, 0.5)
    assert cut.wire_bytes == pytest.approx(250_000, rel=REL)
    assert out["again"] is None and not a.triggered  # a stopped transfer's event never fires
    assert b.value.end_s == pytest.approx(0.5 + (w - 250_000) / 1e6, rel=REL)  # 1.2774 s, not 2 W / C
    assert net.link_bytes["node0.up"] == pytest.approx(250_000, rel=REL)
    assert net.link_bytes["server.in"] == pytest.approx(250_000 + w, rel=REL)
    assert [t.tag for t in net.transfers] == ["b"]


def test_cancel_after_the_last_byte_left_changes_nothing() -> None:
    # drained at 0.08224 s, arrives 0.05 s later: a cancel in between finds nothing to stop
    env = simpy.Environment()
    net = Network(env, two_vertex(Link("l", bandwidth_bps=1e6, latency_s=0.05)), transport="ideal")
    ev = net.send("a", "b", 10_000)
    out = {}

    def late():  # type: ignore[no-untyped-def]
        yield env.timeout(0.1)
        out["cut"] = net.cancel(ev)
        out["arrived"] = yield ev

    env.process(late())
    env.run()
    assert out["cut"] is None
    assert out["arrived"].end_s == pytest.approx(0.13224, rel=REL)
    assert net.cancel(ev) is None  # arrived: nothing either


def test_cancel_resets_the_tcp_connection() -> None:
    # after a cut the pair's next transfer opens a new connection: one handshake round trip
    # (2 x 10 ms) more than on the connection a completed transfer leaves open
    def next_send_s(cut: bool) -> float:
        env = simpy.Environment()
        net = Network(env, Topology.star(1, 8e6, 8e6, 0.01, 80e6), transport="tcp")
        took = []

        def node():  # type: ignore[no-untyped-def]
            ev = net.send("node0", "server", 5_000_000)
            if cut:
                yield env.timeout(0.5)
                assert net.cancel(ev) is not None
            else:
                yield ev
            t = env.now
            yield net.send("node0", "server", 100)
            took.append(env.now - t)

        env.process(node())
        env.run()
        return took[0]

    assert next_send_s(True) - next_send_s(False) == pytest.approx(0.020, rel=1e-6)
