"""``aiotsim export``: a directory's runs in the formats researchers' tools read.

- **Parquet** (:func:`export_parquet`): ``metrics.parquet`` (a row per run and iteration),
  ``evals.parquet`` (a row per run and evaluation) and ``runs.parquet`` (a row per run: its summary's
  numbers and names), via pandas and pyarrow. Every row names its run: ``run_id`` (the run
  directory, relative to the exported directory), ``codec``, ``seed``, ``scenario``, ``mode`` and,
  for a sweep, a column per swept key (``network.uplink_mbps`` ...).
- **TensorBoard** (:func:`export_tensorboard`): a log directory per run (named by its ``run_id``)
  with its scalars against the iteration: ``train/loss``, ``train/sim_time_s``,
  ``train/wire_bytes_up`` and ``train/wire_bytes_down`` (per iteration), ``eval/accuracy`` and
  ``eval/loss``. Each point's wall time is the run's simulated time, so TensorBoard's *relative*
  x axis reads in simulated seconds.

Both need an optional package (``pip install pyarrow``, ``pip install tensorboard``, or the extras
``aiotsim[parquet]`` and ``aiotsim[tensorboard]``); without it they raise
:class:`~aiotsim.errors.ConfigError` (exit 2) naming the command that installs it.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from aiotsim.errors import ConfigError, ResultsError
from aiotsim.results.plot_inputs import CODEC_KEY, SEED_KEY, Run, collect
from aiotsim.results.store import Warn, make_dir

FORMATS = ("parquet", "tensorboard")
# Per-iteration columns written as TensorBoard scalars (metrics.csv column -> tag)
TB_METRICS = {
    "loss": "train/loss",
    "sim_time_s": "train/sim_time_s",
    "wire_bytes_up": "train/wire_bytes_up",
    "wire_bytes_down": "train/wire_bytes_down",
}
TB_EVALS = {"accuracy": "eval/accuracy", "loss": "eval/loss"}


def need(module: str, package: str, extra: str) -> None:
    """Raise :class:`ConfigError` with the install command when ``module`` cannot be imported."""
    if importlib.util.find_spec(module) is None:
        raise ConfigError(
            f"exporting {extra} needs the {package} package, which is not installed: "
            f"pip install {package}  (or pip install 'aiotsim[{extra}]')"
        )


def run_id(run: Run, root: Path) -> str:
    """The run's directory relative to ``root`` (``2bit/seed3-80492...``), else its own name."""
    try:
        rel = os.path.relpath(run.dir.resolve(), root.resolve())
    except ValueError:  # another drive (Windows)
        rel = ".."
    return run.dir.name if rel.startswith("..") or rel == "." else Path(rel).as_posix()


def runs_of(path: str | Path, warn: Warn | None = None) -> list[tuple[Run, dict[str, Any]]]:
    """Every complete run a run, comparison or sweep directory (or any directory above runs) holds,
    with its swept values (empty outside a sweep), in the order ``aiotsim plot`` reads them.

    Raises
    ------
    ResultsError
        When ``path`` holds no complete run.
    """
    runs, sweeps = collect([path], warn)
    out: list[tuple[Run, dict[str, Any]]] = [(r, {}) for r in runs]
    for sw in sweeps:
        out += [(r, {k: v for k, v in values.items() if k not in (CODEC_KEY, SEED_KEY)}) for values, r in sw.points]
    return out


def _labels(run: Run, root: Path, swept: dict[str, Any]) -> dict[str, Any]:
    """The columns that name a run on each of its rows."""
    s = run.summary
    return {
        "run_id": run_id(run, root),
        "codec": str(s.get("compressor")),
        "seed": s.get("seed"),
        "scenario": s.get("scenario"),
        "mode": s.get("mode"),
        **swept,
    }


