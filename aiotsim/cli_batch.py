"""Batch commands of the ``aiotsim`` CLI: ``compare``, ``sweep`` and ``plot``.

They are thin like the rest of the CLI: parse, plan (validating everything up front), hand the jobs
to a backend (:mod:`aiotsim.results.parallel`), show progress, and print what the run directories
say. :func:`register` adds them to the main Typer app.

``compare`` and ``sweep`` replay rather than train the runs that learn what another run of the
batch (or a complete run already in its output directory) learns, network settings aside
(:mod:`aiotsim.results.replay_plan`); ``--no-replay`` trains every run.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from aiotsim.cli_common import (
    DeviceOpt,
    IterOpt,
    QuietOpt,
    SetOpt,
    TensorboardOpt,
    ensure_dir,
    err,
    expected_errors,
    out,
    out_path,
    slug,
    stopping_on_signals,
    tensorboard_available,
    write_tensorboard,
    writing_to,
)
from aiotsim.errors import AiotsimError, ConfigError, ResultsError
from aiotsim.results.parallel import BatchError, Event, Job, JobResult
from aiotsim.results.replay_plan import ReplayPlan
from aiotsim.results.store import locked_run_dir

JobsOpt = Annotated[
    int | None,
    typer.Option("--jobs", "-j", help="runs at once, each in its own process (default: one per core)", min=1),
]
NoReplayOpt = Annotated[
    bool,
    typer.Option(
        "--no-replay",
        help="train every run in full (default: a run that learns what another run of the batch learns, "
        "network settings aside, is replayed from that run's timing record)",
    ),
]


class BatchProgress:
    """Progress bars for a batch: runs done / total, and one bar per running run (its iterations)."""

    def __init__(self, jobs: list[Job], quiet: bool = False, skipped: int = 0, title: str = "runs") -> None:
        self.jobs = jobs
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[info]}"),
            TimeElapsedColumn(),
            console=err,
            disable=quiet,
        )
        self.overall: TaskID = self.progress.add_task(
            title, total=len(jobs) + skipped, completed=skipped, info=f"({skipped} already done)" if skipped else ""
        )
        self.running: dict[int, TaskID] = {}

    def __enter__(self) -> BatchProgress:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.progress.__exit__(*exc)

    def __call__(self, e: Event) -> None:
        if e.kind == "start":
            self.running[e.index] = self.progress.add_task(
                f"  {self.jobs[e.index].label}", total=e.total or None, info=""
            )
        elif e.kind == "iter":
            task = self.running.get(e.index)
            if task is not None:
                info = f"sim {e.sim_time_s:8.2f} s  loss {e.loss:.4f}" + (f"  +{e.gradients:,}" if e.gradients else "")
                self.progress.update(task, completed=e.iteration, total=e.total, info=info)
        elif e.kind == "done":
            task = self.running.pop(e.index, None)
            if task is not None:
                self.progress.remove_task(task)
            self.progress.advance(self.overall)


def _run_jobs(
    jobs: list[Job], workers: int | None, ray_address: str | None, quiet: bool, skipped: int, after_each: Any = None
) -> list[JobResult]:
    """Run ``jobs`` locally or on Ray under progress bars; ``after_each()`` runs when a run ends.
    Locally, as many at once as fit in memory (see :func:`~aiotsim.validate.batch_workers`)."""
    from aiotsim.results.parallel import default_workers, job_scenario, run_local, run_ray
    from aiotsim.validate import batch_workers

    if ray_address is None and jobs:
        workers, note = batch_workers(map(job_scenario, jobs), workers, default_workers())
        if note:
            err.print(note, highlight=False)
    with BatchProgress(jobs, quiet=quiet, skipped=skipped) as bars:

        def on_event(e: Event) -> None:
            bars(e)
            if e.kind == "done" and after_each is not None:
                after_each()

        if ray_address is not None:
            return run_ray(jobs, address=ray_address, on_event=on_event)
        return run_local(jobs, workers=workers, on_event=on_event)


def _run_planned(
    plan: ReplayPlan,
    workers: int | None,
    ray_address: str | None,
    quiet: bool,
    skipped: int,
    after_each: Callable[[], None] | None = None,
) -> list[JobResult]:
    """Run a batch's ``plan``: its full runs through :func:`_run_jobs`, then its replays on this
    machine (in this process, one after the other, unless there are many: see
    :func:`~aiotsim.results.replay_plan.replay_workers`), then, in full, the replays that could not
    be done (a one-line note each). ``after_each()`` runs when a run ends (at most every
    :data:`INDEX_EVERY_S` seconds during the replays, which end many a second)."""
    from aiotsim.results.parallel import default_workers, run_local
    from aiotsim.results.replay_plan import forget_replay, ready_replays, replay_workers, split_refused

    for job in plan.train:
        forget_replay(job.out_dir)
    results = _run_jobs(plan.train, workers, ray_address, quiet, skipped, after_each)
    if not plan.replays:
        return results

    def say(line: str) -> None:
        err.print(line, highlight=False, markup=False)

    ready, fallback = ready_replays(plan.replays, say)
    every = _every(after_each, INDEX_EVERY_S)
    try:
        with BatchProgress(ready, quiet=quiet, title="replays") as bars:

            def on_event(e: Event) -> None:
                bars(e)
                if e.kind == "done":
                    every()

            replayed = run_local(ready, replay_workers(ready, workers, default_workers()), on_event)
    finally:
        if after_each is not None:
            after_each()
    done, refused = split_refused(replayed, say)
    for job in (fallback := [*fallback, *refused]):
        forget_replay(job.out_dir)
    if fallback:
        results += _run_jobs(fallback, workers, ray_address, quiet, 0, after_each)
    return [*results, *done]


INDEX_EVERY_S = 2.0  # seconds between two rewrites of a sweep's index while replays end


def _every(fn: Callable[[], None] | None, seconds: float) -> Callable[[], None]:
    """``fn`` called at most once every ``seconds`` (the first call included)."""
    last = [float("-inf")]

    def call() -> None:
        if fn is not None and time.monotonic() - last[0] >= seconds:
            last[0] = time.monotonic()
            fn()

    return call


def _plan_note(plan: ReplayPlan) -> str:
    """``" (2 in full, 4 replayed)"``, or ``""`` when nothing is replayed."""
    return f" ({len(plan.train)} in full, {len(plan.replays)} replayed)" if plan.replays else ""


def report_failures(results: list[JobResult]) -> None:
    """Raise :class:`BatchError` (exit 1) listing every failed run, after the others were reported."""
    failed = [r for r in results if not r.ok]
    if failed:
        lines = [f"{r.job.label}: {r.error} (see {r.job.out_dir})" for r in failed]
        raise BatchError("\n".join([f"{len(failed)} of {len(results)} runs failed; the others are kept:", *lines]))


def comparison_tables(c: Any, title: str, width: int) -> list[Table]:
    """A :class:`~aiotsim.results.compare.Comparison` as rich tables that fit ``width`` columns."""
    from aiotsim.results.compare import display_columns, multi_seed

    headers, cells = display_columns(c)
    spread = "accuracy: mean ± std over seeds" if multi_seed(c) else "accuracy: one seed per codec"
    return fit_tables(headers, cells, 1, width, title, f"speed-up relative to {c.baseline}; {spread}")


# A table's width beyond its columns': a border left of each column and one at the right, and one
# space of padding on each side of every cell (Rich's default box and padding), in characters.
def _table_width(widths: list[int]) -> int:
    return sum(widths) + 3 * len(widths) + 1


def fit_tables(
    headers: list[str], cells: list[list[str]], keys: int, width: int, title: str, caption: str
) -> list[Table]:
    """Rich tables holding ``cells`` without cutting any cell, each at most ``width`` columns wide:
    one table when it fits, else the columns are split over several, each repeating the first
    ``keys`` columns (the row names). A column is as wide as its widest cell; a header may wrap
    at spaces, not inside a word. The first table has the title, the last the caption."""
    from rich.cells import cell_len

    def need(i: int, whole: bool) -> int:  # a column's width: its header whole, or its longest word
        head = cell_len(headers[i]) if whole else max(map(cell_len, headers[i].split() or [""]))
        return max([head, *(cell_len(row[i]) for row in cells)])

    groups: list[list[int]] = [[]]
    for i in range(keys, len(headers)):
        if groups[-1] and _table_width([need(j, False) for j in [*range(keys), *groups[-1], i]]) > width:
            groups.append([])
        groups[-1].append(i)
    tables = []
    for n, group in enumerate(groups):
        cols = [*range(keys), *group]
        widths = [need(i, False) for i in cols]
        for k, i in enumerate(cols):  # room left: a header on one line
            widths[k] += max(0, min(need(i, True) - widths[k], width - _table_width(widths)))
        t = Table(title=title if n == 0 else None, caption=caption if n == len(groups) - 1 else None)
        for k, i in enumerate(cols):
            key = i < keys
            t.add_column(headers[i], justify="left" if key else "right", style="bold" if key else None, width=widths[k])
        for row in cells:
            t.add_row(*(row[i] for i in cols))
        tables.append(t)
    return tables


ModesOpt = Annotated[
    str,
    typer.Option(
        "--modes",
        help="training modes to run each codec in, e.g. sync,federated (default: the scenario's); "
        "rows become MODE/CODEC, modes_accuracy.png plots accuracy vs time and vs bytes",
    ),
]


ScenarioFileArg = Annotated[
    Path, typer.Argument(help="scenario TOML file, e.g. scenarios/iot10.toml", show_default=False)
]
CodecsOpt = Annotated[
    str, typer.Option("--compressor", "-c", help="comma-separated codecs, e.g. none,2bit,topk; all: every codec")
]
SeedsOpt = Annotated[int, typer.Option("--seeds", help="seeds per codec: scenario.seed, +1, ...", min=1)]
CompareOutOpt = Annotated[
    Path | None, typer.Option("--out", "-o", help="comparison directory (default runs/compare-NAME)", parser=out_path)
]
TargetOpt = Annotated[
    float | None,
    typer.Option("--target-accuracy", help="accuracy for time-to-accuracy (default: the scenario's)", min=0.0, max=1.0),
]
BaselineOpt = Annotated[
    str | None, typer.Option("--baseline", help="codec the speed-up is relative to (default: none, else the first)")
]


def compare(
    scenario: ScenarioFileArg,
    compressor: CodecsOpt = "none,fp16,2bit,topk",
    seeds: SeedsOpt = 1,
    jobs: JobsOpt = None,
    out_dir: CompareOutOpt = None,
    set_: SetOpt = None,
    iterations: IterOpt = None,
    target_accuracy: TargetOpt = None,
    baseline: BaselineOpt = None,
    modes: ModesOpt = "",
    device: DeviceOpt = "auto",
    no_replay: NoReplayOpt = False,
    quiet: QuietOpt = False,
    tensorboard: TensorboardOpt = None,
) -> None:
    """Run a scenario with several compressors (x seeds) in parallel and compare them in one table.

    Writes a run directory per codec and seed (OUT/CODEC/seedK-HASH, HASH of the resolved scenario:
    complete runs of the identical scenario are reused, others kept beside), then comparison.csv,
    comparison.md and comparison.json (its run directories), read from those run directories only.
    A run that learns what a complete run under OUT learned (same codec and seed, other network
    settings: an earlier compare with another --set) is replayed from it; --no-replay trains it.
    """
    from aiotsim.results.compare import already_done, parse_compressors, plan_comparison
    from aiotsim.results.replay_plan import plan_under
    from aiotsim.results.store import is_run_dir

    tensorboard_available(tensorboard)
    names = parse_compressors(compressor)
    out_dir = out_dir if out_dir is not None else _default_compare_dir(scenario)
    mode_list = [m.strip() for m in modes.split(",") if m.strip()]
    variants = [_mode_variant(out_dir, set_, m) for m in mode_list or [None]]
    planned = [j for d, sets in variants for j in plan_comparison(scenario, names, seeds, d, sets, iterations, device)]
    if baseline is not None and baseline.split("/")[-1] not in names:
        raise ResultsError(f"--baseline {baseline!r} is not among the compared codecs: {', '.join(names)}")
    to_run = [j for j in planned if not already_done(j)]
    reused = len(planned) - len(to_run)
    plan = plan_under(out_dir, planned, to_run, replay=not no_replay)
    out.print(
        f"compare: {len(planned)} runs, {reused} reused (complete, same scenario), "
        f"{len(to_run)} to run{_plan_note(plan)}"
    )
    ensure_dir(out_dir)
    with writing_to(out_dir), locked_run_dir(out_dir):  # a second compare into OUT is refused
        results = _run_planned(plan, jobs, None, quiet, skipped=reused)
        done = [j.out_dir for j in planned if is_run_dir(j.out_dir)]
        if done:
            _write_comparison(done, planned, reused, out_dir, (scenario.stem, seeds), target_accuracy, baseline)
            if len(mode_list) > 1:
                out.print(f"written: {_plot_modes(done, out_dir)}")
            write_tensorboard([out_dir], tensorboard)
    report_failures(results)


def _default_compare_dir(scenario: Path) -> Path:
    """``runs/compare-NAME``, NAME the scenario's ``scenario.name`` (else the file's stem), made path-safe."""
    from aiotsim.config import read_toml

    section = read_toml(scenario).get("scenario")
    name = section.get("name") if isinstance(section, dict) else None
    return Path("runs") / f"compare-{slug(name if isinstance(name, str) else scenario.stem)}"


def _write_comparison(
    done: list[str],
    planned: list[Job],
    reused: int,
    out_dir: Path,
    name_seeds: tuple[str, int],
    target: float | None,
    baseline: str | None,
) -> None:
    """Compare the complete runs ``done`` and write, then print, the table and the record of the
    ``planned`` runs; the title names the scenario (``name_seeds[0]``) and the seeds per codec."""
    from aiotsim.results.compare import (
        compare_runs,
        comparison_title,
        reuse_note,
        write_comparison,
        write_comparison_record,
    )

    c = compare_runs(done, target, baseline)
    title = comparison_title(name_seeds[0], c, name_seeds[1])
    csv_path, md_path = write_comparison(c, out_dir, title, reused)
    record = write_comparison_record(out_dir, planned, reused, title)
    out.print(*comparison_tables(c, title, out.width))
    out.print(reuse_note(len(c.run_dirs), reused), highlight=False)
    out.print(f"written: {csv_path}, {md_path}, {record}")


def _mode_variant(out_dir: Path, set_: list[str] | None, mode: str | None) -> tuple[Path, list[str]]:
    """Where a mode's runs go (``OUT/MODE``) and its overrides (``training.mode=MODE`` added)."""
    if mode is None:
        return out_dir, list(set_ or [])
    return out_dir / mode, [*(set_ or []), f"training.mode={mode}"]


