"""Benchmark: ``aiotsim validate``'s memory estimate against the peak memory of the same run.

For each codec, the scenario (default ``scenarios/iot10k.toml`` at ``--nodes`` nodes and
``--iterations`` iterations, flops-free: its own compute model) is estimated with
:func:`aiotsim.validate.world_size` (what ``aiotsim validate`` prints, what ``aiotsim run`` refuses
above 80% of the machine's memory), then run as ``aiotsim run`` in a subprocess whose peak
resident memory (``ru_maxrss`` from ``os.wait4``, its own) is read. A 2-node run of the same
scenario measures what every run holds besides the world (the interpreter, torch, the data set):
``base``. Columns: ``estimate`` the world's estimate, ``message`` one node's message at its codec's
bound, ``peak`` the run's peak, ``peak - base`` the world's measured share, ``est / (peak - base)``
(1.0: exact; above: the estimate over-counts).

Run: ``python benchmarks/memory_estimate.py [--scenario scenarios/iot10k.toml] [--nodes 2000]
[--iterations 2] [--codecs none topk qsgd powersgd dgc] [--set KEY=VALUE ...]``. One torch thread
per run; a shared machine does not move the memory columns, only the wall time.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def estimate(scenario: Path, sets: list[str], codec: str) -> tuple[int, int]:
    """``(world bytes, message bytes)`` of the case, as ``aiotsim validate`` prints them."""
    from aiotsim.errors import ConfigError
    from aiotsim.validate import load_validated, world_size

    try:
        size = world_size(load_validated(scenario, sets, compressor=codec))
    except ConfigError as exc:  # a bad codec name or --set: the message, not a traceback
        raise SystemExit(f"error: {exc}") from None
    if size is None:
        raise SystemExit(f"{scenario}: no estimate before its image files are read")
    return size.total, size.message_bytes


def peak_bytes(scenario: Path, sets: list[str], codec: str) -> int:
    """Peak resident bytes of ``aiotsim run`` on the case, in a subprocess of its own."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "aiotsim.cli", "run", str(scenario), "-c", codec, "-q", "-o", f"{tmp}/run"]
        cmd += ["--threads", "1", *[a for s in sets for a in ("-s", s)]]
        log = Path(tmp) / "stderr.txt"
        with log.open("wb") as err:
            proc = subprocess.Popen(
                cmd, stdout=subprocess.DEVNULL, stderr=err, env=os.environ | {"OMP_NUM_THREADS": "1"}
            )
            _, status, usage = os.wait4(proc.pid, 0)
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"{codec}: the run failed: {log.read_text()[-500:]}")
    return usage.ru_maxrss * 1024  # Linux: KB


def main() -> None:
    from aiotsim.validate import fmt_bytes

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", type=Path, default=ROOT / "scenarios" / "iot10k.toml")
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--iterations", type=int, default=2)
    parser.add_argument("--codecs", nargs="+", default=["none", "topk", "qsgd", "powersgd", "dgc"])
    parser.add_argument("--set", dest="sets", action="append", default=[], help="SECTION.KEY=VALUE, repeatable")
    args = parser.parse_args()
    common = [f"scenario.iterations={args.iterations}", *args.sets]
    sets = [f"nodes.count={args.nodes}", *common]
    estimates = {codec: estimate(args.scenario, sets, codec) for codec in args.codecs}  # bad input: before any run
    base = peak_bytes(args.scenario, ["nodes.count=2", *common], "none")
    print(f"{args.scenario.name}, {args.nodes} nodes x {args.iterations} iterations; base (2 nodes): {fmt_bytes(base)}")
    widths = {"codec": 10, "estimate": 10, "message": 10, "peak": 10, "peak - base": 12, "est / (peak - base)": 20}
    head = " ".join(f"{name:>{width}}" for name, width in widths.items())
    print(head + "\n" + "-" * len(head))
    for codec, (world, message) in estimates.items():
        peak = peak_bytes(args.scenario, sets, codec)
        share = world / (peak - base) if peak > base else float("inf")
        print(
            f"{codec:>10} {fmt_bytes(world):>10} {fmt_bytes(message):>10} {fmt_bytes(peak):>10}"
            f" {fmt_bytes(peak - base):>12} {share:>20.2f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
