"""The codec registry: codecs register themselves by name; a miss lists the valid names.

Replaces GRACE's if/elif factory. ``build_codec("topk", {"ratio": 0.01}, seed=1)`` checks every
parameter with the one field-validation mechanism (:func:`aiotsim.schema.check_fields`: unknown
names with a did-you-mean, wrong types, non-finite numbers, each field's declared range; then the
codec's checks across fields) and reports all problems at once, ``compressor.KEY: reason`` each.

Besides the built-ins, a name may be a plugin (:mod:`aiotsim.plugins`): ``"package.module:ClassName"``
(any importable module; the class must subclass :class:`~aiotsim.compress.base.Codec`) or the name
of an entry point of the group ``aiotsim.codecs`` of an installed package. A built-in's name wins
over an entry point of the same name. Plugin classes are not added to the registry: a plugin's
``name`` attribute may be anything, its scenario name is its reference or entry-point name.
"""

from __future__ import annotations

import importlib
from typing import Any, TypeVar, cast

from aiotsim import plugins
from aiotsim.compress.base import PARAM_PREFIX, Codec
from aiotsim.errors import ConfigError
from aiotsim.schema import check_fields, did_you_mean

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
        importlib.import_module(mod)
    _LOADED = True


def codec_names() -> list[str]:
    """Every codec name, sorted: the built-ins and the installed entry points of ``aiotsim.codecs``
    (references ``"module:Class"`` are not listed: any importable one is valid)."""
    _load()
    return sorted(set(_REGISTRY) | set(plugins.entry_points(plugins.CODEC_GROUP)))


def get_codec_class(name: str) -> type[Codec]:
    """The codec class of ``name`` (built-in, entry point or ``"module:Class"`` reference).

    Raises
    ------
    ConfigError
        An unknown name (the closest and all valid ones), or a plugin that cannot be imported or
        does not subclass :class:`Codec` (the module and the error).
    """
    return cast(type[Codec], codec_plugin(name).cls)  # checked to subclass Codec when loaded


def codec_plugin(name: str) -> plugins.Plugin:
    """The codec class of ``name`` and its origin: ``"built-in"``, ``"entry point <dist>"`` or
    ``"module path"``; raises :class:`ConfigError` as :func:`get_codec_class` does."""
    _load()
    if name in _REGISTRY:
        return plugins.Plugin(name, _REGISTRY[name], "built-in")
    if plugins.is_reference(name):
        return plugins.Plugin(name, plugins.load_reference(name, Codec, "compressor"), "module path")
    if name in plugins.entry_points(plugins.CODEC_GROUP):
        return plugins.load_entry_point(plugins.CODEC_GROUP, name, Codec, "compressor")
    raise ConfigError(unknown_name_message("compressor", name, codec_names()))


def row_codecs() -> list[str]:
    """Names of the registered codecs with their own row encoder (``Codec._encode_rows``, every row
    at once); the others encode row by row (their ``_encode``)."""
    return [n for n in codec_names() if get_codec_class(n)._encode_rows is not Codec._encode_rows]


def is_codec(name: str) -> bool:
    """Whether ``name`` names a codec that loads (a built-in, entry point or reference)."""
    try:
        codec_plugin(name)
    except ConfigError:
        return False
    return True


def use_codec_class(cls: type[Codec]) -> str:
    """Make ``cls`` usable in this process by its reference ``"module:Class"`` and return it (the
    API's ``codec=``); other processes (``compare --jobs``, a ``--resume``) import it by that name."""
    return plugins.remember(cls, Codec, "compressor")


def unknown_name_message(what: str, name: str, valid: list[str]) -> str:
    """``unknown compressor 'tpok' (did you mean 'topk'?); valid: a, b, c``."""
    return f"unknown {what} {name!r}{did_you_mean(name, valid)}; valid: {', '.join(valid)}"


def build_codec(name: str, params: dict[str, Any] | None = None, seed: int = 0) -> Codec:
    """Instantiate the codec ``name`` with ``params`` (a dict from the scenario file).

    Raises
    ------
    ConfigError
        Unknown codec, or every problem with the parameters, one ``compressor.KEY: reason`` line
        each (unknown or mistyped keys, non-finite or out-of-range values, cross-field checks).
    """
    cls = get_codec_class(name)
    checked = check_fields(cls.Params, dict(params or {}), prefix=PARAM_PREFIX)
    if checked.problems:
        raise ConfigError(checked.problems)
    values = cls.Params(**checked.values)
    problems = cls.validate(values)  # what only the whole set can tell (e.g. min <= max)
    if problems:
        raise ConfigError([PARAM_PREFIX + p for p in problems])
    return cls(values, seed=seed)
