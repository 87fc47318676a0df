"""Batched node gradients: each node's gradient, loss and BN running-statistics update equal the
looped path's (every built-in model), chunking, the memory budget, the option, and whole runs."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch

from aiotsim.config import load_scenario, scenario_from_dict
from aiotsim.errors import ConfigError
from aiotsim.learn import batched as batched_mod
from aiotsim.learn.batched import BatchedGradients, node_batcher, use_batched
from aiotsim.learn.compute import GradientComputer
from aiotsim.learn.models import MODELS, build_model, meta_model, min_input_size
from aiotsim.results.fingerprint import fingerprint_run_dir
from aiotsim.sim.runner import run_cluster
from aiotsim.sim.world import Cluster
from tests.test_checkpoint import killed_and_resumed
from tests.test_strategies import MemorySink

CPU = torch.device("cpu")
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
# models whose three-node check takes more than a few seconds on the 2-core CPU
IMAGENET_STYLE = {"resnet18", "resnet50", "mobilenetv2"}
SLOW_MODELS = {"resnet50", "vgg16", "resnet56", "alexnet", "resnet18", "mobilenetv2"}


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _inputs(name: str, nodes: int, batch: int, seed: int = 0) -> tuple[tuple[int, ...], torch.Tensor, torch.Tensor]:
    # ImageNet-style models shrink 32x: below 32x32 their last BN layers normalize a 1x1 map over
    # a handful of values, so ill-conditioned that rounding alone moves gradients by percent
    side = max(min_input_size(name), 32 if name in IMAGENET_STYLE else 8)
    shape = (3, side, side)
    g = torch.Generator().manual_seed(seed)
    return shape, torch.randn((nodes, batch, *shape), generator=g), torch.randint(0, 10, (nodes, batch), generator=g)


def _assert_grads_close(
    ref: list[torch.Tensor], got: list[torch.Tensor], rtol: float = 1e-4, atol: float = 1e-5
) -> None:
    # tolerance relative to the node's largest gradient entry: a conv bias before BN has a
    # gradient that is zero up to rounding, so a per-tensor relative check would compare noise
    scale = max(float(g.abs().max()) for g in ref)
    for a, b in zip(ref, got):
        assert a.shape == b.shape
        torch.testing.assert_close(b, a, rtol=rtol, atol=atol * scale)


def _check_model(name: str, dtype: torch.dtype, rtol: float, atol: float) -> None:
    """Three nodes' gradients at a version other than the model's own (as a partial round's
    snapshot), batched in two chunks, against the looped path: gradients, losses, BN updates."""
    nodes, batch = 3, 4 if name in SLOW_MODELS else 8
    shape, xs, ys = _inputs(name, nodes, batch)
    xs = xs.to(dtype)
    looped_model = build_model(name, shape, 10, seed=1).to(dtype)
    batched_model = copy.deepcopy(looped_model)
    noise = torch.Generator().manual_seed(7)
    version = [
        p.detach() + 0.01 * torch.randn(p.shape, generator=noise, dtype=dtype) for p in looped_model.parameters()
    ]
    looped = GradientComputer(looped_model, CPU)
    ref = [looped.gradient(version, xs[i], ys[i]) for i in range(nodes)]
    out = BatchedGradients(GradientComputer(batched_model, CPU), chunk=2).gradients(version, xs, ys)  # 2 chunks
    got = [g.take() for g in out]
    for r, b in zip(ref, got):
        _assert_grads_close(r.grads, b.grads, rtol, atol)
        assert b.loss == pytest.approx(r.loss, rel=rtol)
        assert b.wall_s > 0
    # BN running statistics: the same three updates, in the same order, as the looped forwards
    for (key, a), (_, b) in zip(looped_model.state_dict().items(), batched_model.state_dict().items()):
        torch.testing.assert_close(b, a, rtol=rtol, atol=atol, msg=key)
    for p, q in zip(looped_model.parameters(), batched_model.parameters()):
        assert torch.equal(p, q)  # parameters never written


@pytest.mark.parametrize("name", [pytest.param(m, marks=pytest.mark.slow) if m in SLOW_MODELS else m for m in MODELS])
def test_every_model_batched_equals_looped(name: str) -> None:
    """In float64: the two paths add the same terms in different orders, and in fp32 that
    rounding can flip a max-pool's argmax or a ReLU at 0 in a deep net (vgg16, resnet50), which
    routes a gradient elsewhere; in fp64 both paths agree with the exact gradient to ~1e-12."""
    _check_model(name, torch.float64, rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("name", ["lenet5", "mlp", "resnet20"])
def test_small_models_in_float32(name: str) -> None:
    _check_model(name, torch.float32, rtol=1e-4, atol=1e-5)


def test_running_stats_follow_the_order_of_take() -> None:
    """Nodes taken in reverse order update the running statistics as looped forwards in that order."""
    shape, xs, ys = _inputs("resnet20", 3, 4, seed=2)
    a = build_model("resnet20", shape, 10, seed=0)
    b = copy.deepcopy(a)
    looped = GradientComputer(a, CPU)
    for i in (2, 1, 0):
        looped.gradient(None, xs[i], ys[i])
    out = BatchedGradients(GradientComputer(b, CPU)).gradients(None, xs, ys)
    for i in (2, 1, 0):
        out[i].take()
    out[0].take()  # a second take applies nothing more
    bn = a.bn1
    assert int(bn.num_batches_tracked) == 3
    # hand-checked first layer: the reverse-order exponential average of the three batches' stats
    for (key, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items()):
        torch.testing.assert_close(y, x, rtol=1e-5, atol=1e-6, msg=key)
    forward_order = copy.deepcopy(build_model("resnet20", shape, 10, seed=0))
    fo = GradientComputer(forward_order, CPU)
    for i in (0, 1, 2):
        fo.gradient(None, xs[i], ys[i])
    assert not torch.allclose(forward_order.bn1.running_mean, b.bn1.running_mean, atol=1e-7)  # order matters


def test_momentum_none_is_a_cumulative_average() -> None:
    shape, xs, ys = _inputs("resnet20", 2, 4, seed=3)
    a = build_model("resnet20", shape, 10, seed=0)
    for m in a.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.momentum = None
    b = copy.deepcopy(a)
    looped = GradientComputer(a, CPU)
    for i in range(2):
        looped.gradient(None, xs[i], ys[i])
    for g in BatchedGradients(GradientComputer(b, CPU)).gradients(None, xs, ys):
        g.take()
    torch.testing.assert_close(b.bn1.running_var, a.bn1.running_var, rtol=1e-5, atol=1e-6)
    # the cumulative average of two batches is their plain mean
    x0 = xs[:, :, :].reshape(2, 4, *shape)
    conv = torch.nn.functional.conv2d(x0.reshape(8, *shape), a.conv1.weight, a.conv1.bias, padding=1)
    per_node = conv.reshape(2, 4, *conv.shape[1:]).mean(dim=(1, 3, 4))  # [2, C]
    torch.testing.assert_close(b.bn1.running_mean, per_node.mean(dim=0), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("name", ["lenet5", "mlp", "resnet20"])
def test_per_sample_squares_equal_each_nodes_own(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Gradient Variance's input, batched: each node's batch mean of squared per-sample gradients
    equals the looped computer's for that node up to float rounding (a sample's gradient is its
    own batch of one, whatever is mapped beside it; a conv's batched backward may sum in another
    order), also where the nodes' samples are mapped a few nodes at a time (a per-sample budget of
    2 nodes' worth: calls of 2, 2, 1 nodes); the gradients themselves are the pass's as without it."""
    nodes, batch = 5, 3
    shape, xs, ys = _inputs(name, nodes, batch, seed=2)
    model = build_model(name, shape, 10, seed=1)
    params = [p.detach() for p in model.parameters()]
    param_bytes = sum(p.numel() * 4 for p in params)
    monkeypatch.setattr(batched_mod, "PER_SAMPLE_BUDGET_BYTES", 2 * batch * param_bytes + 1)
    assert batched_mod.per_sample_nodes(batch, param_bytes) == 2
    computer = GradientComputer(model, CPU)
    ref = [computer.gradient(None, xs[i], ys[i], per_sample_sq=True) for i in range(nodes)]
    bg = BatchedGradients(GradientComputer(model, CPU), chunk=3)  # passes of 3 and 2 nodes
    plain = [g.take() for g in bg.gradients(None, xs, ys)]
    got = [g.take() for g in bg.gradients(None, xs, ys, per_sample_sq=True)]
    for r, p, g in zip(ref, plain, got):
        assert p.sq_grads is None and g.sq_grads is not None
        assert len(g.sq_grads) == len(r.sq_grads)
        for a, b, grad in zip(r.sq_grads, g.sq_grads, g.grads):
            assert b.shape == a.shape == grad.shape
            torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6 * float(a.abs().max()))
        assert all(torch.equal(a, b) for a, b in zip(p.grads, g.grads))


