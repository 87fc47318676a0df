"""End to end through the CLI (typer's CliRunner): files, fields, determinism, bad input."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from aiotsim.cli import app

runner = CliRunner()

METRIC_COLUMNS = {
    "iteration",
    "sim_time_s",
    "loss",
    "bytes_up",
    "bytes_down",
    "wire_bytes_up",
    "wire_bytes_down",
    "compute_s",
    "encode_s",
    "comm_s",
}
SUMMARY_KEYS = {
    "schema_version",
    "scenario",
    "compressor",
    "iterations",
    "nodes",
    "sim_time_s",
    "throughput_samples_per_s",
    "bytes_up",
    "bytes_down",
    "wire_bytes_up",
    "wire_bytes_down",
    "compression_ratio",
    "final_accuracy",
    "wall_time_s",
    "aiotsim_version",
    "torch_version",
    "device",
}


def _run(args: list[str]):
    return runner.invoke(app, args, catch_exceptions=False)


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_run_writes_every_file_with_its_fields(tiny_scenario, tmp_path) -> None:
    out = tmp_path / "run"
    res = _run(["run", str(tiny_scenario), "--out", str(out), "--compressor", "none", "-q"])
    assert res.exit_code == 0, res.output
    metrics = _rows(out / "metrics.csv")
    assert len(metrics) == 4
    assert METRIC_COLUMNS <= set(metrics[0])
    evals = _rows(out / "evals.csv")
    assert [int(r["iteration"]) for r in evals] == [1, 3]
    assert {"iteration", "sim_time_s", "accuracy", "loss"} <= set(evals[0])
    summary = json.loads((out / "summary.json").read_text())
    assert SUMMARY_KEYS <= set(summary)
    assert summary["complete"] is True and summary["iterations"] == 4 and summary["nodes"] == 2
    # `none` sends the dense fp32 gradient: compression ratio exactly 1
    assert summary["compression_ratio"] == 1.0
    # bytes in the summary are the sums of the per-iteration rows
    assert summary["bytes_up"] == sum(int(r["bytes_up"]) for r in metrics)
    # simulated time is monotone; the run ends after the last step's model broadcast: the MLP on
    # 8x8 digits has 64*200+200 + 200*200+200 + 200*10+10 = 55,210 params = 220,840 B ->
    # ceil(220,840 / 1,460) = 152 packets -> 220,840 + 152*40 = 226,920 wire B; two nodes share
    # the 10 Mbit/s server link but each has its own 1 Mbit/s downlink, the bottleneck:
    # 226,920 * 8 / 1e6 = 1.81536 s, + 10 ms latency = 1.82536 s; TCP (the default transport) adds
    # only the last packet's store and forward on the 10 Mbit/s server link, 1,500 * 8 / 1e7 =
    # 1.2 ms (the connection is reused, and its initial window, 10 x 1,500 B per 20 ms RTT =
    # 6 Mbit/s, is above the 1 Mbit/s share)
    times = [float(r["sim_time_s"]) for r in metrics]
    assert times == sorted(times)
    assert summary["sim_time_s"] - times[-1] == pytest.approx(1.82536 + 0.0012, rel=1e-9)
    assert (out / "scenario.toml").read_text().startswith("[scenario]")
    trace = json.loads((out / "trace.json").read_text())
    assert any(e["ph"] == "X" and e["name"] == "upload" for e in trace["traceEvents"])


def test_flops_mode_is_deterministic(tiny_scenario, tmp_path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    for out in (a, b):
        assert _run(["run", str(tiny_scenario), "--out", str(out), "-c", "topk", "-q"]).exit_code == 0
    assert (a / "metrics.csv").read_text() == (b / "metrics.csv").read_text()
    assert (a / "evals.csv").read_text() == (b / "evals.csv").read_text()
    sa, sb = (json.loads((d / "summary.json").read_text()) for d in (a, b))
    for s in (sa, sb):
        s.pop("wall_time_s")
    assert sa == sb


def test_bad_scenario_reports_all_problems_exit_2_no_traceback(write_toml) -> None:
    path = write_toml('[scenario]\nnodes = 3\n[network]\nuplink_mbps = -1\n[compressor]\nname = "zip"\n')
    res = runner.invoke(app, ["validate", str(path)])
    assert res.exit_code == 2
    text = res.output
    assert "scenario.nodes: unknown key" in text
    assert "network.uplink_mbps: must be > 0" in text
    assert "unknown compressor 'zip'" in text
    assert "Traceback" not in text
    # `run` refuses the same file the same way
    res = runner.invoke(app, ["run", str(path)])
    assert res.exit_code == 2 and "Traceback" not in res.output


def test_validate_ok_and_compressors_listing(tiny_scenario) -> None:
    res = _run(["validate", str(tiny_scenario)])
    assert res.exit_code == 0 and "ok" in res.output
    res = _run(["compressors"])
    assert res.exit_code == 0
    for name in ("none", "fp16", "2bit", "topk"):
        assert name in res.output


def test_validate_takes_runs_overrides(tiny_scenario) -> None:
    """-c and -n as in `aiotsim run`: the estimate is the named codec's (top-k's message is about
    1/50 of none's 220.8 KB: 55,210 fp32 values), a bad codec name exits 2."""
    dense = _run(["validate", str(tiny_scenario)])
    assert dense.exit_code == 0 and "compressor none" in dense.output and "message 220.8 KB" in dense.output
    topk = _run(["validate", str(tiny_scenario), "-c", "topk", "-n", "3"])
    assert topk.exit_code == 0 and "compressor topk" in topk.output and "message 220.8 KB" not in topk.output
    bad = _run(["validate", str(tiny_scenario), "-c", "topq"])
    assert bad.exit_code == 2 and "unknown compressor 'topq'" in bad.output and "Traceback" not in bad.output


