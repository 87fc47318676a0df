"""Per-node state: the memory estimate by codec, momentum and nodes.state_dtype, and fp16 storage
of residuals and velocities."""

from __future__ import annotations

import json

import pytest
import torch

from aiotsim.api import run_scenario
from aiotsim.compress.base import CodecState
from aiotsim.config import load_scenario
from aiotsim.sim.storage import narrow_states, step_velocity, widen_states
from aiotsim.validate import NODE_OVERHEAD_BYTES, fmt_bytes, world_size

P = 55_210  # parameters of tests/tiny.toml's MLP on the 8x8 digits


@pytest.mark.parametrize(
    ("sets", "stored", "state_bytes"),
    [
        (["compressor.name=none", "training.momentum_at=server"], 0, 4),  # nothing kept on the node
        (["compressor.name=none", "training.momentum_at=nodes"], 1, 4),  # velocity
        (["compressor.name=topk", "training.momentum_at=nodes"], 2, 4),  # residual + velocity
        (["compressor.name=topk", "training.momentum_at=nodes", "nodes.state_dtype=float16"], 2, 2),
        (["compressor.name=dgc", "training.momentum_at=server"], 2, 4),  # DGC's own residual + momentum
    ],
)
@pytest.mark.parametrize(("aggregation", "in_flight"), [("stacked", 2), ("streamed", 0), ("auto", 2)])
def test_estimate_counts_what_a_node_keeps(tiny_scenario, sets, stored, state_bytes, aggregation, in_flight) -> None:
    fixed = ["training.momentum=0.9", "nodes.count=100", "data.samples_per_node=10"]
    sc = load_scenario(tiny_scenario, [*fixed, f"training.aggregation={aggregation}", *sets])
    size = world_size(sc)
    # kept state + the message at its codec's bound (none: the dense fp32 size) + the other dense
    # fp32 buffers of an aggregation (stacked: decoded, stack row; streamed: none) + fixed overhead
    message = P * 4 if "compressor.name=none" in sets else size.message_bytes
    assert 0 < size.message_bytes <= P * 4 * 1.04  # every codec here sends at most dense + a bitmap
    per_node = P * stored * state_bytes + message + in_flight * P * 4 + NODE_OVERHEAD_BYTES
    assert size.per_node_bytes == per_node
    assert size.nodes_bytes == 100 * per_node
    assert f"state {sc.nodes.state_dtype}" in size.describe()
    assert f"{'stacked' if aggregation == 'auto' else aggregation} aggregation" in size.describe()


def test_estimate_streams_a_fleet_too_big_to_stack(tiny_scenario) -> None:
    """auto: 5,000 nodes x 55,210 parameters x 4 B = 1.1 GB of stack > 1 GB: streamed, one
    in-flight buffer per node; 4,000 nodes (0.88 GB) still stack."""
    big = world_size(load_scenario(tiny_scenario, ["nodes.count=5000", "data.samples_per_node=1"]))
    small = world_size(load_scenario(tiny_scenario, ["nodes.count=4000", "data.samples_per_node=1"]))
    assert (big.aggregation, small.aggregation) == ("streamed", "stacked")
    assert small.per_node_bytes - big.per_node_bytes == 2 * P * 4


@pytest.mark.parametrize(
    ("sets", "node_iterations"),
    [
        ([], 100 * 10),  # every node, every iteration
        (["scenario.trace_nodes=10"], 10 * 10),  # 10 of the 100 nodes' tracks
        (["scenario.trace_nodes=500"], 100 * 10),  # more than the fleet: all of it
        (["scenario.trace_nodes=0"], 0),
        (["scenario.trace_nodes=[5, 50, 99]"], 3 * 10),  # 3 nodes named
        (["training.mode=async"], 1 * 10),  # an iteration is one node's update
        (["training.mode=federated", "nodes.per_round=0.1", "nodes.overcommit=0.5"], 15 * 10),  # ceil(10 x 1.5)
    ],
)
def test_estimate_counts_the_timeline_the_run_keeps(tiny_scenario, sets, node_iterations) -> None:
    """100 nodes x 10 iterations: 1,200 B per traced node and iteration, part of the total."""
    sc = load_scenario(tiny_scenario, ["nodes.count=100", "data.samples_per_node=10", "scenario.iterations=10", *sets])
    size = world_size(sc)
    assert size.timeline_bytes == node_iterations * 1_200
    assert size.total == size.nodes_bytes + size.server_bytes + size.data_bytes + size.timeline_bytes + size.pass_bytes
    assert f"timeline {fmt_bytes(node_iterations * 1_200)}" in size.describe()


