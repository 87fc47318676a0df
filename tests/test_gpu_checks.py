"""tools/gpu_checks.sh, where it can run here: its usage errors and its refusal without a GPU.

The stages themselves need a CUDA device (the GPU machine); on one, this module skips.
"""

from __future__ import annotations

import subprocess

import pytest
import torch
from conftest import ROOT

SCRIPT = ROOT / "tools" / "gpu_checks.sh"


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)


def test_no_stage_is_a_usage_error() -> None:
    out = _run()
    assert out.returncode == 2 and "usage: bash tools/gpu_checks.sh STAGE..." in out.stderr


def test_an_unknown_stage_is_named_before_anything_runs() -> None:
    out = _run("env", "benchmark")
    assert out.returncode == 2 and "unknown stage 'benchmark'" in out.stderr
    assert "scale10k" in out.stderr  # the stages it knows are listed


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without CUDA")
def test_without_cuda_it_refuses_with_the_reason() -> None:
    out = _run("env", "cumsum")
    assert out.returncode == 2 and "no CUDA device" in out.stderr
    assert out.stdout == ""  # no stage ran


def _stub_env(tmp_path, body: str) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """The script's environment with a stand-in for the GPU machine's python3: its imports and CUDA
    check pass, and the stage commands named in ``body`` (a bash ``case`` over the arguments) do
    what it says; stage outputs under ``tmp_path / "out"``."""
    stub = tmp_path / "python3"
    stub.write_text(f'#!/usr/bin/env bash\ncase "$*" in\n{body}\n  *) exit 0 ;;\nesac\n')
    stub.chmod(0o755)
    return {"PATH": "/usr/bin:/bin", "PYTHON": str(stub), "OUT": str(tmp_path / "out")}


def test_a_stage_past_its_limit_is_stopped_and_the_next_one_runs(tmp_path) -> None:  # type: ignore[no-untyped-def]
    body = '  *server_ops.py*) echo "server_ops started"; sleep 60 ;;\n  *host_reads.py*) echo "host_reads ran" ;;'
    env = {**_stub_env(tmp_path, body), "GPU_STAGE_LIMIT_S": "2"}
    out = _run("server_ops", "host_reads", env=env)
    assert out.returncode == 124  # the first failing stage's status: timeout's
    assert "server_ops: stopped at its limit of 2 s" in out.stdout
    assert "host_reads ran" in out.stdout and "=== host_reads: exit 0" in out.stdout  # it still ran
    assert (tmp_path / "out" / "server_ops.txt").read_text() == "server_ops started\n"  # kept


def test_lease_runs_the_targets_stages_in_order_under_their_limits(tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = _run("lease", env=_stub_env(tmp_path, ""))
    heads = [line for line in out.stdout.splitlines() if line.startswith("=== ") and "exit" not in line]
    names = [h.split()[1] for h in heads]
    assert names == ["env", "cumsum", "tests", "scale10k", "scale1k"]
    limits = [int(h.split("limit ")[1].split(" s")[0]) for h in heads]
    assert sum(limits) <= 540  # one device call of at most 10 minutes, with room to spare


def test_a_bad_stage_limit_is_refused() -> None:
    out = _run("env", env={"PATH": "/usr/bin:/bin", "GPU_STAGE_LIMIT_S": "9m"})
    assert out.returncode == 2 and "GPU_STAGE_LIMIT_S must be a whole number of seconds" in out.stderr


def test_outside_lease_a_stage_has_no_limit(tmp_path) -> None:  # type: ignore[no-untyped-def]
    body = '  *host_reads.py*) sleep 3; echo "host_reads ran" ;;'
    out = _run("host_reads", env=_stub_env(tmp_path, body))
    assert out.returncode == 0 and "host_reads ran" in out.stdout
    assert "limit" not in out.stdout  # no limit named, none applied (timeout 0)
