"""The flow engine against the ns-3 packet engine on whole training runs: docs/NS3_ENGINE.md's table.

    python tools/engine_table.py [--iterations 150] [--jobs 2] [--only iot10,wifi10] [--no-write]

Runs each scenario (iot10, hierarchical, wifi10, cellular: LTE under ns-3, sensors_154: 802.15.4)
with the codecs ``none`` and ``topk``
three ways: the flow engine as shipped (``sharing = "fair"``), the flow engine with one drop-tail
FIFO per link (``sharing = "fifo"``), and ``network.engine = "ns3"``, all at the same iterations,
seed and training (synchronous learning does not depend on the network, so every way trains the
same model; only time differs). For each it reports the mean simulated time of an iteration, its
communication part (``comm_share`` x the iteration), the simulated time to the scenario's target
accuracy, and each flow-engine row's error against ns-3: (flow - ns3) / ns3. Every number is read
from the run's ``summary.json`` under ``runs/engines/DIGEST/`` (DIGEST: of the aiotsim sources and
the scenarios, so a complete run there is reused only by the same code); the table is written
between markers in docs/NS3_ENGINE.md with this command and the digest beside it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from aiotsim.results.provenance import inputs_digest  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "NS3_ENGINE.md"
BEGIN = "<!-- engine table: written by python tools/engine_table.py -->"
END = "<!-- end of the engine table -->"
SCENARIOS = ("iot10", "hierarchical", "wifi10", "cellular", "sensors_154")
CODECS = ("none", "topk")
# sensors_154 dense: 86 KB each way per node and round over one 250 kbit/s channel, hours of ns-3
ONLY_CODECS = {"sensors_154": ("topk",)}
WAYS = {  # label -> overrides
    "flow fair": ["network.engine=flow", "network.sharing=fair"],
    "flow fifo": ["network.engine=flow", "network.sharing=fifo"],
    "ns3": ["network.engine=ns3"],
}


def run_one(scenario: str, codec: str, way: str, iterations: int, out: Path) -> dict[str, Any]:
    """One run through the CLI (its own process, as a user runs it); its summary. ``out`` is named
    by the code's digest: a complete run already there was made by this code and is reused."""
    d = out / f"{scenario}-{codec}-{way.replace(' ', '-')}-{iterations}"
    done = d / "summary.json"
    if done.exists() and json.loads(done.read_text()).get("status") == "complete":
        return dict(json.loads(done.read_text()))
    sets = [f"scenario.iterations={iterations}", *WAYS[way]]
    cmd = [sys.executable, "-m", "aiotsim.cli", "run", f"scenarios/{scenario}.toml", "-c", codec, "-o", str(d), "-q"]
    for s in sets:
        cmd += ["--set", s]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-1:] or ["no message"]
        raise SystemExit(f"{scenario}/{codec}/{way} failed (exit {proc.returncode}): {tail[0]}")
    summary: dict[str, Any] = json.loads((d / "summary.json").read_text())
    return summary


def row_values(s: dict[str, Any]) -> tuple[float, float, float | None]:
    """(s per iteration, communication s per iteration, time to the target accuracy s or None)."""
    per_it = s["mean_iter_time_s"]
    return per_it, per_it * (s["comm_share"] or 0.0), s["time_to_accuracy_s"]


def _err(x: float | None, ref: float | None) -> str:
    return "-" if x is None or not ref else f"{(x - ref) / ref:+.1%}"


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:,.3g}"


def table(results: dict[tuple[str, str, str], dict[str, Any]], iterations: int) -> list[str]:
    """The markdown table: a row per scenario, codec and way; errors against the ns3 row."""
    lines = [
        f"Simulated seconds, {iterations} iterations, seed 1; error = (flow - ns3) / ns3.",
        "",
        "| scenario | codec | engine | s / iteration | err | comm s / iteration | err | time to target s | err |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for scenario in SCENARIOS:
        for codec in ONLY_CODECS.get(scenario, CODECS):
            if (scenario, codec, "ns3") not in results:
                continue
            ref = row_values(results[(scenario, codec, "ns3")])
            for way in WAYS:
                it, comm, tta = row_values(results[(scenario, codec, way)])
                errs = ("", "", "") if way == "ns3" else (_err(it, ref[0]), _err(comm, ref[1]), _err(tta, ref[2]))
                lines.append(f"| {scenario} | {codec} | {way} | {_fmt(it)} | {errs[0]} | {_fmt(comm)} | {errs[1]} "
                             f"| {_fmt(tta)} | {errs[2]} |")  # fmt: skip
    return lines


def write(lines: Sequence[str], command: str, digest: str) -> None:
    """Replace the text between the markers of docs/NS3_ENGINE.md."""
    text = DOC.read_text()
    if text.count(BEGIN) != 1 or text.count(END) != 1:
        raise SystemExit(f"{DOC} needs one line {BEGIN!r} and one line {END!r}")
    head, rest = text.split(BEGIN + "\n")
    tail = rest.split(END, 1)[1]
    made = f"Made by `{command}` (aiotsim sources and scenarios digest {digest}; runs in runs/engines/{digest}/).\n\n"
    DOC.write_text(head + BEGIN + "\n" + made + "\n".join(lines) + "\n" + END + tail)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--iterations", type=int, default=150)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--only", default=",".join(SCENARIOS), help="scenarios, comma-separated")
    ap.add_argument("--no-write", action="store_true", help="print the table, leave the document alone")
    args = ap.parse_args(argv)
    only = [s for s in args.only.split(",") if s]
    unknown = sorted(set(only) - set(SCENARIOS))
    if unknown or args.iterations < 1 or args.jobs < 1:
        ap.error(f"unknown scenarios {unknown}" if unknown else "--iterations and --jobs must be >= 1")
    scenarios = [f"scenarios/{s}.toml" for s in SCENARIOS]
    digest = inputs_digest(ROOT, scenarios)[:12]  # the aiotsim sources and the scenarios
    out = ROOT / "runs" / "engines" / digest
    cases = [(s, c, w) for s in only for c in ONLY_CODECS.get(s, CODECS) for w in WAYS]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(args.jobs) as pool:  # each run is its own process
        done = pool.map(lambda k: (k, run_one(*k, args.iterations, out)), sorted(cases, key=lambda k: k[2] != "ns3"))
        results = dict(done)
    lines = table(results, args.iterations)
    print("\n".join(lines))
    print(f"{len(cases)} runs in {time.perf_counter() - t0:.0f} s")
    if not args.no_write and set(only) == set(SCENARIOS):
        write(lines, f"python tools/engine_table.py --iterations {args.iterations}", digest)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
