"""A TCP connection's congestion window round by round: the settings (:class:`TcpParams`), one
connection's state (:class:`Connection`), slow start, HyStart, CUBIC (or Reno), the cut after a
loss and the restart after idle, as Linux (``tcp_cubic.c``) and ns-3.44 (``TcpCubic``) run them;
``TcpParams.stack`` picks where the two differ. Windows are in segments, times in s.
:mod:`aiotsim.network.tcp` plans each round with these; its module docstring describes the whole
transport, and both are imported from there."""

from __future__ import annotations

import math
from dataclasses import dataclass

CUBIC_C = 0.4  # segments / s^3 (RFC 9438)
CUBIC_BETA = 0.7  # window kept after a loss (RFC 9438)
RENO_BETA = 0.5
HYSTART_LOW_WINDOW = 16  # segments: HyStart is active from this window up (Linux, ns-3)
HYSTART_MIN_SAMPLES = 8  # RTT samples (ACKs) a round's delay test takes first (Linux, ns-3)
# HyStart's delay test leaves slow start once a round trip exceeds the smallest one seen by
# clamp(smallest / divisor, 4 ms, max): Linux (tcp_cubic.c) divides by 8 and clamps at 16 ms;
# ns-3.44's TcpCubic does not divide and clamps at 1 s (HyStartDelayMin / HyStartDelayMax)
HYSTART_DELAY_MIN_S = 0.004  # s
HYSTART_DELAY = {"linux": (8.0, 0.016), "ns3": (1.0, 1.0)}  # stack -> (divisor, max s)
# HyStart's ACK-train test counts only ACKs at most 2 ms apart (Linux hystart_ack_delta_us, ns-3
# HyStartAckDelta): a train of them longer than the smallest round trip's half (Linux, unpaced) or
# the whole of it (ns-3.44 TcpCubic::HystartUpdate) ends slow start. With one ACK per 2 segments,
# a bottleneck slower than 2 x 1,500 bytes per 2 ms (12 Mbit/s) never spaces ACKs that closely:
# there, only the delay test (a queue) or a loss ends slow start.
HYSTART_ACK_DELTA_S = 0.002  # s
HYSTART_TRAIN = {"linux": 0.5, "ns3": 1.0}  # stack -> the train's length / the smallest round trip
# Before CUBIC's first window reduction (and after a timeout, which resets it) Linux's
# bictcp_update and ns-3's TcpCubic::Update clamp the ACK count per increment at 20: the window
# grows by at least 1/20 of itself per round trip ("the available bandwidth is still unknown")
CUBIC_PROBE_CNT = 20.0
# Does the window grow only while the sender is window-limited? ns-3.44's TcpCubic::IncreaseWindow
# returns while m_isCwndLimited is false: once a round's ACKs have released the whole transfer,
# the rest of its ACKs grow nothing (traced: a 250 KB transfer at 20 Mbit/s x 100 ms ends its
# fourth round at 92 segments, not 160, and the next transfer on the connection takes two round
# trips, not one). Linux grows in slow start while cwnd < 2 x the most packets in flight of the
# window (tcp_is_cwnd_limited), which a non-final round always allows: no cap.
CWND_LIMITED_GROWTH = {"linux": False, "ns3": True}
SEGMENTS_PER_ACK = 2.0  # delayed ACKs: one ACK (one RTT sample) per 2 segments
MIN_WINDOW = 2.0  # segments, the smallest window after a fast-retransmit cut


