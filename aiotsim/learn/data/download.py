"""Opt-in download of the standard archives (``data.download = true``); nothing else downloads.

Each data set's files come from their official URLs and are checked against the MD5 sums published
with them (the same sums torchvision's loaders check). Files go into ``cache_dir/<dataset>/``; a file
already there with the right checksum is not fetched again; a ``.tar.gz`` archive is extracted next
to itself (members that would land outside the directory are refused). A failed download names the
URL, the reason and where to put the file by hand.
"""

from __future__ import annotations

import hashlib
import shutil
import tarfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from aiotsim.errors import DataError


@dataclass(frozen=True)
class Remote:
    """One published file: where it is and its MD5 (hex)."""

    url: str
    md5: str

    @property
    def filename(self) -> str:
        """The file's name in the cache: the last part of the URL."""
        return self.url.rstrip("/").rpartition("/")[2]


_MNIST = "https://ossci-datasets.s3.amazonaws.com/mnist/"  # torchvision's mirror of LeCun's files
_FASHION = "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"
_CIFAR = "https://www.cs.toronto.edu/~kriz/"

SOURCES: dict[str, tuple[Remote, ...]] = {
    "mnist-idx": (
        Remote(_MNIST + "train-images-idx3-ubyte.gz", "f68b3c2dcbeaaa9fbdd348bbdeb94873"),
        Remote(_MNIST + "train-labels-idx1-ubyte.gz", "d53e105ee54ea40749a09fcbcd1e9432"),
        Remote(_MNIST + "t10k-images-idx3-ubyte.gz", "9fb629c4189551a2d022fa330f9573f3"),
        Remote(_MNIST + "t10k-labels-idx1-ubyte.gz", "ec29112dd5afa0611ce80d1b7f02629c"),
    ),
    "fashion-mnist": (
        Remote(_FASHION + "train-images-idx3-ubyte.gz", "8d4fb7e6c68d591d4c3dfef9ec88bf0d"),
        Remote(_FASHION + "train-labels-idx1-ubyte.gz", "25c81989df183df01b3e8a0aad5dffbe"),
        Remote(_FASHION + "t10k-images-idx3-ubyte.gz", "bef4ecab320f06d8554ea6380940ec79"),
        Remote(_FASHION + "t10k-labels-idx1-ubyte.gz", "bb300cfdad3c16e7a12a480ee83cd310"),
    ),
    "cifar10": (Remote(_CIFAR + "cifar-10-python.tar.gz", "c58f30108f718f92721af3b95e74349a"),),
    "cifar100": (Remote(_CIFAR + "cifar-100-python.tar.gz", "eb9058c3a382ffc7106e4002c42a8d85"),),
}

TIMEOUT_S: float = 60.0  # per connection attempt, s
_CHUNK = 1 << 20  # bytes per read


def md5sum(path: Path) -> str:
    """Hex MD5 of a file, read in 1 MiB chunks."""
    digest = hashlib.md5(usedforsecurity=False)
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def cache_path(name: str, cache_dir: str | Path) -> Path:
    """Where data set ``name``'s files live in the cache: ``cache_dir/name``."""
    return Path(cache_dir).expanduser() / name


def download_file(remote: Remote, directory: Path) -> Path:
    """Fetch ``remote`` into ``directory`` (unless present with the right MD5) and verify it.

    Raises
    ------
    DataError
        The URL cannot be read (offline, not found) or the MD5 differs; a bad download is removed.
    """
    dest = directory / remote.filename
    if dest.is_file() and md5sum(dest) == remote.md5:
        return dest
    part = dest.with_name(dest.name + ".part")
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with urllib.request.urlopen(remote.url, timeout=TIMEOUT_S) as response, part.open("wb") as out:
            shutil.copyfileobj(response, out, _CHUNK)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        part.unlink(missing_ok=True)
        reason = getattr(exc, "reason", exc)
        raise DataError(
            f"could not download {remote.url}: {reason}; download it by hand into {directory} or set data.path"
        ) from exc
    found = md5sum(part)
    if found != remote.md5:
        part.unlink()
        raise DataError(
            f"checksum mismatch for {remote.url}: MD5 {found}, expected {remote.md5}; the download was removed"
        )
    part.replace(dest)
    return dest


def extract(archive: Path, directory: Path) -> None:
    """Extract a ``.tar.gz`` into ``directory`` with tarfile's ``data`` filter (no absolute paths,
    links or members outside ``directory``)."""
    try:
        with tarfile.open(archive, "r:*") as tar:
            if hasattr(tarfile, "data_filter"):  # Python >= 3.11.4
                tar.extractall(directory, filter="data")
            else:
                tar.extractall(directory, members=_safe_members(tar, directory, archive))
    except (tarfile.TarError, OSError) as exc:
        raise DataError(f"{archive}: cannot extract: {exc}") from exc


def _safe_members(tar: tarfile.TarFile, directory: Path, archive: Path) -> list[tarfile.TarInfo]:
    """Regular files and directories that land inside ``directory`` (older Pythons' data filter)."""
    root = directory.resolve()
    members = []
    for m in tar.getmembers():
        target = (root / m.name).resolve()
        if not (m.isfile() or m.isdir()) or (target != root and root not in target.parents):
            raise DataError(f"{archive}: refusing member {m.name!r} (a link or outside {directory})")
        members.append(m)
    return members


def fetch(name: str, cache_dir: str | Path) -> Path:
    """Download (when needed), verify and extract data set ``name``; returns its cache directory."""
    if name not in SOURCES:
        raise DataError(f"dataset {name!r} has no download; valid: {', '.join(SOURCES)}")
    directory = cache_path(name, cache_dir)
    for remote in SOURCES[name]:
        path = download_file(remote, directory)
        marker = directory / f".{path.name}.extracted"
        if path.name.endswith((".tar.gz", ".tgz")) and not marker.is_file():
            extract(path, directory)
            marker.write_text(remote.md5)
    return directory
