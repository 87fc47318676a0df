"""Tampered checkpoints and run directories, and resume identity.

A small real run (``--checkpoint-every 1``) is copied and damaged in one way per case: bytes
(truncated, random, flipped, empty), structure (a key dropped or made absurd, a tensor of the
wrong shape, a NaN clock, a code payload), written through the package's own checkpoint writer so
that a digest over the file still matches, or the run directory's other files (non-UTF-8 or
truncated CSVs, a changed scenario, deleted files). ``aiotsim run --resume DIR`` must refuse every
one with exit 2 and a message; ``aiotsim plot DIR`` must exit 0 or 2, never crash or hang.
"""

from __future__ import annotations

import csv
import io
import json
import math
import random
import shutil
from pathlib import Path
from typing import Any

from fuzz.datafiles import _Payload

CKPT = "checkpoint.pt"


def _load_state(path: Path) -> Any:
    """The checkpoint's state through the package's reader (whatever its file format)."""
    from aiotsim.sim import checkpoint

    return checkpoint.load(path)


def _save_state(path: Path, state: Any) -> None:
    from aiotsim.sim import checkpoint

    checkpoint.save(path, state)


def _touch_marker(marker: Path) -> _Payload:
    return _Payload(exec, (f"open({str(marker)!r}, 'w').write('ran')",))


def _scalars(state: dict[str, Any]) -> list[str]:
    return sorted(k for k, v in state.items() if isinstance(v, (int, float)) and not isinstance(v, bool))


def _tensors(state: Any, prefix: str = "") -> list[tuple[Any, Any, str]]:
    """``(container, key, dotted)`` of every tensor inside nested dicts and lists."""
    import torch

    out = []
    items = state.items() if isinstance(state, dict) else enumerate(state) if isinstance(state, list) else []
    for k, v in items:
        if isinstance(v, torch.Tensor):
            out.append((state, k, f"{prefix}{k}"))
        elif isinstance(v, (dict, list)):
            out += _tensors(v, f"{prefix}{k}.")
    return out


def tamper_state(state: dict[str, Any], rng: random.Random, marker: Path) -> str:
    """One structural change to a loaded checkpoint state, in place; returns what was done."""
    import torch

    kind = rng.choice(["drop-key", "absurd-scalar", "nan-scalar", "shape", "dtype", "nan-tensor", "payload",
                       "unknown-key", "scenario-text", "format"])  # fmt: skip
    if kind == "drop-key":
        key = rng.choice(sorted(state))
        del state[key]
        return f"state: drop {key}"
    if kind in ("absurd-scalar", "nan-scalar") and _scalars(state):
        key = rng.choice(_scalars(state))
        state[key] = rng.choice([10**9, -5, 2**62, -1]) if kind == "absurd-scalar" else math.nan
        return f"state: {key}={state[key]}"
    tensors = _tensors(state)
    if kind == "nan-tensor":
        tensors = [x for x in tensors if x[0][x[1]].is_floating_point() and x[0][x[1]].numel()]
    if kind in ("shape", "dtype", "nan-tensor") and tensors:
        box, key, name = rng.choice(tensors)
        t = box[key]
        if kind == "shape":
            box[key] = torch.zeros(t.numel() + 1) if t.numel() else torch.zeros(3)
        elif kind == "dtype":
            box[key] = t.to(torch.int64) if t.is_floating_point() else t.to(torch.float64)
        else:
            box[key] = t.clone().view(-1).index_fill(0, torch.tensor([0]), math.nan).view(t.shape)
        return f"state: {kind} {name}"
    if kind == "payload":
        state[rng.choice(sorted(state))] = _touch_marker(marker)
        return "state: code payload"
    if kind == "scenario-text" and isinstance(state.get("scenario"), str):
        state["scenario"] = state["scenario"].replace('name = "mlp"', 'name = "lenet5"') + "\n[fuzz]\nx = 1\n"
        return "state: scenario text changed"
    if kind == "format" and "format" in state:
        state["format"] = rng.choice([0, 999, "1", None])
        return f"state: format={state['format']!r}"
    state["fuzz_unknown"] = 1
    return "state: unknown key"


