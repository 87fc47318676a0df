"""Encoding several nodes' rows at once (``Codec.encode_rows``) gives each node exactly what encoding
it alone gives: payload bytes, residuals, generator states and step counts, for random inputs (with
and without residuals), odd sizes and ties, nodes at different steps, and edge rows (zero, NaN,
overflow) next to ordinary ones. The bytes themselves are pinned by ``tools/codec_digests.py``."""

from __future__ import annotations

import copy
import math
from typing import Any

import pytest
import torch

from aiotsim.compress.base import LayerInfo
from aiotsim.compress.registry import build_codec, codec_names, row_codecs

CPU = torch.device("cpu")
CASES: list[tuple[str, dict[str, Any]]] = [
    ("topk", {}),
    ("topk", {"ratio": 0.3, "value_dtype": "fp16"}),
    ("topk", {"ratio": 1.0}),
    ("topk", {"error_feedback": False}),
    ("agg-aware", {"ratio": 0.1}),  # before any global update: plain top-k
    ("2bit", {"threshold": 0.3}),
    ("2bit", {"threshold": 0.3, "error_feedback": False}),
    ("signsgd", {}),
    ("signsgd", {"scale": "none"}),
    ("efsignsgd", {}),
    ("terngrad", {}),
    ("terngrad", {"clip": False}),
    ("qsgd", {}),
    ("qsgd", {"levels": 3, "bucket_size": 7}),
    ("qsgd", {"elias": True}),  # falls back to the loop
    ("none", {}),
    ("fp16", {}),
    ("onebit", {}),
    ("onebit", {"granularity": "column"}),
    ("4bit", {}),
    ("4bit", {"statistic": "mean", "spacing": "log2"}),
    ("4bit", {"statistic": "std"}),
    ("threshold", {"tau": 0.5}),  # most values pass: bitmap-coded rows
    ("threshold", {"tau": 2.0, "quantize": True}),  # a few: delta-coded, signs only
    ("threshold", {"tau": 1.0, "value_dtype": "fp16", "error_feedback": False}),
    ("randomk", {}),
    ("randomk", {"scale": False, "value_dtype": "fp16"}),  # with a residual
    ("dgc", {}),
    ("dgc", {"clip_norm": 1.0, "value_dtype": "fp16"}),  # some rows clipped, some not
    ("dgc", {"sparsity": 0.5, "warmup_steps": 0, "fallback_factor": 1.0}),  # rows re-select the exact top-k
    ("dgc", {"warmup_steps": 2, "momentum": 0.5}),  # k changes from step to step
    ("pgc", {}),  # Algorithm 1 on the raw gradient, top-k of the accumulation (residual + velocity)
    ("pgc", {"stats": "accumulated", "momentum": 0.0, "value_dtype": "fp16"}),
    ("pgc", {"scale": 30.0, "topk_reading": "count"}),
    ("pgc-paper", {}),  # no residual, no momentum: Algorithm 1 on the gradient itself
    ("pgc-paper", {"momentum": 0.5, "scale": 35.0}),  # no residual, the velocity screened
    ("hylo", {}),  # the shapes here are small: dense, and the 1-D 70,000 falls back to 2-bit
    ("hylo", {"size_threshold": 10}),  # fc 2-bit, conv kernels (15 of 3x3), dense, 2-bit fallback
    ("hylo", {"size_threshold": 10, "importance_norm": "l2", "value_dtype": "fp16", "fc_stat": "rms"}),
    ("hylo", {"size_threshold": 10, "kernel_unit": "filter", "fc_stat": "max_abs", "fc_factor": 0.5}),
    ("fft", {}),  # no residual (the paper's reading); 70,000 values: 18 chunks of 4,096, the last padded
    ("fft", {"error_feedback": True}),  # the residual: the inverse FFT of what was sent
    ("fft", {"error_feedback": True, "chunk_size": 16, "mantissa_bits": 3, "max_exponent_bits": 2}),
    ("fft", {"chunk_size": 0, "schedule": "linear", "keep": 0.2, "keep_end": 0.6, "schedule_steps": 2}),
    ("variance", {}),  # no per-sample squares given: the gradient squared stands in
    ("variance", {"alpha": 2.0, "zeta": 0.9}),  # fewer pass, v decays
    ("variance", {"quantize": False, "value_dtype": "fp16"}),
    ("variance", {"decay_residual": True, "zeta": 0.9}),  # a residual decay per element: the loop
]
SHAPES = [(7,), (16, 8), (3, 5, 3, 3), (70_000,)]


