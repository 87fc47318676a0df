"""Encode speed of every codec on this tree against another checkout of aiotsim, in one run.

Issue 41 wrote each codec once, on rows (``Codec.encode_rows``); its target is every codec's encode
within 10% of the code before, one node at a time (``codec.encode``) and many nodes at once. This
script times both on this tree and on ``--against DIR`` (e.g. ``git worktree add /tmp/base 5c368d7``),
alternating the two trees round by round in child processes so that both see the same load:

* ``one node``: ``codec.encode`` of a ``[1000, 1000]`` fc gradient (1M fp32 values), state carried
  over, as in ``benchmarks/compressors.py`` (encode only);
* ``rows``: every layer of LeNet-5 for ``--nodes`` nodes encoded together (``encode_rows`` here; the
  old tree's ``compress.batch.encode_batch``), fresh states, as a synchronous batched round does.

Times are CPU seconds of the one torch thread (``time.thread_time``), the best of ``--repeats`` calls
per round and the median over ``--rounds`` rounds: on a shared machine CPU time hardly depends on the
neighbours, wall time does. Ratio = this tree / the other; above 1.10 is marked.

    python benchmarks/encode_versions.py --against /tmp/base [--codec topk --codec qsgd] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def best_cpu(fn: Callable[[], object], repeats: int) -> float:
    """Least thread CPU seconds of ``repeats`` calls of ``fn``, after one warm-up call."""
    fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.thread_time()
        fn()
        best = min(best, time.thread_time() - t0)
    return best


def child(names: list[str], nodes: int, repeats: int) -> dict[str, list[float]]:
    """``{codec: [one-node s, rows s]}`` for the aiotsim on ``sys.path``."""
    import torch

    from aiotsim.learn.models import build_model, layer_infos

    torch.set_num_threads(1)
    layers = layer_infos(build_model("lenet5", (1, 28, 28), 10, seed=0))
    gen = torch.Generator().manual_seed(1)
    rows = [torch.randn((nodes, *L.shape), generator=gen) * 0.01 for L in layers]
    return {name: time_codec(name, layers, rows, repeats) for name in names}


def time_codec(name: str, layers: list, rows: list, repeats: int) -> list[float]:
    """``[one-node s, rows s]`` of codec ``name`` (see the module docstring)."""
    import torch

    from aiotsim.compress import build_codec
    from aiotsim.compress.base import LayerInfo

    cpu = torch.device("cpu")
    big = LayerInfo("bench.weight", (1000, 1000), kind="fc", index=0)
    grad = torch.randn(big.shape, generator=torch.Generator().manual_seed(0)) * 0.01
    codec = build_codec(name, seed=1)
    state = codec.init_state(big, cpu, 0)
    if codec.needs_sq_grad:
        state.sq_grad = grad.square()
    one = best_cpu(lambda: codec.encode(grad, big, state), repeats)
    many = getattr(codec, "encode_rows", None)
    if many is None:  # a tree before issue 41
        from aiotsim.compress.batch import encode_batch

        def many(g, layer, states):  # noqa: ANN001, ANN202
            return encode_batch(codec, g, layer, states)

    def round_() -> None:
        for L, g in zip(layers, rows):
            states = [codec.init_state(L, cpu, i) for i in range(g.shape[0])]
            for s, x in zip(states, g):
                s.sq_grad = x.square() if codec.needs_sq_grad else None
            many(g, L, states)

    return [one, best_cpu(round_, max(1, repeats // 2))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", type=Path, help="another aiotsim checkout (its repository root)")
    ap.add_argument("--codec", action="append", default=None, help="repeatable; default: every built-in codec")
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.codec is None:
        sys.path.insert(0, str(ROOT))
        from aiotsim.compress import codec_names

        args.codec = codec_names()
    if args.child:
        print(json.dumps(child(args.codec, args.nodes, args.repeats)))
        return
    if args.against is None or not (args.against / "aiotsim").is_dir():
        ap.error("--against DIR: DIR must be an aiotsim checkout (it holds aiotsim/)")
    trees = {"this": ROOT, "other": args.against.resolve()}
    runs: dict[str, list[dict[str, list[float]]]] = {"this": [], "other": []}
    cmd = [sys.executable, __file__, "--child", "--nodes", str(args.nodes), "--repeats", str(args.repeats)]
    for name in args.codec:
        cmd += ["--codec", name]
    load = os.getloadavg()[0]
    for _ in range(args.rounds):
        for tag, tree in trees.items():  # alternating: both trees see the same load
            env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1"}
            done = subprocess.run(cmd, env=env, cwd=tree, capture_output=True, text=True, check=True)
            runs[tag].append(json.loads(done.stdout.strip().splitlines()[-1]))
    print(f"this tree {trees['this']} vs {trees['other']}; {args.rounds} rounds; load average "
          f"{load:.2f} before, {os.getloadavg()[0]:.2f} after (1 min)")  # fmt: skip
    print(f"CPU ms, median of rounds; one node: 1M values; rows: LeNet-5, {args.nodes} nodes\n")
    print(f"{'codec':<11}{'one: this':>11}{'other':>9}{'ratio':>8}   {'rows: this':>11}{'other':>9}{'ratio':>8}")
    for name in args.codec:
        med = {t: [statistics.median(r[name][i] for r in runs[t]) * 1e3 for i in (0, 1)] for t in trees}
        cells = []
        for i in (0, 1):
            ratio = med["this"][i] / med["other"][i]
            cells.append(f"{med['this'][i]:>11.2f}{med['other'][i]:>9.2f}{ratio:>7.2f}{'!' if ratio > 1.10 else ' '}")
        print(f"{name:<11}{cells[0]}  {cells[1]}")


if __name__ == "__main__":
    main()
