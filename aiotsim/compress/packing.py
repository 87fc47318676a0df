"""Bit packing and sparse index coding: how codes and indices become the bytes on the wire.

Everything here is vectorized torch on the input's device and returns 1-D ``uint8`` tensors.

* :func:`pack_bits` / :func:`unpack_bits`: codes of 1, 2, 4 or 8 bits, ``8 // bits`` per byte,
  little-endian within the byte (code ``j`` of a byte sits at bit ``j * bits``).
* :func:`pack_uint` / :func:`unpack_uint`: unsigned integers of any width 1..63 bits, bit-packed.
* :func:`encode_indices` / :func:`decode_indices`: a sorted set of distinct indices into ``[0, n)``
  in the cheapest exact form chosen per message: plain indices at the narrowest bit width,
  delta (gap) coding at the narrowest width of the largest gap, or a bitmap of ``n`` bits.
* :func:`pack_f32`, :func:`pack_f16` and friends: floating-point values as raw bytes.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable
from typing import NamedTuple

import torch
from torch.nn.utils.rnn import pad_sequence

from aiotsim.errors import CodecError

_U8 = torch.uint8

# Index coding modes (first byte of an encoded index set).
IDX_PLAIN, IDX_DELTA, IDX_BITMAP = 0, 1, 2
_IDX_HEADER = 6  # bytes: mode (1) + bit width (1) + count (4, uint32 little-endian)


_GATHER_1 = sum(1 << (56 - 7 * j) for j in range(8))  # 8 one-bit codes per int64 -> bits 56..63
_GATHER_2 = sum(1 << (24 - 6 * j) for j in range(4))  # 4 two-bit codes per int32 -> bits 24..31


def pack_bits(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """Pack ``codes`` (integers in ``[0, 2**bits)``) into bytes, ``8 // bits`` codes per byte.

    Returns ``ceil(len(codes) * bits / 8)`` bytes; the pad codes in the last byte are zero.
    Fast path for ``uint8`` codes of 1, 2 or 4 bits: rather than shifting a ``[n/per, per]`` view
    and reducing its short rows (:func:`_pack_bits_generic`), a whole machine word of codes is
    combined with one integer multiply (1 and 2 bits) or one shift-or (4 bits): a few passes over
    ``n / per`` words. The bytes are the same.
    """
    codes = codes.reshape(-1)
    if bits not in (1, 2, 4) or codes.dtype != _U8:
        return _pack_bits_generic(codes, bits)
    if codes.storage_offset() % 8:
        codes = codes.clone()  # word views need an aligned start
    per_word = {1: 8, 2: 4, 4: 2}[bits]  # codes per word (int64, int32, int16)
    n = codes.numel()
    main = n - n % per_word
    parts = []
    if main:
        body = codes[:main]
        if bits == 1:
            word = body.view(torch.int64)
            packed = (word * _GATHER_1) >> 56
        elif bits == 2:
            word = body.view(torch.int32)
            packed = (word * _GATHER_2) >> 24
        else:
            word = body.view(torch.int16)
            packed = word | (word >> 4)  # low byte: c0 | c1 << 4
        parts.append(packed.to(_U8))  # keeps the low byte
    if main < n:
        parts.append(_pack_bits_generic(codes[main:], bits))
    if not parts:
        return codes.new_zeros(0)
    return parts[0] if len(parts) == 1 else torch.cat(parts)


def _pack_bits_generic(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """:func:`pack_bits` for any layout: shift a ``[n/per, per]`` view and sum its rows."""
    if bits not in (1, 2, 4, 8):
        raise CodecError(f"bits(={bits}) must be 1, 2, 4 or 8")
    codes = codes.reshape(-1).to(_U8)
    if bits == 8:
        return codes.clone()
    per = 8 // bits
    pad = (-codes.numel()) % per
    if pad:
        codes = torch.cat([codes, codes.new_zeros(pad)])
    shifts = torch.arange(0, 8, bits, device=codes.device, dtype=_U8)  # [per]
    # Disjoint bit fields, so the sum equals the bitwise OR and never exceeds 255.
    return (codes.view(-1, per) << shifts).sum(dim=1, dtype=torch.int32).to(_U8)


def unpack_bits(buf: torch.Tensor, bits: int, count: int) -> torch.Tensor:
    """Inverse of :func:`pack_bits`: the first ``count`` codes as ``uint8``. ``buf`` may have
    leading dimensions (``[..., bytes]``: one packed message per row, for batched decoding);
    the codes then are ``[..., count]``."""
    if bits not in (1, 2, 4, 8):
        raise CodecError(f"bits(={bits}) must be 1, 2, 4 or 8")
    need = math.ceil(count * bits / 8)
    if buf.shape[-1] < need:
        raise CodecError(f"buffer of {buf.shape[-1]} bytes is too short for {count} {bits}-bit codes")
    if bits == 8:
        return buf[..., :count].clone()
    shifts = torch.arange(0, 8, bits, device=buf.device, dtype=_U8)
    mask = (1 << bits) - 1
    return ((buf[..., :need].unsqueeze(-1) >> shifts) & mask).reshape(*buf.shape[:-1], -1)[..., :count]


def bit_width(max_value: int) -> int:
    """Bits needed to store every integer in ``[0, max_value]`` (at least 1)."""
    return max(1, int(max_value).bit_length())


def pack_uint(values: torch.Tensor, width: int) -> torch.Tensor:
    """Bit-pack non-negative integers of ``width`` bits each (1..63): ``ceil(k*width/8)`` bytes."""
    if not 1 <= width <= 63:
        raise CodecError(f"width(={width}) must be in 1..63 bits")
    values = values.reshape(-1).to(torch.int64)
    if width in (8, 16, 32):
        # Byte-aligned widths: the integers' own little-endian bytes are the packing.
        dtype = {8: torch.uint8, 16: torch.int16, 32: torch.int32}[width]
        # `values` is int64 here, so `.to(dtype)` is already a fresh tensor: no copy needed
        return values.to(dtype).contiguous().view(_U8).reshape(-1)
    shifts = torch.arange(width, device=values.device, dtype=torch.int64)
    bitplanes = ((values.unsqueeze(1) >> shifts) & 1).to(_U8)  # [k, width], LSB first
    return pack_bits(bitplanes.reshape(-1), 1)


def unpack_uint(buf: torch.Tensor, width: int, count: int) -> torch.Tensor:
    """Inverse of :func:`pack_uint`: ``count`` integers as ``int64`` (``[..., count]`` for a
    ``[..., bytes]`` buffer of one packed set per row, as :func:`unpack_bits`)."""
    if not 1 <= width <= 63:
        raise CodecError(f"width(={width}) must be in 1..63 bits")
    lead = buf.shape[:-1]
    if width in (8, 16, 32):
        dtype = {8: torch.uint8, 16: torch.int16, 32: torch.int32}[width]
        nbytes = count * width // 8
        # rows: the slice is strided (made contiguous to be viewed); one set: a no-op
        raw = _aligned(buf[..., :nbytes].contiguous(), width // 8).view(dtype).to(torch.int64)  # `.to` copies
        if width == 16:
            raw &= 0xFFFF  # int16 view is signed; the packed values are unsigned
        elif width == 32:
            raw &= 0xFFFFFFFF
        return raw
    bitplanes = unpack_bits(buf, 1, count * width).to(torch.int64).view(*lead, count, width)
    shifts = torch.arange(width, device=buf.device, dtype=torch.int64)
    return (bitplanes << shifts).sum(dim=-1)


class CodedIndices(NamedTuple):
    """An encoded index set: its bytes (:attr:`buf`, on the indices' device) and a host copy of
    the 6 header bytes they start with (:attr:`head`), which the encoder knows without reading the
    device, for the receiver to parse without reading it either (:attr:`Payload.heads
    <aiotsim.compress.base.Payload.heads>`)."""

    buf: torch.Tensor
    head: bytes


def _header_bytes(mode: int, width: int, count: int) -> bytes:
    """The 6 header bytes of an index set: mode, bit width, count (uint32 little-endian)."""
    return bytes((mode, width)) + count.to_bytes(4, "little")


def _header(mode: int, width: int, count: int, device: torch.device) -> torch.Tensor:
    """:func:`_header_bytes` as a ``uint8`` tensor on ``device``."""
    return torch.tensor(list(_header_bytes(mode, width, count)), dtype=_U8, device=device)


def _coded(mode: int, width: int, count: int, body: torch.Tensor) -> CodedIndices:
    """The index set of ``body`` behind its header, and the header on the host."""
    return CodedIndices(torch.cat([_header(mode, width, count, body.device), body]), _header_bytes(mode, width, count))


def index_coding_sizes(count: int, n: int, max_gap: int) -> dict[int, int]:
    """Bytes each index coding would take for ``count`` indices into ``[0, n)`` whose largest
    gap (first index counted as a gap from 0) is ``max_gap``."""
    plain = math.ceil(count * bit_width(max(n - 1, 0)) / 8)
    delta = math.ceil(count * bit_width(max_gap) / 8)
    bitmap = math.ceil(n / 8)
    return {IDX_PLAIN: _IDX_HEADER + plain, IDX_DELTA: _IDX_HEADER + delta, IDX_BITMAP: _IDX_HEADER + bitmap}


def index_bound(count: int, n: int) -> int:
    """Most bytes :func:`encode_indices` takes for ``count`` indices into ``[0, n)``, whatever
    the set: it picks the cheapest form, never above the plain or the bitmap one (delta's width,
    that of the largest gap, is at most plain's); non-decreasing in ``count``."""
    sizes = index_coding_sizes(count, n, max_gap=0)
    return min(sizes[IDX_PLAIN], sizes[IDX_BITMAP])


def _largest_gap_in_byte(b: int) -> int:
    """Largest distance between consecutive set bits of the byte ``b`` (0 with fewer than two)."""
    ones = [i for i in range(8) if (b >> i) & 1]
    return max((y - x for x, y in zip(ones, ones[1:])), default=0)


@functools.cache
def _gap_in_byte_table(min_gap: int, device: torch.device) -> torch.Tensor:
    """``[256]`` bool: does the byte value hold two consecutive set bits at least ``min_gap`` apart?
    Built once per gap and device (it is looked up on every dense sparse message)."""
    return torch.tensor([_largest_gap_in_byte(b) >= min_gap for b in range(256)], dtype=torch.bool, device=device)


def _bitmap_certainly_beats_delta(packed: torch.Tensor, count: int, n: int) -> bool:
    """Whether the bitmap ``packed`` (``ceil(n / 8)`` bytes of a ``count``-element set) is certainly
    smaller than the set's delta coding, decided on the bitmap alone (no index pass).

    Delta with gap width ``w`` ties or beats the bitmap while ``ceil(count * w / 8) <= ceil(n / 8)``;
    let ``W`` be the largest such ``w``. It loses exactly when the largest gap is ``>= G = 2**W``.
    Two sufficient signs of such a gap, both read off the bytes: for ``G <= 7``, a byte holding two
    consecutive set bits ``G`` or more apart (a 256-entry byte table); for any ``G``, a run of
    ``m = ceil(G / 8)`` zero bytes followed later by a set bit (a gap of at least ``8 m``).
    ``False`` means "not shown": the caller then measures the gaps exactly.
    """
    bitmap = math.ceil(n / 8)
    width = 0  # ends >= 1: count <= n, so 1-bit gaps always fit in the bitmap's bytes
    while width < 16 and math.ceil(count * (width + 1) / 8) <= bitmap:
        width += 1
    gap = 1 << width  # smallest largest-gap for which the bitmap wins
    if gap <= 7 and bool(_gap_in_byte_table(gap, packed.device)[packed.to(torch.int32)].any()):
        return True
    run = math.ceil(gap / 8)  # zero bytes that prove a gap >= 2**width
    if width >= 16 or run > 16:
        return False  # sparse enough that delta may win: measure it
    zero = packed == 0  # [B]
    # bytes after the last set bit are trailing zeros, not a gap
    last = zero.numel() - 1 - int(torch.argmax((~zero).flip(0).to(_U8)))
    zero = zero[:last]
    if zero.numel() < run:
        return False
    if run == 1:
        return bool(zero.any())
    return bool(zero.unfold(0, run, 1).all(dim=1).any())


def encode_indices(indices: torch.Tensor, n: int, mask: torch.Tensor | None = None) -> torch.Tensor:
    """The bytes of :func:`encode_index_set` (without the host copy of their header)."""
    return encode_index_set(indices, n, mask).buf


def encode_index_set(indices: torch.Tensor, n: int, mask: torch.Tensor | None = None) -> CodedIndices:
    """Encode sorted, distinct ``indices`` into ``[0, n)`` in the cheapest exact form.

    The first byte names the form (plain / delta / bitmap); ties prefer the simpler form.
    ``mask``: the same set as a boolean ``[n]`` tensor, when the caller has one. A dense set is then
    packed straight from it when the bitmap is provably the cheapest form, skipping the gap pass and
    the scatter into a fresh ``[n]`` map (same bytes either way).
    """
    idx = indices.reshape(-1).to(torch.int64)
    count = int(idx.numel())
    device = idx.device
    if mask is not None and count:
        sizes = index_coding_sizes(count, n, max_gap=0)  # plain and bitmap exact; delta's bound
        if sizes[IDX_BITMAP] < sizes[IDX_PLAIN]:
            packed = pack_bits(mask.reshape(-1).view(_U8), 1)
            if _bitmap_certainly_beats_delta(packed, count, n):
                return _coded(IDX_BITMAP, 1, count, packed)
    if count:
        gaps = torch.diff(idx, prepend=idx.new_zeros(1))  # first gap is idx[0] itself
        max_gap = int(gaps.max())
    else:
        gaps, max_gap = idx, 0
    sizes = index_coding_sizes(count, n, max_gap)
    mode = min(sizes, key=lambda m: (sizes[m], m))
    if mode == IDX_PLAIN:
        width = bit_width(max(n - 1, 0))
        body = pack_uint(idx, width)
    elif mode == IDX_DELTA:
        width = bit_width(max_gap)
        body = pack_uint(gaps, width)
    else:
        width = 1
        if mask is None:
            mask = torch.zeros(n, dtype=torch.bool, device=device)
            mask[idx] = True
        body = pack_bits(mask.reshape(-1).view(_U8), 1)
    return _coded(mode, width, count, body)


def pack_rows(
    codes: torch.Tensor, pack: Callable[[torch.Tensor], torch.Tensor], aligned: bool, head: torch.Tensor | None = None
) -> list[torch.Tensor]:
    """``[pack(row) for row in codes]`` for ``codes`` ``[rows, n]``, each after the bytes ``head``
    when given (``[h]``: the same for every row, or ``[rows, h]``: one per row): in one pass when
    every row's packed bits end on a byte (``aligned``: the flat stream then splits exactly at row
    boundaries; the rows are views of one buffer), else row by row."""
    rows = codes.shape[0]
    if head is None:
        return list(pack(codes.reshape(-1)).view(rows, -1)) if aligned and rows else [pack(r) for r in codes]
    heads = head.expand(rows, -1)
    if aligned and rows:
        return list(torch.cat([heads, pack(codes.reshape(-1)).view(rows, -1)], dim=1))
    return [torch.cat([h, pack(r)]) for h, r in zip(heads, codes)]


def encode_index_rows(idx: torch.Tensor, n: int) -> list[CodedIndices]:
    """:func:`encode_index_set` of every row of ``idx`` (``[rows, k]``, each row sorted and
    distinct), the same bytes, for a batch of messages (batched top-k): one host read for the
    whole batch (every row's largest gap, which picks its coding form) and one packing pass per
    form and width instead of one per row, so a GPU batch does not wait on the host once per
    message. Rows coded alike share a buffer (each result is a view of it)."""
    rows, count = idx.shape
    if count == 0 or rows == 1:  # one set: its own coding is the cheaper call (a third of the time)
        return [encode_index_set(r, n) for r in idx]
    idx = idx.to(torch.int64)
    gaps = torch.diff(idx, dim=1, prepend=idx.new_zeros(rows, 1))  # first gap: the first index
    forms: dict[tuple[int, int], list[int]] = {}  # (mode, bit width) -> rows
    plain_width = bit_width(max(n - 1, 0))
    for row, max_gap in enumerate(gaps.max(dim=1).values.tolist()):  # the one host read
        sizes = index_coding_sizes(count, n, max_gap)
        mode = min(sizes, key=lambda m: (sizes[m], m))
        width = plain_width if mode == IDX_PLAIN else bit_width(max_gap) if mode == IDX_DELTA else 1
        forms.setdefault((mode, width), []).append(row)
    by_row: dict[int, CodedIndices] = {}
    for (mode, width), members in forms.items():
        picked = None if len(members) == rows else torch.tensor(members, device=idx.device)
        head = _header(mode, width, count, idx.device)  # the same for every row of one form
        if mode == IDX_BITMAP:
            mask = torch.zeros(len(members), n, dtype=torch.bool, device=idx.device)
            mask.scatter_(1, idx if picked is None else idx.index_select(0, picked), True)
            bufs = pack_rows(mask.view(_U8), lambda r: pack_bits(r, 1), n % 8 == 0, head)
        else:
            src = gaps if mode == IDX_DELTA else idx
            src = src if picked is None else src.index_select(0, picked)
            bufs = pack_rows(src, lambda r, w=width: pack_uint(r, w), count * width % 8 == 0, head)
        host = _header_bytes(mode, width, count)
        by_row.update((row, CodedIndices(buf, host)) for row, buf in zip(members, bufs))
    return [by_row[row] for row in range(rows)]


def encode_index_ragged(
    cols: torch.Tensor, counts: list[int], n: int, mask: torch.Tensor | None = None
) -> list[CodedIndices]:
    """:func:`encode_index_set` of each of ``len(counts)`` index sets into ``[0, n)`` laid end to
    end in ``cols`` (``[sum(counts)]``, each set ascending and distinct), the same bytes: a batch of
    messages of different sizes (batched threshold). ``mask``: the sets as a ``[rows, n]`` boolean
    tensor, when the caller has one. One host read for the whole batch (every set's largest gap,
    which picks its form), and one packing pass for all bitmap-coded sets when ``n`` fills whole
    bytes; the other sets are packed one by one, reading nothing back. A single set takes one read
    either way and goes to :func:`encode_index_set`, which bitmap-codes a dense set straight from
    its mask, without the gaps and owners (threshold of 1M elements with 99% passing, one thread:
    23 ms per encode, 67 ms the ragged way)."""
    if len(counts) == 1:
        return [encode_index_set(cols, n, None if mask is None else mask[0])]
    rows, device = len(counts), cols.device
    cols = cols.to(torch.int64)
    starts = list(itertools.accumulate([0, *counts[:-1]]))
    gaps = cols.clone()  # first gap of each set: its first index
    if cols.numel() > 1:
        gaps[1:] -= cols[:-1]
        firsts = [s for s, c in zip(starts, counts) if c and s]
        if firsts:
            gaps[firsts] = cols[firsts]
    ends = torch.tensor(list(itertools.accumulate(counts)), device=device)
    owner = torch.searchsorted(ends, torch.arange(cols.numel(), device=device), right=True)  # each index's set
    largest = torch.zeros(rows, dtype=torch.int64, device=device).scatter_reduce_(0, owner, gaps, "amax")
    out: list[CodedIndices | None] = []
    bitmaps: list[int] = []
    for row, (count, max_gap, start) in enumerate(zip(counts, largest.tolist(), starts)):  # the one host read
        sizes = index_coding_sizes(count, n, max_gap)
        mode = min(sizes, key=lambda m: (sizes[m], m))
        if mode == IDX_BITMAP:
            bitmaps.append(row)
            out.append(None)
            continue
        width = bit_width(max(n - 1, 0)) if mode == IDX_PLAIN else bit_width(max_gap)
        src = (cols if mode == IDX_PLAIN else gaps)[start : start + count]
        out.append(_coded(mode, width, count, pack_uint(src, width)))
    if bitmaps:
        if mask is None:
            mask = torch.zeros(rows, n, dtype=torch.bool, device=device)
            mask[owner, cols] = True
        heads = [_header_bytes(IDX_BITMAP, 1, counts[r]) for r in bitmaps]
        head_rows = torch.tensor([list(h) for h in heads], dtype=_U8, device=device)  # [bitmaps, 6]
        picked = mask.index_select(0, torch.tensor(bitmaps, device=device)).view(_U8)
        bufs = pack_rows(picked, lambda r: pack_bits(r, 1), n % 8 == 0, head_rows)
        for row, buf, head in zip(bitmaps, bufs, heads):
            out[row] = CodedIndices(buf, head)
    return out  # type: ignore[return-value]


def index_header(buf: torch.Tensor, head: bytes | None = None) -> tuple[int, int, int]:
    """``(mode, width, count)`` of an encoded index set, which a decoder can pass on to
    :func:`decode_bitmap` and :func:`decode_indices`: parsed from ``head``, the host copy of its
    6 header bytes, when the payload carries one (:attr:`CodedIndices.head`), else one host read
    of the buffer's first 6 bytes (a GPU sync)."""
    if buf.numel() < _IDX_HEADER:
        raise CodecError(f"index buffer of {buf.numel()} bytes is shorter than its header")
    if head is None:
        head = bytes(buf[:_IDX_HEADER].tolist())  # one host read
    elif len(head) != _IDX_HEADER:
        raise CodecError(f"index header of {len(head)} bytes, expected {_IDX_HEADER}")
    return head[0], head[1], int.from_bytes(head[2:6], "little")  # the count: uint32 little-endian


def decode_bitmap(
    buf: torch.Tensor, n: int, header: tuple[int, int, int] | None = None
) -> tuple[torch.Tensor, int] | None:
    """``(mask, count)`` when ``buf`` is a bitmap-coded index set (``mask``: boolean ``[n]``), else
    ``None``. Lets a decoder scatter a dense set with ``masked_scatter_`` instead of materializing
    its indices. ``header``: :func:`index_header` of ``buf``, when the caller has read it."""
    mode, _, count = header or index_header(buf)
    if mode != IDX_BITMAP:
        return None
    return unpack_bits(buf[..., _IDX_HEADER:], 1, n).view(torch.bool), count  # [..., n] for rows


def decode_indices(buf: torch.Tensor, n: int, header: tuple[int, int, int] | None = None) -> torch.Tensor:
    """Inverse of :func:`encode_indices`: the sorted indices as ``int64`` (``header``: as in
    :func:`decode_bitmap`). Plain and delta sets may come as ``[rows, bytes]``, one set per row,
    all of one header (batched decoding): then ``[rows, count]``."""
    mode, width, count = header or index_header(buf)
    body = buf[..., _IDX_HEADER:]
    if mode == IDX_PLAIN:
        return unpack_uint(body, width, count)
    if mode == IDX_DELTA:
        return torch.cumsum(unpack_uint(body, width, count), dim=-1)
    if mode == IDX_BITMAP:
        return torch.nonzero(unpack_bits(body, 1, n), as_tuple=False).reshape(-1)
    raise CodecError(f"unknown index coding mode {mode}")


def mask_indices(mask: torch.Tensor, count: int, *, static: bool | None = None) -> torch.Tensor:
    """The ascending indices (``int64``) of the 1-D boolean ``mask``, which holds exactly ``count``
    ``True``: ``nonzero``, whose output size is data-dependent (a host read, on a GPU a sync),
    except off the CPU, where ``nonzero_static`` of the known size needs none (on the CPU it is
    up to 2x slower than ``nonzero``). ``static`` forces one or the other (tests)."""
    if static if static is not None else mask.device.type != "cpu":
        return torch.nonzero_static(mask, size=count).reshape(-1)
    return torch.nonzero(mask).reshape(-1)


def pad_rows(bufs: list[torch.Tensor], *, by_copies: bool | None = None) -> torch.Tensor:
    """1-D byte buffers as the rows of one ``[len(bufs), longest]`` tensor, zero-padded.

    Equal lengths are one ``stack``. Otherwise, on the CPU, ``pad_sequence`` (a copy per buffer,
    in C++); elsewhere one ``cat`` and one scatter through positions built from the lengths, so
    that a GPU gets three kernels instead of one per buffer (on the CPU the int64 positions cost
    ~15x the copies). ``by_copies`` forces one or the other (tests)."""
    lens = [b.numel() for b in bufs]
    if min(lens) == max(lens):
        return torch.stack(bufs)
    if by_copies if by_copies is not None else bufs[0].device.type == "cpu":
        return pad_sequence(bufs, batch_first=True)
    flat = torch.cat(bufs)
    device, longest = flat.device, max(lens)
    sizes = torch.tensor(lens, device=device)
    row = torch.repeat_interleave(torch.arange(len(bufs), device=device), sizes, output_size=flat.numel())
    start = torch.cumsum(sizes, 0) - sizes  # [rows] first byte of each buffer in flat
    out = torch.zeros(len(bufs), longest, dtype=flat.dtype, device=device)
    out.view(-1)[row * longest + torch.arange(flat.numel(), device=device) - start[row]] = flat
    return out


# ---- raw floating-point and integer fields ------------------------------------------------------
def _as_tensor(
    values: torch.Tensor | list[float] | list[int], dtype: torch.dtype, device: torch.device | None
) -> torch.Tensor:
    if isinstance(values, torch.Tensor):
        return values.reshape(-1).to(dtype=dtype, device=device if device is not None else values.device)
    return torch.tensor(values, dtype=dtype, device=device)


def _own_bytes(packed: torch.Tensor, values: torch.Tensor | list[float]) -> torch.Tensor:
    """``packed`` (a byte view), copied only when it still shares storage with the caller's
    ``values``: a payload must never alias state that is modified later (a residual, a velocity),
    but a freshly converted or gathered tensor needs no second copy."""
    if isinstance(values, torch.Tensor) and packed.untyped_storage().data_ptr() == values.untyped_storage().data_ptr():
        return packed.clone()
    return packed


def _aligned(buf: torch.Tensor, size: int) -> torch.Tensor:
    """``buf`` (bytes), copied only when its start is not a multiple of ``size`` bytes, so that it
    can be viewed as a ``size``-byte dtype."""
    return buf.clone() if buf.storage_offset() % size else buf


def pack_f32(values: torch.Tensor | list[float], device: torch.device | None = None) -> torch.Tensor:
    """fp32 values as their 4 little-endian bytes each."""
    return _own_bytes(_as_tensor(values, torch.float32, device).contiguous().view(_U8), values)


def unpack_f32(buf: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`pack_f32` (a new tensor: the caller may modify it)."""
    return buf.clone().view(torch.float32)


def view_f32(buf: torch.Tensor) -> torch.Tensor:
    """:func:`unpack_f32` without a copy when ``buf`` is aligned: a read-only view of the payload."""
    return _aligned(buf, 4).view(torch.float32)


def pack_f16(values: torch.Tensor | list[float], device: torch.device | None = None) -> torch.Tensor:
    """fp16 values as their 2 bytes each (values outside fp16's range saturate to +-inf)."""
    return _own_bytes(_as_tensor(values, torch.float16, device).contiguous().view(_U8), values)


def unpack_f16(buf: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`pack_f16`, returned as fp32 (``.float()`` makes the copy)."""
    return _aligned(buf, 2).view(torch.float16).float()


VALUE_BYTES = {"fp32": 4, "fp16": 2}  # bytes per sparse value, by value_dtype


def pack_values(values: torch.Tensor, value_dtype: str) -> torch.Tensor:
    """Sparse values as ``"fp32"`` or ``"fp16"`` bytes (the configurable value precision)."""
    if value_dtype == "fp32":
        return pack_f32(values)
    if value_dtype == "fp16":
        return pack_f16(values)
    raise CodecError(f"value_dtype(={value_dtype!r}) must be 'fp32' or 'fp16'")


def pack_value_rows(values: torch.Tensor, value_dtype: str) -> list[torch.Tensor]:
    """:func:`pack_values` of every row of ``values`` (``[rows, k]``), the same bytes: views of one
    buffer, which aliases ``values`` where it is already fp32 (the caller's fresh tensor, which
    must not be modified afterwards)."""
    dtypes = {"fp32": torch.float32, "fp16": torch.float16}
    if value_dtype not in dtypes:
        raise CodecError(f"value_dtype(={value_dtype!r}) must be 'fp32' or 'fp16'")
    return list(values.to(dtypes[value_dtype]).contiguous().view(_U8))


def unpack_values(buf: torch.Tensor, value_dtype: str) -> torch.Tensor:
    """Inverse of :func:`pack_values`, returned as fp32."""
    return unpack_f32(buf) if value_dtype == "fp32" else unpack_f16(buf)


def pack_u32(values: torch.Tensor | list[int], device: torch.device | None = None) -> torch.Tensor:
    """Unsigned 32-bit integers (counts, seeds) as 4 little-endian bytes each."""
    t = _as_tensor(values, torch.int64, device)
    return pack_uint(t & 0xFFFFFFFF, 32)


def unpack_u32(buf: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`pack_u32`, as ``int64``."""
    return unpack_uint(buf, 32, buf.numel() // 4)
