"""The codec contract, checked for every registered codec (``aiotsim.compress.codec_names()``).

Each codec runs at its default parameters. Checks: round trip shape/dtype/device; the payload is
1-D ``uint8`` buffers on the gradient's device whose sizes sum to ``nbytes``; empty, 1-element,
odd-sized and one large tensor; fp32/fp16/bf16 gradients; conv- and fc-shaped layers; CUDA when
present; ``decode`` needs only the payload (a fresh codec instance decodes the same); error-feedback
conservation for every codec that keeps a residual, and no residual where ``error_feedback`` is
switched off; the role's own guards (a codec's own state, a reported ``sent``); determinism of the
bytes for equal seeds; parameter docs and validation of the defaults.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from aiotsim.compress import codec_names, get_codec_class
from aiotsim.compress.base import Codec, CodecState, FeedbackParams, LayerInfo, Payload
from aiotsim.compress.memory import Sent
from aiotsim.errors import CodecError

NAMES = codec_names()
# codecs whose error feedback is a parameter (their Params inherit FeedbackParams)
SWITCHABLE = [n for n in NAMES if issubclass(get_codec_class(n).Params, FeedbackParams)]
CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")

# Layers: (id, LayerInfo). Sizes stay small; "large" is the one big case.
LAYERS = {
    "empty": LayerInfo("empty", (0,), kind="other"),
    "one": LayerInfo("one", (1,), kind="bias"),
    "odd": LayerInfo("odd", (1001,), kind="other"),
    "conv": LayerInfo("conv2.weight", (16, 6, 5, 5), kind="conv", index=2),
    "fc": LayerInfo("fc1.weight", (30, 40), kind="fc", index=4),
    "bias": LayerInfo("fc1.bias", (30,), kind="bias", index=5),
    "large": LayerInfo("big.weight", (300, 1000), kind="fc", index=7),
}


def make_codec(name: str, seed: int = 7, **params: object) -> Codec:
    cls = get_codec_class(name)
    return cls(cls.Params(**params), seed=seed)


def make_state(codec: Codec, layer: LayerInfo, device: torch.device, node: int = 0) -> CodecState:
    return codec.init_state(layer, device, node)


def gradient(layer: LayerInfo, device: torch.device, dtype: torch.dtype = torch.float32, step: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(1000 * layer.index + step + 1)
    return (torch.randn(layer.shape, generator=gen) * 0.01).to(device=device, dtype=dtype)


def encode(codec: Codec, grad: torch.Tensor, layer: LayerInfo, state: CodecState) -> Payload:
    if codec.needs_sq_grad:
        state.sq_grad = grad.float().square()
    return codec.encode(grad, layer, state)


def check_payload(payload: Payload, device: torch.device) -> None:
    assert isinstance(payload, Payload)
    total = 0
    for key, buf in payload.buffers.items():
        assert buf.dtype == torch.uint8, key
        assert buf.dim() == 1, key
        assert buf.device.type == device.type, key
        total += buf.numel()
    assert payload.nbytes == total
    for key, head in payload.heads.items():  # a host copy of a buffer's first bytes, not more bytes
        assert bytes(payload.buffers[key][: len(head)].cpu().tolist()) == head, key


def round_trip(name: str, layer: LayerInfo, device: torch.device, dtype: torch.dtype) -> None:
    layer = dataclasses.replace(layer, dtype=dtype)
    codec = make_codec(name)
    state = make_state(codec, layer, device)
    for step in range(2):  # the second step exercises the state (residual, warm start)
        grad = gradient(layer, device, dtype, step)
        payload = encode(codec, grad, layer, state)
        check_payload(payload, device)
        out = codec.decode(payload, layer)
        assert out.shape == torch.Size(layer.shape)
        assert out.dtype == dtype
        assert out.device.type == device.type
        assert bool(torch.isfinite(out.float()).all())


# ---- round trips ------------------------------------------------------------------------------
@pytest.mark.parametrize("layer_id", ["empty", "one", "odd", "conv", "fc", "bias"])
@pytest.mark.parametrize("name", NAMES)
def test_round_trip_shapes(name: str, layer_id: str) -> None:
    round_trip(name, LAYERS[layer_id], torch.device("cpu"), torch.float32)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("name", NAMES)
def test_round_trip_low_precision(name: str, dtype: torch.dtype) -> None:
    for layer_id in ("odd", "conv"):
        round_trip(name, LAYERS[layer_id], torch.device("cpu"), dtype)


@pytest.mark.parametrize("name", NAMES)
def test_round_trip_large(name: str) -> None:
    round_trip(name, LAYERS["large"], torch.device("cpu"), torch.float32)


@CUDA
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("name", NAMES)
def test_round_trip_cuda(name: str, dtype: torch.dtype) -> None:
    for layer_id in ("empty", "one", "odd", "conv", "fc"):
        round_trip(name, LAYERS[layer_id], torch.device("cuda"), dtype)


@CUDA
@pytest.mark.parametrize("name", NAMES)
def test_cuda_decodes_like_cpu(name: str) -> None:
    """The bytes a CUDA node sends decode on the CPU to what the CUDA side decodes."""
    layer = LAYERS["fc"]
    codec = make_codec(name)
    state = make_state(codec, layer, torch.device("cuda"))
    payload = encode(codec, gradient(layer, torch.device("cuda")), layer, state)
    on_gpu = codec.decode(payload, layer).cpu()
    on_cpu = codec.decode(payload.to("cpu"), layer)
    torch.testing.assert_close(on_cpu, on_gpu, rtol=1e-5, atol=1e-6)


# ---- decoding from the payload alone --------------------------------------------------------
@pytest.mark.parametrize("layer_id", ["odd", "conv", "fc"])
@pytest.mark.parametrize("name", NAMES)
def test_decode_uses_only_payload(name: str, layer_id: str) -> None:
    """A fresh instance (same params and seed, no shared state) decodes the same gradient."""
    layer = LAYERS[layer_id]
    sender = make_codec(name)
    state = make_state(sender, layer, torch.device("cpu"))
    for step in range(2):
        payload = encode(sender, gradient(layer, torch.device("cpu"), step=step), layer, state)
        wire = Payload({k: v.clone() for k, v in payload.buffers.items()})  # bytes only
        receiver = make_codec(name)
        torch.testing.assert_close(receiver.decode(wire, layer), sender.decode(payload, layer), rtol=0, atol=0)


# the codecs' index-coded routes, with the settings that take them (quantized threshold and
# variance send indices with signs or codes instead of values)
INDEXED = [(n, {}) for n in NAMES] + [("threshold", {"quantize": True}), ("variance", {"quantize": True})]


@pytest.mark.parametrize(("name", "params"), INDEXED, ids=[f"{n}{'-q' if p else ''}" for n, p in INDEXED])
def test_index_headers_travel_on_the_host(name: str, params: dict[str, object]) -> None:
    """Every coded index set comes with the host copy of its header (a decode on a GPU then reads
    nothing back to parse it); the copy is the buffer's own first bytes, and the bytes alone decode
    the same."""
    for layer in (LAYERS["conv"], LAYERS["fc"], LAYERS["large"]):
        codec = make_codec(name, **params)
        state = make_state(codec, layer, torch.device("cpu"))
        for step in range(2):
            payload = encode(codec, gradient(layer, torch.device("cpu"), step=step), layer, state)
            check_payload(payload, torch.device("cpu"))
            if "indices" in payload.buffers:
                assert len(payload.heads["indices"]) == 6
            wire = Payload(dict(payload.buffers))  # the same bytes, no host copies
            torch.testing.assert_close(codec.decode(wire, layer), codec.decode(payload, layer), rtol=0, atol=0)


def test_a_head_must_be_a_buffers_first_bytes() -> None:
    buf = torch.arange(4, dtype=torch.uint8)
    assert Payload({"a": buf}, {"a": b"\x00\x01"}).to("cpu").heads == {"a": b"\x00\x01"}
    with pytest.raises(CodecError, match="first bytes"):
        Payload({"a": buf}, {"b": b"\x00"})
    with pytest.raises(CodecError, match="first bytes"):
        Payload({"a": buf}, {"a": bytes(5)})


# ---- error feedback -------------------------------------------------------------------------
@pytest.mark.parametrize("layer_id", ["odd", "conv", "fc"])
@pytest.mark.parametrize("name", NAMES)
def test_error_feedback_conservation(name: str, layer_id: str) -> None:
    """``sent + residual_after == grad + residual_before`` at every step (3 steps)."""
    # DGC and PGC accumulate their momentum-corrected velocity; with momentum 0 (and no clipping)
    # that is the gradient itself
    codec = make_codec(name, momentum=0.0) if get_codec_class(name).absorbs_momentum else make_codec(name)
    # Read on the instance: a codec may derive it from its parameters (randomk with scale=true).
    if not codec.error_feedback:
        pytest.skip(f"{name} keeps no residual at its default parameters")
    layer = LAYERS[layer_id]
    state = make_state(codec, layer, torch.device("cpu"))
    total_in = torch.zeros(layer.shape)
    total_sent = torch.zeros(layer.shape)
    for step in range(3):
        before = torch.zeros(layer.shape) if state.residual is None else state.residual.reshape(layer.shape).clone()
        grad = gradient(layer, torch.device("cpu"), step=step)
        payload = encode(codec, grad, layer, state)
        sent = codec.decode(payload, layer).float()
        assert state.residual is not None
        after = state.residual.reshape(layer.shape)
        torch.testing.assert_close(sent + after, grad + before, rtol=1e-5, atol=1e-6)
        total_in += grad
        total_sent += sent
    # Over the three steps nothing was lost: what was sent plus what is kept is all the input.
    torch.testing.assert_close(total_sent + state.residual.reshape(layer.shape), total_in, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("layer_id", ["odd", "conv", "fc"])
@pytest.mark.parametrize("name", SWITCHABLE)
def test_error_feedback_off_keeps_no_residual(name: str, layer_id: str) -> None:
    """``error_feedback = false``: no residual, and nothing carries over between steps (the same
    gradient twice gives the same bytes)."""
    # a codec's own velocity (pgc's momentum correction) carries over by design: momentum 0 here
    extra = {"momentum": 0.0} if get_codec_class(name).absorbs_momentum else {}
    codec = make_codec(name, error_feedback=False, **extra)
    assert get_codec_class(name).has_residual and not codec.error_feedback
    layer = LAYERS[layer_id]
    state = make_state(codec, layer, torch.device("cpu"))
    grad = gradient(layer, torch.device("cpu"))
    msgs = []
    for _ in range(2):
        payload = encode(codec, grad, layer, state)
        assert state.residual is None
        msgs.append({k: v.tolist() for k, v in payload.buffers.items()})
    assert msgs[0] == msgs[1]
    assert state.step == 2


class _Forgetful(Codec[CodecState]):
    """A codec that keeps a residual but does not say what it sent (not registered)."""

    name = "forgetful"
    has_residual = True

    def _encode(
        self, acc: torch.Tensor, grad: torch.Tensor, layer: LayerInfo, state: CodecState
    ) -> tuple[Payload, Sent | None]:
        return Payload({}), None

    def decode(self, payload: Payload, layer: LayerInfo) -> torch.Tensor:
        return torch.zeros(layer.shape)


def test_role_guards() -> None:
    layer = LAYERS["odd"]
    with pytest.raises(CodecError, match="did not say what it sent"):
        codec = _Forgetful()
        codec.encode(torch.ones(layer.shape), layer, codec.init_state(layer, torch.device("cpu"), 0))
    dgc = make_codec("dgc")
    plain = CodecState(generator=torch.Generator())
    with pytest.raises(CodecError, match="dgc needs its own DGCState"):
        dgc.encode(torch.ones(layer.shape), layer, plain)


# ---- determinism ----------------------------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
def test_same_seed_same_bytes(name: str) -> None:
    layer = LAYERS["fc"]
    runs = []
    for _ in range(2):
        codec = make_codec(name, seed=11)
        state = make_state(codec, layer, torch.device("cpu"), node=3)
        msgs = []
        for step in range(3):
            payload = encode(codec, gradient(layer, torch.device("cpu"), step=step), layer, state)
            msgs.append({k: v.tolist() for k, v in payload.buffers.items()})
        runs.append(msgs)
    assert runs[0] == runs[1]


# ---- description and parameters -------------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
def test_params_documented_and_defaults_valid(name: str) -> None:
    cls = get_codec_class(name)
    assert cls.name == name
    assert cls.summary
    assert dataclasses.is_dataclass(cls.Params)
    assert cls.Params.__dataclass_params__.frozen  # type: ignore[attr-defined]
    for pname, _default, help_ in cls.param_docs():
        assert help_, f"{name}.{pname} has no help"
    assert cls.param_problems(cls.Params()) == []
    assert cls.encode_flops_per_element >= 0.0