def export_parquet(path: str | Path, out: str | Path, warn: Warn | None = None) -> list[Path]:
    """Write ``metrics.parquet``, ``evals.parquet`` and ``runs.parquet`` of every run under ``path``
    into directory ``out`` (see the module docstring); returns the files written.

    Raises
    ------
    ConfigError
        When pyarrow is not installed (the message gives the pip command).
    ResultsError
        When ``path`` holds no complete run, or ``out`` cannot be written.
    """
    need("pyarrow", "pyarrow", "parquet")
    import pandas as pd

    root = Path(path)
    found = runs_of(root, warn)
    metrics, evals, summaries = [], [], []
    for run, swept in found:
        labels = _labels(run, root, swept)
        metrics += [{**labels, **row} for row in run.metrics]
        evals += [{**labels, **row} for row in run.evals]
        scalars = {k: v for k, v in run.summary.items() if isinstance(v, (int, float, str, bool)) or v is None}
        summaries.append({**labels, **{k: v for k, v in scalars.items() if k not in labels}})
    d = make_dir(out)
    written = []
    for name, rows in (("metrics", metrics), ("evals", evals), ("runs", summaries)):
        target = d / f"{name}.parquet"
        try:
            pd.DataFrame(rows).to_parquet(target, index=False)
        except OSError as exc:
            raise ResultsError(f"cannot write to {target}: {exc.strerror or exc}") from None
        written.append(target)
    return written


def export_tensorboard(run_dirs: Sequence[str | Path], log_dir: str | Path, warn: Warn | None = None) -> list[Path]:
    """Write each run's scalars (see the module docstring) as TensorBoard event files under
    ``log_dir/<run_id>``, ``run_id`` being the run directory relative to its input (a run,
    comparison or sweep directory each); returns the log directories written. Event files an
    earlier export left in a run's log directory are replaced, so that no point shows twice.

    Call it with a run's or a comparison's directory after it ran (what ``run``/``compare``
    ``--tensorboard DIR`` would do), or with any directory of runs.

    Raises
    ------
    ConfigError
        When tensorboard is not installed (the message gives the pip command).
    ResultsError
        When the inputs hold no complete run, or ``log_dir`` cannot be written.
    """
    need("tensorboard", "tensorboard", "tensorboard")
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as exc:  # an old tensorboard, or one torch cannot use
        raise ConfigError(f"torch.utils.tensorboard: {exc}; pip install -U tensorboard") from None

    if not run_dirs:
        raise ResultsError("no run directories to export")
    root = make_dir(log_dir)
    written = []
    for path in run_dirs:
        base = Path(path)
        for run, _ in runs_of(base, warn):
            target = root / run_id(run, base)
            # an earlier export's event files: TensorBoard would show both, each point twice
            for old in target.glob("events.out.tfevents.*"):
                old.unlink()
            try:
                writer = SummaryWriter(log_dir=str(target))
            except OSError as exc:
                raise ResultsError(f"cannot write to {target}: {exc.strerror or exc}") from None
            with writer:
                _write_scalars(writer, run)
            written.append(target)
    return written


def _write_scalars(writer: Any, run: Run) -> None:
    """A run's per-iteration and per-evaluation scalars; the wall time of each is its simulated time."""
    for row in run.metrics:
        for column, tag in TB_METRICS.items():
            if column in row:
                writer.add_scalar(tag, float(row[column]), int(row["iteration"]), walltime=float(row["sim_time_s"]))
    for row in run.evals:
        for column, tag in TB_EVALS.items():
            if column in row:
                writer.add_scalar(tag, float(row[column]), int(row["iteration"]), walltime=float(row["sim_time_s"]))


def export(path: str | Path, fmt: str, out: str | Path, warn: Warn | None = None) -> list[Path]:
    """``aiotsim export``: :func:`export_parquet` or :func:`export_tensorboard` of ``path`` into ``out``.

    Raises
    ------
    ConfigError
        An unknown format, or its package missing.
    """
    if fmt == "parquet":
        return export_parquet(path, out, warn)
    if fmt == "tensorboard":
        return export_tensorboard([path], out, warn)
    raise ConfigError(f"--format {fmt!r}: unknown; valid: {', '.join(FORMATS)}")


__all__ = ["export", "export_parquet", "export_tensorboard", "runs_of", "run_id", "FORMATS"]
