"""Decoding many messages at once (``Codec.decode_many``) and the server aggregations built on it.

The contract is bit-identity: ``decode_many`` of a layer's messages equals each message's
own ``decode_read``, stacked, byte for byte (NaN payloads too), for every codec and parameter set
with a batched path, across chunk boundaries and mixed index codings; every other codec (or a
malformed payload) is decoded message by message, with the per-message decoder's own errors.
The aggregations that use it give the same bytes as folding (streamed) or stacking (stacked)
each message's own decode in arrival order, computed here independently.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from aiotsim.compress import base, codec_names, get_codec_class
from aiotsim.compress.aggregation import CPU_SCAN_MAX_VALUES
from aiotsim.compress.base import Codec, LayerInfo, Payload
from aiotsim.compress.packing import pad_rows
from aiotsim.errors import CodecError
from aiotsim.sim.aggregate import Aggregation

CPU = torch.device("cpu")
LAYERS = [
    LayerInfo("conv.weight", (6, 3, 5, 5), kind="conv", index=0),
    LayerInfo("fc.weight", (40, 30), kind="fc", index=1),
    LayerInfo("fc.bias", (7,), kind="bias", index=2),
]
BATCHED = [
    ("none", {}),
    ("fp16", {}),
    ("2bit", {}),
    ("terngrad", {}),
    ("qsgd", {}),
    ("qsgd", {"levels": 1}),  # 2-bit codes
    ("qsgd", {"levels": 127, "bucket_size": 100}),  # 8-bit codes, a short last bucket
    ("signsgd", {}),
    ("signsgd", {"scale": "none"}),
    ("efsignsgd", {}),
    ("onebit", {}),
    ("onebit", {"granularity": "column"}),
    ("4bit", {}),
    ("4bit", {"spacing": "log2", "statistic": "std"}),
    ("4bit", {"statistic": "mean"}),
    ("topk", {}),
    ("topk", {"ratio": 0.5}),  # dense sets: bitmap coding
    ("topk", {"value_dtype": "fp16"}),
    ("agg-aware", {}),
    ("dgc", {}),
    ("threshold", {}),  # counts differ by message
    ("threshold", {"tau": 0.5, "value_dtype": "fp16"}),
    ("threshold", {"quantize": True}),
    ("variance", {}),  # quantized: a scale and 4-bit codes
    ("variance", {"quantize": False}),
    ("pgc", {}),
    ("pgc-paper", {}),
    ("randomk", {}),
    ("randomk", {"scale": False, "value_dtype": "fp16"}),
    ("hylo", {}),  # conv and bias dense, fc 2-bit: rows
    ("hylo", {"size_threshold": 100, "fc_stat": "max_abs"}),  # conv kernel sets: one by one in the batch
    ("fft", {}),  # per-message exponent ranges and widths, bitmap and delta bin sets
    ("fft", {"chunk_size": 0, "keep": 0.3, "mantissa_bits": 3, "max_exponent_bits": 2}),
]
LOOPED = [("qsgd", {"elias": True}), ("qsgd", {"levels": 3})]
LOOPED += [("powersgd", {})]


def make(name: str, params: dict[str, Any] | None = None) -> Codec:
    cls = get_codec_class(name)
    return cls(cls.Params(**(params or {})), seed=7)


def messages(codec: Codec, layer: LayerInfo, count: int, seed: int = 0) -> list[Payload]:
    """``count`` nodes' payloads of ``layer``: mixed scales, a sparse gradient, a zero one."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for node in range(count):
        g = torch.randn(layer.shape, generator=gen) * (0.01, 1.0, 3.0)[node % 3]
        if node % 4 == 1:
            g.view(-1)[: g.numel() * 3 // 4] = 0.0  # few values left: delta or plain index sets
        if node % 5 == 4:
            g.zero_()
        state = codec.init_state(layer, CPU, node)
        if codec.needs_sq_grad:
            state.sq_grad = g.square()
        out.append(codec.encode(g, layer, state))
    return out


def looped(codec: Codec, payloads: list[Payload], layer: LayerInfo) -> torch.Tensor:
    return torch.stack([codec.decode_read(p, layer) for p in payloads])


def same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    same_kind = a.dtype == b.dtype and a.shape == b.shape
    return same_kind and torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


@pytest.mark.parametrize(("name", "params"), BATCHED, ids=[f"{n}-{p}" for n, p in BATCHED])
def test_decode_many_equals_each_message_decoded(name: str, params: dict[str, Any], monkeypatch: Any) -> None:
    codec = make(name, params)
    assert codec.decodes_rows()
    monkeypatch.setattr(base, "CHUNK_ELEMENTS", 1000)  # several chunks per layer
    for j, layer in enumerate(LAYERS):
        payloads = messages(codec, layer, 11, seed=j)
        assert same_bytes(codec.decode_many(payloads, layer), looped(codec, payloads, layer)), layer.name


@pytest.mark.parametrize(("name", "params"), LOOPED, ids=[f"{n}-{p}" for n, p in LOOPED])
def test_codecs_without_a_batched_path_are_decoded_one_by_one(name: str, params: dict[str, Any]) -> None:
    codec = make(name, params)
    assert not codec.decodes_rows()
    for layer in LAYERS:
        payloads = messages(codec, layer, 5)
        assert same_bytes(codec.decode_many(payloads, layer), looped(codec, payloads, layer))


def test_every_registered_codec_decodes_in_batch_as_one_by_one() -> None:
    for name in codec_names():
        codec = make(name)
        payloads = messages(codec, LAYERS[1], 6)
        assert same_bytes(codec.decode_many(payloads, LAYERS[1]), looped(codec, payloads, LAYERS[1])), name


def test_fft_messages_of_different_schedule_steps_decode_one_by_one() -> None:
    """FFT messages keeping different bin counts (nodes at other schedule steps) cannot stack:
    the chunk is decoded message by message, with the same bytes."""
    codec = make("fft", {"schedule": "linear", "keep": 0.1, "keep_end": 0.9, "schedule_steps": 2})
    layer = LAYERS[1]
    payloads = []
    for node in range(4):
        state = codec.init_state(layer, CPU, node)
        state.step = node % 3  # k grows with the step
        payloads.append(codec.encode(torch.randn(layer.shape), layer, state))
    sizes = {p.buffers["values"].numel() for p in payloads}
    assert len(sizes) > 1  # the counts differ indeed
    assert same_bytes(codec.decode_many(payloads, layer), looped(codec, payloads, layer))


def test_index_codings_mix_in_one_batch() -> None:
    """Hand-made top-k payloads of n = 64: plain, delta of two widths and bitmap sets in one
    batch (grouped by header), each at its own row."""
    from aiotsim.compress.sparse import sparse_payload

    layer = LayerInfo("v", (64,), kind="fc", index=0)
    dense = [i for i in range(64) if i not in (1, 5, 20, 40)]  # 60 of 64, gaps of 2: the bitmap wins
    sets = [[0, 63], [10, 11, 12], [5, 9, 13, 17], dense, [0, 63], [], [1], dense]
    payloads = [sparse_payload(torch.tensor(s, dtype=torch.int64), torch.arange(len(s)) + 1.0, 64) for s in sets]
    modes = [p.heads["indices"][0] for p in payloads]
    assert set(modes) == {0, 1, 2}  # plain, delta and bitmap all present
    got = make("topk").decode_many(payloads, layer)
    for row, s in zip(got, sets):
        want = torch.zeros(64)
        want[s] = torch.arange(len(s)) + 1.0
        assert torch.equal(row, want)


def test_nan_payloads_keep_their_bits() -> None:
    codec = make("none")
    layer = LAYERS[2]
    g = torch.tensor([float("nan"), 1.0, -0.0, float("inf"), 2.0, 3.0, 4.0])
    g.view(torch.int32)[0] = 0x7FC00123  # a NaN with a payload
    payloads = [codec.encode(g, layer, codec.init_state(layer, CPU, 0)) for _ in range(3)]
    assert same_bytes(codec.decode_many(payloads, layer), looped(codec, payloads, layer))


def test_only_messages_of_one_layout_stack() -> None:
    def message(**sizes: int) -> Payload:
        return Payload({k: torch.zeros(n, dtype=torch.uint8) for k, n in sizes.items()})

    p = message(a=3, b=5)
    assert p.nbytes == 8 and p.layout == (("a", "b"), (3, 5))
    assert base.same_layout([p, message(a=3, b=5), p])
    for other in (message(a=5, b=3), message(b=5, a=3), message(a=3), message(a=3, b=5, c=0)):
        assert not base.same_layout([p, other])  # the same bytes split otherwise, or other buffers
    assert message().nbytes == 0


def test_a_malformed_payload_gets_the_per_message_error() -> None:
    codec = make("topk")
    layer = LAYERS[1]
    payloads = messages(codec, layer, 4)
    bad = payloads[2]
    payloads[2] = Payload({"indices": bad.buffers["indices"], "values": bad.buffers["values"][:-4]}, bad.heads)
    with pytest.raises((CodecError, RuntimeError)) as batched:
        codec.decode_many(payloads, layer)
    with pytest.raises(type(batched.value)):
        codec.decode_read(payloads[2], layer)


def test_out_takes_the_rows_as_copy_would_cast_them() -> None:
    codec = make("2bit")
    layer = LayerInfo("h", (40, 30), kind="fc", index=0, dtype=torch.float16)
    payloads = messages(codec, LayerInfo("f", (40, 30), kind="fc", index=0), 5)
    out = torch.empty((5, 40, 30), dtype=torch.float32)
    assert codec.decode_many(payloads, layer, out=out) is out
    want = torch.empty_like(out)
    for i, p in enumerate(payloads):
        want[i].copy_(codec.decode_read(p, layer))  # fp16 decode, then cast as copy_ casts
    assert same_bytes(out, want)


# ---- the aggregations ----------------------------------------------------------------------------
def fold_each(codec: Codec, msgs: list[list[Payload]], weights: list[float], dense: list[bool]) -> list[torch.Tensor]:
    """The streamed result computed independently: every message decoded on its own and added
    into float64 sums in arrival order."""
    none = make("none")
    out = []
    for j, layer in enumerate(LAYERS):
        acc = codec.aggregate_start(layer, CPU)
        for m, w, d in zip(msgs, weights, dense):
            codec.aggregate_add(acc, (none if d else codec).decode(m[j], layer), w)
        out.append(codec.aggregate_finish(acc, layer))
    return out


@settings(max_examples=25, deadline=None)
@given(
    name=st.sampled_from(["none", "2bit", "qsgd", "topk", "threshold", "signsgd", "4bit", "randomk"]),
    count=st.integers(1, 12),
    chunk=st.integers(1, 13),
    dense_at=st.sets(st.integers(0, 11), max_size=3),
    weights=st.lists(st.integers(1, 5), min_size=12, max_size=12),
)
def test_streamed_folds_chunks_as_each_message_on_arrival(
    name: str, count: int, chunk: int, dense_at: set[int], weights: list[int]
) -> None:
    codec = make(name)
    none = make("none")
    msgs = [[*m] for m in zip(*(messages(codec, L, count, seed=j) for j, L in enumerate(LAYERS)))]
    dense = [i in dense_at for i in range(count)]
    for i in range(count):
        if dense[i]:  # a gateway's dense message: fp32 values of the same layers
            msgs[i] = [none.encode(codec.decode(p, L), L, none.init_state(L, CPU, 0)) for p, L in zip(msgs[i], LAYERS)]
    weighted = codec.supports_ring()
    w = [float(x) if weighted else 1.0 for x in weights[:count]]
    agg = Aggregation([codec] * len(LAYERS), none, LAYERS, CPU, streamed=True, weighted=weighted)
    agg.chunk = chunk
    for m, x, d in zip(msgs, weights, dense):
        agg.add(m, x, d)
    got, _ = agg.result()
    for a, b in zip(got, fold_each(codec, msgs, w, dense)):
        assert same_bytes(a, b)


@pytest.mark.parametrize("name", ["none", "qsgd", "topk", "efsignsgd"])
def test_stacked_equals_the_mean_of_each_message_decoded(name: str) -> None:
    codec = make(name)
    msgs = [[*m] for m in zip(*(messages(codec, L, 9, seed=j) for j, L in enumerate(LAYERS)))]
    agg = Aggregation([codec] * len(LAYERS), make("none"), LAYERS, CPU, streamed=False, weighted=True)
    for m in msgs:
        agg.add(m, 1)
    got, _ = agg.result()
    for j, (a, layer) in enumerate(zip(got, LAYERS)):
        want = codec.aggregate_stacked(torch.stack([codec.decode_read(m[j], layer) for m in msgs]), layer)
        assert same_bytes(a, want)


@pytest.mark.parametrize("chunk", [1, 2, 3])
def test_streamed_adds_in_arrival_order_whatever_the_chunk(chunk: int) -> None:
    """Hand case where float64 addition is not associative: 1e20, -1e20, then 1 folded in that
    order make 1 (mean 1/3); 1e20 + 1 would round the 1 away and any other order gives 0."""
    none = make("none")
    layer = LayerInfo("x", (1,), kind="bias", index=0)
    msgs = [[none.encode(torch.tensor([v]), layer, none.init_state(layer, CPU, 0))] for v in (1e20, -1e20, 1.0)]
    agg = Aggregation([none], none, [layer], CPU, streamed=True, weighted=True)
    agg.chunk = chunk
    for m in msgs:
        agg.add(m, 1)
    (mean,), _ = agg.result()
    assert mean.item() == pytest.approx(1 / 3, rel=1e-7)


@pytest.mark.parametrize("by_copies", [True, False])
def test_pad_rows_zero_pads_buffers_of_any_lengths(by_copies: bool) -> None:
    """Both ways of padding (per-buffer copies, and the GPU's one scatter) give the buffers as
    rows, zeros after each one's end; equal lengths are a plain stack."""
    bufs = [
        torch.tensor([1, 2, 3], dtype=torch.uint8),
        torch.tensor([], dtype=torch.uint8),
        torch.tensor([9], dtype=torch.uint8),
    ]
    want = torch.tensor([[1, 2, 3], [0, 0, 0], [9, 0, 0]], dtype=torch.uint8)
    assert torch.equal(pad_rows(bufs, by_copies=by_copies), want)
    same = [torch.tensor([4, 5], dtype=torch.uint8)] * 2
    assert torch.equal(
        pad_rows(same, by_copies=by_copies), torch.tensor([[4, 5], [4, 5]], dtype=torch.uint8)
    )


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize(("name", "params"), BATCHED, ids=[f"{n}-{p}" for n, p in BATCHED])
def test_decode_many_on_cuda_equals_each_message_decoded_there(name: str, params: dict[str, Any]) -> None:
    """On a GPU: the batched decode (nonzero_static, the scatter padding, gathers) stays on the
    device and equals each message's own decode there, bit for bit."""
    codec = make(name, params)
    dev = torch.device("cuda")
    for j, layer in enumerate(LAYERS):
        payloads = [p.to(dev) for p in messages(codec, layer, 9, seed=j)]
        got = codec.decode_many(payloads, layer)
        assert got.device.type == "cuda"
        assert same_bytes(got, looped(codec, payloads, layer))


def test_aggregate_add_rows_equals_the_adds_in_order() -> None:
    """The one-scan sum of a batch of rows equals the in-place float64 adds, message by message,
    bit for bit: magnitudes 1e-20..1e20 (so that additions round) and whole weights; a fractional
    weight and signSGD's own sum take the adds themselves. Rows from 1 value to past
    CPU_SCAN_MAX_VALUES (from there the CPU adds row by row) and 48,000 (LeNet-5's largest layer)."""
    gen = torch.Generator().manual_seed(5)
    for trial in range(32):
        m, n = 1 + trial % 9, (1 + 37 * trial if trial < 30 else (CPU_SCAN_MAX_VALUES, 48_000)[trial - 30])
        rows = torch.randn(m, n, generator=gen) * 10.0 ** torch.randint(-20, 21, (m, 1), generator=gen)
        start = torch.randn(n, generator=gen, dtype=torch.float64) * 1e15
        for codec, weights in ((make("none"), [float(1 + (i * 7) % 5) for i in range(m)]), (make("none"), [0.5] * m)):
            want = codec.aggregate_start(LayerInfo("x", (n,)), CPU)
            got = codec.aggregate_start(LayerInfo("x", (n,)), CPU)
            want.total.copy_(start)
            got.total.copy_(start)
            for row, w in zip(rows, weights):
                codec.aggregate_add(want, row, w)
            codec.aggregate_add_rows(got, rows, weights)
            assert same_bytes(got.total, want.total) and (got.weight, got.count) == (want.weight, want.count)
