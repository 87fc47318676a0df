"""The ``aiotsim`` command line: thin Typer commands that parse, call and print.

Expected problems (:class:`aiotsim.errors.AiotsimError`) become a message on stderr and exit code 2
(no traceback). Exit codes: 0 ok, 2 bad input, 3 the run diverged, 4 the run stalled, 130
interrupted (Ctrl-C; SIGTERM and SIGHUP stop a run the same way, exit 128 + the signal number).
The pieces shared with the batch commands live in :mod:`aiotsim.cli_common`.
"""

from __future__ import annotations

import functools
import re
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
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
    TensorboardOpt,
    err,
    expected_errors,
    fmt,
    fmt_bytes,
    out,
    out_path,
    print_error,
    slug,
    stopping_on_signals,
    tensorboard_available,
    write_tensorboard,
    writing_to,
)
from aiotsim.cli_report import register as _register_report
from aiotsim.errors import ConfigError

app = typer.Typer(
    name="aiotsim",
    add_completion=True,  # --install-completion / --show-completion (bash, zsh, fish, PowerShell)
    no_args_is_help=True,
    help="aiotsim: which gradient compressor, on which network, at what cost, measured.",
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},  # every command inherits it
)


def _print_version(value: bool) -> None:
    """``--version``: print ``aiotsim VERSION`` and exit 0, before any command is parsed."""
    if value:
        from aiotsim._version import __version__

        out.print(f"aiotsim {__version__}", highlight=False)
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", help="print the version and exit", callback=_print_version, is_eager=True),
    ] = False,
) -> None:
    """aiotsim: which gradient compressor, on which network, at what cost, measured."""


__all__ = ["app", "main", "err", "out", "expected_errors", "SetOpt", "summary_table"]


def summary_table(summary: dict[str, Any], fleet: int | None = None) -> Table:
    """The run summary as a two-column table; ``fleet``: the scenario's ``nodes.count`` (a
    federated summary's ``nodes`` counts only the nodes that took part)."""
    t = Table(title=f"{summary['scenario']} / {summary['compressor']}", show_header=False)
    t.add_column("metric", style="bold")
    t.add_column("value", justify="right")
    rows = [
        ("status", summary["status"]),
        _size_row(summary, fleet),
        ("simulated time", f"{fmt(summary['sim_time_s'], '.2f')} s"),
        ("throughput", f"{fmt(summary['throughput_samples_per_s'], '.1f')} samples/s"),
        ("bytes up / down", f"{fmt_bytes(summary['bytes_up'])} / {fmt_bytes(summary['bytes_down'])}"),
        ("wire bytes up / down", f"{fmt_bytes(summary['wire_bytes_up'])} / {fmt_bytes(summary['wire_bytes_down'])}"),
        ("compression ratio (uplink)", f"{fmt(summary['compression_ratio'], '.1f')}x"),
        *_share_rows(summary),
        ("final accuracy", fmt(summary["final_accuracy"], ".2%")),
        (f"time to {summary['target_accuracy']:.0%}", f"{fmt(summary['time_to_accuracy_s'], '.2f')} s"),
        ("wall time", f"{summary['wall_time_s']:.1f} s on {summary['device']}"),
    ]
    for k, v in rows:
        t.add_row(k, str(v))
    return t