def test_per_sample_squares_by_hand() -> None:
    """A linear model's per-sample gradient is ``(softmax - onehot) x^T``: the batched squares of
    two nodes of two samples each are the means of those outer products squared, by hand."""
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4, 3, bias=False))
    with torch.no_grad():
        model[1].weight.copy_(torch.tensor([[0.5, -1.0, 0.0, 2.0], [1.0, 0.0, -0.5, 0.0], [0.0, 1.5, 1.0, -1.0]]))
    g = torch.Generator().manual_seed(5)
    xs, ys = torch.randn((2, 2, 1, 2, 2), generator=g), torch.tensor([[0, 2], [1, 1]])
    sq = BatchedGradients(GradientComputer(model, CPU)).per_sample_sq(list(model.parameters()), xs, ys)
    w = model[1].weight.detach()
    for node in range(2):
        outer = []
        for k in range(2):
            x = xs[node, k].reshape(4)
            err = torch.softmax(w @ x, dim=0) - torch.nn.functional.one_hot(ys[node, k], 3).float()
            outer.append(torch.outer(err, x))
        expected = (outer[0].square() + outer[1].square()) / 2
        torch.testing.assert_close(sq[0][node], expected, rtol=1e-6, atol=1e-7)


def test_chunk_size_from_the_memory_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    model = build_model("mlp", (1, 8, 8), 10, seed=0)
    bg = BatchedGradients(GradientComputer(model, CPU))
    # mlp: fc 200 -> fc 200 -> fc 10 outputs, fp32 = 1,640 B per sample
    assert bg.activation_bytes((1, 8, 8)) == (200 + 200 + 10) * 4
    params = sum(p.numel() for p in model.parameters()) * 4
    per_node = batched_mod.ACTIVATION_FACTOR * 16 * 1640 + batched_mod.PARAM_FACTOR * params
    monkeypatch.setattr(batched_mod, "CPU_BUDGET_BYTES", 5 * per_node + 1)
    assert bg.chunk_size(100, (16, 1, 8, 8)) == 5
    assert bg.chunk_size(3, (16, 1, 8, 8)) == 3  # never more than the nodes
    monkeypatch.setattr(batched_mod, "CPU_BUDGET_BYTES", 1)
    assert bg.chunk_size(100, (16, 1, 8, 8)) == 1  # at least one
    assert BatchedGradients(bg.computer, chunk=7).chunk_size(100, (16, 1, 8, 8)) == 7


