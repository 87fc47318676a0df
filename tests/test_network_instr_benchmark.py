"""benchmarks/network_instr.py: its measured processes run the network benchmark's workloads to
completion, and a flow's instructions are the run's beyond its setup, per flow."""

from __future__ import annotations

import subprocess
import sys
from types import ModuleType

import pytest
from conftest import ROOT, load_script


def load(name: str) -> ModuleType:
    return load_script(ROOT / "benchmarks" / f"{name}.py", f"bench_{name}")


@pytest.mark.parametrize("kind", ["star", "own", "hier"])
def test_the_measured_workload_delivers_every_flow(kind: str) -> None:
    network = load("network")
    env, net = network.network_setup(7, 2, kind, "tcp")
    assert net.transfers == []  # built, not run: the setup process's count excludes the run
    env.run()
    assert len(net.transfers) == 14 and {t.dst for t in net.transfers} == {"server"}
    env, count = network.timeout_setup(7, 2)
    env.run()
    assert count == [14]


def test_the_case_mode_runs_a_workload_in_its_own_process() -> None:
    for mode in ("setup", "run"):
        cmd = [sys.executable, str(ROOT / "benchmarks" / "network_instr.py"), "--case", "star", "ideal", "5", "2", mode]
        assert subprocess.run(cmd, capture_output=True, check=False).returncode == 0


def test_per_flow_is_the_runs_instructions_beyond_its_setup(monkeypatch: pytest.MonkeyPatch) -> None:
    bench = load("network_instr")
    counted = {False: 1_000_000, True: 1_600_000}  # setup only, setup and run

    def fake_run(cmd: list[str], **_kwargs: object) -> subprocess.CompletedProcess[str]:
        assert cmd[0] == "valgrind" and cmd[-6:-1] == ["--case", "own", "tcp", "100", "3"]
        return subprocess.CompletedProcess(cmd, 0, "", f"==1== Collected : {counted[cmd[-1] == 'run']}\n")

    monkeypatch.setattr(bench.subprocess, "run", fake_run)
    assert bench.per_flow("own", "tcp", 100, 3) == 600_000 / 300


def test_without_valgrind_it_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    bench = load("network_instr")
    monkeypatch.setattr(bench.shutil, "which", lambda _name: None)
    monkeypatch.setattr(sys, "argv", ["network_instr.py"])
    with pytest.raises(SystemExit) as stop:
        bench.main()
    assert stop.value.code == 2 and "install it" in capsys.readouterr().out
