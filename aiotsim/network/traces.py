"""Time-varying links: bandwidth traces and the Gilbert-Elliott loss model.

**Rate traces.** A :class:`RateTrace` is a piecewise-constant capacity (bytes/s) that loops with
period ``period_s``: on segment ``k`` (local time ``[start_k, start_{k+1})``) the rate is
``rate_k``. A link at absolute simulated time ``t`` sees the trace at local time
``(t + offset_s) mod period_s``; the offset lets nodes that replay the same trace not move in
lockstep. Everything the flow engine needs is exact for a piecewise-constant rate:
:meth:`RateTrace.rate_at`, :meth:`RateTrace.next_change`, the integral
:meth:`RateTrace.bytes_between` and its inverse :meth:`RateTrace.time_to_send`.

Two file formats:

* **Mahimahi** (``*.trace``, ``*.up``, ``*.down``, any name not ending in ``.csv``): one line per
  delivery opportunity of one 1,500-byte packet, the line being the opportunity's time in integer
  ms from the start; several lines with the same time are several packets in that ms. As in
  mahimahi's ``LinkQueue``, the file loops and its period is the **last timestamp** (after the
  last line's opportunity, the schedule restarts with its base moved by the last timestamp), so a
  line at ``T`` (the last one) falls on ms 0 of the next period. The fluid version spreads the
  packets of ms ``k`` evenly over ``[k, k+1)`` ms: rate = count x 1500 B / 1 ms. A period
  therefore carries exactly ``lines x 1500`` bytes, as mahimahi delivers.
* **CSV** (``*.csv``): ``time_s, mbps`` rows (an optional header line, ``#`` comments), times
  strictly increasing from 0; the rate ``mbps`` holds from ``time_s`` to the next row's time; the
  last row's time is the period (its rate is not used), and the trace loops.

**Gilbert-Elliott.** A two-state Markov chain over consecutive packet transmissions: in state
*good* a packet is lost with ``loss_good``, in *bad* with ``loss_bad``; after each packet the chain
moves good -> bad with ``p_good_bad`` and bad -> good with ``p_bad_good``. The stationary share of
*bad* is ``p_good_bad / (p_good_bad + p_bad_good)`` and :attr:`GilbertElliott.mean_loss` is the
loss averaged over it. Sampling is per packet from a caller's ``numpy.random.Generator``, each
transfer's chain starting from the stationary distribution.
"""

from __future__ import annotations

import copy
import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from aiotsim.errors import ConfigError
from aiotsim.inputfiles import MIB, read_input_text, resolve_input
from aiotsim.schema import MAX_MBPS, MAX_SECONDS, MIN_MBPS

MAHIMAHI_PACKET_BYTES = 1500  # bytes per delivery opportunity (mahimahi's MTU-sized packet)
MS = 1e-3  # s per ms
BYTES_PER_MBPS = 1e6 / 8.0  # bytes/s per Mbit/s
# Time snapping: a time within this of a segment boundary counts as on it (the engine's timers land
# on boundaries up to float rounding of ``now + delay``). 1 ns; widened to a few ulps of large t.
SNAP_S = 1e-9
MAX_PERIOD_MS = int(MAX_SECONDS / MS)  # a Mahimahi timestamp's bound, ms: the longest period
# The most bytes a trace file may hold: 32 MiB is about 4 million Mahimahi lines, an hour of a
# 13 Mbit/s link at one line per 1,500-byte packet (mahimahi's own cellular traces are a few hundred
# KB); parsing it takes a few seconds and the lines' Python ints a few hundred MB.
MAX_TRACE_FILE_BYTES = 32 * MIB
# The most segments a loaded trace may hold, as written or in trace_resolution_ms's windows:
# 2 million are about 33 min of 1 ms windows, ~200 MB while averaged (about 12 float64 arrays).
MAX_TRACE_SEGMENTS = 2_000_000
TRACE_FORMATS = "a trace is a Mahimahi file (ms per line) or a 'time_s, mbps' .csv"
TRACE_PATHS = (
    "a path in a scenario file is relative to that file's directory, one given with --set to the working directory"
)


