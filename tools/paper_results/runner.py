"""Runs of ``scenarios/paper/*.toml`` cached in one directory per row.

A run directory ``root/<key>/`` is reused when its ``summary.json`` is complete and its
``spec.json`` names the same scenario, overrides and code (a SHA-256 of aiotsim's sources and the
scenario file, :func:`aiotsim.results.provenance.inputs_digest`); anything else is run again.
"""

from __future__ import annotations

import functools
import json
import multiprocessing
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiotsim.api import run_scenario
from aiotsim.config import load_scenario
from aiotsim.results.provenance import inputs_digest
from aiotsim.results.store import read_evals, read_metrics

ROOT = Path(__file__).resolve().parent.parent.parent
SCENARIOS = Path("scenarios/paper")
Summary = dict[str, Any]


@dataclass(frozen=True)
class Spec:
    """One aiotsim run: a scenario file plus ``--set`` overrides, cached under ``key``.

    ``check`` marks a run cheap enough (seconds) for ``tools/results.py --check`` to redo in CI."""

    key: str
    scenario: str  # file name under scenarios/paper/
    overrides: tuple[str, ...] = ()
    check: bool = False

    @property
    def path(self) -> Path:
        """The scenario file, relative to the repository root."""
        return SCENARIOS / self.scenario

    @property
    def command(self) -> str:
        """The CLI command that reproduces this run."""
        parts = ["aiotsim run", str(self.path)] + [f"--set {o}" for o in self.overrides]
        return "`" + " ".join(parts) + "`"


class Missing(Exception):
    """A run the report needs is not in the cache and the runner may not make it."""

    def __init__(self, spec: Spec) -> None:
        super().__init__(spec.key)
        self.spec = spec


class Runner:
    """Runs specs into ``root/<key>/`` with a cache of complete run directories.

    ``run_missing``: make a run that is not cached (else raise :class:`Missing`); ``only_check``:
    make (and read) only the runs marked ``check``, all others are :class:`Missing`."""

    def __init__(self, root: Path, run_missing: bool = True, only_check: bool = False, device: str = "cpu") -> None:
        self.root = root
        self.device = device  # "cpu" (one torch thread: the report's numbers) or "cuda" (--full)
        self.run_missing = run_missing
        self.only_check = only_check
        self.ran: list[tuple[str, float]] = []  # (key, wall seconds) of runs made this time
        self.used: dict[str, Summary] = {}  # every run directory the report reads, by key

    def __call__(self, spec: Spec) -> Summary:
        """The summary of ``spec``'s run: read from its directory, or run now."""
        if self.only_check and not spec.check:
            raise Missing(spec)
        out = self.root / spec.key
        wanted = spec_record(spec)
        cached = cached_summary(out, wanted)
        if cached is not None:
            self.used[spec.key] = cached
            return cached
        if not self.run_missing:
            raise Missing(spec)
        scenario = load_scenario(ROOT / spec.path, list(spec.overrides))
        print(f"[results] running {spec.key}: {spec.command}", flush=True)
        t0 = time.perf_counter()
        threads = 1 if self.device == "cpu" else "auto"
        summary = run_scenario(scenario, out, device=self.device, threads=threads)
        self.ran.append((spec.key, time.perf_counter() - t0))
        (out / "spec.json").write_text(json.dumps(wanted, indent=1))
        print(f"[results] {spec.key}: {summary['status']} in {self.ran[-1][1]:.0f} s", flush=True)
        self.used[spec.key] = summary
        return summary

    def evals(self, spec: Spec) -> list[tuple[int, float, float]]:
        """``(iterations done, simulated s, accuracy)`` of every evaluation of ``spec``'s run
        (its ``evals.csv``); empty when there is no run directory (the :class:`Recorder`)."""
        if not (self.root / spec.key / "evals.csv").is_file():
            return []
        return [(int(r["iteration"]) + 1, r["sim_time_s"], r["accuracy"]) for r in read_evals(self.root / spec.key)]

    def metrics(self, spec: Spec) -> list[dict[str, Any]]:
        """The rows of ``spec``'s ``metrics.csv`` (one per iteration, numbers parsed); empty without a run."""
        if not (self.root / spec.key / "metrics.csv").is_file():
            return []
        return read_metrics(self.root / spec.key)


class _DryRunSummary(dict[str, Any]):
    """A summary whose every field is 1.0: lets a section be laid out without its runs."""

    def __missing__(self, key: str) -> float:
        return 1.0


class Recorder(Runner):
    """A runner that only records the specs a section asks for (to run them in parallel first)."""

    def __init__(self) -> None:
        super().__init__(Path())
        self.specs: list[Spec] = []

    def __call__(self, spec: Spec) -> Summary:
        """Remember ``spec``; return a dry-run summary (no run is made)."""
        if spec not in self.specs:
            self.specs.append(spec)
        return _DryRunSummary()


def _run_one(args: tuple[Path, Spec]) -> tuple[str, float]:
    """Pool worker: run one spec (if not cached); its key and wall seconds."""
    root, spec = args
    run = Runner(root)
    run(spec)
    return run.ran[0] if run.ran else (spec.key, 0.0)


def prefetch(specs: Sequence[Spec], root: Path, jobs: int) -> list[tuple[str, float]]:
    """Run ``specs`` in ``jobs`` processes (in the order given: put the longest first)."""
    with multiprocessing.get_context("spawn").Pool(jobs, maxtasksperchild=1) as pool:
        done = pool.map(_run_one, [(root, s) for s in specs], chunksize=1)
    return [d for d in done if d[1] > 0]


@functools.cache
def _code_digest(scenario: str) -> str:
    """:func:`inputs_digest` of one scenario file, read once per process (it hashes the package)."""
    return inputs_digest(ROOT, [scenario])


def spec_record(spec: Spec) -> dict[str, Any]:
    """What ``spec.json`` holds of a run: its scenario, overrides and the code that made it (a
    digest of aiotsim's sources and the scenario file): a run of other code is made again."""
    code = _code_digest(spec.path.as_posix())
    return {"scenario": str(spec.path), "overrides": list(spec.overrides), "code": code}


def cached_summary(out: Path, wanted: dict[str, Any]) -> Summary | None:
    """The summary in ``out`` if that run is complete and was made from ``wanted``; else None."""
    try:
        spec = json.loads((out / "spec.json").read_text())
        summary: Summary = json.loads((out / "summary.json").read_text())
    except (OSError, ValueError):
        return None
    return summary if spec == wanted and summary.get("complete") else None