def test_pass_nodes_chunk_first_budget_only_when_needed() -> None:
    def unused() -> int:
        raise AssertionError("the budget is not measured when a chunk is set")

    assert batched_mod.pass_nodes(100, 7, unused) == 7
    assert batched_mod.pass_nodes(3, 7, unused) == 3  # never more than the nodes
    assert batched_mod.pass_nodes(100, 0, lambda: 40) == 40
    assert batched_mod.pass_nodes(100, 0, lambda: 0) == 1  # at least one


@pytest.mark.parametrize(("name", "squares"), [("lenet5", False), ("mlp", True)])
@pytest.mark.parametrize("at_version", [False, True])
def test_a_looped_pass_gives_each_nodes_own_gradient_bit_for_bit(name: str, squares: bool, at_version: bool) -> None:
    """From ``loop_from`` samples per node a pass runs its nodes one by one: the looped computer's
    gradients, losses and squares exactly, as rows of ``[nodes, *shape]`` blocks per chunk (chunk
    2 of 5 nodes: blocks of 2, 2, 1)."""
    nodes, batch = 5, 16
    shape = (1, 28, 28) if name == "lenet5" else (1, 8, 8)
    g = torch.Generator().manual_seed(3)
    xs, ys = torch.randn((nodes, batch, *shape), generator=g), torch.randint(0, 10, (nodes, batch), generator=g)
    model = build_model(name, shape, 10, seed=2)
    version = [p.detach() + 0.01 for p in model.parameters()] if at_version else None
    ref = GradientComputer(copy.deepcopy(model), CPU)
    bg = BatchedGradients(GradientComputer(model, CPU), chunk=2, loop_from=batch)
    assert bg.loops(batch) and not bg.loops(batch - 1)
    out = bg.gradients(version, xs, ys, per_sample_sq=squares)
    assert [g.rows[0].shape[0] for g in out] == [2, 2, 2, 2, 1] and [g.row for g in out] == [0, 1, 0, 1, 0]
    for k, got in enumerate(out):
        want = ref.gradient(version, xs[k], ys[k], per_sample_sq=squares)
        res = got.take()
        assert res.loss == want.loss
        assert all(torch.equal(a, b) for a, b in zip(res.grads, want.grads, strict=True))
        for j, row in enumerate(res.grads):  # a view of its block's row, not a copy
            assert row.data_ptr() == got.rows[j][got.row].data_ptr()
        if squares:
            assert want.sq_grads is not None and res.sq_grads is not None
            assert all(torch.equal(a, b) for a, b in zip(res.sq_grads, want.sq_grads, strict=True))
        else:
            assert res.sq_grads is None and got.sq_rows == []


def test_a_batch_norm_model_is_always_mapped() -> None:
    """A looped pass would update BN running statistics at dispatch, in node order, not at each
    node's turn: a BN model's passes stay mapped whatever ``loop_from`` says."""
    bn = BatchedGradients(GradientComputer(build_model("resnet20", (3, 8, 8), 10), CPU), loop_from=1)
    assert bn.loop_from == 0 and not bn.loops(64)