class RateTrace:
    """A looping piecewise-constant rate (bytes/s), seen from an offset.

    Parameters
    ----------
    starts : sequence of float
        Local start time of each segment, s: ``starts[0] == 0``, strictly increasing.
    rates : sequence of float
        Rate of each segment, bytes/s, >= 0 (0: the link carries nothing then); not all 0.
    period_s : float
        Loop length, s, > ``starts[-1]``.
    offset_s : float
        Local time at absolute time 0, s (``local = (t + offset_s) mod period_s``).
    source : str
        Where the trace came from (a file name), for messages and equality.

    Notes
    -----
    Adjacent segments of equal rate are merged, so every boundary but possibly the loop boundary is
    a real change of rate.
    """

    def __init__(
        self, starts: Sequence[float], rates: Sequence[float], period_s: float, offset_s: float = 0.0, source: str = ""
    ) -> None:
        b = np.asarray(starts, dtype=float)
        r = np.asarray(rates, dtype=float)
        problems = _shape_problems(b, r, period_s, offset_s)
        if problems:
            raise ConfigError([f"RateTrace {source or '<trace>'}: {p}" for p in problems])
        keep = np.ones(b.size, dtype=bool)
        keep[1:] = r[1:] != r[:-1]  # merge runs of equal rate
        self.starts = b[keep]  # [segments] s
        self.rates = r[keep]  # [segments] bytes/s
        self.period_s = float(period_s)
        self.offset_s = float(offset_s) % self.period_s
        self.source = source
        ends = np.append(self.starts[1:], self.period_s)
        self._cum = np.concatenate([[0.0], np.cumsum(self.rates * (ends - self.starts))])  # [segments + 1] bytes
        self.period_bytes = float(self._cum[-1])  # bytes per loop

    # ---------------------------------------------------------------- derived traces
    def shifted(self, offset_s: float) -> RateTrace:
        """The same trace seen from local time ``offset_s`` at absolute time 0 (shares the
        segment arrays: a fleet replaying one trace holds it once)."""
        if not math.isfinite(offset_s):
            raise ConfigError(f"RateTrace {self.source}: offset_s(={offset_s}) must be finite")
        out = copy.copy(self)
        out.offset_s = float(offset_s) % self.period_s
        return out

    def scaled(self, factor: float) -> RateTrace:
        """The trace with every rate multiplied by ``factor`` (> 0), same offset."""
        if not factor > 0 or not math.isfinite(factor):
            raise ConfigError(f"RateTrace {self.source}: scale factor(={factor}) must be > 0")
        return RateTrace(self.starts, self.rates * factor, self.period_s, self.offset_s, self.source)

    def coarsened(self, window_s: float) -> RateTrace:
        """The trace averaged over windows of ``window_s`` (local time from 0; the last window
        may be shorter): each window carries exactly the bytes it carried before, so transfers
        spanning whole windows end as before, and the engine wakes at most once per window."""
        if not window_s > 0 or not math.isfinite(window_s):
            raise ConfigError(f"RateTrace {self.source}: window_s(={window_s}) must be > 0")
        n = max(1, math.ceil(self.period_s / window_s - 1e-9))
        edges = np.minimum(np.arange(n + 1) * window_s, self.period_s)  # [windows + 1] s
        edges[-1] = self.period_s
        k = np.clip(np.searchsorted(self.starts, edges, side="right") - 1, 0, self.starts.size - 1)
        cum = self._cum[k] + self.rates[k] * (edges - self.starts[k])  # [windows + 1] bytes
        cum[-1] = self.period_bytes
        rates = np.diff(cum) / np.diff(edges)  # [windows] bytes/s
        # A window inside one segment carries that segment's rate exactly, not the quotient's rounding
        # (1 ulp off), so the windows of a constant stretch merge again and the engine wakes only where
        # the rate changes: 1 us windows over a 1 s constant stretch were 1e6 segments (60 s of wall
        # time for a 2-iteration run) instead of one.
        last = np.searchsorted(self.starts, edges[1:], side="left") - 1  # segment holding each window's end
        inside = k[:-1] == last
        rates[inside] = self.rates[k[:-1][inside]]
        return RateTrace(edges[:-1], rates, self.period_s, self.offset_s, self.source)

    @property
    def mean_rate(self) -> float:
        """Average rate over one period, bytes/s."""
        return self.period_bytes / self.period_s

    # ---------------------------------------------------------------- exact queries
    def _local(self, t: float) -> tuple[float, float]:
        """``(loops, local time in [0, period))`` of absolute time ``t``."""
        loops, u = divmod(t + self.offset_s, self.period_s)
        return loops, u

    def _snap(self, t: float) -> float:
        """How close (s) below a boundary a time ``t`` counts as on it: 1 ns, or a few ulps."""
        return max(SNAP_S, 4.0 * math.ulp(abs(t) + self.period_s))

    def _segment(self, t: float) -> tuple[int, float]:
        """``(segment, absolute time of its loop's local 0)`` at time ``t``; a time just short of
        a boundary counts as on it (the engine's timers land there up to rounding)."""
        _, u = self._local(t)
        base = t - u
        snap = self._snap(t)
        if u + snap >= self.period_s:  # on the loop boundary: the next loop's first segment
            return 0, base + self.period_s
        return int(np.searchsorted(self.starts, u + snap, side="right")) - 1, base

    def rate_at(self, t: float) -> float:
        """Rate at absolute time ``t`` (s), bytes/s (right-continuous: a boundary takes the new rate)."""
        return float(self.rates[self._segment(t)[0]])

    def next_change(self, t: float) -> float:
        """The first absolute time after ``t`` (s, by more than the snapping tolerance) at which
        the rate changes; inf for a constant trace."""
        k, base = self._segment(t)
        n = self.starts.size
        later = t + self._snap(t)
        for j in range(k + 1, k + n + 2):  # at most one loop ahead; the loop boundary may not change
            boundary = base + (j // n) * self.period_s + self.starts[j % n]
            if self.rates[j % n] != self.rates[(j - 1) % n] and boundary > later:
                return float(boundary)
        return math.inf

    def _integral(self, t: float) -> float:
        """Bytes carried from local time 0 of loop 0 to absolute time ``t``."""
        loops, u = self._local(t)
        k = min(int(np.searchsorted(self.starts, u, side="right")) - 1, self.starts.size - 1)
        return loops * self.period_bytes + float(self._cum[k]) + float(self.rates[k]) * (u - float(self.starts[k]))

    def bytes_between(self, t0: float, t1: float) -> float:
        """Bytes the trace carries from ``t0`` to ``t1`` (s, ``t0 <= t1``): the integral of the rate."""
        if t1 < t0:
            raise ConfigError(f"bytes_between: t1(={t1}) must be >= t0(={t0})")
        return self._integral(t1) - self._integral(t0)

    def time_to_send(self, t0: float, nbytes: float) -> float:
        """The earliest time ``t1 >= t0`` (s) with ``bytes_between(t0, t1) == nbytes``.

        Parameters
        ----------
        t0 : float
            Start, s.
        nbytes : float
            Bytes to carry, >= 0.

        Returns
        -------
        float
            Absolute time (s) at which the integral of the rate from ``t0`` reaches ``nbytes``.
        """
        if nbytes < 0:
            raise ConfigError(f"time_to_send: nbytes(={nbytes}) must be >= 0")
        if nbytes == 0:
            return t0
        target = self._integral(t0) + nbytes  # bytes since loop 0's local 0
        loops = math.ceil(target / self.period_bytes) - 1  # the loop in which the target is reached
        rem = target - loops * self.period_bytes  # in (0, period_bytes]
        k = int(np.searchsorted(self._cum, rem, side="left")) - 1  # _cum[k] < rem <= _cum[k+1]
        k = min(max(k, 0), self.starts.size - 1)
        local = float(self.starts[k]) + (rem - float(self._cum[k])) / float(self.rates[k])
        return max(t0, loops * self.period_s + local - self.offset_s)

    # ---------------------------------------------------------------- identity
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RateTrace):
            return NotImplemented
        same_segments = self.starts is other.starts and self.rates is other.rates
        return (
            self.period_s == other.period_s
            and self.offset_s == other.offset_s
            and (same_segments or np.array_equal(self.starts, other.starts))
            and (same_segments or np.array_equal(self.rates, other.rates))
        )

    def __hash__(self) -> int:
        return hash((self.source, self.period_s, self.offset_s, self.starts.size, self.period_bytes))

    def __repr__(self) -> str:
        return (
            f"RateTrace({self.source!r}, {self.starts.size} segments, period {self.period_s:g} s, "
            f"mean {self.mean_rate * 8 / 1e6:.3f} Mbit/s, offset {self.offset_s:g} s)"
        )


