"""The scenario schema's bounds: the most a run is meant to handle, and the range checks shared by
its sections (:mod:`aiotsim.config_sections`, :mod:`aiotsim.config_network`), stated once here.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from aiotsim.schema import MAX_MBPS, MIN_MBPS, between

# ---- bounds: the most a run is meant to handle (stated in the help texts) -------------------------
MAX_SEED = 2**32 - 1  # numpy's and torch's seeds both take it
MAX_ITERATIONS = 1_000_000
MAX_NODES = 100_000
MAX_BATCH = 65_536
MAX_SAMPLES = 1_000_000  # synthetic train/test sizes, eval_samples
MAX_CLASSES = 1_000
MAX_SHAPE_SIDE = 1_024  # synthetic C, H and W
MAX_LR = 1_000.0
MAX_WEIGHT_DECAY = 1.0
MAX_NOISE = 1_000.0
MIN_RETRY_S = 1e-3
MAX_MS = 1e6  # 1000 s of latency, jitter
# The finest trace window, ms (1 us): a thousand times the engine's 1 ns time snapping (traces.SNAP_S), so a
# window is never snapped away; 5e-324 ms underflowed to a 0 s grid and divided by zero in the stagger.
MIN_RESOLUTION_MS = 1e-3
MAX_MTU = 65_535
MAX_FACTOR = 1e6  # straggler factor, group slowdown and share
MAX_ALPHA = 1e6
MAX_NAME = 100
MAX_LOCAL_STEPS = 100_000
MAX_LOCAL_EPOCHS = 1_000.0
MAX_OVERCOMMIT = 10.0
# Drop-tail buffers, packets of a link's MTU (default network.link.DEFAULT_QUEUE_PACKETS; the most: 150 MB of frames)
QUEUE_PACKETS = 1000
MAX_QUEUE_PACKETS = 100_000
SHARINGS = ("fifo", "fair")  # the flow engine's sharings (aiotsim.network.flows.SHARINGS)


def link_rate(v: Any) -> str | None:
    """Range check of a link rate in Mbit/s: MIN_MBPS..MAX_MBPS."""
    if v <= 0:
        return f"must be > 0, got {v!r}"
    if v < MIN_MBPS:
        return f"must be >= {MIN_MBPS:g} Mbit/s (slower links overflow the simulated time), got {v!r}"
    return None if v <= MAX_MBPS else f"must be <= {MAX_MBPS:g} (a sane upper bound), got {v!r}"


RATE = link_rate  # every link rate, Mbit/s


def auto_or_bool(v: Any) -> str | None:
    """Range check: ``"auto"``, ``true`` or ``false``."""
    return None if v is True or v is False or v == "auto" else f"must be 'auto', true or false, got {v!r}"


def path_safe_name(v: Any) -> str | None:
    """A name that is also a directory name: no path separators, control characters or leading dot."""
    if not v or len(v) > MAX_NAME:
        return f"must be 1..{MAX_NAME} characters, got {v!r}"
    if v[0] == "." or any(c in "/\\" or ord(c) < 32 or ord(c) == 127 for c in v):
        return (
            "must be a plain name usable as a directory name (no '/', '\\', leading '.' or "
            f"control characters), got {v!r}"
        )
    return None


def shape_sides(v: Any) -> str | None:
    """Range check of a ``[C, H, W]`` list: three sizes in 1..MAX_SHAPE_SIDE."""
    if len(v) != 3 or any(not 1 <= d <= MAX_SHAPE_SIDE for d in v):
        return f"must be [C, H, W] with every size in 1..{MAX_SHAPE_SIDE}, got {v!r}"
    return None


def trace_nodes_range(v: int | list[int]) -> str | None:
    """``scenario.trace_nodes``: a count in -1..MAX_NODES, or distinct node indices (each below
    nodes.count: checked with the node count, :func:`_timeline_problems`)."""
    if isinstance(v, int):
        return between(-1, MAX_NODES)(v)
    bad = next((i for i in v if not 0 <= i < MAX_NODES), None)
    if bad is not None:
        return f"node indices must be in [0, {MAX_NODES - 1}], got {bad!r}"
    twice = next((i for i, times in Counter(v).items() if times > 1), None)
    if twice is not None:
        return f"node {twice} is listed twice; name each node once"
    return None
