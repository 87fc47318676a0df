"""Comparisons: one scenario, several compressors and seeds (and training modes), one table.

A comparison has two halves that share nothing but files (pyperf style: comparison separate from
storage):

1. :func:`plan_comparison` turns a scenario and a list of compressors x seeds into validated
   :class:`~aiotsim.results.parallel.Job` s, one run directory each, keyed by the resolved scenario
   as a sweep's points are (``OUT/<compressor>/seed<k>-<hash>``, :func:`scenario_key`): a later
   comparison with other settings (another ``-n``) gets directories of its own, and only a
   complete run of the identical scenario is reused (:func:`already_done`). Every variant is
   validated before anything runs, and every problem is reported at once.
2. :func:`compare_runs` reads only the run directories (``summary.json`` and ``evals.csv``) and
   builds one :class:`ComparisonRow` per compressor: means (and the standard deviation of the final
   accuracy) over seeds, the speed-up over a baseline, and the time to reach a target accuracy,
   recomputed from ``evals.csv`` so that any target works, not only the one the runs were made with.
   Runs of several training modes (sync-PS beside federated) get one row per mode and codec,
   named ``mode/codec``.

:func:`write_comparison` writes ``comparison.csv`` (raw numbers, SI units), ``comparison.md`` and
``comparison.json``, the record of which run directories belong to the comparison (what
``aiotsim plot`` draws: :func:`read_comparison_runs`) and how many of them were reused.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import os
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from aiotsim.config import apply_overrides, parse_overrides, read_toml, scenario_from_dict, short_run_eval_every
from aiotsim.errors import ConfigError, ResultsError
from aiotsim.results.parallel import Job
from aiotsim.results.store import (
    Warn,
    is_run_dir,
    make_dir,
    read_evals,
    read_json,
    read_summary,
    read_text,
    write_file,
)
from aiotsim.results.store import warn as store_warn
from aiotsim.validate import validate_scenario

# Keys of [compressor] that are not codec parameters (a switched codec keeps these, drops the rest).
_COMPRESSOR_SECTION_KEYS = {"name", "min_size", "downlink"}
# The most runs one comparison (or sweep) may plan: each is a run directory, and each is validated
# (~7-9 ms) before anything runs, so 10,000 take over a minute to plan; `--seeds 1000000` planned
# silently for hours.
MAX_PLANNED_RUNS = 10_000


# ---- planning ---------------------------------------------------------------------------------------
def parse_compressors(text: str) -> list[str]:
    """``"none, 2bit,topk"`` -> ``["none", "2bit", "topk"]`` (order kept, duplicates dropped);
    ``all`` stands for every registered codec (sorted), e.g. ``none,all`` puts ``none`` first."""
    from aiotsim.compress.registry import codec_names

    names: list[str] = []
    for part in text.split(","):
        for name in codec_names() if part.strip() == "all" else [part.strip()]:
            if name and name not in names:
                names.append(name)
    if not names:
        raise ConfigError(
            f"--compressor {text!r}: give at least one codec name, e.g. none,2bit,topk (all: every codec)"
        )
    return names


def variant_data(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """The base scenario dict with ``{"section.key": value}`` overrides applied.

    When the overrides switch the codec, the base file's codec parameters (which belong to the old
    codec) are dropped first, as ``aiotsim run --compressor`` does.
    """
    name = overrides.get("compressor.name")
    comp = base.get("compressor", {})
    if name is not None and isinstance(comp, dict) and name != comp.get("name"):
        base = {**base, "compressor": {k: v for k, v in comp.items() if k in _COMPRESSOR_SECTION_KEYS}}
    return apply_overrides(base, overrides)


def plan_comparison(
    scenario_path: str | Path,
    compressors: Sequence[str],
    seeds: int,
    out_dir: str | Path,
    overrides: Sequence[str] = (),
    iterations: int | None = None,
    device: str = "auto",
) -> list[Job]:
    """Validated jobs for every compressor x seed, in that order.

    Seeds are the scenario's ``scenario.seed`` (after overrides) plus 0, 1, ..., ``seeds - 1``.
    ``iterations`` (``-n``) that shortens the runs also scales ``training.eval_every`` down, as
    ``aiotsim run -n`` does (:func:`~aiotsim.config.short_run_eval_every`), unless ``overrides`` give it.

    Raises
    ------
    ConfigError
        Every problem of every variant (an unknown compressor, a bad override), each line once; or
        more than :data:`MAX_PLANNED_RUNS` runs, before any is validated.
    """
    if seeds < 1:
        raise ConfigError(f"--seeds: must be >= 1, got {seeds}")
    if len(compressors) * seeds > MAX_PLANNED_RUNS:
        raise ConfigError(
            f"{len(compressors)} codecs x {seeds:,} seeds = {len(compressors) * seeds:,} runs, over the bound of "
            f"{MAX_PLANNED_RUNS:,} (each run is a run directory, and each is validated before anything runs): "
            "give fewer --seeds or codecs"
        )
    base = read_toml(scenario_path)
    fixed = parse_overrides(list(overrides))
    if iterations is not None:  # a shortened run evaluates more often, as `aiotsim run -n` does
        fixed |= short_run_eval_every(base, fixed, iterations) | {"scenario.iterations": iterations}
    base_seed = apply_overrides(base, fixed).get("scenario", {}).get("seed", 0)
    if not isinstance(base_seed, int):
        base_seed = 0  # the validation below reports the bad seed
    problems: list[str] = []
    jobs: list[Job] = []
    for name in compressors:
        for k in range(seeds):
            seed = base_seed + k
            data = variant_data(base, {**fixed, "compressor.name": name, "scenario.seed": seed})
            try:
                sc = validate_scenario(scenario_from_dict(data, source=str(scenario_path)), str(scenario_path))
            except ConfigError as exc:
                problems.extend(p for p in exc.problems if p not in problems)
                break  # the other seeds of this variant have the same problems
            toml = sc.to_toml()
            run_dir = Path(out_dir) / _safe(name) / f"seed{seed}-{scenario_key(toml)}"
            jobs.append(Job(f"{name} seed {seed}", toml, str(run_dir), device))
    if problems:
        raise ConfigError(problems)
    make_dir(out_dir)  # every variant is valid: the comparison directory must exist and be writable
    return jobs


def scenario_key(scenario_toml: str) -> str:
    """The key of a resolved scenario in run directory names: 12 hex digits of its SHA-256."""
    return hashlib.sha256(scenario_toml.encode()).hexdigest()[:12]


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def already_done(job: Job) -> bool:
    """True when ``job.out_dir`` holds a complete run of exactly this scenario (nothing to redo)."""
    d = Path(job.out_dir)
    if not is_run_dir(d) or not (d / "scenario.toml").is_file():
        return False
    try:
        return read_text(d / "scenario.toml") == job.scenario_toml
    except ResultsError:
        return False


# ---- the table --------------------------------------------------------------------------------------
@dataclass
class ComparisonRow:
    """One compressor's numbers, over its seeds (means unless named otherwise; SI units)."""

    compressor: str
    seeds: int
    throughput_samples_per_s: float | None
    speedup: float | None  # throughput / baseline throughput
    bytes_up: float | None  # payload bytes, all nodes -> aggregator, whole run
    bytes_down: float | None
    wire_bytes_up: float | None  # payload + packet headers
    wire_bytes_down: float | None
    compression_ratio: float | None  # dense fp32 bytes / payload bytes, uplink
    final_accuracy: float | None
    final_accuracy_std: float | None  # sample standard deviation over seeds (0 for one seed)
    time_to_accuracy_s: float | None  # simulated seconds, mean over the seeds that reached the target
    reached: int  # seeds that reached the target accuracy
    compute_share: float | None  # of simulated time
    encode_share: float | None
    decode_share: float | None
    comm_share: float | None
    sim_time_s: float | None


