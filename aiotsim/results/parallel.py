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

Every run uses :data:`RUN_THREADS` torch threads wherever it runs (in this process, a pool worker or
a Ray task): results depend on torch's intra-op thread count, so a batch gives the same numbers
whatever its worker count.

Stopping: SIGINT (Ctrl-C), SIGTERM and SIGHUP on the driver stop the batch within seconds. The
driver raises :class:`Stopped` (a ``KeyboardInterrupt``), cancels the runs not started and sends
SIGTERM to the workers, which end their current run as ``interrupted`` (its rows and an incomplete
``summary.json`` stay) and exit; a worker still alive after :data:`STOP_GRACE_S` is killed. Workers
ignore SIGINT (a terminal's Ctrl-C reaches the whole process group; the driver decides) and exit on
their own when the driver dies. Completed runs are untouched, so running the batch again (a resumed
sweep) runs exactly the rest.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import queue as queue_mod
import signal
import tempfile
import threading
import time
import tomllib
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiotsim.errors import AiotsimError, ConfigError, ResultsError
from aiotsim.results.store import atomic_write, locked_run_dir
from aiotsim.sim.stops import clear_stop, request_stop

if TYPE_CHECKING:
    from aiotsim.config import Scenario

# Files of a run directory, in the order the Ray driver writes them (summary last: it marks completion);
# timing.npz is the timing record a sweep replays its other network points from (aiotsim.replaying).
RUN_FILES = ("scenario.toml", "metrics.csv", "evals.csv", "trace.json", "timing.npz", "summary.json")


RUN_THREADS = 1  # torch intra-op threads of every run, wherever it runs
STOP_GRACE_S = 5.0  # seconds a stopped worker has to write its run's summary before it is killed
STOP_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)
)  # signals that stop a batch


class Stopped(KeyboardInterrupt):
    """A batch (or a run) was stopped by signal ``signum``; a ``KeyboardInterrupt``, so that whatever
    handles Ctrl-C handles it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum

    def __str__(self) -> str:
        return f"stopped by {signal.Signals(self.signum).name}"


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
    replay_from : a complete run directory to replay the scenario from instead of training it
        (:func:`aiotsim.replaying.replay_run`; this machine's file system: never sent to Ray).
    """

    label: str
    scenario_toml: str
    out_dir: str
    device: str = "auto"
    threads: int = RUN_THREADS  # torch intra-op threads for the run
    replay_from: str = ""  # "" trains in full


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
    gradients: int = 0  # > 0: within an iteration, its gradients so far (see aiotsim.sim.heartbeat)


@dataclass
class JobResult:
    """What became of a job: its summary when it ran to the end, else the error text; ``refused``:
    a replay that was refused or could not read its source (a ConfigError or ResultsError), which
    the caller may run in full instead."""

    job: Job
    summary: dict[str, Any] | None
    error: str | None = None
    refused: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None


EventSink = Callable[[Event], None]


def default_workers() -> int:
    """One worker per core."""
    return max(os.cpu_count() or 1, 1)


def job_scenario(job: Job) -> Scenario:
    """The job's scenario, from its resolved TOML."""
    from aiotsim.config import scenario_from_dict

    return scenario_from_dict(tomllib.loads(job.scenario_toml), source=f"{job.out_dir}/scenario.toml")


def _run_job(job: Job, index: int, emit: Callable[[Event], None]) -> dict[str, Any]:
    """Run one job in this process, reporting progress through ``emit``. Returns the summary."""
    from aiotsim.api import Progress, run_scenario

    sc = job_scenario(job)
    emit(Event("start", index, 0, sc.scenario.iterations))

    def on_progress(p: Progress) -> None:
        emit(Event("iter", index, p.iteration, p.total, float(p.sim_time_s), float(p.loss), p.gradients))

    if job.replay_from:
        from aiotsim.replaying import replay_run

        return replay_run(job.replay_from, sc, job.out_dir, threads=job.threads, on_progress=on_progress)
    return run_scenario(sc, job.out_dir, device=job.device, on_progress=on_progress, threads=job.threads)


def _failure(job: Job, exc: Exception) -> tuple[str, bool]:
    """The error text of a job that raised ``exc``, and whether it is a refused replay (see
    :attr:`JobResult.refused`)."""
    msg = exc.message if isinstance(exc, AiotsimError) else f"{type(exc).__name__}: {exc}"
    return msg, bool(job.replay_from) and isinstance(exc, ConfigError | ResultsError)


