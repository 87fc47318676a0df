"""The IDX format of MNIST and Fashion-MNIST (LeCun et al.), plain or gzip-compressed.

An IDX file is a 4-byte big-endian magic number, then one 4-byte big-endian size per dimension,
then the values. The magic's third byte is the value type (``0x08``: unsigned byte) and its fourth
the number of dimensions, so images are ``0x00000803`` (``[N, rows, cols]``) and labels
``0x00000801`` (``[N]``). A data set is four files in one directory::

    train-images-idx3-ubyte  train-labels-idx1-ubyte  t10k-images-idx3-ubyte  t10k-labels-idx1-ubyte

each optionally ending in ``.gz`` (the form in which they are published). The t10k files are the
official test split.
"""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path

import numpy as np

from aiotsim.errors import DataError
from aiotsim.learn.data.base import RawSplit

IMAGES_MAGIC: int = 0x00000803  # unsigned bytes, 3 dimensions
LABELS_MAGIC: int = 0x00000801  # unsigned bytes, 1 dimension

# role -> file name without the optional .gz
IDX_FILES: dict[str, str] = {
    "train_x": "train-images-idx3-ubyte",
    "train_y": "train-labels-idx1-ubyte",
    "test_x": "t10k-images-idx3-ubyte",
    "test_y": "t10k-labels-idx1-ubyte",
}


def _raw_bytes(path: Path) -> bytes:
    """The file's bytes, gunzipped when it starts with the gzip magic ``1f 8b``."""
    try:
        data = path.read_bytes()
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
    except (OSError, EOFError, zlib.error) as exc:
        raise DataError(f"{path}: cannot read IDX file: {exc}") from exc
    return data


def read_idx(path: Path, magic: int) -> np.ndarray:
    """One IDX file of unsigned bytes as a numpy array of its declared shape.

    Parameters
    ----------
    path : Path
        The file (``.gz`` or plain).
    magic : int
        The expected magic number (:data:`IMAGES_MAGIC` or :data:`LABELS_MAGIC`).

    Raises
    ------
    DataError
        Wrong magic, a header or payload shorter or longer than the dimensions say; the message
        names the file.
    """
    data = _raw_bytes(path)
    if len(data) < 4:
        raise DataError(f"{path}: truncated IDX file ({len(data)} bytes, no header)")
    found = int.from_bytes(data[:4], "big")
    if found != magic:
        raise DataError(f"{path}: wrong IDX magic 0x{found:08x}, expected 0x{magic:08x}")
    ndim = magic & 0xFF
    header = 4 + 4 * ndim  # bytes
    if len(data) < header:
        raise DataError(f"{path}: truncated IDX header ({len(data)} bytes, expected {header})")
    dims = [int.from_bytes(data[4 + 4 * k : 8 + 4 * k], "big") for k in range(ndim)]
    expected = int(np.prod(dims, dtype=np.int64))
    if len(data) - header != expected:
        raise DataError(
            f"{path}: IDX dimensions {dims} need {expected} bytes of values, found {len(data) - header}"
            f"{' (truncated)' if len(data) - header < expected else ''}"
        )
    return np.frombuffer(data, dtype=np.uint8, offset=header).reshape(dims)


def find_idx(directory: Path, stem: str) -> Path:
    """``directory/stem`` or ``directory/stem.gz``; a DataError naming both when neither exists."""
    for candidate in (directory / stem, directory / f"{stem}.gz"):
        if candidate.is_file():
            return candidate
    raise DataError(f"{directory}: missing IDX file {stem} (or {stem}.gz)")


def read_idx_dir(directory: Path, num_classes: int = 10) -> RawSplit:
    """The four IDX files of a directory: images ``[N, 1, rows, cols]`` uint8, labels int64."""
    arrays: dict[str, np.ndarray] = {}
    for role, stem in IDX_FILES.items():
        path = find_idx(directory, stem)
        arr = read_idx(path, IMAGES_MAGIC if role.endswith("_x") else LABELS_MAGIC)
        if role.endswith("_y") and arr.size and int(arr.max()) >= num_classes:
            raise DataError(f"{path}: label {int(arr.max())} outside 0..{num_classes - 1}")
        arrays[role] = arr[:, None, :, :] if role.endswith("_x") else arr.astype(np.int64)
    for split in ("train", "test"):
        nx, ny = len(arrays[f"{split}_x"]), len(arrays[f"{split}_y"])
        if nx != ny:
            raise DataError(f"{directory}: {split} split has {nx} images but {ny} labels")
    return RawSplit(arrays["train_x"], arrays["train_y"], arrays["test_x"], arrays["test_y"], num_classes)