@dataclass
class Comparison:
    """The rows, the baseline they are compared with and the target accuracy used."""

    rows: list[ComparisonRow]
    baseline: str
    target_accuracy: float
    run_dirs: list[Path]


def time_to_accuracy(evals: list[dict[str, float]], target: float) -> float | None:
    """Simulated seconds at the first evaluation whose accuracy is >= ``target`` (None if never)."""
    for row in evals:
        if row["accuracy"] >= target:
            return float(row["sim_time_s"])
    return None


def _mean(values: list[Any]) -> float | None:
    vals = [float(v) for v in values if v is not None]
    return statistics.fmean(vals) if vals else None


def compare_runs(
    run_dirs: Sequence[str | Path],
    target_accuracy: float | None = None,
    baseline: str | None = None,
    warn: Warn | None = None,
) -> Comparison:
    """Build the comparison from run directories alone.

    Parameters
    ----------
    run_dirs : complete run directories; runs of the same compressor are seeds of one row.
    target_accuracy : for time-to-accuracy (default: the runs' own ``target_accuracy``).
    baseline : compressor the speed-up is relative to (default ``none`` when present, else the
        first compressor).
    warn : called with one line per run directory that is skipped (incomplete or damaged: the
        line names the directory or file and the problem); default: :func:`~aiotsim.results.store.warn`.

    Raises
    ------
    ResultsError
        When there is no usable run (every problem listed), or ``baseline`` is not among the rows.
    """
    if not run_dirs:
        raise ResultsError("no run directories to compare")
    groups = _load_groups(run_dirs, warn or store_warn)
    if target_accuracy is None:
        target_accuracy = float(next(iter(groups.values()))[0][0]["target_accuracy"])
    rows = [_row(name, runs, target_accuracy) for name, runs in groups.items()]
    baseline = _set_speedups(rows, baseline)
    used = [Path(d) for d in run_dirs if Path(d) in _used_dirs(groups)]
    return Comparison(rows, baseline, target_accuracy, used)


