"""Gradients, FLOP counts, compute-time arithmetic, batch streams and device resolution."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from aiotsim.errors import ConfigError, DataError
from aiotsim.learn.compute import BatchStream, ComputeModel, GradientComputer, draw_batches
from aiotsim.learn.devices import HOST_TRAIN_FLOPS, PROFILES, DeviceProfile, get_profile, resolve_device
from aiotsim.learn.models import build_model

CPU = torch.device("cpu")
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _batch(shape: tuple[int, ...], n: int, classes: int = 10, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn((n, *shape), generator=g), torch.randint(0, classes, (n,), generator=g)


# --------------------------------------------------------------------------------- gradients


def test_gradient_equals_plain_backward() -> None:
    model = build_model("lenet5", (1, 28, 28), 10, seed=1)
    x, y = _batch((1, 28, 28), 8)
    ref = build_model("lenet5", (1, 28, 28), 10, seed=1)
    loss = F.cross_entropy(ref(x), y)
    loss.backward()
    result = GradientComputer(model, CPU).gradient(None, x, y)
    assert result.loss == pytest.approx(loss.item(), rel=1e-6)
    assert all(torch.allclose(g, p.grad, atol=1e-6) for g, p in zip(result.grads, ref.parameters()))
    assert result.wall_s > 0 and result.sq_grads is None
    assert all(p.grad is None for p in model.parameters())  # the shared model's .grad untouched


def test_gradient_at_other_params_leaves_the_model_alone() -> None:
    model = build_model("mlp", (1, 8, 8), 10, seed=0)
    before = [p.detach().clone() for p in model.parameters()]
    version = [p.detach().clone() for p in build_model("mlp", (1, 8, 8), 10, seed=5).parameters()]
    x, y = _batch((1, 8, 8), 16)
    result = GradientComputer(model, CPU).gradient(version, x, y)
    ref = build_model("mlp", (1, 8, 8), 10, seed=5)
    F.cross_entropy(ref(x), y).backward()
    assert all(torch.allclose(g, p.grad, atol=1e-6) for g, p in zip(result.grads, ref.parameters()))
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), before))
    assert not any(v.requires_grad for v in version)  # caller's tensors not flagged


def test_per_sample_sq_equals_hand_loop() -> None:
    model = nn.Sequential(nn.Linear(5, 4), nn.Tanh(), nn.Linear(4, 3))
    x, y = _batch((5,), 6, classes=3)
    result = GradientComputer(model, CPU).gradient(None, x, y, per_sample_sq=True)
    expected = [torch.zeros_like(p) for p in model.parameters()]
    for i in range(6):  # one sample at a time
        grads = torch.autograd.grad(F.cross_entropy(model(x[i : i + 1]), y[i : i + 1]), list(model.parameters()))
        for e, g in zip(expected, grads):
            e += g.square() / 6
    assert result.sq_grads is not None
    assert all(torch.allclose(s, e, atol=1e-7) for s, e in zip(result.sq_grads, expected))
    # The mean of per-sample gradients is the batch gradient (mean loss): Jensen, E[g^2] >= E[g]^2.
    assert all(torch.all(s >= g.square() - 1e-7) for s, g in zip(result.sq_grads, result.grads))


def test_evaluate_accuracy_and_loss() -> None:
    model = nn.Sequential(nn.Flatten(), nn.Linear(2, 2, bias=False))
    with torch.no_grad():
        model[1].weight.copy_(torch.eye(2))  # logits = inputs
    x = torch.tensor([[2.0, 0.0], [0.0, 3.0], [1.0, 0.0]])  # predicted classes 0, 1, 0
    y = torch.tensor([0, 1, 1])  # 2 of 3 right
    acc, loss = GradientComputer(model, CPU).evaluate(None, x, y, batch_size=2)
    assert acc == pytest.approx(2 / 3)
    assert loss == pytest.approx(F.cross_entropy(x, y).item(), rel=1e-6)
    other = [torch.tensor([[0.0, 1.0], [1.0, 0.0]])]  # swapped: predictions 1, 0, 1 -> 1 of 3
    assert GradientComputer(model, CPU).evaluate(other, x, y)[0] == pytest.approx(1 / 3)


# -------------------------------------------------------------------------------------- FLOPs


def test_train_flops_linear_hand_formula() -> None:
    # Linear(7 -> 5) -> ReLU -> Linear(5 -> 3), batch B = 4. FlopCounterMode counts 2 FLOP per
    # multiply-add of mm/addmm; the loss and ReLU are not counted.
    #   forward:  2*B*7*5 + 2*B*5*3                       = 280 + 120 = 400
    #   backward: weight grads 2*B*7*5 + 2*B*5*3          = 280 + 120 = 400
    #             input grad of layer 2 only (x needs none) 2*B*5*3   = 120
    #   total 920, not 3 x forward = 1200, because the first layer has no input gradient.
    model = nn.Sequential(nn.Linear(7, 5), nn.ReLU(), nn.Linear(5, 3))
    gc = GradientComputer(model, CPU)
    assert gc.train_flops((4, 7)) == 920
    assert gc.train_flops((8, 7)) == 1840  # linear in B
    # A lone Linear: forward 2*B*i*o + weight grad 2*B*i*o = 4*B*i*o.
    assert GradientComputer(nn.Linear(7, 5), CPU).train_flops((4, 7)) == 4 * 4 * 7 * 5


def test_train_flops_lenet5_hand_count() -> None:
    # Per sample, conv FLOPs = 2 * C_out * H_out * W_out * C_in * k * k:
    #   forward  conv1 2*6*28*28*1*25 = 235,200   conv2 2*16*10*10*6*25 = 480,000
    #            fc1 2*400*120 = 96,000   fc2 2*120*84 = 20,160   fc3 2*84*10 = 1,680   -> 833,040
    #   backward conv1 weight only 235,200; conv2 weight+input 960,000; fc1 192,000;
    #            fc2 40,320; fc3 3,360                                                 -> 1,430,880
    #   total 2,263,920 per sample; x 32 = 72,445,440.
    gc = GradientComputer(build_model("lenet5", (1, 28, 28), 10), CPU)
    assert gc.train_flops((32, 1, 28, 28)) == 72_445_440
    assert gc.train_flops(torch.Size([32, 1, 28, 28])) == 72_445_440  # cached, same value


# ------------------------------------------------------------------------------ compute time


def test_compute_model_arithmetic() -> None:
    prof = DeviceProfile("t", flops_per_s=2e9, measured_scale=5.0, power_active_w=4.0, power_idle_w=1.0, description="")
    measured = ComputeModel("measured", prof, slowdown=2.0)
    assert measured.compute_time(wall_s=0.01, flops=1e9) == pytest.approx(0.01 * 5.0 * 2.0)
    assert measured.codec_time(wall_s=0.002, elements=10, flops_per_element=3.0) == pytest.approx(0.02)
    flops = ComputeModel("flops", prof, slowdown=2.0)
    assert flops.compute_time(wall_s=123.0, flops=1e9) == pytest.approx(1e9 / 2e9 * 2.0)  # wall ignored
    assert flops.codec_time(wall_s=9.0, elements=1_000_000, flops_per_element=4.0) == pytest.approx(4e6 / 2e9 * 2)
    with pytest.raises(ConfigError, match="measured, flops"):
        ComputeModel("cycles", prof)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="slowdown"):
        ComputeModel("flops", prof, slowdown=0.0)


def test_profiles_consistent() -> None:
    assert {"rpi4", "jetson-nano", "host"} <= set(PROFILES)
    for prof in PROFILES.values():
        # Both compute models give the same time for work the host does at its measured rate.
        assert prof.measured_scale * prof.flops_per_s == pytest.approx(HOST_TRAIN_FLOPS)
        assert 0 <= prof.power_idle_w < prof.power_active_w
    assert PROFILES["host"].measured_scale == 1.0
    assert PROFILES["rpi4"].flops_per_s < PROFILES["host"].flops_per_s
    assert get_profile("rpi4") is PROFILES["rpi4"]
    with pytest.raises(ConfigError, match="rpi4, jetson-nano, host"):
        get_profile("pi5")
    with pytest.raises(ConfigError, match="power_idle_w"):
        DeviceProfile("bad", 1e9, 1.0, 1.0, 2.0, "")


# ---------------------------------------------------------------------------------- batches


def _indexed_data(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """x[i] holds i, so a batch tells which samples it contains."""
    x = torch.arange(n, dtype=torch.float32).reshape(n, 1, 1, 1)
    return x, torch.arange(n) % 10


def test_batch_stream_epoch_coverage_across_boundaries() -> None:
    x, y = _indexed_data(50)
    shard = np.array([3, 7, 8, 11, 20, 21, 30, 31, 40, 49], dtype=np.int64)  # n = 10
    stream = BatchStream(x, y, shard, batch_size=4, seed=0, device=CPU)
    drawn = []
    for _ in range(10):  # 40 samples = 4 whole epochs; batches straddle epoch boundaries
        xb, yb = stream.next()
        assert xb.shape == (4, 1, 1, 1) and yb.shape == (4,)
        assert torch.equal(yb, xb.flatten().long() % 10)  # x and y stay paired
        drawn.extend(int(v) for v in xb.flatten())
    for e in range(4):
        assert sorted(drawn[10 * e : 10 * e + 10]) == shard.tolist()  # each epoch a permutation
    assert drawn[:10] != drawn[10:20]  # reshuffled per epoch
    assert stream.epoch == 4


def test_batch_stream_deterministic_and_small_shards() -> None:
    x, y = _indexed_data(30)
    shard = np.arange(5, 25)
    a = BatchStream(x, y, shard, 6, seed=3, device=CPU)
    b = BatchStream(x, y, shard, 6, seed=3, device=CPU)
    c = BatchStream(x, y, shard, 6, seed=4, device=CPU)
    seq_a = [a.next()[0] for _ in range(7)]
    assert all(torch.equal(p, b.next()[0]) for p in seq_a)
    assert not all(torch.equal(p, c.next()[0]) for p in seq_a)
    tiny = BatchStream(x, y, np.array([2, 9]), 32, seed=0, device=CPU)  # shard smaller than batch
    assert tiny.batch_size == 2 and sorted(tiny.next()[0].flatten().tolist()) == [2.0, 9.0]
    with pytest.raises(DataError):
        BatchStream(x, y, np.array([], dtype=np.int64), 4, 0, CPU)
    with pytest.raises(DataError):
        BatchStream(x, y, np.array([30]), 4, 0, CPU)


def test_batch_stream_shares_the_data_and_draws_as_from_a_copy() -> None:
    x, y = _indexed_data(40)
    shard = np.array([39, 2, 17, 17, 5, 30, 11], dtype=np.int64)  # unordered, with a repeat
    shared = BatchStream(x, y, shard, 3, seed=8, device=CPU)
    # the same shard copied out as a data set of its own, streamed over all its rows
    copied = BatchStream(x[shard], y[shard], np.arange(len(shard)), 3, seed=8, device=CPU)
    assert shared.x.data_ptr() == x.data_ptr() and shared.y.data_ptr() == y.data_ptr()  # no copy
    for _ in range(9):  # 27 samples: several epochs, batches across their boundaries
        (xa, ya), (xb, yb) = shared.next(), copied.next()
        assert torch.equal(xa, xb) and torch.equal(ya, yb)
        assert set(xa.flatten().long().tolist()) <= set(shard.tolist())


def test_draw_batches_equals_each_stream_drawn_and_stacked() -> None:
    x, y = _indexed_data(60)
    shards = [np.array([3, 7, 8, 11, 20]), np.array([0, 59, 1, 2, 30, 31]), np.array([41, 42, 43, 44, 45, 46, 47])]

    def streams() -> list[BatchStream]:  # batch 4 of 5 and 6 samples: most draws cross an epoch
        return [BatchStream(x, y, s, 4, seed=10 + k, device=CPU) for k, s in enumerate(shards[:2])] + [
            BatchStream(x, y, shards[2], 3, seed=12, device=CPU)  # another batch size: drawn alone
        ]

    together, apart = streams(), streams()
    for _ in range(5):  # several epochs; the pair is gathered at once, then compared stream by stream
        xs, ys = draw_batches(together[:2])
        assert xs.shape == (2, 4, 1, 1, 1) and ys.shape == (2, 4)
        for k in range(2):
            xk, yk = apart[k].next()
            assert torch.equal(xs[k], xk) and torch.equal(ys[k], yk)
        assert torch.equal(draw_batches(together[2:])[0][0], apart[2].next()[0])
    assert [s.epoch for s in together] == [s.epoch for s in apart]


def test_draw_batches_falls_back_to_each_stream_off_a_shared_set() -> None:
    x, y = _indexed_data(30)
    shift = lambda t, g: t + 100  # noqa: E731  (a transform: drawn stream by stream)
    for pair in (
        [BatchStream(x, y, np.arange(5), 2, 0, CPU), BatchStream(x.clone(), y, np.arange(5), 2, 1, CPU)],
        [BatchStream(x, y, np.arange(5), 2, 0, CPU), BatchStream(x, y, np.arange(5), 2, 1, CPU, transform=shift)],
    ):
        ref = [BatchStream(s.x, s.y, np.arange(5), 2, k, CPU, transform=s.transform) for k, s in enumerate(pair)]
        for _ in range(3):
            xs, ys = draw_batches(pair)
            drawn = [r.next() for r in ref]
            assert all(torch.equal(xs[k], xk) and torch.equal(ys[k], yk) for k, (xk, yk) in enumerate(drawn))
    assert bool((xs[1] >= 100).all()) and bool((xs[0] < 30).all())  # the transform ran on its stream only


# ---------------------------------------------------------------------------------- devices


def test_resolve_device_cpu_and_auto() -> None:
    assert resolve_device("cpu") == CPU
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(ConfigError, match="auto, cpu, cuda"):
        resolve_device("tpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only message")
def test_resolve_cuda_without_gpu_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="CUDA is not available"):
        resolve_device("cuda")


@needs_cuda
def test_cuda_gradient_matches_cpu_and_stream_lives_on_gpu() -> None:
    gpu = resolve_device("cuda")
    cpu_model = build_model("lenet5", (1, 28, 28), 10, seed=2)
    gpu_model = build_model("lenet5", (1, 28, 28), 10, seed=2).to(gpu)
    x, y = _batch((1, 28, 28), 16)
    ref = GradientComputer(cpu_model, CPU).gradient(None, x, y)
    out = GradientComputer(gpu_model, gpu).gradient(None, x.to(gpu), y.to(gpu), per_sample_sq=True)
    assert out.loss == pytest.approx(ref.loss, rel=1e-4)
    assert all(torch.allclose(g.cpu(), r, atol=1e-4) for g, r in zip(out.grads, ref.grads))
    assert all(g.device.type == "cuda" for g in out.grads + (out.sq_grads or []))
    stream = BatchStream(x, y, np.arange(16), 4, seed=0, device=gpu)
    assert stream.x.device.type == "cuda" and stream.next()[0].device.type == "cuda"
