"""Reading a small text input file named by a scenario (a bandwidth trace, an availability trace)
safely: a regular file only, at most a stated number of bytes, UTF-8.

A scenario key may name any path. Without these checks a FIFO blocks the reader forever,
``/dev/zero`` fills the memory, a directory or a symlink loop gives a traceback, and a NUL byte in
the path a ``ValueError``. Every refusal is a :class:`~aiotsim.errors.ConfigError` that names the
path and the reason, never the file's content (a path may name ``/etc/passwd``).
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import BinaryIO

from aiotsim.errors import ConfigError

MIB = 1 << 20  # bytes per MiB


def resolve_input(path: str | Path, what: str, fix: str, missing: str = "") -> tuple[Path, os.stat_result]:
    """``(resolved path, its stat)`` of an existing regular file.

    Parameters
    ----------
    path : str or Path
        The path as given (``~`` expanded).
    what : str
        What the file is, for messages (``"trace"``).
    fix : str
        What the file should be, appended to every message.
    missing : str
        Where the file is looked for, added to the message of a missing file.

    Raises
    ------
    ConfigError
        A NUL byte in the path, a symlink loop, a missing file, or not a regular file (a directory,
        a FIFO, a device).
    """
    text = str(path)
    if "\x00" in text:
        raise ConfigError(f"{text!r}: the {what} path holds a NUL byte; {fix}")
    p = Path(text).expanduser()
    try:
        resolved = p.resolve(strict=True)
        st = resolved.stat()
    except RuntimeError:  # Python < 3.13 reports a symlink loop so
        raise ConfigError(f"{p}: the {what} path is a symlink loop; {fix}") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ConfigError(f"{p}: the {what} path is a symlink loop; {fix}") from None
        why = f"no such {what} file{'; ' + missing if missing else ''}" if exc.errno == errno.ENOENT else exc.strerror
        raise ConfigError(f"{p}: cannot be read ({why}); {fix}") from None
    if not stat.S_ISREG(st.st_mode):
        kind = _kind(st.st_mode)
        raise ConfigError(f"{p}: the {what} is {kind}, not a regular file; {fix}")
    return resolved, st


def read_input_text(path: str | Path, what: str, limit_bytes: int, fix: str, missing: str = "") -> str:
    """The text of the regular file ``path``, refused when longer than ``limit_bytes``.

    At most ``limit_bytes + 1`` bytes are read (a file that grows while read, or one whose
    ``st_size`` is 0 like ``/proc`` files, still stops there); the file is opened non-blocking so a
    FIFO swapped in after the check cannot block the reader.

    Raises
    ------
    ConfigError
        As :func:`resolve_input`, or the file is over the limit, unreadable, or not UTF-8.
    """
    resolved, _ = resolve_input(path, what, fix, missing)
    try:
        fd = os.open(resolved, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as f:
            data = read_at_most(f, limit_bytes + 1)
    except OSError as exc:
        raise ConfigError(f"{resolved}: cannot read the {what} ({(exc.strerror or 'error').lower()}); {fix}") from None
    if len(data) > limit_bytes:
        raise ConfigError(
            f"{resolved}: the {what} is larger than {limit_bytes / MIB:g} MiB, the most aiotsim reads; "
            f"shorten it ({fix})"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{resolved}: the {what} is not UTF-8 text (byte {exc.start} cannot be decoded); {fix}"
        ) from None


def read_at_most(f: BinaryIO, n: int) -> bytes:
    """Up to ``n`` bytes of ``f``, read a MiB at a time (``f.read(n)`` would allocate all ``n`` at
    once, however short the file)."""
    chunks: list[bytes] = []
    left = n
    while left > 0:
        chunk = f.read(min(left, MIB))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _kind(mode: int) -> str:
    """What a non-regular file is, in words."""
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a plain file"


__all__ = ["MIB", "read_at_most", "read_input_text", "resolve_input"]
