"""Seed fidelity of pgc / pgc-paper (seed 002, Algorithm 1) and fft (seed 003, the diminishing
compression ratio): hand-computed cases."""

from __future__ import annotations

import math

import pytest
import torch

from aiotsim.compress.base import LayerInfo
from aiotsim.compress.packing import decode_indices
from aiotsim.compress.pgc import kept_count, pgc_threshold
from aiotsim.compress.registry import build_codec
from aiotsim.compress.sparse import payload_indices

CPU = torch.device("cpu")


# ============================== pgc (seed 002) =================================================
# 8 gradients; sum 0 -> mu = 0; sum g^2 = 0.16 + 2 * 0.04 + 2 * 0.01 = 0.26
G8 = [0.4, -0.2, 0.1, 0.0, -0.1, 0.0, 0.0, -0.2]
SIGMA8 = math.sqrt(0.26 / 8)  # 0.180278 (line 3, population std)
H8 = 0.2943190616  # |0.5 * (ln 2pi + 2 ln 0.180278 + 1)| = |0.5 * (1.837877 - 3.426516 + 1)|
GAMMA8 = 0.6  # |(0.4 - (-0.2)) / (0.4 + 0.2 + 0.1 + 0.1 + 0.2)|
S8 = H8 * GAMMA8  # 0.1765914; S * N = 1.41273


def test_algorithm1_hand_case_pgc_paper() -> None:
    g = torch.tensor(G8)
    t = pgc_threshold(g)
    assert t.mu == pytest.approx(0.0, abs=1e-8)
    assert t.sigma == pytest.approx(SIGMA8, rel=1e-6)
    assert t.entropy == pytest.approx(H8, rel=1e-6)
    assert t.gamma == pytest.approx(GAMMA8, rel=1e-6)
    assert t.sparsity == pytest.approx(S8, rel=1e-6)
    # fraction reading: k = ceil(S * N) = ceil(1.41) = 2; the 2nd largest |g| is 0.2
    assert (t.k, t.alpha) == (2, pytest.approx(0.2))
    codec = build_codec("pgc-paper", {})
    layer = LayerInfo("w", (8,))
    state = codec.init_state(layer, CPU, 0)
    payload = codec.encode(g, layer, state)
    # T_alpha sends |g| >= 0.2: 0.4 and both -0.2 (ties at alpha are sent: 3 > k)
    assert payload_indices(payload, 8).tolist() == [0, 1, 7]
    assert codec.decode(payload, layer).tolist() == pytest.approx([0.4, -0.2, 0, 0, 0, 0, 0, -0.2])
    assert state.residual is None  # the paper's form: the rest is dropped


@pytest.mark.parametrize(("reading", "k", "kept"), [("fraction", 2, [0, 1, 7]), ("count", 1, [0]), ("percent", 1, [0])])
def test_topk_readings_hand_case(reading: str, k: int, kept: list[int]) -> None:
    # count: k = ceil(S) = ceil(0.177) = 1; percent: k = ceil(1.41 / 100) = 1 -> only 0.4 is sent
    assert pgc_threshold(torch.tensor(G8), reading=reading).k == k
    codec = build_codec("pgc-paper", {"topk_reading": reading})
    layer = LayerInfo("w", (8,))
    payload = codec.encode(torch.tensor(G8), layer, codec.init_state(layer, CPU, 0))
    assert payload_indices(payload, 8).tolist() == kept


def test_kept_count_rounds_float_noise_and_clips() -> None:
    assert kept_count(0.3, 100) == 30  # 0.3 * 100 = 30.000000000000004 in floats
    assert kept_count(0.301, 100) == 31
    assert kept_count(0.0, 100) == 1 and kept_count(3.0, 100) == 100
    assert kept_count(2.5, 100, reading="count") == 3 and kept_count(2.5, 100, reading="percent") == 3


