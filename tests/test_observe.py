"""What a node observes of the server's step (``aiotsim.sim.observe``): only what was sent to it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from aiotsim.compress.aggaware import AggAwareState
from aiotsim.config import load_scenario
from aiotsim.sim.learning import Learning
from aiotsim.sim.observe import before_step, observe_global

CPU = torch.device("cpu")


def _learning(tiny: Path, *sets: str) -> Learning:
    sc = load_scenario(tiny, ["compressor.name=agg-aware", "compressor.ratio=0.05", *sets])
    return Learning(sc, CPU, [0.5, 0.5])


def _sparse_like(p: torch.Tensor, gen: torch.Generator, density: float = 0.1) -> torch.Tensor:
    """A sparse aggregate shaped like ``p``: N(0, 1) values on a random ``density`` of entries."""
    keep = torch.rand(p.shape, generator=gen) < density
    return torch.randn(p.shape, generator=gen) * keep


def _two_steps(learning: Learning) -> tuple[list[torch.Tensor], list[torch.Tensor], list]:
    """Step with two aggregates of different supports and let node 0 observe the second step;
    returns ``(second aggregate, parameter delta of the second step, node 0's states)``."""
    gen = torch.Generator().manual_seed(4)
    local = learning.local_state(0)
    for _ in range(2):
        agg = [_sparse_like(p, gen) for p in learning.params]
        before = before_step(learning)
        held = learning.snapshot()
        learning.step(agg)
        observe_global(learning, agg, [local], before)
    delta = [p.detach() - h for p, h in zip(learning.params, held)]
    return agg, delta, local.states


def _observed(states: list) -> list[torch.Tensor]:
    out = []
    for st in states:
        assert isinstance(st, AggAwareState)
        out.append(st.globalness.reshape(-1) != 0)
    return out


def test_model_downlink_with_server_momentum_observes_the_parameter_delta(tiny_scenario: Path) -> None:
    # server momentum: the second step moves every coordinate of both aggregates' supports
    learning = _learning(tiny_scenario, "training.momentum_at=server", "compressor.downlink=model")
    agg, delta, states = _two_steps(learning)
    for seen, d, a in zip(_observed(states), delta, agg):
        assert torch.equal(seen, d.reshape(-1) != 0)
        assert (seen & ~(a.reshape(-1) != 0)).any()  # more than the aggregate's support


def test_model_downlink_with_weight_decay_observes_the_parameter_delta(tiny_scenario: Path) -> None:
    learning = _learning(
        tiny_scenario, "training.momentum=0", "training.weight_decay=0.01", "compressor.downlink=model"
    )
    agg, delta, states = _two_steps(learning)
    for seen, d, a in zip(_observed(states), delta, agg):
        assert torch.equal(seen, d.reshape(-1) != 0)
        assert seen.sum() > (a != 0).sum()


@pytest.mark.parametrize("downlink", ["union", "compressed"])
def test_update_downlink_observes_the_downloaded_update(tiny_scenario: Path, downlink: str) -> None:
    learning = _learning(tiny_scenario, "training.momentum_at=server", f"compressor.downlink={downlink}")
    assert before_step(learning) is None  # no copy of the model is needed
    agg, _, states = _two_steps(learning)
    for seen, a in zip(_observed(states), agg):
        assert torch.equal(seen, a.reshape(-1) != 0)


def test_plain_sgd_model_downlink_observes_the_aggregates_support(tiny_scenario: Path) -> None:
    # no server momentum, no weight decay: the delta is -lr * aggregate (rounded in fp32)
    learning = _learning(tiny_scenario, "training.momentum=0", "compressor.downlink=model")
    agg, delta, states = _two_steps(learning)
    for seen, d, a in zip(_observed(states), delta, agg):
        assert torch.equal(seen, a.reshape(-1) != 0)
        assert torch.allclose(d, -learning.sc.training.lr * a, atol=1e-6)