_Loaded = tuple[dict[str, Any], list[dict[str, Any]], Path]  # summary, evals rows, run directory


def _load_groups(run_dirs: Sequence[str | Path], warn: Warn) -> dict[str, list[_Loaded]]:
    """Complete, readable runs grouped by compressor; every other directory is reported and skipped."""
    groups: dict[str, list[_Loaded]] = {}
    problems: list[str] = []
    for d in run_dirs:
        try:
            summary = read_summary(d)
            if not summary["complete"]:
                raise ResultsError(f"{d}: run is incomplete ({summary.get('status')})")
            loaded = (summary, read_evals(d), Path(d))
        except ResultsError as exc:
            problems.append(exc.message)
            continue
        groups.setdefault(run_label(summary, modes=False), []).append(loaded)
    if len({s.get("mode") for runs in groups.values() for s, _, _ in runs}) > 1:  # sync-PS beside federated
        groups = {run_label(runs[0][0], modes=True): runs for runs in _split_modes(groups)}
    if not groups:
        raise ResultsError("\n".join(["no usable run directory to compare:", *problems]))
    for p in problems:
        warn(f"skipped {p}")
    return groups


def run_label(summary: dict[str, Any], modes: bool) -> str:
    """A run's row name: its codec, or ``mode/codec`` when runs of several modes are compared."""
    return f"{summary.get('mode')}/{summary['compressor']}" if modes else str(summary["compressor"])


def _split_modes(groups: dict[str, list[_Loaded]]) -> list[list[_Loaded]]:
    """The groups split by training mode (codec groups first, modes in order of appearance)."""
    out: dict[tuple[str, Any], list[_Loaded]] = {}
    for name, runs in groups.items():
        for loaded in runs:
            out.setdefault((name, loaded[0].get("mode")), []).append(loaded)
    return list(out.values())


def _used_dirs(groups: dict[str, list[_Loaded]]) -> set[Path]:
    return {d for runs in groups.values() for _, _, d in runs}


def _row(name: str, runs: list[_Loaded], target: float) -> ComparisonRow:
    """One compressor's row: means over its seeds (speed-up filled in later)."""
    sums = [s for s, _, _ in runs]
    accs = [s["final_accuracy"] for s in sums if s.get("final_accuracy") is not None]
    ttas = [time_to_accuracy(ev, target) for _, ev, _ in runs]

    def mean_of(key: str) -> float | None:
        return _mean([s.get(key) for s in sums])

    return ComparisonRow(
        compressor=name,
        seeds=len(runs),
        throughput_samples_per_s=mean_of("throughput_samples_per_s"),
        speedup=None,
        bytes_up=mean_of("bytes_up"),
        bytes_down=mean_of("bytes_down"),
        wire_bytes_up=mean_of("wire_bytes_up"),
        wire_bytes_down=mean_of("wire_bytes_down"),
        compression_ratio=mean_of("compression_ratio"),
        final_accuracy=_mean(accs),
        final_accuracy_std=(statistics.stdev(accs) if len(accs) > 1 else 0.0) if accs else None,
        time_to_accuracy_s=_mean(ttas),
        reached=sum(t is not None for t in ttas),
        compute_share=mean_of("compute_share"),
        encode_share=mean_of("encode_share"),
        decode_share=mean_of("decode_share"),
        comm_share=mean_of("comm_share"),
        sim_time_s=mean_of("sim_time_s"),
    )


