"""Pages of their own for the per-node state that lives through a run (CPU).

A fleet's bulk is per-node, model-sized state kept between rounds: momentum velocities, error-
feedback residuals, a codec's own momentum (10,000 LeNet-5 nodes: 2.5 GB per kind). Each is
allocated once, at the node's first step, and updated in place afterwards. From glibc's heap,
those first allocations land between the step's temporaries and the messages in flight; when
those are freed the state pins the holes around it, and every later round's messages take fresh
heap. Measured on ``iot10k.toml`` with 2,000 nodes, ``none``, streamed aggregation, 3 rounds: the
peak resident memory climbed 1.70, 2.23, 2.62 GB with the same live tensors (1.0 GB); with the
velocities here it was 1.52, 1.54, 1.54 GB.

:class:`StatePages` is a bump allocator over anonymous ``mmap`` slabs of :data:`SLAB_BYTES`: a
held tensor is a view into a slab, 64-byte aligned, and stays there for the life of the pages
(the state of a node lives as long as the run). The values do not change, only where they live,
so results are bit-identical. CUDA tensors are left to PyTorch's caching allocator.
"""

from __future__ import annotations

import mmap

import torch

SLAB_BYTES = 64 << 20  # B; one mapping per slab keeps a 10,000-node fleet at ~100 mappings
ALIGN = 64  # B; a cache line, and a multiple of every dtype's size


class StatePages:
    """Slabs of anonymous pages holding long-lived CPU tensors (see the module docstring)."""

    def __init__(self, slab_bytes: int = SLAB_BYTES) -> None:
        self.slab_bytes = slab_bytes
        self.slabs = 0  # slabs mapped so far
        self.held_bytes = 0  # B handed out (aligned)
        self._slab: torch.Tensor | None = None  # uint8 view of the current slab
        self._used = 0  # B of the current slab handed out
        self._starts: set[int] = set()  # data_ptr of every block (and row of hold_rows) handed out

    def hold(self, t: torch.Tensor) -> torch.Tensor:
        """``t`` itself when it lives in these pages (or is empty, or not a CPU tensor), else a
        contiguous copy of it (same dtype, shape and values) that does."""
        if t.device.type != "cpu" or t.numel() == 0 or self.holds(t):
            return t
        block = self._take(t.numel() * t.element_size())
        out = block.view(t.dtype).view(t.shape)
        out.copy_(t)
        return out

    def hold_rows(self, t: torch.Tensor) -> torch.Tensor:
        """A contiguous copy of ``t`` (``[rows, ...]``, CPU) in these pages, one block, each of
        whose rows :meth:`holds` too: the state of a pass's nodes stored together, so that one
        operation per layer updates every node's row (:func:`aiotsim.sim.storage.step_pass_velocity`)."""
        out = self.hold(t)
        row_bytes = out[0].numel() * out.element_size() if out.shape[0] else 0
        start = out.data_ptr()
        self._starts.update(start + k * row_bytes for k in range(out.shape[0]))
        return out

    def holds(self, t: torch.Tensor) -> bool:
        """Whether ``t`` is a block handed out by :meth:`hold`, or a row of one from :meth:`hold_rows`
        (contiguous, from its start)."""
        return t.data_ptr() in self._starts and t.is_contiguous()

    def _take(self, nbytes: int) -> torch.Tensor:
        """``nbytes`` of fresh pages (a uint8 view), from the current slab or a new one; a block
        larger than a slab gets a slab of its own."""
        size = max(ALIGN, -(-nbytes // ALIGN) * ALIGN)
        if self._slab is None or self._used + size > self._slab.numel():
            self._slab = torch.frombuffer(_anonymous(max(size, self.slab_bytes)), dtype=torch.uint8)
            self._used = 0
            self.slabs += 1
        block = self._slab[self._used : self._used + nbytes]
        self._used += size
        self.held_bytes += size
        self._starts.add(block.data_ptr())
        return block


def _anonymous(nbytes: int) -> mmap.mmap:
    """``nbytes`` of private anonymous pages (Python's default for ``fileno=-1`` is a shared
    mapping: shmem-backed, dearer to fault in, and never huge pages)."""
    return mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)


__all__ = ["ALIGN", "SLAB_BYTES", "StatePages"]
