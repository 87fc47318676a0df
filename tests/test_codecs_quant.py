"""Quantizing codecs: 2bit, 4bit, terngrad, qsgd, signsgd, efsignsgd, onebit.

Hand-computed codes, bytes and residuals; exact payload sizes; Monte-Carlo unbiasedness; error
feedback conservation; the server side of signSGD; Elias against fixed-width coding. The contract
test over the whole registry lives elsewhere.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from aiotsim.compress.base import CodecState, LayerInfo, Payload
from aiotsim.compress.packing import _pack_bits_generic, pack_bits, pack_uint, unpack_f32
from aiotsim.compress.quantize import (
    CODE_NEG,
    CODE_POS,
    CODE_ZERO,
    TERN_NEG,
    TERN_POS,
    TERN_ZERO,
    elias_gamma_decode,
    elias_gamma_encode,
    pack_fixed,
    unpack_fixed,
)
from aiotsim.compress.registry import build_codec
from aiotsim.errors import ConfigError

CPU = torch.device("cpu")


def layer(shape: tuple[int, ...], dtype: torch.dtype = torch.float32, index: int = 0) -> LayerInfo:
    return LayerInfo(name=f"w{index}", shape=shape, dtype=dtype, kind="fc", index=index)


def t(values: list[float]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32)


def u8(values: list[int]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.uint8)


def run(codec_name: str, params: dict, grads: list[torch.Tensor], shape: tuple[int, ...] | None = None):
    """Encode ``grads`` in sequence on one state; yield (payload, decoded, residual) per step."""
    codec = build_codec(codec_name, params, seed=7)
    info = layer(shape or tuple(grads[0].shape))
    state = codec.init_state(info, CPU, node=0)
    out = []
    for g in grads:
        payload = codec.encode(g.reshape(info.shape), info, state)
        residual = None if state.residual is None else state.residual.clone()
        out.append((payload, codec.decode(payload, info), residual))
    return out


# ---- 2bit ----------------------------------------------------------------------------------------
def test_2bit_hand_case_two_steps():
    # threshold 0.5, dyadic values so every sum is exact in fp32.
    g1 = t([0.25, -0.75, 0.5, -0.5, 1.25, 0.0, -0.125, 0.625, -1.625, 0.125])
    # step 1, r = 0, acc = g1:
    #   0.25 -> 00 (r .25) | -0.75 -> 10 (r -.25) | 0.5 -> 11 (r 0) | -0.5 -> 10 (r 0)
    #   1.25 -> 11 (r .75, one t per step) | 0 -> 00 | -0.125 -> 00 (r -.125) | 0.625 -> 11 (r .125)
    #   -1.625 -> 10 (r -1.125) | 0.125 -> 00 (r .125)
    # codes [0,2,3,2 | 3,0,0,3 | 2,0], 4 per byte, code j at bits 2j:
    #   byte0 = 0 | 2<<2 | 3<<4 | 2<<6 = 0xB8; byte1 = 3 | 0 | 0 | 3<<6 = 0xC3; byte2 = 2 = 0x02
    g2 = t([0.25, 0.25, -0.25, 0.0, 0.0, 0.5, -0.375, -0.625, 0.0, 0.25])
    # step 2, acc = r1 + g2 = [.5, 0, -.25, 0, .75, .5, -.5, -.5, -1.125, .375]:
    #   codes [3,0,0,0 | 3,3,2,2 | 2,0]: byte0 = 0x03, byte1 = 3 | 3<<2 | 2<<4 | 2<<6 = 0xAF, byte2 = 2
    #   r2 = [0, 0, -.25, 0, .25, 0, 0, 0, -.625, .375]
    (p1, d1, r1), (p2, d2, r2) = run("2bit", {"threshold": 0.5}, [g1, g2])
    assert p1.buffers["codes"].tolist() == [0xB8, 0xC3, 0x02]
    assert p1.nbytes == 3  # 10 codes of 2 bits
    assert d1.tolist() == [0.0, -0.5, 0.5, -0.5, 0.5, 0.0, 0.0, 0.5, -0.5, 0.0]
    assert r1.tolist() == [0.25, -0.25, 0.0, 0.0, 0.75, 0.0, -0.125, 0.125, -1.125, 0.125]
    assert p2.buffers["codes"].tolist() == [0x03, 0xAF, 0x02]
    assert d2.tolist() == [0.5, 0.0, 0.0, 0.0, 0.5, 0.5, -0.5, -0.5, -0.5, 0.0]
    assert r2.tolist() == [0.0, 0.0, -0.25, 0.0, 0.25, 0.0, 0.0, 0.0, -0.625, 0.375]


def test_2bit_never_sent_code_decodes_to_zero():
    codec = build_codec("2bit", {"threshold": 0.5})
    # codes 0b00, 0b01 (never sent), 0b10, 0b11 in one byte
    assert (CODE_ZERO, CODE_NEG, CODE_POS) == (0b00, 0b10, 0b11)  # MXNet's assignment
    byte = CODE_ZERO | 0b01 << 2 | CODE_NEG << 4 | CODE_POS << 6
    out = codec.decode(Payload({"codes": u8([byte])}), layer((4,)))
    assert out.tolist() == [0.0, 0.0, -0.5, 0.5]


@pytest.mark.parametrize("n, nbytes", [(0, 0), (1, 1), (4, 1), (5, 2), (10, 3), (1001, 251)])
def test_2bit_payload_size(n, nbytes):
    ((p, _, _),) = run("2bit", {}, [torch.randn(n)])
    assert p.nbytes == nbytes == math.ceil(n / 4)


def test_2bit_validate_names_bad_value():
    with pytest.raises(ConfigError) as err:
        build_codec("2bit", {"threshold": -1.0})
    assert err.value.problems == ["compressor.threshold: must be > 0, got -1.0"]


def test_2bit_without_error_feedback_loses_what_is_below_the_threshold():
    # t = 0.5; step 1: [0.6, 0.3, -0.4, -0.7] -> codes +t, 0, 0, -t; the 0.3 and -0.4 are lost
    # (no residual), so step 2's [0.3, 0.3, -0.2, 0.0] sends nothing at all (with error feedback
    # 0.3 + 0.3 = 0.6 would have gone out as +t, and -0.4 - 0.2 = -0.6 as -t)
    steps = run("2bit", {"error_feedback": False}, [t([0.6, 0.3, -0.4, -0.7]), t([0.3, 0.3, -0.2, 0.0])])
    (p1, d1, r1), (p2, d2, r2) = steps
    assert d1.tolist() == [0.5, 0.0, 0.0, -0.5]
    assert r1 is None and r2 is None
    assert d2.tolist() == [0.0, 0.0, 0.0, 0.0]
    # codes 0b11 (+t) at bits 0-1, 0b10 (-t) at bits 6-7: 0b10_00_00_11
    assert p1.buffers["codes"].tolist() == [0b10000011]
    assert p2.buffers["codes"].tolist() == [0]
    with_ef = run("2bit", {}, [t([0.6, 0.3, -0.4, -0.7]), t([0.3, 0.3, -0.2, 0.0])])
    assert with_ef[1][1].tolist() == [0.0, 0.5, -0.5, 0.0]


# ---- 4bit ----------------------------------------------------------------------------------------
def test_4bit_hand_case_two_steps():
    # default: statistic max, linear rungs. max|acc| = 3.5 -> t1 = 0.5, thresholds .5, 1, ..., 3.5
    g1 = t([3.5, -1.75, 0.25, 0.0, -3.5, 1.0, 2.75, -0.5])
    # |acc| / t1 = [7, 3.5, .5, 0, 7, 2, 5.5, 1] -> levels [7, 3, 0, 0, 7, 2, 5, 1]
    # sent = [3.5, -1.5, 0, 0, -3.5, 1, 2.5, -.5]; residual = [0, -.25, .25, 0, 0, 0, .25, 0]
    # codes = level | negative << 3 = [7, 11, 0, 0, 15, 2, 5, 9], low nibble first:
    #   [7 | 11<<4, 0 | 0, 15 | 2<<4, 5 | 9<<4] = [0xB7, 0x00, 0x2F, 0x95]
    g2 = t([0.0, 0.25, -0.25, 1.75, 0.0, 0.0, 0.0, 0.0])
    # acc = r1 + g2 = [0, 0, 0, 1.75, 0, 0, .25, 0]; max 1.75 -> t1 = .25; levels [0,0,0,7,0,0,1,0]
    # codes bytes [0x00, 0x70, 0x00, 0x01]; everything sent, residual 0
    (p1, d1, r1), (p2, d2, r2) = run("4bit", {}, [g1, g2])
    assert p1.buffers["codes"].tolist() == [0xB7, 0x00, 0x2F, 0x95]
    assert unpack_f32(p1.buffers["anchor"]).tolist() == [3.5]
    assert p1.nbytes == 4 + 4  # fp32 anchor + 8 codes of 4 bits
    assert d1.tolist() == [3.5, -1.5, 0.0, 0.0, -3.5, 1.0, 2.5, -0.5]
    assert r1.tolist() == [0.0, -0.25, 0.25, 0.0, 0.0, 0.0, 0.25, 0.0]
    assert p2.buffers["codes"].tolist() == [0x00, 0x70, 0x00, 0x01]
    assert unpack_f32(p2.buffers["anchor"]).tolist() == [1.75]
    assert d2.tolist() == [0.0, 0.0, 0.0, 1.75, 0.0, 0.0, 0.25, 0.0]
    assert r2.abs().max().item() == 0.0


def test_4bit_log2_rungs_hand_case():
    # max 4 -> t1 = 4 / 64 = 1/16; rungs 1/16, 1/8, ..., 4. |acc| / t1 = [64, 16, 1.6, 40]
    # levels: 64 -> 7 (4.0); 16 -> 5 (t5 = 1.0); 1.6 -> 1 (1/16); 40 -> 6 (t6 = 2.0)
    ((p, d, r),) = run("4bit", {"spacing": "log2"}, [t([4.0, 1.0, 0.1, -2.5])])
    assert d.tolist() == [4.0, 1.0, 0.0625, -2.0]
    assert p.buffers["codes"].tolist() == [7 | 5 << 4, 1 | (8 | 6) << 4]
    torch.testing.assert_close(r, t([0.0, 0.0, 0.1 - 0.0625, -0.5]))


def test_4bit_mean_anchor_clips_into_residual():
    # mean |acc| = (1 + 1 + 1 + 13) / 4 = 4 -> thresholds 4, 8, ..., 28: 13 -> level 3 = 12
    ((p, d, r),) = run("4bit", {"statistic": "mean"}, [t([1.0, -1.0, 1.0, 13.0])])
    assert d.tolist() == [0.0, 0.0, 0.0, 12.0]
    assert r.tolist() == [1.0, -1.0, 1.0, 1.0]
    # mean anchor, log2 rungs: 40 -> mean 10, rungs 10, 20, 40, ... : 40 -> level 3
    ((p, d, r),) = run("4bit", {"statistic": "mean", "spacing": "log2"}, [t([0.0, 0.0, 0.0, 40.0])])
    assert d.tolist() == [0.0, 0.0, 0.0, 40.0]


def test_4bit_std_anchor_hand_case():
    # std about zero: sqrt((324 + 36 + 36 + 4) / 16) = sqrt(25) = 5 = t1 for both spacings
    acc = t([18.0, -6.0, 6.0, 2.0] + [0.0] * 12)
    # linear rungs 5, 10, ..., 35: |acc| / 5 = [3.6, 1.2, 1.2, .4, 0...] -> levels [3, 1, 1, 0, ...]
    ((p, d, r),) = run("4bit", {"statistic": "std"}, [acc])
    assert unpack_f32(p.buffers["anchor"]).tolist() == [5.0]
    assert d.tolist() == [15.0, -5.0, 5.0] + [0.0] * 13
    assert r.tolist() == [3.0, -1.0, 1.0, 2.0] + [0.0] * 12
    assert p.buffers["codes"].tolist() == [3 | (8 | 1) << 4, 1] + [0] * 6
    # log2 rungs 5, 10, 20, 40, ...: 3.6 lies in [2, 4) -> level 2 (10); 1.2 -> level 1; .4 -> 0
    ((p, d, r),) = run("4bit", {"statistic": "std", "spacing": "log2"}, [acc])
    assert unpack_f32(p.buffers["anchor"]).tolist() == [5.0]
    assert d.tolist() == [10.0, -5.0, 5.0] + [0.0] * 13
    assert r.tolist() == [8.0, -1.0, 1.0, 2.0] + [0.0] * 12
    assert p.buffers["codes"].tolist() == [2 | (8 | 1) << 4, 1] + [0] * 6


def test_4bit_std_anchor_one_element_layer_still_sends():
    # about zero, the std of one element is |x| (about its mean it would be 0: never sent)
    ((p, d, r),) = run("4bit", {"statistic": "std"}, [t([-0.75])])
    assert d.tolist() == [-0.75] and r.tolist() == [0.0]


@pytest.mark.parametrize(
    "params, expected",
    [
        ({}, [0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5]),
        ({"spacing": "log2"}, [3.5 / 64, 3.5 / 32, 3.5 / 16, 3.5 / 8, 3.5 / 4, 3.5 / 2, 3.5]),
        ({"statistic": "mean"}, [3.5 * k for k in range(1, 8)]),
        ({"statistic": "mean", "spacing": "log2"}, [3.5 * 2**k for k in range(7)]),
        ({"statistic": "std"}, [3.5 * k for k in range(1, 8)]),
        ({"statistic": "std", "spacing": "log2"}, [3.5 * 2**k for k in range(7)]),
    ],
)
def test_4bit_thresholds(params, expected):
    assert build_codec("4bit", params).thresholds(3.5) == pytest.approx(expected, rel=1e-7)


def test_4bit_zero_layer_sends_zero_codes():
    ((p, d, r),) = run("4bit", {}, [torch.zeros(5)])
    assert p.buffers["codes"].tolist() == [0, 0, 0]
    assert d.abs().sum().item() == 0.0


def test_4bit_validate():
    with pytest.raises(ConfigError, match="statistic"):
        build_codec("4bit", {"statistic": "median"})


# ---- error feedback conservation ----------------------------------------------------------------
RESIDUAL_CODECS = [
    ("2bit", {"threshold": 0.3}),
    ("4bit", {}),
    ("4bit", {"spacing": "log2"}),
    ("4bit", {"statistic": "mean"}),
    ("4bit", {"statistic": "mean", "spacing": "log2"}),
    ("4bit", {"statistic": "std"}),
    ("4bit", {"statistic": "std", "spacing": "log2"}),
    ("efsignsgd", {}),
    ("onebit", {}),
    ("onebit", {"granularity": "column"}),
]


@pytest.mark.parametrize("name, params", RESIDUAL_CODECS)
@settings(max_examples=25, deadline=None)
@given(
    rows=st.integers(1, 9),
    cols=st.integers(1, 13),
    seed=st.integers(0, 2**31 - 1),
    scale=st.sampled_from([1e-3, 1.0, 50.0]),
    dtype=st.sampled_from([torch.float32, torch.float16, torch.bfloat16]),
)
def test_error_feedback_conservation(name, params, rows, cols, seed, scale, dtype):
    codec = build_codec(name, params, seed=1)
    assert codec.error_feedback
    info = layer((rows, cols), dtype)
    info32 = layer((rows, cols))
    state = codec.init_state(info, CPU, node=0)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(3):
        grad = (torch.randn(rows, cols, generator=gen) * scale).to(dtype)
        before = torch.zeros(rows, cols) if state.residual is None else state.residual.clone()
        payload = codec.encode(grad, info, state)
        sent = codec.decode(payload, info32)  # the fp32 values the codec sent
        assert codec.decode(payload, info).dtype == dtype
        torch.testing.assert_close(sent + state.residual, grad.float() + before, rtol=1e-6, atol=1e-6 * scale)


# ---- terngrad ------------------------------------------------------------------------------------
def monte_carlo(name: str, params: dict, grad: torch.Tensor, draws: int, seeds: int = 4):
    """Mean and mean of squares of ``draws`` decodes over states with ``seeds`` different seeds."""
    info = layer(tuple(grad.shape))
    total = torch.zeros_like(grad, dtype=torch.float64)
    total_sq = torch.zeros_like(total)
    for s in range(seeds):
        codec = build_codec(name, params, seed=100 + s)
        state = codec.init_state(info, CPU, node=s)
        for _ in range(draws // seeds):
            d = codec.decode(codec.encode(grad, info, state), info).double()
            total += d
            total_sq += d * d
    mean = total / draws
    return mean, total_sq / draws - mean * mean


@pytest.mark.slow
def test_terngrad_unbiased_without_clipping():
    grad = torch.randn(64, generator=torch.Generator().manual_seed(0))
    draws = 4000
    mean, var = monte_carlo("terngrad", {"clip": False}, grad, draws)
    s = grad.abs().max().double()
    # exact variance of s * sign * Bernoulli(|g|/s): s|g| - g^2; 5 standard errors per element
    exact_var = s * grad.abs().double() - grad.double() ** 2
    torch.testing.assert_close(var, exact_var, rtol=0.2, atol=1e-3)
    assert ((mean - grad.double()).abs() <= 5 * (exact_var / draws).sqrt() + 1e-9).all()


@pytest.mark.slow
def test_terngrad_clipping_is_unbiased_for_the_clipped_gradient():
    grad = torch.randn(64, generator=torch.Generator().manual_seed(1))
    grad[3] = 20.0  # an outlier far beyond 2.5 sigma
    x = grad.double()
    bound = 2.5 * x.std(unbiased=False)
    clipped = x.clamp(-bound, bound)
    draws = 4000
    mean, _ = monte_carlo("terngrad", {}, grad, draws)
    s = clipped.abs().max()
    se = ((s * clipped.abs() - clipped**2) / draws).sqrt()
    assert ((mean - clipped).abs() <= 5 * se + 1e-6).all()
    assert (mean[3] - x[3]).abs() > 10  # and biased w.r.t. the raw outlier: the test can fail


def test_terngrad_wire():
    ((p, d, _),) = run("terngrad", {"clip": False}, [t([0.0, 2.0, -2.0, 0.0, 0.0])])
    # s = 2; elements at +-s are sent with probability 1: codes [0b00, 0b01, 0b11, 0, 0]
    assert unpack_f32(p.buffers["scale"]).tolist() == [2.0]
    assert p.buffers["codes"].tolist() == [TERN_ZERO | TERN_POS << 2 | TERN_NEG << 4, 0]
    assert d.tolist() == [0.0, 2.0, -2.0, 0.0, 0.0]
    assert p.nbytes == 4 + 2


def test_terngrad_uses_only_the_state_generator():
    codec = build_codec("terngrad", {}, seed=3)
    info = layer((100,))
    grad = torch.randn(100)
    a = codec.encode(grad, info, codec.init_state(info, CPU, 0)).buffers["codes"]
    torch.manual_seed(12345)  # the global RNG must not matter
    b = codec.encode(grad, info, codec.init_state(info, CPU, 0)).buffers["codes"]
    c = codec.encode(grad, info, codec.init_state(info, CPU, 1)).buffers["codes"]
    assert torch.equal(a, b)
    assert not torch.equal(a, c)


# ---- qsgd ----------------------------------------------------------------------------------------
@pytest.mark.slow
def test_qsgd_unbiased():
    grad = torch.randn(100, generator=torch.Generator().manual_seed(2))  # buckets of 16: 6 + tail 4
    s, d = 3, 16
    draws = 4000
    mean, _ = monte_carlo("qsgd", {"levels": s, "bucket_size": d}, grad, draws)
    norms = torch.cat([b.norm().expand(b.numel()) for b in grad.double().split(d)])
    u = s * grad.double().abs() / norms
    frac = u - u.floor()
    se = (norms / s) * (frac * (1 - frac) / draws).sqrt()  # exact std of the mean of one element
    assert ((mean - grad.double()).abs() <= 5 * se + 1e-6).all()


@pytest.mark.slow
def test_qsgd_elias_unbiased_too():
    grad = torch.randn(40, generator=torch.Generator().manual_seed(3))
    draws = 2000
    mean, var = monte_carlo("qsgd", {"levels": 2, "bucket_size": 8, "elias": True}, grad, draws)
    assert ((mean - grad.double()).abs() <= 5 * (var / draws).sqrt() + 1e-4).all()


@pytest.mark.parametrize(
    "levels, n, d, nbytes",
    [
        (7, 1000, 512, 2 * 4 + 500),  # 4-bit codes, 2 norms
        (15, 1000, 512, 2 * 4 + 625),  # 5-bit codes: ceil(5000 / 8)
        (1, 9, 4, 3 * 4 + 3),  # 2-bit codes, 3 buckets (4, 4, 1)
        (127, 3, 512, 4 + 3),  # 8-bit codes
        (3, 0, 512, 0),
    ],
)
def test_qsgd_fixed_width_payload_size(levels, n, d, nbytes):
    ((p, _, _),) = run("qsgd", {"levels": levels, "bucket_size": d}, [torch.randn(n)])
    assert p.nbytes == nbytes


def test_qsgd_elias_vs_fixed_exact_and_smaller_on_sparse_levels():
    gen = torch.Generator().manual_seed(4)
    grad = torch.randn(5000, generator=gen) * 1e-3
    grad[::512] = 10.0  # one dominant element per bucket: almost every level is 0
    fixed = build_codec("qsgd", {"levels": 7, "bucket_size": 512}, seed=5)
    elias = build_codec("qsgd", {"levels": 7, "bucket_size": 512, "elias": True}, seed=5)
    info = layer((5000,))
    pf = fixed.encode(grad, info, fixed.init_state(info, CPU, 0))
    pe = elias.encode(grad, info, elias.init_state(info, CPU, 0))  # same seed: same levels
    df, de = fixed.decode(pf, info), elias.decode(pe, info)
    assert torch.equal(df, de)
    assert pe.nbytes < pf.nbytes / 3
    # dense levels (uniform magnitudes): the fixed width wins
    dense = torch.ones(5000)
    pf = fixed.encode(dense, info, fixed.init_state(info, CPU, 0))
    pe = elias.encode(dense, info, elias.init_state(info, CPU, 0))
    assert torch.equal(fixed.decode(pf, info), elias.decode(pe, info))


def test_elias_gamma_hand_case():
    # levels [0, 1, 2, 0, 3], negative [1, 0, 1, 1, 0]; gamma(l + 1): "1", "010", "011", "1", "00100"
    # prefixes "1|01|01|1|001", mantissas "0|1|00", signs of non-zero levels (idx 1, 2, 4): 0, 1, 0
    # header: M = 4 prefix zeros (uint32 little-endian), then
    # bits: 1 0 1 0 1 1 0 0 | 1 0 1 0 0 0 1 0  -> LSB first: 0x35, 0x45
    levels = u8([0, 1, 2, 0, 3])
    negative = torch.tensor([1, 0, 1, 1, 0], dtype=torch.bool)
    buf = elias_gamma_encode(levels, negative)
    assert buf.tolist() == [4, 0, 0, 0, 0x35, 0x45]
    lv, ng = elias_gamma_decode(buf, 5)
    assert lv.tolist() == [0, 1, 2, 0, 3]
    assert ng.tolist() == [False, False, True, False, False]  # the sign of a zero is not sent


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 127), st.booleans()), max_size=300))
def test_elias_gamma_round_trip(pairs):
    levels = u8([p[0] for p in pairs])
    negative = torch.tensor([p[1] for p in pairs], dtype=torch.bool)
    buf = elias_gamma_encode(levels, negative)
    bits = sum(2 * (lv + 1).bit_length() - 1 + (lv > 0) for lv, _ in pairs)
    assert buf.numel() == 4 + math.ceil(bits / 8)
    lv, ng = elias_gamma_decode(buf, len(pairs))
    assert torch.equal(lv, levels)
    assert torch.equal(ng, negative & (levels > 0))


def test_qsgd_validate():
    with pytest.raises(ConfigError) as err:
        build_codec("qsgd", {"levels": 0, "bucket_size": 0})
    assert err.value.problems == [
        "compressor.levels: must be in [1, 127], got 0",
        "compressor.bucket_size: must be >= 1, got 0",
    ]


# ---- packing helpers ------------------------------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(bits=st.sampled_from([1, 2, 4]), data=st.data())
def test_fast_pack_bits_matches_the_generic_packer(bits, data):
    codes = data.draw(st.lists(st.integers(0, (1 << bits) - 1), max_size=70))
    c = u8(codes)
    assert torch.equal(pack_bits(c, bits), _pack_bits_generic(c, bits))
    assert torch.equal(pack_bits(c[1:], bits), _pack_bits_generic(c[1:], bits))  # unaligned start


@settings(max_examples=60, deadline=None)
@given(width=st.integers(1, 8), data=st.data())
def test_pack_fixed_matches_pack_uint(width, data):
    codes = data.draw(st.lists(st.integers(0, (1 << width) - 1), max_size=70))
    c = torch.tensor(codes, dtype=torch.int64)
    packed = pack_fixed(c, width)
    if codes:
        assert torch.equal(packed, pack_uint(c, width))
    assert unpack_fixed(packed, width, len(codes)).tolist() == codes


# ---- sign family ---------------------------------------------------------------------------------
def test_signsgd_bits_and_majority_vote():
    codec = build_codec("signsgd", {"scale": "none"})
    info = layer((4,))
    workers = [t([1.0, -2.0, 0.5, -0.1]), t([-1.0, -3.0, 0.2, 0.3]), t([2.0, 1.0, -0.4, 0.0])]
    payloads = [codec.encode(w, info, codec.init_state(info, CPU, i)) for i, w in enumerate(workers)]
    assert payloads[0].buffers["signs"].tolist() == [0b1010]  # negative at 1 and 3
    assert payloads[0].nbytes == 1
    decoded = [codec.decode(p, info) for p in payloads]
    assert decoded[2].tolist() == [1.0, 1.0, -1.0, 1.0]  # sign(0) = +1
    # votes: [+ - +], [- - +], [+ + -], [- + +] -> [1, -1, 1, 1]
    assert codec.aggregate(decoded, info).tolist() == [1.0, -1.0, 1.0, 1.0]
    # two workers that disagree: a tie gives 0
    assert codec.aggregate(decoded[:2], info).tolist() == [0.0, -1.0, 1.0, 0.0]


def test_signsgd_mean_scale_hand_case():
    codec = build_codec("signsgd", {})  # scale = "mean"
    info = layer((4,))
    workers = [t([1.0, -2.0, 0.5, -0.5]), t([-1.0, -3.0, 2.0, 2.0])]  # mean |g|: 1.0 and 2.0
    payloads = [codec.encode(w, info, codec.init_state(info, CPU, i)) for i, w in enumerate(workers)]
    assert payloads[0].nbytes == 1 + 4  # sign bits + one fp32 scale
    decoded = [codec.decode(p, info) for p in payloads]
    assert decoded[0].tolist() == [1.0, -1.0, 1.0, -1.0]
    assert decoded[1].tolist() == [-2.0, -2.0, 2.0, 2.0]
    # votes [0, -2, 2, 0] -> signs [0, -1, 1, 0], times the mean scale (1 + 2) / 2 = 1.5
    assert codec.aggregate(decoded, info).tolist() == [0.0, -1.5, 1.5, 0.0]


def test_efsignsgd_hand_case():
    # step 1: p = g, scale = |p|_1 / 4 = 10 / 4 = 2.5, delta = 2.5 sign(p), e = p - delta
    # step 2: g = 0, p = e = [-1.5, .5, .5, -1.5], scale = 1, delta = sign(p), e = [-.5] * 4
    (p1, d1, r1), (p2, d2, r2) = run("efsignsgd", {}, [t([1.0, -2.0, 3.0, -4.0]), torch.zeros(4)])
    assert unpack_f32(p1.buffers["scale"]).tolist() == [2.5]
    assert p1.nbytes == 4 + 1
    assert d1.tolist() == [2.5, -2.5, 2.5, -2.5]
    assert r1.tolist() == [-1.5, 0.5, 0.5, -1.5]
    assert d2.tolist() == [-1.0, 1.0, 1.0, -1.0]
    assert r2.tolist() == [-0.5, -0.5, -0.5, -0.5]


def test_onebit_reconstructs_with_the_mean_of_each_side():
    # non-negative side {1, 3, 2}: mean 2; negative side {-2, -4, -6}: mean -4
    ((p, d, r),) = run("onebit", {}, [t([1.0, -2.0, 3.0, -4.0, 2.0, -6.0])])
    assert unpack_f32(p.buffers["means"]).tolist() == [2.0, -4.0]
    assert p.buffers["signs"].tolist() == [0b101010]
    assert p.nbytes == 8 + 1
    assert d.tolist() == [2.0, -4.0, 2.0, -4.0, 2.0, -4.0]
    assert r.tolist() == [-1.0, 2.0, 1.0, 0.0, 0.0, -2.0]


def test_onebit_per_column():
    # [[1, -2, 3], [-4, 2, -6]]: each column has one value per side, so it is sent exactly
    ((p, d, r),) = run("onebit", {"granularity": "column"}, [t([1.0, -2.0, 3.0, -4.0, 2.0, -6.0])], (2, 3))
    assert unpack_f32(p.buffers["means"]).view(3, 2).tolist() == [[1.0, -4.0], [2.0, -2.0], [3.0, -6.0]]
    assert d.tolist() == [[1.0, -2.0, 3.0], [-4.0, 2.0, -6.0]]
    assert r.abs().max().item() == 0.0
    # a 1-D tensor falls back to one pair of means
    ((p, _, _),) = run("onebit", {"granularity": "column"}, [t([1.0, -1.0, 3.0])])
    assert p.buffers["means"].numel() == 8


# ---- all of them ---------------------------------------------------------------------------------
ALL = [
    ("2bit", {}),
    ("4bit", {}),
    ("4bit", {"spacing": "log2"}),
    ("terngrad", {}),
    ("qsgd", {}),
    ("qsgd", {"levels": 5, "bucket_size": 7}),
    ("qsgd", {"elias": True}),
    ("signsgd", {}),
    ("signsgd", {"scale": "none"}),
    ("efsignsgd", {}),
    ("onebit", {}),
    ("onebit", {"granularity": "column"}),
]


@pytest.mark.parametrize("name, params", ALL)
def test_decode_is_pure_and_reads_only_the_payload(name, params):
    codec = build_codec(name, params, seed=2)
    info = layer((6, 7))
    payload = codec.encode(torch.randn(6, 7), info, codec.init_state(info, CPU, 0))
    copy = Payload({k: v.clone() for k, v in payload.buffers.items()})
    first = codec.decode(payload, info)
    assert torch.equal(codec.decode(payload, info), first)
    assert all(torch.equal(copy.buffers[k], v) for k, v in payload.buffers.items())
    # a second codec instance (the server's) decodes the same bytes to the same values
    assert torch.equal(build_codec(name, params, seed=99).decode(copy, info), first)


@pytest.mark.parametrize("name", ["2bit", "terngrad", "signsgd"])
def test_state_counts_steps(name):
    codec = build_codec(name, {})
    info = layer((5,))
    state: CodecState = codec.init_state(info, CPU, 0)
    for _ in range(3):
        codec.encode(torch.randn(5), info, state)
    assert state.step == 3
