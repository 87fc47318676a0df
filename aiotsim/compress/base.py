"""The codec contract: what a gradient compressor is, what it puts on the wire, and what it keeps.

A codec turns one layer's gradient into a :class:`Payload` (the exact bytes that travel) and turns a
payload back into a dense gradient using only those bytes, the layer's static :class:`LayerInfo` and
seeds shared by protocol. Mutable per-node, per-layer state (residuals, momentum, thresholds, PowerSGD
Q, the codec's random generator) lives in a :class:`CodecState`; the codec object itself holds only
hyperparameters, so one codec instance serves every node.

The server side belongs to the codec family too: :meth:`Codec.aggregate` combines the decoded
gradients, and :meth:`Codec.observe_global` lets a node's state learn from the aggregated update that
came back (seed 001 uses this to prefer globally large indices).

Nothing in this package imports simpy: codecs know bytes, not time.
"""

from __future__ import annotations

import dataclasses
import hashlib
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import torch

from aiotsim.errors import CodecError

LayerKind = Literal["conv", "fc", "bias", "norm", "other"]


@dataclass(frozen=True)
class LayerInfo:
    """Static facts about one parameter tensor, known to both sides by protocol.

    Parameters
    ----------
    name : str
        Parameter name, e.g. ``"conv1.weight"``.
    shape : tuple of int
        Shape of the gradient tensor.
    dtype : torch.dtype
        dtype the decoded gradient must have.
    kind : {"conv", "fc", "bias", "norm", "other"}
        Layer type; hybrid codecs (Hylo) route on it.
    index : int
        Position of the layer in the model's parameter list (used to derive per-layer seeds).
    """

    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype = torch.float32
    kind: LayerKind = "other"
    index: int = 0

    @property
    def numel(self) -> int:
        """Number of elements of the gradient."""
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def dense_nbytes(self) -> int:
        """Bytes of the uncompressed fp32 gradient: the reference for compression ratios."""
        return 4 * self.numel


@dataclass
class Payload:
    """What goes on the wire for one layer: named 1-D ``uint8`` buffers, nothing else.

    Scalars (scales, norms, thresholds, seeds) are packed into buffers too (see
    :func:`aiotsim.compress.packing.pack_f32`), so :attr:`nbytes` is exactly the message size. The
    buffer names are fixed by the codec's protocol and are not sent.
    """

    buffers: dict[str, torch.Tensor] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for key, buf in self.buffers.items():
            if buf.dtype != torch.uint8 or buf.dim() != 1:
                raise CodecError(
                    f"payload buffer {key!r} must be a 1-D uint8 tensor, got {buf.dtype} of shape {tuple(buf.shape)}"
                )

    @property
    def nbytes(self) -> int:
        """Size of the message in bytes: the sum of its packed buffers."""
        return sum(int(b.numel()) for b in self.buffers.values())

    def to(self, device: torch.device | str) -> Payload:
        """The same payload with its buffers on ``device`` (a copy only where needed)."""
        return Payload({k: v.to(device) for k, v in self.buffers.items()})


@dataclass
class CodecState:
    """Per-node, per-layer mutable state of a codec. Codecs subclass it to add their own fields.

    Fields are grouped by role, as in PyTorch's PowerSGD state: randomness, internal state and
    statistics. ``sq_grad`` is filled by the engine before :meth:`Codec.encode` for codecs that set
    ``needs_sq_grad`` (mean over the batch of per-sample squared gradients, same shape as the grad).
    """

    # randomness: owned by the state, derived from the scenario seed (never the global RNG)
    generator: torch.Generator
    # internal state
    residual: torch.Tensor | None = None  # error feedback accumulator, shape of the gradient
    step: int = 0  # number of encode() calls so far
    sq_grad: torch.Tensor | None = None
    # statistics: elements before/after compression, for the codec's own accounting
    elements_in: int = 0
    elements_out: int = 0


