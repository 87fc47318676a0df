"""The scenario's ``[network]`` section and its blocks (``[[network.link]]``, ``[[network.vertex]]``).

Split out of :mod:`aiotsim.config_sections` (which re-exports every name here) to keep each file
short: the network has the most keys of any section.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aiotsim.config_bounds import (
    MAX_MS,
    MAX_MTU,
    MAX_NODES,
    MAX_QUEUE_PACKETS,
    MIN_RESOLUTION_MS,
    QUEUE_PACKETS,
    RATE,
    SHARINGS,
)
from aiotsim.schema import MAX_MBPS, MAX_SECONDS, MIN_MBPS, between, fraction, opt, unit_interval, zero_or_between

# the ns-3 engine's choices (checked again by aiotsim.network.ns3_spec, which the configuration does not
# import: loading a scenario stays free of simpy and numpy)
ENGINES = ("flow", "ns3")
WIFI_STANDARDS = ("802.11n", "802.11ac", "802.11ax", "802.11g", "802.11a", "802.11b")
WIFI_MANAGERS = ("minstrel-ht", "ideal", "constant")


def positions(v: Any) -> str | None:
    """Range check of station positions: ``[x, y]`` pairs, each coordinate within 1000 m."""
    for k, p in enumerate(v):
        if len(p) != 2 or any(abs(c) > 1000 for c in p):
            return f"entry {k} must be [x, y] with |x|, |y| <= 1000 m, got {p!r}"
    return None


@dataclass(frozen=True)
class VertexSpec:
    """``[[network.vertex]]``: a named vertex of a custom topology."""

    name: str = opt("", "vertex name (required)")
    role: str = opt("node", "what the vertex is", choices=("node", "server", "gateway", "relay"))
    aggregator: str | None = opt(None, "vertex that aggregates this one's gradients (default: nearest server)")


@dataclass(frozen=True)
class LinkSpec:
    """``[[network.link]]``: a link of a custom topology (``from`` is spelled ``from_`` in Python)."""

    from_: str = opt("", "source vertex (required)")
    to: str = opt("", "destination vertex (required)")
    mbps: float = opt(0.0, f"link rate, Mbit/s (required), {MIN_MBPS:g}..{MAX_MBPS:g}", RATE)
    latency_ms: float = opt(0.0, f"one-way latency, ms, 0..{MAX_MS:g}", between(0, MAX_MS))
    name: str | None = opt(None, "link name (default FROM->TO)")
    loss: float = opt(0.0, "packet loss probability, [0, 1)", fraction)
    jitter_ms: float = opt(0.0, f"scale of the seeded latency jitter, ms, 0..{MAX_MS:g}", between(0, MAX_MS))
    mtu: int = opt(1500, f"maximum transmission unit, bytes, 100..{MAX_MTU}", between(100, MAX_MTU))
    header_bytes: int = opt(40, "header bytes per packet (< mtu)", between(0, MAX_MTU))
    framing_bytes: int = opt(0, "link-layer framing bytes per packet", between(0, MAX_MTU))
    acks_per_packet: float = opt(0.0, "ACK packets per data packet charged to this link, 0..100", between(0, 100))
    queue_packets: int | None = opt(None, f"the link's drop-tail capacity (each direction), packets of its mtu, "
                                    f"1..{MAX_QUEUE_PACKETS:,}; unset: network.queue_packets",
                                    between(1, MAX_QUEUE_PACKETS))  # fmt: skip
    directed: bool = opt(False, "one direction only (default: two links, a->b and b->a)")
    trace: str = opt("", "bandwidth trace file replacing mbps (see network.uplink_trace); '' = constant mbps")
    trace_offset_s: float = opt(
        0.0, f"the trace's start offset, s, 0..{MAX_SECONDS:g} (plus the seeded stagger, see network.trace_stagger)",
        between(0, MAX_SECONDS),
    )  # fmt: skip


@dataclass(frozen=True)
class NetworkSection:
    """``[network]``: topology and link settings (Mbit/s = 1e6 bits/s)."""

    topology: str = opt("star", "network topology", choices=("star", "hierarchical", "ring", "shared-medium", "custom"))
    uplink_mbps: float = opt(10.0, f"node -> server link rate, Mbit/s, {MIN_MBPS:g}..{MAX_MBPS:g}", RATE)
    downlink_mbps: float = opt(10.0, f"server -> node link rate, Mbit/s, {MIN_MBPS:g}..{MAX_MBPS:g}", RATE)
    latency_ms: float = opt(5.0, f"one-way latency of a node's link, ms, 0..{MAX_MS:g}", between(0, MAX_MS))
    server_mbps: float = opt(
        100.0, f"server link rate shared by all flows (each direction), Mbit/s, {MIN_MBPS:g}..{MAX_MBPS:g}",
        RATE,
    )  # fmt: skip
    mtu: int = opt(1500, f"maximum transmission unit, bytes, 100..{MAX_MTU}", between(100, MAX_MTU))
    header_bytes: int = opt(40, "TCP/IP header bytes per packet, 0..mtu-1", between(0, MAX_MTU))
    loss: float = opt(0.0, "packet loss probability, [0, 1)", fraction)
    jitter_ms: float = opt(0.0, f"scale of the seeded latency jitter, ms, 0..{MAX_MS:g}", between(0, MAX_MS))
    queue_packets: int = opt(
        QUEUE_PACKETS, "drop-tail capacity of every link direction, in packets of the link's MTU: what TCP windows "
        f"may queue before it drops (sharing = 'fifo'); {QUEUE_PACKETS} = ns-3/Linux txqueuelen default (deep), "
        f"1..{MAX_QUEUE_PACKETS:,}. Groups, custom links, radio presets (link_defaults = 'radio') override it",
        between(1, MAX_QUEUE_PACKETS),
    )  # fmt: skip
    server_queue_packets: int = opt(0, "drop-tail capacity of the server's shared links (star, hierarchical, "
                                    f"shared-medium), packets; 0 = same as queue_packets, 0..{MAX_QUEUE_PACKETS:,}",
                                    between(0, MAX_QUEUE_PACKETS))  # fmt: skip
    sharing: str = opt(
        "fair", "transport = 'tcp': how flows share a bottleneck: 'fair' = a per-flow fair queue (fq_codel-like: "
        "max-min fair, no shared backlog; the model checked against ns-3), 'fifo' = one drop-tail FIFO per link of "
        "queue_packets (windows queue, round trips include the queueing delay, flows share by window and round "
        "trip, a full buffer drops; experimental: see docs/CALIBRATION.md)",
        choices=SHARINGS,
    )  # fmt: skip
    gateways: int = opt(
        2, "hierarchical: edge gateways (nodes are split evenly across them), 1..nodes.count", between(1, MAX_NODES)
    )
    backhaul_up_mbps: float = opt(
        50.0, f"hierarchical: gateway -> server link rate, Mbit/s, {MIN_MBPS:g}..{MAX_MBPS:g}", RATE
    )
    backhaul_down_mbps: float = opt(
        50.0, f"hierarchical: server -> gateway link rate, Mbit/s, {MIN_MBPS:g}..{MAX_MBPS:g}", RATE
    )
    backhaul_latency_ms: float = opt(
        20.0, f"hierarchical: one-way latency of the backhaul, ms, 0..{MAX_MS:g}", between(0, MAX_MS)
    )
    backhaul_queue_packets: int = opt(0, "hierarchical: drop-tail capacity of each gateway's backhaul links, "
                                      f"packets; 0 = same as queue_packets, 0..{MAX_QUEUE_PACKETS:,}",
                                      between(0, MAX_QUEUE_PACKETS))  # fmt: skip
    gateway_mode: str = opt(
        "reencode",
        "hierarchical: a gateway sends its nodes' summed gradient 're-encode'd with the codec or 'dense' fp32",
        choices=("reencode", "dense"),
    )
    channel_mbps: float = opt(
        10.0, f"shared-medium: capacity of the one channel all nodes share, Mbit/s, {MIN_MBPS:g}..{MAX_MBPS:g}",
        RATE,
    )  # fmt: skip
    uplink_trace: str = opt(
        "",
        "bandwidth trace of every node's uplink instead of uplink_mbps (star, hierarchical sensor tier, "
        "ring): a Mahimahi file (one line per 1,500-byte delivery opportunity, in ms; loops with the last "
        "timestamp as period) or a .csv of 'time_s, mbps' rows (piecewise constant, loops); relative to the "
        "scenario file (given with --set: to the working directory); '' = constant",
    )
    downlink_trace: str = opt("", "bandwidth trace of every node's downlink instead of downlink_mbps (as uplink_trace)")
    trace_offset_s: float = opt(
        0.0, f"where in its trace every node starts at time 0, s, 0..{MAX_SECONDS:g}", between(0, MAX_SECONDS)
    )
    trace_stagger: str = opt(
        "random",
        "'random': each node (each traced custom link) also starts at a seeded uniform offset in [0, period) "
        "so nodes do not move in lockstep; 'none': all start at trace_offset_s",
        choices=("random", "none"),
    )
    trace_resolution_ms: float = opt(
        0.0,
        f"average every trace over windows of this many ms: 0 (as written: 1 ms for Mahimahi) or "
        f"{MIN_RESOLUTION_MS:g}..{MAX_MS:g}; each window keeps its bytes, the engine wakes at most once per "
        "window and traced link",
        zero_or_between(MIN_RESOLUTION_MS, MAX_MS),
    )
    loss_model: str = opt(
        "bernoulli",
        "packet loss of the node links (every link of a custom topology): 'bernoulli' (independent, the "
        "expected cost of `loss`) or 'gilbert-elliott' (bursty two-state chain of the ge_* keys, lost "
        "packets sampled per transfer, seeded; then every loss key must be 0)",
        choices=("bernoulli", "gilbert-elliott"),
    )
    ge_p_good_bad: float = opt(0.01, "gilbert-elliott: chance per packet of going good -> bad, (0, 1]", unit_interval)
    ge_p_bad_good: float = opt(0.3, "gilbert-elliott: chance per packet of going bad -> good, (0, 1]", unit_interval)
    ge_loss_good: float = opt(0.0, "gilbert-elliott: loss probability in the good state, [0, 1)", fraction)
    ge_loss_bad: float = opt(0.5, "gilbert-elliott: loss probability in the bad state, [0, 1)", fraction)
    link: list[LinkSpec] = opt(
        [], "custom: [[network.link]] from, to, mbps, latency_ms (+ loss, jitter_ms, mtu, directed, trace)"
    )
    vertex: list[VertexSpec] = opt([], "custom: [[network.vertex]] name, role (server/gateway/relay/node), aggregator")
    engine: str = opt(
        "flow",
        "how messages cross the network: 'flow' = aiotsim's fluid TCP model (fast; checked against ns-3, "
        "docs/CALIBRATION.md); 'ns3' = packet by packet in ns-3.44 (pip install 'aiotsim[ns3]'): point-to-point "
        "links with drop-tail queues of queue_packets, shared-medium as an 802.11 cell (docs/NS3_ENGINE.md)",
        choices=ENGINES,
    )
    wifi_standard: str = opt("802.11n", "engine = 'ns3', shared-medium: the 802.11 standard of the cell",
                             choices=WIFI_STANDARDS)  # fmt: skip
    wifi_width_mhz: int = opt(20, "engine = 'ns3', shared-medium: channel width, MHz (20, 40, 80, 160)",
                              choices=(20, 40, 80, 160))  # fmt: skip
    wifi_manager: str = opt(
        "minstrel-ht", "engine = 'ns3', shared-medium: rate control, 'minstrel-ht' (Linux's), 'ideal' (best rate for "
        "the SNR) or 'constant' (the standard's default rate)", choices=WIFI_MANAGERS,
    )  # fmt: skip
    wifi_radius_m: float = opt(
        10.0, "engine = 'ns3', shared-medium: stations sit uniformly (seeded) within this many metres of the "
        "access point, 0 < r <= 1000", between(1e-3, 1000.0),
    )  # fmt: skip
    wifi_positions: list[list[float]] = opt(
        [], "engine = 'ns3', shared-medium: each station's [x, y], metres from the access point, one per node in "
        "node order (e.g. [[3.0, 4.0], [-2.5, 1.0]], coordinates within 1000 m); [] = seeded, uniform within "
        "wifi_radius_m", positions,
    )  # fmt: skip
    lte_resource_blocks: int = opt(
        25, "engine = 'ns3', a star whose nodes are all on radio '4g' (one LTE cell): resource blocks each way, "
        "6, 15, 25, 50, 75 or 100 (1.4 to 20 MHz; 25 = ns-3's default, about 16 Mbit/s for the whole cell)",
        choices=(6, 15, 25, 50, 75, 100),
    )  # fmt: skip
    transport: str = opt(
        "tcp",
        "'tcp': congestion windows (slow start, loss response, idle restart) on top of max-min fair "
        "sharing; 'ideal': the fluid model alone (each flow gets its fair share at once)",
        choices=("tcp", "ideal"),
    )
    link_defaults: str = opt(
        "network",
        "where a node's link rate/latency/loss come from when its group does not set them: the "
        "'network' keys above, or its 'radio' preset (see aiotsim/sim/energy.py)",
        choices=("network", "radio"),
    )
    tcp_initial_window: int = opt(10, "tcp: initial congestion window, segments, 1..1000", between(1, 1000))
    tcp_buffer_bytes: int = opt(
        4_194_304, "tcp: socket buffer (largest window), bytes, 1500..1e9", between(1500, 1_000_000_000)
    )
    tcp_congestion: str = opt("cubic", "tcp: congestion avoidance, 'cubic' or 'reno'", choices=("cubic", "reno"))
    tcp_hystart: bool = opt(True, "tcp: HyStart ends slow start (ACK train from 12 Mbit/s; queueing delay under fifo)")
    tcp_idle_restart: bool = opt(True, "tcp: restart slow start after an idle RTO (Linux's default)")
    tcp_connection: str = opt(
        "reuse",
        "tcp: 'reuse' one connection per direction of a node pair (one handshake each), 'duplex' one "
        "that both directions share (one handshake), or 'per-transfer' (a handshake and a fresh window each time)",
        choices=("reuse", "duplex", "per-transfer"),
    )
    tcp_min_rto_ms: float = opt(200.0, "tcp: floor of the retransmission timeout, ms, 1..60000", between(1, 60_000))
