"""Benchmark: timing replay (issue 40's cost targets). A full run against its replay under new links.

For each case the full run (:func:`aiotsim.api.run_scenario`, CPU, one torch thread) runs in this
process, timed from the call to its return (the imports are done before; interpreter start-up
aside). Its run directory then holds the timing record (``timing.npz``); the replay
(:func:`aiotsim.replaying.replay_run`, with the case's new network settings) runs in a child
process started after the full run, which imports first and then times the call alone, so that
its peak resident memory is the replay's and not the full run's. The peak is the child's
``VmHWM`` (``/proc/self/status``, read at its end), not ``ru_maxrss``: Linux carries the
parent's high-water mark into a child's ``ru_maxrss`` across fork (or vfork) and exec, so after
a 6.7 GB full run a child's ``ru_maxrss`` (and ``RUSAGE_CHILDREN``) says 6.7 GB whatever the
child used; ``VmHWM`` belongs to the memory map exec made. ``base MB`` is the child's resident
memory after its imports (the interpreter, torch and aiotsim), before the replay started.

Cases (``--case NAME``, repeatable; default all three):

* ``iot10``: ``scenarios/iot10.toml``, LeNet-5, 300 iterations, ``topk``; target replay <= 1/20
  of the full run.
* ``resnet20``: ResNet-20 on synthetic CIFAR-10-shaped data (3x32x32, 10 classes), 8 nodes,
  50 iterations, ``topk``; target replay <= 1/500.
* ``iot10k``: ``scenarios/iot10k.toml`` (10,000 nodes, LeNet-5, ``none``), 20 iterations; target
  replay under 60 s and under 2 GB of peak resident memory (the whole child process). Its full
  run takes 10-90 minutes on a 2-core machine.
* ``iot10-quick`` (``--quick``, the smoke test's): iot10 with 20 iterations; iot10's target.

Each replay changes ``network.uplink_mbps`` (10 -> 2 Mbit/s) and ``network.latency_ms`` (5 -> 50
ms). Columns: ``full s`` and ``replay s`` wall seconds; ``ratio`` replay / full as ``1/N``;
``peak MB`` / ``base MB`` the replay child's peak and after-import resident memory;
``npz B`` the size of ``timing.npz``; ``B/node-it`` that over nodes x iterations.

The machine is shared: wall times move by up to 1.6x from run to run; the load average is printed
before and after. ``--workdir DIR`` keeps the run directories (``DIR/<case>/full`` and
``/replay``); with ``--reuse`` a complete full run already there of the same scenario is not run
again (its ``full s`` is its ``summary.json`` wall time, marked ``*``). ``--profile N`` replays
once more under cProfile and prints the N functions with the most own time.

Run: ``python benchmarks/replay.py [--quick] [--case iot10 --case resnet20 --case iot10k]
[--workdir DIR [--reuse]] [--profile 15]``
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import io
import json
import os
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's aiotsim, installed or not (the child runs this file too)
CHANGES = {"network.uplink_mbps": 2.0, "network.latency_ms": 50.0}  # the replay's new links


@dataclasses.dataclass(frozen=True)
class Case:
    """A benchmark case: the scenario file, its overrides, and the target the replay must meet."""

    name: str
    scenario: str  # path relative to the repository root
    overrides: dict[str, Any]
    max_ratio: float | None = None  # replay wall / full wall at most
    max_replay_s: float | None = None  # replay wall seconds at most
    max_peak_mb: float | None = None  # the replay child's peak resident memory, MB (2**20 B)

    def target(self) -> str:
        """The target as the table prints it."""
        parts = [f"1/{1 / self.max_ratio:.0f}"] if self.max_ratio else []
        parts += [f"<={self.max_replay_s:.0f}s"] if self.max_replay_s else []
        parts += [f"<={self.max_peak_mb / 1024:.0f}GB"] if self.max_peak_mb else []
        return " ".join(parts)

    def meets(self, ratio: float, replay_s: float, peak_mb: float) -> bool:
        """Whether a replay of ``ratio`` (replay / full wall), ``replay_s`` seconds and ``peak_mb``
        MB of peak resident memory meets every target the case sets."""
        return (
            (self.max_ratio is None or ratio <= self.max_ratio)
            and (self.max_replay_s is None or replay_s <= self.max_replay_s)
            and (self.max_peak_mb is None or peak_mb <= self.max_peak_mb)
        )


RESNET = {
    "model.name": "resnet20",
    "data.dataset": "synthetic",
    "data.synthetic_shape": [3, 32, 32],
    "data.synthetic_classes": 10,
    "nodes.count": 8,
    "scenario.iterations": 50,
    "compressor.name": "topk",
}
CASES = {
    c.name: c
    for c in (
        Case("iot10", "scenarios/iot10.toml", {"scenario.iterations": 300, "compressor.name": "topk"}, 1 / 20),
        Case("iot10-quick", "scenarios/iot10.toml", {"scenario.iterations": 20, "compressor.name": "topk"}, 1 / 20),
        Case("resnet20", "scenarios/iot10.toml", RESNET, 1 / 500),
        Case("iot10k", "scenarios/iot10k.toml", {"scenario.iterations": 20}, None, 60.0, 2048.0),
    )
}
DEFAULT_CASES = ("iot10", "resnet20", "iot10k")


def scenario_of(case: Case):  # type: ignore[no-untyped-def]
    """The case's full-run scenario (validated)."""
    from aiotsim.config import load_scenario

    return load_scenario(ROOT / case.scenario).replace(**case.overrides)


