"""The command line for researchers (issue 44): --version, -h, completion, eval_every of short
runs, ``validate --show``, markup in the listings, federated summaries."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from aiotsim import __version__
from aiotsim.cli import app, plain_text, summary_table
from aiotsim.config import load_scenario, scenario_from_dict
from aiotsim.validate import load_validated

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "tests" / "tiny.toml"
IOT10 = ROOT / "scenarios" / "iot10.toml"  # 300 iterations, eval_every 25
runner = CliRunner()
WIDE = {"COLUMNS": "250"}  # Rich wraps table cells at the terminal width (80 under CliRunner)


def _text(table: object) -> str:
    from rich.console import Console

    console = Console(width=200, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    console.print(table)
    return console.export_text()


# ---- 1: --version, -h on every command, shell completion -----------------------------------------
def test_version_prints_the_package_version() -> None:
    r = runner.invoke(app, ["--version"])
    assert r.exit_code == 0
    assert r.output.strip() == f"aiotsim {__version__}"


def test_dash_h_is_help_on_every_command() -> None:
    commands = typer.main.get_command(app).commands  # type: ignore[attr-defined]
    assert {"run", "validate", "compare", "sweep", "plot", "models"} <= set(commands)
    for args in [[], *([name] for name in commands)]:
        r = runner.invoke(app, [*args, "-h"])
        assert r.exit_code == 0, (args, r.output)
        assert "Usage:" in r.output and "--help" in r.output, args


def test_shell_completion_completes_command_names() -> None:
    # --show-completion prints the script of the shell it detects (none under make's sh on CI):
    # that it is offered is ours to test; the completion itself is tested below, through bash's protocol
    r = runner.invoke(app, ["--help"], env=WIDE)
    assert r.exit_code == 0 and "--install-completion" in r.output and "--show-completion" in r.output
    env = {**os.environ, "_AIOTSIM_COMPLETE": "complete_bash", "COMP_WORDS": "aiotsim co", "COMP_CWORD": "1"}
    code = "import sys; sys.argv[0] = 'aiotsim'; from aiotsim.cli import main; main()"
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert sorted(done.stdout.split()) == ["compare", "compressors"]


# ---- 2: -n scales eval_every ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("n", "every"),
    [(60, 6), (5, 1), (99, 9), (250, 25), (299, 25), (300, 25), (1000, 25)],  # min(25, max(1, n // 10)) below 300
)
def test_short_run_evaluates_every_tenth(n: int, every: int) -> None:
    assert load_scenario(IOT10, iterations=n).training.eval_every == every


def test_eval_every_given_with_set_is_kept() -> None:
    assert load_scenario(IOT10, ["training.eval_every=30"], iterations=60).training.eval_every == 30
    # never more often than the scenario's own: tiny evaluates every 2 of its 4 iterations
    assert load_scenario(TINY, iterations=3).training.eval_every == 1  # 3 // 10 -> at least 1
    assert load_scenario(TINY, iterations=40).training.eval_every == 2  # longer: the file's
    # not shortened against the iterations --set gives: -n is then a lengthening
    assert load_scenario(IOT10, ["scenario.iterations=50"], iterations=60).training.eval_every == 25


def test_short_run_has_a_ten_point_curve(tmp_path: Path) -> None:
    text = TINY.read_text().replace("iterations = 4", "iterations = 100").replace("eval_every = 2\n", "")
    scenario = tmp_path / "long.toml"
    scenario.write_text(text)
    r = runner.invoke(app, ["run", str(scenario), "-n", "20", "-q", "-o", str(tmp_path / "run")])
    assert r.exit_code == 0, r.output
    with (tmp_path / "run" / "evals.csv").open() as f:
        iterations = [int(row["iteration"]) for row in csv.DictReader(f)]
    assert iterations == [1, 3, 5, 7, 9, 11, 13, 15, 17, 19]  # every 2 (20 // 10), 0-based


# ---- 3: validate --show ----------------------------------------------------------------------------
def test_validate_show_prints_the_resolved_scenario() -> None:
    r = runner.invoke(app, ["validate", str(TINY), "-n", "3", "-c", "topk", "--show"])
    assert r.exit_code == 0, r.output
    shown = r.stdout
    data = tomllib.loads(shown)  # the whole of stdout is TOML
    assert data["scenario"]["iterations"] == 3 and data["compressor"]["name"] == "topk"
    assert data["training"]["eval_every"] == 1  # -n 3 on tiny's eval_every 2
    assert data["energy"] and data["network"]["mtu"] == 1500  # sections and keys tiny.toml leaves to defaults
    expected = load_validated(TINY, [], compressor="topk", iterations=3)
    assert scenario_from_dict(data) == expected  # what a run would use
    assert "ok" in r.stderr and "ok" not in shown


def test_validate_show_of_a_bad_scenario_shows_nothing() -> None:
    r = runner.invoke(app, ["validate", str(TINY), "--set", "network.mtu=5", "--show"])
    assert r.exit_code == 2
    assert r.stdout == "" and "network.mtu" in r.stderr


# ---- 4: listings keep brackets, lose Sphinx markup ----------------------------------------------------
def test_compressors_keep_bracketed_text(wide_cli: None) -> None:
    r = runner.invoke(app, ["compressors"], env=WIDE)
    assert r.exit_code == 0
    for text in ("[index in union]", "[m, r]", "[kh,kw]", "[out, in...]"):  # agg-aware, powersgd, hylo, onebit
        assert text in r.output


def test_plain_text_strips_sphinx_markup() -> None:
    assert plain_text("LeNet-5 for ``(C, H, W)`` inputs") == "LeNet-5 for (C, H, W) inputs"
    assert plain_text("of :data:`MLP_HIDDEN` units") == "of MLP_HIDDEN units"
    assert plain_text(":class:`~aiotsim.learn.Foo` via :func:`the run <aiotsim.api.run>`") == "Foo via the run"
    assert plain_text("a [b] `c`") == "a [b] c"


def test_models_prints_plain_descriptions(wide_cli: None) -> None:
    r = runner.invoke(app, ["models", "--input", "1,8,8"], env=WIDE)
    assert r.exit_code == 0, r.output
    assert "LeNet-5 for (C, H, W) inputs" in r.output and "MLP_HIDDEN" in r.output
    assert "``" not in r.output and ":data:" not in r.output


# ---- 5: federated summaries --------------------------------------------------------------------------
def _summary(mode: str) -> dict[str, object]:
    return {
        "scenario": "s", "compressor": "none", "status": "complete", "mode": mode, "iterations": 30, "nodes": 96,
        "sim_time_s": 100.0, "throughput_samples_per_s": 1.0, "bytes_up": 1, "bytes_down": 1, "wire_bytes_up": 1,
        "wire_bytes_down": 1, "compression_ratio": 1.0, "compute_share": 0.04, "comm_share": 1.0,
        "decode_share": 0.0, "final_accuracy": 0.5, "target_accuracy": 0.9, "time_to_accuracy_s": None,
        "wall_time_s": 1.0, "device": "cpu",
    }  # fmt: skip


def test_federated_summary_names_rounds_fleet_and_shares() -> None:
    text = _text(summary_table(_summary("federated"), fleet=100))
    assert "30 (96 of 100 nodes took part)" in text and "30 x 96" not in text
    assert "node compute / round" in text and "4% (mean contributor)" in text
    assert "server waits / decodes" in text and "100% / 0%" in text
    assert "compute / comm share" not in text
    sync = _text(summary_table(_summary("sync")))
    assert "30 x 96" in sync and "4% / 100%" in sync  # sync: shares of one critical path


def test_federated_run_prints_the_fleet(tmp_path: Path) -> None:
    sets = ["training.mode=federated", "nodes.count=6", "nodes.per_round=2", "training.local_steps=1"]
    args = ["run", str(TINY), "-n", "2", "-q", "-o", str(tmp_path / "fed")]
    r = runner.invoke(app, [*args, *(x for s in sets for x in ("--set", s))], env=WIDE)
    assert r.exit_code == 0, r.output
    took = json.loads((tmp_path / "fed" / "summary.json").read_text())["nodes"]
    assert 2 <= took <= 4  # 2 rounds of 2 nodes
    assert f"2 ({took} of 6 nodes took part)" in r.output


def _has_tensorboard() -> bool:
    import importlib.util

    return importlib.util.find_spec("tensorboard") is not None


@pytest.mark.skipif(_has_tensorboard(), reason="tensorboard is installed: the refusal cannot be seen")
def test_run_tensorboard_without_the_package_is_refused_before_the_run(tmp_path: Path) -> None:
    tiny = Path(__file__).with_name("tiny.toml")
    res = runner.invoke(app, ["run", str(tiny), "-o", str(tmp_path / "r"), "-q", "--tensorboard", str(tmp_path / "tb")])
    assert res.exit_code == 2
    assert "pip install tensorboard" in res.output
    assert not (tmp_path / "r").exists()  # refused before the run, not after it


@pytest.mark.skipif(not _has_tensorboard(), reason="tensorboard is not installed (pip install 'aiotsim[tensorboard]')")
def test_run_tensorboard_writes_the_run_s_scalars(tmp_path: Path) -> None:
    tiny = Path(__file__).with_name("tiny.toml")
    res = runner.invoke(app, ["run", str(tiny), "-o", str(tmp_path / "r"), "-q", "--tensorboard", str(tmp_path / "tb")])
    assert res.exit_code == 0, res.output
    assert list((tmp_path / "tb").rglob("events.out.tfevents.*"))
