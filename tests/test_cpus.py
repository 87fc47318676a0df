"""CPU quota detection (affinity, cgroup v2 cpu.max) against fake cgroup trees, and --threads."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from aiotsim import cpus
from aiotsim.api import _threads
from aiotsim.errors import ConfigError


def fake_cgroup(tmp_path: Path, levels: dict[str, str], member: str) -> tuple[Path, Path]:
    """A cgroup v2 tree under tmp_path with a cpu.max per level, and a /proc/self/cgroup file."""
    root = tmp_path / "cgroup"
    for rel, text in levels.items():
        folder = root / rel if rel else root
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "cpu.max").write_text(text + "\n")
    (root / member).mkdir(parents=True, exist_ok=True)
    proc = tmp_path / "proc_self_cgroup"
    proc.write_text(f"0::/{member}\n")
    return root, proc


def test_quota_is_max_over_period(tmp_path: Path) -> None:
    root, proc = fake_cgroup(tmp_path, {"box": "150000 100000"}, "box")
    assert cpus.cgroup_quota(root, proc) == 1.5


def test_unlimited_is_none(tmp_path: Path) -> None:
    root, proc = fake_cgroup(tmp_path, {"box": "max 100000"}, "box")
    assert cpus.cgroup_quota(root, proc) is None


def test_tightest_level_on_the_path_wins(tmp_path: Path) -> None:
    # the parent allows 3 CPUs, the child 4: the parent's limit binds the child
    root, proc = fake_cgroup(tmp_path, {"kube": "300000 100000", "kube/pod": "400000 100000"}, "kube/pod")
    assert cpus.cgroup_quota(root, proc) == 3.0


def test_missing_files_mean_no_quota(tmp_path: Path) -> None:
    assert cpus.cgroup_quota(tmp_path / "none", tmp_path / "none.txt") is None


def test_auto_threads_caps_affinity_by_quota(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpus, "affinity_cpus", lambda: 16)
    root, proc = fake_cgroup(tmp_path, {"box": "250000 100000"}, "box")
    assert cpus.auto_threads(root, proc) == 2  # 2.5 CPUs rounded down
    root, proc = fake_cgroup(tmp_path / "b", {"box": "50000 100000"}, "box")
    assert cpus.auto_threads(root, proc) == 1  # half a CPU: still one thread
    root, proc = fake_cgroup(tmp_path / "c", {"box": "max 100000"}, "box")
    assert cpus.auto_threads(root, proc) == 16  # no quota: the affinity mask


def test_affinity_matches_the_os() -> None:
    if hasattr(os, "sched_getaffinity"):
        assert cpus.affinity_cpus() == len(os.sched_getaffinity(0))


def test_resolve_threads() -> None:
    assert cpus.resolve_threads(3) == 3
    assert cpus.resolve_threads("2") == 2
    assert cpus.resolve_threads("auto") == cpus.auto_threads()
    for bad in (0, -1, "zero", "1.5", True):
        with pytest.raises(ConfigError, match="whole number >= 1 or 'auto'"):
            cpus.resolve_threads(bad)


def test_threads_block_sets_and_restores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpus, "auto_threads", lambda: 2)
    before = torch.get_num_threads()
    with _threads("auto"):
        assert torch.get_num_threads() == 2
    assert torch.get_num_threads() == before


def test_cli_bad_threads_is_exit_2_before_the_run(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from aiotsim.cli import app

    out = tmp_path / "run"
    res = CliRunner().invoke(app, ["run", "tests/tiny.toml", "--threads", "many", "--out", str(out), "-q"])
    assert res.exit_code == 2
    assert "'auto'" in res.output
    assert not out.exists()


def test_threads_are_bounded_by_the_usable_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    # 3 usable CPUs, 4 threads each: 12 is the most; more (1e9 made libgomp abort allocating
    # 216 GB) is refused naming the bound, through run_scenario's thread block as well
    monkeypatch.setattr(cpus, "affinity_cpus", lambda: 3)
    assert cpus.max_threads() == 12
    assert cpus.resolve_threads(12) == 12 and cpus.resolve_threads("12") == 12
    for bad in (13, "13", 1_000_000_000, "1000000000"):
        with pytest.raises(ConfigError, match=r"more than 12 \(4 per CPU this process may use, 3\)"):
            cpus.resolve_threads(bad)
    before = torch.get_num_threads()
    with pytest.raises(ConfigError, match="more than 12"), _threads(10**9):
        pass
    assert torch.get_num_threads() == before
    with pytest.raises(ConfigError, match="whole number"):  # a digit int() cannot read: a message, not a traceback
        cpus.resolve_threads("²")


def test_too_many_threads_is_exit_2_in_run_and_refused_by_the_api(tmp_path: Path) -> None:
    # compare and sweep take no --threads: their runs use RUN_THREADS (1) through run_scenario
    from typer.testing import CliRunner

    from aiotsim.api import run
    from aiotsim.cli import app

    out = tmp_path / "run"
    res = CliRunner().invoke(app, ["run", "tests/tiny.toml", "--threads", "1000000000", "--out", str(out), "-q"])
    assert res.exit_code == 2, res.output
    assert f"more than {cpus.max_threads()}" in res.output and "Traceback" not in res.output
    assert not out.exists()
    with pytest.raises(ConfigError, match=f"more than {cpus.max_threads()}"):
        run("tests/tiny.toml", out_dir=out, threads=cpus.max_threads() + 1)
    assert not out.exists()
