"""Sharing commands of the ``aiotsim`` CLI: ``report`` (one HTML file) and ``export`` (Parquet,
TensorBoard). Thin like the rest of the CLI: :mod:`aiotsim.results.report` and
:mod:`aiotsim.results.export` do the work; :func:`register` adds the commands to the main app."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from aiotsim.cli_common import expected_errors, out, out_path, writing_to

DirArg = Annotated[Path, typer.Argument(help="a run, comparison or sweep directory", show_default=False, metavar="DIR")]


def report(
    path: DirArg,
    output: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="HTML file to write (default: DIR/report.html)", parser=out_path),
    ] = None,
) -> None:
    """One self-contained HTML file of a run, comparison or sweep, to share.

    The table, every figure (inline SVG), the resolved scenario, versions and the command that
    reproduces the results; it opens offline in any browser (no script, nothing loaded).
    """
    from aiotsim.results.report import REPORT_NAME, write_report

    target = output if output is not None else path / REPORT_NAME
    with writing_to(target):
        written = write_report(path, target)
    out.print(f"report: {written}", highlight=False)


def export(
    path: DirArg,
    fmt: Annotated[str, typer.Option("--format", "-f", help="parquet | tensorboard")] = "parquet",
    output: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="output directory (default: DIR/export-FORMAT)", parser=out_path),
    ] = None,
) -> None:
    """Every run's metrics and evaluations as Parquet tables or TensorBoard scalars.

    Parquet (needs pyarrow): metrics, evals and runs tables with run_id, codec and seed columns
    (and one per swept key). TensorBoard (needs tensorboard): a log directory per run, scalars
    against the iteration.
    """
    from aiotsim.results.export import export as do_export

    target = output if output is not None else path / f"export-{fmt}"
    with writing_to(target):
        written = do_export(path, fmt, target)
    for p in written:
        out.print(str(p), highlight=False)
    hint = f"  (tensorboard --logdir {target})" if fmt == "tensorboard" else ""
    out.print(f"{len(written)} {'log directories' if fmt == 'tensorboard' else 'files'} in {target}{hint}")


def register(app: typer.Typer) -> None:
    """Add ``report`` and ``export`` to the ``aiotsim`` app."""
    app.command("report")(expected_errors(report))
    app.command("export")(expected_errors(export))


__all__ = ["register", "report", "export"]
