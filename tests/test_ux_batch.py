"""Issue 44, shaping sweeps and compares: shipped sweeps that show what they sweep, `sweep --set/-n/
--seeds`, a sweep file's base relative to the file, `-c all`, tables that fit 80 and 100 columns
without a cut cell, no "±" for one seed, one "not reached", and "2 codecs x 2 modes" titles."""

from __future__ import annotations

import json
import shutil
import tomllib
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from aiotsim.cli import app
from aiotsim.cli_batch import comparison_tables, fit_tables, sweep_tables
from aiotsim.compress.registry import codec_names
from aiotsim.errors import ConfigError
from aiotsim.results.compare import (
    NOT_REACHED,
    Comparison,
    ComparisonRow,
    comparison_title,
    display_columns,
    parse_compressors,
    plan_comparison,
    to_markdown,
)
from aiotsim.results.sweep import load_sweep

runner = CliRunner()
TESTS = Path(__file__).parent
SCENARIOS = TESTS.parent / "scenarios"


def _resolved(toml: str) -> dict:
    return tomllib.loads(toml)


# ---- 1. shipped sweeps ------------------------------------------------------------------------------
def test_shipped_uplink_sweep_is_not_bottlenecked_by_the_server_link() -> None:
    sw = load_sweep(SCENARIOS / "sweep_uplink.toml", "unused")
    rates = sorted({pt.values["network.uplink_mbps"] for pt in sw.points})
    assert rates == [1.0, 10.0, 100.0]
    for pt in sw.points:
        sc = _resolved(pt.scenario_toml)
        # Every node at full uplink rate at once still fits the server's link: the uplink is what limits.
        assert sc["network"]["server_mbps"] >= sc["nodes"]["count"] * sc["network"]["uplink_mbps"]


def test_shipped_nodes_sweep_varies_the_fleet_on_a_shared_server_link() -> None:
    sw = load_sweep(SCENARIOS / "sweep_nodes.toml", "unused")
    counts = {_resolved(pt.scenario_toml)["nodes"]["count"] for pt in sw.points}
    assert counts == {2, 5, 10} and len({pt.key for pt in sw.points}) == len(sw.points) == 12
    for pt in sw.points:  # the shared 10 Mbit/s server link is what the sweep loads with more nodes
        sc = _resolved(pt.scenario_toml)
        assert sc["network"]["server_mbps"] <= sc["nodes"]["count"] * sc["network"]["uplink_mbps"]


# ---- 2. sweep --set, -n, --seeds; base relative to the sweep file -----------------------------------
def _write_sweep(path: Path, base: str, grid: str) -> Path:
    path.write_text(f'[sweep]\nbase = "{base}"\nname = "t"\n\n[set]\n"training.eval_every" = 1\n\n[grid]\n{grid}')
    return path


def test_sweep_set_iterations_seeds_make_separate_points(tmp_path: Path) -> None:
    f = _write_sweep(tmp_path / "sw.toml", str(TESTS / "tiny.toml"), '"network.uplink_mbps" = [1.0, 10.0]\n')
    out = tmp_path / "out"
    args = ["sweep", str(f), "-o", str(out), "-n", "2", "--seeds", "2", "-s", "network.server_mbps=1000", "-q"]
    res = runner.invoke(app, [*args, "-j", "1"])
    assert res.exit_code == 0, res.output
    manifest = json.loads((out / "sweep.json").read_text())
    assert manifest["grid"]["scenario.seed"] == [3, 4]  # tiny.toml's seed 3, then +1
    assert manifest["set"]["scenario.iterations"] == 2 and manifest["set"]["network.server_mbps"] == 1000
    sim_time = {}
    for pt in manifest["points"]:
        summary = json.loads((out / pt["run_dir"] / "summary.json").read_text())
        sc = tomllib.loads((out / pt["run_dir"] / "scenario.toml").read_text())
        assert sc["scenario"]["seed"] == pt["values"]["scenario.seed"] and summary["iterations"] == 2
        sim_time[(pt["values"]["network.uplink_mbps"], pt["values"]["scenario.seed"])] = summary["sim_time_s"]
    assert len(sim_time) == 4
    for seed in (3, 4):  # the server link no longer hides the uplink: 10 Mbit/s is faster than 1
        assert sim_time[(10.0, seed)] < sim_time[(1.0, seed)]
    assert "…" not in res.output  # the table fits the runner's 80 columns
    wide = Console(width=80, record=True)
    wide.print(*sweep_tables(load_sweep(f, out, ["network.server_mbps=1000"], 2, 2), 80))
    text = wide.export_text()
    assert "…" not in text and max(map(len, text.splitlines())) <= 80


