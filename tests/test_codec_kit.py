"""The codec contract kit (``aiotsim.testing.check_codec``): every built-in codec and the tutorial's
codec pass it, and a codec that breaks one property fails it with a message naming that property."""

from __future__ import annotations

import random
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch

from aiotsim.compress import Codec, CodecState, LayerInfo, Payload, codec_names, get_codec_class
from aiotsim.compress.memory import Sent
from aiotsim.compress.packing import pack_f32, unpack_f32
from aiotsim.errors import CodecError, ConfigError
from aiotsim.testing import PROPERTIES, check_codec, from_wire, wire_bytes

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.fixture(scope="module")
def eight_bit_topk() -> type[Codec]:
    """The tutorial's codec, imported as a user imports it (examples/ on the path)."""
    sys.path.insert(0, str(EXAMPLES))
    try:
        from my_codecs import EightBitTopK
    finally:
        sys.path.remove(str(EXAMPLES))
    return EightBitTopK


@pytest.mark.parametrize("name", codec_names())
def test_every_builtin_codec_keeps_the_contract(name: str) -> None:
    check_codec(get_codec_class(name))


def test_the_tutorial_codec_keeps_the_contract(eight_bit_topk: type[Codec]) -> None:
    check_codec(eight_bit_topk)
    check_codec(eight_bit_topk, {"ratio": 0.3})


def test_the_tutorial_codec_by_hand(eight_bit_topk: type[Codec]) -> None:
    """ratio 0.5 of 4 values: k = 2, the two largest magnitudes (indices 0 and 1); scale =
    1.27 / 127 = 0.01, codes 50 and -127; 4 B scale + 2 x 4 B indices + 2 x 1 B codes = 14 B;
    the residual keeps what was not sent (0.1 at index 2)."""
    codec = eight_bit_topk(eight_bit_topk.Params(ratio=0.5))
    layer = LayerInfo("w", (4,))
    state = codec.init_state(layer, torch.device("cpu"), node=0)
    payload = codec.encode(torch.tensor([0.5, -1.27, 0.1, 0.0]), layer, state)
    assert payload.nbytes == 14
    assert payload.buffers["codes"].view(torch.int8).tolist() == [50, -127]
    assert payload.buffers["indices"].view(torch.int32).tolist() == [0, 1]
    torch.testing.assert_close(codec.decode(payload, layer), torch.tensor([0.5, -1.27, 0.0, 0.0]))
    torch.testing.assert_close(state.residual, torch.tensor([0.0, 0.0, 0.1, 0.0]), atol=1e-6, rtol=0)


def test_the_tutorial_shows_the_example_file() -> None:
    """docs/CODECS.md's codec is examples/my_codecs.py's, verbatim (the page cannot drift), in <= 40 lines."""
    doc = (EXAMPLES.parent / "docs" / "CODECS.md").read_text()
    shown = doc.split("```python\n", 1)[1].split("```", 1)[0]
    source = (EXAMPLES / "my_codecs.py").read_text()
    assert "class EightBitTopK(Codec" in shown and shown in source
    assert len(source.splitlines()) <= 40


def test_wire_bytes_round_trip() -> None:
    payload = Payload({"a": torch.tensor([1, 2, 3], dtype=torch.uint8), "b": torch.zeros(0, dtype=torch.uint8)})
    assert wire_bytes(payload) == [("a", b"\x01\x02\x03"), ("b", b"")]
    assert wire_bytes(from_wire(wire_bytes(payload))) == wire_bytes(payload)


# ---- codecs that break one property each ---------------------------------------------------------
class Plain(Codec[CodecState]):
    """fp32 values as they are: a codec that keeps the contract (the control)."""

    name = "plain"

    def _encode(
        self, acc: torch.Tensor, grad: torch.Tensor, layer: LayerInfo, state: CodecState
    ) -> tuple[Payload, Sent | None]:
        return Payload({"v": pack_f32(acc.reshape(-1).clone())}), None

    def decode(self, payload: Payload, layer: LayerInfo) -> torch.Tensor:
        return unpack_f32(payload.buffers["v"]).view(layer.shape).to(layer.dtype)


class FlatDecode(Plain):
    def decode(self, payload: Payload, layer: LayerInfo) -> torch.Tensor:
        return super().decode(payload, layer).reshape(-1)


class _Padded(Payload):
    @property
    def nbytes(self) -> int:
        return super().nbytes + 4  # claims a header it does not send


class UnderReports(Plain):
    def _encode(
        self, acc: torch.Tensor, grad: torch.Tensor, layer: LayerInfo, state: CodecState
    ) -> tuple[Payload, Sent | None]:
        return _Padded({"v": pack_f32(acc.reshape(-1).clone())}), None


