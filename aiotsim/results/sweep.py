"""Sweeps: a base scenario, a grid over any scenario keys, one run directory per grid point.

A sweep file is TOML::

    [sweep]
    base = "../scenarios/iot10.toml"   # relative to the sweep file
    name = "uplink"                    # optional; default: the file's stem
    out = "runs/sweep-uplink"          # optional; default: runs/sweep-<name> (relative to the CWD)

    [set]                              # optional: fixed overrides for every point
    "scenario.iterations" = 100

    [grid]                             # every combination of these values is one run
    "network.uplink_mbps" = [1, 10, 100]
    "compressor.name" = ["none", "2bit", "topk"]
    "scenario.seed" = [1, 2, 3]

:func:`load_sweep` validates every grid point before anything runs and reports all problems at once.
Each point's run directory is ``OUT/runs/<hash>``, the first 12 hex digits of the SHA-256 of its
resolved scenario TOML, so the same scenario always lands in the same directory: re-running a sweep
skips every point whose directory already holds a complete run (``summary.json`` with
``complete: true``) and runs only the rest. Nothing already computed is redone or lost after an
interruption.

The sweep directory also holds ``sweep.json`` (the grid and each point's values and run directory,
which is what ``aiotsim plot`` reads) and ``sweep.csv``, the index: the grid values, the status and
the key summary metrics of every point, rewritten as runs finish.

Points that learn the same thing (equal :func:`~aiotsim.sim.replay_rule.learning_key`: e.g. one
codec at several network settings) are not all trained: :func:`plan_sweep` trains one run per
group and replays the others from its timing record (:mod:`aiotsim.results.replay_plan`), or
replays all of them from a complete run of the group already in ``OUT/runs``. ``sweep.json`` and
``sweep.csv`` mark each point ``replayed`` with the run directory it was replayed from.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiotsim.config import (
    apply_overrides,
    parse_overrides,
    path_safe_name,
    read_toml,
    scenario_from_dict,
    short_run_eval_every,
)
from aiotsim.errors import ConfigError, ResultsError
from aiotsim.results.compare import MAX_PLANNED_RUNS, scenario_key, variant_data
from aiotsim.results.parallel import Job
from aiotsim.results.replay_plan import (
    ReplayPlan,
    find_sources,
    job_learning_key,
    plan_replays,
    replayed_from,
)
from aiotsim.results.store import is_run_dir, make_dir, read_json, read_summary, run_dir_path, write_file
from aiotsim.validate import validate_scenario

SWEEP_KEYS = {"base", "name", "out"}
# The most grid points a sweep may have: each is a run directory, and each is validated (~7 ms) before
# anything runs, so 10,000 points take over a minute to plan; a 300 x 300 grid took 10 minutes, silent.
MAX_GRID_POINTS = MAX_PLANNED_RUNS  # as for a comparison
# Summary metrics copied into sweep.csv, in this order.
INDEX_METRICS = (
    "throughput_samples_per_s",
    "sim_time_s",
    "bytes_up",
    "bytes_down",
    "wire_bytes_up",
    "wire_bytes_down",
    "compression_ratio",
    "final_accuracy",
    "time_to_accuracy_s",
    "compute_share",
    "comm_share",
)


@dataclass(frozen=True)
class SweepPoint:
    """One grid point: its values (``{"network.uplink_mbps": 10, ...}``), resolved scenario and key."""

    values: dict[str, Any]
    scenario_toml: str
    key: str  # 12 hex digits of sha256(scenario_toml)

    def label(self) -> str:
        """``"uplink_mbps=10 name=2bit"`` (the key part after the section)."""
        return " ".join(f"{k.partition('.')[2]}={v}" for k, v in self.values.items())


@dataclass(frozen=True)
class Sweep:
    """A validated sweep: the grid, its points (in grid order) and the sweep directory."""

    path: Path
    name: str
    base: Path
    fixed: dict[str, Any]
    grid: dict[str, list[Any]]
    points: list[SweepPoint]
    out_dir: Path

    def run_dir(self, point: SweepPoint) -> Path:
        """Where ``point`` runs: ``OUT/runs/<hash>``."""
        return self.out_dir / "runs" / point.key

    def jobs(self, device: str = "auto") -> list[Job]:
        """A job per distinct point (points resolving to the same scenario share a run)."""
        seen: set[str] = set()
        out = []
        for p in self.points:
            if p.key not in seen:
                seen.add(p.key)
                out.append(Job(p.label(), p.scenario_toml, str(self.run_dir(p)), device))
        return out

    def pending(self, device: str = "auto") -> list[Job]:
        """The jobs whose run directory does not hold a complete run yet."""
        return [j for j in self.jobs(device) if not is_run_dir(j.out_dir)]

    def replay_source(self, point: SweepPoint) -> str | None:
        """Where ``point``'s run was replayed from, relative to the sweep directory when inside it
        (``"runs/<hash>"``); None when it was trained (or has not run)."""
        src = replayed_from(self.run_dir(point))
        if src is None:
            return None
        path = Path(src) if Path(src).is_absolute() else Path(os.path.abspath(src))
        rel = os.path.relpath(path, os.path.abspath(self.out_dir))
        return src if rel.startswith("..") else Path(rel).as_posix()


def plan_sweep(sweep: Sweep, device: str = "auto", replay: bool = True) -> ReplayPlan:
    """Which pending points train in full and which are replayed (see the module docstring).

    Replay sources are looked for among the sweep's run directories (its points first, in grid
    order, then any other run directory in ``OUT/runs``, e.g. of an earlier sweep with other
    network values). With ``replay=False`` (``--no-replay``), or where this installation cannot
    replay, every pending point trains.
    """
    pending = sweep.pending(device)
    if not replay or not pending:
        return ReplayPlan(pending, [])
    jobs = sweep.jobs(device)
    keys = {j.out_dir: job_learning_key(j) for j in jobs}
    runs = sweep.out_dir / "runs"
    others = sorted(p for p in runs.iterdir() if p.is_dir() and str(p) not in keys) if runs.is_dir() else []
    sources = find_sources([*(Path(j.out_dir) for j in jobs), *others], known=keys)
    return plan_replays(pending, [keys[j.out_dir] for j in pending], sources)


def load_sweep(
    path: str | Path,
    out_dir: str | Path | None = None,
    overrides: Sequence[str] = (),
    iterations: int | None = None,
    seeds: int = 1,
) -> Sweep:
    """Read a sweep file and validate every grid point.

    Parameters
    ----------
    path : the sweep TOML file.
    out_dir : sweep directory (default: ``[sweep] out``, else ``runs/sweep-<name>``).
    overrides : ``"section.key=value"`` for every point (``--set``), over the file's ``[set]``;
        a key the grid sweeps is refused.
    iterations : ``scenario.iterations`` for every point (``-n``), likewise; a shortened run also
        evaluates more often, as ``aiotsim run -n`` does.
    seeds : seeds per grid point (``--seeds``): ``scenario.seed``, +1, ..., added to the grid as
        its last key (each seed is a point of its own; ``aiotsim plot`` averages them).

    Raises
    ------
    ConfigError
        Every problem at once: the file's own structure (unknown tables or keys, a grid value that
        is not a non-empty list, a key not of the form ``section.key``), an override of a swept key,
        and each grid point that does not validate (unknown scenario key, bad value), each
        distinct message once.
    """
    p = Path(path)
    data = read_toml(p)
    if "scenario" in data and not {"sweep", "set", "grid"} & set(data):  # a scenario given as a sweep file
        raise ConfigError(
            f"{p}: a scenario, not a sweep file; run it with `aiotsim run {p}`, or sweep it from a file "
            f'with [sweep] base = "{p.name}" and [grid] "section.key" = [values]'
        )
    problems = _structure_problems(data, str(p))
    head = data.get("sweep") if isinstance(data.get("sweep"), dict) else {}
    base = _base_path(p, head, problems)
    fixed, grid = data.get("set", {}), data.get("grid", {})
    if problems or base is None:
        raise ConfigError(problems)
    base_data = read_toml(base)
    fixed, grid = _command_line(p, base_data, fixed, grid, (overrides, iterations, seeds))
    points = _points(base_data, fixed, grid, str(p))
    name = head.get("name", p.stem)
    if out_dir is None and "out" not in head and (bad := path_safe_name(str(name))):
        raise ConfigError(f"{p}: sweep.name: {bad}; or give [sweep] out / --out")
    out = run_dir_path(out_dir) if out_dir is not None else Path(head.get("out", f"runs/sweep-{name}"))
    return Sweep(p, str(name), base, dict(fixed), {k: list(v) for k, v in grid.items()}, points, out)


def _structure_problems(data: dict[str, Any], where: str) -> list[str]:
    """Problems of the sweep file's own structure: tables, [sweep] keys, [set] and [grid] keys and values."""
    problems: list[str] = []
    for table in data:
        if table not in ("sweep", "set", "grid"):
            problems.append(f"{where}: [{table}]: unknown table; valid: [sweep], [set], [grid]")
    head = data.get("sweep", {})
    if not isinstance(head, dict):
        head = {}
        problems.append(f"{where}: sweep: must be a table ([sweep])")
    for k in head:
        if k not in SWEEP_KEYS:
            problems.append(f"{where}: sweep.{k}: unknown key; valid: {', '.join(sorted(SWEEP_KEYS))}")
    out = head.get("out", "runs")
    if not isinstance(out, str) or not out.strip():  # "" is the current directory
        problems.append(f'{where}: sweep.out: {out!r} must be a directory name, e.g. "runs/sweep-uplink"')
    grid = data.get("grid", {})
    for table, content in (("set", data.get("set", {})), ("grid", grid)):
        if not isinstance(content, dict):
            problems.append(f'{where}: {table}: must be a table of "section.key" = value')
            continue
        for k in content:
            if k.count(".") != 1 or not all(k.partition(".")[::2]):
                problems.append(f'{where}: {table}."{k}": must be "section.key", e.g. "network.uplink_mbps"')
    if isinstance(grid, dict):
        if not grid:
            problems.append(f'{where}: grid: empty; give at least one "section.key" = [values]')
        for k, v in grid.items():
            if not isinstance(v, list) or not v:
                problems.append(f'{where}: grid."{k}": must be a non-empty list of values, got {v!r}')
        sizes = [len(v) for v in grid.values() if isinstance(v, list)]
        if math.prod(sizes) > MAX_GRID_POINTS:
            problems.append(
                f"{where}: grid: {' x '.join(map(str, sizes))} = {math.prod(sizes):,} points, over the bound of "
                f"{MAX_GRID_POINTS:,} (each point is a run directory, and each is validated before anything runs): "
                "split the sweep into several files or take fewer values"
            )
    return problems