@pytest.mark.parametrize(
    ("args", "grid", "needle"),
    [
        (["--set", "network.uplink_mbps=5"], '"network.uplink_mbps" = [1.0]', "--set network.uplink_mbps"),
        (["-n", "3"], '"scenario.iterations" = [2, 4]', "-n/--iterations: scenario.iterations is swept"),
        (["--seeds", "2"], '"scenario.seed" = [1, 2]', "--seeds 2: scenario.seed is swept"),
        (["--set", "network.uplink_mbps"], '"compressor.name" = ["none"]', "expected SECTION.KEY=VALUE"),
        (["--set", "network.nosuch=1"], '"compressor.name" = ["none"]', "network.nosuch: unknown key"),
    ],
)
def test_sweep_command_line_conflicts_are_refused(tmp_path: Path, args: list[str], grid: str, needle: str) -> None:
    f = _write_sweep(tmp_path / "sw.toml", str(TESTS / "tiny.toml"), grid + "\n")
    res = runner.invoke(app, ["sweep", str(f), "-o", str(tmp_path / "out"), "--dry-run", *args])
    assert res.exit_code == 2 and needle in res.output and "Traceback" not in res.output
    assert not (tmp_path / "out" / "runs").exists()


def test_copied_sweep_file_finds_its_base_beside_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    here = tmp_path / "copy"
    here.mkdir()
    shutil.copy(TESTS / "tiny.toml", here / "tiny.toml")
    _write_sweep(here / "sw.toml", "tiny.toml", '"network.uplink_mbps" = [1.0, 2.0]\n')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # neither the repository nor the sweep file's directory
    sw = load_sweep(Path("..") / "copy" / "sw.toml")
    assert sw.base.resolve() == (here / "tiny.toml").resolve() and len(sw.points) == 2
    (here / "tiny.toml").unlink()
    with pytest.raises(ConfigError, match="taken from the sweep file's directory"):
        load_sweep(Path("..") / "copy" / "sw.toml")


# ---- 3. -c all --------------------------------------------------------------------------------------
def test_all_means_every_registered_codec() -> None:
    every = codec_names()
    assert parse_compressors("all") == every
    mixed = parse_compressors("topk, all")
    assert mixed[0] == "topk" and sorted(mixed) == sorted(every) and len(mixed) == len(every)


# ---- 4, 5. tables ----------------------------------------------------------------------------------
def _row(name: str, seeds: int, acc: float, std: float, tta: float | None, reached: int) -> ComparisonRow:
    return ComparisonRow(
        compressor=name, seeds=seeds, throughput_samples_per_s=1234.56, speedup=1.5, bytes_up=123_456_789.0,
        bytes_down=987_654_321.0, wire_bytes_up=124_000_000.0, wire_bytes_down=990_000_000.0,
        compression_ratio=31.9, final_accuracy=acc, final_accuracy_std=std, time_to_accuracy_s=tta,
        reached=reached, compute_share=0.04, encode_share=0.01, decode_share=0.01, comm_share=0.95,
        sim_time_s=4321.0,
    )  # fmt: skip


def _comparison(seeds: int) -> Comparison:
    rows = [
        _row("federated/efsignsgd", seeds, 0.8123, 0.0004, 1234.5, seeds),
        _row("sync/none", seeds, 0.7712, 0.0123, None, 0),
    ]
    return Comparison(rows, "sync/none", 0.9, [])


