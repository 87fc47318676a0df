"""The CIFAR-10 and CIFAR-100 "python version" batches (Krizhevsky, 2009).

Each batch file is a pickled dict with ``b"data"``, a ``[N, 3072]`` uint8 array (the 1024 red, then
green, then blue values of a 32x32 image, row-major), and the labels as a list of ints:
``b"labels"`` (CIFAR-10) or ``b"fine_labels"`` (CIFAR-100, 100 classes; the 20 coarse labels are
ignored). CIFAR-10 is ``data_batch_1`` .. ``data_batch_5`` plus ``test_batch``; CIFAR-100 is
``train`` plus ``test``. ``data.path`` may name the directory holding the batches or the directory
the archive was extracted into (holding ``cifar-10-batches-py`` / ``cifar-100-python``).

The pickles are read with an unpickler that only builds numpy arrays, lists and dicts: a batch file
from elsewhere cannot run code.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import numpy as np

from aiotsim.errors import DataError
from aiotsim.learn.data.base import RawSplit

CIFAR_LAYOUT: dict[str, dict[str, Any]] = {
    "cifar10": {
        "folder": "cifar-10-batches-py",
        "train": [f"data_batch_{k}" for k in range(1, 6)],
        "test": ["test_batch"],
        "labels": "labels",
        "classes": 10,
    },
    "cifar100": {
        "folder": "cifar-100-python",
        "train": ["train"],
        "test": ["test"],
        "labels": "fine_labels",
        "classes": 100,
    },
}

_PIXELS = 3 * 32 * 32  # values per image (C x H x W)
# The most bytes one batch file may hold: 512 MiB, over 3x CIFAR-100's 'train' (50,000 images,
# about 155 MB); a larger file is refused before it is unpickled.
MAX_BATCH_BYTES = 512 << 20
# the globals a pickled numpy array needs, under numpy 1.x and 2.x module names
_ALLOWED = {
    (module, name)
    for module in ("numpy.core.multiarray", "numpy._core.multiarray", "numpy.core.numeric", "numpy._core.numeric")
    for name in ("_reconstruct", "scalar", "_frombuffer")
} | {("numpy", "ndarray"), ("numpy", "dtype"), ("_codecs", "encode")}  # protocol 2 spells bytes via encode


class _ArrayUnpickler(pickle.Unpickler):
    """An unpickler that refuses every global but numpy's array constructors."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in _ALLOWED:
            raise pickle.UnpicklingError(f"refusing to load {module}.{name}: not part of a CIFAR batch")
        return super().find_class(module, name)


def check_batch(path: Path) -> None:
    """What can be told of a batch file without unpickling it: it is a regular file of at most
    :data:`MAX_BATCH_BYTES` that starts as a pickle of protocol 2 or later does. DataError names it."""
    if not path.is_file():
        raise DataError(f"{path}: missing CIFAR batch file")
    size = path.stat().st_size
    if size > MAX_BATCH_BYTES:
        raise DataError(f"{path}: {size:,} bytes, more than a CIFAR batch ({MAX_BATCH_BYTES:,} at most)")
    with path.open("rb") as f:
        if f.read(1) != b"\x80":  # the PROTO opcode the published batches (protocol 2) start with
            raise DataError(f"{path}: not a CIFAR python batch (not a pickle)")


def read_batch(path: Path, label_key: str) -> tuple[np.ndarray, np.ndarray]:
    """One batch file: ``([N, 3, 32, 32] uint8, [N] int64)``; a DataError names the file."""
    check_batch(path)
    try:
        with path.open("rb") as f:
            batch = _ArrayUnpickler(f, encoding="bytes").load()
    except MemoryError:  # an array constructor asked for more than there is
        raise DataError(f"{path}: not a CIFAR python batch: it declares an array too large to hold") from None
    except (OSError, EOFError, pickle.UnpicklingError, ValueError, TypeError, AttributeError, LookupError,
            RecursionError, OverflowError) as exc:  # fmt: skip
        # LookupError: an unknown codec named to _codecs.encode; RecursionError: nesting too deep
        raise DataError(f"{path}: not a CIFAR python batch: {type(exc).__name__}: {exc}") from exc
    if not isinstance(batch, dict):
        raise DataError(f"{path}: a CIFAR batch must be a pickled dict, found {type(batch).__name__}")
    batch = {k.decode("latin1") if isinstance(k, bytes) else k: v for k, v in batch.items()}
    for key in ("data", label_key):
        if key not in batch:
            raise DataError(f"{path}: CIFAR batch has no b{key!r} entry (keys: {sorted(map(str, batch))})")
    data = np.asarray(batch["data"])
    labels = np.asarray(batch[label_key])
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != _PIXELS:
        raise DataError(f"{path}: b'data' must be uint8 [N, {_PIXELS}], found {data.dtype} {list(data.shape)}")
    if labels.shape != (data.shape[0],) or not np.issubdtype(labels.dtype, np.integer):
        raise DataError(f"{path}: b{label_key!r} must hold {data.shape[0]} integer labels, found {labels.shape}")
    return data.reshape(-1, 3, 32, 32), labels.astype(np.int64)


def _batch_dir(path: Path, folder: str) -> Path:
    """The directory holding the batches: ``path`` itself or its extracted ``folder``."""
    return path / folder if (path / folder).is_dir() else path


def read_cifar(path: Path, name: str) -> RawSplit:
    """CIFAR-10 or CIFAR-100 (``name``) from a directory: the official train and test batches."""
    layout = CIFAR_LAYOUT[name]
    directory = _batch_dir(path, layout["folder"])
    parts: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for split in ("train", "test"):
        batches = [read_batch(directory / f, layout["labels"]) for f in layout[split]]
        x = np.concatenate([b[0] for b in batches])  # [N, 3, 32, 32] uint8
        y = np.concatenate([b[1] for b in batches])  # [N] int64
        if y.size and (y.min() < 0 or y.max() >= layout["classes"]):
            raise DataError(f"{directory}: {split} labels outside 0..{layout['classes'] - 1}")
        parts[split] = (x, y)
    return RawSplit(*parts["train"], *parts["test"], num_classes=layout["classes"])
