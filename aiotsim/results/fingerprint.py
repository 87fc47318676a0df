"""Fingerprints of a run directory: hashes of the outputs that must not change when code moves.

A refactor of the simulation core must change structure, not numbers. A fingerprint is the
SHA-256 of ``metrics.csv`` and ``evals.csv`` as written, and of ``summary.json`` with the
wall-clock fields removed (everything else in a flops-mode run is a function of the scenario and
its seed). Two runs with equal fingerprints produced byte-identical results.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from aiotsim.errors import ResultsError

# summary.json fields that measure the host, not the simulation (seconds of wall-clock time)
WALL_CLOCK_FIELDS = ("wall_time_s",)
FINGERPRINTED = ("metrics.csv", "evals.csv", "summary.json")


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def summary_bytes(path: Path) -> bytes:
    """``summary.json`` re-serialised without its wall-clock fields (field order kept)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ResultsError(f"{path}: cannot read summary ({exc})") from None
    if not isinstance(data, dict):
        raise ResultsError(f"{path}: summary must be a JSON object")
    for key in WALL_CLOCK_FIELDS:
        data.pop(key, None)
    return json.dumps(data, indent=2).encode()


def fingerprint_run_dir(run_dir: str | Path) -> dict[str, str]:
    """``{file name: sha256}`` for the fingerprinted files of ``run_dir``."""
    d = Path(run_dir)
    out: dict[str, str] = {}
    for name in FINGERPRINTED:
        p = d / name
        if not p.is_file():
            raise ResultsError(f"{d}: no {name} to fingerprint")
        out[name] = _sha(summary_bytes(p) if name == "summary.json" else p.read_bytes())
    return out