def _base_path(p: Path, head: dict[str, Any], problems: list[str]) -> Path | None:
    """The base scenario file named by ``[sweep] base`` (relative to the sweep file), or None with a problem."""
    base_rel = head.get("base")
    if not isinstance(base_rel, str):
        problems.append(f"{p}: sweep.base: required, the base scenario file (relative to the sweep file)")
        return None
    base = (p.parent / base_rel) if not Path(base_rel).is_absolute() else Path(base_rel)
    if not base.is_file():
        problems.append(
            f"{p}: sweep.base: no such scenario file {str(base)!r} (a relative base is taken from the sweep "
            f"file's directory, {str(p.parent)!r}): copy the base scenario beside the sweep file or give its path"
        )
        return None
    return base


def _command_line(
    p: Path, base_data: dict[str, Any], fixed: dict[str, Any], grid: dict[str, Any], cli: tuple[Any, ...]
) -> tuple[dict[str, Any], dict[str, list[Any]]]:
    """The file's ``[set]`` and ``[grid]`` with the command line's ``(--set, -n, --seeds)`` applied:
    overrides join ``[set]`` (over it), ``-n`` also scales ``training.eval_every`` down as ``run -n``
    does (:func:`~aiotsim.config.short_run_eval_every`; not when ``[set]``, ``--set`` or the grid
    give it), seeds become a ``scenario.seed`` grid key."""
    overrides, iterations, seeds = cli
    given = parse_overrides(list(overrides))
    extra = given if iterations is None else {**given, "scenario.iterations": iterations}
    problems = [
        f"{'-n/--iterations' if k == 'scenario.iterations' and iterations is not None else '--set ' + k}: "
        f"{k} is swept by {p} [grid]; drop it from the command line, or from the grid to fix it for every point"
        for k in extra
        if k in grid
    ]
    if iterations is not None and "training.eval_every" not in grid:  # as `run -n`: more evaluations
        extra |= short_run_eval_every(base_data, {**fixed, **given}, iterations)  # unless [set]/--set fix them
    fixed = {**fixed, **extra}
    if seeds > 1:
        if "scenario.seed" in grid:
            problems.append(f"--seeds {seeds}: scenario.seed is swept by {p} [grid]; give --seeds or that grid key")
        seed = apply_overrides(base_data, fixed).get("scenario", {}).get("seed", 0)
        first = seed if isinstance(seed, int) else 0  # a bad seed is reported by the validation
        grid = {**grid, "scenario.seed": [first + k for k in range(seeds)]}
        if (n := math.prod(len(v) for v in grid.values())) > MAX_GRID_POINTS:
            problems.append(f"--seeds {seeds}: {n:,} points, over the bound of {MAX_GRID_POINTS:,}: give fewer")
    if problems:
        raise ConfigError(problems)
    return fixed, grid


