"""The Makefile's set-up (issue 44): `make run` installs what a run needs only, `make test` adds the
test tools and the ns-3 and Ray extras, and the PyTorch CPU index is asked only when no configured
wheel satisfies the torch pin, with a short timeout.

Make runs for real here, with PYTHON set to a fake interpreter that records every call instead of
installing anything, so these tests see the commands the recipes run (including which branch of
the torch choice ran) in well under a second each.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
SEP = "\x1f"  # separates the recorded arguments of one call (none contains it)

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")

# The fake interpreter: records its arguments, one call a line; answers `-c "import torch"` with
# $TORCH_INSTALLED, a `pip install --dry-run` (the local-wheel check) with $LOCAL_WHEEL, pytest
# with $PYTEST_RC, and everything else with success.
FAKE_PYTHON = f"""#!/bin/sh
printf '%s{SEP}' "$@" >> "$CALLS"; echo >> "$CALLS"
case "$*" in
  "-c import torch") exit "$TORCH_INSTALLED" ;;
  *"install --dry-run"*) exit "$LOCAL_WHEEL" ;;
  "-m pytest"*) exit "$PYTEST_RC" ;;
esac
exit 0
"""


def make(
    tmp_path: Path,
    target: str,
    *,
    local_wheel: bool = True,
    torch_installed: bool = False,
    gpu: bool = False,
    pytest_rc: int = 0,
) -> tuple[subprocess.CompletedProcess[str], list[list[str]]]:
    """Run `make TARGET` on a copy of the Makefile with the fake interpreter; return make's result
    and the interpreter's calls since the previous `make` in this directory, each as its argument list."""
    if not (tmp_path / "Makefile").exists():
        for name in ("Makefile", "pyproject.toml"):
            shutil.copy(ROOT / name, tmp_path / name)
        fake = tmp_path / "fakepython"
        fake.write_text(FAKE_PYTHON)
        fake.chmod(0o755)
    calls = tmp_path / "calls"
    calls.write_text("")
    env = {
        "PATH": "/usr/bin:/bin",
        "CALLS": str(calls),
        "LOCAL_WHEEL": "0" if local_wheel else "1",
        "TORCH_INSTALLED": "0" if torch_installed else "1",
        "PYTEST_RC": str(pytest_rc),
    }
    # HAS_GPU on the command line overrides the Makefile's nvidia-smi probe of this machine.
    cmd = ["make", "--no-print-directory", "-C", str(tmp_path), target, f"PYTHON={tmp_path}/fakepython"]
    result = subprocess.run([*cmd, f"HAS_GPU={'1' if gpu else ''}"], env=env, capture_output=True, text=True)
    lines = calls.read_text().splitlines()
    return result, [line.split(SEP)[:-1] for line in lines]


def pip_installs(calls: list[list[str]]) -> list[list[str]]:
    """The arguments after `-m pip install` of each pip install call."""
    return [c[3:] for c in calls if c[:3] == ["-m", "pip", "install"]]


def test_run_installs_the_package_without_extras_then_runs_the_default_scenario(tmp_path: Path) -> None:
    result, calls = make(tmp_path, "run")
    assert result.returncode == 0, result.stderr
    installs = pip_installs(calls)
    assert ["-e", "."] in installs
    everything = " ".join(" ".join(c) for c in calls)
    for extra in ("[test", "ns3", "ray", "pytest", "cppyy"):
        assert extra not in everything
    # Last: the run itself, through this interpreter's aiotsim, not whichever one PATH finds.
    assert calls[-1][0] == "-c" and "from aiotsim.cli import main" in calls[-1][1]
    assert calls[-1][2:] == ["run", "scenarios/iot10.toml"]


def test_test_adds_the_test_and_ns3_extras_then_runs_pytest_on_all_cpus(tmp_path: Path) -> None:
    result, calls = make(tmp_path, "test")
    assert result.returncode == 0, result.stderr
    installs = pip_installs(calls)
    # The run's set-up first, then the extras, then the suite.
    assert installs.index(["-e", "."]) < installs.index(["-e", ".[test,ns3]"])
    assert calls[-1] == ["-m", "pytest", "-n", "auto"]


def test_test_fails_when_pytest_collects_nothing(tmp_path: Path) -> None:
    result, _ = make(tmp_path, "test", pytest_rc=5)  # pytest's exit status for "no tests collected"
    assert result.returncode != 0
    assert "no tests collected" in result.stdout


def test_a_configured_wheel_is_installed_without_asking_any_index(tmp_path: Path) -> None:
    result, calls = make(tmp_path, "setup", local_wheel=True)
    assert result.returncode == 0, result.stderr
    installs = pip_installs(calls)
    assert installs[0] == ["--dry-run", "--no-deps", "--no-index", "--quiet", "torch==2.13.0"]
    assert installs[1] == ["--no-deps", "--no-index", "torch==2.13.0"]
    assert not any(CPU_INDEX in arg for c in calls for arg in c)


def test_the_cpu_index_is_asked_only_without_a_configured_wheel_and_times_out_fast(tmp_path: Path) -> None:
    result, calls = make(tmp_path, "setup", local_wheel=False)
    assert result.returncode == 0, result.stderr
    installs = pip_installs(calls)
    assert installs[0][:3] == ["--dry-run", "--no-deps", "--no-index"]
    torch = installs[1]
    assert torch[-1] == "torch==2.13.0"
    assert torch[torch.index("--index-url") + 1] == CPU_INDEX
    # One retry of at most 10 s: an unreachable index costs seconds, not pip's default minutes.
    assert torch[torch.index("--timeout") + 1] == "10"
    assert torch[torch.index("--retries") + 1] == "1"
    assert installs[2] == ["-e", "."]  # torch's own dependencies come from the usual indexes here


def test_an_installed_torch_is_kept(tmp_path: Path) -> None:
    result, calls = make(tmp_path, "setup", torch_installed=True)
    assert result.returncode == 0, result.stderr
    assert pip_installs(calls) == [["-e", "."]]
    assert "torch already installed" in result.stdout


def test_with_a_gpu_the_default_cuda_build_is_installed(tmp_path: Path) -> None:
    result, calls = make(tmp_path, "setup", gpu=True)
    assert result.returncode == 0, result.stderr
    assert pip_installs(calls) == [["torch==2.13.0"], ["-e", "."]]


def test_set_up_runs_once_until_pyproject_changes(tmp_path: Path) -> None:
    make(tmp_path, "test")
    _, calls = make(tmp_path, "test")
    assert pip_installs(calls) == []  # both levels are stamped: only pytest runs
    _, calls = make(tmp_path, "run")
    assert pip_installs(calls) == []
    pyproject = tmp_path / "pyproject.toml"
    stamp = tmp_path / "build" / ".setup-run"
    # A pyproject.toml newer than the stamp (by 1 s: coarser than any file system's timestamps) re-installs.
    os.utime(pyproject, (stamp.stat().st_mtime + 1, stamp.stat().st_mtime + 1))
    _, calls = make(tmp_path, "run")
    assert ["-e", "."] in pip_installs(calls)


def test_ci_runs_the_readmes_test_command() -> None:
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    commands = [line for line in ci if line and not line.startswith("#")]
    assert commands[-1] == "make test"
    assert "make test" in (ROOT / "README.md").read_text()
