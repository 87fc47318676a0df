"""The ``aiotsim`` command line: thin Typer commands that parse, call and print.

Expected problems (:class:`aiotsim.errors.AiotsimError`) become a message on stderr and exit code 2
(no traceback). Exit codes: 0 ok, 2 bad input, 3 the run diverged, 4 the run stalled, 130
interrupted (Ctrl-C; SIGTERM and SIGHUP stop a run the same way, exit 128 + the signal number).
The pieces shared with the batch commands live in :mod:`aiotsim.cli_common`.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from aiotsim.cli_batch import register as _register_batch
from aiotsim.cli_common import (
    STATUS_EXIT,
    CompressorOpt,
    DeviceOpt,
    IterOpt,
    ScenarioArg,
    SetOpt,
    SignalInterrupt,
    err,
    expected_errors,
    fmt,
    fmt_bytes,
    out,
    print_error,
    slug,
    writing_to,
)

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="aiotsim: which gradient compressor, on which network, at what cost, measured.",
    pretty_exceptions_enable=False,
)

__all__ = ["app", "main", "err", "out", "expected_errors", "SetOpt", "summary_table"]


def summary_table(summary: dict[str, Any]) -> Table:
    """The run summary as a two-column table."""
    t = Table(title=f"{summary['scenario']} / {summary['compressor']}", show_header=False)
    t.add_column("metric", style="bold")
    t.add_column("value", justify="right")
    rows = [
        ("status", summary["status"]),
        ("iterations x nodes", f"{summary['iterations']} x {summary['nodes']}"),
        ("simulated time", f"{fmt(summary['sim_time_s'], '.2f')} s"),
        ("throughput", f"{fmt(summary['throughput_samples_per_s'], '.1f')} samples/s"),
        ("bytes up / down", f"{fmt_bytes(summary['bytes_up'])} / {fmt_bytes(summary['bytes_down'])}"),
        ("wire bytes up / down", f"{fmt_bytes(summary['wire_bytes_up'])} / {fmt_bytes(summary['wire_bytes_down'])}"),
        ("compression ratio (uplink)", f"{fmt(summary['compression_ratio'], '.1f')}x"),
        ("compute / comm share", f"{fmt(summary['compute_share'], '.0%')} / {fmt(summary['comm_share'], '.0%')}"),
        ("final accuracy", fmt(summary["final_accuracy"], ".2%")),
        (f"time to {summary['target_accuracy']:.0%}", f"{fmt(summary['time_to_accuracy_s'], '.2f')} s"),
        ("wall time", f"{summary['wall_time_s']:.1f} s on {summary['device']}"),
    ]
    for k, v in rows:
        t.add_row(k, str(v))
    return t


def _progress(quiet: bool) -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("sim {task.fields[sim]:>8.2f} s  loss {task.fields[loss]:.4f}"),
        TimeElapsedColumn(),
        console=err,
        disable=quiet,
        transient=False,
    )


def _run_scenario(sc: Any, out_dir: Path, device: str, on_progress: Any) -> dict[str, Any]:
    """The library call that runs one scenario into ``out_dir`` and returns its summary."""
    from aiotsim.sim.engine import Simulation

    return Simulation(sc, device=device, on_progress=on_progress).run(out_dir)


def _simulate(sc: Any, out_dir: Path, device: str, quiet: bool) -> dict[str, Any]:
    """Run the simulation under a progress bar; SIGTERM/SIGHUP stop it like Ctrl-C."""
    with SignalInterrupt(), _progress(quiet) as progress:
        task = progress.add_task(
            f"{sc.scenario.name}/{sc.compressor.name}", total=sc.scenario.iterations, sim=0.0, loss=float("nan")
        )

        def on_progress(p: Any) -> None:
            progress.update(task, completed=p.iteration, sim=p.sim_time_s, loss=p.loss)

        try:
            with writing_to(out_dir):
                return _run_scenario(sc, out_dir, device, on_progress)
        except KeyboardInterrupt:
            err.print(f"partial results in {out_dir}")
            raise


@app.command()
@expected_errors
def run(
    scenario: ScenarioArg,
    compressor: CompressorOpt = None,
    iterations: IterOpt = None,
    set_: SetOpt = None,
    out_dir: Annotated[
        Path | None, typer.Option("--out", "-o", help="run directory (default runs/NAME-CODEC-TIME)")
    ] = None,
    device: DeviceOpt = "auto",
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="no progress bar")] = False,
) -> None:
    """Run one scenario: real gradients, real codec bytes, simulated network. Writes a run directory.

    Exit codes: 0 complete, 2 bad input, 3 the training diverged, 4 it stalled, 130 interrupted
    (Ctrl-C; SIGTERM 143, SIGHUP 129): the run directory keeps what was written, with summary.json
    and trace.json.
    """
    from aiotsim.validate import load_validated

    sc = load_validated(scenario, set_ or [], compressor=compressor, iterations=iterations)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out_dir = out_dir or Path("runs") / f"{slug(sc.scenario.name)}-{slug(sc.compressor.name)}-{stamp}"
    summary = _simulate(sc, out_dir, device, quiet)
    out.print(summary_table(summary))
    out.print(f"run directory: {out_dir}")
    status = str(summary.get("status", "complete"))
    code = STATUS_EXIT.get(status.split(":")[0])
    if code is not None:
        reason = summary.get("reason") or "see summary.json"
        print_error(f"{status} at iteration {summary.get('iterations')}: {reason}")
        raise typer.Exit(code)


@app.command()
@expected_errors
def validate(
    scenario: ScenarioArg,
    set_: SetOpt = None,
) -> None:
    """Check a scenario file and report every problem, one per line (exit 2 if any).

    A scenario that validates runs: validate checks what `aiotsim run` would refuse, including the
    memory the simulated world would take (printed).
    """
    from aiotsim.validate import load_validated, world_size

    sc = load_validated(scenario, set_ or [])
    out.print(
        f"{scenario}: ok ({sc.nodes.count} nodes, {sc.model.name} on {sc.data.dataset}, "
        f"compressor {sc.compressor.name}, {sc.network.topology} topology)",
        highlight=False,
        soft_wrap=True,
    )
    out.print(f"memory estimate: {world_size(sc).describe()}", highlight=False, soft_wrap=True)


@app.command()
@expected_errors
def compressors() -> None:
    """List every codec with a one-line description and its parameters and defaults."""
    from aiotsim.compress.registry import codec_names, get_codec_class

    t = Table(title="compressors")
    t.add_column("name", style="bold")
    t.add_column("description")
    t.add_column("parameters (default)")
    for name in codec_names():
        cls = get_codec_class(name)
        params = "\n".join(f"{p} = {d!r}: {h}" for p, d, h in cls.param_docs()) or "-"
        t.add_row(name, cls.summary, params)
    out.print(t)


@app.command()
@expected_errors
def calibrate(
    rate_mbps: Annotated[float, typer.Option(help="shaped link rate, Mbit/s", min=0.01)] = 10.0,
    mtu: Annotated[int, typer.Option(help="loopback MTU, bytes", min=576)] = 1500,
    quick: Annotated[bool, typer.Option(help="a few cases only (about 10 s)")] = False,
    full: Annotated[bool, typer.Option(help="every case, up to 10 MB x 8 flows (several minutes)")] = False,
    repeats: Annotated[int, typer.Option(help="measurements per case (median kept)", min=1)] = 1,
) -> None:
    """Validate the network model against real TCP through a tc-shaped loopback (needs root).

    Creates a private network namespace, shapes its loopback with `tc tbf`, times real TCP
    transfers of 1 KB..10 MB with 1, 2, 4 and 8 concurrent flows, and prints measured vs
    predicted completion times. Nothing leaves the namespace's loopback.
    """
    from aiotsim.network.calibrate import format_table, run_calibration

    rows = run_calibration(
        rate_mbps=rate_mbps, mtu=mtu, quick=quick, repeats=repeats, max_case_bytes=None if full else 2e7
    )
    out.print(format_table(rows), highlight=False)


def main() -> None:  # pragma: no cover - console entry point alias
    app()


_register_batch(app)

if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())
