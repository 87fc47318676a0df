"""Server aggregation, stacked and streamed (``training.aggregation``, :mod:`aiotsim.sim.aggregate`).

Checks: hand-computed weighted means and votes; streamed equals stacked within float32 rounding for
every registered codec (mean codecs weighted, signSGD's vote unweighted, gateway ``dense`` messages);
the streamed result does not depend on the arrival order; ``auto``'s choice at the 1 GB boundary;
a streamed aggregation keeps at most a chunk of messages, no decoded tensor and per-layer float64 sums; and
whole runs (sync, partial with late uploads, hierarchical gateways) agree between the two modes.
"""

from __future__ import annotations

import gc
import random
import weakref
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch

from aiotsim.compress import codec_names, get_codec_class
from aiotsim.compress.base import Codec, LayerInfo, Payload
from aiotsim.config import scenario_from_dict
from aiotsim.errors import CodecError, ConfigError
from aiotsim.sim.aggregate import STACK_LIMIT_BYTES, Aggregation, StackBuffer, aggregation_mode
from aiotsim.sim.runner import run_cluster
from aiotsim.sim.world import Cluster

CPU = torch.device("cpu")
LAYERS = [
    LayerInfo("conv.weight", (6, 3, 5, 5), kind="conv", index=0),
    LayerInfo("fc.weight", (40, 30), kind="fc", index=1),
    LayerInfo("fc.bias", (40,), kind="bias", index=2),
]


def make_codec(name: str) -> Codec:
    cls = get_codec_class(name)
    return cls(cls.Params(), seed=7)


