"""Scenario files: frozen dataclasses, TOML loading, command-line overrides and validation.

A scenario is a TOML file with one table per section (``[scenario]``, ``[data]``, ``[model]``,
``[training]``, ``[compressor]``, ``[nodes]``, ``[network]``, ``[energy]``). Every key has a default,
a type, a one-line help and a range check, declared once on the section's dataclass field, so
validation, ``--set`` overrides and the resolved-scenario file all come from the same schema.

Validation reports every problem at once, one line each, as ``FILE: section.key: reason`` (unknown
keys get a did-you-mean; unknown dataset/model/compressor/profile names list the valid ones).
"""

from __future__ import annotations

import dataclasses
import tomllib
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w

from aiotsim.errors import ConfigError
from aiotsim.schema import did_you_mean, opt, type_label, type_ok

Check = Callable[[Any], str | None]


def _opt(default: Any, help: str, check: Check | None = None, choices: tuple[str, ...] | str | None = None) -> Any:
    """A schema field: default, help line, optional range check and choices.

    ``choices`` may be a tuple of names or the name of a function in :data:`_DYNAMIC_CHOICES`
    (for registries that load lazily, e.g. compressors).
    """
    kw: dict[str, Any] = {"metadata": {"help": help, "check": check, "choices": choices}}
    if isinstance(default, (list, dict)):
        kw["default_factory"] = lambda d=default: type(d)(d)
    else:
        kw["default"] = default
    return field(**kw)


def positive(v: Any) -> str | None:
    return None if v > 0 else f"must be > 0, got {v!r}"


def non_negative(v: Any) -> str | None:
    return None if v >= 0 else f"must be >= 0, got {v!r}"


def fraction(v: Any) -> str | None:
    return None if 0 <= v < 1 else f"must be in [0, 1), got {v!r}"


def unit_interval(v: Any) -> str | None:
    return None if 0 < v <= 1 else f"must be in (0, 1], got {v!r}"


def at_least(lo: float) -> Check:
    def check(v: Any) -> str | None:
        return None if v >= lo else f"must be >= {lo}, got {v!r}"

    return check


@dataclass(frozen=True)
class ScenarioSection:
    """``[scenario]``: identity and length of the run."""

    name: str = _opt("scenario", "name shown in results and plots")
    seed: int = _opt(0, "seed of every random choice (data split, init, codecs, network)", non_negative)
    iterations: int = _opt(100, "synchronous training iterations to simulate", positive)


@dataclass(frozen=True)
class DataSection:
    """``[data]``: the data set and how it is split across nodes."""

    dataset: str = _opt("mnist", "data set", choices="datasets")
    batch_size: int = _opt(32, "mini-batch size per node per iteration", positive)
    partition: str = _opt(
        "iid",
        "how training data is split across nodes ('by-writer': whole writers per node, per-writer data sets)",
        choices=("iid", "dirichlet", "by-writer"),
    )
    alpha: float = _opt(0.5, "Dirichlet concentration for partition = 'dirichlet' (small = skewed)", positive)
    test_fraction: float = _opt(
        0.2,
        "held-out fraction of the data set for evaluation; only data sets without an official test split "
        "(mnist, digits, femnist/imagefolder without a test/ directory)",
        unit_interval,
    )
    eval_samples: int = _opt(0, "evaluate on at most this many test samples (0 = all)", non_negative)
    synthetic_shape: list[int] = _opt([1, 28, 28], "dataset = 'synthetic': input shape [C, H, W]")
    synthetic_classes: int = _opt(10, "dataset = 'synthetic': number of classes", at_least(2))
    synthetic_train_size: int = _opt(2000, "dataset = 'synthetic': training samples", positive)
    synthetic_test_size: int = _opt(500, "dataset = 'synthetic': test samples", positive)
    synthetic_noise: float = _opt(
        4.0, "dataset = 'synthetic': noise std relative to the class prototypes", non_negative
    )
    # ---- data sets read from files (issue 11) ----
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

    name: str = _opt("lenet5", "model architecture", choices="models")