def test_option() -> None:
    assert use_batched(True, CPU) and not use_batched(False, CPU)
    assert not use_batched("auto", CPU)  # no model to judge: looped
    assert use_batched("auto", torch.device("cuda"))
    with pytest.raises(ConfigError, match="'auto', true or false"):
        use_batched("yes", CPU)
    computer = GradientComputer(build_model("mlp", (1, 8, 8), 10), CPU)
    assert node_batcher(computer, "auto") is None and node_batcher(computer, True) is not None
    auto = node_batcher(computer, "auto", nodes=100, batch_shape=(16, 1, 8, 8))
    assert auto is not None and auto.loop_from == batched_mod.CPU_LOOPED_PASS_BATCH and auto.maps
    assert auto.handles(8) and auto.handles(16) and not auto.loops(8) and auto.loops(16)
    forced = node_batcher(computer, True)  # nodes.batched = true always maps
    assert forced is not None and forced.loop_from == 0 and forced.maps and not forced.loops(64)
    # below a fleet: passes filled node by node from 16 samples per node, smaller batches looped
    small = node_batcher(computer, "auto", chunk=5, nodes=99, batch_shape=(16, 1, 8, 8))
    assert small is not None and not small.maps and small.handles(16) and not small.handles(15)
    with pytest.raises(ValueError, match="left to the looped path"):
        small.gradients(None, torch.zeros(2, 15, 1, 8, 8), torch.zeros(2, 15, dtype=torch.long))
    assert node_batcher(computer, "auto", chunk=5, nodes=99, batch_shape=(15, 1, 8, 8)) is None
    # a "measured" run below a fleet stays looped (its encode times are each node's own)
    assert node_batcher(computer, "auto", nodes=99, batch_shape=(16, 1, 8, 8), fill_small=False) is None
    fleet = node_batcher(computer, "auto", nodes=100, batch_shape=(16, 1, 8, 8), fill_small=False)
    assert fleet is not None and fleet.maps and fleet.loops(16)


def _auto_on_cpu(name: str, nodes: int, shape: tuple[int, ...] = (3, 32, 32), batch: int = 32) -> bool:
    """Whether ``auto`` maps the passes of this fleet on the CPU."""
    return batched_mod.cpu_batches(meta_model(name, shape, 10), nodes, (batch, *shape))


def test_auto_on_the_cpu_batches_fleets_of_batch_norm_free_models() -> None:
    """``auto`` on the CPU: batched from CPU_MIN_NODES nodes for the models measured faster
    batched (no batch norm, a pass of at least CPU_MIN_CHUNK nodes); looped for every model with
    batch norm, for layer kinds never measured, and for alexnet, whose 32-sample pass is 117 MB
    per node, so the 128 MiB budget holds one node per pass (measured 1.21x the looped time)."""
    mnist = (1, 28, 28)
    for name in ("lenet5", "mlp", "lenet-caffe"):
        assert _auto_on_cpu(name, batched_mod.CPU_MIN_NODES, mnist), name
        assert not _auto_on_cpu(name, batched_mod.CPU_MIN_NODES - 1, mnist), name
    for name in MODELS:
        modules = meta_model(name, (3, 64, 64), 10).modules()
        with_bn = any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in modules)
        if with_bn or name == "alexnet":
            assert not _auto_on_cpu(name, 10_000, (3, 64, 64) if name in IMAGENET_STYLE else (3, 32, 32)), name
    dropout = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 10), torch.nn.Dropout(0.1))
    assert not use_batched("auto", CPU, dropout, 1000, (16, 1, 8, 8))  # Flatten, Dropout: not measured


def test_auto_on_the_cpu_fills_passes_of_large_batches_at_any_fleet_size() -> None:
    """Passes filled node by node give the looped values, so ``auto`` makes them for any fleet of a
    model of CPU_LAYER_KINDS from CPU_LOOPED_PASS_BATCH samples per node; never for batch norm or
    random layers (their statistics and draws would follow dispatch order, not each node's turn)."""
    mnist, b = (1, 28, 28), batched_mod.CPU_LOOPED_PASS_BATCH
    for name in ("lenet5", "mlp", "lenet-caffe"):
        model = meta_model(name, mnist, 10)
        assert batched_mod.cpu_fills(model, (b, *mnist)) and use_batched("auto", CPU, model, 2, (b, *mnist)), name
        assert not batched_mod.cpu_fills(model, (b - 1, *mnist)), name
        assert not use_batched("auto", CPU, model, 2, (b - 1, *mnist)), name
    for name in ("resnet20", "mobilenetv2"):
        assert not batched_mod.cpu_fills(meta_model(name, (3, 32, 32), 10), (64, 3, 32, 32)), name
    dropout = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 10), torch.nn.Dropout(0.1))
    assert not batched_mod.cpu_fills(dropout, (64, 1, 8, 8))


