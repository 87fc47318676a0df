"""Scenario files: frozen dataclasses, TOML loading, command-line overrides and validation.

A scenario is a TOML file with one table per section (``[scenario]``, ``[data]``, ``[model]``,
``[training]``, ``[compressor]``, ``[nodes]``, ``[network]``, ``[energy]``). Every key has a default,
a type, a one-line help and a range check, declared once on the section's dataclass field with
:func:`aiotsim.schema.opt`, so validation, ``--set`` overrides and the resolved-scenario file all
come from the same schema. ``[[nodes.group]]``, ``[[network.vertex]]`` and ``[[network.link]]``
blocks are dataclasses checked by the same :func:`aiotsim.schema.check_fields`.

Validation reports every problem at once, one line each, as ``FILE: section.key: reason`` (unknown
keys get a did-you-mean; unknown dataset/model/compressor/profile names list the valid ones).
Upper bounds are sane limits of what a run can do (stated in each key's help), not physics.

Checks across sections (a transport and its loss, a topology and its traces, ...) are in
:mod:`aiotsim.config_checks`. Checks that need the simulation itself (custom topologies, radio
profiles, the memory estimate of the world) live one layer up, in :mod:`aiotsim.validate`: this
module imports nothing of ``aiotsim.sim``.
"""

from __future__ import annotations

import dataclasses
import tomllib
import typing
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w

from aiotsim.config_checks import cross_checks, group_problems
from aiotsim.errors import ConfigError
from aiotsim.schema import (
    MAX_MBPS,
    MAX_SECONDS,
    MIN_MBPS,
    between,
    check_fields,
    did_you_mean,
    fraction,
    open_fraction,
    opt,
    positive_at_most,
    unit_interval,
    zero_or_between,
)

# ---- bounds: the most a run is meant to handle (stated in the help texts) -------------------------
MAX_SEED = 2**32 - 1  # numpy's and torch's seeds both take it
MAX_ITERATIONS = 1_000_000
MAX_NODES = 100_000
MAX_BATCH = 65_536
MAX_SAMPLES = 1_000_000  # synthetic train/test sizes, eval_samples
MAX_CLASSES = 1_000
MAX_SHAPE_SIDE = 1_024  # synthetic C, H and W
MAX_LR = 1_000.0
MAX_WEIGHT_DECAY = 1.0
MAX_NOISE = 1_000.0
MIN_RETRY_S = 1e-3
MAX_MS = 1e6  # 1000 s of latency, jitter
# The finest trace window, ms (1 us): a thousand times the engine's 1 ns time snapping (traces.SNAP_S), so a
# window is never snapped away; 5e-324 ms underflowed to a 0 s grid and divided by zero in the stagger.
MIN_RESOLUTION_MS = 1e-3
MAX_MTU = 65_535
MAX_FACTOR = 1e6  # straggler factor, group slowdown and share
MAX_ALPHA = 1e6
MAX_NAME = 100
MAX_LOCAL_STEPS = 100_000
MAX_LOCAL_EPOCHS = 1_000.0
MAX_OVERCOMMIT = 10.0


def link_rate(v: Any) -> str | None:
    """Range check of a link rate in Mbit/s: MIN_MBPS..MAX_MBPS."""
    if v <= 0:
        return f"must be > 0, got {v!r}"
    if v < MIN_MBPS:
        return f"must be >= {MIN_MBPS:g} Mbit/s (slower links overflow the simulated time), got {v!r}"
    return None if v <= MAX_MBPS else f"must be <= {MAX_MBPS:g} (a sane upper bound), got {v!r}"


RATE = link_rate  # every link rate, Mbit/s


def auto_or_bool(v: Any) -> str | None:
    """Range check: ``"auto"``, ``true`` or ``false``."""
    return None if v is True or v is False or v == "auto" else f"must be 'auto', true or false, got {v!r}"


def path_safe_name(v: Any) -> str | None:
    """A name that is also a directory name: no path separators, control characters or leading dot."""
    if not v or len(v) > MAX_NAME:
        return f"must be 1..{MAX_NAME} characters, got {v!r}"
    if v[0] == "." or any(c in "/\\" or ord(c) < 32 or ord(c) == 127 for c in v):
        return (
            "must be a plain name usable as a directory name (no '/', '\\', leading '.' or "
            f"control characters), got {v!r}"
        )
    return None


def shape_sides(v: Any) -> str | None:
    """Range check of a ``[C, H, W]`` list: three sizes in 1..MAX_SHAPE_SIDE."""
    if len(v) != 3 or any(not 1 <= d <= MAX_SHAPE_SIDE for d in v):
        return f"must be [C, H, W] with every size in 1..{MAX_SHAPE_SIDE}, got {v!r}"
    return None


def trace_nodes_range(v: int | list[int]) -> str | None:
    """``scenario.trace_nodes``: a count in -1..MAX_NODES, or distinct node indices (each below
    nodes.count: checked with the node count, :func:`_timeline_problems`)."""
    if isinstance(v, int):
        return between(-1, MAX_NODES)(v)
    bad = next((i for i in v if not 0 <= i < MAX_NODES), None)
    if bad is not None:
        return f"node indices must be in [0, {MAX_NODES - 1}], got {bad!r}"
    twice = next((i for i, times in Counter(v).items() if times > 1), None)
    if twice is not None:
        return f"node {twice} is listed twice; name each node once"
    return None


@dataclass(frozen=True)
class ScenarioSection:
    """``[scenario]``: identity and length of the run."""

    name: str = opt("scenario", "name shown in results and plots, and used in run directory names", path_safe_name)
    seed: int = opt(0, f"seed of every random choice (data split, init, codecs, network), 0..{MAX_SEED}",
                    between(0, MAX_SEED))  # fmt: skip
    iterations: int = opt(100, f"training iterations to simulate, 1..{MAX_ITERATIONS}", between(1, MAX_ITERATIONS))
    trace_nodes: int | list[int] = opt(
        -1,
        f"nodes whose tracks trace.json keeps, -1..{MAX_NODES}: -1 every node; N that many spread evenly over "
        "the fleet (node0 and every (nodes/N)-th); 0 none; or a list of node indices, e.g. [0, 17, 4242] "
        "(node17 is the trace's track 'node17'). The server, gateways and their links are always "
        "kept. A kept span costs about 300 B of memory until the run ends (4 per node and iteration)",
        trace_nodes_range,
    )


