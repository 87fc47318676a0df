"""Partitions: which training samples each simulated node holds.

``iid``
    A seeded shuffle of all indices cut into ``n_nodes`` contiguous parts, equal in size or sized
    by ``shares``. Every node sees the global label distribution.
``dirichlet``
    Label skew as in Hsu, Qi and Brown, *Measuring the Effects of Non-Identical Data Distribution
    for Federated Visual Classification* (2019): for every class independently, the class's
    samples are divided across nodes in proportions drawn from ``Dir(alpha * 1)``. Small ``alpha``
    (0.1) gives nodes that hold mostly one or two classes; large ``alpha`` (100) approaches iid.
    With ``shares``, node i's proportion of every class is additionally weighted by ``shares[i]``,
    so nodes with more data stay larger on average.
``by-writer``
    For per-writer data (FEMNIST): every node holds whole writers, as in LEAF's federated setting.
    Writers are shuffled with the seed, then taken largest first (ties in shuffled order) and each
    given to the node whose sample count divided by its share is smallest (ties: lowest node), so
    every node gets at least one writer and the sizes follow ``shares``. Needs at least as many
    writers as nodes.

Every node gets at least one sample. For ``dirichlet`` an empty node takes one sample from the
currently largest node (the last index of its sorted shard); this is deterministic, changes the
class proportions by at most one sample per empty node, and always terminates (unlike re-drawing
until no node is empty, which can loop for a very long time at small ``alpha`` with many nodes).
The parts are disjoint, cover every index exactly once and are returned sorted. A fleet larger
than the training set cannot be partitioned (some node would hold nothing): :func:`partition`
refuses it and names the fix, :class:`SampledShards`.

Fleets larger than the data set (``data.samples_per_node > 0``): :class:`SampledShards`
    Every node draws its own shard of ``samples_per_node`` indices *with replacement* from the
    whole training set, from a generator seeded by ``(seed, node)``, when the node first takes
    part (so a 100,000-node fleet costs nothing for the nodes that never train). ``iid`` draws
    uniformly; ``dirichlet`` first draws the node's label proportions ``p ~ Dir(alpha * 1)``
    (Hsu et al.'s label skew, drawn per node instead of per class), then class counts
    ``~ Multinomial(samples_per_node, p)``, then each class's samples uniformly from that class.
    Shards overlap (two nodes may hold the same sample), as devices observing the same world do.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from aiotsim.errors import ConfigError, DataError

SCHEMES: tuple[str, ...] = ("iid", "dirichlet", "by-writer")
_TOO_MANY = (
    "nodes.count: {n_nodes} nodes but only {n} training samples, so a partition would leave nodes empty; "
    "set data.samples_per_node > 0 (every node draws its own shard with replacement)"
)


def partition(
    labels: torch.Tensor | np.ndarray,
    n_nodes: int,
    scheme: str = "iid",
    alpha: float = 0.5,
    seed: int = 0,
    shares: list[float] | None = None,
    writers: torch.Tensor | np.ndarray | None = None,
) -> list[np.ndarray]:
    """Split sample indices across nodes.

    Parameters
    ----------
    labels : torch.Tensor or numpy.ndarray
        ``[N]`` integer class labels of the training set.
    n_nodes : int
        Number of nodes (1 <= n_nodes <= N).
    scheme : {"iid", "dirichlet", "by-writer"}
        Partition scheme (see the module docstring).
    alpha : float
        Dirichlet concentration (> 0); ``dirichlet`` only.
    seed : int
        Seed of the partition's own ``numpy.random.Generator``.
    shares : list of float, optional
        Relative data share of each node (``n_nodes`` positive numbers, normalized here): part
        sizes (``iid``, ``by-writer``) or weights of the per-class proportions. ``None``: equal.
    writers : torch.Tensor or numpy.ndarray, optional
        ``[N]`` integer writer of every sample; ``by-writer`` only.

    Returns
    -------
    list of numpy.ndarray
        ``n_nodes`` sorted int64 index arrays, disjoint, together covering ``0..N-1``, none empty.

    Raises
    ------
    ConfigError
        Unknown scheme (valid names listed), ``alpha`` <= 0, malformed ``shares``.
    DataError
        ``n_nodes`` < 1 or > samples (or writers), ``labels`` not 1-D ints, ``by-writer`` without writers.
    """
    y = labels.detach().cpu().numpy() if isinstance(labels, torch.Tensor) else np.asarray(labels)
    if y.ndim != 1 or (y.size and not np.issubdtype(y.dtype, np.integer)):
        raise DataError(f"labels must be a 1-D integer array, got shape {y.shape} dtype {y.dtype}")
    n = int(y.size)
    if scheme not in SCHEMES:
        raise ConfigError(f"unknown partition scheme {scheme!r}; valid names: {', '.join(SCHEMES)}")
    if n_nodes < 1:
        raise DataError(f"n_nodes(={n_nodes}) must be >= 1")
    if n_nodes > n:
        raise ConfigError(_TOO_MANY.format(n_nodes=n_nodes, n=n))
    weights = _normalized_shares(shares, n_nodes)  # [n_nodes], sums to 1
    rng = np.random.default_rng(seed)
    if scheme == "iid":
        return _iid(n, weights, rng)
    if scheme == "by-writer":
        return _by_writer(_writer_ids(writers, n), weights, rng)
    if not (math.isfinite(alpha) and alpha > 0):
        raise ConfigError(f"alpha(={alpha}) must be a finite number > 0")
    return _dirichlet(y, weights, alpha, rng)


def _normalized_shares(shares: list[float] | None, n_nodes: int) -> np.ndarray:
    if shares is None:
        return np.full(n_nodes, 1.0 / n_nodes)
    w = np.asarray(shares, dtype=np.float64)
    if w.shape != (n_nodes,):
        raise ConfigError(f"shares has {w.size} entries, expected one per node (={n_nodes})")
    if not np.all(np.isfinite(w)) or np.any(w <= 0):
        raise ConfigError(f"shares(={list(shares)}) must all be finite and > 0")
    return w / w.sum()


def _iid(n: int, weights: np.ndarray, rng: np.random.Generator) -> list[np.ndarray]:
    """Shuffle, then cut into parts of sizes 1 + largest-remainder share of the other n - n_nodes."""
    k = weights.size
    sizes = 1 + _largest_remainder(weights, n - k)  # [k], sums to n, each >= 1
    perm = rng.permutation(n)
    bounds = np.cumsum(sizes)[:-1]
    return [np.sort(part).astype(np.int64) for part in np.split(perm, bounds)]


def _largest_remainder(weights: np.ndarray, total: int) -> np.ndarray:
    """Integer counts proportional to ``weights`` that sum exactly to ``total`` (Hamilton's method)."""
    exact = weights * total
    counts = np.floor(exact).astype(np.int64)
    rest = total - int(counts.sum())
    # Largest fractional parts first; ties broken by node index (stable sort) for determinism.
    order = np.argsort(-(exact - counts), kind="stable")
    counts[order[:rest]] += 1
    return counts


def _dirichlet(y: np.ndarray, weights: np.ndarray, alpha: float, rng: np.random.Generator) -> list[np.ndarray]:
    k = weights.size
    parts: list[list[np.ndarray]] = [[] for _ in range(k)]
    for c in np.unique(y):
        idx = rng.permutation(np.flatnonzero(y == c))
        p = rng.dirichlet(np.full(k, alpha)) * weights  # [k] proportions of class c
        p = p / p.sum() if p.sum() > 0 else weights  # Dir draws can underflow to all-zero at tiny alpha
        cuts = (np.cumsum(p)[:-1] * idx.size).astype(np.int64)
        for node, chunk in enumerate(np.split(idx, cuts)):
            parts[node].append(chunk)
    out = [np.sort(np.concatenate(p)).astype(np.int64) for p in parts]
    # Every node needs one sample: move the last index of the largest shard to each empty one.
    for node in range(k):
        if out[node].size == 0:
            donor = int(np.argmax([p.size for p in out]))
            out[node] = out[donor][-1:].copy()
            out[donor] = out[donor][:-1]
    return out


def _writer_ids(writers: torch.Tensor | np.ndarray | None, n: int) -> np.ndarray:
    """``writers`` as ``[n]`` int64, or a DataError saying the data set has no writers."""
    if writers is None:
        raise DataError("partition 'by-writer' needs per-writer data (dataset 'femnist'); this data set has no writers")
    w = writers.detach().cpu().numpy() if isinstance(writers, torch.Tensor) else np.asarray(writers)
    if w.shape != (n,) or (w.size and not np.issubdtype(w.dtype, np.integer)):
        raise DataError(f"writers must be [{n}] integers (one per sample), got shape {w.shape} dtype {w.dtype}")
    return w.astype(np.int64)


def _by_writer(w: np.ndarray, weights: np.ndarray, rng: np.random.Generator) -> list[np.ndarray]:
    """Whole writers per node: largest writer first to the node with the least data per share."""
    k = weights.size
    ids, sizes = np.unique(w, return_counts=True)  # [W] writer ids and their sample counts
    if ids.size < k:
        raise DataError(f"partition 'by-writer': {k} nodes but only {ids.size} writers; every node needs one")
    order = rng.permutation(ids.size)
    order = order[np.argsort(-sizes[order], kind="stable")]  # largest first, ties in shuffled order
    load = np.zeros(k)  # samples per node
    owner = np.empty(ids.size, dtype=np.int64)  # node of each writer
    for j in order:
        node = int(np.argmin(load / weights))  # an empty node has 0: filled first
        owner[j] = node
        load[node] += sizes[j]
    node_of_sample = owner[np.searchsorted(ids, w)]  # [N]
    return [np.flatnonzero(node_of_sample == node).astype(np.int64) for node in range(k)]


def even_sizes(total: int, parts: int) -> list[int]:
    """Sizes of ``parts`` near-equal pieces of ``total`` items: the first ``total % parts`` pieces
    hold one more (nodes across gateways, a flat gradient across ring chunks)."""
    if parts < 1:
        raise ValueError(f"parts(={parts}) must be >= 1")
    base, extra = divmod(total, parts)
    return [base + (1 if k < extra else 0) for k in range(parts)]


class SampledShards:
    """Per-node shards drawn with replacement, created on first use (see the module docstring).

    Parameters
    ----------
    labels : torch.Tensor or numpy.ndarray
        ``[N]`` integer class labels of the training set.
    n_nodes : int
        Fleet size (any number >= 1, also more than ``N``).
    samples_per_node : int
        Shard size, >= 1.
    scheme : {"iid", "dirichlet"}
        How a node's labels are drawn.
    alpha : float
        Dirichlet concentration (> 0); ``dirichlet`` only.
    seed : int
        Scenario seed; node ``i`` draws from ``default_rng([seed, 0x5A4D, i])``.
    """

    def __init__(
        self,
        labels: torch.Tensor | np.ndarray,
        n_nodes: int,
        samples_per_node: int,
        scheme: str = "iid",
        alpha: float = 0.5,
        seed: int = 0,
    ) -> None:
        y = labels.detach().cpu().numpy() if isinstance(labels, torch.Tensor) else np.asarray(labels)
        if y.ndim != 1 or y.size == 0 or not np.issubdtype(y.dtype, np.integer):
            raise DataError(f"labels must be a non-empty 1-D integer array, got shape {y.shape} dtype {y.dtype}")
        if scheme not in ("iid", "dirichlet"):
            raise ConfigError(
                f"data.partition: {scheme!r} cannot be drawn with replacement; with data.samples_per_node "
                "> 0 use 'iid' or 'dirichlet'"
            )
        if samples_per_node < 1 or n_nodes < 1:
            raise ConfigError(f"samples_per_node(={samples_per_node}) and n_nodes(={n_nodes}) must be >= 1")
        if scheme == "dirichlet" and not (math.isfinite(alpha) and alpha > 0):
            raise ConfigError(f"alpha(={alpha}) must be a finite number > 0")
        self.n_nodes, self.size, self.scheme, self.alpha, self.seed = n_nodes, samples_per_node, scheme, alpha, seed
        self.n = int(y.size)
        classes, inverse = np.unique(y, return_inverse=True)
        order = np.argsort(inverse, kind="stable")  # sample indices grouped by class
        counts = np.bincount(inverse, minlength=classes.size)
        self._by_class = np.split(order.astype(np.int64), np.cumsum(counts)[:-1])  # [C] index arrays
        self._cache: dict[int, np.ndarray] = {}

    def __len__(self) -> int:
        return self.n_nodes

    def __getitem__(self, i: int) -> np.ndarray:
        """Node ``i``'s sorted int64 shard (drawn once, then cached)."""
        if not 0 <= i < self.n_nodes:
            raise IndexError(f"node {i} out of range 0..{self.n_nodes - 1}")
        shard = self._cache.get(i)
        if shard is None:
            shard = self._cache[i] = np.sort(self._draw(np.random.default_rng([self.seed, 0x5A4D, i])))
        return shard

    def _draw(self, rng: np.random.Generator) -> np.ndarray:
        if self.scheme == "iid":
            return rng.integers(0, self.n, size=self.size, dtype=np.int64)
        p = rng.dirichlet(np.full(len(self._by_class), self.alpha))  # [C] this node's label mix
        if not np.isfinite(p).all() or p.sum() <= 0:  # underflow at tiny alpha: one class
            p = np.eye(len(self._by_class))[rng.integers(len(self._by_class))]
        per_class = rng.multinomial(self.size, p / p.sum())  # [C] samples of each class
        parts = [pool[rng.integers(0, pool.size, size=k)] for pool, k in zip(self._by_class, per_class) if k]
        return np.concatenate(parts).astype(np.int64)


def node_shards(
    labels: torch.Tensor | np.ndarray,
    n_nodes: int,
    scheme: str,
    alpha: float,
    seed: int,
    samples_per_node: int = 0,
    shares: list[float] | None = None,
    writers: torch.Tensor | np.ndarray | None = None,
) -> list[np.ndarray] | SampledShards:
    """Every node's training indices: :func:`partition` (``samples_per_node == 0``) or lazily
    drawn :class:`SampledShards` (``> 0``; ``shares`` do not apply: every shard has that size)."""
    if samples_per_node > 0:
        return SampledShards(labels, n_nodes, samples_per_node, scheme, alpha, seed)
    return partition(labels, n_nodes, scheme, alpha, seed=seed, shares=shares, writers=writers)
