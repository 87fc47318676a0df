"""The library entry point: run one scenario into a run directory.

This is the top layer that joins the simulation (:mod:`aiotsim.sim`) to its storage
(:mod:`aiotsim.results.store`): it builds the :class:`~aiotsim.sim.world.Cluster`, wires a
:class:`~aiotsim.results.store.RunWriter` in as its sink and runs it. The CLI, sweeps and the
parallel runner call :func:`run_scenario`; nothing below this layer writes files.
"""

from __future__ import annotations

import csv
import dataclasses
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from torch.utils.data import TensorDataset

from aiotsim.compress.base import Codec
from aiotsim.config import Scenario, apply_overrides, read_toml, scenario_from_dict
from aiotsim.cpus import resolve_threads
from aiotsim.errors import ConfigError, ResultsError
from aiotsim.learn.datasets import Dataset
from aiotsim.records import Progress, RunSummary
from aiotsim.results.custom import custom_run_writer, read_custom_record, recorded_toml, resume_scenario
from aiotsim.results.store import (
    RunWriter,
    _CsvLog,
    atomic_write,
    check_replaceable,
    holding_run_dir,
    read_summary,
)
from aiotsim.sim.checkpoint import CHECKPOINT_NAME, attach, restore
from aiotsim.sim.checkpoint import load as load_checkpoint
from aiotsim.sim.recording import save_timing
from aiotsim.sim.runner import build_strategy, run_cluster
from aiotsim.sim.tape import REPLAY_NAME, TIMING_NAME
from aiotsim.sim.world import Cluster


@holding_run_dir("out_dir")  # one process writes a run directory: a second one is refused (exit 2)
def run_scenario(
    scenario: Scenario,
    out_dir: str | Path,
    device: str = "auto",
    on_progress: Callable[[Progress], None] | None = None,
    threads: int | str = 1,
    *,
    model: torch.nn.Module | None = None,
    data: Dataset | None = None,
    checkpoint_every: int = 0,
) -> dict[str, Any]:
    """Run ``scenario`` and write its run directory; returns the summary.

    Parameters
    ----------
    scenario : Scenario
        The validated scenario.
    out_dir : str or Path
        Run directory to create (its run files are replaced). It is held for the run: while another
        process (or call) holds it, this one raises :class:`~aiotsim.errors.ResultsError` naming it.
    device : str
        ``"auto"``, ``"cpu"`` or ``"cuda"``: where the real learning runs.
    on_progress : callable, optional
        Called with a :class:`~aiotsim.records.Progress` after every iteration, and within a long
        one about once a second with its gradients so far (``gradients`` > 0).
    threads : int or "auto"
        torch intra-op threads for the run (``torch.set_num_threads``), restored afterwards;
        ``"auto"``: the CPUs this process may use (affinity mask capped by the cgroup v2
        ``cpu.max`` quota, see :func:`aiotsim.cpus.auto_threads`).
        Results depend on this count (the reductions of LeNet's convolutions are split
        differently), so a fixed count makes a scenario and seed give the same numbers whether
        run alone, in ``compare`` workers or in a sweep. The default, 1, is the setting the
        fingerprints and every shipped comparison use.
    model : torch.nn.Module, optional
        A ready model instead of ``model.name`` (deep-copied; the summary names its class).
    data : Dataset, optional
        A ready data set instead of ``data.dataset`` (see :func:`as_dataset`).
    checkpoint_every : int
        Write ``checkpoint.pt`` into ``out_dir`` every this many iterations (0: never); see
        :mod:`aiotsim.sim.checkpoint` for the modes that can, and :func:`resume`.

    Returns
    -------
    dict
        The summary. A run that diverged (NaN/inf) or stalled (no node online) returns its
        summary with ``status`` ``"diverged"``/``"stalled"``, ``complete: false`` and a ``reason``;
        an interruption or an error propagates after the summary has been written.
    """
    check_replaceable(out_dir, (CHECKPOINT_NAME, TIMING_NAME))  # files of another kind are not deleted
    with _threads(threads):
        cluster = Cluster(scenario, device=device, on_progress=on_progress, model=model, data=data)
        checkpoint = Path(out_dir) / CHECKPOINT_NAME
        checkpoint.unlink(missing_ok=True)  # an older run's: never resume this run from it
        attach(cluster, checkpoint, checkpoint_every)
        strategy = build_strategy(cluster)  # before the run directory is touched
        for name in (TIMING_NAME, REPLAY_NAME):  # an older run's record, or a replay's source note
            (Path(out_dir) / name).unlink(missing_ok=True)
        summary = run_cluster(cluster, custom_run_writer(out_dir, scenario, model, data), strategy)
        return _timed(cluster, summary, out_dir)