def _plot_modes(run_dirs: list[Path], out_dir: Path) -> str:
    """``modes_accuracy.png``: accuracy vs simulated time and vs bytes, one line per mode/codec."""
    from aiotsim.results.plots import load_run, plot_modes

    return ", ".join(str(p) for p in plot_modes([load_run(d) for d in run_dirs], out_dir, ["png"]))


SweepOutOpt = Annotated[
    Path | None,
    typer.Option("--out", "-o", help="sweep directory (default: \\[sweep] out, else runs/sweep-NAME)", parser=out_path),
]


SweepFileArg = Annotated[
    Path, typer.Argument(help="sweep TOML file, e.g. scenarios/sweep_uplink.toml", show_default=False)
]
RayOpt = Annotated[
    bool,
    typer.Option(
        "--ray",
        help="run on Ray: `--ray` alone starts a local Ray instance, `--ray ADDRESS` joins a cluster "
        "(e.g. auto, ray://head:10001); needs pip install 'aiotsim\\[ray]'",
    ),
]
AddressArg = Annotated[
    str | None, typer.Argument(metavar="[ADDRESS]", help="Ray cluster address, only after --ray", show_default=False)
]
DryRunOpt = Annotated[bool, typer.Option("--dry-run", help="validate and list the grid points, run nothing")]
SweepSetOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--set", "-s", help="override SECTION.KEY=VALUE at every point, over \\[set] (repeatable; not a grid key)"
    ),
]
SweepSeedsOpt = Annotated[
    int, typer.Option("--seeds", help="seeds per grid point: scenario.seed, +1, ... (a scenario.seed grid key)", min=1)
]


