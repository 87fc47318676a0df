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


def test_the_sync_workload_is_a_synchronous_rounds_traffic() -> None:
    """7 nodes, 2 rounds, star, ideal: 7 downloads share the 100 Mbit/s server link (14.3 Mbit/s
    each), so each node's own 10 Mbit/s link binds. The 246,824 B model is 170 packets of 1,460 B
    with 40 B headers: 253,624 wire bytes, 0.2028992 s at 1.25 MB/s, plus 10 ms of latency; then
    50 ms of compute and the same back. A round lasts 2 x 0.2128992 + 0.05 s."""
    network = load("network")
    env, net = network.network_setup(7, 2, "star", "ideal", workload="sync")
    env.run()
    assert len(net.transfers) == 28
    assert {t.wire_bytes for t in net.transfers} == {246_824 + 170 * 40}
    assert env.now == pytest.approx(2 * (2 * (253_624 / 1.25e6 + 0.01) + 0.05), rel=1e-12)
    env, count = network.timeout_setup(7, 2, workload="sync")
    env.run()
    assert count == [28]


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
