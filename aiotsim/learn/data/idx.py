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
import math
import zlib
from pathlib import Path
from typing import BinaryIO

import numpy as np

from aiotsim.errors import DataError
from aiotsim.inputfiles import read_at_most
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


# The most value bytes one IDX file may declare: 1 GiB (EMNIST's largest split, byclass training
# images, is 697,932 x 28 x 28 = 547 MB); a header declaring more is refused before reading, and a
# gzip file is never inflated past its header's size plus one byte (no decompression bomb).
MAX_IDX_BYTES = 1 << 30


def _is_gzip(path: Path) -> bool:
    """Whether ``path`` starts with the gzip magic ``1f 8b``."""
    with path.open("rb") as f:
        return f.read(2) == b"\x1f\x8b"


def _open(path: Path) -> BinaryIO:
    """``path`` opened for reading, through gzip when it is gzip-compressed."""
    return gzip.open(path, "rb") if _is_gzip(path) else path.open("rb")  # type: ignore[return-value]


def _header(f: BinaryIO, path: Path, magic: int) -> tuple[list[int], int]:
    """``(dims, value bytes)`` from the header at ``f``'s start; DataError for a short header, a
    wrong magic, or more value bytes than :data:`MAX_IDX_BYTES`."""
    head = f.read(4)
    if len(head) < 4:
        raise DataError(f"{path}: truncated IDX file ({len(head)} bytes, no header)")
    found = int.from_bytes(head, "big")
    if found != magic:
        raise DataError(f"{path}: wrong IDX magic 0x{found:08x}, expected 0x{magic:08x}")
    ndim = magic & 0xFF
    sizes = f.read(4 * ndim)
    if len(sizes) < 4 * ndim:
        raise DataError(f"{path}: truncated IDX header ({4 + len(sizes)} bytes, expected {4 + 4 * ndim})")
    dims = [int.from_bytes(sizes[4 * k : 4 * k + 4], "big") for k in range(ndim)]
    expected = math.prod(dims)  # bytes: unsigned byte values
    if expected > MAX_IDX_BYTES:
        raise DataError(f"{path}: IDX dimensions {dims} declare {expected:,} bytes, more than the "
                        f"{MAX_IDX_BYTES:,} aiotsim reads from one file")  # fmt: skip
    return dims, expected


def _check_size(path: Path, dims: list[int], expected: int, found: int) -> None:
    """DataError unless the ``found`` value bytes are the ``expected`` ones ``dims`` declare."""
    if found != expected:
        short = found < expected
        raise DataError(f"{path}: IDX dimensions {dims} need {expected} bytes of values, found "
                        f"{found if short else 'more'}{' (truncated)' if short else ''}")  # fmt: skip


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
        Wrong magic, a header or payload shorter or longer than the dimensions say, more than
        :data:`MAX_IDX_BYTES` of values; the message names the file.
    """
    try:
        with _open(path) as f:
            dims, expected = _header(f, path, magic)
            data = read_at_most(f, expected + 1)  # one more: a longer file is an error too
    except (OSError, EOFError, zlib.error) as exc:
        raise DataError(f"{path}: cannot read IDX file: {exc}") from exc
    _check_size(path, dims, expected, len(data))
    return np.frombuffer(data, dtype=np.uint8).reshape(dims)


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
