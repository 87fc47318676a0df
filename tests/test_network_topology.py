"""Topology builders: routes, aggregators, shared resources and validation, by hand."""

from __future__ import annotations

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from aiotsim.errors import TopologyError
from aiotsim.network import Link, Network, Topology


def names(links: list[Link]) -> list[str]:
    return [link.name for link in links]


def test_star_routes_and_heterogeneous_groups() -> None:
    topo = Topology.star(
        3, uplink_bps=10e6, downlink_bps=20e6, latency_s=0.01, server_bps=100e6,
        per_node=[{}, {"uplink_bps": 1e6, "latency_s": 0.2}, {"loss": 0.1}],
    )  # fmt: skip
    assert topo.nodes == ["node0", "node1", "node2"] and topo.servers == ["server"]
    assert names(topo.route("node1", "server")) == ["node1.up", "server.in"]
    assert names(topo.route("server", "node2")) == ["server.out", "node2.down"]
    assert names(topo.route("node0", "node2")) == ["node0.up", "node2.down"]
    up1 = topo.route("node1", "server")[0]
    assert (up1.bandwidth_bps, up1.latency_s) == (1e6, 0.2)
    assert topo.route("server", "node0")[1].bandwidth_bps == 20e6
    assert topo.route("node2", "server")[0].loss == 0.1
    assert topo.route("node0", "server")[1].bandwidth_bps == 100e6
    assert topo.aggregator_of("node1") == "server"
    assert topo.validate() == []
    with pytest.raises(TopologyError, match="per_node\\[0\\]: unknown key\\(s\\) speed"):
        Topology.star(1, 1e6, 1e6, 0.0, 1e6, per_node=[{"speed": 3}])


def test_hierarchical_routes_and_aggregators() -> None:
    topo = Topology.hierarchical(
        [2, 1], uplink_bps=1e6, downlink_bps=1e6, latency_s=0.01,
        backhaul_up_bps=50e6, backhaul_down_bps=50e6, backhaul_latency_s=0.02,
    )  # fmt: skip
    assert topo.gateways == ["gw0", "gw1"] and topo.nodes == ["node0", "node1", "node2"]
    assert names(topo.route("node2", "gw1")) == ["node2.up"]
    assert names(topo.route("node0", "server")) == ["node0.up", "gw0.up"]
    assert names(topo.route("server", "node1")) == ["gw0.down", "node1.down"]
    assert topo.aggregator_of("node2") == "gw1" and topo.aggregator_of("gw0") == "server"
    assert topo.validate() == []
    shared = Topology.hierarchical([1], 1e6, 1e6, 0.0, 5e6, 5e6, 0.0, server_bps=8e6)
    assert names(shared.route("gw0", "server")) == ["gw0.up", "server.in"]


def test_hierarchical_iteration_time_by_hand() -> None:
    # 2 gateways x 2 nodes, sensor links 1 Mbit/s / 10 ms, backhaul 4 Mbit/s / 20 ms.
    # Each node uploads 10,000 B (10,280 wire B) to its gateway: own link, 10,280*8/1e6 = 0.08224 s
    # + 0.01 s -> 0.09224 s. Then each gateway sends 10,000 B to the server on its own backhaul:
    # 10,280*8/4e6 = 0.02056 s + 0.02 s -> 0.1328 s.
    topo = Topology.hierarchical([2, 2], 1e6, 1e6, 0.01, 4e6, 4e6, 0.02)
    env = simpy.Environment()
    net = Network(env, topo)
    ends: dict[str, float] = {}

    def gateway(gw: str, members: list[str]):  # type: ignore[no-untyped-def]
        yield env.all_of([net.send(n, gw, 10_000) for n in members])
        t = yield net.send(gw, "server", 10_000)
        ends[gw] = t.end_s

    env.process(gateway("gw0", ["node0", "node1"]))
    env.process(gateway("gw1", ["node2", "node3"]))
    env.run()
    assert ends == pytest.approx({"gw0": 0.1328, "gw1": 0.1328}, rel=1e-9)


def test_ring_routes_both_directions() -> None:
    topo = Topology.ring(4, link_bps=1e6, latency_s=0.001)
    assert names(topo.route("node0", "node1")) == ["node0->node1"]
    assert names(topo.route("node1", "node0")) == ["node1->node0"]
    assert names(topo.route("node0", "node3")) == ["node0->node3"]
    # Two hops either way: the tie goes to the edge added first (node0 -> node1).
    assert names(topo.route("node0", "node2")) == ["node0->node1", "node1->node2"]
    assert topo.validate() == []
    with pytest.raises(TopologyError, match="no aggregator"):
        topo.aggregator_of("node0")
    with pytest.raises(TopologyError, match=r"n_nodes\(=1\) must be an integer >= 2"):
        Topology.ring(1, 1e6)