def _fleet(run_dir: Path) -> int | None:
    """``nodes.count`` of the scenario a run directory keeps; None when it cannot be read."""
    import tomllib

    try:
        count = tomllib.loads((run_dir / "scenario.toml").read_text("utf-8"))["nodes"]["count"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return count if isinstance(count, int) else None


def _size_row(summary: dict[str, Any], fleet: int | None) -> tuple[str, str]:
    """``iterations x nodes``; federated: rounds, the fleet and how many of it took part."""
    if summary.get("mode") != "federated":
        return "iterations x nodes", f"{summary['iterations']} x {summary['nodes']}"
    of = f" of {fleet}" if fleet is not None else ""
    return "rounds", f"{summary['iterations']} ({summary['nodes']}{of} nodes took part)"


def _share_rows(summary: dict[str, Any]) -> list[tuple[str, str]]:
    """The time shares. Sync: compute and communication split each iteration's critical path, so
    they are shares of the run's time. Otherwise (partial, async, federated) nodes overlap: the
    compute share is a contributor's mean compute time over the iteration's (round's) time, and
    the rest of an iteration is the server waiting for uploads (``comm_share``: the time it does
    not decode), which includes the nodes' compute; the two do not add up."""
    share = functools.partial(fmt, spec=".0%")
    if summary.get("mode", "sync") == "sync":
        return [("compute / comm share", f"{share(summary['compute_share'])} / {share(summary['comm_share'])}")]
    unit = "round" if summary.get("mode") == "federated" else "iteration"
    return [
        (f"node compute / {unit}", f"{share(summary['compute_share'])} (mean contributor)"),
        ("server waits / decodes", f"{share(summary['comm_share'])} / {share(summary.get('decode_share'))}"),
    ]


def _progress(quiet: bool) -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("sim {task.fields[sim]:>8.2f} s  loss {task.fields[loss]:.4f}{task.fields[work]}"),
        TimeElapsedColumn(),
        console=err,
        disable=quiet,
        transient=False,
    )


def _run_scenario(sc: Any, out_dir: Path, device: str, on_progress: Any, threads: str, every: int) -> dict[str, Any]:
    """The library call that runs one scenario into ``out_dir`` and returns its summary."""
    from aiotsim.api import run_scenario

    return run_scenario(sc, out_dir, device=device, on_progress=on_progress, threads=threads, checkpoint_every=every)


def _resume_run(run_dir: Path, device: str, on_progress: Any, threads: str, every: int) -> dict[str, Any]:
    """The library call that continues the run in ``run_dir`` from its checkpoint."""
    from aiotsim.api import resume_run

    return resume_run(run_dir, device=device, on_progress=on_progress, threads=threads, checkpoint_every=every)


def _simulate(name: str, total: int, out_dir: Path, quiet: bool, call: Any) -> dict[str, Any]:
    """Run ``call(on_progress)`` under a progress bar; SIGTERM/SIGHUP stop it like Ctrl-C."""
    with SignalInterrupt(), _progress(quiet) as progress:
        task = progress.add_task(name, total=total, sim=0.0, loss=float("nan"), work="")

        def on_progress(p: Any) -> None:
            # within a long iteration: the gradients it has computed so far (a fleet's take minutes)
            work = f"  +{p.gradients:,} gradients" if p.gradients else ""
            progress.update(task, completed=p.iteration, total=p.total, sim=p.sim_time_s, loss=p.loss, work=work)

        try:
            with writing_to(out_dir):
                return call(on_progress)
        except KeyboardInterrupt:
            err.print(f"partial results in {out_dir}")
            raise


ThreadsOpt = Annotated[
    str,
    typer.Option(
        "--threads",
        help="torch threads for the run, or 'auto' (the CPUs this process may use: affinity and cgroup"
        " cpu.max quota); results depend on it: 1 everywhere by default",
    ),
]
EveryOpt = Annotated[
    int,
    typer.Option(
        "--checkpoint-every",
        min=0,
        help="write checkpoint.pt every N iterations or rounds (sync, partial, federated; 0 off)",
    ),
]


