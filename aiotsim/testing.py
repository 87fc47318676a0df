"""The codec contract as a test kit: :func:`check_codec` runs it on any codec class.

A user with a compressor of their own checks it before comparing it with the built-ins::

    from aiotsim.testing import check_codec
    from my_codecs import EightBitTopK
    check_codec(EightBitTopK)                      # default parameters
    check_codec(EightBitTopK, {"ratio": 0.05})     # other parameters

Each property is one function below; a failure raises :class:`AssertionError` whose message names
the codec, the property (one of :data:`PROPERTIES`) and what differed. Layers are small (at most a
few hundred values), so the whole kit takes well under a second for a typical codec.
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from aiotsim.compress.base import Codec, CodecState, LayerInfo, Payload
from aiotsim.errors import CodecError, ConfigError

CPU = torch.device("cpu")
STEPS = 3  # encodes per property: the second and third exercise the state (residual, warm start)
# Float tolerance of the error-feedback identity: gradients are ~0.01, fp32 sums of a few terms.
RTOL, ATOL = 1e-5, 1e-6

# Small layers of every kind a model has (hybrid codecs route on ``kind``).
LAYERS = (
    LayerInfo("check.odd", (101,), kind="other", index=0),
    LayerInfo("check.conv", (4, 3, 3, 3), kind="conv", index=1),
    LayerInfo("check.fc", (12, 20), kind="fc", index=2),
    LayerInfo("check.bias", (12,), kind="bias", index=3),
)
TINY = (LayerInfo("check.empty", (0,), index=4), LayerInfo("check.one", (1,), kind="bias", index=5))


def gradient(layer: LayerInfo, step: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A seeded gradient of ``layer`` for ``step`` (standard normal x 0.01, as real gradients are small)."""
    gen = torch.Generator().manual_seed(1009 * layer.index + step + 1)
    return (torch.randn(layer.shape, generator=gen) * 0.01).to(dtype)


def make_codec(cls: type[Codec], params: Mapping[str, Any] | Any = None, seed: int = 7) -> Codec:
    """An instance of ``cls`` with ``params`` (a dict of field values, or a ``cls.Params``)."""
    if params is None or isinstance(params, Mapping):
        try:
            params = cls.Params(**dict(params or {}))
        except TypeError as exc:  # an unknown field name
            raise ConfigError(f"{cls.__name__}: {exc}; its parameters: {_field_names(cls)}") from None
    return cls(params, seed=seed)


def _field_names(cls: type[Codec]) -> str:
    return ", ".join(f.name for f in dataclasses.fields(cls.Params)) or "none"


def encode(codec: Codec, grad: torch.Tensor, layer: LayerInfo, state: CodecState) -> Payload:
    """``codec.encode`` as the engine calls it (``state.sq_grad`` filled for codecs that need it)."""
    if codec.needs_sq_grad:
        state.sq_grad = grad.float().square()
    payload = codec.encode(grad, layer, state)
    state.sq_grad = None  # that encode's input, not state (the engine clears it too)
    return payload


def wire_bytes(payload: Payload) -> list[tuple[str, bytes]]:
    """The payload as it travels: each buffer's name and raw bytes, in order."""
    return [(k, v.detach().cpu().numpy().tobytes()) for k, v in payload.buffers.items()]


def from_wire(wire: list[tuple[str, bytes]]) -> Payload:
    """A payload rebuilt from :func:`wire_bytes` alone (no host copies, no shared memory)."""
    return Payload({k: torch.from_numpy(np.frombuffer(b, dtype=np.uint8).copy()) for k, b in wire})


def clone_state(codec: Codec, state: CodecState, layer: LayerInfo, via: Path | None = None) -> CodecState:
    """A copy of ``state`` made as a checkpoint makes it: its fields as plain data
    (:func:`aiotsim.sim.checkpoint._codec_state`), through the checkpoint file's format when ``via``
    names a file (else its in-memory conversion), loaded into a fresh ``init_state``."""
    from aiotsim.sim import checkpoint, checkpoint_file  # the simulator, only for this property

    saved = {"codec": [checkpoint._codec_state(state)]}
    try:
        if via is None:
            loaded = checkpoint_file.decode(checkpoint_file.encode(saved))
        else:
            checkpoint_file.save(via, saved)
            loaded = checkpoint_file.load(via)
    except TypeError as exc:  # a field that is not a tensor, a generator or plain data
        raise AssertionError(f"state: {exc}") from None
    fresh = codec.init_state(layer, CPU, node=0)
    checkpoint._load_codec_states([fresh], loaded["codec"], CPU)
    return fresh