def _set_speedups(rows: list[ComparisonRow], baseline: str | None) -> str:
    """Fill each row's speed-up relative to ``baseline`` (default: ``none``, else the first); returns it."""
    names = [r.compressor for r in rows]
    if baseline is None:  # the uncompressed codec (of the first mode, when modes are compared)
        baseline = next((n for n in names if n.split("/")[-1] == "none"), names[0])
    elif baseline not in names:
        raise ResultsError(f"baseline {baseline!r} is not among the compared compressors: {', '.join(names)}")
    base_tp = rows[names.index(baseline)].throughput_samples_per_s
    for r in rows:
        if base_tp and r.throughput_samples_per_s is not None:
            r.speedup = r.throughput_samples_per_s / base_tp
    return baseline


# ---- output -----------------------------------------------------------------------------------------
CSV_FIELDS = tuple(f.name for f in fields(ComparisonRow))
NOT_REACHED = "not reached"  # the one wording, in every table, of a target accuracy never reached


def _f(v: float | None, spec: str) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


def fmt_bytes(n: float | None) -> str:
    """``1.8e6`` -> ``"1.8 MB"`` (decimal units)."""
    if n is None:
        return "-"
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1000 or unit == "GB":
            return f"{n:.0f} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"  # pragma: no cover - the loop returns at GB


def display_columns(c: Comparison) -> tuple[list[str], list[list[str]]]:
    """Headers and formatted cells shared by the terminal and Markdown tables."""
    headers = [
        "codec",
        "seeds",
        "samples/s",
        f"speed-up vs {c.baseline}",
        "bytes up",
        "bytes down",
        "wire up",
        "wire down",
        "ratio",
        "final accuracy",
        f"sim s to {c.target_accuracy:.0%}",
        "compute/comm",
    ]
    cells = []
    for r in c.rows:
        acc = _f(r.final_accuracy, ".2%")
        if r.final_accuracy is not None and r.seeds > 1:  # one seed has no spread to show
            acc += f" ± {r.final_accuracy_std or 0:.2%}"
        tta = _f(r.time_to_accuracy_s, ".2f")
        if r.time_to_accuracy_s is not None and r.reached < r.seeds:
            tta += f" ({r.reached}/{r.seeds} seeds)"
        elif r.time_to_accuracy_s is None:
            tta = NOT_REACHED
        cells.append(
            [
                r.compressor,
                str(r.seeds),
                _f(r.throughput_samples_per_s, ".2f"),
                _f(r.speedup, ".2f") + "x",
                fmt_bytes(r.bytes_up),
                fmt_bytes(r.bytes_down),
                fmt_bytes(r.wire_bytes_up),
                fmt_bytes(r.wire_bytes_down),
                _f(r.compression_ratio, ".1f") + "x",
                acc,
                tta,
                f"{_f(r.compute_share, '.0%')} / {_f(r.comm_share, '.0%')}",
            ]
        )
    return headers, cells


def multi_seed(c: Comparison) -> bool:
    """True when a row averages several seeds (then accuracy cells show ``mean ± std``)."""
    return any(r.seeds > 1 for r in c.rows)


def accuracy_note(c: Comparison) -> str:
    """What the final accuracy cells are: ``mean ± standard deviation over seeds``, or one seed's."""
    if multi_seed(c):
        return "Final accuracy: mean ± standard deviation over seeds."
    return "Final accuracy: one seed per row."


def comparison_title(name: str, c: Comparison, seeds: int) -> str:
    """``"iot10: 3 codecs x 2 seeds"``, or ``"iot10: 2 codecs x 2 modes x 1 seed"`` when rows are
    ``mode/codec`` (a 2 x 2 compare has 4 rows, but is not "4 codecs")."""
    names = [r.compressor for r in c.rows]
    codecs = list(dict.fromkeys(n.split("/")[-1] for n in names))
    modes = list(dict.fromkeys(n.split("/")[0] for n in names if "/" in n))
    parts = [_count(len(codecs), "codec"), *([_count(len(modes), "mode")] if modes else []), _count(seeds, "seed")]
    return f"{name}: {' x '.join(parts)}"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def to_markdown(c: Comparison, title: str = "", reused: int | None = None) -> str:
    """The comparison as a Markdown table, with a note on the baseline and the target (and, given
    ``reused``, on how many of its runs were reused from an earlier comparison)."""
    headers, cells = display_columns(c)
    lines = [f"# {title}", ""] if title else []
    lines += ["| " + " | ".join(headers) + " |", "|" + "|".join(["---"] + ["---:"] * (len(headers) - 1)) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in cells]
    lines += [
        "",
        f"Speed-up: throughput relative to `{c.baseline}`. {accuracy_note(c)} "
        f"Time to {c.target_accuracy:.0%}: simulated seconds to the first evaluation at or above the target "
        "(mean over the seeds that reached it). Shares: of simulated time.",
        "",
    ]
    if reused is not None:
        lines += [reuse_note(len(c.run_dirs), reused), ""]
    return "\n".join(lines)


