"""Benchmark: host reads per node and iteration, the calls that would each wait for a GPU.

On CUDA, a torch call that brings a tensor's values to the host (``.item()``, ``.tolist()``,
``int(t)``, ``bool(t)``, ``.cpu()``, ``.numpy()``, ``nonzero``, a boolean-mask index, ...) blocks
until the device has finished all queued work: one per node and layer costs a fleet of 10,000
nodes tens of thousands of round trips per iteration. No GPU is needed to count them: this script
runs a fleet scenario on the CPU under a :class:`torch.overrides.TorchFunctionMode` that counts
those calls by their call site in ``aiotsim``, and prints the total per node and iteration and
the sites that make most of them.

Not counted: ``.to(device)`` (a no-op on the tensor's own device, which is what the hot loop
asks; the CPU cannot tell it from a real copy) and the data stream's one host-to-device copy of
a permutation per epoch.

Run: ``python benchmarks/host_reads.py [--nodes 100] [--codecs none topk] [--iterations 3]
[--batched true|false|auto] [--top 6]`` (LeNet-5, sync, star: ``scenarios/iot100.toml``).
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

sys.path.insert(0, str(Path(__file__).resolve().parent))
import scale  # noqa: E402  (the fleet scenarios, as benchmarks/scale.py builds them)

READS = {
    *("item", "tolist", "__bool__", "__int__", "__float__", "__index__", "cpu", "numpy"),
    *("nonzero", "argwhere", "unique", "unique_consecutive", "masked_select", "repeat_interleave", "equal", "allclose"),
}


class HostReads(TorchFunctionMode):
    """Counts the torch calls that read tensor values on the host, by (call, aiotsim site)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: collections.Counter[tuple[str, str]] = collections.Counter()

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        name = getattr(func, "__name__", "")
        if name == "__getitem__" and len(args) > 1:  # a boolean mask index has a data-dependent size
            index = args[1] if isinstance(args[1], tuple) else (args[1],)
            name = "bool index" if any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in index) else ""
        if name in READS or name == "bool index":
            self.calls[(name, _site())] += 1
        return func(*args, **(kwargs or {}))


def _site() -> str:
    """The innermost aiotsim frame of the current stack, as ``file:line``."""
    for frame in reversed(traceback.extract_stack()[:-2]):
        if "/aiotsim/" in frame.filename:
            return f"{Path(frame.filename).name}:{frame.lineno}"
    return "?"


def count(nodes: int, codec: str, iterations: int, batched: Any, chunk: int = 0) -> HostReads:
    """Run the star fleet scenario of ``nodes`` with ``codec`` under :class:`HostReads`
    (``chunk``: ``nodes.batch_chunk``, nodes per batched pass; 0: the device's memory budget)."""
    from aiotsim.results.store import RunWriter
    from aiotsim.sim.runner import run_cluster
    from aiotsim.sim.world import Cluster

    sc = scale.scenario_for(nodes, codec, "star", iterations)
    sc = dataclasses.replace(sc, nodes=dataclasses.replace(sc.nodes, batched=batched, batch_chunk=chunk))
    cluster = Cluster(sc, device="cpu")
    mode = HostReads()
    with tempfile.TemporaryDirectory() as tmp, mode:
        run_cluster(cluster, RunWriter(tmp, sc.to_toml()))
    return mode


def _non_negative(text: str) -> int:
    """An argparse type: a whole number >= 0 (argparse's one-line error and exit 2 otherwise)."""
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--codecs", nargs="+", default=["none", "topk"])
    ap.add_argument("--iterations", type=int, default=3)
    ap.add_argument("--batched", default="true", choices=["true", "false", "auto"])
    ap.add_argument("--top", type=int, default=6, help="call sites shown per codec")
    ap.add_argument(
        "--chunk",
        type=_non_negative,
        default=0,
        help="nodes.batch_chunk: nodes per batched pass (0: the CPU's 128 MiB budget; a GPU's holds thousands)",
    )
    args = ap.parse_args()
    batched: Any = {"true": True, "false": False}.get(args.batched, args.batched)
    torch.set_num_threads(1)
    per = args.nodes * args.iterations
    print(f"LeNet-5, sync, star, {args.nodes} nodes x {args.iterations} iterations, nodes.batched = {args.batched}")
    print(f"{'codec':8s} {'reads':>8s} {'per node-it':>12s}   top sites (reads per node-iteration)")
    for codec in args.codecs:
        calls = count(args.nodes, codec, args.iterations, batched, args.chunk).calls
        total = sum(calls.values())
        top = ", ".join(f"{name} {site} {k / per:.2f}" for (name, site), k in calls.most_common(args.top))
        print(f"{codec:8s} {total:8d} {total / per:12.2f}   {top}")


if __name__ == "__main__":
    main()
