"""Running many scenarios at once: a local process pool, or a Ray cluster, behind one interface.

A :class:`Job` is a resolved scenario (its TOML text) and the run directory it must fill. Jobs are
independent, so a batch (a comparison, a sweep) is a bag of jobs handed to a backend:

- :func:`run_local` runs them in worker processes of this machine (``spawn``ed, one per core by
  default). Each worker limits torch to one thread: with N workers on N cores, torch's own thread
  pool would oversubscribe the cores and make every gradient many times slower.
- :func:`run_ray` runs them as Ray tasks (``pip install aiotsim[ray]``). A task writes its run into
  a scratch directory on whichever machine runs it and returns the files' bytes; the driver writes
  them into the run directory, ``summary.json`` last, so no shared file system is needed and a run
  directory is complete exactly when its summary says so.

Both report :class:`Event` s (a run started, an iteration finished, a run ended) through a callback
on the driver, which is what the progress bars show. A run that fails does not stop the batch: its
:class:`JobResult` carries the error and its run directory keeps a summary marked incomplete.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue as queue_mod
import tempfile
import tomllib
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiotsim.errors import AiotsimError
from aiotsim.results.store import atomic_write

# Files of a run directory, in the order the Ray driver writes them (summary last: it marks completion).
RUN_FILES = ("scenario.toml", "metrics.csv", "evals.csv", "trace.json", "summary.json")


class BatchError(AiotsimError):
    """Some runs of a batch failed (their run directories say why); the others are kept."""

    exit_code = 1


@dataclass(frozen=True)
class Job:
    """One run to do.

    Parameters
    ----------
    label : short name for progress displays (``"2bit seed 2"``).
    scenario_toml : the resolved, validated scenario as TOML text.
    out_dir : run directory to write.
    device : where the real learning runs (``"auto"``, ``"cpu"``, ``"cuda"``).
    """

    label: str
    scenario_toml: str
    out_dir: str
    device: str = "auto"


@dataclass(frozen=True)
class Event:
    """Progress of one job: ``kind`` is ``"start"``, ``"iter"`` or ``"done"``.

    ``index`` is the job's position in the batch; ``iteration`` / ``total`` count iterations done.
    """

    kind: str
    index: int
    iteration: int = 0
    total: int = 0
    sim_time_s: float = 0.0  # simulated seconds so far
    loss: float = float("nan")


@dataclass
class JobResult:
    """What became of a job: its summary when it ran to the end, else the error text."""

    job: Job
    summary: dict[str, Any] | None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


EventSink = Callable[[Event], None]


def default_workers() -> int:
    """One worker per core."""
    return max(os.cpu_count() or 1, 1)


def _run_job(job: Job, index: int, emit: Callable[[Event], None]) -> dict[str, Any]:
    """Run one job in this process, reporting progress through ``emit``. Returns the summary."""
    from aiotsim.config import scenario_from_dict
    from aiotsim.api import Progress, run_scenario

    sc = scenario_from_dict(tomllib.loads(job.scenario_toml), source=f"{job.out_dir}/scenario.toml")
    emit(Event("start", index, 0, sc.scenario.iterations))

    def on_progress(p: Progress) -> None:
        emit(Event("iter", index, p.iteration, p.total, float(p.sim_time_s), float(p.loss)))

    return run_scenario(sc, job.out_dir, device=job.device, on_progress=on_progress)


# ---- local process pool ----------------------------------------------------------------------------
_WORKER_QUEUE: Any = None  # the progress queue of a pool worker process (set by _init_worker)


def _init_worker(q: Any) -> None:
    """Pool worker start-up: one torch thread (the pool already uses every core), keep the queue."""
    global _WORKER_QUEUE
    import torch

    torch.set_num_threads(1)
    _WORKER_QUEUE = q


def _worker_emit(event: Event) -> None:
    _WORKER_QUEUE.put(event)


def _pool_task(job: Job, index: int) -> tuple[dict[str, Any] | None, str | None]:
    """Runs in a worker: the summary, or the error text of a run that failed."""
    try:
        summary = _run_job(job, index, _worker_emit)
    except Exception as exc:  # the run directory keeps a summary marked incomplete
        msg = exc.message if isinstance(exc, AiotsimError) else f"{type(exc).__name__}: {exc}"
        return None, msg
    finally:
        _worker_emit(Event("done", index))
    return summary, None


def run_local(jobs: Sequence[Job], workers: int | None = None, on_event: EventSink | None = None) -> list[JobResult]:
    """Run ``jobs`` on this machine, ``workers`` at a time, and return their results in order.

    With one worker (or one job) the jobs run in this process, one after the other, with torch's
    threads untouched; otherwise in a pool of ``spawn``ed worker processes.

    Parameters
    ----------
    jobs : the runs to do.
    workers : processes at once (default: one per core).
    on_event : called on the driver with every progress :class:`Event`.
    """
    emit = on_event or (lambda e: None)
    n = min(workers or default_workers(), len(jobs))
    results: list[JobResult] = [JobResult(j, None, "not run") for j in jobs]
    if not jobs:
        return results
    if n <= 1:
        for i, job in enumerate(jobs):
            try:
                results[i] = JobResult(job, _run_job(job, i, emit))
            except Exception as exc:
                msg = exc.message if isinstance(exc, AiotsimError) else f"{type(exc).__name__}: {exc}"
                results[i] = JobResult(job, None, msg)
            finally:
                emit(Event("done", i))
        return results

    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    pool = ProcessPoolExecutor(max_workers=n, mp_context=ctx, initializer=_init_worker, initargs=(q,))
    try:
        pending: dict[Future[Any], int] = {pool.submit(_pool_task, job, i): i for i, job in enumerate(jobs)}
        while pending:
            done, _ = wait(pending, timeout=0.1, return_when=FIRST_COMPLETED)
            _drain(q, emit)
            for fut in done:
                i = pending.pop(fut)
                try:
                    summary, error = fut.result()
                except Exception as exc:  # a worker died (killed, out of memory)
                    summary, error = None, f"worker failed: {type(exc).__name__}: {exc}"
                results[i] = JobResult(jobs[i], summary, error)
        _drain(q, emit)
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    return results


def _drain(q: Any, emit: EventSink) -> None:
    while True:
        try:
            emit(q.get_nowait())
        except queue_mod.Empty:
            return


# ---- Ray ---------------------------------------------------------------------------------------------
def ray_available() -> bool:
    """True when the optional ``ray`` package imports."""
    try:
        import ray  # noqa: F401
    except ImportError:
        return False
    return True


def _ray_task(job: Job, index: int, progress: Any) -> tuple[dict[str, Any] | None, str | None, dict[str, bytes]]:
    """Body of a Ray task: run into a scratch directory, return (summary, error, files' bytes)."""
    import torch

    torch.set_num_threads(1)

    def emit(event: Event) -> None:
        if progress is not None:
            progress.put_nowait(event)

    with tempfile.TemporaryDirectory(prefix="aiotsim-ray-") as tmp:
        scratch = Job(job.label, job.scenario_toml, str(Path(tmp) / "run"), job.device)
        try:
            summary, error = _run_job(scratch, index, emit), None
        except Exception as exc:
            summary = None
            error = exc.message if isinstance(exc, AiotsimError) else f"{type(exc).__name__}: {exc}"
        files = {
            name: (Path(scratch.out_dir) / name).read_bytes()
            for name in RUN_FILES
            if (Path(scratch.out_dir) / name).is_file()
        }
    emit(Event("done", index))
    return summary, error, files


def _write_run_files(out_dir: str, files: dict[str, bytes]) -> None:
    """Write a run returned by a Ray task; ``summary.json`` last (atomically), so that a directory
    is a complete run only once every other file is in place."""
    d = Path(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    (d / "summary.json").unlink(missing_ok=True)
    for name in RUN_FILES:
        if name in files:
            atomic_write(d / name, files[name])


def run_ray(jobs: Sequence[Job], address: str | None = None, on_event: EventSink | None = None) -> list[JobResult]:
    """Run ``jobs`` as Ray tasks (one CPU each) and return their results in order.

    Parameters
    ----------
    jobs : the runs to do.
    address : Ray cluster address (``"auto"``, ``"ray://head:10001"``); ``None`` or ``"local"``
        starts a local Ray instance. When Ray is already initialised in this process, that
        instance is used as it is.
    on_event : called on the driver with every progress :class:`Event`.

    Raises
    ------
    AiotsimError
        When ``ray`` is not installed (``pip install aiotsim[ray]``) or the cluster is unreachable.
    """
    try:
        import ray
        from ray.util.queue import Queue as RayQueue
    except ImportError:
        raise AiotsimError("--ray needs the optional Ray extra: pip install 'aiotsim[ray]'") from None
    emit = on_event or (lambda e: None)
    results: list[JobResult] = [JobResult(j, None, "not run") for j in jobs]
    if not jobs:
        return results
    started_here = False
    if not ray.is_initialized():
        try:
            ray.init(address=None if address in (None, "", "local") else address, log_to_driver=False)
        except Exception as exc:  # ConnectionError and Ray's own start-up errors
            raise AiotsimError(f"cannot start or reach Ray at {address or 'a local instance'}: {exc}") from None
        started_here = True
    try:
        progress = RayQueue()
        task = ray.remote(num_cpus=1)(_ray_task)
        pending = {task.remote(job, i, progress): i for i, job in enumerate(jobs)}
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1, timeout=0.1)
            _drain_ray(progress, emit)
            for ref in done:
                i = pending.pop(ref)
                try:
                    summary, error, files = ray.get(ref)
                    _write_run_files(jobs[i].out_dir, files)
                except Exception as exc:  # the task's worker died
                    summary, error = None, f"Ray task failed: {type(exc).__name__}: {exc}"
                results[i] = JobResult(jobs[i], summary, error)
        _drain_ray(progress, emit)
        progress.shutdown()
    finally:
        if started_here:
            ray.shutdown()
    return results


def _drain_ray(progress: Any, emit: EventSink) -> None:
    while not progress.empty():
        try:
            emit(progress.get_nowait())
        except Exception:  # ray.util.queue.Empty: another reader got there first
            return


__all__ = ["Job", "Event", "JobResult", "BatchError", "run_local", "run_ray", "ray_available", "default_workers"]
