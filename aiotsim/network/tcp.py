"""TCP window dynamics for the fluid flow model: slow start, congestion avoidance, loss, idle.

The fluid model (:mod:`aiotsim.network.flows`) gives every flow its max-min fair share. A real TCP
flow cannot use that share until its congestion window covers the path's bandwidth-delay product:
a flow may send at most one window per round trip. Here each flow carries a window ``cwnd``
(segments) and its rate is capped at ``cwnd x segment wire bytes / RTT``; progressive filling then
shares the bottlenecks among the flows with those caps (a capped flow leaves its unused share to
the others, so bottlenecks stay max-min fair).

Per round trip (one :func:`plan_round` per window-limited flow and round):

* **slow start** (``cwnd < ssthresh``): the window doubles every round (one segment per ACK,
  RFC 5681; Linux and ns-3 both count segments, not ACKs, so delayed ACKs still double it), from
  the initial window (RFC 6928: 10 segments). HyStart (on by default in Linux and in ns-3's
  CUBIC, from 16 segments up) ends slow start mid-round: its ACK-train test once a round's ACKs,
  at most 2 ms apart, span half the smallest round trip (ns-3: all of it), which a bottleneck
  under 12 Mbit/s never allows; its delay test once the queue a round's first ACKs measured
  (under ``sharing = "fifo"``: the one the round's first segments met) exceeds a threshold;
* **congestion avoidance**: CUBIC (RFC 9438; Linux's and ns-3's default, C = 0.4, beta = 0.7) with
  its Reno-friendly region, growing at least 5% per round until its first reduction (Linux's and
  ns-3's clamp), or Reno (+1 segment per round, beta = 0.5);
* **loss**: each round's segments are lost independently with the path's loss probability (seeded
  geometric draws: the position of the first loss, then of each next one behind it,
  :meth:`LossSampler.first_loss`). A first loss with >= 3 segments behind it is repaired by fast
  retransmit with SACK (RFC 6675): every hole of the round is resent in one recovery round trip,
  the window is cut once by beta (one congestion event), and in the transfer's last round the
  recovery costs one more RTT. Fewer than 3 segments behind the first loss (a tiny window), or a
  loss with nothing delivered behind it at the transfer's tail (no SACK to reveal it), gets a
  retransmission timeout, after which the window restarts at 1 segment. Each retransmission is
  lost again with the same probability: a lost fast retransmission is found by the RTO, and a lost
  timeout retransmission doubles the RTO (exponential backoff, RFC 6298 sec. 5.5);
* **RTO**: ``srtt + max(4 x rttvar, min_rto)`` (RFC 6298 with Linux's floor of 200 ms on the
  variance term) with
  the handshake's sample as the first (rttvar = RTT / 2: RTO = 3 RTT) and rttvar decaying by 3/4
  per ACK (one ACK per 2 segments) while the RTT stays constant;
* **SYN loss**: a new connection's SYN is lost with the path's loss probability and resent after
  1 s, 2 s, ... (RFC 6298's initial RTO, Linux's);
* **the last window** of a transfer leaves in one burst, limited by the fair share only;
* **idle restart** (RFC 5681 sec. 4.1, Linux ``tcp_slow_start_after_idle = 1``): a connection idle
  for longer than one RTO halves its window per RTO idle, down to the initial window
  (:func:`~aiotsim.network.tcp_window.restart_window`, Linux's ``tcp_cwnd_restart``);
* **connections**: ``reuse`` keeps one connection per (src, dst) pair (one handshake, the first
  time; the window carries over), ``duplex`` one per node pair that both directions share (one
  handshake for the pair, by whichever sends first; each direction's sender has its own window,
  the other's starting at the initial window: a gRPC or HTTP/2 stream), ``per-transfer`` opens a
  fresh one per transfer: one round trip of handshake (SYN, SYN-ACK; the data leaves with the
  ACK) and the initial window every time.

A flow whose capped rate is above its fair share (the window already covers its share of the
bottleneck) and whose path is lossless is left to the fluid model: no per-RTT events until its
share rises above its window again. Everything is in segments and seconds.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from aiotsim.network.droptail import overflow_positions
from aiotsim.network.tcp_window import (
    Connection,
    TcpParams,
    cut,
    delay_test,
    grow,
    settle,
)

# A loss too near a round's end for 3 SACKed segments above it (the tail) is not "lost" to RFC
# 6675's IsLost. Once SACK recovery runs for the holes before it, ns-3.44 resends it in the same
# round trip (TcpTxBuffer::NextSeg, rule 3: the first unSACKed segment once no hole is left);
# Linux's RACK marks it lost when a retransmission sent after it is SACKed, a round trip later.
# Only a loss with no 3 segments behind it at all (no recovery) waits for the RTO.
TAIL_REPAIR_RTTS = {"linux": 1.0, "ns3": 0.0}  # stack -> round trips after the recovery's first
FAST_RETRANSMIT_DUPACKS = 3
SYN_RTO_S = 1.0  # s, first SYN retransmission timeout (RFC 6298 sec. 2.1, Linux, ns-3 ConnTimeout set so)
SYN_RETRIES = 6  # SYN retransmissions before giving up (Linux tcp_syn_retries, ns-3 ConnCount)
MAX_BACKOFFS = 6  # RTO doublings at most (beyond that the transfer's time is meaningless anyway)
# relative: a transfer whose segments left exceed the window by less than this goes in this round
# (bytes left are a difference of float sums: a residue of 1e-12 segments must not cost a round trip)
FINAL_TOL = 1e-9


def handshake_s(rtt_s: float, lose: Callable[[int], int | None]) -> float:
    """Time from a new connection's SYN until its first data leaves, s: one round trip, plus
    1 s, 2 s, ... per lost SYN (``lose(1)`` not None: that SYN was lost)."""
    return _doubling_wait(rtt_s, SYN_RTO_S, SYN_RETRIES, lose)


def backed_off(rto_s: float, lose: Callable[[int], int | None]) -> float:
    """Time from a timeout retransmission's first send until one copy gets through, s: ``rto_s``,
    then ``2 rto_s``, ``4 rto_s`` ... more for each lost copy (``lose(1)`` not None)."""
    return _doubling_wait(rto_s, 2.0 * rto_s, MAX_BACKOFFS, lose)


def _doubling_wait(wait: float, backoff: float, tries: int, lose: Callable[[int], int | None]) -> float:
    """``wait`` s, plus ``backoff``, ``2 backoff``, ... s while (at most ``tries`` times) the copy
    sent is lost: exponential backoff of a retransmission timer."""
    for _ in range(tries):
        if lose(1) is None:
            break
        wait += backoff
        backoff *= 2.0
    return wait


@dataclass
class Round:
    """What one round trip of a flow looks like (the output of :func:`plan_round`).

    Attributes
    ----------
    segments : float
        Segments the flow may send this round (its window, or what is left if less).
    duration_s : float
        Length of the round, s: one RTT, or the RTO when the round ends in a timeout.
    final : bool
        The transfer's last window: it leaves at the fair share, no cap.
    extra_delay_s : float
        Extra delay of the transfer's last byte, s (recovering a loss in the last round).
    """

    segments: float
    duration_s: float
    final: bool
    extra_delay_s: float = 0.0


class LossSampler:
    """Random packet loss, seeded: the one place where loss events are drawn.

    Parameters
    ----------
    seed : int
        Seed of the generator (``numpy.random.default_rng([seed, 0x1055])``, a stream of its own
        so that the jitter draws of the fluid model stay as they were).
    """

    def __init__(self, seed: int) -> None:
        self._rng = np.random.default_rng([seed, 0x1055])

    @property
    def state(self) -> dict[str, Any]:
        """The generator's state (for checkpoints)."""
        return self._rng.bit_generator.state

    @state.setter
    def state(self, value: dict[str, Any]) -> None:
        self._rng.bit_generator.state = value

    def first_loss(self, loss: float, segments: int) -> int | None:
        """Index of the first lost segment among ``segments`` sent back to back, or None.

        Each segment is lost independently with probability ``loss``: the index of the first
        loss is geometric; one draw per round.
        """
        if loss <= 0.0 or segments <= 0:
            return None
        first = int(self._rng.geometric(loss)) - 1
        return first if first < segments else None


