"""`aiotsim plot`: valid PNG (and SVG) files, as many as the inputs call for; bad input exits 2."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from aiotsim.api import run_scenario
from aiotsim.cli import app
from aiotsim.config import load_scenario
from aiotsim.results import plots
from aiotsim.results.compare import plan_comparison
from aiotsim.results.parallel import run_local
from aiotsim.results.sweep import load_sweep, write_manifest

runner = CliRunner()
TESTS = Path(__file__).parent
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
RUN_FIGURES = {
    "throughput",
    "wire_bytes",
    "convergence_time",
    "convergence_iterations",
    "convergence_bytes",
    "time_to_accuracy",
}


# end-to-end runs of several codecs: part of the full suite, not the quick subset
pytestmark = pytest.mark.slow

@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    """A comparison directory: none and 2bit, 2 iterations each, run in this process."""
    out = tmp_path_factory.mktemp("plots") / "cmp"
    jobs = plan_comparison(TESTS / "tiny.toml", ["none", "2bit"], 1, out, ["training.eval_every=1"], iterations=2)
    assert all(r.ok for r in run_local(jobs, workers=1))
    return out


def _valid_png(p: Path) -> bool:
    data = p.read_bytes()
    return len(data) > 1000 and data[:8] == PNG_SIGNATURE


def test_plot_runs_writes_one_figure_set_and_a_timeline_per_codec(runs, tmp_path) -> None:
    out = tmp_path / "fig"
    res = runner.invoke(app, ["plot", str(runs), "-o", str(out)], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    pngs = sorted(out.glob("*.png"))
    assert {p.stem for p in pngs} == RUN_FIGURES | {"timeline_none", "timeline_2bit"}
    assert all(_valid_png(p) for p in pngs)
    svgs = sorted(out.glob("*.svg"))
    assert len(svgs) == len(pngs) and all(p.read_text().lstrip().startswith("<?xml") for p in svgs)
    # one run directory alone: same figures, one timeline
    res = runner.invoke(
        app,
        ["plot", str(next((runs / "2bit").glob("seed3-*"))), "-o", str(tmp_path / "one"), "--formats", "png"],
        catch_exceptions=False,
    )
    assert res.exit_code == 0, res.output
    assert {p.stem for p in (tmp_path / "one").glob("*")} == RUN_FIGURES | {"timeline_2bit"}


def test_plot_sweep_draws_a_figure_per_swept_key(runs, tmp_path) -> None:
    sweep_file = tmp_path / "s.toml"
    sweep_file.write_text(f"""
[sweep]
base = "{TESTS / "tiny.toml"}"
name = "up"
[set]
"scenario.iterations" = 2
"training.eval_every" = 1
[grid]
"network.uplink_mbps" = [1, 4]
"network.latency_ms" = [1, 20]
"compressor.name" = ["none"]
""")
    sw = load_sweep(sweep_file, tmp_path / "sw")
    write_manifest(sw)
    assert all(r.ok for r in run_local(sw.jobs(), workers=1))
    out = tmp_path / "fig"
    res = runner.invoke(
        app, ["plot", str(tmp_path / "sw"), str(runs), "-o", str(out), "--formats", "png"], catch_exceptions=False
    )
    assert res.exit_code == 0, res.output
    stems = {p.stem for p in out.glob("*.png")}
    assert stems == RUN_FIGURES | {
        "timeline_none",
        "timeline_2bit",
        "sweep_up_network.uplink_mbps",
        "sweep_up_network.latency_ms",
        "sweep_up_tta",
        "sweep_up_budget_accuracy",
        "sweep_up_winner",
    }
    assert all(_valid_png(p) for p in out.glob("*.png"))


def test_plot_bad_inputs_exit_2_listing_each(tmp_path) -> None:
    (tmp_path / "empty").mkdir()
    res = runner.invoke(
        app,
        ["plot", str(tmp_path / "nope"), str(tmp_path / "empty"), "-o", str(tmp_path / "f")],
        catch_exceptions=False,
    )
    assert res.exit_code == 2
    assert "nope: no such directory" in res.output and "no complete run directory found" in res.output
    assert "Traceback" not in res.output and not (tmp_path / "f").exists()


def test_plot_unknown_format_exits_2(runs, tmp_path) -> None:
    res = runner.invoke(
        app, ["plot", str(runs), "-o", str(tmp_path / "f"), "--formats", "png,gif"], catch_exceptions=False
    )
    assert res.exit_code == 2 and "unknown gif" in res.output


def test_shown_tracks_keep_every_row_that_fits_else_a_spread_of_owners() -> None:
    tracks = ["gw0", "gw0 -> server", "server -> gw0", "node0", "node0 -> gw0", "gw0 -> node0",
              "node1", "node1 -> gw0", "server"]  # fmt: skip
    assert plots.shown_tracks(tracks, 9) == (tracks, ["gw0", "node0", "node1"], 3)
    # 5 rows: the server's 1 + gw0's 3 (gw0 and node0 would be 1 + 3 + 3); "gw0 -> node0" is node0's
    assert plots.shown_tracks(tracks, 5) == (["gw0", "gw0 -> server", "server -> gw0", "server"], ["gw0"], 3)
    rows = [f"node{i}" for i in range(10)]
    spread = ["node0", "node2", "node5", "node7"]  # 10 * j // 4
    assert plots.shown_tracks(rows, 4) == (spread, spread, 10)
    assert plots.shown_tracks(rows, 0)[1] == ["node0"]  # at least one owner


def test_a_fleet_s_timeline_shows_a_spread_of_its_nodes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """6 nodes on a star: 19 rows (3 a node and the server's); at most 8 shows node0 and node3
    (owners 0 and 6 // 2) with their links and the server, and the title says so."""
    run_dir = tmp_path / "run"
    run_scenario(load_scenario(TESTS / "tiny.toml", ["nodes.count=6"], iterations=2), run_dir, device="cpu")
    monkeypatch.setattr(plots, "TIMELINE_MAX_ROWS", 8)
    figures = []

    def keep(fig, out_dir, stem, formats):  # noqa: ANN001, ANN202
        figures.append(fig)
        return []

    monkeypatch.setattr(plots, "save_figure", keep)
    plots.plot_timeline(plots.load_run(run_dir), tmp_path, ["png"])
    ax = figures[0].axes[0]
    rows = [t.get_text() for t in ax.get_yticklabels()]
    node0, node3 = ["node0", "node0 -> server", "server -> node0"], ["node3", "node3 -> server", "server -> node3"]
    assert rows == [*node0, *node3, "server"]
    assert ax.get_title().endswith("(2 of 6 nodes, spread evenly)")


def test_titles_describe_every_run_drawn_not_only_the_first() -> None:
    """Runs of 60 and 30 iterations in one figure (an older comparison directory drawn whole) are
    titled "30-60 iterations", not the first run's "60 iterations"."""

    def run(scenario: str, iterations: int) -> plots.Run:
        return plots.Run(Path(scenario), {"scenario": scenario, "nodes": 10, "iterations": iterations}, [], [])

    title = plots._title_suffix
    assert title([run("iot10", 60), run("iot10", 60)]) == "iot10: 10 nodes, 60 iterations"
    assert title([run("iot10", 60), run("iot10", 30), run("iot10", 60)]) == "iot10: 10 nodes, 30-60 iterations"
    assert title([run("b", 5), run("a", 5)]) == "a, b: 10 nodes, 5 iterations"
