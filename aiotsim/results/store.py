"""Run directories: the versioned files a run leaves behind, written as the run goes.

A run directory holds ``scenario.toml`` (the resolved scenario), ``metrics.csv`` (one row per
iteration, flushed as written), ``evals.csv`` (one row per evaluation), ``trace.json``
(Chrome/Perfetto trace events) and ``summary.json`` (``schema_version``; ``complete: false`` with a
``status`` when the run was interrupted or failed). Rows are flushed one by one, so whatever was
computed before a Ctrl-C or an error stays readable. Comparisons and plots read only these files.
"""

from __future__ import annotations

import csv
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from aiotsim.errors import ResultsError
from aiotsim.records import EVAL_FIELDS, METRIC_FIELDS

SCHEMA_VERSION = 1


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

    def write_trace(self, events: list[dict[str, Any]]) -> None:
        """``trace.json`` in Chrome trace-event format (opens in Perfetto)."""
        atomic_write(self.dir / "trace.json", json.dumps({"traceEvents": events, "displayTimeUnit": "ms"}))

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


def atomic_write(path: Path, data: str | bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file and a rename, so that a reader sees
    either the old file or the whole new one, never a part."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    if isinstance(data, bytes):
        tmp.write_bytes(data)
    else:
        tmp.write_text(data)
    os.replace(tmp, path)


# ---- reading -----------------------------------------------------------------------------------
def read_summary(run_dir: str | Path) -> dict[str, Any]:
    """``summary.json`` of a run directory, checked for a known schema version."""
    path = Path(run_dir) / "summary.json"
    if not path.is_file():
        raise ResultsError(f"{run_dir}: no summary.json (not a run directory, or the run never started)")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ResultsError(f"{path}: not valid JSON ({exc})") from None
    if data.get("schema_version") != SCHEMA_VERSION:
        raise ResultsError(f"{path}: schema_version {data.get('schema_version')!r}, expected {SCHEMA_VERSION}")
    return data


def read_csv(path: str | Path) -> list[dict[str, float]]:
    """Rows of a metrics/evals CSV with numeric values as floats."""
    p = Path(path)
    if not p.is_file():
        raise ResultsError(f"{p}: missing")
    with open(p, newline="") as f:
        rows = []
        for row in csv.DictReader(f):
            rows.append({k: _num(v) for k, v in row.items()})
        return rows


def _num(v: str) -> Any:
    try:
        return float(v)
    except (TypeError, ValueError):
        return v


def is_run_dir(path: str | Path) -> bool:
    """True when ``path`` holds a complete run (a summary with ``complete: true``)."""
    p = Path(path) / "summary.json"
    if not p.is_file():
        return False
    try:
        return bool(json.loads(p.read_text()).get("complete"))
    except json.JSONDecodeError:
        return False
