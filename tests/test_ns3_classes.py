"""The per-flow calibration classes (aiotsim calibrate --against ns3 --classes): the statistics
by hand, the model side by hand, and the ns-3 harness checked against the star calibration's own
ns-3 program and against what a drop-tail buffer must do (skips without ns-3)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from aiotsim.network import calibrate_classes as cc
from aiotsim.network.calibrate_ns3 import Ns3Case, ns3_available, run_ns3


def test_class_stats_by_hand() -> None:
    case = cc.ClassCase("mixed RTT", "x", (cc.Flow(1, 1.0),) * 4)
    other = cc.ClassCase("low rate", "y", (cc.Flow(1, 1.0),))
    rows = [cc.FlowRow(case, i, 1.0, m) for i, m in enumerate((1.1, 0.8, 2.0, 1.0))] + [cc.FlowRow(other, 0, 2.0, 2.0)]
    mixed, low = cc.class_stats(rows)
    assert (mixed.klass, mixed.n) == ("mixed RTT", 4)
    assert mixed.median == pytest.approx(0.15)  # |errors| 0.1, 0.2, 1.0, 0: median of 0, 0.1, 0.2, 1.0
    assert mixed.p90 == pytest.approx(0.2 + 0.7 * 0.8)  # position 2.7 between 0.2 and 1.0
    assert mixed.worst == pytest.approx(1.0)
    assert mixed.bias == pytest.approx((0.1 - 0.2 + 1.0 + 0.0) / 4)
    assert (low.klass, low.n, low.worst) == ("low rate", 1, 0.0)


def test_every_class_has_cases() -> None:
    assert {c.klass for c in cc.grid()} == set(cc.CLASSES)


def test_model_side_by_hand_counts_from_the_flows_start() -> None:
    # as the star's calibration: 10 KB at 10 Mbit/s, 50 ms one way: handshake (0.1 s), one burst of
    # 10,000 + 7 x 54 B (8.30 ms), the last packet stored and forwarded on the server link (1.20 ms),
    # one latency; the same whenever the flow starts
    want = 0.1 + (10_000 + 7 * 54) * 8 / 10e6 + 1502 * 8 / 10e6 + 0.05
    for start in (0.0, 2.5):
        case = cc.ClassCase("staggered", "one", (cc.Flow(10_000, 50.0, start),))
        assert cc.model_times(case) == [pytest.approx(want, rel=1e-9)]


def test_fair_model_ignores_the_buffer_and_fifo_feels_it() -> None:
    # a per-flow fair queue holds no shared backlog: queue_packets changes nothing; one drop-tail
    # FIFO of 10 packets makes 8 slow starts overflow it: the last flow finishes later than with 1,000
    flows = (cc.Flow(250_000, 50.0),) * 8
    deep_case = cc.ClassCase("deep buffer", "d", flows, queue_packets=1000)
    shallow_case = cc.ClassCase("shallow buffer", "s", flows, queue_packets=10)
    assert cc.model_times(shallow_case) == cc.model_times(deep_case)
    assert max(cc.model_times(shallow_case, sharing="fifo")) > max(cc.model_times(deep_case, sharing="fifo"))


def test_markdown_report_lays_out_both_sharings() -> None:
    case = cc.ClassCase("mixed RTT", "x", (cc.Flow(1, 1.0),) * 2)
    rows = [cc.FlowRow(case, 0, 2.0, 3.0, 1.0, 0.1, 0.05), cc.FlowRow(case, 1, 4.0, 4.0, 5.0, 0.4, 0.5)]
    text = cc.markdown_report(rows)
    # fair: |errors| 0.5 and 0 (median 25%); fifo: 0.5 and 0.25 (median 37.5%, signed mean -12.5%);
    # ns-3's relative standard errors 0.1 / 2 and 0.4 / 4: median 7.5%; the fifo model's 0.05 / 1
    # and 0.5 / 5: median 7.5% (fair's model is deterministic here: 0)
    assert "| mixed RTT | 2 | 25.0% | 45.0% | 50.0% | +25.0% | 7.5% | 0.0% |" in text
    assert "| mixed RTT | 2 | 37.5% | 47.5% | 50.0% | -12.5% | 7.5% | 7.5% |" in text
    assert text.index('`sharing = "fair"`') < text.index('`sharing = "fifo"`')
    assert "| mixed RTT | x | 1 | 4.000 | 0.400 | 4.000 | +0.0% | 5.000 | +25.0% |" in text


def test_realisations_start_each_flow_up_to_a_millisecond_late_the_same_way_every_time() -> None:
    case = cc.ClassCase("staggered", "s", (cc.Flow(1, 1.0, 0.0), cc.Flow(1, 1.0, 0.3)))
    runs = cc.realisations(case, 5)
    assert runs == cc.realisations(case, 5) and len(runs) == 5
    late = [[f.start_s - g.start_s for f, g in zip(r.flows, case.flows, strict=True)] for r in runs]
    assert all(0.0 <= d < cc.START_JITTER_S for row in late for d in row)
    assert len({d for row in late for d in row}) == 10  # every flow of every realisation its own draw
    assert all(r.label == case.label and r.queue_packets == case.queue_packets for r in runs)


def test_compare_averages_the_realisations_and_gives_ns3s_standard_error(monkeypatch: pytest.MonkeyPatch) -> None:
    # two flows, three realisations; ns-3 (stubbed) gives flow 0 1, 2, 3 s (mean 2, sd 1, se
    # 1 / sqrt 3) and flow 1 4 s, -1 (unfinished), 4 s: flow 1 is left out
    case = cc.ClassCase("deep buffer", "d", (cc.Flow(10_000, 50.0),) * 2)
    monkeypatch.setattr(cc, "run_ns3", lambda cases: [[1.0, 4.0], [2.0, -1.0], [3.0, 4.0]][: len(cases)])
    (row,) = cc.compare([case], runs=3)
    assert (row.flow, row.ns3_s, row.ns3_se) == (0, pytest.approx(2.0), pytest.approx(1 / 3**0.5))
    # the model's side is the mean of its three realisations (each within 1 ms of the exact time)
    exact = cc.model_times(case)[0]
    assert row.model_s == pytest.approx(exact, abs=1e-3)


def test_compare_averages_fifo_over_model_seeds_per_realisation(monkeypatch: pytest.MonkeyPatch) -> None:
    # fifo's overflow draws make one seed's time a sample: each of 3 realisations runs 2 seeds,
    # k + 1 + 3 s (the first set is fair's), here times equal to the seed: 1..6, mean 3.5, standard
    # error stdev(1..6) / sqrt(6)
    case = cc.ClassCase("shallow buffer", "s", (cc.Flow(10_000, 50.0),))
    monkeypatch.setattr(cc, "run_ns3", lambda cases: [[1.0]] * len(cases))
    monkeypatch.setattr(cc, "MODEL_SEEDS", 2)
    seen: list[tuple[int, str]] = []

    def fake(c: cc.ClassCase, seed: int = 1, sharing: str = "fair") -> list[float]:
        seen.append((seed, sharing))
        return [float(seed)] if sharing == "fifo" else [1.0]

    monkeypatch.setattr(cc, "model_times", fake)
    (row,) = cc.compare([case], runs=3)
    assert sorted(seed for seed, sharing in seen if sharing == "fifo") == [1, 2, 3, 4, 5, 6]
    assert sorted(seed for seed, sharing in seen if sharing == "fair") == [1, 2, 3]
    assert row.fifo_s == pytest.approx(3.5)
    assert row.fifo_se == pytest.approx((17.5 / 5) ** 0.5 / 6**0.5)


def test_markdown_needs_ns3() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "aiotsim.cli", "calibrate", "--markdown"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "--markdown" in proc.stderr + proc.stdout and "Traceback" not in proc.stderr


def test_star_markdown_groups_by_latency_and_loss() -> None:
    from aiotsim.network.calibrate_ns3 import Ns3Row, markdown_report

    def row(lat: float, loss: float, ns3: float, model: float, ideal: float, se: float = 0.0) -> Ns3Row:
        return Ns3Row(Ns3Case(1000, 1, lat, loss), ns3, model, ideal, se)

    rows = [
        row(1, 0, 1.0, 1.02, 0.5), row(1, 0, 2.0, 2.0, 1.0), row(1, 0, 1.0, 0.9, 1.0),  # |err| 2%, 0, 10%
        row(10, 0.01, 1.0, 1.3, 0.8, 0.2), row(10, 0.01, 1.0, 1.5, 0.8, 0.2),  # 30% (within 2 se), 50% (not)
    ]  # fmt: skip
    text = markdown_report(rows)
    assert "| 1 ms | 0% | 3 | 2.0% / 10.0% | - | 50.0% / 50.0% |" in text
    assert "| 10 ms | 1% | 2 | 40.0% / 50.0% | 1 | 20.0% / 20.0% |" in text
    # all five: |errors| 0, 2, 10, 30, 50%: median 10%, 2 within 5%, 3 within 15%; the fluid
    # model's 0, 20, 20, 50, 50%: median 20%
    assert "All 5 cases: median 10.0% (fluid model 20.0%), 2 within 5%, 3 within 15%, worst 50.0%" in text
    assert "lossless median 2.0%, lossy median 40.0%." in text


@pytest.mark.slow
@pytest.mark.skipif(not ns3_available(), reason="ns-3 not installed (pip install 'aiotsim[ns3]')")
def test_ns3_harness_agrees_with_the_star_calibration_and_feels_the_buffer() -> None:
    one = cc.ClassCase("deep buffer", "1 x 250 KB", (cc.Flow(246_824, 50.0),))
    late = cc.ClassCase("staggered", "1 x 250 KB at 3 s", (cc.Flow(246_824, 50.0, 3.0),))
    eight = (cc.Flow(250_000, 50.0),) * 8
    deep = cc.ClassCase("deep buffer", "8 deep", eight, queue_packets=1000)
    shallow = cc.ClassCase("shallow buffer", "8 shallow", eight, queue_packets=10)
    alternate = cc.ClassCase("asymmetric reuse", "a", (cc.Flow(100_000, 50.0),), edge_mbps=2.0, down_mbps=20.0,
                             core_mbps=100.0, rounds=2, down_bytes=100_000)  # fmt: skip
    got = cc.run_ns3([one, late, deep, shallow, alternate])
    star = run_ns3([Ns3Case(246_824, 1, 50.0, 0.0)])[0][0][0]
    assert got[0][0] == pytest.approx(star, rel=1e-9)  # the same set-up as the star's ns-3 program
    assert got[1][0] == pytest.approx(got[0][0], rel=1e-9)  # timed from the flow's own start
    # a 10-packet queue overflows in slow start: the round takes longer than with 1,000 packets
    assert max(got[3]) > 1.2 * max(got[2])
    up1, down1, up2, down2 = got[4]  # one connection: the handshake only before the first upload
    assert min(up1, up2) > 100_000 * 8 / 2e6 and min(down1, down2) > 100_000 * 8 / 20e6
    assert up1 > up2 + 0.09


def test_model_alternation_reuses_one_connection() -> None:
    # 100 KB up at 2 Mbit/s, 100 KB down at 20 Mbit/s, twice: every transfer takes at least its
    # bytes over its link; the first upload pays the handshake (2 x 50 ms) that the second does not
    case = cc.ClassCase("asymmetric reuse", "a", (cc.Flow(100_000, 50.0),), edge_mbps=2.0, down_mbps=20.0,
                        core_mbps=100.0, rounds=2, down_bytes=100_000)  # fmt: skip
    up1, down1, up2, down2 = cc.model_times(case)
    assert min(up1, up2) > 100_000 * 8 / 2e6 + 0.05 and min(down1, down2) > 100_000 * 8 / 20e6 + 0.05
    assert up1 > up2 + 0.09  # the handshake, and a window that stayed open (no idle restart)
    assert down2 <= down1


def test_classes_without_ns3_as_the_reference_is_a_clear_exit_2() -> None:
    cmd = [sys.executable, "-m", "aiotsim.cli", "calibrate", "--classes"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert done.returncode == 2 and "add --against ns3" in done.stderr + done.stdout
    assert "Traceback" not in done.stderr
