"""A full disk while a run directory's file is replaced: the write fails with the OS error (the CLI
turns it into exit 2, "cannot write to PATH: ..."), the previous file stays whole and no
``.tmp`` file is left beside it. The disk is made "full" for this process with RLIMIT_FSIZE (a
write past 4 KiB fails with EFBIG, as ENOSPC would on a full disk)."""

from __future__ import annotations

import errno
import resource
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from aiotsim.results.store import atomic_write

LIMIT = 4096  # bytes a file of this process may reach while the disk is "full"


@contextmanager
def _full_disk() -> Iterator[None]:
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    before = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails instead of killing us
    resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, before)


@pytest.mark.parametrize(
    "data", [b"x" * 3 * LIMIT, "x" * 3 * LIMIT, ["x" * LIMIT] * 3], ids=["bytes", "text", "pieces"]
)
def test_a_full_disk_leaves_the_old_file_whole_and_no_tmp_file(tmp_path: Path, data: object) -> None:
    path = tmp_path / "summary.json"
    path.write_text("the previous summary")
    with _full_disk(), pytest.raises(OSError) as failure:
        atomic_write(path, data)  # type: ignore[arg-type]
    assert failure.value.errno == errno.EFBIG
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]  # no summary.json.tmp
    assert path.read_text() == "the previous summary"
