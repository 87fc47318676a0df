"""Small base scenarios and declared-schema mutations.

The bases are the shipped scenarios shrunk to a few nodes, the ``digits`` data set, the ``mlp``
model and 2 iterations, so that a file validate accepts runs in about a second. A schema mutation
sets a declared key (``aiotsim.config.SECTIONS`` and ``BLOCKS``) to a value at an edge of its
declared range (the bounds, found in its range check, and the floats just outside them), to a
choice or a near miss of one, or to a value of the wrong type; or it drops a section, a required
block key or a block. This differs from ``tests/test_fuzz.py``, which draws random values through
hypothesis: here every declared bound of every key is aimed at.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import random
import typing
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SKIP_BASES = ("sweep",)


def shrink(data: dict[str, Any]) -> dict[str, Any]:
    """A copy of a scenario that runs in about a second: <= 3 nodes, digits + mlp, 2 iterations."""
    out = copy.deepcopy(data)
    sc = out.setdefault("scenario", {})
    sc["iterations"] = 2
    sc.pop("trace_nodes", None)
    d = out.setdefault("data", {})
    d.update(dataset="digits", eval_samples=200)
    for key in ("path", "download", "by_writer", "synthetic_shape"):
        d.pop(key, None)
    out.setdefault("model", {})["name"] = "mlp"
    out.setdefault("training", {})["eval_every"] = 1
    nodes = out.setdefault("nodes", {})
    groups = nodes.get("group") or []
    for g in groups:
        g["count"] = 1
    nodes["count"] = len(groups) if groups else min(int(nodes.get("count", 3)), 3)
    nw = out.get("network", {})
    if nw.get("topology") == "hierarchical":
        nw["gateways"] = 1
    elif nw.get("topology") != "custom":
        nw.pop("gateways", None)
    return out


def bases() -> dict[str, dict[str, Any]]:
    """Shrunk shipped scenarios (and tests/tiny.toml) by name; trace paths absolute."""
    from aiotsim.config import read_toml

    files = sorted((ROOT / "scenarios").glob("*.toml")) + [ROOT / "tests" / "tiny.toml"]
    out = {}
    for p in files:
        if p.name.startswith(SKIP_BASES):
            continue
        data = read_toml(p)
        if p.stem == "fedavg100":
            out[p.stem] = shrink(data)
            out[p.stem]["nodes"]["per_round"] = 2
        elif p.stem == "custom":
            out[p.stem] = shrink(data)  # its 4 nodes are named by its links
            out[p.stem]["nodes"]["count"] = 4
        else:
            out[p.stem] = shrink(data)
    return out


def _bounds(check: Any) -> list[float]:
    """The numeric bounds a range check closes over (``between(lo, hi)``, ``all_of(...)``)."""
    found: list[float] = []
    for cell in getattr(check, "__closure__", None) or ():
        v = cell.cell_contents
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            found.append(v)
        elif callable(v):
            found += _bounds(v)
        elif isinstance(v, tuple):
            for c in v:
                found += _bounds(c) if callable(c) else []
    return found


def _numeric_edges(bounds: list[float], is_int: bool) -> list[Any]:
    """Values at and just beyond each bound, plus the usual suspects near 0 and 1."""
    vals: list[Any] = [0, 1, 0.5, 1e-9, 0.999999, -1e-9]
    for b in bounds:
        vals += [b, b - 1, b + 1] if is_int else [b, math.nextafter(b, -math.inf), math.nextafter(b, math.inf)]
        vals += [b * 0.999999, b * 1.000001] if b else [5e-324, -5e-324]
    if is_int:
        return sorted({int(v) for v in vals if math.isfinite(v)})
    return sorted({float(v) for v in vals})


WRONG_TYPES: list[Any] = ["1", "", "nan", 2.5, True, [1], {"x": 1}, "1e3", -0.0, 10**30, "node0"]


def field_values() -> dict[str, list[Any]]:
    """``section.key`` (or ``section.block[].key``) -> edge values, choices and wrong types."""
    from aiotsim.config import BLOCKS, SECTIONS, resolve_choices

    out: dict[str, list[Any]] = {}
    classes = [(name, cls) for name, cls in SECTIONS.items()]
    classes += [(f"{s}.{b}[]", cls) for s, blocks in BLOCKS.items() for b, cls in blocks.items()]
    for name, cls in classes:
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            key = "from" if f.name == "from_" else f.name
            choices = f.metadata.get("choices")
            hint = hints[f.name]
            if choices is not None:
                names = resolve_choices(choices) if isinstance(choices, str) else list(choices)
                vals = names + [n.upper() for n in names[:2]] + [f" {names[0]}", names[0] + "x", ""]
            elif hint is bool:
                vals = [True, False, 0, 1, "true"]
            elif hint in (int, float) or typing.get_origin(hint) is typing.Union:
                is_int = hint is int
                vals = _numeric_edges(_bounds(f.metadata.get("check")), is_int)
                vals += [math.inf, -math.inf, math.nan] if not is_int else [2**63, -(2**63) - 1]
            elif hint is str:
                vals = ["", " ", "x" * 300, "a/b", "..", "\u0000", "é", "node0", "server"]
            else:
                vals = [[], [0], [1, 1], [-1], [10**9]]
            out[f"{name}.{key}"] = vals + WRONG_TYPES
    return out


def set_key(data: dict[str, Any], dotted: str, value: Any, rng: random.Random) -> None:
    """Set ``section.key`` or ``section.block[].key`` (in a random existing or new block)."""
    head, _, key = dotted.rpartition(".")
    if head.endswith("[]"):
        section, _, block = head[:-2].partition(".")
        sec = data.setdefault(section, {})
        blocks = sec.setdefault(block, []) if isinstance(sec, dict) else None
        if not isinstance(blocks, list):
            return
        if not blocks or rng.random() < 0.2:
            blocks.append({})
        target = rng.choice(blocks)
    else:
        target = data.setdefault(head, {})
    if isinstance(target, dict):
        target[key] = copy.deepcopy(value)


def schema_mutation(data: dict[str, Any], values: dict[str, list[Any]], rng: random.Random) -> str:
    """Apply one schema mutation in place; returns its description."""
    op = rng.choices(["edge", "drop-section", "drop-key", "drop-block-key", "unknown"], [20, 1, 2, 1, 1])[0]
    if op == "edge":
        dotted = rng.choice(sorted(values))
        value = rng.choice(values[dotted])
        set_key(data, dotted, value, rng)
        return f"{dotted}={value!r}"
    if op == "drop-section" and data:
        name = rng.choice(sorted(data))
        del data[name]
        return f"drop [{name}]"
    if op == "drop-key":
        section = rng.choice(sorted(data)) if data else "scenario"
        sec = data.get(section)
        if isinstance(sec, dict) and sec:
            key = rng.choice(sorted(sec))
            del sec[key]
            return f"drop {section}.{key}"
    if op == "drop-block-key":
        for section, block in (("nodes", "group"), ("network", "link"), ("network", "vertex")):
            sec = data.get(section)
            blocks = sec.get(block) if isinstance(sec, dict) else None
            if isinstance(blocks, list) and blocks:
                b = rng.choice(blocks)
                if isinstance(b, dict) and b:
                    key = rng.choice(sorted(b))
                    del b[key]
                    return f"drop {section}.{block}[].{key}"
    section = rng.choice(["scenario", "nodes", "network", "data", "training", "fuzz"])
    target = data.setdefault(section, {})
    if isinstance(target, dict):
        target[rng.choice(["countt", "Count", "seed ", "x"])] = 1
    return f"unknown key in [{section}]"