def _bytes(p) -> dict[str, bytes]:
    return {k: v.cpu().numpy().tobytes() for k, v in p.buffers.items()}


def _grads(nodes: int, shape: tuple[int, ...], seed: int, ties: bool) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    out = [torch.randn(shape, generator=g) for _ in range(nodes)]
    if ties:  # many equal magnitudes: exercises top-k's lower-index tie rule and 2-bit's bounds
        out = [(x * 4).round() / 4 for x in out]
    return out


@pytest.mark.parametrize(("name", "params"), CASES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CASES)])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_batch_is_byte_identical_to_the_loop(name: str, params: dict[str, Any], shape: tuple[int, ...]) -> None:
    codec = build_codec(name, params, seed=11)
    layer = LayerInfo("w", shape, kind="fc" if len(shape) == 2 else "conv", index=2)
    nodes = 5
    looped = [codec.init_state(layer, CPU, node=i) for i in range(nodes)]
    batched = copy.deepcopy(looped)
    for step in range(3):  # residuals build up from the second step
        grads = _grads(nodes, shape, seed=step, ties=step == 1)
        ref = [codec.encode(g, layer, s) for g, s in zip(grads, looped)]
        got = codec.encode_rows(torch.stack(grads) if step == 2 else grads, layer, batched)
        assert [_bytes(p) for p in got] == [_bytes(p) for p in ref]
        for a, b in zip(looped, batched):
            assert a.step == b.step == step + 1
            assert (a.residual is None) == (b.residual is None)
            if a.residual is not None:
                assert b.residual.shape == a.residual.shape
                assert a.residual.numpy().tobytes() == b.residual.numpy().tobytes()
            assert torch.equal(a.generator.get_state(), b.generator.get_state())
            assert getattr(a, "last", None) == getattr(b, "last", None)  # PGC's Algorithm-1 quantities
            _same_tensor(getattr(a, "variance", None), getattr(b, "variance", None))  # Gradient Variance's v
            u, v = getattr(a, "momentum", None), getattr(b, "momentum", None)  # DGC's, PGC's velocity
            assert (u is None) == (v is None)
            if u is not None:
                assert v.shape == u.shape and u.numpy().tobytes() == v.numpy().tobytes()
    for g in grads:  # the callers' gradients are not modified
        assert g.abs().sum() > 0


def _same_tensor(a: torch.Tensor | None, b: torch.Tensor | None) -> None:
    assert (a is None) == (b is None)
    if a is not None:
        assert b is not None and b.shape == a.shape and a.numpy().tobytes() == b.numpy().tobytes()


@pytest.mark.parametrize("quantize", [True, False])
def test_variance_rows_with_per_sample_squares_encode_as_each_node(quantize: bool) -> None:
    """Gradient Variance as the engine feeds it: each node's ``sq_grad`` set before the encode (the
    rows of one batched pass's block, or tensors of their own), one node without (the gradient
    squared stands in), variances as one block, apart from it, or none yet; three steps of
    bytes, residuals and variances equal to each node's own encode. A hand check: at the first
    step (no residual, no variance yet, alpha = 1) element i is sent when g_i^2 > s_i, so with
    squares g^2 / 4 every nonzero element is sent."""
    codec = build_codec("variance", {"alpha": 1.0, "zeta": 0.95, "quantize": quantize}, seed=3)
    layer = LayerInfo("w", (6, 5), kind="fc", index=1)
    nodes = 4
    looped = [codec.init_state(layer, CPU, node=i) for i in range(nodes)]
    batched = copy.deepcopy(looped)
    for step in range(3):
        grads = _grads(nodes, (6, 5), seed=10 + step, ties=False)
        block = torch.stack([g.square() / (4 if step == 0 else 1 + k) for k, g in enumerate(grads)])  # a pass's rows
        squares = list(block.unbind(0)) if step != 1 else [b.clone() for b in block]  # own tensors at step 1
        squares[2] = None if step == 2 else squares[2]
        for s, sq in zip(looped, squares):
            s.sq_grad = sq
        for states in (looped, batched):  # node 1's variance apart from the block, node 3 a fresh one
            if step == 1:
                states[1].variance = states[1].variance.clone()
            if step == 2:
                states[3].variance = None
        ref = [codec.encode(g, layer, s) for g, s in zip(grads, looped)]
        for s, sq in zip(batched, squares):
            s.sq_grad = sq
        got = codec.encode_rows(grads, layer, batched)
        assert [_bytes(p) for p in got] == [_bytes(p) for p in ref]
        if step == 0:
            for g, p in zip(grads, ref):
                assert torch.equal(codec.decode(p, layer) != 0, g != 0)
        for a, b in zip(looped, batched):
            _same_tensor(a.residual, b.residual)
            _same_tensor(a.variance, b.variance)


