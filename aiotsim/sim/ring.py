"""Ring all-reduce among the nodes: reduce-scatter, then all-gather, with the codec on every hop.

The whole gradient (every layer flattened and concatenated, ``P`` elements) is cut into ``n``
chunks (sizes differ by at most one). Each chunk is a codec "layer" of kind ``other``.

reduce-scatter, steps s = 0 .. n-2
    node i sends its running sum of chunk ``(i - s) mod n`` to node ``i+1``: it encodes it with its
    own per-chunk codec state (so error feedback works per hop), the receiver decodes it and adds
    its own gradient's chunk. After ``n-1`` steps node i holds the full sum of chunk ``(i+1) mod n``.
all-gather, steps s = 0 .. n-2
    the owner encodes the averaged chunk once; the message travels round the ring unchanged (each
    node decodes it and forwards the same bytes), so every node ends with the same average.

All ``n`` transfers of a step run concurrently and the step ends when the last arrives. With the
``none`` codec each node sends ``2 (n-1)`` messages of ``4 P / n`` bytes: ``2 (n-1) / n`` of the
dense gradient, the textbook figure. Reduce-scatter traffic is reported as ``bytes_up`` and
all-gather traffic as ``bytes_down``. Codecs whose aggregation is not a mean (signSGD's majority
vote) cannot be summed hop by hop and are refused when the scenario is validated.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import torch

from aiotsim.compress.base import CodecState, LayerInfo, Payload

if TYPE_CHECKING:
    from aiotsim.sim.engine import Simulation

Proc = Any


def chunk_layers(total: int, n: int) -> list[LayerInfo]:
    """``n`` chunk descriptions covering ``total`` elements, the first ``total % n`` one longer."""
    base, extra = divmod(total, n)
    return [
        LayerInfo(f"chunk{c}", (base + (1 if c < extra else 0),), torch.float32, "other", 1000 + c) for c in range(n)
    ]


class Ring:
    """Per-run ring state: chunk layout and the codec states of every (node, chunk) hop."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        n = sim.n
        total = sum(L.numel for L in sim.layers)
        self.chunks = chunk_layers(total, n)
        self.bounds = torch.tensor([0] + [L.numel for L in self.chunks]).cumsum(0).tolist()
        codec = sim.codec
        self.states: list[list[CodecState]] = [
            [codec.init_state(L, sim.device, node=i) for L in self.chunks] for i in range(n)
        ]

    def chunk(self, flat: torch.Tensor, c: int) -> torch.Tensor:
        """Chunk ``c`` of a flat gradient (a view)."""
        return flat[self.bounds[c] : self.bounds[c + 1]]


def ring_loop(sim: Simulation) -> Proc:
    """SimPy process body: every iteration as compute + reduce-scatter + all-gather + step."""
    ring = Ring(sim)
    iters = sim.sc.scenario.iterations
    for it in range(iters):
        yield from ring_iteration(sim, ring, it)


