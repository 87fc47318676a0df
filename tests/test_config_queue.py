"""Drop-tail buffers and bottleneck sharing in the configuration (issue 38 items 1 and 4, the
config half): ``[network] queue_packets``, ``server_queue_packets``, ``backhaul_queue_packets``,
``sharing``; ``queue_packets`` per node group, per custom link and per radio preset; every link the
scenario's topology builder makes carries the right buffer; buffers and sharing are timing keys."""

from __future__ import annotations

import importlib
import inspect
from typing import Any

import pytest
from conftest import ROOT

from aiotsim.config import Scenario, load_scenario
from aiotsim.config_bounds import MAX_QUEUE_PACKETS, QUEUE_PACKETS, SHARINGS
from aiotsim.errors import ConfigError
from aiotsim.network.link import DEFAULT_QUEUE_PACKETS
from aiotsim.network.topology import Topology
from aiotsim.network_summary import network_summary
from aiotsim.sim.energy import RADIOS
from aiotsim.sim.replay_rule import learning_key, replay_problem
from aiotsim.sim.topologies import build_topology, node_layout
from aiotsim.validate import load_validated

NODE_LINKS = (".up", ".down")


def scenario(**overrides: Any) -> Scenario:
    """A 4-node star, with ``"section.key": value`` overrides."""
    return Scenario().replace(**{"nodes.count": 4, **overrides})


def queues(s: Scenario) -> dict[str, int]:
    """Every link of ``s``'s topology and its drop-tail buffer, packets."""
    return {name: link.queue_packets for name, link in build_topology(s).links.items()}


def test_the_defaults_are_the_links_and_the_engines() -> None:
    assert QUEUE_PACKETS == DEFAULT_QUEUE_PACKETS == Scenario().network.queue_packets == 1000
    nw = Scenario().network
    assert (nw.server_queue_packets, nw.backhaul_queue_packets) == (0, 0)
    flows = importlib.import_module("aiotsim.network.flows")
    if not hasattr(flows, "SHARINGS"):
        pytest.skip("the flow engine does not export SHARINGS yet")
    assert SHARINGS == flows.SHARINGS
    # a default scenario runs the engine's default sharing, so its results do not move
    assert nw.sharing == inspect.signature(flows.Network).parameters["sharing"].default


@pytest.mark.parametrize(
    "path", ["iot10", "hierarchical", "ring", "shared_medium", "custom", "hetero_async", "cellular_trace"]
)
def test_shipped_scenarios_keep_1000_packets_on_every_link(path: str) -> None:
    s = load_scenario(ROOT / "scenarios" / f"{path}.toml")
    assert set(queues(s).values()) == {1000}


def test_star_node_links_take_queue_packets_and_the_server_links_follow_unless_set() -> None:
    got = queues(scenario(**{"network.queue_packets": 50}))
    assert len(got) == 10 and all(q == 50 for name, q in got.items())  # 0 = same as queue_packets
    got = queues(scenario(**{"network.queue_packets": 50, "network.server_queue_packets": 1000}))
    assert {name: q for name, q in got.items() if name.startswith("server")} == {"server.in": 1000, "server.out": 1000}
    assert all(q == 50 for name, q in got.items() if name.endswith(NODE_LINKS) and name.startswith("node"))


def test_a_group_override_applies_to_its_nodes_only() -> None:
    groups = [{"count": 1, "name": "deep"}, {"count": 3, "name": "shallow", "queue_packets": 20}]
    got = queues(scenario(**{"nodes.group": groups, "network.queue_packets": 300}))
    assert got["node0.up"] == got["node0.down"] == 300
    assert all(got[f"node{i}{end}"] == 20 for i in (1, 2, 3) for end in NODE_LINKS)
    assert got["server.in"] == got["server.out"] == 300


def test_hierarchical_tiers_take_their_own_buffers() -> None:
    s = scenario(**{
        "network.topology": "hierarchical", "network.queue_packets": 40, "network.backhaul_queue_packets": 200,
        "network.server_queue_packets": 5000,
    })  # fmt: skip
    got = queues(s)
    assert {got[f"gw{k}{end}"] for k in (0, 1) for end in NODE_LINKS} == {200}
    assert {got[f"node{i}{end}"] for i in range(4) for end in NODE_LINKS} == {40}
    assert got["server.in"] == got["server.out"] == 5000
    got = queues(s.replace(**{"network.backhaul_queue_packets": 0}))  # 0: the backhaul follows queue_packets
    assert got["gw0.up"] == got["gw1.down"] == 40


