"""Run directories: the versioned files a run leaves behind, written as the run goes.

A run directory holds ``scenario.toml`` (the resolved scenario), ``metrics.csv`` (one row per
iteration, flushed as written), ``evals.csv`` (one row per evaluation), ``trace.json``
(Chrome/Perfetto trace events) and ``summary.json`` (``schema_version``; ``complete: false`` with a
``status`` when the run was interrupted or failed). Rows are flushed one by one, so whatever was
computed before a Ctrl-C or an error stays readable. Comparisons and plots read only these files.
"""

from __future__ import annotations

import contextlib
import csv
import fcntl
import functools
import inspect
import io
import itertools
import json
import logging
import math
import os
import socket
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO, TypeVar

from aiotsim.errors import ConfigError, ResultsError
from aiotsim.records import EVAL_FIELDS, METRIC_FIELDS

SCHEMA_VERSION = 1
TRACE_CHUNK = 10_000  # trace events encoded per piece of trace.json


@dataclass
class _CsvLog:
    handle: TextIO
    writer: csv.DictWriter

    def write(self, row: dict[str, Any]) -> None:
        self.writer.writerow(row)
        self.handle.flush()


class RunWriter:
    """Writes one run directory incrementally.

    Parameters
    ----------
    out_dir : directory to create (may exist; its run files are replaced).
    scenario_toml : the resolved scenario as TOML text.
    metric_fields : column names of ``metrics.csv`` (extra per-node columns may be appended).
    """

    def __init__(self, out_dir: str | Path, scenario_toml: str, metric_fields: tuple[str, ...] = METRIC_FIELDS) -> None:
        self.dir = Path(out_dir)
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ResultsError(f"cannot create run directory {self.dir}: {exc.strerror}") from None
        (self.dir / "summary.json").unlink(missing_ok=True)
        (self.dir / "scenario.toml").write_text(scenario_toml)
        self.metrics = self._open("metrics.csv", metric_fields)
        self.evals = self._open("evals.csv", EVAL_FIELDS)
        self.closed = False

    def _open(self, name: str, fields: tuple[str, ...]) -> _CsvLog:
        handle = open(self.dir / name, "w", newline="")
        writer = csv.DictWriter(handle, fieldnames=list(fields), extrasaction="raise")
        writer.writeheader()
        handle.flush()
        return _CsvLog(handle, writer)

    def write_metrics(self, row: dict[str, Any]) -> None:
        """Append and flush one iteration's row."""
        self.metrics.write(row)

    def write_eval(self, row: dict[str, Any]) -> None:
        """Append and flush one evaluation's row."""
        self.evals.write(row)

    def write_trace(self, events: Iterable[dict[str, Any]]) -> None:
        """``trace.json`` in Chrome trace-event format (opens in Perfetto): the bytes of
        ``json.dumps({"traceEvents": [...], "displayTimeUnit": "ms"})``, written
        :data:`TRACE_CHUNK` events at a time (a fleet run has millions: never one string)."""
        atomic_write(self.dir / "trace.json", _trace_json(events))

    def finish(self, summary: dict[str, Any]) -> Path:
        """Close the logs and write ``summary.json`` (atomically). Returns its path."""
        if not self.closed:
            self.metrics.handle.close()
            self.evals.handle.close()
            self.closed = True
        path = self.dir / "summary.json"
        atomic_write(path, json.dumps({"schema_version": SCHEMA_VERSION, **summary}, indent=2, default=_jsonable))
        return path


def _jsonable(obj: Any) -> Any:
    if hasattr(obj, "item"):
        return obj.item()
    return str(obj)


def _trace_json(events: Iterable[dict[str, Any]]) -> Iterator[str]:
    """Pieces of ``json.dumps({"traceEvents": list(events), "displayTimeUnit": "ms"})``."""
    yield '{"traceEvents": ['
    it, sep = iter(events), ""
    while chunk := list(itertools.islice(it, TRACE_CHUNK)):
        yield sep + json.dumps(chunk)[1:-1]  # "[a, b]" -> "a, b": the list's own separators
        sep = ", "
    yield '], "displayTimeUnit": "ms"}'