@dataclass(frozen=True)
class TrainingSection:
    """``[training]``: optimizer, evaluation and the synchronization mode."""

    optimizer: str = _opt("sgd", "server optimizer", choices=("sgd", "adam"))
    lr: float = _opt(0.02, "learning rate", positive)
    momentum: float = _opt(
        0.9, "SGD momentum (applied on the nodes instead by codecs with momentum correction)", fraction
    )
    weight_decay: float = _opt(0.0, "L2 weight decay", non_negative)
    momentum_at: str = _opt(
        "nodes",
        "where SGD momentum lives: the 'server' optimizer, or the 'nodes' (each node compresses its "
        "own velocity: DGC's momentum correction; identical to server momentum for linear codecs)",
        choices=("server", "nodes"),
    )
    momentum_masking: bool = _opt(
        False,
        "with momentum on the nodes and a sparse codec, clear the velocity of every coordinate just "
        "sent (DGC's momentum factor masking); off by default: on iot10 it slows dense-ish "
        "sparsifiers (threshold 90.8% vs 95.4%)",
    )
    eval_every: int = _opt(25, "evaluate the global model every this many iterations", positive)
    target_accuracy: float = _opt(0.9, "accuracy for time-to-accuracy", unit_interval)
    mode: str = _opt(
        "sync",
        "'sync' (wait for every online node), 'partial' (aggregate the first partial_k uploads), "
        "'async' (apply each gradient on arrival; an iteration is one server update)",
        choices=("sync", "partial", "async"),
    )
    partial_k: int = _opt(0, "uploads aggregated per iteration in partial mode (1..nodes)", non_negative)
    late: str = _opt(
        "drop",
        "partial mode: uploads that miss their iteration are 'drop'ped or 'apply'd late (stale)",
        choices=("drop", "apply"),
    )


@dataclass(frozen=True)
class CompressorSection:
    """``[compressor]``: the codec and its parameters (any other key is a codec parameter)."""

    name: str = _opt("none", "codec name (see `aiotsim compressors`)", choices="compressors")
    min_size: int = _opt(0, "layers with fewer elements than this go uncompressed (fp32)", non_negative)
    downlink: str = _opt(
        "model",
        "what the server sends back: the dense fp32 'model', the sparse 'union' of the aggregated "
        "update, or the update re-encoded with the codec ('compressed', bidirectional)",
        choices=("model", "union", "compressed"),
    )
    params: dict[str, Any] = _opt({}, "codec parameters")


@dataclass(frozen=True)
class NodesSection:
    """``[nodes]``: how many sensor nodes, on what hardware, and how compute time is charged."""

    count: int = _opt(10, "number of sensor nodes", positive)
    device: str = _opt("rpi4", "compute profile of the nodes", choices="profiles")
    compute_model: str = _opt(
        "flops",
        "'flops' (FLOPs / profile FLOP/s, deterministic) or 'measured' (wall time x scale)",
        choices=("measured", "flops"),
    )
    server_device: str = _opt("host", "compute profile of the server (decode, aggregate, step)", choices="profiles")
    gateway_device: str = _opt("jetson-nano", "compute profile of edge gateways (hierarchical)", choices="profiles")
    radio: str = _opt("wifi", "radio profile of the nodes, for energy", choices="radios")
    straggler_fraction: float = _opt(0.0, "fraction of nodes slowed down (seeded choice)", fraction)
    straggler_factor: float = _opt(
        1.0, "slowdown factor of a straggler (x compute time and/or / link rate)", at_least(1.0)
    )
    straggler_kind: str = _opt(
        "compute", "what a straggler slows: 'compute', 'link' or 'both'", choices=("compute", "link", "both")
    )
    straggler_mode: str = _opt(
        "fixed",
        "'fixed': the same seeded nodes are always slow; 'transient': each node is slow in "
        "an iteration with probability straggler_fraction (compute only)",
        choices=("fixed", "transient"),
    )
    dropout_prob: float = _opt(0.0, "chance that an online node is offline at its next dispatch", fraction)
    rejoin_prob: float = _opt(0.5, "chance that an offline node is back at its next dispatch", unit_interval)
    residual_on_rejoin: str = _opt(
        "keep",
        "a rejoining node's error-feedback residuals: 'keep' (sent later) or 'reset' (dropped)",
        choices=("keep", "reset"),
    )
    retry_s: float = _opt(1.0, "async mode: seconds before an offline node is tried again", positive)
    group: list[dict[str, Any]] = _opt([], "[[nodes.group]] blocks: heterogeneous node groups")


