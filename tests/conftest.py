"""Shared fixtures: paths to the tiny scenario and a helper to write scenario files; Hypothesis
profiles; torch threads under pytest-xdist.

Property tests draw the same examples on every run by default (profile ``repeatable``:
``derandomize``), so a CI run cannot fail on an example no earlier run drew, and a failure
repeats. ``pytest --hypothesis-profile=explore`` draws fresh random examples (and 1,000 per test
where a test does not set its own count) to look for new counterexamples; one found goes into the
test as an ``@example``, with the fix.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest
from click.testing import Result
from hypothesis import settings

TESTS = Path(__file__).parent
ROOT = TESTS.parent


def load_script(path: Path, name: str) -> ModuleType:
    """A script of the repository (``benchmarks/``, ``tools/``) loaded as module ``name``."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


settings.register_profile("repeatable", derandomize=True)
settings.register_profile("explore", derandomize=False, max_examples=1000)
settings.load_profile("repeatable")


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist (``make test`` is ``pytest -n auto``), give each worker its share of the
    CPUs as torch intra-op threads: torch's default of one thread per CPU in every worker would
    oversubscribe the machine (a loaded machine once made a run 25x slower). Tests that need a
    given count still set it themselves."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    if workers > 1:
        import torch

        from aiotsim.cpus import auto_threads

        torch.set_num_threads(max(1, auto_threads() // workers))


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


@pytest.fixture(scope="module")
def one_torch_thread():
    """One torch intra-op thread for a module's tests (results and timings are per thread count),
    restored afterwards; modules opt in with ``pytestmark = pytest.mark.usefixtures(...)``."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def run_tiny_sweep(tmp_path: Path, grid: str, sets: str = "") -> Path:
    """Write a sweep of tests/tiny.toml (2 iterations; ``sets``/``grid``: TOML lines of its [set]
    and [grid]), run every point in this process and write its manifest and index; returns the
    sweep directory."""
    from aiotsim.results.parallel import run_local
    from aiotsim.results.sweep import load_sweep, write_index, write_manifest

    sweep_file = tmp_path / "s.toml"
    base = Path(__file__).with_name("tiny.toml")
    sweep_file.write_text(
        f'[sweep]\nbase = "{base}"\nname = "up"\n[set]\n"scenario.iterations" = 2\n{sets}\n[grid]\n{grid}\n'
    )
    sw = load_sweep(sweep_file, tmp_path / "sw")
    write_manifest(sw)
    assert all(r.ok for r in run_local(sw.jobs(), workers=1))
    write_index(sw)
    return tmp_path / "sw"


@pytest.fixture
def wide_cli(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI's consoles 250 columns wide for this test. Rich fixes a console's width from
    ``COLUMNS`` when it is created, and pytest-xdist workers start with ``COLUMNS=80``, so a
    ``CliRunner`` env cannot widen it later; the field is patched (undone after the test)."""
    import aiotsim.cli_common as common

    for console in (common.out, common.err):
        monkeypatch.setattr(console, "_width", 250)


def invoke_cli(*args: str) -> Result:
    """``aiotsim *args`` in-process; fails the test on a traceback (an exception other than the
    exit a command chooses)."""
    from typer.testing import CliRunner

    from aiotsim.cli import app

    res = CliRunner().invoke(app, list(args))
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    assert "Traceback" not in res.output
    return res
