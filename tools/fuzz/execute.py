"""Running one CLI case with a timeout: in a forked child (fast) or as a real subprocess.

:func:`call_cli` forks the campaign process, which has imported aiotsim and torch once, and runs
the Typer app in the child through ``CliRunner``: a case costs milliseconds instead of the ~3 s
of a fresh interpreter, and the child is still a separate process, so a hang is killed at its
timeout, a crash (a signal, an allocation over the memory cap) does not take the campaign down,
and nothing a case does leaks into the next. :func:`call_process` runs the real ``aiotsim``
command (signals, ``--jobs``, child processes), in its own session so that a stop can reach and
check every process it started.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TRACEBACK_MARK = "Traceback (most recent call last)"
MEMORY_CAP_BYTES = 6 * 2**30  # address space a case may add to the campaign's (a runaway allocation fails)
MEMORY_BUDGET_GB = "3"  # $AIOTSIM_MAX_MEMORY_GB for every case: validate must refuse what needs more


@dataclass
class Outcome:
    """What one CLI call did.

    ``kind`` is ``exit`` (the command returned ``code``), ``traceback`` (an uncaught exception, its
    text in ``error``), ``hang`` (killed at the timeout), or ``crash`` (killed by signal ``code``).
    """

    kind: str
    code: int
    output: str = ""
    error: str = ""
    seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def tail(self, lines: int = 6) -> str:
        """The last lines of the output and the error, for the report."""
        text = (self.output + "\n" + self.error).strip().splitlines()
        return "\n".join(text[-lines:])


def case_env() -> dict[str, str]:
    """The environment every case runs with: a memory budget, one thread, no colours."""
    return {"AIOTSIM_MAX_MEMORY_GB": MEMORY_BUDGET_GB, "OMP_NUM_THREADS": "1", "NO_COLOR": "1", "COLUMNS": "200"}


def warm_up(scratch: Path) -> None:
    """Import what the commands import lazily and use them once (a validate and a 1-iteration run
    of tests/tiny.toml, ~3 s), before any fork: each case then starts warm (~50 ms, not ~3 s)."""
    os.environ.update(case_env())
    import torch

    torch.set_num_threads(1)
    import importlib

    for name in ("aiotsim.cli", "aiotsim.api", "aiotsim.validate", "aiotsim.results.plots", "typer.testing"):
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - a module that cannot be imported fails its cases, not the campaign
            print(f"warning: cannot import {name}: {type(exc).__name__}: {exc}", file=sys.stderr)
    from typer.testing import CliRunner

    from aiotsim.cli import app

    tiny = str(Path(__file__).resolve().parents[2] / "tests" / "tiny.toml")
    CliRunner().invoke(app, ["validate", tiny])
    CliRunner().invoke(app, ["run", tiny, "-n", "1", "-q", "--out", str(scratch / "warm"), "--device", "cpu"])


def _child(args: list[str], cwd: Path, result_path: Path) -> None:
    """In the forked child: cap memory, run the app, write the outcome as JSON, exit."""
    os.setpgid(0, 0)
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    used = _address_space()
    cap = used + MEMORY_CAP_BYTES
    resource.setrlimit(resource.RLIMIT_AS, (cap if hard == resource.RLIM_INFINITY else min(cap, hard), hard))
    os.chdir(cwd)
    import torch

    # one thread: a parent that used libgomp's pool (pytest's process) would deadlock a child's
    # parallel region, as OpenMP's pool does not survive a fork
    torch.set_num_threads(1)
    from typer.testing import CliRunner

    from aiotsim.cli import app

    res: dict[str, Any] = {"kind": "exit", "code": 0, "output": "", "error": ""}
    try:
        r = CliRunner().invoke(app, args)
        res["code"], res["output"] = r.exit_code, r.output
        if r.exception is not None and not isinstance(r.exception, SystemExit):
            res["kind"] = "traceback"
            res["error"] = "".join(traceback.format_exception(r.exception))[-4000:]
    except BaseException as exc:  # noqa: BLE001 - the child reports everything, then exits
        res.update(kind="traceback", code=1, error="".join(traceback.format_exception(exc))[-4000:])
    result_path.write_text(json.dumps(res))
    os._exit(0)


def _address_space() -> int:
    """Bytes of virtual memory this process maps now (``/proc/self/statm``)."""
    pages = int(Path("/proc/self/statm").read_text().split()[0])
    return pages * os.sysconf("SC_PAGE_SIZE")


def call_cli(args: list[str], timeout_s: float, cwd: Path, scratch: Path) -> Outcome:
    """``aiotsim ARGS`` in a forked child, in directory ``cwd``; killed after ``timeout_s``."""
    result_path = scratch / f"result-{os.getpid()}-{time.monotonic_ns()}.json"
    start = time.monotonic()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        try:
            _child(args, cwd, result_path)
        finally:
            os._exit(70)
    status = _wait(pid, timeout_s)
    seconds = time.monotonic() - start
    if status is None:
        return Outcome("hang", -1, error=f"killed after {timeout_s:g} s", seconds=seconds)
    if os.WIFSIGNALED(status):
        return Outcome("crash", os.WTERMSIG(status), error=f"killed by signal {os.WTERMSIG(status)}", seconds=seconds)
    try:
        res = json.loads(result_path.read_text())
        result_path.unlink()
    except (OSError, ValueError):
        return Outcome("crash", os.WEXITSTATUS(status), error="the child wrote no result", seconds=seconds)
    return Outcome(res["kind"], res["code"], res["output"], res["error"], seconds)


def _wait(pid: int, timeout_s: float) -> int | None:
    """Wait status of child ``pid``, or None after killing its process group at the timeout."""
    deadline = time.monotonic() + timeout_s
    delay = 0.002
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            _kill_group(pid)  # what the case started and left behind
            return status
        if time.monotonic() > deadline:
            _kill_group(pid)
            os.waitpid(pid, 0)
            return None
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def group_members(pgid: int) -> list[int]:
    """Live processes of process group ``pgid`` (zombies excluded), from ``/proc``."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] != "Z" and int(fields[2]) == pgid:
            out.append(int(entry.name))
    return out