@dataclass(frozen=True)
class NetworkSection:
    """``[network]``: topology and link settings (Mbit/s = 1e6 bits/s)."""

    topology: str = _opt(
        "star", "network topology", choices=("star", "hierarchical", "ring", "shared-medium", "custom")
    )
    uplink_mbps: float = _opt(10.0, "node -> server link rate, Mbit/s", positive)
    downlink_mbps: float = _opt(10.0, "server -> node link rate, Mbit/s", positive)
    latency_ms: float = _opt(5.0, "one-way latency of a node's link, ms", non_negative)
    server_mbps: float = _opt(100.0, "server link rate shared by all flows (each direction), Mbit/s", positive)
    mtu: int = _opt(1500, "maximum transmission unit, bytes", at_least(100))
    header_bytes: int = _opt(40, "TCP/IP header bytes per packet", non_negative)
    loss: float = _opt(0.0, "packet loss probability", fraction)
    jitter_ms: float = _opt(0.0, "scale of the seeded latency jitter, ms", non_negative)
    gateways: int = _opt(2, "hierarchical: edge gateways (nodes are split evenly across them)", positive)
    backhaul_up_mbps: float = _opt(50.0, "hierarchical: gateway -> server link rate, Mbit/s", positive)
    backhaul_down_mbps: float = _opt(50.0, "hierarchical: server -> gateway link rate, Mbit/s", positive)
    backhaul_latency_ms: float = _opt(20.0, "hierarchical: one-way latency of the backhaul, ms", non_negative)
    gateway_mode: str = _opt(
        "reencode",
        "hierarchical: a gateway sends its nodes' summed gradient 're-encode'd with the codec or 'dense' fp32",
        choices=("reencode", "dense"),
    )
    channel_mbps: float = _opt(10.0, "shared-medium: capacity of the one channel all nodes share, Mbit/s", positive)
    link: list[dict[str, Any]] = _opt(
        [], "custom: [[network.link]] from, to, mbps, latency_ms (+ loss, jitter_ms, mtu, directed)"
    )
    vertex: list[dict[str, Any]] = _opt(
        [], "custom: [[network.vertex]] name, role (server/gateway/relay/node), aggregator"
    )


@dataclass(frozen=True)
class EnergySection:
    """``[energy]``: how node energy is counted (device power x time + radio energy per bit)."""

    include_idle: bool = _opt(False, "also charge idle power while a node waits (J)")


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
        """Nested plain dict; compressor parameters are flattened into ``[compressor]``."""
        out: dict[str, Any] = {}
        for name in SECTIONS:
            sec = dataclasses.asdict(getattr(self, name))
            if name == "compressor":
                sec.update(sec.pop("params"))
            out[name] = sec
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


def _radio_names() -> list[str]:
    from aiotsim.sim.energy import RADIOS

    return sorted(RADIOS)


_DYNAMIC_CHOICES: dict[str, Callable[[], list[str]]] = {
    "compressors": _compressor_names,
    "datasets": _dataset_names,
    "models": _model_names,
    "profiles": _profile_names,
    "radios": _radio_names,
}

_WHAT = {
    "compressors": "compressor",
    "datasets": "dataset",
    "models": "model",
    "profiles": "device profile",
    "radios": "radio profile",
}


def _check_section(name: str, cls: type, raw: dict[str, Any], where: str, problems: list[str]) -> Any:
    """Build one section dataclass from ``raw``, appending every problem to ``problems``."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in fields or key == "params":
            if cls is CompressorSection:
                extra[key] = value  # codec parameter: checked against the codec below
                continue
            valid = [k for k in fields if k != "params"]
            problems.append(f"{where}: {name}.{key}: unknown key{did_you_mean(key, valid)}; valid: {', '.join(valid)}")
            continue
        f = fields[key]
        if not type_ok(value, hints[key]):
            problems.append(f"{where}: {name}.{key}: must be {type_label(hints[key])}, got {value!r}")
            continue
        if isinstance(value, int) and hints[key] is float:
            value = float(value)
        meta = f.metadata
        choices = meta.get("choices")
        if choices is not None:
            valid_names = _DYNAMIC_CHOICES[choices]() if isinstance(choices, str) else list(choices)
            if value not in valid_names:
                what = _WHAT.get(choices, "value") if isinstance(choices, str) else "value"
                problems.append(
                    f"{where}: {name}.{key}: unknown {what} {value!r}{did_you_mean(str(value), valid_names)}; "
                    f"valid: {', '.join(valid_names)}"
                )
                continue
        check = meta.get("check")
        if check is not None:
            msg = check(value)
            if msg:
                problems.append(f"{where}: {name}.{key}: {msg}")
                continue
        values[key] = value
    if cls is CompressorSection:
        values["params"] = extra
    try:
        return cls(**values)
    except TypeError as exc:  # pragma: no cover - all fields have defaults
        problems.append(f"{where}: {name}: {exc}")
        return cls()


def _check_codec(comp: CompressorSection, seed: int, where: str, problems: list[str]) -> None:
    """Check the codec's own parameters (names, types, ranges) by building it once."""
    from aiotsim.compress.registry import build_codec

    if comp.name not in _compressor_names():
        return  # already reported
    try:
        build_codec(comp.name, comp.params, seed=seed)
    except ConfigError as exc:
        problems.extend(f"{where}: compressor: {p}" for p in exc.problems)


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
    sections: dict[str, Any] = {}
    for name, raw in data.items():
        if name not in SECTIONS:
            problems.append(
                f"{source}: [{name}]: unknown section{did_you_mean(name, list(SECTIONS))}; valid: {', '.join(SECTIONS)}"
            )
            continue
        if not isinstance(raw, dict):
            problems.append(f"{source}: {name}: must be a table ([{name}]), got {raw!r}")
            continue
        sections[name] = _check_section(name, SECTIONS[name], raw, source, problems)
    scenario = Scenario(**sections)
    _check_codec(scenario.compressor, scenario.scenario.seed, source, problems)
    problems.extend(f"{source}: {p}" for p in cross_checks(scenario))
    if problems:
        raise ConfigError(problems)
    return scenario