@dataclass(frozen=True)
class DataSection:
    """``[data]``: the data set and how it is split across nodes."""

    dataset: str = opt("mnist", "data set", choices="datasets", what="dataset")
    batch_size: int = opt(32, f"mini-batch size per node per iteration, 1..{MAX_BATCH}", between(1, MAX_BATCH))
    partition: str = opt(
        "iid",
        "how training data is split across nodes ('by-writer': whole writers per node, per-writer data sets)",
        choices=("iid", "dirichlet", "by-writer"),
    )
    alpha: float = opt(
        0.5, f"Dirichlet concentration for partition = 'dirichlet' (small = skewed), (0, {MAX_ALPHA:g}]",
        positive_at_most(MAX_ALPHA),
    )  # fmt: skip
    samples_per_node: int = opt(
        0,
        f"0: split the training set across the nodes (partition); > 0: every node draws this many "
        f"samples with replacement (seeded per node; dirichlet: label proportions from Dir(alpha)), "
        f"for fleets larger than the data set, 0..{MAX_SAMPLES}",
        between(0, MAX_SAMPLES),
    )
    test_fraction: float = opt(
        0.2,
        "held-out fraction of the data set for evaluation, in (0, 1); only data sets without an official "
        "test split (mnist, digits, femnist/imagefolder without a test/ directory)",
        open_fraction,
    )
    eval_samples: int = opt(
        0, f"evaluate on at most this many test samples (0 = all), 0..{MAX_SAMPLES}", between(0, MAX_SAMPLES)
    )
    synthetic_shape: list[int] = opt(
        [1, 28, 28], f"dataset = 'synthetic': input shape [C, H, W], each 1..{MAX_SHAPE_SIDE}", shape_sides
    )
    synthetic_classes: int = opt(
        10, f"dataset = 'synthetic': number of classes, 2..{MAX_CLASSES}", between(2, MAX_CLASSES)
    )
    synthetic_train_size: int = opt(
        2000, f"dataset = 'synthetic': training samples, 1..{MAX_SAMPLES}", between(1, MAX_SAMPLES)
    )
    synthetic_test_size: int = opt(
        500, f"dataset = 'synthetic': test samples, 1..{MAX_SAMPLES}", between(1, MAX_SAMPLES)
    )
    synthetic_noise: float = opt(
        4.0, f"dataset = 'synthetic': noise std relative to the class prototypes, 0..{MAX_NOISE:g}",
        between(0, MAX_NOISE),
    )  # fmt: skip
    # ---- data sets read from files ----
    path: str = opt(
        "", "file data sets (mnist-idx, fashion-mnist, cifar10, cifar100, femnist, imagefolder): the file or "
        "directory holding them; '' = the download cache (cache_dir/DATASET)",
    )  # fmt: skip
    download: bool = opt(
        False, "fetch missing files of mnist-idx, fashion-mnist, cifar10, cifar100 from their official URLs "
        "into cache_dir (MD5-checked); nothing is ever downloaded otherwise",
    )  # fmt: skip
    cache_dir: str = opt("~/.cache/aiotsim", "where downloads go and are looked for")
    normalize: bool = opt(
        True, "standardize inputs (file data sets: per-channel mean/std of the training split); false: pixels in [0, 1]"
    )
    augment: str = opt(
        "none", "per-batch augmentation, seeded per node: 'crop-flip' = random crop after 4-pixel padding + "
        "horizontal flip (CIFAR's standard)", choices=("none", "crop-flip"),
    )  # fmt: skip


@dataclass(frozen=True)
class ModelSection:
    """``[model]``: the network being trained."""

    name: str = opt("lenet5", "model architecture", choices="models", what="model")