def reuse_note(runs: int, reused: int) -> str:
    """``"Runs: 5 (2 reused: ...; 3 run now)."``: how a comparison's runs were obtained."""
    return (
        f"Runs: {runs} ({reused} reused: complete runs of the identical resolved scenario from an earlier "
        f"comparison; {runs - reused} run now)."
    )


def write_comparison(
    c: Comparison, out_dir: str | Path, title: str = "", reused: int | None = None
) -> tuple[Path, Path]:
    """Write ``comparison.csv`` (raw numbers) and ``comparison.md`` (with :func:`reuse_note` when
    ``reused`` is given); returns their paths."""
    d = make_dir(out_dir)
    csv_path, md_path = d / "comparison.csv", d / "comparison.md"
    table = io.StringIO(newline="")
    w = csv.writer(table)
    w.writerow([*CSV_FIELDS, "baseline", "target_accuracy"])
    for r in c.rows:
        cells = [("" if getattr(r, k) is None else getattr(r, k)) for k in CSV_FIELDS]
        w.writerow([*cells, c.baseline, c.target_accuracy])
    write_file(csv_path, table.getvalue())
    write_file(md_path, to_markdown(c, title, reused))
    return csv_path, md_path


# ---- the record of a comparison's runs ---------------------------------------------------------------
RECORD_NAME = "comparison.json"
RECORD_VERSION = 1


def write_comparison_record(out_dir: str | Path, jobs: Sequence[Job], reused: int, title: str = "") -> Path:
    """``comparison.json``: the run directories of this comparison (relative to ``out_dir``, in
    plan order) and how many were reused, so that ``aiotsim plot OUT`` draws exactly these runs and
    not those an earlier comparison with other settings left in the same directory."""
    d = make_dir(out_dir)
    runs = [{"label": j.label, "run_dir": Path(os.path.relpath(j.out_dir, d)).as_posix()} for j in jobs]
    record = {"schema_version": RECORD_VERSION, "title": title, "reused": reused, "runs": runs}
    path = d / RECORD_NAME
    write_file(path, json.dumps(record, indent=2) + "\n")
    return path


def is_comparison_dir(path: str | Path) -> bool:
    """True when ``path`` holds a ``comparison.json``."""
    return (Path(path) / RECORD_NAME).is_file()


def read_comparison_runs(comparison_dir: str | Path) -> list[Path]:
    """The run directories ``comparison.json`` lists (complete or not: the caller checks).

    Raises
    ------
    ResultsError
        When the file is not UTF-8 JSON, of another version, or not a record: a ``runs`` list of
        objects whose ``run_dir`` is a relative path inside the comparison directory (the message
        names the file and the problem).
    """
    d = Path(comparison_dir)
    path = d / RECORD_NAME
    data = read_json(path)
    problem = _record_problem(data)
    if problem:
        raise ResultsError(f"{path}: not a comparison record: {problem}")
    return [d / run["run_dir"] for run in data["runs"]]


def _record_problem(data: Any) -> str | None:
    """Why ``data`` is not a usable ``comparison.json`` (None when it is)."""
    if not isinstance(data, dict):
        return f"a JSON object is expected, got {type(data).__name__}"
    if data.get("schema_version") != RECORD_VERSION:
        return f"schema_version {data.get('schema_version')!r}, expected {RECORD_VERSION}"
    runs = data.get("runs")
    if not isinstance(runs, list) or not runs:
        return "no runs list"
    for i, run in enumerate(runs):
        rd = run.get("run_dir") if isinstance(run, dict) else None
        if not isinstance(rd, str) or not rd or "\0" in rd or Path(rd).is_absolute() or ".." in Path(rd).parts:
            return f"run {i}: run_dir must be a path inside the comparison directory, got {rd!r}"
    return None


__all__ = [
    "plan_comparison",
    "parse_compressors",
    "variant_data",
    "already_done",
    "scenario_key",
    "MAX_PLANNED_RUNS",
    "write_comparison_record",
    "read_comparison_runs",
    "is_comparison_dir",
    "reuse_note",
    "RECORD_NAME",
    "compare_runs",
    "time_to_accuracy",
    "run_label",
    "Comparison",
    "ComparisonRow",
    "write_comparison",
    "to_markdown",
    "display_columns",
    "comparison_title",
    "accuracy_note",
    "multi_seed",
    "NOT_REACHED",
    "fmt_bytes",
]
