"""Stops: a federated run with long local training stops within a step of Ctrl-C, and within seconds
of a real SIGTERM, with its summary written; and compare exits as run does, 128 + the signal's
number (SIGTERM 143), keeping what it wrote."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from aiotsim.api import Progress, as_scenario, run_scenario
from aiotsim.sim import heartbeat

TESTS = Path(__file__).parent
CLI = "import sys\nfrom aiotsim.cli import app\nif __name__ == '__main__':\n    sys.exit(app())\n"
LONG = {"training.mode": "federated", "training.local_epochs": 1000, "nodes.count": 3}  # ~30,000 steps a node
LONG_FEDERATED = [arg for key, value in LONG.items() for arg in ("-s", f"{key}={value}")]
STOP_WITHIN_S = 10.0  # before the fix a node went on for all its local steps: ~25 s each here


def _start(args: list[str]) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(TESTS.parent), "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(
        [sys.executable, "-c", *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def _signal_once_running(proc: subprocess.Popen[str], out: Path, signum: int) -> tuple[str, float]:
    """Send ``signum`` half a second after the run under ``out`` has opened its metrics.csv (its
    simulation is under way); the output and the seconds from the signal to the exit."""
    deadline = time.monotonic() + 120
    while not list(out.glob("**/metrics.csv")):
        assert proc.poll() is None, proc.communicate()[0]
        assert time.monotonic() < deadline, "the run never started"
        time.sleep(0.05)
    time.sleep(0.5)
    t0 = time.monotonic()
    proc.send_signal(signum)
    try:
        output, _ = proc.communicate(timeout=STOP_WITHIN_S + 30)
    finally:
        if proc.poll() is None:
            proc.kill()
    return output, time.monotonic() - t0


def _summary(out: Path) -> dict:
    (path,) = out.glob("**/summary.json")
    return json.loads(path.read_text())


def test_a_stop_in_one_nodes_local_training_ends_the_others_at_their_next_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Ctrl-C (a KeyboardInterrupt) lands in node 0's local training, at its second gradient. SimPy
    # holds it as that process's failure until it reaches the event; before, nodes 1 and 2 ran all
    # their ~30,000 local steps meanwhile (minutes); now each stops after the step it is in, before
    # reporting it: no gradient is reported after the stop, and the summary says interrupted
    monkeypatch.setattr(heartbeat, "HEARTBEAT_S", 0.0)  # report every gradient
    reports: list[int] = []

    def on_progress(p: Progress) -> None:
        if p.gradients:
            reports.append(p.gradients)
            if len(reports) == 1:
                raise KeyboardInterrupt

    sc = as_scenario(TESTS / "tiny.toml", LONG)
    with pytest.raises(KeyboardInterrupt):
        run_scenario(sc, tmp_path / "stopped", device="cpu", on_progress=on_progress)
    assert reports == [2]
    summary = json.loads((tmp_path / "stopped" / "summary.json").read_text())
    assert (summary["status"], summary["complete"]) == ("interrupted", False)
    # the stop is over with that run: the next ones in this process run to the end
    for mode in ("sync", "federated"):
        short = as_scenario(TESTS / "tiny.toml", {"training.mode": mode})
        assert run_scenario(short, tmp_path / mode, device="cpu")["status"] == "complete"


@pytest.mark.slow
def test_a_federated_run_in_long_local_training_stops_on_sigterm_with_its_summary(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = _start([CLI, "run", str(TESTS / "tiny.toml"), *LONG_FEDERATED, "-o", str(out), "-q", "--device", "cpu"])
    output, took = _signal_once_running(proc, out, signal.SIGTERM)
    assert proc.returncode == 143, output
    assert took < STOP_WITHIN_S, f"stopped after {took:.1f} s"
    assert "stopped by SIGTERM: results written so far are kept" in output and "Traceback" not in output
    assert (_summary(out)["status"], _summary(out)["complete"]) == ("interrupted", False)


@pytest.mark.slow
def test_compare_exits_as_run_does_on_sigterm_and_keeps_its_runs(tmp_path: Path) -> None:
    out = tmp_path / "cmp"
    args = [CLI, "compare", str(TESTS / "tiny.toml"), "-c", "none,topk", "-n", "100000", "-j", "1", "-q", "-o"]
    proc = _start([*args, str(out), "--device", "cpu"])
    output, took = _signal_once_running(proc, out, signal.SIGTERM)
    assert proc.returncode == 143, output  # was 130, as for Ctrl-C
    assert "stopped by SIGTERM: results written so far are kept" in output and "Traceback" not in output
    assert took < STOP_WITHIN_S
    summary = _summary(out)
    assert (summary["compressor"], summary["status"], summary["complete"]) == ("none", "interrupted", False)


STOP_AT = (  # the CLI, with SIGTERM sent to itself from MODULE.FUNCTION, a step outside the runs
    "import os, signal, sys, importlib\nmodule, name = sys.argv.pop(1).rsplit('.', 1)\n"
    "mod = importlib.import_module(module)\nreal = getattr(mod, name)\n"
    "def stop_here(*a, **k):\n    os.kill(os.getpid(), signal.SIGTERM)\n    return real(*a, **k)\n"
    "setattr(mod, name, stop_here)\nfrom aiotsim.cli import app\nsys.exit(app())\n"
)


@pytest.mark.slow
def test_run_compare_and_sweep_stop_on_sigterm_outside_their_runs_too(tmp_path: Path) -> None:
    # SIGTERM while run validates its scenario, compare plans its runs or sweep writes its
    # manifest: exit 143 with the message, as within the runs; the default action had killed them
    # (exit -15, no message)
    sweep = tmp_path / "sweep.toml"
    sweep.write_text(f'[sweep]\nbase = "{TESTS / "tiny.toml"}"\n[grid]\n"scenario.seed" = [1]\n')
    compare = ["compare", str(TESTS / "tiny.toml"), "-q", "-o", str(tmp_path / "c")]
    procs = [
        _start([STOP_AT, "aiotsim.validate.load_validated", "run", str(TESTS / "tiny.toml"), "-o", str(tmp_path)]),
        _start([STOP_AT, "aiotsim.results.compare.parse_compressors", *compare]),
        _start([STOP_AT, "aiotsim.results.sweep.write_manifest", "sweep", str(sweep), "-q", "-o", str(tmp_path / "s")]),
    ]
    for proc in procs:
        output, _ = proc.communicate(timeout=120)
        assert proc.returncode == 143, output
        assert "stopped by SIGTERM: results written so far are kept" in output and "Traceback" not in output


def _caught(signum: int) -> bool:
    """Whether this process catches ``signum`` at the C level (``SigCgt``): Python's
    ``signal.getsignal`` still names its handler after a library reset the disposition."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    raise AssertionError("no SigCgt line")


def test_a_ray_batch_gives_the_stop_handlers_back() -> None:
    # ray.init sets its own SIGTERM handler and ray.shutdown leaves the default action (at the C
    # level, where Python does not see it): the handlers from before the batch are put back
    from aiotsim.results.parallel import _keeping_stop_handlers

    handler = signal.signal(signal.SIGTERM, lambda signum, frame: None)
    try:
        with _keeping_stop_handlers():
            signal.signal(signal.SIGTERM, signal.SIG_DFL)  # what Ray leaves
        assert _caught(signal.SIGTERM)
    finally:
        signal.signal(signal.SIGTERM, handler)