def ring_iteration(sim: Simulation, ring: Ring, it: int) -> Proc:
    """One synchronous ring all-reduce iteration."""
    env, n, codec = sim.env, sim.n, sim.codec
    t_start = env.now

    # ---- every node computes its gradient -------------------------------------------------------
    flats: list[torch.Tensor] = []
    losses, compute, encode = [], [], [0.0] * n
    for i in range(n):
        grads, loss, compute_s, _ = sim.compute_gradient(i, None)
        flats.append(torch.cat([g.reshape(-1).float() for g in grads]))
        losses.append(loss)
        compute.append(compute_s)
        sim.window.energy_j += sim.nodes[i].energy.busy(compute_s)
        sim.trace.span(f"node{i}", "compute", env.now, compute_s, iteration=it)
    yield env.timeout(max(compute))

    # ---- reduce-scatter ----------------------------------------------------------------------------
    acc = [f.clone() for f in flats]  # acc[i]: node i's running sums (only its current chunk matters)
    for s in range(n - 1):
        sends: list[tuple[int, int, Payload]] = []
        wall = [0.0] * n
        for i in range(n):
            c = (i - s) % n
            t0 = time.perf_counter()
            sends.append((i, c, codec.encode(ring.chunk(acc[i], c), ring.chunks[c], ring.states[i][c])))
            wall[i] = time.perf_counter() - t0
        yield from _step(sim, sends, wall, encode, "up", f"rs{s}", it)
        for i, c, payload in sends:
            j = (i + 1) % n
            ring.chunk(acc[j], c).add_(codec.decode(payload, ring.chunks[c]).float())

    # ---- all-gather: each owner encodes its averaged chunk once; the bytes travel unchanged ------
    owned: list[tuple[int, int, Payload]] = []
    wall = [0.0] * n
    for i in range(n):
        c = (i + 1) % n
        t0 = time.perf_counter()
        owned.append((i, c, codec.encode(ring.chunk(acc[i], c) / n, ring.chunks[c], ring.states[i][c])))
        wall[i] = time.perf_counter() - t0
    decoded = {c: codec.decode(p, ring.chunks[c]).float() for _, c, p in owned}
    msgs = owned
    for s in range(n - 1):
        yield from _step(
            sim, [(i, c, p) for i, c, p in msgs], wall if s == 0 else [0.0] * n, encode, "down", f"ag{s}", it
        )
        msgs = [((i + 1) % n, c, p) for i, c, p in msgs]

    # ---- every replica applies the same averaged gradient ----------------------------------------
    avg = torch.cat([decoded[c] for c in range(n)])
    update, offset = [], 0
    for L in sim.layers:
        update.append(avg[offset : offset + L.numel].view(L.shape).to(L.dtype))
        offset += L.numel
    sim.step(update)
    sim.version += 1
    for i in range(n):
        for j, layer in enumerate(sim.layers):
            sim.layer_codecs[j].observe_global(update[j], layer, sim.states[i][j])

    iter_s = env.now - t_start
    w = sim.window
    sim.totals.node_bytes_up += w.bytes_up
    sim.totals.dense_up += sum(L.dense_nbytes for L in ring.chunks) * (n - 1)
    row = {
        "iteration": it,
        "sim_time_s": env.now,
        "iter_time_s": iter_s,
        "loss": sum(losses) / n,
        "bytes_up": w.bytes_up,
        "bytes_down": w.bytes_down,
        "wire_bytes_up": w.wire_up,
        "wire_bytes_down": w.wire_down,
        "compute_s": sum(compute) / n,
        "encode_s": sum(encode) / n,
        "decode_s": 0.0,
        "comm_s": max(iter_s - max(compute) - max(encode), 0.0),
        "agg_nnz": int(torch.count_nonzero(avg)),
        "agg_bytes": sum(p.nbytes for _, _, p in owned),
        "contributors": n,
        "staleness": 0.0,
        "energy_j": w.energy_j,
    }
    sim._last_row_time = env.now
    sim.emit_row(row, samples=sim.sc.data.batch_size * n)


def _step(
    sim: Simulation,
    sends: list[tuple[int, int, Payload]],
    wall: list[float],
    encode: list[float],
    direction: str,
    tag: str,
    it: int,
) -> Proc:
    """One ring step: every sender encodes (simulated time from its wall time) and sends to its
    successor; the step ends when the last message has arrived."""
    env, n = sim.env, sim.n
    procs = []
    for i, c, payload in sends:
        st = sim.nodes[i]
        enc_s = (
            st.compute.codec_time(wall[i], ring_chunk_elements(sim, c), sim.codec.encode_flops_per_element)
            if wall[i]
            else 0.0
        )
        encode[i] += enc_s
        procs.append(env.process(_hop(sim, i, (i + 1) % n, payload.nbytes, enc_s, direction, f"{tag} c{c}", it)))
    yield env.all_of(procs)


def ring_chunk_elements(sim: Simulation, c: int) -> int:
    """Elements of chunk ``c``."""
    total = sum(L.numel for L in sim.layers)
    base, extra = divmod(total, sim.n)
    return base + (1 if c < extra else 0)


def _hop(sim: Simulation, i: int, j: int, nbytes: int, enc_s: float, direction: str, tag: str, it: int) -> Proc:
    env = sim.env
    if enc_s > 0:
        t0 = env.now
        yield env.timeout(enc_s)
        sim.trace.span(f"node{i}", "encode", t0, enc_s, iteration=it)
        sim.window.energy_j += sim.nodes[i].energy.busy(enc_s)
    tr = yield sim.send(f"node{i}", f"node{j}", nbytes, direction, tag)
    sim.trace.transfer(tr, "upload" if direction == "up" else "download", iteration=it)
    return tr


__all__ = ["ring_loop", "chunk_layers", "Ring"]
