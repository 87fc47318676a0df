"""Ring all-reduce among the nodes: reduce-scatter, then all-gather, with the codec on every hop.

The whole gradient (every layer flattened and concatenated, ``P`` elements) is cut into ``n``
chunks (sizes differ by at most one, :func:`~aiotsim.learn.partition.even_sizes`). Each chunk is a
codec "layer" of kind ``other``.

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

import torch

from aiotsim.compress.base import LayerInfo, Payload
from aiotsim.learn.partition import even_sizes
from aiotsim.records import MetricsRow
from aiotsim.sim.batching import prefetch
from aiotsim.sim.observe import observe_global
from aiotsim.sim.stops import Diverged, non_finite
from aiotsim.sim.strategies.base import Strategy, register
from aiotsim.sim.topologies import node_name
from aiotsim.sim.world import Cluster, Proc

Hop = tuple[int, int, Payload | None, int]  # (sender, chunk, message (None in a replay), its bytes)


def chunk_layers(total: int, n: int) -> list[LayerInfo]:
    """``n`` chunk descriptions covering ``total`` elements, the first ``total % n`` one longer."""
    sizes = even_sizes(total, n)
    return [LayerInfo(f"chunk{c}", (size,), torch.float32, "other", 1000 + c) for c, size in enumerate(sizes)]


@register
class RingStrategy(Strategy):
    """``ring``: every iteration is compute + reduce-scatter + all-gather + the same step on
    every replica. Holds the chunk layout and the codec state of every (node, chunk) hop."""

    name = "ring"

    def __init__(self, cluster: Cluster) -> None:
        super().__init__(cluster)
        learning = cluster.learning
        self.chunks = chunk_layers(learning.elements, cluster.n)
        self.bounds = torch.tensor([0] + [L.numel for L in self.chunks]).cumsum(0).tolist()
        codec = learning.codec
        replaying = cluster.tape.replaying  # no gradients, no codec states: the tape has the sizes
        self.states = [
            [] if replaying else [codec.init_state(L, cluster.device, node=i) for L in self.chunks]
            for i in range(cluster.n)
        ]

    def chunk(self, flat: torch.Tensor, c: int) -> torch.Tensor:
        """Chunk ``c`` of a flat gradient (a view)."""
        return flat[self.bounds[c] : self.bounds[c + 1]]

    def run(self) -> Proc:
        for it in range(self.cluster.sc.scenario.iterations):
            yield from self.iteration(it)

    def iteration(self, it: int) -> Proc:
        """One synchronous ring all-reduce iteration."""
        c = self.cluster
        t_start, n = c.env.now, c.n
        flats, losses, compute = yield from self.compute(it)
        encode = [0.0] * n  # simulated encode seconds per node
        acc = yield from self.reduce_scatter(it, flats, encode)
        owned = yield from self.all_gather(it, acc, encode)
        agg_nnz = self.apply_average(it, owned, losses)
        iter_s = c.env.now - t_start
        w = c.window
        c.totals.node_bytes_up += w.bytes_up
        c.totals.dense_up += sum(L.dense_nbytes for L in self.chunks) * (n - 1)
        row = MetricsRow(
            iteration=it,
            sim_time_s=c.env.now,
            iter_time_s=iter_s,
            loss=sum(losses) / n,
            bytes_up=w.bytes_up,
            bytes_down=w.bytes_down,
            wire_bytes_up=w.wire_up,
            wire_bytes_down=w.wire_down,
            compute_s=sum(compute) / n,
            encode_s=sum(encode) / n,
            decode_s=0.0,
            comm_s=max(iter_s - max(compute) - max(encode), 0.0),
            agg_nnz=agg_nnz,
            agg_bytes=sum(b for _, _, _, b in owned),
            contributors=n,
            staleness=0.0,
            energy_j=w.energy_j,
        )
        c.emit_row(row, samples=c.sc.data.batch_size * n)

    def compute(self, it: int) -> Proc:
        """Every node's gradient, flattened; returns ``(flats, losses, simulated compute s)``."""
        c = self.cluster
        flats: list[torch.Tensor] = []  # [P] per node
        losses, compute = [], []
        prefetch(c, list(range(c.n)), encode=False)  # batched gradients, when nodes.batched is on
        for i in range(c.n):
            grads, loss, compute_s, _ = c.gradient(i, None)
            flats.append(torch.cat([g.reshape(-1).float() for g in grads]) if grads else torch.zeros(0))
            losses.append(loss)
            compute.append(compute_s)
            c.window.energy_j += c.nodes[i].energy.busy(compute_s)
            c.trace.span(node_name(i), "compute", c.env.now, compute_s, iteration=it)
        yield c.env.timeout(max(compute))
        return flats, losses, compute

    def reduce_scatter(self, it: int, flats: list[torch.Tensor], encode: list[float]) -> Proc:
        """``n-1`` steps of encode, send to the successor, decode and add; returns the running
        sums (node i's sum of chunk ``(i+1) mod n`` is complete)."""
        c = self.cluster
        n, codec = c.n, c.learning.codec
        acc = [f.clone() for f in flats]  # acc[i]: node i's running sums (only its current chunk matters)
        for s in range(n - 1):
            sends: list[Hop] = []
            wall = [0.0] * n
            for i in range(n):
                k = (i - s) % n
                payload, nbytes, wall[i] = self.encode(i, k, acc)
                sends.append((i, k, payload, nbytes))
            yield from self.step(sends, wall, encode, "up", f"rs{s}", it)
            for i, k, payload, _ in sends:
                if payload is not None:
                    self.chunk(acc[(i + 1) % n], k).add_(codec.decode(payload, self.chunks[k]).float())
        return acc

    def encode(self, i: int, k: int, acc: list[torch.Tensor], divide: int = 0) -> tuple[Payload | None, int, float]:
        """Node ``i`` encodes chunk ``k`` of its running sums ``acc[i]`` (divided by ``divide``
        when > 0): ``(message, bytes, host s)``. A replay encodes nothing: the bytes and the cost
        come from the tape, the message is None."""
        c = self.cluster
        if c.tape.replaying:
            nbytes, wall = c.tape.hop(i, 0, 0.0)
            return None, nbytes, wall
        t0 = time.perf_counter()
        values = self.chunk(acc[i], k) / divide if divide else self.chunk(acc[i], k)
        payload = c.learning.codec.encode(values, self.chunks[k], self.states[i][k])
        wall = time.perf_counter() - t0
        c.tape.hop(i, payload.nbytes, wall)
        return payload, payload.nbytes, wall

    def all_gather(self, it: int, acc: list[torch.Tensor], encode: list[float]) -> Proc:
        """Each owner encodes its averaged chunk once and the bytes travel round unchanged;
        returns the owners' messages."""
        c = self.cluster
        n = c.n
        owned: list[Hop] = []
        wall = [0.0] * n
        for i in range(n):
            k = (i + 1) % n
            payload, nbytes, wall[i] = self.encode(i, k, acc, divide=n)
            owned.append((i, k, payload, nbytes))
        msgs = owned
        for s in range(n - 1):
            yield from self.step(list(msgs), wall if s == 0 else [0.0] * n, encode, "down", f"ag{s}", it)
            msgs = [((i + 1) % n, k, p, b) for i, k, p, b in msgs]
        return owned

    def apply_average(self, it: int, owned: list[Hop], losses: list[float]) -> int:
        """Every replica applies the same averaged gradient; returns its non-zeros."""
        c = self.cluster
        learning = c.learning
        if c.tape.replaying:
            c.version += 1
            return c.tape.update(0, 0, 0)[1]
        decoded = {k: learning.codec.decode(p, self.chunks[k]).float() for _, k, p, _ in owned if p is not None}
        avg = torch.cat([decoded[k] for k in range(c.n)])
        update, offset = [], 0
        for L in learning.layers:
            update.append(avg[offset : offset + L.numel].view(L.shape).to(L.dtype))
            offset += L.numel
        bad = non_finite(losses, update)
        if bad:
            raise Diverged(f"iteration {it}: {bad}")
        try:
            learning.step(update)
        except Diverged as stop:
            raise Diverged(f"iteration {it}: {stop.reason}") from None
        c.version += 1
        observe_global(learning, update, [st.local for st in c.nodes])  # all-gather: all have it
        return c.tape.update(0, int(torch.count_nonzero(avg)), 0)[1]

    def step(self, sends: list[Hop], wall: list[float], encode: list[float], direction: str, tag: str, it: int) -> Proc:
        """One ring step: every sender encodes (simulated time from its wall time) and sends to its
        successor; the step ends when the last message has arrived."""
        c = self.cluster
        procs = []
        for i, k, _, nbytes in sends:
            enc_s = (
                c.nodes[i].compute.codec_time(wall[i], self.chunks[k].numel, c.learning.codec.encode_flops_per_element)
                if wall[i]
                else 0.0
            )
            encode[i] += enc_s
            procs.append(c.env.process(self.hop(i, (i + 1) % c.n, nbytes, enc_s, direction, f"{tag} c{k}", it)))
        yield c.env.all_of(procs)

    def hop(self, i: int, j: int, nbytes: int, enc_s: float, direction: str, tag: str, it: int) -> Proc:
        """SimPy process: node ``i`` encodes for ``enc_s`` seconds, then sends to node ``j``."""
        c = self.cluster
        if enc_s > 0:
            t0 = c.env.now
            yield c.env.timeout(enc_s)
            c.trace.span(node_name(i), "encode", t0, enc_s, iteration=it)
            c.window.energy_j += c.nodes[i].energy.busy(enc_s)
        tr = yield c.send(node_name(i), node_name(j), nbytes, direction, tag)
        c.trace.transfer(tr, "upload" if direction == "up" else "download", iteration=it)
        return tr


__all__ = ["RingStrategy", "chunk_layers"]
