"""Sweeps and comparisons replay by themselves (issue 40, item 4): points that differ only in network
settings learn the same thing, so one of them trains and the others are replayed from its timing
record; the replayed run directories equal full runs (wall-clock fields aside); --no-replay trains
every point; a learning key in the grid trains every point; resume redoes only what is lost; a
refused replay becomes a full run; compare --set replays from an earlier compare in the same -o."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from aiotsim.cli import app
from aiotsim.errors import ConfigError
from aiotsim.results.parallel import Job
from aiotsim.results.replay_plan import Replay, find_sources, plan_replays, run_replays
from aiotsim.results.sweep import load_sweep, plan_sweep

runner = CliRunner()
TESTS = Path(__file__).parent
CODECS = ["none", "2bit"]
UPLINKS = [0.5, 1, 5]  # Mbit/s: the tiny scenario's uplink is its bottleneck, so the clock changes
WALL_CLOCK = {"wall_time_s"}  # summary.json fields that time the host, not the simulation


def _sweep_file(tmp: Path, grid: str) -> Path:
    p = tmp / "sweep.toml"
    p.write_text(f"""
[sweep]
base = "{TESTS / "tiny.toml"}"
name = "r"
[set]
"scenario.iterations" = 4
"training.eval_every" = 2
[grid]
{grid}
""")
    return p


NETWORK_GRID = f'"compressor.name" = {json.dumps(CODECS)}\n"network.uplink_mbps" = {UPLINKS}\n'


def _sweep(path: Path, out: Path, *extra: str) -> str:
    res = runner.invoke(app, ["sweep", str(path), "--out", str(out), "-j", "1", "-q", *extra], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return " ".join(res.output.split())


def _points(out: Path) -> list[dict]:
    return json.loads((out / "sweep.json").read_text())["points"]


def _index(out: Path) -> list[dict[str, str]]:
    with open(out / "sweep.csv", newline="") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def swept(tmp_path_factory) -> dict[str, Path | str]:
    """The 2 codecs x 3 uplinks sweep run twice: with replay (``out``) and with --no-replay (``full``)."""
    d = tmp_path_factory.mktemp("replay")
    path = _sweep_file(d, NETWORK_GRID)
    said = _sweep(path, d / "out")
    _sweep(path, d / "full", "--no-replay")
    return {"path": path, "out": d / "out", "full": d / "full", "said": said}


def test_a_network_sweep_trains_one_run_per_codec_and_replays_the_rest(swept) -> None:
    out = swept["out"]
    assert "6 to run (2 in full, 4 replayed)" in swept["said"]
    points = _points(out)
    assert len(points) == 6 and sum(p["replayed"] for p in points) == 4
    for codec in CODECS:
        mine = [p for p in points if p["values"]["compressor.name"] == codec]
        trained = [p for p in mine if not p["replayed"]]
        # the group's first point (grid order) trains; the others name it as their source
        assert trained == [mine[0]] and trained[0]["replayed_from"] is None
        assert not (out / trained[0]["run_dir"] / "replay.json").exists()
        for p in mine[1:]:
            assert p["replayed_from"] == trained[0]["run_dir"]
            record = json.loads((out / p["run_dir"] / "replay.json").read_text())
            assert Path(record["replayed_from"]) == (out / trained[0]["run_dir"]).resolve()
    # sweep.csv says the same, row by row
    rows = _index(out)
    assert [r["replayed"] for r in rows] == [str(p["replayed"]).lower() for p in points]
    assert [r["replayed_from"] for r in rows] == [p["replayed_from"] or "" for p in points]
    assert all(r["status"] == "complete" for r in rows)


def test_replayed_points_equal_full_runs_and_no_replay_trains_all(swept) -> None:
    out, full = swept["out"], swept["full"]
    assert all(not p["replayed"] and p["replayed_from"] is None for p in _points(full))
    assert not list(full.glob("runs/*/replay.json"))
    assert [r["replayed"] for r in _index(full)] == ["false"] * 6
    sim_times = set()
    for p in _points(out):
        a, b = out / p["run_dir"], full / p["run_dir"]  # the same scenario: the same directory name
        for name in ("metrics.csv", "evals.csv", "trace.json"):
            assert (a / name).read_bytes() == (b / name).read_bytes(), (p["values"], name)
        sa, sb = (json.loads((d / "summary.json").read_text()) for d in (a, b))
        assert set(sa) == set(sb)
        assert {k for k in sa if sa[k] != sb[k]} <= WALL_CLOCK, p["values"]
        sim_times.add(sa["sim_time_s"])
    assert len(sim_times) == 6  # every point's clock is its own: the replays did re-time the runs


def test_many_replays_go_to_worker_processes_and_equal_full_runs(swept, tmp_path, monkeypatch) -> None:
    # from POOL_REPLAYS replays on, --jobs workers replay them (lowered here: 2 replays, 2 workers)
    import aiotsim.results.replay_plan as replay_plan

    monkeypatch.setattr(replay_plan, "POOL_REPLAYS", 2)
    path = _sweep_file(tmp_path, f'"compressor.name" = ["2bit"]\n"network.uplink_mbps" = {UPLINKS}\n')
    out = tmp_path / "out"
    res = runner.invoke(app, ["sweep", str(path), "--out", str(out), "-j", "2", "-q"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    points = _points(out)
    assert [p["replayed"] for p in points] == [False, True, True]
    for p in points[1:]:  # the fixture's --no-replay sweep ran the same scenarios in full
        for name in ("metrics.csv", "evals.csv", "trace.json"):
            assert (out / p["run_dir"] / name).read_bytes() == (swept["full"] / p["run_dir"] / name).read_bytes()


def test_sources_prefer_a_full_run_to_a_replay(swept) -> None:
    out = swept["out"]
    points = _points(out)
    replayed, trained = out / points[1]["run_dir"], out / points[0]["run_dir"]
    found = find_sources([replayed, trained])
    assert list(found.values()) == [trained]
    assert list(find_sources([replayed]).values()) == [replayed]  # a replay is a source too


def test_resume_after_losing_a_replayed_point_redoes_only_that_point(tmp_path) -> None:
    path = _sweep_file(tmp_path, f'"network.uplink_mbps" = {UPLINKS}\n')
    out = tmp_path / "out"
    _sweep(path, out)
    points = _points(out)
    assert [p["replayed"] for p in points] == [False, True, True]
    lost = out / points[2]["run_dir"]
    metrics = (lost / "metrics.csv").read_bytes()
    kept = {d: (d / "summary.json").stat().st_mtime_ns for d in (out / p["run_dir"] for p in points[:2])}
    (lost / "summary.json").unlink()

    said = _sweep(path, out)
    assert "2 already complete, 1 to run (0 in full, 1 replayed)" in said
    assert {d: (d / "summary.json").stat().st_mtime_ns for d in kept} == kept  # nothing else redone
    assert (lost / "metrics.csv").read_bytes() == metrics
    assert [p["replayed_from"] for p in _points(out)] == [None, points[0]["run_dir"], points[0]["run_dir"]]

    # nothing lost: nothing to do
    assert "3 already complete, 0 to run" in _sweep(path, out)


def test_a_sweep_over_a_learning_key_trains_every_point(tmp_path) -> None:
    # training.lr changes what is learned: three groups, each trained; the uplink splits nothing
    lr = load_sweep(_sweep_file(tmp_path, '"training.lr" = [0.05, 0.1, 0.2]\n'), tmp_path / "lr")
    plan = plan_sweep(lr)
    assert len(plan.train) == 3 and plan.replays == []
    grid = '"training.lr" = [0.05, 0.1]\n"network.uplink_mbps" = [1, 5]\n'
    both = load_sweep(_sweep_file(tmp_path, grid), tmp_path / "both")
    plan = plan_sweep(both)
    jobs = both.jobs()  # grid order: (0.05, 1), (0.05, 5), (0.1, 1), (0.1, 5)
    assert plan.train == [jobs[0], jobs[2]]
    assert plan.replays == [Replay(jobs[1], jobs[0].out_dir), Replay(jobs[3], jobs[2].out_dir)]
    assert plan_sweep(both, replay=False).train == jobs
    # async learning depends on the network: every point trains
    grid = '"training.mode" = ["async"]\n"network.uplink_mbps" = [1, 5]\n'
    assert len(plan_sweep(load_sweep(_sweep_file(tmp_path, grid), tmp_path / "a")).train) == 2
    # --dry-run says what each point would do, and runs nothing
    sync = _sweep_file(tmp_path, grid.replace("async", "sync"))
    res = runner.invoke(app, ["sweep", str(sync), "-o", str(tmp_path / "d"), "--dry-run"])
    assert res.exit_code == 0 and "(1 in full, 1 replayed)" in " ".join(res.output.split())
    assert "[train]" in res.output and "[replay from " in res.output and not (tmp_path / "d").exists()


def test_plan_replays_groups_by_learning_key() -> None:
    # hand-made keys: "a" has no source yet (its first job trains), "b" has one, None never replays
    jobs = [Job(f"j{i}", "", f"/runs/{i}") for i in range(6)]
    keys = ["a", "a", None, "b", "a", "b"]
    plan = plan_replays(jobs, keys, {"b": "/old/b"})
    assert plan.train == [jobs[0], jobs[2]]
    assert plan.replays == [
        Replay(jobs[1], "/runs/0"),
        Replay(jobs[3], "/old/b"),
        Replay(jobs[4], "/runs/0"),
        Replay(jobs[5], "/old/b"),
    ]
    with pytest.raises(ValueError):
        plan_replays(jobs, keys[:2], {})


def test_a_replay_whose_source_is_not_complete_runs_in_full(tmp_path) -> None:
    # the group's trained run failed or was stopped: its directory is no source, the others train
    (tmp_path / "failed").mkdir()
    (tmp_path / "failed" / "summary.json").write_text('{"complete": false, "status": "interrupted"}')
    jobs = [Job("a", "", str(tmp_path / "a")), Job("b", "", str(tmp_path / "b"))]
    notes: list[str] = []
    replays = [Replay(jobs[0], str(tmp_path / "failed")), Replay(jobs[1], str(tmp_path / "missing"))]
    done, full = run_replays(replays, note=notes.append)
    assert done == [] and full == jobs
    assert len(notes) == 2 and all("holds no complete run with a timing record; running it in full" in n for n in notes)


def test_a_refused_replay_falls_back_to_a_full_run(tmp_path, monkeypatch) -> None:
    import aiotsim.replaying

    def refuse(*args, **kwargs):
        raise ConfigError("replay: uploads arrive in another order than recorded\nsecond line")

    monkeypatch.setattr(aiotsim.replaying, "replay_run", refuse)
    path = _sweep_file(tmp_path, '"network.uplink_mbps" = [1, 5]\n')
    out = tmp_path / "out"
    said = _sweep(path, out)
    assert "(1 in full, 1 replayed)" in said  # the plan
    assert "not replayed from" in said and "uploads arrive in another order" in said and "second line" not in said
    assert [p["replayed"] for p in _points(out)] == [False, False]  # both trained in the end
    assert [r["status"] for r in _index(out)] == ["complete", "complete"]
    assert not list(out.glob("runs/*/replay.json"))


def _compare(out: Path, uplink: float, *extra: str) -> str:
    args = ["compare", str(TESTS / "tiny.toml"), "-c", "none,2bit", "-n", "4", "-o", str(out), "-j", "1", "-q"]
    res = runner.invoke(app, [*args, "--set", f"network.uplink_mbps={uplink}", *extra], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return " ".join(res.output.split())


def _record(out: Path) -> list[Path]:
    return [out / r["run_dir"] for r in json.loads((out / "comparison.json").read_text())["runs"]]


def test_compare_replays_from_an_earlier_compare_with_other_network_settings(tmp_path) -> None:
    out = tmp_path / "cmp"
    said = _compare(out, 1)
    assert "2 to run" in said and "replayed" not in said  # nothing to replay from yet
    first = _record(out)
    said = _compare(out, 5)
    assert "2 to run (0 in full, 2 replayed)" in said
    second = _record(out)
    assert [d.parent.name for d in second] == ["none", "2bit"] and set(second).isdisjoint(first)
    for old, new in zip(first, second, strict=True):  # each codec from its own earlier run
        assert Path(json.loads((new / "replay.json").read_text())["replayed_from"]) == old.resolve()
    # the replays equal full runs of the same settings
    full = tmp_path / "full"
    assert "replayed" not in _compare(full, 5)
    for a, b in zip(second, _record(full), strict=True):
        assert a.name == b.name and (a / "metrics.csv").read_bytes() == (b / "metrics.csv").read_bytes()
    # --no-replay trains, even with sources at hand
    third = _compare(out, 2, "--no-replay")
    assert "2 to run" in third and "replayed" not in third
    assert not any((d / "replay.json").exists() for d in _record(out))