def round_segments(conn: Connection, left_segments: float, max_window: float) -> tuple[int, float]:
    """The window (whole segments, >= 1; ``conn.cwnd`` clipped to ``max_window`` in place) and what
    a round sends of the ``left_segments`` of its transfer."""
    conn.cwnd = min(conn.cwnd, max_window)
    window = max(math.floor(conn.cwnd), 1)  # whole segments in flight
    return window, min(window, left_segments)


@dataclass(frozen=True)
class QueueView:
    """What the drop-tail queues tell one round of a flow (``sharing = "fifo"``; the default
    :data:`NO_QUEUE`: none).

    Attributes
    ----------
    dropped : float
        Fraction of the round a full buffer drops, besides random losses (:func:`_losses`).
    sample_s : float
        What HyStart's first samples of the round measure, s (0: no modelled queue; :func:`grow`).
    base_rtt_s : float or None
        The path's round trip without queueing, s: what resending a hole of the transfer's last
        window costs after it drains, when the round trip includes the queue its own window built
        (None: the round trip).
    written : bool
        The drops are the tail of a window written at once into the sender's own link
        (:attr:`~aiotsim.network.queues.RoundTrip.at_sender`): contiguous, and nothing of the round
        arrives behind them.
    overflow_draw : float
        A uniform draw in [0, 1) for the fate of the round's first fast retransmission (1: none).
        A slow start that overfills a drop-tail buffer goes on doubling into it until the loss is
        found, a round trip after the drop, unless HyStart's delay test stops it mid-round: then
        that retransmission meets the buffer still full and is dropped as often as the round's
        segments (``overflow_draw < dropped``), and a lost retransmission waits for the RTO.
        ns-3 (RFC 6937 recovery; eight 250 KB flows through one queue, 32 realisations): a
        recovery ends in the RTO 0.5 times per flow through 100 packets, never through 50 and
        0.875 times through 10; this draw fires 0.27, 0.14 and 0.45 times (docs/CALIBRATION.md).
    """

    dropped: float = 0.0
    sample_s: float = 0.0
    base_rtt_s: float | None = None
    overflow_draw: float = 1.0
    written: bool = False