# ---- stopping ------------------------------------------------------------------------------------------
class _StopOnSignal:
    """While active (main thread only), the first of :data:`STOP_SIGNALS` stops the batch: it raises
    :class:`Stopped` at once, or with ``defer`` at the next :meth:`check` (a point where no queue read
    is half done); later signals are only recorded, so that the shutdown is not itself interrupted."""

    def __init__(self, defer: bool = False) -> None:
        self.defer = defer
        self.fired: int | None = None
        self._previous: dict[int, Any] = {}

    def _handle(self, signum: int, frame: Any) -> None:
        if self.fired is None:
            self.fired = signum
            if not self.defer:
                _stop_here(signum)

    def check(self) -> None:
        """Raise :class:`Stopped` when a deferred stop signal has arrived."""
        if self.defer and self.fired is not None and self.fired > 0:
            self.defer = False  # raised once
            raise Stopped(self.fired)

    def __enter__(self) -> _StopOnSignal:
        if threading.current_thread() is threading.main_thread():
            for sig in STOP_SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: Any) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        clear_stop()


def _stop_here(signum: int) -> None:
    """Stop the run in this process: raise :class:`Stopped`, recorded first for the simulation's
    long local work (SimPy defers an exception raised inside one of its processes: see
    :func:`aiotsim.sim.stops.check_stop`)."""
    stop = Stopped(signum)
    request_stop(stop)
    raise stop


def stop_on_signals() -> contextlib.AbstractContextManager[Any]:
    """A context in which SIGINT, SIGTERM and SIGHUP raise :class:`Stopped` (a ``KeyboardInterrupt``)
    in the main thread, e.g. around a single run, so that a run ended by SIGTERM or SIGHUP writes
    its summary as interrupted, as on Ctrl-C. Previous handlers are restored on exit."""
    return _StopOnSignal()


# ---- local process pool ----------------------------------------------------------------------------
_WORKER_QUEUE: Any = None  # the progress queue of a pool worker process (set by _init_worker)
_WORKER_RUNNING = False  # True while a pool worker is inside a run (a SIGTERM then ends the run first)


def _init_worker(q: Any, parent_pid: int, threads: int) -> None:
    """Pool worker start-up: ``threads`` torch threads, keep the queue, and the stop protocol:
    ignore SIGINT (the driver decides), end the current run on SIGTERM, exit when the driver dies."""
    global _WORKER_QUEUE
    import torch

    torch.set_num_threads(threads)
    _WORKER_QUEUE = q
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _worker_sigterm)
    if hasattr(signal, "SIGHUP"):
        signal.signal(signal.SIGHUP, _worker_sigterm)
    threading.Thread(target=_watch_parent, args=(parent_pid,), daemon=True, name="aiotsim-parent-watch").start()


def _worker_sigterm(signum: int, frame: Any) -> None:
    """In a run: raise :class:`Stopped` (the run writes its summary as interrupted, then the worker
    exits in :func:`_pool_task`); between runs: exit at once."""
    if _WORKER_RUNNING:
        _stop_here(signum)
    os._exit(128 + signum)


def _watch_parent(parent_pid: int) -> None:
    """Stop this worker (as a SIGTERM would) once the driver is gone: no orphan goes on running."""
    while os.getppid() == parent_pid:
        time.sleep(0.5)
    os.kill(os.getpid(), signal.SIGTERM)


def _worker_emit(event: Event) -> None:
    _WORKER_QUEUE.put(event)


def _pool_task(job: Job, index: int) -> tuple[dict[str, Any] | None, str | None, bool]:
    """Runs in a worker: the summary, or the error text of a run that failed (and whether it is a
    refused replay)."""
    global _WORKER_RUNNING
    _WORKER_RUNNING = True
    try:
        summary = _run_job(job, index, _worker_emit)
    except Stopped as exc:  # the run's summary says interrupted; this worker's batch is over
        _WORKER_QUEUE.close()
        os._exit(128 + exc.signum)
    except Exception as exc:  # the run directory keeps a summary marked incomplete
        return None, *_failure(job, exc)
    finally:
        _WORKER_RUNNING = False
        _worker_emit(Event("done", index))
    return summary, None, False


