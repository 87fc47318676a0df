"""``Codec.message_bound``: the most bytes a codec's message takes for a layer, whatever the
gradient (what ``aiotsim validate`` counts for a message in flight).

Every codec's messages, over gradients chosen to push a value-dependent size up (every element
above any threshold, heavy tails, exponents spread over the whole fp32 range, exact ties) and over
several steps, stay within its bound; a codec on the default bound (its size follows from the
layer alone) sends exactly the bound for every non-zero gradient; the sparse and FFT bounds are
reached where hand-computed.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from aiotsim.compress import codec_names, get_codec_class
from aiotsim.compress.base import Codec, LayerInfo
from aiotsim.compress.packing import encode_indices, index_bound

LAYERS = [
    LayerInfo("one", (1,), kind="bias"),
    LayerInfo("odd", (1001,), kind="other", index=1),
    LayerInfo("conv2.weight", (16, 6, 5, 5), kind="conv", index=2),
    LayerInfo("fc1.weight", (30, 40), kind="fc", index=4),
    LayerInfo("fc1.bias", (30,), kind="bias", index=5),
]
# Parameters under which a size depends on more than the defaults show (value precision, a
# quantized sparse form, no warm-up, a growing FFT schedule, low thresholds).
VARIANTS: list[tuple[str, dict[str, object]]] = [(name, {}) for name in codec_names()] + [
    ("topk", {"value_dtype": "fp16", "ratio": 0.3}),
    ("threshold", {"quantize": True, "tau": 1e-6}),
    ("threshold", {"tau": 1e-6, "value_dtype": "fp16"}),
    ("variance", {"quantize": True, "alpha": 1e-6}),
    ("dgc", {"warmup_steps": 0, "sparsity": 0.5}),
    ("fft", {"schedule": "linear", "keep": 0.2, "keep_end": 1.0, "schedule_steps": 3, "chunk_size": 64}),
    ("pgc", {"scale": 0.01}),
    ("hylo", {"size_threshold": 10}),
]


def gradients(shape: tuple[int, ...]) -> dict[str, torch.Tensor]:
    """Gradients that push value-dependent sizes up, or down (zeros)."""
    gen = torch.Generator().manual_seed(3)
    n = math.prod(shape)
    normal = torch.randn(shape, generator=gen)
    exps = torch.randint(-120, 120, shape, generator=gen).float()
    return {
        "normal": normal,
        "heavy": normal / torch.rand(shape, generator=gen).clamp_min(1e-6),  # Cauchy-like tails
        "sparse": normal * (torch.rand(shape, generator=gen) < 0.02),
        "flat": torch.full(shape, 0.5),  # every element tied
        "alternating": (torch.arange(n).reshape(shape) % 2 * 2 - 1).float(),
        "spread": normal.sign() * torch.pow(2.0, exps),  # exponents over the fp32 range
        "tiny": normal * 1e-30,
        "zero": torch.zeros(shape),
    }


def sizes(codec: Codec, layer: LayerInfo, grad: torch.Tensor, steps: int = 4) -> list[int]:
    """Message bytes of ``steps`` encodes of ``grad`` from a fresh state (the global update fed
    back, for codecs that learn from it)."""
    state = codec.init_state(layer, torch.device("cpu"), node=0)
    out = []
    for _ in range(steps):
        if codec.needs_sq_grad:
            state.sq_grad = grad.square()
        payload = codec.encode(grad, layer, state)
        out.append(payload.nbytes)
        codec.observe_global(codec.decode(payload, layer), layer, state)
    return out


@pytest.mark.parametrize(("name", "params"), VARIANTS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(VARIANTS)])
def test_no_message_exceeds_its_bound(name: str, params: dict[str, object]) -> None:
    cls = get_codec_class(name)
    codec = cls(cls.Params(**params), seed=5)
    fixed = type(codec).message_bound is Codec.message_bound
    for layer in LAYERS:
        bound = codec.message_bound(layer)
        seen = {kind: sizes(codec, layer, g) for kind, g in gradients(layer.shape).items()}
        worst = max(max(s) for s in seen.values())
        assert worst <= bound, f"{layer.name}: {seen} > {bound}"
        if fixed:  # a size the layer alone fixes: every non-zero gradient's message is the bound
            assert {s for kind, ss in seen.items() if kind != "zero" for s in ss} == {bound}, (layer.name, seen)


def test_topk_bound_by_hand() -> None:
    """n = 1,000, ratio 0.01: k = 10; indices plain 10 bits each = 13 B (bitmap 125 B) + the
    6-byte header; 10 fp32 values = 40 B: 59 B, which spread-out indices reach."""
    codec = get_codec_class("topk")()
    layer = LayerInfo("w", (1000,))
    assert codec.message_bound(layer) == 6 + 13 + 40
    grad = torch.zeros(1000)
    grad[::100] = 1.0  # 10 indices 100 apart: delta needs 7 bits, plain 10, so the coding picks delta
    assert max(sizes(codec, layer, grad, steps=1)) == 6 + math.ceil(10 * 7 / 8) + 40 < 59
    grad.zero_()
    grad[:9], grad[999] = 1.0, 1.0  # indices 0..8 and 999: a gap of 991 needs 10 bits, as plain
    assert max(sizes(codec, layer, grad, steps=1)) == 59


def test_threshold_bound_reached_when_everything_passes() -> None:
    """quantize, n = 1,001, every |g| >= tau: a bitmap of 126 B + header 6 and 1,001 sign bits
    (126 B): 258 B, exactly the bound."""
    cls = get_codec_class("threshold")
    codec = cls(cls.Params(quantize=True, tau=0.1))
    layer = LayerInfo("w", (1001,))
    assert codec.message_bound(layer) == 258
    assert sizes(codec, layer, torch.ones(1001), steps=1) == [258]


def test_fft_bound_by_hand() -> None:
    """n = 1,001, one FFT: 501 bins, keep 0.1 -> 51; indices plain 9 bits (58 B) + 6; 102 words of
    at most 1 + 5 + 7 = 13 bits, packed as 8 + 4 + 1-bit fields: 102 + 51 + 13 B; header 4."""
    codec = get_codec_class("fft")()
    assert codec.message_bound(LayerInfo("w", (1001,))) == 4 + 64 + 166


def test_validate_counts_the_bound_not_the_dense_size(tiny_scenario) -> None:
    """Streamed: a node's in-flight message is counted at its codec's bound (top-k: ~1/50 of the
    dense size), so top-k's estimate is below none's by the dense size less that bound, less the
    residual top-k keeps."""
    from aiotsim.config import load_scenario
    from aiotsim.learn.models.registry import model_layers
    from aiotsim.validate import world_size

    base = ["nodes.count=100", "data.samples_per_node=10", "training.aggregation=streamed", "training.momentum=0"]
    dense = world_size(load_scenario(tiny_scenario, [*base, "compressor.name=none"]))
    topk = world_size(load_scenario(tiny_scenario, [*base, "compressor.name=topk"]))
    codec = get_codec_class("topk")()
    layers = model_layers("mlp", (1, 8, 8), 10)
    bound = sum(codec.message_bound(layer) for layer in layers)
    assert bound < dense.params * 4 / 50
    residual = dense.params * 4
    assert topk.per_node_bytes - dense.per_node_bytes == residual + bound - dense.params * 4


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 5000), data=st.data())
def test_index_bound_covers_every_set(n: int, data: st.DataObject) -> None:
    chosen = data.draw(st.sets(st.integers(0, n - 1), max_size=min(n, 400)))
    idx = torch.tensor(sorted(chosen), dtype=torch.int64)
    assert encode_indices(idx, n).numel() <= index_bound(len(chosen), n)
    assert index_bound(len(chosen), n) <= index_bound(min(n, len(chosen) + 1), n)  # non-decreasing


def test_validate_counts_layers_under_min_size_dense(tiny_scenario) -> None:
    """compressor.min_size above every layer: each goes as fp32 values, the dense size."""
    from aiotsim.config import load_scenario
    from aiotsim.validate import world_size

    sets = ["compressor.name=topk", "nodes.count=10", "data.samples_per_node=10"]
    sized = world_size(load_scenario(tiny_scenario, [*sets, "compressor.min_size=1000000"]))
    assert sized.message_bytes == sized.params * 4
    assert world_size(load_scenario(tiny_scenario, sets)).message_bytes < sized.params * 4 / 50