def test_a_node_without_residual_next_to_nodes_with_one() -> None:
    codec = build_codec("topk", {"ratio": 0.25}, seed=1)
    layer = LayerInfo("w", (40,))
    states = [codec.init_state(layer, CPU, node=i) for i in range(3)]
    codec.encode_rows(_grads(3, (40,), 0, False), layer, states)
    states[1].residual = None  # e.g. reset on rejoin
    looped = copy.deepcopy(states)
    grads = _grads(3, (40,), 1, False)
    ref = [codec.encode(g, layer, s) for g, s in zip(grads, looped)]
    got = codec.encode_rows(grads, layer, states)
    assert [_bytes(p) for p in got] == [_bytes(p) for p in ref]
    # hand check: top-k sends 10 of 40, so the new residual holds exactly 30 non-zeros per node
    assert all(int(torch.count_nonzero(s.residual)) == 30 for s in states)


def test_topk_ties_lower_index_wins() -> None:
    codec = build_codec("topk", {"ratio": 0.5, "error_feedback": False}, seed=0)
    layer = LayerInfo("w", (4,))
    states = [codec.init_state(layer, CPU, node=i) for i in range(2)]
    grads = torch.tensor([[1.0, -1.0, 1.0, 0.5], [0.0, 2.0, -2.0, 2.0]])
    got = [codec.decode(p, layer) for p in codec.encode_rows(grads, layer, states)]
    assert got[0].tolist() == [1.0, -1.0, 0.0, 0.0]  # three ties at 1: indices 0 and 1 win
    assert got[1].tolist() == [0.0, 2.0, -2.0, 0.0]


def test_dgc_rows_at_different_steps_or_without_a_velocity_select_as_each_node() -> None:
    """Nodes whose warm-up stages differ keep different k (each row selects as the loop does), and
    a newcomer without a velocity next to nodes with one steps node by node; the bytes, residuals
    and velocities equal the loop's. Hand check, 4,000 entries: after 2 encodes a row is in the
    second warm-up stage (93.75%, k = 250), one moved to the fourth (99.609375%, k = 16); the
    sampled threshold passes about k, at most 1.3 k (more: the exact k); a row's velocity is 0
    where it sent."""
    codec = build_codec("dgc", {"warmup_steps": 8}, seed=5)
    layer = LayerInfo("w", (40, 100), kind="fc", index=1)
    states = [codec.init_state(layer, CPU, node=i) for i in range(4)]
    for step in range(2):
        codec.encode_rows(_grads(4, (40, 100), step, False), layer, states)
    states[1].step = 6  # the fourth warm-up stage
    states[3].momentum = None  # rejoined: no velocity yet
    looped = copy.deepcopy(states)
    grads = _grads(4, (40, 100), 7, False)
    ref = [codec.encode(g, layer, s) for g, s in zip(grads, looped)]
    got = codec.encode_rows(grads, layer, states)
    assert [_bytes(p) for p in got] == [_bytes(p) for p in ref]
    for a, b in zip(looped, states):
        assert a.momentum.numpy().tobytes() == b.momentum.numpy().tobytes()
        assert a.residual.numpy().tobytes() == b.residual.numpy().tobytes()
    sent = [codec.decode(p, layer) for p in got]
    kept = [int(torch.count_nonzero(d)) for d in sent]
    assert 150 <= kept[0] <= 325 and 1 <= kept[1] <= 20 and all(150 <= c <= 325 for c in kept[2:])
    for d, s in zip(sent, states):
        assert torch.equal(s.momentum[d != 0], torch.zeros(int((d != 0).sum())))


