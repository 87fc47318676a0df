"""Which runs of a batch train in full and which are replayed from another run's timing (issue 40).

A sweep or a comparison over network keys asks the same learning question many times: in a
scenario whose learning does not depend on the network (:func:`aiotsim.sim.replay_rule.learning_key`
is not None), every run with the same learning key learns exactly the same thing and differs only
in its clock. So a batch groups its pending runs by learning key and, per group:

* when a complete replay source of that key already exists (a run directory of the batch, or any
  other complete run with a timing record the caller found, e.g. from an earlier sweep with other
  network values into the same directory), every pending run of the group is replayed from it;
* otherwise the first pending run of the group trains in full (through the batch's job backend:
  local workers or Ray), and the others are replayed from it once it is complete.

Runs whose key is None (async or partial modes, federated rounds with a deadline, overcommit or
an availability trace) always run in full. Replays are cheap (iot10, 200 iterations, topk: 0.21 s
against 25 s for the full run, measured on this project's 2-core machine), so :func:`run_replays`
does them in this process, one after the other, in plan order, unless there are
:data:`POOL_REPLAYS` or more (:func:`replay_workers`): then in local worker processes, whose start
(importing torch, a few seconds) is worth it only for many. Never on Ray: its machines do not see
the sources. A replay that is refused (:class:`~aiotsim.errors.ConfigError`) or cannot read its
source (:class:`~aiotsim.errors.ResultsError`) becomes a full run, with a one-line note.

A replayed run directory holds ``replay.json`` naming its source (:func:`replayed_from`).
"""

from __future__ import annotations

import contextlib
import json
import tomllib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from aiotsim.results.parallel import EventSink, Job, JobResult, job_scenario, run_local
from aiotsim.sim.tape import REPLAY_NAME, TIMING_NAME


@dataclass(frozen=True)
class Replay:
    """A pending run to replay: its job and the run directory it is replayed from."""

    job: Job
    source: str  # a complete replay source, or the out_dir of a job the same batch trains first


@dataclass(frozen=True)
class ReplayPlan:
    """A batch's pending runs split into full runs (``train``, in their original order) and
    ``replays`` (in their original order), each replay's source trained or found beforehand."""

    train: list[Job]
    replays: list[Replay]


def run_dirs_under(root: str | Path, depth: int = 3) -> list[Path]:
    """The directories at most ``depth`` levels below ``root`` that hold a timing record (candidate
    replay sources: a comparison's ``CODEC/seedK-HASH`` and ``MODE/CODEC/seedK-HASH``), sorted."""
    base = Path(root)
    patterns = ["/".join(["*"] * level + [TIMING_NAME]) for level in range(1, depth + 1)]
    return sorted({p.parent for pattern in patterns for p in base.glob(pattern)})


def job_learning_key(job: Job) -> str | None:
    """The learning key of ``job``'s scenario (None: its learning depends on the network)."""
    from aiotsim.sim.replay_rule import learning_key

    return learning_key(job_scenario(job))


def dir_learning_key(run_dir: str | Path) -> str | None:
    """The learning key of the scenario recorded in ``run_dir/scenario.toml``; None when that file is
    missing or unreadable, or the scenario's learning depends on the network."""
    from aiotsim.config import scenario_from_dict
    from aiotsim.sim.replay_rule import learning_key

    path = Path(run_dir) / "scenario.toml"
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        return learning_key(scenario_from_dict(data, source=str(path)))
    except Exception:  # a damaged or foreign directory is simply not a source (as is_replay_source says)
        return None


def is_source(run_dir: str | Path) -> bool:
    """True when ``run_dir`` holds a complete run with a timing record (it can be replayed)."""
    from aiotsim.replaying import is_replay_source

    return Path(run_dir).is_dir() and is_replay_source(run_dir)


def replayed_from(run_dir: str | Path) -> str | None:
    """The source run directory named by ``run_dir/replay.json`` (its ``replayed_from``: an absolute
    path), or None when ``run_dir`` was not replayed (no such file, or one that names no source)."""
    path = Path(run_dir) / REPLAY_NAME
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    source = data.get("replayed_from") if isinstance(data, dict) else None
    return source if isinstance(source, str) and source else None


def find_sources(dirs: Iterable[str | Path], known: Mapping[str, str | None] | None = None) -> dict[str, Path]:
    """The replay sources among ``dirs``, one per learning key: ``{key: run_dir}``.

    ``known`` maps a run directory (as ``str(path)``) to its learning key where the caller has it
    already (a sweep's points), so that only other directories are read. A full run is preferred
    to a replay as a key's source (the shortest chain to what was learned); otherwise the first
    in ``dirs`` order wins.
    """
    known = known or {}
    found: dict[str, Path] = {}
    for d in dirs:
        p = Path(d)
        if not is_source(p):
            continue
        key = known[str(p)] if str(p) in known else dir_learning_key(p)
        if key is None:
            continue
        if key not in found or (replayed_from(found[key]) is not None and replayed_from(p) is None):
            found[key] = p
    return found


def plan_replays(pending: Sequence[Job], keys: Sequence[str | None], sources: Mapping[str, str | Path]) -> ReplayPlan:
    """Split the ``pending`` jobs (with their learning ``keys``, in the same order) into full runs and
    replays, given the replay ``sources`` that already exist (``{key: run_dir}``, :func:`find_sources`)."""
    if len(keys) != len(pending):
        raise ValueError(f"{len(pending)} jobs but {len(keys)} learning keys")
    leaders: dict[str, str] = {k: str(d) for k, d in sources.items()}
    train: list[Job] = []
    replays: list[Replay] = []
    for job, key in zip(pending, keys, strict=True):
        if key is None:
            train.append(job)
        elif key in leaders:
            replays.append(Replay(job, leaders[key]))
        else:  # the first of its group: trains, and the rest of the group replays from it
            leaders[key] = job.out_dir
            train.append(job)
    return ReplayPlan(train, replays)