def test_interrupted_run_keeps_rows_and_marks_summary_incomplete(tiny_scenario, tmp_path) -> None:
    from aiotsim.api import run_scenario
    from aiotsim.config import load_scenario

    def stop_after_two(p) -> None:
        if p.iteration == 2:
            raise KeyboardInterrupt

    out = tmp_path / "cut"
    with pytest.raises(KeyboardInterrupt):
        run_scenario(load_scenario(tiny_scenario), out, device="cpu", on_progress=stop_after_two)
    assert len(_rows(out / "metrics.csv")) == 2
    summary = json.loads((out / "summary.json").read_text())
    assert summary["complete"] is False and summary["status"] == "interrupted"
    assert summary["iterations"] == 2
    json.loads((out / "trace.json").read_text())  # still a valid trace


def test_error_mid_run_is_recorded(tiny_scenario, tmp_path, monkeypatch) -> None:
    from aiotsim.sim.world import Cluster

    calls = {"n": 0}
    original = Cluster.evaluate

    def failing(self):
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("disk on fire")
        return original(self)

    monkeypatch.setattr(Cluster, "evaluate", failing)
    out = tmp_path / "err"
    res = runner.invoke(app, ["run", str(tiny_scenario), "--out", str(out), "-q"])
    assert res.exit_code != 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["complete"] is False and "disk on fire" in summary["status"]
    assert len(_rows(out / "metrics.csv")) == 4  # rows up to the failing evaluation (iteration 3)


def test_error_lines_keep_their_brackets(write_toml) -> None:
    # rich markup must not swallow "[netwrok]" in a message
    res = runner.invoke(app, ["validate", str(write_toml("[netwrok]\nmtu = 1500\n"))])
    assert res.exit_code == 2
    assert "[netwrok]: unknown section (did you mean 'network'?)" in res.output


def test_a_sweep_file_given_as_a_scenario_says_which_command_runs_it(tmp_path: Path) -> None:
    """validate/run of scenarios/sweep_nodes.toml: one line naming `aiotsim sweep`, exit 2, nothing
    written (before: three 'unknown section' lines for [sweep], [set] and [grid])."""
    sweep = Path(__file__).resolve().parents[1] / "scenarios" / "sweep_nodes.toml"
    for args in (["validate", str(sweep)], ["run", str(sweep), "--out", str(tmp_path / "r"), "-q"]):
        res = runner.invoke(app, args)
        assert res.exit_code == 2 and "Traceback" not in res.output
        assert "a sweep file ([sweep], [set], [grid]), not a scenario; run it with `aiotsim sweep" in res.output
        assert "unknown section" not in res.output
    assert not (tmp_path / "r").exists()


def test_a_run_directory_or_a_scenario_in_the_wrong_place_gets_a_pointer(tiny_scenario: Path, tmp_path: Path) -> None:
    """run/validate of a run directory name its scenario.toml and `aiotsim plot`; plot of a
    scenario file says what plot reads; each exit 2, one line, no traceback."""
    run_dir = tmp_path / "r"
    assert runner.invoke(app, ["run", str(tiny_scenario), "--out", str(run_dir), "-q"]).exit_code == 0
    for args, says in (
        (["run", str(run_dir)], f"not a scenario file; run its scenario again with `aiotsim run {run_dir}/"),
        (["validate", str(run_dir)], f"plot it with `aiotsim plot {run_dir}`"),
        (["plot", str(tiny_scenario)], "a scenario or sweep file; plot reads what a run, compare or sweep wrote"),
    ):  # fmt: skip
        res = runner.invoke(app, args)
        assert res.exit_code == 2 and says in res.output.replace("\n", "") and "Traceback" not in res.output, args


def test_run_checkpoint_and_resume_from_the_cli(tiny_scenario: Path, tmp_path: Path) -> None:
    """`run --checkpoint-every` writes checkpoint.pt; `run --resume` continues it to the same files
    as the uninterrupted run; a directory without a checkpoint is a clear exit 2."""
    from aiotsim.results.fingerprint import fingerprint_run_dir

    ref, ckpt = tmp_path / "ref", tmp_path / "ckpt"
    assert CliRunner().invoke(app, ["run", str(tiny_scenario), "-q", "-o", str(ref)]).exit_code == 0
    res = CliRunner().invoke(app, ["run", str(tiny_scenario), "-q", "-o", str(ckpt), "--checkpoint-every", "2"])
    assert res.exit_code == 0 and (ckpt / "checkpoint.pt").is_file()
    res = CliRunner().invoke(app, ["run", "--resume", str(ckpt), "-q"])  # redoes the rows after it
    assert res.exit_code == 0, res.output
    assert fingerprint_run_dir(ckpt) == fingerprint_run_dir(ref)
    res = CliRunner().invoke(app, ["run", "--resume", str(ref), "-q"])
    assert res.exit_code == 2 and "no checkpoint.pt" in res.output


@pytest.mark.parametrize(
    ("command", "extra"), [("sweep", "aiotsim[ray]"), ("calibrate", "aiotsim[ns3]"), ("sweep", "[sweep] out")]
)
def test_help_names_the_extras_to_install(command: str, extra: str) -> None:
    """Rich markup would eat an unescaped ``[ray]``: the help must show it whole."""
    res = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "250"})
    assert res.exit_code == 0 and extra in res.output
