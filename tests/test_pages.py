"""StatePages: long-lived per-node state in pages of its own (aiotsim/sim/pages.py)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from aiotsim.compress.memory import rows_block
from aiotsim.sim.pages import ALIGN, StatePages
from aiotsim.sim.storage import narrow_states, step_pass_velocity, step_velocity, widen_states

DTYPES = [torch.float32, torch.float16, torch.float64, torch.int64, torch.uint8]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 3000), st.sampled_from(DTYPES)), min_size=1, max_size=12))
def test_held_copies_equal_their_source_and_never_overlap(specs: list[tuple[int, torch.dtype]]) -> None:
    pages = StatePages(slab_bytes=8192)  # small slabs: blocks span several, one larger than a slab
    gen = torch.Generator().manual_seed(len(specs))
    sources = [(torch.rand(n, generator=gen) * 100).to(dtype) for n, dtype in specs]
    held = [pages.hold(t) for t in sources]
    for src, h in zip(sources, held, strict=True):
        assert h.dtype == src.dtype and h.shape == src.shape and torch.equal(h, src)
        assert h.data_ptr() != src.data_ptr() and h.data_ptr() % ALIGN == 0 and pages.holds(h)
    for k, h in enumerate(held):  # writing one block leaves every other block as it was
        h.fill_(7)
        assert all(torch.equal(o, s) for o, s in zip(held[k + 1 :], sources[k + 1 :], strict=True))
    spans = sorted((h.data_ptr(), h.data_ptr() + h.numel() * h.element_size()) for h in held)
    assert all(end <= nxt for (_, end), (nxt, _) in zip(spans, spans[1:]))


def test_hold_is_idempotent_and_leaves_other_devices_alone() -> None:
    pages = StatePages(slab_bytes=4096)
    h = pages.hold(torch.arange(10.0).view(2, 5))
    assert pages.hold(h) is h and pages.hold(h.view(10)).data_ptr() == h.data_ptr()
    assert (pages.slabs, pages.held_bytes) == (1, ALIGN)  # 40 B rounded up to one 64 B line
    assert not pages.holds(h[1])  # a row inside a block is not a block
    empty = torch.empty(0)
    assert pages.hold(empty) is empty  # nothing to hold (an empty tensor has no address)
    meta = torch.empty(3, device="meta")
    assert pages.hold(meta) is meta and pages.slabs == 1
    big = pages.hold(torch.ones(2000))  # 8,000 B > a 4,096 B slab: a slab of its own
    assert pages.slabs == 2 and torch.equal(big, torch.ones(2000))


def test_first_fp32_velocity_is_held_then_updated_in_place() -> None:
    pages = StatePages()
    g = [torch.tensor([1.0, -2.0]), torch.tensor([0.5])]
    step, stored = step_velocity(None, g, 0.9, torch.float32, pages)
    assert step is stored and all(pages.holds(v) for v in stored)
    assert all(v.data_ptr() != x.data_ptr() and torch.equal(v, x) for v, x in zip(stored, g))
    ptrs = [v.data_ptr() for v in stored]
    step2, stored2 = step_velocity(stored, [torch.tensor([1.0, 1.0]), torch.tensor([1.0])], 0.5, torch.float32, pages)
    assert [v.data_ptr() for v in stored2] == ptrs  # u <- 0.5 u + g, in the same block
    assert torch.equal(stored2[0], torch.tensor([1.5, 0.0])) and torch.equal(stored2[1], torch.tensor([1.25]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_a_velocity_from_elsewhere_moves_in_on_its_next_step(dtype: torch.dtype) -> None:
    """A velocity restored from a checkpoint lives in the heap; its next step stores it in pages."""
    pages = StatePages()
    restored = [torch.tensor([2.0, -4.0]).to(dtype)]
    step, stored = step_velocity(restored, [torch.tensor([1.0, 1.0])], 0.5, dtype, pages)
    assert pages.holds(stored[0]) and stored[0].dtype == dtype
    assert torch.equal(step[0], torch.tensor([2.0, -1.0])) and torch.equal(stored[0].float(), step[0])
    assert torch.equal(restored[0], torch.tensor([2.0, -4.0]).to(dtype))  # the caller's copy is left alone


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_codec_state_moves_to_pages_once_and_stays(dtype: torch.dtype) -> None:
    """narrow_states: a fresh residual is moved into the pages; the next step's residual, formed in
    place (fp32) or rounded into the kept fp16 tensor, stays in the same block."""
    from aiotsim.compress.base import CodecState

    pages = StatePages()
    state = CodecState(generator=torch.Generator(), residual=torch.tensor([0.1, 0.2, 0.3]))
    kept = widen_states([state])
    narrow_states([state], dtype, kept, pages)
    first = state.residual
    assert first is not None and pages.holds(first) and first.dtype == dtype
    assert torch.equal(first, torch.tensor([0.1, 0.2, 0.3]).to(dtype))
    kept = widen_states([state])
    assert state.residual is not None and state.residual.dtype == torch.float32
    state.residual.add_(1.0) if dtype == torch.float32 else setattr(state, "residual", state.residual + 1.0)
    narrow_states([state], dtype, kept, pages)
    assert state.residual.data_ptr() == first.data_ptr() and pages.held_bytes == ALIGN
    assert torch.equal(state.residual, (torch.tensor([0.1, 0.2, 0.3]).to(dtype).float() + 1.0).to(dtype))


class _Rows:
    """A results sink that keeps the metric rows."""

    def __init__(self) -> None:
        self.rows: list[dict] = []

    def write_metrics(self, row: dict) -> None:
        self.rows.append(row)

    def write_eval(self, row: dict) -> None:
        pass

    def write_trace(self, events: list) -> None:
        pass

    def finish(self, summary: dict) -> None:
        pass


@pytest.mark.parametrize("state_dtype", ["float32", "float16"])
def test_a_run_is_the_same_with_its_state_in_pages_and_all_of_it_is_there(state_dtype: str, monkeypatch) -> None:
    """topk (residuals) with momentum on the nodes (velocities), 4 rounds: the same parameters and
    rows, bit for bit, with the state held in pages or left where it was made; and afterwards every
    node's velocity and residual lives in the pages."""
    from aiotsim.config import scenario_from_dict
    from aiotsim.sim.runner import run_cluster
    from aiotsim.sim.world import Cluster

    sc = scenario_from_dict({
        "scenario": {"name": "pages", "seed": 3, "iterations": 4},
        "data": {"dataset": "digits", "batch_size": 16},
        "model": {"name": "mlp"},
        "training": {"lr": 0.1, "momentum": 0.9, "momentum_at": "nodes", "eval_every": 4},
        "compressor": {"name": "topk"},
        "nodes": {"count": 5, "device": "rpi4", "compute_model": "flops", "state_dtype": state_dtype},
    })  # fmt: skip
    out = []
    for held in (True, False):
        if not held:
            monkeypatch.setattr(StatePages, "hold", lambda self, t: t)
        cluster = Cluster(sc, device="cpu")
        sink = _Rows()
        run_cluster(cluster, sink)
        out.append(([p.detach().clone() for p in cluster.learning.params], sink.rows))
        if held:
            pages = cluster.learning.pages
            for node in cluster.nodes:
                local = node.local
                assert local.velocity is not None and all(pages.holds(v) for v in local.velocity)
                assert all(s.residual is None or pages.holds(s.residual) for s in local.states)
                assert sum(s.residual is not None for s in local.states) > 0
    (p1, rows1), (p2, rows2) = out
    assert rows1 == rows2 and all(torch.equal(a, b) for a, b in zip(p1, p2, strict=True))