@dataclass(frozen=True)
class TrainingSection:
    """``[training]``: optimizer, evaluation and the synchronization mode."""

    optimizer: str = opt("sgd", "server optimizer", choices=("sgd", "adam"))
    lr: float = opt(0.02, f"learning rate, (0, {MAX_LR:g}]", positive_at_most(MAX_LR))
    momentum: float = opt(
        0.9, "SGD momentum (applied on the nodes instead by codecs with momentum correction), [0, 1)", fraction
    )
    weight_decay: float = opt(0.0, f"L2 weight decay, 0..{MAX_WEIGHT_DECAY:g}", between(0, MAX_WEIGHT_DECAY))
    momentum_at: str = opt(
        "nodes",
        "where SGD momentum lives: the 'server' optimizer, or the 'nodes' (each node compresses its "
        "own velocity: DGC's momentum correction; identical to server momentum for linear codecs)",
        choices=("server", "nodes"),
    )
    momentum_masking: bool = opt(
        False,
        "with momentum on the nodes and a sparse codec, clear the velocity of every coordinate just "
        "sent (DGC's momentum factor masking); off by default: on iot10 it slows dense-ish "
        "sparsifiers (threshold 90.8% vs 95.4%)",
    )
    eval_every: int = opt(
        25,
        f"evaluate the global model every this many iterations (and always after the last one), 1..{MAX_ITERATIONS}",
        between(1, MAX_ITERATIONS),
    )
    target_accuracy: float = opt(0.9, "accuracy for time-to-accuracy, (0, 1]", unit_interval)
    mode: str = opt(
        "sync",
        "'sync' (wait for every online node), 'partial' (aggregate the first partial_k uploads), "
        "'async' (apply each gradient on arrival; an iteration is one server update), 'federated' "
        "(FedAvg rounds: nodes.per_round nodes run local_steps local SGD steps and upload model deltas)",
        choices=("sync", "partial", "async", "federated"),
    )
    partial_k: int = opt(
        0,
        "uploads aggregated per iteration in partial mode, 1..nodes.count; 0 = default: half the nodes, rounded up",
        between(0, MAX_NODES),
    )
    late: str = opt(
        "drop",
        "partial mode: uploads that miss their iteration (federated: their round's deadline or quorum) "
        "are 'drop'ped or 'apply'd late (stale, in the next aggregation)",
        choices=("drop", "apply"),
    )
    aggregation: str = opt(
        "auto",
        "how the server and gateways combine uploads: 'stacked' (all decoded, then one mean over the "
        "stack: memory nodes x model), 'streamed' (each upload decoded into float64 per-layer sums as "
        "it arrives, then dropped: memory O(model); equal to 'stacked' up to float32 rounding), 'auto' "
        "(streamed when the stack would exceed 1 GB = nodes x parameters x 4 B, else stacked)",
        choices=("auto", "stacked", "streamed"),
    )
    local_steps: int = opt(
        1, f"federated: local SGD steps per node per round, 1..{MAX_LOCAL_STEPS}", between(1, MAX_LOCAL_STEPS)
    )
    local_epochs: float = opt(
        0.0,
        f"federated: local passes over the node's shard per round instead of local_steps "
        f"(ceil(epochs x shard / batch_size) steps); 0 = use local_steps, 0..{MAX_LOCAL_EPOCHS:g}",
        between(0, MAX_LOCAL_EPOCHS),
    )
    server_lr: float = opt(1.0, f"federated: server learning rate on the averaged delta, (0, {MAX_LR:g}]",
                           positive_at_most(MAX_LR))  # fmt: skip
    server_optimizer: str = opt(
        "avg",
        "federated: how the server applies the averaged delta: 'avg' (FedAvg), 'momentum' (server "
        "momentum, FedAvgM), 'adam' (FedAdam, Reddi et al. 2021) or a plugin 'package.module:ClassName' "
        "(see aiotsim.sim.server_opt)",
        choices=("avg", "momentum", "adam"),
    )
    server_momentum: float = opt(0.9, "federated: server momentum / FedAdam beta1, [0, 1)", fraction)
    server_beta2: float = opt(0.99, "federated: FedAdam beta2, [0, 1)", fraction)
    server_tau: float = opt(1e-3, "federated: FedAdam adaptivity tau (added to sqrt(v)), (0, 1]", positive_at_most(1.0))
    round_deadline_s: float = opt(
        0.0,
        f"federated: a round closes this many simulated seconds after it opens; later uploads are "
        f"late (see late); 0 = no deadline, 0..{MAX_SECONDS:g}",
        between(0, MAX_SECONDS),
    )


@dataclass(frozen=True)
class CompressorSection:
    """``[compressor]``: the codec and its parameters (any other key is a codec parameter)."""

    name: str = opt(
        "none",
        "codec name (see `aiotsim compressors`) or a plugin 'package.module:ClassName' (docs/CODECS.md)",
        choices="compressors",
        what="compressor",
    )
    min_size: int = opt(0, "layers with fewer elements than this go uncompressed (fp32), 0..2**31", between(0, 2**31))
    downlink: str = opt(
        "model",
        "what the server sends back: the dense fp32 'model', the sparse 'union' of the aggregated "
        "update, or the update re-encoded with the codec ('compressed', bidirectional)",
        choices=("model", "union", "compressed"),
    )
    params: dict[str, Any] = opt({}, "codec parameters")


@dataclass(frozen=True)
class NodeGroup:
    """``[[nodes.group]]``: a group of nodes overriding the ``[nodes]``/``[network]`` defaults
    (unset keys, None here, take those defaults)."""

    count: int = opt(0, f"nodes in the group (required), 1..{MAX_NODES}", between(1, MAX_NODES))
    name: str | None = opt(None, "group name (default groupK)")
    device: str | None = opt(None, "compute profile of the group's nodes", choices="profiles", what="device profile")
    radio: str | None = opt(None, "radio profile of the group's nodes, for energy")
    uplink_mbps: float | None = opt(None, f"node -> server link rate, Mbit/s, {MIN_MBPS:g}..{MAX_MBPS:g}",
                                    RATE)  # fmt: skip
    downlink_mbps: float | None = opt(None, f"server -> node link rate, Mbit/s, {MIN_MBPS:g}..{MAX_MBPS:g}",
                                      RATE)  # fmt: skip
    latency_ms: float | None = opt(None, f"one-way latency, ms, 0..{MAX_MS:g}", between(0, MAX_MS))
    loss: float | None = opt(None, "packet loss probability, [0, 1)", fraction)
    jitter_ms: float | None = opt(None, f"scale of the seeded latency jitter, ms, 0..{MAX_MS:g}", between(0, MAX_MS))
    share: float | None = opt(None, f"relative data share of each node, (0, {MAX_FACTOR:g}]",
                              positive_at_most(MAX_FACTOR))  # fmt: skip
    slowdown: float | None = opt(None, f"compute slowdown factor, 1..{MAX_FACTOR:g}", between(1, MAX_FACTOR))
    uplink_trace: str | None = opt(None, "bandwidth trace of the group's uplinks (see network.uplink_trace)")
    downlink_trace: str | None = opt(None, "bandwidth trace of the group's downlinks (see network.downlink_trace)")
    trace_offset_s: float | None = opt(
        None, f"the group's trace start offset, s, 0..{MAX_SECONDS:g} (see network.trace_offset_s)",
        between(0, MAX_SECONDS),
    )  # fmt: skip


