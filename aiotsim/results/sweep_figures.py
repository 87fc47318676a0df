"""Which codec on which network: a sweep's time to target accuracy and accuracy at a time budget per
codec, against its one or two swept keys (other than the codec and the seed), and the winner per cell.

Data (:func:`summarize_sweep`, testable without drawing) and figures (:func:`plot_network_sweep`):

=================================  ===================================================================
``sweep_<name>_tta_<key>``         one swept key: time to target and accuracy at the budget against
                                   the key, a line per codec; a codec that did not reach the target is
                                   an ``x`` on the "not reached" line at the top of the panel
``sweep_<name>_tta``               two keys: a heat map per codec of the time to target, one colour
                                   scale for all; ``x``: not reached; blank: not run
``sweep_<name>_budget_accuracy``   two keys: ... of the accuracy at the budget
``sweep_<name>_winner``            two keys: per cell, the codec with the shortest time to target
=================================  ===================================================================

The rules, stated in the figures too:

- **Seeds**: a cell (codec, swept values) averages its seeds. Its time to target is the mean over its
  seeds when every seed reached the target, else it is "not reached".
- **Time to target**: the simulated time of the first evaluation at or above the target (the rule of
  :func:`aiotsim.results.compare.time_to_accuracy`); target: ``plot --target``, else the runs'
  ``training.target_accuracy``.
- **Budget**: the shortest simulated time of any run of the sweep, so that every run ran at least that
  long and all are judged over the same window. A run's accuracy at the budget is that of its last
  evaluation at or before it; a run that had not evaluated yet has none (drawn as such).
- **Winner**: the shortest time to target; ties go to fewer wire bytes (up + down) until the target,
  then to the codec listed first. A cell where no codec reached the target is "not reached" (not the
  codec named ``none``).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.colors import LogNorm, Normalize, to_rgb  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from aiotsim.config import SECTIONS  # noqa: E402
from aiotsim.errors import ResultsError  # noqa: E402
from aiotsim.results.figure_files import safe_name, save_figure  # noqa: E402
from aiotsim.results.plot_inputs import CODEC_KEY, SEED_KEY, Run, SweepData  # noqa: E402

# Units by the ending of a scenario key's name (the schema's convention: uplink_mbps, latency_ms).
UNIT_SUFFIXES = (("_mbps", "Mbit/s"), ("_ms", "ms"), ("_bytes", "bytes"), ("_s", "s"))
NOT_REACHED = "not reached"
NOT_RUN_RGB = (1.0, 1.0, 1.0)  # a cell without runs: blank
NOT_REACHED_RGB = (0.85, 0.85, 0.85)  # a winner cell where no codec reached the target: light grey
PANEL_COLUMNS = 5  # heat-map panels per row (20 codecs: 4 rows)
REL_TOL = 1e-9  # float slack when comparing simulated times to the budget


@dataclass(frozen=True)
class Cell:
    """One codec at one point of the swept keys, over its seeds."""

    seeds: int
    reached: int  # seeds that reached the target
    tta_s: float | None  # mean simulated s to target over the seeds; None unless every seed reached it
    bytes_to_target: float | None  # mean wire bytes (up + down) until the target; None as tta_s
    acc_at_budget: float | None  # mean accuracy (0..1) at the budget; None when a seed had not evaluated


@dataclass(frozen=True)
class NetworkSweep:
    """What the figures show: a cell per codec and point of the swept keys (points not run are absent)."""

    name: str
    keys: tuple[str, ...]  # the swept keys other than the codec and the seed, in grid order
    values: tuple[tuple[Any, ...], ...]  # per key, its values as drawn (ascending when numeric)
    codecs: tuple[str, ...]  # in grid order (else in order of first appearance)
    target: float  # accuracy, 0..1
    budget_s: float  # simulated s
    cells: dict[tuple[str, tuple[Any, ...]], Cell]

    def cell(self, codec: str, at: tuple[Any, ...]) -> Cell | None:
        """The cell of ``codec`` at swept values ``at`` (in key order), None when not run."""
        return self.cells.get((codec, at))

    def points(self) -> list[tuple[Any, ...]]:
        """Every combination of the swept values, first key slowest."""
        out: list[tuple[Any, ...]] = [()]
        for vals in self.values:
            out = [(*p, v) for p in out for v in vals]
        return out


def swept_keys(sw: SweepData) -> list[str]:
    """The grid keys a network figure is drawn against: all but the codec and the seed."""
    return [k for k in sw.grid if k not in (CODEC_KEY, SEED_KEY)]


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _axis_values(values: Sequence[Any]) -> tuple[Any, ...]:
    """A key's grid values, each once: ascending when all are numbers, else in grid order."""
    unique = list(dict.fromkeys(values))
    return tuple(sorted(unique)) if all(_is_number(v) for v in unique) else tuple(unique)