def run_local(jobs: Sequence[Job], workers: int | None = None, on_event: EventSink | None = None) -> list[JobResult]:
    """Run ``jobs`` on this machine, ``workers`` at a time, and return their results in order.

    With one worker (or one job) the jobs run in this process, one after the other; otherwise in a
    pool of ``spawn``ed worker processes. Either way each run uses ``job.threads`` torch threads.

    Parameters
    ----------
    jobs : the runs to do.
    workers : processes at once (default: one per core).
    on_event : called on the driver with every progress :class:`Event`.

    Raises
    ------
    Stopped
        On SIGINT, SIGTERM or SIGHUP (when called from the main thread), once every worker has
        ended (see the module docstring); runs already complete are kept.
    """
    emit = on_event or (lambda e: None)
    n = min(workers or default_workers(), len(jobs))
    if not jobs:
        return []
    if n <= 1:
        with _StopOnSignal():  # the run in this process is interrupted where it is
            return _run_serial(jobs, emit)
    with _StopOnSignal(defer=True) as stop:  # the driver stops between two reads of the queue
        return _run_pool(jobs, n, emit, stop)


def _run_serial(jobs: Sequence[Job], emit: EventSink) -> list[JobResult]:
    """The jobs one after the other in this process."""
    results: list[JobResult] = [JobResult(j, None, "not run") for j in jobs]
    for i, job in enumerate(jobs):
        try:
            results[i] = JobResult(job, _run_job(job, i, emit))
        except Exception as exc:
            results[i] = JobResult(job, None, *_failure(job, exc))
        finally:
            emit(Event("done", i))
    return results


def _run_pool(jobs: Sequence[Job], n: int, emit: EventSink, stop: _StopOnSignal) -> list[JobResult]:
    """The jobs in ``n`` spawned worker processes; on any exception (a stop signal, a callback
    raising) the workers are stopped before it propagates."""
    results: list[JobResult] = [JobResult(j, None, "not run") for j in jobs]
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    others = {p.pid for p in mp.active_children()}  # children not of this pool (its workers come later)
    pool = ProcessPoolExecutor(
        max_workers=n, mp_context=ctx, initializer=_init_worker, initargs=(q, os.getpid(), RUN_THREADS)
    )
    started: set[int] = set()
    ended: set[int] = set()

    def on_event(e: Event) -> None:
        if e.kind == "start":
            started.add(e.index)
        elif e.kind == "done":
            ended.add(e.index)
        emit(e)

    try:
        pending: dict[Future[Any], int] = {pool.submit(_pool_task, job, i): i for i, job in enumerate(jobs)}
        while pending:
            stop.check()
            done, _ = wait(pending, timeout=0.1, return_when=FIRST_COMPLETED)
            _drain(q, on_event)
            for fut in done:
                i = pending.pop(fut)
                try:
                    summary, error, refused = fut.result()
                except Exception as exc:  # a worker died (killed, out of memory)
                    summary, error, refused = None, f"worker failed: {type(exc).__name__}: {exc}", False
                results[i] = JobResult(jobs[i], summary, error, refused)
        _drain(q, on_event)
        stop.check()
        pool.shutdown(wait=True)
    except BaseException:
        stop.fired = stop.fired or -1  # later signals must not interrupt the shutdown
        workers = [p for p in mp.active_children() if p.pid not in others]
        _stop_pool(pool, workers, q, on_event, started, ended)
        raise
    return results


def _stop_pool(
    pool: ProcessPoolExecutor, procs: list[Any], q: Any, on_event: EventSink, started: set[int], ended: set[int]
) -> None:
    """Cancel what has not started, SIGTERM the pool's worker processes ``procs`` (each ends its
    run as interrupted), kill any left after :data:`STOP_GRACE_S`, then report the runs that ended
    (progress, the sweep's index)."""
    pool.shutdown(wait=False, cancel_futures=True)
    for p in procs:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + STOP_GRACE_S
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join(1.0)
    try:  # the events the workers sent before they ended, and a "done" for each run they could not end
        _drain(q, on_event)
        for i in sorted(started - ended):
            on_event(Event("done", i))
    except BaseException:  # noqa: S110 - the batch is stopping anyway; the original exception propagates
        pass
    q.close()
    q.cancel_join_thread()


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

    def emit(event: Event) -> None:
        if progress is not None:
            progress.put_nowait(event)

    with tempfile.TemporaryDirectory(prefix="aiotsim-ray-") as tmp:
        scratch = Job(job.label, job.scenario_toml, str(Path(tmp) / "run"), job.device, job.threads)
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
    return summary, error, files  # its "done" event comes from the driver, once the files are written