class Remembers(Plain):
    """Decodes from what the sending instance remembers, not from the bytes."""

    def _encode(
        self, acc: torch.Tensor, grad: torch.Tensor, layer: LayerInfo, state: CodecState
    ) -> tuple[Payload, Sent | None]:
        self.last = acc.clone()
        return Payload({"v": torch.zeros(0, dtype=torch.uint8)}), None

    def decode(self, payload: Payload, layer: LayerInfo) -> torch.Tensor:
        return getattr(self, "last", torch.zeros(layer.shape)).view(layer.shape).to(layer.dtype)


class GlobalNoise(Plain):
    """Dithers with the global generator instead of its state's."""

    def _encode(
        self, acc: torch.Tensor, grad: torch.Tensor, layer: LayerInfo, state: CodecState
    ) -> tuple[Payload, Sent | None]:
        return super()._encode(acc + 1e-3 * torch.rand(acc.shape), grad, layer, state)


class NoEmpty(Plain):
    def _encode(
        self, acc: torch.Tensor, grad: torch.Tensor, layer: LayerInfo, state: CodecState
    ) -> tuple[Payload, Sent | None]:
        scale = acc.abs().max()  # an empty layer has no maximum: crashes instead of refusing
        return Payload({"v": pack_f32(acc.reshape(-1) / scale * scale)}), None


class HalfSent(Plain):
    """Keeps a residual but reports the accumulation as sent while it sends half of it."""

    has_residual = True

    def _encode(
        self, acc: torch.Tensor, grad: torch.Tensor, layer: LayerInfo, state: CodecState
    ) -> tuple[Payload, Sent | None]:
        return Payload({"v": pack_f32(acc.reshape(-1) * 0.5)}), Sent(dense=acc.clone())


@dataclass
class PyRandomState(CodecState):
    rng: random.Random = field(default_factory=random.Random)


class PythonRng(Plain):
    """Keeps a Python generator in its state: no checkpoint can hold it."""

    State = PyRandomState


# (codec, the property it breaks, what the message says, other properties the same flaw breaks)
BROKEN = [
    (FlatDecode, "shapes", "decode gave shape", ("rows",)),
    (UnderReports, "size", "nbytes", ()),
    (Remembers, "payload_only", "bytes alone", ()),
    (GlobalNoise, "determinism", "different bytes", ("checkpoint", "rows")),
    (NoEmpty, "tiny_layers", "raised RuntimeError", ()),
    (HalfSent, "error_feedback", "decoded \\+ new residual", ()),
    (PythonRng, "checkpoint", "Random cannot go into a checkpoint", ()),
]


def test_the_control_passes() -> None:
    check_codec(Plain)


@pytest.mark.parametrize(("cls", "prop", "detail", "also"), BROKEN, ids=[b[1] for b in BROKEN])
def test_a_broken_property_is_named(cls: type[Codec], prop: str, detail: str, also: tuple[str, ...]) -> None:
    assert prop in PROPERTIES
    with pytest.raises(AssertionError, match=f"^{cls.__name__}: {prop}: .*{detail}"):
        check_codec(cls)
    check_codec(cls, skip=(prop, *also))  # the flaw breaks nothing else


def test_bad_arguments_are_clear() -> None:
    with pytest.raises(ConfigError, match="subclass of aiotsim.compress.Codec"):
        check_codec(int)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="unknown properties to skip: speed; valid: declarations"):
        check_codec(Plain, skip=["speed"])
    with pytest.raises(ConfigError, match="unexpected keyword argument 'ratoi'; its parameters: "):
        check_codec(get_codec_class("topk"), {"ratoi": 0.1})
    with pytest.raises(CodecError, match=r"compressor.ratio: must be in \(0, 1\], got 2"):
        check_codec(get_codec_class("topk"), {"ratio": 2.0})


def test_a_codec_without_an_encoder_is_refused_when_made() -> None:
    """A codec defines _encode (one row) or _encode_rows (all rows); with neither it is refused at
    construction, naming both, rather than at its first encode deep in a run."""

    class NoEncoder(Codec[CodecState]):
        name = "no-encoder"

        def decode(self, payload: Payload, layer: LayerInfo) -> torch.Tensor:
            return torch.zeros(layer.shape)

    with pytest.raises(CodecError, match="NoEncoder implements neither _encode .* nor _encode_rows"):
        NoEncoder()
    with pytest.raises(CodecError, match="neither _encode"):
        check_codec(NoEncoder)
