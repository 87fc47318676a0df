"""From a scenario to nodes and a network: node layout (groups, stragglers) and the topology.

Every sensor node gets a :class:`NodeSpec`: its group, compute profile, radio, link settings, data
share and straggler slowdowns. Groups (``[[nodes.group]]``) override the ``[nodes]``/``[network]``
defaults for their nodes, in file order (group 0 gets node0..). Fixed stragglers are a seeded
choice of ``round(fraction * n)`` nodes whose compute time is multiplied and/or whose link rates
are divided by ``straggler_factor``.

:func:`build_topology` turns the layout into a :class:`~aiotsim.network.topology.Topology` for
star, hierarchical, ring, shared-medium and custom networks. Nothing here imports torch.

Time-varying links: a node's uplink/downlink trace (its group's, else ``[network]``'s) starts at
``trace_offset_s`` plus, with ``trace_stagger = 'random'``, a uniform offset in [0, the longer of
its two periods) drawn from a generator seeded by ``[seed, 0x7ACE, node index]`` (so a node's
offset does not depend on the fleet's size). A link straggler's traces are scaled down like its
constant rates. With ``loss_model = 'gilbert-elliott'`` the node links (every custom link) carry
one :class:`~aiotsim.network.traces.GilbertElliott` built from the ``ge_*`` keys.

Drop-tail buffers (``queue_packets``, packets of a link's MTU): a node's links take its group's,
else its radio's with ``link_defaults = 'radio'``, else ``network.queue_packets``; the server links
take ``network.server_queue_packets``, a hierarchy's backhaul ``network.backhaul_queue_packets``
(each 0: ``network.queue_packets``); a shared-medium channel ``network.queue_packets``; a custom
link its own ``queue_packets``, else ``network.queue_packets``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from aiotsim.config import NodeGroup, Scenario, block_to_dict
from aiotsim.errors import TopologyError
from aiotsim.learn.partition import even_sizes
from aiotsim.network.link import DEFAULT_QUEUE_PACKETS
from aiotsim.network.topology import Topology
from aiotsim.network.traces import GilbertElliott, RateTrace, load_trace
from aiotsim.sim.energy import get_radio

SERVER = "server"  # the parameter server's vertex name
MBPS = 1e6  # bits/s per Mbit/s
MS = 1e-3  # s per ms
LINK_STAGGER_KEY = 1 << 20  # custom link k's stagger is seeded by this + k (node indices stay below)


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
    uplink_trace: RateTrace | None = None  # offset applied, not yet scaled by link_slowdown
    downlink_trace: RateTrace | None = None
    loss_model: GilbertElliott | None = None
    queue_packets: int = DEFAULT_QUEUE_PACKETS  # drop-tail buffer of both node links, packets

    @property
    def name(self) -> str:
        """Network name, ``node{index}``."""
        return node_name(self.index)

    def link_settings(self) -> dict[str, Any]:
        """The per-node overrides a topology builder takes (traces and loss model only when set)."""
        out: dict[str, Any] = {
            "uplink_bps": self.uplink_bps / self.link_slowdown,
            "downlink_bps": self.downlink_bps / self.link_slowdown,
            "latency_s": self.latency_s,
            "loss": self.loss,
            "jitter_s": self.jitter_s,
            "queue_packets": self.queue_packets,
        }
        for key, trace in (("uplink", self.uplink_trace), ("downlink", self.downlink_trace)):
            if trace is not None:
                trace = trace.scaled(1.0 / self.link_slowdown) if self.link_slowdown != 1.0 else trace
                out[f"{key}_trace"] = trace
                out[f"{key}_bps"] = trace.mean_rate * 8.0  # nominal rate, bits/s
        if self.loss_model is not None:
            out["loss_model"] = self.loss_model
        return out


def straggler_set(n: int, fraction: float, seed: int) -> set[int]:
    """The seeded set of ``round(fraction * n)`` fixed stragglers."""
    k = int(round(fraction * n))
    if k == 0:
        return set()
    rng = np.random.default_rng([seed, 0x57A9])
    return {int(i) for i in rng.choice(n, size=k, replace=False)}


def node_groups(s: Scenario) -> list[NodeGroup]:
    """The scenario's node groups: its ``[[nodes.group]]`` blocks, else one group of every node."""
    return s.nodes.group or [NodeGroup(count=s.nodes.count)]


