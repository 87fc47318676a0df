"""Damaged data directories: IDX (MNIST layout) and CIFAR python batches.

A case writes a small valid data set (a few dozen images) into the case's directory, then damages
it: an empty or partial directory, truncated files, IDX headers that lie about the counts or
dimensions, wrong magic numbers, labels out of range, gzip that is not; CIFAR pickles with an
unknown codec, a huge array, wrong keys and shapes, and pickles whose loading would run code. A
code payload would create ``checks['marker']``: the campaign fails the case if that file exists.
"""

from __future__ import annotations

import copy
import gzip
import pickle
import random
import struct
from pathlib import Path
from typing import Any

import numpy as np

IMAGES_MAGIC, LABELS_MAGIC = 0x00000803, 0x00000801
IDX_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
CIFAR10 = [f"data_batch_{k}" for k in range(1, 6)] + ["test_batch"]


def idx_bytes(arr: np.ndarray, magic: int | None = None, dims: list[int] | None = None) -> bytes:
    """An IDX file of uint8 ``arr`` (magic and dimensions may be forced to lie)."""
    dims = list(arr.shape) if dims is None else dims
    magic = (0x0800 | arr.ndim) if magic is None else magic
    return struct.pack(">I", magic) + b"".join(struct.pack(">I", d & 0xFFFFFFFF) for d in dims) + arr.tobytes()


def write_idx_set(directory: Path, rng: random.Random, n_train: int = 60, n_test: int = 20) -> None:
    """A valid small MNIST-layout set: 28x28 images, labels 0..9 (every class present)."""
    gen = np.random.default_rng(rng.randrange(2**32))
    directory.mkdir(parents=True, exist_ok=True)
    for stem, n in (("train", n_train), ("t10k", n_test)):
        labels = (np.arange(n) % 10).astype(np.uint8)
        images = gen.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
        (directory / f"{stem}-images-idx3-ubyte").write_bytes(idx_bytes(images))
        (directory / f"{stem}-labels-idx1-ubyte").write_bytes(idx_bytes(labels))


def _lie(path: Path, rng: random.Random) -> str:
    raw = path.read_bytes()
    ndim = raw[3]
    dims = [struct.unpack(">I", raw[4 + 4 * k : 8 + 4 * k])[0] for k in range(ndim)]
    k = rng.randrange(ndim)
    dims[k] = rng.choice([0, dims[k] + 1, dims[k] * 1000, 2**31, 2**32 - 1])
    path.write_bytes(raw[:4] + b"".join(struct.pack(">I", d) for d in dims) + raw[4 + 4 * ndim :])
    return f"dims[{k}]={dims[k]}"