def run_time_to_target(run: Run, target: float) -> tuple[float, float] | None:
    """Simulated s at the first evaluation with accuracy >= ``target`` and the wire bytes (up + down)
    of the iterations up to it; None when the run never reached the target."""
    for row in run.evals:
        if row["accuracy"] >= target:
            sent = sum(
                m["wire_bytes_up"] + m["wire_bytes_down"] for m in run.metrics if m["iteration"] <= row["iteration"]
            )
            return float(row["sim_time_s"]), float(sent)
    return None


def accuracy_at(run: Run, budget_s: float) -> float | None:
    """Accuracy of the run's last evaluation at or before ``budget_s`` simulated s (None: none yet)."""
    limit = budget_s * (1 + REL_TOL)
    done = [row["accuracy"] for row in run.evals if row["sim_time_s"] <= limit]
    return float(done[-1]) if done else None


def _cell(runs: list[Run], target: float, budget_s: float) -> Cell:
    hits = [h for h in (run_time_to_target(r, target) for r in runs) if h is not None]
    accs = [accuracy_at(r, budget_s) for r in runs]
    every = len(hits) == len(runs)
    return Cell(
        seeds=len(runs),
        reached=len(hits),
        tta_s=statistics.fmean(t for t, _ in hits) if every else None,
        bytes_to_target=statistics.fmean(b for _, b in hits) if every else None,
        acc_at_budget=None if None in accs else statistics.fmean(a for a in accs if a is not None),
    )


def summarize_sweep(sw: SweepData, target: float | None = None, budget_s: float | None = None) -> NetworkSweep:
    """The cells of a sweep (see the module docstring for the rules).

    Parameters
    ----------
    sw : the sweep, with at least one run.
    target : accuracy 0..1 (default: the first run's ``target_accuracy``).
    budget_s : simulated s (default: the shortest run's ``sim_time_s``).

    Raises
    ------
    ResultsError
        When the sweep has no run, or ``target`` / ``budget_s`` is out of range.
    """
    if not sw.points:
        raise ResultsError(f"{sw.dir}: sweep has no complete run yet (run `aiotsim sweep` first)")
    runs = [r for _, r in sw.points]
    goal = float(runs[0].summary["target_accuracy"]) if target is None else float(target)
    if not 0 < goal <= 1:
        raise ResultsError(f"target accuracy {goal:g}: must be in (0, 1], e.g. 0.9")
    budget = min(float(r.summary["sim_time_s"]) for r in runs) if budget_s is None else float(budget_s)
    if not budget > 0:
        raise ResultsError(f"time budget {budget:g} s: must be > 0")
    keys = tuple(swept_keys(sw))
    groups: dict[tuple[str, tuple[Any, ...]], list[Run]] = {}
    for values, run in sw.points:
        codec = str(values.get(CODEC_KEY, run.summary["compressor"]))
        groups.setdefault((codec, tuple(values[k] for k in keys)), []).append(run)
    in_grid = [str(c) for c in sw.grid.get(CODEC_KEY, [])]
    codecs = tuple(dict.fromkeys([*in_grid, *(c for c, _ in groups)]))
    return NetworkSweep(
        name=sw.name,
        keys=keys,
        values=tuple(_axis_values(sw.grid[k]) for k in keys),
        codecs=tuple(c for c in codecs if c in {g for g, _ in groups}),  # codecs with a run
        target=goal,
        budget_s=budget,
        cells={k: _cell(v, goal, budget) for k, v in groups.items()},
    )


