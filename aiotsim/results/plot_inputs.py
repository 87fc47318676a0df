"""What ``aiotsim plot`` draws from its inputs: run, comparison and sweep directories, read and checked.

:func:`collect` sorts the inputs into plain runs and sweeps: a run directory; a comparison directory,
whose ``comparison.json`` lists the runs that belong to it (only those are drawn, not the runs an
earlier comparison with other settings left beside them); a sweep directory (``sweep.json``); any
other directory, every run directory below it (a comparison written before ``comparison.json``
existed: drawn whole, with a warning). Runs are grouped by compressor (:func:`assign_groups`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiotsim.errors import ResultsError
from aiotsim.results.compare import is_comparison_dir, read_comparison_runs
from aiotsim.results.store import Warn, read_evals, read_metrics, read_summary
from aiotsim.results.store import warn as store_warn
from aiotsim.results.sweep import is_sweep_dir, read_manifest

SEED_KEY = "scenario.seed"
CODEC_KEY = "compressor.name"


@dataclass
class Run:
    """One run directory's files, loaded."""

    dir: Path
    summary: dict[str, Any]
    metrics: list[dict[str, float]]
    evals: list[dict[str, float]]
    group: str = ""


def load_run(run_dir: str | Path) -> Run:
    """Read and check ``summary.json``, ``metrics.csv`` and ``evals.csv`` of a complete run directory.

    Raises
    ------
    ResultsError
        When the run is incomplete or a file is missing or damaged (the message names the file).
    """
    d = Path(run_dir)
    summary = read_summary(d)
    if not summary["complete"]:
        raise ResultsError(f"{d}: run is incomplete ({summary.get('status')})")
    return Run(d, summary, read_metrics(d), read_evals(d))


def find_run_dirs(path: str | Path) -> list[Path]:
    """``path`` itself when it holds a ``summary.json``, else every directory below it that does
    (sorted), complete or not: :func:`load_run` says which can be read."""
    p = Path(path)
    if (p / "summary.json").is_file():
        return [p]
    return sorted(s.parent for s in p.rglob("summary.json") if s.is_file())


@dataclass
class SweepData:
    """A sweep directory: its manifest and its points' runs (points not yet run are left out)."""

    dir: Path
    name: str
    grid: dict[str, list[Any]]
    points: list[tuple[dict[str, Any], Run]]


@dataclass
class _Inputs:
    """What :func:`collect` gathers: runs, sweeps, and a line per skipped input or run."""

    runs: list[Run]
    sweeps: list[SweepData]
    problems: list[str]
    seen: set[Path]
    notes: list[str]  # warnings about inputs that are used

    def add_run(self, d: Path) -> None:
        if d.resolve() in self.seen:
            return
        try:
            run = load_run(d)
        except ResultsError as exc:
            self.problems.append(exc.message)
            return
        self.seen.add(d.resolve())
        self.runs.append(run)


def collect(paths: Sequence[str | Path], warn: Warn | None = None) -> tuple[list[Run], list[SweepData]]:
    """Sort inputs into plain runs and sweeps.

    An input that does not exist or holds nothing usable, and every run directory or sweep that
    cannot be read (incomplete, damaged), is skipped with one ``warn`` line naming it and the
    problem (default: :func:`~aiotsim.results.store.warn`).

    Raises
    ------
    ResultsError
        When no input holds a usable run: every problem, one line each.
    """
    if not paths:
        raise ResultsError("no input directories given")
    got = _Inputs([], [], [], set(), [])
    for path in paths:
        p = Path(path)
        if p.is_file() and p.suffix == ".toml":  # a scenario or sweep file: nothing run yet
            got.problems.append(f"{p}: a scenario or sweep file; plot reads what a run, compare or sweep wrote")
        elif not p.is_dir():
            got.problems.append(f"{p}: no such directory")
        elif is_comparison_dir(p):
            _collect_comparison(p, got)
        elif is_sweep_dir(p):
            _collect_sweep(p, got)
        else:
            _collect_below(p, got)
    if not got.runs and not got.sweeps:
        raise ResultsError("\n".join(got.problems or ["no usable run directory"]))
    for line in got.problems:
        (warn or store_warn)(f"skipped {line}")
    for line in got.notes:
        (warn or store_warn)(line)
    assign_groups(got.runs)
    return got.runs, got.sweeps


def _collect_below(p: Path, got: _Inputs) -> None:
    """Every run directory at or below ``p`` (a comparison of an older aiotsim: said in a note)."""
    found = find_run_dirs(p)
    for d in found:
        got.add_run(d)
    if not found:
        got.problems.append(
            f"{p}: no complete run directory found (a run directory holds summary.json with complete: true)"
        )
    elif (p / "comparison.csv").is_file():
        got.notes.append(
            f"{p}: no comparison.json (a comparison written before aiotsim recorded its runs): drawing every "
            f"run directory below it ({len(found)}); rerun `aiotsim compare` to draw one comparison only"
        )


def _collect_comparison(p: Path, got: _Inputs) -> None:
    """The run directories a comparison's ``comparison.json`` lists, and no others."""
    try:
        dirs = read_comparison_runs(p)
    except ResultsError as exc:
        got.problems.append(exc.message)
        return
    for d in dirs:
        got.add_run(d)
    if not any(d.resolve() in got.seen for d in dirs):
        got.problems.append(f"{p}: none of the comparison's {len(dirs)} runs is complete")


def _collect_sweep(p: Path, got: _Inputs) -> None:
    """A sweep directory's runs: as a sweep when it varies more than the codec and the seed."""
    try:
        man = read_manifest(p)
    except ResultsError as exc:
        got.problems.append(exc.message)
        return
    pts = []
    for pt in man["points"]:
        d = p / pt["run_dir"]
        if not (d / "summary.json").is_file():
            continue  # not run yet
        try:
            pts.append((pt["values"], load_run(d)))
        except ResultsError as exc:
            got.problems.append(exc.message)
    if not pts:
        got.problems.append(f"{p}: sweep has no complete run yet (run `aiotsim sweep` first)")
        return
    if [k for k in man["grid"] if k not in (CODEC_KEY, SEED_KEY)]:
        got.sweeps.append(SweepData(p, man["name"], man["grid"], pts))
        return
    for _, r in pts:  # only codecs (and seeds) vary: a comparison
        if r.dir.resolve() not in got.seen:
            got.seen.add(r.dir.resolve())
            got.runs.append(r)


def assign_groups(runs: list[Run]) -> None:
    """Each run's ``group``: its codec, ``mode/codec`` when modes are mixed, prefixed by the scenario
    name when scenarios are mixed."""
    multi = len({r.summary.get("scenario") for r in runs}) > 1
    modes = len({r.summary.get("mode") for r in runs}) > 1  # e.g. sync-PS beside federated
    for r in runs:
        name = f"{r.summary.get('mode')}/{r.summary['compressor']}" if modes else str(r.summary["compressor"])
        r.group = f"{r.summary.get('scenario')}/{name}" if multi else name


__all__ = ["Run", "SweepData", "load_run", "find_run_dirs", "collect", "assign_groups", "SEED_KEY", "CODEC_KEY"]
