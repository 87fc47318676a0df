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
``aiotsim/results/fingerprint.py``). Runs use one torch thread, the setting under which results
are reproducible on any machine.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
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
}
SUBSET = ("none", "2bit", "topk", "agg-aware", "powersgd", "variance")
# partial mode and late uploads are exercised on iot10 with a straggler (not a shipped file)
EXTRA = {
    # a fleet: nodes.batched = "auto" computes its gradients in batched passes on the CPU too
    # (aiotsim.learn.batched.cpu_batches), and a sync round encodes each pass at dispatch
    "iot100-batched": ("scenarios/iot100.toml", 2, []),
    # the fluid model without TCP windows: its fingerprints are those iot10 had before the TCP
    # transport became the default
    "iot10-ideal": ("scenarios/iot10.toml", 3, ["network.transport=ideal"]),
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
    recorded = json.loads(args.fixture.read_text()) if args.fixture.is_file() else {}
    bad = numeric = 0
    with tempfile.TemporaryDirectory() as tmp:
        for k, (key, path, iters, codec, sets) in enumerate(cases(args.all_codecs)):
            if not key.startswith(args.only):
                continue
            run_dir = Path(tmp) / str(k)
            fp = run_case(path, iters, codec, sets, run_dir)
            safe = key.replace("/", "_").replace("|", "__")
            if args.save:
                shutil.copytree(run_dir, args.save / safe, dirs_exist_ok=True)
            if args.record:
                recorded[key] = fp
                status = "recorded"
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
        args.fixture.write_text(json.dumps(dict(sorted(recorded.items())), indent=1) + "\n")
        print(f"wrote {len(recorded)} fingerprints to {args.fixture}")
    within = f" ({numeric} of them within rtol={args.rtol} in times, identical elsewhere)" if numeric else ""
    print(f"{bad} differ" if bad else f"all identical{within}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
