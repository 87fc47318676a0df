"""Markdown for docs/RESULTS.md: tables, number formats and the claims table with verdicts."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .runner import Missing

Summary = dict[str, Any]
NOT_RUN = "not run yet"


def table(header: Sequence[str], rows: Sequence[Sequence[str]], left: int = 1) -> list[str]:
    """A Markdown table: the first ``left`` columns and a "command" column left-aligned, the rest
    (numbers) right-aligned."""
    align = [":---" if i < left or h == "command" else "---:" for i, h in enumerate(header)]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return lines + [""]


def guarded(rows: Callable[[], list[list[str]]], width: int) -> list[list[str]]:
    """``rows()``, or one row saying which run is missing (the report still lays out)."""
    try:
        return rows()
    except Missing as exc:
        return [[f"{NOT_RUN}: {exc.spec.command}"] + ["-"] * (width - 1)]


def pct(x: float | None) -> str:
    """A fraction as a percentage with two decimals (the papers' precision)."""
    return "-" if x is None else f"{100 * x:.2f}%"


def points(x: float) -> str:
    """A difference of two fractions in percentage points, signed."""
    return f"{100 * x:+.2f} points"


def times(x: float | None, digits: int = 1) -> str:
    """A ratio as ``12.3x``."""
    return "-" if x is None else f"{x:.{digits}f}x"


def speedup(s: Summary, base: Summary) -> float:
    """Throughput (samples per simulated second) of ``s`` over ``base``."""
    return float(s["throughput_samples_per_s"]) / float(base["throughput_samples_per_s"])


def kib(x: float | None) -> str:
    """Bytes as KiB with one decimal."""
    return "-" if x is None else f"{x / 1024:.1f} KiB"


def seconds(x: float | None) -> str:
    """Simulated seconds, or "never" for a target not reached."""
    return "never" if x is None else f"{x:.0f} s"


# ---------------------------------------------------------------------------------------------
# Claims
# ---------------------------------------------------------------------------------------------

HOLDS = "**holds**"
FAILS = "**does not hold**"
UNTESTABLE = "**cannot be tested here**"


def judge(ok: bool, rule: str) -> str:
    """A verdict decided by ``ok``, with the rule that decided it (the condition for "holds")."""
    return f"{HOLDS if ok else FAILS} (rule: {rule})"


@dataclass(frozen=True)
class Claim:
    """One claim of a seed document: its words, where it was made, where aiotsim tests it, what
    aiotsim measured there and the verdict (computed from the measurement by a stated rule)."""

    quote: str
    paper: str
    here: str
    measured: str
    verdict: str

    def row(self) -> list[str]:
        """The claim's row of :func:`claims_table`."""
        return [f'"{self.quote}"', self.paper, self.here, self.measured, self.verdict]


def claim(quote: str, paper: str, here: str, measure: Callable[[], tuple[str, str]]) -> Claim:
    """A :class:`Claim` whose measurement and verdict come from ``measure()`` (runs), or "not run
    yet" when a run it needs is missing."""
    try:
        measured, verdict = measure()
    except Missing as exc:
        measured, verdict = f"{NOT_RUN}: {exc.spec.command}", "-"
    return Claim(quote, paper, here, measured, verdict)


def untestable(quote: str, paper: str, what_it_takes: str) -> Claim:
    """A claim aiotsim cannot test on this machine, and what it would take."""
    return Claim(quote, paper, "-", "-", f"{UNTESTABLE}: {what_it_takes}")


def claims_table(claims: Sequence[Claim]) -> list[str]:
    """The seed's claims, one row each, with verdicts."""
    head = ["claim (quoted)", "the paper's setting", "aiotsim's setting", "measured here", "verdict"]
    lines = ["### Claims and verdicts", ""]
    return lines + table(head, [c.row() for c in claims], left=5)


def first_at(evals: Sequence[tuple[int, float, float]], target: float) -> tuple[int, float] | None:
    """``(iterations, simulated s)`` of the first evaluation at or above ``target`` accuracy."""
    return next(((it, t) for it, t, acc in evals if acc >= target), None)


def sentence(text: Callable[[], str]) -> str:
    """``text()``, or a note naming the missing run it needs."""
    try:
        return text()
    except Missing as exc:
        return f"({NOT_RUN}: {exc.spec.command})"
