"""Calibration against real TCP: runs a quick calibration when this host allows namespaces."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from aiotsim.errors import AiotsimError
from aiotsim.network.calibrate import (
    CalibrationRow,
    format_table,
    predict,
    run_calibration,
    summary,
)
from aiotsim.network.link import Link


def test_predict_is_the_fair_share_makespan_by_hand() -> None:
    # 4 x 100,000 B with 1448 B per packet (52-byte headers): 70 packets each (69 full + 88 B).
    # Per flow: 100,000 + 70 * (52 + 14) * 1.5 = 106,930 B; 4 flows at 1.25e6 B/s = 0.342176 s.
    link = Link("lo", 10e6, 0.0, 1500, 52, framing_bytes=14, acks_per_packet=0.5)
    assert predict(link, 100_000, 4) == pytest.approx(0.342176, rel=1e-9)


def test_table_and_summary_use_the_big_cases_only() -> None:
    rows = [
        CalibrationRow(1_000, 1, 0.001, 0.001, 0.002, 0.002),  # +100 %, ignored (< 100 KB)
        CalibrationRow(100_000, 1, 0.100, 0.100, 0.102, 0.096),  # +2 %
        CalibrationRow(1_000_000, 2, 1.000, 0.900, 0.960, 0.950),  # -4 %
        CalibrationRow(1_000_000, 4, 2.000, 1.900, 2.020, 1.900),  # +1 %
    ]
    s = summary(rows)
    assert s["median_error"] == pytest.approx(0.02)
    assert s["worst_error"] == pytest.approx(0.04)
    assert s["naive_worst_error"] == pytest.approx(0.05)
    table = format_table(rows)
    assert "1 MB" in table and "+2.0%" in table and "median |error| 2.0%, worst 4.0%" in table


def test_missing_tools_are_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda tool: None)
    with pytest.raises(AiotsimError, match="needs `ip` \\(iproute2\\)"):
        run_calibration(quick=True)


def _can_calibrate() -> str | None:
    """Why a real calibration cannot run here, or None when it can."""
    if os.name != "posix" or not hasattr(os, "geteuid"):
        return "needs Linux"
    if os.geteuid() != 0:
        return "needs root (CAP_NET_ADMIN) to create a network namespace"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"needs `{tool}` from iproute2"
    return None


@pytest.mark.slow
def test_quick_calibration_meets_the_error_targets() -> None:
    reason = _can_calibrate()
    if reason:
        pytest.skip(reason)
    try:
        rows = run_calibration(rate_mbps=10.0, quick=True)
    except AiotsimError as exc:  # e.g. a container without namespace support
        pytest.skip(f"calibration cannot run here: {exc}")
    assert [(r.size_bytes, r.flows) for r in rows] == [
        (100_000, 1), (100_000, 4), (1_000_000, 1), (1_000_000, 4),
    ]  # fmt: skip
    s = summary(rows)
    assert s["median_error"] <= 0.05, format_table(rows)
    assert s["worst_error"] <= 0.15, format_table(rows)
    spaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert f"aiotsim-cal-{os.getpid()}" not in spaces  # the namespace is always deleted