def winners(ns: NetworkSweep) -> dict[tuple[Any, ...], str | None]:
    """Per point of the swept keys that has runs: the winning codec (see the module docstring), or
    None when no codec reached the target there."""
    out: dict[tuple[Any, ...], str | None] = {}
    for at in ns.points():
        cells = [(c, ns.cell(c, at)) for c in ns.codecs]
        ran = [(c, cell) for c, cell in cells if cell is not None]
        if not ran:
            continue
        reached = [
            (cell.tta_s, cell.bytes_to_target, i, c) for i, (c, cell) in enumerate(ran) if cell.tta_s is not None
        ]
        out[at] = min(reached)[3] if reached else None
    return out


# ---- labels and colours -----------------------------------------------------------------------------
def key_label(key: str) -> str:
    """An axis label for a scenario key: the schema's description and the unit, e.g.
    ``"uplink_mbps: node -> server link rate (Mbit/s)"``."""
    section, _, name = key.partition(".")
    cls = SECTIONS.get(section)
    fields = {f.name: f for f in dataclasses.fields(cls)} if cls is not None else {}
    desc = str(fields[name].metadata.get("help", "")).split(",")[0].strip() if name in fields else ""
    unit = next((u for suffix, u in UNIT_SUFFIXES if name.endswith(suffix)), "")
    text = f"{name or key}: {desc}" if desc else (name or key)
    return f"{text} ({unit})" if unit else text


def codec_colors(codecs: Sequence[str]) -> dict[str, tuple[float, float, float]]:
    """A colour per codec, the same in every figure of a sweep (tab20: up to 20 distinct)."""
    cmap = plt.get_cmap("tab20" if len(codecs) > 10 else "tab10")
    return {c: to_rgb(cmap(i % cmap.N)) for i, c in enumerate(codecs)}


def winner_colors(codecs: Sequence[str]) -> dict[str, tuple[float, float, float]]:
    """A colour per winning codec, none of them grey (grey is "not reached"): tab10 without its grey
    for up to 9 winners, else tab20 without its two greys (cycling past 18)."""
    cmap, greys = (plt.get_cmap("tab10"), {7}) if len(codecs) <= 9 else (plt.get_cmap("tab20"), {14, 15})
    palette = [to_rgb(cmap(i)) for i in range(cmap.N) if i not in greys]
    return {c: palette[i % len(palette)] for i, c in enumerate(codecs)}


def pct(target: float) -> str:
    """An accuracy 0..1 as a percentage without rounding it away: 0.9 -> ``"90%"``, 0.925 -> ``"92.5%"``."""
    return f"{target * 100:g}%"


def nothing_reached(target: float) -> str:
    """The words every figure uses when no compressor reached ``target``: ``"no compressor reached 90% accuracy"``."""
    return f"no compressor reached {pct(target)} accuracy"


def note_nothing_reached(ax: Any, target: float) -> None:
    """Write :func:`nothing_reached` across the middle of ``ax`` (a panel with no time to draw)."""
    ax.text(
        0.5, 0.5, nothing_reached(target), transform=ax.transAxes, ha="center", va="center", fontsize=11,
        color="dimgrey", bbox={"facecolor": "white", "edgecolor": "grey", "boxstyle": "round"},
    )  # fmt: skip


def wrap(text: str, inches: float, points: float) -> str:
    """``text`` broken into lines that fit ``inches`` in ``points``-point type (a character is about
    0.55 of the type size wide; 72 points an inch), so a long axis label does not run past its axes."""
    return textwrap.fill(text, width=max(12, int(inches * 72 / (0.55 * points))))


def _text_color(rgb: tuple[float, float, float]) -> str:
    """Black on light cells, white on dark ones (relative luminance)."""
    return "black" if 0.2126 * rgb[0] + 0.7152 * rgb[1] + 0.0722 * rgb[2] > 0.5 else "white"


def _rules(ns: NetworkSweep) -> str:
    """The rules as a figure caption."""
    return (
        f"time to target: first evaluation >= {pct(ns.target)}, mean over seeds, only when every seed reached it; "
        f"budget {ns.budget_s:.4g} s = the shortest run's simulated time (every run reached it)"
    )