def test_auto_on_the_cpu_needs_min_chunk_nodes_per_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pass bytes by hand (mlp on 1x8x8 at batch 16): the budget must hold CPU_MIN_CHUNK of them."""
    model = build_model("mlp", (1, 8, 8), 10, seed=0)
    params = sum(p.numel() for p in model.parameters()) * 4
    per_node = batched_mod.ACTIVATION_FACTOR * 16 * (200 + 200 + 10) * 4 + batched_mod.PARAM_FACTOR * params
    assert batched_mod.node_pass_bytes(model, (16, 1, 8, 8)) == per_node
    monkeypatch.setattr(batched_mod, "CPU_BUDGET_BYTES", batched_mod.CPU_MIN_CHUNK * per_node)
    assert batched_mod.cpu_batches(model, 100, (16, 1, 8, 8))
    monkeypatch.setattr(batched_mod, "CPU_BUDGET_BYTES", batched_mod.CPU_MIN_CHUNK * per_node - 1)
    assert not batched_mod.cpu_batches(model, 100, (16, 1, 8, 8))
    with pytest.raises(ConfigError, match=r"nodes\.batched: must be 'auto', true or false, got 'yes'"):
        _scenario("sync", "none", batched="yes")
    with pytest.raises(ConfigError, match=r"nodes\.batch_chunk: must be in \[0"):
        _scenario("sync", "none", batch_chunk=-1)


# ---- whole runs ------------------------------------------------------------------------------
def _scenario(mode: str, codec: str, model: str = "mlp", **nodes: Any):
    data: dict[str, Any] = {"dataset": "digits", "batch_size": 16}
    if model != "mlp":
        data = {"dataset": "synthetic", "batch_size": 8, "synthetic_shape": [3, 8, 8], "synthetic_train_size": 400}
    return scenario_from_dict(
        {
            "scenario": {"name": "b", "seed": 4, "iterations": 6},
            "data": data,
            "model": {"name": model},
            "training": {"lr": 0.05, "momentum": 0.9, "momentum_at": "nodes", "eval_every": 3, "mode": mode},
            "compressor": {"name": codec},
            "nodes": {"count": 4, "device": "rpi4", "compute_model": "flops", **nodes},
            "network": {"uplink_mbps": 1.0, "downlink_mbps": 1.0, "latency_ms": 10.0, "server_mbps": 100.0},
        }
    )


def _run(sc, monkeypatch: pytest.MonkeyPatch | None = None, device: str = "cpu") -> tuple[Cluster, MemorySink, int]:
    cluster = Cluster(sc, device=device)
    calls = [0]
    if cluster.learning.batched is not None:
        inner = cluster.learning.batched.gradients

        def counted(*args: Any, **kwargs: Any) -> Any:
            out = inner(*args, **kwargs)
            calls[0] += len(out)
            return out

        cluster.learning.batched.gradients = counted  # type: ignore[method-assign]
    sink = MemorySink()
    run_cluster(cluster, sink)
    return cluster, sink, calls[0]


@pytest.mark.parametrize(
    ("mode", "codec", "model"),
    [
        ("sync", "none", "mlp"),
        ("sync", "topk", "mlp"),
        ("partial", "topk", "mlp"),
        ("sync", "none", "resnet20"),
        ("sync", "variance", "mlp"),
        ("partial", "variance", "mlp"),
    ],
)
def test_whole_run_batched_matches_looped(mode: str, codec: str, model: str) -> None:
    looped, lsink, lcalls = _run(_scenario(mode, codec, model, batched=False))
    batched, bsink, bcalls = _run(_scenario(mode, codec, model, batched=True, batch_chunk=3))
    assert lcalls == 0
    if mode == "sync":
        assert bcalls == 4 * 6  # every node's gradient of every round
    else:  # partial: rounds of the idle nodes (>= 2 at once); a lone late node runs looped
        assert 0 < bcalls < 4 * 6
    assert len(lsink.rows) == len(bsink.rows) == 6
    for a, b in zip(lsink.rows, bsink.rows):
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-3)
        assert b["sim_time_s"] == pytest.approx(a["sim_time_s"], rel=1e-9)  # flops: timing unchanged
        if codec == "none":
            assert b["bytes_up"] == a["bytes_up"]
    # state tolerance: float rounding differs between the passes and six momentum steps amplify it
    # (resnet20 on noise: worst tensor, a BN bias, 1.5e-3 relative); a wrong node, batch or BN
    # update moves whole tensors by O(1)
    ref, got = looped.learning.model.state_dict(), batched.learning.model.state_dict()
    for key, p in ref.items():
        q = got[key].float()
        assert float((q - p.float()).norm()) <= 1e-2 * float(p.float().norm()) + 1e-6, key
    flat = [torch.cat([t.float().reshape(-1) for t in sd.values()]) for sd in (ref, got)]
    assert float((flat[1] - flat[0]).norm()) <= 1e-3 * float(flat[0].norm())
    for a, b in zip(lsink.evals, bsink.evals):
        assert b["accuracy"] == pytest.approx(a["accuracy"], abs=0.02)
    for cluster in (looped, batched):  # Gradient Variance's squares are each encode's input, not kept
        assert all(s.sq_grad is None for st in cluster.nodes for s in st.local.states)


@pytest.mark.parametrize("mode", ["sync", "partial"])
def test_below_a_fleet_auto_fills_passes_with_the_looped_results(mode: str) -> None:
    """Four nodes at batch 16: ``auto`` fills passes node by node (every gradient of a sync round
    at dispatch), row for row and eval for eval the looped run's; at batch 8 it runs looped."""
    looped, lsink, lcalls = _run(_scenario(mode, "topk", batched=False))
    auto, asink, acalls = _run(_scenario(mode, "topk"))
    assert lcalls == 0 and (acalls == 4 * 6 if mode == "sync" else acalls > 0)
    assert asink.rows == lsink.rows and asink.evals == lsink.evals
    for p, q in zip(looped.learning.model.parameters(), auto.learning.model.parameters()):
        assert torch.equal(p, q)
    _, _, calls = _run(_scenario(mode, "topk").replace(**{"data.batch_size": 8}))
    assert calls == 0
    _, _, calls = _run(_scenario(mode, "topk").replace(**{"nodes.compute_model": "measured"}))
    assert calls == 0  # measured: a node's own encode time, so looped below a fleet


