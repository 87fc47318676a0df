"""Signals at random moments on real ``aiotsim`` processes: run (sync, federated), compare, sweep.

A case starts the command in its own session, sends SIGINT, SIGTERM or SIGHUP a seeded 0-3 s
after its first ``metrics.csv`` appeared (a signal during the interpreter's start-up is not tested:
the process then dies as any would; a Ray sweep, whose tasks write elsewhere until they end, is
stopped 12-25 s after its start), and checks: exit code 128 + the signal (130, 143, 129), no
traceback, no process of the session left, every run directory that has rows has a
``summary.json``; then the same command again (or ``--resume``) completes with exit 0.
"""

from __future__ import annotations

import random
import signal
from pathlib import Path
from typing import Any

from fuzz.execute import Outcome, call_process

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
LONG_ITERATIONS = 4000  # ~40 s of a 2-node mlp run: a signal lands mid-run


def scenario_text(name: str, iterations: int, extra: str = "") -> str:
    """A 2-node digits/mlp scenario (``extra``: TOML lines appended to [training])."""
    return f"""[scenario]
name = "{name}"
seed = 3
iterations = {iterations}
[data]
dataset = "digits"
batch_size = 16
[model]
name = "mlp"
[training]
lr = 0.1
eval_every = 50
{extra}
[compressor]
name = "none"
[nodes]
count = 2
device = "rpi4"
compute_model = "flops"
[network]
uplink_mbps = 1.0
downlink_mbps = 1.0
latency_ms = 10.0
server_mbps = 10.0
"""


def _sweep_text(base: Path, iterations: int) -> str:
    return f"""[sweep]
base = "{base}"
name = "fuzzsweep"
[set]
"scenario.iterations" = {iterations}
[grid]
"compressor.name" = ["none", "2bit"]
"scenario.seed" = [1, 2]
"""


def commands(kind: str, case_dir: Path, iterations: int) -> tuple[list[str], list[str] | None, Path]:
    """``(first command, command that completes it, directory of results)`` of a signal case kind;
    a federated run of 1,000 local epochs a round is not run to its end (None)."""
    base = case_dir / "scenario.toml"
    fed = 'mode = "federated"\nlocal_epochs = 1000' if kind == "federated" else ""
    base.write_text(scenario_text(f"sig{kind.replace('-', '')}", 3 if fed else iterations, fed))
    out = case_dir / "out"
    common = ["-q", "--device", "cpu"]
    if kind == "federated":
        return ["run", str(base), "--out", str(out), "--threads", "1", *common], None, out
    if kind == "run":
        first = ["run", str(base), "--out", str(out), "--threads", "1", "--checkpoint-every", "25", *common]
        return first, ["run", "--resume", str(out), "--threads", "1", "-q", "--device", "cpu"], out
    if kind == "compare":
        first = ["compare", str(base), "-c", "none,2bit", "--jobs", "2", "--out", str(out), *common]
        return first, first, out
    (case_dir / "sweep.toml").write_text(_sweep_text(base, iterations))
    first = ["sweep", str(case_dir / "sweep.toml"), "--out", str(out), "--jobs", "2", *common]
    if kind == "sweep-ray":
        first.insert(2, "--ray")
    return first, first, out


def kept_rows(out: Path) -> list[str]:
    """Problems with what a stopped command left: run directories with rows but no summary."""
    problems = []
    for metrics in sorted(out.rglob("metrics.csv")):
        if not (metrics.parent / "summary.json").is_file():
            problems.append(f"{metrics.parent}: metrics.csv but no summary.json")
    return problems


def signal_case(kind: str, case_dir: Path, rng: random.Random, iterations: int) -> dict[str, Any]:
    """One signal case; returns ``{'ok': bool, 'problems': [...], 'outcomes': [...], 'commands': [...]}``."""
    sig = rng.choice(SIGNALS)
    first, again, out = commands(kind, case_dir, iterations)
    if kind == "sweep-ray":  # Ray tasks write in scratch directories, copied back at their end: no rows to wait for
        delay, started = rng.uniform(12.0, 25.0), None  # s after the start (Ray's own start takes ~5-10 s)
    else:
        delay, started = rng.uniform(0.0, 3.0), out  # s after the first rows appeared: the command is at work
    stopped = call_process(first, timeout_s=90, cwd=case_dir, stop_after_s=delay, sig=sig, started=started)
    problems = _stop_problems(stopped, sig)
    problems += kept_rows(out)
    outcomes = [stopped]
    if again is not None and (not problems or stopped.kind == "exit"):
        done = call_process(again, timeout_s=240, cwd=case_dir)
        outcomes.append(done)
        if done.kind != "exit" or done.code != 0:
            problems.append(f"re-run/resume: {done.kind} {done.code}: {done.tail(3)}")
    return {
        "ok": not problems,
        "signal": signal.Signals(sig).name,
        "delay_s": round(delay, 2),
        "problems": problems,
        "outcomes": outcomes,
        "commands": [first, again],
    }


def _stop_problems(o: Outcome, sig: int) -> list[str]:
    if o.kind == "hang":
        return [f"no exit within 90 s of the start ({signal.Signals(sig).name} sent)"]
    problems = []
    if not o.extra.get("signalled"):
        problems.append("finished before the signal (no stop tested)")
    elif o.code not in (128 + sig, -sig):  # -sig: killed by the signal itself, which a shell also reads as 128 + sig
        problems.append(f"exit {o.code} after {signal.Signals(sig).name}, expected {128 + sig}")
    if o.kind == "traceback":
        problems.append("traceback")
    if o.extra.get("orphans"):
        problems.append(f"processes left running: {o.extra['orphans']}")
    return problems