# ---- one swept key ----------------------------------------------------------------------------------
def _one_key_axis(ax: Any, key: str, xs: tuple[Any, ...]) -> list[Any]:
    """Positions of ``xs`` on the x axis (categories when not numeric); log scale over >= 10x."""
    ax.set_xlabel(key_label(key))
    ax.grid(alpha=0.3)
    if all(_is_number(x) for x in xs):
        if all(x > 0 for x in xs) and max(xs) >= 10 * min(xs):
            ax.set_xscale("log")
        return list(xs)
    ax.set_xticks(range(len(xs)), [str(x) for x in xs])
    return list(range(len(xs)))


def _draw_lines(ax: Any, ns: NetworkSweep, pos: list[Any], field: str, scale: float, miss: tuple[float, float]) -> None:
    """A line per codec of ``field`` x ``scale`` against the one swept key. A cell that ran without a
    value is an ``x`` on the dotted line at ``miss[0]``; several at one x stack by ``miss[1]`` each
    (a factor on a log axis, else a step), so that every codec's mark shows."""
    colors = codec_colors(ns.codecs)
    log = ax.get_yscale() == "log"
    stacked = [0] * len(pos)
    for i, codec in enumerate(ns.codecs):
        cells = [ns.cell(codec, (x,)) for x in ns.values[0]]
        got = [None if c is None else getattr(c, field) for c in cells]
        ys = [math.nan if v is None else v * scale for v in got]
        ax.plot(pos, ys, color=colors[codec], ls="-" if i % 2 == 0 else "--", marker="o", ms=4, label=codec)
        for n, (c, v) in enumerate(zip(cells, got)):
            if c is not None and v is None:
                y = miss[0] * miss[1] ** stacked[n] if log else miss[0] + stacked[n] * miss[1]
                ax.plot(pos[n], y, ls="none", marker="x", ms=6, color=colors[codec])
                stacked[n] += 1
    ax.axhline(miss[0], color="grey", lw=0.8, ls=":")


def _plot_one_key(ns: NetworkSweep, out_dir: Path, formats: Sequence[str]) -> list[Path]:
    key = ns.keys[0]
    fig, (ax_t, ax_a) = plt.subplots(1, 2, figsize=(14, 5.2))
    pos = _one_key_axis(ax_t, key, ns.values[0])
    _one_key_axis(ax_a, key, ns.values[0])
    times = [c.tta_s for c in ns.cells.values() if c.tta_s is not None]
    if times and max(times) >= 20 * min(times):
        ax_t.set_yscale("log")
    log = ax_t.get_yscale() == "log"
    top = (max(times) * (1.5 if log else 1.1)) if times else 1.0  # the "not reached" line
    _draw_lines(ax_t, ns, pos, "tta_s", 1.0, (top, 1.08) if log else (top, 0.03 * top))
    _draw_lines(ax_a, ns, pos, "acc_at_budget", 100.0, (-4.0, -2.5))  # below 0 %: no evaluation yet
    if not times:
        note_nothing_reached(ax_t, ns.target)
    ax_a.set_yticks(range(0, 101, 20))  # no negative accuracies on the axis: the marks below 0 are no value
    ax_t.set_ylabel(f"simulated time to {pct(ns.target)} test accuracy (s)")
    ax_a.set_ylabel(f"test accuracy at the {ns.budget_s:.4g} s budget (%)")
    handles, labels = ax_t.get_legend_handles_labels()
    handles.append(Line2D([], [], ls="none", marker="x", color="grey"))
    labels.append(f"x on a dotted line: target {NOT_REACHED} (left),\nno evaluation by the budget yet (right)")
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8, title="compressor")
    fig.suptitle(f"Sweep {ns.name}: time to {pct(ns.target)} and accuracy at a budget against {key}\n{_rules(ns)}")
    fig.tight_layout()
    return save_figure(fig, out_dir, f"sweep_{safe_name(ns.name, 'sweep')}_tta_{safe_name(key)}", formats)


# ---- two swept keys ---------------------------------------------------------------------------------
def _grid(ns: NetworkSweep, codec: str, field: str) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """``field`` of ``codec``'s cells as a (values of key 2) x (values of key 1) array (NaN where
    missing), and the (column, row) of cells that ran but have no value."""
    v1, v2 = ns.values
    arr = np.full((len(v2), len(v1)), np.nan)
    empty = []
    for i, a in enumerate(v1):
        for j, b in enumerate(v2):
            cell = ns.cell(codec, (a, b))
            value = None if cell is None else getattr(cell, field)
            if value is not None:
                arr[j, i] = value
            elif cell is not None:
                empty.append((i, j))
    return arr, empty