@pytest.mark.parametrize("batch", [8, batched_mod.CPU_LOOPED_PASS_BATCH])
def test_auto_batches_a_cpu_fleet(batch: int) -> None:
    """From CPU_MIN_NODES nodes ``auto`` runs the batched path on the CPU (mlp: batch-norm free):
    below CPU_LOOPED_PASS_BATCH samples per node mapped passes, row for row what ``true`` gives
    (one node fewer: looped); from there passes filled node by node, row for row what ``false``
    gives (one node fewer: the same)."""
    # each node's own shard of `batch` samples, so that every batch has `batch` samples
    fleet = {"scenario.iterations": 2, "data.batch_size": batch, "data.samples_per_node": batch}
    n = batched_mod.CPU_MIN_NODES
    _, asink, acalls = _run(_scenario("sync", "topk", count=n).replace(**fleet))
    same = {"batched": True} if batch < batched_mod.CPU_LOOPED_PASS_BATCH else {"batched": False}
    _, ref, rcalls = _run(_scenario("sync", "topk", count=n, **same).replace(**fleet))
    assert acalls == n * 2 and rcalls == (n * 2 if same["batched"] else 0)
    assert asink.rows == ref.rows and asink.evals == ref.evals
    _, _, calls = _run(_scenario("sync", "topk", count=n - 1).replace(**fleet))
    assert calls == (0 if same["batched"] else (n - 1) * 2)


def test_a_sync_round_lets_each_pass_go_once_encoded() -> None:
    """A round computes a pass at a time (batch_chunk 3 of 7 nodes: 3, 3, 1), encodes it and lets
    its gradients go before the next pass, so a fleet holds one pass's gradients, not every
    node's; the run equals the same batched run encoded at each node's turn (test below)."""
    cluster = Cluster(_scenario("sync", "topk", count=7, batched=True, batch_chunk=3), device="cpu")
    assert cluster.learning.batched is not None
    inner, seen = cluster.learning.batched.gradients, []

    def spy(params: Any, xs: torch.Tensor, ys: torch.Tensor, **kwargs: Any) -> Any:
        # a parked result's gradient views and its pass's outputs (either pins the pass's memory)
        held = [len(p.grads) + len(p.rows) for st in cluster.nodes if (p := st.local.pending) is not None]
        seen.append((int(xs.shape[0]), held))
        return inner(params, xs, ys)

    cluster.learning.batched.gradients = spy  # type: ignore[method-assign]
    run_cluster(cluster, MemorySink())
    assert [n for n, _ in seen] == [3, 3, 1] * 6
    assert [len(held) for _, held in seen[:3]] == [0, 3, 6]  # earlier passes' nodes wait to send ...
    assert all(size == 0 for _, held in seen for size in held)  # ... holding payloads, no gradient or pass


@needs_cuda
def test_batched_on_cuda_matches_cpu_looped() -> None:
    shape, xs, ys = _inputs("resnet20", 4, 4)
    model = build_model("resnet20", shape, 10, seed=1)
    cpu = GradientComputer(copy.deepcopy(model), CPU)
    ref = [cpu.gradient(None, xs[i], ys[i]) for i in range(4)]
    dev = torch.device("cuda")
    gpu_model = copy.deepcopy(model).to(dev)
    out = BatchedGradients(GradientComputer(gpu_model, dev)).gradients(None, xs.to(dev), ys.to(dev))
    for r, g in zip(ref, out):
        res = g.take()
        assert all(t.device.type == "cuda" for t in res.grads)
        _assert_grads_close(r.grads, [t.cpu() for t in res.grads])


@needs_cuda
@pytest.mark.parametrize("codec", ["none", "topk"])
def test_cuda_pass_momentum_equals_each_node_stepping_at_its_turn(codec: str, monkeypatch) -> None:
    """On a GPU a pass's node momentum is stepped as blocks of the device's own (2 launches per
    pass, not 2 per node), with the same rows and velocities as each node stepping and encoding
    at its turn."""
    import aiotsim.sim.batching as batching

    inner, whole = batching.step_pass_velocity, []

    def spy(*args: Any) -> Any:
        out = inner(*args)
        whole.append(out is not None and all(b.is_cuda for b in out))
        return out

    monkeypatch.setattr(batching, "step_pass_velocity", spy)
    sc = _scenario("sync", codec, batched=True)
    blocks, bsink, _ = _run(sc, device="cuda")
    assert whole == [True] * 6
    monkeypatch.setattr(batching, "encode_group", lambda *a: None)
    at_turn, tsink, _ = _run(sc, device="cuda")
    assert bsink.rows == tsink.rows
    for a, b in zip(blocks.nodes, at_turn.nodes):
        assert all(torch.equal(va, vb) for va, vb in zip(a.local.velocity, b.local.velocity, strict=True))