def full_run(case: Case, out: Path, reuse: bool = False) -> tuple[float, bool]:
    """Run the case in full into ``out``; returns (wall seconds, whether an earlier run was reused).

    ``reuse``: a complete run of the same scenario already in ``out`` (with its timing record) is
    kept, and its own ``summary.json`` wall time is returned."""
    from aiotsim.api import run_scenario
    from aiotsim.config import load_scenario
    from aiotsim.replaying import is_replay_source

    scenario = scenario_of(case)
    if reuse and is_replay_source(out) and load_scenario(out / "scenario.toml").to_dict() == scenario.to_dict():
        return float(json.loads((out / "summary.json").read_text())["wall_time_s"]), True
    t0 = time.perf_counter()
    run_scenario(scenario, out, device="cpu", threads=1)
    return time.perf_counter() - t0, False


def timed_replay(source: Path, out: Path, changes: dict[str, Any], profile_top: int = 0) -> dict[str, Any]:
    """Replay ``source`` with ``changes`` into ``out`` in a fresh child process.

    Returns the child's wall seconds of the :func:`replay_run` call alone (``replay_s``), its peak
    resident memory (``peak_mb``) and its resident memory after the imports (``base_mb``); with
    ``profile_top``, also ``profile``: cProfile's ``profile_top`` functions with the most own time."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(source), str(out), json.dumps(changes)]
    done = subprocess.run([*cmd, str(profile_top)], cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the replay of {source} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return {**json.loads(done.stdout.strip().splitlines()[-1]), **({"profile": done.stderr} if profile_top else {})}


def _status_mb(field: str) -> float:
    """A memory field of this process's ``/proc/self/status`` (``VmRSS``, ``VmHWM``: kB), in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"/proc/self/status has no {field} (this benchmark needs Linux)")


def child(source: str, out: str, changes_json: str, profile_top: int = 0) -> None:
    """The replay child: import, then time :func:`replay_run` alone; print one JSON line.

    The peak is ``VmHWM`` (the module's docstring says why not ``ru_maxrss``). With
    ``profile_top`` the replay runs under cProfile and the functions with the most own time go to
    stderr."""
    from aiotsim.replaying import recorded_scenario, replay_run

    scenario = recorded_scenario(source).replace(**json.loads(changes_json))
    base_mb = _status_mb("VmRSS")
    profiler = cProfile.Profile() if profile_top else None
    t0 = time.perf_counter()
    if profiler:
        profiler.enable()
    summary = replay_run(source, scenario, out)
    if profiler:
        profiler.disable()
    replay_s = time.perf_counter() - t0
    if summary.get("complete") is not True:
        raise SystemExit(f"the replay stopped early: {summary.get('status')!r}")
    if profiler:
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(profile_top)
        print(text.getvalue(), file=sys.stderr)
    print(json.dumps({"replay_s": replay_s, "peak_mb": _status_mb("VmHWM"), "base_mb": base_mb}))