def _points(
    base_data: dict[str, Any], fixed: dict[str, Any], grid: dict[str, list[Any]], where: str
) -> list[SweepPoint]:
    """Every grid point, resolved and validated; ConfigError with each distinct problem once."""
    problems: list[str] = []
    keys = list(grid)
    points: list[SweepPoint] = []
    for combo in itertools.product(*(grid[k] for k in keys)):
        values = dict(zip(keys, combo))
        try:
            sc = validate_scenario(
                scenario_from_dict(variant_data(base_data, {**fixed, **values}), source=where), where
            )
        except ConfigError as exc:
            problems.extend(q for q in exc.problems if q not in problems)
            continue
        toml = sc.to_toml()
        points.append(SweepPoint(values, toml, scenario_key(toml)))
    if problems:
        raise ConfigError(problems)
    return points


# ---- the sweep directory ----------------------------------------------------------------------------
def write_manifest(sweep: Sweep) -> Path:
    """``sweep.json``: name, base, fixed overrides, grid, and each point's values and run directory,
    and whether its run was replayed (``replayed``, ``replayed_from``: the source run directory,
    relative to the sweep directory when inside it; read from the run directories, so rewritten
    as the sweep goes on)."""
    make_dir(sweep.out_dir)
    manifest = {
        "name": sweep.name,
        "sweep_file": str(sweep.path),
        "base": str(sweep.base),
        "set": sweep.fixed,
        "grid": sweep.grid,
        "points": [
            {
                "values": pt.values,
                "key": pt.key,
                "run_dir": f"runs/{pt.key}",
                "replayed": (src := sweep.replay_source(pt)) is not None,
                "replayed_from": src,
            }
            for pt in sweep.points
        ],
    }
    path = sweep.out_dir / "sweep.json"
    write_file(path, json.dumps(manifest, indent=2))
    return path


