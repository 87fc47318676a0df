"""Stopping a sweep: SIGINT, SIGTERM or SIGHUP on the `aiotsim sweep` process ends it within seconds,
with no worker process left running; what finished stays recorded (run directories, sweep.csv), and
the resumed sweep gives byte-identical results to an uninterrupted one. Also: a run's numbers do not
depend on the worker count (every run uses the same torch thread count)."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from aiotsim.results.compare import plan_comparison
from aiotsim.results.fingerprint import fingerprint_run_dir
from aiotsim.results.parallel import RUN_THREADS, Event, run_local
from aiotsim.results.store import is_run_dir
from aiotsim.results.sweep import load_sweep

TESTS = Path(__file__).parent
ROOT = TESTS.parent
CLI = "import sys\nfrom aiotsim.cli import app\nif __name__ == '__main__':\n    sys.exit(app())\n"
SEEDS = 6
EXIT_WITHIN_S = 10.0


@pytest.fixture(scope="module")
def sweep_file(tmp_path_factory) -> Path:
    """Six tiny runs of a few seconds each (long enough to stop a sweep in the middle)."""
    d = tmp_path_factory.mktemp("sig")
    p = d / "sweep.toml"
    p.write_text(f"""
[sweep]
base = "{TESTS / "tiny.toml"}"
name = "sig"
[set]
"scenario.iterations" = 200
"training.eval_every" = 50
[grid]
"scenario.seed" = {list(range(1, SEEDS + 1))}
""")
    return p


@pytest.fixture(scope="module")
def reference(sweep_file, tmp_path_factory) -> dict[str, dict[str, str]]:
    """Fingerprints of every point of the uninterrupted sweep (run in this process, one at a time)."""
    sw = load_sweep(sweep_file, tmp_path_factory.mktemp("ref") / "ref")
    assert all(r.ok for r in run_local(sw.jobs(), workers=1))
    return {pt.key: fingerprint_run_dir(sw.run_dir(pt)) for pt in sw.points}


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}


def _sweep_cmd(sweep_file: Path, out: Path) -> list[str]:
    return [sys.executable, "-c", CLI, "sweep", str(sweep_file), "--out", str(out), "-j", "2", "-q"]


def _stat(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()  # [state, ppid, ...]


def _descendants(pid: int) -> set[int]:
    """Every process below ``pid`` (a /proc scan; psutil is not needed)."""
    parents: dict[int, int] = {}
    for d in os.listdir("/proc"):
        if d.isdigit() and (st := _stat(int(d))) is not None:
            parents[int(d)] = int(st[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {p for p, pp in parents.items() if pp in frontier} - found
        found |= frontier
    return found


def _alive(pids: set[int]) -> set[int]:
    return {p for p in pids if (st := _stat(p)) is not None and st[0] != "Z"}


def _complete_runs(out: Path) -> set[Path]:
    return {s.parent for s in out.glob("runs/*/summary.json") if is_run_dir(s.parent)}


def _stop_after_first_run(cmd: list[str], out: Path, signame: str, linger_s: float) -> None:
    """Start the sweep ``cmd``, send it ``signame`` once its first run is complete in ``out``, and
    check the stop: exit 128 + the signal's number within EXIT_WITHIN_S, no traceback, and every process below it
    (workers, a local Ray instance) gone within ``linger_s`` seconds."""
    proc = subprocess.Popen(cmd, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 300
        while not _complete_runs(out):  # stop it once the first run has finished
            assert proc.poll() is None and time.monotonic() < deadline, "the sweep ended before a run finished"
            time.sleep(0.05)
        workers = _descendants(proc.pid)
        assert workers, "no worker processes found"
        t0 = time.monotonic()
        proc.send_signal(getattr(signal, signame))
        output, _ = proc.communicate(timeout=60)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert took < EXIT_WITHIN_S, f"{signame}: exited after {took:.1f} s"
    assert proc.returncode == 128 + getattr(signal, signame), output.decode()  # as run: SIGINT 130, SIGTERM 143
    assert b"Traceback" not in output
    end = time.monotonic() + linger_s
    while _alive(workers) and time.monotonic() < end:
        time.sleep(0.1)
    assert _alive(workers) == set(), f"{signame}: processes left running"


@pytest.mark.slow
@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM", "SIGHUP"])
def test_stopped_sweep_ends_its_workers_and_resumes_to_identical_results(
    sweep_file, reference, tmp_path, signame
) -> None:
    out = tmp_path / "out"
    _stop_after_first_run(_sweep_cmd(sweep_file, out), out, signame, linger_s=3)

    # What finished is recorded and consistent: the index agrees with the run directories.
    done = _complete_runs(out)
    assert 1 <= len(done) < SEEDS
    with open(out / "sweep.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == SEEDS
    for r in rows:
        d = out / r["run_dir"]
        assert (r["status"] == "complete") == (d in done), r
        assert r["status"] in ("complete", "interrupted", "pending"), r
        if (d / "summary.json").is_file() and d not in done:
            assert json.loads((d / "summary.json").read_text())["status"] == "interrupted"

    # Resumed: only the rest runs, and every point equals the uninterrupted sweep byte for byte.
    # The three signals stop a sweep through one handler (cli_common.SignalInterrupt) and leave
    # the same kind of state (checked above for each): one resume covers them (a minute a resume)
    if signame != "SIGTERM":
        return
    res = subprocess.run(_sweep_cmd(sweep_file, out), env=_env(), capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"{len(done)} already complete, {SEEDS - len(done)} to run" in res.stdout.replace("\n", " ")
    got = {d.name: fingerprint_run_dir(d) for d in _complete_runs(out)}
    assert got == reference


@pytest.mark.slow
def test_results_do_not_depend_on_the_worker_count(tmp_path) -> None:
    """The same runs in this process (whatever torch's thread count here) and in 2 workers."""
    plans = {
        n: plan_comparison(TESTS / "tiny.toml", ["none", "topk"], 1, tmp_path / f"j{n}", ["training.eval_every=1"])
        for n in (1, 2)
    }
    threads_in_runs: set[int] = set()

    def watch(e: Event) -> None:
        if e.kind == "iter":
            threads_in_runs.add(torch.get_num_threads())

    before = torch.get_num_threads()
    torch.set_num_threads(2)  # the main process's own setting must not leak into its runs
    try:
        assert all(r.ok for r in run_local(plans[1], workers=1, on_event=watch))
        assert torch.get_num_threads() == 2  # restored after the runs
    finally:
        torch.set_num_threads(before)
    assert threads_in_runs == {RUN_THREADS}
    assert all(r.ok for r in run_local(plans[2], workers=2))
    for a, b in zip(plans[1], plans[2]):
        assert fingerprint_run_dir(a.out_dir) == fingerprint_run_dir(b.out_dir), a.label


@pytest.mark.slow
def test_stopped_ray_sweep_ends_ray_keeps_a_true_index_and_equals_local_runs(sweep_file, tmp_path) -> None:
    # `--ray` starts a local Ray instance (its own processes below the sweep's): a stop ends them
    # too; sweep.csv lists as complete exactly the runs whose directories are complete (the driver
    # writes a Ray run's files, and rewrites the index only once they are in place); and what Ray
    # ran equals the same points run here in one process, byte for byte (Ray = local)
    pytest.importorskip("ray")
    short = tmp_path / "sweep.toml"  # 12 short runs: the first ends soon after Ray has started
    short.write_text(
        sweep_file.read_text().replace("= 200", "= 4").replace(str(list(range(1, SEEDS + 1))), str(list(range(1, 13))))
    )
    out = tmp_path / "out"
    _stop_after_first_run([*_sweep_cmd(short, out), "--ray"], out, "SIGTERM", linger_s=10)
    done = _complete_runs(out)
    with open(out / "sweep.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 12 and 1 <= len(done) < 12
    assert {out / r["run_dir"] for r in rows if r["status"] == "complete"} == done
    local = load_sweep(short, tmp_path / "local")
    jobs = [j for j in local.jobs() if Path(j.out_dir).name in {d.name for d in done}]
    assert len(jobs) == len(done) and all(r.ok for r in run_local(jobs, workers=1))
    for d in done:
        here = tmp_path / "local" / "runs" / d.name
        assert fingerprint_run_dir(d) == fingerprint_run_dir(here)
        assert (d / "trace.json").read_bytes() == (here / "trace.json").read_bytes()