def run_case(case: Case, workdir: Path, reuse: bool = False) -> dict[str, Any]:
    """Full run, then its replay under :data:`CHANGES`; the table's row as a dict."""
    full_dir, replay_dir = workdir / case.name / "full", workdir / case.name / "replay"
    full_s, reused = full_run(case, full_dir, reuse)
    r = timed_replay(full_dir, replay_dir, CHANGES)
    scenario = scenario_of(case)
    node_its = scenario.nodes.count * scenario.scenario.iterations
    npz = (full_dir / "timing.npz").stat().st_size
    ratio = r["replay_s"] / full_s
    return {
        "case": case.name,
        "nodes": scenario.nodes.count,
        "iterations": scenario.scenario.iterations,
        "full_s": full_s,
        "reused": reused,
        **r,
        "ratio": ratio,
        "target": case.target(),
        "ok": case.meets(ratio, r["replay_s"], r["peak_mb"]),
        "npz_bytes": npz,
        "bytes_per_node_it": npz / node_its,
    }


HEAD = (
    f"{'case':<12}{'nodes x its':>12}{'full s':>10}{'replay s':>10}{'ratio':>9}{'target':>16}{'ok':>5}"
    f"{'peak MB':>9}{'base MB':>9}{'npz B':>12}{'B/node-it':>10}"
)


def format_row(row: dict[str, Any]) -> str:
    """One line of the table."""
    full = f"{row['full_s']:.2f}{'*' if row['reused'] else ''}"
    return (
        f"{row['case']:<12}{row['nodes']:>6} x {row['iterations']:<3}{full:>10}{row['replay_s']:>10.2f}"
        f"{'1/' + format(1 / row['ratio'], '.0f'):>9}{row['target']:>16}{'ok' if row['ok'] else 'MISS':>5}"
        f"{row['peak_mb']:>9.0f}{row['base_mb']:>9.0f}{row['npz_bytes']:>12,}{row['bytes_per_node_it']:>10.1f}"
    )


def _load() -> str:
    """The 1-minute load average as text (the machine is shared)."""
    return f"{os.getloadavg()[0]:.2f}"


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":  # the replay child (timed_replay)
        child(*sys.argv[2:5], profile_top=int(sys.argv[5]) if len(sys.argv) > 5 else 0)
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--case", action="append", choices=sorted(CASES), help=f"repeatable; default: {DEFAULT_CASES}")
    ap.add_argument("--quick", action="store_true", help="only iot10-quick (iot10, 20 iterations)")
    ap.add_argument("--workdir", type=Path, help="keep the run directories here (default: a temporary directory)")
    ap.add_argument("--reuse", action="store_true", help="keep a complete full run of the same scenario in --workdir")
    ap.add_argument("--profile", type=int, default=0, metavar="N", help="profile the replay again: top N functions")
    args = ap.parse_args()
    if args.reuse and not args.workdir:
        ap.error("--reuse needs --workdir DIR (the full runs to reuse)")
    names = ["iot10-quick"] if args.quick else (args.case or list(DEFAULT_CASES))
    import torch  # the full runs' imports, before any timing

    import aiotsim.api  # noqa: F401
    import aiotsim.replaying  # noqa: F401

    torch.set_num_threads(1)
    print(f"full run in this process (cpu, 1 torch thread); replay in a child process; load {_load()}")
    print(f"replay changes: {', '.join(f'{k}={v}' for k, v in CHANGES.items())}")
    with tempfile.TemporaryDirectory(prefix="aiotsim-replay-bench-") as tmp:
        workdir = args.workdir or Path(tmp)
        print(HEAD)
        for name in names:
            row = run_case(CASES[name], workdir, args.reuse)
            print(format_row(row), flush=True)
            if args.profile:
                dirs = workdir / name
                r = timed_replay(dirs / "full", dirs / "profiled", CHANGES, args.profile)
                print(f"--- {name}: the replay again under cProfile ({r['replay_s']:.2f} s)\n{r['profile']}")
    print(f"load {_load()} at the end; * full s from an earlier run's summary.json (--reuse)")


if __name__ == "__main__":
    main()