def atomic_write(path: Path, data: str | bytes | Iterable[str]) -> None:
    """Write ``data`` (or its pieces, in order) to ``path`` through a temporary file and a rename,
    so that a reader sees either the old file or the whole new one, never a part."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    try:
        if isinstance(data, bytes):
            tmp.write_bytes(data)
        elif isinstance(data, str):
            tmp.write_text(data)
        else:
            with tmp.open("w") as fh:
                fh.writelines(data)
    except BaseException:  # a full disk, or the pieces failed midway: no half file left, the old one stays
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)


# ---- reading -----------------------------------------------------------------------------------
# A run's readers raise nothing but ResultsError, whose message names the damaged file. What they
# check is what the comparisons and figures rely on; a field the engine may leave null (a ratio of an
# empty run, an accuracy never evaluated) may be null, one it always fills must be a number.
SUMMARY_NUMBERS = ("target_accuracy", "sim_time_s", "bytes_up", "bytes_down", "wire_bytes_up", "wire_bytes_down")
SUMMARY_OPTIONAL_NUMBERS = (
    "throughput_samples_per_s",
    "compression_ratio",
    "final_accuracy",
    "time_to_accuracy_s",
    "compute_share",
    "encode_share",
    "decode_share",
    "comm_share",
)
# Columns the readers of metrics.csv / evals.csv use; each must be present and numeric in every row.
METRIC_COLUMNS = ("iteration", "sim_time_s", "loss", "wire_bytes_up", "wire_bytes_down")
EVAL_COLUMNS = ("iteration", "sim_time_s", "accuracy")
FINITE_COLUMNS = ("iteration", "sim_time_s")  # must also be finite (a loss may be nan)

_log = logging.getLogger("aiotsim.results")


def warn(message: str) -> None:
    """The default sink of reader warnings (a skipped directory and why): the ``aiotsim.results``
    logger, which prints ``warning: ...`` on stderr when nothing else is configured."""
    _log.warning("warning: %s", message)


Warn = Callable[[str], None]


def read_text(path: Path) -> str:
    """A file's UTF-8 text, or ResultsError naming the file."""
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ResultsError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise ResultsError(f"{path}: cannot read ({exc.strerror or exc})") from None


def read_json(path: Path) -> Any:
    """A JSON file's content, or ResultsError naming the file."""
    try:
        return json.loads(read_text(path))
    except json.JSONDecodeError as exc:
        raise ResultsError(f"{path}: not valid JSON ({exc})") from None
    except RecursionError:
        raise ResultsError(f"{path}: not valid JSON (nested too deeply)") from None


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def check_summary(data: Any, path: Path) -> dict[str, Any]:
    """``data`` when it is a summary the readers can use, else ResultsError naming ``path``."""
    if not isinstance(data, dict):
        raise ResultsError(f"{path}: must be a JSON object, got {type(data).__name__}")
    if data.get("schema_version") != SCHEMA_VERSION:
        raise ResultsError(f"{path}: schema_version {data.get('schema_version')!r}, expected {SCHEMA_VERSION}")
    problems = []
    if not isinstance(data.get("compressor"), str) or not data["compressor"]:
        problems.append(f"compressor is {data.get('compressor')!r}, expected a codec name")
    if not isinstance(data.get("complete"), bool):
        problems.append(f"complete is {data.get('complete')!r}, expected true or false")
    for key in SUMMARY_NUMBERS:
        if not _is_number(data.get(key)):
            problems.append(f"{key} is {data.get(key)!r}, expected a number")
    for key in SUMMARY_OPTIONAL_NUMBERS:
        if data.get(key) is not None and not _is_number(data[key]):
            problems.append(f"{key} is {data[key]!r}, expected a number or null")
    if problems:
        raise ResultsError(f"{path}: " + "; ".join(problems))
    return data


def read_summary(run_dir: str | Path) -> dict[str, Any]:
    """``summary.json`` of a run directory, checked for a known schema version and usable fields.

    Raises
    ------
    ResultsError
        When the file is missing, unreadable, not UTF-8, not JSON, not an object, of another
        schema version, or lacks a field the readers need (the message names the file).
    """
    path = Path(run_dir) / "summary.json"
    if not path.is_file():
        raise ResultsError(f"{run_dir}: no summary.json (not a run directory, or the run never started)")
    return check_summary(read_json(path), path)


