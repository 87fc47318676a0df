"""Federated rounds: wall time of a fleet of registered nodes vs a plain fleet of the selected size.

Issue 12's target: with 100 nodes selected per round, a fleet of 100,000 registered nodes must run as
fast as a fleet of 100 (the cost of a round scales with the selected nodes, not the fleet). Each case
runs in its own process (fresh memory, one torch thread) and prints: start-up (data, nodes, topology),
wall seconds per round, nodes whose state was built, simulated time and bytes.

    python benchmarks/fleet.py                     # 100 vs 100,000 registered, 100 per round, 5 rounds
    python benchmarks/fleet.py --fleets 100 1000 10000 100000 --rounds 10
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CASE = r"""
import json, sys, time
import torch
torch.set_num_threads(1)
from aiotsim.config import load_scenario
from aiotsim.validate import validate_scenario
from aiotsim.sim.world import Cluster
from aiotsim.sim.runner import run_cluster

class Sink:  # the RunSink protocol, keeping nothing
    def write_metrics(self, row): pass
    def write_eval(self, row): pass
    def write_trace(self, events): pass
    def finish(self, summary): return summary

n, per_round, rounds = (int(a) for a in sys.argv[1:4])
over = {"nodes.count": n, "nodes.per_round": per_round, "scenario.iterations": rounds,
        "training.local_steps": 1, "training.eval_every": rounds, "data.samples_per_node": 40}
s = validate_scenario(load_scenario("scenarios/fedavg100.toml").replace(**over))
t0 = time.perf_counter(); c = Cluster(s, "cpu"); t1 = time.perf_counter()
summary = run_cluster(c, Sink()); t2 = time.perf_counter()
print(json.dumps({"fleet": n, "startup_s": t1 - t0, "round_s": (t2 - t1) / rounds, "built": c.nodes.built,
                  "sim_s": summary["sim_time_s"], "bytes_up": summary["bytes_up"]}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fleets", type=int, nargs="+", default=[100, 100_000])
    ap.add_argument("--per-round", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    head = ("registered", 10), ("per round", 9), ("start-up s", 10), ("wall s/round", 12), ("built", 6), ("sim s", 8)
    print(" ".join(f"{name:>{width}}" for name, width in head), f"{'bytes up':>12}")
    for n in args.fleets:
        out = subprocess.run([sys.executable, "-c", CASE, str(n), str(args.per_round), str(args.rounds)],
                             cwd=ROOT, capture_output=True, text=True, check=True)  # fmt: skip
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"{r['fleet']:>10,} {args.per_round:>9} {r['startup_s']:>10.2f} {r['round_s']:>12.2f} "
              f"{r['built']:>6} {r['sim_s']:>8.1f} {r['bytes_up']:>12,}")  # fmt: skip


if __name__ == "__main__":
    main()
