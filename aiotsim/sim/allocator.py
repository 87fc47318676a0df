"""Keep the C heap from growing with freed tensors on large fleets (glibc only).

glibc's malloc raises its mmap threshold each time a large block is freed (up to 32 MB), so after
the first round the model-sized tensors of a fleet (LeNet-5: 192 KB for ``fc1.weight``) come from
the heap instead of their own mappings. Messages, gradients and velocities are allocated and freed
interleaved, node after node, so the freed holes cannot be given back: measured on iot10k's data
with 2,000 nodes and ``none``, the peak resident memory grew from 1.75 GB to 2.54 GB in the second
round with the same live tensors (1.22 GB), and a 10,000-node run passed 12.7 GB in its second
round. Pinning the mmap threshold at 128 KB (``mallopt``) avoided that but is process-wide and
permanent: every later allocation of more than 128 KB in the process became its own mapping, which
made a test session that had run one streamed fleet several times slower. Instead, a streamed
run's :class:`HeapTrimmer` is asked at each aggregation's result (per round at the server, per
gateway aggregate) and every :data:`TRIM_EVERY` gradients: the free pages go back to the system
when the resident memory has set a new high, and nothing global changes.
Measured with 2,000 nodes on iot10k's data, 3 rounds (after nodes stopped copying their shards):
3.08 GB peak with neither, 3.07 GB pinned, 3.06 GB trimmed; the 10,000 x 20 run is in iot10k.toml.
The results do not change (memory placement only). What made a 10,000-node run grow round after
round was the per-node state allocated from the heap at the first step; it now lives in pages of
its own (:mod:`aiotsim.sim.pages`): the 10,000 x 20 run peaked at 6.5 GB instead of 10.7 GB.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
from collections.abc import Callable
from typing import Any

from aiotsim.errors import ConfigError

TRIM_MARGIN_BYTES = 64 << 20  # B of resident growth past the last trim before the next one


# glibc's mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
# What the aiotsim command sets (keep_freed_blocks): blocks up to glibc's largest mmap threshold
# on 64-bit come from the heap, B ...
COMMAND_MMAP_THRESHOLD = 32 << 20
# ... and up to this much free memory at the heap's top stays there, B
COMMAND_TRIM_THRESHOLD = 1 << 30
# "default": glibc's own policy in the aiotsim command; "keep" (or unset): keep_freed_blocks
MALLOC_ENV = "AIOTSIM_MALLOC"


@functools.cache
def _malloc_trim() -> Any:
    """glibc's ``malloc_trim``, looked up once (``find_library`` runs a subprocess); None without glibc."""
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