def _same_payload(a: Payload, b: Payload) -> bool:
    return wire_bytes(a) == wire_bytes(b)


def _close(a: torch.Tensor, b: torch.Tensor, exact: bool = False) -> bool:
    if a.shape != b.shape:
        return False
    tol = {"rtol": 0.0, "atol": 0.0} if exact else {"rtol": RTOL, "atol": ATOL}
    return bool(torch.allclose(a.float(), b.float(), equal_nan=exact, **tol))


# ---- the properties: each takes a built codec and its class, raises AssertionError -------------
def check_declarations(codec: Codec) -> None:
    """The class declares what the engine reads: a ``name``, a frozen dataclass ``Params`` whose
    fields all have defaults, a ``State`` that is a dataclass subclass of :class:`CodecState`."""
    cls = type(codec)
    assert cls.name, "set the class attribute `name` (the name scenario files and tables use)"
    assert dataclasses.is_dataclass(cls.Params), "`Params` must be a dataclass (fields from aiotsim.schema.opt)"
    missing = [f.name for f in dataclasses.fields(cls.Params) if f.default is dataclasses.MISSING]
    assert not missing, f"Params fields without a default: {', '.join(missing)}"
    assert issubclass(cls.State, CodecState), "`State` must subclass aiotsim.compress.CodecState"


def check_shapes(codec: Codec) -> None:
    """Every payload is 1-D uint8 buffers; decode returns the layer's shape and dtype, finite,
    for fp32, fp16 and bf16 gradients of every layer kind."""
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        for base in LAYERS:
            layer = dataclasses.replace(base, dtype=dtype)
            state = codec.init_state(layer, CPU, node=0)
            for step in range(2):
                payload = encode(codec, gradient(layer, step, dtype), layer, state)
                assert isinstance(payload, Payload), f"encode returned a {type(payload).__name__}, not a Payload"
                out = codec.decode(payload, layer)
                where = f"{layer.name} {tuple(layer.shape)} {dtype}, step {step}"
                assert tuple(out.shape) == layer.shape, f"{where}: decode gave shape {tuple(out.shape)}"
                assert out.dtype == dtype, f"{where}: decode gave {out.dtype}"
                assert bool(torch.isfinite(out.float()).all()), f"{where}: decode gave non-finite values"


def check_size(codec: Codec) -> None:
    """The reported size is the bytes that travel: ``payload.nbytes == len(wire bytes)``, and each
    host copy (``payload.heads``) is the first bytes of its buffer, not extra bytes."""
    for layer in LAYERS:
        state = codec.init_state(layer, CPU, node=0)
        for step in range(STEPS):
            payload = encode(codec, gradient(layer, step), layer, state)
            wire = wire_bytes(payload)
            real = sum(len(b) for _, b in wire)
            assert payload.nbytes == real, f"{layer.name} step {step}: nbytes {payload.nbytes} != {real} bytes sent"
            for key, head in payload.heads.items():
                assert dict(wire)[key].startswith(head), f"{layer.name}: head {key!r} is not its buffer's first bytes"


def check_payload_only(codec: Codec, params: Any) -> None:
    """Decode uses only the bytes and the layer: the payload rebuilt from its raw bytes, decoded by
    a fresh instance (same parameters and seed, no state), equals the sender's own decode."""
    for layer in LAYERS:
        state = codec.init_state(layer, CPU, node=0)
        for step in range(STEPS):
            payload = encode(codec, gradient(layer, step), layer, state)
            receiver = make_codec(type(codec), params, seed=codec.seed)
            got = receiver.decode(from_wire(wire_bytes(payload)), layer)
            want = codec.decode(payload, layer)
            assert _close(got, want, exact=True), f"{layer.name} step {step}: decoding the bytes alone differs"


