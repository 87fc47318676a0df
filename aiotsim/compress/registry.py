"""The codec registry: codecs register themselves by name; a miss lists the valid names.

Replaces GRACE's if/elif factory. ``build_codec("topk", {"ratio": 0.01}, seed=1)`` checks every
parameter (unknown names with a did-you-mean, wrong types, the codec's own range checks) and
reports all problems at once.
"""

from __future__ import annotations

import dataclasses
import importlib
import typing
from typing import Any, TypeVar

from aiotsim.compress.base import Codec
from aiotsim.errors import CodecError, ConfigError
from aiotsim.schema import did_you_mean, type_label, type_ok

_REGISTRY: dict[str, type[Codec]] = {}
_LOADED = False

# Modules that define codecs; importing them registers their classes.
_CODEC_MODULES = (
    "aiotsim.compress.dense",
    "aiotsim.compress.quantize",
    "aiotsim.compress.fourbit",
    "aiotsim.compress.sign",
    "aiotsim.compress.sparsify",
    "aiotsim.compress.dgc",
    "aiotsim.compress.variance",
    "aiotsim.compress.pgc",
    "aiotsim.compress.aggaware",
    "aiotsim.compress.fft",
    "aiotsim.compress.hylo",
    "aiotsim.compress.powersgd",
)

C = TypeVar("C", bound=type[Codec])


def register(cls: C) -> C:
    """Class decorator: add ``cls`` to the registry under ``cls.name``."""
    if not cls.name:
        raise TypeError(f"{cls.__name__} has no `name`")
    if cls.name in _REGISTRY and _REGISTRY[cls.name] is not cls:
        raise TypeError(f"codec name {cls.name!r} registered twice")
    _REGISTRY[cls.name] = cls
    return cls


def _load() -> None:
    global _LOADED
    if _LOADED:
        return
    for mod in _CODEC_MODULES:
        try:
            importlib.import_module(mod)
        except ModuleNotFoundError as exc:
            # A family module not written yet is simply absent from the registry.
            if exc.name != mod:
                raise
    _LOADED = True


def codec_names() -> list[str]:
    """Every registered codec name, sorted."""
    _load()
    return sorted(_REGISTRY)


def get_codec_class(name: str) -> type[Codec]:
    """The codec class registered as ``name``; a miss names the closest and lists all."""
    _load()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ConfigError(unknown_name_message("compressor", name, codec_names())) from None


def unknown_name_message(what: str, name: str, valid: list[str]) -> str:
    """``unknown compressor 'tpok' (did you mean 'topk'?); valid: a, b, c``."""
    return f"unknown {what} {name!r}{did_you_mean(name, valid)}; valid: {', '.join(valid)}"


def params_problems(cls: type[Codec], values: dict[str, Any]) -> list[str]:
    """Problems with ``values`` as parameters of ``cls``: unknown names and wrong types."""
    fields = {f.name: f for f in dataclasses.fields(cls.Params)}
    hints = typing.get_type_hints(cls.Params)
    problems = []
    for key, value in values.items():
        if key not in fields:
            valid = ", ".join(fields) or "none"
            problems.append(
                f"unknown parameter {key!r} for compressor {cls.name!r}"
                f"{did_you_mean(key, list(fields))}; valid: {valid}"
            )
        elif not type_ok(value, hints[key]):
            problems.append(
                f"parameter {key!r} of compressor {cls.name!r} must be {type_label(hints[key])}, got {value!r}"
            )
    return problems


def build_codec(name: str, params: dict[str, Any] | None = None, seed: int = 0) -> Codec:
    """Instantiate the codec ``name`` with ``params`` (a dict from the scenario file).

    Raises
    ------
    ConfigError
        Unknown codec, unknown or mistyped parameters, or values the codec rejects; every
        problem is listed.
    """
    cls = get_codec_class(name)
    params = dict(params or {})
    problems = params_problems(cls, params)
    if problems:
        raise ConfigError(problems)
    try:
        return cls(cls.Params(**params), seed=seed)
    except CodecError as exc:
        raise ConfigError(exc.message.split("; ")) from None
