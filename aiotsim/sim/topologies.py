"""From a scenario to nodes and a network: node layout (groups, stragglers) and the topology.

Every sensor node gets a :class:`NodeSpec`: its group, compute profile, radio, link settings, data
share and straggler slowdowns. Groups (``[[nodes.group]]``) override the ``[nodes]``/``[network]``
defaults for their nodes, in file order (group 0 gets node0..). Fixed stragglers are a seeded
choice of ``round(fraction * n)`` nodes whose compute time is multiplied and/or whose link rates
are divided by ``straggler_factor``.

:func:`build_topology` turns the layout into a :class:`~aiotsim.network.topology.Topology` for
star, hierarchical, ring, shared-medium and custom networks. Nothing here imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from aiotsim.config import Scenario
from aiotsim.network.link import Link
from aiotsim.network.topology import Topology

SERVER = "server"  # the parameter server's vertex name
MBPS = 1e6  # bits/s per Mbit/s
MS = 1e-3  # s per ms


def node_name(i: int) -> str:
    """Network name of sensor node ``i``."""
    return f"node{i}"


@dataclass(frozen=True)
class NodeSpec:
    """One sensor node's static settings (rates in bits/s, times in s)."""

    index: int
    group: str
    device: str
    radio: str
    uplink_bps: float
    downlink_bps: float
    latency_s: float
    loss: float
    jitter_s: float
    share: float
    compute_slowdown: float  # multiplies compute and encode time (>= 1)
    link_slowdown: float  # divides the node's link rates (>= 1)
    straggler: bool

    @property
    def name(self) -> str:
        """Network name, ``node{index}``."""
        return node_name(self.index)

    def link_settings(self) -> dict[str, float]:
        """The per-node overrides a topology builder takes."""
        return {
            "uplink_bps": self.uplink_bps / self.link_slowdown,
            "downlink_bps": self.downlink_bps / self.link_slowdown,
            "latency_s": self.latency_s,
            "loss": self.loss,
            "jitter_s": self.jitter_s,
        }


def straggler_set(n: int, fraction: float, seed: int) -> set[int]:
    """The seeded set of ``round(fraction * n)`` fixed stragglers."""
    k = int(round(fraction * n))
    if k == 0:
        return set()
    rng = np.random.default_rng([seed, 0x57A9])
    return {int(i) for i in rng.choice(n, size=k, replace=False)}


def node_layout(s: Scenario) -> list[NodeSpec]:
    """Every node's settings, groups and fixed stragglers applied."""
    nd, nw = s.nodes, s.network
    groups: list[dict[str, Any]] = nd.group or [{"count": nd.count}]
    fixed = straggler_set(nd.count, nd.straggler_fraction, s.scenario.seed) if nd.straggler_mode == "fixed" else set()
    slow_compute = nd.straggler_kind in ("compute", "both")
    slow_link = nd.straggler_kind in ("link", "both")
    specs = []
    for k, g in enumerate(groups):
        for _ in range(int(g["count"])):
            i = len(specs)
            strag = i in fixed
            specs.append(
                NodeSpec(
                    index=i,
                    group=str(g.get("name", f"group{k}")),
                    device=str(g.get("device", nd.device)),
                    radio=str(g.get("radio", nd.radio)),
                    uplink_bps=float(g.get("uplink_mbps", nw.uplink_mbps)) * MBPS,
                    downlink_bps=float(g.get("downlink_mbps", nw.downlink_mbps)) * MBPS,
                    latency_s=float(g.get("latency_ms", nw.latency_ms)) * MS,
                    loss=float(g.get("loss", nw.loss)),
                    jitter_s=float(g.get("jitter_ms", nw.jitter_ms)) * MS,
                    share=float(g.get("share", 1.0)),
                    compute_slowdown=float(g.get("slowdown", 1.0))
                    * (nd.straggler_factor if strag and slow_compute else 1.0),
                    link_slowdown=nd.straggler_factor if strag and slow_link else 1.0,
                    straggler=strag,
                )
            )
    return specs


def gateway_groups(n: int, gateways: int) -> list[int]:
    """Nodes per gateway: ``n`` split as evenly as possible, the first gateways one larger."""
    base, extra = divmod(n, gateways)
    return [base + (1 if k < extra else 0) for k in range(gateways)]


def build_topology(s: Scenario, layout: list[NodeSpec] | None = None) -> Topology:
    """The scenario's network as a Topology (names: ``server``, ``node{i}``, ``gw{k}``)."""
    nw = s.network
    layout = layout if layout is not None else node_layout(s)
    per_node = [spec.link_settings() for spec in layout]
    n = len(layout)
    common = {"mtu": nw.mtu, "header_bytes": nw.header_bytes}
    if nw.topology == "star":
        return Topology.star(
            n,
            nw.uplink_mbps * MBPS,
            nw.downlink_mbps * MBPS,
            nw.latency_ms * MS,
            nw.server_mbps * MBPS,
            loss=nw.loss,
            jitter_s=nw.jitter_ms * MS,
            per_node=per_node,
            **common,
        )
    if nw.topology == "hierarchical":
        return Topology.hierarchical(
            gateway_groups(n, nw.gateways),
            nw.uplink_mbps * MBPS,
            nw.downlink_mbps * MBPS,
            nw.latency_ms * MS,
            nw.backhaul_up_mbps * MBPS,
            nw.backhaul_down_mbps * MBPS,
            nw.backhaul_latency_ms * MS,
            server_bps=nw.server_mbps * MBPS,
            loss=nw.loss,
            jitter_s=nw.jitter_ms * MS,
            per_node=per_node,
            **common,
        )
    if nw.topology == "shared-medium":
        return Topology.shared_medium(
            n,
            nw.channel_mbps * MBPS,
            nw.latency_ms * MS,
            server_bps=nw.server_mbps * MBPS,
            loss=nw.loss,
            jitter_s=nw.jitter_ms * MS,
            **common,
        )
    if nw.topology == "ring":
        return _ring(layout, nw.mtu, nw.header_bytes)
    return _custom(s, n)


def _ring(layout: list[NodeSpec], mtu: int, header_bytes: int) -> Topology:
    """Ring of peers: node i's link to node i+1 uses node i's uplink settings, and the reverse
    direction node i+1's (so heterogeneous groups and link stragglers apply)."""
    topo = Topology("ring")
    n = len(layout)
    for spec in layout:
        topo.add_node(spec.name, "node")
    pairs = [(i, (i + 1) % n) for i in range(n)] if n > 2 else [(0, 1)]
    for i, j in pairs:
        for a, b in ((i, j), (j, i)):
            st = layout[a].link_settings()
            link = Link(
                f"node{a}->node{b}", st["uplink_bps"], st["latency_s"], mtu, header_bytes, st["loss"], st["jitter_s"]
            )
            topo.add_link(f"node{a}", f"node{b}", link)
    return topo


def _custom(s: Scenario, n: int) -> Topology:
    """Custom graph: ``[[network.vertex]]`` plus the implicit ``server`` and ``node0..``."""
    declared = {v.get("name"): v for v in s.network.vertex}
    vertices: list[dict[str, Any]] = []
    if "server" not in declared:
        vertices.append({"name": "server", "role": "server"})
    for i in range(n):
        if f"node{i}" not in declared:
            vertices.append({"name": f"node{i}", "role": "node", "aggregator": "server"})
    vertices.extend(s.network.vertex)
    return Topology.from_links(vertices, list(s.network.link))