def sweep(
    sweep_file: SweepFileArg,
    out_dir: SweepOutOpt = None,
    jobs: JobsOpt = None,
    ray: RayOpt = False,
    address: AddressArg = None,
    set_: SweepSetOpt = None,
    iterations: IterOpt = None,
    seeds: SweepSeedsOpt = 1,
    device: DeviceOpt = "auto",
    dry_run: DryRunOpt = False,
    no_replay: NoReplayOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Run every point of a grid over scenario keys; resumable (complete runs are never redone).

    --set and -n apply to every point; --seeds N runs each with seeds scenario.seed, +1, ... (plot
    averages them). The sweep file's base is relative to its directory.

    Each point runs in OUT/runs/HASH (hash of its resolved scenario); sweep.csv indexes the points
    with their grid values and key metrics, and sweep.json describes the grid for `aiotsim plot`.
    Points that differ only in network (and energy, device-profile) settings learn the same thing:
    one of them trains, the others are replayed from its timing record (marked in sweep.csv,
    sweep.json and the table); --no-replay trains them all.
    """
    from aiotsim.results.sweep import load_sweep, plan_sweep, write_index, write_manifest

    if address is not None and not ray:
        raise ConfigError(f"unexpected argument {address!r} (a Ray address goes with --ray: --ray {address})")
    sw = load_sweep(sweep_file, out_dir, set_ or [], iterations, seeds)
    all_jobs = sw.jobs(device)
    plan = plan_sweep(sw, device, replay=not no_replay)
    n_run = len(plan.train) + len(plan.replays)
    out.print(
        f"sweep {sw.name}: {len(sw.points)} grid points, {len(all_jobs)} distinct runs, "
        f"{len(all_jobs) - n_run} already complete, {n_run} to run{_plan_note(plan)} -> {sw.out_dir}"
    )
    if dry_run:
        _print_plan(sw, plan)
        return
    ensure_dir(sw.out_dir)
    with writing_to(sw.out_dir), locked_run_dir(sw.out_dir):  # a second sweep into OUT is refused
        write_manifest(sw)
        write_index(sw)
        try:
            results = _run_planned(
                plan,
                jobs,
                (address or "local") if ray else None,
                quiet,
                skipped=len(all_jobs) - n_run,
                after_each=lambda: write_index(sw),
            )
        finally:  # stopped or not: sweep.json marks the points replayed so far
            with contextlib.suppress(AiotsimError):
                write_manifest(sw)
        index = write_index(sw)
    out.print(*sweep_tables(sw, out.width))
    out.print(f"written: {index}")
    report_failures(results)


def _print_plan(sw: Any, plan: ReplayPlan) -> None:
    """``--dry-run``: each point's run directory, values and what would happen to it."""
    from pathlib import PurePath

    action: dict[str, str] = {j.out_dir: "train" for j in plan.train}
    action |= {r.job.out_dir: f"replay from {PurePath(r.source).name}" for r in plan.replays}
    for pt in sw.points:
        d = sw.run_dir(pt)
        line = f"  {d}  {pt.label()}  [{action.get(str(d), 'complete')}]"
        out.print(line, highlight=False, markup=False, soft_wrap=True)  # one line per point, however wide


def sweep_tables(sw: Any, width: int) -> list[Table]:
    """A sweep's points and key metrics as rich tables that fit ``width`` columns (:func:`fit_tables`)."""
    from aiotsim.results.sweep import table_cells

    headers, cells = table_cells(sw)
    caption = "replayed: from which run (hash), else no (trained); sweep.csv: replayed_from"
    return fit_tables(headers, cells, len(sw.grid), width, f"sweep {sw.name}", caption)


def plot(
    paths: Annotated[list[Path], typer.Argument(help="run, comparison or sweep directories", show_default=False)],
    out_dir: Annotated[Path, typer.Option("--out", "-o", help="figures' directory", parser=out_path)] = Path("plots"),
    formats: Annotated[str, typer.Option("--formats", help="comma-separated figure formats")] = "png,svg",
    target_accuracy: Annotated[
        float | None,
        typer.Option("--target-accuracy", help="accuracy for time-to-accuracy (default: the runs')", min=0.0, max=1.0),
    ] = None,
) -> None:
    """Figures (PNG, SVG) from run, comparison and sweep directories.

    Throughput and bytes-on-the-wire bars, convergence against simulated time, iterations and bytes,
    time-to-accuracy bars, a timeline per codec (from trace.json) and, for sweeps, metrics against
    each swept key.
    """
    from aiotsim.results.plots import plot_all

    with writing_to(out_dir):
        written = plot_all(
            paths,
            out_dir,
            formats=tuple(f.strip() for f in formats.split(",") if f.strip()),
            target_accuracy=target_accuracy,
        )
    for p in written:
        out.print(str(p), highlight=False)
    out.print(f"{len(written)} files in {out_dir}")


def register(app: typer.Typer) -> None:
    """Add ``compare``, ``sweep`` and ``plot`` to the ``aiotsim`` app."""
    app.command("compare")(expected_errors(stopping_on_signals(compare)))
    app.command("sweep")(expected_errors(stopping_on_signals(sweep)))
    app.command("plot")(expected_errors(plot))


__all__ = ["register", "compare", "sweep", "plot", "BatchProgress", "comparison_tables", "sweep_tables", "fit_tables"]