@app.command()
@expected_errors
@stopping_on_signals  # SIGTERM/SIGHUP: exit 128 + N whenever they come, not only mid-run
def run(
    scenario: Annotated[
        Path | None, typer.Argument(help="scenario TOML file, e.g. scenarios/iot10.toml", show_default=False)
    ] = None,
    compressor: CompressorOpt = None,
    iterations: IterOpt = None,
    set_: SetOpt = None,
    out_dir: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="run directory (default runs/NAME-CODEC-TIME)", parser=out_path),
    ] = None,
    device: DeviceOpt = "auto",
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="no progress bar")] = False,
    threads: ThreadsOpt = "1",
    checkpoint_every: EveryOpt = 0,
    resume: Annotated[
        Path | None, typer.Option("--resume", help="continue the run in this directory from its checkpoint.pt")
    ] = None,
    tensorboard: TensorboardOpt = None,
) -> None:
    """Run one scenario: real gradients, real codec bytes, simulated network. Writes a run directory.

    Exit codes: 0 complete, 2 bad input, 3 the training diverged, 4 it stalled, 130 interrupted
    (Ctrl-C; SIGTERM 143, SIGHUP 129): the run directory keeps what was written, with summary.json
    and trace.json. `--resume RUN_DIR` continues such a run from its last checkpoint
    (`--checkpoint-every N`); in flops mode the result equals an uninterrupted run's.
    """
    from aiotsim.cpus import resolve_threads

    count = resolve_threads(threads)  # a bad value is exit 2 before anything starts
    if threads.strip().lower() == "auto" and not quiet:
        err.print(f"threads: auto -> {count} (CPU affinity and cgroup quota)", highlight=False)
    threads = str(count)
    tensorboard_available(tensorboard)  # a missing package is exit 2 before the run, not after
    if resume is not None:
        if scenario is not None or compressor or iterations or set_ or out_dir:
            raise ConfigError("--resume RUN_DIR takes the scenario from RUN_DIR: give no scenario, -c, -n, --set or -o")
        from aiotsim.sim.checkpoint import CHECKPOINT_NAME

        if not (resume / CHECKPOINT_NAME).is_file():
            raise ConfigError(
                f"--resume {resume}: no {CHECKPOINT_NAME} there; a run writes one with --checkpoint-every N"
            )
        summary = _simulate(
            str(resume), 0, resume, quiet, lambda p: _resume_run(resume, device, p, threads, checkpoint_every)
        )
        out_dir = resume
    else:
        out_dir, summary = _run_new(
            scenario, compressor, iterations, set_, out_dir, device, quiet, threads, checkpoint_every
        )
    out.print(summary_table(summary, _fleet(out_dir)))
    out.print(f"run directory: {out_dir}")
    _finish(summary, out_dir, tensorboard)


def _finish(summary: dict[str, Any], out_dir: Path, tensorboard: Path | None) -> None:
    """Write the TensorBoard scalars if asked, then exit with the code of the run's status."""
    write_tensorboard([out_dir], tensorboard)
    status = str(summary.get("status", "complete"))
    code = STATUS_EXIT.get(status.split(":")[0])
    if code is not None:
        reason = summary.get("reason") or "see summary.json"
        print_error(f"{status} at iteration {summary.get('iterations')}: {reason}")
        raise typer.Exit(code)


def _run_new(
    scenario: Path | None,
    compressor: str | None,
    iterations: int | None,
    set_: list[str] | None,
    out_dir: Path | None,
    device: str,
    quiet: bool,
    threads: str,
    every: int,
) -> tuple[Path, dict[str, Any]]:
    """Validate and run a scenario file: ``(run directory, summary)``."""
    from aiotsim.validate import load_validated

    if scenario is None:
        raise ConfigError("give a scenario file (e.g. scenarios/iot10.toml) or --resume RUN_DIR")
    sc = load_validated(scenario, set_ or [], compressor=compressor, iterations=iterations)
    if not quiet:  # before anything is allocated: a big fleet says what it will take
        from aiotsim.validate import world_size

        size = world_size(sc)
        if size is not None:
            err.print(f"memory estimate: {size.describe()}", highlight=False, soft_wrap=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out_dir = out_dir or Path("runs") / f"{slug(sc.scenario.name)}-{slug(sc.compressor.name)}-{stamp}"
    name = f"{sc.scenario.name}/{sc.compressor.name}"
    summary = _simulate(
        name, sc.scenario.iterations, out_dir, quiet, lambda p: _run_scenario(sc, out_dir, device, p, threads, every)
    )
    return out_dir, summary


@app.command()
@expected_errors
@stopping_on_signals
def replay(
    run_dir: Annotated[Path, typer.Argument(help="a complete run directory (it holds timing.npz)", show_default=False)],
    set_: SetOpt = None,
    out_dir: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="run directory to write (default RUN_DIR-replay-TIME)", parser=out_path),
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="no progress bar")] = False,
) -> None:
    """Re-run a run's timing under new network settings, without learning again.

    The recorded learning (losses, payload sizes, accuracies, compute and codec costs) is
    replayed through the same strategy and network with the --set overrides: the run directory it
    writes equals a full run of the new settings, in a fraction of the time. Only keys that change
    the clock are accepted ([network] rates, latencies, loss, traces, transport; [energy]; device
    profiles and radio); anything that changes what is learned is refused (exit 2, naming it).
    """
    from aiotsim.replaying import replay_run
    from aiotsim.validate import load_validated

    if not (run_dir / "scenario.toml").is_file():
        raise ConfigError(f"{run_dir}: not a run directory (no scenario.toml); give the directory of a complete run")
    sc = load_validated(run_dir / "scenario.toml", set_ or [])
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out_dir = out_dir or run_dir.with_name(f"{run_dir.name}-replay-{stamp}")
    name = f"replay {sc.scenario.name}/{sc.compressor.name}"
    summary = _simulate(
        name, sc.scenario.iterations, out_dir, quiet, lambda p: replay_run(run_dir, sc, out_dir, on_progress=p)
    )
    out.print(summary_table(summary, sc.nodes.count))
    out.print(f"run directory: {out_dir} (replayed from {run_dir})")