@pytest.mark.parametrize("name", ["pgc", "pgc-paper"])
def test_pgc_rows_that_are_zero_nan_or_overflow_encode_as_each_node(name: str) -> None:
    """Algorithm 1's edge rows next to ordinary ones: an all-zero gradient (k = 0, nothing sent), a
    NaN (alpha = -inf: every value sent, as the loop does so that the server stops the run), values
    whose squares overflow fp32 (the loop's float64 recount)."""
    codec = build_codec(name, {}, seed=3)
    layer = LayerInfo("w", (64,))
    grads = _grads(5, (64,), 0, False)
    grads[1] = torch.zeros(64)
    grads[2][7] = float("nan")
    grads[3] = grads[3] * 1e20
    looped = [codec.init_state(layer, CPU, node=i) for i in range(5)]
    batched = copy.deepcopy(looped)
    ref = [codec.encode(g, layer, s) for g, s in zip(grads, looped)]
    got = codec.encode_rows(grads, layer, batched)
    assert [_bytes(p) for p in got] == [_bytes(p) for p in ref]
    assert [repr(s.last) for s in batched] == [repr(s.last) for s in looped]
    # hand checks: the zero row sends nothing, the NaN row everything (its alpha is -inf)
    assert batched[1].last.k == 0 and got[1].nbytes < got[0].nbytes
    assert batched[2].last.alpha == -math.inf


@pytest.mark.parametrize(("shape", "kind"), [((6, 4, 3, 3), "conv"), ((12, 10), "fc")])
def test_hylo_rows_with_tied_kernels_zero_or_nan_encode_as_each_node(shape: tuple[int, ...], kind: str) -> None:
    """Hylo's edge rows: kernels of equal importance (zero kernels: top-k picks among ties), an
    all-zero node (2-bit threshold 0: nothing sent), a NaN (a threshold of NaN sends no code)."""
    codec = build_codec("hylo", {"size_threshold": 10}, seed=2)
    layer = LayerInfo("w", shape, kind=kind, index=1)
    grads = _grads(4, shape, 0, True)
    grads[0].view(-1, 9 if kind == "conv" else 10)[::2] = 0.0  # every other kernel (row) zero
    grads[1] = torch.zeros(shape)
    grads[2].view(-1)[5] = float("nan")
    looped = [codec.init_state(layer, CPU, node=i) for i in range(4)]
    batched = copy.deepcopy(looped)
    ref = [codec.encode(g, layer, s) for g, s in zip(grads, looped)]
    got = codec.encode_rows(grads, layer, batched)
    assert [_bytes(p) for p in got] == [_bytes(p) for p in ref]
    for a, b in zip(looped, batched):
        assert a.residual.numpy().tobytes() == b.residual.numpy().tobytes()
    if kind == "fc":  # hand check: the zero node's threshold is 0, so it sends no code and keeps 0
        assert _bytes(got[1])["threshold"] == bytes(4) and not any(_bytes(got[1])["codes"])


