"""What the ns-3 engine builds from a :class:`~aiotsim.network.topology.Topology`, or why it cannot.

:func:`world_spec` turns a topology and the scenario's TCP settings into the worker's ``build``
message (:mod:`aiotsim.network.ns3_worker`):

* every pair of opposite edges ``a -> b`` / ``b -> a`` becomes one point-to-point link: each
  direction keeps its link's rate, drop-tail queue (``Link.queue_packets``) and loss (a
  ``RateErrorModel`` at the receiving device, packets); the channel has one propagation delay (the
  links' latency, which must agree both ways) and the smallest MTU of the two;
* ``topology = "shared-medium"`` (the one ``Link`` named ``channel`` on every node's edges) becomes
  an 802.11 cell: the ``ap`` vertex is the access point, every node a station, placed uniformly at
  random (seeded) in a disc of ``wifi_radius_m`` around it;
* TCP: the scenario's congestion control, initial window, socket buffers, RTO floor, HyStart and
  connection policy; ns-3's own headers (20 IP + 20 TCP + 12 timestamp bytes: ``Link.header_bytes``
  and ``framing_bytes`` are the flow model's accounting and are not used, so the packet engine checks
  them instead of reusing them) give segments of the smallest MTU - 52 bytes.

What ns-3 has no counterpart for here is refused with a :class:`~aiotsim.errors.ConfigError`
naming the key and the fix: jitter (a point-to-point channel has one fixed delay), bandwidth traces,
Gilbert-Elliott loss, a link one way only, different latencies each way, and any other shared link.
ns-3 does not restart a window after idle (Linux does; ``tcp_idle_restart`` is the flow model's).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from aiotsim.errors import ConfigError
from aiotsim.network.link import Link
from aiotsim.network.tcp import TcpParams
from aiotsim.network.topology import Topology

NS3_HEADER_BYTES = 52  # bytes: IPv4 20 + TCP 20 + the timestamp option 12 (ns-3's default, as Linux's)
WIFI_STANDARDS = ("802.11n", "802.11ac", "802.11ax", "802.11g", "802.11a", "802.11b")
WIFI_MANAGERS = {
    "minstrel-ht": "ns3::MinstrelHtWifiManager",  # Linux's rate control for 802.11n and later
    "ideal": "ns3::IdealWifiManager",  # picks the best rate from the received SNR
    "constant": "ns3::ConstantRateWifiManager",  # one rate, the standard's default mode
}
SHARED_CHANNEL = "channel"  # the shared-medium builder's link name
LTE_RADIOS = ("4g",)  # radio presets the engine runs as an LTE cell (lte-m, nb-iot and 5g stay links)
LTE_RB = 25  # resource blocks each way: 5 MHz, ns-3's default (about 16 Mbit/s for the whole cell)
LTE_RBS = (6, 15, 25, 50, 75, 100)  # LTE's channel widths: 1.4, 3, 5, 10, 15, 20 MHz
LTE_RADIUS_M = 500.0  # m: UEs uniformly (seeded) within this of the eNB
LOWPAN_RADIOS = ("802.15.4",)  # radio presets the engine runs as one 802.15.4 PAN with 6LoWPAN
LOWPAN_RADIUS_M = 15.0  # m: sensors uniformly (seeded) within this of the sink: single hop, in range
# bytes of TCP payload per segment on 6LoWPAN: the most that fits one 127-byte 802.15.4 frame with
# compressed headers (contexts, no timestamps): measured in ns-3.44, 80 B already needs 2 frames; a
# fragmented segment is lost whole with any of its ~10 frames, and TCP gave up on 2 of 10 uplinks
LOWPAN_SEGMENT = 76


@dataclass(frozen=True)
class RadioOptions:
    """The radio cells of the ns-3 engine: the 802.11 cell of ``topology = "shared-medium"`` and
    the LTE cell of a star on 4G.

    Wi-Fi defaults: 802.11n on 2.4 GHz with 20 MHz channels and Minstrel-HT, the single-band Wi-Fi
    of ESP32-class sensor boards (Espressif's ESP32 datasheet: 802.11 b/g/n, 2.4 GHz, HT20/HT40),
    and stations within 10 m of the access point (one room or a small hall). LTE: ns-3's default
    25 resource blocks each way (5 MHz; 100 is a 20 MHz Cat-4 cell).
    """

    standard: str = "802.11n"
    width_mhz: int = 20
    manager: str = "minstrel-ht"
    radius_m: float = 10.0
    lte_resource_blocks: int = LTE_RB
    positions: tuple[tuple[float, float], ...] = ()  # each station's (x, y), m; () = seeded within radius_m

    def __post_init__(self) -> None:
        problems = []
        if self.standard not in WIFI_STANDARDS:
            problems.append(f"network.wifi_standard(={self.standard!r}) must be one of {', '.join(WIFI_STANDARDS)}")
        if self.width_mhz not in (20, 40, 80, 160):
            problems.append(f"network.wifi_width_mhz(={self.width_mhz!r}) must be 20, 40, 80 or 160")
        if self.manager not in WIFI_MANAGERS:
            problems.append(f"network.wifi_manager(={self.manager!r}) must be one of {', '.join(WIFI_MANAGERS)}")
        if not (isinstance(self.radius_m, (int, float)) and 0 < self.radius_m <= 1000):
            problems.append(f"network.wifi_radius_m(={self.radius_m!r}) must be in (0, 1000]")
        if any(len(p) != 2 for p in self.positions):
            problems.append("network.wifi_positions must be [x, y] pairs")
        if self.lte_resource_blocks not in LTE_RBS:
            problems.append(f"network.lte_resource_blocks(={self.lte_resource_blocks!r}) must be one of {LTE_RBS}")
        if problems:
            raise ConfigError(problems)


def radio_options(network: Any) -> RadioOptions:
    """The cells of a scenario's ``[network]`` section (:class:`aiotsim.config.NetworkSection`)."""
    return RadioOptions(network.wifi_standard, int(network.wifi_width_mhz), network.wifi_manager,
                        float(network.wifi_radius_m), int(network.lte_resource_blocks),
                        tuple((float(x), float(y)) for x, y in network.wifi_positions))  # fmt: skip


def wifi_positions(n: int, radius_m: float, seed: int) -> tuple[list[float], list[float]]:
    """``n`` stations uniform over a disc of ``radius_m`` around the access point (m), seeded."""
    rng = np.random.default_rng([seed, 0x3F1])
    r = radius_m * np.sqrt(rng.random(n))
    angle = 2.0 * math.pi * rng.random(n)
    return (r * np.cos(angle)).tolist(), (r * np.sin(angle)).tolist()


def _link_problems(link: Link) -> list[str]:
    out = []
    if link.jitter_s > 0:
        out.append(
            f"link {link.name!r}: jitter has no ns-3 counterpart (a point-to-point channel has one "
            "fixed delay); set network.jitter_ms (or the group's / link's) to 0, or use engine = 'flow'"
        )
    if link.trace is not None:
        out.append(f"link {link.name!r}: bandwidth traces are not supported by the ns-3 engine yet; "
                   "use a constant rate or engine = 'flow'")  # fmt: skip
    if link.loss_model is not None:
        out.append(f"link {link.name!r}: Gilbert-Elliott loss is not supported by the ns-3 engine; "
                   "use loss_model = 'bernoulli' or engine = 'flow'")  # fmt: skip
    return out


class _Parts:
    """What the topology's edges become: wire rows, (link name, sender) per device, MTUs, problems."""

    def __init__(self) -> None:
        self.wires: list[list[Any]] = []
        self.devices: list[tuple[str, str]] = []
        self.mtus: list[int] = []
        self.problems: list[str] = []


def _wires(topology: Topology, index: dict[str, int], parts: _Parts) -> None:
    """Every pair of opposite edges as one point-to-point link (the shared-medium channel left out)."""
    edges = topology.edges
    uses: dict[str, int] = {}
    for link in edges.values():
        uses[link.name] = uses.get(link.name, 0) + 1
    cell = topology.kind == "shared_medium"
    seen: set[tuple[str, str]] = set()
    for (a, b), link in edges.items():
        if (a, b) in seen or (cell and link.name == SHARED_CHANNEL):
            continue
        back = edges.get((b, a))
        if uses[link.name] > 1:
            parts.problems.append(
                f"link {link.name!r} is shared by {uses[link.name]} edges (one channel): the ns-3 "
                "engine runs a shared channel only as topology = 'shared-medium' (802.11)"
            )
            continue
        if back is None:
            parts.problems.append(
                f"link {link.name!r} ({a} -> {b}) has no link back: the ns-3 engine needs both "
                "directions (TCP's ACKs ride the reverse link); drop directed = true"
            )
            continue
        if back.latency_s != link.latency_s:
            parts.problems.append(
                f"links {link.name!r} and {back.name!r} have different latencies "
                f"({link.latency_s * 1e3:g} and {back.latency_s * 1e3:g} ms): an ns-3 "
                "point-to-point channel has one delay"
            )
        seen.update({(a, b), (b, a)})
        mtu = min(link.mtu, back.mtu)
        parts.mtus.append(mtu)
        parts.wires.append(
            [
                index[a],
                index[b],
                link.bandwidth_bps,
                back.bandwidth_bps,
                link.latency_s,
                link.queue_packets,
                back.queue_packets,
                link.loss,
                back.loss,
                mtu,
            ]
        )
        parts.devices += [(link.name, a), (back.name, b)]


def _lte(
    topology: Topology, index: dict[str, int], radios: dict[str, str], rb: int, seed: int, parts: _Parts
) -> dict[str, Any]:
    """A star whose nodes are all on an LTE radio as one LTE cell: its UEs, the server behind the EPC
    over the star's server links (delay: the nodes' one-way latency, the core network's share of the
    preset's round trip), each UE's RLC buffer its link's ``queue_packets`` x 1,500 B."""
    nodes = topology.nodes
    if not _radio_star(topology, radios, LTE_RADIOS, "LTE cell", parts):
        return {}
    up, down = topology.links["server.in"], topology.links["server.out"]
    first = topology.links[f"{nodes[0]}.up"]
    xs, ys = wifi_positions(len(nodes), LTE_RADIUS_M, seed)
    parts.mtus.append(1500)
    parts.devices += [("server.in", "pgw"), ("server.out", "server")]
    return {
        "ues": [index[v] for v in nodes], "x": xs, "y": ys, "server": index["server"],
        "bps_up": up.bandwidth_bps, "bps_down": down.bandwidth_bps, "delay_s": first.latency_s,
        "queue_up": up.queue_packets, "queue_down": down.queue_packets, "rb": rb,
        "rlc_bytes": first.queue_packets * 1500,
    }  # fmt: skip


def _radio_star(topology: Topology, radios: dict[str, str], names: tuple[str, ...], what: str, parts: _Parts) -> bool:
    """Whether ``topology`` is a star whose nodes are all on one of ``names`` (else a problem)."""
    if topology.kind == "star" and all(radios.get(v) in names for v in topology.nodes):
        return True
    parts.problems.append(f"radio {names[0]!r} runs as one {what}, for a star whose nodes are all on it; "
                          "give every node the radio (nodes.radio), or use engine = 'flow'")  # fmt: skip
    return False


def _lowpan(
    topology: Topology, index: dict[str, int], radios: dict[str, str], seed: int, parts: _Parts
) -> dict[str, Any]:
    """A star whose nodes are all on 802.15.4 as one single-hop PAN: the star's switch is its sink
    (coordinator and 6LoWPAN border router), which reaches the server over the star's server links."""
    if not _radio_star(topology, radios, LOWPAN_RADIOS, "802.15.4 PAN", parts):
        return {}
    nodes = topology.nodes
    up, down = topology.links["server.in"], topology.links["server.out"]
    xs, ys = wifi_positions(len(nodes), LOWPAN_RADIUS_M, seed)
    parts.mtus.append(LOWPAN_SEGMENT + NS3_HEADER_BYTES)
    parts.devices += (
        [("pan", "switch")] + [("pan", v) for v in nodes] + [("server.in", "switch"), ("server.out", "server")]
    )
    return {
        "sink": index["switch"], "sensors": [index[v] for v in nodes], "x": xs, "y": ys, "server": index["server"],
        "bps_up": up.bandwidth_bps, "bps_down": down.bandwidth_bps, "delay_s": up.latency_s,
        "queue_up": up.queue_packets, "queue_down": down.queue_packets, "segment_bytes": LOWPAN_SEGMENT,
    }  # fmt: skip


def _cell(topology: Topology, index: dict[str, int], wifi: RadioOptions, seed: int, parts: _Parts) -> dict[str, Any]:
    """The shared-medium channel as an 802.11 cell: the ``ap`` vertex and a station per node."""
    channel = topology.links[SHARED_CHANNEL]
    stations = topology.nodes
    xs, ys = wifi_positions(len(stations), wifi.radius_m, seed)
    if wifi.positions:  # the user's layout
        if len(wifi.positions) != len(stations):
            parts.problems.append(f"network.wifi_positions: {len(wifi.positions)} positions for {len(stations)} "
                                  "stations: give one [x, y] per node")  # fmt: skip
        xs, ys = [p[0] for p in wifi.positions], [p[1] for p in wifi.positions]
    parts.mtus.append(min(channel.mtu, 1500))  # 802.11's IP MTU is 2,296 bytes; Ethernet's 1,500 at most
    parts.devices += [(SHARED_CHANNEL, "ap")] + [(SHARED_CHANNEL, s) for s in stations]
    if channel.loss > 0:
        parts.problems.append(
            "network.loss on a shared medium: the ns-3 engine's Wi-Fi loses what its channel "
            "loses (distance, collisions); set the loss to 0"
        )
    return {
        "ap": index["ap"], "stations": [index[s] for s in stations], "x": xs, "y": ys,
        "standard": wifi.standard, "width_mhz": wifi.width_mhz, "manager": WIFI_MANAGERS[wifi.manager],
        "queue_packets": channel.queue_packets,
    }  # fmt: skip


def world_spec(
    topology: Topology,
    tcp: TcpParams,
    seed: int,
    options: RadioOptions | None = None,
    radios: dict[str, str] | None = None,
) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """The worker's ``build`` message for ``topology``, and the (link name, sender vertex) of every
    ns-3 device in creation order (what its counters are reported under). ``radios``: each node's
    radio preset; a star all on ``"4g"`` is an LTE cell (:data:`LTE_RADIOS`), all on ``"802.15.4"``
    one 6LoWPAN PAN (:data:`LOWPAN_RADIOS`).

    Raises
    ------
    ConfigError
        Listing every part of the topology ns-3 cannot carry here, each with its fix.
    """
    index = {v: i for i, v in enumerate(topology.vertices)}
    parts = _Parts()
    for link in topology.links.values():
        parts.problems += _link_problems(link)
    radios = radios or {}
    lte = lowpan = None
    on = {radios.get(v) for v in topology.nodes}
    if on & set(LTE_RADIOS):
        lte = _lte(topology, index, radios, (options or RadioOptions()).lte_resource_blocks, seed, parts)
    elif on & set(LOWPAN_RADIOS):
        lowpan = _lowpan(topology, index, radios, seed, parts)
    else:
        _wires(topology, index, parts)
    cell = _cell(topology, index, options or RadioOptions(), seed, parts) if topology.kind == "shared_medium" else None
    if parts.problems:
        raise ConfigError([f"engine = 'ns3': {p}" for p in parts.problems])
    spec = {
        "op": "build",
        "run": seed + 1,  # ns-3's RngRun counts from 1
        "vertices": len(index),
        "wires": parts.wires,
        "wifi": cell,
        "lte": lte,
        "lowpan": lowpan,
        "tcp": {
            "congestion": tcp.congestion,
            "initial_window": tcp.initial_window,
            "segment_bytes": min(parts.mtus, default=1500) - NS3_HEADER_BYTES,
            "buffer_bytes": int(tcp.buffer_bytes),
            "min_rto_s": tcp.min_rto_s,
            "hystart": tcp.hystart,
            "connection": tcp.connection,
        },  # fmt: skip
    }
    return spec, parts.devices
