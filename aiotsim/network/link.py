"""A link: one directed transmission resource with a capacity, a latency and a packet format.

A :class:`Link` is the unit of capacity that concurrent flows share max-min fairly (see
:mod:`aiotsim.network.flows`). It is identified by its ``name``: the same ``Link`` placed on several
edges of a topology is *one* resource (that is how a half-duplex shared channel is modeled: every
edge that crosses the channel carries the same ``Link``).

Per-packet accounting (see :mod:`aiotsim.network.overhead`): a payload is cut into packets of at
most ``mtu - header_bytes`` payload bytes; each packet carries ``header_bytes`` of TCP/IP header
inside the MTU plus ``framing_bytes`` of link-layer framing outside it, and a channel that also
carries the receiver's acknowledgements (half-duplex radio, a shaped loopback) is charged
``acks_per_packet`` pure-header ACK packets per data packet. ``framing_bytes`` and
``acks_per_packet`` default to 0 (a full-duplex link whose ACKs travel on the reverse link); the
calibration against real TCP (:mod:`aiotsim.network.calibrate`) uses 14 bytes (the loopback's
Ethernet header) and 0.5 (delayed ACK: one ACK per two segments; least-squares fit 0.58 over the
>= 100 KB cases) on a tbf-shaped Linux loopback.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from aiotsim.errors import ConfigError
from aiotsim.network.traces import GilbertElliott, RateTrace

# packets: the drop-tail queue of a link unless set (ns-3's DropTailQueue MaxSize in the calibration,
# Linux's default txqueuelen)
DEFAULT_QUEUE_PACKETS = 1000


@dataclass(frozen=True)
class Link:
    """One directed link (or one shared channel).

    Parameters
    ----------
    name : str
        Unique resource name; equal names on several edges mean one shared resource.
    bandwidth_bps : float
        Capacity in bits/s, > 0.
    latency_s : float
        One-way propagation latency in s, >= 0.
    mtu : int
        Maximum transmission unit in bytes (IP packet size), > ``header_bytes``.
    header_bytes : int
        TCP/IP header bytes per packet, inside the MTU (20 IP + 20 TCP; 52 with TCP timestamps).
    loss : float
        Packet loss probability in [0, 1); lost packets are retransmitted (expected extra wire bytes
        and delay, see :mod:`aiotsim.network.overhead`).
    jitter_s : float
        Scale in s of the seeded extra latency drawn per transfer (exponential), >= 0.
    framing_bytes : int
        Link-layer bytes per packet outside the MTU (14 for an Ethernet header), >= 0.
    acks_per_packet : float
        ACK packets (each ``header_bytes + framing_bytes`` long) that cross this same link per data
        packet, >= 0: 0 for full-duplex links, 0.5 for delayed ACKs on a half-duplex channel.
    trace : RateTrace, optional
        Time-varying capacity (bytes/s, looped, with its offset); None: constant
        ``bandwidth_bps``. With a trace, ``bandwidth_bps`` is only its nominal (mean) rate.
    loss_model : GilbertElliott, optional
        Bursty loss sampled per transfer instead of the expected-value ``loss`` (which must be 0).
    queue_packets : int
        Drop-tail buffer in front of the link, packets of ``mtu`` bytes (+ framing), >= 1: what
        TCP's windows may hold standing in its queue before it drops (``transport = "tcp"``, see
        :mod:`aiotsim.network.queues`). 1,000 (ns-3's and Linux's ``txqueuelen`` default) is deep
        enough that most IoT transfers never fill it.
    """

    name: str
    bandwidth_bps: float
    latency_s: float = 0.0
    mtu: int = 1500
    header_bytes: int = 40
    loss: float = 0.0
    jitter_s: float = 0.0
    framing_bytes: int = 0
    acks_per_packet: float = 0.0
    trace: RateTrace | None = None
    loss_model: GilbertElliott | None = None
    queue_packets: int = DEFAULT_QUEUE_PACKETS

    def __post_init__(self) -> None:
        problems: list[str] = []
        if not isinstance(self.name, str) or not self.name:
            problems.append(f"name(={self.name!r}) must be a non-empty string")
        if not _finite(self.bandwidth_bps) or self.bandwidth_bps <= 0:
            problems.append(f"bandwidth_bps(={self.bandwidth_bps}) must be > 0")
        if not _finite(self.latency_s) or self.latency_s < 0:
            problems.append(f"latency_s(={self.latency_s}) must be >= 0")
        if not isinstance(self.header_bytes, int) or self.header_bytes < 0:
            problems.append(f"header_bytes(={self.header_bytes}) must be an integer >= 0")
        if not isinstance(self.mtu, int) or (isinstance(self.header_bytes, int) and self.mtu <= self.header_bytes):
            problems.append(f"mtu(={self.mtu}) must be an integer > header_bytes(={self.header_bytes})")
        if not _finite(self.loss) or not 0.0 <= self.loss < 1.0:
            problems.append(f"loss(={self.loss}) must be in [0, 1)")
        if not _finite(self.jitter_s) or self.jitter_s < 0:
            problems.append(f"jitter_s(={self.jitter_s}) must be >= 0")
        if not isinstance(self.framing_bytes, int) or self.framing_bytes < 0:
            problems.append(f"framing_bytes(={self.framing_bytes}) must be an integer >= 0")
        if not _finite(self.acks_per_packet) or self.acks_per_packet < 0:
            problems.append(f"acks_per_packet(={self.acks_per_packet}) must be >= 0")
        if self.trace is not None and not isinstance(self.trace, RateTrace):
            problems.append(f"trace(={self.trace!r}) must be a RateTrace or None")
        if self.loss_model is not None and (not isinstance(self.loss_model, GilbertElliott) or self.loss > 0):
            problems.append(f"loss_model(={self.loss_model!r}) must be a GilbertElliott, with loss = 0")
        if isinstance(self.queue_packets, bool) or not isinstance(self.queue_packets, int) or self.queue_packets < 1:
            problems.append(f"queue_packets(={self.queue_packets!r}) must be an integer >= 1")
        if problems:
            raise ConfigError([f"Link {self.name!r}: {p}" for p in problems])

    @property
    def capacity_Bps(self) -> float:
        """Capacity in bytes/s."""
        return self.bandwidth_bps / 8.0

    @property
    def buffer_bytes(self) -> float:
        """What the drop-tail queue holds, wire bytes: ``queue_packets`` full frames."""
        return float(self.queue_packets * (self.mtu + self.framing_bytes))


def _finite(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