@dataclass(frozen=True)
class NodesSection:
    """``[nodes]``: how many sensor nodes, on what hardware, and how compute time is charged."""

    count: int = opt(10, f"number of sensor nodes, 1..{MAX_NODES}", between(1, MAX_NODES))
    device: str = opt("rpi4", "compute profile of the nodes", choices="profiles", what="device profile")
    compute_model: str = opt(
        "flops",
        "'flops' (FLOPs / profile FLOP/s, deterministic) or 'measured' (wall time x scale)",
        choices=("measured", "flops"),
    )
    server_device: str = opt(
        "host", "compute profile of the server (decode, aggregate, step)", choices="profiles", what="device profile"
    )
    gateway_device: str = opt(
        "jetson-nano", "compute profile of edge gateways (hierarchical)", choices="profiles", what="device profile"
    )
    radio: str = opt("wifi", "radio profile of the nodes, for energy")
    straggler_fraction: float = opt(0.0, "fraction of nodes slowed down (seeded choice), [0, 1)", fraction)
    straggler_factor: float = opt(
        1.0, f"slowdown factor of a straggler (x compute time and/or / link rate), 1..{MAX_FACTOR:g}",
        between(1, MAX_FACTOR),
    )  # fmt: skip
    straggler_kind: str = opt(
        "compute", "what a straggler slows: 'compute', 'link' or 'both'", choices=("compute", "link", "both")
    )
    straggler_mode: str = opt(
        "fixed",
        "'fixed': the same seeded nodes are always slow; 'transient': each node is slow in "
        "an iteration with probability straggler_fraction (compute only)",
        choices=("fixed", "transient"),
    )
    dropout_prob: float = opt(0.0, "chance that an online node is offline at its next dispatch, [0, 1)", fraction)
    rejoin_prob: float = opt(0.5, "chance that an offline node is back at its next dispatch, (0, 1]", unit_interval)
    state_dtype: str = opt(
        "float32",
        "storage of per-node residuals and velocities between rounds: 'float32', or 'float16' (half the"
        " memory; each step still computes in fp32, from the rounded state)",
        choices=("float32", "float16"),
    )
    residual_on_rejoin: str = opt(
        "keep",
        "a rejoining node's error-feedback residuals: 'keep' (sent later) or 'reset' (dropped)",
        choices=("keep", "reset"),
    )
    per_round: float = opt(
        0.0,
        "federated: nodes selected per round, a count (>= 1, whole) or a fraction of nodes.count "
        "(< 1, rounded up); 0 = every node",
        between(0, MAX_NODES),
    )
    overcommit: float = opt(
        0.0,
        f"federated: select ceil(per_round x (1 + overcommit)) nodes and close the round at the first "
        f"per_round uploads (FedScale uses 0.3), 0..{MAX_OVERCOMMIT:g}",
        between(0, MAX_OVERCOMMIT),
    )
    availability_trace: str = opt(
        "",
        "federated: CSV file of per-node online intervals (node,start_s,end_s); a listed node is online "
        "only inside its intervals and loses an update when it goes offline before the upload arrives",
    )
    retry_s: float = opt(
        1.0, f"async mode: seconds before an offline node is tried again, {MIN_RETRY_S:g}..{MAX_SECONDS:g}",
        between(MIN_RETRY_S, MAX_SECONDS),
    )  # fmt: skip
    group: list[NodeGroup] = opt([], "[[nodes.group]] blocks: heterogeneous node groups")
    batched: str | bool = opt(
        "auto",
        "compute the gradients of nodes on one model version (sync, partial) in one vectorized "
        "pass: true, false, or 'auto' (batched on CUDA; on the CPU for fleets of >= 100 nodes of a "
        "batch-norm-free model, where it measured faster; else looped)",
        auto_or_bool,
    )
    batch_chunk: int = opt(
        0, f"nodes per batched gradient pass; 0: as many as a memory budget holds, 0..{MAX_NODES}",
        between(0, MAX_NODES),
    )  # fmt: skip


@dataclass(frozen=True)
class VertexSpec:
    """``[[network.vertex]]``: a named vertex of a custom topology."""

    name: str = opt("", "vertex name (required)")
    role: str = opt("node", "what the vertex is", choices=("node", "server", "gateway", "relay"))
    aggregator: str | None = opt(None, "vertex that aggregates this one's gradients (default: nearest server)")


@dataclass(frozen=True)
class LinkSpec:
    """``[[network.link]]``: a link of a custom topology (``from`` is spelled ``from_`` in Python)."""

    from_: str = opt("", "source vertex (required)")
    to: str = opt("", "destination vertex (required)")
    mbps: float = opt(0.0, f"link rate, Mbit/s (required), {MIN_MBPS:g}..{MAX_MBPS:g}", RATE)
    latency_ms: float = opt(0.0, f"one-way latency, ms, 0..{MAX_MS:g}", between(0, MAX_MS))
    name: str | None = opt(None, "link name (default FROM->TO)")
    loss: float = opt(0.0, "packet loss probability, [0, 1)", fraction)
    jitter_ms: float = opt(0.0, f"scale of the seeded latency jitter, ms, 0..{MAX_MS:g}", between(0, MAX_MS))
    mtu: int = opt(1500, f"maximum transmission unit, bytes, 100..{MAX_MTU}", between(100, MAX_MTU))
    header_bytes: int = opt(40, "header bytes per packet (< mtu)", between(0, MAX_MTU))
    framing_bytes: int = opt(0, "link-layer framing bytes per packet", between(0, MAX_MTU))
    acks_per_packet: float = opt(0.0, "ACK packets per data packet charged to this link, 0..100", between(0, 100))
    directed: bool = opt(False, "one direction only (default: two links, a->b and b->a)")
    trace: str = opt("", "bandwidth trace file replacing mbps (see network.uplink_trace); '' = constant mbps")
    trace_offset_s: float = opt(
        0.0, f"the trace's start offset, s, 0..{MAX_SECONDS:g} (plus the seeded stagger, see network.trace_stagger)",
        between(0, MAX_SECONDS),
    )  # fmt: skip