@holding_run_dir("run_dir")
def resume_run(
    run_dir: str | Path,
    device: str = "auto",
    on_progress: Callable[[Progress], None] | None = None,
    threads: int | str = 1,
    *,
    model: torch.nn.Module | None = None,
    data: Dataset | None = None,
    checkpoint_every: int = 0,
) -> dict[str, Any]:
    """Continue an interrupted run from the ``checkpoint.pt`` in its run directory.

    The cluster is rebuilt from the run's ``scenario.toml`` (and ``model``/``data``, which must be
    the ones the run started with: they are not stored), the checkpoint loaded, and the run goes
    on at the checkpoint's simulated time. ``metrics.csv`` and ``evals.csv`` are cut back to the
    rows before the checkpoint's iteration and appended to; ``summary.json`` and ``trace.json``
    are rewritten at the end. In ``flops`` mode the result equals an uninterrupted run's.

    Parameters
    ----------
    run_dir : str or Path
        The run directory (``scenario.toml``, ``checkpoint.pt``, the CSV files).
    device, on_progress, threads, model, data : as in :func:`run_scenario`.
    checkpoint_every : int
        Go on writing checkpoints every this many iterations (0: never).

    Returns
    -------
    dict
        The summary, as :func:`run_scenario` returns it.

    Raises
    ------
    ResultsError
        Before anything in ``run_dir`` changes: a checkpoint that is damaged (its sha256 digest),
        of another format (format 1 held pickled objects and is never loaded), not written by
        aiotsim, or that does not fit the rebuilt cluster (see :mod:`aiotsim.sim.checkpoint_check`);
        a ``metrics.csv``/``evals.csv`` that is not UTF-8 or lacks rows before the checkpoint.
    """
    d = Path(run_dir)
    scenario = resume_scenario(d, model, data)  # refused when the run's own model/data are not given
    state = load_checkpoint(d / CHECKPOINT_NAME)
    with _threads(threads):
        cluster = Cluster(scenario, device=device, on_progress=on_progress, model=model, data=data)
        restore(cluster, state)
        attach(cluster, d / CHECKPOINT_NAME, checkpoint_every)
        strategy = build_strategy(cluster)  # may fail (a trace file gone): before any row is cut
        kept = {name: _kept_rows(d / name, state["iteration"]) for name in ("metrics.csv", "evals.csv")}
        writer = _ResumeWriter(d, recorded_toml(scenario, model, data), kept)
        return _timed(cluster, run_cluster(cluster, writer, strategy), d)


def _timed(cluster: Cluster, summary: dict[str, Any], out_dir: str | Path) -> dict[str, Any]:
    """``summary``, after writing the run's timing record when the run is complete (a replay
    starts only from a complete run, :mod:`aiotsim.replaying`)."""
    if summary.get("complete") is True:
        save_timing(cluster, out_dir)
    return summary


def _rows_before(lines: list[str], iteration: int) -> list[str]:
    """The leading whole CSV rows (ending in a line end) of iterations before ``iteration``; a
    row cut by a crash mid-write, and everything after it, is dropped."""
    kept = []
    for line in lines:
        first = line.split(",", 1)[0]  # isascii: "²".isdigit() is True, int("²") fails
        if not (line.endswith("\n") and first.isascii() and first.isdigit() and int(first) < iteration):
            break
        kept.append(line)
    return kept


