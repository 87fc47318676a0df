"""The checkpoint file: a format that cannot run code, with a digest that catches any damage.

``checkpoint.pt`` is one header line, then the bytes of a ``torch.save`` of plain data::

    aiotsim-checkpoint 2 sha256:<64 hex digits of the bytes that follow>\\n
    <torch.save zip archive>

The archive holds only tensors (on the CPU), dicts, lists, tuples, strings, bytes, ints, floats,
bools and ``None``; numpy arrays and scalars go in as tagged tensors (``{"__ndarray__": t}``,
``{"__npscalar__": t}``) and come back with their dtype. It is read with
``torch.load(weights_only=True)``, which builds nothing else, so a crafted file cannot run code.
Before that, the header and the digest are checked: a truncated, empty or altered file (a single
flipped byte) is refused before its content is read. An older file (format 1: a bare ``torch.save``
of pickled objects) or a file of another program is refused unread: its pickle could run code.

Every refusal is a :class:`~aiotsim.errors.ResultsError` (exit 2 in the CLI) saying what the file
is and what to do. :func:`save` writes through ``checkpoint.pt.tmp`` and ``os.replace``: a crash or
a full disk mid-write leaves the previous checkpoint whole, and the temporary file is removed.
"""

from __future__ import annotations

import hashlib
import io
import os
import pickle
from collections import OrderedDict
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import torch

from aiotsim.errors import ConfigError, ResultsError

FORMAT_VERSION = 2
MAGIC = b"aiotsim-checkpoint "
_HEADER_MAX = 128  # bytes: the header line is 92
_ZIP = b"PK\x03\x04"  # a torch.save archive (format 1 was one, with no header)
RERUN = "rerun the run (aiotsim run SCENARIO --out DIR --checkpoint-every N) to write a new one"
_PLAIN = (str, bytes, int, float, bool, type(None))


def save(path: str | Path, state: dict[str, Any]) -> None:
    """Write ``state`` (plain data, tensors and numpy values) to ``path`` atomically.

    Raises ``TypeError`` naming the entry when ``state`` holds anything else (a bug: such a
    value could not be read back safely), before anything is written; an ``OSError`` while
    writing (a full disk) propagates after the temporary file is removed.
    """
    plain = encode(state)
    p = Path(path)
    tmp = p.with_name(p.name + ".tmp")
    try:
        with open(tmp, "w+b") as f:
            start = f.write(_header("0" * 64))  # the digest's place, filled in once the archive is written
            torch.save(plain, f)  # streamed: the archive's offsets count from its own start
            digest = _digest(f, start)
            f.seek(0)
            f.write(_header(digest))
        os.replace(tmp, p)
    except BaseException:
        tmp.unlink(missing_ok=True)  # never leave a partial file beside the whole previous one
        raise


def _header(digest: str) -> bytes:
    return MAGIC + f"{FORMAT_VERSION} sha256:{digest}\n".encode()


def _digest(f: BinaryIO, start: int) -> str:
    """sha256 (hex) of ``f``'s bytes from ``start`` to its end, read in 1 MiB chunks."""
    h = hashlib.sha256()
    f.seek(start)
    while chunk := f.read(1 << 20):
        h.update(chunk)
    return h.hexdigest()


class _Window(io.RawIOBase):
    """The bytes of file ``f`` from ``start`` on, as a file of their own (the archive after the
    header line: its offsets count from its own start)."""

    def __init__(self, f: BinaryIO, start: int) -> None:
        super().__init__()
        self.f, self.start = f, start
        f.seek(start)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, pos: int, whence: int = os.SEEK_SET) -> int:
        return self.f.seek(self.start + pos if whence == os.SEEK_SET else pos, whence) - self.start

    def tell(self) -> int:
        return self.f.tell() - self.start

    def readinto(self, b: Any) -> int:
        return self.f.readinto(b)  # type: ignore[attr-defined]