def group_spec(s: Scenario, k: int) -> NodeSpec:
    """The settings group ``k``'s nodes share: its first node's, as a node that is no straggler."""
    groups = node_groups(s)
    first = sum(g.count for g in groups[:k])
    return _with_time_varying(_node_spec(first, k, groups[k], s, False, False, False), groups[k], s)


def node_layout(s: Scenario) -> list[NodeSpec]:
    """Every node's settings, groups and fixed stragglers applied."""
    nd = s.nodes
    groups = node_groups(s)
    fixed = straggler_set(nd.count, nd.straggler_fraction, s.scenario.seed) if nd.straggler_mode == "fixed" else set()
    slow_compute = nd.straggler_kind in ("compute", "both")
    slow_link = nd.straggler_kind in ("link", "both")
    specs = []
    for k, g in enumerate(groups):
        for _ in range(g.count):
            i = len(specs)
            strag = i in fixed
            specs.append(_with_time_varying(_node_spec(i, k, g, s, strag, slow_compute, slow_link), g, s))
    return specs


def loss_model(s: Scenario) -> GilbertElliott | None:
    """The scenario's Gilbert-Elliott model, or None for the expected-value (Bernoulli) loss."""
    nw = s.network
    if nw.loss_model != "gilbert-elliott":
        return None
    return GilbertElliott(nw.ge_p_good_bad, nw.ge_p_bad_good, nw.ge_loss_good, nw.ge_loss_bad)


def stagger(s: Scenario, key: int, period_s: float) -> float:
    """Seeded extra trace offset (s) of node (or custom link) ``key``: uniform over the whole
    steps of the trace grid in [0, period_s) with ``trace_stagger = 'random'``, else 0.

    The grid is ``trace_resolution_ms`` (1 ms when 0, Mahimahi's resolution): offsets on it keep
    every link's rate changes on common instants, so the flow engine wakes once per grid step
    for all links together instead of once per link."""
    if s.network.trace_stagger != "random":
        return 0.0
    grid = (s.network.trace_resolution_ms or 1.0) * MS  # s
    steps = max(1, int(period_s / grid))  # whole grid steps in a period
    return int(np.random.default_rng([s.scenario.seed, 0x7ACE, key]).integers(steps)) * grid


def _with_time_varying(spec: NodeSpec, g: NodeGroup, s: Scenario) -> NodeSpec:
    """``spec`` with its group's (else the network's) traces, offset, and the loss model."""
    nw = s.network
    up_path = g.uplink_trace if g.uplink_trace is not None else nw.uplink_trace
    down_path = g.downlink_trace if g.downlink_trace is not None else nw.downlink_trace
    res = nw.trace_resolution_ms * MS  # s
    up = load_trace(up_path, res) if up_path else None
    down = load_trace(down_path, res) if down_path else None
    model = loss_model(s)
    if up is None and down is None:
        return spec if model is None else dataclasses.replace(spec, loss_model=model)
    period = max(t.period_s for t in (up, down) if t is not None)
    offset = (g.trace_offset_s if g.trace_offset_s is not None else nw.trace_offset_s) + stagger(s, spec.index, period)
    return dataclasses.replace(
        spec,
        uplink_trace=None if up is None else up.shifted(offset),
        downlink_trace=None if down is None else down.shifted(offset),
        loss_model=model,
    )


def _node_spec(i: int, k: int, g: NodeGroup, s: Scenario, strag: bool, slow_compute: bool, slow_link: bool) -> NodeSpec:
    """Node ``i`` of group ``k``: the group's settings, else the ``[nodes]``/``[network]`` defaults."""
    nd, nw = s.nodes, s.network

    def pick(value: Any, default: Any) -> Any:
        return default if value is None else value

    radio = str(pick(g.radio, nd.radio))
    if nw.link_defaults == "radio":  # the radio's typical link (sim/energy.py) fills the gaps
        r = get_radio(radio)
        up, down, lat, loss, queue = r.up_mbps, r.down_mbps, r.latency_ms, r.loss, r.queue_packets
    else:
        up, down, lat, loss, queue = nw.uplink_mbps, nw.downlink_mbps, nw.latency_ms, nw.loss, nw.queue_packets
    return NodeSpec(
        index=i,
        group=str(pick(g.name, f"group{k}")),
        device=str(pick(g.device, nd.device)),
        radio=radio,
        uplink_bps=float(pick(g.uplink_mbps, up)) * MBPS,
        downlink_bps=float(pick(g.downlink_mbps, down)) * MBPS,
        latency_s=float(pick(g.latency_ms, lat)) * MS,
        loss=float(pick(g.loss, loss)),
        jitter_s=float(pick(g.jitter_ms, nw.jitter_ms)) * MS,
        share=float(pick(g.share, 1.0)),
        compute_slowdown=float(pick(g.slowdown, 1.0)) * (nd.straggler_factor if strag and slow_compute else 1.0),
        link_slowdown=nd.straggler_factor if strag and slow_link else 1.0,
        straggler=strag,
        queue_packets=int(pick(g.queue_packets, queue)),
    )