def _kept_rows(path: Path, iteration: int) -> list[str]:
    """The rows of ``path`` (``metrics.csv``: one per iteration from 0; ``evals.csv``: rising
    iterations) that a resume from ``iteration``'s checkpoint keeps. A file that is not UTF-8 text,
    or whose rows before ``iteration`` are not all there, is a :class:`ResultsError`: nothing is cut."""
    try:
        # bytes, not text: the rows end in "\r\n" (csv's dialect) and must stay as written
        lines = path.read_bytes().decode().splitlines(keepends=True) if path.is_file() else []
    except (OSError, UnicodeDecodeError) as exc:
        raise ResultsError(f"{path}: cannot be read as UTF-8 text ({exc}); the run directory is damaged") from None
    kept = _rows_before(lines[1:], iteration)
    its = [int(line.split(",", 1)[0]) for line in kept]
    whole = its == list(range(iteration)) if path.name == "metrics.csv" else its == sorted(set(its))
    if not whole:
        raise ResultsError(
            f"{path}: the rows before the checkpoint's iteration {iteration} are damaged or missing "
            f"(iterations {its[:5]}{'...' if len(its) > 5 else ''} read); the run directory is damaged: rerun the run"
        )
    return kept


@contextmanager
def _threads(threads: int | str) -> Iterator[None]:
    """torch intra-op threads set to ``threads`` (a count or ``"auto"``) for the block, restored
    afterwards."""
    count = resolve_threads(threads)
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


class _ResumeWriter(RunWriter):
    """A :class:`RunWriter` that keeps the CSV rows ``kept`` (those of iterations before the
    checkpoint's: rows written after it, before the crash, are cut) and appends to them."""

    def __init__(self, out_dir: Path, scenario_toml: str, kept: dict[str, list[str]]) -> None:
        self.kept = kept  # file name -> its rows to keep (see _kept_rows)
        super().__init__(out_dir, scenario_toml)

    def _open(self, name: str, fields: tuple[str, ...]) -> _CsvLog:
        path = self.dir / name
        header = ",".join(fields) + "\r\n"  # csv.DictWriter's header line
        atomic_write(path, (header + "".join(self.kept[name])).encode())
        handle = open(path, "a", newline="")
        return _CsvLog(handle, csv.DictWriter(handle, fieldnames=list(fields), extrasaction="raise"))


# ---- notebooks and scripts -------------------------------------------------------------------
@dataclass
class Result:
    """A finished (or stopped) run, read back from its run directory.

    Attributes
    ----------
    rows : pandas.DataFrame
        ``metrics.csv``: one row per iteration (columns: :data:`~aiotsim.records.METRIC_FIELDS`).
    evals : pandas.DataFrame
        ``evals.csv``: one row per evaluation (iteration, sim_time_s, accuracy, loss).
    summary : RunSummary
        ``summary.json`` as the typed record.
    run_dir : Path
        The run directory (``scenario.toml``, the CSV files, ``summary.json``, ``trace.json``).
    custom : dict or None
        ``custom.json`` of a run with your model or data (their description, see
        :mod:`aiotsim.results.custom`); None for a run of the scenario's own model and data.
    """

    rows: pd.DataFrame
    evals: pd.DataFrame
    summary: RunSummary
    run_dir: Path
    custom: dict[str, Any] | None = None

    @classmethod
    def load(cls, run_dir: str | Path) -> Result:
        """Read the result of the run in ``run_dir``."""
        d = Path(run_dir)
        return cls(
            rows=pd.read_csv(d / "metrics.csv"),
            evals=pd.read_csv(d / "evals.csv"),
            summary=RunSummary.from_dict(read_summary(d)),
            run_dir=d,
            custom=read_custom_record(d),
        )


ScenarioLike = str | Path | Scenario | dict[str, Any]
Split = tuple[torch.Tensor, torch.Tensor] | TensorDataset


