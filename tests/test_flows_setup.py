"""What a (src, dst) pair costs, computed once per pair: the wire bytes of a send from the path's
constants must be exactly (bit for bit) :func:`overhead.wire_bytes`, the one-pass
:func:`overhead.path_format` must combine links as documented, and one route lookup gives the
same links and vertices as :meth:`Topology.route` and :meth:`Topology.route_nodes`."""

from __future__ import annotations

import random

import pytest
import simpy

from aiotsim.errors import ConfigError
from aiotsim.network import Link, Network, Topology, Transfer
from aiotsim.network.overhead import path_format, wire_bytes


def chain(links: list[Link]) -> Topology:
    """v0 -> v1 -> ... over ``links`` in order."""
    topo = Topology()
    for k in range(len(links) + 1):
        topo.add_node(f"v{k}", "node")
    for k, link in enumerate(links):
        topo.add_link(f"v{k}", f"v{k + 1}", link)
    return topo


def random_link(rng: random.Random, k: int) -> Link:
    header = rng.choice([0, 20, 40, 52])
    return Link(
        f"l{k}",
        rng.uniform(1e5, 1e8),
        rng.choice([0.0, 0.001, 0.013]),
        mtu=rng.choice([header + 1, 576, 1280, 1500, 9000]),
        header_bytes=header,
        loss=rng.choice([0.0, 0.0, 1e-3, 0.07, 0.3]),
        framing_bytes=rng.choice([0, 14, 38]),
        acks_per_packet=rng.choice([0.0, 0.5, 1.0 / 3.0]),
    )


def test_wire_bytes_of_a_send_equal_overhead_wire_bytes_bit_for_bit() -> None:
    rng = random.Random(13)
    for case in range(60):
        links = [random_link(rng, k) for k in range(rng.randint(1, 4))]
        fmt = path_format(links)
        if fmt.mtu <= fmt.header_bytes:  # min MTU at or below the max header: refused below
            continue
        env = simpy.Environment()
        net = Network(env, chain(links), transport="ideal")
        last = f"v{len(links)}"
        sizes = [0, 1, fmt.mtu - fmt.header_bytes, fmt.mtu - fmt.header_bytes + 1, rng.randint(1, 10**7)]
        for n in sizes:
            net.send("v0", last, n, tag=str(n))
        env.run()
        for t in net.transfers:
            want = wire_bytes(t.nbytes, fmt.mtu, fmt.header_bytes, fmt.loss, fmt.framing_bytes, fmt.acks_per_packet)
            assert t.wire_bytes == want, (case, t.nbytes)  # exact: the same float operations
            assert net.wire_bytes_for("v0", last, t.nbytes) == want


def test_a_path_whose_mtu_is_below_a_header_is_refused_at_send() -> None:
    # min MTU 100 (first link), max header 120 (second link): no payload fits a packet
    links = [Link("a", 1e6, mtu=100, header_bytes=20), Link("b", 1e6, mtu=1500, header_bytes=120)]
    net = Network(simpy.Environment(), chain(links))
    with pytest.raises(ConfigError, match="mtu"):
        net.send("v0", "v2", 1000)


def test_wire_bytes_for_checks_its_size_and_refuses_a_path_no_payload_fits() -> None:
    ok = Network(simpy.Environment(), chain([Link("a", 1e6, mtu=1500, header_bytes=40)]))
    for bad in (-1, 2.5, True, "10"):
        with pytest.raises(ConfigError, match="must be an integer >= 0"):
            ok.wire_bytes_for("v0", "v1", bad)  # type: ignore[arg-type]
    assert ok.wire_bytes_for("v0", "v1", 1461) == 1461 + 2 * 40  # two packets of 1460 payload bytes
    links = [Link("a", 1e6, mtu=100, header_bytes=20), Link("b", 1e6, mtu=1500, header_bytes=120)]
    net = Network(simpy.Environment(), chain(links))
    for _ in range(2):  # the second call reads the pair's cached path: refused all the same
        with pytest.raises(ConfigError, match="mtu"):
            net.wire_bytes_for("v0", "v2", 1000)