def test_algorithm1_on_gradients_whose_fp32_squares_overflow() -> None:
    """|g| = 1e20 (a diverging run): (g - mu)^2 = 1e40 is past fp32's 3.4e38; sigma comes from
    float64 instead (it raised OverflowError in kept_count: S was inf). G8 x 1e20: mu 0, sigma =
    SIGMA8 x 1e20, gamma unchanged (a ratio), H = 0.5 (ln 2pi + 2 ln sigma + 1)."""
    t = pgc_threshold(torch.tensor(G8) * 1e20)
    sigma = SIGMA8 * 1e20
    assert t.sigma == pytest.approx(sigma, rel=1e-6)
    assert t.entropy == pytest.approx(0.5 * (math.log(2 * math.pi) + 2 * math.log(sigma) + 1), rel=1e-6)
    assert t.gamma == pytest.approx(GAMMA8, rel=1e-6)
    assert t.k == kept_count(t.sparsity, 8) == 8  # S = 46.6 x 0.6: every element
    assert kept_count(math.inf, 8) == kept_count(math.nan, 8) == 8  # an infinite gradient: all


@pytest.mark.parametrize("bad", [math.nan, math.inf])
@pytest.mark.parametrize("name", ["pgc", "pgc-paper"])
def test_a_non_finite_gradient_is_sent_not_hidden(name: str, bad: float) -> None:
    """One NaN or infinity in a layer (it raised on an empty selection's min()): the message
    carries it, so the server's update check sees it; it does not sit in the residual unseen."""
    codec = build_codec(name, {})
    layer = LayerInfo("w", (30, 40), kind="fc")
    state = codec.init_state(layer, CPU, 0)
    g = torch.randn(30, 40, generator=torch.Generator().manual_seed(0))
    g[3, 4] = bad
    for _ in range(3):  # the residual and velocity carry it into later steps
        decoded = codec.decode(codec.encode(g, layer, state), layer)
        assert not bool(torch.isfinite(decoded[3, 4]))


@pytest.mark.parametrize("name", ["pgc", "pgc-paper"])
def test_a_diverging_pgc_run_reports_divergence(tiny_scenario, tmp_path, name: str) -> None:
    """lr 1000 on the tiny MLP: the gradients grow past 1e19 before the loss is NaN."""
    from aiotsim.api import run_scenario
    from aiotsim.config import load_scenario

    sc = load_scenario(tiny_scenario, [f"compressor.name={name}", "training.lr=1000", "scenario.iterations=8"])
    summary = run_scenario(sc, tmp_path / "run")
    assert summary["status"] == "diverged", summary


def test_pgc_paper_drops_and_pgc_keeps_the_rest() -> None:
    layer = LayerInfo("w", (8,))
    paper, resid = build_codec("pgc-paper", {}), build_codec("pgc", {})
    assert (paper.error_feedback, resid.error_feedback) == (False, True)
    sp, sr = paper.init_state(layer, CPU, 0), resid.init_state(layer, CPU, 0)
    paper.encode(torch.tensor(G8), layer, sp)
    resid.encode(torch.tensor(G8), layer, sr)
    # pgc keeps what it did not send: 0.1, -0.1 (and zeros)
    assert sr.residual.reshape(-1).tolist() == pytest.approx([0, 0, 0.1, 0, -0.1, 0, 0, 0])
    assert sp.residual is None


# ============================== fft (seed 003) =================================================
# 198 elements in one FFT (chunk_size 0): 198 // 2 + 1 = 100 bins; keep 0.1 -> 0.5 over 10 steps
SCHED = {"keep": 0.1, "keep_end": 0.5, "schedule_steps": 10, "chunk_size": 0}
CASES = {
    # step:       0   2   5   10  20
    "constant": [10, 10, 10, 10, 10],
    "linear": [10, 18, 30, 50, 50],  # 0.1 + 0.4 u: 0.18, 0.30, 0.50
    "exponential": [10, 14, 23, 50, 50],  # 0.1 * 5 ** u: 0.13797, 0.22361, 0.5
    "cosine": [10, 14, 30, 50, 50],  # 0.1 + 0.4 (1 - cos(pi u)) / 2: 0.13820, 0.30, 0.5
}