@app.command()
@expected_errors
def validate(
    scenario: ScenarioArg,
    compressor: CompressorOpt = None,
    iterations: IterOpt = None,
    set_: SetOpt = None,
    show: Annotated[
        bool,
        typer.Option(
            "--show",
            help="also print the resolved scenario as TOML, every default included (what a run would use), "
            "on stdout; the report lines go to stderr, so `> resolved.toml` keeps a file that runs",
        ),
    ] = False,
) -> None:
    """Check a scenario file and report every problem, one per line (exit 2 if any).

    A scenario that validates runs: validate checks what `aiotsim run` would refuse, including the
    memory the simulated world would take (printed), and the network's queues (how deep each kind of
    link's drop-tail buffer is, in packets and in ms at its rate). It takes run's overrides, so
    `aiotsim validate FILE -c topk` checks what `aiotsim run FILE -c topk` would run, and
    `--show` prints that scenario, resolved (nothing is printed on stdout when it is invalid).
    """
    from aiotsim.network_summary import network_summary
    from aiotsim.validate import load_validated, work_summary, world_size

    sc = load_validated(scenario, set_ or [], compressor=compressor, iterations=iterations)
    report = err if show else out
    report.print(
        f"{scenario}: ok ({sc.nodes.count} nodes, {sc.model.name} on {sc.data.dataset}, "
        f"compressor {sc.compressor.name}, {sc.network.topology} topology)",
        highlight=False,
        soft_wrap=True,
    )
    size = world_size(sc)
    estimate = size.describe() if size is not None else "known once the image files are read"
    report.print(f"memory estimate: {estimate}", highlight=False, soft_wrap=True)
    report.print(f"work estimate: {work_summary(sc)}", highlight=False, soft_wrap=True)
    report.print(f"network: {network_summary(sc)}", highlight=False, soft_wrap=True)
    if show:
        from aiotsim._version import __version__

        header = f"# {scenario} resolved by aiotsim {__version__} (every key, defaults included)\n"
        # plain text: Rich would read [section] headers as markup and wrap long lines
        typer.echo(header + sc.to_toml(), nl=False)


