"""Max-min fair rates by progressive filling: the reference allocation of the flow engine.

:class:`aiotsim.network.rates.RateClasses` keeps these rates incrementally; the functions here
compute them from scratch (tests compare the two, and :func:`max_min_rates` is the readable
statement of what "max-min fair" means here).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import TypeVar

import numpy as np

from aiotsim.errors import ConfigError

K = TypeVar("K", bound=Hashable)


def max_min_rates(capacity: Mapping[str, float], usage: Mapping[K, Mapping[str, int]]) -> dict[K, float]:
    """Max-min fair rates by progressive filling.

    Parameters
    ----------
    capacity : mapping of str to float
        Capacity of each link (any unit, e.g. bytes/s), > 0.
    usage : mapping of flow key to (mapping of link name to int)
        The links each flow crosses and how many times (a flow crossing a link twice uses twice its
        rate there). Every flow must cross at least one link.

    Returns
    -------
    dict
        Rate of each flow, in the unit of ``capacity``.

    Examples
    --------
    >>> max_min_rates({"a": 10.0, "b": 4.0}, {"x": {"a": 1}, "y": {"a": 1, "b": 1}, "z": {"b": 1}})
    {'x': 8.0, 'y': 2.0, 'z': 2.0}
    """
    names = list(capacity)
    index = {name: i for i, name in enumerate(names)}
    flows = list(usage)
    width = max((len(usage[f]) for f in flows), default=1)
    links = np.full((len(flows), width), len(names), dtype=np.intp)  # [flows, hops]; pad = dummy
    mults = np.zeros((len(flows), width))  # [flows, hops]
    for row, flow in enumerate(flows):
        if not usage[flow]:
            raise ConfigError(f"flow {flow!r} crosses no link")
        for col, (name, mult) in enumerate(usage[flow].items()):
            links[row, col] = index[name]
            mults[row, col] = mult
    cap = np.append(np.array([capacity[n] for n in names], dtype=float), np.inf)
    rates = progressive_filling(cap, links, mults)
    return {flow: float(rate) for flow, rate in zip(flows, rates, strict=True)}


def progressive_filling(cap: np.ndarray, links: np.ndarray, mults: np.ndarray) -> np.ndarray:
    """Max-min fair rates, vectorized.

    Parameters
    ----------
    cap : ndarray, shape [links + 1]
        Capacities (e.g. bytes/s); the last entry is a dummy link of infinite capacity used as
        padding.
    links : ndarray of int, shape [flows, hops]
        Link index of each hop of each flow (padding: the dummy index).
    mults : ndarray of float, shape [flows, hops]
        How many times the flow crosses that link (0 for padding).

    Returns
    -------
    ndarray, shape [flows]
        Rates in the unit of ``cap``. All unfrozen flows rise together to the level at which the
        first link fills, ``(cap - used) / weight``; flows through the full link(s) are frozen at
        that level; repeat. One iteration per distinct bottleneck level.
    """
    n_flows, hops = links.shape
    n_links = cap.shape[0]
    flat = links.ravel()  # [flows * hops]
    flat_mult = mults.ravel()
    real = mults > 0  # [flows, hops]
    rates = np.zeros(n_flows)
    used = np.zeros(n_links)  # capacity taken by frozen flows
    unfrozen = np.ones(n_flows, dtype=bool)
    level = 0.0
    while unfrozen.any():
        weight = np.bincount(flat, np.repeat(unfrozen, hops) * flat_mult, minlength=n_links)
        fill = np.divide(cap - used, weight, out=np.full(n_links, np.inf), where=weight > 0)
        level = max(level, float(fill.min()))
        full = fill <= level * (1.0 + 1e-12)  # [links]
        hit = unfrozen & (full[links] & real).any(axis=1)
        rates[hit] = level
        used += np.bincount(flat, np.repeat(hit * level, hops) * flat_mult, minlength=n_links)
        unfrozen &= ~hit
    return rates
