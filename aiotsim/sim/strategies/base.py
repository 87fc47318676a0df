"""Strategies: how a run orders its rounds, chosen by name from a registry.

A :class:`Strategy` drives a :class:`~aiotsim.sim.world.Cluster` through its whole run as one
SimPy process (:meth:`Strategy.run`): whom to dispatch, how many uploads make an iteration, when
to apply, when to write the row. It holds no world of its own (the cluster has the nodes, the
network and the accounting) and adds only what its own order of events needs. Strategies register
under a name with :func:`register`; the scenario's ``training.mode`` picks one (``"ring"`` when
``network.topology == "ring"``), and an unknown name lists the valid ones (Flower's pluggable
strategies, without an if/elif factory).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar, TypeVar

from aiotsim.config import Scenario
from aiotsim.errors import ConfigError
from aiotsim.sim.world import Cluster, Proc

STRATEGIES: dict[str, type[Strategy]] = {}
S = TypeVar("S", bound="type[Strategy]")


class Strategy(ABC):
    """The order of events of a training run on a cluster.

    Parameters
    ----------
    cluster : Cluster
        The world the strategy drives.
    """

    name: ClassVar[str]  # registry key (a ``training.mode``, or ``"ring"``)

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    @abstractmethod
    def run(self) -> Proc:
        """The whole training run as one SimPy process body: ``scenario.iterations`` metrics rows,
        then whatever must finish before the run ends (the final model broadcast)."""


def register(cls: S) -> S:
    """Class decorator: make a strategy available under its ``name``."""
    STRATEGIES[cls.name] = cls
    return cls


def strategy_name(scenario: Scenario) -> str:
    """The strategy a scenario asks for: ``"ring"`` on a ring topology, else ``training.mode``."""
    return "ring" if scenario.network.topology == "ring" else scenario.training.mode


def get_strategy(name: str) -> type[Strategy]:
    """The strategy class registered as ``name``; a miss lists the valid names."""
    from aiotsim.compress.registry import unknown_name_message

    if name not in STRATEGIES:
        raise ConfigError(unknown_name_message("strategy", name, sorted(STRATEGIES)))
    return STRATEGIES[name]


__all__ = ["Strategy", "STRATEGIES", "register", "strategy_name", "get_strategy"]
