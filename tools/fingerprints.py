"""Record or check the fingerprints of short flops-mode runs of every shipped scenario.

    python tools/fingerprints.py --check                # the test's subset vs tests/data/fingerprints.json
    python tools/fingerprints.py --check --all-codecs   # every registered codec on every scenario
    python tools/fingerprints.py --record [--all-codecs]

A refactor that must not change results keeps every fingerprint equal (see
``aiotsim/results/fingerprint.py``). Runs use one torch thread, the setting under which results
are reproducible on any machine.
"""

from __future__ import annotations

import argparse
import json
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--record", action="store_true", help="write the fingerprints instead of checking them")
    ap.add_argument("--check", action="store_true", help="compare against the recorded fingerprints")
    ap.add_argument("--all-codecs", action="store_true", help="every registered codec, not the test's subset")
    ap.add_argument("--fixture", type=Path, default=FIXTURE)
    ap.add_argument("--only", default="", help="only the cases whose key starts with this (e.g. a scenario path)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    recorded = json.loads(args.fixture.read_text()) if args.fixture.is_file() else {}
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        for k, (key, path, iters, codec, sets) in enumerate(cases(args.all_codecs)):
            if not key.startswith(args.only):
                continue
            fp = run_case(path, iters, codec, sets, Path(tmp) / str(k))
            if args.record:
                recorded[key] = fp
                status = "recorded"
            elif key not in recorded:
                status = "NOT RECORDED"
                bad += 1
            else:
                diff = [f for f in fp if fp[f] != recorded[key].get(f)]
                status = "ok" if not diff else "DIFFERS: " + ", ".join(diff)
                bad += bool(diff)
            print(f"{key:45s} {status}", flush=True)
    if args.record:
        args.fixture.write_text(json.dumps(dict(sorted(recorded.items())), indent=1) + "\n")
        print(f"wrote {len(recorded)} fingerprints to {args.fixture}")
    print(f"{bad} differ" if bad else "all identical")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
