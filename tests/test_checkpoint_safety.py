"""A checkpoint is input: it never runs code, and a damaged or inconsistent one is refused (exit 2,
a message naming what is wrong) before anything of its run directory changes."""

from __future__ import annotations

import copy
import errno
import io
import os
import random
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from typer.testing import CliRunner

from aiotsim.api import resume_run, run_scenario
from aiotsim.cli import app
from aiotsim.config import load_scenario
from aiotsim.errors import ResultsError
from aiotsim.results.fingerprint import fingerprint_run_dir
from aiotsim.sim import checkpoint_file
from aiotsim.sim.checkpoint import CHECKPOINT_NAME, restore
from aiotsim.sim.world import Cluster

TESTS = Path(__file__).parent


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished 6-iteration run whose checkpoint is after iteration 3: server momentum (the
    optimizer's buffers), top-k residuals on the nodes."""
    return _finished_run(tmp_path_factory, "training.momentum_at=server")


@pytest.fixture(scope="module")
def nodes_run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """As :func:`run_dir` with the momentum on the nodes (their velocities in the checkpoint)."""
    return _finished_run(tmp_path_factory, "training.momentum_at=nodes")


@pytest.fixture(scope="module")
def federated_run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A federated run with FedAdam: the strategy's own state (generator, moments) is kept."""
    over = ["training.mode=federated", "nodes.count=4", "nodes.per_round=2", "training.server_optimizer=adam"]
    return _finished_run(tmp_path_factory, *over, "training.server_lr=0.05")


def _finished_run(tmp_path_factory: pytest.TempPathFactory, *extra: str) -> Path:
    over = ["compressor.name=topk", "training.momentum=0.9", *extra, "scenario.iterations=6"]
    d = tmp_path_factory.mktemp("ckpt") / "run"
    run_scenario(load_scenario(TESTS / "tiny.toml", over), d, checkpoint_every=2)
    return d


def copied(run_dir: Path, tmp_path: Path) -> Path:
    d = tmp_path / "run"
    shutil.copytree(run_dir, d)
    return d


def files(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir())}


# ---- a checkpoint never runs code ------------------------------------------------------------
class Payload:
    """Unpickled, it creates directory ``marker``: what a crafted checkpoint could do instead."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.mkdir, (str(self.marker),))


def _bare(state: dict[str, Any]) -> bytes:
    buf = io.BytesIO()
    torch.save(state, buf)
    return buf.getvalue()


def _with_header(state: dict[str, Any]) -> bytes:
    """``state`` behind a valid format-2 header and digest: only weights_only stands in the way."""
    payload = _bare(state)
    digest = checkpoint_file.hashlib.sha256(payload).hexdigest()
    return checkpoint_file.MAGIC + f"2 sha256:{digest}\n".encode() + payload


@pytest.mark.parametrize(
    ("wrap", "says"),
    [
        (_bare, "a checkpoint of format 1 (written by an aiotsim older than format 2) or another program's"),
        (_with_header, "holds objects other than tensors and plain data"),
    ],
    ids=["format-1-file", "format-2-header"],
)
def test_a_checkpoint_with_a_code_payload_is_refused_unrun(
    run_dir: Path, tmp_path: Path, wrap: Callable[[dict[str, Any]], bytes], says: str
) -> None:
    d = copied(run_dir, tmp_path)
    marker = tmp_path / "pwned"
    (d / CHECKPOINT_NAME).write_bytes(wrap({"format": 2, "iteration": Payload(marker)}))
    # the payload is live: an unguarded torch.load (format 1's loader) runs it
    control = tmp_path / "control"
    torch.load(io.BytesIO(_bare({"x": Payload(control)})), weights_only=False)
    assert control.is_dir()
    before = files(d)
    res = CliRunner().invoke(app, ["run", "--resume", str(d), "-q"])
    assert res.exit_code == 2, res.output
    assert says in " ".join(res.output.split()) and "Traceback" not in res.output
    assert not marker.exists()
    assert files(d) == before


# ---- damaged files: the digest -----------------------------------------------------------------
def _flip(data: bytes, count: int) -> bytes:
    """``count`` bytes of the payload (after the header line) XOR 0xFF, at seeded positions."""
    b, start = bytearray(data), data.index(b"\n") + 1
    for i in random.Random(7).sample(range(start, len(b)), count):
        b[i] ^= 0xFF
    return bytes(b)


def _other_digest(data: bytes) -> bytes:
    """The file with the first hex digit of its header's digest changed."""
    i = data.index(b"sha256:") + len(b"sha256:")
    return data[:i] + (b"1" if data[i : i + 1] == b"0" else b"0") + data[i + 1 :]


