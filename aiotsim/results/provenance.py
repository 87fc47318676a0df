"""What the checked-in results were made from, so that a test can tell when they are stale.

``make docs`` regenerates the README's codec table and ``figures/`` by running aiotsim. Each
generator records, under its name in ``docs/generated.json``, a SHA-256 of its inputs: every Python
source of the ``aiotsim`` package (the code that computes the numbers and draws the figures) and the
scenario files it runs. ``tests/test_docs_provenance.py`` recomputes the digest and fails when the
code or the scenarios changed since, naming the command that brings the documents up to date. The
digest is of the sources, not of the results: rerunning takes minutes, comparing digests none, and
a change that moves no number costs one ``make docs`` that rewrites the same numbers.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

RECORD = Path("docs") / "generated.json"
PACKAGE = "aiotsim"


def inputs_digest(root: Path, scenarios: list[str]) -> str:
    """SHA-256 over the package's Python sources and the given scenario files (paths relative to
    ``root``), each as its relative path and its bytes, in sorted order."""
    files = sorted(p.relative_to(root).as_posix() for p in (root / PACKAGE).rglob("*.py"))
    files += sorted(scenarios)
    h = hashlib.sha256()
    for rel in files:
        h.update(rel.encode() + b"\0" + (root / rel).read_bytes() + b"\0")
    return h.hexdigest()


def record(root: Path, name: str, scenarios: list[str], command: str) -> None:
    """Note in ``docs/generated.json`` that generator ``name`` (run by ``command``) has just
    written its documents from the current inputs."""
    path = root / RECORD
    entries = json.loads(path.read_text()) if path.exists() else {}
    entries[name] = {"command": command, "scenarios": sorted(scenarios), "inputs": inputs_digest(root, scenarios)}
    path.write_text(json.dumps(entries, indent=2, sort_keys=True) + "\n")


def stale(root: Path) -> list[str]:
    """The recorded generators whose inputs changed since they last ran: ``"name (command)"``."""
    path = root / RECORD
    if not path.exists():
        return [f"nothing recorded: {RECORD} is missing"]
    out = []
    for name, entry in sorted(json.loads(path.read_text()).items()):
        if inputs_digest(root, entry["scenarios"]) != entry["inputs"]:
            out.append(f"{name} ({entry['command']})")
    return out
