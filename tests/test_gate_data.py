"""The gate reads the data files the run will read, as the run reads them, and the readers turn
crafted files into a DataError (exit 2) instead of a traceback, without running their code
(issue 43, "The gate leaks": data)."""

from __future__ import annotations

import gzip
import pickle
import zlib
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from aiotsim.cli import app
from aiotsim.errors import DataError
from aiotsim.learn.data.cifar import read_batch
from aiotsim.learn.data.idx import IMAGES_MAGIC, read_idx

runner = CliRunner()


def _scenario(tmp_path: Path, tiny_scenario: Path, dataset: str, path: Path) -> Path:
    s = tmp_path / "s.toml"
    text = tiny_scenario.read_text().replace('dataset = "digits"', f'dataset = "{dataset}"\npath = "{path}"')
    s.write_text(text)
    return s


def _exit2(*args: str) -> str:
    res = runner.invoke(app, list(args))
    assert res.exit_code == 2, (args, res.output, res.exception)
    assert isinstance(res.exception, SystemExit) and "Traceback" not in res.output
    return res.output


@pytest.mark.parametrize(
    ("dataset", "message"),
    [
        ("mnist-idx", "missing IDX file train-images-idx3-ubyte (or train-images-idx3-ubyte.gz)"),
        ("fashion-mnist", "missing IDX file train-images-idx3-ubyte"),
        ("cifar10", "data_batch_1: missing CIFAR batch file"),
        ("cifar100", "train: missing CIFAR batch file"),
        ("femnist", "no LEAF *.json files"),
        ("imagefolder", "no class subdirectories with images"),
    ],
)
def test_an_empty_data_directory_is_refused_by_validate(tmp_path, tiny_scenario, dataset, message) -> None:
    # validate used to check only that data.path exists, and say ok; run then exited 2
    (tmp_path / "empty").mkdir()
    s = _scenario(tmp_path, tiny_scenario, dataset, tmp_path / "empty")
    out = _exit2("validate", str(s))
    assert "data: " in out and message in out.replace("\n", "")


def _idx(dims: list[int], payload: bytes, magic: int = IMAGES_MAGIC) -> bytes:
    return magic.to_bytes(4, "big") + b"".join(d.to_bytes(4, "big") for d in dims) + payload


def test_validate_reads_idx_headers_and_sizes(tmp_path, tiny_scenario) -> None:
    d = tmp_path / "idx"
    d.mkdir()
    for stem, dims in (("train-images-idx3-ubyte", [4, 2, 2]), ("t10k-images-idx3-ubyte", [4, 2, 2])):
        (d / stem).write_bytes(_idx(dims, bytes(16)))
    for stem in ("train-labels-idx1-ubyte", "t10k-labels-idx1-ubyte"):
        (d / stem).write_bytes(_idx([4], bytes(4), 0x801))
    s = _scenario(tmp_path, tiny_scenario, "mnist-idx", d)
    res = runner.invoke(app, ["validate", str(s)])
    assert res.exit_code == 0, res.output  # all four files well formed: the gate passes
    (d / "t10k-labels-idx1-ubyte").write_bytes(_idx([4], bytes(3), 0x801))  # one value short
    assert "t10k-labels-idx1-ubyte: IDX dimensions [4] need 4 bytes of values, found 3 (truncated)" in _exit2(
        "validate", str(s)
    ).replace("\n", "")
    (d / "t10k-labels-idx1-ubyte").write_bytes(_idx([4, 2, 2], bytes(16)))  # an images file as labels
    assert "wrong IDX magic 0x00000803, expected 0x00000801" in _exit2("validate", str(s))


def test_an_idx_header_declaring_gigabytes_is_refused_before_reading(tmp_path) -> None:
    # 12 gzip-compressed bytes of payload whose header declares 2^32 x 2 x 2 values: the reader
    # used to inflate everything there was before comparing; now the header alone decides
    p = tmp_path / "train-images-idx3-ubyte.gz"
    p.write_bytes(gzip.compress(_idx([2**32 - 1, 2, 2], bytes(12))))
    with pytest.raises(DataError, match=r"declare 17,179,869,180 bytes, more than the 1,073,741,824"):
        read_idx(p, IMAGES_MAGIC)


def _cifar_dir(tmp_path: Path, first: bytes) -> Path:
    """A CIFAR-10 directory whose data_batch_1 holds ``first`` and every other batch 2 images."""
    d = tmp_path / "cifar"
    d.mkdir()
    good = pickle.dumps({b"data": np.zeros((2, 3072), np.uint8), b"labels": [0, 1]}, protocol=2)
    for name in [f"data_batch_{k}" for k in range(2, 6)] + ["test_batch"]:
        (d / name).write_bytes(good)
    (d / "data_batch_1").write_bytes(first)
    return d


# crafted pickles (protocol 2 opcodes): _codecs.encode('x', 'no-such-codec') -> LookupError;
# numpy's _reconstruct(ndarray, (10**13,), b'b') -> a 10 TB array, MemoryError
UNKNOWN_CODEC = b"\x80\x02c_codecs\nencode\nX\x01\x00\x00\x00xX\x0d\x00\x00\x00no-such-codec\x86R."
HUGE_ARRAY = b"\x80\x02cnumpy.core.multiarray\n_reconstruct\ncnumpy\nndarray\n\x8a\x06" + (10**13).to_bytes(6, "little")
HUGE_ARRAY += b"\x85U\x01b\x87R."