def test_shared_medium_and_ring_links() -> None:
    got = queues(scenario(**{"network.topology": "shared-medium", "network.queue_packets": 8}))
    assert got == {"server.in": 8, "server.out": 8, "channel": 8}
    got = queues(scenario(**{"network.topology": "shared-medium", "network.server_queue_packets": 64}))
    assert got == {"server.in": 64, "server.out": 64, "channel": 1000}
    groups = [{"count": 2}, {"count": 2, "queue_packets": 3}]
    got = queues(scenario(**{"network.topology": "ring", "network.queue_packets": 30, "nodes.group": groups}))
    # the link node a -> node b is node a's
    assert got == {"node0->node1": 30, "node1->node0": 30, "node1->node2": 30, "node2->node1": 3,
                   "node2->node3": 3, "node3->node2": 3, "node3->node0": 3, "node0->node3": 30}  # fmt: skip


def test_a_custom_link_sets_its_own_buffer_and_the_others_take_the_networks() -> None:
    links = [
        {"from": "node0", "to": "server", "mbps": 1.0, "queue_packets": 12},
        {"from": "node1", "to": "server", "mbps": 1.0, "directed": True, "name": "n1up"},
        {"from": "server", "to": "node1", "mbps": 1.0, "directed": True, "name": "n1down", "queue_packets": 2},
    ]
    s = scenario(**{"nodes.count": 2, "network.topology": "custom", "network.link": links, "network.queue_packets": 99})
    assert queues(s) == {"node0->server": 12, "server->node0": 12, "n1up": 99, "n1down": 2}


def test_radio_presets_give_a_sourced_buffer_taken_under_link_defaults_radio() -> None:
    for r in RADIOS.values():
        assert isinstance(r.queue_packets, int) and 1 <= r.queue_packets <= MAX_QUEUE_PACKETS and r.queue_source
    assert [RADIOS[r].queue_packets for r in ("ethernet", "wifi", "lte-m", "lora")] == [1000, 32, 7, 1]
    s = scenario(**{"nodes.radio": "lte-m", "network.link_defaults": "radio", "network.queue_packets": 500})
    got = queues(s)
    assert {got[f"node{i}{end}"] for i in range(4) for end in NODE_LINKS} == {7}  # the radio's, not the network's
    assert got["server.in"] == 500  # the server is no radio: the network's
    # an explicit group value wins over the preset; with link_defaults = 'network' the preset is not used
    groups = [{"count": 2, "queue_packets": 64}, {"count": 2, "radio": "wifi"}]
    assert [spec.queue_packets for spec in node_layout(s.replace(**{"nodes.group": groups}))] == [64, 64, 32, 32]
    assert {spec.queue_packets for spec in node_layout(s.replace(**{"network.link_defaults": "network"}))} == {500}