def derive_seed(*parts: object) -> int:
    """A stable 63-bit seed from any parts (scenario seed, node id, layer name...).

    Uses BLAKE2 rather than ``hash()`` so seeds are identical across processes and runs.
    """
    digest = hashlib.blake2b("/".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & ((1 << 63) - 1)


@dataclass(frozen=True)
class NoParams:
    """Parameters of a codec that has none."""


class Codec(ABC):
    """A gradient compressor: hyperparameters only; state lives in :class:`CodecState`.

    Subclasses set the class attributes, define a frozen dataclass ``Params`` whose fields carry
    defaults (and a ``metadata={"help": ...}`` one-liner each), and implement :meth:`encode` and
    :meth:`decode`. Parameter validation goes in :meth:`validate`, returning one message per problem.

    Class attributes
    ----------------
    name : str
        Registry name used in scenario files.
    summary : str
        One-line description for ``aiotsim compressors``.
    unbiased : bool
        E[decode(encode(g))] == g (checked by Monte-Carlo tests).
    has_residual : bool
        Keeps error feedback; sent + residual == accumulated input must hold.
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
    unbiased: ClassVar[bool] = False
    has_residual: ClassVar[bool] = False
    sparse: ClassVar[bool] = False
    needs_sq_grad: ClassVar[bool] = False
    absorbs_momentum: ClassVar[bool] = False
    encode_flops_per_element: ClassVar[float] = 1.0

    def __init__(self, params: Any = None, seed: int = 0) -> None:
        self.params = params if params is not None else self.Params()
        self.seed = seed
        problems = self.validate()
        if problems:
            raise CodecError("; ".join(f"compressor {self.name}: {p}" for p in problems))

    # ---- hyperparameters -------------------------------------------------------------------
    def validate(self) -> list[str]:
        """Problems with ``self.params``, one message each naming the value and the valid range."""
        return []

    # ---- state -----------------------------------------------------------------------------
    def init_state(self, layer: LayerInfo, device: torch.device, node: int) -> CodecState:
        """Fresh state for ``node``'s copy of ``layer``. Subclasses with more fields override
        this and call :meth:`make_generator`."""
        return CodecState(generator=self.make_generator(layer, device, node))

    def make_generator(self, layer: LayerInfo, device: torch.device, node: int) -> torch.Generator:
        """The per-node, per-layer generator, seeded from the scenario seed."""
        gen = torch.Generator(device=device)
        gen.manual_seed(derive_seed(self.seed, self.name, node, layer.index, layer.name))
        return gen

    # ---- node side -------------------------------------------------------------------------
    @abstractmethod
    def encode(self, grad: torch.Tensor, layer: LayerInfo, state: CodecState) -> Payload:
        """Compress ``grad`` (shape ``layer.shape``) into the bytes that go on the wire."""

    @abstractmethod
    def decode(self, payload: Payload, layer: LayerInfo) -> torch.Tensor:
        """Rebuild a dense gradient of ``layer.shape`` / ``layer.dtype`` from the payload alone."""

    def observe_global(self, update: torch.Tensor, layer: LayerInfo, state: CodecState) -> None:  # noqa: B027
        """Called on every node after the server's aggregated ``update`` for ``layer`` arrives
        (a no-op unless the codec learns from the global update, like seed 001's agg-aware)."""

    # ---- server side -----------------------------------------------------------------------
    def aggregate(self, decoded: list[torch.Tensor], layer: LayerInfo) -> torch.Tensor:
        """Combine the decoded gradients of the workers (default: their mean)."""
        if not decoded:
            raise CodecError(f"aggregate({layer.name}): no gradients to aggregate")
        return torch.stack(decoded).mean(dim=0)

    @classmethod
    def supports_ring(cls) -> bool:
        """Whether a ring all-reduce can carry this codec: each hop decodes, adds its own
        gradient and re-encodes, which is only the codec's aggregation when that is a mean.
        Codecs that aggregate otherwise (signSGD's majority vote) cannot."""
        return cls.aggregate is Codec.aggregate

    # ---- description -----------------------------------------------------------------------
    @classmethod
    def param_docs(cls) -> list[tuple[str, Any, str]]:
        """``(name, default, help)`` for every parameter, for ``aiotsim compressors``."""
        out = []
        for f in dataclasses.fields(cls.Params):
            default = f.default if f.default is not dataclasses.MISSING else None
            out.append((f.name, default, f.metadata.get("help", "")))
        return out


def as_float(grad: torch.Tensor) -> torch.Tensor:
    """fp32 view of a gradient for the codec's arithmetic (fp16/bf16 gradients are upcast)."""
    return grad if grad.dtype == torch.float32 else grad.float()
