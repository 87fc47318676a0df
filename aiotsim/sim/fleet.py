"""The fleet's per-node state, created for a node when it first takes part.

A federated fleet may register 100,000 nodes of which 100 train in a round. Building every node's
:class:`~aiotsim.sim.world.NodeState` up front (a data stream, codec states, an RNG, an energy
meter) would make the run cost scale with the fleet. :class:`NodeTable` builds a node's state on
first access instead and remembers it; iterating it visits only the nodes built so far, in index
order (a node never built was never busy, never dispatched and holds no codec state).

The other modes build every node at once (``eager``), in index order, exactly as before, so their
results do not change.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class NodeTable(Generic[T]):
    """Node states by index, built by ``make(i)`` on first access.

    Parameters
    ----------
    n : int
        Registered nodes (valid indices ``0..n-1``).
    make : callable
        Builds node ``i``'s state.
    eager : bool
        Build every node now, in index order.
    """

    def __init__(self, n: int, make: Callable[[int], T], eager: bool = True) -> None:
        self.n = n
        self._make = make
        self._built: dict[int, T] = {}
        self._all: list[T] | None = None  # eager: every node, in index order
        if eager:
            self._all = [make(i) for i in range(n)]
            self._built = dict(enumerate(self._all))

    def __getitem__(self, i: int) -> T:
        st = self._built.get(i)
        if st is None:
            if not 0 <= i < self.n:
                raise IndexError(f"node {i} out of range 0..{self.n - 1}")
            st = self._built[i] = self._make(i)
        return st

    def __iter__(self) -> Iterator[T]:
        """The nodes built so far, in index order."""
        if self._all is not None:
            return iter(self._all)
        return iter([self._built[i] for i in self.built_indices()])

    def __len__(self) -> int:
        """Registered nodes."""
        return self.n

    def built_indices(self) -> list[int]:
        """Indices of the nodes built so far, in order (what :meth:`__iter__` visits)."""
        return sorted(self._built)

    @property
    def built(self) -> int:
        """How many nodes have state (the cost a run has paid for its fleet)."""
        return len(self._built)


__all__ = ["NodeTable"]
