"""Declared fields and their checks: the one validation mechanism for scenario sections, node
groups and codec parameters.

A field is declared once on a dataclass with :func:`opt` (default, help, range check, choices);
:func:`check_fields` checks a TOML table against such a class. One place decides what a TOML value
may be for an annotated field (an int is a fine float, a bool is not an int, ``Literal`` lists its
values, ``X | None`` and ``list[...]`` recurse, floats must be finite) and how the expected type is
named in an error message.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any

# Bounds shared by the scenario's keys (aiotsim.config) and the files they name (bandwidth traces,
# aiotsim.network.traces), kept here, below both.
MIN_MBPS = 1e-4  # 100 bit/s (LoRa's slowest is ~250 bit/s): slower links would make times overflow
MAX_MBPS = 1e6  # 1 Tbit/s: a sane upper bound on any link rate, constant or traced
MAX_SECONDS = 1e6  # s (11.6 days): the longest simulated span a key (or a trace's period) may set


def type_ok(value: Any, annotation: Any) -> bool:
    """Whether the TOML ``value`` fits ``annotation``."""
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return value in typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        return any(type_ok(value, a) for a in typing.get_args(annotation))
    if origin is list:
        (item,) = typing.get_args(annotation) or (Any,)
        return isinstance(value, list) and all(type_ok(v, item) for v in value)
    if origin is dict or annotation is dict:
        return isinstance(value, dict)
    if annotation is type(None):
        return value is None
    if annotation is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if annotation is bool:
        return isinstance(value, bool)
    if annotation is str:
        return isinstance(value, str)
    return True


def type_label(annotation: Any) -> str:
    """``"a number"``, ``"one of 'a', 'b'"``, ``"a list of integers"`` ... for error messages."""
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(annotation))
    if origin in (typing.Union, types.UnionType):
        return " or ".join(type_label(a) for a in typing.get_args(annotation))
    if origin is list:
        (item,) = typing.get_args(annotation) or (Any,)
        if typing.get_origin(item) is dict or item is dict:
            return "a list of tables ([[...]] blocks)"
        inner = type_label(item)
        if inner.startswith("a list of "):  # list[list[float]]: "a list of lists of numbers"
            return "a list of lists of " + inner.removeprefix("a list of ")
        return f"a list of {inner.removeprefix('a ').removeprefix('an ')}s"
    names = {float: "a number", int: "an integer", bool: "true or false", str: "a string", type(None): "none"}
    return names.get(annotation, getattr(annotation, "__name__", str(annotation)))


def did_you_mean(word: str, valid: list[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest valid word, or an empty string."""
    close = difflib.get_close_matches(word, valid, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


# ---- declared fields: the one mechanism that checks scenario sections, node groups and codec
# parameters. A field carries its default, a help line, an optional range check and optional
# choices in its dataclass metadata; :func:`check_fields` checks a TOML table against the class.
Check = Callable[[Any], "str | None"]


def opt(
    default: Any,
    help: str,
    check: Check | None = None,
    choices: tuple[str, ...] | str | None = None,
    what: str | None = None,
) -> Any:
    """A declared dataclass field: default, one-line help, optional range check and choices.

    ``choices`` is a tuple of valid names, or the name of a lazily loaded registry that the
    caller of :func:`check_fields` resolves (e.g. ``"compressors"``); ``what`` names one choice in
    messages (``unknown compressor 'x'``).
    """
    meta = {"help": help, "check": check, "choices": choices}
    if what is not None:
        meta["what"] = what
    if isinstance(default, (list, dict)):
        return dataclasses.field(default_factory=lambda d=default: type(d)(d), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def positive(v: Any) -> str | None:
    """Range check: ``v > 0``."""
    return None if v > 0 else f"must be > 0, got {v!r}"


def non_negative(v: Any) -> str | None:
    """Range check: ``v >= 0``."""
    return None if v >= 0 else f"must be >= 0, got {v!r}"


def fraction(v: Any) -> str | None:
    """Range check: ``0 <= v < 1``."""
    return None if 0 <= v < 1 else f"must be in [0, 1), got {v!r}"


def unit_interval(v: Any) -> str | None:
    """Range check: ``0 < v <= 1``."""
    return None if 0 < v <= 1 else f"must be in (0, 1], got {v!r}"


def open_fraction(v: Any) -> str | None:
    """Range check: ``0 < v < 1``."""
    return None if 0 < v < 1 else f"must be in (0, 1), got {v!r}"


def positive_at_most(hi: float) -> Check:
    """Range check: ``0 < v <= hi`` (positive, with a sane upper bound)."""

    def check(v: Any) -> str | None:
        if v <= 0:
            return f"must be > 0, got {v!r}"
        return None if v <= hi else f"must be <= {hi:g} (a sane upper bound), got {v!r}"

    return check


def at_least(lo: float) -> Check:
    """Range check: ``v >= lo``."""

    def check(v: Any) -> str | None:
        return None if v >= lo else f"must be >= {lo}, got {v!r}"

    return check


def between(lo: float, hi: float) -> Check:
    """Range check: ``lo <= v <= hi`` (inclusive; for sane upper bounds)."""

    def check(v: Any) -> str | None:
        return None if lo <= v <= hi else f"must be in [{lo}, {hi}], got {v!r}"

    return check


def zero_or_between(lo: float, hi: float) -> Check:
    """Range check: ``v == 0`` (off) or ``lo <= v <= hi``."""

    def check(v: Any) -> str | None:
        return None if v == 0 or lo <= v <= hi else f"must be 0 or in [{lo:g}, {hi:g}], got {v!r}"

    return check


def all_of(*checks: Check) -> Check:
    """Range check: every one of ``checks`` (the first problem is reported)."""

    def check(v: Any) -> str | None:
        return next((m for c in checks if (m := c(v)) is not None), None)

    return check


def _non_finite(value: Any) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, list):
        return any(_non_finite(v) for v in value)
    return False


@dataclasses.dataclass
class Checked:
    """What :func:`check_fields` found: accepted ``values``, ``extra`` keys (when allowed) and
    ``problems`` (one line each)."""

    values: dict[str, Any]
    extra: dict[str, Any]
    problems: list[str]


def check_fields(
    cls: type,
    raw: Mapping[str, Any],
    prefix: str,
    resolve_choices: Callable[[str], list[str]] | None = None,
    allow_extra: bool = False,
    skip: tuple[str, ...] = (),
) -> Checked:
    """Check the TOML table ``raw`` against the declared fields of dataclass ``cls``.

    Each problem reads ``{prefix}{key}: reason``: unknown keys (with a did-you-mean, unless
    ``allow_extra`` collects them in ``extra``), wrong types, non-finite numbers, values outside
    ``choices`` and failed range checks. Fields named in ``skip`` are not settable from a table.
    Integers given for float fields are converted.
    """
    fields = {f.name: f for f in dataclasses.fields(cls) if f.name not in skip}
    hints = typing.get_type_hints(cls)
    out = Checked({}, {}, [])
    for key, value in raw.items():
        if not isinstance(key, str) or key not in fields:
            if allow_extra:
                out.extra[key] = value
            else:
                valid = list(fields)
                out.problems.append(
                    f"{prefix}{key}: unknown key{did_you_mean(str(key), valid)}; valid: {', '.join(valid) or 'none'}"
                )
            continue
        problem = _field_problem(fields[key], hints[key], value, resolve_choices)
        if problem:
            out.problems.append(f"{prefix}{key}: {problem}")
            continue
        out.values[key] = float(value) if hints[key] is float and isinstance(value, int) else value
    return out


def _field_problem(
    f: dataclasses.Field, annotation: Any, value: Any, resolve: Callable[[str], list[str]] | None
) -> str | None:
    """Why ``value`` does not fit the declared field ``f`` (None when it does)."""
    if not type_ok(value, annotation):
        return f"must be {type_label(annotation)}, got {value!r}"
    if _non_finite(value):
        return f"must be a finite number, got {value!r}"
    choices = f.metadata.get("choices")
    if choices is not None:
        valid = resolve(choices) if isinstance(choices, str) and resolve else list(choices)
        if value not in valid:
            what = f.metadata.get("what", "value")
            names = [str(v) for v in valid]
            return f"unknown {what} {value!r}{did_you_mean(str(value), names)}; valid: {', '.join(names)}"
    check = f.metadata.get("check")
    return check(value) if check is not None else None