def write_index(sweep: Sweep) -> Path:
    """``sweep.csv``: a row per grid point with its values, status, whether it was replayed, key
    metrics, run directory and the run directory it was replayed from (empty: trained).

    Reads only the run directories, so it can be rewritten at any time (it is, after every run);
    a point whose run directory is damaged is listed as ``damaged``.
    """
    path = sweep.out_dir / "sweep.csv"
    make_dir(sweep.out_dir)
    table = io.StringIO(newline="")
    w = csv.writer(table)
    w.writerow([*sweep.grid, "status", "replayed", *INDEX_METRICS, "run_dir", "replayed_from"])
    for pt in sweep.points:
        d = sweep.run_dir(pt)
        s, status = _point_status(d)
        metrics = ["" if s.get(m) is None else s[m] for m in INDEX_METRICS]
        src = sweep.replay_source(pt) if status == "complete" else None
        rel = os.path.relpath(d, sweep.out_dir)
        w.writerow([*pt.values.values(), status, str(src is not None).lower(), *metrics, rel, src or ""])
    write_file(path, table.getvalue())
    return path


def _point_status(run_dir: Path) -> tuple[dict[str, Any], str]:
    """A point's summary (empty unless readable) and status: its own, ``pending`` or ``damaged``."""
    if not (run_dir / "summary.json").is_file():
        return {}, "pending"
    try:
        s = read_summary(run_dir)
    except ResultsError:
        return {}, "damaged"
    return s, str(s.get("status", "complete" if s["complete"] else "incomplete"))