def test_path_format_combines_links_as_documented() -> None:
    a = Link("a", 1e6, 0.002, mtu=1500, header_bytes=40, loss=0.1, framing_bytes=14, acks_per_packet=0.5)
    b = Link("b", 1e6, 0.003, mtu=576, header_bytes=52, loss=0.2, framing_bytes=0, acks_per_packet=0.0)
    fmt = path_format([a, b])
    assert (fmt.mtu, fmt.header_bytes, fmt.framing_bytes, fmt.acks_per_packet) == (576, 52, 14, 0.5)
    assert fmt.loss == pytest.approx(1.0 - 0.9 * 0.8, rel=1e-15)  # 0.28
    assert fmt.latency_s == pytest.approx(0.005, rel=1e-15)


def test_route_with_nodes_is_route_and_route_nodes() -> None:
    topo = Topology.hierarchical([2, 3], 1e6, 1e6, 0.01, 5e6, 5e6, 0.02)
    for node in topo.nodes:
        links, nodes = topo.route_with_nodes(node, "server")
        assert links == topo.route(node, "server") and nodes == topo.route_nodes(node, "server")
        assert nodes[0] == node and nodes[-1] == "server" and len(nodes) == len(links) + 1
        links.clear()  # new lists: the cached route is not touched
        assert len(topo.route(node, "server")) == len(nodes) - 1


def test_a_path_s_bottleneck_and_store_and_forward_terms_by_hand() -> None:
    """Chain of 1, 0.4 and 2 Mbit/s: the bottleneck is 0.4 Mbit/s = 50,000 bytes/s, and the sum of
    1 / capacity is 1/125,000 + 1/50,000 + 1/250,000 s/byte."""
    links = [Link("a", 1e6, 0.001), Link("b", 4e5, 0.002), Link("c", 2e6, 0.003)]
    path = Network(simpy.Environment(), chain(links))._path("v0", "v3")
    assert path.bottleneck_Bps == 50_000.0
    assert path.inv_cap_sum == pytest.approx(1 / 125_000 + 1 / 50_000 + 1 / 250_000, rel=1e-15)
    assert path.links_t == (0, 1, 2) and path.mults_t == (1.0, 1.0, 1.0)
    assert type(path.bottleneck_Bps) is float


def test_a_completed_transfer_is_an_immutable_record_of_the_send() -> None:
    """A record per flow, kept for the whole run: its fields by hand, read-only, no per-record dict."""
    env = simpy.Environment()
    net = Network(env, chain([Link("a", 1e6, 0.01), Link("b", 2e6, 0.02)]))
    event = net.send("v0", "v2", 12_345, tag="grad/it0")
    env.run()
    record = event.value
    assert net.transfers == [record] and record == Transfer(*record)
    assert (record.src, record.dst, record.tag, record.nbytes) == ("v0", "v2", "grad/it0", 12_345)
    assert record.path == ["a", "b"] and record.nodes == ["v0", "v1", "v2"]
    assert record.start_s == 0.0 and record.duration_s == record.end_s > 0.03  # latency 30 ms
    assert repr(record).startswith("Transfer(src='v0', dst='v2', tag='grad/it0', nbytes=12345")
    with pytest.raises(AttributeError):
        record.tag = "changed"  # type: ignore[misc]
    assert not hasattr(record, "__dict__")


@pytest.mark.parametrize("transport", ["ideal", "tcp"])
def test_a_network_keeping_no_records_delivers_the_same_ones(transport: str) -> None:
    """keep_records=False: the transfers list stays empty, every send's event still carries a
    record equal to the one a recording network makes (delayed, zero-latency and self sends)."""

    def run(keep: bool) -> tuple[list[Transfer], list[Transfer]]:
        env = simpy.Environment()
        links = [Link("a", 1e6, 0.01), Link("b", 2e6, 0.0)]
        net = Network(env, chain(links), transport=transport, keep_records=keep)
        events = [net.send("v0", "v2", 5_000), net.send("v1", "v2", 0), net.send("v1", "v1", 7)]
        env.run()
        return [e.value for e in events], net.transfers

    kept, kept_list = run(True)
    values, empty = run(False)
    assert values == kept and empty == [] and sorted(kept_list, key=kept.index) == kept
