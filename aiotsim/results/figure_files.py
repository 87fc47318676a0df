"""Writing figures to files: one place for the file names and the save, shared by every plot module."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from aiotsim.errors import ResultsError  # noqa: E402

DPI = 120  # PNG resolution, dots per inch
# The same figure, the same bytes: no creation date in the files, and the SVG element ids from a
# fixed salt instead of a random one (a regenerated figures/ differs only where a result does).
NO_DATE = {"png": {"Software": None}, "svg": {"Date": None}, "pdf": {"CreationDate": None}}
matplotlib.rcParams["svg.hashsalt"] = "aiotsim"


def safe_name(name: str, default: str = "run") -> str:
    """``name`` as part of a file name: runs of other characters become ``_``; ``default`` if empty."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") or default


def save_figure(fig: Figure, out_dir: Path, stem: str, formats: Sequence[str]) -> list[Path]:
    """Write ``fig`` as ``out_dir/stem.FMT`` for every format, then close it; returns the paths.

    Raises
    ------
    ResultsError
        A file that cannot be written (the message names it).
    """
    paths = []
    try:
        for fmt in formats:
            path = out_dir / f"{stem}.{fmt}"
            try:
                fig.savefig(path, dpi=DPI, bbox_inches="tight", metadata=NO_DATE.get(fmt))
            except OSError as exc:
                raise ResultsError(f"cannot write to {path}: {exc.strerror or exc}") from None
            paths.append(path)
    finally:
        plt.close(fig)
    return paths


__all__ = ["safe_name", "save_figure", "DPI"]