def test_a_link_straggler_keeps_its_buffer() -> None:
    s = scenario(**{"nodes.straggler_fraction": 0.5, "nodes.straggler_factor": 4.0, "nodes.straggler_kind": "link",
                    "network.queue_packets": 25})  # fmt: skip
    assert {spec.queue_packets for spec in node_layout(s)} == {25}
    assert {spec.link_slowdown for spec in node_layout(s)} == {1.0, 4.0}


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("network.queue_packets", 0, "network.queue_packets: must be in [1, 100000], got 0"),
        ("network.queue_packets", -1, "network.queue_packets: must be in [1, 100000], got -1"),
        ("network.queue_packets", 1.5, "network.queue_packets: must be an integer, got 1.5"),
        ("network.queue_packets", "x", "network.queue_packets: must be an integer, got 'x'"),
        ("network.queue_packets", 10**9, "network.queue_packets: must be in [1, 100000], got 1000000000"),
        ("network.queue_packets", True, "network.queue_packets: must be an integer, got True"),
        ("network.server_queue_packets", -1, "network.server_queue_packets: must be in [0, 100000], got -1"),
        ("network.backhaul_queue_packets", 2.0, "network.backhaul_queue_packets: must be an integer, got 2.0"),
        ("network.sharing", "lifo", "network.sharing: unknown value 'lifo' (did you mean 'fifo'?); valid: fifo, fair"),
        ("nodes.group", [{"count": 4, "queue_packets": 0}], "nodes.group[0].queue_packets: must be in [1, 100000]"),
    ],
)
def test_bad_values_are_refused_by_key(key: str, value: Any, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        scenario(**{key: value})
    assert any(message in p for p in info.value.problems), info.value.problems


def test_a_bad_custom_link_buffer_is_refused_by_key() -> None:
    links = [{"from": "node0", "to": "server", "mbps": 1.0, "queue_packets": 100_001}]
    with pytest.raises(ConfigError, match=r"network.link\[0\].queue_packets: must be in \[1, 100000\]"):
        scenario(**{"nodes.count": 1, "network.topology": "custom", "network.link": links})


def test_buffers_and_sharing_are_timing_keys_a_replay_may_change() -> None:
    groups = [{"count": 2}, {"count": 2}]
    a = scenario(**{"nodes.group": groups})
    for key, value in [
        ("network.queue_packets", 10), ("network.server_queue_packets", 20), ("network.sharing", "fair"),
        ("nodes.group", [{"count": 2, "queue_packets": 5}, {"count": 2}]),
    ]:  # fmt: skip
        b = a.replace(**{key: value})
        assert learning_key(b) == learning_key(a) and replay_problem(a, b) is None, key


def test_validate_gives_each_kind_of_links_buffer_in_packets_and_ms() -> None:
    sets = ["network.queue_packets=50", "network.server_queue_packets=400", "network.sharing=fifo"]
    s = load_validated(ROOT / "tests" / "tiny.toml", sets)
    line = network_summary(s)
    # 50 x 1,500 B x 8 / 1 Mbit/s = 600 ms; 400 x 1,500 B x 8 / 10 Mbit/s = 480 ms
    assert line.startswith("sharing 'fifo' (one drop-tail FIFO per link") and "drop-tail buffers: " in line
    assert "node uplinks 50 packets (75.0 KB, 600 ms at 1 Mbit/s)" in line
    assert "server links 400 packets (600.0 KB, 480 ms at 10 Mbit/s)" in line
    hier = s.replace(**{"nodes.count": 4, "network.topology": "hierarchical", "network.backhaul_queue_packets": 10,
                        "network.sharing": "fair"})  # fmt: skip
    line = network_summary(hier)
    assert "sharing 'fair'" in line and "buffers (used only by transport 'tcp' with sharing 'fifo')" in line
    assert "gateway backhaul up 10 packets (15.0 KB, 2.4 ms at 50 Mbit/s)" in line
    assert network_summary(s.replace(**{"network.transport": "ideal"})).startswith("transport 'ideal' (the fluid")
    groups = [{"count": 1, "name": "slow", "uplink_mbps": 0.5}, {"count": 1, "name": "fast", "queue_packets": 5}]
    line = network_summary(s.replace(**{"nodes.group": groups}))
    assert "node uplinks of slow 50 packets (75.0 KB, 1,200 ms at 0.5 Mbit/s)" in line
    assert "node uplinks of fast 5 packets (7.5 KB, 60 ms at 1 Mbit/s)" in line


def test_builders_keep_their_call_sites_and_take_the_keywords() -> None:
    star = Topology.star(2, 1e6, 1e6, 0.0, 1e7)
    assert {link.queue_packets for link in star.links.values()} == {DEFAULT_QUEUE_PACKETS}
    star = Topology.star(2, 1e6, 1e6, 0.0, 1e7, per_node=[{}, {"queue_packets": 5}], queue_packets=50,
                         server_queue_packets=70)  # fmt: skip
    assert {n: link.queue_packets for n, link in star.links.items()} == {
        "server.in": 70, "server.out": 70, "node0.up": 50, "node0.down": 50, "node1.up": 5, "node1.down": 5,
    }  # fmt: skip
    hier = Topology.hierarchical([1, 1], 1e6, 1e6, 0.0, 1e7, 1e7, 0.0, queue_packets=9, backhaul_queue_packets=30)
    assert {n: link.queue_packets for n, link in hier.links.items()} == {
        "gw0.up": 30, "gw0.down": 30, "node0.up": 9, "node0.down": 9,
        "gw1.up": 30, "gw1.down": 30, "node1.up": 9, "node1.down": 9,
    }  # fmt: skip
    with pytest.raises(ConfigError, match=r"queue_packets\(=0\) must be an integer >= 1"):
        Topology.ring(2, 1e6, queue_packets=0)