def _shape_problems(b: np.ndarray, r: np.ndarray, period_s: float, offset_s: float) -> list[str]:
    out = []
    if b.ndim != 1 or r.shape != b.shape or b.size == 0:
        return [f"starts and rates must be two 1-D sequences of the same non-zero length, got {b.shape} and {r.shape}"]
    if b[0] != 0 or np.any(np.diff(b) <= 0) or not np.all(np.isfinite(b)):
        out.append("starts must begin at 0 and increase strictly")
    if not np.all(np.isfinite(r)) or np.any(r < 0) or not np.any(r > 0):
        out.append("rates must be finite, >= 0 and not all 0 (a transfer would never end)")
    if not math.isfinite(period_s) or period_s <= b[-1]:
        out.append(f"period_s(={period_s}) must be finite and > the last start (={b[-1]})")
    if not math.isfinite(offset_s):
        out.append(f"offset_s(={offset_s}) must be finite")
    return out


# ------------------------------------------------------------------------------------ parsing
def parse_mahimahi(lines: Sequence[str], source: str = "<mahimahi>") -> RateTrace:
    """A Mahimahi trace (one line per 1,500-byte delivery opportunity, ms) as a :class:`RateTrace`.

    Only the busy ms and the first ms of each idle gap become segments (a dense array of one
    entry per ms would take 8 bytes per ms of the period: 745 GiB for a 14-byte trace ending at
    1e11 ms); the result equals the dense one, whose equal neighbours :class:`RateTrace` merges.

    Parameters
    ----------
    lines : sequence of str
        The file's lines; blank lines are skipped.
    source : str
        File name, for messages.

    Raises
    ------
    ConfigError
        Naming the file and line of the first bad timestamp (not an integer >= 0 in ASCII digits,
        above :data:`MAX_PERIOD_MS`, or smaller than the line before), or an empty trace, or a
        trace whose last timestamp is 0. Messages never quote the line (a path may name any file).
    """
    stamps: list[int] = []
    for no, line in enumerate(lines, start=1):
        text = line.strip()
        if not text:
            continue
        if not (text.isascii() and text.isdigit()):  # str.isdigit alone takes '²', which int() refuses
            raise ConfigError(
                f"{source}:{no}: not a timestamp; a Mahimahi trace has one integer >= 0 "
                "(ms) per line, non-decreasing (use a .csv name for 'time_s, mbps' rows)"
            )
        if len(text) > len(str(MAX_PERIOD_MS)) or int(text) > MAX_PERIOD_MS:
            raise ConfigError(f"{source}:{no}: the timestamp is over {MAX_PERIOD_MS:,} ms ({MAX_SECONDS:g} s), the "
                              "longest trace period; shorten the trace")  # fmt: skip
        ms = int(text)
        if stamps and ms < stamps[-1]:
            raise ConfigError(f"{source}:{no}: timestamp {ms} ms is smaller than the line before ({stamps[-1]} ms); "
                              "timestamps must be non-decreasing")  # fmt: skip
        stamps.append(ms)
    if not stamps:
        raise ConfigError(f"{source}: empty trace; write one delivery time in ms per line (e.g. '1' .. '1000')")
    period_ms = stamps[-1]
    if period_ms == 0:
        raise ConfigError(
            f"{source}:{len(lines)}: the last timestamp is 0 ms; it is the trace's period and must be > 0"
        )
    busy, counts = np.unique(np.asarray(stamps, dtype=np.int64) % period_ms, return_counts=True)  # [busy ms]
    edges = np.union1d(np.union1d(busy, busy + 1), [0])  # every busy ms and the ms after each (idle or busy)
    edges = edges[edges < period_ms]  # [segments] ms
    packets = np.zeros(edges.size, dtype=np.int64)
    packets[np.searchsorted(edges, busy)] = counts
    return RateTrace(edges * MS, packets * MAHIMAHI_PACKET_BYTES / MS, period_ms * MS, source=source)


