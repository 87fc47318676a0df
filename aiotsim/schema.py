"""Checking TOML values against Python type annotations, for scenario keys and codec parameters.

One place decides what a TOML value may be for an annotated field (an int is a fine float, a bool
is not an int, ``Literal`` lists its values, ``X | None`` and ``list[...]`` recurse) and how the
expected type is named in an error message.
"""

from __future__ import annotations

import difflib
import types
import typing
from typing import Any


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
        return f"a list of {type_label(item).removeprefix('a ').removeprefix('an ')}s"
    names = {float: "a number", int: "an integer", bool: "true or false", str: "a string", type(None): "none"}
    return names.get(annotation, getattr(annotation, "__name__", str(annotation)))


def did_you_mean(word: str, valid: list[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest valid word, or an empty string."""
    close = difflib.get_close_matches(word, valid, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""
