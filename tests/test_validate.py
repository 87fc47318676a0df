"""`aiotsim validate` is a real gate: what it accepts runs, and no input gives a traceback.

One test per family of issue 10: unreadable files, wrong types in custom topologies, values that
validate accepted and run refused (now bounded), cross-checks that were wrong, output paths, signals
and the exit codes of run outcomes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT
from typer.testing import CliRunner

from aiotsim.cli import app
from aiotsim.cli_common import slug
from aiotsim.config import load_scenario
from aiotsim.errors import ConfigError
from aiotsim.validate import PROCESS_BYTES, batch_workers, load_validated, world_size

runner = CliRunner()


def _validate(path: Path, *sets: str):
    args = ["validate", str(path)]
    for s in sets:
        args += ["--set", s]
    res = runner.invoke(app, args)
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    return res


# ---- 1. files that are not TOML text -------------------------------------------------------------
def test_invalid_utf8_and_deep_nesting_are_config_errors(tmp_path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_bytes(b"\xff[scenario]\n")
    res = _validate(bad)
    assert res.exit_code == 2 and f"{bad}: not a UTF-8 text file" in res.output
    deep = tmp_path / "deep.toml"
    deep.write_text("[scenario]\nx = " + "[" * 500 + "]" * 500 + "\n")
    res = _validate(deep)
    assert res.exit_code == 2 and f"{deep}: invalid TOML: arrays or tables nested too deep" in res.output
    with pytest.raises(ConfigError, match="not a UTF-8"):
        load_scenario(bad)


def test_deeply_nested_override_is_a_config_error(tiny_scenario) -> None:
    res = _validate(tiny_scenario, "data.synthetic_shape=" + "[" * 2000 + "]" * 2000)
    assert res.exit_code == 2 and "--set data.synthetic_shape: the value is nested too deep" in res.output


def test_a_directory_is_not_a_scenario(tmp_path) -> None:
    res = _validate(tmp_path)
    assert res.exit_code == 2 and "no such scenario file" in res.output


# ---- 2. wrong types in blocks ----------------------------------------------------------------------
def test_wrong_types_in_custom_topology_blocks_are_named(tiny_scenario, tmp_path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(
        tiny_scenario.read_text()
        + 'topology = "custom"\n'
        + '[[network.vertex]]\nname = ["x"]\naggregator = ["server"]\n'
        + '[[network.vertex]]\nrole = "boss"\n'
        + '[[network.link]]\nfrom = ["node0"]\nto = "server"\nmbps = "fast"\nlatency_ms = -1\n'
        + '[[network.link]]\nfrm = "node1"\nto = "server"\nmbps = 1\n'
    )
    res = _validate(path)
    assert res.exit_code == 2
    text = res.output
    for line in (
        "network.vertex[0].name: must be a string, got ['x']",
        "network.vertex[0].aggregator: must be a string, got ['server']",
        "network.vertex[1].role: unknown value 'boss'",
        "network.vertex[1].name: missing",
        "network.link[0].from: must be a string, got ['node0']",
        "network.link[0].mbps: must be a number, got 'fast'",
        "network.link[0].latency_ms: must be in [0, 1000000.0], got -1",
        "network.link[1].frm: unknown key (did you mean 'from'?)",
        "network.link[1].from: missing",
    ):
        assert line in text, text
    assert "unhashable" not in text


def test_custom_topology_problems_come_from_the_gate_above_config(tiny_scenario, tmp_path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(
        tiny_scenario.read_text()
        + 'topology = "custom"\n[[network.link]]\nfrom = "node0"\nto = "nowhere"\nmbps = 1\n'
        + '[[network.link]]\nfrom = "node1"\nto = "server"\nmbps = 1\n'
    )
    load_scenario(path)  # config alone checks keys, not the graph
    with pytest.raises(ConfigError, match="nowhere"):
        load_validated(path)
    assert _validate(path).exit_code == 2


def test_node_group_blocks_and_radios(tiny_scenario, tmp_path) -> None:
    path = tmp_path / "g.toml"
    path.write_text(
        tiny_scenario.read_text().replace("count = 2\n", 'count = 2\nradio = "lorax"\n')
        + '[[nodes.group]]\ncount = "3"\n[[nodes.group]]\nname = 5\n[[nodes.group]]\ncount = 1\nshare = 0\n'
    )
    res = _validate(path)
    assert res.exit_code == 2
    assert "nodes.group[0].count: must be an integer, got '3'" in res.output
    assert "nodes.group[1].name: must be a string, got 5" in res.output
    assert "nodes.group[1].count: missing" in res.output
    assert "nodes.group[2].share: must be > 0, got 0" in res.output
    path.write_text(tiny_scenario.read_text().replace("count = 2\n", 'count = 2\nradio = "lorax"\n'))
    res = _validate(path)
    assert res.exit_code == 2 and "nodes.radio: unknown radio profile 'lorax' (did you mean 'lora'?)" in res.output


# ---- 3. values validate accepted and run refused -------------------------------------------------------
@pytest.mark.parametrize(
    "setting, message",
    [
        ("scenario.seed=18446744073709551615", "scenario.seed: must be in [0, 4294967295]"),
        ("scenario.seed=-1", "scenario.seed: must be in [0, 4294967295]"),
        ("scenario.iterations=100000000", "scenario.iterations: must be in [1, 1000000]"),
        ("data.batch_size=9223372036854775807", "data.batch_size: must be in [1, 65536]"),
        ("training.weight_decay=1e308", "training.weight_decay: must be in [0, 1.0]"),
        ("training.lr=1e10", "training.lr: must be <= 1000 (a sane upper bound)"),
        ("training.lr=nan", "training.lr: must be a finite number"),
        ("data.synthetic_noise=1e300", "data.synthetic_noise: must be in [0, 1000.0]"),
        ("data.synthetic_classes=1000000", "data.synthetic_classes: must be in [2, 1000]"),
        ("data.synthetic_shape=[1,100000,100000]", "data.synthetic_shape: must be [C, H, W] with every size"),
        ("data.eval_samples=100000000000", "data.eval_samples: must be in [0, 1000000]"),
        ("network.uplink_mbps=inf", "network.uplink_mbps: must be a finite number, got inf"),
        ("network.mtu=99999999", "network.mtu: must be in [100, 65535]"),
        ("data.test_fraction=1.0", "data.test_fraction: must be in (0, 1), got 1.0"),
        ("nodes.count=1000000", "nodes.count: must be in [1, 100000]"),
        ("nodes.count=1000000000", "nodes.count: must be in [1, 100000]"),
        ("nodes.count=2000", "nodes.count: every node needs at least one training sample"),
        ('scenario.name="../../x"', "scenario.name: must be a plain name usable as a directory name"),
        ('scenario.name="/abs"', "scenario.name: must be a plain name"),
        ("model.name=lenet5", None),  # digits are 8x8: fine for lenet5
    ],
)
def test_bounds_name_file_and_key(tiny_scenario, setting, message) -> None:
    res = _validate(tiny_scenario, setting)
    if message is None:
        assert res.exit_code == 0, res.output
        return
    assert res.exit_code == 2, res.output
    assert f"{tiny_scenario}: {message}" in res.output.replace("\n", " "), res.output


def test_model_must_take_the_data_shape(tiny_scenario) -> None:
    res = _validate(tiny_scenario, "data.dataset=synthetic", "data.synthetic_shape=[1,2,2]", "model.name=lenet5")
    assert res.exit_code == 2 and "lenet5 needs inputs of at least 4x4" in res.output


def test_memory_estimate_is_printed_and_enforced(tiny_scenario, monkeypatch) -> None:
    res = _validate(tiny_scenario)
    assert res.exit_code == 0 and "memory estimate: ~" in res.output and "55,210 parameters" in res.output
    sc = load_scenario(tiny_scenario)
    assert world_size(sc).params == 55_210
    monkeypatch.setenv("AIOTSIM_MAX_MEMORY_GB", "0.001")
    res = _validate(tiny_scenario)
    assert res.exit_code == 2 and "nodes.count: the run would need ~" in res.output


@pytest.mark.slow
@pytest.mark.parametrize(
    "sets",
    [
        ["scenario.seed=4294967295"],
        ["training.weight_decay=1.0", "training.lr=1000.0"],
        ["data.batch_size=65536", "data.eval_samples=1000000"],
        ["data.dataset=synthetic", "data.synthetic_noise=1000.0", "data.synthetic_classes=1000"],
        ["network.mtu=65535", "network.header_bytes=65534", "network.uplink_mbps=1000000"],
        ["data.test_fraction=0.999"],
        ["nodes.count=1432"],  # the most nodes digits can feed at test_fraction 0.2
    ],
)
def test_accepted_extremes_run(tiny_scenario, tmp_path, sets) -> None:
    args = ["run", str(tiny_scenario), "-n", "2", "-q", "--out", str(tmp_path / "r"), "--device", "cpu"]
    for s in sets:
        args += ["--set", s]
    res = runner.invoke(app, args)
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    assert res.exit_code in (0, 3), res.output  # 3: lr=1000 may diverge, and says so
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["status"] in ("complete", "diverged")


# ---- 4. cross-checks that were wrong -------------------------------------------------------------------
def test_eval_every_beyond_iterations_and_partial_default(tiny_scenario) -> None:
    assert _validate(ROOT / "scenarios" / "iot10.toml", "scenario.iterations=20").exit_code == 0
    res = _validate(tiny_scenario, "training.mode=partial")
    assert res.exit_code == 0, res.output
    res = _validate(tiny_scenario, "training.mode=partial", "training.partial_k=3")
    assert res.exit_code == 2 and "training.partial_k: must be in 1..nodes.count (=2)" in res.output


# ---- 5. output paths -------------------------------------------------------------------------------------
def test_slug_keeps_names_inside_one_directory() -> None:
    assert slug("../../x") == "x"
    assert slug("/abs/name") == "abs-name"
    assert slug("") == "run" and slug("...") == "run"
    assert slug("iot10") == "iot10"


def test_unwritable_outputs_are_clean_errors(tiny_scenario, tmp_path) -> None:
    existing = tmp_path / "file"
    existing.write_text("x")
    run_dir = tmp_path / "run"
    res = runner.invoke(app, ["run", str(tiny_scenario), "-n", "1", "-q", "--out", str(run_dir), "--device", "cpu"])
    assert res.exit_code == 0, res.output
    for target in (existing, Path("/proc/aiotsim-x")):
        res = runner.invoke(app, ["plot", str(run_dir), "-o", str(target)])
        assert res.exit_code == 2, res.output
        assert res.exception is None or isinstance(res.exception, SystemExit)
        assert f"cannot write to {target}" in res.output or "cannot" in res.output
    res = runner.invoke(app, ["sweep", str(ROOT / "scenarios" / "sweep_nodes.toml"), "--out", str(existing), "-q"])
    assert res.exit_code == 2 and f"error: cannot write to {existing}" in res.output
    res = runner.invoke(app, ["compare", str(tiny_scenario), "-c", "none", "--out", str(existing), "-q"])
    assert res.exit_code == 2 and f"error: cannot write to {existing}" in res.output


# ---- 6. signals ----------------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_and_sighup_write_summary_and_trace(tiny_scenario, tmp_path, sig) -> None:
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "aiotsim.cli", "run", str(tiny_scenario), "-n", "100000", "-q", "--out", str(out)]
    cmd += ["--device", "cpu", "--set", "training.eval_every=100000"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (out / "metrics.csv").exists():
        time.sleep(0.2)
    time.sleep(1.0)  # a few iterations in
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig, stderr
    assert "Traceback" not in stderr and f"stopped by {sig.name}" in stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["complete"] is False and summary["status"] == "interrupted"
    json.loads((out / "trace.json").read_text())


# ---- 7. exit codes of run outcomes -----------------------------------------------------------------------------
@pytest.mark.parametrize("status, code", [("diverged", 3), ("stalled", 4)])
def test_run_outcome_exit_codes(tiny_scenario, tmp_path, monkeypatch, status, code) -> None:
    import aiotsim.cli

    original = aiotsim.cli._run_scenario

    def stopped(*args):
        summary = original(*args)
        return {**summary, "status": status, "complete": False, "reason": "loss is nan"}

    monkeypatch.setattr(aiotsim.cli, "_run_scenario", stopped)
    res = runner.invoke(app, ["run", str(tiny_scenario), "-n", "2", "-q", "--out", str(tmp_path / "r")])
    assert res.exit_code == code, res.output
    assert f"{status} at iteration 2: loss is nan" in res.output


def test_missing_data_files_stop_at_the_gate_not_at_the_first_read(tiny_scenario, tmp_path) -> None:
    """A file data set with no data.path and an empty cache: validate (and so run) says how to get
    the files, exit 2; a data.path that exists but lacks the files is refused too (issue 43: it
    passed the gate; tests/test_gate_data.py checks the files per format)."""
    cache = tmp_path / "cache"
    sets = ["data.dataset=mnist-idx", "model.name=mlp", f"data.cache_dir={cache}"]
    res = _validate(tiny_scenario, *sets)
    assert res.exit_code == 2
    assert "dataset 'mnist-idx' is read from files: set data.path" in res.output
    assert "data.download = true" in res.output
    present = tmp_path / "mnist"
    present.mkdir()
    with pytest.raises(ConfigError, match="does not exist"):
        load_validated(tiny_scenario, [*sets, f"data.path={tmp_path / 'absent'}"])
    with pytest.raises(ConfigError, match=r"mnist: missing IDX file train-images-idx3-ubyte"):
        load_validated(tiny_scenario, [*sets, f"data.path={present}"])


# ---- batches: runs at once that fit in memory ---------------------------------------------------------
def test_batch_workers_fit_the_largest_run_in_memory(tiny_scenario, monkeypatch) -> None:
    """Limit 2.5 runs of the largest (each with its process): 2 at once; --jobs beyond is refused
    naming how many fit; two seeds of one scenario count once; the larger scenario sets the size."""
    small = load_scenario(tiny_scenario)
    seeds = [small.replace(**{"scenario.seed": k}) for k in (1, 2, 3)]
    big = small.replace(**{"nodes.count": 200, "data.samples_per_node": 4, "nodes.batched": False})
    each = world_size(big).total + PROCESS_BYTES
    assert each > world_size(small).total + PROCESS_BYTES
    monkeypatch.setenv("AIOTSIM_MAX_MEMORY_GB", str(2.5 * each / 1e9))
    n, note = batch_workers([*seeds, big], None, cores=8)
    assert n == 2 and note.startswith("2 runs at once, not 4 (one per core)")  # 4 runs
    assert batch_workers([*seeds, big], None, cores=1) == (1, None)
    assert batch_workers([*seeds, big], 2, cores=8) == (2, None)
    with pytest.raises(ConfigError, match=r"--jobs 3: .* use --jobs 2 or fewer"):
        batch_workers([*seeds, big], 3, cores=8)
    with pytest.raises(ConfigError, match=r"--jobs 8: 4 runs at once"):  # 8 asked, 4 runs: 4 would go
        batch_workers([*seeds, big], 8, cores=8)
    # never more than the runs: 4 asked for 2 runs that fit together
    assert batch_workers([seeds[0], big], 4, cores=8) == (2, None)
    assert batch_workers([big], None, cores=8) == (1, None)  # no note: one run, nothing held back
    # the small ones alone: 2.5 x each of the big one fits more of them
    fit = int(2.5 * each // (world_size(small).total + PROCESS_BYTES))
    assert batch_workers(seeds, None, cores=64)[0] == min(64, fit) > 2


def test_compare_with_more_jobs_than_fit_exits_2_and_runs_nothing(tiny_scenario, tmp_path, monkeypatch) -> None:
    each = world_size(load_scenario(tiny_scenario)).total + PROCESS_BYTES
    monkeypatch.setenv("AIOTSIM_MAX_MEMORY_GB", str(1.5 * each / 1e9))
    res = runner.invoke(app, ["compare", str(tiny_scenario), "-c", "none,2bit", "-j", "2", "-o", str(tmp_path / "c")])
    assert res.exit_code == 2, res.output
    assert "--jobs 2" in res.output and "use --jobs 1 or fewer" in res.output and "Traceback" not in res.output
    assert not list((tmp_path / "c").rglob("metrics.csv"))
