"""The model zoo at 10 nodes: wall time per simulated iteration and memory per node.

For every registered model, runs ``scenarios/iot10.toml`` (10 nodes, synchronous, momentum on the
nodes, ``flops`` compute model) with the ``none`` codec on synthetic data of one shape
(``--shape``, default 3x32x32, the size every model takes) on the CPU with one torch thread,
and prints per model:

* parameters, and FLOP of one training step per sample (forward + backward, FlopCounterMode);
* wall seconds per simulated iteration (the run's wall time / iterations, setup excluded);
* memory per node, MiB: model + gradients + velocity (momentum on the nodes) + codec state
  (residuals and other tensors in the node's codec states), all fp32, and apart from that the
  activations saved for backward at the batch size (counted with saved-tensor hooks).

    python benchmarks/models.py [--iterations 2] [--batch-size 8] [--model resnet20 ...]
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time
from pathlib import Path

import torch

from aiotsim.config import load_scenario
from aiotsim.learn.models import MODELS
from aiotsim.results.store import RunWriter
from aiotsim.sim.runner import run_cluster
from aiotsim.sim.world import Cluster

MIB = 2**20  # bytes


def _nbytes(tensors: list[torch.Tensor | None]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))


def node_state_bytes(sim: Cluster, i: int) -> tuple[int, int, int, int]:
    """Node ``i``'s ``(model, gradients, velocity, codec state)`` bytes after the run."""
    params = sim.learning.params
    model = _nbytes(list(params))  # every node holds a replica of the model
    grads = model  # one gradient per parameter, same dtype
    local = sim.nodes[i].local
    velocity = _nbytes(list(local.velocity or []))
    codec = sum(_nbytes(list(vars(s).values())) for s in local.states if dataclasses.is_dataclass(s))
    return model, grads, velocity, codec


def activation_bytes(sim: Cluster, i: int) -> int:
    """Bytes of the tensors autograd saves for backward on one batch of node ``i``'s shard (drawn
    from a fresh stream, so the finished run is not touched); storages shared by views count once."""
    local = sim.learning.local_state(i)
    x, y = local.stream.next()
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        sim.learning.computer.gradient(None, x, y)
    return sum(seen.values())


def bench(name: str, args: argparse.Namespace) -> tuple[object, ...]:
    """One model's row: name, params, FLOP/sample, s/iteration, memory MiB, activations MiB."""
    overrides = [
        f'model.name="{name}"',
        'data.dataset="synthetic"',
        f"data.synthetic_shape={args.shape}",
        "data.synthetic_train_size=640",
        "data.synthetic_test_size=64",
        f"data.batch_size={args.batch_size}",
        f"training.eval_every={args.iterations}",  # one evaluation, at the end (64 samples)
    ]
    sc = load_scenario(args.scenario, overrides, compressor="none", iterations=args.iterations)
    torch.set_num_threads(1)
    sim = Cluster(sc, device="cpu")
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        run_cluster(sim, RunWriter(Path(tmp) / "run", sc.to_toml()))
        per_iter = (time.perf_counter() - t0) / args.iterations
    state = node_state_bytes(sim, 0)
    flops = sim.learning.flops_per_batch / args.batch_size
    return name, sim.learning.elements, flops, per_iter, *(b / MIB for b in state), activation_bytes(sim, 0) / MIB


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default=str(Path(__file__).parents[1] / "scenarios" / "iot10.toml"))
    ap.add_argument("--iterations", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--shape", default="[3, 32, 32]", help="synthetic sample shape, TOML list")
    ap.add_argument("--model", action="append", default=None, help="repeatable; default: every model")
    args = ap.parse_args()
    names = args.model or list(MODELS)
    print(
        f"iot10: 10 nodes, sync, codec none, flops compute model, cpu, 1 thread, synthetic {args.shape}, "
        f"batch {args.batch_size}/node, {args.iterations} iterations"
    )
    head = ("model", "params", "GFLOP/sample", "s/iter", "model MiB", "grads MiB", "velocity MiB")
    print(
        f"{head[0]:<12}{head[1]:>12}{head[2]:>13}{head[3]:>9}{head[4]:>10}{head[5]:>10}{head[6]:>13}"
        f"{'codec MiB':>10}{'node total MiB':>15}{'activ. MiB':>11}"
    )
    for name in names:
        n, params, flops, per_iter, model, grads, vel, codec, act = bench(name, args)
        total = model + grads + vel + codec
        print(
            f"{n:<12}{params:>12,}{flops / 1e9:>13.3f}{per_iter:>9.2f}{model:>10.1f}{grads:>10.1f}"
            f"{vel:>13.1f}{codec:>10.1f}{total:>15.1f}{act:>11.1f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
