"""tools/gpu_checks.sh, where it can run here: its usage errors and its refusal without a GPU.

The stages themselves need a CUDA device (the GPU machine); on one, this module skips.
"""

from __future__ import annotations

import subprocess

import pytest
import torch
from conftest import ROOT

SCRIPT = ROOT / "tools" / "gpu_checks.sh"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=120, cwd=ROOT)


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
