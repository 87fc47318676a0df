"""Record or check the exact bytes every built-in codec produces: payloads, residuals, state and
decodes, one node at a time and several nodes at once, for every parameter variant below.

    python tools/codec_digests.py --check      # against tests/data/codec_digests.json
    python tools/codec_digests.py --record     # rewrite this machine's set (only when bytes change on purpose)

A refactor of the codecs must not change a single byte (issue 41: each codec written once, on rows).
The run fingerprints (``tools/fingerprints.py``) see only what a few training runs send; this digest
covers each codec's parameter switches (every boolean flipped and every option of a ``Literal``
field, one at a time), layers of every kind and size class (empty, one value, odd sizes, a layer
large enough for top-k's sampled bracket), three steps of carried state, and two torch thread counts
(row reductions take another path with several threads). One digest per case: SHA-256 over each
step's payload buffers and heads, the residual and every other tensor of the state, the generator's
state and the decoded gradient. Runs on the CPU.

FFTs and matrix products round differently on different kinds of CPU (an AMD EPYC differs from the
recorded Intel Xeon in 160 of 2,624 cases: FFT, PowerSGD, HyLo's RMS statistic), so the fixture
holds one set per kind of machine, as the run fingerprints do (``tools/fingerprints.py``): a
machine's set is the one whose :data:`CANARIES` digests it reproduces.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import sys
import typing
from pathlib import Path
from typing import Any

import torch

from aiotsim.compress import build_codec, codec_names, get_codec_class
from aiotsim.compress.base import CodecState, LayerInfo, Payload

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fingerprints import load_sets, machine_name, matching_set, save_sets, set_to_record  # noqa: E402

FIXTURE = Path(__file__).resolve().parent.parent / "tests" / "data" / "codec_digests.json"
CPU = torch.device("cpu")
NODES, STEPS = 3, 3
# the cases that tell which recorded set a machine reproduces: an FFT, HyLo's large-layer statistic
# and PowerSGD's matrix products, the kernels whose rounding differs between CPUs
CANARIES = ("fft|default|fc|one|t1", "hylo|fc_stat=rms|big|one|t1", "powersgd|default|fc|one|t1")
LAYERS = (
    LayerInfo("odd", (101,), kind="other", index=0),
    LayerInfo("conv", (6, 3, 5, 5), kind="conv", index=1),
    LayerInfo("fc", (24, 40), kind="fc", index=2),
    LayerInfo("bias", (12,), kind="bias", index=3),
    LayerInfo("one", (1,), kind="bias", index=4),
    LayerInfo("empty", (0,), kind="other", index=5),
    LayerInfo("big", (80, 1000), kind="fc", index=6),  # over top-k's bracket threshold (65,536)
    LayerInfo("bigconv", (32, 16, 3, 3), kind="conv", index=7),
)
# Variants beyond the automatic ones (booleans flipped, Literal options): settings that take
# other code paths.
EXTRA: dict[str, list[dict[str, Any]]] = {
    "topk": [{"ratio": 0.3}, {"ratio": 0.07}],
    "agg-aware": [{"reserve": 0.5}],
    "dgc": [{"warmup_steps": 0}, {"clip_norm": 0.05}, {"sample_ratio": 1.0}],
    "qsgd": [{"levels": 1}, {"levels": 127, "bucket_size": 7}],
    "threshold": [{"tau": 0.02}],
    "fft": [{"chunk_size": 64}, {"mantissa_bits": 0}],
    "hylo": [{"size_threshold": 0}],
    "pgc": [{"momentum": 0.0}],
    "pgc-paper": [{"momentum": 0.0}],
    "randomk": [{"ratio": 0.3}],
}


def variants(name: str) -> list[dict[str, Any]]:
    """The parameter variants of codec ``name``: defaults, each bool flipped, each other Literal option."""
    cls = get_codec_class(name)
    out: list[dict[str, Any]] = [{}]
    hints = typing.get_type_hints(cls.Params)
    for f in dataclasses.fields(cls.Params):
        default = f.default
        hint = hints.get(f.name)
        if isinstance(default, bool):
            out.append({f.name: not default})
        elif typing.get_origin(hint) is typing.Literal:
            out += [{f.name: v} for v in typing.get_args(hint) if v != default]
    return out + EXTRA.get(name, [])


def _gradient(layer: LayerInfo, node: int, step: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(7919 * layer.index + 104729 * node + step + 1)
    g = torch.randn(layer.shape, generator=gen) * 0.01
    if layer.numel > 4:  # a few exact ties and zeros, which selections must break as before
        flat = g.view(-1)
        flat[: layer.numel // 4 : 3] = 0.005
        flat[1::17] = 0.0
    return g


def _feed(h: Any, t: torch.Tensor | None) -> None:
    if t is None:
        h.update(b"none")
    else:
        h.update(str((tuple(t.shape), t.dtype)).encode())
        h.update(t.detach().contiguous().cpu().reshape(-1).view(torch.uint8).numpy().tobytes())


def _feed_state(h: Any, state: CodecState) -> None:
    for f in dataclasses.fields(state):
        if f.name in ("sq_grad", "scratch"):  # an input, and a reused buffer: not state
            continue
        v = getattr(state, f.name)
        h.update(f.name.encode())
        if isinstance(v, torch.Tensor):
            _feed(h, v)
        elif isinstance(v, torch.Generator):
            _feed(h, v.get_state())
        elif isinstance(v, (list, tuple)) and all(isinstance(x, torch.Tensor) for x in v):
            for x in v:
                _feed(h, x)
        else:
            h.update(repr(v).encode())


def _feed_payload(h: Any, p: Payload) -> None:
    for k, buf in p.buffers.items():
        h.update(k.encode())
        _feed(h, buf)
    for k, head in sorted(p.heads.items()):
        h.update(k.encode() + head)


def digest(name: str, params: dict[str, Any], layer: LayerInfo, together: bool) -> str:
    """SHA-256 of everything ``STEPS`` encodes of ``NODES`` nodes produce for one case."""
    codec = build_codec(name, params, seed=11)
    states = [codec.init_state(layer, CPU, node=i) for i in range(NODES)]
    h = hashlib.sha256()
    for step in range(STEPS):
        grads = [_gradient(layer, i, step) for i in range(NODES)]
        for s, g in zip(states, grads):
            s.sq_grad = g.square() if codec.needs_sq_grad else None
        if together:
            payloads = codec.encode_rows(torch.stack(grads), layer, states)
            decoded = list(codec.decode_many(payloads, layer))
        else:
            payloads = [codec.encode(g, layer, s) for g, s in zip(grads, states)]
            decoded = [codec.decode(p, layer) for p in payloads]
        for s, p, d in zip(states, payloads, decoded):
            s.sq_grad = None
            _feed_payload(h, p)
            _feed(h, d)
            _feed_state(h, s)
        if getattr(codec, "sparse", False) or name == "agg-aware":
            update = torch.stack(decoded).mean(dim=0)
            for s in states:
                codec.observe_global(update, layer, s)
    return h.hexdigest()


def compute(names: list[str] | None = None, only: tuple[str, ...] = ()) -> dict[str, str]:
    """Every case's digest (of the codecs ``names``, default all built-ins; ``only``: just these
    keys), keyed ``codec|params|layer|one or rows|threads``."""
    out: dict[str, str] = {}
    before = torch.get_num_threads()
    for threads in (1, 2):
        torch.set_num_threads(threads)
        for name in names or codec_names():
            for params in variants(name):
                tag = ",".join(f"{k}={v}" for k, v in sorted(params.items())) or "default"
                for layer in LAYERS:
                    for together in (False, True):
                        key = f"{name}|{tag}|{layer.name}|{'rows' if together else 'one'}|t{threads}"
                        if not only or key in only:
                            out[key] = digest(name, params, layer, together)
    torch.set_num_threads(before)
    return out


def machine_set(sets: list[dict]) -> tuple[dict | None, dict[str, str]]:
    """The recorded set whose :data:`CANARIES` digests this machine all reproduces (None: no set
    does), and the canaries' digests here."""
    here = compute(sorted({k.split("|")[0] for k in CANARIES}), CANARIES)
    return matching_set(sets, here), here


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--record", action="store_true", help="rewrite the fixture")
    ap.add_argument("--check", action="store_true", help="compare with the fixture (the default)")
    args = ap.parse_args(argv)
    sets = load_sets(FIXTURE)
    found, _ = machine_set(sets)
    if not args.record and found is None:
        print(f"no recorded set matches this machine ({machine_name()}): its {', '.join(CANARIES)} digests differ")
        print(f"{len(sets)} sets; record one with --record, from the code before the change under test")
        return 1
    got = compute()
    if args.record:
        set_to_record(sets, found, machine_name())["fingerprints"] = got
        save_sets(FIXTURE, sets)
        print(f"recorded {len(got)} digests in {FIXTURE} ({len(sets)} sets)")
        return 0
    assert found is not None
    print(f"recorded set: {found['machine']} ({found.get('recorded', '?')})")
    want = found["fingerprints"]
    bad = sorted(k for k in want if got.get(k) != want[k])
    missing = sorted(set(want) - set(got))
    for k in bad[:40]:
        print(f"differs: {k}")
    by_codec: dict[str, int] = {}
    for k in bad:
        by_codec[k.split("|")[0]] = by_codec.get(k.split("|")[0], 0) + 1
    if by_codec:
        print("cases that differ, by codec: " + ", ".join(f"{c} {n}" for c, n in sorted(by_codec.items())))
    print(
        f"{len(want) - len(bad)} of {len(want)} digests identical"
        + (f"; {len(missing)} cases missing" if missing else "")
    )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