@pytest.mark.parametrize("schedule", list(CASES))
def test_fft_schedule_hand_cases(schedule: str) -> None:
    codec = build_codec("fft", {**SCHED, "schedule": schedule})
    steps = [0, 2, 5, 10, 20]
    assert [codec.kept_bins(100, t) for t in steps] == CASES[schedule]
    # the encoder uses the state's own step count; the kept bins travel in the payload
    layer = LayerInfo("w", (198,))
    grad = torch.randn(198, generator=torch.Generator().manual_seed(5))
    for t, k in zip(steps, CASES[schedule], strict=True):
        state = codec.init_state(layer, CPU, 0)
        state.step = t
        payload = codec.encode(grad, layer, state)
        assert decode_indices(payload.buffers["indices"], 100).numel() == k
        assert codec.decode(payload, layer).shape == (198,)


def test_fft_schedule_counts_its_own_encodes() -> None:
    codec = build_codec("fft", {**SCHED, "schedule": "linear"})
    layer = LayerInfo("w", (198,))
    state = codec.init_state(layer, CPU, 0)
    grad = torch.randn(198, generator=torch.Generator().manual_seed(6))
    kept = []
    for _ in range(11):
        kept.append(decode_indices(codec.encode(grad, layer, state).buffers["indices"], 100).numel())
    assert kept == [10, 14, 18, 22, 26, 30, 34, 38, 42, 46, 50]  # 0.1 + 0.04 t


def test_fft_default_is_the_papers_form() -> None:
    codec = build_codec("fft", {})
    assert not codec.error_feedback
    assert (codec.params.schedule, codec.params.keep) == ("constant", 0.1)
    layer = LayerInfo("w", (1000,))
    state = codec.init_state(layer, CPU, 0)
    codec.encode(torch.randn(1000, generator=torch.Generator().manual_seed(4)), layer, state)
    assert state.residual is None


def test_pgc_momentum_correction_and_algorithm1_on_the_raw_gradient() -> None:
    # pgc owns the velocity u <- 0.9 u + g (DGC's momentum correction): the k of Algorithm 1 comes
    # from the raw gradient g (the paper's G), the sent values are the k largest of r + u.
    g1 = torch.tensor(G8)
    g2 = torch.tensor([0.0, 0.1, -0.3, 0.2, 0.05, 0.0, -0.1, 0.0])
    codec = build_codec("pgc", {"momentum": 0.9})
    assert type(codec).absorbs_momentum  # the server then steps without momentum
    layer = LayerInfo("w", (8,))
    state = codec.init_state(layer, CPU, 0)
    codec.encode(g1, layer, state)  # sends 0.4, -0.2, -0.2 (the hand case above)
    r1 = torch.tensor([0, 0, 0.1, 0, -0.1, 0, 0, 0])
    assert state.residual.reshape(-1).tolist() == pytest.approx(r1.tolist())
    u2 = 0.9 * g1 + g2  # [0.36, -0.08, -0.21, 0.2, -0.04, 0, -0.1, -0.18]
    payload = codec.encode(g2, layer, state)
    assert state.momentum.tolist() == pytest.approx(u2.tolist())
    # g2: mu = -0.00625, sigma = 0.13793, H = 0.56210, gamma = 0.5 / 0.75, S * N = 2.998 -> k = 3
    assert state.last.k == pgc_threshold(g2).k == 3  # from g2 alone, not from u2 or r1 + u2
    # r1 + u2 = [0.36, -0.08, -0.11, 0.2, -0.14, 0, -0.1, -0.18]: the 3 largest are 0.36, 0.2,
    # -0.18 (u2 alone would send -0.21 at index 2: the residual -0.1 + 0.1 changes the choice)
    assert payload_indices(payload, 8).tolist() == [0, 3, 7]
    assert codec.decode(payload, layer).tolist() == pytest.approx([0.36, 0, 0, 0.2, 0, 0, 0, -0.18])
    # pgc-paper: plain SGD (no velocity), no residual
    paper = build_codec("pgc-paper", {})
    assert paper.params.momentum == 0.0
