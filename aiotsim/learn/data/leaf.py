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


def _read_file(path: Path, writers: dict[str, int]) -> tuple[list[Any], list[Any], list[int]]:
    """One LEAF file: samples, labels and writer indices (new writers appended to ``writers``)."""
    try:
        doc = json.loads(path.read_text())
        users, user_data = doc["users"], doc["user_data"]
        xs: list[Any] = []
        ys: list[Any] = []
        ws: list[int] = []
        for user in users:
            w = writers.setdefault(str(user), len(writers))
            x, y = user_data[user]["x"], user_data[user]["y"]
            if len(x) != len(y):
                raise ValueError(f"writer {user!r} has {len(x)} samples but {len(y)} labels")
            xs.extend(x)
            ys.extend(y)
            ws.extend([w] * len(y))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(f"{path}: cannot read LEAF JSON: {exc}") from exc
    except (KeyError, TypeError, ValueError) as exc:
        raise DataError(f"{path}: not a LEAF file ({{'users', 'user_data': {{user: {{'x', 'y'}}}}}}): {exc!r}") from exc
    return xs, ys, ws


def _read_split(files: list[Path], writers: dict[str, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every file of a split: ``([N, C, S, S] float32, [N] int64, [N] int64 writer)``."""
    xs: list[Any] = []
    ys: list[Any] = []
    ws: list[int] = []
    for f in files:
        x, y, w = _read_file(f, writers)
        xs.extend(x)
        ys.extend(y)
        ws.extend(w)
    if not ys:
        raise DataError(f"{files[0]}: no samples")
    try:
        flat = np.asarray(xs, dtype=np.float32)  # [N, C*S*S]
        labels = np.asarray(ys, dtype=np.int64)  # [N]
    except (TypeError, ValueError) as exc:
        raise DataError(f"{files[0]}: samples must be equal-length lists of numbers: {exc}") from exc
    if flat.ndim != 2 or labels.ndim != 1 or labels.min() < 0:
        raise DataError(f"{files[0]}: samples must be flat lists and labels non-negative ints")
    return flat.reshape(-1, *_sample_shape(flat.shape[1], files[0])), labels, np.asarray(ws, dtype=np.int64)


def read_leaf(path: Path) -> RawSplit:
    """A LEAF JSON file or directory (see the module docstring)."""
    writers: dict[str, int] = {}
    if path.is_dir() and (path / "train").is_dir() and (path / "test").is_dir():
        train_x, train_y, train_w = _read_split(_json_files(path / "train"), writers)
        test_x, test_y, _ = _read_split(_json_files(path / "test"), writers)
        if test_x.shape[1:] != train_x.shape[1:]:
            raise DataError(f"{path}: test samples are {test_x.shape[1:]}, training samples {train_x.shape[1:]}")
        classes = int(max(train_y.max(), test_y.max())) + 1
        return RawSplit(train_x, train_y, test_x, test_y, classes, train_w)
    train_x, train_y, train_w = _read_split(_json_files(path), writers)
    return RawSplit(train_x, train_y, None, None, int(train_y.max()) + 1, train_w)