@app.command()
@expected_errors
def compressors(
    plugins: Annotated[
        list[str] | None,
        typer.Argument(help="plugin codecs to list too, 'package.module:ClassName' (importable: see PYTHONPATH)"),
    ] = None,
) -> None:
    """List every codec (built-in, installed entry point of `aiotsim.codecs`, and any plugin named)
    with its origin, a one-line description and its parameters and defaults."""
    from aiotsim.compress.registry import codec_names, codec_plugin
    from aiotsim.errors import ConfigError

    t = Table(title="compressors")
    t.add_column("name", style="bold")
    t.add_column("origin")
    t.add_column("description")
    t.add_column("parameters (default)")
    for name in codec_names():
        try:
            found = codec_plugin(name)
        except ConfigError as exc:  # a broken installed entry point: listed with why, the rest still
            t.add_row(escape(name), "entry point", escape(str(exc)), "-")
            continue
        params = "\n".join(f"{p} = {d!r}: {h}" for p, d, h in found.cls.param_docs()) or "-"
        # escaped: Rich would take "[index in union]" or "[m, r]" for markup tags and drop them
        t.add_row(escape(name), escape(found.origin), escape(found.cls.summary), escape(params))
    for name in plugins or []:  # named by the user: a failure to import is an error (exit 2)
        found = codec_plugin(name)
        params = "\n".join(f"{p} = {d!r}: {h}" for p, d, h in found.cls.param_docs()) or "-"
        t.add_row(escape(name), escape(found.origin), escape(found.cls.summary), escape(params))
    out.print(t)


_ROLE = re.compile(r":[\w:]+:`~?([^`<]*?)\s*(?:<[^`>]*>)?`")  # :class:`~a.B`, :func:`text <target>`
_LITERAL = re.compile(r"``(.+?)``|`([^`]+)`")


def plain_text(text: str) -> str:
    """Sphinx/reST inline markup as plain text: ``:class:`~a.b.C``` -> ``C`` (``~``: the last
    component), ``:func:`label <target>``` -> ``label``, double and single backquotes dropped."""

    def role(m: re.Match[str]) -> str:
        target = m.group(1)
        return target.rsplit(".", 1)[-1] if m.group(0).split("`")[1].startswith("~") else target

    text = _ROLE.sub(role, text)
    return _LITERAL.sub(lambda m: m.group(1) or m.group(2), text)


def _shape(text: str) -> tuple[int, int, int]:
    """``"3,32,32"`` -> ``(3, 32, 32)``; anything else is a ConfigError."""
    try:
        c, h, w = (int(x) for x in text.split(","))
    except ValueError:
        raise ConfigError(f"--input {text!r}: expected C,H,W (e.g. 1,28,28 or 3,32,32)") from None
    if min(c, h, w) < 1 or max(c, h, w) > 1024:
        raise ConfigError(f"--input {text!r}: every size must be in 1..1024")
    return c, h, w


@app.command()
@expected_errors
def models(
    input_: Annotated[str, typer.Option("--input", help="input shape C,H,W")] = "1,28,28",
    classes: Annotated[int, typer.Option("--classes", min=2, max=100_000, help="output classes")] = 10,
) -> None:
    """List every model with its parameter count, FLOPs per sample and layer kinds at one input shape.

    FLOPs are counted on a batch of two samples, one model after the other, on one torch thread
    (a pass this small is slower on more: on a busy 2-core machine 2 threads took 34 s, 1 thread 6 s).
    """
    import torch

    from aiotsim.learn.models.describe import describe_model
    from aiotsim.learn.models.registry import MODELS

    shape = _shape(input_)
    torch.set_num_threads(1)
    t = Table(title=f"models for {'x'.join(map(str, shape))} inputs, {classes} classes")
    for col, justify in (("name", "left"), ("params", "right"), ("MFLOP/sample (fwd+bwd)", "right")):
        t.add_column(col, justify=justify)  # type: ignore[arg-type]
    t.add_column("conv / fc / norm", justify="right")
    t.add_column("what")
    with err.status("counting FLOPs", spinner="dots") as status:  # a few seconds: say what is going on
        for k, name in enumerate(MODELS, 1):
            status.update(f"counting FLOPs: {name} ({k}/{len(MODELS)})")
            m = describe_model(name, shape, classes)
            summary = escape(plain_text(m.summary))
            if not m.supported:
                t.add_row(m.name, "-", "-", "-", summary)
                continue
            layers = f"{m.conv_layers} / {m.fc_layers} / {m.norm_layers}"
            t.add_row(m.name, f"{m.params:,}", f"{m.train_flops / 1e6:,.1f}", layers, summary)
    out.print(t)