def call_process(
    args: list[str],
    timeout_s: float,
    cwd: Path,
    stop_after_s: float | None = None,
    sig: int = signal.SIGTERM,
    started: Path | None = None,
) -> Outcome:
    """The real ``aiotsim ARGS`` in its own session; ``sig`` sent ``stop_after_s`` after the start,
    or, with ``started``, that long after a ``metrics.csv`` appeared under ``started`` (work began).

    ``extra['orphans']`` lists processes of the session still alive 3 s after the command exited.
    """
    env = {**os.environ, **case_env()}
    cmd = [sys.executable, "-c", "from aiotsim.cli import main; main()", *args]
    start = time.monotonic()
    proc = subprocess.Popen(
        cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    signalled = False
    try:
        if stop_after_s is not None:
            if started is not None:
                _wait_for_rows(proc, started, timeout_s)
            try:
                proc.wait(stop_after_s)
            except subprocess.TimeoutExpired:
                proc.send_signal(sig)
                signalled = True
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill_group(proc.pid)
        out, err = proc.communicate()
        return Outcome("hang", -1, out, err, time.monotonic() - start, {"signalled": signalled})
    seconds = time.monotonic() - start
    orphans = _orphans(proc.pid)
    kind = "traceback" if TRACEBACK_MARK in err else "exit"
    if proc.returncode < 0 and not (signalled and proc.returncode == -sig):  # killed by what we sent: an exit
        kind = "crash"
    return Outcome(kind, proc.returncode, out, err, seconds, {"signalled": signalled, "orphans": orphans})


def _wait_for_rows(proc: subprocess.Popen, where: Path, timeout_s: float) -> None:
    """Until a ``metrics.csv`` exists under ``where`` (or the process ended, or ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    while proc.poll() is None and time.monotonic() < deadline:
        if where.exists() and next(where.rglob("metrics.csv"), None) is not None:
            return
        time.sleep(0.05)


def _orphans(pgid: int) -> list[int]:
    """Processes of the session still alive after a grace period (then killed)."""
    deadline = time.monotonic() + 3.0
    alive = group_members(pgid)
    while alive and time.monotonic() < deadline:
        time.sleep(0.2)
        alive = group_members(pgid)
    if alive:
        _kill_group(pgid)
    return alive
