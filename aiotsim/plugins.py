"""Plugins: classes named ``"package.module:ClassName"`` or installed under an entry-point group.

Shared by codecs (``compressor.name``, group ``aiotsim.codecs``) and server optimizers
(``training.server_optimizer``, group ``aiotsim.server_optimizers``). A name with a colon is a
*reference*: the module is imported with :func:`importlib.import_module` (it must be importable:
on ``sys.path``, e.g. through ``PYTHONPATH``, also in ``compare --jobs N`` worker processes) and
the attribute after the colon is taken from it. A name without one may be an entry point of an
installed distribution (``[project.entry-points."aiotsim.codecs"] mycodec = "pkg.mod:MyCodec"``).

Security: a scenario file may not run code on its own, and importing a module runs it. So a
reference is imported only when its module (or a package above it) is allowed by the user, in the
environment variable ``AIOTSIM_PLUGINS`` (comma-separated names, e.g. ``AIOTSIM_PLUGINS=my_codecs``;
worker processes inherit it); any other reference is refused before anything is imported. Entry
points are allowed by installing their distribution, and a class handed to the API
(``aiotsim.run(codec=C)``) by handing it over.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from typing import Any

from aiotsim.errors import ConfigError
from aiotsim.schema import did_you_mean

CODEC_GROUP = "aiotsim.codecs"
SERVER_OPTIMIZER_GROUP = "aiotsim.server_optimizers"
# The server optimizers' base class by reference: validation (config.py) checks a plugin against it
# without importing the simulation; aiotsim.sim.server_opt checks the built-in names.
SERVER_OPTIMIZER_BASE = "aiotsim.sim.server_opt:ServerOptimizer"
SERVER_OPTIMIZER_BUILTINS = ("avg", "momentum", "adam")

# A base class, or its reference "module:Class".
Base = type | str

# Classes handed to the API (``aiotsim.run(..., codec=C)``) by reference: they may live in a
# script's ``__main__`` that no other process can import, so this process remembers them.
_GIVEN: dict[str, type] = {}
# Entry points per group, read once per process (scanning every installed distribution costs ms,
# and validation asks for the names many times); :func:`clear_cache` forgets them.
_ENTRY_POINTS: dict[str, dict[str, metadata.EntryPoint]] = {}
ALLOW_ENV = "AIOTSIM_PLUGINS"  # modules (or packages) a reference may import, comma-separated


def allowed(module_name: str) -> bool:
    """Whether ``module_name`` is, or lies under, a module the user allowed in ``AIOTSIM_PLUGINS``."""
    names = [n.strip() for n in os.environ.get(ALLOW_ENV, "").split(",") if n.strip()]
    return any(module_name == n or module_name.startswith(n + ".") for n in names)


@dataclass(frozen=True)
class Plugin:
    """A loaded plugin class and where it came from (``origin``: ``"module path"`` or
    ``"entry point <dist>"``), as ``aiotsim compressors`` lists it."""

    name: str
    cls: type
    origin: str


def is_reference(name: str) -> bool:
    """Whether ``name`` reads ``"package.module:ClassName"`` (both parts non-empty)."""
    module, sep, attr = name.partition(":")
    return bool(sep and module.strip() and attr.strip())


def reference_of(cls: type) -> str:
    """``"package.module:ClassName"`` of ``cls`` (its module and qualified name)."""
    return f"{cls.__module__}:{cls.__qualname__}"


def remember(cls: type, base: type, what: str) -> str:
    """Make ``cls`` loadable in this process under its reference (see :func:`reference_of`),
    even when its module cannot be imported by name; returns the reference.

    Raises
    ------
    ConfigError
        ``cls`` is not a subclass of ``base``.
    """
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise ConfigError(f"{what} {cls!r} must be a subclass of {base.__module__}.{base.__qualname__}")
    ref = reference_of(cls)
    _GIVEN[ref] = cls
    return ref


def load_reference(ref: str, base: Base, what: str) -> type:
    """The class named by ``"package.module:ClassName"``, checked to subclass ``base``.

    Raises
    ------
    ConfigError
        The module cannot be imported (its name and the error), it has no such attribute, or the
        attribute is not a subclass of ``base``.
    """
    if ref in _GIVEN:
        return _GIVEN[ref]
    module_name, _, attr = (part.strip() for part in ref.partition(":"))
    if not allowed(module_name):
        raise ConfigError(
            f"{what} {ref!r}: module {module_name!r} is not allowed to be imported (a scenario may not run "
            f"code on its own); allow it with the environment variable {ALLOW_ENV}={module_name} "
            "(comma-separated modules or packages), or install it under an entry point"
        )
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # any error of the user's module is reported, never a traceback
        hint = " (is its folder on PYTHONPATH?)" if isinstance(exc, ModuleNotFoundError) else ""
        raise ConfigError(
            f"{what} {ref!r}: cannot import module {module_name!r}: {type(exc).__name__}: {exc}{hint}"
        ) from None
    obj: Any = module
    for part in attr.split("."):  # a nested class: "mod:Outer.Inner"
        if not hasattr(obj, part):
            fits = sorted(  # the plugin classes it defines (not those it imports, as the base)
                k for k, v in vars(module).items() if _subclass(v, base) and v.__module__ == module.__name__
            )
            raise ConfigError(
                f"{what} {ref!r}: module {module_name!r} has no attribute {attr!r}{did_you_mean(attr, fits)}; "
                f"its {what} classes: {', '.join(fits) or 'none'}"
            )
        obj = getattr(obj, part)
    return _checked(obj, base, what, ref)


def _checked(obj: Any, base: Base, what: str, name: str) -> type:
    if not _subclass(obj, base):
        label = base.replace(":", ".") if isinstance(base, str) else f"{base.__module__}.{base.__qualname__}"
        raise ConfigError(f"{what} {name!r}: {obj!r} is not a subclass of {label}; a {what} plugin must subclass it")
    return obj


def _subclass(obj: Any, base: Base) -> bool:
    """``issubclass``; a base given by reference is looked for in the MRO by name, so a check
    needs no import of the base's module (the plugin imported it already if it subclasses it)."""
    if not isinstance(obj, type):
        return False
    if isinstance(base, type):
        return issubclass(obj, base)
    return any(reference_of(c) == base for c in obj.__mro__)