def test_ring_link_a_to_b_takes_node_a_settings() -> None:
    # heterogeneous nodes and link stragglers: the link leaving a node uses that node's uplink
    topo = Topology.ring(3, 1e6, per_node=[{"uplink_bps": 2e6, "latency_s": 0.01}, {}, {}])
    links = topo.links
    assert links["node0->node1"].bandwidth_bps == 2e6 and links["node0->node2"].bandwidth_bps == 2e6
    assert links["node1->node0"].bandwidth_bps == 1e6 and links["node2->node0"].bandwidth_bps == 1e6
    assert links["node0->node1"].latency_s == 0.01 and links["node1->node2"].latency_s == 0.0
    with pytest.raises(TopologyError, match="per_node has 1 entries"):
        Topology.ring(2, 1e6, per_node=[{}])


def test_shared_medium_one_channel_for_up_and_down() -> None:
    topo = Topology.shared_medium(3, channel_bps=1e6, latency_s=0.0)
    assert names(topo.route("node0", "server")) == ["channel", "server.in"]
    assert names(topo.route("server", "node1")) == ["server.out", "channel"]
    assert names(topo.route("node0", "node1")) == ["channel", "channel"]
    assert topo.validate() == []
    # One upload and one download at once share the 1 Mbit/s airtime: 500 kbit/s each, so
    # 10,280 wire B take 10,280*8/0.5e6 = 0.16448 s (server links are 1000x faster).
    env = simpy.Environment()
    net = Network(env, topo)
    up = net.send("node0", "server", 10_000)
    down = net.send("server", "node2", 10_000)
    env.run()
    assert [up.value.end_s, down.value.end_s] == pytest.approx([0.16448, 0.16448], rel=1e-9)
    assert net.link_bytes["channel"] == pytest.approx(2 * 10_280)


def test_custom_routes_and_validation_one_problem_each() -> None:
    nodes = [
        {"name": "server", "role": "server"},
        {"name": "a"},
        {"name": "b"},
        {"name": "c"},  # no link at all: disconnected
        {"name": "d"},  # only a link from the server: cannot send to its aggregator
    ]
    links = [
        {"from": "a", "to": "server", "mbps": 10, "latency_ms": 5},
        {"from": "b", "to": "a", "mbps": 2, "latency_ms": 1},
        {"from": "server", "to": "d", "mbps": 1, "directed": True},
    ]
    topo = Topology.from_links(nodes, links)
    route = topo.route("b", "server")
    assert names(route) == ["b->a", "a->server"]
    assert route[0].bandwidth_bps == 2e6 and route[1].latency_s == 0.005
    assert names(topo.route("server", "b")) == ["server->a", "a->b"]
    problems = topo.validate()
    assert len(problems) == 2
    assert sum("'c'" in p and "disconnected" in p for p in problems) == 1
    assert sum("'d'" in p and "unroutable" in p and "to 'server'" in p for p in problems) == 1


def test_custom_reports_every_bad_entry() -> None:
    with pytest.raises(TopologyError) as info:
        Topology.from_links(
            [{"name": "s", "role": "server"}, {"name": "x", "role": "robot"}],
            [{"from": "s", "to": "nowhere", "mbps": 1}, {"from": "s", "to": "x", "mbps": -2},
             {"from": "s", "to": "x", "mbps": 1, "colour": "red"}],
        )  # fmt: skip
    lines = str(info.value).splitlines()
    assert any("nodes[1]" in line and "role(='robot')" in line for line in lines)
    assert any("links[0]" in line and "unknown node 'nowhere'" in line for line in lines)
    bad_rate = "bandwidth_bps(=-2000000.0) must be > 0"
    assert any("links[1]" in line and bad_rate in line for line in lines)
    assert any("links[2]" in line and "colour" in line for line in lines)


def test_shared_link_name_needs_identical_settings() -> None:
    topo = Topology()
    for v in ("a", "b", "c"):
        topo.add_node(v, "node")
    topo.add_link("a", "b", Link("ch", 1e6))
    topo.add_link("b", "c", Link("ch", 1e6))  # same settings: one shared resource
    with pytest.raises(TopologyError, match="'ch' is used twice with different settings"):
        topo.add_link("c", "a", Link("ch", 2e6))


