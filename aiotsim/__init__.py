"""aiotsim: a network-emulated AIoT edge simulator for communication-efficient distributed training.

The learning is real (PyTorch gradients on real data, real codecs producing real packed bytes) and
the network is simulated (SimPy discrete events over modeled links). docs/ARCHITECTURE.md describes
the layers and their contracts.

For notebooks and scripts::

    import aiotsim
    res = aiotsim.run("scenarios/iot10.toml", overrides={"network.uplink_mbps": 5})
    res.rows          # metrics.csv as a pandas DataFrame, res.evals likewise
    res.summary       # the typed RunSummary; res.run_dir holds the files
    slow = aiotsim.replay(res.run_dir, overrides={"network.latency_ms": 150})  # same learning, new clock

:func:`run`, :func:`resume` and :class:`Result` live in :mod:`aiotsim.api` and are imported on
first use, so ``import aiotsim.config`` stays cheap.
"""

from __future__ import annotations

from typing import Any

from aiotsim._version import __version__

_API = ("run", "resume", "Result")


def __getattr__(name: str) -> Any:
    """``aiotsim.run``, ``aiotsim.resume``, ``aiotsim.Result``: loaded from :mod:`aiotsim.api`;
    ``aiotsim.replay`` from :mod:`aiotsim.replaying`."""
    if name in _API:
        from aiotsim import api

        return getattr(api, name)
    if name == "replay":
        from aiotsim.replaying import replay

        return replay
    raise AttributeError(f"module 'aiotsim' has no attribute {name!r}")


__all__ = ["__version__", "run", "resume", "replay", "Result"]
