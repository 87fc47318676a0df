"""The codec contract: what a gradient compressor is, what it puts on the wire, and what it keeps.

A codec turns one layer's gradient into a :class:`Payload` (the exact bytes that travel) and turns a
payload back into a dense gradient using only those bytes, the layer's static :class:`LayerInfo` and
seeds shared by protocol. Mutable per-node, per-layer state (residuals, momentum, thresholds, PowerSGD
Q, the codec's random generator) lives in a :class:`CodecState` subclass that each codec declares
(``Codec.State``); the codec object itself holds only hyperparameters, so one codec instance serves
every node.

Error feedback is a role around the codec, not a call inside it (GRACE's Compressor / Memory split):
:meth:`Codec.encode` is a template method that, when the instance keeps a residual
(:attr:`Codec.error_feedback`), adds the residual to the gradient
(:func:`aiotsim.compress.memory.compensate`), calls the codec's own :meth:`Codec._encode` on that
accumulation, and keeps what was not sent (:func:`aiotsim.compress.memory.remember`). A codec only
says what it sends (a :class:`~aiotsim.compress.memory.Sent`) and never touches the residual.

The server side belongs to the codec family too: :meth:`Codec.aggregate` combines the decoded
gradients, and :meth:`Codec.observe_global` lets a node's state learn from the aggregated update that
came back (seed 001 uses this to prefer globally large indices).

A codec written outside the package keeps the same contract; :func:`aiotsim.testing.check_codec`
checks it, and ``docs/CODECS.md`` walks through one. In one list:

- the payload is bytes only: :meth:`Codec.decode` rebuilds the gradient from the payload's buffers,
  the :class:`LayerInfo` and the codec's parameters and seed, never from anything the encoding
  instance or state remembers (the server holds no node's state);
- :attr:`Payload.nbytes` is the message size the network carries, so every scalar is packed;
- the same parameters, seed and gradients give the same bytes: randomness comes only from the
  state's ``generator`` (never the global generator);
- decode returns ``layer.shape`` and ``layer.dtype``, also for empty and 1-element layers;
- with error feedback (:attr:`Codec.error_feedback`), ``_encode`` reports exactly what decode
  rebuilds, so ``input + old residual == decoded + new residual``;
- the state holds only tensors, its generator, named tuples and plain data: checkpoints save it
  field by field and ``--resume`` restores it.

Nothing in this package imports simpy: codecs know bytes, not time.
"""

from __future__ import annotations

import dataclasses
import hashlib
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, TypeVar, cast

import torch

from aiotsim.compress import memory
from aiotsim.compress.aggregation import ServerAggregation
from aiotsim.compress.layer import LayerInfo
from aiotsim.compress.memory import Sent, SentRows
from aiotsim.errors import CodecError
from aiotsim.schema import check_fields, opt

# Prefix of every parameter problem: ``compressor.ratio: must be in (0, 1], got 2``.
PARAM_PREFIX = "compressor."
# Decoded values per pass of Codec.decode_many: bounds its temporaries (16 MB of fp32 each).
CHUNK_ELEMENTS = 1 << 22


