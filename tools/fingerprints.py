"""Record or check the fingerprints of short flops-mode runs of every shipped scenario.

    python tools/fingerprints.py --check                # the test's subset vs tests/data/fingerprints.json
    python tools/fingerprints.py --check --all-codecs   # every registered codec on every scenario
    python tools/fingerprints.py --record [--all-codecs]
    python tools/fingerprints.py --save DIR             # also keep every run directory under DIR
    python tools/fingerprints.py --check --rtol 1e-9 --reference DIR   # numeric comparison

A change that moves simulated times in the last bits on purpose (e.g. a new network engine) is
checked numerically: run ``--save DIR`` with the old code, then ``--check --rtol 1e-9
--reference DIR`` with the new one: a run whose hash differs is compared value by value
(``metrics.csv``, ``evals.csv``, ``summary.json``); the largest relative difference per column is
printed, and the run passes only if every time-like column (``*_s``, ``*_j``, ``*_share``,
throughput: times and what they imply) is within ``rtol`` and every other column (loss, accuracy, bytes, counts) is
identical.

A refactor that must not change results keeps every fingerprint equal (see
``aiotsim/results/fingerprint.py``). Runs use one torch thread, the setting under which a
machine's results repeat exactly.

The same run's floats differ between kinds of CPU: MKL and oneDNN pick their kernels by
microarchitecture, so on an AMD EPYC the losses of iot10 with ``none`` differ in the last bits from
those recorded on the earlier development machine (every other column equal), and two AMD EPYC
machines whose convolutions agree differ in the variance codec's per-sample gradients. The fixture
holds one set of fingerprints per kind of machine met so far, and a machine's set is the one whose
:data:`CANARIES` runs it reproduces (:func:`machine_set`). ``--record`` rewrites that set, or the set
recorded on a CPU of the same name, or adds one; ``--check`` on a machine no set matches says so
and fails (the test skips: there is nothing to compare with until the machine's set is recorded,
from the code before the change under test). A case whose fingerprint ``--record`` changes (a
change of results on purpose) is marked ``stale`` in every other set: those machines' values are
no longer the reference, and ``--check`` and the test pass over the case there until that machine
records it again; a case added since a set was recorded is stale in it the same way.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import math
import platform
import shutil
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from aiotsim.api import run_scenario  # noqa: E402
from aiotsim.compress.registry import codec_names, get_codec_class  # noqa: E402
from aiotsim.config import load_scenario  # noqa: E402
from aiotsim.results.fingerprint import fingerprint_run_dir  # noqa: E402

FIXTURE = ROOT / "tests" / "data" / "fingerprints.json"
# the runs that tell which recorded set a machine reproduces: short, and through the kernels whose
# rounding differs between CPUs: LeNet-5's convolutions and matrix products, and the variance
# codec's per-sample gradients (vmap), whose rounding told apart two AMD EPYC machines (CPU family
# 25) that agree on the first: 2 of 84 cases differed on the second, at every commit back to 2135c23
CANARIES = ("iot10-ideal|none", "iot10-partial|variance")
# scenario file -> iterations of its short run (async: an iteration is one server update)
SCENARIOS = {
    "scenarios/iot10.toml": 3,
    "scenarios/hierarchical.toml": 3,
    "scenarios/ring.toml": 2,
    "scenarios/shared_medium.toml": 3,
    "scenarios/custom.toml": 3,
    "scenarios/hetero_async.toml": 8,
    "tests/tiny.toml": 4,
    "scenarios/cellular.toml": 3,
    # sharing = "fifo": drop-tail queues, a 20-packet gateway buffer, mixed RTTs (issue 38)
    "scenarios/shallow_gateway.toml": 3,
}
SUBSET = ("none", "2bit", "topk", "agg-aware", "powersgd", "variance")
# partial mode and late uploads are exercised on iot10 with a straggler (not a shipped file)
EXTRA = {
    # a fleet: nodes.batched = "auto" computes its gradients in batched passes on the CPU too
    # (aiotsim.learn.batched.cpu_batches), and a sync round encodes each pass at dispatch
    # (at 32 samples per node a pass computes its gradients node by node: the looped path's values,
    # CPU_LOOPED_PASS_BATCH) ...
    "iot100-batched": ("scenarios/iot100.toml", 2, []),
    # ... and mapped, as "auto" runs smaller batches (iot1000: about 4 samples per node)
    "iot100-mapped": ("scenarios/iot100.toml", 2, ["nodes.batched=true"]),
    # the fluid model without TCP windows: its fingerprints are those iot10 had before the TCP
    # transport became the default
    "iot10-ideal": ("scenarios/iot10.toml", 3, ["network.transport=ideal"]),
    # one connection per node pair for both directions: the uploads pay no handshake
    "iot10-duplex": ("scenarios/iot10.toml", 3, ["network.tcp_connection=duplex"]),
    "iot10-partial": (
        "scenarios/iot10.toml",
        6,
        [
            "training.mode=partial",
            "training.partial_k=6",
            "training.late=apply",
            "nodes.straggler_fraction=0.3",
            "nodes.straggler_factor=3.0",
        ],
    ),
}


def cases(all_codecs: bool) -> list[tuple[str, str, int, str, list[str]]]:
    """``(key, scenario path, iterations, codec, overrides)`` for every fingerprinted run."""
    codecs = codec_names() if all_codecs else list(SUBSET)
    out = []
    runs = [(p, p, n, []) for p, n in SCENARIOS.items()] + [(k, *v) for k, v in EXTRA.items()]
    for key, path, iters, sets in runs:
        ring = "ring" in path
        for codec in codecs:
            if ring and not get_codec_class(codec).supports_ring():
                continue
            out.append((f"{key}|{codec}", path, iters, codec, sets))
    return out


def run_case(path: str, iters: int, codec: str, sets: list[str], out_dir: Path) -> dict[str, str]:
    """Run one case in flops mode on the CPU and return its fingerprint."""
    overrides = [*sets, "nodes.compute_model=flops", "training.eval_every=2"]
    sc = load_scenario(ROOT / path, overrides, compressor=codec, iterations=iters)
    run_scenario(sc, out_dir, device="cpu")
    return fingerprint_run_dir(out_dir)


def load_sets(path: Path) -> list[dict]:
    """The fixture's sets: ``[{"machine": str, "recorded": date, "fingerprints": {key: fingerprint},
    "stale": [key, ...] (optional)}]``."""
    if not path.is_file():
        return []
    return list(json.loads(path.read_text())["sets"])


def save_sets(path: Path, sets: list[dict]) -> None:
    """Write ``sets`` (each set's fingerprints sorted by key)."""
    out = [{**s, "fingerprints": dict(sorted(s["fingerprints"].items()))} for s in sets]
    path.write_text(json.dumps({"sets": out}, indent=1) + "\n")


def machine_name() -> str:
    """This machine's CPU model (with its family and model numbers where /proc/cpuinfo gives them:
    a virtual machine may hide the rest of the name) and the vector instructions torch dispatches
    to (a set's label)."""
    model = platform.processor() or platform.machine()
    info: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            info.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    model = info.get("model name", model)
    if "cpu family" in info and "model" in info:
        model += f" (family {info['cpu family']}, model {info['model']})"
    return f"{model}; torch {torch.__version__} {torch.backends.cpu.get_cpu_capability()}"


def machine_set(sets: list[dict], work_dir: Path) -> tuple[dict | None, dict[str, str]]:
    """The recorded set whose :data:`CANARIES` fingerprints this machine all reproduces (None: no
    set does), and the canaries' fingerprints here."""
    here = {}
    for key, path, iters, codec, over in [c for c in cases(all_codecs=False) if c[0] in CANARIES]:
        here[key] = run_case(path, iters, codec, over, work_dir / key.replace("|", "__"))
    return matching_set(sets, here), here


def matching_set(sets: list[dict], here: dict) -> dict | None:
    """The first set whose recorded values of ``here``'s keys (canary cases) all equal this
    machine's ``here``, or None."""
    return next((s for s in sets if all(s["fingerprints"].get(k) == v for k, v in here.items())), None)


def set_to_record(sets: list[dict], found: dict | None, name: str) -> dict:
    """The set ``--record`` writes: the one this machine reproduces, else one recorded on a CPU of
    the same ``name`` (results changed on purpose), else a new one appended to ``sets``."""
    chosen = found or next((s for s in sets if s["machine"] == name), None)
    if chosen is None:
        chosen = {"machine": name, "fingerprints": {}}
        sets.append(chosen)
    chosen["recorded"] = datetime.date.today().isoformat()
    return chosen


def record_case(sets: list[dict], chosen: dict, key: str, fp: dict[str, str]) -> None:
    """Record ``key``'s fingerprint in ``chosen``. Where it changes the one recorded before (results
    changed on purpose) the other sets' values of ``key`` are marked stale, and so is a new case in
    the sets that lack it; where ``chosen`` had ``key`` stale, this machine catches up with such a
    change: its mark goes, nothing else."""
    catching_up = key in chosen.get("stale", [])
    old = chosen["fingerprints"].get(key)
    for other in sets:
        # changed on purpose, or a new case: the other machines have no current value of it
        changed = old is not None and old != fp and not catching_up
        if other is not chosen and (changed or key not in other["fingerprints"]):
            other["stale"] = sorted({*other.get("stale", []), key})
    chosen["fingerprints"][key] = fp
    left = [k for k in chosen.get("stale", []) if k != key]
    if left:
        chosen["stale"] = left
    else:
        chosen.pop("stale", None)


def _is_time(column: str) -> bool:
    """A column measured in simulated seconds or derived from them (energy, shares of the
    iteration time, samples per simulated second)."""
    last = column.rsplit(":", 1)[-1].rsplit(".", 1)[-1]
    return last.endswith(("_s", "_j", "_share")) or any(w in last for w in ("time", "energy", "throughput"))


def _flatten(value: object, prefix: str = "") -> dict[str, object]:
    """``summary.json`` as ``{dotted path: leaf}`` (list items by index)."""
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list):
        items = ((str(i), v) for i, v in enumerate(value))
    else:
        return {prefix: value}
    out: dict[str, object] = {}
    for k, v in items:
        out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


