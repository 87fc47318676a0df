"""`aiotsim sweep`: hash-keyed run directories, an index equal to the runs' summaries, resuming after
an interruption without recomputing, validation of every grid point up front, and Ray's memory
requests (a stopped Ray sweep and Ray = local: tests/test_sweep_signals.py)."""

from __future__ import annotations

import csv
import hashlib
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from aiotsim.cli import app
from aiotsim.errors import ConfigError
from aiotsim.results.parallel import Event, _ray_memory, run_local
from aiotsim.results.sweep import _structure_problems, load_sweep
from aiotsim.validate import PROCESS_BYTES

runner = CliRunner()
TESTS = Path(__file__).parent


def _sweep_file(tmp: Path, grid: str, extra: str = "") -> Path:
    p = tmp / "sweep.toml"
    p.write_text(f"""
[sweep]
base = "{TESTS / "tiny.toml"}"
name = "t"
{extra}
[set]
"scenario.iterations" = 2
"training.eval_every" = 1

[grid]
{grid}
""")
    return p


GRID = '"network.uplink_mbps" = [1, 10]\n"compressor.name" = ["none", "2bit"]\n'


def _index(out: Path) -> list[dict[str, str]]:
    with open(out / "sweep.csv", newline="") as f:
        return list(csv.DictReader(f))


def _mtimes(out: Path) -> dict[Path, int]:
    return {p: p.stat().st_mtime_ns for p in (out / "runs").glob("*/summary.json")}