@dataclass(frozen=True)
class TcpParams:
    """TCP settings of a network (see :mod:`aiotsim.network.tcp`'s docstring).

    Attributes
    ----------
    initial_window : int
        Initial congestion window, segments (RFC 6928: 10).
    buffer_bytes : float
        Socket buffer, bytes: the window never exceeds ``buffer_bytes`` worth of segments.
    congestion : str
        ``"cubic"`` or ``"reno"``.
    idle_restart : bool
        Restart slow start after an idle period longer than one RTO (Linux's default).
    connection : str
        ``"reuse"`` (one connection per (src, dst) pair), ``"duplex"`` (one per node pair, both
        directions) or ``"per-transfer"`` (a handshake every time).
    min_rto_s : float
        Floor of the retransmission timeout, s (Linux: 0.2).
    hystart : bool
        HyStart ends slow start (Linux's and ns-3's CUBIC default): its ACK-train test and, where
        round trips include queueing (``sharing = "fifo"``), its delay test.
    stack : str
        Whose TCP where Linux's and ns-3.44's differ: ``"linux"`` (default) or ``"ns3"`` (the
        calibration against ns-3): HyStart's delay threshold (:data:`HYSTART_DELAY`) and train
        length (:data:`HYSTART_TRAIN`), and how a lost tail is found in SACK recovery
        (:data:`TAIL_REPAIR_RTTS`).
    """

    initial_window: int = 10
    buffer_bytes: float = 4e6
    congestion: str = "cubic"
    idle_restart: bool = True
    connection: str = "reuse"
    min_rto_s: float = 0.2
    hystart: bool = True
    stack: str = "linux"

    @property
    def beta(self) -> float:
        """Fraction of the window kept after a loss."""
        return CUBIC_BETA if self.congestion == "cubic" else RENO_BETA

    def rto(self, rtt_s: float) -> float:
        """Retransmission timeout of a path with round trip ``rtt_s``, s, for the idle test of
        :func:`restart_window` (a long-lived connection's estimate)."""
        return max(self.min_rto_s, 2.0 * rtt_s)

    def loss_rto(self, rtt_s: float, acked: float) -> float:
        """Retransmission timeout after ``acked`` segments of the connection were acknowledged, s.

        RFC 6298 with the handshake's sample first (srtt = RTT, rttvar = RTT / 2) and one sample
        per ACK (``acked / 2`` of them) at the same RTT: rttvar = RTT / 2 x (3/4)^samples; as in
        Linux, the floor ``min_rto_s`` bounds the variance term: ``srtt + max(4 rttvar, min_rto)``.
        """
        rttvar = 0.5 * rtt_s * 0.75 ** (acked / SEGMENTS_PER_ACK)
        return rtt_s + max(self.min_rto_s, 4.0 * rttvar)  # Linux: min_rto bounds rttvar's term


@dataclass
class Connection:
    """The congestion state of one (src, dst) connection, segments and s."""

    cwnd: float
    ssthresh: float = math.inf
    w_max: float = 0.0  # CUBIC: window before the last reduction, segments
    k_s: float = 0.0  # CUBIC: time from the reduction until the window is back at w_max, s
    epoch_s: float = 0.0  # CUBIC: time of the last reduction, s
    last_active_s: float = 0.0  # when its last transfer was drained, s
    acked: float = 0.0  # segments acknowledged so far (RTT samples for the RTO), segments
    busy: bool = False
    min_rtt_s: float = math.inf  # the smallest round trip seen (HyStart's delay test), s
    probing: bool = True  # CUBIC has not cut the window since the connection opened or its last timeout


def restart_window(conn: Connection, idle_s: float, rto_s: float, initial_window: float) -> None:
    """Slow-start restart after idle (Linux ``tcp_cwnd_restart``), in place.

    The window is halved once per RTO of idle time beyond the first, but never below
    ``min(initial_window, cwnd)``; ssthresh keeps at least 3/4 of the old window.
    """
    if idle_s <= rto_s:
        return
    restart = min(initial_window, conn.cwnd)
    conn.ssthresh = max(conn.ssthresh, 0.75 * conn.cwnd)  # Linux tcp_current_ssthresh
    cwnd = conn.cwnd
    delta = idle_s - rto_s
    while delta > 0 and cwnd > restart:
        cwnd /= 2.0
        delta -= rto_s
    conn.cwnd = max(cwnd, restart)


