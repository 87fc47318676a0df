"""How the server (and each gateway) combines the uploads of one aggregation.

``training.aggregation`` picks one of two forms of the same per-layer combination (the codec's
:meth:`~aiotsim.compress.base.Codec.aggregate`: a mean weighted by node counts, or signSGD's
majority vote):

``stacked``
    Keep every message, then per layer decode them all (in one batch where the codec has one,
    :meth:`~aiotsim.compress.base.Codec.decode_many`) and take one mean over the stacked copy
    (``torch.stack(...).mean(0)``, or a float32 ``tensordot`` for unequal weights). Memory grows
    with messages x model: three model-sized buffers per message (the message, its decoded
    gradient, its row of the stack). The results of every scenario before this option existed.
``streamed``
    Decode the messages as they arrive and add them, weighted, into float64 per-layer sums; the
    messages' payloads and decoded tensors are dropped right after, so an aggregation holds
    O(model) (two float64 model copies, plus the arrivals not yet folded in: at most
    :data:`~aiotsim.compress.base.CHUNK_ELEMENTS` values of messages, decoded together by
    :meth:`~aiotsim.compress.base.Codec.decode_many`, then added in arrival order, by one float64
    scan per layer, :meth:`~aiotsim.compress.base.Codec.aggregate_add_rows`),
    whatever the fleet size. Divided and cast to the
    layer's dtype at the end. The float64 sums make the float32 result, for practical purposes,
    independent of the arrival order (a float64 sum of n float32 values rounds at most ~n x 2^-53
    relative before the final rounding to float32's 2^-24); it equals ``stacked`` up to float32
    rounding, not bit for bit (torch's stacked mean is not a sequential sum either).
``auto``
    ``streamed`` when the stack would hold more than :data:`STACK_LIMIT_BYTES` (nodes x model
    parameters x 4 B: a function of the scenario only, never of the machine), else ``stacked``:
    every scenario small enough to stack keeps its results byte for byte.

Ring all-reduce and ``async`` do not aggregate this way (a ring hop adds two gradients; async
applies one upload at a time), so the option changes nothing there.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Sequence
from typing import Protocol

import torch

from aiotsim.compress.aggregation import RunningAggregate
from aiotsim.compress.base import CHUNK_ELEMENTS, Codec, LayerInfo, Payload
from aiotsim.errors import CodecError, ConfigError
from aiotsim.sim.allocator import HeapTrimmer

STACK_LIMIT_BYTES = 10**9  # "auto": stream when nodes x parameters x 4 B exceeds this
MODES = ("auto", "stacked", "streamed")


def aggregation_mode(mode: str, nodes: int, params: int, codec: type[Codec]) -> str:
    """``"stacked"`` or ``"streamed"`` for ``training.aggregation = mode``.

    Raises
    ------
    ConfigError
        ``streamed`` asked of a codec whose custom ``aggregate`` has no streamed form.
    """
    if mode == "auto":
        big = nodes * params * 4 > STACK_LIMIT_BYTES
        return "streamed" if big and codec.streams_aggregate() else "stacked"
    if mode == "streamed" and not codec.streams_aggregate():
        raise ConfigError(
            f"training.aggregation: codec {codec.name!r} overrides aggregate() without its streamed "
            "form (aggregate_add/aggregate_finish); use training.aggregation = 'stacked'"
        )
    return mode


class Message(Protocol):
    """What an aggregation reads of an upload (:class:`~aiotsim.sim.world.Upload`)."""

    payloads: list[Payload]
    nodes: list[int]
    dense: bool


class Aggregation:
    """One aggregation's messages, combined per layer (stacked or streamed, see the module).

    Parameters
    ----------
    codecs : list of Codec
        Each layer's codec (the scenario's, or ``none`` for layers under ``min_size``).
    dense : Codec
        The ``none`` codec, which decodes messages sent as dense fp32 (gateway ``dense`` mode).
    layers : list of LayerInfo
        The model's layers.
    device : torch.device
        Where decoding runs.
    streamed : bool
        Fold each message into float64 sums on :meth:`add` instead of keeping it.
    weighted : bool
        Weight the messages by their weights (mean codecs); ``False``: every message counts once
        (signSGD's vote), as the stacked form does.
    buffer : StackBuffer, optional
        Stacked form: the memory to stack into, shared by the aggregations of a run.
    trimmer : HeapTrimmer, optional
        Streamed form: the run's heap trims, asked at each :meth:`result` (the messages just
        folded in were freed; it trims if the resident memory set a new high). None: no trim.
    """

    def __init__(
        self,
        codecs: Sequence[Codec],
        dense: Codec,
        layers: Sequence[LayerInfo],
        device: torch.device,
        *,
        streamed: bool,
        weighted: bool,
        buffer: StackBuffer | None = None,
        trimmer: HeapTrimmer | None = None,
    ) -> None:
        self.codecs, self.dense, self.layers, self.device = codecs, dense, layers, device
        self.streamed, self.weighted, self.buffer, self.trimmer = streamed, weighted, buffer, trimmer
        # stacked: kept until result(), then combined in the order of their keys (see add)
        self.messages: list[tuple[list[Payload], int, bool]] = []
        self.keys: list[int] = []
        self.sums: list[RunningAggregate] | None = None  # streamed: one accumulator per layer
        # streamed: messages not yet folded into the sums, decoded together once `chunk` arrive
        self.pending: list[tuple[list[Payload], int, bool]] = []
        self.chunk = max(1, CHUNK_ELEMENTS // max(1, sum(L.numel for L in layers)))
        self.count = 0  # messages added
        self.wall_s = 0.0  # host seconds of decoding and adding so far

    def add(self, payloads: list[Payload], weight: int, dense: bool = False, key: int | None = None) -> None:
        """Add one message (``payloads[j]``: layer ``j``) of ``weight`` nodes (or samples).
        Streamed: decoded and summed now; the caller may drop the payloads right after.

        Stacked: the messages are combined in the order of ``key`` (default: the order added),
        not of arrival. An upload's key is its first node (:meth:`take`), so that a synchronous
        aggregation gives the same bits whatever order the network delivers it in: learning does
        not depend on the network, which is what lets a run's timing be replayed exactly
        (:mod:`aiotsim.replay`). The streamed form adds in arrival order (float64 sums that hold
        no messages); a replay checks that order instead."""
        self.count += 1
        if not self.streamed:
            self.messages.append((payloads, weight, dense))
            self.keys.append(self.count if key is None else key)
            return
        self.pending.append((payloads, weight, dense))
        if len(self.pending) >= self.chunk:
            self._fold()

    def _fold(self) -> None:
        """Streamed: decode the pending messages (layer by layer, in one batch where the codec
        has one) and add them to the sums in arrival order (a batch: in one scan,
        :meth:`Codec.aggregate_add_rows`): the same float64 additions, in the same order, as
        adding each message on arrival."""
        if not self.pending:
            return
        sync_device(self.device)
        t0 = time.perf_counter()
        if self.sums is None:
            self.sums = [c.aggregate_start(L, self.device) for c, L in zip(self.codecs, self.layers)]
        weights = [float(w) if self.weighted else 1.0 for _, w, _ in self.pending]
        for j, (codec, acc) in enumerate(zip(self.codecs, self.sums)):
            decoded = self._decoded(j, codec)
            if isinstance(decoded, torch.Tensor):  # one batch: [messages, *shape]
                codec.aggregate_add_rows(acc, decoded, weights)
                continue
            for d, w in zip(decoded, weights):
                codec.aggregate_add(acc, d, w)
        self.pending = []
        sync_device(self.device)
        self.wall_s += time.perf_counter() - t0

    def _decoded(self, j: int, codec: Codec) -> torch.Tensor | Iterator[torch.Tensor]:
        """Layer ``j`` of every pending message, decoded, in order: one ``[messages, *shape]``
        tensor (fresh rows) where one decoder with a batched path decodes them all, else one
        tensor per message as it is decoded."""
        by = self._batch_decoder(j, self.pending)
        if by is not None:
            return by.decode_many([m[j] for m, _, _ in self.pending], self.layers[j])
        reads = type(codec).aggregate_add is Codec.aggregate_add  # the mean's sum only reads it
        layer = self.layers[j]
        return (
            (self.dense if d else codec).decode_read(m[j], layer)
            if reads
            else (self.dense if d else codec).decode(m[j], layer)
            for m, _, d in self.pending
        )

    def _batch_decoder(self, j: int, messages: list[tuple[list[Payload], int, bool]]) -> Codec | None:
        """The one codec that decodes layer ``j`` of all ``messages`` when it has a batched path
        (:meth:`~aiotsim.compress.base.Codec.decodes_rows`); None when gateway dense messages are
        mixed in, or it has none."""
        decoders = {self.dense if d else self.codecs[j] for _, _, d in messages}
        by = decoders.pop()
        return by if not decoders and by.decodes_rows() else None

    def take(self, upload: Message) -> None:
        """Add an upload weighted by its node count; streamed: drop its payloads (their bytes are
        in the sums now), so the server holds O(model) however many uploads arrive."""
        self.add(upload.payloads, len(upload.nodes), upload.dense, key=min(upload.nodes))
        if self.streamed:
            upload.payloads = []

    def take_all(self, uploads: Sequence[Message]) -> Aggregation:
        """:meth:`take` every upload, in order; returns this aggregation."""
        for u in uploads:
            self.take(u)
        return self

    def result(self) -> tuple[list[torch.Tensor], float]:
        """``(aggregate per layer, host seconds spent decoding and aggregating)``."""
        sync_device(self.device)
        t0 = time.perf_counter()
        if self.streamed:
            self._fold()
            sums = self.sums or [c.aggregate_start(L, self.device) for c, L in zip(self.codecs, self.layers)]
            agg = [c.aggregate_finish(acc, L) for c, L, acc in zip(self.codecs, self.layers, sums)]
            if self.trimmer is not None:
                self.trimmer.maybe_trim()
        else:
            agg = self._stacked()
        sync_device(self.device)
        return agg, self.wall_s + time.perf_counter() - t0

    def _stacked(self) -> list[torch.Tensor]:
        """The stacked form, exactly as the server computed before ``training.aggregation``.

        A mean codec's messages are decoded straight into the rows of the stack (in
        :attr:`buffer` when there is one), each decoded tensor dropped after its copy: the same
        stack as ``torch.stack`` of the list, without holding every decoded message at once."""
        order = sorted(range(len(self.messages)), key=self.keys.__getitem__)  # stable: ties as added
        self.messages = [self.messages[i] for i in order]
        self.keys = [self.keys[i] for i in order]
        weights = [w for _, w, _ in self.messages]
        unequal = len(set(weights)) > 1 and self.weighted
        buffer = self.buffer or StackBuffer()  # without one: a fresh stack per layer
        agg = []
        for j, (codec, layer) in enumerate(zip(self.codecs, self.layers)):
            if type(codec).aggregate is not Codec.aggregate:  # its own combination of the list
                by = [self.dense if d else codec for _, _, d in self.messages]
                agg.append(codec.aggregate([c.decode(m[j], layer) for c, (m, _, _) in zip(by, self.messages)], layer))
                continue
            stacked = self._stack(j, buffer, torch.float32 if unequal else None)  # [messages, *shape]
            if unequal:
                w = torch.tensor(weights, dtype=torch.float32, device=stacked.device)
                agg.append((torch.tensordot(w / w.sum(), stacked, dims=1)).to(layer.dtype))
            else:
                agg.append(codec.aggregate_stacked(stacked, layer))
        return agg

    def _decode(self, payloads: list[Payload], j: int, dense: bool) -> torch.Tensor:
        """Layer ``j`` of one message, decoded to be read (copied into the stack) only."""
        return (self.dense if dense else self.codecs[j]).decode_read(payloads[j], self.layers[j])

    def _stack(self, j: int, buffer: StackBuffer, dtype: torch.dtype | None) -> torch.Tensor:
        """Every message's layer ``j`` decoded into one ``[messages, *shape]`` stack, cast to
        ``dtype`` (``None``: the decoded dtype). Messages that decode to differing shapes or
        dtypes go to ``torch.stack`` as a list, which promotes or refuses them as before."""
        if not self.messages:
            raise CodecError(f"aggregate({self.layers[j].name}): no gradients to aggregate")
        codec = self._batch_decoder(j, self.messages)
        if codec is not None:  # decoded as layer.dtype: no promotion
            layer = self.layers[j]
            device = next(iter(self.messages[0][0][j].buffers.values())).device  # where decoding runs
            rows = buffer.rows(len(self.messages), layer.shape, dtype or layer.dtype, device)
            return codec.decode_many([m[j] for m, _, _ in self.messages], layer, out=rows)
        first = self._decode(self.messages[0][0], j, self.messages[0][2])
        rows = buffer.rows(len(self.messages), first.shape, dtype or first.dtype, first.device)
        rows[0].copy_(first)
        for i, (m, _, d) in enumerate(self.messages[1:], start=1):
            g = self._decode(m, j, d)
            if g.shape != first.shape or (dtype is None and g.dtype != first.dtype):
                rest = [self._decode(m2, j, d2) for m2, _, d2 in self.messages[i + 1 :]]
                listed = [*rows[:i], g, *rest]  # torch.stack copies them out of the buffer
                return torch.stack([t.to(dtype) for t in listed] if dtype else listed)
            rows[i].copy_(g)  # a cast to ``dtype``: the value d.float() would give
        return rows


class StackBuffer:
    """The memory the stacked form decodes its messages into, kept from one aggregation to the
    next.

    A fresh ``[messages, *shape]`` stack per layer and round is a large fleet's biggest
    allocation (1,000 nodes, LeNet-5's ``fc1.weight``: 192 MB), above glibc's largest mmap
    threshold (32 MB), so each one was a new mapping whose pages the kernel faulted in and zeroed
    (1,000-node star: about 47,000 page faults per round), and the decoded messages it was stacked
    from were as large again. One flat buffer per dtype and device, grown to the largest stack
    asked so far (one layer's: never more than a fresh stack), is viewed as each stack instead.
    Values are unchanged: the same stack, the same reduction over the same contiguous layout.
    """

    def __init__(self) -> None:
        self._flat: dict[tuple[torch.dtype, torch.device], torch.Tensor] = {}

    def rows(self, count: int, shape: torch.Size, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        """A contiguous ``[count, *shape]`` view of the buffer of ``dtype`` on ``device`` (its
        contents undefined), growing the buffer first if it is smaller."""
        key, n = (dtype, device), count * math.prod(shape)
        flat = self._flat.get(key)
        if flat is None or flat.numel() < n:
            self._flat.pop(key, None)  # the old buffer goes before the bigger one is allocated
            flat = self._flat[key] = torch.empty(n, dtype=dtype, device=device)
        return flat[:n].view(count, *shape)


def sync_device(device: torch.device) -> None:
    """Wait for queued CUDA work, so that wall-clock costs are the work's own."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


__all__ = ["Aggregation", "Message", "StackBuffer", "aggregation_mode", "sync_device", "STACK_LIMIT_BYTES", "MODES"]
