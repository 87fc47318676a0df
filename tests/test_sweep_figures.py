"""The network-sweep figures (issue 40): time to target, accuracy at a budget and the winner per cell,
read from synthetic sweep directories whose values are chosen by hand, and the shipped sweep file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from aiotsim.errors import ResultsError
from aiotsim.results import plots
from aiotsim.results.plot_inputs import collect
from aiotsim.results.sweep import load_sweep
from aiotsim.results.sweep_figures import (
    key_label,
    nice_ticks,
    plot_network_sweep,
    summarize_sweep,
    winner_colors,
    winners,
)

ROOT = Path(__file__).parent.parent
UP, LAT, CODEC, SEED = "network.uplink_mbps", "network.latency_ms", "compressor.name", "scenario.seed"
# Evaluations after iterations 1, 3, 5, 7, 9 (10 iterations, each `dt` simulated s long, so the
# evaluation after iteration i is at (i + 1) * dt). Target 0.9: `none` reaches it after iteration 5
# (6 dt), `topk` after iteration 7 (8 dt); `2bit` never does; `same` is `none` under another name.
ACCS = {
    "none": [0.5, 0.8, 0.92, 0.95, 0.96],
    "topk": [0.4, 0.7, 0.85, 0.91, 0.93],
    "2bit": [0.3, 0.5, 0.6, 0.7, 0.8],
    "same": [0.5, 0.8, 0.92, 0.95, 0.96],
}
BYTES = {"none": (1000, 1000), "topk": (100, 1000), "2bit": (60, 1000), "same": (1000, 1000)}  # per iteration
EVAL_AFTER = (1, 3, 5, 7, 9)


def write_run(d: Path, codec: str, dt: float, accs: list[float]) -> None:
    """A complete run directory of 10 iterations of ``dt`` s each, as the readers expect it."""
    d.mkdir(parents=True)
    up, down = BYTES[codec]
    metrics = ["iteration,sim_time_s,loss,wire_bytes_up,wire_bytes_down"]
    metrics += [f"{i},{(i + 1) * dt!r},1.0,{up},{down}" for i in range(10)]
    evals = ["iteration,sim_time_s,accuracy"] + [f"{i},{(i + 1) * dt!r},{a}" for i, a in zip(EVAL_AFTER, accs)]
    (d / "metrics.csv").write_text("\n".join(metrics) + "\n")
    (d / "evals.csv").write_text("\n".join(evals) + "\n")
    summary = {
        "schema_version": 1, "complete": True, "status": "complete", "scenario": "syn", "mode": "sync",
        "compressor": codec, "target_accuracy": 0.9, "sim_time_s": 10 * dt, "bytes_up": 10 * up,
        "bytes_down": 10 * down, "wire_bytes_up": 10 * up, "wire_bytes_down": 10 * down,
        "throughput_samples_per_s": 32 / dt, "final_accuracy": accs[-1],
    }  # fmt: skip
    (d / "summary.json").write_text(json.dumps(summary))


def write_sweep(d: Path, name: str, grid: dict[str, list[Any]], runs: dict[tuple[Any, ...], tuple]) -> Path:
    """``sweep.json`` listing every grid point; a run directory for the points in ``runs`` (values in
    grid order -> (dt, accuracies or None for the codec's own)); the others are not run yet."""
    keys = list(grid)
    combos: list[tuple[Any, ...]] = [()]
    for k in keys:
        combos = [(*c, v) for c in combos for v in grid[k]]
    points = []
    for n, combo in enumerate(combos):
        values = dict(zip(keys, combo))
        points.append({"values": values, "key": f"p{n}", "run_dir": f"runs/p{n}"})
        if combo in runs:
            dt, accs = runs[combo]
            write_run(d / "runs" / f"p{n}", values.get(CODEC, "none"), dt, accs or ACCS[values.get(CODEC, "none")])
    d.mkdir(parents=True, exist_ok=True)
    (d / "sweep.json").write_text(json.dumps({"name": name, "grid": grid, "points": points}))
    return d


NEVER = [0.1, 0.2, 0.3, 0.4, 0.5]
# (uplink, latency, codec) -> (dt, accuracies); latency 300 is in the grid but not run.
TWO_KEY_RUNS = {
    (1, 5, "none"): (2.0, None),  # 12 s to target
    (1, 5, "topk"): (1.0, None),  # 8 s: topk wins
    (1, 5, "2bit"): (0.5, None),  # never; the shortest run: the budget is 5 s
    (1, 100, "none"): (3.0, None),  # 18 s, 6 x 2000 = 12,000 bytes to target
    (1, 100, "topk"): (2.25, None),  # 18 s, 8 x 1100 = 8,800 bytes: wins the tie
    (10, 5, "none"): (0.5, None),  # 3 s: none wins
    (10, 5, "topk"): (0.5, None),  # 4 s
    (10, 100, "none"): (1.5, NEVER),  # nobody reaches the target here
    (10, 100, "topk"): (1.5, NEVER),
}
TWO_KEY_GRID = {UP: [10, 1], LAT: [5, 100, 300], CODEC: ["none", "topk", "2bit"]}


@pytest.fixture
def two_keys(tmp_path: Path) -> Path:
    return write_sweep(tmp_path / "sw2", "net", TWO_KEY_GRID, TWO_KEY_RUNS)


def _sweep(d: Path):
    runs, sweeps = collect([d])
    assert not runs and len(sweeps) == 1
    return sweeps[0]


def test_two_keys_time_to_target_budget_and_winner(two_keys: Path) -> None:
    ns = summarize_sweep(_sweep(two_keys))
    assert ns.keys == (UP, LAT) and ns.values == ((1, 10), (5, 100, 300)) and ns.codecs == ("none", "topk", "2bit")
    assert ns.target == 0.9 and ns.budget_s == 5.0  # the 2bit run at (1, 5): 10 x 0.5 s
    tta = {(c, at): cell.tta_s for (c, at), cell in ns.cells.items()}
    assert tta[("none", (1, 5))] == 12.0 and tta[("topk", (1, 5))] == 8.0 and tta[("2bit", (1, 5))] is None
    assert tta[("none", (1, 100))] == 18.0 == tta[("topk", (1, 100))]
    assert tta[("none", (10, 5))] == 3.0 and tta[("topk", (10, 5))] == 4.0
    assert ns.cell("none", (1, 100)).bytes_to_target == 12_000 and ns.cell("topk", (1, 100)).bytes_to_target == 8_800
    assert ns.cell("none", (10, 300)) is None  # not run
    # accuracy at 5 s: the last evaluation at or before it
    assert ns.cell("none", (10, 5)).acc_at_budget == 0.96  # evaluations at 1..5 s
    assert ns.cell("none", (1, 5)).acc_at_budget == 0.5  # at 4 s (next at 8 s)
    assert ns.cell("topk", (1, 100)).acc_at_budget == 0.4  # at 4.5 s
    assert ns.cell("none", (1, 100)).acc_at_budget is None  # first evaluation at 6 s
    assert winners(ns) == {(1, 5): "topk", (1, 100): "topk", (10, 5): "none", (10, 100): None}


def test_target_and_budget_can_be_given(two_keys: Path) -> None:
    ns = summarize_sweep(_sweep(two_keys), target=0.95, budget_s=9.0)
    assert ns.cell("none", (1, 5)).tta_s == 16.0  # 0.95 after iteration 7: 8 x 2 s
    assert ns.cell("topk", (1, 5)).tta_s is None  # tops out at 0.93
    assert ns.cell("none", (1, 100)).acc_at_budget == 0.5  # at 6 s
    assert winners(ns)[(10, 5)] == "none" and winners(ns)[(1, 100)] == "none"
    with pytest.raises(ResultsError, match="target accuracy 90: must be in"):
        summarize_sweep(_sweep(two_keys), target=90)  # a percentage instead of a fraction
    with pytest.raises(ResultsError, match="time budget -1 s: must be > 0"):
        summarize_sweep(_sweep(two_keys), budget_s=-1)


def test_exact_tie_goes_to_the_codec_listed_first(tmp_path: Path) -> None:
    # `same` learns and sends exactly as `none`: equal time (12 s) and bytes to target
    for n, order in enumerate((["same", "none"], ["none", "same"])):
        grid = {UP: [1], LAT: [5], CODEC: order}
        d = write_sweep(tmp_path / f"tie{n}", "tie", grid, {(1, 5, "same"): (2.0, None), (1, 5, "none"): (2.0, None)})
        assert winners(summarize_sweep(_sweep(d))) == {(1, 5): order[0]}


def test_seeds_average_only_when_every_seed_reached(tmp_path: Path) -> None:
    grid = {UP: [1, 10], CODEC: ["none"], SEED: [1, 2]}
    runs = {
        (1, "none", 1): (2.0, None),  # reaches at 12 s
        (1, "none", 2): (2.0, NEVER),  # does not: the cell is "not reached"
        (10, "none", 1): (0.5, None),  # 3 s
        (10, "none", 2): (1.0, None),  # 6 s: mean 4.5 s
    }
    ns = summarize_sweep(_sweep(write_sweep(tmp_path / "seeds", "seeds", grid, runs)))
    assert ns.keys == (UP,) and ns.budget_s == 5.0
    low, high = ns.cell("none", (1,)), ns.cell("none", (10,))
    assert (low.seeds, low.reached, low.tta_s) == (2, 1, None)
    assert (high.seeds, high.reached, high.tta_s) == (2, 2, 4.5)
    assert high.acc_at_budget == pytest.approx((0.96 + 0.8) / 2)  # seed 1's at 5 s, seed 2's at 4 s
    assert low.acc_at_budget == pytest.approx((0.5 + 0.1) / 2)  # both seeds' evaluations at 4 s


def test_plot_all_draws_the_network_figures_beside_the_sweep_figures(two_keys: Path, tmp_path: Path) -> None:
    written = plots.plot_all([two_keys], tmp_path / "fig", formats=("png",))
    stems = {p.stem for p in written}
    assert stems == {
        "sweep_net_network.uplink_mbps",
        "sweep_net_network.latency_ms",
        "sweep_net_tta",
        "sweep_net_budget_accuracy",
        "sweep_net_winner",
    }
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 5000 for p in written)


def test_one_key_draws_lines_and_three_keys_draw_nothing_extra(tmp_path: Path) -> None:
    one = write_sweep(tmp_path / "one", "up", {UP: [1, 10], CODEC: ["none", "2bit"]}, {
        (1, "none"): (2.0, None), (10, "none"): (0.5, None), (1, "2bit"): (1.0, None), (10, "2bit"): (0.5, None),
    })  # fmt: skip
    written = plot_network_sweep(_sweep(one), tmp_path, ("png", "svg"))
    assert sorted(p.name for p in written) == [
        "sweep_up_tta_network.uplink_mbps.png",
        "sweep_up_tta_network.uplink_mbps.svg",
    ]
    three = write_sweep(tmp_path / "three", "u3", {UP: [1], LAT: [5], "network.loss": [0.0], CODEC: ["none"]}, {
        (1, 5, 0.0, "none"): (1.0, None),
    })  # fmt: skip
    assert plot_network_sweep(_sweep(three), tmp_path, ("png",)) == []


def test_axis_labels_carry_units() -> None:
    assert key_label(UP).endswith("(Mbit/s)") and "link rate" in key_label(UP)
    assert key_label(LAT).endswith("(ms)") and "latency" in key_label(LAT)
    assert key_label("custom.thing") == "thing"


def test_colour_bar_ticks_and_winner_colours() -> None:
    assert nice_ticks(13.0, 620.0, log=True) == [20, 50, 100, 200, 500]
    assert nice_ticks(3.0, 4.0, log=True) == [3.0, 4.0]  # no 1-2-5 tick inside: the ends
    assert nice_ticks(0.0, 96.0, log=False) == []  # linear: matplotlib's own
    for n in (3, 18):
        colors = list(winner_colors([f"c{i}" for i in range(n)]).values())
        assert len(set(colors)) == n  # distinct
        assert not any(r == g == b for r, g, b in colors)  # no grey: grey means "not reached"


def test_shipped_network_sweep_is_20_codecs_by_40_network_points() -> None:
    sw = load_sweep(ROOT / "scenarios" / "sweep_network.toml")
    assert len(sw.grid[CODEC]) == 20 == len(set(sw.grid[CODEC]))
    assert len(sw.grid[UP]) * len(sw.grid[LAT]) == 40
    assert min(sw.grid[UP]) == 0.5 and max(sw.grid[UP]) == 20 and min(sw.grid[LAT]) == 5 and max(sw.grid[LAT]) == 300
    assert len(sw.points) == 800 and len({p.key for p in sw.points}) == 800