@dataclass(frozen=True)
class NetworkSection:
    """``[network]``: topology and link settings (Mbit/s = 1e6 bits/s)."""

    topology: str = opt("star", "network topology", choices=("star", "hierarchical", "ring", "shared-medium", "custom"))
    uplink_mbps: float = opt(10.0, f"node -> server link rate, Mbit/s, {MIN_MBPS:g}..{MAX_MBPS:g}", RATE)
    downlink_mbps: float = opt(10.0, f"server -> node link rate, Mbit/s, {MIN_MBPS:g}..{MAX_MBPS:g}", RATE)
    latency_ms: float = opt(5.0, f"one-way latency of a node's link, ms, 0..{MAX_MS:g}", between(0, MAX_MS))
    server_mbps: float = opt(
        100.0, f"server link rate shared by all flows (each direction), Mbit/s, {MIN_MBPS:g}..{MAX_MBPS:g}",
        RATE,
    )  # fmt: skip
    mtu: int = opt(1500, f"maximum transmission unit, bytes, 100..{MAX_MTU}", between(100, MAX_MTU))
    header_bytes: int = opt(40, "TCP/IP header bytes per packet, 0..mtu-1", between(0, MAX_MTU))
    loss: float = opt(0.0, "packet loss probability, [0, 1)", fraction)
    jitter_ms: float = opt(0.0, f"scale of the seeded latency jitter, ms, 0..{MAX_MS:g}", between(0, MAX_MS))
    gateways: int = opt(
        2, "hierarchical: edge gateways (nodes are split evenly across them), 1..nodes.count", between(1, MAX_NODES)
    )
    backhaul_up_mbps: float = opt(
        50.0, f"hierarchical: gateway -> server link rate, Mbit/s, {MIN_MBPS:g}..{MAX_MBPS:g}", RATE
    )
    backhaul_down_mbps: float = opt(
        50.0, f"hierarchical: server -> gateway link rate, Mbit/s, {MIN_MBPS:g}..{MAX_MBPS:g}", RATE
    )
    backhaul_latency_ms: float = opt(
        20.0, f"hierarchical: one-way latency of the backhaul, ms, 0..{MAX_MS:g}", between(0, MAX_MS)
    )
    gateway_mode: str = opt(
        "reencode",
        "hierarchical: a gateway sends its nodes' summed gradient 're-encode'd with the codec or 'dense' fp32",
        choices=("reencode", "dense"),
    )
    channel_mbps: float = opt(
        10.0, f"shared-medium: capacity of the one channel all nodes share, Mbit/s, {MIN_MBPS:g}..{MAX_MBPS:g}",
        RATE,
    )  # fmt: skip
    uplink_trace: str = opt(
        "",
        "bandwidth trace of every node's uplink instead of uplink_mbps (star, hierarchical sensor tier, "
        "ring): a Mahimahi file (one line per 1,500-byte delivery opportunity, in ms; loops with the last "
        "timestamp as period) or a .csv of 'time_s, mbps' rows (piecewise constant, loops); relative to the "
        "scenario file (given with --set: to the working directory); '' = constant",
    )
    downlink_trace: str = opt("", "bandwidth trace of every node's downlink instead of downlink_mbps (as uplink_trace)")
    trace_offset_s: float = opt(
        0.0, f"where in its trace every node starts at time 0, s, 0..{MAX_SECONDS:g}", between(0, MAX_SECONDS)
    )
    trace_stagger: str = opt(
        "random",
        "'random': each node (each traced custom link) also starts at a seeded uniform offset in [0, period) "
        "so nodes do not move in lockstep; 'none': all start at trace_offset_s",
        choices=("random", "none"),
    )
    trace_resolution_ms: float = opt(
        0.0,
        f"average every trace over windows of this many ms: 0 (as written: 1 ms for Mahimahi) or "
        f"{MIN_RESOLUTION_MS:g}..{MAX_MS:g}; each window keeps its bytes, the engine wakes at most once per "
        "window and traced link",
        zero_or_between(MIN_RESOLUTION_MS, MAX_MS),
    )
    loss_model: str = opt(
        "bernoulli",
        "packet loss of the node links (every link of a custom topology): 'bernoulli' (independent, the "
        "expected cost of `loss`) or 'gilbert-elliott' (bursty two-state chain of the ge_* keys, lost "
        "packets sampled per transfer, seeded; then every loss key must be 0)",
        choices=("bernoulli", "gilbert-elliott"),
    )
    ge_p_good_bad: float = opt(0.01, "gilbert-elliott: chance per packet of going good -> bad, (0, 1]", unit_interval)
    ge_p_bad_good: float = opt(0.3, "gilbert-elliott: chance per packet of going bad -> good, (0, 1]", unit_interval)
    ge_loss_good: float = opt(0.0, "gilbert-elliott: loss probability in the good state, [0, 1)", fraction)
    ge_loss_bad: float = opt(0.5, "gilbert-elliott: loss probability in the bad state, [0, 1)", fraction)
    link: list[LinkSpec] = opt(
        [], "custom: [[network.link]] from, to, mbps, latency_ms (+ loss, jitter_ms, mtu, directed, trace)"
    )
    vertex: list[VertexSpec] = opt([], "custom: [[network.vertex]] name, role (server/gateway/relay/node), aggregator")
    transport: str = opt(
        "tcp",
        "'tcp': congestion windows (slow start, loss response, idle restart) on top of max-min fair "
        "sharing; 'ideal': the fluid model alone (each flow gets its fair share at once)",
        choices=("tcp", "ideal"),
    )
    link_defaults: str = opt(
        "network",
        "where a node's link rate/latency/loss come from when its group does not set them: the "
        "'network' keys above, or its 'radio' preset (see aiotsim/sim/energy.py)",
        choices=("network", "radio"),
    )
    tcp_initial_window: int = opt(10, "tcp: initial congestion window, segments, 1..1000", between(1, 1000))
    tcp_buffer_bytes: int = opt(
        4_194_304, "tcp: socket buffer (largest window), bytes, 1500..1e9", between(1500, 1_000_000_000)
    )
    tcp_congestion: str = opt("cubic", "tcp: congestion avoidance, 'cubic' or 'reno'", choices=("cubic", "reno"))
    tcp_hystart: bool = opt(True, "tcp: HyStart ends slow start at half the bandwidth-delay product")
    tcp_idle_restart: bool = opt(True, "tcp: restart slow start after an idle RTO (Linux's default)")
    tcp_connection: str = opt(
        "reuse",
        "tcp: 'reuse' one connection per node pair (one handshake), or 'per-transfer' (a handshake "
        "and a fresh window for every transfer)",
        choices=("reuse", "per-transfer"),
    )
    tcp_min_rto_ms: float = opt(200.0, "tcp: floor of the retransmission timeout, ms, 1..60000", between(1, 60_000))