@pytest.mark.parametrize("error_feedback", [False, True])
def test_fft_rows_at_different_steps_or_with_a_nan_encode_as_each_node(error_feedback: bool) -> None:
    """FFT rows whose schedules keep different bin counts (a newcomer beside nodes two steps on:
    two top-k groups) and a row whose spectrum holds a NaN (the loop's own encode)."""
    params = {"schedule": "linear", "keep": 0.1, "keep_end": 0.9, "schedule_steps": 4, "chunk_size": 64}
    codec = build_codec("fft", {**params, "error_feedback": error_feedback}, seed=4)
    layer = LayerInfo("w", (300,), kind="fc", index=0)
    looped = [codec.init_state(layer, CPU, node=i) for i in range(5)]
    for s in looped[:3]:
        s.step = 2
    batched = copy.deepcopy(looped)
    grads = _grads(5, (300,), 0, False)
    grads[4][10] = float("nan")
    ref = [codec.encode(g, layer, s) for g, s in zip(grads, looped)]
    got = codec.encode_rows(grads, layer, batched)
    assert [_bytes(p) for p in got] == [_bytes(p) for p in ref]
    for a, b in zip(looped, batched):
        assert a.step == b.step and (a.residual is None) == (b.residual is None)
        if a.residual is not None:
            assert a.residual.numpy().tobytes() == b.residual.numpy().tobytes()
    # hand check: 5 chunks of 64 (33 bins each, 165 in all); step 2 keeps ceil(0.5 * 165) = 83 bins,
    # step 0 ceil(0.1 * 165) = 17: the first message holds more values than the fourth
    assert got[0].buffers["values"].numel() > got[3].buffers["values"].numel()


def test_which_codecs_encode_rows_at_once() -> None:
    """Every built-in codec but PowerSGD (a matrix factorization per node) has its own row encoder."""
    names = row_codecs()
    assert names == [
        "2bit",
        "4bit",
        "agg-aware",
        "dgc",
        "efsignsgd",
        "fft",
        "fp16",
        "hylo",
        "none",
        "onebit",
        "pgc",
        "pgc-paper",
        "qsgd",
        "randomk",
        "signsgd",
        "terngrad",
        "threshold",
        "topk",
        "variance",
    ]
    assert set(names) <= set(codec_names())


def test_mismatched_lengths() -> None:
    codec = build_codec("topk", seed=0)
    layer = LayerInfo("w", (4,))
    with pytest.raises(ValueError, match="2 gradients for 1 states"):
        codec.encode_rows([torch.zeros(4), torch.zeros(4)], layer, [codec.init_state(layer, CPU, 0)])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize(
    "name", ["topk", "2bit", "efsignsgd", "terngrad", "qsgd", "signsgd", "none", "fp16", "onebit", "4bit"]
)
def test_batch_on_cuda_is_byte_identical(name: str) -> None:
    dev = torch.device("cuda")
    codec = build_codec(name, seed=3)
    layer = LayerInfo("w", (1000, 33))
    looped = [codec.init_state(layer, dev, node=i) for i in range(4)]
    batched = copy.deepcopy(looped)
    for step in range(2):
        grads = [g.to(dev) for g in _grads(4, layer.shape, step, False)]
        ref = [codec.encode(g, layer, s) for g, s in zip(grads, looped)]
        got = codec.encode_rows(grads, layer, batched)
        assert all(b.device.type == "cuda" for p in got for b in p.buffers.values())
        assert [_bytes(p) for p in got] == [_bytes(p) for p in ref]


def test_large_topk_on_the_cpu_selects_row_by_row(monkeypatch) -> None:
    """Top-k of >= 65,536 elements at ratio <= 1/4: on the CPU each row's k-th magnitude is
    bracketed on a sample (topk_indices row by row), faster there than one row-wise top-k over the
    full rows; smaller layers take the row-wise top-k. The same indices either way: a row's
    message is the same whether the bracket ran or not."""
    from aiotsim.compress import sparsify

    calls: list[int] = []
    real = sparsify.topk_indices
    monkeypatch.setattr(sparsify, "topk_indices", lambda mag, k: calls.append(k) or real(mag, k))
    codec = build_codec("topk", seed=0)
    big, small = LayerInfo("w", (70_000,)), LayerInfo("w", (60_000,))
    got = codec.encode_rows(_grads(2, big.shape, 0, False), big, [codec.init_state(big, CPU, i) for i in range(2)])
    assert calls == [700, 700]  # k = ceil(0.01 * 70,000), once per row
    codec.encode_rows(_grads(2, small.shape, 0, False), small, [codec.init_state(small, CPU, i) for i in range(2)])
    assert len(calls) == 2  # below the bracket's size: one row-wise top-k
    monkeypatch.setattr(sparsify, "_BRACKET_MIN_NUMEL", 10**9)  # never bracket: the same messages
    again = codec.encode_rows(_grads(2, big.shape, 0, False), big, [codec.init_state(big, CPU, i) for i in range(2)])
    assert [_bytes(p) for p in again] == [_bytes(p) for p in got]


