"""What ``aiotsim validate`` says about a scenario's links: how flows share a bottleneck
(``network.sharing``) and how deep each kind of link's drop-tail buffer is.

A buffer is given in packets, in bytes and in milliseconds of queueing at the link's rate,
``queue_packets x (mtu + framing) x 8 / rate`` (the wait of a packet that arrives at a full
buffer), so that a user can tell whether 50 packets is shallow: 50 packets are 60 ms at 10 Mbit/s
but 1.2 s at 0.5 Mbit/s. One representative link per kind (each group's node uplink, a
hierarchy's backhaul, a shared channel, the server links, each custom link) is built, never the
whole fleet, so a 100,000-node scenario validates as fast as before.
"""

from __future__ import annotations

from aiotsim.config import Scenario
from aiotsim.network.link import Link
from aiotsim.network.topology import tier_packets
from aiotsim.sim.topologies import MBPS, MS, build_topology, group_spec, node_groups, tier_queue
from aiotsim.validate import fmt_bytes, short_figure

MAX_LISTED = 4  # groups (custom: links) described one by one; the rest are counted
SHARING_WORDS = {
    "fifo": "one drop-tail FIFO per link: TCP flows share by window and round trip, short-RTT flows get more",
    "fair": "a per-flow fair queue per link: max-min fair, no shared backlog",
}


def buffer_ms(link: Link) -> float:
    """Milliseconds a full drop-tail buffer of ``link`` takes to drain at its (nominal) rate."""
    return link.buffer_bytes * 8 / link.bandwidth_bps / MS


def describe_buffer(link: Link, traced: bool = False) -> str:
    """``1,000 packets (1.5 MB, 1,200 ms at 10 Mbit/s)``; ``traced``: the rate is a trace's, so the
    time is given at the link's nominal rate."""
    rate = f"{link.bandwidth_bps / MBPS:,g} Mbit/s" + (" nominal: traced" if traced else "")
    return (
        f"{link.queue_packets:,} packets ({fmt_bytes(link.buffer_bytes)}, {short_figure(buffer_ms(link))} ms at {rate})"
    )


def network_summary(s: Scenario) -> str:
    """One line for ``aiotsim validate``: the sharing and every kind of link's buffer (which the
    flow engine uses under ``transport = 'tcp'`` with ``sharing = 'fifo'`` only)."""
    nw = s.network
    if nw.engine == "ns3":
        return f"{ns3_head(s)}; drop-tail buffers: " + "; ".join(buffer_lines(s))
    if nw.transport == "tcp":
        head = f"sharing {nw.sharing!r} ({SHARING_WORDS[nw.sharing]})"
    else:
        head = f"transport {nw.transport!r} (the fluid model: flows max-min fair, no queues)"
    used = (
        "" if (nw.transport, nw.sharing) == ("tcp", "fifo") else " (used only by transport 'tcp' with sharing 'fifo')"
    )
    return f"{head}; drop-tail buffers{used}: " + "; ".join(buffer_lines(s))


def ns3_head(s: Scenario) -> str:
    """What the ns-3 engine runs: packets through drop-tail FIFOs (``sharing`` is the flow model's),
    and a shared medium's 802.11 cell."""
    nw = s.network
    head = "engine 'ns3' (packet by packet in ns-3.44: every link a drop-tail FIFO; sharing is the flow engine's)"
    if nw.topology == "shared-medium":
        where = "at the given positions" if nw.wifi_positions else f"within {nw.wifi_radius_m:g} m of the access point"
        head += (f"; the channel is an {nw.wifi_standard} cell ({nw.wifi_width_mhz} MHz, {nw.wifi_manager} rate "
                 f"control, stations {where})")  # fmt: skip
    radios = {g.radio or s.nodes.radio for g in s.nodes.group} if s.nodes.group else {s.nodes.radio}
    if nw.topology == "star" and radios == {"4g"}:
        head += (f"; the nodes' radio '4g' is one LTE cell ({nw.lte_resource_blocks} resource blocks each way, "
                 "RLC buffers of the node links' queue_packets x 1,500 B, the server behind its EPC)")  # fmt: skip
    if nw.topology == "star" and radios == {"802.15.4"}:
        head += ("; the nodes' radio '802.15.4' is one single-hop PAN (6LoWPAN over 2.4 GHz O-QPSK, 250 kbit/s, "
                 "unslotted CSMA/CA; the star's switch is its sink; node links' rates and buffers unused)")  # fmt: skip
    return head


def buffer_lines(s: Scenario) -> list[str]:
    """``"<kind of link> <its buffer>"`` for each kind of link of ``s``'s network."""
    nw = s.network
    if nw.topology == "custom":
        return _custom_lines(s)
    out = _node_lines(s) if nw.topology != "shared-medium" else []
    hop = dict(mtu=nw.mtu, header_bytes=nw.header_bytes)
    if nw.topology == "shared-medium":
        channel = Link("channel", nw.channel_mbps * MBPS, nw.latency_ms * MS, queue_packets=nw.queue_packets, **hop)
        out.append(f"shared channel {describe_buffer(channel)}")
    if nw.topology == "hierarchical":
        queue = tier_packets(tier_queue(nw.backhaul_queue_packets), nw.queue_packets)
        backhaul = Link("gw.up", nw.backhaul_up_mbps * MBPS, nw.backhaul_latency_ms * MS, queue_packets=queue, **hop)
        out.append(f"gateway backhaul up {describe_buffer(backhaul)}")
    if nw.topology != "ring":
        queue = tier_packets(tier_queue(nw.server_queue_packets), nw.queue_packets)
        server = Link("server.in", nw.server_mbps * MBPS, 0.0, queue_packets=queue, **hop)
        out.append(f"server links {describe_buffer(server)}")
    return out


def _node_lines(s: Scenario) -> list[str]:
    """Each group's node uplink (a ring's: each node's link to the next), the group's settings
    resolved as the run resolves them (group, radio preset, network)."""
    nw, groups = s.network, node_groups(s)
    what = "ring links" if nw.topology == "ring" else "node uplinks"
    out = []
    for k in range(min(len(groups), MAX_LISTED)):
        spec = group_spec(s, k)
        up = spec.link_settings()["uplink_bps"]  # a trace's mean rate where the group's uplink is traced
        link = Link(spec.name, up, spec.latency_s, nw.mtu, nw.header_bytes, queue_packets=spec.queue_packets)
        traced = spec.uplink_trace is not None
        label = what if len(groups) == 1 else f"{what} of {spec.group}"
        out.append(f"{label} {describe_buffer(link, traced)}")
    if len(groups) > MAX_LISTED:
        out.append(f"{len(groups) - MAX_LISTED} more groups' {what}")
    return out


def _custom_lines(s: Scenario) -> list[str]:
    """Each custom link's buffer (a custom network is small: built whole, as validation does)."""
    links = list(build_topology(s).links.values())
    out = [f"{link.name} {describe_buffer(link, link.trace is not None)}" for link in links[:MAX_LISTED]]
    if len(links) > MAX_LISTED:
        out.append(f"{len(links) - MAX_LISTED} more links")
    return out