@dataclass
class Payload:
    """What goes on the wire for one layer: named 1-D ``uint8`` buffers, nothing else.

    Scalars (scales, norms, thresholds, seeds) are packed into buffers too (see
    :func:`aiotsim.compress.packing.pack_f32`), so :attr:`nbytes` is exactly the message size. The
    buffer names are fixed by the codec's protocol and are not sent. The receiver decodes from these
    bytes and the layer's :class:`LayerInfo` alone (``aiotsim.testing.check_codec`` decodes a copy
    rebuilt from the raw bytes with a fresh codec instance).
    """

    buffers: dict[str, torch.Tensor] = field(default_factory=dict)
    # Host copies of the leading bytes of some buffers (an index set's header), by buffer name:
    # what a receiver parses in host memory before it moves the rest to the device, so a decode
    # on a GPU need not read the device for them. Not extra bytes: they are the first bytes of
    # the buffer of that name, which nbytes counts (once). The encoder knows them on the host.
    heads: dict[str, bytes] = field(default_factory=dict)

    def __post_init__(self) -> None:
        sizes = []  # B per buffer, read here once: a message is not changed once made, and a
        # 1,000-node round reads each of its 10,000 payloads' sizes about 10 times
        for key, buf in self.buffers.items():
            if buf.dtype != torch.uint8 or buf.dim() != 1:
                raise CodecError(
                    f"payload buffer {key!r} must be a 1-D uint8 tensor, got {buf.dtype} of shape {tuple(buf.shape)}"
                )
            sizes.append(buf.shape[0])
        for key, head in self.heads.items():
            if key not in self.buffers or len(head) > self.buffers[key].numel():
                raise CodecError(f"payload head {key!r} must be the first bytes of the buffer of that name")
        self._sizes = tuple(sizes)
        self._nbytes = sum(sizes)

    @property
    def nbytes(self) -> int:
        """Size of the message in bytes: the sum of its packed buffers."""
        return self._nbytes

    @property
    def layout(self) -> tuple[tuple[str, ...], tuple[int, ...]]:
        """The buffers' names and byte counts, in order (payloads of equal layouts stack into
        ``[messages, bytes]`` per buffer)."""
        return tuple(self.buffers), self._sizes

    def to(self, device: torch.device | str) -> Payload:
        """The same payload with its buffers on ``device`` (a copy only where needed)."""
        return Payload({k: v.to(device) for k, v in self.buffers.items()}, dict(self.heads))


@dataclass
class CodecState:
    """Per-node, per-layer mutable state of a codec. A codec with more state declares a dataclass
    subclass with typed fields and names it as its ``Codec.State``.

    Fields are grouped by role, as in PyTorch's PowerSGD state: randomness, internal state and
    statistics. ``sq_grad`` is filled by the engine before :meth:`Codec.encode` for codecs that set
    ``needs_sq_grad`` (mean over the batch of per-sample squared gradients, same shape as the grad)
    and cleared after it: it is that encode's input, not state kept between steps.

    Checkpoints save a state field by field (``aiotsim.sim.checkpoint``): tensors, the generator
    (as its ``get_state()`` bytes), named tuples, numbers, strings and containers of them. A field of
    any other type cannot be saved (writing the checkpoint fails with a TypeError naming it).
    """

    # randomness: owned by the state, derived from the scenario seed (never the global RNG)
    generator: torch.Generator
    # internal state
    residual: torch.Tensor | None = None  # error feedback: what was not sent yet, fp32, shape of the gradient
    step: int = 0  # number of encode() calls so far
    sq_grad: torch.Tensor | None = None


S = TypeVar("S", bound=CodecState)


