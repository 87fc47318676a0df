"""Checks of a checkpoint's plain data (numbers, lists, records) against their declared types.

A checkpoint's records (totals, the open metrics window, the applied step's uploads, TCP
connections) are dataclasses of the simulator, stored as dicts: :func:`typed` checks each against
the dataclass's type hints, so that a value of another type (a string for a byte count, a list for
a time) or a NaN is refused before the run instead of failing, or spreading, in the middle of it.
Generator states are checked by setting them on a scratch generator of the same kind.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from typing import Any

import numpy as np
import torch


@dataclasses.dataclass(frozen=True)
class Rules:
    """How numbers are checked: NaN never passes; infinities only with ``inf``; negative
    numbers only without ``nonneg`` (counts, bytes, times and energies are never negative)."""

    inf: bool = False
    nonneg: bool = True


def typed(value: Any, hint: Any, where: str, rules: Rules = Rules()) -> list[str]:
    """Problems of ``value`` as an instance of the type ``hint`` (int, float, bool, str, Any,
    ``torch.Tensor`` (finite if floating), ``X | None``, ``list[X]``, ``tuple[...]``,
    ``dict[str, X]``, a named tuple as a plain tuple, a dataclass as a dict of its fields).
    Ints are never bools; numbers follow ``rules``."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return []
    if origin in (typing.Union, types.UnionType):
        tries = [typed(value, a, where, rules) for a in args]
        return [] if any(not t for t in tries) else min(tries, key=len)
    if dataclasses.is_dataclass(hint):
        return record(value, hint, where, rules)
    if isinstance(hint, type) and issubclass(hint, tuple) and hasattr(hint, "_fields"):  # a named tuple
        return _sequence(value, tuple, tuple(typing.get_type_hints(hint).values()), where, rules)
    if origin in (list, tuple):
        return _sequence(value, origin, args, where, rules)
    if origin is dict:
        if not isinstance(value, dict):
            return [f"{where} must be a dict, not {type(value).__name__}"]
        return [
            p
            for k, v in value.items()
            for p in typed(k, args[0], f"{where} key", rules) + typed(v, args[1], f"{where}[{k!r}]", rules)
        ]
    return _scalar(value, hint, where, rules)


def _scalar(value: Any, hint: Any, where: str, rules: Rules) -> list[str]:
    if value is None and hint is type(None):
        return []
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if (hint is float and number) or (hint is int and isinstance(value, int) and not isinstance(value, bool)):
        if math.isnan(value) or (math.isinf(value) and not rules.inf) or (rules.nonneg and value < 0):
            kind = ("" if rules.inf else "finite ") + ("number >= 0" if rules.nonneg else "number")
            return [f"{where} (={value!r}) must be a {kind}"]
        return []
    if hint is torch.Tensor and isinstance(value, torch.Tensor):
        finite = not value.is_floating_point() or bool(torch.isfinite(value).all())
        return [] if finite else [f"{where} holds NaN or infinite values"]
    if hint not in (int, float) and isinstance(hint, type) and isinstance(value, hint):
        return []
    return [f"{where} (={value!r:.40}) must be a {getattr(hint, '__name__', hint)}"]


def _sequence(value: Any, origin: type, args: tuple[Any, ...], where: str, rules: Rules) -> list[str]:
    if not isinstance(value, list | tuple):
        return [f"{where} must be a {origin.__name__}, not {type(value).__name__}"]
    if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
        if len(value) != len(args):
            return [f"{where} must have {len(args)} items"]
        return [
            p for i, (v, a) in enumerate(zip(value, args, strict=True)) for p in typed(v, a, f"{where}[{i}]", rules)
        ]
    item = args[0] if args else Any
    return [p for i, v in enumerate(value) for p in typed(v, item, f"{where}[{i}]", rules)]


def record(value: Any, cls: Any, where: str, rules: Rules = Rules(), skip: tuple[str, ...] = ()) -> list[str]:
    """Problems of ``value`` as the dict of dataclass ``cls``'s fields (less ``skip``)."""
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)} - set(skip)
    if not isinstance(value, dict) or value.keys() != names:
        return [f"{where} must hold exactly the fields {', '.join(sorted(names))}"]
    return [p for k in sorted(names) for p in typed(value[k], hints[k], f"{where}.{k}", rules)]


def bit_generator(value: Any, like: np.random.Generator, where: str) -> list[str]:
    """Problems of ``value`` as the state of ``like``'s bit generator (set on a scratch copy)."""
    scratch = type(like.bit_generator)()
    try:
        scratch.state = value
    except (TypeError, ValueError, OverflowError, KeyError) as exc:
        return [f"{where} is not a {type(scratch).__name__} generator state ({type(exc).__name__})"]
    return []


__all__ = ["Rules", "typed", "record", "bit_generator"]