def plan_under(root: str | Path, jobs: Sequence[Job], pending: Sequence[Job], replay: bool = True) -> ReplayPlan:
    """:func:`plan_replays` for the ``pending`` jobs of a batch whose run directories all lie under
    ``root`` (a comparison's ``-o``): the replay sources are the complete runs with a timing record
    at most three levels below it (:func:`run_dirs_under`), of this batch (``jobs``) or an earlier
    one. With ``replay=False``, or where this installation cannot replay, every pending job trains."""
    if not replay or not pending:
        return ReplayPlan(list(pending), [])
    keys = {j.out_dir: job_learning_key(j) for j in jobs}
    keys |= {j.out_dir: job_learning_key(j) for j in pending if j.out_dir not in keys}
    sources = find_sources(run_dirs_under(root), known=keys)
    return plan_replays(pending, [keys[j.out_dir] for j in pending], sources)


Note = Callable[[str], None]


# fewer replays than this run in the batch's own process: a worker's start (a few seconds to import
# torch) costs more than a few dozen replays of 0.2 s
POOL_REPLAYS = 32


def replay_workers(ready: Sequence[Job], requested: int | None, cores: int) -> int:
    """How many processes replay the jobs ``ready``: 1 (this process) for fewer than
    :data:`POOL_REPLAYS` of them or ``--jobs 1``; else ``requested`` (``--jobs``) or one per core,
    no more than fit in memory by the full-run estimate of one scenario per source (a replay holds
    no model, so this over-estimates: :func:`aiotsim.validate.batch_workers`)."""
    from aiotsim.validate import batch_workers

    if len(ready) < POOL_REPLAYS or requested == 1:
        return 1
    per_source = {j.replay_from: job_scenario(j) for j in ready}  # parsed once per source, not per replay
    workers, _ = batch_workers([per_source[j.replay_from] for j in ready], requested, cores)
    return workers


def run_replays(
    replays: Sequence[Replay], workers: int = 1, on_event: EventSink | None = None, note: Note | None = None
) -> tuple[list[JobResult], list[Job]]:
    """Replay each of ``replays``: in this process, in order, with ``workers`` = 1 (else in that many
    local worker processes, :func:`~aiotsim.results.parallel.run_local`: never on Ray, whose
    machines do not see the sources).

    Returns the replays' results (failures other than a refusal included, for the caller to report)
    and the jobs that must run in full instead: those whose source is not a complete replay source
    (its full run failed or was stopped) and those whose replay raised :class:`ConfigError` or
    :class:`ResultsError` (e.g. a streamed aggregation whose uploads arrive in another order under
    the new network); ``note`` gets one line per such job. ``on_event`` gets the progress
    :class:`~aiotsim.results.parallel.Event` s (``index``: the position among the replays whose
    source is complete, :func:`ready_replays`). A stop signal (``KeyboardInterrupt``) propagates:
    the replays already written stay complete.
    """
    say = note or (lambda line: None)
    ready, fallback = ready_replays(replays, say)
    results = run_local(ready, workers=workers, on_event=on_event)
    done, refused = split_refused(results, say)
    return done, [*fallback, *refused]


def ready_replays(replays: Sequence[Replay], note: Note) -> tuple[list[Job], list[Job]]:
    """The jobs of ``replays`` whose source is a complete replay source, as replay jobs
    (``replay_from`` set), and the others as they are (to run in full; ``note`` says why)."""
    ready: list[Job] = []
    fallback: list[Job] = []
    for r in replays:
        if is_source(r.source):
            ready.append(replace(r.job, replay_from=str(r.source)))
        else:
            note(f"{r.job.label}: {r.source} holds no complete run with a timing record; running it in full")
            fallback.append(r.job)
    return ready, fallback


def split_refused(results: Sequence[JobResult], note: Note) -> tuple[list[JobResult], list[Job]]:
    """The results of replay jobs, less the refused replays, and those as jobs to run in full
    (``note`` gets the first line of each refusal)."""
    done: list[JobResult] = []
    refused: list[Job] = []
    for res in results:
        job = replace(res.job, replay_from="")
        if res.refused:
            why = _first_line(res.error or "")
            note(f"{job.label}: not replayed from {res.job.replay_from} ({why}); running it in full")
            refused.append(job)
        else:
            done.append(JobResult(job, res.summary, res.error))
    return done, refused


def forget_replay(run_dir: str | Path) -> None:
    """Remove ``run_dir/replay.json`` before ``run_dir`` is run in full: an earlier replay's record
    (a replay that failed half-way, or a replayed point run again with ``--no-replay``) must not
    mark the full run as replayed. Nothing else of the directory is touched."""
    with contextlib.suppress(FileNotFoundError):
        (Path(run_dir) / REPLAY_NAME).unlink()


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else "no reason given"


__all__ = [
    "REPLAY_NAME",
    "TIMING_NAME",
    "Replay",
    "ReplayPlan",
    "run_dirs_under",
    "job_learning_key",
    "dir_learning_key",
    "is_source",
    "replayed_from",
    "find_sources",
    "plan_replays",
    "plan_under",
    "run_replays",
    "replay_workers",
    "POOL_REPLAYS",
    "ready_replays",
    "split_refused",
    "forget_replay",
]
