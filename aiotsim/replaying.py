"""Timing replay: a recorded run's learning under new network settings, without learning again.

In a synchronous run every node computes the same gradients, sends the same bytes and the server
applies the same update whatever the links do; only the clock changes. Every run writes its
timing record (``timing.npz``, :class:`~aiotsim.sim.tape.Tape`): the learning values the clock
reads, in order. :func:`replay_run` rebuilds the run's world from the new scenario with a
:class:`~aiotsim.sim.replay_learning.ReplayLearning` (no model, no data) and runs the same
strategy and network: the run directory it writes equals a full run of the new scenario
(``metrics.csv``, ``evals.csv``, ``summary.json``; wall-clock fields aside), at the cost of the
simulation alone. The rule for which settings may change is :mod:`aiotsim.sim.replay_rule`; any
other change is refused (:class:`~aiotsim.errors.ConfigError`, naming the key), never approximated.

This is a top layer beside :mod:`aiotsim.api`: it joins the simulation to its storage.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiotsim.api import Result, as_scenario
from aiotsim.config import Scenario, load_scenario
from aiotsim.errors import ConfigError, ResultsError
from aiotsim.records import Progress
from aiotsim.results.custom import RECORD_NAME
from aiotsim.results.store import RunWriter, atomic_write, check_replaceable, holding_run_dir, read_summary
from aiotsim.sim.checkpoint import CHECKPOINT_NAME
from aiotsim.sim.replay_learning import ReplayLearning
from aiotsim.sim.replay_rule import flat_keys, learning_key, replay_problem
from aiotsim.sim.runner import build_strategy, run_cluster
from aiotsim.sim.tape import REPLAY_NAME, TIMING_NAME, Tape
from aiotsim.sim.world import Cluster


def replay(run_dir: str | Path, overrides: dict[str, Any] | None = None, out_dir: str | Path | None = None) -> Result:
    """Replay the run in ``run_dir`` with ``overrides`` (``{"network.uplink_mbps": 2}``) from a
    notebook or a script; returns the new run's :class:`~aiotsim.api.Result`.

    ``out_dir`` ``None``: a new temporary directory (kept; its path is ``Result.run_dir``). Raises
    :class:`~aiotsim.errors.ConfigError` for a setting that changes what is learned (see
    :func:`replay_run`)."""
    scenario = as_scenario(recorded_scenario(run_dir), overrides)
    d = out_dir if out_dir is not None else Path(tempfile.mkdtemp(prefix=f"aiotsim-replay-{scenario.scenario.name}-"))
    replay_run(run_dir, scenario, d)
    return Result.load(d)


def is_replay_source(run_dir: str | Path) -> bool:
    """True when ``run_dir`` holds a complete run with its timing record (a replay can start
    from it). Never raises: a damaged directory is simply not a source."""
    d = Path(run_dir)
    try:
        return (d / TIMING_NAME).is_file() and read_summary(d).get("complete") is True
    except ResultsError:
        return False


def recorded_scenario(run_dir: str | Path) -> Scenario:
    """The scenario a run directory was run with (its ``scenario.toml``).

    Raises
    ------
    ConfigError
        A run made with a model or data set given in Python (its files cannot rebuild them).
    """
    d = Path(run_dir)
    if (d / RECORD_NAME).exists():
        raise ConfigError(
            f"{d}: the run trained a model or data set given in Python ({RECORD_NAME}); replay needs a "
            "run of a scenario file: run the scenario again with the new settings"
        )
    return load_scenario(d / "scenario.toml")


def check_source(run_dir: str | Path) -> tuple[Scenario, Tape]:
    """The recorded scenario and timing record of ``run_dir``, checked to belong together.

    Raises
    ------
    ResultsError
        Not a complete run, no or a damaged timing record, or a record of another run.
    """
    d = Path(run_dir)
    summary = read_summary(d)
    if summary.get("complete") is not True:
        raise ResultsError(
            f"{d}: the run is not complete (status {summary.get('status')!r}); only a complete run can be "
            "replayed: finish it first (aiotsim run --resume) or rerun it"
        )
    recorded = recorded_scenario(d)
    tape = Tape.load(d / TIMING_NAME)
    if tape.meta["learning_key"] != learning_key(recorded):
        raise ResultsError(
            f"{d / TIMING_NAME}: the timing record is not this run's (its learning configuration differs "
            "from scenario.toml's): rerun the run"
        )
    return recorded, tape


@holding_run_dir("out_dir")
def replay_run(
    run_dir: str | Path,
    scenario: Scenario,
    out_dir: str | Path,
    threads: int | str = 1,
    on_progress: Callable[[Progress], None] | None = None,
) -> dict[str, Any]:
    """Replay the complete run in ``run_dir`` as ``scenario`` into the run directory ``out_dir``.

    Parameters
    ----------
    run_dir : str or Path
        A complete run (or replay) with its ``timing.npz``.
    scenario : Scenario
        The recorded scenario with new settings: only keys that change the clock and the energy
        (:mod:`aiotsim.sim.replay_rule`).
    out_dir : str or Path
        The run directory to write (``run_dir`` itself is refused: its record is being read).
    threads : int or "auto"
        Accepted for symmetry with :func:`aiotsim.api.run_scenario`; a replay runs no torch work.
    on_progress : callable, optional
        Called with a :class:`~aiotsim.records.Progress` after every iteration.

    Returns
    -------
    dict
        The summary, as a full run of ``scenario`` would give it (its wall-clock fields are the
        replay's own).

    Raises
    ------
    ConfigError
        A setting that changes what is learned (the message names the key and why), or a replay
        whose streamed aggregation would see uploads in another order.
    ResultsError
        ``run_dir`` is not a complete run with a timing record of its own.
    """
    src, out = Path(run_dir), Path(out_dir)
    if src.resolve() == out.resolve():
        raise ConfigError(f"replay: the output directory is the recorded run {src}; choose another one with -o")
    recorded, tape = check_source(src)
    problem = replay_problem(recorded, scenario)
    if problem:
        raise ConfigError(f"replay: {problem}")
    check_replaceable(out, (CHECKPOINT_NAME, TIMING_NAME, REPLAY_NAME))
    cluster = Cluster(scenario, on_progress=on_progress, replay=(ReplayLearning(scenario, tape.meta), tape))
    strategy = build_strategy(cluster)  # before the run directory is touched
    for name in (TIMING_NAME, REPLAY_NAME, CHECKPOINT_NAME):
        (out / name).unlink(missing_ok=True)
    summary = run_cluster(cluster, RunWriter(out, scenario.to_toml()), strategy)
    if summary.get("complete") is not True:  # stopped early (it ran to the end when recorded)
        return summary
    tape.check_used()
    # the same learning, so the same record: the replay can be replayed in turn
    shutil.copyfile(src / TIMING_NAME, out / TIMING_NAME)
    old, new = flat_keys(recorded.to_dict()), flat_keys(scenario.to_dict())
    changed = {k: new.get(k) for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)}
    source = {"replayed_from": str(src.resolve()), "changed": changed}
    atomic_write(out / REPLAY_NAME, json.dumps(source, indent=2, default=str) + "\n")
    return summary


__all__ = ["replay", "replay_run", "is_replay_source", "recorded_scenario", "check_source", "REPLAY_NAME"]