def keep_freed_blocks(mallopt: Callable[[int, int], int] | None = None, environ: Any = None) -> bool:
    """Let the freed blocks of a round be the next round's memory, for a process that runs
    simulations (the ``aiotsim`` command calls this first; the library leaves its host process's
    allocator alone). Returns whether it changed anything.

    glibc serves a block above its mmap threshold (128 KB at first, raised to the largest block
    freed so far) from a mapping of its own, and gives the heap's free top back to the system above
    twice that: a fleet's rounds allocate and free hundreds of MB of messages, gradients and pass
    temporaries, so every round faulted fresh, zeroed pages in again. With blocks up to 32 MiB
    from the heap and up to 1 GiB of free top kept: iot100 ``none`` x 10, 7.4-7.7 -> 6.6-7.0 s
    (670,000-890,000 -> 170,000-214,000 page faults); ``topk`` 8.2-8.4 -> 7.3-7.6 s, peak 650 ->
    695-700 MB; iot1000 ``topk`` x 3, 10.2-10.3 -> 9.4-9.9 s; iot10k ``none`` x 3, 126.2 -> 108.5
    s (system time 26.4 -> 9.4 s), peak 6.18 -> 6.13 GB; iot10 unchanged in time, peak 524 ->
    540-552 MB (iot10k through the command, the others with glibc's ``MALLOC_MMAP_THRESHOLD_`` /
    ``MALLOC_TRIM_THRESHOLD_`` at 32 MiB / 4 GB, which set the same). Results do not change
    (memory placement only; torch aligns every tensor to 64 bytes either way). A streamed run's
    :class:`HeapTrimmer` still gives free pages back when the resident memory sets a new high
    (``malloc_trim`` ignores the trim threshold).

    Nothing is changed without glibc, where ``$AIOTSIM_MALLOC`` is ``default``, or where the
    user set glibc's own ``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_`` or
    ``MALLOC_TOP_PAD_`` (theirs stand). Another value of ``$AIOTSIM_MALLOC`` than ``default`` or
    ``keep`` raises :class:`ConfigError`. ``mallopt`` and ``environ`` are injected by tests.
    """
    environ = os.environ if environ is None else environ
    choice = environ.get(MALLOC_ENV, "").strip().lower()
    if choice not in ("", "keep", "default"):
        raise ConfigError(
            f"{MALLOC_ENV}={environ[MALLOC_ENV]!r}: must be 'default' (glibc's own heap policy) or 'keep' "
            "(a round's freed blocks kept for the next, the default); unset it or set one of those"
        )
    if choice == "default":
        return False
    if any(k in environ for k in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_")):
        return False
    if mallopt is None:
        mallopt = _mallopt()
        if mallopt is None:
            return False
    # mallopt returns 1 on success; both are set (either one ends glibc's own adjustment for good)
    mapped = mallopt(_M_MMAP_THRESHOLD, COMMAND_MMAP_THRESHOLD)
    trimmed = mallopt(_M_TRIM_THRESHOLD, COMMAND_TRIM_THRESHOLD)
    return bool(mapped) and bool(trimmed)


def _mallopt() -> Any:
    """glibc's ``mallopt`` from the process's own symbols (no library search, which runs a
    subprocess), or None without glibc."""
    try:
        return ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return None


def trim_heap() -> bool:
    """Return the free pages of the C heap to the system (glibc ``malloc_trim(0)``, which also
    releases whole free pages inside the heap); ``False`` where there is no glibc."""
    trim = _malloc_trim()
    return bool(trim(0)) if trim is not None else False


def resident_bytes() -> int | None:
    """Resident memory of this process now, bytes (``/proc/self/statm``); None where unreadable."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


class HeapTrimmer:
    """Trims the C heap only when the process's resident memory has set a new high.

    A trim gives back every free page of the heap, including those the next round's messages would
    have reused: those pages are faulted in and zeroed again. A sync fleet frees its messages in
    flight at every round's end and allocates as many the next round, so a trim each round cost a
    re-fault of all of them (3,000 nodes, ``none``, 3 rounds, streamed: 745,000 minor faults and 3.7
    s of system time; trimming on a new high: 388,000 and 1.9 s, the same 2,033 MB peak; never
    trimming: 386,000). What a trim is for is the peak: free pages matter only when the resident
    memory would otherwise climb past what the run has already held. So :meth:`maybe_trim` trims
    when the resident memory exceeds the level at the last trim by more than ``margin`` bytes (the
    first call always trims), and a run whose rounds reuse their memory stops trimming once its
    first round has set the level.

    Parameters
    ----------
    margin : int
        Bytes of growth above the last trim's level before the next trim (default 64 MB: one
        trim per 64 MB of growth at most, and no trim for a few pages of noise).
    rss, trim : callable
        The resident memory reader and the trim (injected by tests).
    """

    def __init__(
        self,
        margin: int = TRIM_MARGIN_BYTES,
        rss: Callable[[], int | None] = resident_bytes,
        trim: Callable[[], bool] = trim_heap,
    ) -> None:
        self.margin, self._rss, self._trim = margin, rss, trim
        self.level = -1  # B, resident memory when it last trimmed (-1: never)
        self.trims = 0

    def maybe_trim(self) -> bool:
        """Trim if the resident memory has grown more than ``margin`` past the last trim's level
        (or it is unknown); whether it trimmed."""
        rss = self._rss()
        if rss is not None and self.level >= 0 and rss <= self.level + self.margin:
            return False
        self.level = max(self.level, rss if rss is not None else 0)
        self.trims += 1
        self._trim()
        return True


# gradients between trims within a round of a streamed (fleet) run (see aiotsim.sim.heartbeat)
TRIM_EVERY = 1_000

__all__ = ["trim_heap", "resident_bytes", "keep_freed_blocks", "HeapTrimmer", "TRIM_EVERY", "TRIM_MARGIN_BYTES"]
