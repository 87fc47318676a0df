"""Models: shapes, hand-counted parameters, seeded initialization, layer kinds, batch norm, runs."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from aiotsim.errors import ConfigError
from aiotsim.learn.compute import GradientComputer
from aiotsim.learn.models import MODELS, build_model, describe_models, layer_infos, min_input_size

BN_MODELS = ("resnet20", "resnet32", "resnet56", "resnet18", "resnet50", "vgg16", "mobilenetv2")


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("shape", [(1, 28, 28), (1, 8, 8), (3, 32, 32), (2, 5, 9)])
@pytest.mark.parametrize("name", MODELS)
def test_output_shapes(name: str, shape: tuple[int, int, int]) -> None:
    size = min_input_size(name)
    if min(shape[1:]) < size:  # refused with the model's name and its minimum size
        with pytest.raises(ConfigError, match=f"{name} needs inputs of at least {size}x{size}"):
            build_model(name, shape, 10)
        return
    model = build_model(name, shape, 10)
    assert model(torch.zeros(4, *shape)).shape == (4, 10)


def test_minimum_sizes() -> None:
    small = {"lenet5": 4, "lenet-caffe": 16, "alexnet": 28, "vgg16": 32}
    assert {n: min_input_size(n) for n in MODELS} == {n: small.get(n, 1) for n in MODELS}
    assert len(MODELS) >= 10 and MODELS[:2] == ("lenet5", "mlp")
    for name, size in small.items():  # the minimum itself is accepted
        assert build_model(name, (1, size, size), 10)(torch.zeros(2, 1, size, size)).shape == (2, 10)


def test_lenet_caffe_parameter_count_28x28() -> None:
    # 28 -conv1 5x5-> 24 -pool-> 12 -conv2 5x5-> 8 -pool-> 4: 50*4*4 = 800 features
    # conv1: 20 x (1 x 5 x 5) + 20      =     500 +  20 =     520
    # conv2: 50 x (20 x 5 x 5) + 50     =  25,000 +  50 =  25,050
    # fc1:   800 x 500 + 500            = 400,000 + 500 = 400,500
    # fc2:   500 x 10 + 10              =   5,000 +  10 =   5,010
    # total                                               431,080 (PGC Table 3: 0.45 M)
    assert _count(build_model("lenet-caffe", (1, 28, 28), 10)) == 431_080


def test_alexnet_counts_near_the_pgc_paper() -> None:
    # convs: 1*32*25+32 = 832, 32*64*25+64 = 51,264, 64*64*9+64 = 36,928 (twice), 64*256*9+256
    # = 147,712 -> 273,664; 28 -> 14 -> 7 -> 5 -> 3 -> 1: fc1 256*1*1*4096 + 4096 = 1,052,672;
    # fc2 4096*10 + 10 = 40,970.  32x32x3: conv1 3*32*25+32 = 2,432; 32 -> ... -> 2: fc1
    # 256*4*4096 + 4096 = 4,198,400.
    mnist, cifar = _count(build_model("alexnet", (1, 28, 28), 10)), _count(build_model("alexnet", (3, 32, 32), 10))
    assert (mnist, cifar) == (273_664 + 1_052_672 + 40_970, 275_264 + 4_198_400 + 40_970)
    assert mnist == pytest.approx(1.39e6, rel=0.02) and cifar == pytest.approx(4.56e6, rel=0.02)


def test_cifar_resnet_counts() -> None:
    # resnet20 on 32x32x3 (option A shortcuts: no parameters; convs have no bias; BN: 2 per channel):
    # stem:    3*16*9 = 432 + BN 32                                                    =     464
    # stage 1: 3 blocks x 2 x (16*16*9 = 2,304 + BN 32)                                =  14,016
    # stage 2: 16*32*9 = 4,608 + 64; 32*32*9 = 9,216 + 64; then 4 x (9,216 + 64)       =  51,072
    # stage 3: 32*64*9 = 18,432 + 128; 64*64*9 = 36,864 + 128; then 4 x (36,864 + 128) = 203,520
    # fc:      64*10 + 10                                                              =     650
    # total                                                                              269,722
    assert _count(build_model("resnet20", (3, 32, 32), 10)) == 269_722
    # each extra block pair per stage adds 2 x (2,336 + 9,280 + 36,992) = 97,216 per 2 blocks
    assert _count(build_model("resnet32", (3, 32, 32), 10)) == 269_722 + 2 * 97_216  # 464,154
    assert _count(build_model("resnet56", (3, 32, 32), 10)) == 269_722 + 6 * 97_216  # 853,018


@pytest.mark.parametrize(
    ("name", "count"), [("resnet18", 11_689_512), ("resnet50", 25_557_032), ("mobilenetv2", 3_504_872)]
)
def test_torchvision_counts_at_imagenet_size(name: str, count: int) -> None:
    model = build_model(name, (3, 224, 224), 1000)  # ImageNet stem: 7x7/2 conv + max-pool
    assert _count(model) == count  # torchvision's resnet18, resnet50, mobilenet_v2
    if name != "mobilenetv2":
        assert model.conv1.kernel_size == (7, 7) and isinstance(model.maxpool, nn.MaxPool2d)


def test_cifar_stems_and_vgg_count() -> None:
    r18 = build_model("resnet18", (3, 32, 32), 10)
    assert r18.conv1.kernel_size == (3, 3) and r18.conv1.stride == (1, 1) and isinstance(r18.maxpool, nn.Identity)
    # 11,689,512 - 7x7 stem (3*64*49 = 9,408) + 3x3 stem (3*64*9 = 1,728) - fc (512*990 + 990)
    assert _count(r18) == 11_689_512 - 9_408 + 1_728 - 507_870
    mnv2 = build_model("mobilenetv2", (3, 32, 32), 10)
    assert mnv2.features[:5](torch.zeros(2, 3, 32, 32)).shape[-1] == 16  # strides 1, 1, 1, 1, 2
    # torchvision vgg16 features 14,714,688 + BN 2 x 4,224 channels + fc 512*10 + 10
    assert _count(build_model("vgg16", (3, 32, 32), 10)) == 14_714_688 + 8_448 + 5_130


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
    with pytest.raises(ConfigError, match="lenet5, mlp, lenet-caffe, alexnet, resnet20"):
        build_model("resnet99", (1, 28, 28), 10)
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


@pytest.mark.slow
def test_learn_package_does_not_import_simpy() -> None:
    import subprocess
    import sys

    code = "import sys, aiotsim.learn; assert 'simpy' not in sys.modules, 'learn imported simpy'"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("name", ["resnet20", "mobilenetv2", "vgg16"])
def test_seeded_init_of_bn_models(name: str) -> None:
    state = torch.random.get_rng_state()
    a, b = build_model(name, (3, 32, 32), 10, seed=5), build_model(name, (3, 32, 32), 10, seed=5)
    assert torch.equal(torch.random.get_rng_state(), state)
    assert all(torch.equal(p, q) for p, q in zip(a.state_dict().values(), b.state_dict().values()))
    bn = next(m for m in a.modules() if isinstance(m, nn.BatchNorm2d))
    assert bn.weight.eq(1).all() and bn.bias.eq(0).all() and bn.running_var.eq(1).all()
    assert not torch.equal(a.fc.weight, build_model(name, (3, 32, 32), 10, seed=6).fc.weight)


def test_layer_infos_of_bn_models() -> None:
    model = build_model("resnet20", (3, 32, 32), 10)
    infos = layer_infos(model)
    kinds = [i.kind for i in infos]
    # stem conv (no bias), bn1 weight + bias, ..., fc weight + bias
    assert kinds[:3] == ["conv", "norm", "norm"] and kinds[-2:] == ["fc", "bias"]
    assert kinds.count("conv") == 19 and kinds.count("norm") == 2 * 19 and kinds.count("bias") == 1
    assert sum(i.numel for i in infos) == 269_722


def _batches(shape: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    xa = torch.randn(4, *shape, generator=g)
    xb = 3 * torch.randn(4, *shape, generator=g) + 1  # other statistics
    return xa, xb, torch.tensor([0, 1, 2, 3])


def test_bn_gradients_deterministic_and_independent_of_other_nodes() -> None:
    model = build_model("resnet20", (3, 8, 8), 10, seed=1)
    computer = GradientComputer(model, torch.device("cpu"))
    xa, xb, y = _batches((3, 8, 8))
    params = [p.detach().clone() for p in model.parameters()]
    first = computer.gradient(params, xa, y)  # node A
    computer.gradient(params, xb, y)  # node B moves the running statistics
    again = computer.gradient(params, xa, y)  # node A again: batch statistics only
    assert all(torch.equal(u, v) for u, v in zip(first.grads, again.grads)) and first.loss == again.loss
    fresh = GradientComputer(build_model("resnet20", (3, 8, 8), 10, seed=1), torch.device("cpu"))
    alone = fresh.gradient(params, xa, y)  # a computer that never saw node B
    assert all(torch.equal(u, v) for u, v in zip(first.grads, alone.grads))


def test_bn_running_stats_follow_gradients_not_flops_or_evaluation() -> None:
    model = build_model("resnet20", (3, 8, 8), 10, seed=1)
    computer = GradientComputer(model, torch.device("cpu"))
    xa, xb, y = _batches((3, 8, 8))
    computer.train_flops((4, 3, 8, 8))
    assert model.bn1.running_mean.eq(0).all() and int(model.bn1.num_batches_tracked) == 0
    computer.gradient(None, xa, y, per_sample_sq=True)  # the per-sample pass does not count
    assert int(model.bn1.num_batches_tracked) == 1
    # running mean after one batch: 0.9 * 0 + 0.1 * (batch mean of the stem conv's output)
    with torch.no_grad():
        expected = 0.1 * model.conv1(xa).mean(dim=(0, 2, 3))
    assert torch.allclose(model.bn1.running_mean, expected, atol=1e-6)
    computer.gradient(None, xb, y)
    stats = [b.clone() for b in model.buffers()]
    acc, loss = computer.evaluate(None, xa, y)  # eval mode: running statistics, unchanged
    assert all(torch.equal(u, v) for u, v in zip(stats, model.buffers())) and model.training
    with torch.no_grad():
        expected_loss = torch.nn.functional.cross_entropy(model.eval()(xa), y).item()
    model.train()
    assert loss == pytest.approx(expected_loss, rel=1e-6) and 0.0 <= acc <= 1.0


@pytest.mark.slow
def test_describe_models() -> None:
    infos = {i.name: i for i in describe_models((1, 28, 28), 10)}
    assert list(infos) == list(MODELS)
    assert infos["lenet-caffe"].params == 431_080 and infos["lenet-caffe"].conv_layers == 2
    assert infos["lenet-caffe"].fc_layers == 2 and infos["lenet-caffe"].norm_layers == 0
    # LeNet-5 forward on 28x28: conv1 28*28*6*25 + conv2 10*10*16*150 + fc 400*120 + 120*84 + 84*10
    # = 117,600 + 240,000 + 58,920 = 416,520 MAC; backward: input grads (all but conv1) + weight
    # grads = 2 x forward - conv1's 117,600 -> 3 x 416,520 - 117,600 MAC, 2 FLOP each
    assert infos["lenet5"].train_flops == 2 * (3 * 416_520 - 117_600)
    assert not infos["vgg16"].supported and "32x32" in infos["vgg16"].summary
    assert infos["resnet20"].norm_layers == 19 and infos["resnet20"].params == 269_434
    assert all(i.train_flops > 0 for i in infos.values() if i.supported)


def _tiny_run(tmp_path, name: str, shape: list[int]) -> dict:
    from conftest import ROOT

    from aiotsim.api import run_scenario
    from aiotsim.config import load_scenario

    overrides = [
        f'model.name="{name}"',
        'data.dataset="synthetic"',
        f"data.synthetic_shape={shape}",
        "data.synthetic_train_size=64",
        "data.synthetic_test_size=16",
        "data.batch_size=4",
        "training.lr=0.01",
    ]
    scenario = load_scenario(ROOT / "tests" / "tiny.toml", overrides, iterations=2)
    return run_scenario(scenario, tmp_path / name, device="cpu")


SMALLEST = ("lenet5", "mlp")


@pytest.mark.parametrize("name", [n if n in SMALLEST else pytest.param(n, marks=pytest.mark.slow) for n in MODELS])
def test_two_iteration_run(tmp_path, name: str) -> None:
    summary = _tiny_run(tmp_path, name, [3, 32, 32])
    assert summary["complete"]
    rows = (tmp_path / name / "metrics.csv").read_text().splitlines()
    assert len(rows) == 1 + 2  # header + 2 iterations


def test_flops_of_a_depthwise_conv_count_per_group() -> None:
    # depthwise 3x3 conv, 96 channels, on 16x16 (padding 1), then fc 96*256 -> 2; batch 1:
    #   conv forward 96 x 9 x 256 MAC; its weight gradient the same; no input gradient (the input
    #   needs none); fc forward, weight gradient and input gradient 3 x 96*256*2 MAC; 2 FLOP/MAC
    model = nn.Sequential(nn.Conv2d(96, 96, 3, padding=1, groups=96, bias=False), nn.Flatten(), nn.Linear(96 * 256, 2))
    flops = GradientComputer(model, torch.device("cpu")).train_flops((1, 96, 16, 16))
    assert flops == 2 * (2 * 96 * 9 * 256 + 3 * 96 * 256 * 2)  # torch alone counts the conv part x 96
    # MobileNetV2 on CIFAR: a training step ~ 3 x its forward (torch alone: ~22x)
    mnv2 = build_model("mobilenetv2", (3, 32, 32), 10)
    assert GradientComputer(mnv2, torch.device("cpu")).train_flops((2, 3, 32, 32)) / 2 == pytest.approx(
        3 * 0.176e9, rel=0.02
    )


def test_bn_model_run_is_reproducible(tmp_path) -> None:
    # BN running statistics follow the simulation's (deterministic) order of gradient computations,
    # so the evaluations, which use them, repeat exactly
    first = _tiny_run(tmp_path / "a", "resnet20", [3, 8, 8])
    second = _tiny_run(tmp_path / "b", "resnet20", [3, 8, 8])
    assert first["complete"] and second["complete"]
    for name in ("metrics.csv", "evals.csv"):
        a = (tmp_path / "a" / "resnet20" / name).read_text()
        assert a == (tmp_path / "b" / "resnet20" / name).read_text() and len(a.splitlines()) > 1
