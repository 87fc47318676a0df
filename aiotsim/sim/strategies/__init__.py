"""Training strategies (sync, partial, async, ring, federated), registered by name; see :mod:`.base`."""

from aiotsim.sim.strategies import async_, federated, partial, ring, sync
from aiotsim.sim.strategies.base import STRATEGIES, Strategy, get_strategy, register, strategy_name

__all__ = [
    "Strategy", "STRATEGIES", "register", "get_strategy", "strategy_name",
    "sync", "partial", "async_", "ring", "federated",
]  # fmt: skip