def load(path: str | Path) -> dict[str, Any]:
    """The state :func:`save` wrote to ``path``. :class:`ConfigError` when there is none,
    :class:`ResultsError` for a file that is not one, damaged, or of another format."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{p}: no checkpoint (run with checkpoint_every > 0 to write one)")
    try:
        with open(p, "rb") as f:
            start = _verified_start(p, f)
            state = _unpickled(p, _Window(f, start))
    except OSError as exc:
        raise ResultsError(f"{p}: cannot read the checkpoint ({exc.strerror or exc})") from None
    if not isinstance(state, dict):
        raise ResultsError(f"{p}: the checkpoint holds a {type(state).__name__}, not a state dict; {RERUN}")
    return decode(state)


def _unpickled(p: Path, archive: _Window) -> Any:
    """``torch.load(weights_only=True)`` of a verified archive; :class:`ResultsError` else."""
    try:
        return torch.load(archive, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        first = str(exc).strip().splitlines()[-1][:200]
        raise ResultsError(
            f"{p}: the checkpoint holds objects other than tensors and plain data ({first}); "
            f"it was not written by aiotsim and is refused unread, as it could run code: {RERUN}"
        ) from None
    except MemoryError:
        raise ResultsError(f"{p}: the checkpoint is too large for this machine's memory") from None
    except Exception as exc:  # a well-digested archive torch cannot parse: damaged when written
        raise ResultsError(f"{p}: the checkpoint cannot be read ({type(exc).__name__}); {RERUN}") from None


def _verified_start(p: Path, f: BinaryIO) -> int:
    """Where the archive starts in ``f``, after a valid header whose digest its bytes match;
    :class:`ResultsError` else (nothing of the archive is unpickled)."""
    head = f.read(_HEADER_MAX)
    if not head:
        raise ResultsError(f"{p}: the checkpoint is empty (a crash while it was first written?); {RERUN}")
    if not head.startswith(MAGIC):
        if head.startswith(_ZIP):
            raise ResultsError(
                f"{p}: a checkpoint of format 1 (written by an aiotsim older than format {FORMAT_VERSION}) "
                f"or another program's torch file: it stores pickled objects and cannot be loaded "
                f"safely; {RERUN}"
            )
        raise ResultsError(f"{p}: not an aiotsim checkpoint (no {MAGIC.decode().strip()!r} header); {RERUN}")
    end = head.find(b"\n")
    fields = head[len(MAGIC) : end].decode("ascii", "replace").split(" ") if end > 0 else []
    if len(fields) != 2 or not fields[1].startswith("sha256:"):
        raise ResultsError(f"{p}: the checkpoint's header is damaged; {RERUN}")
    if fields[0] != str(FORMAT_VERSION):
        raise ResultsError(
            f"{p}: a checkpoint of format {fields[0][:20]!r}; this aiotsim reads format {FORMAT_VERSION}: "
            f"resume with the aiotsim that wrote it, or {RERUN}"
        )
    if _digest(f, end + 1) != fields[1][len("sha256:") :]:
        raise ResultsError(
            f"{p}: the checkpoint is damaged (its content does not match its sha256 digest: truncated "
            f"or altered); resume from an intact copy, or {RERUN}"
        )
    return end + 1


def encode(obj: Any, where: str = "state") -> Any:
    """``obj`` as data ``torch.load(weights_only=True)`` reads: tensors detached onto the CPU,
    numpy values as tagged tensors, containers rebuilt. ``TypeError`` for anything else."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu().clone()
    if isinstance(obj, np.ndarray | np.generic):
        tag = "__ndarray__" if isinstance(obj, np.ndarray) else "__npscalar__"
        if obj.dtype.hasobject:
            raise TypeError(f"{where}: a numpy value of dtype object cannot go into a checkpoint")
        return {tag: torch.from_numpy(np.array(obj, copy=True))}
    if type(obj) in (dict, OrderedDict):  # an OrderedDict (a state_dict) comes back as a dict
        bad = [k for k in obj if not isinstance(k, str | int) or k in ("__ndarray__", "__npscalar__")]
        if bad:
            raise TypeError(f"{where}: key {bad[0]!r} cannot go into a checkpoint (str or int keys only)")
        return {k: encode(v, f"{where}[{k!r}]") for k, v in obj.items()}
    if type(obj) in (list, tuple):
        return type(obj)(encode(v, f"{where}[{i}]") for i, v in enumerate(obj))
    if type(obj) in _PLAIN:
        return obj
    raise TypeError(f"{where}: a {type(obj).__name__} cannot go into a checkpoint (tensors and plain data only)")


def decode(obj: Any) -> Any:
    """The inverse of :func:`encode` (numpy values back from their tagged tensors)."""
    if isinstance(obj, dict):
        if len(obj) == 1 and isinstance(t := next(iter(obj.values())), torch.Tensor):
            if "__ndarray__" in obj:
                return t.numpy()
            if "__npscalar__" in obj:
                return t.numpy()[()]
        return {k: decode(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return type(obj)(decode(v) for v in obj)
    return obj


__all__ = ["FORMAT_VERSION", "MAGIC", "RERUN", "save", "load", "encode", "decode"]