def grow(
    conn: Connection,
    params: TcpParams,
    now_s: float,
    rtt_s: float,
    bdp_segments: float,
    sample_s: float = 0.0,
    segment_s: float = 0.0,
    unsent_segments: float = math.inf,
) -> None:
    """The window after one loss-free round trip (slow start, HyStart, CUBIC or Reno), in place.

    Parameters
    ----------
    conn : Connection
        State to update.
    params : TcpParams
        Congestion control settings.
    now_s : float
        Time at the end of the round, s (CUBIC's window is a function of time).
    rtt_s : float
        Round trip, s.
    bdp_segments : float
        The path's bandwidth-delay product in segments (HyStart's ACK-train yardstick).
    sample_s : float
        The round trip HyStart's first samples of the round measured, s: the base plus the queue
        the round's first segments met (their own burst had not built up yet; Linux and ns-3 take
        the least of the round's first 8 samples). Where it is > 0 (round trips carry a modelled
        queue), the delay test ends slow start once it exceeds the smallest seen by its
        threshold (:data:`HYSTART_DELAY`).
    segment_s : float
        Time one segment takes at the path's bottleneck, s: a delayed ACK's two segments apart is
        the ACK train's spacing, which must be at most :data:`HYSTART_ACK_DELTA_S` for the
        ACK-train test to count it (0: always counted).
    unsent_segments : float
        Segments of the transfer not sent by the round's window: where the stack grows only while
        window-limited (:data:`CWND_LIMITED_GROWTH`), the round's ACKs grow the window until they
        have released these (in slow start each ACK of 2 segments sends 4: the window grows by
        half of them; in congestion avoidance each sends 2: the growth scales by their share of
        the window).
    """
    delayed = delay_test(conn, params, sample_s)
    cwnd = conn.cwnd
    limited = CWND_LIMITED_GROWTH[params.stack]
    if cwnd < conn.ssthresh:
        _slow_start(conn, params, now_s, bdp_segments, delayed, segment_s, unsent_segments if limited else math.inf)
        return
    if params.congestion == "reno":
        conn.cwnd = cwnd + 1.0
    else:
        _cubic(conn, now_s, rtt_s)
    if limited and unsent_segments < cwnd:  # the growth of the ACKs that still released new data
        conn.cwnd = cwnd + (conn.cwnd - cwnd) * unsent_segments / cwnd


def _cubic(conn: Connection, now_s: float, rtt_s: float) -> None:
    """One congestion-avoidance round of CUBIC (:func:`grow`), in place."""
    cwnd = conn.cwnd
    if conn.w_max <= 0:  # the first round since a timeout reset CUBIC: a new epoch from this window
        conn.w_max, conn.epoch_s, conn.k_s = cwnd, now_s, 0.0
    t = now_s - conn.epoch_s  # s since the last reduction
    w_cubic = CUBIC_C * (t + rtt_s - conn.k_s) ** 3 + conn.w_max  # RFC 9438 eq. 1, one RTT ahead
    beta = CUBIC_BETA
    w_reno = conn.w_max * beta + 3.0 * (1.0 - beta) / (1.0 + beta) * t / rtt_s  # RFC 9438 eq. 4
    floor = cwnd * (1.0 + 1.0 / CUBIC_PROBE_CNT) if conn.probing else cwnd + 1.0 / max(cwnd, 1.0)
    # Linux bounds CUBIC's growth at 1.5x per round trip (cnt >= 2)
    conn.cwnd = min(max(w_cubic, w_reno, floor), 1.5 * cwnd)


def _slow_start(
    conn: Connection,
    params: TcpParams,
    now_s: float,
    bdp_segments: float,
    delayed: bool,
    segment_s: float,
    unsent_segments: float,
) -> None:
    """One slow-start round of :func:`grow`: the window doubles, or HyStart ends slow start
    (``delayed``: its delay test fired on the round's samples); it grows by at most half of
    ``unsent_segments`` (the ACKs that release them; inf: no such cap)."""
    cwnd = conn.cwnd
    most = cwnd + unsent_segments / 2.0  # each ACK of 2 segments grows 2 and sends 4 new ones
    train = _ack_train(params, segment_s, cwnd, bdp_segments)
    if not (params.hystart and cwnd >= HYSTART_LOW_WINDOW and (train or delayed)):
        conn.cwnd = min(2.0 * cwnd, conn.ssthresh, most)
        return
    # HyStart finds the exit mid-round, and slow start has grown the window by the segments acked
    # until then: the delay test decides after its first samples (8 ACKs of 2 segments), the train
    # once its ACKs have spanned the yardstick (ns-3.44, one flow: 20 Mbit/s at 10 ms leaves a
    # round of 40 at 71 = 40 + 33, here 73; 10 Mbit/s at 10 ms, by the delay test, at 163, here 176)
    grown = SEGMENTS_PER_ACK * HYSTART_MIN_SAMPLES if delayed else HYSTART_TRAIN[params.stack] * bdp_segments
    cwnd = conn.cwnd = min(cwnd + grown, 2.0 * cwnd, most)
    conn.ssthresh = cwnd  # HyStart: leave slow start, CUBIC from here (epoch now, K = 0)
    conn.w_max, conn.epoch_s, conn.k_s = cwnd, now_s, 0.0