def _write_run_files(out_dir: str, files: dict[str, bytes]) -> None:
    """Write a run returned by a Ray task; ``summary.json`` last (atomically), so that a directory
    is a complete run only once every other file is in place."""
    with locked_run_dir(out_dir) as d:  # as a local run holds it: one writer at a time
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
    ConfigError
        When a job's memory estimate exceeds every Ray node's ``memory`` resource (each task asks
        for its estimate, so Ray runs at once only what fits).
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
    with _keeping_stop_handlers():  # ray.init sets its own SIGTERM handler, ray.shutdown the default one
        started_here = False
        if not ray.is_initialized():
            try:
                ray.init(address=None if address in (None, "", "local") else address, log_to_driver=False)
            except Exception as exc:  # ConnectionError and Ray's own start-up errors
                raise AiotsimError(f"cannot start or reach Ray at {address or 'a local instance'}: {exc}") from None
            started_here = True
        try:
            memory = _ray_memory(ray, jobs)
            with _StopOnSignal(defer=True) as stop:
                _ray_loop(ray, RayQueue(), jobs, memory, results, emit, stop)
        finally:
            if started_here:
                ray.shutdown()
    return results


@contextlib.contextmanager
def _keeping_stop_handlers() -> Iterator[None]:
    """The handlers of :data:`STOP_SIGNALS` as they were before the block, put back after it (in
    the main thread): a SIGTERM after a Ray batch then stops the command as its caller arranged
    (exit 143) instead of killing it (Ray left the default action: exit -15, no message)."""
    main = threading.current_thread() is threading.main_thread()
    before = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS} if main else {}
    try:
        yield
    finally:
        for sig, handler in before.items():
            if handler is not None:  # None: set outside Python, cannot be put back
                signal.signal(sig, handler)


def _ray_loop(
    ray: Any,
    progress: Any,
    jobs: Sequence[Job],
    memory: list[int],
    results: list[JobResult],
    emit: EventSink,
    stop: _StopOnSignal,
) -> None:
    """Submit every job as a task (asking for ``memory`` bytes each) and collect them into
    ``results``; on any exception (a stop signal) the tasks not finished are cancelled (their
    workers killed) before it propagates."""
    task = ray.remote(num_cpus=1)(_ray_task)
    pending = {task.options(memory=memory[i]).remote(job, i, progress): i for i, job in enumerate(jobs)}
    try:
        while pending:
            stop.check()
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
                # after the files: a batch's index written on "done" must find the run complete
                emit(Event("done", i))
        _drain_ray(progress, emit)
    except BaseException:
        stop.fired = stop.fired or -1
        for ref in pending:
            with contextlib.suppress(Exception):
                ray.cancel(ref, force=True)
        raise
    finally:
        progress.shutdown()


def _ray_memory(ray: Any, jobs: Sequence[Job]) -> list[int]:
    """Each job's memory request to Ray's scheduler, bytes: its estimate with its worker process
    (:func:`aiotsim.validate.run_memory_bytes`), so a node runs at once only the jobs whose
    estimates fit in its ``memory`` resource (as the local pool fits its workers in memory).
    Raises :class:`ConfigError` when a job needs more than any node offers: Ray would leave it
    waiting for good."""
    from aiotsim.validate import fmt_bytes, run_memory_bytes

    need = run_memory_bytes(job_scenario(j) for j in jobs)
    offer = max((n["Resources"].get("memory", 0.0) for n in ray.nodes() if n.get("Alive")), default=0.0)
    too_big = [f"{j.label} (~{fmt_bytes(b)})" for j, b in zip(jobs, need, strict=True) if b > offer]
    if too_big:
        raise ConfigError(
            f"{len(too_big)} run(s) need more memory than a Ray node offers ({fmt_bytes(int(offer))} on the "
            f"largest): {', '.join(too_big[:5])}; give the nodes more memory (ray start --memory) or make "
            'the runs smaller (fewer nodes, nodes.state_dtype = "float16", a smaller model)'
        )
    return need


def _drain_ray(progress: Any, emit: EventSink) -> None:
    while not progress.empty():
        try:
            emit(progress.get_nowait())
        except Exception:  # ray.util.queue.Empty: another reader got there first
            return


__all__ = [
    "Job",
    "Event",
    "JobResult",
    "BatchError",
    "Stopped",
    "RUN_THREADS",
    "stop_on_signals",
    "run_local",
    "run_ray",
    "ray_available",
    "default_workers",
    "job_scenario",
]