def messages(codec: Codec, count: int, seed: int = 0) -> list[list[Payload]]:
    """``count`` nodes' encoded gradients (each node its own state and gradient)."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for node in range(count):
        msg = []
        for layer in LAYERS:
            g = torch.randn(layer.shape, generator=gen) * 0.01
            state = codec.init_state(layer, CPU, node)
            if codec.needs_sq_grad:
                state.sq_grad = g.square()
            msg.append(codec.encode(g, layer, state))
        out.append(msg)
    return out


def aggregate(
    codec: Codec, msgs: list[list[Payload]], weights: list[int], *, streamed: bool, dense: list[bool] | None = None
) -> list[torch.Tensor]:
    dense_codec = make_codec("none")
    agg = Aggregation(
        [codec] * len(LAYERS), dense_codec, LAYERS, CPU, streamed=streamed, weighted=codec.supports_ring()
    )
    for m, w, d in zip(msgs, weights, dense or [False] * len(msgs)):
        agg.add(m, w, d)
    return agg.result()[0]


def raw(values: list[torch.Tensor]) -> list[Payload]:
    """Dense fp32 messages of the ``none`` codec, one per layer of LAYERS."""
    none = make_codec("none")
    return [none.encode(v, L, none.init_state(L, CPU, 0)) for v, L in zip(values, LAYERS)]


# ---- hand-computed -------------------------------------------------------------------------------
@pytest.mark.parametrize("streamed", [False, True])
def test_weighted_mean_by_node_counts(streamed: bool) -> None:
    """Two messages carrying 1 and 3 nodes: (a + 3 b) / 4 per element."""
    a = [torch.full(L.shape, 1.0) for L in LAYERS]
    b = [torch.full(L.shape, -3.0) for L in LAYERS]
    out = aggregate(make_codec("none"), [raw(a), raw(b)], [1, 3], streamed=streamed)
    for t, L in zip(out, LAYERS):
        assert t.shape == L.shape and t.dtype == torch.float32
        assert torch.equal(t, torch.full(L.shape, (1.0 - 9.0) / 4))


@pytest.mark.parametrize("streamed", [False, True])
def test_signsgd_vote_is_unweighted(streamed: bool) -> None:
    """signSGD (scale 'none'): votes +1, +1, -1 -> +1 per element, whatever the node counts (the
    stacked vote ignores them: one message, one vote)."""
    codec = get_codec_class("signsgd")(get_codec_class("signsgd").Params(scale="none"), seed=1)
    msgs = [
        [codec.encode(torch.full(L.shape, s), L, codec.init_state(L, CPU, 0)) for L in LAYERS] for s in (0.5, 2.0, -7.0)
    ]
    out = aggregate(codec, msgs, [1, 1, 50], streamed=streamed)
    for t, L in zip(out, LAYERS):
        assert torch.equal(t, torch.full(L.shape, 1.0 / 1.0))  # sign(+1 +1 -1) x mean |d| = 1


def test_empty_aggregation_is_refused() -> None:
    for streamed in (False, True):
        with pytest.raises(CodecError, match="no gradients"):
            aggregate(make_codec("none"), [], [], streamed=streamed)


# ---- streamed == stacked -------------------------------------------------------------------------
@pytest.mark.parametrize("name", codec_names())
@pytest.mark.parametrize("weights", ["equal", "unequal"])
def test_streamed_equals_stacked_for_every_codec(name: str, weights: str) -> None:
    codec = make_codec(name)
    msgs = messages(codec, 12, seed=3)
    w = [1] * 12 if weights == "equal" else [1 + (3 * k) % 7 for k in range(12)]
    stacked = aggregate(codec, msgs, w, streamed=False)
    streamed = aggregate(codec, msgs, w, streamed=True)
    for s, t in zip(stacked, streamed):
        assert s.dtype == t.dtype and s.shape == t.shape
        scale = float(s.abs().max()) or 1.0
        torch.testing.assert_close(t, s, rtol=1e-5, atol=1e-6 * scale)


@pytest.mark.parametrize("name", ["none", "topk", "signsgd", "qsgd"])
def test_gateway_dense_messages_aggregate_with_the_layer_codec(name: str) -> None:
    """A gateway in ``dense`` mode sends fp32 averages: decoded with ``none``, aggregated by the
    layer codec's rule (a mean, or signSGD's vote) in both modes alike."""
    codec = make_codec(name)
    none = make_codec("none")
    gen = torch.Generator().manual_seed(5)
    msgs = [raw([torch.randn(L.shape, generator=gen) for L in LAYERS]) for _ in range(4)]
    assert all(isinstance(p, Payload) for p in msgs[0])
    stacked = aggregate(codec, msgs, [3, 1, 2, 5], streamed=False, dense=[True] * 4)
    streamed = aggregate(codec, msgs, [3, 1, 2, 5], streamed=True, dense=[True] * 4)
    for s, t in zip(stacked, streamed):
        torch.testing.assert_close(t, s, rtol=1e-5, atol=1e-6)
    assert none.supports_ring()


def test_streamed_result_does_not_depend_on_the_arrival_order() -> None:
    """float64 sums: 300 messages in 4 orders give the same float32 bits (a float32 running sum
    of the same values does not)."""
    codec = make_codec("none")
    gen = torch.Generator().manual_seed(11)
    values = [[torch.randn(L.shape, generator=gen) * 10 ** float(torch.randint(-3, 3, (1,), generator=gen))
               for L in LAYERS] for _ in range(300)]  # fmt: skip
    msgs = [raw(v) for v in values]
    weights = [1 + k % 5 for k in range(300)]
    rng = random.Random(2)
    ref = aggregate(codec, msgs, weights, streamed=True)
    f32_sums = set()
    for _ in range(4):
        order = list(range(300))
        rng.shuffle(order)
        out = aggregate(codec, [msgs[k] for k in order], [weights[k] for k in order], streamed=True)
        assert all(torch.equal(a, b) for a, b in zip(out, ref))
        acc = torch.zeros(LAYERS[1].shape)
        for k in order:
            acc += weights[k] * values[k][1]
        f32_sums.add(acc.numpy().tobytes())
    assert len(f32_sums) > 1  # the test's orders do change a float32 running sum


# ---- auto ----------------------------------------------------------------------------------------
def test_auto_streams_only_above_one_gigabyte_of_stack() -> None:
    none = get_codec_class("none")
    params = 250_000  # x 4 B x 1,000 nodes = exactly 1 GB
    assert 1000 * params * 4 == STACK_LIMIT_BYTES
    assert aggregation_mode("auto", 1000, params, none) == "stacked"
    assert aggregation_mode("auto", 1001, params, none) == "streamed"
    assert aggregation_mode("auto", 10_000, 61_706, get_codec_class("signsgd")) == "streamed"  # iot10k
    assert aggregation_mode("auto", 1000, 61_706, none) == "stacked"  # iot1000
    assert aggregation_mode("stacked", 10**6, params, none) == "stacked"
    assert aggregation_mode("streamed", 2, 10, none) == "streamed"


def test_a_custom_aggregate_without_a_streamed_form_is_not_streamed() -> None:
    class Median(get_codec_class("none")):  # type: ignore[misc, valid-type]
        def aggregate(self, decoded: list[torch.Tensor], layer: LayerInfo) -> torch.Tensor:
            return torch.stack(decoded).median(dim=0).values

    assert not Median.streams_aggregate()
    assert get_codec_class("signsgd").streams_aggregate() and get_codec_class("topk").streams_aggregate()
    assert aggregation_mode("auto", 10**6, 10**6, Median) == "stacked"  # correct, if big
    with pytest.raises(ConfigError, match="training.aggregation.*stacked"):
        aggregation_mode("streamed", 10, 10, Median)


def test_the_option_is_validated() -> None:
    with pytest.raises(ConfigError, match="training.aggregation"):
        scenario_from_dict({"training": {"aggregation": "lazy"}})


# ---- memory --------------------------------------------------------------------------------------
@dataclass
class FakeUpload:
    payloads: list[Payload]
    nodes: list[int] = field(default_factory=lambda: [0])
    dense: bool = False


@pytest.mark.parametrize("name", ["none", "topk", "signsgd", "powersgd"])
def test_streamed_keeps_at_most_a_chunk_of_messages_and_no_decoded_tensor(name: str, monkeypatch: Any) -> None:
    """Arrivals wait in ``pending`` until a chunk of them is decoded together; then their bytes
    and decoded tensors are gone, whether the codec decodes in a batch (none, topk, signsgd) or
    one message at a time (powersgd)."""
    codec = make_codec(name)
    alive: list[weakref.ref] = []

    def tracked(decode: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> torch.Tensor:
            out = decode(*args, **kwargs)
            alive.append(weakref.ref(out))
            return out

        return wrapper

    monkeypatch.setattr(type(codec), "decode_many", tracked(type(codec).decode_many))
    monkeypatch.setattr(type(codec), "decode", tracked(type(codec).decode))
    if type(codec).decode_read is not Codec.decode_read:  # its own read-only decode (a view)
        monkeypatch.setattr(type(codec), "decode_read", tracked(type(codec).decode_read))
    agg = Aggregation([codec] * len(LAYERS), make_codec("none"), LAYERS, CPU, streamed=True, weighted=True)
    agg.chunk = 4
    uploads = [FakeUpload(m) for m in messages(codec, 20, seed=1)]
    payload_refs = [weakref.ref(p.buffers[next(iter(p.buffers))]) for u in uploads for p in u.payloads]
    for i, u in enumerate(uploads):
        agg.take(u)
        assert u.payloads == []  # the upload lets go of them at once
        assert len(agg.pending) == (i + 1) % 4  # folded in as every fourth arrives
    del uploads
    gc.collect()
    assert alive and all(r() is None for r in alive)  # no decoded tensor kept
    assert all(r() is None for r in payload_refs)  # no message bytes kept
    assert agg.messages == [] and agg.pending == [] and agg.count == 20
    assert agg.sums is not None and len(agg.sums) == len(LAYERS)
    for acc, L in zip(agg.sums, LAYERS):  # only a per-layer float64 sum (signSGD: and its |d| sum)
        held = [t for t in (acc.total, acc.extra) if t is not None]
        assert all(t.shape == L.shape and t.dtype == torch.float64 for t in held)
    # the stacked form keeps every message until result()
    stacked = Aggregation([codec] * len(LAYERS), make_codec("none"), LAYERS, CPU, streamed=False, weighted=True)
    kept = [FakeUpload(m) for m in messages(codec, 3)]
    stacked.take_all(kept)
    assert len(stacked.messages) == 3 and all(u.payloads for u in kept)


# ---- whole runs ------------------------------------------------------------------------------------
def scenario(aggregation: str, **sections: dict[str, Any]) -> Any:
    base: dict[str, Any] = {
        "scenario": {"name": "agg", "seed": 4, "iterations": 4},
        "data": {"dataset": "digits", "batch_size": 16},
        "model": {"name": "mlp"},
        "training": {"lr": 0.1, "momentum": 0.9, "eval_every": 4, "aggregation": aggregation},
        "compressor": {"name": "topk"},
        "nodes": {"count": 6, "device": "rpi4", "compute_model": "flops"},
        "network": {"uplink_mbps": 10.0, "downlink_mbps": 10.0, "latency_ms": 5.0, "server_mbps": 100.0},
    }
    for name, values in sections.items():
        base[name] = {**base.get(name, {}), **values}
    return scenario_from_dict(base)


class Rows:
    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def write_metrics(self, row: dict[str, Any]) -> None:
        self.rows.append(row)

    def write_eval(self, row: dict[str, Any]) -> None:
        pass

    def write_trace(self, events: list[dict[str, Any]]) -> None:
        pass

    def finish(self, summary: dict[str, Any]) -> None:
        pass


CASES = {
    "sync": {},
    "signsgd": {"compressor": {"name": "signsgd"}},
    "partial-late": {
        "training": {"mode": "partial", "partial_k": 3, "late": "apply"},
        "nodes": {"count": 6, "group": [{"count": 5}, {"count": 1, "slowdown": 3.0}]},
    },
    "hierarchical": {"network": {"topology": "hierarchical", "gateways": 2, "gateway_mode": "reencode"}},
    "gateway-dense": {"network": {"topology": "hierarchical", "gateways": 3, "gateway_mode": "dense"}},
}


@pytest.mark.parametrize("case", list(CASES))
def test_runs_agree_between_stacked_and_streamed(case: str) -> None:
    out = {}
    for mode in ("stacked", "streamed"):
        cluster = Cluster(scenario(mode, **CASES[case]), device="cpu")
        assert cluster.learning.aggregation_mode == mode
        sink = Rows()
        run_cluster(cluster, sink)
        out[mode] = ([p.detach().clone() for p in cluster.learning.params], sink.rows)
    (p1, rows1), (p2, rows2) = out["stacked"], out["streamed"]
    assert [r["contributors"] for r in rows1] == [r["contributors"] for r in rows2]
    assert [r["bytes_up"] for r in rows1] == [r["bytes_up"] for r in rows2]
    for a, b in zip(p1, p2):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5)


def test_a_streamed_round_asks_the_runs_trimmer_and_a_stacked_one_leaves_malloc_alone() -> None:
    """glibc: malloc_trim runs; a streamed aggregation asks the run's trimmer once per result, a
    stacked one has none (nothing process-wide is changed: a pinned mmap threshold had slowed every
    later allocation)."""
    import platform

    from aiotsim.sim.allocator import HeapTrimmer, trim_heap

    assert isinstance(trim_heap(), bool) and (platform.libc_ver()[0] == "glibc" or trim_heap() is False)
    for mode, want in (("stacked", None), ("streamed", 2)):
        learning = Cluster(scenario(mode), device="cpu").learning
        assert (learning.trimmer is None) == (want is None), mode
        calls: list[int] = []
        if learning.trimmer is not None:  # no growth: it trims the first time only (margin: a TB)
            learning.trimmer = HeapTrimmer(1 << 40, rss=lambda: 1 << 30, trim=lambda c=calls: c.append(1) or True)
        dense = learning.dense  # a gateway's dense fp32 message: decodable whatever the codec
        cpu = torch.device("cpu")
        msg = [dense.encode(torch.ones(L.numel), L, dense.init_state(L, cpu, 0)) for L in learning.layers]
        for _ in range(2):
            agg = learning.aggregation()
            agg.add(msg, 1, dense=True)
            agg.result()
        assert calls == ([] if want is None else [1]), mode
        assert learning.trimmer is None or learning.trimmer.trims == 1


# ---- the stack buffer ----------------------------------------------------------------------------
@pytest.mark.parametrize("weights", ["equal", "unequal"])
def test_stacking_into_the_reused_buffer_gives_the_fresh_stack_bits(weights: str) -> None:
    """Rounds of 5, 9 (the buffer grows) and 3 (a view of it) messages: every aggregate equals,
    bit for bit, the one computed with fresh stacks (no buffer), for the mean and for the
    node-count-weighted tensordot."""
    codec, buffer = make_codec("none"), StackBuffer()
    for r, count in enumerate((5, 9, 3)):
        msgs = messages(codec, count, seed=r)
        w = [1] * count if weights == "equal" else [1 + (i % 3) for i in range(count)]
        runs = []
        for buf in (None, buffer):
            agg = Aggregation([codec] * len(LAYERS), codec, LAYERS, CPU, streamed=False, weighted=True, buffer=buf)
            for m, k in zip(msgs, w):
                agg.add(m, k)
            runs.append(agg.result()[0])
        for fresh, reused in zip(*runs):
            assert torch.equal(fresh, reused) and fresh.dtype == reused.dtype


def test_the_stack_buffer_keeps_its_memory_and_grows_only_when_asked_for_more() -> None:
    buffer = StackBuffer()
    a = buffer.rows(3, torch.Size([4, 5]), torch.float32, CPU)
    b = buffer.rows(2, torch.Size([2, 3]), torch.float32, CPU)  # smaller: a view of the same memory
    assert a.shape == (3, 4, 5) and b.shape == (2, 2, 3) and b.is_contiguous()
    assert b.data_ptr() == a.data_ptr()
    c = buffer.rows(7, torch.Size([10]), torch.float32, CPU)  # 70 > 60 elements: a bigger buffer
    assert c.shape == (7, 10) and c.untyped_storage().nbytes() == 70 * 4
    d = buffer.rows(1, torch.Size([60]), torch.float64, CPU)  # another dtype: its own buffer
    assert d.dtype == torch.float64 and d.data_ptr() != c.data_ptr()


class Shaped(Codec):
    """A mean codec whose decode gives each message its own shape or dtype (to exercise the
    stacked form's fallback to torch.stack of the list)."""

    name = "shaped"

    def __init__(self, outputs: list[torch.Tensor]) -> None:
        self.outputs = outputs

    def _encode(self, acc: torch.Tensor, grad: torch.Tensor, layer: LayerInfo, state: Any) -> Any:
        raise AssertionError("the test aggregates hand-made messages only")

    def decode(self, payload: Any, layer: LayerInfo) -> torch.Tensor:
        return self.outputs[payload]


def test_messages_decoding_to_other_shapes_or_dtypes_stack_as_a_list_does() -> None:
    """Decoding into the stack's rows must not hide a mismatch: torch.stack's own promotion
    (float16 with float32) or refusal (shapes) decides, as it did over the list."""
    layer = [LayerInfo("w", (2,), kind="fc", index=0)]
    one = torch.tensor([1.0, 3.0])
    mixed = [one, torch.tensor([2.0, 5.0], dtype=torch.float16), torch.tensor([4.0, 1.0])]
    for weights, want in (([1, 1, 1], torch.tensor([7 / 3, 3.0])), ([1, 2, 1], torch.tensor([2.25, 3.5]))):
        codec = Shaped(mixed)
        agg = Aggregation([codec], codec, layer, CPU, streamed=False, weighted=True, buffer=StackBuffer())
        for i, w in enumerate(weights):
            agg.add([i], w)
        got = agg.result()[0][0]
        assert torch.equal(got, want.to(got.dtype)) and got.dtype == torch.float32
    codec = Shaped([one, torch.ones(3)])
    agg = Aggregation([codec], codec, layer, CPU, streamed=False, weighted=True, buffer=StackBuffer())
    agg.add([0], 1)
    agg.add([1], 1)
    with pytest.raises(RuntimeError, match="stack expects each tensor to be equal size"):
        agg.result()


def test_a_run_stacks_into_one_buffer_from_round_to_round(monkeypatch: Any) -> None:
    """The learning's aggregations share its buffer: after the first round the stacks of every
    later one are views of the same memory (no fresh pages)."""
    ptrs: list[int] = []
    real = StackBuffer.rows

    def spy(self: StackBuffer, *args: Any) -> torch.Tensor:
        out = real(self, *args)
        ptrs.append(out.data_ptr())
        return out

    monkeypatch.setattr(StackBuffer, "rows", spy)
    cluster = Cluster(scenario("stacked"), device="cpu")
    run_cluster(cluster, Rows())
    layers = len(cluster.learning.layers)
    assert len(ptrs) == layers * cluster.sc.scenario.iterations and len(set(ptrs[layers:])) == 1


# ---- read-only decodes ---------------------------------------------------------------------------
@pytest.mark.parametrize("name", codec_names())
def test_decode_read_gives_decodes_values(name: str) -> None:
    codec = make_codec(name)
    for msg in messages(codec, 2, seed=3):
        for p, L in zip(msg, LAYERS):
            a, b = codec.decode(p, L), codec.decode_read(p, L)
            assert torch.equal(a, b) and a.dtype == b.dtype and a.shape == b.shape


def test_the_dense_codecs_read_only_decode_is_a_view_of_the_payload() -> None:
    """``none``: the aggregation reads the payload's bytes in place (no copy per message and
    layer); a payload whose bytes start off a 4-byte boundary is copied, then viewed."""
    codec, L = make_codec("none"), LAYERS[1]
    g = torch.randn(L.shape)
    p = codec.encode(g, L, codec.init_state(L, CPU, 0))
    view = codec.decode_read(p, L)
    assert torch.equal(view, g) and view.data_ptr() == p.buffers["values"].data_ptr()
    assert codec.decode(p, L).data_ptr() != p.buffers["values"].data_ptr()  # decode: a new tensor
    shifted = torch.empty(p.buffers["values"].numel() + 1, dtype=torch.uint8)[1:]
    shifted.copy_(p.buffers["values"])
    odd = Payload({"values": shifted})
    assert torch.equal(codec.decode_read(odd, L), g)
