"""Benchmark: torch operations the server dispatches to aggregate one round, per message.

On a GPU each dispatched operation that computes is a kernel launch (views launch nothing, so
this count is an upper bound), at a few microseconds each: a server that decodes message by
message launches hundreds of thousands per iteration at 10,000 nodes. No GPU is needed to count
them: this script aggregates one round of LeNet-5 messages (random gradients, each node's own
codec state, encoded with :meth:`~aiotsim.compress.base.Codec.encode_rows`) on the CPU, in the
stacked and the streamed form (:class:`aiotsim.sim.aggregate.Aggregation`), under a
:class:`torch.utils._python_dispatch.TorchDispatchMode` that counts every ATen operation, and
prints the count per message and the host seconds (under the counter, which slows every
operation: compare counts, and time with ``benchmarks/batched.py``). ``--per-message`` counts the same round
decoded one message at a time (each message's ``decode_read`` into the stack, or decoded and
added on arrival), what the server did before it decoded messages together (``Codec.decode_many``).

Run: ``python benchmarks/server_ops.py [--nodes 1000] [--codecs none topk 2bit ...] [--per-message]``
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from aiotsim.compress import build_codec, codec_names
from aiotsim.compress.base import Codec, LayerInfo, Payload
from aiotsim.learn.models import build_model, layer_infos
from aiotsim.sim import aggregate

CPU = torch.device("cpu")


class Ops(TorchDispatchMode):
    """Counts the ATen operations dispatched while active."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        self.count += 1
        return func(*args, **(kwargs or {}))


def round_messages(codec: Codec, layers: list[LayerInfo], nodes: int) -> list[list[Payload]]:
    """One round's messages: ``[node][layer]`` payloads of random gradients."""
    gen = torch.Generator().manual_seed(1)
    per_layer = []
    for L in layers:
        states = [codec.init_state(L, CPU, i) for i in range(nodes)]
        per_layer.append(codec.encode_rows(torch.randn((nodes, *L.shape), generator=gen), L, states))
    return [[per_layer[j][i] for j in range(len(layers))] for i in range(nodes)]


@contextmanager
def one_by_one() -> Iterator[None]:
    """The server as it was: every message decoded on its own (``decode_many`` of one)."""
    batched, fold = Codec.decode_many, aggregate.Aggregation._fold

    def single(codec: Any, payloads: Any, layer: Any, out: Any = None) -> Any:
        if out is None:  # streamed: each decoded tensor added on its own
            return [codec.decode_read(p, layer) for p in payloads]
        for i, p in enumerate(payloads):  # stacked: each copied into its row
            out[i].copy_(codec.decode_read(p, layer))
        return out

    def fold_each(self: aggregate.Aggregation) -> None:
        pending, self.pending = self.pending, []
        for message in pending:  # folded one at a time, on arrival
            self.pending = [message]
            fold(self)

    Codec.decode_many, aggregate.Aggregation._fold = single, fold_each  # type: ignore[method-assign]
    try:
        yield
    finally:
        Codec.decode_many, aggregate.Aggregation._fold = batched, fold  # type: ignore[method-assign]


def count(codec: Codec, layers: list[LayerInfo], messages: list[list[Payload]], streamed: bool) -> tuple[int, float]:
    """``(operations, host s)`` of aggregating ``messages`` (one node each)."""
    none = build_codec("none")
    agg = aggregate.Aggregation([codec] * len(layers), none, layers, CPU, streamed=streamed, weighted=True)
    with Ops() as ops:
        t0 = time.perf_counter()
        for m in messages:
            agg.add(m, 1)
        agg.result()
        return ops.count, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=_positive, default=1000, help="messages in the round, >= 1")
    ap.add_argument(
        "--codecs", nargs="+", choices=codec_names(), default=["none", "2bit", "qsgd", "topk", "threshold", "dgc"]
    )
    ap.add_argument("--per-message", action="store_true", help="decode message by message, as before")
    args = ap.parse_args()
    torch.set_num_threads(1)
    layers = layer_infos(build_model("lenet5", (1, 28, 28), 10, seed=0))
    how = "one message at a time" if args.per_message else "batched (Codec.decode_many)"
    print(f"LeNet-5 ({len(layers)} layers), {args.nodes} messages, decoded {how}; ops = dispatched ATen operations")
    print("host s: under the counter, which slows every operation")
    head = f"{'stacked ops':>12} {'per msg':>8} {'host s':>7} {'streamed ops':>13} {'per msg':>8} {'host s':>7}"
    print(f"{'codec':<10} {head}")
    for name in args.codecs:
        codec = build_codec(name, seed=0)
        messages = round_messages(codec, layers, args.nodes)
        with one_by_one() if args.per_message else _nothing():
            (so, st), (fo, ft) = (count(codec, layers, messages, streamed) for streamed in (False, True))
        n = args.nodes
        print(f"{name:<10} {so:>12,} {so / n:>8.1f} {st:>7.2f} {fo:>13,} {fo / n:>8.1f} {ft:>7.2f}", flush=True)


def _positive(text: str) -> int:
    """An argparse type: an integer >= 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not >= 1")
    return value


@contextmanager
def _nothing() -> Iterator[None]:
    yield


if __name__ == "__main__":
    main()