@pytest.mark.parametrize(("name", "params"), [("terngrad", {}), ("4bit", {"statistic": "std"})])
def test_sums_of_squares_do_not_depend_on_where_the_data_lies(name: str, params: dict[str, Any]) -> None:
    """TernGrad's clip bound (2.5 sigma) and 4Bit's 'std' anchor take a sum of squares. BLAS's dot
    rounds it differently with the data's address (a row of ``[nodes, n]`` starts at ``4 n i``
    bytes, rarely 64-byte aligned): batched TernGrad's scale then differed from the loop's in 65 of
    120 random cases. torch's own norm reduction rounds alike anywhere. Here one outlier of 10
    among N(0, 1) values makes the clip bind, and the same values are encoded in fresh tensors, at
    odd offsets of a larger buffer, and batched from a list and from a stacked tensor."""
    codec = build_codec(name, params, seed=11)
    for n in (7, 135, 1001):
        layer = LayerInfo("w", (n,), kind="other")
        for seed in range(8):
            g = torch.Generator().manual_seed(seed)
            grads = [torch.randn(n, generator=g) for _ in range(5)]
            for x in grads:
                x[seed % n] = 10.0
            buffer = torch.empty(5 * n + 5)
            shifted = [buffer[i * n + i + 1 : (i + 1) * n + i + 1].copy_(x) for i, x in enumerate(grads)]
            states = [[codec.init_state(layer, CPU, node=i) for i in range(5)] for _ in range(4)]
            ref = [codec.encode(x, layer, s) for x, s in zip(grads, states[0])]
            moved = [codec.encode(x, layer, s) for x, s in zip(shifted, states[1])]
            listed = codec.encode_rows(grads, layer, states[2])
            stacked = codec.encode_rows(torch.stack(grads), layer, states[3])
            expected = [_bytes(p) for p in ref]
            assert [_bytes(p) for p in moved] == expected
            assert [_bytes(p) for p in listed] == [_bytes(p) for p in stacked] == expected


def test_half_gradients_keep_their_own_bytes() -> None:
    """fp16 sends a half-precision gradient's bytes unchanged, NaN payloads included: the batched
    path (which works on fp32 rows) leaves such gradients to the loop, and a dense payload never
    aliases the caller's gradient."""
    layer = LayerInfo("w", (6,))
    nan = torch.tensor([0x7E01], dtype=torch.int16).view(torch.float16)  # a NaN with a payload
    grads = [torch.tensor([1.0, -2.0, 0.5, 3.0, 0.0, 1.0], dtype=torch.float16) for _ in range(3)]
    grads[1][2] = nan[0]
    codec = build_codec("fp16", {}, seed=1)
    got = codec.encode_rows(grads, layer, [codec.init_state(layer, CPU, node=i) for i in range(3)])
    assert [p.buffers["values"].numpy().tobytes() for p in got] == [
        g.view(torch.uint8).numpy().tobytes() for g in grads
    ]
    stacked = torch.randn(3, 6)
    none = build_codec("none", {}, seed=1)
    sent = none.encode_rows(stacked, layer, [none.init_state(layer, CPU, node=i) for i in range(3)])
    before = [p.buffers["values"].clone() for p in sent]
    stacked.add_(1.0)  # the caller reuses its gradient buffer
    assert all(torch.equal(p.buffers["values"], b) for p, b in zip(sent, before))