@app.command()
@expected_errors
def calibrate(
    rate_mbps: Annotated[float, typer.Option(help="shaped link rate, Mbit/s", min=0.01)] = 10.0,
    mtu: Annotated[int, typer.Option(help="loopback MTU, bytes", min=576)] = 1500,
    quick: Annotated[bool, typer.Option(help="a few cases only (about 10 s)")] = False,
    full: Annotated[bool, typer.Option(help="every case, up to 10 MB x 8 flows (several minutes)")] = False,
    repeats: Annotated[int, typer.Option(help="measurements per case (median kept)", min=1)] = 1,
    against: Annotated[
        str, typer.Option(help="'real': TCP through a shaped loopback; 'ns3': ns-3 packet-level TCP (aiotsim\\[ns3])")
    ] = "real",
    classes: Annotated[
        bool,
        typer.Option(
            help="with --against ns3: per-flow times in the classes the star leaves out (shallow buffers, "
            "mixed RTTs, staggered starts, low-rate links, a hierarchy; about a minute)"
        ),
    ] = False,
    markdown: Annotated[
        bool, typer.Option(help="with --against ns3: Markdown tables (README's, or with --classes docs/CALIBRATION.md)")
    ] = False,
) -> None:
    """Validate the network model against real TCP through a tc-shaped loopback (needs root),
    or against ns-3's packet-level TCP (`--against ns3`, needs `pip install aiotsim\\[ns3]`).

    real: creates a private network namespace, shapes its loopback with `tc tbf`, times real TCP
    transfers of 1 KB..10 MB with 1, 2, 4 and 8 concurrent flows, and prints measured vs
    predicted completion times. Nothing leaves the namespace's loopback.
    ns3: the same star (10 Mbit/s links, shared server link) in ns-3 and in the TCP flow model,
    1 KB..10 MB x 1-16 flows x one-way latency 1-300 ms x loss 0-5% (`--quick`: 4 cases).
    With `--classes`: each flow's completion time, per class of case (deep and shallow buffers,
    mixed RTTs on one bottleneck, staggered starts, low-rate links, a two-level hierarchy).
    """
    if against not in ("real", "ns3"):
        raise ConfigError(f"--against(={against!r}) must be 'real' or 'ns3'")
    if classes and against != "ns3":
        raise ConfigError("--classes compares with ns-3: add --against ns3")
    if markdown and against != "ns3":
        raise ConfigError("--markdown formats the comparison with ns-3: add --against ns3")
    if classes:
        from aiotsim.network import calibrate_classes

        rows = calibrate_classes.compare(calibrate_classes.grid())
        table = calibrate_classes.markdown_report(rows) if markdown else calibrate_classes.format_table(rows)
        out.print(table, highlight=False, soft_wrap=True, markup=False)  # long labels: no wrapping at 80 columns
        return
    if against == "ns3":
        from aiotsim.network import calibrate_ns3

        rows = calibrate_ns3.compare(calibrate_ns3.grid(quick=quick))
        table = calibrate_ns3.markdown_report(rows) if markdown else calibrate_ns3.format_table(rows)
        out.print(table, highlight=False, soft_wrap=True, markup=False)
        return
    from aiotsim.network.calibrate import format_table, run_calibration

    rows = run_calibration(
        rate_mbps=rate_mbps, mtu=mtu, quick=quick, repeats=repeats, max_case_bytes=None if full else 2e7
    )
    out.print(format_table(rows), highlight=False)


def main() -> None:
    """The ``aiotsim`` command: a process of its own, whose heap keeps a round's freed blocks for
    the next round (:func:`aiotsim.sim.allocator.keep_freed_blocks`), then the CLI."""
    from aiotsim.cli_common import print_error
    from aiotsim.sim.allocator import keep_freed_blocks

    try:
        keep_freed_blocks()
    except ConfigError as exc:
        print_error(exc.message)
        sys.exit(exc.exit_code)
    app()


_register_batch(app)
_register_report(app)

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
