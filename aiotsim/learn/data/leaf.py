"""Per-writer data in LEAF's JSON format (Caldas et al., *LEAF: A Benchmark for Federated Settings*).

FEMNIST (EMNIST by writer) as LEAF's preprocessing writes it: each JSON file holds::

    {"users": ["f0000_14", ...], "num_samples": [n, ...],
     "user_data": {"f0000_14": {"x": [[784 floats in [0, 1]], ...], "y": [label, ...]}, ...}}

``data.path`` names one such file, or a directory of them. A directory with ``train/`` and ``test/``
subdirectories (LEAF's own layout) gives the official split, each writer's samples divided between
the two; otherwise every file is training data and ``test_fraction`` is held out. A sample's ``x``
is a flat list of ``C*S*S`` values with ``C`` 1 (when ``len(x)`` is a square) or 3; labels are
0-based ints and the number of classes is the largest label plus one. Each training sample keeps
its writer's index (users in order of first appearance, files in sorted order), which the
``by-writer`` partition uses.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from aiotsim.errors import DataError
from aiotsim.learn.data.base import RawSplit


def _json_files(path: Path) -> list[Path]:
    """``path`` itself, or the sorted ``*.json`` files of a directory (at least one)."""
    if path.is_file():
        return [path]
    files = sorted(path.glob("*.json"))
    if not files:
        raise DataError(f"{path}: no LEAF *.json files")
    return files


def _sample_shape(n_values: int, where: Path) -> tuple[int, int, int]:
    """``(C, S, S)`` of a flat sample of ``n_values`` values: one channel if square, else three."""
    for c in (1, 3):
        side = math.isqrt(n_values // c)
        if n_values % c == 0 and c * side * side == n_values and side > 0:
            return (c, side, side)
    raise DataError(f"{where}: a sample of {n_values} values is neither S*S nor 3*S*S")


def _writer_arrays(user: str, data: Any) -> tuple[np.ndarray, np.ndarray]:
    """One writer's ``x`` and ``y`` as ``([n, D] float32, [n] int64)`` (converted at once, so only
    one file's JSON objects are ever alive)."""
    x = np.asarray(data["x"], dtype=np.float32)  # [n, C*S*S]
    y = np.asarray(data["y"], dtype=np.int64)  # [n]
    if y.size == 0 and x.size == 0:  # a writer without samples
        return np.zeros((0, 0), dtype=np.float32), y.reshape(0)
    if y.ndim != 1 or x.ndim != 2 or len(x) != len(y):
        raise ValueError(f"writer {user!r}: x must be n flat samples and y n labels, got {x.shape} and {y.shape}")
    return x, y


def _read_file(path: Path, writers: dict[str, int]) -> list[tuple[np.ndarray, np.ndarray, int]]:
    """One LEAF file: ``(x, y, writer index)`` per writer (new writers appended to ``writers``)."""
    try:
        doc = json.loads(path.read_text())
        parts = []
        for user in doc["users"]:
            x, y = _writer_arrays(str(user), doc["user_data"][user])
            parts.append((x, y, writers.setdefault(str(user), len(writers))))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:  # Recursion: nested too deep
        raise DataError(f"{path}: cannot read LEAF JSON: {exc}") from exc
    except (KeyError, TypeError, ValueError) as exc:
        raise DataError(f"{path}: not a LEAF file ({{'users', 'user_data': {{user: {{'x', 'y'}}}}}}): {exc!r}") from exc
    return parts


def _read_split(files: list[Path], writers: dict[str, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every file of a split: ``([N, C, S, S] float32, [N] int64, [N] int64 writer)``."""
    parts = [part for f in files for part in _read_file(f, writers)]
    if not parts or sum(len(y) for _, y, _ in parts) == 0:
        raise DataError(f"{files[0]}: no samples")
    widths = {x.shape[1] for x, _, _ in parts if len(x)}
    if len(widths) != 1:
        raise DataError(f"{files[0]}: samples of different lengths {sorted(widths)}")
    flat = np.concatenate([x.reshape(len(x), -1) for x, _, _ in parts if len(x)])  # [N, C*S*S]
    labels = np.concatenate([y for _, y, _ in parts])  # [N]
    owner = np.concatenate([np.full(len(y), w, dtype=np.int64) for _, y, w in parts])  # [N]
    if labels.min() < 0:
        raise DataError(f"{files[0]}: labels must be >= 0, found {int(labels.min())}")
    return flat.reshape(-1, *_sample_shape(flat.shape[1], files[0])), labels, owner


def leaf_files(path: Path) -> tuple[list[Path], list[Path] | None]:
    """``(training files, test files or None)`` :func:`read_leaf` reads: LEAF's ``train/`` and
    ``test/`` layout, else ``path`` itself or its ``*.json`` files. DataError when there are none."""
    if path.is_dir() and (path / "train").is_dir() and (path / "test").is_dir():
        return _json_files(path / "train"), _json_files(path / "test")
    return _json_files(path), None


def read_leaf(path: Path) -> RawSplit:
    """A LEAF JSON file or directory (see the module docstring)."""
    writers: dict[str, int] = {}
    train_files, test_files = leaf_files(path)
    if test_files is not None:
        train_x, train_y, train_w = _read_split(train_files, writers)
        test_x, test_y, _ = _read_split(test_files, writers)
        if test_x.shape[1:] != train_x.shape[1:]:
            raise DataError(f"{path}: test samples are {test_x.shape[1:]}, training samples {train_x.shape[1:]}")
        classes = int(max(train_y.max(), test_y.max())) + 1
        return RawSplit(train_x, train_y, test_x, test_y, classes, train_w)
    train_x, train_y, train_w = _read_split(train_files, writers)
    return RawSplit(train_x, train_y, None, None, int(train_y.max()) + 1, train_w)
