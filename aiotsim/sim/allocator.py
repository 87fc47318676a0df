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
aggregation calls :func:`trim_heap` once per result (per round at the server, per gateway
aggregate): the free pages left between rounds go back to the system and nothing global changes.
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
from typing import Any


@functools.cache
def _malloc_trim() -> Any:
    """glibc's ``malloc_trim``, looked up once (``find_library`` runs a subprocess); None without glibc."""
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


def trim_heap() -> bool:
    """Return the free pages of the C heap to the system (glibc ``malloc_trim(0)``, which also
    releases whole free pages inside the heap); ``False`` where there is no glibc."""
    trim = _malloc_trim()
    return bool(trim(0)) if trim is not None else False


# gradients between trims within a round of a streamed (fleet) run (see aiotsim.sim.heartbeat)
TRIM_EVERY = 1_000

__all__ = ["trim_heap", "TRIM_EVERY"]