def _data_file_problems(s: Scenario) -> list[str]:
    """``[data]``: path, download and by-writer only where the data set can use them."""
    from aiotsim.learn.data.files import DOWNLOADABLE, FILE_DATASETS

    d, out = s.data, []
    if d.path and d.dataset not in FILE_DATASETS:
        out.append(f"data.path: dataset {d.dataset!r} reads no files; file data sets: {', '.join(FILE_DATASETS)}")
    if d.download and d.dataset not in DOWNLOADABLE:
        out.append(f"data.download: dataset {d.dataset!r} has no download; downloadable: {', '.join(DOWNLOADABLE)}")
    if d.partition == "by-writer" and d.dataset != "femnist":
        out.append(f"data.partition: 'by-writer' needs per-writer data (dataset 'femnist'), got {d.dataset!r}")
    return out


def cross_checks(s: Scenario) -> list[str]:
    """Problems that involve more than one key."""
    out = _data_file_problems(s)
    if s.network.header_bytes >= s.network.mtu:
        out.append(f"network.header_bytes: must be < network.mtu (={s.network.mtu}), got {s.network.header_bytes}")
    if s.training.eval_every > s.scenario.iterations:
        out.append(
            f"training.eval_every: must be <= scenario.iterations (={s.scenario.iterations}), "
            f"got {s.training.eval_every}; the model would never be evaluated"
        )
    shape = s.data.synthetic_shape
    if len(shape) != 3 or any(d < 1 for d in shape):
        out.append(f"data.synthetic_shape: must be [C, H, W] with every size >= 1, got {shape!r}")
    if s.training.momentum_at == "nodes" and s.training.optimizer != "sgd":
        out.append(
            "training.momentum_at: 'nodes' applies SGD momentum on the nodes; "
            f"use optimizer = 'sgd', got {s.training.optimizer!r}"
        )
    n, topo, mode = s.nodes.count, s.network.topology, s.training.mode
    if mode == "partial" and not 1 <= s.training.partial_k <= n:
        out.append(
            f"training.partial_k: must be in 1..nodes.count (={n}) for mode = 'partial', got {s.training.partial_k}"
        )
    if s.nodes.straggler_mode == "transient" and s.nodes.straggler_kind != "compute":
        out.append(
            "nodes.straggler_kind: transient stragglers slow compute only; use straggler_kind = 'compute' "
            "or straggler_mode = 'fixed'"
        )
    if topo == "ring":
        if n < 2:
            out.append(f"nodes.count: a ring needs at least 2 nodes, got {n}")
        if mode != "sync":
            out.append(f"training.mode: ring all-reduce is synchronous; use mode = 'sync', got {mode!r}")
        if s.nodes.dropout_prob > 0:
            out.append("nodes.dropout_prob: a ring all-reduce needs every node; use 0 with topology = 'ring'")
        out.extend(_ring_codec_problems(s.compressor.name))
    if topo == "hierarchical":
        if s.network.gateways > n:
            out.append(f"network.gateways: must be <= nodes.count (={n}), got {s.network.gateways}")
        if mode != "sync":
            out.append(f"training.mode: hierarchical aggregation is synchronous; use mode = 'sync', got {mode!r}")
    if topo == "custom" and not s.network.link:
        out.append("network.link: topology = 'custom' needs [[network.link]] blocks (from, to, mbps, latency_ms)")
    if topo != "custom" and (s.network.link or s.network.vertex):
        out.append(f"network.link: [[network.link]]/[[network.vertex]] blocks need topology = 'custom', got {topo!r}")
    out.extend(_codec_downlink_problems(s))
    out.extend(_group_problems(s))
    if not out and topo == "custom":
        from aiotsim.errors import TopologyError
        from aiotsim.sim.topologies import build_topology

        try:
            topology = build_topology(s)
            out.extend(f"network: {p}" for p in topology.validate())
            if topology.gateways and mode != "sync":
                out.append(
                    f"training.mode: aggregation through gateways ({', '.join(topology.gateways)}) is "
                    f"synchronous; use mode = 'sync', got {mode!r}"
                )
        except TopologyError as exc:
            out.extend(f"network: {line}" for line in exc.message.splitlines())
    return out


