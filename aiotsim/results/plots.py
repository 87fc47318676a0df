"""Figures from run directories: what a comparison or a sweep looks like, read from files alone.

Inputs are run, comparison and sweep directories (see :mod:`aiotsim.results.plot_inputs`: a
comparison directory's ``comparison.json`` says which runs are drawn). Runs are grouped by
compressor (prefixed by the scenario name when several scenarios are mixed); runs of one group are
seeds. From the runs, in every requested format (PNG and SVG by default):

============================  ==================================================================
``throughput``                samples/s per compressor (mean over seeds, error bar = std)
``wire_bytes``                bytes on the wire, up and down, per compressor (MB = 1e6 bytes)
``convergence_time``          test accuracy and training loss against simulated time
``convergence_iterations``    ... against iterations
``convergence_bytes``         ... against cumulative bytes on the wire (up + down)
``time_to_accuracy``          simulated seconds to the target accuracy per compressor
``timeline_<group>``          Gantt chart of the first iterations of the group's first run, a row
                              per node and per link (compute, encode, upload, aggregate, download),
                              read from ``trace.json``
``sweep_<name>_<key>``        per sweep and swept key (other than the codec and the seed):
                              throughput, wire bytes up, final accuracy and time-to-accuracy against
                              the key, one line per compressor (mean over seeds)
``sweep_<name>_tta...``       a sweep over one or two keys besides the codec and the seed: time to
``sweep_<name>_winner``       target and accuracy at a time budget per codec, and which codec wins
                              where (see :mod:`aiotsim.results.sweep_figures`)
============================  ==================================================================

A sweep whose grid varies only the codec (and seeds) is drawn as a comparison instead.
Matplotlib runs with the Agg backend (no display needed).
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from aiotsim.errors import ResultsError  # noqa: E402
from aiotsim.results.compare import time_to_accuracy  # noqa: E402
from aiotsim.results.figure_files import safe_name, save_figure  # noqa: E402
from aiotsim.results.plot_inputs import (  # noqa: E402
    CODEC_KEY,
    SEED_KEY,
    Run,
    SweepData,
    assign_groups,
    collect,
    find_run_dirs,
    load_run,
)
from aiotsim.results.store import Warn, make_dir, read_json  # noqa: E402
from aiotsim.results.store import warn as store_warn  # noqa: E402
from aiotsim.results.sweep_figures import NOT_REACHED, note_nothing_reached, pct, plot_network_sweep  # noqa: E402
from aiotsim.sim.trace import NODE_VERTEX, spread  # noqa: E402

MB = 1e6  # bytes per MB (decimal, as network rates are)
PHASE_COLORS = {
    "compute": "#4C72B0",
    "encode": "#DD8452",
    "upload": "#55A868",
    "aggregate": "#C44E52",
    "download": "#8172B3",
    "decode": "#937860",
}
TIMELINE_ITERATIONS = 3  # iterations shown in a timeline
# rows in a timeline (a node's compute and each of its links is a row): a larger fleet shows the
# rows of nodes spread evenly over it, as many as fit
TIMELINE_MAX_ROWS = 60


def _groups(runs: list[Run]) -> dict[str, list[Run]]:
    out: dict[str, list[Run]] = {}
    for r in runs:
        out.setdefault(r.group, []).append(r)
    return out


def _mean_std(values: list[float]) -> tuple[float, float]:
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def _title_suffix(runs: list[Run]) -> str:
    """``"iot10: 10 nodes, 30 iterations"`` from every run drawn (``"30-60 iterations"`` when they differ)."""

    def span(key: str) -> str:
        values = {r.summary.get(key) for r in runs}
        numbers = sorted(v for v in values if _is_number(v))
        if len(values) == 1 or len(numbers) != len(values):
            return ", ".join(sorted(str(v) for v in values))
        return f"{numbers[0]}-{numbers[-1]}"

    return f"{span('scenario')}: {span('nodes')} nodes, {span('iterations')} iterations"


# ---- run figures -------------------------------------------------------------------------------------
def plot_throughput(runs: list[Run], out_dir: Path, formats: Sequence[str]) -> list[Path]:
    """Bars: training throughput (samples/s of simulated time) per compressor."""
    groups = _groups(runs)
    names = list(groups)
    stats = [_mean_std([r.summary["throughput_samples_per_s"] or 0.0 for r in groups[n]]) for n in names]
    fig, ax = plt.subplots(figsize=(max(5, 0.8 * len(names) + 2), 4))
    bars = ax.bar(
        names, [m for m, _ in stats], yerr=[s for _, s in stats], capsize=3, color="#4C72B0", label="mean over seeds"
    )
    ax.bar_label(bars, fmt="%.1f", fontsize=8)
    ax.set_ylabel("throughput (samples / simulated s)")
    ax.set_xlabel("compressor")
    ax.set_title(f"Training throughput per compressor\n{_title_suffix(runs)}")
    ax.legend()
    ax.tick_params(axis="x", rotation=30)
    return save_figure(fig, out_dir, "throughput", formats)


def plot_wire_bytes(runs: list[Run], out_dir: Path, formats: Sequence[str]) -> list[Path]:
    """Grouped bars: bytes on the wire (payload + headers), uplink and downlink, per compressor."""
    groups = _groups(runs)
    names = list(groups)
    up = [statistics.fmean(r.summary["wire_bytes_up"] for r in groups[n]) / MB for n in names]
    down = [statistics.fmean(r.summary["wire_bytes_down"] for r in groups[n]) / MB for n in names]
    x = range(len(names))
    w = 0.4
    fig, ax = plt.subplots(figsize=(max(5, 0.9 * len(names) + 2), 4))
    b1 = ax.bar([i - w / 2 for i in x], up, w, label="uplink (nodes -> server)", color="#55A868")
    b2 = ax.bar([i + w / 2 for i in x], down, w, label="downlink (server -> nodes)", color="#8172B3")
    ax.bar_label(b1, fmt="%.3g", fontsize=7)
    ax.bar_label(b2, fmt="%.3g", fontsize=7)
    pos = [v for v in up + down if v > 0]
    if pos and max(pos) > 30 * min(pos):  # codecs spanning decades: log axis
        ax.set_yscale("log")
    ax.set_xticks(list(x), names, rotation=30)
    ax.set_ylabel("bytes on the wire, whole run (MB)" + (", log scale" if ax.get_yscale() == "log" else ""))
    ax.set_xlabel("compressor")
    ax.set_title(f"Bytes on the wire per compressor (payload + packet headers)\n{_title_suffix(runs)}")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    return save_figure(fig, out_dir, "wire_bytes", formats)


def _cumulative_wire_mb(run: Run) -> dict[int, float]:
    """Iteration -> cumulative wire bytes (up + down) at its end, in MB."""
    total, out = 0.0, {}
    for row in run.metrics:
        total += row["wire_bytes_up"] + row["wire_bytes_down"]
        out[int(row["iteration"])] = total / MB
    return out


def plot_convergence(runs: list[Run], out_dir: Path, formats: Sequence[str], x: str) -> list[Path]:
    """Test accuracy (evals.csv) and training loss (metrics.csv) against ``x``.

    ``x`` is ``"time"`` (simulated s), ``"iterations"`` or ``"bytes"`` (cumulative wire MB).
    """
    xlabel = {"time": "simulated time (s)", "iterations": "iteration", "bytes": "bytes on the wire, up + down (MB)"}[x]
    fig, (ax_acc, ax_loss) = plt.subplots(1, 2, figsize=(11, 4.2))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for gi, (name, members) in enumerate(_groups(runs).items()):
        color = colors[gi % len(colors)]
        for ri, r in enumerate(members):
            cum = _cumulative_wire_mb(r)

            def xs(rows: list[dict[str, float]]) -> list[float]:
                if x == "time":
                    return [row["sim_time_s"] for row in rows]
                if x == "iterations":
                    return [row["iteration"] + 1 for row in rows]  # iterations done
                return [cum.get(int(row["iteration"]), float("nan")) for row in rows]

            label = name if ri == 0 else None
            ax_acc.plot(
                xs(r.evals),
                [row["accuracy"] * 100 for row in r.evals],
                marker="o",
                ms=3,
                color=color,
                label=label,
                alpha=0.9,
            )
            ax_loss.plot(xs(r.metrics), [row["loss"] for row in r.metrics], color=color, label=label, alpha=0.8, lw=1)
    ax_acc.set_ylabel("test accuracy (%)")
    ax_loss.set_ylabel("training loss (cross-entropy)")
    for ax in (ax_acc, ax_loss):
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
    if x == "bytes":
        ax_acc.set_xscale("log")
        ax_loss.set_xscale("log")
    ax_acc.legend(title="compressor", fontsize=8)
    what = {"time": "simulated time", "iterations": "iterations", "bytes": "bytes on the wire"}[x]
    fig.suptitle(f"Convergence against {what}: {_title_suffix(runs)}")
    fig.tight_layout()
    return save_figure(fig, out_dir, f"convergence_{x}", formats)


def plot_modes(runs: list[Run], out_dir: Path, formats: Sequence[str]) -> list[Path]:
    """One figure for runs of several training modes: test accuracy against simulated time and
    against bytes on the wire (up + down), one line per ``mode/codec``."""
    assign_groups(runs)
    fig, (ax_t, ax_b) = plt.subplots(1, 2, figsize=(11, 4.2))
    styles = {m: ls for m, ls in zip(dict.fromkeys(r.summary.get("mode") for r in runs), ("-", "--", ":", "-."))}
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    codecs = list(dict.fromkeys(str(r.summary["compressor"]) for r in runs))
    for name, members in _groups(runs).items():
        for ri, r in enumerate(members):
            cum = _cumulative_wire_mb(r)
            acc = [row["accuracy"] * 100 for row in r.evals]
            kw = {"color": colors[codecs.index(str(r.summary["compressor"])) % len(colors)], "marker": "o", "ms": 3,
                  "ls": styles.get(r.summary.get("mode"), "-"), "label": name if ri == 0 else None}  # fmt: skip
            ax_t.plot([row["sim_time_s"] for row in r.evals], acc, **kw)
            ax_b.plot([cum.get(int(row["iteration"]), float("nan")) for row in r.evals], acc, **kw)
    ax_t.set_xlabel("simulated time (s)")
    ax_b.set_xlabel("bytes on the wire, up + down (MB)")
    ax_b.set_xscale("log")
    for ax in (ax_t, ax_b):
        ax.set_ylabel("test accuracy (%)")
        ax.grid(alpha=0.3)
    ax_t.legend(title="mode/codec", fontsize=8)
    fig.suptitle(f"Accuracy by training mode: {_title_suffix(runs)}")
    fig.tight_layout()
    return save_figure(fig, out_dir, "modes_accuracy", formats)


def plot_time_to_accuracy(runs: list[Run], out_dir: Path, formats: Sequence[str], target: float) -> list[Path]:
    """Bars: simulated seconds to reach ``target`` accuracy (mean over seeds that reached it).

    A compressor none of whose seeds reached it has no bar, labelled "not reached"; when no compressor
    did, the figure says so across the middle and its axis spans the runs' simulated time (the window
    in which none reached it), not an empty -0.04..0.04.
    """
    groups = _groups(runs)
    names = list(groups)
    fig, ax = plt.subplots(figsize=(max(5, 0.8 * len(names) + 2), 4))
    heights, labels = [], []
    for n in names:
        ttas = [t for t in (time_to_accuracy(r.evals, target) for r in groups[n]) if t is not None]
        heights.append(statistics.fmean(ttas) if ttas else 0.0)
        labels.append(f"{heights[-1]:.1f}" if ttas else NOT_REACHED)
        if ttas and len(ttas) < len(groups[n]):
            labels[-1] += f" ({len(ttas)}/{len(groups[n])} seeds)"
    reached = any(label != NOT_REACHED for label in labels)
    bars = ax.bar(names, heights, color="#C44E52", label=f"mean over seeds reaching {pct(target)}")
    ax.bar_label(bars, labels=labels, fontsize=8)
    if reached:
        ax.legend()
    else:
        longest = max((float(r.summary.get("sim_time_s") or 0.0) for r in runs), default=0.0)
        ax.set_ylim(0, longest * 1.05 if longest > 0 else 1.0)
        note_nothing_reached(ax, target)
    ax.set_ylabel(f"simulated time to {pct(target)} test accuracy (s)")
    ax.set_xlabel("compressor")
    ax.set_title(f"Time to {pct(target)} accuracy per compressor\n{_title_suffix(runs)}")
    ax.tick_params(axis="x", rotation=30)
    return save_figure(fig, out_dir, "time_to_accuracy", formats)


# ---- timeline ---------------------------------------------------------------------------------------
def load_trace(run_dir: str | Path) -> tuple[dict[tuple[int, int], str], list[dict[str, Any]]]:
    """``trace.json``: track names by ``(pid, tid)`` and the complete (``"X"``) spans.

    Raises
    ------
    ResultsError
        When the file is missing, not UTF-8 JSON, not a trace-event object, or holds a span without
        a numeric ``ts``/``dur``, a ``pid``/``tid`` or a ``name`` (the message names the file).
    """
    path = Path(run_dir) / "trace.json"
    if not path.is_file():
        raise ResultsError(f"{run_dir}: no trace.json")
    data = read_json(path)
    events = data.get("traceEvents") if isinstance(data, dict) else None
    if not isinstance(events, list) or not all(isinstance(e, dict) for e in events):
        raise ResultsError(f"{path}: not a trace-event file (no traceEvents list of objects)")
    names: dict[tuple[int, int], str] = {}
    spans = []
    for i, e in enumerate(events):
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            args = e.get("args")
            if isinstance(args, dict) and isinstance(args.get("name"), str):
                names[(e.get("pid"), e.get("tid"))] = args["name"]
        elif e.get("ph") == "X":
            bad = [k for k in ("ts", "dur") if not _is_number(e.get(k))]
            bad += [k for k in ("pid", "tid") if not isinstance(e.get(k), (int, str)) or isinstance(e.get(k), bool)]
            bad += [] if isinstance(e.get("name"), str) else ["name"]
            if bad:
                raise ResultsError(f"{path}: event {i}: no valid {', '.join(bad)}")
            spans.append(e)
    return names, spans


def _track_order(name: str) -> tuple[Any, ...]:
    """node3, node3 -> server, server -> node3 together, in node order; other tracks after."""
    parts = [p.strip() for p in name.split("->")]
    ends = [p for p in parts if p != "server"] or parts
    m = re.search(r"(\d+)$", ends[0])
    num = int(m.group(1)) if m else 10**9
    kind = 0 if len(parts) == 1 else (1 if parts[-1] == "server" else 2)
    return (m is None, re.sub(r"\d+$", "", ends[0]), num, kind, name)


def _owner(track: str) -> str:
    """Whose row a track is: the first sensor node it names (``gw0 -> node3``: node3), else its
    first end other than the server (``gw0 -> server``: gw0), else the server."""
    ends = [p.strip() for p in track.split("->")]
    named = [e for e in ends if NODE_VERTEX.fullmatch(e)] or [e for e in ends if e != "server"]
    return named[0] if named else "server"


def shown_tracks(tracks: Sequence[str], max_rows: int = TIMELINE_MAX_ROWS) -> tuple[list[str], list[str], int]:
    """The rows a timeline shows (in the order of ``tracks``), the owners (nodes, gateways: see
    :func:`_owner`) whose rows they are, and how many owners there are, the server not counted:
    every row when there are at most ``max_rows``, else the server's rows and those of owners spread
    evenly over the others (the first, then every ``n/k``-th), as many as fit (at least one)."""
    rows: dict[str, list[str]] = {}
    for t in tracks:
        rows.setdefault(_owner(t), []).append(t)
    server = rows.pop("server", [])
    owners = list(rows)
    if len(tracks) <= max_rows:
        return list(tracks), owners, len(owners)
    picked = owners[:1]  # at least one
    for k in range(min(len(owners), max_rows), 1, -1):
        spaced = [owners[j] for j in spread(len(owners), k)]
        if len(server) + sum(len(rows[o]) for o in spaced) <= max_rows:
            picked = spaced
            break
    keep = set(server).union(*(rows[o] for o in picked))
    return [t for t in tracks if t in keep], picked, len(owners)


def plot_timeline(run: Run, out_dir: Path, formats: Sequence[str], iterations: int = TIMELINE_ITERATIONS) -> list[Path]:
    """Gantt chart of the first ``iterations`` iterations: a row per node and per link (at most
    :data:`TIMELINE_MAX_ROWS`: see :func:`shown_tracks`)."""
    names, spans = load_trace(run.dir)
    # The window ends when the `iterations`-th iteration ends (metrics.csv); spans starting before it
    # belong to those iterations, whatever the synchronization mode.
    ends = [row["sim_time_s"] for row in run.metrics]
    t_end_us = ends[min(iterations, len(ends)) - 1] * 1e6 if ends else float("inf")  # s -> trace us
    spans = [e for e in spans if e["ts"] <= t_end_us]
    track_of = {key: names.get(key, f"{key[0]}/{key[1]}") for key in {(e["pid"], e["tid"]) for e in spans}}
    tracks, shown, total = shown_tracks(sorted(set(track_of.values()), key=_track_order), TIMELINE_MAX_ROWS)
    row = {t: i for i, t in enumerate(tracks)}
    # one broken_barh per (row, phase), in order of first appearance: a bar artist per span made a
    # 1,000-node timeline take 45 s
    bars: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for e in spans:
        track = track_of[(e["pid"], e["tid"])]
        if track in row:
            bars.setdefault((track, e["name"]), []).append((e["ts"] / 1e6, e["dur"] / 1e6))  # trace us -> s
    fig, ax = plt.subplots(figsize=(11, 1.2 + 0.28 * len(tracks)))
    seen: set[str] = set()
    extra = iter(plt.rcParams["axes.prop_cycle"].by_key()["color"])
    colors = dict(PHASE_COLORS)
    for (track, name), ranges in bars.items():
        color = colors.setdefault(name, next(extra, "#999999"))
        ax.broken_barh(ranges, (row[track] - 0.4, 0.8), color=color, label=None if name in seen else name)
        seen.add(name)
    ax.set_yticks(range(len(tracks)), tracks, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("simulated time (s)")
    what = "nodes" if all(NODE_VERTEX.fullmatch(o) for o in shown) else "nodes and gateways"
    part = "" if len(shown) == total else f" ({len(shown):,} of {total:,} {what}, spread evenly)"
    ax.set_title(
        f"Timeline of the first {iterations} iterations: {run.summary.get('scenario')} / "
        f"{run.group or run.summary['compressor']}{part}",
        pad=26,
    )
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=6, fontsize=8, frameon=False)
    ax.grid(axis="x", alpha=0.3)
    return save_figure(fig, out_dir, f"timeline_{safe_name(run.group or run.summary['compressor'])}", formats)


# ---- sweeps -----------------------------------------------------------------------------------------
SWEEP_METRICS = (
    ("throughput_samples_per_s", "throughput (samples / simulated s)", 1.0),
    ("wire_bytes_up", "wire bytes up, whole run (MB)", 1 / MB),
    ("final_accuracy", "final test accuracy (%)", 100.0),
    ("time_to_accuracy_s", "simulated s to target accuracy", 1.0),
)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def plot_sweep(sw: SweepData, key: str, out_dir: Path, formats: Sequence[str], target: float | None) -> list[Path]:
    """Metrics against swept ``key``; a line per compressor (and per value of the other swept keys)."""
    others = [k for k in sw.grid if k not in (key, SEED_KEY)]
    lines: dict[str, dict[Any, list[Run]]] = {}
    for values, run in sw.points:
        name = ", ".join(f"{k.partition('.')[2]}={values[k]}" if k != CODEC_KEY else str(values[k]) for k in others)
        if CODEC_KEY not in sw.grid:
            name = str(run.summary["compressor"]) + (", " + name if name else "")
        lines.setdefault(name, {}).setdefault(values[key], []).append(run)
    xs_all = list(dict.fromkeys(sw.grid[key]))
    numeric = all(_is_number(v) for v in xs_all)
    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5))
    for ax, (metric, ylabel, scale) in zip(axes.flat, SWEEP_METRICS):
        for name, by_x in lines.items():
            xs, ys, es = [], [], []
            for xv in xs_all:
                if xv not in by_x:
                    continue
                if metric == "time_to_accuracy_s":
                    t = target if target is not None else float(by_x[xv][0].summary["target_accuracy"])
                    vals = [v for v in (time_to_accuracy(r.evals, t) for r in by_x[xv]) if v is not None]
                else:
                    vals = [r.summary[metric] for r in by_x[xv] if r.summary.get(metric) is not None]
                if not vals:
                    continue
                m, s = _mean_std([v * scale for v in vals])
                xs.append(xv if numeric else xs_all.index(xv))
                ys.append(m)
                es.append(s)
            if xs:
                ax.errorbar(xs, ys, yerr=es, marker="o", ms=4, capsize=3, label=name or "all")
        if numeric:
            pos = [v for v in xs_all if v > 0]
            if len(pos) == len(xs_all) and max(pos) / min(pos) >= 50:
                ax.set_xscale("log")
        else:
            ax.set_xticks(range(len(xs_all)), [str(v) for v in xs_all])
        if metric == "time_to_accuracy_s":
            t = target if target is not None else float(sw.points[0][1].summary["target_accuracy"])
            ylabel = f"simulated s to {pct(t)} accuracy"
            if not ax.lines:  # no point reached it: say so rather than leave an empty panel
                note_nothing_reached(ax, t)
        ax.set_xlabel(key)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    axes.flat[0].legend(fontsize=8, title="compressor" if CODEC_KEY in sw.grid else None)
    fig.suptitle(f"Sweep {sw.name}: metrics against {key} (mean over seeds, error bar = std)")
    fig.tight_layout()
    return save_figure(fig, out_dir, f"sweep_{safe_name(sw.name)}_{safe_name(key)}", formats)


# ---- everything -------------------------------------------------------------------------------------
def plot_all(
    paths: Sequence[str | Path],
    out_dir: str | Path,
    formats: Sequence[str] = ("png", "svg"),
    target_accuracy: float | None = None,
    warn: Warn | None = None,
) -> list[Path]:
    """Every figure the inputs allow (see the module docstring); returns the files written.

    Damaged or incomplete run directories and sweeps are skipped with a ``warn`` line each (default:
    :func:`~aiotsim.results.store.warn`), as is the timeline of a run whose ``trace.json`` is
    missing or damaged.

    Raises
    ------
    ResultsError
        For inputs without any usable run, an unknown format, or an output directory that cannot
        be written (``cannot write to PATH: reason``).
    """
    bad = [f for f in formats if f not in ("png", "svg", "pdf")]
    if bad or not formats:
        raise ResultsError(f"--formats: unknown {', '.join(bad) or '(none given)'}; valid: png, svg, pdf")
    warn = warn or store_warn
    runs, sweeps = collect(paths, warn)
    out = make_dir(out_dir)
    written: list[Path] = []
    if runs:
        written += _plot_runs(runs, out, formats, target_accuracy, warn)
    for sw in sweeps:
        for key in sw.grid:
            if key not in (CODEC_KEY, SEED_KEY):
                written += plot_sweep(sw, key, out, formats, target_accuracy)
        written += plot_network_sweep(sw, out, formats, target_accuracy)  # one or two swept keys
    return written


def _plot_runs(
    runs: list[Run], out: Path, formats: Sequence[str], target_accuracy: float | None, warn: Warn
) -> list[Path]:
    """The run figures, and a timeline per group (skipped with a warning when its trace is unusable)."""
    target = target_accuracy if target_accuracy is not None else float(runs[0].summary["target_accuracy"])
    written = plot_throughput(runs, out, formats)
    written += plot_wire_bytes(runs, out, formats)
    for x in ("time", "iterations", "bytes"):
        written += plot_convergence(runs, out, formats, x)
    written += plot_time_to_accuracy(runs, out, formats, target)
    if len({r.summary.get("mode") for r in runs}) > 1:
        written += plot_modes(runs, out, formats)
    for members in _groups(runs).values():
        try:
            written += plot_timeline(members[0], out, formats)
        except ResultsError as exc:
            if exc.message.startswith("cannot write to "):
                raise
            warn(f"skipped timeline_{safe_name(members[0].group)}: {exc.message}")
    return written


__all__ = [
    "plot_all", "plot_modes", "collect", "load_run", "find_run_dirs", "load_trace", "plot_timeline", "plot_sweep",
    "Run",
]  # fmt: skip
