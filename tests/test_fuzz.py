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
import random
import signal
import sys
import tempfile
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tomli_w
import torch
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


# ---- input files a scenario names, data directories, tampered checkpoints (issue 43) ------------
# A sample of tools/fuzz_campaign.py's mutation kinds, one fixed case per kind of bug its campaign
# found, each in a forked child with a timeout (a hang) and a memory cap (a runaway allocation):
# tools/fuzz/execute.py. Each must give exit 0 or 2 with a message; a file validate accepts must
# then run 2 iterations to exit 0/3/4; no file's content may be echoed and no payload may run.

sys.path.insert(0, str(ROOT / "tools"))

from fuzz import datafiles, rundirs  # noqa: E402
from fuzz.execute import Outcome, call_cli  # noqa: E402

CASE_TIMEOUT_S = float(os.environ.get("AIOTSIM_FUZZ_CASE_TIMEOUT", "60"))  # s: a hang
FED = {**BASES["fedavg100.toml"], "nodes": {**BASES["fedavg100.toml"]["nodes"], "count": 3, "per_round": 2}}


@pytest.fixture(scope="module")
def warm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A scratch directory, after one in-process validate (each forked case then starts warm)."""
    runner.invoke(app, ["validate", str(TESTS / "tiny.toml")])
    return tmp_path_factory.mktemp("fuzz-scratch")


def _small_run_of(base: dict[str, Any], **sections: dict[str, Any]) -> dict[str, Any]:
    """``base`` shrunk (as :func:`small`) with ``sections`` merged in (the case's own keys)."""
    out = small(base, set())
    for name, keys in sections.items():
        out.setdefault(name, {}).update(keys)
    return out


def gate(data: dict[str, Any], where: Path, scratch: Path, secret: str = "") -> list[str]:
    """Problems of ``validate`` and, when it accepts, a 2-iteration ``run`` of scenario ``data``."""
    path = where / "scenario.toml"
    path.write_text(tomli_w.dumps(data))
    problems = []
    v = call_cli(["validate", str(path)], CASE_TIMEOUT_S, where, scratch)
    problems += _bad(v, "validate", secret, (0, 2))
    if v.kind == "exit" and v.code == 0:
        cmd = ["run", str(path), "-n", "2", "-q", "--out", str(where / "run"), "--device", "cpu"]
        r = call_cli(cmd, CASE_TIMEOUT_S, where, scratch)
        problems += _bad(r, "run of an accepted file", secret, (0, 3, 4))
    if (where / "PAYLOAD_RAN").exists():
        problems.append("a payload ran")
    return problems


def _bad(o: Outcome, what: str, secret: str, codes: tuple[int, ...]) -> list[str]:
    if o.kind != "exit":
        return [f"{what}: {o.kind} {o.error[-800:]}"]
    out = []
    if o.code not in codes:
        out.append(f"{what}: exit {o.code}: {o.tail()}")
    if o.code == 2 and "error:" not in o.output:
        out.append(f"{what}: exit 2 without a message: {o.tail()}")
    if secret and secret in o.output:
        out.append(f"{what}: echoes the file's content: {o.tail()}")
    return out


def _trace_file(where: Path, kind: str) -> str:
    """A link trace path of ``kind`` in ``where`` (a file, a FIFO, a loop, a path with a NUL)."""
    p = where / ("link.csv" if kind.startswith("csv") else "link.up")
    content = {
        "unicode-digit": "1\n2\n\u00b2\n",  # '²'.isdigit() is True, int('²') raises
        "huge-last": "1\n100000000000\n",  # a 14-byte file whose period is 3 years of 1 ms slots
        "sparse": "0\n50000000\n",  # 2 packets per 50,000 s: a 2-iteration run takes days
        "csv-huge-period": "0,1\n1e300,1\n",
        "csv-tiny-rate": "0,1e-12\n1,1e-12\n",
        "secret": "SECRET_7f3a\n1\n2\n",
    }
    if kind in content:
        p.write_text(content[kind])
    elif kind == "fifo":
        os.mkfifo(p)
    elif kind == "symlink-loop":
        os.symlink(where / "b", p)
        os.symlink(p, where / "b")
    elif kind == "nul-in-path":
        return str(p) + "\x00x"
    elif kind == "etc-passwd":
        return "/etc/passwd"
    return str(p)


TRACE_KINDS = ["unicode-digit", "huge-last", "sparse", "csv-huge-period", "csv-tiny-rate", "fifo", "symlink-loop",
               "nul-in-path", "secret", "etc-passwd"]  # fmt: skip


@pytest.mark.parametrize("kind", TRACE_KINDS)
def test_damaged_link_traces_are_refused_or_run(kind: str, tmp_path: Path, warm: Path) -> None:
    path = _trace_file(tmp_path, kind)
    data = _small_run_of(BASES["tiny.toml"], network={"uplink_trace": path})
    secret = "root:x:0" if kind == "etc-passwd" else "SECRET_7f3a"
    assert gate(data, tmp_path, warm, secret) == []


@pytest.mark.parametrize("resolution_ms", [1e-9, 5e-324, 1e6])
def test_trace_resolution_is_checked_by_validate(resolution_ms: float, tmp_path: Path, warm: Path) -> None:
    """run splits each trace into period / resolution windows and staggers nodes on that grid:
    validate must apply the same split (5e-324 ms: a grid of 0 s, fuzz finding F7)."""
    net = {"uplink_trace": str(ROOT / "scenarios" / "traces" / "cellular.up"), "trace_resolution_ms": resolution_ms,
           "trace_stagger": "random"}  # fmt: skip
    assert gate(_small_run_of(BASES["tiny.toml"], network=net), tmp_path, warm) == []


@pytest.mark.parametrize("kind", ["binary", "dev-zero", "fifo", "secret"])
def test_damaged_availability_traces_are_refused_or_run(kind: str, tmp_path: Path, warm: Path) -> None:
    p = tmp_path / "avail.csv"
    if kind == "binary":
        p.write_bytes(b"\xff\xfe\x00\x81node,0,1\n\x9c")
    elif kind == "fifo":
        os.mkfifo(p)
    elif kind == "secret":
        p.write_text("SECRET_7f3a,0,1\n")
    path = "/dev/zero" if kind == "dev-zero" else str(p)
    data = _small_run_of(FED, nodes={"availability_trace": path})
    assert gate(data, tmp_path, warm, "SECRET_7f3a") == []


def test_custom_topology_whose_aggregator_is_a_node(tmp_path: Path, warm: Path) -> None:
    data = _small_run_of(BASES["custom.toml"], nodes={"count": 4})
    data["network"]["vertex"].append({"name": "node0", "role": "node", "aggregator": "node1"})
    assert gate(data, tmp_path, warm) == []


@pytest.mark.parametrize("kind", ["empty-dir", "truncate-labels", "lying-header"])
def test_damaged_idx_directories_are_refused_by_validate(kind: str, tmp_path: Path, warm: Path) -> None:
    """validate reads the files run reads: a directory run would refuse is refused first."""
    d = tmp_path / "data"
    datafiles.write_idx_set(d, random.Random(0))
    labels = d / "train-labels-idx1-ubyte"
    if kind == "empty-dir":
        for f in datafiles.IDX_FILES:
            (d / f).unlink()
    elif kind == "truncate-labels":
        labels.write_bytes(labels.read_bytes()[:20])
    else:  # the header says 61 labels for 60 images
        labels.write_bytes(datafiles.idx_bytes(np.zeros(60, np.uint8), dims=[61]))
    data = _small_run_of(BASES["tiny.toml"], data={"dataset": "mnist-idx", "path": str(d), "eval_samples": 10})
    path = tmp_path / "scenario.toml"
    path.write_text(tomli_w.dumps(data))
    v = call_cli(["validate", str(path)], CASE_TIMEOUT_S, tmp_path, warm)
    assert v.kind == "exit" and v.code == 2 and "error:" in v.output, v.tail()


@pytest.mark.parametrize("kind", ["code-os-system", "code-exec", "code-subprocess", "huge-array", "unknown-codec"])
def test_crafted_cifar_batches_are_refused_and_run_no_code(kind: str, tmp_path: Path, warm: Path) -> None:
    d = tmp_path / "data"
    datafiles.write_cifar_set(d, random.Random(0))
    marker = tmp_path / "PAYLOAD_RAN"
    raw = datafiles.UNKNOWN_CODEC if kind == "unknown-codec" else datafiles.cifar_payload(kind, marker)
    (d / "data_batch_2").write_bytes(raw)
    data = _small_run_of(BASES["tiny.toml"], data={"dataset": "cifar10", "path": str(d), "eval_samples": 10})
    assert gate(data, tmp_path, warm) == []
    assert not marker.exists()


@pytest.fixture(scope="module")
def base_run(tmp_path_factory: pytest.TempPathFactory, warm: Path) -> Path:
    """A complete 4-iteration run of tests/tiny.toml with a checkpoint after every iteration."""
    out = tmp_path_factory.mktemp("fuzz-base") / "run"
    cmd = ["run", str(TESTS / "tiny.toml"), "-n", "4", "-q", "--out", str(out), "--device", "cpu"]
    res = runner.invoke(app, [*cmd, "--checkpoint-every", "1"])
    assert res.exit_code == 0, res.output
    return out


def _set_state(key: str, value: Any) -> Any:
    def change(state: dict[str, Any]) -> None:
        assert key in state, sorted(state)
        state[key] = value

    return change


def _wrong_shape(state: dict[str, Any]) -> None:
    name = next(iter(state["model"]))
    state["model"][name] = torch.zeros(state["model"][name].numel() + 1)


TAMPER_STATE = {
    "iteration-huge": _set_state("iteration", 10**9),
    "iteration-negative": _set_state("iteration", -5),
    "clock-nan": _set_state("now", math.nan),
    "wrong-shape": _wrong_shape,
    "unknown-key": lambda state: state.update(fuzz_unknown=1),
    "clock-late": _set_state("now", 1e9),  # finite, far past the rows' end
    "version-huge": _set_state("version", 2**62),  # became a staleness of 4.6e18 (fuzz finding F5)
}


def _tamper_bytes(run: Path, kind: str, marker: Path) -> None:
    ckpt = run / rundirs.CKPT
    raw = ckpt.read_bytes()
    if kind == "truncated":
        ckpt.write_bytes(raw[: len(raw) // 2])
    elif kind == "empty":
        ckpt.write_bytes(b"")
    elif kind == "flipped":  # 50 bytes of the tensor data changed: a digest, not a NaN, must catch it
        rng = random.Random(0)
        buf = bytearray(raw)
        for at in rng.sample(range(len(buf) // 2, len(buf)), 50):
            buf[at] ^= 0x40
        ckpt.write_bytes(bytes(buf))
    elif kind == "torch-payload":  # an old-style torch.save file whose unpickling runs code
        torch.save({"iteration": 1, "model": datafiles._Payload(exec, (f"open({str(marker)!r}, 'w')",))}, ckpt)
    elif kind == "metrics-non-utf8":
        (run / "metrics.csv").write_bytes(b"iteration,loss\n0,\xff\xfe\n" + (run / "metrics.csv").read_bytes())


@pytest.mark.parametrize("kind", ["truncated", "empty", "flipped", "torch-payload", "metrics-non-utf8", *TAMPER_STATE])
def test_tampered_checkpoints_are_refused(kind: str, base_run: Path, tmp_path: Path, warm: Path) -> None:
    """Every tampered run directory: `run --resume` exits 2 with a message, runs no code, writes no
    row; the untouched copy (a control) resumes with exit 0."""
    run = rundirs.copy_run(base_run, tmp_path / "run")
    marker = tmp_path / "PAYLOAD_RAN"
    if kind in TAMPER_STATE:
        from aiotsim.sim import checkpoint

        state = checkpoint.load(run / rundirs.CKPT)
        TAMPER_STATE[kind](state)
        checkpoint.save(run / rundirs.CKPT, state)  # through the package's writer: a valid file
    else:
        _tamper_bytes(run, kind, marker)
    before = (run / "evals.csv").read_bytes()
    o = call_cli(["run", "--resume", str(run), "-q", "--device", "cpu"], CASE_TIMEOUT_S, tmp_path, warm)
    assert o.kind == "exit" and o.code == 2 and "error:" in o.output, f"{o.kind} {o.code}: {o.tail()} {o.error}"
    assert not marker.exists(), "the checkpoint ran code"
    assert (run / "evals.csv").read_bytes() == before


def test_untampered_copy_resumes(base_run: Path, tmp_path: Path, warm: Path) -> None:
    """The control of the test above: its base run resumes, rewriting the same rows."""
    run = rundirs.copy_run(base_run, tmp_path / "run")
    o = call_cli(["run", "--resume", str(run), "-q", "--device", "cpu"], CASE_TIMEOUT_S, tmp_path, warm)
    assert o.kind == "exit" and o.code == 0, o.tail()
    for name in ("metrics.csv", "evals.csv"):
        assert (run / name).read_bytes() == (base_run / name).read_bytes()


@pytest.mark.parametrize(
    "args",
    [
        ["--out", ""],  # would write into the working directory (and delete its checkpoint.pt)
        ["--threads", "1000000000"],  # libgomp aborted allocating 216 GB
        ["--set", "network.uplink_trace=/dev/zero"],
        ["--set", "nodes.count=1e400"],
    ],
)
def test_command_line_edges_are_refused(args: list[str], tmp_path: Path, warm: Path) -> None:
    """Arguments at their edges (tools/fuzz/cli_cases.py samples): exit 2 with a message, and the
    working directory's files untouched."""
    (tmp_path / "checkpoint.pt").write_text("not the run's")
    argv = ["run", str(TESTS / "tiny.toml"), "-n", "1", "-q", "--device", "cpu", *args]
    if "--out" not in args:
        argv += ["--out", str(tmp_path / "run")]
    o = call_cli(argv, CASE_TIMEOUT_S, tmp_path, warm)
    assert o.kind == "exit" and o.code == 2 and "error" in o.output.lower(), f"{o.kind} {o.code}: {o.tail()}"
    assert (tmp_path / "checkpoint.pt").read_text() == "not the run's"


@pytest.mark.slow
def test_validate_of_a_huge_custom_topology_is_fast(tmp_path: Path, warm: Path) -> None:
    """100,000 nodes and 5 links (the campaign's many-nodes mutant): validate refuses it in
    seconds; it took over 60 s of CPU in a check quadratic in the vertices (fuzz finding F3)."""
    data = _small_run_of(BASES["custom.toml"], nodes={"count": 100_000})
    path = tmp_path / "scenario.toml"
    path.write_text(tomli_w.dumps(data))
    o = call_cli(["validate", str(path)], 30.0, tmp_path, warm)
    assert o.kind == "exit" and o.code == 2 and "disconnected" in o.output, f"{o.kind} {o.code} {o.seconds:.0f} s"