def _rel(a: object, b: object) -> float:
    """Relative difference of two values (0 when equal, inf when they are not comparable numbers)."""
    if a == b:
        return 0.0
    try:
        x, y = float(a), float(b)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return math.inf
    if math.isnan(x) and math.isnan(y):
        return 0.0
    return abs(x - y) / max(abs(x), abs(y))


def _values(run_dir: Path) -> dict[str, list[object]]:
    """Every value of a run's fingerprinted files, by ``file:column`` (rows in order)."""
    out: dict[str, list[object]] = {}
    for name in ("metrics.csv", "evals.csv"):
        with (run_dir / name).open(newline="") as fh:
            for row in csv.DictReader(fh):
                for col, val in row.items():
                    out.setdefault(f"{name}:{col}", []).append(val)
    summary = json.loads((run_dir / "summary.json").read_text())
    summary.pop("wall_time_s", None)
    for key, val in _flatten(summary).items():
        out[f"summary.json:{key}"] = [val]
    return out


def numeric_diff(ref_dir: Path, new_dir: Path) -> tuple[dict[str, float], bool]:
    """Largest relative difference per column between two runs' outputs, and whether every
    non-time column is identical (a column missing on one side, or rows added, differ by inf)."""
    ref, new = _values(ref_dir), _values(new_dir)
    diffs: dict[str, float] = {}
    for col in sorted(set(ref) | set(new)):
        a, b = ref.get(col, []), new.get(col, [])
        worst = math.inf if len(a) != len(b) else max((_rel(x, y) for x, y in zip(a, b, strict=True)), default=0.0)
        if worst > 0:
            diffs[col] = worst
    exact = all(_is_time(col) for col in diffs)
    return diffs, exact