def read_csv(path: str | Path, required: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Rows of a metrics/evals CSV with numeric values as floats.

    Parameters
    ----------
    path : the CSV file.
    required : columns that must be in the header and hold a number in every row.

    Raises
    ------
    ResultsError
        When the file is missing, not UTF-8, has a row with more or fewer fields than the header
        (a file cut mid-row) or a required column that is missing or not numeric.
    """
    p = Path(path)
    if not p.is_file():
        raise ResultsError(f"{p}: missing")
    text = read_text(p)
    if text and not text.endswith("\n"):  # the writer ends every row with a line end
        raise ResultsError(f"{p}: last line {text.count(chr(10)) + 1} has no line end (file cut mid-row)")
    reader = csv.DictReader(io.StringIO(text, newline=""))
    try:
        header = reader.fieldnames or []
        missing = [c for c in required if c not in header]
        if missing:
            raise ResultsError(f"{p}: no column {', '.join(missing)} (header: {','.join(header) or 'empty'})")
        rows = [_csv_row(p, reader.line_num, row, required) for row in reader]
    except csv.Error as exc:
        raise ResultsError(f"{p}: line {reader.line_num}: not CSV ({exc})") from None
    return rows


def _csv_row(path: Path, line: int, row: dict[Any, Any], required: Sequence[str]) -> dict[str, Any]:
    if None in row or None in row.values():
        raise ResultsError(f"{path}: line {line}: wrong number of fields (file cut short or damaged)")
    out = {k: _num(v) for k, v in row.items()}
    bad = [c for c in required if not _is_number(out[c]) or (c in FINITE_COLUMNS and not math.isfinite(out[c]))]
    if bad:
        raise ResultsError(f"{path}: line {line}: {', '.join(f'{c}={row[c]!r}' for c in bad)}: not a number")
    return out


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    """``metrics.csv`` of a run directory, checked (see :func:`read_csv`)."""
    return read_csv(Path(run_dir) / "metrics.csv", METRIC_COLUMNS)


def read_evals(run_dir: str | Path) -> list[dict[str, Any]]:
    """``evals.csv`` of a run directory, checked (see :func:`read_csv`)."""
    return read_csv(Path(run_dir) / "evals.csv", EVAL_COLUMNS)


def _num(v: str) -> Any:
    try:
        return float(v)
    except (TypeError, ValueError):
        return v


def is_run_dir(path: str | Path) -> bool:
    """True when ``path`` holds a complete run (a readable summary with ``complete: true``)."""
    return run_dir_problem(path) is None


def run_dir_problem(path: str | Path) -> str | None:
    """None when ``path`` holds a complete run, else why not (no summary, damaged, incomplete)."""
    try:
        summary = read_summary(path)
    except ResultsError as exc:
        return exc.message
    if not summary["complete"]:
        return f"{Path(path) / 'summary.json'}: run is incomplete ({summary.get('status')})"
    return None


# ---- output paths ------------------------------------------------------------------------------
def make_dir(path: str | Path) -> Path:
    """Create directory ``path`` (and its parents) and check it can be written, or raise
    ``ResultsError("cannot write to PATH: why")``."""
    p = Path(path)
    try:
        p.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise ResultsError(f"cannot write to {p}: exists and is not a directory") from None
    except OSError as exc:
        raise ResultsError(f"cannot write to {p}: {exc.strerror or exc}") from None
    if not os.access(p, os.W_OK | os.X_OK):
        raise ResultsError(f"cannot write to {p}: permission denied")
    return p


def write_file(path: Path, data: str | bytes) -> None:
    """:func:`atomic_write` that raises ``ResultsError("cannot write to PATH: why")`` on failure."""
    try:
        atomic_write(path, data)
    except OSError as exc:
        raise ResultsError(f"cannot write to {path}: {exc.strerror or exc}") from None


# ---- one writer per run directory ----------------------------------------------------------------
LOCK_NAME = ".aiotsim.lock"  # in a run directory while a process writes it; holds who that is


def run_dir_path(out_dir: str | Path) -> Path:
    """``out_dir`` as a Path; an empty or blank string is a :class:`ConfigError` (``Path("")`` is
    the current directory, whose ``checkpoint.pt`` a new run would delete)."""
    if not str(out_dir).strip():
        raise ConfigError(f"output directory {str(out_dir)!r} is empty: give a directory name (e.g. -o runs/mine)")
    return Path(out_dir)


WRITTEN = ("metrics.csv", "evals.csv", "trace.json", "summary.json")  # besides scenario.toml, written first


def check_replaceable(out_dir: str | Path, others: Sequence[str] = ()) -> None:
    """Raise :class:`ResultsError` when ``out_dir`` holds a file a new run would replace or delete
    (:data:`WRITTEN`, ``others`` such as ``checkpoint.pt``) but is not a run directory (no
    ``scenario.toml``, which a run writes first): ``--out .`` in a folder with a model's
    ``checkpoint.pt`` or a ``metrics.csv`` of its own. A run directory's files are replaced."""
    d = Path(out_dir)
    if not d.is_dir() or (d / "scenario.toml").is_file():
        return
    found = [name for name in (*WRITTEN, *others) if (d / name).exists()]
    if found:
        raise ResultsError(
            f"{d} is not a run directory (no scenario.toml) but holds {', '.join(found)}, which a run would "
            "replace: choose another output directory (e.g. -o runs/mine)"
        )


@contextlib.contextmanager
def locked_run_dir(out_dir: str | Path) -> Iterator[Path]:
    """Hold the run directory ``out_dir`` (created if needed) for this process while the block runs.

    The lock is ``fcntl.flock`` on :data:`LOCK_NAME` inside it: the kernel drops it when the process
    ends, however it ends (kill -9 leaves no lock that blocks a later ``--resume``). The file says
    who holds it (pid, host, command, start time); it is removed on the way out.

    Raises
    ------
    ResultsError
        When another process (or another open of it in this one) holds the directory; the message
        names the holder. ``cannot write to ...`` when the directory cannot be created.
    """
    d = run_dir_path(out_dir)
    created = not d.exists()
    make_dir(d)
    handle = _acquire(d / LOCK_NAME)
    try:
        yield d
    except BaseException:
        _release(d, handle)
        if created:  # a run refused before it wrote anything leaves no empty directory behind
            with contextlib.suppress(OSError):
                d.rmdir()
        raise
    _release(d, handle)


def _release(d: Path, handle: Any) -> None:
    """Remove the lock file, then unlock: a process that opened the old file before the removal
    sees its inode gone and takes the new one (see :func:`_acquire`)."""
    with contextlib.suppress(OSError):
        (d / LOCK_NAME).unlink()
    handle.close()


F = TypeVar("F", bound=Callable[..., Any])


def holding_run_dir(param: str) -> Callable[[F], F]:
    """Decorate a function that writes the run directory passed as its argument ``param`` so that
    it runs inside :func:`locked_run_dir` (one writer per run directory)."""

    def decorate(fn: F) -> F:
        signature = inspect.signature(fn)

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with locked_run_dir(signature.bind(*args, **kwargs).arguments[param]):
                return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate


def _acquire(path: Path) -> Any:
    """The open, exclusively flock-ed lock file ``path`` with this process's description in it."""
    while True:
        try:
            handle = open(path, "a+")
        except OSError as exc:
            raise ResultsError(f"cannot write to {path}: {exc.strerror or exc}") from None
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # held
            handle.seek(0)
            holder = "".join(c for c in handle.read(500) if c.isprintable()).strip()
            handle.close()
            raise ResultsError(
                f"{path.parent} is in use by another aiotsim process ({holder or 'not yet said who'}); "
                "wait for it to end, stop it, or choose another output directory"
            ) from None
        except OSError as exc:  # a file system without locks
            handle.close()
            raise ResultsError(f"cannot lock {path}: {exc.strerror or exc}; choose another output directory") from None
        try:  # the holder may have removed the file between our open and our lock: lock the new one
            same = os.stat(path).st_ino == os.fstat(handle.fileno()).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        handle.close()
    handle.truncate(0)
    started = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    handle.write(f"pid {os.getpid()} on {socket.gethostname()}, since {started}: {' '.join(sys.argv)[:200]}")
    handle.flush()
    return handle
