"""Protocol overhead: how many packets and wire bytes a payload costs, and what loss adds.

The model, per transfer of ``payload_bytes`` over a path with one packet format:

* packets = ceil(payload / (mtu - header_bytes)), and at least 1 (an empty message still costs one
  header-only packet);
* each packet carries ``header_bytes`` (TCP/IP, inside the MTU) plus ``framing_bytes`` (link layer,
  outside the MTU); a channel that also carries the acknowledgements is charged
  ``acks_per_packet`` header-only ACK packets per data packet;
* with packet loss probability ``p`` every packet is sent a geometric number of times, on average
  ``1 / (1 - p)``: the wire bytes are inflated by that factor;
* delay of loss recovery: a lost packet is detected and resent one round trip later (fast
  retransmit after duplicate ACKs), and recoveries are taken one after another, so the transfer is
  late by ``expected lost packets x RTT`` = ``packets x p / (1 - p) x 2 x path latency``. This is
  the pessimistic end of TCP's behaviour (no overlap between recoveries); it is 0 on a lossless
  path.

When a path crosses links with different formats the sender uses the path's format (see
:func:`path_format`): the smallest MTU (path MTU discovery), the largest header, framing and ACK
charge, and the end-to-end loss ``1 - prod(1 - p_i)`` (TCP retransmits end to end).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from aiotsim.errors import ConfigError
from aiotsim.network.link import Link


def packets(payload_bytes: int, mtu: int, header_bytes: int) -> int:
    """Number of packets a payload is cut into.

    Parameters
    ----------
    payload_bytes : int
        Application bytes, >= 0.
    mtu : int
        Maximum IP packet size in bytes.
    header_bytes : int
        TCP/IP header bytes per packet (inside the MTU).

    Returns
    -------
    int
        ``ceil(payload / (mtu - header_bytes))``, and 1 for an empty payload.
    """
    if payload_bytes < 0:
        raise ConfigError(f"payload_bytes(={payload_bytes}) must be >= 0")
    if mtu <= header_bytes:
        raise ConfigError(f"mtu(={mtu}) must be > header_bytes(={header_bytes})")
    return max(1, math.ceil(payload_bytes / (mtu - header_bytes)))


def wire_bytes(
    payload_bytes: int,
    mtu: int,
    header_bytes: int,
    loss: float = 0.0,
    framing_bytes: int = 0,
    acks_per_packet: float = 0.0,
) -> float:
    """Expected bytes on the wire for one payload.

    Parameters
    ----------
    payload_bytes : int
        Application bytes, >= 0.
    mtu, header_bytes : int
        Packet format in bytes (see :func:`packets`).
    loss : float
        Packet loss probability in [0, 1); the total is divided by ``1 - loss``.
    framing_bytes : int
        Link-layer bytes per packet outside the MTU.
    acks_per_packet : float
        Header-only ACK packets charged to the same channel per data packet.

    Returns
    -------
    float
        ``(payload + n x (header + framing) x (1 + acks_per_packet)) / (1 - loss)`` bytes, with
        ``n = packets(payload, mtu, header)``.
    """
    if not 0.0 <= loss < 1.0:
        raise ConfigError(f"loss(={loss}) must be in [0, 1)")
    packets(payload_bytes, mtu, header_bytes)  # checks the payload and the format
    per_packet = header_bytes + framing_bytes  # bytes of overhead per packet on the wire
    return wire_total(payload_bytes, mtu - header_bytes, per_packet, 1.0 + acks_per_packet, 1.0 - loss)


def wire_total(payload_bytes: int, seg: int, per_packet: int, ack_factor: float, keep: float) -> float:
    """:func:`wire_bytes` on a format's terms, unchecked (a path computes them once per pair).

    ``seg`` payload bytes per packet (mtu - header, > 0), ``per_packet`` overhead bytes per packet
    (header + framing), ``ack_factor`` = 1 + ACK packets per data packet, ``keep`` = 1 - loss.
    """
    n = max(1, math.ceil(payload_bytes / seg))  # packets, as :func:`packets`
    return (payload_bytes + n * per_packet * ack_factor) / keep


def retransmission_delay(payload_bytes: int, mtu: int, header_bytes: int, loss: float, rtt_s: float) -> float:
    """Expected extra delay (s) of loss recovery: expected lost packets x one RTT each.

    Parameters
    ----------
    payload_bytes, mtu, header_bytes : int
        Payload and packet format in bytes.
    loss : float
        Packet loss probability in [0, 1).
    rtt_s : float
        Round-trip time of the path in s (twice its one-way latency).

    Returns
    -------
    float
        ``packets x loss / (1 - loss) x rtt_s`` in s.
    """
    if not 0.0 <= loss < 1.0:
        raise ConfigError(f"loss(={loss}) must be in [0, 1)")
    n = packets(payload_bytes, mtu, header_bytes)
    return n * loss / (1.0 - loss) * rtt_s


@dataclass(frozen=True)
class PathFormat:
    """The packet format a sender uses end to end on a path (see :func:`path_format`)."""

    mtu: int  # bytes
    header_bytes: int  # bytes per packet
    framing_bytes: int  # bytes per packet
    acks_per_packet: float  # ACK packets per data packet
    loss: float  # end-to-end packet loss probability
    latency_s: float  # one-way, sum of the links' latencies


def path_format(links: Sequence[Link]) -> PathFormat:
    """Combine the links of a path into the format its sender uses.

    Parameters
    ----------
    links : sequence of Link
        The path, in order; must not be empty.

    Returns
    -------
    PathFormat
        Smallest MTU; largest header, framing and ACK charge; end-to-end loss
        ``1 - prod(1 - loss_i)``; latency = sum of latencies (s).
    """
    if not links:
        raise ConfigError("path_format needs at least one link")
    first = links[0]  # one pass (once per path of a fleet): min / max keep the first of equals, as min() / max()
    mtu, header, framing, acks = first.mtu, first.header_bytes, first.framing_bytes, first.acks_per_packet
    keep = 1.0
    for link in links:
        keep *= 1.0 - link.loss
        if link.mtu < mtu:
            mtu = link.mtu
        if link.header_bytes > header:
            header = link.header_bytes
        if link.framing_bytes > framing:
            framing = link.framing_bytes
        if link.acks_per_packet > acks:
            acks = link.acks_per_packet
    return PathFormat(mtu, header, framing, acks, 1.0 - keep, sum(link.latency_s for link in links))