def compare_case(ref_dir: Path, new_dir: Path, rtol: float) -> tuple[bool, str]:
    """Whether a run agrees with its reference within ``rtol`` in times and exactly elsewhere,
    and the report lines (max relative difference per differing column)."""
    if not ref_dir.is_dir():
        return False, f"no reference run in {ref_dir}"
    diffs, exact = numeric_diff(ref_dir, new_dir)
    worst_time = max((d for c, d in diffs.items() if _is_time(c)), default=0.0)
    ok = exact and worst_time <= rtol
    lines = [f"    {col}: max rel diff {d:.2e}" for col, d in diffs.items()]
    head = f"numeric: max rel time diff {worst_time:.2e}; non-time columns {'identical' if exact else 'DIFFER'}"
    return ok, "\n".join([head, *lines])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--record", action="store_true", help="write the fingerprints instead of checking them")
    ap.add_argument("--check", action="store_true", help="compare against the recorded fingerprints")
    ap.add_argument("--all-codecs", action="store_true", help="every registered codec, not the test's subset")
    ap.add_argument("--fixture", type=Path, default=FIXTURE)
    ap.add_argument("--only", default="", help="only the cases whose key starts with this (e.g. a scenario path)")
    ap.add_argument("--save", type=Path, help="keep every run directory under this folder (a reference)")
    ap.add_argument("--reference", type=Path, help="run directories saved with --save, for --rtol")
    ap.add_argument("--rtol", type=float, help="on a hash mismatch, compare with --reference value by value")
    args = ap.parse_args()
    torch.set_num_threads(1)
    sets = load_sets(args.fixture)
    bad = numeric = 0
    with tempfile.TemporaryDirectory() as tmp:
        found, _ = machine_set(sets, Path(tmp) / "canary")
        if args.record:
            chosen = set_to_record(sets, found, machine_name())
            recorded = chosen["fingerprints"]
        elif found is None:
            print(f"no recorded set matches this machine ({machine_name()}): its {', '.join(CANARIES)} runs differ")
            print(f"{len(sets)} sets; record one with --record, from the code before the change under test")
            return 1
        else:
            recorded = found["fingerprints"]
            print(f"recorded set: {found['machine']} ({found.get('recorded', '?')})")
        stale = set() if args.record or found is None else set(found.get("stale", []))
        for k, (key, path, iters, codec, sets_) in enumerate(cases(args.all_codecs)):
            if not key.startswith(args.only):
                continue
            run_dir = Path(tmp) / str(k)
            fp = run_case(path, iters, codec, sets_, run_dir)
            safe = key.replace("/", "_").replace("|", "__")
            if args.save:
                shutil.copytree(run_dir, args.save / safe, dirs_exist_ok=True)
            if args.record:
                record_case(sets, chosen, key, fp)
                status = "recorded"
            elif key in stale:
                status = "stale here (changed on purpose since this set was recorded): not compared"
            elif key not in recorded:
                status = "NOT RECORDED"
                bad += 1
            else:
                diff = [f for f in fp if fp[f] != recorded[key].get(f)]
                status = "ok" if not diff else "DIFFERS: " + ", ".join(diff)
                if diff and args.rtol is not None and args.reference is not None:
                    close, report = compare_case(args.reference / safe, run_dir, args.rtol)
                    status = ("ok within rtol; " if close else "DIFFERS; ") + report
                    diff = [] if close else diff
                    numeric += close
                bad += bool(diff)
            print(f"{key:45s} {status}", flush=True)
    if args.record:
        save_sets(args.fixture, sets)
        print(f"wrote {len(recorded)} fingerprints to {args.fixture} ({len(sets)} sets)")
    within = f" ({numeric} of them within rtol={args.rtol} in times, identical elsewhere)" if numeric else ""
    print(f"{bad} differ" if bad else f"all identical{within}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
