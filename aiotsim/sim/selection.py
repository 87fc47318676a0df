"""Client selection: which nodes train in a federated round.

:func:`select` takes ``want`` nodes uniformly at random among the *eligible* ones (online and not
still busy with an earlier round), without replacement, from the round's seeded generator. It
examines candidates in a uniformly random order and keeps the eligible ones until it has enough:
the kept set is then a uniform random subset of the eligible nodes, and the work is proportional
to the candidates examined (about ``want / eligible fraction``), not to the fleet. Checking a
candidate may step its availability chain, so only examined nodes move their chains (as in
FedScale, where a device is only asked when it is checked in).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

FIRST_DRAW = 16  # extra candidates in the first draw, beyond twice the wanted count


def select(rng: np.random.Generator, n: int, want: int, eligible: Callable[[int], bool]) -> list[int]:
    """Up to ``want`` distinct eligible nodes of ``0..n-1``, uniformly at random.

    Parameters
    ----------
    rng : numpy.random.Generator
        The selection's generator (seeded from the scenario).
    n : int
        Registered nodes.
    want : int
        Nodes wanted, >= 0.
    eligible : callable
        ``eligible(i)``: node ``i`` may take part now (called once per examined candidate).

    Returns
    -------
    list of int
        ``min(want, eligible nodes)`` nodes in the order drawn.
    """
    chosen: list[int] = []
    if want <= 0 or n <= 0:
        return chosen
    first = min(n, 2 * want + FIRST_DRAW)
    head = rng.choice(n, size=first, replace=False)  # a uniform random ordered prefix
    _scan(head, want, eligible, chosen)
    if len(chosen) < want and first < n:
        seen = np.zeros(n, dtype=bool)
        seen[head] = True
        _scan(rng.permutation(np.flatnonzero(~seen)), want, eligible, chosen)  # the rest, uniformly ordered
    return chosen


def _scan(candidates: np.ndarray, want: int, eligible: Callable[[int], bool], chosen: list[int]) -> None:
    for i in candidates.tolist():
        if len(chosen) >= want:
            return
        if eligible(i):
            chosen.append(i)


__all__ = ["select"]
