"""Shared fixtures: paths to the tiny scenario and a helper to write scenario files."""

from __future__ import annotations

from pathlib import Path

import pytest

TESTS = Path(__file__).parent
ROOT = TESTS.parent


@pytest.fixture
def tiny_scenario() -> Path:
    """A 2-node, 4-iteration, flops-mode scenario on the 8x8 digits."""
    return TESTS / "tiny.toml"


@pytest.fixture
def write_toml(tmp_path: Path):
    """Write TOML text to a file in tmp_path and return its path."""

    def _write(text: str, name: str = "s.toml") -> Path:
        p = tmp_path / name
        p.write_text(text)
        return p

    return _write