@pytest.mark.parametrize(("nodes", "scratch"), [(10, 3 * 10 * P * 4), (100, 3 * 4_194_304 * 4)])
def test_estimate_counts_the_servers_decode_scratch(tiny_scenario, nodes, scratch) -> None:
    """The batched decode works on at most 4,194,304 values (a chunk) of the round's messages at
    once, 3 values of 4 B each: 10 nodes x 55,210 = 552,100 values fit in one chunk; 100 nodes'
    5,521,000 do not, so the chunk bounds it. Model-sized server buffers: 8."""
    sc = load_scenario(tiny_scenario, [f"nodes.count={nodes}", "data.samples_per_node=10"])
    assert world_size(sc).server_bytes == 8 * P * 4 + scratch


PASS = round(128 * 2**20 * 1.25)  # the CPU pass's budget (128 MiB) x BATCH_PASS_FACTOR


@pytest.mark.parametrize(
    ("sets", "pass_bytes"),
    [
        (["nodes.count=100"], PASS),  # auto, a fleet of a batch-norm-free model: batched on the CPU
        (["nodes.count=99"], 0),  # auto, below a fleet: looped
        (["nodes.count=100", "nodes.batched=false"], 0),
        (["nodes.count=2", "nodes.batched=true"], PASS),
        (["nodes.count=100", "training.mode=partial", "training.partial_k=50"], PASS),
        (["nodes.count=100", "training.mode=async"], 0),  # a node's version is its own: never batched
        (["nodes.count=100", "training.mode=federated"], 0),
        # Gradient Variance: batched too, with its per-sample gradients and their squares (32 MiB each)
        (["nodes.count=100", "compressor.name=variance"], PASS + 2 * 32 * 2**20),
        (["nodes.count=100", "model.name=resnet20", "data.dataset=synthetic"], 0),  # batch norm: looped
        # 16 samples per node (CPU_LOOPED_PASS_BATCH): passes filled node by node, at any fleet size;
        # they hold a pass's gradient rows (all 99 or 100 nodes: the budget holds 174 mlp nodes)
        (["nodes.count=99", "data.samples_per_node=16"], 99 * P * 4),
        (["nodes.count=100", "data.samples_per_node=16"], 100 * P * 4),
        (["nodes.count=100", "data.samples_per_node=16", "nodes.batch_chunk=30"], 30 * P * 4),
        (["nodes.count=99", "data.samples_per_node=16", "compressor.name=variance"], 2 * 99 * P * 4),  # + squares
        # shards from the partition (sizes unknown here): below a fleet filled at the batch size of
        # 16; a fleet could map a smaller shard's batches, so its budget is counted
        (["nodes.count=4", "data.samples_per_node=0"], 4 * P * 4),
        (["nodes.count=4", "data.samples_per_node=0", "nodes.compute_model=measured"], 0),  # looped
        (["nodes.count=100", "data.samples_per_node=0"], PASS),
    ],
)
def test_estimate_counts_the_batched_pass_where_the_cpu_runs_one(tiny_scenario, sets, pass_bytes) -> None:
    """The batched gradient pass's host memory is counted exactly where a CPU run batches:
    ``true``, or ``auto`` by aiotsim.learn.batched.cpu_batches (mapped: the 128 MiB budget x 1.25,
    measured) and cpu_fills (filled node by node: a pass's gradient rows)."""
    size = world_size(load_scenario(tiny_scenario, ["data.samples_per_node=10", *sets]))
    assert size.pass_bytes == pass_bytes
    assert ("batched gradient pass" in size.describe()) == (pass_bytes > 0)