def _tick_text(v: Any) -> str:
    return f"{v:g}" if _is_number(v) else str(v)


def _cell_ticks(ax: Any, ns: NetworkSweep, x_labels: bool = True, y_labels: bool = True, size: float = 6) -> None:
    """The swept values as tick labels (``x_labels``/``y_labels``: shown, else left blank) and thin
    white lines between cells."""
    v1, v2 = ns.values
    ax.set_xticks(range(len(v1)), [_tick_text(v) for v in v1] if x_labels else [], fontsize=size)
    ax.set_yticks(range(len(v2)), [_tick_text(v) for v in v2] if y_labels else [], fontsize=size)
    ax.set_xticks([i - 0.5 for i in range(1, len(v1))], minor=True)
    ax.set_yticks([j - 0.5 for j in range(1, len(v2))], minor=True)
    ax.grid(which="minor", color="white", lw=0.8)
    ax.tick_params(which="minor", length=0)


def nice_ticks(lo: float, hi: float, log: bool) -> list[float]:
    """Colour-bar ticks: 1, 2, 5 x 10^k within [lo, hi] on a log scale (at least the ends), else
    matplotlib's own (an empty list)."""
    if not log:
        return []
    ticks = [m * 10.0**k for k in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1) for m in (1, 2, 5)]
    inside = [t for t in ticks if lo <= t <= hi]
    return inside if len(inside) >= 2 else [lo, hi]


@dataclass(frozen=True)
class Panels:
    """What a grid of heat maps shows: a :class:`Cell` field, scaled, and how it is labelled."""

    field: str  # e.g. "tta_s"
    scale: float  # the field's unit -> the colour bar's unit
    cmap: str  # bright = good
    stem: str  # file name part: sweep_<name>_<stem>
    label: str  # colour bar
    empty: str  # what the "x" of a cell that ran without a value means


def _plot_panels(ns: NetworkSweep, spec: Panels, out_dir: Path, fmts: Sequence[str]) -> list[Path]:
    """A heat map per codec of ``spec.field``, all on one colour scale (log over >= 10x)."""
    grids = {c: _grid(ns, c, spec.field) for c in ns.codecs}
    scale = spec.scale
    values = np.concatenate([a[np.isfinite(a)] for a, _ in grids.values()] + [np.zeros(0)]) * scale
    lo, hi = (float(values.min()), float(values.max())) if values.size else (0.0, 1.0)
    log = lo > 0 and hi >= 10 * lo
    norm = LogNorm(lo, hi) if log else Normalize(lo, hi if hi > lo else lo + 1)
    cols = min(PANEL_COLUMNS, len(ns.codecs))
    rows = math.ceil(len(ns.codecs) / cols)
    title = f"Sweep {ns.name}: {spec.label} per codec; x: {spec.empty}; blank: not run\n{_rules(ns)}"
    if spec.field == "tta_s" and not values.size:  # every panel is all x: say why once, on top
        title = f"{nothing_reached(ns.target)}\n{title}"
    height = 2.3 * rows + 1.3  # inches
    fig, axes = plt.subplots(rows, cols, figsize=(2.5 * cols + 1.5, height), squeeze=False)
    # room above the panels' titles for the title's lines (9 pt type: about 0.17 in a line)
    fig.subplots_adjust(top=1 - (0.17 * (title.count("\n") + 1) + 0.3) / height)
    image = None
    for n, (ax, codec) in enumerate(zip(axes.flat, ns.codecs)):
        arr, empty = grids[codec]
        image = ax.imshow(arr * scale, origin="lower", aspect="auto", cmap=spec.cmap, norm=norm)
        for i, j in empty:
            ax.text(i, j, "x", ha="center", va="center", fontsize=7, color="dimgrey")
        ax.set_title(codec, fontsize=9)
        _cell_ticks(ax, ns, x_labels=n + cols >= len(ns.codecs), y_labels=n % cols == 0)  # outer panels only
    for ax in axes.flat[len(ns.codecs) :]:
        ax.set_visible(False)
    fig.supxlabel(key_label(ns.keys[0]), fontsize=9)
    fig.supylabel(wrap(key_label(ns.keys[1]), 0.8 * height, 9), fontsize=9)
    if values.size:  # without any value a colour scale would be made up: none
        bar = fig.colorbar(image, ax=axes, shrink=0.8, label=spec.label)
        if ticks := nice_ticks(lo, hi, log):
            bar.set_ticks(ticks, labels=[f"{t:g}" for t in ticks])
            bar.minorticks_off()  # a log colour bar labels its minor ticks too (4 x 10^1 beside 50)
    fig.suptitle(title, fontsize=9)
    return save_figure(fig, out_dir, f"sweep_{safe_name(ns.name, 'sweep')}_{spec.stem}", fmts)