NO_QUEUE = QueueView()


def plan_round(
    conn: Connection,
    params: TcpParams,
    now_s: float,
    left_segments: float,
    rtt_s: float,
    bdp_segments: float,
    max_window: float,
    lose: Callable[[int], int | None],
    share_segments: float = math.inf,
    segment_s: float = 0.0,
    queue: QueueView = NO_QUEUE,
) -> Round:
    """One round trip of a window-limited flow: what it sends, how long it takes, the new window.

    Parameters
    ----------
    conn, params : Connection, TcpParams
        The flow's connection (its window is updated for the next round) and TCP settings.
    now_s, rtt_s : float
        Start of the round and round trip of the path, s.
    left_segments, bdp_segments : float
        Segments of the transfer not yet sent; bandwidth-delay product of the path, segments.
    max_window : float
        The socket buffer in segments: the window never exceeds it.
    lose : callable
        ``lose(n)``: index of the first of ``n`` segments lost, or None (:meth:`LossSampler.first_loss`).
    share_segments : float
        Segments per RTT of the fair share that limited the flow last (else inf): a larger window
        queues, the round stretches to ``sent / share_segments`` RTTs (losses drawn per segment).
    segment_s : float
        One segment's time at the path's bottleneck, s (HyStart's ACK spacing; :func:`grow`).
    queue : QueueView
        What the drop-tail queues tell this round (under ``sharing = "fifo"``).

    Returns
    -------
    Round
    """
    window, sent = round_segments(conn, left_segments, max_window)
    final = left_segments <= window * (1.0 + FINAL_TOL)
    span = rtt_s * max(1.0, sent / share_segments)  # s, this round's RTT with its queueing
    acked = conn.acked  # segments acknowledged before this round (the RTO's samples)
    lost = _losses(math.ceil(sent), lose, queue.dropped, queue.written)
    conn.acked += sent
    if not lost:
        if final:
            settle(conn, params, now_s + span, sent, bdp_segments, queue.sample_s, segment_s)
        else:
            grow(conn, params, now_s + span, span, bdp_segments, queue.sample_s, segment_s, left_segments - sent)
        return Round(sent, span, final)
    rto = params.loss_rto(span, acked)
    # segments that can raise duplicate ACKs / SACKs: the rest of this round and the next one's new data
    behind = sent + (0.0 if final else min(window, left_segments - sent))
    # the last window's holes are resent as its segments drain, behind no queue of its own
    resend_s = span if not final or queue.base_rtt_s is None else min(queue.base_rtt_s, span)
    dropped = _resent_dropped(conn, params, queue)
    delay, timeout = _recovery(lost, behind, resend_s, rto, lose, params.stack, dropped, queue.written)
    cut(conn, params, now_s + delay, timeout)
    return Round(sent, rtt_s, True, extra_delay_s=delay) if final else Round(sent, delay, False)