def run(
    scenario_or_path: ScenarioLike,
    model: torch.nn.Module | None = None,
    dataset: tuple[Split, Split] | None = None,
    overrides: dict[str, Any] | None = None,
    out_dir: str | Path | None = None,
    device: str = "auto",
    threads: int | str = 1,
    *,
    num_classes: int | None = None,
    on_progress: Callable[[Progress], None] | None = None,
    checkpoint_every: int = 0,
    codec: type[Codec] | None = None,
) -> Result:
    """Run a scenario from a notebook or a script and return its :class:`Result`.

    Parameters
    ----------
    scenario_or_path : str, Path, Scenario or dict
        A scenario TOML file, a :class:`~aiotsim.config.Scenario`, or a nested dict as TOML reads.
    model : torch.nn.Module, optional
        Your model, used instead of ``model.name``. It is deep-copied (your object is never
        changed) and used with its parameters as they are: seeding its initialization is yours.
        It must map a batch ``[B, *input_shape]`` to logits ``[B, num_classes]``. The run
        directory records it (:mod:`aiotsim.results.custom`): summary and ``custom.json``.
    dataset : (train, test), optional
        Your data instead of ``data.dataset``: each split a ``(x, y)`` pair of tensors or a
        ``TensorDataset`` of them; ``y`` holds int64 class ids. Partitioned across the nodes by
        ``data.partition`` as the built-in sets are. Recorded like ``model`` (name ``"custom"``).
    overrides : dict, optional
        ``{"section.key": value}``, e.g. ``{"network.uplink_mbps": 5}``; validated like the file.
    out_dir : str or Path, optional
        The run directory. ``None``: a new temporary directory (``tempfile.mkdtemp``), which is
        kept after the run (its path is ``Result.run_dir``; delete it when done).
    device : str
        ``"auto"``, ``"cpu"`` or ``"cuda"``.
    threads : int or "auto"
        torch intra-op threads for the run (results depend on it; 1 is the reproducible default;
        ``"auto"``: the process's CPU quota, see :func:`aiotsim.cpus.auto_threads`).
    num_classes : int, optional
        Classes of ``dataset`` (default: the largest label + 1).
    on_progress : callable, optional
        Called with a :class:`~aiotsim.records.Progress` after every iteration, and within a long
        one about once a second with its gradients so far (``gradients`` > 0).
    checkpoint_every : int
        Write ``checkpoint.pt`` every this many iterations (0: never); see :func:`resume`.
    codec : subclass of :class:`~aiotsim.compress.Codec`, optional
        Your codec class instead of ``compressor.name`` (:func:`_with_codec`); params: ``compressor.*`` overrides.

    Raises
    ------
    ConfigError
        An invalid scenario, override, data set, model or codec (every problem listed).
    """
    scenario = as_scenario(scenario_or_path if codec is None else _with_codec(scenario_or_path, codec), overrides)
    data = as_dataset(dataset, num_classes) if dataset is not None else None
    d = out_dir if out_dir is not None else Path(tempfile.mkdtemp(prefix=f"aiotsim-{scenario.scenario.name}-"))
    run_scenario(scenario, d, device, on_progress, threads, model=model, data=data, checkpoint_every=checkpoint_every)
    return Result.load(d)


def resume(
    run_dir: str | Path,
    model: torch.nn.Module | None = None,
    dataset: tuple[Split, Split] | None = None,
    device: str = "auto",
    threads: int | str = 1,
    *,
    num_classes: int | None = None,
    on_progress: Callable[[Progress], None] | None = None,
    checkpoint_every: int = 0,
) -> Result:
    """Continue the run in ``run_dir`` from its checkpoint (see :func:`resume_run`) and return its
    :class:`Result`. A run started with your ``model``/``dataset`` needs them again."""
    data = as_dataset(dataset, num_classes) if dataset is not None else None
    resume_run(run_dir, device, on_progress, threads, model=model, data=data, checkpoint_every=checkpoint_every)
    return Result.load(run_dir)


def _with_codec(scenario_or_path: ScenarioLike, codec: type[Codec]) -> dict[str, Any]:
    """The scenario as a dict whose ``compressor.name`` is ``codec``'s reference ``"module:Class"``
    (so the run directory's scenario names it), without the parameters of its former codec.

    This process uses the class even when its module is a script's ``__main__``; a ``resume``, a
    ``compare`` or a sweep of the run imports it by that name: there its module must be importable
    (on ``PYTHONPATH``). A class that is not a Codec subclass raises :class:`ConfigError`."""
    from aiotsim.compress.registry import use_codec_class
    from aiotsim.config import CompressorSection

    ref = use_codec_class(codec)
    if isinstance(scenario_or_path, Scenario):
        data = scenario_or_path.to_dict()
    elif isinstance(scenario_or_path, dict):
        data = scenario_or_path
    elif isinstance(scenario_or_path, (str, Path)):
        data = read_toml(str(scenario_or_path))
    else:
        raise ConfigError(
            f"a scenario must be a TOML path, a Scenario or a dict, got {type(scenario_or_path).__name__}"
        )
    # the section's own keys stay (downlink ...); the other codec's parameters go
    keys = {f.name for f in dataclasses.fields(CompressorSection)}
    comp = {k: v for k, v in data.get("compressor", {}).items() if k in keys}
    return {**data, "compressor": {**comp, "name": ref}}


