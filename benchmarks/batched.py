"""Batched against looped node gradients and codecs: milliseconds per round (issue 13).

For each node count (default 10, 100, 1000) and model (default ``lenet5`` on 1x28x28 at batch
32, and ``resnet20``, a conv + batch-norm model, on 3x32x32 at batch 8):

* ``looped ms``: one round's gradients one node after the other
  (:meth:`aiotsim.learn.compute.GradientComputer.gradient`, what ``nodes.batched = false`` runs);
* ``batched ms``: the same gradients from :class:`aiotsim.learn.batched.BatchedGradients`
  (``nodes.batched = true``, chunk from the memory budget), including handing out every node's
  result (:meth:`~aiotsim.learn.batched.NodeGradient.take`);

and for every codec that encodes rows at once (its own ``_encode_rows``), one round's encode of every
layer of the model for every node, looped (``codec.encode`` per node and layer) against one
:meth:`~aiotsim.compress.base.Codec.encode_rows` per layer;
and for every codec with a batched server decode (``--decode-codecs``), one round's messages decoded
into the server's stack, one ``decode_read`` per message and layer against one
:meth:`~aiotsim.compress.base.Codec.decode_many` per layer (every node timed).

Large rounds are timed on the first ``--max-timed`` nodes and scaled to the round (both paths are
linear in the node count beyond one chunk); the ``timed`` column says how many nodes were timed.
Inputs are random (timings do not depend on the values). The load average before and after is
printed: the development machine is shared, so compare columns of one run only.

    python benchmarks/batched.py [--nodes 10,100,1000] [--models lenet5,resnet20] [--max-timed 100]
                                 [--device cpu|cuda] [--threads 1] [--codecs topk,qsgd,...]
                                 [--decode-codecs topk,qsgd,...]
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable

import torch

from aiotsim.compress import build_codec, codec_names
from aiotsim.compress.registry import row_codecs
from aiotsim.learn.batched import BatchedGradients
from aiotsim.learn.compute import GradientComputer
from aiotsim.learn.models import build_model, layer_infos

SETUPS = {"lenet5": ((1, 28, 28), 32), "resnet20": ((3, 32, 32), 8), "mlp": ((1, 28, 28), 32)}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn: Callable[[], object], device: torch.device, repeats: int = 1) -> tuple[float, float]:
    """``(wall s, CPU s)``: the best of ``repeats`` calls of ``fn`` after one warm-up call. CPU
    seconds (``time.process_time``, all threads of this process) hardly depend on how many other
    processes share the cores; wall seconds do."""
    fn()
    wall = cpu = float("inf")
    for _ in range(repeats):
        _sync(device)
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        _sync(device)
        wall = min(wall, time.perf_counter() - t0)
        cpu = min(cpu, time.process_time() - c0)
    return wall, cpu


def gradient_row(
    name: str, nodes: int, max_timed: int, device: torch.device
) -> tuple[int, tuple[float, float], tuple[float, float]]:
    """``(nodes timed, looped (wall, CPU) ms, batched (wall, CPU) ms)`` per round of ``nodes``
    gradients of ``name`` (best of two after a warm-up)."""
    shape, batch = SETUPS[name]
    k = min(nodes, max_timed)
    g = torch.Generator().manual_seed(0)
    xs = torch.randn((k, batch, *shape), generator=g).to(device)
    ys = torch.randint(0, 10, (k, batch), generator=g).to(device)
    model = build_model(name, shape, 10, seed=0).to(device)
    computer = GradientComputer(model, device)
    batched = BatchedGradients(computer)

    def looped() -> None:
        for i in range(k):
            computer.gradient(None, xs[i], ys[i])

    def vectorized() -> None:
        for r in batched.gradients(None, xs, ys):
            r.take()

    scale = nodes / k * 1e3
    (lw, lc), (bw, bc) = timed(looped, device, 2), timed(vectorized, device, 2)
    return k, (lw * scale, lc * scale), (bw * scale, bc * scale)


def codec_row(
    codec_name: str, model: str, nodes: int, max_timed: int, device: torch.device
) -> tuple[tuple[float, float], tuple[float, float]]:
    """``(loop (wall, CPU) ms, batch (wall, CPU) ms)``: one round's encode of every layer of
    ``model`` for ``nodes`` nodes."""
    shape, _ = SETUPS[model]
    layers = layer_infos(build_model(model, shape, 10, seed=0))
    codec = build_codec(codec_name, seed=0)
    k = min(nodes, max_timed)
    g = torch.Generator().manual_seed(1)
    grads = [torch.randn((k, *L.shape), generator=g).to(device) for L in layers]  # [nodes, *shape]
    loop_states = [[codec.init_state(L, device, i) for i in range(k)] for L in layers]
    batch_states = [[codec.init_state(L, device, i) for i in range(k)] for L in layers]

    def loop() -> None:
        for L, gl, states in zip(layers, grads, loop_states):
            for i in range(k):
                codec.encode(gl[i], L, states[i])

    def batch() -> None:
        for L, gl, states in zip(layers, grads, batch_states):
            codec.encode_rows(gl, L, states)

    scale = nodes / k * 1e3
    (lw, lc), (bw, bc) = timed(loop, device, 3), timed(batch, device, 3)
    return (lw * scale, lc * scale), (bw * scale, bc * scale)


def decode_row(codec_name: str, model: str, nodes: int, device: torch.device) -> tuple[tuple[float, float], ...]:
    """``(loop (wall, CPU) ms, batch (wall, CPU) ms)``: the server's decode of one round's messages,
    every layer of ``model`` for ``nodes`` nodes, into a stack (as the stacked aggregation does):
    one ``decode_read`` and row copy per message, against one ``decode_many`` per layer."""
    shape, _ = SETUPS[model]
    layers = layer_infos(build_model(model, shape, 10, seed=0))
    codec = build_codec(codec_name, seed=0)
    g = torch.Generator().manual_seed(1)
    payloads = []
    for L in layers:
        grads = torch.randn((nodes, *L.shape), generator=g).to(device)
        payloads.append(codec.encode_rows(grads, L, [codec.init_state(L, device, i) for i in range(nodes)]))
    stacks = [torch.empty((nodes, *L.shape), device=device) for L in layers]

    def loop() -> None:
        for L, ps, out in zip(layers, payloads, stacks):
            for i, p in enumerate(ps):
                out[i].copy_(codec.decode_read(p, L))

    def batch() -> None:
        for L, ps, out in zip(layers, payloads, stacks):
            codec.decode_many(ps, L, out=out)

    (lw, lc), (bw, bc) = timed(loop, device, 3), timed(batch, device, 3)
    return (lw * 1e3, lc * 1e3), (bw * 1e3, bc * 1e3)


def _pair(ms: tuple[float, float]) -> str:
    return f"{ms[0]:>8.1f} /{ms[1]:>7.1f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", default="10,100,1000")
    ap.add_argument("--models", default="lenet5,resnet20")
    ap.add_argument("--max-timed", type=int, default=100, help="nodes actually timed per round (scaled up)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--codecs", default=",".join(row_codecs()))
    ap.add_argument("--decode-codecs", default=",".join(n for n in codec_names() if build_codec(n).decodes_rows()))
    args = ap.parse_args()
    unknown = [n for n in (*args.codecs.split(","), *args.decode_codecs.split(",")) if n not in codec_names()]
    if unknown:
        ap.error(f"unknown codec(s) {', '.join(unknown)}; valid: {', '.join(codec_names())}")
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    counts = [int(x) for x in args.nodes.split(",")]
    models = args.models.split(",")
    print(f"torch {torch.__version__}, device {device}, {torch.get_num_threads()} thread(s), "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} (1 min)")  # fmt: skip
    print("\nnode gradients, ms per round (wall / CPU)")
    print(f"{'model':<10} {'nodes':>6} {'timed':>6} {'looped ms':>17} {'batched ms':>17} {'batched/looped CPU':>19}")
    for name in models:
        for n in counts:
            k, lo, ba = gradient_row(name, n, args.max_timed, device)
            print(f"{name:<10} {n:>6} {k:>6} {_pair(lo)} {_pair(ba)} {ba[1] / lo[1]:>19.2f}", flush=True)
    print(f"\ncodecs, every layer of {models[0]}, ms per round (wall / CPU)")
    print(f"{'codec':<10} {'nodes':>6} {'loop ms':>17} {'batch ms':>17} {'CPU speed-up':>13}")
    for codec_name in args.codecs.split(","):
        for n in counts:
            lo, ba = codec_row(codec_name, models[0], n, args.max_timed, device)
            print(f"{codec_name:<10} {n:>6} {_pair(lo)} {_pair(ba)} {lo[1] / ba[1]:>12.2f}x", flush=True)
    print(f"\nserver decode, every layer of {models[0]}, every node timed, ms per round (wall / CPU)")
    print(f"{'codec':<10} {'nodes':>6} {'loop ms':>17} {'batch ms':>17} {'CPU speed-up':>13}")
    for codec_name in args.decode_codecs.split(","):
        for n in counts:
            lo, ba = decode_row(codec_name, models[0], n, device)
            print(f"{codec_name:<10} {n:>6} {_pair(lo)} {_pair(ba)} {lo[1] / ba[1]:>12.2f}x", flush=True)
    print(f"\nload average at the end {os.getloadavg()[0]:.2f} (1 min)")


if __name__ == "__main__":
    main()