@pytest.mark.parametrize(
    ("batch", "message"),
    [(UNKNOWN_CODEC, "LookupError: unknown encoding: no-such-codec"), (HUGE_ARRAY, "an array too large to hold")],
)
def test_a_crafted_cifar_batch_is_a_data_error(tmp_path, tiny_scenario, batch, message) -> None:
    d = _cifar_dir(tmp_path, batch)
    with pytest.raises(DataError, match=f"data_batch_1: not a CIFAR python batch: .*{message}"):
        read_batch(d / "data_batch_1", "labels")
    s = _scenario(tmp_path, tiny_scenario, "cifar10", d)
    for cmd in (["validate", str(s)], ["run", str(s), "--out", str(tmp_path / "out")]):
        assert message in _exit2(*cmd).replace("\n", "")  # validate parses the batches as run does


def test_a_code_carrying_cifar_batch_runs_nothing(tmp_path, tiny_scenario) -> None:
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (__import__("os").system, (f"touch {marker}",))

    d = _cifar_dir(tmp_path, pickle.dumps({b"data": Payload(), b"labels": [0]}, protocol=2))
    with pytest.raises(DataError, match=r"refusing to load (posix|os)\.system"):
        read_batch(d / "data_batch_1", "labels")
    s = _scenario(tmp_path, tiny_scenario, "cifar10", d)
    assert "refusing to load" in _exit2("validate", str(s))
    assert not marker.exists()


def test_a_cifar_batch_over_the_size_bound_is_refused_unread(tmp_path, monkeypatch) -> None:
    import aiotsim.learn.data.cifar as cifar

    d = _cifar_dir(tmp_path, b"\x80" + bytes(100))
    monkeypatch.setattr(cifar, "MAX_BATCH_BYTES", 64)
    with pytest.raises(DataError, match="data_batch_1: 101 bytes, more than a CIFAR batch .64 at most"):
        read_batch(d / "data_batch_1", "labels")


def test_validate_finds_damaged_gzip_and_count_mismatch(tmp_path, tiny_scenario) -> None:
    # findings F1 of the fuzz campaign: each validated ok, then run exited 2
    d = tmp_path / "idx"
    d.mkdir()
    (d / "train-images-idx3-ubyte.gz").write_bytes(gzip.compress(_idx([4, 2, 2], bytes(16))))
    (d / "t10k-images-idx3-ubyte").write_bytes(_idx([4, 2, 2], bytes(16)))
    (d / "train-labels-idx1-ubyte").write_bytes(_idx([3], bytes(3), 0x801))  # 3 labels for 4 images
    (d / "t10k-labels-idx1-ubyte").write_bytes(_idx([4], bytes(4), 0x801))
    s = _scenario(tmp_path, tiny_scenario, "mnist-idx", d)
    assert "train split has 4 images but 3 labels" in _exit2("validate", str(s))
    (d / "train-labels-idx1-ubyte").write_bytes(_idx([4], bytes(4), 0x801))
    gz = d / "train-images-idx3-ubyte.gz"
    gz.write_bytes(gz.read_bytes()[:-12])  # the stream's end (and its CRC) cut off; the header intact
    assert "train-images-idx3-ubyte.gz: cannot read IDX file" in _exit2("validate", str(s)).replace("\n", "")


def test_validate_refuses_an_empty_cifar_batch(tmp_path, tiny_scenario) -> None:
    d = _cifar_dir(tmp_path, b"")  # run: "not a CIFAR python batch: Ran out of input"
    s = _scenario(tmp_path, tiny_scenario, "cifar10", d)
    assert "data_batch_1: not a CIFAR python batch (not a pickle)" in _exit2("validate", str(s)).replace("\n", "")


def _png_header(width: int, height: int) -> bytes:
    """A PNG's signature, IHDR (8-bit greyscale) and IEND: enough for Pillow to read its size."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return len(body).to_bytes(4, "big") + kind + body + zlib.crc32(kind + body).to_bytes(4, "big")

    ihdr = width.to_bytes(4, "big") + height.to_bytes(4, "big") + bytes([8, 0, 0, 0, 0])
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IEND", b"")


def test_an_image_declaring_billions_of_pixels_is_refused(tmp_path, tiny_scenario) -> None:
    # 60,000 x 60,000 = 3.6e9 pixels, over twice Pillow's MAX_IMAGE_PIXELS: its
    # DecompressionBombError (not an OSError) went through as a traceback
    pytest.importorskip("PIL")
    (tmp_path / "img" / "a").mkdir(parents=True)
    (tmp_path / "img" / "a" / "0.png").write_bytes(_png_header(60_000, 60_000))
    s = _scenario(tmp_path, tiny_scenario, "imagefolder", tmp_path / "img")
    assert "0.png: cannot decode image: Image size (3600000000 pixels) exceeds limit" in _exit2(
        "validate", str(s)
    ).replace("\n", "")


def test_leaf_json_nested_too_deep_is_a_data_error(tmp_path, tiny_scenario) -> None:
    (tmp_path / "leaf").mkdir()
    (tmp_path / "leaf" / "a.json").write_text("[" * 100_000 + "]" * 100_000)  # json.loads: RecursionError
    s = _scenario(tmp_path, tiny_scenario, "femnist", tmp_path / "leaf")
    assert "a.json: cannot read LEAF JSON: maximum recursion depth exceeded" in _exit2("validate", str(s)).replace(
        "\n", ""
    )