def check_determinism(codec: Codec, params: Any) -> None:
    """Same parameters, same seed, same gradients: the same bytes, step after step."""
    twin = make_codec(type(codec), params, seed=codec.seed)
    for layer in LAYERS:
        a, b = codec.init_state(layer, CPU, node=0), twin.init_state(layer, CPU, node=0)
        for step in range(STEPS):
            grad = gradient(layer, step)
            pa, pb = encode(codec, grad, layer, a), encode(twin, grad.clone(), layer, b)
            assert _same_payload(pa, pb), f"{layer.name} step {step}: two equal instances sent different bytes"


def check_tiny_layers(codec: Codec) -> None:
    """Empty and 1-element layers round-trip to their shape, or are refused with a CodecError
    that says why (a codec with a minimum size)."""
    for layer in TINY:
        try:
            state = codec.init_state(layer, CPU, node=0)
            for step in range(2):
                out = codec.decode(encode(codec, gradient(layer, step), layer, state), layer)
                assert tuple(out.shape) == layer.shape, f"{layer.name}: decode gave shape {tuple(out.shape)}"
        except (CodecError, ConfigError) as exc:
            assert str(exc).strip(), f"{layer.name}: refused with an empty message (say the minimum size)"


def check_error_feedback(codec: Codec) -> None:
    """With error feedback on: compensated input (the feedback input plus the previous residual)
    == decoded message + new residual, at every step; off: no residual is ever kept."""
    for layer in LAYERS:
        state = codec.init_state(layer, CPU, node=0)
        for step in range(STEPS):
            grad = gradient(layer, step)
            if codec.needs_sq_grad:
                state.sq_grad = grad.float().square()
            x = grad.float()
            if type(codec)._feedback_rows is not Codec._feedback_rows:
                # its own feedback input (DGC: momentum-corrected), from a copy: the state is untouched
                copy = codec.typed_state(clone_state(codec, state, layer))
                x = codec._feedback_rows(grad.reshape(1, -1), layer, [copy]).float().reshape(layer.shape)
            before = torch.zeros(layer.shape) if state.residual is None else state.residual.reshape(layer.shape)
            compensated = x + before
            decoded = codec.decode(encode(codec, grad, layer, state), layer).float()
            where = f"{layer.name} step {step}"
            if not codec.error_feedback:
                assert state.residual is None, f"{where}: error feedback is off but a residual was kept"
                continue
            assert state.residual is not None, f"{where}: error feedback is on but no residual was kept"
            after = state.residual.reshape(layer.shape)
            err = (decoded + after - compensated).abs().max().item() if layer.numel else 0.0
            assert _close(decoded + after, compensated), (
                f"{where}: input + old residual != decoded + new residual (max error {err:.3g}); "
                "_encode must report exactly what decode rebuilds as `sent`"
            )


def check_checkpoint(codec: Codec) -> None:
    """The state survives a checkpoint: saved after two encodes through the checkpoint file,
    restored into a fresh state; the next encode from both gives the same bytes and residual."""
    with tempfile.TemporaryDirectory() as tmp:
        for layer in LAYERS:
            state = codec.init_state(layer, CPU, node=0)
            for step in range(2):
                encode(codec, gradient(layer, step), layer, state)
            restored = clone_state(codec, state, layer, via=Path(tmp) / "checkpoint.pt")
            grad = gradient(layer, 2)
            pa, pb = encode(codec, grad, layer, state), encode(codec, grad.clone(), layer, restored)
            assert _same_payload(pa, pb), f"{layer.name}: the restored state sent different bytes"
            ra, rb = state.residual, restored.residual
            same = (ra is None and rb is None) or (ra is not None and rb is not None and _close(ra, rb, exact=True))
            assert same, f"{layer.name}: the restored state kept a different residual"