def table_cells(sweep: Sweep) -> tuple[list[str], list[list[str]]]:
    """Headers and cells of the terminal's sweep table: the grid values, then key metrics (``-``
    where a point has not run), the run directory's hash and how the point was obtained
    (``no``: trained, else the first 6 hex digits of the run it was replayed from)."""
    from aiotsim.results.compare import fmt_bytes

    headers = [*sweep.grid, "throughput (samples/s)", "wire up", "final accuracy", "sim time (s)", "run", "replayed"]
    cells = []
    for pt in sweep.points:
        try:
            s = read_summary(sweep.run_dir(pt))
        except ResultsError:
            s = {}
        tp, acc, st = s.get("throughput_samples_per_s"), s.get("final_accuracy"), s.get("sim_time_s")
        src = sweep.replay_source(pt)
        cells.append(
            [
                *(str(v) for v in pt.values.values()),
                "-" if tp is None else f"{tp:.2f}",
                fmt_bytes(s.get("wire_bytes_up")),
                "-" if acc is None else f"{acc:.2%}",
                "-" if st is None else f"{st:.2f}",
                pt.key,
                "-" if not s else ("no" if src is None else Path(src).name[:6]),
            ]
        )
    return headers, cells


def read_manifest(sweep_dir: str | Path) -> dict[str, Any]:
    """The ``sweep.json`` of a sweep directory, checked.

    Raises
    ------
    ResultsError
        When the file is missing, not UTF-8 JSON, or not a manifest: a ``name``, a ``grid`` of
        ``"section.key"`` to a list of scalar values, and ``points`` each with scalar ``values`` for
        every grid key and a relative ``run_dir`` inside the sweep directory (the message names the file).
    """
    path = Path(sweep_dir) / "sweep.json"
    if not path.is_file():
        raise ResultsError(f"{sweep_dir}: no sweep.json (not a sweep directory)")
    data = read_json(path)
    problem = _manifest_problem(data)
    if problem:
        raise ResultsError(f"{path}: not a sweep manifest: {problem}")
    return data


_SCALARS = (str, int, float, bool)


def _manifest_problem(data: Any) -> str | None:
    """Why ``data`` is not a usable ``sweep.json`` (None when it is)."""
    if not isinstance(data, dict):
        return f"a JSON object is expected, got {type(data).__name__}"
    grid, points = data.get("grid"), data.get("points")
    if not isinstance(data.get("name"), str):
        return "no name"
    if not isinstance(grid, dict) or not grid:
        return "no grid"
    if not all(isinstance(v, list) and all(isinstance(x, _SCALARS) for x in v) for v in grid.values()):
        return "grid values must be lists of numbers or strings"
    if not isinstance(points, list):
        return "no points list"
    for i, pt in enumerate(points):
        values = pt.get("values") if isinstance(pt, dict) else None
        run_dir = pt.get("run_dir") if isinstance(pt, dict) else None
        if not isinstance(values, dict) or set(values) != set(grid):
            return f"point {i}: values must give every grid key"
        if not all(isinstance(v, _SCALARS) for v in values.values()):
            return f"point {i}: values must be numbers or strings"
        if not isinstance(run_dir, str) or not run_dir or Path(run_dir).is_absolute() or ".." in Path(run_dir).parts:
            return f"point {i}: run_dir must be a path inside the sweep directory, got {run_dir!r}"
    return None


def is_sweep_dir(path: str | Path) -> bool:
    """True when ``path`` holds a ``sweep.json``."""
    return (Path(path) / "sweep.json").is_file()


__all__ = [
    "Sweep",
    "SweepPoint",
    "load_sweep",
    "plan_sweep",
    "scenario_key",
    "write_manifest",
    "write_index",
    "read_manifest",
    "is_sweep_dir",
    "table_cells",
    "INDEX_METRICS",
]