def find(name: str, group: str, base: Base, what: str, builtins: Sequence[str]) -> Plugin:
    """The plugin ``name`` that is not one of ``builtins``: a reference or an entry point of
    ``group``, checked to subclass ``base`` (a class, or its reference ``"module:Class"``).

    Raises
    ------
    ConfigError
        An unknown name (did-you-mean over ``builtins`` and the entry points, all listed), or a
        plugin that cannot be imported or is not a subclass of ``base``.
    """
    if is_reference(name):
        return Plugin(name, load_reference(name, base, what), "module path")
    if name in entry_points(group):
        return load_entry_point(group, name, base, what)
    valid = [*builtins, *sorted(set(entry_points(group)) - set(builtins))]
    raise ConfigError(
        f"unknown {what} {name!r}{did_you_mean(name, valid)}; valid: {', '.join(valid)} "
        "or a plugin 'package.module:ClassName'"
    )


def entry_points(group: str) -> dict[str, metadata.EntryPoint]:
    """The installed entry points of ``group`` by name (not loaded), read once per process."""
    if group not in _ENTRY_POINTS:
        found: dict[str, metadata.EntryPoint] = {}
        for ep in metadata.entry_points(group=group):
            found.setdefault(ep.name, ep)  # the first on sys.path wins, as for imports
        _ENTRY_POINTS[group] = found
    return _ENTRY_POINTS[group]


def load_entry_point(group: str, name: str, base: Base, what: str) -> Plugin:
    """Load the entry point ``name`` of ``group`` (which must exist), checked to subclass ``base``.

    Raises
    ------
    ConfigError
        Loading fails (the target and the error) or the target is not a subclass of ``base``.
    """
    ep = entry_points(group)[name]
    try:
        obj = ep.load()
    except Exception as exc:  # the installed package's error, reported without a traceback
        raise ConfigError(
            f"{what} {name!r} (entry point {ep.value!r} in group {group!r}): cannot load it: "
            f"{type(exc).__name__}: {exc}"
        ) from None
    return Plugin(name, _checked(obj, base, what, name), f"entry point {_dist_name(ep)}")


def _dist_name(ep: metadata.EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    return dist.name if dist is not None else "(unknown distribution)"


def clear_cache() -> None:
    """Forget the entry points read so far and the classes given to the API (tests use it)."""
    _ENTRY_POINTS.clear()
    _GIVEN.clear()


__all__ = [
    "CODEC_GROUP",
    "SERVER_OPTIMIZER_BASE",
    "SERVER_OPTIMIZER_BUILTINS",
    "SERVER_OPTIMIZER_GROUP",
    "find",
    "Plugin",
    "clear_cache",
    "entry_points",
    "is_reference",
    "load_entry_point",
    "load_reference",
    "reference_of",
    "remember",
]
