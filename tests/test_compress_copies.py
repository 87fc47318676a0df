"""Copies on the hot path: a payload never aliases node state, and a steady-state top-k step makes
no clone: its message's values are the gather of the k sent values (a fresh tensor, not state), and
the header, index and decode copies of the packing helpers (about 50 per node per iteration on
LeNet-5) are gone."""

from __future__ import annotations

import pytest
import torch

from aiotsim.compress.base import LayerInfo
from aiotsim.compress.packing import (
    IDX_PLAIN,
    decode_indices,
    encode_index_set,
    encode_indices,
    index_header,
    pack_f16,
    pack_f32,
    pack_u32,
    pack_uint,
    unpack_f16,
    unpack_f32,
    unpack_uint,
    view_f32,
)
from aiotsim.compress.registry import build_codec
from aiotsim.errors import CodecError


def test_packed_bytes_never_alias_the_input() -> None:
    state = torch.arange(6, dtype=torch.float32)
    for pack in (pack_f32, pack_f16):
        buf = pack(state)
        before = buf.clone()
        state.add_(100.0)  # the node's residual / velocity changes after the send
        assert torch.equal(buf, before)
    ints = torch.tensor([1, 2, 70000], dtype=torch.int64)
    buf = pack_uint(ints, 32)
    ints.add_(1)
    assert unpack_uint(buf, 32, 3).tolist() == [1, 2, 70000]


def test_unpacking_misaligned_slices() -> None:
    # a 4-byte field at byte offset 2 (as in the index header) still reads right
    raw = torch.cat([torch.tensor([7, 9], dtype=torch.uint8), pack_u32([305419896]), pack_f32([1.5, -2.0])])
    assert unpack_uint(raw[2:6], 32, 1).tolist() == [305419896]
    assert view_f32(raw[6:]).tolist() == [1.5, -2.0]
    assert unpack_f32(raw[6:]).tolist() == [1.5, -2.0]
    half = torch.cat([torch.tensor([0], dtype=torch.uint8), pack_f16([0.5, 3.0])])
    assert unpack_f16(half[1:]).tolist() == [0.5, 3.0]


def test_index_header_count_read_on_the_host() -> None:
    idx = torch.tensor([3, 70, 70000, 99999])
    buf = encode_indices(idx, 100_000)
    assert index_header(buf)[2] == 4  # the count
    assert decode_indices(buf, 100_000).tolist() == idx.tolist()


def test_steady_state_topk_step_clones_nothing(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    codec = build_codec("topk", {}, seed=1)
    layer = LayerInfo("fc.weight", (120, 84), kind="fc")
    state = codec.init_state(layer, torch.device("cpu"), node=0)
    gen = torch.Generator().manual_seed(0)
    codec.decode(codec.encode(torch.randn(120, 84, generator=gen), layer, state), layer)  # first step: residual
    calls = []
    original = torch.Tensor.clone

    def counting(self, *a, **k):  # type: ignore[no-untyped-def]
        calls.append(tuple(self.shape))
        return original(self, *a, **k)

    monkeypatch.setattr(torch.Tensor, "clone", counting)
    for _ in range(3):
        payload = codec.encode(torch.randn(120, 84, generator=gen), layer, state)
        sent = codec.decode(payload, layer)
        state.residual.add_(100.0)  # the node's state changes after the send: the message does not
        assert torch.equal(codec.decode(payload, layer), sent)
        state.residual.sub_(100.0)
    assert calls == []  # the values' bytes are their gather's own (4 k bytes, k = 101), not a clone


def test_index_header_parsed_from_its_host_copy() -> None:
    # {3, 70, 70000, 99999} of 100,000: gaps up to 69,930 need 17 bits, plain 17 too: a tie, plain
    coded = encode_index_set(torch.tensor([3, 70, 70000, 99999]), 100_000)
    assert coded.head == bytes([IDX_PLAIN, 17, 4, 0, 0, 0])
    assert index_header(coded.buf, coded.head) == index_header(coded.buf) == (IDX_PLAIN, 17, 4)
    # a host copy that is not a header is refused, not misread
    with pytest.raises(CodecError, match="6"):
        index_header(coded.buf, coded.head[:4])
