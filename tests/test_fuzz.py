"""Fuzzing the scenario gate: mutated shipped scenarios through the CLI, in-process.

Every mutated file must give exit code 0 or 2 from ``aiotsim validate`` and never a traceback
(``result.exception`` is None or SystemExit). A file validate accepts must run: a short run (2
iterations, few nodes, the small ``digits`` data and ``mlp`` model unless the mutation chose
others) completes or stops with a named status (diverged: 3, stalled: 4), and a complete run has
finite numbers.

Mutations: drop keys, sections or blocks; set a key to an extreme or mistyped value (0, -1, huge
integers, 1e308, inf, nan, "nan", empty strings and lists, nested tables, random unicode); add
unknown keys; and byte-level damage (invalid UTF-8, truncation, deep nesting).

Examples: ``AIOTSIM_FUZZ_EXAMPLES`` (validate, default 200) and ``AIOTSIM_FUZZ_RUNS`` (runs,
default 20). The run part is marked slow.
"""

from __future__ import annotations

import copy
import json
import math
import os
import signal
import tempfile
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from conftest import ROOT, TESTS
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from aiotsim.cli import app

runner = CliRunner()
VALIDATE_EXAMPLES = int(os.environ.get("AIOTSIM_FUZZ_EXAMPLES", "200"))
RUN_EXAMPLES = int(os.environ.get("AIOTSIM_FUZZ_RUNS", "20"))
RUN_TIMEOUT_S = int(os.environ.get("AIOTSIM_FUZZ_RUN_TIMEOUT", "120"))

SHIPPED = sorted(p for p in (ROOT / "scenarios").glob("*.toml") if not p.name.startswith("sweep"))
BASES = {p.name: tomllib.loads(p.read_text()) for p in [*SHIPPED, TESTS / "tiny.toml"]}

EXTREMES: list[Any] = [
    0, -1, 1, 2, 2**31, 2**63 - 1, -(2**63), 10**6, 10**9,
    0.0, -0.0, 1e-308, 5e-324, 1e308, -1e308, math.inf, -math.inf, math.nan,
    "nan", "inf", "", " ", "none", "../../x", "/tmp/x", "\x00", "é", "🙂" * 3,
    [], [[]], [0], [1, 2], [-1, 0, 1], [1.5], ["a"], {}, {"a": 1}, {"name": []},
    True, False,
]  # fmt: skip

values = st.one_of(
    st.sampled_from(EXTREMES).map(copy.deepcopy),  # a fresh copy: mutations must not alias or change EXTREMES
    st.integers(min_value=-(2**63), max_value=2**64),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.lists(st.integers(min_value=-5, max_value=5000), max_size=4),
    st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
    st.booleans(),
)


def _edge_candidates(annotation: Any) -> list[Any]:
    """Values of the right type at the edges of typical ranges (some pass a field's check)."""
    if annotation is int or annotation == "int":
        return [0, 1, 2, 3, 7, 1000, 65_536, 100_000, 1_000_000, 2**31, 2**32 - 1]
    if annotation is float or annotation == "float":
        return [0.0, 5e-324, 1e-300, 1e-9, 0.5, 0.999999, 1.0, 2.0, 1000.0, 1e6]
    if annotation is bool or annotation == "bool":
        return [True, False]
    return []


def edge_values() -> dict[str, list[Any]]:
    """``"section.key"`` -> values of the right type that the key's own check accepts."""
    import dataclasses
    import typing

    from aiotsim.config import SECTIONS, resolve_choices

    out: dict[str, list[Any]] = {}
    for name, cls in SECTIONS.items():
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            choices = f.metadata.get("choices")
            if choices is not None:
                out[f"{name}.{f.name}"] = resolve_choices(choices) if isinstance(choices, str) else list(choices)
                continue
            check = f.metadata.get("check")
            ok = [v for v in _edge_candidates(hints[f.name]) if check is None or check(v) is None]
            if ok:
                out[f"{name}.{f.name}"] = ok
    return out


