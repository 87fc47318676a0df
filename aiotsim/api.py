"""The library entry point: run one scenario into a run directory.

This is the top layer that joins the simulation (:mod:`aiotsim.sim`) to its storage
(:mod:`aiotsim.results.store`): it builds the :class:`~aiotsim.sim.world.Cluster`, wires a
:class:`~aiotsim.results.store.RunWriter` in as its sink and runs it. The CLI, sweeps and the
parallel runner call :func:`run_scenario`; nothing below this layer writes files.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from aiotsim.config import Scenario
from aiotsim.records import Progress
from aiotsim.results.store import RunWriter
from aiotsim.sim.runner import run_cluster
from aiotsim.sim.world import Cluster


def run_scenario(
    scenario: Scenario,
    out_dir: str | Path,
    device: str = "auto",
    on_progress: Callable[[Progress], None] | None = None,
    threads: int = 1,
) -> dict[str, Any]:
    """Run ``scenario`` and write its run directory; returns the summary.

    Parameters
    ----------
    scenario : Scenario
        The validated scenario.
    out_dir : str or Path
        Run directory to create (its run files are replaced).
    device : str
        ``"auto"``, ``"cpu"`` or ``"cuda"``: where the real learning runs.
    on_progress : callable, optional
        Called with a :class:`~aiotsim.records.Progress` after every iteration.
    threads : int
        torch intra-op threads for the run (``torch.set_num_threads``), restored afterwards.
        Results depend on this count (the reductions of LeNet's convolutions are split
        differently), so a fixed count makes a scenario and seed give the same numbers whether
        run alone, in ``compare`` workers or in a sweep. The default, 1, is the setting the
        fingerprints and every shipped comparison use.

    Returns
    -------
    dict
        The summary. A run that diverged (NaN/inf) or stalled (no node online) returns its
        summary with ``status`` ``"diverged"``/``"stalled"``, ``complete: false`` and a ``reason``;
        an interruption or an error propagates after the summary has been written.
    """
    if threads < 1:
        raise ValueError(f"threads(={threads}) must be >= 1")
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        cluster = Cluster(scenario, device=device, on_progress=on_progress)
        return run_cluster(cluster, RunWriter(out_dir, scenario.to_toml()))
    finally:
        torch.set_num_threads(before)


__all__ = ["run_scenario", "Progress"]