@pytest.mark.parametrize("metric", ["global", "persistence", "consensus", "magnitude"])
@pytest.mark.parametrize("reserve", [1.0, 0.5])
def test_aggregation_aware_after_global_updates(metric: str, reserve: float) -> None:
    """Seed 001's selection once the nodes have learned from the server's aggregates (boosted
    scores; with ``reserve`` < 1 part of k by |acc| alone): the same bytes and residuals batched.
    Two of the five nodes join late (no globalness yet), so one batch mixes both kinds."""
    codec = build_codec("agg-aware", {"ratio": 0.1, "metric": metric, "reserve": reserve}, seed=5)
    layer = LayerInfo("w", (16, 8), kind="fc", index=2)
    looped = [codec.init_state(layer, CPU, node=i) for i in range(5)]
    batched = copy.deepcopy(looped)
    for step in range(4):
        grads = _grads(5, layer.shape, seed=step, ties=step == 2)
        ref = [codec.encode(g, layer, s) for g, s in zip(grads, looped)]
        got = codec.encode_rows(grads, layer, batched)
        assert [_bytes(p) for p in got] == [_bytes(p) for p in ref]
        for a, b in zip(looped, batched):
            assert a.residual.numpy().tobytes() == b.residual.numpy().tobytes()
        update = torch.zeros(16 * 8).index_fill_(
            0, torch.randperm(128, generator=torch.Generator().manual_seed(step))[:40], 1.0
        )
        update = update * torch.rand(128, generator=torch.Generator().manual_seed(99 + step))
        for i in range(5):
            if step or i < 3:  # nodes 3 and 4 observe from the second round on
                codec.observe_global(update.view(layer.shape), layer, looped[i])
                codec.observe_global(update.view(layer.shape), layer, batched[i])


@pytest.mark.parametrize("name", ["topk", "2bit", "efsignsgd", "onebit", "4bit", "threshold", "randomk"])
def test_residuals_stored_as_one_block_are_updated_in_it(name: str, monkeypatch) -> None:
    """A pass's residuals held as the rows of one block (the state pages of a batched sync round)
    take ``grad + residual`` and the new residual in that block, in place, with the loop's bytes."""
    import aiotsim.compress.memory as batch_mod
    from aiotsim.sim.pages import StatePages
    from aiotsim.sim.storage import hold_residual_rows

    inner, found = batch_mod.rows_block, []  # per encode with residuals: formed in their block?

    def spy(rows: Any) -> Any:
        out = inner(rows)
        if len(rows) > 1:  # the four nodes at once (a node's own encode is one row)
            found.append(out is not None)
        return out

    monkeypatch.setattr(batch_mod, "rows_block", spy)

    params = {"threshold": {"tau": 0.5}, "randomk": {"scale": False}}.get(name, {})  # randomk: with a residual
    codec = build_codec(name, params, seed=5)
    layer = LayerInfo("w", (16, 8), kind="fc", index=1)
    looped = [codec.init_state(layer, CPU, node=i) for i in range(4)]
    batched = copy.deepcopy(looped)
    pages = StatePages()
    for step in range(3):
        grads = _grads(4, (16, 8), seed=10 + step, ties=False)
        ref = [codec.encode(g, layer, s) for g, s in zip(grads, looped)]
        got = codec.encode_rows(torch.stack(grads), layer, batched)
        assert [_bytes(p) for p in got] == [_bytes(p) for p in ref]
        assert all(torch.equal(a.residual, b.residual) for a, b in zip(looped, batched))
        if step == 0:  # the first residuals: rows of one fresh tensor, moved into one block
            hold_residual_rows([[s] for s in batched], pages)
            held = [s.residual.data_ptr() for s in batched]
            assert pages.held_bytes == _aligned(4 * 16 * 8 * 4)
        else:  # later steps: the same memory
            assert [s.residual.data_ptr() for s in batched] == held
    assert pages.held_bytes == _aligned(4 * 16 * 8 * 4)  # nothing stored anew
    assert found == [True, True]  # steps 1 and 2 (step 0 had no residuals)


def test_residuals_that_are_not_one_tensors_rows_are_left_to_each_node() -> None:
    from aiotsim.sim.pages import StatePages
    from aiotsim.sim.storage import hold_residual_rows

    codec = build_codec("topk", {}, seed=5)
    layer = LayerInfo("w", (40,))
    states = [codec.init_state(layer, CPU, node=i) for i in range(3)]
    for s in states:
        s.residual = torch.ones(40)  # each its own tensor
    pages = StatePages()
    hold_residual_rows([[s] for s in states], pages)
    assert pages.held_bytes == 0 and not any(pages.holds(s.residual) for s in states)


def _aligned(nbytes: int) -> int:
    return -(-nbytes // 64) * 64