def test_fp16_velocity_steps_in_fp32_from_the_rounded_state() -> None:
    g = [torch.tensor([1.0, -2.0]), torch.tensor([0.1])]
    step, stored = step_velocity(None, g, 0.9, torch.float16)
    assert [s.dtype for s in stored] == [torch.float16] * 2 and step[0].dtype == torch.float32
    g2 = [torch.tensor([0.5, 0.25]), torch.tensor([1 / 3])]
    before = [v.clone() for v in stored]
    step2, stored2 = step_velocity(stored, g2, 0.9, torch.float16)
    for u, v, gg in zip(step2, before, g2):
        assert torch.equal(u, v.float() * 0.9 + gg)  # fp32 arithmetic on the fp16-rounded velocity
    assert [s.dtype for s in stored2] == [torch.float16] * 2
    # the rounding is written into the stored tensors (no fresh allocation per step)
    assert all(a is b and torch.equal(a, u.half()) for a, b, u in zip(stored2, stored, step2))


def test_fp32_velocity_is_updated_in_place_as_before() -> None:
    v = [torch.tensor([1.0, 2.0])]
    step, stored = step_velocity(v, [torch.tensor([1.0, 1.0])], 0.5, torch.float32)
    assert step is v and stored is v and v[0].tolist() == [1.5, 2.0]


def test_first_velocity_takes_fresh_gradients_and_copies_shared_ones() -> None:
    fresh = [torch.tensor([1.0, 2.0]), torch.tensor([3.0])]
    step, stored = step_velocity(None, fresh, 0.9, torch.float32)
    assert all(u is g for u, g in zip(step, fresh)) and stored is step  # nothing else holds them
    # autograd hands one expanded tensor to both leaves of a sum: each layer needs its own buffer
    a, b = torch.zeros(3, requires_grad=True), torch.zeros(3, requires_grad=True)
    shared = list(torch.autograd.grad((a + b).sum(), [a, b]))
    rows = list(torch.arange(6.0).reshape(2, 3))  # views into one [nodes, n] tensor
    for grads in (shared, rows):
        step, _ = step_velocity(None, grads, 0.9, torch.float32)
        assert all(u.data_ptr() != g.data_ptr() and torch.equal(u, g) for u, g in zip(step, grads))
        step2, _ = step_velocity(step, grads, 0.5, torch.float32)  # in place on the copies only
        assert torch.equal(step2[0], grads[0] * 1.5) and torch.equal(step2[1], grads[1] * 1.5)


def test_first_velocity_takes_a_linear_layers_gradients_without_a_copy() -> None:
    """autograd returns nn.Linear's weight and bias gradients as views spanning all of their own
    temporaries: nothing else holds that memory, so they become the velocity as they are (a copy
    per node and round was 10,000 clones in a 1,000-node, 3-iteration run); a view of part of a
    storage, or a transposed one, is still copied."""
    lin = torch.nn.Linear(5, 3)
    grads = list(torch.autograd.grad(lin(torch.randn(4, 5)).square().sum(), list(lin.parameters())))
    assert any(g._base is not None for g in grads)  # the case this is about
    step, _ = step_velocity(None, grads, 0.9, torch.float32)
    assert all(u is g for u, g in zip(step, grads))
    base = torch.randn(4, 3)
    for views in ([base[:2], base[2:]], [base.t()]):
        step, _ = step_velocity(None, views, 0.9, torch.float32)
        assert all(u.data_ptr() != g.data_ptr() and torch.equal(u, g) for u, g in zip(step, views))


def test_states_narrow_and_widen() -> None:
    st = CodecState(generator=torch.Generator(), residual=torch.tensor([1.0, 1 / 3]))
    narrow_states([st], torch.float32)
    assert st.residual.dtype == torch.float32  # fp32 storage: untouched
    narrow_states([st], torch.float16)
    assert st.residual.dtype == torch.float16
    widen_states([st])
    assert st.residual.dtype == torch.float32
    assert st.residual.tolist() == [1.0, float(torch.tensor(1 / 3).half())]


def test_fp16_state_run_completes_close_to_fp32(tiny_scenario, tmp_path) -> None:
    accs = {}
    for dtype in ("float32", "float16"):
        sc = load_scenario(tiny_scenario, ["compressor.name=topk", f"nodes.state_dtype={dtype}"])
        run_scenario(sc, tmp_path / dtype, device="cpu")
        summary = json.loads((tmp_path / dtype / "summary.json").read_text())
        assert summary["status"] == "complete"
        accs[dtype] = summary["final_accuracy"]
    assert abs(accs["float16"] - accs["float32"]) < 0.1