def check_rows(codec: Codec, params: Any, nodes: int = 3) -> None:
    """Rows equal rows one at a time: encoding several nodes' gradients at once
    (:meth:`~aiotsim.compress.base.Codec.encode_rows`) gives each node's own bytes and residual, and
    decoding several messages at once (:meth:`~aiotsim.compress.base.Codec.decode_many`) each one's
    decode. A codec that encodes one row at a time (``_encode``) passes by construction unless its
    state leaks between nodes."""

    alone = make_codec(type(codec), params, seed=codec.seed)
    for layer in LAYERS:
        rows = [codec.init_state(layer, CPU, node=i) for i in range(nodes)]
        singles = [alone.init_state(layer, CPU, node=i) for i in range(nodes)]
        for step in range(2):
            grads = [gradient(layer, 10 * i + step) for i in range(nodes)]
            for s, g in zip(rows, grads):
                s.sq_grad = g.float().square() if codec.needs_sq_grad else None
            batch = codec.encode_rows(torch.stack(grads), layer, rows)
            one = [encode(alone, g, layer, s) for g, s in zip(grads, singles)]
            for i in range(nodes):
                where = f"{layer.name} step {step} node {i}"
                assert _same_payload(batch[i], one[i]), f"{where}: the batched encode sent different bytes"
                ra, rb = rows[i].residual, singles[i].residual
                assert (ra is None) == (rb is None), f"{where}: the batched encode kept a residual differently"
                assert ra is None or _close(ra, rb, exact=True), f"{where}: the batched encode's residual differs"
            decoded = codec.decode_many(one, layer)
            for i in range(nodes):
                assert _close(decoded[i], codec.decode(one[i], layer), exact=True), (
                    f"{layer.name} step {step} message {i}: decode_many differs from decode"
                )


PROPERTIES: dict[str, Callable[[Codec, Any], None]] = {
    "declarations": lambda c, p: check_declarations(c),
    "shapes": lambda c, p: check_shapes(c),
    "size": lambda c, p: check_size(c),
    "payload_only": check_payload_only,
    "determinism": check_determinism,
    "tiny_layers": lambda c, p: check_tiny_layers(c),
    "error_feedback": lambda c, p: check_error_feedback(c),
    "checkpoint": lambda c, p: check_checkpoint(c),
    "rows": check_rows,
}


def check_codec(
    cls: type[Codec], params: Mapping[str, Any] | Any = None, *, seed: int = 7, skip: Iterable[str] = ()
) -> None:
    """Check that ``cls`` keeps the codec contract; raise AssertionError naming the first failure.

    Parameters
    ----------
    cls : type of Codec
        The codec class (a subclass of :class:`aiotsim.compress.Codec`).
    params : dict or cls.Params, optional
        Parameters to check it at (default: its defaults); validated as a scenario's are.
    seed : int
        The scenario seed both sides of the checks use.
    skip : iterable of str
        Properties not to check (names from :data:`PROPERTIES`), e.g. ``"error_feedback"`` for a
        codec whose residual decays by design.

    Raises
    ------
    AssertionError
        ``"<Class>: <property>: <what differed>"`` for the first property that fails (a property
        whose code raised says what it raised, the original exception chained).
    ConfigError or CodecError
        ``cls`` is not a codec class, ``skip`` names an unknown property, or ``params`` are invalid.
    """
    if not (isinstance(cls, type) and issubclass(cls, Codec)):
        raise ConfigError(f"check_codec needs a subclass of aiotsim.compress.Codec, got {cls!r}")
    unknown = sorted(set(skip) - set(PROPERTIES))
    if unknown:
        raise ConfigError(
            f"check_codec: unknown properties to skip: {', '.join(unknown)}; valid: {', '.join(PROPERTIES)}"
        )
    codec = make_codec(cls, params, seed=seed)
    for prop, check in PROPERTIES.items():
        if prop in skip:
            continue
        try:
            check(codec, codec.params)
        except AssertionError as exc:
            raise AssertionError(f"{cls.__name__}: {prop}: {exc}") from None
        except Exception as exc:  # a crash is a failed property too: say which, keep the traceback
            raise AssertionError(f"{cls.__name__}: {prop}: raised {type(exc).__name__}: {exc}") from exc


__all__ = ["PROPERTIES", "check_codec", "clone_state", "from_wire", "gradient", "wire_bytes"]