EDGES = edge_values()


def paths(node: Any, prefix: tuple = ()) -> Iterator[tuple]:
    """Every path to a value inside a nested dict/list scenario (containers included)."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield (*prefix, k)
            yield from paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield (*prefix, i)
            yield from paths(v, (*prefix, i))


def _parent(data: Any, path: tuple) -> Any:
    for p in path[:-1]:
        data = data[p]
    return data


@st.composite
def mutated(draw: st.DrawFn) -> tuple[dict[str, Any], set[str]]:
    """A shipped scenario with 1..3 mutations; also the dotted keys the mutations touched."""
    data = copy.deepcopy(BASES[draw(st.sampled_from(sorted(BASES)))])
    touched: set[str] = set()
    for _ in range(draw(st.integers(1, 3))):
        all_paths = list(paths(data))
        op = draw(st.sampled_from(["set", "set", "set", "drop", "add", "swap", "edge", "edge"]))
        if not all_paths:
            op = "add"
        if op == "edge":  # a valid key at an edge of its range: the run must cope
            dotted = draw(st.sampled_from(sorted(EDGES)))
            section, _, key = dotted.partition(".")
            target = data.setdefault(section, {})
            if isinstance(target, dict):
                target[key] = draw(st.sampled_from(EDGES[dotted]))
                touched.add(dotted)
            continue
        if op == "add":
            section = draw(st.sampled_from([*sorted(data), "nodes", "network", "data", draw(st.text(max_size=6))]))
            key = draw(st.one_of(st.sampled_from(["count", "name", "group", "link", "vertex", "seed"]), st.text()))
            target = data.setdefault(section, {})
            if isinstance(target, dict):
                target[key] = draw(values)
                touched.add(f"{section}.{key}")
            continue
        path = draw(st.sampled_from(all_paths))
        parent = _parent(data, path)
        touched.add(".".join(str(p) for p in path[:2]))
        if op == "drop":
            del parent[path[-1]]
        elif op == "swap":
            other = draw(st.sampled_from(all_paths))
            parent[path[-1]] = copy.deepcopy(_get(data, other))
        else:
            parent[path[-1]] = draw(values)
    return data, touched


def _get(data: Any, path: tuple) -> Any:
    for p in path:
        data = data[p]
    return data


def to_toml(data: dict[str, Any]) -> str | None:
    """TOML text of ``data``, or None when TOML cannot express it (e.g. a list of tables and values)."""
    try:
        return tomli_w.dumps(data)
    except (TypeError, ValueError, RecursionError):
        return None


@st.composite
def damaged(draw: st.DrawFn) -> bytes:
    """A shipped scenario's bytes with byte-level damage."""
    raw = (ROOT / "scenarios" / draw(st.sampled_from([p.name for p in SHIPPED]))).read_bytes()
    at = draw(st.integers(0, len(raw)))
    op = draw(st.sampled_from(["insert", "truncate", "deep", "invalid"]))
    if op == "truncate":
        return raw[:at]
    if op == "deep":
        depth = draw(st.integers(1, 2000))
        return raw + b"\n[fuzz]\nx = " + b"[" * depth + b"]" * depth + b"\n"
    if op == "invalid":
        return raw[:at] + draw(st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x00"])) + raw[at:]
    return raw[:at] + draw(st.binary(max_size=8)) + raw[at:]


def validate_outcome(path: Path) -> int:
    """Exit code of ``aiotsim validate path``; fails the test on a traceback."""
    res = runner.invoke(app, ["validate", str(path)])
    assert res.exception is None or isinstance(res.exception, SystemExit), (
        f"traceback from validate on {path.read_bytes()[:2000]!r}: {res.exception!r}"
    )
    assert res.exit_code in (0, 2), res.output
    if res.exit_code == 2:
        assert "error:" in res.output, res.output
    return res.exit_code


def small(data: dict[str, Any], touched: set[str]) -> dict[str, Any]:
    """A short-run version: 2 iterations, at most 3 nodes, digits + mlp unless the mutation chose them."""
    out = copy.deepcopy(data)

    def put(dotted: str, value: Any) -> None:
        section, _, key = dotted.partition(".")
        sec = out.setdefault(section, {})
        if isinstance(sec, dict) and dotted not in touched:
            sec[key] = value

    nodes = out.get("nodes", {})
    if isinstance(nodes, dict) and not nodes.get("group"):
        count = nodes.get("count", 10)
        if not isinstance(count, int) or isinstance(count, bool) or count > 3:
            put("nodes.count", 3)
        network = out.get("network", {})
        if isinstance(network, dict) and "network.gateways" not in touched:
            network.pop("gateways", None)
    put("data.dataset", "digits")
    put("model.name", "mlp")
    put("training.eval_every", 1)
    put("data.eval_samples", 200)
    return out


class _Hang(Exception):
    pass


def run_outcome(path: Path, out_dir: Path) -> tuple[int, dict[str, Any] | None]:
    """Exit code and summary of a 2-iteration run; fails the test on a traceback or a hang."""

    def alarm(signum: int, frame: Any) -> None:
        raise _Hang(f"run of {path} took over {RUN_TIMEOUT_S} s")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(RUN_TIMEOUT_S)
    try:
        res = runner.invoke(app, ["run", str(path), "-n", "2", "-q", "--out", str(out_dir), "--device", "cpu"])
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert res.exception is None or isinstance(res.exception, SystemExit), (
        f"run failed on an accepted file {path.read_text()!r}: {res.exception!r}\n{res.output}"
    )
    assert res.exit_code in (0, 3, 4), f"accepted file, run exit {res.exit_code}: {res.output}"
    summary_path = out_dir / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else None
    return res.exit_code, summary


def all_finite(out_dir: Path) -> bool:
    """Whether every number in metrics.csv, evals.csv and summary.json is finite (no silent NaN
    or inf: a loss, a time, a rate)."""
    import csv

    for name in ("metrics.csv", "evals.csv"):
        with open(out_dir / name, newline="") as f:
            for row in csv.DictReader(f):
                for value in row.values():
                    try:
                        if not math.isfinite(float(value)):
                            return False
                    except (TypeError, ValueError):
                        continue  # empty cells, labels
    summary = json.loads((out_dir / "summary.json").read_text())
    return all(math.isfinite(v) for v in summary.values() if isinstance(v, float))


@settings(
    max_examples=VALIDATE_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@pytest.mark.slow
@given(mutated())
def test_mutated_scenarios_validate_without_traceback(case: tuple[dict[str, Any], set[str]]) -> None:
    text = to_toml(case[0])
    assume(text is not None)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fuzz.toml"
        path.write_text(text)
        validate_outcome(path)


@settings(max_examples=max(VALIDATE_EXAMPLES // 4, 10), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(damaged())
def test_damaged_files_validate_without_traceback(raw: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fuzz.toml"
        path.write_bytes(raw)
        validate_outcome(path)


@pytest.mark.slow
@settings(
    max_examples=RUN_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
)
@given(mutated())
def test_accepted_mutations_run(case: tuple[dict[str, Any], set[str]]) -> None:
    data, touched = case
    text = to_toml(small(data, touched))
    assume(text is not None)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fuzz.toml"
        path.write_text(text)
        assume(validate_outcome(path) == 0)
        out_dir = Path(tmp) / "run"
        code, summary = run_outcome(path, out_dir)
        assert summary is not None, "no summary.json"
        assert summary["status"] in ("complete", "diverged", "stalled"), summary["status"]
        if summary["status"] == "complete":
            assert all_finite(out_dir), "a complete run with a non-finite number (silent NaN or inf)"