@pytest.mark.parametrize(("mode", "most"), [("sync", 1), ("partial", 8)])
def test_a_sync_round_holds_one_gradient_at_a_time(tiny_scenario, tmp_path, monkeypatch, mode, most) -> None:
    """8 nodes start together: in a sync round each encodes its gradient as soon as it is
    computed and drops it, so one is alive at a time; in a partial round the server may step
    during a node's compute, so the encode waits for it and all 8 are held over their compute.
    (No momentum: with momentum on the nodes the gradient handed on is the kept velocity. The
    looped path: ``auto`` would fill a pass at dispatch, whose encode lets each gradient go,
    tests/test_batched.py.)"""
    import weakref

    from aiotsim.sim.world import Cluster

    alive, peak = [0], [0]
    real = Cluster.gradient

    def counted(self, i, params):  # noqa: ANN001, ANN202
        out = real(self, i, params)
        alive[0] += 1
        peak[0] = max(peak[0], alive[0])
        weakref.finalize(out[0][0], lambda: alive.__setitem__(0, alive[0] - 1))
        return out

    monkeypatch.setattr(Cluster, "gradient", counted)
    over = ["nodes.count=8", "compressor.name=topk", f"training.mode={mode}", "training.partial_k=8",
            "training.momentum=0", "nodes.batched=false"]  # fmt: skip
    run_scenario(load_scenario(tiny_scenario, over, iterations=2), tmp_path / "run", device="cpu")
    assert peak[0] == most


def test_a_streamed_run_asks_for_a_trim_every_so_many_gradients(tiny_scenario, monkeypatch) -> None:
    """Every TRIM_EVERY-th gradient of an iteration (here 3: the 3rd and 6th of 7), counted
    afresh after each row; a stacked run has no trimmer. With resident memory that always grows
    past the margin, each ask is a trim."""
    from aiotsim.records import Progress
    from aiotsim.sim import heartbeat
    from aiotsim.sim.allocator import HeapTrimmer
    from aiotsim.sim.world import Cluster

    trims: list[int] = []
    rss = iter(range(0, 100 << 30, 1 << 30))  # B: 1 GB more at every ask
    monkeypatch.setattr(heartbeat, "TRIM_EVERY", 3)
    trimmer = HeapTrimmer(rss=lambda: next(rss), trim=lambda: trims.append(beat.gradients) or True)
    beat = heartbeat.Heartbeat(None, 5, trimmer)
    for _ in range(7):
        beat.gradient(0)
    beat.row(Progress(1, 5, 1.0, 0.5))
    for _ in range(2):
        beat.gradient(1)
    assert trims == [3, 6]
    streamed = Cluster(load_scenario(tiny_scenario, ["training.aggregation=streamed"]), device="cpu")
    stacked = Cluster(load_scenario(tiny_scenario, ["training.aggregation=stacked"]), device="cpu")
    assert (streamed.heartbeat.trim_every, stacked.heartbeat.trim_every) == (3, 0)
    assert streamed.heartbeat.trimmer is streamed.learning.trimmer is not None  # one level per run
    assert stacked.heartbeat.trimmer is None


def test_the_trimmer_trims_only_when_resident_memory_sets_a_new_high() -> None:
    """Hand-made resident memory (MB) against a 64 MB margin: the first ask trims; then a trim
    only above the last trim's level + 64; a fall (the trim gave pages back) and the climb back
    to the level (the next round reusing them) trim nothing; unknown memory always trims."""
    from aiotsim.sim.allocator import HeapTrimmer

    mb = 1 << 20
    seen = [100, 150, 165, 1000, 400, 990, 1000, 1064, 1065, 1129, 1130]
    rss = iter(seen)
    done: list[int] = []
    trimmer = HeapTrimmer(margin=64 * mb, rss=lambda: next(rss) * mb, trim=lambda: done.append(1) or True)
    asked = [trimmer.maybe_trim() for _ in seen]
    #        100   150    165   1000  400    990    1000   1064   1065  1129   1130
    want = [True, False, True, True, False, False, False, False, True, False, True]
    assert asked == want
    assert trimmer.trims == len(done) == 5 and trimmer.level == 1130 * mb
    blind = HeapTrimmer(rss=lambda: None, trim=lambda: True)
    assert [blind.maybe_trim() for _ in range(3)] == [True, True, True]