def test_nodes_with_a_smaller_batch_run_looped() -> None:
    """A shard smaller than batch_size gives its node a shorter batch: nodes are grouped by batch
    size and a group of one runs the looped path; the run still matches the looped run."""
    groups = {"count": 3, "group": [{"count": 2}, {"count": 1, "share": 0.005}]}
    sc_looped = _scenario("sync", "topk", **groups, batched=False)
    looped, lsink, _ = _run(sc_looped)
    batched, bsink, calls = _run(_scenario("sync", "topk", **groups, batched=True))
    sizes = [st.local.stream.batch_size for st in batched.nodes]
    assert sizes[0] == sizes[1] == 16 and sizes[2] < 16  # the small shard's batch is shorter
    assert calls == 2 * 6  # nodes 0 and 1 in every round, node 2 never
    for a, b in zip(lsink.rows, bsink.rows):
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-4)


def test_hierarchical_topology_batched_matches_looped() -> None:
    """Gateways average and re-encode their members' uploads; qsgd draws from each node's own
    generator, so batching must not change any draw."""
    net = {"network.topology": "hierarchical", "network.gateways": 2}
    looped, lsink, _ = _run(_scenario("sync", "qsgd", batched=False).replace(**net))
    batched, bsink, calls = _run(_scenario("sync", "qsgd", batched=True).replace(**net))
    assert calls == 4 * 6
    for a, b in zip(lsink.rows, bsink.rows):
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-4)
        assert b["sim_time_s"] == pytest.approx(a["sim_time_s"], rel=1e-9)


@pytest.mark.parametrize(
    "over",
    [
        ["compressor.name=topk", "training.momentum=0.9", "training.momentum_at=nodes", "scenario.iterations=6"],
        ["nodes.count=4", "training.mode=partial", "training.partial_k=4", "nodes.dropout_prob=0.3",
         "nodes.straggler_mode=transient", "nodes.straggler_fraction=0.25", "nodes.straggler_factor=3.0",
         "compressor.name=2bit", "scenario.iterations=8"],
    ],
    ids=["sync-topk", "partial-dropouts"],
)  # fmt: skip
def test_batched_run_resumes_exactly(over: list[str], tiny_scenario, tmp_path) -> None:
    """A checkpoint is taken with no node at work, so no batched gradient is pending in it: a
    killed and resumed batched run equals an uninterrupted one."""
    sc = load_scenario(tiny_scenario, [*over, "nodes.batched=true"])
    # (the partial case is test_checkpoint's; with partial_k=3 a resumed run differs from an
    # uninterrupted one in the looped path too, a checkpoint matter outside this file)
    ref, crash = killed_and_resumed(sc, tmp_path, every=2, kill=5 if len(over) == 4 else 7)
    assert fingerprint_run_dir(crash) == fingerprint_run_dir(ref)


@pytest.mark.parametrize("over", [{}, {"compressor.name": "topk", "training.momentum_at": "server"}])
def test_ring_batched_matches_looped(over: dict[str, Any]) -> None:
    """A ring computes every node's gradient every iteration at the one shared version (and
    encodes its chunks itself: the batch is not encoded at dispatch, codec states untouched)."""
    ring = {"network.topology": "ring", **over}
    looped, lsink, _ = _run(_scenario("sync", "none", batched=False).replace(**ring))
    batched, bsink, calls = _run(_scenario("sync", "none", batched=True).replace(**ring))
    assert all(st.local.encoded is None for st in batched.nodes)
    assert calls == 4 * 6
    for a, b in zip(lsink.rows, bsink.rows):
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-4)
        assert b["bytes_up"] == a["bytes_up"] and b["sim_time_s"] == pytest.approx(a["sim_time_s"], rel=1e-9)


@pytest.mark.parametrize("codec", ["topk", "qsgd", "efsignsgd", "powersgd"])
def test_sync_without_node_momentum_encodes_the_batch_at_dispatch(codec: str, monkeypatch) -> None:
    """Without node momentum a sync round's batch is also encoded at dispatch, every layer's rows in
    one encode_rows (powersgd: its row-by-row loop): the same bytes on the wire as the looped run."""
    from aiotsim.compress.base import Codec

    calls: list[int] = []
    real = Codec.encode_rows

    def counted(self, grads, layer, states):  # noqa: ANN001, ANN202
        if len(states) > 1:  # a node's own encode is one row
            calls.append(len(states))
        return real(self, grads, layer, states)

    monkeypatch.setattr(Codec, "encode_rows", counted)
    server = {"training.momentum_at": "server"}
    looped, lsink, _ = _run(_scenario("sync", codec, batched=False).replace(**server))
    assert not calls
    batched, bsink, _ = _run(_scenario("sync", codec, batched=True).replace(**server))
    layers = len(batched.learning.layers)
    assert calls == [4] * (layers * 6)  # every layer of the 4 nodes, every round
    for a, b in zip(lsink.rows, bsink.rows):
        assert b["bytes_up"] == a["bytes_up"] and b["wire_bytes_up"] == a["wire_bytes_up"]
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-4)
    _run(_scenario("sync", codec, batched=True))  # node momentum: encoded at dispatch too
    assert calls == [4] * (layers * 6 * 2)