def test_rows_of_a_held_pass_are_held_and_read_back_as_one_block() -> None:
    pages = StatePages(slab_bytes=4096)
    src = torch.arange(12.0).view(3, 2, 2)  # 3 nodes' [2, 2] layer: rows of 16 B
    block = pages.hold_rows(src)
    assert torch.equal(block, src) and block.data_ptr() % ALIGN == 0
    rows = list(block.unbind(0))
    assert all(pages.holds(r) for r in rows) and pages.held_bytes == ALIGN  # 48 B: one line
    again = rows_block(rows)
    assert again is not None and again.data_ptr() == block.data_ptr() and torch.equal(again, src)
    again[1].fill_(-1.0)  # the same memory as the rows
    assert rows[1].eq(-1.0).all() and torch.equal(rows[0], src[0])
    assert rows_block([rows[1], rows[0], rows[2]]) is None  # out of order
    assert rows_block([rows[0], rows[2]]) is None  # a gap
    other = pages.hold_rows(src.clone())  # right after the first block in the same slab
    assert rows_block([rows[2], other[0]]) is None  # 64-B aligned apart: not the next row
    assert rows_block([src[0].clone(), src[1].clone()]) is None  # separate tensors


@pytest.mark.parametrize("m", [0.9, 0.0, 1.5])
def test_a_pass_steps_its_velocities_as_each_node_would(m: float) -> None:
    """Three steps of a pass of 4 nodes (two layers, one 0-dim) equal each node's own
    step_velocity bit for bit; the nodes' velocities stay rows of the first step's blocks."""
    gen = torch.Generator().manual_seed(3)
    shapes = [(5, 3), ()]
    pages, own_pages = StatePages(), StatePages()
    mine: list[list[torch.Tensor] | None] = [None] * 4
    own: list[list[torch.Tensor] | None] = [None] * 4
    for _ in range(3):
        rows = [torch.randn(4, *s, generator=gen) * 1e3 for s in shapes]
        steps = step_pass_velocity(mine, rows, m, pages)
        assert steps is not None and [tuple(s.shape) for s in steps] == [(4, *s) for s in shapes]
        mine = [[s[k] for s in steps] for k in range(4)]
        for k in range(4):
            u, own[k] = step_velocity(own[k], [r[k] for r in rows], m, torch.float32, own_pages)
            assert all(torch.equal(a, b) for a, b in zip(u, mine[k], strict=True))
    assert pages.held_bytes == sum(_aligned(4 * 4 * math.prod(s)) for s in shapes)  # 4 nodes x fp32


def test_a_pass_whose_velocities_are_not_one_block_steps_node_by_node() -> None:
    pages = StatePages()
    rows = [torch.ones(3, 4)]
    first = step_pass_velocity([None, None, None], rows, 0.5, pages)
    assert first is not None
    velocities = [[first[0][k]] for k in range(3)]
    assert step_pass_velocity([velocities[0], None, velocities[2]], rows, 0.5, pages) is None  # a newcomer
    assert step_pass_velocity([velocities[1], velocities[0], velocities[2]], rows, 0.5, pages) is None  # reordered
    assert step_pass_velocity(velocities[:2], [rows[0][:2]], 0.5, pages) is not None  # a prefix is a block
    assert torch.equal(first[0][:2], torch.full((2, 4), 1.5)) and torch.equal(first[0][2], torch.ones(4))


def _aligned(nbytes: int) -> int:
    return -(-nbytes // ALIGN) * ALIGN
