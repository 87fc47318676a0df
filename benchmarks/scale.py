"""Benchmark: fleet scale. Wall time per iteration, peak memory, network-engine share, and the
ratio of wall time to the bare work of the same run.

For each case (nodes x codec x topology; LeNet-5, sync) one subprocess (so that its peak resident
memory, ``ru_maxrss``, is its own):

1. builds the cluster from the scenario (``scenarios/iot10.toml``, ``iot100``, ``iot1000``,
   ``iot10k``; hierarchical: ``hierarchical.toml`` with ``max(2, nodes // 100)`` gateways, or
   ``iot10k_hier``), with ``--iterations`` iterations and no evaluation before the end;
2. runs it, timing the network engine (:data:`NETWORK_ENTRIES`: :meth:`Network.send`, its
   controller step, :meth:`Network.wire_bytes_for`) and counting the node gradients, codec
   encodes and decodes the run made;
3. reads the peak memory, then does the *bare work* in the same process: the same number of
   single-node batch gradients (one node's batch, the same :class:`GradientComputer`) and the same
   numbers of encodes and decodes with the same codecs, in a plain loop (the server's batched
   decodes as batches of the same sizes; a run with batched node gradients, column ``grads``:
   its vectorized passes as passes of as many copies of the node's batch, and its batched
   encodes as :meth:`~aiotsim.compress.base.Codec.encode_rows` calls of the same sizes);
4. prints one JSON line.

Columns: ``s/it`` wall seconds per iteration of the run (setup excluded, shown apart); ``peak MB``
the subprocess's peak resident memory; ``KB/node`` (peak - resident memory before the cluster was
built) / nodes; ``net %`` the network engine's share of the run's wall time; ``ratio`` run wall /
bare-work wall (the issue's target: <= 1.2); ``-net`` the same ratio without the network engine's
time, (run wall - network time) / bare wall: the simulator's own overhead on the real work;
``steady`` the ratio without the first round: wall time from the second round's dispatch to the
end / the bare work's share of the later rounds (bare x (its - 1) / its). The first round carries
one-time work the bare loop has not (each node's state written into fresh pages, the aggregation
stack, every pair's path), so a 2-iteration case shows whether its ratio would hold over a long
run. The later rounds start at the second dispatch, not at the first iteration's metrics row:
with batched gradients a round's passes run at its dispatch, which comes before the previous
iteration's row, so until 2026-11-24 the column left a batched run's second round of gradients
out of its later time (10,000 nodes x 2, star ``none``: steady 0.11 beside a ratio of 1.13).
Measured (looped, or before that date): star ``none``, 3,000 nodes x 3 iterations, best of 3:
ratio 1.35, steady 1.35 (not reproduced on 2026-11-24, best of 2 at load 2: stacked 0.90, streamed
1.00, and streamed 1.23, steady 1.35, while it trimmed the heap at every round's end); 10,000 x 2:
ratio 1.05, steady 1.00.
``loop s`` and ``loop``: the issue's bare work taken to the letter, "the same number of
single-node batch gradients plus the same encodes and decodes, computed in a plain loop", and the
run's (best) wall time over it (:func:`looped_work`, measured once per case, in the first repeat):
for a batched run every node gradient a single-node gradient and every encode and decode one by
one; for a looped run it is its bare work. ``ratio`` holds a batched run to the stricter standard
(its own vectorized passes and batched encodes and decodes: what the simulator adds on top of the
work it did); ``loop`` shows what the batching gained over the loop the issue measured against
(iot1000, 4 samples per node: a single-node LeNet-5 gradient 3.4 ms, 1.2 ms per node in a pass).
``each`` the lowest and highest ratio of single repeats (run wall / its own bare loop's wall);
``cpu`` the ratio of the two CPU times (``time.process_time``): on a shared machine the run and
the bare loop, measured one after the other, can see different loads, which moves the wall ratio
(by 0.3 and more at a load of 2-3 on 2 CPUs) and the CPU one less, but still (a contended cache
and memory bus slow the CPU time too).

Repeats (column ``rep``, ``--repeats``): a case is measured that many times in its subprocess,
alternating run and bare loop (a fresh cluster each time), and every time column is the best
(smallest) of its repeats, the run's and the bare loop's alike: on a shared machine a single
pair can see two different loads (repeats of star 1,000 ``none`` gave ratios from 0.95 to 1.57
one at a time), while the best of each estimates the quiet machine's cost. Peak memory is that
of the first repeat. Default: 3 up to 1,000 nodes, 1 at 10,000 (whose run takes minutes).

Iterations per case (column ``its``): ``--iterations`` for every scale, or by default enough for
about 300 node gradients and at least 3 (10 nodes: 30; 100 and 1,000: 3), and 2 at 10,000 nodes:
small fleets are not measured on a handful of gradients, and a 10,000-node case stays a few
minutes (its bare work takes as long again).

``--device cuda`` runs the learning (shards, model, gradients, codecs, the bare loop alike) on the
GPU, synchronized before each clock reading, and adds the column ``GPU MB``
(``torch.cuda.max_memory_allocated``); without a CUDA device it exits 2 saying so.

Run: ``python benchmarks/scale.py [--nodes 10 100 1000 10000] [--codecs none topk]
[--topologies star hierarchical] [--iterations N] [--repeats N] [--aggregation auto|stacked|streamed]
[--batched auto|true|false] [--device cpu|cuda] [--no-loop]`` (column ``agg``: the aggregation the
run used; ``auto`` streams above 1 GB of stack; column ``grads``: ``nodes.batched`` as resolved,
``auto`` mapping passes on the CPU from 100 nodes of LeNet-5; since 2026-11-25 it fills them node
by node, at any fleet size, from 16 samples per node: iot10, iot100 and iot10k, not iot1000's 4).
One torch thread per case; each case's
process keeps its freed heap blocks as the ``aiotsim`` command does
(:func:`aiotsim.sim.allocator.keep_freed_blocks`, since 2026-11-25).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# the network engine's work: starting a transfer, its rate controller's step (from its SimPy
# timer), and the wire size of a message (asked by the traffic accounting); missing ones skipped
NETWORK_ENTRIES = ("send", "_step", "wire_bytes_for")
STAR_FILES = {10: "iot10.toml", 100: "iot100.toml", 1000: "iot1000.toml", 10_000: "iot10k.toml"}


def scenario_for(
    nodes: int, codec: str, topology: str, iterations: int, aggregation: str = "auto", batched: str = "auto"
) -> Any:
    """The case's scenario (see the module docstring)."""
    from aiotsim.api import as_scenario

    over: dict[str, Any] = {
        "scenario.iterations": iterations,
        "compressor.name": codec,
        "training.eval_every": 10**6,  # evaluation is not the subject here
        "data.eval_samples": 100,
        "training.aggregation": aggregation,
        "nodes.batched": {"true": True, "false": False}.get(batched, batched),
    }
    if topology == "star":
        path = STAR_FILES.get(nodes, "iot1000.toml")
    else:
        path = "iot10k_hier.toml" if nodes >= 10_000 else "hierarchical.toml"
        over["network.gateways"] = max(2, nodes // 100)
    over["nodes.count"] = nodes
    return as_scenario(ROOT / "scenarios" / path, over)


def default_iterations(nodes: int) -> int:
    """Iterations of a case when ``--iterations`` is not given (see the module docstring)."""
    return 2 if nodes >= 10_000 else max(3, -(-300 // nodes))


def default_repeats(nodes: int) -> int:
    """Repeats of a case when ``--repeats`` is not given (see the module docstring)."""
    return 1 if nodes >= 10_000 else 3


def rss_mb() -> float:
    """Peak resident memory of this process so far, MB (Linux reports KB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_case(
    nodes: int,
    codec: str,
    topology: str,
    iterations: int,
    repeats: int = 1,
    aggregation: str = "auto",
    batched: str = "auto",
    device: str = "cpu",
    loop: bool = True,
) -> dict[str, Any]:
    """One case in this process, ``repeats`` times (run, then bare loop); returns its row, each
    time column the best of its repeats and the peak memory the first repeat's. ``loop``: measure
    the literal bare work too (:func:`looped_work`, in the first repeat)."""
    reps = range(max(repeats, 1))
    rows = [run_once(nodes, codec, topology, iterations, aggregation, batched, device, loop and k == 0) for k in reps]
    row = dict(rows[0])
    for key in ("wall_s", "cpu_s", "bare_s", "bare_cpu_s", "net_s", "later_s"):
        row[key] = min(r[key] for r in rows)
    if row["grads"] == "looped" and loop:  # its bare work is the literal one: the same best of the repeats
        row["loop_s"] = row["bare_s"]
    row.update(
        repeats=len(rows),
        s_per_it=row["wall_s"] / iterations,
        net_share=row["net_s"] / row["wall_s"],
        ratio=row["wall_s"] / row["bare_s"],
        steady=steady_ratio(row["later_s"], row["bare_s"], iterations),
        cpu_ratio=row["cpu_s"] / row["bare_cpu_s"],
        ratios=[r["ratio"] for r in rows],
        loop_ratio=row["wall_s"] / row["loop_s"],
    )
    return row


def steady_ratio(later_s: float, bare_s: float, iterations: int) -> float:
    """Wall time of the iterations after the first / the bare work's share of them (``nan`` for
    one iteration): the ratio a long run tends to, without the first iteration's one-time work."""
    if iterations < 2:
        return math.nan
    return later_s / (bare_s * (iterations - 1) / iterations)


def run_once(
    nodes: int,
    codec: str,
    topology: str,
    iterations: int,
    aggregation: str = "auto",
    batched: str = "auto",
    device: str = "cpu",
    looped: bool = False,
) -> dict[str, Any]:
    """One run of a case and its bare loop in this process (the learning on ``device``: shards,
    model, gradients and codecs); returns its row. ``looped``: a batched run's
    :func:`looped_work` too (``loop_s``; a looped run's is its bare work, and without ``looped``
    it is ``nan``)."""
    import torch

    from aiotsim.network.flows import Network
    from aiotsim.results.store import RunWriter
    from aiotsim.sim.aggregate import sync_device
    from aiotsim.sim.runner import run_cluster
    from aiotsim.sim.world import Cluster

    torch.set_num_threads(1)
    sc = scenario_for(nodes, codec, topology, iterations, aggregation, batched)
    net_s = [0.0]

    def timed(fn: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                net_s[0] += time.perf_counter() - t0

        return wrapper

    originals = {name: getattr(Network, name) for name in NETWORK_ENTRIES if hasattr(Network, name)}
    for name, fn in originals.items():  # the engine's entry points (none calls another of them)
        setattr(Network, name, timed(fn))
    base_mb = rss_mb()
    t0 = time.perf_counter()
    cluster = Cluster(sc, device=device)
    setup_s = time.perf_counter() - t0
    counts = count_work(cluster.learning)
    with tempfile.TemporaryDirectory() as tmp, mark_dispatches() as dispatched:
        writer = RunWriter(tmp, sc.to_toml())
        marks = mark_iterations(writer)
        sync_device(cluster.learning.device)
        t0, c0 = time.perf_counter(), time.process_time()
        summary = run_cluster(cluster, writer)
        sync_device(cluster.learning.device)  # the run's queued device work is its own
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    iteration_s = [b - a for a, b in zip([t0, *marks], marks)]  # s, wall time up to each iteration's metrics row
    # the later rounds: from the second round's dispatch (which, batched, computes its gradients
    # before the first iteration's row is written) to the end
    later_s = wall - (dispatched[1] - t0) if len(dispatched) > 1 else wall
    for name, fn in originals.items():  # unwrapped again for the next repeat
        setattr(Network, name, fn)
    peak_mb = rss_mb()
    gpu_peak_mb = torch.cuda.max_memory_allocated() / 2**20 if device == "cuda" else 0.0
    bare, bare_cpu = bare_work(cluster.learning, counts)
    loop = math.nan  # s, the literal bare work (looped_work): measured once per case
    if looped:
        loop = bare if cluster.learning.batched is None else looped_work(cluster.learning, counts)[0]
    return {
        "nodes": nodes, "codec": codec, "topology": topology, "iterations": iterations,
        "aggregation": cluster.learning.aggregation_mode,
        "grads": "looped" if cluster.learning.batched is None else "batched",
        "status": summary.get("status", "complete"), "setup_s": setup_s, "wall_s": wall,
        "s_per_it": wall / iterations, "peak_mb": peak_mb, "kb_per_node": (peak_mb - base_mb) * 1024 / nodes,
        "gpu_peak_mb": gpu_peak_mb, "device": device,
        "net_s": net_s[0], "net_share": net_s[0] / wall, "bare_s": bare, "ratio": wall / bare, "cpu_s": cpu,
        "bare_cpu_s": bare_cpu, "cpu_ratio": cpu / bare_cpu, "iteration_s": iteration_s, "loop_s": loop,
        "later_s": later_s,
        "gradients": counts["gradients"], "encodes": counts["encodes"], "decodes": counts["decodes"],
        "decode_batches": len(counts["batches"]), "passes": counts["passes"],
        "encode_batches": len(counts["encode_batches"]),
        "encode_blocks": sum(whole for *_, whole in counts["encode_batches"]),  # given one [nodes, n] tensor
    }  # fmt: skip


@contextlib.contextmanager
def mark_dispatches() -> Iterator[list[float]]:
    """``perf_counter`` times at which a sync round is dispatched (each call of the sync strategy's
    ``dispatch_round``), filled in as the run goes."""
    from aiotsim.sim.strategies import sync

    marks: list[float] = []
    dispatch = sync.dispatch_round

    def marking(*args: Any, **kwargs: Any) -> Any:
        marks.append(time.perf_counter())
        return dispatch(*args, **kwargs)

    sync.dispatch_round = marking
    try:
        yield marks
    finally:
        sync.dispatch_round = dispatch


def mark_iterations(writer: Any) -> list[float]:
    """``perf_counter`` times at which ``writer`` gets each metrics row (one per sync iteration),
    filled in as the run goes."""
    marks: list[float] = []
    write = writer.write_metrics

    def marking(row: dict[str, Any]) -> None:
        marks.append(time.perf_counter())
        write(row)

    writer.write_metrics = marking
    return marks


def count_work(learning: Any) -> dict[str, Any]:
    """Count the gradients, encodes and decodes the run makes (wrappers on the instances), the
    server's batched decodes (``"batches"``: ``(layer index, messages)`` per
    :meth:`~aiotsim.compress.base.Codec.decode_many` call, whose messages count as decodes
    too) and, with batched node gradients, the nodes of each vectorized pass (``"passes"``) and
    the batched encodes (``"encode_batches"``: ``(layer index, nodes, one tensor)`` per
    :meth:`~aiotsim.compress.base.Codec.encode_rows` call of the engine's; a node's own ``encode``,
    one row's ``encode_rows``, counts as an encode only)."""
    import torch

    from aiotsim.compress.base import Codec

    counts: dict[str, Any] = {"gradients": 0, "encodes": 0, "decodes": 0, "batches": [], "passes": []}
    counts["encode_batches"] = []
    inside = [False]  # in a batched decode or encode: its per-message fallback is not counted again

    def counting(key: str, fn: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if inside[0]:
                return fn(*args, **kwargs)
            counts[key] += 1
            inside[0] = True
            try:
                return fn(*args, **kwargs)
            finally:
                inside[0] = False

        return wrapper

    def in_batch(key: str, fn: Any, record: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if inside[0]:  # within a counted call: a node's encode is one row's encode_rows
                return fn(*args, **kwargs)
            counts[key].append(record(*args))
            inside[0] = True
            try:
                return fn(*args, **kwargs)
            finally:
                inside[0] = False

        return wrapper

    def decoded(payloads: Any, layer: Any, out: Any = None) -> tuple[int, int]:
        counts["decodes"] += len(payloads)
        return learning.layers.index(layer), len(payloads)

    if learning.batched is not None:
        passes = learning.batched.gradients
        learning.batched.gradients = in_batch("passes", passes, lambda params, xs, ys: int(xs.shape[0]))
    learning.computer.gradient = counting("gradients", learning.computer.gradient)
    for codec in {id(c): c for c in (learning.codec, learning.dense)}.values():
        codec.encode = counting("encodes", codec.encode)
        codec.decode_many = in_batch("batches", codec.decode_many, decoded)
        codec.encode_rows = in_batch(
            "encode_batches",
            codec.encode_rows,
            lambda grads, layer, states: (learning.layers.index(layer), len(grads), isinstance(grads, torch.Tensor)),
        )
        codec.decode = counting("decodes", codec.decode)
        read = getattr(type(codec), "decode_read", None)  # (absent before decode_read existed)
        if read is not None and read is not getattr(Codec, "decode_read", None):  # the default calls decode
            # a decode the aggregation only reads (a view of the payload): a decode all the same
            codec.decode_read = counting("decodes", codec.decode_read)
    return counts


def bare_work(learning: Any, counts: dict[str, Any]) -> tuple[float, float]:
    """``(wall s, CPU s)`` of the same numbers of gradients, encodes and decodes in a plain loop,
    with one node's batch, the run's gradient computer and codecs (one node's fresh codec states).
    The server's decodes are made as the run made them: each batched decode as one
    :meth:`~aiotsim.compress.base.Codec.decode_many` of as many copies of the node's payload,
    the rest one by one; a batched run's passes as passes over as many copies of the node's batch
    (each node's result taken, as the run takes it), its batched encodes as
    :meth:`~aiotsim.compress.base.Codec.encode_rows` of as many copies of the gradient (fresh states
    per node; as one ``[nodes, *shape]`` tensor where the run gave one)."""
    import torch

    from aiotsim.sim.aggregate import sync_device

    layers, codecs = learning.layers, learning.layer_codecs
    local = learning.local_state(0)
    x, y = local.stream.next()
    for codec in (learning.codec, learning.dense):  # the counting wrappers off
        for name in ("encode", "encode_rows", "decode", "decode_many", "decode_read"):
            codec.__dict__.pop(name, None)
    learning.computer.__dict__.pop("gradient", None)
    if learning.batched is not None:
        learning.batched.__dict__.pop("gradients", None)
    grads = learning.computer.gradient(None, x, y).grads
    payloads = [c.encode(g, L, s) for c, g, L, s in zip(codecs, grads, layers, local.states)]
    batches: list[tuple[int, int]] = counts["batches"]
    encode_batches: list[tuple[int, int, bool]] = counts["encode_batches"]
    widest = max((m for _, m, _ in encode_batches), default=0)
    # the encodes that got a pass's rows as one tensor get one too (the same copies, made now)
    blocks = {(j, m): torch.stack([grads[j]] * m) for j, m, whole in encode_batches if whole}
    batch_states = [learning.new_states(i) for i in range(widest)]  # made before the clock starts
    decodes = counts["decodes"] - sum(m for _, m in batches)  # one by one
    sync_device(learning.device)
    t0, c0 = time.perf_counter(), time.process_time()
    sq = learning.codec.needs_sq_grad  # Gradient Variance: the passes' per-sample squares too, as the run's
    for n in counts["passes"]:
        for r in learning.batched.gradients(None, x.expand(n, *x.shape), y.expand(n, *y.shape), per_sample_sq=sq):
            r.take()
    for j, m, whole in encode_batches:
        rows = blocks[(j, m)] if whole else [grads[j]] * m
        codecs[j].encode_rows(rows, layers[j], [st[j] for st in batch_states[:m]])
    work = (counts["gradients"], counts["encodes"], decodes)
    plain_loop(learning, (x, y), grads, payloads, local.states, work, batches)
    sync_device(learning.device)
    return time.perf_counter() - t0, time.process_time() - c0


def looped_work(learning: Any, counts: dict[str, Any]) -> tuple[float, float]:
    """``(wall s, CPU s)`` of the issue's bare work taken to the letter: every node gradient of the
    run as a single-node gradient and every encode and decode one by one, in a plain loop (a
    batched run's passes, batched encodes and batched decodes too), with one node's batch and
    states, after :func:`bare_work` (which takes the counting wrappers off). For a batched run
    this is the floor the batching is measured against (``loop`` column); a looped run's is its
    bare work."""
    from aiotsim.sim.aggregate import sync_device

    local = learning.local_state(0)
    x, y = local.stream.next()
    grads = learning.computer.gradient(None, x, y).grads
    payloads = [c.encode(g, L, s) for c, g, L, s in zip(learning.layer_codecs, grads, learning.layers, local.states)]
    gradients = counts["gradients"] + sum(counts["passes"])
    encodes = counts["encodes"] + sum(m for _, m, _ in counts["encode_batches"])
    sync_device(learning.device)
    t0, c0 = time.perf_counter(), time.process_time()
    plain_loop(learning, (x, y), grads, payloads, local.states, (gradients, encodes, counts["decodes"]))
    sync_device(learning.device)
    return time.perf_counter() - t0, time.process_time() - c0


def plain_loop(
    learning: Any,
    batch: tuple[Any, Any],
    grads: list[Any],
    payloads: list[Any],
    states: list[Any],
    work: tuple[int, int, int],
    batches: list[tuple[int, int]] | None = None,
) -> None:
    """``work = (gradients, encodes, decodes)`` one by one on one node's ``batch`` and ``states``,
    round by round as a node's work comes (a gradient, then each layer's encode and decode;
    ``grads`` and ``payloads``: the node's, made before the clock, encoded and decoded until a
    gradient replaces them), and ``batches`` (``(layer index, messages)``) as batched decodes of
    as many copies of the layer's payload, a round's layers each round."""
    layers, codecs = learning.layers, learning.layer_codecs
    n_layers = len(layers)
    gradients, encodes, decodes = work
    batches = batches or []
    rounds = max(gradients, -(-encodes // n_layers), -(-decodes // n_layers), -(-len(batches) // n_layers))
    sq = None  # Gradient Variance's per-sample squares of the latest gradient, as the run sets them
    for k in range(rounds):
        if k < gradients:
            res = learning.computer.gradient(None, *batch, per_sample_sq=learning.codec.needs_sq_grad)
            grads, sq = res.grads, res.sq_grads
        for j in range(n_layers):
            if encodes > 0:
                states[j].sq_grad = sq[j] if sq is not None else None
                payloads[j] = codecs[j].encode(grads[j], layers[j], states[j])
                encodes -= 1
            if decodes > 0:
                codecs[j].decode(payloads[j], layers[j])
                decodes -= 1
        for j, m in batches[k * n_layers : (k + 1) * n_layers]:
            codecs[j].decode_many([payloads[j]] * m, layers[j])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument("--codecs", nargs="+", default=["none", "topk"])
    parser.add_argument("--topologies", nargs="+", default=["star", "hierarchical"])
    parser.add_argument("--iterations", type=int, default=None, help="per case; default: by scale")
    parser.add_argument("--repeats", type=int, default=None, help="per case; default: 3, 1 at 10,000 nodes")
    parser.add_argument("--timeout", type=float, default=1800.0, help="per case, s")
    parser.add_argument(
        "--aggregation", default="auto", choices=["auto", "stacked", "streamed"], help="training.aggregation"
    )
    parser.add_argument("--batched", default="auto", choices=["auto", "true", "false"], help="nodes.batched")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="where the learning runs")
    parser.add_argument("--no-loop", action="store_true", help="skip the literal bare work (columns loop s, loop: nan)")
    case_args = ("NODES", "CODEC", "TOPOLOGY", "ITERATIONS", "REPEATS", "AGGREGATION", "BATCHED", "DEVICE", "LOOP")
    parser.add_argument("--case", nargs=9, metavar=case_args, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:
        from aiotsim.sim.allocator import keep_freed_blocks

        keep_freed_blocks()  # the heap policy of the aiotsim command, whose runs this process stands for
        n, codec, topo, its, reps, agg, batched, device, loop = args.case
        print(json.dumps(run_case(int(n), codec, topo, int(its), int(reps), agg, batched, device, loop == "1")))
        return
    if args.device == "cuda" and not cuda_available():
        parser.error(
            "--device cuda: this machine has no CUDA device (torch.cuda.is_available() is False); use --device cpu"
        )
    its_note = f"{args.iterations} iterations" if args.iterations else "iterations by scale (column its)"
    print(f"LeNet-5, sync, {its_note} per case, learning on {args.device}, 1 torch thread; load average at start:"
          f" {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")  # fmt: skip
    header = (
        f"{'topology':>12} {'nodes':>6} {'codec':>5} {'agg':>8} {'grads':>7} {'its':>4} {'rep':>3}"
        f" {'setup s':>8} {'s/it':>8}"
        f" {'peak MB':>8}"
        f" {'KB/node':>8} {'net %':>6} {'bare s':>7} {'ratio':>6} {'-net':>6} {'cpu':>6} {'steady':>6} {'each':>10}"
        f" {'loop s':>7} {'loop':>5}"
    ) + (f" {'GPU MB':>7}" if args.device == "cuda" else "")
    print(header)
    print("-" * len(header))
    # this checkout first, then whatever the caller had (tools/gpu_checks.sh puts simpy's wheels there)
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": path}
    for topo in args.topologies:
        for n in args.nodes:
            for codec in args.codecs:
                its = args.iterations or default_iterations(n)
                reps = args.repeats or default_repeats(n)
                cmd = [sys.executable, __file__, "--case", str(n), codec, topo, str(its), str(reps), args.aggregation]
                cmd += [args.batched, args.device, "0" if args.no_loop else "1"]
                try:
                    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=args.timeout)
                except subprocess.TimeoutExpired:
                    print(f"{topo:>12} {n:>6} {codec:>5} timed out after {args.timeout:.0f} s")
                    continue
                if out.returncode != 0:
                    print(f"{topo:>12} {n:>6} {codec:>5} failed: {out.stderr.strip().splitlines()[-1:]}")
                    continue
                r = json.loads(out.stdout.strip().splitlines()[-1])
                own = r["wall_s"] * (1 - r["net_share"]) / r["bare_s"]  # (wall - network) / bare
                print(
                    f"{topo:>12} {n:>6} {codec:>5} {r['aggregation']:>8} {r['grads']:>7} {its:>4} {reps:>3}"
                    f" {r['setup_s']:>8.2f}"
                    f" {r['s_per_it']:>8.3f}"
                    f" {r['peak_mb']:>8.0f} {r['kb_per_node']:>8.0f} {100 * r['net_share']:>5.1f}%"
                    f" {r['bare_s']:>7.2f} {r['ratio']:>6.2f} {own:>6.2f} {r['cpu_ratio']:>6.2f} {r['steady']:>6.2f}"
                    f" {min(r['ratios']):>4.2f}-{max(r['ratios']):<4.2f}"
                    f" {r['loop_s']:>7.2f} {r['loop_ratio']:>5.2f}"
                    + (f" {r['gpu_peak_mb']:>7.0f}" if args.device == "cuda" else ""),
                    flush=True,
                )
    print(f"load average at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


def cuda_available() -> bool:
    """Whether torch sees a CUDA device (torch imported only here, in the parent process)."""
    import torch

    return torch.cuda.is_available()


if __name__ == "__main__":
    main()