BYTE_TAMPERS: dict[str, tuple[Callable[[bytes], bytes], str]] = {
    "empty": (lambda b: b"", "the checkpoint is empty"),
    "truncated": (lambda b: b[: len(b) // 2], "does not match its sha256 digest"),
    "random-bytes": (lambda b: random.Random(1).randbytes(4096), "not an aiotsim checkpoint"),
    "50-flipped-bytes": (lambda b: _flip(b, 50), "does not match its sha256 digest"),
    "1-flipped-byte": (lambda b: _flip(b, 1), "does not match its sha256 digest"),
    "digest-altered": (lambda b: _other_digest(b), "does not match its sha256 digest"),
    "header-cut": (lambda b: b[:30], "header is damaged"),
    "format-3": (lambda b: b.replace(b"checkpoint 2 ", b"checkpoint 3 ", 1), "a checkpoint of format '3'"),
}


@pytest.mark.parametrize("case", list(BYTE_TAMPERS))
def test_a_damaged_checkpoint_file_is_refused(run_dir: Path, tmp_path: Path, case: str) -> None:
    tamper, says = BYTE_TAMPERS[case]
    d = copied(run_dir, tmp_path)
    (d / CHECKPOINT_NAME).write_bytes(tamper((d / CHECKPOINT_NAME).read_bytes()))
    before = files(d)
    res = CliRunner().invoke(app, ["run", "--resume", str(d), "-q"])
    assert res.exit_code == 2 and says in " ".join(res.output.split()), res.output
    assert "Traceback" not in res.output and files(d) == before


# ---- well-formed files that do not fit the run: the checks -------------------------------------
def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """A tamper setting ``state[a][b]...`` (``path`` "a/b/..."; integer parts index lists)."""

    def tamper(state: dict[str, Any]) -> None:
        *parents, last = [int(p) if p.isdigit() else p for p in path.split("/")]
        obj = state
        for p in parents:
            obj = obj[p]
        obj[last] = value(obj[last]) if callable(value) else value

    return tamper


def _drop(key: str) -> Callable[[dict[str, Any]], None]:
    return lambda state: state.pop(key)


STATE_TAMPERS: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "missing-key": (_drop("net_loss"), "the state lacks key(s) net_loss"),
    "unknown-key": (_set("surprise", 1), "the state has unknown key(s) surprise"),
    "iteration-1e9": (_set("iteration", 10**9), "iteration (=1000000000) must be an integer in [0, 4]"),
    "iteration-last": (_set("iteration", 5), "iteration (=5) must be an integer in [0, 4]"),
    "iteration-moved": (
        lambda s: s.update(iteration=2, version=3),
        "iteration (=2) disagrees with the applied step's (=3) and the rows",
    ),
    "version-huge": (_set("version", 2**62), "version (=4611686018427387904) must be 4: one model version per"),
    "version-float": (_set("version", 4.0), "version (=4.0) must be 4"),
    "update-bytes": (_set("update_bytes", 10**15), "update_bytes (=1000000000000000) must be a message size in"),
    "iteration-negative": (_set("iteration", -5), "iteration (=-5) must be"),
    "iteration-float": (_set("iteration", 3.0), "iteration (=3.0) must be"),
    "clock-nan": (_set("now", float("nan")), "now (the simulated clock) (=nan) must be a finite time"),
    "clock-negative": (_set("now", -1.0), "now (the simulated clock) (=-1.0) must be a finite time"),
    "clock-altered": (_set("now", 1e9), "now (=1000000000.0 s) is not when the run's trace ends"),
    "row-time-after-clock": (_set("last_row_s", 1e9), "last_row_s (=1000000000.0) must be a finite time"),
    "model-shape": (_set("model/fc1.weight", torch.zeros(3, 3)), "model[fc1.weight] has shape (3, 3)"),
    "model-dtype": (_set("model/fc1.bias", lambda t: t.double()), "model[fc1.bias] has shape (200,) torch.float64"),
    "model-nan": (_set("model/fc2.bias", lambda t: t * float("nan")), "model[fc2.bias] holds NaN or infinite values"),
    "model-renamed": (lambda s: s["model"].update(extra=torch.zeros(1)), "model: its tensors are not the run's"),
    "optimizer-buffer-shape": (
        _set("optimizer/state/0/momentum_buffer", torch.zeros(7)),
        "optimizer.state[0][momentum_buffer] has shape (7,)",
    ),
    "optimizer-inf": (
        _set("optimizer/state/1/momentum_buffer", lambda t: t / 0.0),
        "optimizer.state[1]['momentum_buffer'] holds NaN or infinite values",
    ),
    "optimizer-params": (_set("optimizer/state/99", {}), "its state is for parameters the model does not have"),
    "residual-shape": (_set("nodes/0/codec/2/residual", torch.zeros(5)), "nodes[0].codec[2].residual has shape (5,)"),
    "codec-layers": (_set("nodes/1/codec", lambda xs: xs[:2]), "nodes[1].codec: 6 layers' codec states expected"),
    "generator-size": (_set("nodes/0/codec/0/generator", torch.zeros(3, dtype=torch.uint8)), "codec[0].generator"),
    "node-busy": (_set("nodes/1/busy", True), "nodes[1].busy: a checkpoint is taken with no node at work"),
    "node-index": (_set("node_index", [0, 7]), "node_index must list distinct nodes in [0, 1]"),
    "stream-perm": (_set("nodes/0/stream/perm", lambda p: p * 0), "stream.perm must be a permutation"),
    "stream-pos": (_set("nodes/0/stream/pos", 10**6), "pos must be in [0, "),
    "held-version": (_set("nodes/0/held_version", 99), "nodes[0]: held_version and dispatched_version must be"),
    "energy-nan": (_set("nodes/1/energy/tx_j", float("nan")), "nodes[1].energy: its meters must be finite"),
    "energy-not-a-dict": (_set("nodes/1/energy", 3), "nodes[1].energy is a int, not a dict"),
    "energy-log": (_set("nodes/0/energy/log", ["x"]), "nodes[0].energy.log[0] (='x') must be a float"),
    "node-rng": (_set("nodes/0/rng/state/inc", -1), "nodes[0].rng is not a PCG64 generator state"),
    "upload-losses": (_set("applied/uploads/1/losses", "x"), "applied.uploads[1].losses must be a list, not str"),
    "upload-nodes": (_set("applied/uploads/0/nodes", [5]), "applied.uploads[0].nodes must be nodes in [0, 1]"),
    "span-pid": (_set("trace/spans/3/pid", []), "trace.spans[3].pid (=[]) must be a int"),
    "span-args": (_set("trace/spans/0/args", {"k": torch.ones(1)}), "trace.spans[0].args['k']"),
    "tcp-acked": (
        _set("net_tcp/conns/node0\x00server/acked", None),
        "net_tcp.conns['node0\\x00server'].acked (=None) must be a float",
    ),
    "slots-free": (_set("net_slots/free", [10**9]), "net_slots: n must be in [0, 1152]"),
    "loss-rng": (_set("net_loss/rng", {}), "net_loss.rng is not a PCG64 generator state"),
    "window-nan": (_set("window/energy_j", float("nan")), "window.energy_j (=nan) must be a finite number >= 0"),
    "window-negative": (_set("window/bytes_up", -3), "window.bytes_up (=-3) must be a finite number >= 0"),
    "tcp-window": (_set("net_tcp/conns/server\x00node1/cwnd", 0.0), "every congestion window (cwnd) must be > 0"),
    "optimizer-lr": (_set("optimizer/param_groups/0/lr", 2**70), "its parameter groups or hyperparameters are not"),
    "optimizer-buffer-type": (_set("optimizer/state/0/momentum_buffer", "x"), "optimizer.state[0]['momentum_buffer']"),
    "codec-field-type": (_set("nodes/0/codec/0/residual", "x"), "nodes[0].codec[0].residual (='x') must be a"),
    "strategy-of-sync": (_set("strategy", {"m": None}), "strategy: only a federated run keeps a state of its own"),
    "net-carried": (_set("net_carried", lambda a: a[:1]), "net_carried must be"),
    "snapshot-version": (_set("snapshots", {99: []}), "snapshots must be keyed by model versions in [0, 4]"),
    "snapshot-shape": (
        _set("snapshots", {2: [torch.zeros(2)] * 6}),
        "snapshots[2][0] has shape (2,) torch.float32, the run's has (200, 64)",
    ),
    "totals-field": (_set("totals", lambda t: {**t, "bogus": 1}), "totals must hold exactly the fields agg_bytes,"),
    "totals-type": (_set("totals/contributions", None), "totals.contributions (=None) must be a int"),
    "net-rng": (_set("net_rng/bit_generator", "MT19937"), "net_rng is not a PCG64 generator state (ValueError)"),
}


@pytest.fixture(scope="module")
def loaded() -> Iterator[dict[Path, tuple[Cluster, dict[str, Any]]]]:
    """Per run directory: a cluster rebuilt from its scenario and its checkpoint's state (loaded
    once; each case tampers with a copy). The checks refuse before anything is loaded into the
    cluster, so one cluster serves every case. One torch thread, as a resume runs them (a small
    tensor's check takes 20x longer on two threads of a busy machine)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield {}
    torch.set_num_threads(before)


def _refused(run_dir: Path, loaded: dict[Path, Any], tamper: Callable[[dict[str, Any]], None]) -> str:
    """The message of :func:`restore`'s refusal of ``run_dir``'s checkpoint once tampered with."""
    if run_dir not in loaded:
        sc = load_scenario(run_dir / "scenario.toml")
        loaded[run_dir] = (Cluster(sc, device="cpu"), checkpoint_file.load(run_dir / CHECKPOINT_NAME))
    cluster, state = loaded[run_dir]
    state = copy.deepcopy(state)
    tamper(state)
    with pytest.raises(ResultsError) as err:
        restore(cluster, state)
    return err.value.message


@pytest.mark.parametrize("case", list(STATE_TAMPERS))
def test_a_checkpoint_that_does_not_fit_the_run_is_refused(run_dir: Path, loaded: Any, case: str) -> None:
    tamper, says = STATE_TAMPERS[case]
    assert says in _refused(run_dir, loaded, tamper)


@pytest.mark.parametrize("case", ["iteration-1e9", "clock-nan", "model-shape", "residual-shape", "net-rng"])
def test_a_refused_checkpoint_leaves_its_run_directory_as_it_was(run_dir: Path, tmp_path: Path, case: str) -> None:
    # the whole path: saved again with a valid digest (only the checks stand in the way), resumed
    # through the CLI: exit 2 with the message, and nothing in the directory changes
    tamper, says = STATE_TAMPERS[case]
    d = copied(run_dir, tmp_path)
    state = checkpoint_file.load(d / CHECKPOINT_NAME)
    tamper(state)
    checkpoint_file.save(d / CHECKPOINT_NAME, state)
    before = files(d)
    res = CliRunner().invoke(app, ["run", "--resume", str(d), "-q"])
    assert res.exit_code == 2 and says in res.output and "Traceback" not in res.output, res.output
    assert files(d) == before


def test_node_velocities_of_another_shape_or_dtype_are_refused(nodes_run_dir: Path, loaded: Any) -> None:
    says = _refused(nodes_run_dir, loaded, _set("nodes/1/velocity/4", torch.zeros(200, 10)))
    assert "nodes[1].velocity[4] has shape (200, 10) torch.float32, the run's has (10, 200) torch.float32" in says
    says = _refused(nodes_run_dir, loaded, _set("nodes/0/velocity/1", lambda t: t.long()))  # fuzz: crashed mid-run
    assert "nodes[0].velocity[1] has shape (200,) torch.int64, the run's has (200,) torch.float32" in says


FEDERATED_TAMPERS: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "moments-gone": (_set("strategy/v", []), "strategy.v: one tensor per model parameter expected"),
    "moment-shape": (_set("strategy/m/0", torch.zeros(2)), "strategy.m[0] has shape (2,)"),
    "selection-rng": (_set("strategy/rng", 7), "strategy.rng is not a PCG64 generator state"),
    "samples": (_set("strategy/samples", -1), "strategy.samples must be an integer >= 0"),
}


@pytest.mark.parametrize("case", list(FEDERATED_TAMPERS))
def test_a_federated_strategy_state_that_does_not_fit_is_refused(
    federated_run_dir: Path, loaded: Any, case: str
) -> None:
    tamper, says = FEDERATED_TAMPERS[case]
    assert says in _refused(federated_run_dir, loaded, tamper)


def test_the_untampered_checkpoint_resumes(run_dir: Path, tmp_path: Path) -> None:
    # the control of the tamper tests: the same checkpoint, loaded and saved again, resumes to the
    # run's own files
    d = copied(run_dir, tmp_path)
    checkpoint_file.save(d / CHECKPOINT_NAME, checkpoint_file.load(d / CHECKPOINT_NAME))
    resume_run(d)
    assert fingerprint_run_dir(d) == fingerprint_run_dir(run_dir)


# ---- damaged rows beside a good checkpoint -----------------------------------------------------
ROW_TAMPERS: dict[str, tuple[Callable[[bytes], bytes], str]] = {
    "metrics-not-utf8": (lambda b: b.replace(b"\n1,", b"\n\xff\xfe,", 1), "cannot be read as UTF-8 text"),
    "metrics-row-gone": (lambda b: b.replace(b"\n1,", b"\n", 1), "the rows before the checkpoint's iteration 3"),
    "evals-not-utf8": (lambda b: b.replace(b"\n1,", b"\n1\xc3,", 1), "evals.csv: cannot be read as UTF-8 text"),
    "metrics-superscript": (lambda b: b.replace(b"\n1,", "\n²,".encode(), 1), "are damaged or missing"),
}


@pytest.mark.parametrize("case", list(ROW_TAMPERS))
def test_damaged_metrics_rows_are_refused_before_any_row_is_cut(run_dir: Path, tmp_path: Path, case: str) -> None:
    tamper, says = ROW_TAMPERS[case]
    d = copied(run_dir, tmp_path)
    name = "evals.csv" if case.startswith("evals") else "metrics.csv"
    (d / name).write_bytes(tamper((d / name).read_bytes()))
    before = files(d)
    res = CliRunner().invoke(app, ["run", "--resume", str(d), "-q"])
    assert res.exit_code == 2 and says in " ".join(res.output.split()), res.output
    assert "Traceback" not in res.output and files(d) == before


# ---- a full disk while saving ----------------------------------------------------------------
class _FullDisk:
    """A file whose writes put half their bytes on disk, then fail as a full disk does."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle

    def __enter__(self) -> _FullDisk:
        return self

    def __exit__(self, *exc: object) -> None:
        self.handle.close()

    def write(self, data: bytes) -> int:
        self.handle.write(data[: len(data) // 2])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self.handle.name))


def test_a_full_disk_while_saving_keeps_the_previous_checkpoint_and_no_temporary_file(
    tiny_scenario: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    saves = []

    def opened(path: Any, mode: str = "r", *args: Any) -> Any:
        saves.append(path)
        handle = open(path, mode, *args)
        return handle if len(saves) == 1 else _FullDisk(handle)  # the first checkpoint is written

    monkeypatch.setattr(checkpoint_file, "open", opened, raising=False)
    d = tmp_path / "run"
    res = CliRunner().invoke(app, ["run", str(tiny_scenario), "-q", "-o", str(d), "--checkpoint-every", "1"])
    assert res.exit_code == 2 and "No space left on device" in res.output and "Traceback" not in res.output
    assert len(saves) == 2 and not list(d.glob("*.tmp"))
    monkeypatch.undo()
    assert checkpoint_file.load(d / CHECKPOINT_NAME)["iteration"] == 0  # the first one, whole
