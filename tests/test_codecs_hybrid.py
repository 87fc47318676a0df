"""Hand-computed checks of the fft, hylo and powersgd codecs."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from aiotsim.compress import build_codec
from aiotsim.compress.base import LayerInfo
from aiotsim.compress.fft import pack_words, range_float_decode, range_float_rows, unpack_words, word_parts
from aiotsim.compress.hylo import Hylo
from aiotsim.compress.packing import decode_indices, unpack_f32
from aiotsim.errors import CodecError, ConfigError

CPU = torch.device("cpu")


def run(codec, layer: LayerInfo, grad: torch.Tensor, state=None):
    state = state if state is not None else codec.init_state(layer, CPU, 0)
    payload = codec.encode(grad, layer, state)
    return payload, codec.decode(payload, layer), state


# ============================== hylo ===========================================================
LENET = {
    "conv1.weight": LayerInfo("conv1.weight", (6, 1, 5, 5), kind="conv", index=0),  # 150
    "conv1.bias": LayerInfo("conv1.bias", (6,), kind="bias", index=1),
    "conv2.weight": LayerInfo("conv2.weight", (16, 6, 5, 5), kind="conv", index=2),  # 2,400
    "conv2.bias": LayerInfo("conv2.bias", (16,), kind="bias", index=3),
    "fc1.weight": LayerInfo("fc1.weight", (120, 400), kind="fc", index=4),  # 48,000
    "fc1.bias": LayerInfo("fc1.bias", (120,), kind="bias", index=5),
    "fc3.weight": LayerInfo("fc3.weight", (10, 84), kind="fc", index=6),  # 840
    "bn.weight": LayerInfo("bn.weight", (2048,), kind="norm", index=7),
    "conv_big.weight": LayerInfo("conv_big.weight", (256, 256, 3, 3), kind="conv", index=8),  # 589,824
}


def test_hylo_routes_lenet_like_layers() -> None:
    codec = build_codec("hylo")  # size_threshold 1000, rates 0.3 .. 0.05, decay 0.1
    routes = {name: codec.route(layer) for name, layer in LENET.items()}
    assert routes == {
        "conv1.weight": "dense",  # 150 < 1000
        "conv1.bias": "dense",
        "conv2.weight": "kernels",
        "conv2.bias": "dense",
        "fc1.weight": "2bit",
        "fc1.bias": "dense",
        "fc3.weight": "dense",  # 840 < 1000: small fc layers stay fp32
        "bn.weight": "2bit",  # large, neither conv nor fc: the 2-bit fallback
        "conv_big.weight": "kernels",
    }
    dense_fallback = build_codec("hylo", {"fallback": "dense"})
    assert dense_fallback.route(LENET["bn.weight"]) == "dense"


def test_hylo_conv_rate_formula() -> None:
    codec = build_codec("hylo")
    # conv2: 0.3 - 0.1 * log10(2400 / 1000) = 0.261979..., 96 kernels -> ceil(25.15) = 26
    assert codec.conv_rate(2400) == pytest.approx(0.3 - 0.1 * math.log10(2.4))
    assert codec.kernels_sent(LENET["conv2.weight"]) == 26
    # 3x3x256x256: 0.3 - 0.1 * log10(589.824) = 0.0229 -> clipped to min_rate 0.05; 65,536 kernels
    assert codec.conv_rate(589_824) == 0.05
    assert codec.kernels_sent(LENET["conv_big.weight"]) == math.ceil(0.05 * 65_536)
    # at the threshold itself the rate is max_rate
    assert codec.conv_rate(1000) == pytest.approx(0.3)
    # per-filter units: conv2 has 16 filters -> ceil(0.262 * 16) = 5
    assert build_codec("hylo", {"kernel_unit": "filter"}).kernels_sent(LENET["conv2.weight"]) == 5


@pytest.mark.parametrize(
    ("rule", "conv2_rate", "conv2_kernels", "big_rate"),
    [
        # s = 2400 / 1000 = 2.4; big: s = 589.824 (both below min_rate 0.05 -> clipped)
        ("log10", 0.3 - 0.1 * math.log10(2.4), 26, 0.05),
        ("sqrt", 0.3 / math.sqrt(2.4), 19, 0.05),  # 0.19365 * 96 = 18.59 -> 19
        ("inverse", 0.125, 12, 0.05),  # 0.3 / 2.4 = 0.125 * 96 = 12 kernels
    ],
)
def test_hylo_conv_rate_rules(rule: str, conv2_rate: float, conv2_kernels: int, big_rate: float) -> None:
    codec = build_codec("hylo", {"rate_rule": rule})
    assert codec.conv_rate(2400) == pytest.approx(conv2_rate, rel=1e-12)
    assert codec.kernels_sent(LENET["conv2.weight"]) == conv2_kernels
    assert codec.conv_rate(589_824) == big_rate
    assert codec.conv_rate(1000) == pytest.approx(0.3)  # at the threshold: max_rate for every rule
    # floor 1e-4: log10 0.3 - 0.1 * log10(589.824) = 0.0229, sqrt 0.3 / sqrt(589.824) = 0.01235,
    # inverse 0.3 / 589.824 = 0.000509
    floorless = build_codec("hylo", {"rate_rule": rule, "min_rate": 1e-4}).conv_rate(589_824)
    s = 589.824
    expected = {"log10": 0.3 - 0.1 * math.log10(s), "sqrt": 0.3 / math.sqrt(s), "inverse": 0.3 / s}[rule]
    assert floorless == pytest.approx(expected, abs=1e-15)


def test_hylo_size_rule_at_the_threshold() -> None:
    # a 1,000-element fc layer exactly at the threshold: "at_least" compresses it, "above" does not
    at = LayerInfo("fc", (10, 100), kind="fc")
    assert build_codec("hylo").route(at) == "2bit"
    assert build_codec("hylo", {"size_rule": "above"}).route(at) == "dense"
    above = LayerInfo("fc", (7, 143), kind="fc")  # 1,001 elements
    assert build_codec("hylo", {"size_rule": "above"}).route(above) == "2bit"
    below = LayerInfo("fc", (999,), kind="fc")
    assert build_codec("hylo").route(below) == "dense"


def test_hylo_lenet_payload_sizes() -> None:
    codec = build_codec("hylo")
    gen = torch.Generator().manual_seed(0)
    sizes = {}
    for name, layer in LENET.items():
        grad = torch.randn(layer.shape, generator=gen)
        payload, out, _ = run(codec, layer, grad)
        sizes[name] = {k: v.numel() for k, v in payload.buffers.items()}
        if codec.route(layer) == "dense":
            assert torch.equal(out, grad)
    assert sizes["conv1.weight"] == {"values": 600}
    assert sizes["fc3.weight"] == {"values": 3360}
    assert sizes["conv2.weight"]["values"] == 26 * 25 * 4  # 26 kernels of 5x5 fp32
    assert sizes["conv2.weight"]["indices"] <= 6 + 12  # never worse than a 96-bit bitmap
    assert sizes["fc1.weight"] == {"threshold": 4, "codes": 12_000}  # 48,000 codes, 4 per byte
    assert sizes["bn.weight"] == {"threshold": 4, "codes": 512}


def _hand_conv() -> tuple[LayerInfo, torch.Tensor]:
    """A [4, 2, 3, 3] conv gradient (8 kernels) whose L1 and L2 rankings differ."""
    grad = torch.full((4, 2, 3, 3), 0.1)
    grad[0, 0] = 0.0
    grad[0, 0, 1, 1] = 5.0  # kernel 0: L1 5.0, L2 5.0
    grad[1, 1] = 0.7  # kernel 3: L1 6.3, L2 2.1
    grad[2, 0] = 0.0
    grad[2, 0, 0, :2] = 1.5
    grad[2, 0, 2, :2] = -1.5  # kernel 4: L1 6.0, L2 3.0
    return LayerInfo("conv", (4, 2, 3, 3), kind="conv"), grad


@pytest.mark.parametrize(("norm", "chosen"), [("l1", [3, 4]), ("l2", [0, 4])])
def test_hylo_sends_most_important_kernels(norm: str, chosen: list[int]) -> None:
    layer, grad = _hand_conv()
    # threshold 10: rate = 0.3 - 0.1 * log10(72 / 10) = 0.2143 -> ceil(0.2143 * 8) = 2 kernels
    codec = build_codec("hylo", {"size_threshold": 10, "importance_norm": norm})
    assert codec.kernels_sent(layer) == 2
    payload, out, state = run(codec, layer, grad)
    assert decode_indices(payload.buffers["indices"], 8).tolist() == chosen
    kernels_in, kernels_out = grad.view(8, 9), out.view(8, 9)
    for i in range(8):
        expected = kernels_in[i] if i in chosen else torch.zeros(9)
        assert torch.equal(kernels_out[i], expected)
    # the unsent kernels stay in the residual; the sent ones leave nothing behind
    torch.testing.assert_close(state.residual, grad - out, rtol=0, atol=0)
    # next step with a zero gradient: the residual alone competes, the sent kernels are now zero
    _, out2, _ = run(codec, layer, torch.zeros_like(grad), state)
    sent_again = [i for i in range(8) if bool(out2.view(8, 9)[i].any())]
    assert not set(sent_again) & set(chosen)


def test_hylo_fc_two_bit_hand_case() -> None:
    layer = LayerInfo("fc", (2, 4), kind="fc")
    codec = build_codec("hylo", {"size_threshold": 0})
    grad = torch.tensor([[0.5, -0.1, 0.2, -0.8], [0.05, 0.3, -0.25, 0.0]])
    payload, out, state = run(codec, layer, grad)
    t = float(torch.tensor(0.275, dtype=torch.float32))  # mean|acc| = 2.2 / 8
    assert float(unpack_f32(payload.buffers["threshold"])[0]) == t
    # codes [1,0,0,2 | 0,1,0,0], 2 bits each little-endian in the byte: 1 + (2 << 6), 1 << 2
    assert payload.buffers["codes"].tolist() == [129, 4]
    assert payload.nbytes == 6
    assert torch.equal(out, torch.tensor([[t, 0, 0, -t], [0, t, 0, 0]]))
    torch.testing.assert_close(state.residual, grad - out, rtol=0, atol=0)
    # step 2, zero gradient: acc = residual, t = (0.225+0.1+0.2+0.525+0.05+0.025+0.25) / 8 = 0.171875
    payload2, out2, _ = run(codec, layer, torch.zeros_like(grad), state)
    t2 = float(unpack_f32(payload2.buffers["threshold"])[0])
    assert t2 == pytest.approx(0.171875, abs=1e-7)
    # codes [1,0,1,2 | 0,0,2,0] -> 1 + (1 << 4) + (2 << 6) = 145, 2 << 4 = 32
    assert payload2.buffers["codes"].tolist() == [145, 32]
    assert torch.equal(out2, torch.tensor([[t2, 0, t2, -t2], [0, 0, -t2, 0]]))


def test_hylo_fc_rms_threshold() -> None:
    layer = LayerInfo("fc", (1, 4), kind="fc")
    codec = build_codec("hylo", {"size_threshold": 0, "fc_stat": "rms", "fc_factor": 0.5})
    grad = torch.tensor([[3.0, -4.0, 0.0, 0.0]])  # rms = sqrt(25 / 4) = 2.5 -> t = 1.25
    payload, out, _ = run(codec, layer, grad)
    assert float(unpack_f32(payload.buffers["threshold"])[0]) == 1.25
    assert out.tolist() == [[1.25, -1.25, 0.0, 0.0]]


def test_hylo_fc_max_abs_threshold() -> None:
    layer = LayerInfo("fc", (1, 4), kind="fc")
    codec = build_codec("hylo", {"size_threshold": 0, "fc_stat": "max_abs", "fc_factor": 0.5})
    grad = torch.tensor([[3.0, -4.0, 1.0, -2.0]])  # max |acc| = 4 -> t = 2
    payload, out, state = run(codec, layer, grad)
    assert float(unpack_f32(payload.buffers["threshold"])[0]) == 2.0
    assert out.tolist() == [[2.0, -2.0, 0.0, -2.0]]
    assert state.residual.tolist() == [[1.0, -2.0, 1.0, 0.0]]
    # codes [1, 2, 0, 2] -> 1 + (2 << 2) + (2 << 6) = 137
    assert payload.buffers["codes"].tolist() == [137]


def test_hylo_validate_names_bad_values() -> None:
    # single-field ranges first (a cross-field check needs well-typed fields)...
    with pytest.raises(ConfigError) as info:
        build_codec("hylo", {"min_rate": 0.5, "max_rate": 0.2, "fc_factor": -1.0, "size_threshold": 1.5})
    assert info.value.problems == [
        "compressor.fc_factor: must be > 0, got -1.0",
        "compressor.size_threshold: must be an integer, got 1.5",
    ]
    # ...then the check across fields
    with pytest.raises(ConfigError) as info:
        build_codec("hylo", {"min_rate": 0.5, "max_rate": 0.2})
    assert info.value.problems == ["compressor.min_rate: must be <= max_rate (=0.2), got 0.5"]
    with pytest.raises(CodecError, match="compressor.min_rate: must be <= max_rate"):
        Hylo(Hylo.Params(min_rate=0.5, max_rate=0.2))


# ============================== fft ============================================================
def test_range_float_hand_case() -> None:
    # 1.0 = 1.0*2^0, 0.75 = 1.5*2^-1, 3.0 = 1.5*2^1, 0.1 = 1.6*2^-4: exponents -4..1, range 5
    values = torch.tensor([1.0, -0.75, 0.0, 3.0, 0.1])
    (words,), (e_lo,), (exp_bits,) = range_float_rows(values.unsqueeze(0), mantissa_bits=7, max_exponent_bits=5)
    assert e_lo == -4
    assert exp_bits == 3  # ceil(log2(5 + 2)): six exponents plus the zero/subnormal code
    assert 1 + exp_bits + 7 == 11  # bits per value
    # words: sign << 10 | code << 7 | mantissa; code = e - e_lo + 1; 0.1: round(0.6 * 128) = 77
    assert words.tolist() == [5 << 7, (1 << 10) | (4 << 7) | 64, 0, (6 << 7) | 64, (1 << 7) | 77]
    out = range_float_decode(words, e_lo, exp_bits, 7)
    assert out.tolist() == [1.0, -0.75, 0.0, 3.0, (1 + 77 / 128) / 16]


def test_range_float_capped_exponent_and_carry() -> None:
    values = torch.tensor([1.0, -0.75, 3.0, 0.1])
    (words,), (e_lo,), (exp_bits,) = range_float_rows(values.unsqueeze(0), mantissa_bits=7, max_exponent_bits=2)
    # 2 exponent bits: codes 1..3 for three normal exponents, e_lo = max(-4, 1 - (2**2 - 2)) = -1
    assert (e_lo, exp_bits) == (-1, 2)
    out = range_float_decode(words, e_lo, exp_bits, 7)
    # 0.1 becomes a subnormal of 2^-1: round(0.2 * 128) / 128 * 0.5 = 26 / 256
    assert out.tolist() == [1.0, -0.75, 3.0, 26 / 256]
    # mantissa rounding that carries into the exponent: 1.875 with 2 mantissa bits -> 2.0
    (words2,), (e_lo2,), (exp_bits2,) = range_float_rows(torch.tensor([[1.875, 1.0]]), 2, max_exponent_bits=5)
    assert range_float_decode(words2, e_lo2, exp_bits2, 2).tolist() == [2.0, 1.0]
    assert (e_lo2, exp_bits2) == (0, 2)


def test_range_float_rows_are_messages_of_their_own() -> None:
    # each row its own exponent range; an empty message has e_lo 0 and one exponent bit
    words, e_lo, exp_bits = range_float_rows(torch.tensor([[1.0, 0.5], [8.0, 0.0]]), 7, 5)
    assert (e_lo, exp_bits) == ([-1, 3], [2, 1])
    assert range_float_decode(words, torch.tensor([[-1], [3]]), torch.tensor([[2], [1]]), 7).tolist() == [
        [1.0, 0.5],
        [8.0, 0.0],
    ]
    empty, e_lo, exp_bits = range_float_rows(torch.zeros(2, 0), 7, 5)
    assert empty.shape == (2, 0) and (e_lo, exp_bits) == ([0, 0], [1, 1])


def test_word_parts_hand_cases() -> None:
    assert word_parts(13) == [(0, 8), (8, 4), (12, 1)]
    assert word_parts(25) == [(0, 16), (16, 8), (24, 1)]
    assert word_parts(7) == [(0, 4), (4, 2), (6, 1)]


@settings(max_examples=60, deadline=None)
@given(width=st.integers(1, 40), count=st.integers(0, 50), seed=st.integers(0, 2**31 - 1))
def test_pack_words_round_trip_and_size(width: int, count: int, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    words = torch.randint(0, 2**width, (count,), generator=gen, dtype=torch.int64)
    buf = pack_words(words, width)
    assert torch.equal(unpack_words(buf, width, count), words)
    # every field pads to whole bytes on its own: at most one byte per field over a dense packing
    dense = math.ceil(count * width / 8)
    assert dense <= buf.numel() <= dense + len(word_parts(width)) - 1


@pytest.mark.parametrize("chunk_size", [0, 64, 1000])
def test_fft_keep_all_reconstructs(chunk_size: int) -> None:
    layer = LayerInfo("w", (25, 40), kind="fc")
    codec = build_codec(
        "fft",
        {"keep": 1.0, "mantissa_bits": 23, "max_exponent_bits": 8, "chunk_size": chunk_size, "error_feedback": True},
    )
    grad = torch.randn(layer.shape, generator=torch.Generator().manual_seed(3))
    _, out, state = run(codec, layer, grad)
    torch.testing.assert_close(out, grad, rtol=0, atol=1e-5)
    assert float(state.residual.abs().max()) < 1e-5


def test_fft_single_frequency_is_one_bin() -> None:
    n = 1000
    i = torch.arange(n, dtype=torch.float32)
    grad = torch.cos(2 * math.pi * 5 * i / n)  # all energy in bin 5 of 501
    layer = LayerInfo("w", (n,))
    codec = build_codec("fft", {"keep": 1 / 501, "mantissa_bits": 23})
    payload, out, state = run(codec, layer, grad)
    assert decode_indices(payload.buffers["indices"], 501).tolist() == [5]
    torch.testing.assert_close(out, grad, rtol=0, atol=1e-5)
    # one bin: two values (re, im) of 1 + E + 23 bits -> 8 bytes
    assert payload.buffers["values"].numel() == math.ceil(2 * (1 + int(payload.buffers["header"][2]) + 23) / 8)


def test_fft_keeps_ceil_keep_times_bins_and_feeds_back() -> None:
    layer = LayerInfo("w", (1000,))
    codec = build_codec("fft", {"keep": 0.1, "error_feedback": True})
    grad = torch.randn(1000, generator=torch.Generator().manual_seed(4))
    payload, out, state = run(codec, layer, grad)
    assert decode_indices(payload.buffers["indices"], 501).numel() == math.ceil(0.1 * 501)
    torch.testing.assert_close(out + state.residual, grad, rtol=0, atol=1e-6)
    # chunks of 128: 8 FFTs (last one padded) of 65 bins each
    chunked = build_codec("fft", {"keep": 0.1, "chunk_size": 128})
    assert chunked.chunking(1000) == (8, 128)
    payload, _, _ = run(chunked, layer, grad)
    assert decode_indices(payload.buffers["indices"], 8 * 65).numel() == math.ceil(0.1 * 520)


# ============================== powersgd =======================================================
def _low_rank(m: int, n: int, rank: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(m, rank, generator=gen) @ torch.randn(rank, n, generator=gen)


@pytest.mark.parametrize("rank", [2, 3])
def test_powersgd_exact_when_rank_covers_matrix(rank: int) -> None:
    layer = LayerInfo("fc", (8, 6), kind="fc")
    grad = _low_rank(8, 6, 2, seed=5)
    codec = build_codec("powersgd", {"rank": rank})
    payload, out, state = run(codec, layer, grad)
    assert payload.nbytes == 4 * (rank * (8 + 6))  # 112 bytes for r=2, 168 for r=3
    assert payload.buffers["p"].numel() == 4 * 8 * rank and payload.buffers["q"].numel() == 4 * 6 * rank
    torch.testing.assert_close(out, grad, rtol=1e-4, atol=1e-4)
    assert float(state.residual.abs().max()) < 1e-4
    assert state.q.shape == (6, rank)  # warm start for the next iteration


def test_powersgd_conv_reshape_and_uncompressed_cases() -> None:
    codec = build_codec("powersgd")  # rank 2
    conv = LayerInfo("conv", (4, 2, 3, 3), kind="conv")  # matrix [4, 18]: 2 * 22 = 44 < 72
    payload, out, _ = run(codec, conv, _low_rank(4, 18, 1, seed=6).view(4, 2, 3, 3))
    assert payload.nbytes == 4 * 2 * (4 + 18)
    assert out.shape == (4, 2, 3, 3)
    for layer in (LayerInfo("b", (7,), kind="bias"), LayerInfo("sq", (3, 3), kind="fc")):  # 2*6 >= 9
        grad = torch.randn(layer.shape)
        payload, out, state = run(codec, layer, grad)
        assert payload.nbytes == 4 * layer.numel
        assert torch.equal(out, grad)
        assert not bool(state.residual.any())


def test_powersgd_server_average_of_worker_factors() -> None:
    """Single-message reading: each worker's own P Q^T; the server averages the products."""
    layer = LayerInfo("fc", (10, 12), kind="fc")
    codec = build_codec("powersgd", {"rank": 1})
    grads = [_low_rank(10, 12, 1, seed=s) for s in (7, 8)]
    decoded = []
    for node, grad in enumerate(grads):
        state = codec.init_state(layer, CPU, node)
        decoded.append(run(codec, layer, grad, state)[1])
    agg = codec.aggregate(decoded, layer)
    torch.testing.assert_close(agg, (grads[0] + grads[1]) / 2, rtol=1e-4, atol=1e-4)
    assert int(torch.linalg.matrix_rank(agg)) == 2  # rank r * workers, not r


def test_powersgd_warm_start_converges_on_fixed_matrix() -> None:
    """Repeated steps on the same full-rank matrix: the warm-started Q approaches the top
    singular subspace, so the rank-1 error approaches the best rank-1 error."""
    layer = LayerInfo("fc", (20, 30), kind="fc")
    gen = torch.Generator().manual_seed(9)
    mat = torch.randn(20, 30, generator=gen)
    codec = build_codec("powersgd", {"rank": 1})
    state = codec.init_state(layer, CPU, 0)
    for _ in range(30):
        state.residual = None  # isolate the warm start from error feedback
        _, out, state = run(codec, layer, mat, state)
    s = torch.linalg.svdvals(mat)
    best = float(torch.sqrt((s[1:] ** 2).sum()))
    assert float(torch.linalg.norm(mat - out)) == pytest.approx(best, rel=1e-3)
