"""The README's codec table and figures/ are never older than the code and scenarios that make them
(issue 42): ``docs/generated.json`` records, per generator of ``make docs``, a digest of the
aiotsim sources and the scenarios it ran, and this test fails when they have changed since."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from conftest import ROOT

from aiotsim.results import provenance


def test_readme_table_and_figures_were_made_by_this_code() -> None:
    stale = provenance.stale(ROOT)
    assert not stale, (
        "made from other aiotsim sources or scenarios than these: "
        + "; ".join(stale)
        + ". Run `make docs` (about 35 minutes on 2 cores) and commit README.md, figures/ and docs/generated.json"
    )
    recorded = set(json.loads((ROOT / provenance.RECORD).read_text()))
    assert recorded == {"readme", "figures", "figures-network"}  # every generator of make docs


def _tree(tmp_path: Path) -> Path:
    """A miniature checkout: two package sources and a scenario."""
    (tmp_path / "aiotsim" / "sub").mkdir(parents=True)
    (tmp_path / "aiotsim" / "a.py").write_text("x = 1\n")
    (tmp_path / "aiotsim" / "sub" / "b.py").write_text("y = 2\n")
    (tmp_path / "scenarios").mkdir()
    (tmp_path / "scenarios" / "s.toml").write_text("[scenario]\nseed = 1\n")
    (tmp_path / "docs").mkdir()
    return tmp_path


def test_a_change_of_code_or_scenario_makes_the_record_stale(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    provenance.record(root, "readme", ["scenarios/s.toml"], "make readme")
    assert provenance.stale(root) == []
    (root / "aiotsim" / "sub" / "b.py").write_text("y = 3\n")  # a source deep in the package
    assert provenance.stale(root) == ["readme (make readme)"]
    provenance.record(root, "readme", ["scenarios/s.toml"], "make readme")
    (root / "scenarios" / "s.toml").write_text("[scenario]\nseed = 2\n")  # the scenario it ran
    assert provenance.stale(root) == ["readme (make readme)"]


def test_the_digest_is_of_contents_and_names_only(tmp_path: Path) -> None:
    root = _tree(tmp_path / "one")
    other = tmp_path / "two"
    shutil.copytree(root, other)  # another checkout of the same files: the same digest
    assert provenance.inputs_digest(root, ["scenarios/s.toml"]) == provenance.inputs_digest(other, ["scenarios/s.toml"])
    (other / "aiotsim" / "a.py").rename(other / "aiotsim" / "c.py")  # same bytes under another name
    assert provenance.inputs_digest(root, ["scenarios/s.toml"]) != provenance.inputs_digest(other, ["scenarios/s.toml"])
    (other / "docs" / "notes.md").write_text("prose is not an input\n")
    (other / "aiotsim" / "c.py").rename(other / "aiotsim" / "a.py")
    assert provenance.inputs_digest(root, ["scenarios/s.toml"]) == provenance.inputs_digest(other, ["scenarios/s.toml"])


def test_nothing_recorded_is_stale(tmp_path: Path) -> None:
    assert provenance.stale(_tree(tmp_path)) == ["nothing recorded: docs/generated.json is missing"]


def test_a_figure_saved_twice_has_the_same_bytes(tmp_path: Path) -> None:
    """No creation date and no random SVG ids: regenerating figures/ changes only what changed."""
    import matplotlib.pyplot as plt

    from aiotsim.results.figure_files import save_figure

    files = []
    for i in range(2):
        fig, ax = plt.subplots()
        ax.plot([1, 3, 2], label="x")
        ax.legend()
        files.append(save_figure(fig, tmp_path, f"f{i}", ["png", "svg", "pdf"]))
    for a, b in zip(*files):
        assert a.read_bytes() == b.read_bytes(), a.suffix
