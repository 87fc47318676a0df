"""Scenario files: the Scenario, TOML loading, command-line overrides and validation.

The sections' declarations (their keys, defaults, help and checks) are in
:mod:`aiotsim.config_sections`, re-exported here.

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
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w

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
    MAX_MTU,
    MAX_NAME,
    MAX_NODES,
    MAX_NOISE,
    MAX_OVERCOMMIT,
    MAX_SAMPLES,
    MAX_SEED,
    MAX_SHAPE_SIDE,
    MAX_WEIGHT_DECAY,
    MIN_RESOLUTION_MS,
    MIN_RETRY_S,
    RATE,
    auto_or_bool,
    link_rate,
    path_safe_name,
    shape_sides,
    trace_nodes_range,
)
from aiotsim.config_checks import cross_checks, group_problems
from aiotsim.config_network import LinkSpec, NetworkSection, VertexSpec
from aiotsim.config_sections import (
    BLOCKS,
    REQUIRED,
    SECTIONS,
    CompressorSection,
    DataSection,
    EnergySection,
    ModelSection,
    NodeGroup,
    NodesSection,
    ScenarioSection,
    TrainingSection,
    block_to_dict,
)
from aiotsim.errors import ConfigError
from aiotsim.schema import (
    check_fields,
    did_you_mean,
)


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
    from aiotsim.learn.devices import PROFILES

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

__all__ = [
    "MAX_SEED",
    "MAX_ITERATIONS",
    "MAX_NODES",
    "MAX_BATCH",
    "MAX_SAMPLES",
    "MAX_CLASSES",
    "MAX_SHAPE_SIDE",
    "MAX_LR",
    "MAX_WEIGHT_DECAY",
    "MAX_NOISE",
    "MIN_RETRY_S",
    "MAX_MS",
    "MIN_RESOLUTION_MS",
    "MAX_MTU",
    "MAX_FACTOR",
    "MAX_ALPHA",
    "MAX_NAME",
    "MAX_LOCAL_STEPS",
    "MAX_LOCAL_EPOCHS",
    "MAX_OVERCOMMIT",
    "link_rate",
    "RATE",
    "auto_or_bool",
    "path_safe_name",
    "shape_sides",
    "trace_nodes_range",
    "ScenarioSection",
    "DataSection",
    "ModelSection",
    "TrainingSection",
    "CompressorSection",
    "NodeGroup",
    "NodesSection",
    "VertexSpec",
    "LinkSpec",
    "NetworkSection",
    "EnergySection",
    "SECTIONS",
    "BLOCKS",
    "REQUIRED",
    "block_to_dict",
    "Scenario",
]