def _ack_train(params: TcpParams, segment_s: float, segments: float, bdp_segments: float) -> bool:
    """HyStart's ACK-train test on a round of ``segments``: its ACKs close enough together
    (:data:`HYSTART_ACK_DELTA_S`) for long enough (:data:`HYSTART_TRAIN`)."""
    close = SEGMENTS_PER_ACK * segment_s <= HYSTART_ACK_DELTA_S
    return close and segments >= HYSTART_TRAIN[params.stack] * bdp_segments


def settle(
    conn: Connection,
    params: TcpParams,
    now_s: float,
    sent: float,
    bdp_segments: float,
    sample_s: float,
    segment_s: float,
) -> None:
    """A transfer's last loss-free round, in place: its ACKs grow no window (the sender is not
    window-limited: Linux's tcp_is_cwnd_limited, ns-3's m_isCwndLimited), but HyStart still runs
    on them (Linux's bictcp_acked, ns-3's TcpCubic::PktsAcked): a test that fires sets ssthresh to
    the window, and the connection's next transfer leaves slow start there. ns-3.44, a 250 KB
    upload at 2 Mbit/s x 100 ms through 100 packets: its last round's samples (256.8 ms) end slow
    start at 92 segments, and the next uploads stay below the buffer's overflow.

    Parameters are those of :func:`grow`; ``sent``: the round's segments (its ACK train)."""
    delayed = delay_test(conn, params, sample_s) and sent >= SEGMENTS_PER_ACK * HYSTART_MIN_SAMPLES
    cwnd = conn.cwnd
    if not (params.hystart and HYSTART_LOW_WINDOW <= cwnd < conn.ssthresh):
        return
    if delayed or _ack_train(params, segment_s, sent, bdp_segments):
        conn.ssthresh = cwnd
        conn.w_max, conn.epoch_s, conn.k_s = cwnd, now_s, 0.0


def delay_test(conn: Connection, params: TcpParams, sample_s: float) -> bool:
    """HyStart's delay test on a round whose first samples measured ``sample_s`` (s; 0: no
    modelled queue, no test): the round trip exceeds the smallest seen (kept up to date here) by
    the stack's threshold (:data:`HYSTART_DELAY`)."""
    if sample_s <= 0:  # only a modelled queue moves a round trip (the fair model's path: skipped)
        return False
    low = conn.min_rtt_s = min(conn.min_rtt_s, sample_s)
    divisor, most = HYSTART_DELAY[params.stack]
    return sample_s >= low + min(max(low / divisor, HYSTART_DELAY_MIN_S), most)


def cut(conn: Connection, params: TcpParams, now_s: float, timeout: bool) -> None:
    """The window after a loss: fast retransmit (x beta) or a timeout (1 segment), in place.

    A timeout also resets CUBIC, as Linux (``cubictcp_state`` on TCP_CA_Loss) and ns-3
    (``TcpCubic::CubicReset``) do: the next epoch starts from the window congestion avoidance
    resumes at, and it probes (:data:`CUBIC_PROBE_CNT`) until the next reduction."""
    conn.probing = timeout
    conn.w_max = 0.0 if timeout else conn.cwnd  # 0: the epoch starts where avoidance resumes (grow)
    conn.k_s = (conn.w_max * (1.0 - params.beta) / CUBIC_C) ** (1.0 / 3.0)  # RFC 9438 eq. 2
    conn.ssthresh = max(params.beta * conn.cwnd, MIN_WINDOW)
    conn.cwnd = 1.0 if timeout else conn.ssthresh
    conn.epoch_s = now_s