def as_scenario(scenario_or_path: ScenarioLike, overrides: dict[str, Any] | None = None) -> Scenario:
    """A validated :class:`Scenario` from a file, a Scenario or a nested dict, with ``overrides``."""
    over = dict(overrides or {})
    if isinstance(scenario_or_path, Scenario):
        return scenario_or_path.replace(**over) if over else scenario_or_path
    if isinstance(scenario_or_path, dict):
        return scenario_from_dict(apply_overrides(scenario_or_path, over), source="<dict>")
    if isinstance(scenario_or_path, (str, Path)):
        path = str(scenario_or_path)
        return scenario_from_dict(apply_overrides(read_toml(path), over), source=path)
    raise ConfigError(f"a scenario must be a TOML path, a Scenario or a dict, got {type(scenario_or_path).__name__}")


def as_dataset(dataset: tuple[Split, Split], num_classes: int | None = None) -> Dataset:
    """A :class:`Dataset` named ``"custom"`` from ``(train, test)`` splits.

    Each split is ``(x, y)`` tensors or a ``TensorDataset`` of them: ``x`` ``[N, *input_shape]``
    (made float32), ``y`` ``[N]`` integer class ids (made int64), on any device (kept on the CPU).
    ``num_classes`` defaults to the largest label + 1. Every problem is reported at once.
    """
    problems: list[str] = []
    if not (isinstance(dataset, (tuple, list)) and len(dataset) == 2):
        raise ConfigError(f"dataset must be a (train, test) pair, got {type(dataset).__name__}")
    (train_x, train_y), (test_x, test_y) = (
        _split(name, part, problems) for name, part in zip(("train", "test"), dataset)
    )
    if problems:
        raise ConfigError(problems)
    labels_max = int(max(train_y.max(), test_y.max())) if len(train_y) and len(test_y) else -1
    k = num_classes if num_classes is not None else labels_max + 1
    if k < 2:
        problems.append(f"dataset: num_classes(={k}) must be >= 2")
    if labels_max >= k or int(min(train_y.min(), test_y.min())) < 0:
        problems.append(
            f"dataset: labels must lie in [0, {k}), got [{int(min(train_y.min(), test_y.min()))}, {labels_max}]"
        )
    if train_x.shape[1:] != test_x.shape[1:]:
        problems.append(
            f"dataset: train and test samples differ in shape: {list(train_x.shape[1:])} vs {list(test_x.shape[1:])}"
        )
    if problems:
        raise ConfigError(problems)
    return Dataset("custom", train_x, train_y, test_x, test_y, tuple(train_x.shape[1:]), k)


def _split(name: str, part: Split, problems: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """``(x float32, y int64)`` of one split on the CPU; problems appended, empty tensors then."""
    tensors = part.tensors if isinstance(part, TensorDataset) else part
    if not (
        isinstance(tensors, (tuple, list)) and len(tensors) == 2 and all(isinstance(t, torch.Tensor) for t in tensors)
    ):
        problems.append(f"dataset: {name} must be an (x, y) pair of tensors or a TensorDataset of them")
        return torch.zeros(0), torch.zeros(0, dtype=torch.int64)
    x, y = tensors
    if y.ndim != 1 or y.is_floating_point() or y.is_complex() or y.dtype == torch.bool:
        problems.append(
            f"dataset: {name} labels must be a 1-D tensor of integer class ids, got {y.dtype} {list(y.shape)}"
        )
    if x.ndim < 2 or x.shape[0] != y.shape[0] or x.shape[0] == 0:
        problems.append(
            f"dataset: {name} x {list(x.shape)} and y {list(y.shape)} must hold the same number (>= 1) of samples"
        )
    if problems:
        return torch.zeros(0), torch.zeros(0, dtype=torch.int64)
    return x.detach().to("cpu", torch.float32).contiguous(), y.detach().to("cpu", torch.int64).contiguous()


__all__ = ["run", "resume", "Result", "run_scenario", "resume_run", "as_scenario", "as_dataset", "Progress"]
