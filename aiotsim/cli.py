"""The ``aiotsim`` command line: thin Typer commands that parse, call and print.

Expected problems (:class:`aiotsim.errors.AiotsimError`) become a message on stderr and exit code 2
(no traceback); Ctrl-C keeps what was written and exits 130.
"""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from aiotsim.errors import AiotsimError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="aiotsim: which gradient compressor, on which network, at what cost, measured.",
    pretty_exceptions_enable=False,
)
out = Console()
err = Console(stderr=True)

F = TypeVar("F", bound=Callable[..., Any])


def expected_errors(fn: F) -> F:
    """Turn AiotsimError into 'error: ...' lines and its exit code; Ctrl-C into exit 130."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except AiotsimError as exc:
            for line in exc.message.splitlines():
                err.print(f"[red]error:[/red] {escape(line)}", highlight=False, markup=True, soft_wrap=True)
            raise typer.Exit(exc.exit_code) from None
        except KeyboardInterrupt:
            err.print("interrupted: results written so far are kept", highlight=False)
            raise typer.Exit(130) from None

    return wrapper  # type: ignore[return-value]


ScenarioArg = Annotated[Path, typer.Argument(help="scenario TOML file, e.g. scenarios/iot10.toml", show_default=False)]
SetOpt = Annotated[list[str] | None, typer.Option("--set", "-s", help="override SECTION.KEY=VALUE (repeatable)")]
CompressorOpt = Annotated[str | None, typer.Option("--compressor", "-c", help="codec name (overrides compressor.name)")]
IterOpt = Annotated[
    int | None, typer.Option("--iterations", "-n", help="iterations (overrides scenario.iterations)", min=1)
]
DeviceOpt = Annotated[str, typer.Option("--device", help="where the real learning runs: auto | cpu | cuda")]


def _fmt_bytes(n: float | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1000 or unit == "GB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{n:.0f} B"
        n /= 1000
    return f"{n:.1f} GB"


def _fmt(v: Any, spec: str = ".3g") -> str:
    return "-" if v is None else format(v, spec)


def summary_table(summary: dict[str, Any]) -> Table:
    """The run summary as a two-column table."""
    t = Table(title=f"{summary['scenario']} / {summary['compressor']}", show_header=False)
    t.add_column("metric", style="bold")
    t.add_column("value", justify="right")
    rows = [
        ("status", summary["status"]),
        ("iterations x nodes", f"{summary['iterations']} x {summary['nodes']}"),
        ("simulated time", f"{_fmt(summary['sim_time_s'], '.2f')} s"),
        ("throughput", f"{_fmt(summary['throughput_samples_per_s'], '.1f')} samples/s"),
        ("bytes up / down", f"{_fmt_bytes(summary['bytes_up'])} / {_fmt_bytes(summary['bytes_down'])}"),
        ("wire bytes up / down", f"{_fmt_bytes(summary['wire_bytes_up'])} / {_fmt_bytes(summary['wire_bytes_down'])}"),
        ("compression ratio (uplink)", f"{_fmt(summary['compression_ratio'], '.1f')}x"),
        ("compute / comm share", f"{_fmt(summary['compute_share'], '.0%')} / {_fmt(summary['comm_share'], '.0%')}"),
        ("final accuracy", _fmt(summary["final_accuracy"], ".2%")),
        (f"time to {summary['target_accuracy']:.0%}", f"{_fmt(summary['time_to_accuracy_s'], '.2f')} s"),
        ("wall time", f"{summary['wall_time_s']:.1f} s on {summary['device']}"),
    ]
    for k, v in rows:
        t.add_row(k, str(v))
    return t


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
    """Run one scenario: real gradients, real codec bytes, simulated network. Writes a run directory."""
    from aiotsim.api import run_scenario
    from aiotsim.config import load_scenario

    sc = load_scenario(scenario, set_ or [], compressor=compressor, iterations=iterations)
    out_dir = out_dir or Path("runs") / f"{sc.scenario.name}-{sc.compressor.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    progress = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("sim {task.fields[sim]:>8.2f} s  loss {task.fields[loss]:.4f}"),
        TimeElapsedColumn(),
        console=err,
        disable=quiet,
        transient=False,
    )
    with progress:
        task = progress.add_task(
            f"{sc.scenario.name}/{sc.compressor.name}", total=sc.scenario.iterations, sim=0.0, loss=float("nan")
        )

        def on_progress(p: Any) -> None:
            progress.update(task, completed=p.iteration, sim=p.sim_time_s, loss=p.loss)

        try:
            summary = run_scenario(sc, out_dir, device=device, on_progress=on_progress)
        except KeyboardInterrupt:
            err.print(f"partial results in {out_dir}")
            raise
    out.print(summary_table(summary))
    out.print(f"run directory: {out_dir}")


@app.command()
@expected_errors
def validate(
    scenario: ScenarioArg,
    set_: SetOpt = None,
) -> None:
    """Check a scenario file and report every problem, one per line (exit 2 if any)."""
    from aiotsim.config import load_scenario

    sc = load_scenario(scenario, set_ or [])
    out.print(
        f"{scenario}: ok ({sc.nodes.count} nodes, {sc.model.name} on {sc.data.dataset}, "
        f"compressor {sc.compressor.name}, {sc.network.topology} topology)"
    )


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


from aiotsim.cli_batch import register as _register_batch  # noqa: E402  (needs `app` above)

_register_batch(app)

if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())
