"""Results do not change when code moves: short flops-mode runs of every shipped scenario with a
codec subset must reproduce the recorded fingerprints (tests/data/fingerprints.json: one set per
kind of CPU, since MKL's and oneDNN's kernels round by microarchitecture; the machine's set is the
one whose canary run it reproduces). `python tools/fingerprints.py --check --all-codecs` checks
every codec."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from conftest import ROOT, load_script

fingerprints = load_script(ROOT / "tools" / "fingerprints.py", "fingerprints")

SETS = fingerprints.load_sets(fingerprints.FIXTURE)
CASES = fingerprints.cases(all_codecs=False)


@pytest.fixture
def one_thread():
    """Results depend on torch's intra-op thread count; fingerprints are taken with one."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, str]]:
    """This machine's recorded fingerprints (skips where no set matches its canary run)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        found, _ = fingerprints.machine_set(SETS, tmp_path_factory.mktemp("canary"))
    finally:
        torch.set_num_threads(before)
    if found is None:
        pytest.skip(
            f"no recorded fingerprint set matches this machine ({fingerprints.machine_name()}): record one "
            "with tools/fingerprints.py --record --all-codecs, from the code before the change under test"
        )
    stale = set(found.get("stale", []))  # changed on purpose since, or new since (then absent)
    return {**dict.fromkeys(stale), **{k: None if k in stale else v for k, v in found["fingerprints"].items()}}


@pytest.mark.slow
@pytest.mark.parametrize(("key", "path", "iters", "codec", "sets"), CASES, ids=[c[0] for c in CASES])
def test_fingerprint_unchanged(key, path, iters, codec, sets, tmp_path: Path, one_thread, recorded) -> None:
    assert key in recorded, f"{key}: no recorded fingerprint (run tools/fingerprints.py --record)"
    if recorded[key] is None:
        pytest.skip(f"{key}: results changed on purpose since this machine's set was recorded; re-record it here")
    got = fingerprints.run_case(path, iters, codec, sets, tmp_path)
    assert got == recorded[key]


def test_every_set_covers_every_case_and_its_canary() -> None:
    """Each kind of machine has a whole set: every codec on every scenario, the canaries among them
    (a case added since the set was recorded is marked stale there instead)."""
    keys = {c[0] for c in fingerprints.cases(all_codecs=True)}
    assert SETS and set(fingerprints.CANARIES) <= {c[0] for c in CASES}
    for s in SETS:
        stale = set(s.get("stale", []))
        assert set(s["fingerprints"]) | stale == keys, s["machine"]
        assert stale <= keys and set(s["fingerprints"]) <= keys
    canaries = [json.dumps([s["fingerprints"].get(k) for k in fingerprints.CANARIES], sort_keys=True) for s in SETS]
    assert len(set(canaries)) == len(SETS)  # the canaries tell the sets apart


def test_machine_set_and_the_set_record_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The set whose canaries the machine all reproduces is its set (one that matches only the
    first is not); --record rewrites it, else the set of a CPU of the same name (results changed
    on purpose), else appends a new one."""
    conv, var = fingerprints.CANARIES
    monkeypatch.setattr(fingerprints, "run_case", lambda path, iters, codec, *a: {"metrics.csv": f"{codec[0]}1"})
    here = {conv: {"metrics.csv": "n1"}, var: {"metrics.csv": "v1"}}  # none, variance
    a = {"machine": "cpu A", "fingerprints": {conv: {"metrics.csv": "n0"}, var: {"metrics.csv": "v1"}}}
    a2 = {"machine": "cpu A2", "fingerprints": {conv: {"metrics.csv": "n1"}, var: {"metrics.csv": "v0"}}}
    b = {"machine": "cpu B", "fingerprints": here}
    assert fingerprints.machine_set([a, a2, b], tmp_path) == (b, here)
    assert fingerprints.machine_set([a, a2], tmp_path) == (None, here)
    sets = [a]
    assert fingerprints.set_to_record(sets, None, "cpu A") is a and len(sets) == 1
    new = fingerprints.set_to_record(sets, None, "cpu C")
    assert sets == [a, new] and new["machine"] == "cpu C" and new["fingerprints"] == {}
    path = tmp_path / "f.json"
    fingerprints.save_sets(path, sets)
    assert fingerprints.load_sets(path) == sets


def test_a_change_recorded_on_one_machine_marks_the_others_stale() -> None:
    """Recording a case whose fingerprint changed marks it stale in every other set; recording the
    same value again marks nothing; a machine recording a case it had stale clears its mark and
    marks nothing (it catches up with the change)."""
    a = {"machine": "A", "fingerprints": {"k": {"m": "1"}, "j": {"m": "2"}}}
    b = {"machine": "B", "fingerprints": {"k": {"m": "x"}, "j": {"m": "y"}}}
    sets = [a, b]
    fingerprints.record_case(sets, a, "j", {"m": "2"})  # unchanged
    assert "stale" not in b
    fingerprints.record_case(sets, a, "k", {"m": "3"})  # changed on purpose
    assert a["fingerprints"]["k"] == {"m": "3"} and b["stale"] == ["k"] and "stale" not in a
    fingerprints.record_case(sets, b, "k", {"m": "z"})  # B catches up: its mark goes, A's value stands
    assert "stale" not in b and "stale" not in a and b["fingerprints"]["k"] == {"m": "z"}
    fingerprints.record_case(sets, a, "new", {"m": "4"})  # a new case: B has none, so it is stale there
    assert b["stale"] == ["new"] and "new" not in b["fingerprints"] and "stale" not in a
    fingerprints.record_case(sets, b, "new", {"m": "w"})  # B records it: caught up, A untouched
    assert "stale" not in b and "stale" not in a and b["fingerprints"]["new"] == {"m": "w"}


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