def parse_csv(lines: Sequence[str], source: str = "<csv>") -> RateTrace:
    """A ``time_s, mbps`` CSV trace (piecewise constant, the last row's time is the period).

    Raises
    ------
    ConfigError
        Naming the file and line of the first bad row (not two numbers, a negative rate, a time not
        increasing, a first time not 0, a time over :data:`~aiotsim.schema.MAX_SECONDS`), or a trace
        with fewer than two rows. Messages never quote a line that is not two numbers.
    """
    times: list[float] = []
    mbps: list[float] = []
    last_no = 0
    for no, line in enumerate(lines, start=1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        cells = [c.strip() for c in text.split(",")]
        try:
            t, m = (float(c) for c in cells) if len(cells) == 2 else (None, None)
        except ValueError:
            t = m = None
        if t is None or m is None:
            if not times and no == _first_content_line(lines) and not any(_is_number(c) for c in cells):
                continue  # a header row (no number in it)
            raise ConfigError(f"{source}:{no}: not a 'time_s, mbps' row of two numbers")
        why = _csv_row_problem(t, m, times)
        if why:
            raise ConfigError(f"{source}:{no}: {why}")
        times.append(t)
        mbps.append(m)
        last_no = no
    if len(times) < 2:
        raise ConfigError(
            f"{source}: a CSV trace needs at least two 'time_s, mbps' rows (the last row's time is the period), "
            f"got {len(times)}"
        )
    if not any(m > 0 for m in mbps[:-1]):
        raise ConfigError(f"{source}:{last_no}: every rate is 0 Mbit/s; a transfer would never end")
    return RateTrace(times[:-1], np.asarray(mbps[:-1]) * BYTES_PER_MBPS, times[-1], source=source)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _first_content_line(lines: Sequence[str]) -> int:
    return next((no for no, line in enumerate(lines, 1) if line.split("#", 1)[0].strip()), 0)


def _csv_row_problem(t: float, m: float, times: list[float]) -> str | None:
    if not math.isfinite(t) or not math.isfinite(m):
        return f"time_s and mbps must be finite numbers, got {t}, {m}"
    if m < 0:
        return f"mbps(={m}) must be >= 0"
    if m > MAX_MBPS:  # 1e300 Mbit/s overflowed a period's bytes to inf: validate said ok, run refused the link
        return f"mbps(={m:g}) is over {MAX_MBPS:g} Mbit/s, the fastest link allowed (as for uplink_mbps)"
    if not times and t != 0:
        return f"the first row's time_s must be 0, got {t}"
    if times and t <= times[-1]:
        return f"time_s(={t}) must be greater than the row before's (={times[-1]})"
    if t > MAX_SECONDS:
        return f"time_s(={t:g}) is over {MAX_SECONDS:g} s, the longest trace period; shorten the trace"
    return None


def load_trace(path: str | Path, resolution_s: float = 0.0) -> RateTrace:
    """Read a trace file: ``*.csv`` as ``time_s, mbps`` rows, anything else as Mahimahi.

    With ``resolution_s`` > 0 the trace is averaged over windows of that length
    (:meth:`RateTrace.coarsened`). Parsed traces are cached per process by resolved path, size,
    modification time and resolution. The scenario check (:mod:`aiotsim.config`) and the run both
    call this with the scenario's resolution, so a trace the check accepts, the run can build.

    Raises
    ------
    ConfigError
        A missing or unreadable path, not a regular file (a FIFO, a device, a directory), over
        :data:`MAX_TRACE_FILE_BYTES`, not UTF-8, malformed, a mean rate under
        :data:`~aiotsim.schema.MIN_MBPS`, or more than :data:`MAX_TRACE_SEGMENTS` windows at
        ``resolution_s``: naming the file (and line) and the fix, never quoting its content.
    """
    resolved, st = resolve_input(path, "trace", TRACE_FORMATS, TRACE_PATHS)
    if not (resolution_s >= 0 and math.isfinite(resolution_s)):
        raise ConfigError(f"{resolved}: trace resolution(={resolution_s} s) must be finite and >= 0")
    return _load_cached(str(resolved), st.st_size, st.st_mtime_ns, float(resolution_s))


@functools.lru_cache(maxsize=64)
def _load_cached(path: str, size: int, mtime_ns: int, resolution_s: float) -> RateTrace:
    """The trace at ``resolution_s`` (0: as written), refused over :data:`MAX_TRACE_SEGMENTS`."""
    trace = _parsed(path, size, mtime_ns)
    period = trace.period_s
    segments = math.ceil(period / resolution_s - 1e-9) if resolution_s > 0 else trace.starts.size
    if segments > MAX_TRACE_SEGMENTS:
        what = (
            f"network.trace_resolution_ms = {resolution_s / MS:g} splits its {period:g} s period into "
            f"{segments:,} windows"
            if resolution_s > 0
            else f"it changes rate {segments:,} times in its {period:g} s period"
        )
        as_written = " (or 0: the trace as written)" if trace.starts.size <= MAX_TRACE_SEGMENTS else ""
        raise ConfigError(
            f"{path}: {what}, more than the {MAX_TRACE_SEGMENTS:,} segments a trace may hold; set "
            f"network.trace_resolution_ms >= {period / MAX_TRACE_SEGMENTS / MS:.6g}{as_written}"
        )
    return trace.coarsened(resolution_s) if resolution_s > 0 else trace


@functools.lru_cache(maxsize=16)
def _parsed(path: str, size: int, mtime_ns: int) -> RateTrace:
    """The trace file parsed as written (``size`` and ``mtime_ns``: cache keys only), refused when
    its mean rate is under :data:`~aiotsim.schema.MIN_MBPS` or a rate over
    :data:`~aiotsim.schema.MAX_MBPS` (as constant links are)."""
    text = read_input_text(path, "trace", MAX_TRACE_FILE_BYTES, TRACE_FORMATS)
    parse = parse_csv if Path(path).suffix.lower() == ".csv" else parse_mahimahi
    trace = parse(text.splitlines(), source=path)
    peak_mbps = float(trace.rates.max()) / BYTES_PER_MBPS
    if peak_mbps > MAX_MBPS:  # a Mahimahi file with ~83,000 lines in one ms (CSV rows are checked one by one)
        raise ConfigError(
            f"{path}: the trace reaches {peak_mbps:.3g} Mbit/s, over the fastest link allowed ({MAX_MBPS:g} Mbit/s, "
            "as for uplink_mbps)"
        )
    mean_mbps = trace.mean_rate / BYTES_PER_MBPS
    if mean_mbps < MIN_MBPS:
        raise ConfigError(
            f"{path}: the trace carries {mean_mbps:.3g} Mbit/s on average over its {trace.period_s:g} s period, "
            f"under the slowest link allowed ({MIN_MBPS:g} Mbit/s, as for uplink_mbps: slower links run for hours "
            "and overflow the simulated time); give it more delivery opportunities or a shorter period"
        )
    return trace


# ------------------------------------------------------------------------------------ loss
@dataclass(frozen=True)
class GilbertElliott:
    """Two-state (good/bad) bursty packet loss.

    Parameters
    ----------
    p_good_bad : float
        Chance per packet of moving from good to bad, in (0, 1].
    p_bad_good : float
        Chance per packet of moving from bad to good, in (0, 1].
    loss_good, loss_bad : float
        Loss probability of a packet sent in each state, [0, 1); the defaults make the classic
        Gilbert model (lossless good state, bad state losing everything but a little).
    """

    p_good_bad: float = 0.01
    p_bad_good: float = 0.3
    loss_good: float = 0.0
    loss_bad: float = 0.5

    def __post_init__(self) -> None:
        problems = []
        for name in ("p_good_bad", "p_bad_good"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and 0 < v <= 1):
                problems.append(f"{name}(={v!r}) must be in (0, 1]")
        for name in ("loss_good", "loss_bad"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and 0 <= v < 1):
                problems.append(f"{name}(={v!r}) must be in [0, 1)")
        if problems:
            raise ConfigError([f"GilbertElliott: {p}" for p in problems])

    @property
    def bad_share(self) -> float:
        """Stationary probability of the bad state."""
        return self.p_good_bad / (self.p_good_bad + self.p_bad_good)

    @property
    def mean_loss(self) -> float:
        """Long-run fraction of packets lost."""
        return (1.0 - self.bad_share) * self.loss_good + self.bad_share * self.loss_bad

    def mask(self, n_packets: int, rng: np.random.Generator) -> np.ndarray:
        """Per-packet loss of ``n_packets`` consecutive transmissions (True = lost), the chain
        starting from its stationary distribution. Shape ``[n_packets]``."""
        if n_packets <= 0:
            return np.zeros(0, dtype=bool)
        bad = self._states(n_packets, rng)  # [n] True in the bad state
        p = np.where(bad, self.loss_bad, self.loss_good)
        return rng.random(n_packets) < p

    def lost(self, n_packets: int, rng: np.random.Generator) -> int:
        """How many of ``n_packets`` consecutive transmissions are lost (seeded by ``rng``)."""
        return int(self.mask(n_packets, rng).sum())

    def _states(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``[n]`` chain states (True = bad) from sojourn times: geometric runs in each state."""
        out = np.empty(n, dtype=bool)
        state = bool(rng.random() < self.bad_share)
        i = 0
        while i < n:
            p_leave = self.p_bad_good if state else self.p_good_bad
            run = int(rng.geometric(p_leave))  # packets sent before the chain leaves the state
            out[i : i + run] = state
            i += run
            state = not state
        return out


def retransmitted_packets(models: Sequence[GilbertElliott], n_packets: int, rng: np.random.Generator) -> int:
    """Losses before ``n_packets`` packets all get through a path of Gilbert-Elliott links.

    Every lost packet is sent again; the links' chains run on over the retransmissions (simulated
    in batches of twice the packets still missing; should a batch not suffice, the next one's
    chains start again from the stationary distribution), and a transmission is lost when any
    link loses it (independent chains). Returns the number of lost transmissions
    (= retransmissions): the sender transmits ``n_packets + result`` packets.
    """
    if n_packets <= 0 or not models:
        return 0
    lost_total, delivered = 0, 0
    while delivered < n_packets:
        chunk = 2 * (n_packets - delivered) + 16  # transmissions simulated in this batch
        lost = np.zeros(chunk, dtype=bool)
        for model in models:
            lost |= model.mask(chunk, rng)
        ok = np.cumsum(~lost)  # [chunk] deliveries so far
        need = n_packets - delivered
        if ok[-1] >= need:
            last = int(np.searchsorted(ok, need))  # index of the transmission delivering the last packet
            return lost_total + int(lost[: last + 1].sum())
        lost_total += int(lost.sum())
        delivered += int(ok[-1])
    return lost_total  # pragma: no cover - the loop returns
