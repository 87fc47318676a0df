"""What the flow engine keeps per (src, dst) path and per flow in flight (one job: the records).

:class:`PathCost` is computed once per pair (its links, format and the constants every send
reuses); :class:`Flight` is a flow's bookkeeping while it drains, :class:`TcpFlight` its TCP state
(:mod:`aiotsim.network.flows_tcp`). Their rates and bytes left live in
:class:`aiotsim.network.rates.RateClasses`. Units: bytes, bytes/s, s, segments.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import simpy

from aiotsim.network.link import Link
from aiotsim.network.overhead import PathFormat
from aiotsim.network.tcp import Connection
from aiotsim.network.traces import GilbertElliott


@dataclass(slots=True)
class PathCost:
    """What a (src, dst) pair costs, computed once per pair (not changed after)."""

    links: list[Link]
    names: list[str]  # link names crossed, in order
    nodes: list[str]  # vertices, both ends included
    fmt: PathFormat
    bottleneck_Bps: float  # smallest nominal capacity / times crossed along the path, bytes/s (TCP's BDP)
    inv_cap_sum: float  # s/byte: sum over the path's hops of 1 / capacity (store and forward)
    bursty: tuple[GilbertElliott, ...] = ()  # loss models sampled per transfer (empty: expected loss)
    traced: bool = False  # a link of the path has a bandwidth trace that varies
    links_t: tuple[int, ...] = ()  # the distinct link indices, as a tuple
    mults_t: tuple[float, ...] = ()  # times each is crossed
    jitters: tuple[float, ...] = ()  # s, jitter scale of each link with jitter, in path order (one draw each)
    traced_t: tuple[int, ...] = ()  # the distinct link indices that have a capacity trace
    # overhead.wire_bytes' terms, computed once (send repeats its float operations in its order)
    seg: int = 0  # payload bytes per packet, mtu - header (0: a format wire_bytes refuses)
    per_packet: int = 0  # header + framing bytes per packet
    ack_factor: float = 1.0  # 1 + ACK packets per data packet
    keep: float = 1.0  # 1 - end-to-end loss
    # TCP: (rtt s, segment wire bytes, bdp segments, max window segments, s/byte of store and
    # forward on the non-bottleneck hops), computed at the path's first TCP flow (None: not yet)
    tcp: tuple[float, float, float, float, float] | None = None


@dataclass(slots=True)
class TcpFlight:
    """TCP state of one flow in flight (see :mod:`aiotsim.network.tcp`)."""

    conn: Connection
    rtt: float  # s, twice the path's one-way latency
    seg_wire: float  # wire bytes of one full segment (MTU + framing + its ACK charge)
    bdp: float  # segments, bottleneck rate x RTT
    max_window: float  # segments, the socket buffer
    loss: float  # end-to-end packet loss probability
    extra_delay: float = 0.0  # s, loss recovery of the last round
    bursty: tuple[GilbertElliott, ...] = ()  # Gilbert-Elliott links of the path (their losses too)
    traced: bool = False  # on a traced path the window is a byte budget per round (see _pace_traced)
    budget: float = 0.0  # wire bytes the window allows in the current round
    rem0: float = 0.0  # wire bytes left when the current round began
    round_end: float = math.inf  # s, next round boundary of a window-limited flow (inf: none)
    cap: float = math.inf  # bytes/s, window cap (inf: none; 0: waiting out a handshake or timeout)
    queued: bool = False  # its last round's window stands in a link's queue (sharing = "fifo")
    hello: bool = False  # its handshake is yet to begin (sharing = "fifo": its SYN is on its way to the bottleneck)
    started: bool = False  # its first round has begun (sharing = "fifo": the first window bursts)


@dataclass(slots=True)
class Flight:
    """Bookkeeping of one flow in flight; its remaining bytes and rate live in the rate classes."""

    src: str
    dst: str
    tag: str
    nbytes: int
    wire: float  # bytes
    start: float  # s
    delay: float  # s, latency + loss recovery + jitter after the last byte is drained
    path: PathCost
    event: simpy.Event
