"""Models: shapes, hand-counted parameters, seeded initialization, layer kinds."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from aiotsim.errors import ConfigError
from aiotsim.learn.models import MODELS, build_model, layer_infos


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("shape", [(1, 28, 28), (1, 8, 8), (3, 32, 32), (2, 5, 9)])
@pytest.mark.parametrize("name", MODELS)
def test_output_shapes(name: str, shape: tuple[int, int, int]) -> None:
    model = build_model(name, shape, 10)
    assert model(torch.zeros(4, *shape)).shape == (4, 10)


def test_lenet5_parameter_count_28x28() -> None:
    # conv1: 6 filters x (1 channel x 5 x 5) + 6 biases              =    150 +   6 =    156
    # conv2: 16 x (6 x 5 x 5) + 16                                   =  2,400 +  16 =  2,416
    #   28x28 -conv1 pad 2-> 28x28 -pool-> 14x14 -conv2-> 10x10 -pool-> 5x5: 16*5*5 = 400 features
    # fc1:   400 x 120 + 120                                         = 48,000 + 120 = 48,120
    # fc2:   120 x 84 + 84                                           = 10,080 +  84 = 10,164
    # fc3:   84 x 10 + 10                                            =    840 +  10 =    850
    # total: 156 + 2,416 + 48,120 + 10,164 + 850                                    = 61,706
    assert _count(build_model("lenet5", (1, 28, 28), 10)) == 61_706


def test_lenet5_8x8_and_mlp_counts() -> None:
    # 8x8: conv2 padded by 2: 8 -> 4 -> 4 -> 2, so fc1 takes 16*2*2 = 64 features:
    # 156 + 2,416 + (64*120 + 120 = 7,800) + 10,164 + 850 = 21,386
    assert _count(build_model("lenet5", (1, 8, 8), 10)) == 21_386
    # mlp on 784: (784*200 + 200) + (200*200 + 200) + (200*10 + 10) = 157,000 + 40,200 + 2,010
    assert _count(build_model("mlp", (1, 28, 28), 10)) == 199_210


def test_seeded_init_reproducible_and_global_rng_untouched() -> None:
    state = torch.random.get_rng_state()
    a = build_model("lenet5", (1, 28, 28), 10, seed=7)
    b = build_model("lenet5", (1, 28, 28), 10, seed=7)
    c = build_model("lenet5", (1, 28, 28), 10, seed=8)
    assert torch.equal(torch.random.get_rng_state(), state)  # neither reseeded nor advanced
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert not torch.equal(a.fc1.weight, c.fc1.weight)


def test_init_matches_pytorch_default_distribution() -> None:
    # Default init: weights and biases uniform in +-1/sqrt(fan_in) (kaiming_uniform with a=sqrt(5)
    # gives bound sqrt(6 / ((1 + 5) * fan_in)) = 1/sqrt(fan_in)). fc1 of lenet5: fan_in 400 -> 0.05.
    model = build_model("lenet5", (1, 28, 28), 10, seed=0)
    w = model.fc1.weight
    assert w.abs().max().item() <= 0.05
    assert w.std().item() == pytest.approx(0.05 / 3**0.5, rel=0.05)  # std of U(-b, b) = b/sqrt(3)
    assert model.fc1.bias.abs().max().item() <= 0.05
    assert all(p.device.type == "cpu" and p.dtype == torch.float32 for p in model.parameters())


def test_unknown_model_and_bad_shapes() -> None:
    with pytest.raises(ConfigError, match="lenet5, mlp"):
        build_model("resnet18", (1, 28, 28), 10)
    with pytest.raises(ConfigError, match="4x4"):
        build_model("lenet5", (1, 3, 3), 10)
    with pytest.raises(ConfigError, match="num_classes"):
        build_model("mlp", (1, 8, 8), 1)


def test_layer_infos_kinds_and_order() -> None:
    model = build_model("lenet5", (1, 28, 28), 10)
    infos = layer_infos(model)
    params = list(model.parameters())
    assert [i.kind for i in infos] == ["conv", "bias", "conv", "bias", "fc", "bias", "fc", "bias", "fc", "bias"]
    assert [i.index for i in infos] == list(range(10))
    assert all(i.shape == tuple(p.shape) and i.dtype == p.dtype for i, p in zip(infos, params))
    assert infos[4].name == "fc1.weight" and infos[4].numel == 48_000


def test_layer_infos_norm_layers() -> None:
    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.Flatten(), nn.LayerNorm(8), nn.Linear(8, 3))
    kinds = [i.kind for i in layer_infos(model)]
    # conv w, conv b, bn w, bn b, ln w, ln b, fc w, fc b
    assert kinds == ["conv", "bias", "norm", "norm", "norm", "norm", "fc", "bias"]


def test_learn_package_does_not_import_simpy() -> None:
    import subprocess
    import sys

    code = "import sys, aiotsim.learn; assert 'simpy' not in sys.modules, 'learn imported simpy'"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