def derive_seed(*parts: object) -> int:
    """A stable 63-bit seed from any parts (scenario seed, node id, layer name...).

    Uses BLAKE2 rather than ``hash()`` so seeds are identical across processes and runs.
    """
    digest = hashlib.blake2b("/".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & ((1 << 63) - 1)


@dataclass(frozen=True)
class NoParams:
    """Parameters of a codec that has none."""


@dataclass(frozen=True)
class FeedbackParams:
    """Base of the ``Params`` of a codec whose error feedback is a choice (where its paper leaves it
    open): the ``error_feedback`` switch, on by default. Codecs whose algorithm fixes it (DGC,
    PowerSGD, EF-signSGD ...) do not inherit it and set :attr:`Codec.has_residual` instead."""

    error_feedback: bool = opt(True, "keep what was not sent and add it to the next gradient (error feedback)")


class Codec(ServerAggregation, ABC, Generic[S]):
    """A gradient compressor: hyperparameters only; state lives in a :class:`CodecState`.

    Where to add a codec: subclass ``Codec[MyState]``, set the class attributes, declare ``Params`` (a
    frozen dataclass whose fields are :func:`aiotsim.schema.opt` declarations: default, help, range
    check; inherit :class:`FeedbackParams` for an ``error_feedback`` switch), ``State`` (a
    :class:`CodecState` subclass when the codec keeps more than a residual), and implement
    :meth:`_encode` (compress an accumulated gradient, report what was sent) and :meth:`decode`.
    Checks that involve several parameters go in :meth:`validate`. Register the class with
    :func:`aiotsim.compress.registry.register` (a codec in this package), and check any codec with
    :func:`aiotsim.testing.check_codec`.

    The error-feedback role is declared, not coded: :attr:`has_residual` for a codec whose algorithm
    always keeps a residual, or a ``Params`` inheriting :class:`FeedbackParams` where it is a choice;
    :attr:`error_feedback` on the instance is the outcome. Parameters are typed dataclass fields with
    defaults and ranges (:func:`aiotsim.schema.opt`), validated as a scenario's are.

    Class attributes
    ----------------
    name : str
        Registry name used in scenario files.
    summary : str
        One-line description for ``aiotsim compressors``.
    unbiased : bool
        E[decode(encode(g))] == g (checked by Monte-Carlo tests).
    has_residual : bool
        Keeps a residual (error feedback) at its default parameters; the instance's
        :attr:`error_feedback` is the truth for the chosen parameters.
    sparse : bool
        Payloads carry an index set; the server's aggregated size is the union of indices.
    needs_sq_grad : bool
        Needs per-sample squared gradients in ``state.sq_grad`` (Gradient Variance).
    absorbs_momentum : bool
        Applies momentum locally (DGC's momentum correction); the server then steps without it.
    encode_flops_per_element : float
        Modeled operations per gradient element for encode + decode, used by the ``flops``
        compute model to charge simulated time for the codec itself.
    """

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    Params: ClassVar[type] = NoParams
    State: ClassVar[type[CodecState]] = CodecState
    unbiased: ClassVar[bool] = False
    has_residual: ClassVar[bool] = False
    sparse: ClassVar[bool] = False
    needs_sq_grad: ClassVar[bool] = False
    absorbs_momentum: ClassVar[bool] = False
    encode_flops_per_element: ClassVar[float] = 1.0

    def __init__(self, params: Any = None, seed: int = 0) -> None:
        kind = type(self)
        if kind._encode_rows is Codec._encode_rows and kind._encode is Codec._encode:
            raise CodecError(
                f"{kind.__name__} implements neither _encode (one row) nor _encode_rows (all rows at once): "
                "a codec defines one of them (docs/CODECS.md)"
            )
        self.params = params if params is not None else self.Params()
        self.seed = seed
        problems = self.param_problems(self.params)
        if problems:
            raise CodecError("\n".join(f"{self.name}: {p}" for p in problems))
        # Whether encode() keeps a residual, for the chosen parameters (the error-feedback role).
        self.error_feedback: bool = self._keeps_residual()

    # ---- hyperparameters -------------------------------------------------------------------
    @classmethod
    def validate(cls, params: Any) -> list[str]:
        """Problems that involve several fields of ``params``, one ``"key: reason"`` line each.
        Single-field ranges are declared on the field (:func:`aiotsim.schema.opt`)."""
        return []

    @classmethod
    def param_problems(cls, params: Any) -> list[str]:
        """Every problem of a ``Params`` instance, ``compressor.KEY: reason``: each field's type,
        finiteness and range (:func:`aiotsim.schema.check_fields`), then :meth:`validate`."""
        values = {f.name: getattr(params, f.name) for f in dataclasses.fields(params)}
        problems = check_fields(type(params), values, prefix=PARAM_PREFIX).problems
        return problems or [PARAM_PREFIX + p for p in cls.validate(params)]

    def _keeps_residual(self) -> bool:
        """Error feedback for these parameters: the ``error_feedback`` switch where ``Params``
        inherits :class:`FeedbackParams`, else the class's :attr:`has_residual`."""
        if isinstance(self.params, FeedbackParams):
            return bool(self.params.error_feedback)
        return self.has_residual

    # ---- state -----------------------------------------------------------------------------
    def init_state(self, layer: LayerInfo, device: torch.device, node: int) -> S:
        """Fresh ``State`` for ``node``'s copy of ``layer``, with its own seeded generator."""
        return cast(S, self.State(generator=self.make_generator(layer, device, node)))

    def make_generator(self, layer: LayerInfo, device: torch.device, node: int) -> torch.Generator:
        """The per-node, per-layer generator, seeded from the scenario seed."""
        gen = torch.Generator(device=device)
        gen.manual_seed(derive_seed(self.seed, self.name, node, layer.index, layer.name))
        return gen

    def typed_state(self, state: CodecState) -> S:
        """``state`` as this codec's own ``State`` (it must come from :meth:`init_state`)."""
        if not isinstance(state, self.State):
            raise CodecError(
                f"{self.name} needs its own {self.State.__name__} from init_state(), got {type(state).__name__}"
            )
        return cast(S, state)

    # ---- node side -------------------------------------------------------------------------
    def encode(self, grad: torch.Tensor, layer: LayerInfo, state: CodecState) -> Payload:
        """Compress ``grad`` (shape ``layer.shape``) into the bytes that go on the wire: one node's
        :meth:`encode_rows`."""
        return self.encode_rows(grad.reshape(1, -1), layer, [state])[0]

    def encode_rows(
        self, grads: Sequence[torch.Tensor] | torch.Tensor, layer: LayerInfo, states: Sequence[CodecState]
    ) -> list[Payload]:
        """Compress one layer's gradients of several nodes, one row per node (``[rows, *shape]``
        or ``[rows, n]``, or a list of ``layer.shape`` tensors), with each node's state.

        The error-feedback role: with :attr:`error_feedback` on, ``acc = input + residual`` per row
        (:func:`~aiotsim.compress.memory.compensate_rows`), the codec's :meth:`_encode_rows`
        compresses ``acc`` and reports what it sent, and ``residual = acc - sent``
        (:func:`~aiotsim.compress.memory.remember_rows`); off, the codec gets the input as fp32
        and no residual is kept. The input is the gradient unless the codec redefines
        :meth:`_feedback_rows` (DGC: the momentum-corrected velocity). A row's bytes, residual and
        generator draws are the same whether it is encoded alone or with others.

        Returns
        -------
        list of Payload
            One per row, in order.
        """
        nodes = len(states)
        if len(grads) != nodes:
            raise ValueError(f"{len(grads)} gradients for {nodes} states")
        if nodes == 0:
            return []
        typed = [self.typed_state(s) for s in states]
        x = grads if isinstance(grads, torch.Tensor) else torch.stack(list(grads))
        x = grad_rows = x.reshape(nodes, layer.numel)  # [rows, n], the gradient's dtype
        x = self._feedback_rows(x, layer, typed)
        if not self.error_feedback:
            payloads, _ = self._encode_rows(x if x.dtype == torch.float32 else x.float(), grad_rows, layer, typed)
        else:
            before = [s.residual for s in typed]
            acc = memory.compensate_rows(x, before)
            for s in typed:
                s.residual = None  # consumed: compensate_rows may have summed in its storage
            payloads, sent = self._encode_rows(acc, grad_rows, layer, typed)
            for s, r in zip(typed, memory.remember_rows(acc, sent, before, layer.shape)):
                s.residual = r
        for s in typed:
            s.step += 1
        return payloads

    def message_bound(self, layer: LayerInfo) -> int:
        """Most bytes :meth:`encode` puts on the wire for ``layer``, whatever the gradient and step:
        what the memory estimate (``aiotsim validate``) counts for a message in flight.

        Default: the size of one encode of a seeded standard-normal gradient from a fresh state,
        exact for a codec whose message size follows from the layer alone (so many codes, bits or
        values per element). A codec whose size depends on the values (a threshold, an index set's
        coding) overrides it with a bound; tests check every codec's messages against it.
        """
        gen = torch.Generator().manual_seed(0)
        probe = torch.randn(layer.shape, generator=gen).to(layer.dtype)
        state = self.init_state(layer, torch.device("cpu"), node=0)
        if self.needs_sq_grad:
            state.sq_grad = probe.float().square()
        return self.encode(probe, layer, state).nbytes

    def _feedback_rows(self, x: torch.Tensor, layer: LayerInfo, states: list[S]) -> torch.Tensor:
        """What error feedback accumulates, for ``[rows, n]`` gradients: the gradients themselves,
        unless the codec transforms them first (DGC: clipping and momentum correction, so the
        residual accumulates velocity)."""
        return x

    def _encode_rows(
        self, acc: torch.Tensor, grads: torch.Tensor, layer: LayerInfo, states: list[S]
    ) -> tuple[list[Payload], SentRows | None]:
        """Compress every row of ``acc`` (fp32 ``[rows, n]``: the gradients plus the residuals when
        :attr:`error_feedback` is on, else the gradients), row ``i`` with ``states[i]``. Return the
        payloads and what the receivers will decode (:data:`~aiotsim.compress.memory.SentRows`;
        ``None`` is allowed only without error feedback). ``grads`` are the fresh gradient rows, for
        codecs whose statistics read them. ``acc`` must not be modified.

        A codec overrides this to work on all rows at once, or implements :meth:`_encode` (one row)
        and leaves this loop to call it."""
        payloads, sents = [], []
        for a, g, s in zip(acc.unbind(0), grads.unbind(0), states):
            payload, sent = self._encode(a.view(layer.shape), g.view(layer.shape), layer, s)
            if self.error_feedback and sent is None:
                raise CodecError(f"{self.name} keeps a residual but its _encode did not say what it sent")
            payloads.append(payload)
            sents.append(sent)
        return payloads, (("rows", sents) if self.error_feedback else None)

    def _encode(self, acc: torch.Tensor, grad: torch.Tensor, layer: LayerInfo, state: S) -> tuple[Payload, Sent | None]:
        """Compress one node's ``acc`` (fp32, shape of ``grad``): the gradient plus the residual
        when :attr:`error_feedback` is on, else the gradient. Return the payload and what the
        receiver will decode from it (``None`` is allowed only without error feedback). ``grad`` is
        the fresh gradient, for codecs whose statistics read it. ``acc`` must not be modified: it
        is the role's accumulation, or the caller's gradient. Implement this or :meth:`_encode_rows`."""
        raise CodecError(f"{type(self).__name__} encodes all rows at once (_encode_rows), not one by one")

    @abstractmethod
    def decode(self, payload: Payload, layer: LayerInfo) -> torch.Tensor:
        """Rebuild a dense gradient of ``layer.shape`` / ``layer.dtype`` from the payload alone."""

    def decode_read(self, payload: Payload, layer: LayerInfo) -> torch.Tensor:
        """:meth:`decode` for a caller that only reads the result (the server's mean copies it
        into its stack, or adds it to its sums): the same values, possibly a read-only view of
        the payload's own memory instead of a new tensor. Default: :meth:`decode`."""
        return self.decode(payload, layer)

    def decode_many(
        self, payloads: Sequence[Payload], layer: LayerInfo, out: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Layer ``layer`` of several messages, decoded into ``[messages, *layer.shape]``: bit for
        bit each message's :meth:`decode_read`.

        One message at a time, the server's decoding is a dozen small torch calls per message and
        layer (about 170 us of dispatch on the 2-core development CPU for a 2-bit LeNet-5 bias, so
        1.8 s per iteration at 1,000 nodes; on a GPU one kernel launch per call). A codec with a
        row decoder (:meth:`_decode_rows`) decodes the messages together instead, in chunks of at
        most :data:`CHUNK_ELEMENTS` values; a chunk it declines is decoded message by message.

        Parameters
        ----------
        payloads : sequence of Payload
            One message's payload of this layer each, all of this codec.
        layer : LayerInfo
            The layer.
        out : torch.Tensor, optional
            Where to write, ``[messages, *layer.shape]`` of any dtype: row ``i`` receives
            ``decode_read(payloads[i], layer)`` as ``out[i].copy_`` would cast it. Default: a new
            tensor of ``layer.dtype`` on the payloads' device.
        """
        if not payloads:
            raise ValueError("decode_many: no payloads")
        if out is None:
            device = next(iter(payloads[0].buffers.values())).device
            out = torch.empty((len(payloads), *layer.shape), dtype=layer.dtype, device=device)
        step = max(1, CHUNK_ELEMENTS // max(1, layer.numel))
        together = layer.numel > 0 and self.decodes_rows()
        for a in range(0, len(payloads), step):
            chunk = payloads[a : a + step]
            rows = self._decode_rows(chunk, layer) if together else None  # [chunk, n] fp32
            if rows is None:
                for i, p in enumerate(chunk, start=a):
                    out[i].copy_(self.decode_read(p, layer))
            else:
                out[a : a + len(chunk)].copy_(rows.view(len(chunk), *layer.shape).to(layer.dtype))
        return out

    def decodes_rows(self) -> bool:
        """Whether :meth:`decode_many` decodes this codec's messages together (it has a row
        decoder for these parameters; a chunk of messages may still be declined)."""
        return type(self)._decode_rows is not Codec._decode_rows

    def _decode_rows(self, payloads: Sequence[Payload], layer: LayerInfo) -> torch.Tensor | None:
        """``[messages, layer.numel]`` fp32: the messages decoded together, bit for bit as each
        alone; or None to decode them one by one (messages it does not cover). Default: None."""
        return None

    def observe_global(self, update: torch.Tensor, layer: LayerInfo, state: CodecState) -> None:  # noqa: B027
        """Called on every node after the server's aggregated ``update`` for ``layer`` arrives
        (a no-op unless the codec learns from the global update, like seed 001's agg-aware)."""

    # ---- description -----------------------------------------------------------------------
    @classmethod
    def param_docs(cls) -> list[tuple[str, Any, str]]:
        """``(name, default, help)`` for every parameter, for ``aiotsim compressors``."""
        out = []
        # the shared error_feedback switch (inherited, hence first in the dataclass) listed last
        for f in sorted(dataclasses.fields(cls.Params), key=lambda f: f.name == "error_feedback"):
            default = f.default if f.default is not dataclasses.MISSING else None
            out.append((f.name, default, f.metadata.get("help", "")))
        return out


class RowDecoder(ABC):
    """Mixin for a codec whose decoding is element-wise over its buffers: :meth:`decode_rows`
    takes them with leading dimensions (one message per row, as :meth:`Codec.decode_many` stacks
    a layer's messages of the same buffer sizes), and :meth:`decode` is :meth:`decode_rows` of
    one message, so both run the same operations."""

    def _decode_rows(self, payloads: Sequence[Payload], layer: LayerInfo) -> torch.Tensor | None:
        """Messages whose buffers have the same sizes, stacked into ``[messages, bytes]`` per
        buffer and decoded by :meth:`decode_rows`; others one by one."""
        return self.decode_rows(stacked(payloads), layer) if same_layout(payloads) else None

    @abstractmethod
    def decode_rows(self, buffers: Mapping[str, torch.Tensor], layer: LayerInfo) -> torch.Tensor:
        """The fp32 values of the messages' ``buffers`` (``[..., bytes]`` each): ``[..., layer.numel]``."""

    def decode(self, payload: Payload, layer: LayerInfo) -> torch.Tensor:
        """One message: :meth:`decode_rows` of its buffers, as ``layer.shape`` / ``layer.dtype``."""
        return self.decode_rows(payload.buffers, layer).view(layer.shape).to(layer.dtype)


def same_layout(payloads: Sequence[Payload]) -> bool:
    """Whether every payload has the first one's buffers, of the same byte counts (stackable)."""
    first = payloads[0].layout
    return all(p.layout == first for p in payloads)


def stacked(payloads: Sequence[Payload]) -> dict[str, torch.Tensor]:
    """Each buffer of the messages as one ``[messages, bytes]`` tensor."""
    return {k: torch.stack([p.buffers[k] for p in payloads]) for k in payloads[0].buffers}


def as_float(grad: torch.Tensor) -> torch.Tensor:
    """fp32 view of a gradient for the codec's arithmetic (fp16/bf16 gradients are upcast)."""
    return grad if grad.dtype == torch.float32 else grad.float()