GROUP_KEYS: dict[str, tuple[type, Check | None]] = {
    "name": (str, None),
    "count": (int, positive),
    "device": (str, None),
    "radio": (str, None),
    "uplink_mbps": (float, positive),
    "downlink_mbps": (float, positive),
    "latency_ms": (float, non_negative),
    "loss": (float, fraction),
    "jitter_ms": (float, non_negative),
    "share": (float, positive),
    "slowdown": (float, at_least(1.0)),
}


def _group_problems(s: Scenario) -> list[str]:
    """Problems of the ``[[nodes.group]]`` blocks, each named ``nodes.group[k].key``."""
    out: list[str] = []
    groups = s.nodes.group
    if not groups:
        return out
    names = {"device": _profile_names(), "radio": _radio_names()}
    total = 0
    for k, g in enumerate(groups):
        where = f"nodes.group[{k}]"
        if "count" not in g:
            out.append(f"{where}.count: missing; every group needs a node count")
        for key, value in g.items():
            if key not in GROUP_KEYS:
                out.append(
                    f"{where}.{key}: unknown key{did_you_mean(key, list(GROUP_KEYS))}; valid: {', '.join(GROUP_KEYS)}"
                )
                continue
            typ, check = GROUP_KEYS[key]
            if not type_ok(value, typ):
                out.append(f"{where}.{key}: must be {type_label(typ)}, got {value!r}")
                continue
            if key in names and value not in names[key]:
                out.append(
                    f"{where}.{key}: unknown {key} {value!r}{did_you_mean(value, names[key])}; "
                    f"valid: {', '.join(names[key])}"
                )
            elif check is not None and (msg := check(value)):
                out.append(f"{where}.{key}: {msg}")
        if isinstance(g.get("count"), int):
            total += g["count"]
    if not out and total != s.nodes.count:
        out.append(f"nodes.count: must equal the sum of the groups' counts (={total}), got {s.nodes.count}")
    return out


def _codec_downlink_problems(s: Scenario) -> list[str]:
    """A compressed downlink re-encodes the aggregate with the codec: a codec that applies
    momentum itself (DGC) would apply it a second time there."""
    from aiotsim.compress.registry import codec_names, get_codec_class

    name = s.compressor.name
    if s.compressor.downlink == "compressed" and name in codec_names() and get_codec_class(name).absorbs_momentum:
        return [
            f"compressor.downlink: 'compressed' would re-apply {name}'s momentum correction at the "
            "server; use downlink = 'union' or 'model'"
        ]
    return []


def _ring_codec_problems(name: str) -> list[str]:
    from aiotsim.compress.registry import codec_names, get_codec_class

    if name not in codec_names():
        return []
    if get_codec_class(name).supports_ring():
        return []
    ok = [c for c in codec_names() if get_codec_class(c).supports_ring()]
    return [
        f"compressor.name: {name!r} cannot be summed hop by hop in a ring all-reduce; codecs that can: {', '.join(ok)}"
    ]


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
    """Nested copy of ``data`` with ``{"section.key": value}`` set (sections created as needed)."""
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in data.items()}
    for dotted, value in overrides.items():
        section, _, key = dotted.partition(".")
        sec = out.setdefault(section, {})
        if isinstance(sec, dict):
            sec[key] = value
    return out


def read_toml(path: str | Path) -> dict[str, Any]:
    """Parse a TOML file; a missing file or a syntax error is a ConfigError naming the file."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{p}: no such scenario file (see scenarios/ for examples)")
    try:
        return tomllib.loads(p.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{p}: invalid TOML: {exc}") from None


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
    compressor, iterations : shortcuts for ``compressor.name`` and ``scenario.iterations``.
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
        parsed["scenario.iterations"] = iterations
    return scenario_from_dict(apply_overrides(data, parsed), source=str(path))


_COMPRESSOR_KEYS = {f.name for f in dataclasses.fields(CompressorSection)} - {"params"}
