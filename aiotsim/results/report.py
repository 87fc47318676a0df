"""``aiotsim report``: one self-contained HTML file for a run, a comparison or a sweep directory.

The file holds, in this order: the table (a run's summary, a comparison's rows, a sweep's index),
every figure ``aiotsim plot`` draws for the directory, inline as SVG (text kept as text, so it can be
searched and copied), the resolved scenario (``scenario.toml``; for a sweep, its definition too), the
versions that made the runs and the report, and the command that reproduces the results. It loads
nothing from the network: no script, no external style sheet, no font, no image file.

Figures are rendered into a temporary directory with :func:`aiotsim.results.plots.plot_all`, then
inlined; each figure's SVG ids get a prefix of their own, so that the ids of two figures never
collide in one document.
"""

from __future__ import annotations

import csv
import html
import importlib.metadata
import platform
import re
import shlex
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import matplotlib

from aiotsim._version import __version__
from aiotsim.errors import ResultsError
from aiotsim.results.compare import compare_runs, display_columns, is_comparison_dir
from aiotsim.results.plot_inputs import Run, collect
from aiotsim.results.store import Warn, make_dir, read_text, write_file
from aiotsim.results.store import warn as store_warn
from aiotsim.results.sweep import is_sweep_dir, read_manifest
from aiotsim.results.sweep_figures import pct

REPORT_NAME = "report.html"  # written inside the directory unless -o says otherwise
MAX_SCENARIOS = 20  # distinct resolved scenarios shown in full; more are counted, not shown