@dataclass(frozen=True)
class EnergySection:
    """``[energy]``: how node energy is counted (device power x time + radio energy per bit)."""

    include_idle: bool = opt(False, "also charge idle power while a node waits (J)")


SECTIONS: dict[str, type] = {
    "scenario": ScenarioSection,
    "data": DataSection,
    "model": ModelSection,
    "training": TrainingSection,
    "compressor": CompressorSection,
    "nodes": NodesSection,
    "network": NetworkSection,
    "energy": EnergySection,
}

# Blocks (lists of tables) inside sections: section -> key -> block dataclass.
BLOCKS: dict[str, dict[str, type]] = {
    "nodes": {"group": NodeGroup},
    "network": {"link": LinkSpec, "vertex": VertexSpec},
}
# Keys every block must set.
REQUIRED: dict[type, tuple[str, ...]] = {NodeGroup: ("count",), LinkSpec: ("from", "to", "mbps"), VertexSpec: ("name",)}


def block_to_dict(block: Any) -> dict[str, Any]:
    """A block dataclass as its TOML table: unset (None) keys left out, ``from_`` spelled ``from``."""
    return {k.rstrip("_"): v for k, v in dataclasses.asdict(block).items() if v is not None}


@dataclass(frozen=True)
class Scenario:
    """A whole, validated scenario. Build it with :func:`load_scenario` or :func:`scenario_from_dict`."""

    scenario: ScenarioSection = field(default_factory=ScenarioSection)
    data: DataSection = field(default_factory=DataSection)
    model: ModelSection = field(default_factory=ModelSection)
    training: TrainingSection = field(default_factory=TrainingSection)
    compressor: CompressorSection = field(default_factory=CompressorSection)
    nodes: NodesSection = field(default_factory=NodesSection)
    network: NetworkSection = field(default_factory=NetworkSection)
    energy: EnergySection = field(default_factory=EnergySection)

    def to_dict(self) -> dict[str, Any]:
        """Nested plain dict; compressor parameters are flattened into ``[compressor]``, blocks
        become lists of tables."""
        out: dict[str, Any] = {}
        for name in SECTIONS:
            section = getattr(self, name)
            sec = {f.name: getattr(section, f.name) for f in dataclasses.fields(section)}
            for key in BLOCKS.get(name, {}):
                sec[key] = [block_to_dict(b) for b in sec[key]]
            if name == "compressor":
                sec.update(sec.pop("params"))
            out[name] = _plain(sec)
        return out

    def to_toml(self) -> str:
        """The resolved scenario as TOML (loads back to an equal Scenario)."""
        return tomli_w.dumps(self.to_dict())

    def replace(self, **overrides: Any) -> Scenario:
        """A copy with ``"section.key": value`` overrides applied and validated."""
        data = self.to_dict()
        for dotted, value in overrides.items():
            section, _, key = dotted.partition(".")
            data.setdefault(section, {})[key] = value
        return scenario_from_dict(data, source="<overrides>")


def _plain(value: Any) -> Any:
    """Deep copy of lists and dicts (so a to_dict result shares nothing with the scenario)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


# ---- dynamic choices: registries are imported lazily so `config` stays cheap to import ------------
def _compressor_names() -> list[str]:
    from aiotsim.compress.registry import codec_names

    return codec_names()


def _dataset_names() -> list[str]:
    from aiotsim.learn.datasets import DATASETS

    return list(DATASETS)


def _model_names() -> list[str]:
    from aiotsim.learn.models import MODELS

    return list(MODELS)


def _profile_names() -> list[str]:
    from aiotsim.learn.compute import PROFILES

    return sorted(PROFILES)


_DYNAMIC_CHOICES: dict[str, Callable[[], list[str]]] = {
    "compressors": _compressor_names,
    "datasets": _dataset_names,
    "models": _model_names,
    "profiles": _profile_names,
}


def resolve_choices(name: str) -> list[str]:
    """The valid names of a lazily loaded registry (``"compressors"``, ``"datasets"`` ...)."""
    return _DYNAMIC_CHOICES[name]()


def _check_blocks(cls: type, raw: Any, where: str, problems: list[str]) -> list[Any]:
    """Check a list of tables (``[[nodes.group]]`` ...) against the block dataclass ``cls``."""
    if not isinstance(raw, list) or not all(isinstance(b, dict) for b in raw):
        problems.append(f"{where}: must be a list of tables ([[{where}]] blocks), got {raw!r}")
        return []
    out = []
    for k, block in enumerate(raw):
        prefix = f"{where}[{k}]."
        if cls is LinkSpec and "from_" in block:
            problems.append(f"{prefix}from_: unknown key; the key is spelled 'from'")
        table = {("from_" if key == "from" else key): v for key, v in block.items() if key != "from_"}
        checked = check_fields(cls, _as_floats(cls, table), prefix, resolve_choices)
        problems.extend(_block_wording(p) for p in checked.problems)
        missing = [key for key in REQUIRED[cls] if key not in block]
        problems.extend(f"{prefix}{key}: missing; every block needs it" for key in missing)
        if not checked.problems and not missing:
            out.append(cls(**checked.values))
    return out


def _block_wording(problem: str) -> str:
    """A block problem in TOML's words: ``from`` (the field is ``from_``), no null in TOML."""
    return problem.replace("from_", "from").replace(" or none, got", ", got")


def _as_floats(cls: type, raw: dict[str, Any]) -> dict[str, Any]:
    """``raw`` with integers given for float fields written as floats (so messages read ``-1.0``,
    as the value is used); integers too large for a float stay as they are (and are refused)."""
    hints = typing.get_type_hints(cls)
    out = dict(raw)
    for key, value in raw.items():
        hint = hints.get(key) if isinstance(key, str) else None
        if hint is not None and float in (hint, *typing.get_args(hint)):
            if isinstance(value, int) and not isinstance(value, bool) and abs(value) <= 2**53:
                out[key] = float(value)
    return out


