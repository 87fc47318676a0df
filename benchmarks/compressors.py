"""Codec throughput against memory-copy bandwidth (issue 3's speed targets).

For each gradient size (default 1M and 25M fp32 elements) and every registered codec at its default
parameters, times ``encode`` + ``decode`` of one layer (median of at least ``--repeats`` runs after a
warm-up, CUDA-synchronized on a GPU; calls of a few ms get more repeats, see :func:`timed`) and
reports the throughput in GB/s of *input* (``4 * n`` bytes over the encode+decode time), next to
the bandwidth of ``tensor.clone()`` of the same gradient measured in the same run (also in GB/s
of input), and the slowdown ``memcpy GB/s / codec GB/s``. Targets: quantizers (fp16, 2bit, 4bit,
signsgd, efsignsgd, onebit, terngrad, qsgd) within 10x of memcpy; sparsifiers (every codec with
``sparse = True``, plus fft's frequency-domain sparsification) within 30x. Other codecs (none,
hylo, powersgd) are listed without a target.

Reading the numbers: a 1M-element gradient (4 MB) stays in the CPU caches, so its ``clone()`` runs at
cache speed and even ``none`` (one copy each way) shows a slowdown of several x; at 25M elements
(100 MB) the copy runs from memory and includes first-touch page faults of the fresh allocation, the
regime the targets are meant for.

The layer is fc-kind and shaped ``[n // 1000, 1000]`` (when 1000 divides ``n``), so that hylo takes
its 2-bit fc path rather than the dense path and powersgd its rank-r matrix path (a 1-D layer would
be sent uncompressed by both). The residual state carries over between repeats, as in training.

    python benchmarks/compressors.py [--sizes 1000000,25000000] [--device cpu|cuda] [--repeats 3]
                                     [--threads N] [--codec topk --codec fft ...]

``--threads`` sets torch's intra-op threads for codecs and memcpy alike. On a machine whose cores are
shared with other busy processes, use ``--threads 1``: each multi-threaded op then waits for a
scheduling slot for every worker thread, which adds ~10 ms per op and measures the neighbours, not the
codec.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from aiotsim.compress import build_codec, codec_names, get_codec_class
from aiotsim.compress.base import LayerInfo

QUANTIZERS = {"fp16", "2bit", "4bit", "signsgd", "efsignsgd", "onebit", "terngrad", "qsgd"}
EXTRA_SPARSIFIERS = {"fft"}


def target_of(name: str) -> float | None:
    """Slowdown target against memcpy: 10x for quantizers, 30x for sparsifiers, else none."""
    if name in QUANTIZERS:
        return 10.0
    if name in EXTRA_SPARSIFIERS or get_codec_class(name).sparse:
        return 30.0
    return None


# Short calls get more repeats (up to this many), so that each median spans about MIN_TOTAL_S.
MAX_REPEATS = 200
MIN_TOTAL_S = 0.25


def timed(fn: Callable[[], object], device: torch.device, repeats: int) -> float:
    """Median wall seconds of ``fn`` over at least ``repeats`` runs after one warm-up run; calls
    under a few ms are repeated until the runs add up to about ``MIN_TOTAL_S`` (a median of 3
    sub-millisecond calls swings by 3x between runs)."""
    t0 = time.perf_counter()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    warm = time.perf_counter() - t0
    repeats = max(repeats, min(MAX_REPEATS, int(MIN_TOTAL_S / max(warm, 1e-6))))
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench_size(n: int, device: torch.device, repeats: int, names: list[str]) -> None:
    shape = (n // 1000, 1000) if n % 1000 == 0 and n >= 1000 else (n,)
    layer = LayerInfo("bench.weight", shape, kind="fc", index=0)
    gen = torch.Generator().manual_seed(0)
    grad = (torch.randn(shape, generator=gen) * 0.01).to(device)  # fp32
    nbytes = 4 * n  # bytes of input
    memcpy_s = timed(lambda: grad.clone(), device, max(repeats, 5))
    memcpy_gbs = nbytes / memcpy_s / 1e9

    print(
        f"\n{n:,} fp32 elements, layer {list(shape)} kind fc, device {device}, "
        f"median of >= {repeats}; memcpy (clone) {memcpy_gbs:.2f} GB/s"
    )
    print(f"{'codec':<12}{'enc+dec ms':>12}{'GB/s':>9}{'slowdown':>10}{'target':>8}  {'status':<6}{'ratio':>9}")
    for name in names:
        codec = build_codec(name, seed=1)
        state = codec.init_state(layer, device, 0)
        if codec.needs_sq_grad:
            state.sq_grad = grad.square()
        payload_box: list = []

        def step() -> None:
            payload = codec.encode(grad, layer, state)
            codec.decode(payload, layer)
            payload_box[:] = [payload]

        try:
            sec = timed(step, device, repeats)
        except Exception as exc:  # a codec that fails is reported, the table goes on
            print(f"{name:<12}  failed: {type(exc).__name__}: {exc}")
            continue
        gbs = nbytes / sec / 1e9
        slowdown = memcpy_gbs / gbs
        target = target_of(name)
        status = "-" if target is None else ("ok" if slowdown <= target else "OVER")
        target_txt = "-" if target is None else f"{target:.0f}x"
        ratio = layer.dense_nbytes / max(payload_box[0].nbytes, 1)
        print(f"{name:<12}{sec * 1e3:>12.1f}{gbs:>9.3f}{slowdown:>9.1f}x{target_txt:>8}  {status:<6}{ratio:>8.1f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000000,25000000", help="comma-separated element counts")
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0, help="torch intra-op threads; 0 = torch's default")
    ap.add_argument("--codec", action="append", default=None, help="repeatable; default: every registered codec")
    args = ap.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device available")
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    names = args.codec or codec_names()
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}; codecs: {', '.join(names)}")
    print("slowdown = memcpy GB/s / codec GB/s (lower is better); ratio = fp32 bytes / payload bytes")
    for n in (int(s) for s in args.sizes.split(",")):
        bench_size(n, device, args.repeats, names)


if __name__ == "__main__":
    main()