def test_sweep_interrupted_resumes_only_the_rest(tmp_path) -> None:
    path = _sweep_file(tmp_path, GRID)
    out = tmp_path / "out"
    sw = load_sweep(path, out)
    assert len(sw.points) == 4 and len(sw.pending()) == 4

    # Interrupt after the first run finishes (as a Ctrl-C would, between runs).
    def stop_after_first(e: Event) -> None:
        if e.kind == "done":
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_local(sw.pending(), workers=1, on_event=stop_after_first)
    first = _mtimes(out)
    assert len(first) == 1 and len(sw.pending()) == 3

    res = runner.invoke(app, ["sweep", str(path), "--out", str(out), "-j", "1", "-q"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert "1 already complete, 3 to run" in res.output
    after = _mtimes(out)
    assert len(after) == 4
    assert {p: after[p] for p in first} == first  # the finished run was not recomputed

    # The index: grid values, status, metrics equal to each run's summary; directories keyed by hash.
    rows = _index(out)
    assert [(float(r["network.uplink_mbps"]), r["compressor.name"]) for r in rows] == [
        (1, "none"),
        (1, "2bit"),
        (10, "none"),
        (10, "2bit"),
    ]
    for r in rows:
        d = out / r["run_dir"]
        toml = (d / "scenario.toml").read_text()
        assert d.name == hashlib.sha256(toml.encode()).hexdigest()[:12]
        s = json.loads((d / "summary.json").read_text())
        assert r["status"] == "complete" and s["compressor"] == r["compressor.name"]
        for key in ("throughput_samples_per_s", "wire_bytes_up", "bytes_up", "final_accuracy", "sim_time_s"):
            assert float(r[key]) == s[key], key
    manifest = json.loads((out / "sweep.json").read_text())
    assert list(manifest["grid"]) == ["network.uplink_mbps", "compressor.name"] and len(manifest["points"]) == 4

    # A run whose summary is lost is the only one redone.
    lost = out / rows[2]["run_dir"] / "summary.json"
    lost.unlink()
    kept = {p: t for p, t in after.items() if p != lost}
    res = runner.invoke(app, ["sweep", str(path), "--out", str(out), "-j", "1", "-q"], catch_exceptions=False)
    assert res.exit_code == 0 and "3 already complete, 1 to run" in res.output
    again = _mtimes(out)
    assert lost in again and {p: again[p] for p in kept} == kept


def test_sweep_reports_every_bad_point_and_exits_2(tmp_path) -> None:
    grid = (
        '"network.uplnk_mbps" = [1]\n"network.downlink_mbps" = [-1, 5]\n'
        '"compressor.name" = ["none", "bogus"]\n"nodes.count" = 3\n"flat" = [1]\n'
    )
    path = _sweep_file(tmp_path, grid)
    res = runner.invoke(app, ["sweep", str(path), "--out", str(tmp_path / "o")], catch_exceptions=False)
    assert res.exit_code == 2
    assert '"nodes.count": must be a non-empty list' in res.output
    assert '"flat": must be "section.key"' in res.output
    assert "Traceback" not in res.output
    # grid structure is fixed first; then every point is validated, each problem once
    grid = '"network.uplnk_mbps" = [1]\n"network.downlink_mbps" = [-1, 5]\n"compressor.name" = ["none", "bogus"]\n'
    path = _sweep_file(tmp_path, grid)
    res = runner.invoke(app, ["sweep", str(path), "--out", str(tmp_path / "o")], catch_exceptions=False)
    assert res.exit_code == 2
    assert res.output.count("network.uplnk_mbps: unknown key (did you mean 'uplink_mbps'?)") == 1
    assert "network.downlink_mbps: must be > 0, got -1.0" in res.output
    assert "unknown compressor 'bogus'" in res.output
    assert "Traceback" not in res.output and not (tmp_path / "o").exists()


def test_sweep_missing_base_and_file(tmp_path) -> None:
    p = tmp_path / "s.toml"
    p.write_text('[sweep]\nbase = "nope.toml"\n[grid]\n"scenario.seed" = [1]\n')
    res = runner.invoke(app, ["sweep", str(p)], catch_exceptions=False)
    assert res.exit_code == 2 and "sweep.base: no such scenario file" in res.output
    res = runner.invoke(app, ["sweep", str(tmp_path / "missing.toml")], catch_exceptions=False)
    assert res.exit_code == 2 and "Traceback" not in res.output


def test_ray_memory_requests_refuse_a_run_larger_than_every_node(tmp_path) -> None:
    """Each Ray task asks for its run's estimate (with its worker process) as Ray's ``memory``
    resource; a run larger than every live node's memory is refused up front (Ray would leave it
    pending for good). ``ray.nodes()`` is stubbed: real requests run in test_sweep_signals' Ray sweep."""

    class TwoNodes:  # what ray.nodes() reports: a live node with 3 GB, a dead one with plenty
        @staticmethod
        def nodes() -> list[dict]:
            return [{"Alive": True, "Resources": {"memory": 3e9}}, {"Alive": False, "Resources": {"memory": 1e12}}]

    (tmp_path / "b").mkdir()
    fleet = '"nodes.count" = [10_000]\n"data.samples_per_node" = [16]\n'  # ~5 GB: validates here
    big = load_sweep(_sweep_file(tmp_path / "b", fleet), tmp_path / "big")
    refused = r"1 run\(s\) need more memory than a Ray node offers \(3.0 GB on the largest\)"
    with pytest.raises(ConfigError, match=refused):
        _ray_memory(TwoNodes, big.jobs())
    need = _ray_memory(TwoNodes, load_sweep(_sweep_file(tmp_path, GRID), tmp_path / "small").jobs())
    assert len(need) == 4 and all(PROCESS_BYTES < b < 3e9 for b in need)  # tiny runs: ~0.5 GB each


def test_a_sweep_name_cannot_leave_runs(tmp_path: Path) -> None:
    """The default sweep directory is runs/sweep-NAME: a NAME with a path in it is refused."""
    (tmp_path / "s.toml").write_text(
        f'[sweep]\nname = "../../x"\nbase = "{TESTS / "tiny.toml"}"\n[grid]\n"compressor.name" = ["none"]\n'
    )
    with pytest.raises(ConfigError, match="sweep.name: must be a plain name"):
        load_sweep(tmp_path / "s.toml")
    assert load_sweep(tmp_path / "s.toml", out_dir=tmp_path / "out").out_dir == tmp_path / "out"  # --out is fine


def test_a_scenario_given_as_a_sweep_file_says_which_command_runs_it(tmp_path: Path) -> None:
    """`aiotsim sweep scenarios/iot10.toml`: one line naming `aiotsim run` and how to sweep it,
    exit 2 (before: an 'unknown table' line per section and 'sweep.base: required')."""
    scenario = Path(__file__).resolve().parents[1] / "scenarios" / "iot10.toml"
    with pytest.raises(ConfigError) as err:
        load_sweep(scenario)
    assert len(err.value.problems) == 1
    assert "a scenario, not a sweep file; run it with `aiotsim run" in err.value.problems[0]
    assert '[sweep] base = "iot10.toml"' in err.value.problems[0]
    res = CliRunner().invoke(app, ["sweep", str(scenario), "--out", str(tmp_path / "s")])
    assert res.exit_code == 2 and "unknown table" not in res.output and not (tmp_path / "s").exists()


def test_a_grid_over_the_point_bound_is_refused_before_any_point_is_validated(tmp_path) -> None:
    # 300 x 300 = 90,000 points took about 10 minutes of silent planning (7 ms a point) before this
    # bound; refused at once, with the product named, and nothing written.
    grid = f'"scenario.seed" = {list(range(300))}\n"training.lr" = {[0.01 + i * 1e-4 for i in range(300)]}\n'
    path = _sweep_file(tmp_path, grid)
    res = runner.invoke(app, ["sweep", str(path), "--out", str(tmp_path / "o"), "--dry-run"], catch_exceptions=False)
    assert res.exit_code == 2
    assert "300 x 300 = 90,000 points, over the bound of 10,000" in res.output
    assert "Traceback" not in res.output and not (tmp_path / "o").exists()
    # at the bound itself a grid is planned as before (the bound is on the product, not on each list)
    at_bound = {"sweep": {"base": "b"}, "grid": {"a.b": list(range(100)), "c.d": list(range(100))}}
    assert _structure_problems(at_bound, "f") == []
    over = {"sweep": {"base": "b"}, "grid": {"a.b": list(range(100)), "c.d": list(range(101))}}
    assert _structure_problems(over, "f") == [
        "f: grid: 100 x 101 = 10,100 points, over the bound of 10,000 (each point is a run directory, and each "
        "is validated before anything runs): split the sweep into several files or take fewer values"
    ]
