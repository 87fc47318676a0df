"""Results do not change when code moves: short flops-mode runs of every shipped scenario with a
codec subset must reproduce the recorded fingerprints (tests/data/fingerprints.json, recorded
before the simulation core was redesigned). `python tools/fingerprints.py --check --all-codecs`
checks all 19 codecs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from conftest import ROOT, load_script

fingerprints = load_script(ROOT / "tools" / "fingerprints.py", "fingerprints")

RECORDED = json.loads(fingerprints.FIXTURE.read_text())
CASES = fingerprints.cases(all_codecs=False)


@pytest.fixture
def one_thread():
    """Results depend on torch's intra-op thread count; fingerprints are taken with one."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.mark.slow
@pytest.mark.parametrize(("key", "path", "iters", "codec", "sets"), CASES, ids=[c[0] for c in CASES])
def test_fingerprint_unchanged(key, path, iters, codec, sets, tmp_path: Path, one_thread) -> None:
    assert key in RECORDED, f"{key}: no recorded fingerprint (run tools/fingerprints.py --record)"
    got = fingerprints.run_case(path, iters, codec, sets, tmp_path)
    assert got == RECORDED[key]


def test_fingerprint_ignores_wall_clock_only(tmp_path: Path) -> None:
    """Two summaries that differ only in wall_time_s fingerprint alike; any other field differs."""
    from aiotsim.results.fingerprint import fingerprint_run_dir

    def write(d: Path, summary: dict) -> dict[str, str]:
        d.mkdir()
        (d / "metrics.csv").write_text("iteration\n0\n")
        (d / "evals.csv").write_text("iteration\n")
        (d / "summary.json").write_text(json.dumps(summary))
        return fingerprint_run_dir(d)

    a = write(tmp_path / "a", {"x": 1, "wall_time_s": 3.0})
    b = write(tmp_path / "b", {"x": 1, "wall_time_s": 9.5})
    c = write(tmp_path / "c", {"x": 2, "wall_time_s": 3.0})
    assert a == b
    assert a["summary.json"] != c["summary.json"]
    assert a["metrics.csv"] == c["metrics.csv"]