def gateway_groups(n: int, gateways: int) -> list[int]:
    """Nodes per gateway: ``n`` split as evenly as possible, the first gateways one larger."""
    return even_sizes(n, gateways)


def build_topology(s: Scenario, layout: list[NodeSpec] | None = None) -> Topology:
    """The scenario's network as a Topology (names: ``server``, ``node{i}``, ``gw{k}``)."""
    nw = s.network
    layout = layout if layout is not None else node_layout(s)
    per_node = [spec.link_settings() for spec in layout]
    n = len(layout)
    common = {"mtu": nw.mtu, "header_bytes": nw.header_bytes, "queue_packets": nw.queue_packets}
    server_queue = tier_queue(nw.server_queue_packets)
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
            server_queue_packets=server_queue,
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
            backhaul_queue_packets=tier_queue(nw.backhaul_queue_packets),
            server_queue_packets=server_queue,
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
            loss_model=loss_model(s),
            server_queue_packets=server_queue,
            **common,
        )
    if nw.topology == "ring":
        return Topology.ring(n, nw.uplink_mbps * MBPS, per_node=per_node, **common)
    return _custom(s, n)


def tier_queue(queue_packets: int) -> int | None:
    """A tier's own drop-tail buffer, packets, from its ``network.*_queue_packets`` key: 0 there means
    ``network.queue_packets``, which the builders take for None."""
    return queue_packets or None


def _custom(s: Scenario, n: int) -> Topology:
    """Custom graph: ``[[network.vertex]]`` plus the implicit ``server`` and ``node0..``."""
    declared = [block_to_dict(v) for v in s.network.vertex]
    names = {v["name"] for v in declared}
    vertices: list[dict[str, Any]] = []
    if "server" not in names:
        vertices.append({"name": "server", "role": "server"})
    for i in range(n):
        if f"node{i}" not in names:
            vertices.append({"name": f"node{i}", "role": "node", "aggregator": "server"})
    vertices.extend(declared)
    links = [_custom_link(s, k, link) for k, link in enumerate(s.network.link)]
    return Topology.from_links(vertices, links, queue_packets=s.network.queue_packets)


def _custom_link(s: Scenario, k: int, link: Any) -> dict[str, Any]:
    """A ``[[network.link]]`` block as ``from_links`` takes it: its trace file loaded and offset
    (stagger key ``LINK_STAGGER_KEY + k``, apart from the nodes'), the scenario's loss model attached."""
    spec = block_to_dict(link)
    path = spec.pop("trace", "")
    offset = spec.pop("trace_offset_s", 0.0)
    if path:
        trace = load_trace(path, s.network.trace_resolution_ms * MS)
        spec["trace"] = trace.shifted(offset + stagger(s, LINK_STAGGER_KEY + k, trace.period_s))
    model = loss_model(s)
    if model is not None:
        spec["loss_model"] = model
    return spec


def topology_problems(s: Scenario) -> list[str]:
    """Why the scenario's custom topology cannot carry a run (empty for the other topologies):
    unknown vertices, unreachable nodes, gateways with a non-synchronous mode."""
    if s.network.topology != "custom":
        return []
    try:
        topology = build_topology(s)
    except TopologyError as exc:
        return [f"network: {line}" for line in exc.message.splitlines()]
    out = [f"network: {p}" for p in topology.validate()]
    if topology.gateways and s.training.mode != "sync":
        out.append(
            f"training.mode: aggregation through gateways ({', '.join(topology.gateways)}) is "
            f"synchronous; use mode = 'sync', got {s.training.mode!r}"
        )
    return out