# Summary fields of a run's table: (key, label, how to show the value)
RUN_ROWS: tuple[tuple[str, str, str], ...] = (
    ("status", "status", "s"),
    ("scenario", "scenario", "s"),
    ("compressor", "compressor", "s"),
    ("mode", "training mode", "s"),
    ("iterations", "iterations", "s"),
    ("nodes", "nodes", "s"),
    ("seed", "seed", "s"),
    ("sim_time_s", "simulated time (s)", ".2f"),
    ("throughput_samples_per_s", "throughput (samples / simulated s)", ".2f"),
    ("bytes_up", "payload bytes up", "bytes"),
    ("bytes_down", "payload bytes down", "bytes"),
    ("wire_bytes_up", "wire bytes up", "bytes"),
    ("wire_bytes_down", "wire bytes down", "bytes"),
    ("compression_ratio", "compression ratio (uplink)", ".1f"),
    ("compute_share", "compute share of simulated time", ".0%"),
    ("comm_share", "communication share of simulated time", ".0%"),
    ("final_accuracy", "final test accuracy", ".2%"),
    ("time_to_accuracy_s", "simulated s to the target accuracy", ".2f"),
    ("target_accuracy", "target accuracy", ".0%"),
    ("energy_j", "energy, all nodes (J)", ".3g"),
    ("wall_time_s", "wall time (s)", ".1f"),
    ("device", "device", "s"),
)

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; padding: 0 1em; color: #222; }
table { border-collapse: collapse; font-size: 0.9em; margin: 0.5em 0 1em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
th { background: #f2f2f2; }
figure { margin: 1.5em 0; }
figure svg { max-width: 100%; height: auto; }
figcaption { font-size: 0.85em; color: #555; }
pre { background: #f7f7f7; border: 1px solid #ddd; padding: 0.8em; overflow-x: auto; font-size: 0.85em; }
.note { color: #555; font-size: 0.9em; }
"""


@dataclass
class Table:
    """A table of the report: a caption, headers and cells (text), and notes below it."""

    caption: str
    headers: list[str]
    rows: list[list[str]]
    notes: list[str] = field(default_factory=list)


@dataclass
class Report:
    """What a report shows, gathered before any HTML is written (testable on its own)."""

    kind: str  # "run", "comparison", "sweep" or "runs" (a directory holding run directories)
    title: str
    table: Table
    scenarios: list[tuple[str, str]]  # (heading, TOML text)
    versions: list[tuple[str, str]]
    commands: list[str]
    figures: list[tuple[str, str]] = field(default_factory=list)  # (name, SVG text)
    warnings: list[str] = field(default_factory=list)


# ---- what is in the directory -----------------------------------------------------------------------
def detect_kind(path: Path) -> str:
    """``"sweep"``, ``"comparison"``, ``"run"`` or ``"runs"`` (any other directory: its run directories).

    Raises
    ------
    ResultsError
        When ``path`` is not a directory.
    """
    if not path.is_dir():
        hint = " (a scenario file: run it first, then report on its run directory)" if path.suffix == ".toml" else ""
        raise ResultsError(f"{path}: no such directory{hint}")
    if is_sweep_dir(path):
        return "sweep"
    if is_comparison_dir(path):
        return "comparison"
    return "run" if (path / "summary.json").is_file() else "runs"


def _cell(value: Any, spec: str) -> str:
    """A summary value as table text: ``-`` for none; ``bytes``: decimal units; else a format spec."""
    from aiotsim.results.compare import fmt_bytes

    if value is None:
        return "-"
    if spec == "bytes":
        return fmt_bytes(float(value))
    if spec == "s" or isinstance(value, (str, bool)):
        return str(value)
    return format(value, spec)


def run_table(run: Run) -> Table:
    """A run's summary as a two-column table."""
    s = run.summary
    rows = [[label, _cell(s.get(key), spec)] for key, label, spec in RUN_ROWS if key in s]
    return Table(f"{s.get('scenario')} / {s.get('compressor')}", ["metric", "value"], rows)


def comparison_table(runs: list[Run], warn: Warn) -> Table:
    """A comparison's rows (the ``compare`` table: same columns, same formatting)."""
    c = compare_runs([r.dir for r in runs], warn=warn)
    headers, cells = display_columns(c)
    note = (
        f"Speed-up: throughput relative to {c.baseline}. Final accuracy: mean ± standard deviation over seeds. "
        f"Time to {pct(c.target_accuracy)}: simulated seconds to the first evaluation at or above it."
    )
    return Table(f"{len(c.rows)} rows, {len(c.run_dirs)} runs", headers, cells, [note])


def sweep_table(sweep_dir: Path) -> Table:
    """A sweep's index (``sweep.csv``, written by ``aiotsim sweep``): a row per grid point; numbers
    shown to 4 significant digits."""
    path = sweep_dir / "sweep.csv"
    if not path.is_file():
        raise ResultsError(f"{sweep_dir}: no sweep.csv (run `aiotsim sweep` on it to write the index)")
    rows = list(csv.reader(read_text(path).splitlines()))
    if not rows:
        raise ResultsError(f"{path}: empty (rerun `aiotsim sweep` to rewrite the index)")
    body = [[_short_number(v) for v in row] for row in rows[1:]]
    return Table(f"{len(body)} grid points", rows[0], body)


def _short_number(text: str) -> str:
    """``"0.239554317"`` -> ``"0.2396"``; integers and words unchanged."""
    try:
        value = float(text)
    except ValueError:
        return text
    return text if re.fullmatch(r"-?\d+", text) else f"{value:.4g}"


def _scenarios(labelled: list[tuple[str, Run]]) -> list[tuple[str, str]]:
    """Each distinct resolved scenario, headed by the labels of the runs that used it; past
    :data:`MAX_SCENARIOS`, a last entry says how many more there are and where they are."""
    by_text: dict[str, list[str]] = {}
    for label, r in labelled:
        try:
            text = read_text(r.dir / "scenario.toml")
        except ResultsError:
            text = "# scenario.toml missing or unreadable"
        by_text.setdefault(text, []).append(label)
    shown = [(", ".join(dict.fromkeys(names)), text) for text, names in list(by_text.items())[:MAX_SCENARIOS]]
    if len(by_text) > MAX_SCENARIOS:
        more = len(by_text) - MAX_SCENARIOS
        shown.append((f"{more} more", f"# {more} more resolved scenarios: each run directory's scenario.toml\n"))
    return shown


def _point_label(values: dict[str, Any]) -> str:
    """``"uplink_mbps=10 name=2bit"``: a sweep point by its values (the key part after the section)."""
    return " ".join(f"{k.partition('.')[2] or k}={v}" for k, v in values.items())


def versions(runs: Sequence[Run]) -> list[tuple[str, str]]:
    """The versions that made the runs (from their summaries) and those making the report."""

    def made(key: str) -> str:
        return ", ".join(sorted({str(r.summary.get(key)) for r in runs if r.summary.get(key) is not None})) or "-"

    try:
        torch = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        torch = "not installed"
    return [
        ("aiotsim (runs)", made("aiotsim_version")),
        ("torch (runs)", made("torch_version")),
        ("device (runs)", made("device")),
        ("aiotsim (report)", __version__),
        ("torch (report)", torch),
        ("matplotlib (report)", matplotlib.__version__),
        ("python (report)", platform.python_version()),
        ("platform (report)", platform.platform()),
        ("written", datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")),
    ]


def reproduce_commands(kind: str, path: Path, runs: list[Run], manifest: dict[str, Any] | None = None) -> list[str]:
    """Shell commands that rerun what ``path`` holds (each run's ``scenario.toml`` is its resolved
    scenario: ``aiotsim run`` on it reruns that run exactly)."""
    q = shlex.quote
    if kind == "run":
        return [f"aiotsim run {q(str(path / 'scenario.toml'))} -o {q(str(path))}-rerun"]
    if kind == "sweep" and manifest is not None:
        return [f"aiotsim sweep {q(str(manifest.get('sweep_file', 'SWEEP.toml')))} -o {q(str(path))}"]
    if kind == "runs" and len({r.summary.get("scenario") for r in runs}) > 1:  # not one comparison
        lines = [f"aiotsim run {q(str(r.dir / 'scenario.toml'))} -o {q(str(r.dir))}-rerun" for r in runs]
        return lines[:MAX_SCENARIOS] + [f"# and {len(lines) - MAX_SCENARIOS} more runs"] * (len(lines) > MAX_SCENARIOS)
    first = runs[0]  # in the comparison's order: the first codec's first seed, the seed --seeds counts from
    codecs = ",".join(dict.fromkeys(str(r.summary["compressor"]) for r in runs))
    modes = list(dict.fromkeys(str(r.summary.get("mode")) for r in runs))
    seeds = max(sum(1 for r in runs if r.group == g) for g in {r.group for r in runs})
    cmd = f"aiotsim compare {q(str(first.dir / 'scenario.toml'))} -c {q(codecs)} --seeds {seeds}"
    cmd += f" --modes {q(','.join(modes))}" if len(modes) > 1 else ""
    return [
        f"{cmd} -o {q(str(path))}-rerun",
        "# or one run exactly, from its resolved scenario: aiotsim run RUN_DIR/scenario.toml -o NEW_DIR",
    ]


# ---- figures ----------------------------------------------------------------------------------------
# What each figure shows (see aiotsim.results.plots), by its file name
CAPTIONS = {
    "throughput": "Training throughput per compressor: samples per simulated second (mean over seeds, error bar: std).",
    "wire_bytes": "Bytes on the wire per compressor, uplink and downlink (payload + packet headers, whole run).",
    "convergence_time": "Test accuracy and training loss against simulated time.",
    "convergence_iterations": "Test accuracy and training loss against iterations.",
    "convergence_bytes": "Test accuracy and training loss against cumulative bytes on the wire (up + down).",
    "time_to_accuracy": "Simulated seconds to the target accuracy per compressor (mean over the seeds reaching it).",
    "modes_accuracy": "Test accuracy by training mode, against simulated time and against bytes on the wire.",
}


def caption(stem: str) -> str:
    """What the figure in file ``stem`` shows, and its name."""
    if stem in CAPTIONS:
        text = CAPTIONS[stem]
    elif stem.startswith("timeline_"):
        text = f"Timeline of the first iterations of a run of {stem[len('timeline_') :]}: a row per node and link."
    elif stem.endswith("_winner"):
        text = "The compressor with the shortest simulated time to the target, per point of the two swept keys."
    elif stem.endswith("_budget_accuracy"):
        text = "Test accuracy at the time budget per compressor, over the two swept keys."
    elif stem.endswith("_tta") or "_tta_" in stem:
        text = "Time to the target accuracy (and accuracy at the time budget) per compressor, over the swept keys."
    else:
        text = "Throughput, wire bytes up, final accuracy and time to target against a swept key."
    return f"{text} ({stem})"


_XML_HEAD = re.compile(r"^\s*<\?xml[^>]*\?>\s*(<!DOCTYPE[^>]*>\s*)?", re.S)


def inline_svg(svg: str, prefix: str) -> str:
    """An SVG file's text, ready to sit inside HTML: no XML declaration or doctype, and every id (and
    every ``#id`` reference to it) prefixed with ``prefix`` so that figures do not share ids."""
    body = _XML_HEAD.sub("", svg)
    ids = set(re.findall(r'\bid="([^"]+)"', body))
    if not ids:
        return body

    def swap(m: re.Match[str]) -> str:
        name = m.group(2)
        return f"{m.group(1)}{prefix}{name}" if name in ids else m.group(0)

    body = re.sub(r'(\bid=")([^"]+)', swap, body)
    return re.sub(r'((?:href="|url\()#)([^")]+)', swap, body)  # xlink:href="#x", url(#x)


def render_figures(path: Path, warn: Warn) -> list[tuple[str, str]]:
    """Every figure ``aiotsim plot`` draws for ``path``, as (name, inline SVG text), in drawing order."""
    from aiotsim.results.plots import plot_all

    with tempfile.TemporaryDirectory(prefix="aiotsim-report-") as tmp, matplotlib.rc_context({"svg.fonttype": "none"}):
        written = plot_all([path], tmp, formats=("svg",), warn=warn)
        return [(p.stem, inline_svg(p.read_text(encoding="utf-8"), f"f{i}-")) for i, p in enumerate(written)]


# ---- gathering and writing --------------------------------------------------------------------------
def gather(path: str | Path, figures: bool = True, warn: Warn | None = None) -> Report:
    """What the report of ``path`` shows (see the module docstring).

    Raises
    ------
    ResultsError
        When ``path`` is not a directory or holds no complete run (the message says which).
    """
    d = Path(path)
    kind = detect_kind(d)
    notes: list[str] = []

    def note(line: str) -> None:
        notes.append(line)
        (warn or store_warn)(line)

    runs, sweeps = collect([d], note)
    manifest = read_manifest(d) if kind == "sweep" else None
    all_runs = runs + [r for sw in sweeps for _, r in sw.points]
    if kind == "sweep":
        table = sweep_table(d)
    elif kind == "run":
        table = run_table(all_runs[0])
    else:
        table = comparison_table(all_runs, note)
    labelled = [(r.group or str(r.summary.get("compressor")), r) for r in runs]
    labelled += [(_point_label(values), r) for sw in sweeps for values, r in sw.points]
    scenarios = _scenarios(labelled)
    if manifest is not None:
        scenarios.insert(0, ("the sweep: its grid and fixed settings", _sweep_definition(manifest)))
    name = manifest["name"] if manifest is not None else d.resolve().name
    return Report(
        kind=kind,
        title=f"aiotsim {kind}: {name}",
        table=table,
        scenarios=scenarios,
        versions=versions(all_runs),
        commands=reproduce_commands(kind, d, all_runs, manifest),
        figures=render_figures(d, note) if figures else [],
        warnings=notes,
    )


def _sweep_definition(manifest: dict[str, Any]) -> str:
    """A sweep's base, fixed settings and grid as TOML (the form of a sweep file)."""
    import tomli_w

    data = {"sweep": {"name": manifest["name"], "base": str(manifest.get("base", ""))}}
    if manifest.get("set"):
        data["set"] = manifest["set"]
    data["grid"] = manifest["grid"]
    return tomli_w.dumps(data)


def to_html(rep: Report) -> str:
    """The report as one HTML document (no external resource)."""
    e = html.escape
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{e(rep.title)}</title><style>{STYLE}</style></head><body>",
        f"<h1>{e(rep.title)}</h1>",
    ]
    if rep.warnings:
        parts.append('<p class="note">' + "<br>".join(e(w) for w in rep.warnings) + "</p>")
    parts += [f"<h2>Results</h2>{_table_html(rep.table)}", "<h2>Figures</h2>"]
    if not rep.figures:
        parts.append('<p class="note">no figure</p>')
    for name, svg in rep.figures:
        parts.append(f'<figure id="fig-{e(name)}">{svg}<figcaption>{e(caption(name))}</figcaption></figure>')
    parts.append("<h2>Reproduce</h2><pre>" + e("\n".join(rep.commands)) + "</pre>")
    parts.append("<h2>Resolved scenario</h2>")
    for i, (heading, text) in enumerate(rep.scenarios):
        parts.append(
            f"<details{' open' if i == 0 else ''}><summary>{e(heading)}</summary><pre>{e(text)}</pre></details>"
        )
    rows = "".join(f"<tr><th>{e(k)}</th><td>{e(v)}</td></tr>" for k, v in rep.versions)
    parts.append(f"<h2>Versions</h2><table>{rows}</table>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _table_html(t: Table) -> str:
    """A :class:`Table` as HTML; cells that start like a number (all but the first column) align right."""
    e = html.escape
    head = "".join(f"<th>{e(h)}</th>" for h in t.headers)
    body = "".join(
        "<tr>" + "".join(f"<td{_num_class(c) if i else ''}>{e(c)}</td>" for i, c in enumerate(row)) + "</tr>"
        for row in t.rows
    )
    notes = "".join(f'<p class="note">{e(n)}</p>' for n in t.notes)
    return f"<table><caption>{e(t.caption)}</caption><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{notes}"


def _num_class(text: str) -> str:
    return ' class="num"' if re.match(r"^-?[\d.]", text) else ""


def write_report(path: str | Path, out: str | Path | None = None, warn: Warn | None = None) -> Path:
    """Write the report of ``path`` to ``out`` (default ``PATH/report.html``); returns the file.

    Raises
    ------
    ResultsError
        As :func:`gather`, or when the file cannot be written (the message names it).
    """
    target = Path(out) if out is not None else Path(path) / REPORT_NAME
    text = to_html(gather(path, warn=warn))
    if target.is_dir():
        raise ResultsError(f"-o {target}: a directory; give a file name, e.g. {target / REPORT_NAME}")
    make_dir(target.parent)
    write_file(target, text)
    return target


__all__ = ["Report", "Table", "gather", "to_html", "write_report", "inline_svg", "detect_kind", "REPORT_NAME"]