def tamper_bytes(path: Path, rng: random.Random, marker: Path) -> str:
    """Byte-level damage to the checkpoint file; returns what was done."""
    raw = path.read_bytes()
    kind = rng.choice(["truncate", "empty", "random", "flip", "flip-one", "torch-payload", "zip-junk"])
    if kind == "truncate":
        path.write_bytes(raw[: rng.randrange(1, len(raw))])
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "random":
        path.write_bytes(rng.randbytes(rng.choice([10, 1000, len(raw)])))
    elif kind in ("flip", "flip-one"):
        buf = bytearray(raw)
        for _ in range(50 if kind == "flip" else 1):
            at = rng.randrange(len(buf))
            buf[at] ^= 1 << rng.randrange(8)
        path.write_bytes(bytes(buf))
    elif kind == "torch-payload":  # an old-style checkpoint: torch.save of an object that runs code
        import torch

        torch.save({"iteration": 1, "model": _touch_marker(marker)}, path)
    else:
        path.write_bytes(b"PK\x03\x04" + raw[4:])
    return f"bytes: {kind}"


def _non_utf8(path: Path, rng: random.Random) -> str:
    raw = path.read_bytes()
    at = rng.randrange(len(raw)) if raw else 0
    path.write_bytes(raw[:at] + b"\xff\xfe\x80" + raw[at:])
    return f"{path.name}: non-UTF-8"


def tamper_files(run: Path, rng: random.Random) -> str:
    """Damage to the run directory's other files; returns what was done."""
    kind = rng.choice(["metrics-utf8", "evals-utf8", "metrics-truncate", "metrics-junk", "scenario-delete",
                       "scenario-damage", "scenario-model", "summary-damage", "metrics-delete",
                       "checkpoint-dir"])  # fmt: skip
    if kind.endswith("-utf8"):
        return _non_utf8(run / f"{kind.split('-')[0]}.csv", rng)
    if kind == "metrics-truncate":
        raw = (run / "metrics.csv").read_bytes()
        (run / "metrics.csv").write_bytes(raw[: rng.randrange(len(raw))])
    elif kind == "metrics-junk":  # a damaged row among those a resume keeps (after the header)
        header, _, rows = (run / "metrics.csv").read_text().partition("\n")
        junk = rng.choice(["nan,nan,nan\n", "1,2\n", "x" * 5000 + "\n", "0" + ",1e400" * 16 + "\n"])
        (run / "metrics.csv").write_text(header + "\n" + junk + rows)
    elif kind == "scenario-delete":
        (run / "scenario.toml").unlink()
    elif kind == "scenario-damage":
        (run / "scenario.toml").write_text('[scenario\nname = "x"\n')
    elif kind == "scenario-model":
        text = (run / "scenario.toml").read_text()
        (run / "scenario.toml").write_text(text.replace('name = "mlp"', 'name = "lenet5"'))
    elif kind == "summary-damage":
        (run / "summary.json").write_text("{not json")
    elif kind == "metrics-delete":
        (run / "metrics.csv").unlink()
    else:
        (run / CKPT).unlink()
        (run / CKPT).mkdir()
    return f"files: {kind}"


def tamper(run: Path, rng: random.Random, marker: Path) -> str:
    """One tampering of a copied run directory (bytes, state or files); returns what was done."""
    layer = rng.choices(["bytes", "state", "files"], [3, 4, 3])[0]
    if layer == "bytes":
        return tamper_bytes(run / CKPT, rng, marker)
    if layer == "files":
        return tamper_files(run, rng)
    state = _load_state(run / CKPT)
    what = tamper_state(state, rng, marker)
    try:
        _save_state(run / CKPT, state)
    except (TypeError, ValueError):  # the writer refuses what it cannot store: write it as torch.save would
        import torch

        torch.save(state, run / CKPT)
        what += " (written by torch.save: the package's writer refused it)"
    return what


def copy_run(src: Path, dst: Path) -> Path:
    """A copy of run directory ``src`` at ``dst`` (replacing what is there)."""
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst, symlinks=True)
    return dst


def csv_rows(path: Path) -> list[dict[str, str]]:
    """Rows of a CSV file (empty when it is missing)."""
    if not path.exists():
        return []
    return list(csv.DictReader(io.StringIO(path.read_text(errors="replace"))))


def all_finite(run: Path) -> bool:
    """Every number in metrics.csv, evals.csv and summary.json is finite (no silent NaN or inf)."""
    for name in ("metrics.csv", "evals.csv"):
        for row in csv_rows(run / name):
            for value in row.values():
                try:
                    if not math.isfinite(float(value)):
                        return False
                except (TypeError, ValueError):
                    continue
    summary = json.loads((run / "summary.json").read_text())
    return all(math.isfinite(v) for v in summary.values() if isinstance(v, float))