def _plot_winner(ns: NetworkSweep, out_dir: Path, formats: Sequence[str]) -> list[Path]:
    v1, v2 = ns.values
    won = winners(ns)
    shown = [c for c in ns.codecs if c in won.values()]
    colors = winner_colors(shown)
    rgb = np.ones((len(v2), len(v1), 3))
    height = 0.75 * len(v2) + 2  # inches
    fig, ax = plt.subplots(figsize=(1.2 * len(v1) + 3.5, height))
    for i, a in enumerate(v1):
        for j, b in enumerate(v2):
            if (a, b) not in won:
                rgb[j, i] = NOT_RUN_RGB
                continue
            codec = won[(a, b)]
            rgb[j, i] = NOT_REACHED_RGB if codec is None else colors[codec]
            cell = None if codec is None else ns.cell(codec, (a, b))
            text = NOT_REACHED if cell is None else f"{codec}\n{cell.tta_s:.3g} s"
            ax.text(i, j, text, ha="center", va="center", fontsize=7, color=_text_color(tuple(rgb[j, i])))
    ax.imshow(rgb, origin="lower", aspect="auto")
    _cell_ticks(ax, ns, size=8)
    ax.set_xlabel(key_label(ns.keys[0]))
    ax.set_ylabel(wrap(key_label(ns.keys[1]), 0.6 * height, 10))
    handles = [Patch(color=colors[c], label=c) for c in shown]
    if None in won.values():
        handles.append(
            Patch(facecolor=NOT_REACHED_RGB, edgecolor="grey", label=f"{NOT_REACHED}: {nothing_reached(ns.target)}")
        )
    if len(won) < len(ns.points()):
        handles.append(Patch(facecolor=NOT_RUN_RGB, edgecolor="grey", label="blank: not run"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, title="fastest codec")
    ax.set_title(
        f"Sweep {ns.name}: the codec with the shortest simulated time to {pct(ns.target)} accuracy per cell\n"
        f"(ties: fewer wire bytes to target; of {len(ns.codecs)} codecs; time to target: first evaluation, "
        "mean over seeds when all reached it)",
        fontsize=9,
    )
    return save_figure(fig, out_dir, f"sweep_{safe_name(ns.name, 'sweep')}_winner", formats)


def plot_network_sweep(sw: SweepData, out_dir: Path, formats: Sequence[str], target: float | None = None) -> list[Path]:
    """The figures of the module docstring for a sweep over one or two keys besides the codec and the
    seed; nothing for other sweeps (their ``sweep_<name>_<key>`` figures show them)."""
    if len(swept_keys(sw)) not in (1, 2):
        return []
    ns = summarize_sweep(sw, target)
    if len(ns.keys) == 1:
        return _plot_one_key(ns, out_dir, formats)
    tta = Panels("tta_s", 1.0, "viridis_r", "tta", f"simulated s to {pct(ns.target)} test accuracy", NOT_REACHED)
    acc_label = f"test accuracy at the {ns.budget_s:.4g} s budget (%)"
    acc = Panels("acc_at_budget", 100.0, "viridis", "budget_accuracy", acc_label, "no evaluation yet")
    written = _plot_panels(ns, tta, out_dir, formats) + _plot_panels(ns, acc, out_dir, formats)
    return written + _plot_winner(ns, out_dir, formats)


__all__ = [
    "Cell",
    "NetworkSweep",
    "swept_keys",
    "summarize_sweep",
    "winners",
    "run_time_to_target",
    "accuracy_at",
    "key_label",
    "codec_colors",
    "plot_network_sweep",
    "NOT_REACHED",
    "pct",
    "nothing_reached",
    "note_nothing_reached",
]
