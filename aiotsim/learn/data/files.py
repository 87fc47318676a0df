"""The registry of file data sets and where their files are found.

``mnist-idx``, ``fashion-mnist``
    IDX (:mod:`~aiotsim.learn.data.idx`), 1x28x28, 10 classes; test split: the t10k files.
``cifar10``, ``cifar100``
    Python pickle batches (:mod:`~aiotsim.learn.data.cifar`), 3x32x32, 10 / 100 (fine) classes;
    test split: ``test_batch`` / ``test``.
``femnist``
    LEAF JSON per writer (:mod:`~aiotsim.learn.data.leaf`); test split: a ``test/`` directory.
``imagefolder``
    Class subdirectories of images (:mod:`~aiotsim.learn.data.imagefolder`); test split: a
    ``test/`` (or ``val/``) directory beside ``train/``.

The first four can be downloaded (:mod:`~aiotsim.learn.data.download`). The files are looked for
in ``data.path`` when it is set (relative paths: from the working directory), else in the download
cache (``cache_dir/<name>``); only ``download = True`` fetches them, and only missing ones. Parsed
splits are cached per process (keyed by the resolved path and its modification time).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

import aiotsim.learn.data.download as download
from aiotsim.errors import DataError
from aiotsim.learn.data.base import RawSplit, freeze
from aiotsim.learn.data.cifar import read_cifar
from aiotsim.learn.data.idx import read_idx_dir
from aiotsim.learn.data.imagefolder import read_imagefolder
from aiotsim.learn.data.leaf import read_leaf

Reader = Callable[[Path], RawSplit]

FILE_DATASETS: dict[str, Reader] = {
    "mnist-idx": read_idx_dir,
    "fashion-mnist": read_idx_dir,
    "cifar10": functools.partial(read_cifar, name="cifar10"),
    "cifar100": functools.partial(read_cifar, name="cifar100"),
    "femnist": read_leaf,
    "imagefolder": read_imagefolder,
}
DOWNLOADABLE: tuple[str, ...] = tuple(download.SOURCES)
# The published versions' (input shape [C, H, W], classes, training samples, test samples), for
# estimates made before any file is read (validation's memory estimate). FEMNIST: LEAF's full
# preprocessing of EMNIST by writer (62 classes, about 805k samples, 90/10 split by sample); an
# imagefolder's shape is only known from its files, so it has none.
NOMINAL_SIZES: dict[str, tuple[tuple[int, int, int], int, int, int]] = {
    "mnist-idx": ((1, 28, 28), 10, 60_000, 10_000),
    "fashion-mnist": ((1, 28, 28), 10, 60_000, 10_000),
    "cifar10": ((3, 32, 32), 10, 50_000, 10_000),
    "cifar100": ((3, 32, 32), 100, 50_000, 10_000),
    "femnist": ((1, 28, 28), 62, 724_000, 81_000),
}
DEFAULT_CACHE_DIR: str = "~/.cache/aiotsim"


def locate(name: str, path: str | Path | None, download_ok: bool, cache_dir: str | Path) -> Path:
    """The file or directory to read data set ``name`` from.

    ``path`` when given (it must exist); else the cache directory, downloading into it first when
    ``download_ok`` (which only fetches missing files); else a DataError that says how to get them.
    """
    if path:
        p = Path(path).expanduser()
        if not p.exists():
            raise DataError(f"data.path {str(p)!r} does not exist (dataset {name!r})")
        return p
    if download_ok:
        return download.fetch(name, cache_dir)
    cached = download.cache_path(name, cache_dir)
    if name in download.SOURCES and all((cached / r.filename).is_file() for r in download.SOURCES[name]):
        return cached
    how = f" or set data.download = true to fetch it into {cached}" if name in download.SOURCES else ""
    raise DataError(f"dataset {name!r} is read from files: set data.path to its file or directory{how}")


def read_files(
    name: str, path: str | Path | None = None, *, download_ok: bool = False, cache_dir: str | Path = DEFAULT_CACHE_DIR
) -> RawSplit:
    """Find and parse file data set ``name`` (see :func:`locate`); arrays are shared, read-only."""
    if name not in FILE_DATASETS:
        raise DataError(f"{name!r} is not a file data set; valid: {', '.join(FILE_DATASETS)}")
    where = locate(name, path, download_ok, cache_dir).resolve()
    return _parse(name, str(where), _signature(where))


def _signature(where: Path) -> int:
    """Latest modification time (ns) of ``where`` and, for a directory, of its direct entries: a
    file rewritten in place gives a new cache key."""
    stamps = [where.stat().st_mtime_ns]
    if where.is_dir():
        stamps.extend(p.stat().st_mtime_ns for p in where.iterdir())
    return max(stamps)


@functools.lru_cache(maxsize=4)
def _parse(name: str, where: str, mtime_ns: int) -> RawSplit:
    """Parse once per (data set, path, modification time) and process (``mtime_ns``: a key only)."""
    raw = FILE_DATASETS[name](Path(where))
    if raw.train_y.size == 0:
        raise DataError(f"{where}: dataset {name!r} has no training samples")
    freeze(raw.train_x, raw.train_y, raw.test_x, raw.test_y, raw.train_writers)
    return raw