@pytest.mark.parametrize("width", [80, 100])
@pytest.mark.parametrize("seeds", [1, 3])
def test_comparison_tables_fit_without_cut_cells(width: int, seeds: int) -> None:
    c = _comparison(seeds)
    console = Console(width=width, record=True)
    console.print(*comparison_tables(c, "iot10: 2 codecs x 2 modes x 3 seeds", width))
    text = console.export_text()
    assert "…" not in text and max(map(len, text.splitlines())) <= width
    _, cells = display_columns(c)
    for row in cells:
        for cell in row:  # whole, on one line
            assert cell in text, cell
    assert ("81.23% ± 0.04%" in text) == (seeds > 1) and ("±" in text) == (seeds > 1)


def test_fit_tables_repeats_the_key_columns_in_every_part() -> None:
    headers = ["network.uplink_mbps", "compressor.name", *(f"metric number {i}" for i in range(8))]
    cells = [["100.0", "efsignsgd", *(f"{i}23456.78" for i in range(8))]]
    tables = fit_tables(headers, cells, 2, 80, "sweep t", "caption")
    assert len(tables) > 1
    for t in tables:
        assert [c.header for c in t.columns[:2]] == headers[:2]
    assert sorted(c.header for t in tables for c in t.columns[2:]) == sorted(headers[2:])


def test_one_seed_no_spread_one_not_reached_wording_and_mode_titles() -> None:
    one, three = _comparison(1), _comparison(3)
    assert "±" not in to_markdown(one) and "± 0.04%" in to_markdown(three)
    for c in (one, three):
        _, cells = display_columns(c)
        assert cells[1][10] == NOT_REACHED == "not reached"
    assert comparison_title("iot10", one, 1) == "iot10: 2 codecs x 2 modes x 1 seed"
    plain = Comparison([_row("none", 2, 0.5, 0.1, 1.0, 2), _row("2bit", 2, 0.5, 0.1, 2.0, 1)], "none", 0.9, [])
    assert comparison_title("iot10", plain, 2) == "iot10: 2 codecs x 2 seeds"
    assert display_columns(plain)[1][1][10] == "2.00 (1/2 seeds)"


def test_compare_command_prints_a_fitting_single_seed_table(tmp_path: Path) -> None:
    out = tmp_path / "cmp"
    res = runner.invoke(
        app, ["compare", str(TESTS / "tiny.toml"), "-c", "none,2bit", "-n", "2", "-o", str(out), "-q", "-j", "1"]
    )
    assert res.exit_code == 0, res.output
    assert "tiny: 2 codecs x 1 seed" in res.output and "±" not in res.output and "…" not in res.output
    md = (out / "comparison.md").read_text()
    assert md.startswith("# tiny: 2 codecs x 1 seed") and "±" not in md and "one seed per row" in md


def test_short_compare_and_sweep_evaluate_more_often_as_run_does(tmp_path: Path) -> None:
    iot10 = SCENARIOS / "iot10.toml"  # 300 iterations, evaluating every 25
    (job,) = plan_comparison(iot10, ["none"], 1, tmp_path / "cmp", iterations=60)
    assert _resolved(job.scenario_toml)["training"]["eval_every"] == 6  # 60 // 10: ten points, not two
    (job,) = plan_comparison(iot10, ["none"], 1, tmp_path / "cmp", ["training.eval_every=20"], iterations=60)
    assert _resolved(job.scenario_toml)["training"]["eval_every"] == 20  # given: kept
    f = tmp_path / "sw.toml"
    f.write_text(f'[sweep]\nbase = "{iot10}"\n[grid]\n"network.uplink_mbps" = [1.0]\n')
    (pt,) = load_sweep(f, tmp_path / "out", iterations=60).points
    assert _resolved(pt.scenario_toml)["training"]["eval_every"] == 6
    shipped = load_sweep(SCENARIOS / "sweep_uplink.toml", "unused", iterations=20)  # its [set] says 10
    assert {_resolved(p.scenario_toml)["training"]["eval_every"] for p in shipped.points} == {10}