def test_builder_validation_messages() -> None:
    with pytest.raises(TopologyError, match=r"n_nodes\(=0\) must be an integer >= 1"):
        Topology.star(0, 1e6, 1e6, 0.0, 1e6)
    with pytest.raises(TopologyError, match=r"groups\[1\]\(=0\) must be an integer >= 1"):
        Topology.hierarchical([2, 0], 1e6, 1e6, 0.0, 1e6, 1e6, 0.0)
    with pytest.raises(TopologyError, match=r"role\(='boss'\)"):
        Topology().add_node("x", "boss")



def _reference_route(topo: Topology, src: str, dst: str) -> list[str]:
    """Shortest path in hops by a plain full breadth-first search, ties to the first edge added."""
    from collections import deque

    parent: dict[str, str | None] = {src: None}
    queue = deque([src])
    while queue:
        v = queue.popleft()
        for w in topo.neighbours(v):
            if w not in parent:
                parent[w] = v
                queue.append(w)
    path = [dst]
    while path[-1] != src:
        prev = parent[path[-1]]
        assert prev is not None
        path.append(prev)
    return path[::-1]


def test_routes_from_stopped_searches_and_kept_trees_equal_a_full_search() -> None:
    """A first route from a vertex stops its search at the destination; later ones keep the whole
    tree. Every pair, both ways, must give the full search's path (ties to the first edge)."""
    import itertools

    def build() -> Topology:
        return Topology.hierarchical([3, 2], 10e6, 10e6, 0.01, 20e6, 20e6, 0.02, server_bps=50e6)

    ref = build()
    warm = build()
    for a, b in itertools.permutations(ref.vertices, 2):
        want = _reference_route(ref, a, b)
        cold = build()  # nothing cached: its search stops at b
        for topo in (cold, warm):
            nodes = topo.route_nodes(a, b)
            assert nodes == want
            assert [lk.name for lk in topo.route(a, b)] == [
                next(lk.name for d, lk in topo._out[u].items() if d == v) for u, v in zip(nodes, nodes[1:])
            ]


def _reference_or_none(topo: Topology, src: str, dst: str) -> list[str] | None:
    """:func:`_reference_route`, None when ``dst`` cannot be reached."""
    try:
        return _reference_route(topo, src, dst)
    except KeyError:  # dst never reached: no parent
        return None


@settings(max_examples=150, deadline=None)
@given(st.integers(2, 9).flatmap(lambda n: st.tuples(st.just(n), st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=3 * n))))  # noqa: E501
def test_routes_equal_a_full_search_on_random_directed_graphs(graph: tuple[int, list[tuple[int, int]]]) -> None:
    """Random directed graphs, many of whose vertices have one way out (chains, loops of them,
    dead ends): every pair's route, from a cold and from a warm cache, is the full search's path,
    or TopologyError exactly when there is none."""
    import itertools

    n, edges = graph

    def build() -> Topology:
        topo = Topology("random")
        for v in range(n):
            topo.add_node(f"v{v}", "node")
        for a, b in dict.fromkeys((a, b) for a, b in edges if a != b):
            topo.add_link(f"v{a}", f"v{b}", Link(f"l{a}-{b}", 1e6, 0.001))
        return topo

    ref, warm = build(), build()
    for a, b in itertools.permutations(ref.vertices, 2):
        want = _reference_or_none(ref, a, b)
        for topo in (build(), warm):
            if want is None:
                with pytest.raises(TopologyError, match=f"no route from '{a}' to '{b}'"):
                    topo.route_nodes(a, b)
            else:
                assert topo.route_nodes(a, b) == want


def test_unqueued_links_are_a_relays_links_that_drain_all_that_can_reach_them() -> None:
    """A relay's link never queues when its capacity is at least the sum of every other link into
    the relay: 20 Mbit/s behind two 10 Mbit/s backhauls is such a link, 15 Mbit/s is not; a star's
    30 Mbit/s server link behind three 10 Mbit/s sensors is, 29 is not. Downlinks never are here
    (the server's link and the other sensors' uplinks feed the switch too), nor a shared channel."""

    def hier(core_bps: float) -> set[str]:
        return Topology.hierarchical([4, 4], 10e6, 10e6, 0.0, 10e6, 10e6, 0.02, server_bps=core_bps).unqueued_links()

    assert hier(20e6) == {"server.in"}
    assert hier(15e6) == set()
    assert Topology.star(3, 10e6, 10e6, 0.0, 30e6).unqueued_links() == {"server.in"}
    assert Topology.star(3, 10e6, 10e6, 0.0, 29e6).unqueued_links() == set()
    # the channel is one link on every edge of the cell: never unqueued (the AP's link to the
    # server, 100 Gbit/s by default, drains all the 100 Mbit/s channel brings)
    assert Topology.shared_medium(3, 100e6, 0.001).unqueued_links() == {"server.in"}