@pytest.mark.parametrize(
    ("codec", "over"),
    [
        ("topk", {}),  # momentum on the nodes: u = m u + g taken at dispatch
        ("topk", {"nodes.state_dtype": "float16", "training.momentum_masking": True}),
        ("topk", {"nodes.state_dtype": "float16", "training.momentum_at": "server"}),
        ("4bit", {"nodes.state_dtype": "float16"}),  # dense residuals, widened and stored back
        ("onebit", {}),
        ("none", {}),
    ],
    ids=["node-momentum", "fp16-state-masking", "fp16-state-server-momentum", "4bit-fp16-state", "onebit", "none"],
)
def test_encoding_at_dispatch_equals_each_node_encoding_at_its_turn(
    codec: str, over: dict[str, Any], monkeypatch
) -> None:
    """The batch encoded at dispatch (momentum step, widened fp16 state, batched top-k) gives the
    same run, row for row, as the same batched gradients encoded by each node at its own turn;
    the node state stays as the looped encode stores it: residuals in ``state_dtype``, in the
    node's state pages, the same tensors from round to round."""
    import aiotsim.sim.batching as batching

    sc = _scenario("sync", codec, batched=True).replace(**over)
    at_dispatch, dsink, _ = _run(sc)
    monkeypatch.setattr(batching, "encode_group", lambda *a: None)
    at_turn, tsink, _ = _run(sc)
    assert dsink.rows == tsink.rows
    dtype = torch.float16 if over.get("nodes.state_dtype") == "float16" else torch.float32
    for a, b in zip(at_dispatch.nodes, at_turn.nodes):
        for sa, sb in zip(a.local.states, b.local.states):
            assert (sa.residual is None) == (sb.residual is None) == (codec == "none")
            if sa.residual is not None:
                assert sa.residual.dtype == dtype and torch.equal(sa.residual, sb.residual)
                assert at_dispatch.learning.pages.holds(sa.residual)
        assert (a.local.velocity is None) == (over.get("training.momentum_at") == "server")
        for va, vb in zip(a.local.velocity or [], b.local.velocity or []):
            assert torch.equal(va, vb)
    # the same pages in all: a residual stored anew each round would have taken fresh pages. fp32
    # node velocities, and the residuals of codecs with error feedback (topk, onebit), are stored
    # a pass at a time at dispatch (one block per layer, 64-B aligned as a whole, not per node):
    # fewer alignment pads, by hand
    n, rows = len(at_turn.nodes), [layer.numel * 4 for layer in at_turn.learning.layers]  # B per node
    blocked = 0 if over else 1 + (codec != "none")  # fp32 state kinds stored as blocks
    saved = blocked * sum(n * _aligned(r) - _aligned(n * r) for r in rows)
    assert at_dispatch.learning.pages.held_bytes == at_turn.learning.pages.held_bytes - saved


def _aligned(nbytes: int) -> int:
    """``nbytes`` rounded up to the state pages' 64-B alignment."""
    return -(-nbytes // 64) * 64


class _ItemScale(torch.nn.Module):
    """Scales by a Python float read from the data: ``.item()``, which vmap cannot map."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * float(x.abs().max().item())


def test_dropout_draws_each_nodes_own_mask_and_an_unmappable_model_is_refused() -> None:
    """Three nodes with the same batch: with dropout each draws its own mask, so their gradients
    differ (independent nodes; ``randomness="different"``); without (p = 0) they are equal. A
    model vmap cannot map (``.item()`` in its forward) gets a ConfigError naming the fix."""
    xs = torch.randn((1, 8, 1, 8, 8)).expand(3, 8, 1, 8, 8)
    ys = torch.randint(0, 10, (1, 8)).expand(3, 8)
    for p, differ in ((0.5, True), (0.0, False)):
        torch.manual_seed(0)
        model = torch.nn.Sequential(
            torch.nn.Flatten(), torch.nn.Linear(64, 32), torch.nn.Dropout(p), torch.nn.Linear(32, 10)
        )
        out = [g.take().grads for g in BatchedGradients(GradientComputer(model, CPU)).gradients(None, xs, ys)]
        assert (not torch.equal(out[0][0], out[1][0])) == differ
        assert (not torch.equal(out[1][0], out[2][0])) == differ
    bad = torch.nn.Sequential(torch.nn.Flatten(), _ItemScale(), torch.nn.Linear(64, 10))
    with pytest.raises(ConfigError, match=r"nodes\.batched: torch\.func\.vmap cannot batch .* nodes\.batched = false"):
        BatchedGradients(GradientComputer(bad, CPU)).gradients(None, xs, ys)
