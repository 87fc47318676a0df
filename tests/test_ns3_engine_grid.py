"""Equality with ns-3 alone: the ns-3 engine (``engine = "ns3"``) against the standalone calibration
driver on three lossless grid cases, flow by flow (skips without ns-3).

Both build the same ns-3 star and TCP set-up (see ``tools/ns3_engine_check.py``, which runs the
whole lossless grid): the calibration with BulkSend applications, the engine from
``Topology.star`` with SimPy messages over per-transfer connections. Without loss nothing is
random, so every flow's completion time agrees to ns-3's nanosecond (checked to 1e-9; the issue asks
for 1%). The engine's cases share one ns-3 worker (reset between worlds; about 10 s of
start-up) and the calibration's three run in another process at the same time.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from conftest import ROOT, load_script

from aiotsim.network.calibrate_ns3 import Ns3Case, ns3_available, run_ns3

pytest.importorskip("ns")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not ns3_available(), reason="ns-3 not installed (pip install 'aiotsim[ns3]')"),
]

check = load_script(ROOT / "tools" / "ns3_engine_check.py", "ns3_engine_check")

CASES = [  # (size, flows, latency_ms): fair sharing, slow start over one flow, 16 short flows
    Ns3Case(100_000, 4, 10.0, 0.0),
    Ns3Case(1_000_000, 1, 50.0, 0.0),
    Ns3Case(10_000, 16, 1.0, 0.0),
]


def test_engine_gives_the_calibrations_flow_times_on_lossless_grid_cases() -> None:
    assert all(case in check.lossless_cases(quick=False) for case in CASES)  # cases of the calibration grid
    with ThreadPoolExecutor(max_workers=1) as pool:  # the calibration's own ns-3 process, meanwhile
        calibration = pool.submit(run_ns3, CASES)
        engine = [check.engine_times(case) for case in CASES]  # in turn, in one reused worker
        runs = calibration.result()
    for case, (want_runs,), got_times in zip(CASES, runs, engine, strict=True):
        want, got = sorted(want_runs), sorted(got_times)
        assert min(want) > 0, f"{case}: a flow did not finish in the calibration"
        assert got == pytest.approx(want, rel=1e-9), f"{case}: engine {got}, calibration {want}"
        assert check.flow_difference(want, got) <= check.TOLERANCE
