"""Hand-computed and statistical checks of the sparse codecs: topk, randomk, threshold, dgc,
variance, pgc, agg-aware (the registry-wide contract test lives elsewhere)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from test_host_reads_benchmark import host_reads_module

from aiotsim.compress.base import LayerInfo, Payload
from aiotsim.compress.dgc import warmup_sparsity
from aiotsim.compress.packing import (
    IDX_BITMAP,
    IDX_DELTA,
    IDX_PLAIN,
    _bitmap_certainly_beats_delta,
    decode_indices,
    encode_index_ragged,
    encode_index_rows,
    encode_index_set,
    encode_indices,
    index_coding_sizes,
    pack_bits,
    pack_values,
)
from aiotsim.compress.registry import build_codec
from aiotsim.compress.sparse import payload_indices
from aiotsim.compress.sparsify import mask_indices, topk_indices
from aiotsim.compress.variance import quantize_pow2_rows
from aiotsim.errors import ConfigError

CPU = torch.device("cpu")


def setup(name: str, params: dict, shape: tuple[int, ...], node: int = 0, seed: int = 0):
    codec = build_codec(name, params, seed=seed)
    layer = LayerInfo("w", shape)
    return codec, layer, codec.init_state(layer, CPU, node)


def sent_of(codec, payload, layer) -> torch.Tensor:
    return codec.decode(payload, layer).float()


# ---- top-k -------------------------------------------------------------------------------------
def test_topk_ties_lower_index_wins() -> None:
    # |g| = 3 5 2 3 5 3 0; k = ceil(0.4 * 7) = 3: both 5s (1, 4), then one of the 3s at 0, 3, 5:
    # the lowest index, 0.
    codec, layer, state = setup("topk", {"ratio": 0.4}, (7,))
    g = torch.tensor([3.0, -5.0, 2.0, 3.0, 5.0, -3.0, 0.0])
    payload = codec.encode(g, layer, state)
    assert payload_indices(payload, 7).tolist() == [0, 1, 4]
    assert sent_of(codec, payload, layer).tolist() == [3.0, -5.0, 0.0, 0.0, 5.0, 0.0, 0.0]
    assert state.residual.tolist() == [0.0, 0.0, 2.0, 3.0, 0.0, -3.0, 0.0]


def test_topk_indices_matches_stable_sort_on_many_ties() -> None:
    # Integer magnitudes: thousands of ties at the k-th value; the sampled-bracket path (n >= 65536)
    # must return exactly the stable-sort answer (descending magnitude, then ascending index).
    g = torch.Generator().manual_seed(3)
    mag = torch.randint(0, 50, (300_001,), generator=g).float()
    for k in (1, 17, 3000, 70_000, 300_001):
        ref = torch.sort(torch.sort(-mag, stable=True).indices[:k]).values
        assert torch.equal(topk_indices(mag, k), ref), k


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 300), density=st.floats(0.0, 1.0), seed=st.integers(0, 2**16))
def test_mask_indices_of_a_known_count_equal_nonzero(n: int, density: float, seed: int) -> None:
    """The GPU's ``nonzero_static`` of the known count and the CPU's ``nonzero`` give the same
    ascending indices (the top-k selections' last step on either device)."""
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(n, generator=g) < density
    count = int(mask.sum())
    want = torch.nonzero(mask).reshape(-1)
    for static in (True, False):
        got = mask_indices(mask, count, static=static)
        assert got.dtype == torch.int64 and torch.equal(got, want)


def test_topk_payload_exact_size_fp16_clustered() -> None:
    # n = 1000, k = ceil(0.01 * 1000) = 10 at indices 100..109. Index coding: header 6 bytes;
    # plain: 10 x bit_width(999) = 10 bits -> ceil(100 / 8) = 13; delta: gaps 100, 1, ..., 1 ->
    # width bit_width(100) = 7 -> ceil(70 / 8) = 9 (chosen); bitmap: 125. Values: 10 x fp16 = 20.
    # Total 6 + 9 + 20 = 35 bytes.
    codec, layer, state = setup("topk", {"ratio": 0.01, "value_dtype": "fp16"}, (1000,))
    g = torch.full((1000,), 0.01)
    g[100:110] = torch.arange(1.0, 11.0)
    payload = codec.encode(g, layer, state)
    assert payload.buffers["indices"].numel() == 15
    assert payload.buffers["indices"][0].item() == IDX_DELTA
    assert payload.buffers["values"].numel() == 20
    assert payload.nbytes == 35


# ---- index coding chooses the smaller form ------------------------------------------------------
def test_index_coding_dense_set_uses_bitmap() -> None:
    # n = 80, all indices but 10..19 (70 of them). plain: 70 x bit_width(79) = 7 bits = 490 bits
    # -> 62 bytes; delta: largest gap 20 - 9 = 11 -> 4 bits -> 280 bits = 35 bytes; bitmap:
    # 80 bits = 10 bytes. Plus the 6-byte header: bitmap, 16 bytes.
    idx = torch.tensor([i for i in range(80) if not 10 <= i < 20])
    buf = encode_indices(idx, 80)
    assert (buf[0].item(), buf.numel()) == (IDX_BITMAP, 16)
    # Through a codec: topk with k = ceil(0.875 * 80) = 70 picks exactly that set; 70 fp32 values.
    codec, layer, state = setup("topk", {"ratio": 0.875}, (80,))
    g = torch.ones(80)
    g[10:20] = 0.1
    payload = codec.encode(g, layer, state)
    assert payload.buffers["indices"][0].item() == IDX_BITMAP
    assert payload.nbytes == 16 + 70 * 4


def test_index_coding_clustered_set_uses_delta() -> None:
    # n = 1e6, indices 100..109: plain 10 x 20 bits = 25 bytes; delta 10 x 7 bits (gap 100) =
    # 9 bytes; bitmap 125,000 bytes. Delta: 6 + 9 = 15.
    buf = encode_indices(torch.arange(100, 110), 1_000_000)
    assert (buf[0].item(), buf.numel()) == (IDX_DELTA, 15)


def test_index_coding_scattered_tie_prefers_plain() -> None:
    # n = 1e6, indices {0, 999999}: plain 2 x 20 bits = 5 bytes; delta gaps (0, 999999) -> 20 bits
    # each = 5 bytes: a tie, which goes to the simpler plain form. 6 + 5 = 11 bytes.
    buf = encode_indices(torch.tensor([0, 999_999]), 1_000_000)
    assert (buf[0].item(), buf.numel()) == (IDX_PLAIN, 11)


def test_index_coding_from_mask_keeps_delta_when_it_ties_the_bitmap() -> None:
    # n = 80, the 40 even indices: plain 40 x 7 bits = 35 bytes; delta gaps (0, 2, 2, ...) -> 2 bits
    # -> 10 bytes; bitmap 10 bytes: a tie, which goes to delta. The bitmap (0x55 bytes) has no zero
    # byte, so the mask shortcut cannot prove the bitmap cheaper and must fall back to the gaps.
    idx = torch.arange(0, 80, 2)
    mask = torch.zeros(80, dtype=torch.bool)
    mask[idx] = True
    buf = encode_indices(idx, 80, mask)
    assert (buf[0].item(), buf.numel()) == (IDX_DELTA, 16)
    assert torch.equal(decode_indices(buf, 80), idx)


@pytest.mark.parametrize(
    ("missing", "shown"),
    [
        ([42], True),  # bits 41 and 43 set in one byte: a gap of 2 read off the byte table
        ([40], False),  # the gap 39 -> 41 spans two bytes: not shown, the exact pass decides
        (list(range(16, 24)), True),  # a whole zero byte: a gap of 9
    ],
)
def test_bitmap_proof_from_the_bytes_alone(missing: list[int], shown: bool) -> None:
    # n = 80 with a few indices missing: delta ties the bitmap only with 1-bit gaps (W = 1), so
    # any gap >= 2 makes the bitmap (10 bytes + header) the cheapest form.
    mask = torch.ones(80, dtype=torch.bool)
    mask[missing] = False
    idx = torch.nonzero(mask).reshape(-1)
    packed = pack_bits(mask.view(torch.uint8), 1)
    assert _bitmap_certainly_beats_delta(packed, idx.numel(), 80) is shown
    buf = encode_indices(idx, 80, mask)
    assert (buf[0].item(), buf.numel()) == (IDX_BITMAP, 16)
    assert torch.equal(buf, encode_indices(idx, 80))


@st.composite
def index_sets(draw: st.DrawFn) -> torch.Tensor:
    """Boolean masks of runs of set and unset bits (dense, clustered and scattered sets)."""
    runs = draw(st.lists(st.tuples(st.booleans(), st.integers(1, 300)), min_size=1, max_size=40))
    return torch.tensor([bit for bit, length in runs for _ in range(length)], dtype=torch.bool)


@settings(max_examples=150, deadline=None)
@given(mask=index_sets())
def test_index_coding_from_mask_gives_the_same_cheapest_bytes(mask: torch.Tensor) -> None:
    n = mask.numel()
    idx = torch.nonzero(mask).reshape(-1)
    buf = encode_indices(idx, n, mask)
    assert torch.equal(buf, encode_indices(idx, n))  # the shortcut never changes the bytes
    gaps = torch.diff(idx, prepend=idx.new_zeros(1))
    sizes = index_coding_sizes(idx.numel(), n, int(gaps.max()) if idx.numel() else 0)
    assert buf.numel() == min(sizes.values())  # and they are the cheapest form
    assert torch.equal(decode_indices(buf, n), idx)
    values = torch.arange(1, idx.numel() + 1, dtype=torch.float32)
    dense = torch.zeros(n)
    dense[idx] = values
    payload = Payload({"indices": buf, "values": pack_values(values, "fp32")})
    # decoded as a sparse codec's message (exact fp32 values): the bitmap or the index path
    assert torch.equal(build_codec("topk").decode(payload, LayerInfo("w", (n,))), dense)


@st.composite
def index_rows(draw: st.DrawFn) -> tuple[torch.Tensor, int]:
    """``[rows, k]`` sorted index sets into ``[0, n)`` of mixed kinds (scattered, clustered, dense,
    or the first k), so that rows of one batch take different coding forms and widths."""
    n = draw(st.integers(1, 400))
    k = draw(st.integers(1, n))
    rows = []
    for kind, seed in draw(st.lists(st.tuples(st.sampled_from("scdf"), st.integers(0, 2**16)), min_size=1, max_size=6)):
        g = torch.Generator().manual_seed(seed)
        if kind == "s":  # scattered
            row = torch.randperm(n, generator=g)[:k]
        elif kind == "c":  # one cluster at a random offset
            start = int(torch.randint(0, n - k + 1, (1,), generator=g))
            row = torch.arange(start, start + k)
        elif kind == "d":  # dense: all but a random n - k
            row = torch.randperm(n, generator=g)[: n - k]
            row = torch.nonzero(~torch.zeros(n, dtype=torch.bool).index_fill_(0, row, True)).reshape(-1)
        else:
            row = torch.arange(k)
        rows.append(row.sort().values)
    return torch.stack(rows), n


@settings(max_examples=200, deadline=None)
@given(batch=index_rows())
def test_index_rows_equal_each_rows_own_coding(batch: tuple[torch.Tensor, int]) -> None:
    idx, n = batch
    got = encode_index_rows(idx, n)
    own = [encode_index_set(r, n) for r in idx]
    assert [bytes(c.buf.numpy()) for c in got] == [bytes(c.buf.numpy()) for c in own]
    # the host copy of each header: the buffer's first 6 bytes, as each row's own coding has it
    assert [c.head for c in got] == [c.head for c in own] == [bytes(c.buf[:6].tolist()) for c in got]


@st.composite
def ragged_sets(draw: st.DrawFn) -> tuple[list[torch.Tensor], int]:
    """Sorted index sets into ``[0, n)`` of different sizes (empty, scattered, clustered, dense),
    so that one batch mixes plain, delta and bitmap codings of several widths and counts."""
    n = draw(st.integers(1, 300))
    sets = []
    for kind, seed in draw(st.lists(st.tuples(st.sampled_from("escd"), st.integers(0, 2**16)), min_size=1, max_size=7)):
        g = torch.Generator().manual_seed(seed)
        k = int(torch.randint(1, n + 1, (1,), generator=g))
        if kind == "e":
            row = torch.zeros(0, dtype=torch.int64)
        elif kind == "s":
            row = torch.randperm(n, generator=g)[:k]
        elif kind == "c":
            start = int(torch.randint(0, n - k + 1, (1,), generator=g))
            row = torch.arange(start, start + k)
        else:  # dense: all but a few
            row = torch.randperm(n, generator=g)[: max(n - k // 8, 1)]
        sets.append(row.sort().values)
    return sets, n


@settings(max_examples=200, deadline=None)
@given(batch=ragged_sets(), with_mask=st.booleans())
def test_ragged_index_sets_equal_each_sets_own_coding(batch: tuple[list[torch.Tensor], int], with_mask: bool) -> None:
    sets, n = batch
    mask = torch.zeros(len(sets), n, dtype=torch.bool)
    for row, idx in enumerate(sets):
        mask[row, idx] = True
    got = encode_index_ragged(torch.cat(sets), [int(s.numel()) for s in sets], n, mask if with_mask else None)
    own = [encode_index_set(idx, n, mask[row] if with_mask else None) for row, idx in enumerate(sets)]
    assert [bytes(c.buf.numpy()) for c in got] == [bytes(c.buf.numpy()) for c in own]
    assert [c.head for c in got] == [c.head for c in own]


def test_ragged_index_sets_read_the_host_once() -> None:
    # n = 64 (plain width 6). {0, 63}: plain and delta both 2 bytes, a tie: plain. {}: plain, no
    # body. {10, 11, 12}: gaps 10, 1, 1 -> delta at 4 bits, 2 bytes (plain: 3). All but 1, 20, 40
    # and 62: largest gap 2 -> delta 15 bytes, plain 45, bitmap 8: bitmap.
    dense = torch.tensor([i for i in range(64) if i not in (1, 20, 40, 62)])
    sets = [torch.tensor([0, 63]), torch.zeros(0, dtype=torch.int64), torch.tensor([10, 11, 12]), dense]
    with host_reads_module().HostReads() as reads:
        got = encode_index_ragged(torch.cat(sets), [2, 0, 3, 60], 64)
    assert [name for name, _ in reads.calls.elements()] == ["tolist"]
    assert [c.head[:2] for c in got] == [
        bytes([IDX_PLAIN, 6]),
        bytes([IDX_PLAIN, 6]),
        bytes([IDX_DELTA, 4]),
        bytes([IDX_BITMAP, 1]),
    ]
    assert [c.buf.numel() for c in got] == [6 + 2, 6, 6 + 2, 6 + 8]  # ceil(count x width / 8), bitmap 64 bits


def test_index_rows_mix_forms_and_read_the_host_once() -> None:
    # n = 1e6, k = 2. {0, 999999}: plain and delta both 20 bits (a tie: plain); {100, 101}: gaps
    # (100, 1), 7 bits -> delta; {5, 6}: gaps (5, 1), 3 bits -> delta of another width. 50 rows.
    base = torch.tensor([[0, 999_999], [100, 101], [5, 6]])
    idx = base.repeat(17, 1)[:50]
    with host_reads_module().HostReads() as reads:
        got = encode_index_rows(idx, 1_000_000)
    assert [name for name, _ in reads.calls.elements()] == ["tolist"]  # every row's largest gap at once
    heads = [tuple(c.buf[:2].tolist()) for c in got[:3]]
    assert heads == [(IDX_PLAIN, 20), (IDX_DELTA, 7), (IDX_DELTA, 3)]
    # mode, width, count = 2 as uint32 little-endian: known on the host without another read
    assert [c.head for c in got[:3]] == [bytes([m, w, 2, 0, 0, 0]) for m, w in [(0, 20), (1, 7), (1, 3)]]
    assert [c.buf.numel() for c in got[:3]] == [6 + 5, 6 + 2, 6 + 1]  # ceil(2 x width / 8) after the header
    assert all(torch.equal(c.buf, encode_indices(r, 1_000_000)) for c, r in zip(got, idx))


# ---- random-k ----------------------------------------------------------------------------------
def test_randomk_sends_no_indices() -> None:
    codec, layer, state = setup("randomk", {"ratio": 0.01, "scale": True}, (1000,))
    g = torch.randn(1000, generator=torch.Generator().manual_seed(0))
    p1 = codec.encode(g, layer, state)
    p2 = codec.encode(g, layer, state)
    # k = 10: a 4-byte seed and 10 fp32 values, nothing else.
    assert set(p1.buffers) == {"seed", "values"}
    assert p1.nbytes == 4 + 10 * 4
    d1 = codec.decode(p1, layer)
    idx1 = codec.indices(p1, layer)
    assert torch.equal(torch.nonzero(d1).reshape(-1), idx1)
    assert idx1.numel() == 10 and not torch.equal(idx1, codec.indices(p2, layer))
    assert torch.allclose(d1[idx1], g[idx1] * 100.0)  # scaled by n / k


@pytest.mark.slow
def test_randomk_scaled_is_unbiased_monte_carlo() -> None:
    # n = 40, k = 4: each value is n/k * g_i with probability k/n. Per-draw variance g_i^2 (n/k - 1)
    # = 9 g_i^2, so over T draws the mean's standard error is 3 |g_i| / sqrt(T).
    n, trials = 40, 6000
    codec, layer, state = setup("randomk", {"ratio": 0.1, "scale": True}, (n,))
    assert codec.unbiased and not codec.error_feedback
    g = torch.linspace(1.0, 2.0, n)
    total = torch.zeros(n)
    hits = torch.zeros(n)
    for _ in range(trials):
        d = codec.decode(codec.encode(g, layer, state), layer)
        total += d
        hits += (d != 0).float()
    se = 3.0 * g / math.sqrt(trials)
    assert torch.all((total / trials - g).abs() < 5 * se)
    # Uniform inclusion: each index in about k/n = 10% of the draws (binomial sd ~0.39%).
    assert torch.all((hits / trials - 0.1).abs() < 0.02)


# ---- error-feedback conservation ---------------------------------------------------------------
RESIDUAL_CASES = [
    ("topk", {"ratio": 0.05}),
    ("topk", {"ratio": 0.05, "value_dtype": "fp16"}),
    ("randomk", {"ratio": 0.05, "scale": False}),
    ("threshold", {"tau": 1.0}),
    ("threshold", {"tau": 1.0, "quantize": True}),
    ("threshold", {"tau": 1.0, "quantize": False, "value_dtype": "fp16"}),
    ("variance", {"alpha": 1.0}),
    ("variance", {"alpha": 1.0, "zeta": 1.0, "quantize": False}),
    ("pgc", {"momentum": 0.0}),  # with momentum the velocity, not the gradient, is conserved
    ("agg-aware", {"ratio": 0.05, "metric": "global"}),
    ("agg-aware", {"ratio": 0.05, "metric": "persistence"}),
]


@pytest.mark.parametrize(("name", "params"), RESIDUAL_CASES)
def test_error_feedback_conservation(name: str, params: dict) -> None:
    codec, layer, state = setup(name, params, (37, 11))
    gen = torch.Generator().manual_seed(5)
    total_sent = torch.zeros(layer.shape)
    total_grad = torch.zeros(layer.shape)
    for _ in range(6):
        g = torch.randn(layer.shape, generator=gen)
        state.sq_grad = g * g + 0.1  # only read by `variance`
        before = torch.zeros(layer.shape) if state.residual is None else state.residual.clone()
        payload = codec.encode(g, layer, state)
        sent = sent_of(codec, payload, layer)
        assert torch.allclose(sent + state.residual, g + before, atol=1e-5)
        codec.observe_global(sent, layer, state)
        total_sent += sent
        total_grad += g
    # Nothing lost over the run: everything not yet sent is in the residual.
    assert torch.allclose(total_sent + state.residual, total_grad, atol=1e-4)
    assert bool(total_sent.any()) and state.step == 6


def test_dgc_conserves_accumulated_velocity() -> None:
    codec, layer, state = setup("dgc", {"warmup_steps": 4, "momentum": 0.9}, (5000,))
    gen = torch.Generator().manual_seed(1)
    for _ in range(6):
        g = torch.randn(5000, generator=gen)
        u_before = torch.zeros(5000) if state.momentum is None else state.momentum.clone()
        v_before = torch.zeros(5000) if state.residual is None else state.residual.clone()
        u_new = 0.9 * u_before + g
        sent = sent_of(codec, codec.encode(g, layer, state), layer)
        assert torch.allclose(sent + state.residual, v_before + u_new, atol=1e-5)


# ---- DGC -----------------------------------------------------------------------------------------
def test_dgc_warmup_schedule() -> None:
    got = [warmup_sparsity(s, 8, 0.999) for s in range(10)]
    assert got == [0.75, 0.75, 0.9375, 0.9375, 0.984375, 0.984375, 0.99609375, 0.99609375, 0.999, 0.999]
    assert warmup_sparsity(0, 0, 0.999) == 0.999
    assert warmup_sparsity(0, 8, 0.5) == 0.5  # never sparser than the final value
    # The k actually sent follows it: n = 4096, exact threshold (sample_ratio = 1).
    codec, layer, state = setup("dgc", {"warmup_steps": 8, "sample_ratio": 1.0}, (4096,))
    gen = torch.Generator().manual_seed(0)
    counts = []
    for _ in range(10):
        payload = codec.encode(torch.randn(4096, generator=gen), layer, state)
        counts.append(payload_indices(payload, 4096).numel())
    # ceil((1 - s) * 4096): 1024, 256, 64, 16, then ceil(4.096) = 5
    assert counts == [1024, 1024, 256, 256, 64, 64, 16, 16, 5, 5]


def test_dgc_momentum_correction_and_factor_masking_hand_case() -> None:
    # n = 4, k = ceil(0.25 * 4) = 1, momentum 0.5, no warm-up.
    codec, layer, state = setup("dgc", {"sparsity": 0.75, "momentum": 0.5, "warmup_steps": 0}, (4,))
    # step 1: u = g = [1, -3, 2, .5]; v = u; |v| largest at 1 -> send -3; u, v zeroed there.
    p = codec.encode(torch.tensor([1.0, -3.0, 2.0, 0.5]), layer, state)
    assert codec.decode(p, layer).tolist() == [0.0, -3.0, 0.0, 0.0]
    assert state.residual.tolist() == [1.0, 0.0, 2.0, 0.5]
    assert state.momentum.tolist() == [1.0, 0.0, 2.0, 0.5]
    # step 2, g = 0: u = .5 u = [.5, 0, 1, .25]; v = [1.5, 0, 3, .75] -> send 3 at index 2.
    p = codec.encode(torch.zeros(4), layer, state)
    assert codec.decode(p, layer).tolist() == [0.0, 0.0, 3.0, 0.0]
    assert state.residual.tolist() == [1.5, 0.0, 0.0, 0.75]
    assert state.momentum.tolist() == [0.5, 0.0, 0.0, 0.25]


def test_dgc_local_clipping() -> None:
    # ||[3, 4]|| = 5 clipped to 1 -> [.6, .8]; k = 2 of 2 (sparsity 0) sends it all.
    codec, layer, state = setup("dgc", {"sparsity": 0.0, "warmup_steps": 0, "clip_norm": 1.0}, (2,))
    sent = codec.decode(codec.encode(torch.tensor([3.0, 4.0]), layer, state), layer)
    assert torch.allclose(sent, torch.tensor([0.6, 0.8]))


def test_dgc_sampled_threshold_near_target() -> None:
    # 1M elements at 99.9% sparsity: k = 1000; the 1% sample gives a count near k and never more
    # than the fallback's 1.3 k.
    codec, layer, state = setup("dgc", {"warmup_steps": 0}, (1_000_000,))
    g = torch.randn(1_000_000, generator=torch.Generator().manual_seed(2))
    payload = codec.encode(g, layer, state)
    assert 500 <= payload_indices(payload, 1_000_000).numel() <= 1300


# ---- variance ----------------------------------------------------------------------------------
def test_variance_sends_only_when_unambiguous() -> None:
    codec, layer, state = setup("variance", {"alpha": 1.0, "zeta": 1.0, "quantize": False}, (3,))
    # step 1: r = [1, .1, -2], v = [.5, 1, 8]; r^2 = [1, .01, 4] > v only at 0.
    state.sq_grad = torch.tensor([0.5, 1.0, 8.0])
    p = codec.encode(torch.tensor([1.0, 0.1, -2.0]), layer, state)
    assert codec.decode(p, layer).tolist() == pytest.approx([1.0, 0.0, 0.0])
    assert state.residual.tolist() == pytest.approx([0.0, 0.1, -2.0])
    assert state.variance.tolist() == pytest.approx([0.0, 1.0, 8.0])
    # step 2: r = [0, .2, -4], v = [0, 1.01, 8.5]; r^2 = [0, .04, 16]: element 2, ambiguous at
    # step 1 (4 < 8), is now unambiguous (16 > 8.5); element 0 (0 > 0) is not sent.
    state.sq_grad = torch.tensor([0.0, 0.01, 0.5])
    p = codec.encode(torch.tensor([0.0, 0.1, -2.0]), layer, state)
    assert codec.decode(p, layer).tolist() == pytest.approx([0.0, 0.0, -4.0])
    assert state.residual.tolist() == pytest.approx([0.0, 0.2, 0.0])
    assert state.variance.tolist() == pytest.approx([0.0, 1.01, 0.0])


def test_variance_decay_of_unsent() -> None:
    params = {"alpha": 1.0, "zeta": 0.5, "quantize": False}
    codec, layer, state = setup("variance", params, (2,))
    state.sq_grad = torch.tensor([0.5, 4.0])
    codec.encode(torch.tensor([1.0, 1.0]), layer, state)  # sends 0 (1 > .5), keeps 1 (1 < 4)
    assert state.residual.tolist() == pytest.approx([0.0, 1.0])  # r kept exactly
    assert state.variance.tolist() == pytest.approx([0.0, 2.0])  # zeta * v
    codec, layer, state = setup("variance", {**params, "decay_residual": True}, (2,))
    state.sq_grad = torch.tensor([0.5, 4.0])
    codec.encode(torch.tensor([1.0, 1.0]), layer, state)
    assert state.residual.tolist() == pytest.approx([0.0, 0.5])  # zeta * r
    assert state.variance.tolist() == pytest.approx([0.0, 1.0])  # zeta^2 * v


def test_variance_without_sq_grad_uses_one_sample_proxy() -> None:
    # s = g^2 (server re-encoding): r = t * a, v = t * a^2 -> sent once t^2 a^2 > 1.5 t a^2, t = 2.
    codec, layer, state = setup("variance", {"alpha": 1.5, "zeta": 1.0, "quantize": False}, (1,))
    first = codec.decode(codec.encode(torch.tensor([0.5]), layer, state), layer)
    second = codec.decode(codec.encode(torch.tensor([0.5]), layer, state), layer)
    assert (first.item(), second.item()) == (0.0, 1.0)


def test_variance_pow2_codes_and_payload() -> None:
    # M = 8: exponents round(log2(8/|x|)) = 0, round(1.415) = 1, 3, round(9.64) -> clipped to 7.
    codes, deq, scales = quantize_pow2_rows(torch.tensor([8.0, -3.0, 1.0, 0.01]), [4])  # one message
    assert scales == [8.0]
    assert codes.tolist() == [0, 8 | 1, 3, 7]
    assert deq.tolist() == [8.0, -4.0, 1.0, 0.0625]
    codec, layer, state = setup("variance", {"alpha": 1.0, "zeta": 1.0}, (6,))
    state.sq_grad = torch.zeros(6)
    g = torch.tensor([8.0, 0.0, -3.0, 1.0, 0.0, 0.01])
    p = codec.encode(g, layer, state)
    # 4 sent at 0, 2, 3, 5. Indices: plain 4 x bit_width(5) = 12 bits = 2 bytes; delta gaps
    # 0, 2, 1, 2 -> 4 x 2 bits = 1 byte; bitmap 6 bits = 1 byte; tie -> delta: 6 + 1 = 7 bytes.
    # Scale 4 bytes; codes 4 x 4 bits = 2 bytes (low nibble first: 0 | 9 << 4 = 144, 3 | 7 << 4
    # = 115). Total 13.
    assert p.buffers["indices"][0].item() == IDX_DELTA
    assert p.buffers["codes"].tolist() == [144, 115]
    assert p.nbytes == 7 + 4 + 2
    assert codec.decode(p, layer).tolist() == [8.0, 0.0, -4.0, 1.0, 0.0, 0.0625]
    assert torch.allclose(state.residual, torch.tensor([0.0, 0.0, 1.0, 0.0, 0.0, 0.01 - 0.0625]))


# ---- PGC ---------------------------------------------------------------------------------------
def test_pgc_threshold_follows_the_papers_formulas() -> None:
    # A hand-made layer: 40 small gradients plus a few larger ones (a heavy-ish tail).
    rng = np.random.default_rng(7)
    g = np.concatenate([rng.normal(0.0, 0.02, 40), [0.15, -0.12, 0.09, -0.2, 0.11]]).astype(np.float32)
    x = g.astype(np.float64)
    n = x.size
    mu = x.mean()
    sigma = np.sqrt(np.mean((x - mu) ** 2))
    h = abs(0.5 * (np.log(2 * np.pi) + 2 * np.log(sigma) + 1))  # raw value is negative here
    assert 0.5 * (np.log(2 * np.pi) + 2 * np.log(sigma) + 1) < 0
    gamma = abs((x.max() - x.min()) / np.abs(x).sum())
    s = h * gamma
    k = int(min(n, max(1, math.ceil(s * n))))
    alpha = np.sort(np.abs(g))[::-1][k - 1]
    expected = np.nonzero(np.abs(g) >= alpha)[0]
    assert 1 < k < n  # the case is not degenerate

    codec, layer, state = setup("pgc", {"error_feedback": False}, (n,))
    payload = codec.encode(torch.from_numpy(g), layer, state)
    last = state.last
    assert last.mu == pytest.approx(mu, rel=1e-5)
    assert last.sigma == pytest.approx(sigma, rel=1e-5)
    assert last.entropy == pytest.approx(h, rel=1e-5)
    assert last.gamma == pytest.approx(gamma, rel=1e-5)
    assert last.sparsity == pytest.approx(s, rel=1e-5)
    assert (last.k, last.alpha) == (k, pytest.approx(float(alpha)))
    assert payload_indices(payload, n).tolist() == expected.tolist()
    # T_alpha: values above the threshold go out unchanged.
    assert codec.decode(payload, layer)[expected].tolist() == pytest.approx(g[expected].tolist())
    # `scale` multiplies S: twice the kept count (up to N).
    codec2, _, state2 = setup("pgc", {"error_feedback": False, "scale": 2.0}, (n,))
    codec2.encode(torch.from_numpy(g), layer, state2)
    assert state2.last.k == min(n, math.ceil(2 * s * n))


def test_pgc_degenerate_layers() -> None:
    codec, layer, state = setup("pgc", {}, (5,))
    assert codec.encode(torch.zeros(5), layer, state).buffers["values"].numel() == 0
    # constant layer: sigma = 0 -> S = 0 -> k = 1; every element ties at alpha and is sent.
    p = codec.encode(torch.full((5,), 0.5), layer, state)
    assert codec.decode(p, layer).tolist() == [0.5] * 5


# ---- aggregation-aware -------------------------------------------------------------------------
def _union_sizes(params: dict, rounds: int = 6, workers: int = 4, n: int = 2000, hot: int = 60) -> list[int]:
    """Union size at the server per round; each worker sees the same 60 large coordinates with its
    own noise (correlated large gradients), k = 20 of 2,000 per worker."""
    gen = torch.Generator().manual_seed(0)
    codec = build_codec("agg-aware", {"ratio": 0.01, **params})
    layer = LayerInfo("fc", (n,))
    states = [codec.init_state(layer, CPU, w) for w in range(workers)]
    hot_idx = torch.randperm(n, generator=gen)[:hot]
    base = torch.sign(torch.randn(hot, generator=gen)) * (1 + torch.rand(hot, generator=gen))
    sizes = []
    for _ in range(rounds):
        decoded, index_sets = [], []
        for w in range(workers):
            g = 0.1 * torch.randn(n, generator=gen)
            g[hot_idx] += base * (1 + 0.5 * torch.randn(hot, generator=gen))
            payload = codec.encode(g, layer, states[w])
            index_sets.append(payload_indices(payload, n))
            decoded.append(codec.decode(payload, layer))
        assert all(s.numel() == 20 for s in index_sets)  # equal per-worker k for every metric
        sizes.append(int(torch.unique(torch.cat(index_sets)).numel()))
        update = codec.aggregate(decoded, layer)
        for w in range(workers):
            codec.observe_global(update, layer, states[w])
    return sizes


def test_agg_aware_reserve_keeps_the_locally_largest() -> None:
    layer = LayerInfo("fc", (10,))
    acc = torch.tensor([9.0, 8.0, 1.0, 2.0, 7.0, 0.0, 0.0, 3.0, 2.9, 3.0])
    p = torch.tensor([0, 0, 0, 0, 0, 0, 0, 1, 1, 1], dtype=torch.float32)  # last union: 7, 8, 9

    def chosen(params: dict) -> list[int]:
        codec = build_codec("agg-aware", {"ratio": 0.4, "boost": 2.0, **params})
        state = codec.init_state(layer, CPU, 0)
        state.globalness = p.clone()
        # a fresh state has no residual: the message's index set is the selection from acc, k = 4
        return payload_indices(codec.encode(acc, layer, state), 10).tolist()

    # reserve 1 (default): scores |acc| * (1 + 2p) = [9, 8, 1, 2, 7, 0, 0, 9, 8.7, 9]: the local 8
    # (index 1) loses to the global 8.7 (index 8)
    assert chosen({}) == [0, 7, 8, 9]
    # reserve 0.5: 2 slots by |acc| (0, 1), 2 by the boosted score among the rest (7 and 9: 9 each)
    assert chosen({"reserve": 0.5}) == [0, 1, 7, 9]
    # reserve 0: plain top-k by |acc|
    assert chosen({"reserve": 0.0}) == [0, 1, 4, 7]


def test_agg_aware_union_smaller_than_independent_topk() -> None:
    reference = sum(_union_sizes({"metric": "magnitude"})[1:])  # round 1 has no global info yet
    for params in (
        {"metric": "global"},
        {"metric": "persistence", "boost": 4.0},
        {"metric": "consensus", "boost": 4.0},
    ):
        unions = sum(_union_sizes(params)[1:])
        assert unions < 0.92 * reference, (params, unions, reference)


@pytest.mark.parametrize(
    ("name", "params", "problem"),
    [
        ("topk", {"ratio": 1.5}, "compressor.ratio: must be in (0, 1], got 1.5"),
        ("dgc", {"sparsity": 1.0}, "compressor.sparsity: must be in [0, 1), got 1.0"),
        ("variance", {"zeta": 0.0}, "compressor.zeta: must be in (0, 1], got 0.0"),
        ("threshold", {"tau": float("inf")}, "compressor.tau: must be a finite number, got inf"),
        ("topk", {"ratio": "0.1"}, "compressor.ratio: must be a number, got '0.1'"),
        ("topk", {"error_feedback": 1}, "compressor.error_feedback: must be true or false, got 1"),
        (
            "agg-aware",
            {"metric": "nope"},
            "compressor.metric: must be one of 'magnitude', 'global', 'persistence', 'consensus', got 'nope'",
        ),
    ],
)
def test_param_validation_names_the_value(name: str, params: dict, problem: str) -> None:
    with pytest.raises(ConfigError) as err:
        build_codec(name, params)
    assert err.value.problems == [problem]


def test_param_validation_lists_every_problem_and_unknown_keys() -> None:
    with pytest.raises(ConfigError) as err:
        build_codec("dgc", {"sparsity": float("nan"), "momentum": -0.1, "ratoi": 0.1})
    assert err.value.problems == [
        "compressor.sparsity: must be a finite number, got nan",
        "compressor.momentum: must be in [0, 1), got -0.1",
        "compressor.ratoi: unknown key; valid: sparsity, momentum, warmup_steps, sample_ratio, "
        "fallback_factor, clip_norm, value_dtype",
    ]


def test_pgc_k_comes_from_the_fresh_gradient_and_selects_on_the_accumulated_values() -> None:
    # step 1 leaves a residual; in step 2 Algorithm 1 runs on the new gradient alone (its k),
    # while the k sent values are the largest of gradient + residual
    rng = np.random.default_rng(3)
    g1 = torch.from_numpy(rng.normal(0.0, 0.01, 400).astype(np.float32))
    g2 = torch.from_numpy(rng.normal(0.0, 0.01, 400).astype(np.float32))
    codec, layer, state = setup("pgc", {"momentum": 0.0}, (400,))
    codec.encode(g1, layer, state)
    acc = g2 + state.residual.reshape(-1)
    payload = codec.encode(g2, layer, state)
    x = g2.double().numpy()
    sigma = np.sqrt(np.mean((x - x.mean()) ** 2))
    h = abs(0.5 * (np.log(2 * np.pi) + 2 * np.log(sigma) + 1))
    k = int(min(400, max(1, math.ceil(h * abs((x.max() - x.min()) / np.abs(x).sum()) * 400))))
    assert state.last.k == k
    expected = torch.topk(acc.abs(), k).indices.sort().values
    assert payload_indices(payload, 400).tolist() == expected.tolist()


def test_threshold_exact_and_strom_hand_cases() -> None:
    g1 = torch.tensor([0.5, -1.5, 2.5, 0.2])
    g2 = torch.tensor([0.6, 0.0, 0.0, -0.1])
    # exact values: step 1 sends |g| >= 1 exactly -> [0, -1.5, 2.5, 0], keeps [0.5, 0, 0, 0.2];
    # step 2: acc = [1.1, 0, 0, 0.1] -> sends [1.1, 0, 0, 0], keeps [0, 0, 0, 0.1]
    codec, layer, state = setup("threshold", {"tau": 1.0}, (4,))
    assert codec.decode(codec.encode(g1, layer, state), layer).tolist() == pytest.approx([0, -1.5, 2.5, 0])
    assert state.residual.reshape(-1).tolist() == pytest.approx([0.5, 0, 0, 0.2])
    assert codec.decode(codec.encode(g2, layer, state), layer).tolist() == pytest.approx([1.1, 0, 0, 0])
    assert state.residual.reshape(-1).tolist() == pytest.approx([0, 0, 0, 0.1])
    # Strom: +-tau, the rest kept: step 1 sends [0, -1, 1, 0], keeps [0.5, -0.5, 1.5, 0.2];
    # step 2: acc = [1.1, -0.5, 1.5, 0.1] -> sends [1, 0, 1, 0], keeps [0.1, -0.5, 0.5, 0.1]
    codec, layer, state = setup("threshold", {"tau": 1.0, "quantize": True}, (4,))
    p1 = codec.encode(g1, layer, state)
    assert codec.decode(p1, layer).tolist() == pytest.approx([0, -1, 1, 0])
    assert p1.nbytes == 6 + 1 + 1  # index header + indices {1, 2} (1 byte in every form) + 2 sign bits
    assert codec.decode(codec.encode(g2, layer, state), layer).tolist() == pytest.approx([1, 0, 1, 0])
    assert state.residual.reshape(-1).tolist() == pytest.approx([0.1, -0.5, 0.5, 0.1])


def test_sparse_payload_sorts_unsorted_indices_with_their_values() -> None:
    from aiotsim.compress.base import LayerInfo
    from aiotsim.compress.sparse import sparse_payload

    layer = LayerInfo("w", (10,))
    p = sparse_payload(torch.tensor([7, 2, 5]), torch.tensor([70.0, 20.0, 50.0]), 10)
    assert payload_indices(p, 10).tolist() == [2, 5, 7]
    assert build_codec("topk").decode(p, layer).tolist() == [0, 0, 20.0, 0, 0, 50.0, 0, 70.0, 0, 0]
