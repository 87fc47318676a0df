"""The scenario's schema: its bounds, its sections and blocks as frozen dataclasses.

Every key is declared once here (the ``[network]`` section in :mod:`aiotsim.config_network`, the
bounds in :mod:`aiotsim.config_bounds`), with its default, type, one-line help and range check
(:func:`aiotsim.schema.opt`); :mod:`aiotsim.config` loads, overrides and validates scenario files
against it, and re-exports the names of all three modules (``from aiotsim.config import
NetworkSection`` keeps working). Split out of ``config.py`` along this seam: the declarations here; the whole
:class:`~aiotsim.config.Scenario`, loading, overrides and validation there.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from aiotsim.config_bounds import (
    MAX_ALPHA,
    MAX_BATCH,
    MAX_CLASSES,
    MAX_FACTOR,
    MAX_ITERATIONS,
    MAX_LOCAL_EPOCHS,
    MAX_LOCAL_STEPS,
    MAX_LR,
    MAX_MS,
    MAX_NODES,
    MAX_NOISE,
    MAX_OVERCOMMIT,
    MAX_QUEUE_PACKETS,
    MAX_SAMPLES,
    MAX_SEED,
    MAX_SHAPE_SIDE,
    MAX_WEIGHT_DECAY,
    MIN_RETRY_S,
    RATE,
    auto_or_bool,
    path_safe_name,
    shape_sides,
    trace_nodes_range,
)
from aiotsim.config_network import LinkSpec, NetworkSection, VertexSpec
from aiotsim.schema import (
    MAX_MBPS,
    MAX_SECONDS,
    MIN_MBPS,
    between,
    fraction,
    open_fraction,
    opt,
    positive_at_most,
    unit_interval,
)


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
    queue_packets: int | None = opt(None, f"drop-tail capacity of each of the group's node links, packets, "
                                    f"1..{MAX_QUEUE_PACKETS:,} (see network.queue_packets; wins over a radio preset's)",
                                    between(1, MAX_QUEUE_PACKETS))  # fmt: skip
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
