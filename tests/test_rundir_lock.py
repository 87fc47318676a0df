"""One writer per run directory: a second run, a --resume, a compare or a sweep into a directory
another process is writing is refused with exit 2 naming the holder; the lock is the kernel's
(flock), so a killed holder leaves nothing that blocks the next run. And an empty --out is refused
by every command that takes one (it meant the current directory, whose checkpoint.pt a run deletes)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from aiotsim.api import run, run_scenario
from aiotsim.cli import app
from aiotsim.errors import ConfigError, ResultsError
from aiotsim.results.parallel import Job, _write_run_files, run_local
from aiotsim.results.store import LOCK_NAME, locked_run_dir
from aiotsim.results.sweep import load_sweep
from aiotsim.validate import load_validated

TESTS = Path(__file__).parent
TINY = TESTS / "tiny.toml"
HOLD = (  # a second process: takes the lock on argv[1], says so, and waits to be killed
    "import sys, time\nfrom aiotsim.results.store import locked_run_dir\n"
    "with locked_run_dir(sys.argv[1]):\n    print('held', flush=True)\n    time.sleep(60)\n"
)


def _cli(args: list[str]):
    return CliRunner().invoke(app, args)


def _refused_by_us(res, d: Path) -> None:
    """Exit 2, no traceback, and the message names this process as the holder of ``d``."""
    assert res.exit_code == 2, res.output
    assert f"{d} is in use by another aiotsim process (pid {os.getpid()} on " in res.output.replace("\n", " ")
    assert "Traceback" not in res.output


def test_a_second_run_or_resume_into_a_held_directory_is_refused_naming_the_holder(tmp_path: Path) -> None:
    d = tmp_path / "run"
    assert _cli(["run", str(TINY), "-q", "-o", str(d), "--checkpoint-every", "2"]).exit_code == 0
    assert not (d / LOCK_NAME).exists()  # released and removed once the run is over
    before = {p.name: p.read_bytes() for p in d.iterdir()}
    with locked_run_dir(d):
        _refused_by_us(_cli(["run", str(TINY), "-q", "-o", str(d)]), d)
        _refused_by_us(_cli(["run", "--resume", str(d), "-q"]), d)
        with pytest.raises(ResultsError, match="is in use by another aiotsim process"):
            run_scenario(load_validated(TINY, []), d, device="cpu")
    assert {p.name: p.read_bytes() for p in d.iterdir()} == before  # nothing cut, nothing deleted
    assert _cli(["run", "--resume", str(d), "-q"]).exit_code == 0  # free again


def test_compare_and_sweep_refuse_a_held_directory_and_a_batch_run_names_its_holder(tmp_path: Path) -> None:
    cmp_dir, sweep_dir = tmp_path / "cmp", tmp_path / "sw"
    sweep = tmp_path / "sweep.toml"
    sweep.write_text(f'[sweep]\nbase = "{TINY}"\nname = "lk"\n[grid]\n"scenario.seed" = [1, 2]\n')
    with locked_run_dir(cmp_dir), locked_run_dir(sweep_dir):
        _refused_by_us(_cli(["compare", str(TINY), "-c", "none", "-j", "1", "-q", "-o", str(cmp_dir)]), cmp_dir)
        _refused_by_us(_cli(["sweep", str(sweep), "-j", "1", "-q", "-o", str(sweep_dir)]), sweep_dir)
    # a run of a batch whose directory is held fails alone, saying by whom; the others run
    sc = load_validated(TINY, [])
    jobs = [Job(name, sc.to_toml(), str(tmp_path / name), "cpu") for name in ("held", "free")]
    with locked_run_dir(tmp_path / "held"):
        held, free = run_local(jobs, workers=1)
    assert free.ok and held.error is not None and f"pid {os.getpid()}" in held.error
    with locked_run_dir(tmp_path / "c"), pytest.raises(ResultsError, match="in use"):  # a Ray run's files
        _write_run_files(str(tmp_path / "c"), {"summary.json": b"{}"})
    assert not (tmp_path / "c" / "summary.json").exists()


def test_a_killed_holder_leaves_no_lock_that_blocks_the_next_run(tmp_path: Path) -> None:
    # another process holds the directory: refused, naming that process; kill -9 it (no cleanup
    # runs) and the kernel has dropped its lock: the next run goes ahead
    d = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(TESTS.parent)}
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(d)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        with pytest.raises(ResultsError, match=rf"in use by another aiotsim process \(pid {proc.pid} on "):
            run(TINY, out_dir=d, device="cpu")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    assert (d / LOCK_NAME).exists()  # left behind by kill -9, but no longer locked
    assert run(TINY, out_dir=d, device="cpu").summary.complete
    assert not (d / LOCK_NAME).exists()


@pytest.mark.parametrize("blank", ["", "  "])
def test_an_empty_out_is_refused_everywhere_and_nothing_in_the_current_directory_is_touched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, blank: str
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("checkpoint.pt").write_bytes(b"someone else's")
    sweep = tmp_path / "sweep.toml"
    sweep.write_text(f'[sweep]\nbase = "{TINY}"\n[grid]\n"scenario.seed" = [1]\n')
    for args in (
        ["run", str(TINY), "-q", "-o", blank],
        ["compare", str(TINY), "-c", "none", "-n", "1", "-q", "-o", blank],
        ["sweep", str(sweep), "-q", "-o", blank],
        ["plot", str(tmp_path), "-o", blank],
    ):
        res = _cli(args)
        assert res.exit_code == 2, (args, res.output)
        assert "empty" in res.output and "give a directory" in res.output, res.output
    with pytest.raises(ConfigError, match="is empty: give a directory name"):
        run(TINY, out_dir=blank, device="cpu")
    with pytest.raises(ConfigError, match="is empty"):
        load_sweep(sweep, blank)
    for value in (f'"{blank}"', "5"):  # a sweep file's own [sweep] out
        (tmp_path / "own.toml").write_text(sweep.read_text().replace("[grid]", f"out = {value}\n[grid]"))
        res = _cli(["sweep", str(tmp_path / "own.toml"), "-q"])
        assert res.exit_code == 2, res.output
        assert "sweep.out:" in res.output and "must be a directory name" in res.output, res.output
    (tmp_path / "own.toml").unlink()
    with pytest.raises(ConfigError, match="is empty"):
        run_scenario(load_validated(TINY, []), blank, device="cpu")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.pt", "sweep.toml"]
    assert Path("checkpoint.pt").read_bytes() == b"someone else's"


def test_the_holder_named_is_printable_text_only(tmp_path: Path) -> None:
    # a lock file is a file in a run directory, which may come from elsewhere: its bytes are not
    # echoed as they are (a terminal escape sequence would act on the reader's terminal)
    import fcntl

    (tmp_path / LOCK_NAME).write_text("pid 7 \x1b[2J\x07on host\n")
    with open(tmp_path / LOCK_NAME) as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(ResultsError) as refused:
            run_scenario(load_validated(TINY, []), tmp_path, device="cpu")
    assert "(pid 7 [2Jon host)" in refused.value.message and "\x1b" not in refused.value.message


def test_out_dot_replaces_a_run_directory_but_not_files_of_another_kind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `--out .` in a folder with a model's checkpoint.pt (no scenario.toml: not a run directory)
    # had deleted it; now refused, the folder untouched. In a run directory it replaces that run.
    monkeypatch.chdir(tmp_path)
    for name in ("checkpoint.pt", "metrics.csv"):
        Path(name).write_bytes(b"not aiotsim's")
        res = _cli(["run", str(TINY), "-q", "-o", "."])
        assert res.exit_code == 2, res.output
        assert f"not a run directory (no scenario.toml) but holds {name}" in res.output.replace("\n", " ")
        assert [p.name for p in tmp_path.iterdir()] == [name] and Path(name).read_bytes() == b"not aiotsim's"
        Path(name).unlink()
    assert _cli(["run", str(TINY), "-q", "-o", "."]).exit_code == 0  # an empty folder becomes the run directory
    Path("checkpoint.pt").write_bytes(b"this run's older checkpoint")
    assert _cli(["run", str(TINY), "-q", "-o", ".", "-n", "2"]).exit_code == 0  # a run directory is replaced
    assert not Path("checkpoint.pt").exists() and len(Path("metrics.csv").read_text().splitlines()) == 3