def _resent_dropped(conn: Connection, params: TcpParams, queue: QueueView) -> bool:
    """Whether a full buffer drops a loss round's first fast retransmission: the round was a slow
    start that HyStart's delay test did not stop (:attr:`QueueView.overflow_draw`)."""
    growing = conn.cwnd < conn.ssthresh and not delay_test(conn, params, queue.sample_s)
    return growing and queue.overflow_draw < queue.dropped


def _recovery(
    lost: list[int],
    behind_end: float,
    span: float,
    rto: float,
    lose: Callable[[int], int | None],
    stack: str,
    resent_dropped: bool,
    written: bool = False,
) -> tuple[float, bool]:
    """How long repairing a round's ``lost`` segments takes (s) and whether it ends in a timeout;
    ``behind_end``: segments sent up to the end of the next round (duplicate ACKs / SACKs);
    ``stack``: whose SACK recovery finds a lost tail, at what cost (:data:`TAIL_REPAIR_RTTS`);
    ``resent_dropped``: a full buffer drops the first retransmission; ``written``: the holes are
    the tail of a window written at once, so only the next round's new data, sent as the round's
    ACKs come back, reveals them, a round trip later (ns-3.44: a download of 134 segments whose
    last 34 its server's 100-packet queue dropped took 0.274 s, 0.1 s more than without loss)."""
    revealing = behind_end - lost[0] - 1 - (len(lost) - 1 if written else 0)  # segments behind the first hole
    if revealing < FAST_RETRANSMIT_DUPACKS:  # no fast retransmit at all
        return backed_off(rto, lose), True  # the timeout retransmission, and its backoffs if lost
    if resent_dropped or lose(len(lost)) is not None:  # a retransmission lost: found by the RTO, after the recovery RTT
        return span + backed_off(rto, lose), True
    # SACK recovery: every hole resent in one round trip; losses too near the end for SACKs to
    # reveal them are resent in the same recovery, found as the stack finds them
    tail = behind_end - lost[-1] - 1 < FAST_RETRANSMIT_DUPACKS
    return span * (1.0 + float(written) + (TAIL_REPAIR_RTTS[stack] if tail else 0.0)), False


def _losses(segments: int, lose: Callable[[int], int | None], dropped: float = 0.0, written: bool = False) -> list[int]:
    """Indices of the lost segments among ``segments`` sent back to back: the first loss, then
    the next one behind it, and so on (independent losses: each gap is one geometric draw); and,
    where a full drop-tail buffer drops the fraction ``dropped`` (> 0: at least one segment), the
    round's tail (:func:`~aiotsim.network.queues.overflow_positions`; ``written``: a window
    written at once, whose tail is dropped whole)."""
    lost: list[int] = []
    start = 0
    while start < segments:
        nxt = lose(segments - start)
        if nxt is None or nxt >= segments - start:
            break
        lost.append(start + nxt)
        start += nxt + 1
    if dropped > 0:
        n = math.ceil(dropped * segments - 1e-9)
        tail = range(segments - min(n, segments), segments) if written else overflow_positions(segments, n)
        return sorted(set(lost).union(tail))
    return lost


def transport_options(network: Any) -> dict[str, Any]:
    """``transport=``, ``sharing=`` and ``tcp=`` keyword arguments of :class:`~aiotsim.network.flows.Network`
    from a scenario's ``[network]`` section (:class:`aiotsim.config.NetworkSection`)."""
    return {
        "transport": network.transport,
        "sharing": network.sharing,
        "tcp": TcpParams(
            initial_window=int(network.tcp_initial_window),
            buffer_bytes=float(network.tcp_buffer_bytes),
            congestion=network.tcp_congestion,
            idle_restart=bool(network.tcp_idle_restart),
            connection=network.tcp_connection,
            min_rto_s=float(network.tcp_min_rto_ms) * 1e-3,
            hystart=bool(network.tcp_hystart),
        ),
    }