def _check_section(name: str, raw: dict[str, Any], where: str, problems: list[str]) -> Any:
    """Build one section dataclass from ``raw``, appending every problem to ``problems``."""
    cls = SECTIONS[name]
    blocks = BLOCKS.get(name, {})
    is_codec = cls is CompressorSection
    plugin = _plugin_field(name, raw)  # checked by loading it, not against the built-in names
    plain = _as_floats(cls, {k: v for k, v in raw.items() if k not in blocks and k != plugin})
    skip = ("params", *blocks) if is_codec else tuple(blocks)
    checked = check_fields(cls, plain, f"{name}.", resolve_choices, allow_extra=is_codec, skip=skip)
    problems.extend(f"{where}: {p}" for p in checked.problems)
    values = dict(checked.values)
    for key, block_cls in blocks.items():
        if key in raw:
            found: list[str] = []
            values[key] = _check_blocks(block_cls, raw[key], f"{name}.{key}", found)
            problems.extend(f"{where}: {p}" for p in found)
    if is_codec:
        values["params"] = checked.extra  # codec parameters: checked against the codec below
    if plugin is not None:
        values[plugin] = raw[plugin]
    return cls(**values)


def _plugin_field(section: str, raw: dict[str, Any]) -> str | None:
    """The key of ``raw`` that names a plugin rather than a built-in (``compressor.name =
    "mod:Class"``, a ``training.server_optimizer`` other than the built-in rules), or None.
    Codecs are loaded by :func:`_check_codec`; a server optimizer is loaded here."""
    from aiotsim.plugins import SERVER_OPTIMIZER_BUILTINS, is_reference

    if section == "compressor" and isinstance(raw.get("name"), str) and is_reference(raw["name"]):
        return "name"
    value = raw.get("server_optimizer")
    if section == "training" and isinstance(value, str) and value not in SERVER_OPTIMIZER_BUILTINS:
        return "server_optimizer"
    return None


def _check_server_optimizer(training: TrainingSection, where: str, problems: list[str]) -> None:
    """Load a plugin server optimizer once (an unknown name gets a did-you-mean)."""
    from aiotsim import plugins

    if training.server_optimizer not in plugins.SERVER_OPTIMIZER_BUILTINS:
        try:
            plugins.find(
                training.server_optimizer,
                plugins.SERVER_OPTIMIZER_GROUP,
                plugins.SERVER_OPTIMIZER_BASE,
                "server optimizer",
                plugins.SERVER_OPTIMIZER_BUILTINS,
            )
        except ConfigError as exc:
            problems.extend(f"{where}: training.server_optimizer: {p}" for p in exc.problems)


def _check_codec(comp: CompressorSection, seed: int, where: str, problems: list[str]) -> None:
    """Check the codec's own parameters (names, types, ranges) by building it once; a plugin
    reference is imported here (a failure names the module and the error)."""
    from aiotsim.compress.registry import build_codec, get_codec_class
    from aiotsim.plugins import is_reference

    if comp.name not in _compressor_names() and not is_reference(comp.name):
        return  # already reported
    try:
        get_codec_class(comp.name)
    except ConfigError as exc:
        problems.extend(f"{where}: compressor.name: {p}" for p in exc.problems)
        return
    try:
        build_codec(comp.name, comp.params, seed=seed)
    except ConfigError as exc:
        problems.extend(f"{where}: {p}" for p in exc.problems)


def scenario_from_dict(data: dict[str, Any], source: str = "<scenario>") -> Scenario:
    """Validate a nested dict (as read from TOML) into a :class:`Scenario`.

    Raises
    ------
    ConfigError
        With every problem found, one line each, prefixed by ``source``.
    """
    problems: list[str] = []
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: a scenario must be a TOML table")
    if isinstance(data.get("sweep"), dict):  # a sweep file given as a scenario (no scenario has [sweep])
        raise ConfigError(
            f"{source}: a sweep file ([sweep], [set], [grid]), not a scenario; run it with `aiotsim sweep "
            f"{source}` (`--dry-run` checks it and lists its points)"
        )
    sections: dict[str, Any] = {}
    for name, raw in data.items():
        if name not in SECTIONS:
            problems.append(
                f"{source}: [{name}]: unknown section{did_you_mean(str(name), list(SECTIONS))}; "
                f"valid: {', '.join(SECTIONS)}"
            )
            continue
        if not isinstance(raw, dict):
            problems.append(f"{source}: {name}: must be a table ([{name}]), got {raw!r}")
            continue
        sections[name] = _check_section(name, raw, source, problems)
    scenario = Scenario(**sections)  # bad values were left out: their defaults stand in
    _check_codec(scenario.compressor, scenario.scenario.seed, source, problems)
    _check_server_optimizer(scenario.training, source, problems)
    problems.extend(f"{source}: {p}" for p in cross_checks(scenario))
    if not problems:  # a bad group was left out: its count would not add up
        problems.extend(f"{source}: {p}" for p in group_problems(scenario))
    if problems:
        raise ConfigError(problems)
    return scenario


def parse_override(text: str) -> tuple[str, Any]:
    """``"network.uplink_mbps=5"`` -> ``("network.uplink_mbps", 5)``; values are TOML literals,
    and a bare word that is not valid TOML is taken as a string (``compressor.name=topk``)."""
    if "=" not in text:
        raise ConfigError(f"--set {text!r}: expected SECTION.KEY=VALUE, e.g. network.uplink_mbps=5")
    key, _, raw = text.partition("=")
    key, raw = key.strip(), raw.strip()
    if "." not in key:
        raise ConfigError(f"--set {text!r}: the key must be SECTION.KEY, e.g. network.uplink_mbps")
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    except RecursionError:
        raise ConfigError(f"--set {key}: the value is nested too deep") from None
    return key, value


def parse_overrides(texts: list[str]) -> dict[str, Any]:
    """``["a.b=1", "c.d=x"]`` -> ``{"a.b": 1, "c.d": "x"}``; every malformed one is reported."""
    problems: list[str] = []
    parsed: dict[str, Any] = {}
    for text in texts:
        try:
            k, v = parse_override(text)
            parsed[k] = v
        except ConfigError as exc:
            problems.extend(exc.problems)
    if problems:
        raise ConfigError(problems)
    return parsed