def damage_idx(directory: Path, rng: random.Random) -> str:
    """One damage to a valid IDX set; returns what was done."""
    path = directory / rng.choice(IDX_FILES)
    raw = path.read_bytes()
    kind = rng.choice(["empty-dir", "missing", "truncate", "lie", "magic", "ndim", "labels", "count", "gzip",
                       "not-gzip", "file-not-dir", "ok", "zero-images", "gz-bomb"])  # fmt: skip
    if kind == "empty-dir":
        for f in IDX_FILES:
            (directory / f).unlink()
    elif kind == "missing":
        path.unlink()
    elif kind == "truncate":
        path.write_bytes(raw[: rng.choice([0, 3, 7, 15, len(raw) // 2, len(raw) - 1])])
    elif kind == "lie":
        kind += ":" + _lie(path, rng)
    elif kind == "magic":
        path.write_bytes(struct.pack(">I", rng.choice([0, 0x0D03, 0x0803 + 0x100, 0xFFFFFFFF])) + raw[4:])
    elif kind == "ndim":  # the magic's last byte is the number of dimensions
        path.write_bytes(raw[:3] + bytes([rng.choice([0, 2, 4, 255])]) + raw[4:])
    elif kind == "labels" and "labels" in path.name:
        path.write_bytes(raw[:-1] + bytes([rng.choice([10, 200, 255])]))
    elif kind == "count":
        arr = np.zeros((7, 28, 28), np.uint8) if "images" in path.name else np.zeros(7, np.uint8)
        path.write_bytes(idx_bytes(arr))
    elif kind == "zero-images":
        arr = np.zeros((0, 28, 28), np.uint8) if "images" in path.name else np.zeros(0, np.uint8)
        path.write_bytes(idx_bytes(arr))
    elif kind == "gzip":
        path.unlink()
        path.with_name(path.name + ".gz").write_bytes(gzip.compress(raw)[: rng.choice([10, 30, 10**9])])
    elif kind == "not-gzip":
        path.write_bytes(b"\x1f\x8b" + raw[2:])
    elif kind == "gz-bomb":  # 100 MB of zeros in ~100 KB: an honest header, a big but legal file
        n = 100_000_000 // 784
        path.unlink()
        body = idx_bytes(np.zeros(0, np.uint8), IMAGES_MAGIC, [n, 28, 28]) + bytes(n * 784)
        path.with_name(path.name + ".gz").write_bytes(gzip.compress(body, compresslevel=1))
    elif kind == "file-not-dir":
        return "file-not-dir"
    return kind


class _Payload:
    """Pickles as a call of ``func(*args)``: what a hostile batch file would do."""

    def __init__(self, func: Any, args: tuple) -> None:
        self.func, self.args = func, args

    def __reduce__(self) -> tuple:
        return self.func, self.args


def _huge_array() -> Any:
    from numpy.core.multiarray import _reconstruct  # the allowed constructor, asked for a terabyte

    return _Payload(_reconstruct, (np.ndarray, (10**12,), b"B"))


def cifar_payload(kind: str, marker: Path) -> bytes:
    """Pickle bytes for a hostile or malformed CIFAR batch of ``kind``."""
    import builtins
    import os
    import subprocess

    touch = f"open({str(marker)!r}, 'w').write('ran')"
    if kind == "code-os-system":
        obj: Any = {b"data": _Payload(os.system, (f"touch {marker}",)), b"labels": [0]}
    elif kind == "code-exec":
        obj = _Payload(builtins.exec, (touch,))
    elif kind == "code-eval":
        obj = {b"data": _Payload(builtins.eval, (touch,)), b"labels": [0]}
    elif kind == "code-subprocess":
        obj = _Payload(subprocess.call, (["touch", str(marker)],))
    elif kind == "huge-array":
        obj = {b"data": _huge_array(), b"labels": [0]}
    else:
        raise ValueError(kind)
    return pickle.dumps(obj, protocol=2)


# protocol 2: _codecs.encode("abc", "fuzz-codec") -> LookupError inside the unpickler
UNKNOWN_CODEC = b"\x80\x02c_codecs\nencode\nq\x00X\x03\x00\x00\x00abcX\n\x00\x00\x00fuzz-codec\x86Rq\x01."


def write_cifar_set(directory: Path, rng: random.Random, n: int = 12) -> None:
    """A valid small CIFAR-10 python set: six batches of ``n`` 32x32 RGB images."""
    gen = np.random.default_rng(rng.randrange(2**32))
    directory.mkdir(parents=True, exist_ok=True)
    for name in CIFAR10:
        batch = {b"data": gen.integers(0, 256, size=(n, 3072), dtype=np.uint8), b"labels": [k % 10 for k in range(n)]}
        (directory / name).write_bytes(pickle.dumps(batch, protocol=2))


def damage_cifar(directory: Path, rng: random.Random, marker: Path) -> str:
    """One damage to a valid CIFAR-10 set; returns what was done."""
    path = directory / rng.choice(CIFAR10)
    kind = rng.choice(["code-os-system", "code-exec", "code-eval", "code-subprocess", "huge-array", "unknown-codec",
                       "truncate", "empty", "not-dict", "no-labels", "labels-str", "labels-range", "data-float",
                       "data-shape", "count-mismatch", "missing", "empty-dir", "ok", "bytes-keys-str"])  # fmt: skip
    raw = path.read_bytes()
    good_labels = list(range(4))
    replace: dict[str, Any] = {
        "truncate": raw[: len(raw) // 2],
        "empty": b"",
        "unknown-codec": UNKNOWN_CODEC,
        "not-dict": pickle.dumps([1, 2, 3], protocol=2),
        "no-labels": pickle.dumps({b"data": np.zeros((4, 3072), np.uint8)}, protocol=2),
        "labels-str": pickle.dumps({b"data": np.zeros((4, 3072), np.uint8), b"labels": ["a"] * 4}, protocol=2),
        "labels-range": pickle.dumps({b"data": np.zeros((4, 3072), np.uint8), b"labels": [0, 1, 2, 99]}, protocol=2),
        "data-float": pickle.dumps({b"data": np.zeros((4, 3072)), b"labels": good_labels}, protocol=2),
        "data-shape": pickle.dumps({b"data": np.zeros((4, 100), np.uint8), b"labels": good_labels}, protocol=2),
        "count-mismatch": pickle.dumps({b"data": np.zeros((4, 3072), np.uint8), b"labels": [0]}, protocol=2),
        "bytes-keys-str": pickle.dumps({"data": np.zeros((4, 3072), np.uint8), "labels": good_labels}, protocol=2),
    }
    if kind.startswith("code-") or kind == "huge-array":
        path.write_bytes(cifar_payload(kind, marker))
    elif kind in replace:
        path.write_bytes(replace[kind])
    elif kind == "missing":
        path.unlink()
    elif kind == "empty-dir":
        for f in CIFAR10:
            (directory / f).unlink()
    return kind


def data_case(rng: random.Random, case_dir: Path, bases: dict[str, dict[str, Any]]) -> tuple:
    """A scenario reading a damaged data directory (IDX or CIFAR-10)."""
    data = copy.deepcopy(bases["tiny"])
    marker = case_dir / "PAYLOAD_RAN"
    directory = case_dir / "data"
    if rng.random() < 0.55:
        data["data"]["dataset"] = rng.choice(["mnist-idx", "fashion-mnist"])
        write_idx_set(directory, rng)
        kind = "idx:" + damage_idx(directory, rng)
    else:
        data["data"]["dataset"] = "cifar10"
        write_cifar_set(directory, rng)
        kind = "cifar:" + damage_cifar(directory, rng, marker)
    data["data"]["path"] = str(directory / IDX_FILES[0]) if kind.endswith("file-not-dir") else str(directory)
    data["data"]["eval_samples"] = 10
    data["model"]["name"] = rng.choice(["mlp", "mlp", "lenet5"])
    return data, f"data {kind}", {"marker": str(marker)}