def apply_overrides(data: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """Nested copy of ``data`` with ``{"section.key": value}`` set (sections created as needed).

    A trace path still relative after this came from an override (a file's own paths were made
    absolute by :func:`read_toml`): it is taken from the working directory, as a path typed on a
    command line is, and made absolute here, so the scenario a run directory keeps finds it from
    anywhere."""
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in data.items()}
    for dotted, value in overrides.items():
        section, _, key = dotted.partition(".")
        sec = out.setdefault(section, {})
        if isinstance(sec, dict):
            sec[key] = value
    return resolve_trace_paths(out, Path.cwd()) if overrides else out


def read_toml(path: str | Path) -> dict[str, Any]:
    """Parse a TOML file; a missing file or a syntax error is a ConfigError naming the file.
    Trace file paths in it are made absolute from the file's directory (:func:`resolve_trace_paths`)."""
    p = Path(path)
    if p.is_dir() and (p / "scenario.toml").is_file():  # a run directory, not its scenario
        raise ConfigError(
            f"{p}: a run directory, not a scenario file; run its scenario again with `aiotsim run "
            f"{p / 'scenario.toml'}`, plot it with `aiotsim plot {p}`"
        )
    if not p.is_file():
        raise ConfigError(f"{p}: no such scenario file (see scenarios/ for examples)")
    try:
        text = p.read_bytes().decode("utf-8")
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{p}: not a UTF-8 text file (invalid byte at offset {exc.start}); TOML is UTF-8") from None
    try:
        return resolve_trace_paths(tomllib.loads(text), p.parent)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{p}: invalid TOML: {exc}") from None
    except RecursionError:
        raise ConfigError(f"{p}: invalid TOML: arrays or tables nested too deep") from None


def load_scenario(
    path: str | Path,
    overrides: list[str] | None = None,
    *,
    compressor: str | None = None,
    iterations: int | None = None,
) -> Scenario:
    """Read, override and validate a scenario file.

    Parameters
    ----------
    path : path to the TOML file.
    overrides : ``SECTION.KEY=VALUE`` strings (the CLI's repeatable ``--set``).
    compressor, iterations : shortcuts for ``compressor.name`` and ``scenario.iterations``. An
        ``iterations`` that shortens the run also scales ``training.eval_every`` down
        (:func:`short_run_eval_every`) unless ``overrides`` set it.
    """
    data = read_toml(path)
    parsed = parse_overrides(overrides or [])
    if compressor is not None:
        if compressor != data.get("compressor", {}).get("name"):
            # A different codec: the file's codec parameters belong to the old one.
            data = {
                **data,
                "compressor": {k: v for k, v in data.get("compressor", {}).items() if k in _COMPRESSOR_KEYS},
            }
        parsed["compressor.name"] = compressor
    if iterations is not None:
        parsed.update(short_run_eval_every(data, parsed, iterations))
        parsed["scenario.iterations"] = iterations
    return scenario_from_dict(apply_overrides(data, parsed), source=str(path))


# A run shortened with -n evaluates at least this many times (besides after its last iteration).
SHORT_RUN_EVALS = 10


def short_run_eval_every(data: dict[str, Any], overrides: dict[str, Any], iterations: int) -> dict[str, Any]:
    """The ``training.eval_every`` override that gives a run shortened to ``iterations`` (the CLI's
    ``-n``) a useful accuracy curve: ``{}`` when there is none to make.

    Rule: when ``iterations`` is below the scenario's own ``scenario.iterations`` (file, then
    ``overrides``, then the default), ``eval_every`` becomes ``iterations // SHORT_RUN_EVALS`` (at
    least 1), never more than the scenario's own ``eval_every``: ``-n 60`` on a scenario evaluating
    every 25 iterations evaluates every 6 (10 points, not 2). An ``eval_every`` given in
    ``overrides`` (``--set training.eval_every=N``) is kept as given, and a run that is not
    shortened keeps the scenario's. ``data`` is the scenario file's table, ``overrides`` the
    parsed ``--set`` overrides (without ``iterations``); bad values are left for validation.
    """
    if "training.eval_every" in overrides or isinstance(iterations, bool) or not isinstance(iterations, int):
        return {}
    resolved = apply_overrides(data, overrides)

    def key(section: str, name: str, default: int) -> Any:
        table = resolved.get(section)
        return table.get(name, default) if isinstance(table, dict) else default

    full = key("scenario", "iterations", ScenarioSection.iterations)
    every = key("training", "eval_every", TrainingSection.eval_every)
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (full, every)) or iterations >= full:
        return {}
    scaled = min(every, max(1, iterations // SHORT_RUN_EVALS))
    return {"training.eval_every": scaled} if scaled != every else {}


def resolve_trace_paths(data: dict[str, Any], base: Path) -> dict[str, Any]:
    """``data`` with every relative trace path made absolute from ``base`` (the scenario file's
    directory), so the resolved scenario written into a run directory still finds its traces."""

    def fix(table: Any, keys: tuple[str, ...]) -> Any:
        if not isinstance(table, dict):
            return table
        out = dict(table)
        for key in keys:
            v = out.get(key)
            if isinstance(v, str) and v and not Path(v).expanduser().is_absolute():
                out[key] = _absolute(base / v)
        return out

    net, nodes = data.get("network"), data.get("nodes")
    if isinstance(net, dict):
        net = fix(net, ("uplink_trace", "downlink_trace"))
        if isinstance(net.get("link"), list):
            net["link"] = [fix(link, ("trace",)) for link in net["link"]]
        data = {**data, "network": net}
    if isinstance(nodes, dict) and isinstance(nodes.get("group"), list):
        groups = [fix(g, ("uplink_trace", "downlink_trace")) for g in nodes["group"]]
        data = {**data, "nodes": {**nodes, "group": groups}}
    return data


def _absolute(p: Path) -> str:
    """``p`` resolved; as given (the trace check then names what is wrong) when it cannot be: a NUL
    byte in it, a symlink loop."""
    try:
        return str(p.resolve())
    except (OSError, ValueError, RuntimeError):
        return str(p)


_COMPRESSOR_KEYS = {f.name for f in dataclasses.fields(CompressorSection)} - {"params"}
