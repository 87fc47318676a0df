"""Data sets read from files: tiny files in each real format (IDX, CIFAR pickles, LEAF JSON, an
ImageFolder of PNGs), bad files named in a DataError, the opt-in download (file:// URLs and a
patched opener; never the network), the by-writer partition, normalization and crop-flip."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import pickle
import tarfile
import urllib.error
from pathlib import Path

import numpy as np
import pytest
import torch

from aiotsim.config import Scenario, scenario_from_dict
from aiotsim.errors import ConfigError, DataError
from aiotsim.learn.compute import BatchStream
from aiotsim.learn.data import download, files
from aiotsim.learn.data.cifar import read_batch
from aiotsim.learn.data.idx import IMAGES_MAGIC, LABELS_MAGIC, read_idx
from aiotsim.learn.data.transforms import augmentation, crop_flip
from aiotsim.learn.datasets import DATASETS, load_dataset
from aiotsim.learn.partition import partition

pytestmark = pytest.mark.usefixtures("one_torch_thread")


# ---------------------------------------------------------------------------------- builders


def idx_bytes(arr: np.ndarray) -> bytes:
    """``arr`` (uint8, 1 or 3 dims) in the IDX format: magic 0x0000080N, big-endian sizes, values."""
    header = (0x0800 + arr.ndim).to_bytes(4, "big") + b"".join(int(d).to_bytes(4, "big") for d in arr.shape)
    return header + arr.astype(np.uint8).tobytes()


def write_idx_dir(root: Path, n_train: int = 20, n_test: int = 10, gz: bool = False, side: int = 28) -> Path:
    """The four MNIST files: images whose pixel (0, 0) is the label, so loading can be checked."""
    rng = np.random.default_rng(0)
    root.mkdir(parents=True, exist_ok=True)
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        labels = (np.arange(n) % 10).astype(np.uint8)
        images = rng.integers(0, 256, (n, side, side), dtype=np.uint8)
        images[:, 0, 0] = labels
        for stem, arr in ((f"{prefix}-images-idx3-ubyte", images), (f"{prefix}-labels-idx1-ubyte", labels)):
            data = idx_bytes(arr)
            if gz:
                (root / f"{stem}.gz").write_bytes(gzip.compress(data))
            else:
                (root / stem).write_bytes(data)
    return root


def cifar_batch(n: int, label_key: str = "labels", classes: int = 10, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {
        b"batch_label": b"tiny",
        b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
        label_key.encode(): [int(k % classes) for k in range(n)],
    }


def write_cifar10(root: Path, per_batch: int = 4) -> Path:
    """data_batch_1..5 + test_batch in cifar-10-batches-py/ (the extracted archive's layout)."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    for k in range(1, 6):
        (folder / f"data_batch_{k}").write_bytes(pickle.dumps(cifar_batch(per_batch, seed=k), protocol=2))
    (folder / "test_batch").write_bytes(pickle.dumps(cifar_batch(10, seed=9), protocol=2))
    return root


def write_leaf(path: Path, users: dict[str, int], side: int = 8, seed: int = 0) -> None:
    """A LEAF JSON file: ``users`` maps writer -> sample count; labels cycle 0..4."""
    rng = np.random.default_rng(seed)
    doc = {"users": list(users), "num_samples": list(users.values()), "user_data": {}}
    for k, (user, n) in enumerate(users.items()):
        doc["user_data"][user] = {
            "x": rng.random((n, side * side)).round(3).tolist(),
            "y": [(k + j) % 5 for j in range(n)],
        }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))


# ---------------------------------------------------------------------------------------- IDX


@pytest.mark.parametrize("gz", [False, True])
def test_idx_plain_and_gz(tmp_path: Path, gz: bool) -> None:
    root = write_idx_dir(tmp_path / "mnist", gz=gz)
    d = load_dataset("mnist-idx", path=root, normalize=False)
    assert d.train_x.shape == (20, 1, 28, 28) and d.test_x.shape == (10, 1, 28, 28)  # official test split
    assert d.num_classes == 10 and d.input_shape == (1, 28, 28)
    assert (d.input_shape, d.num_classes) == files.NOMINAL_SIZES["mnist-idx"][:2]
    # pixel (0, 0) holds the label: the images are the file's, in order, scaled to [0, 1]
    assert torch.equal((d.train_x[:, 0, 0, 0] * 255).round().long(), d.train_y)
    assert d.train_y.tolist() == [k % 10 for k in range(20)]


def test_fashion_mnist_reads_idx_and_normalizes(tmp_path: Path) -> None:
    d = load_dataset("fashion-mnist", path=write_idx_dir(tmp_path / "f"))
    assert abs(float(d.train_x.mean())) < 1e-5 and abs(float(d.train_x.std()) - 1) < 1e-3


def test_idx_wrong_magic_truncated_and_missing(tmp_path: Path) -> None:
    root = write_idx_dir(tmp_path / "m")
    bad = root / "train-labels-idx1-ubyte"
    bad.write_bytes(idx_bytes(np.zeros((20, 2, 2), dtype=np.uint8)))  # an images file as labels
    with pytest.raises(DataError, match=r"train-labels-idx1-ubyte: wrong IDX magic 0x00000803"):
        read_idx(bad, LABELS_MAGIC)
    images = root / "train-images-idx3-ubyte"
    images.write_bytes(images.read_bytes()[:-5])
    with pytest.raises(DataError, match=r"train-images-idx3-ubyte: .*truncated"):
        load_dataset("mnist-idx", path=root)
    images.write_bytes(b"\x00\x00\x08")
    with pytest.raises(DataError, match="train-images-idx3-ubyte: truncated"):
        read_idx(images, IMAGES_MAGIC)
    fresh = write_idx_dir(tmp_path / "fresh")
    (fresh / "t10k-labels-idx1-ubyte").unlink()
    with pytest.raises(DataError, match="fresh: missing IDX file t10k-labels-idx1-ubyte"):
        files.FILE_DATASETS["mnist-idx"](fresh)


def test_idx_truncated_gzip_is_named(tmp_path: Path) -> None:
    root = write_idx_dir(tmp_path / "m", gz=True)
    gz = root / "t10k-images-idx3-ubyte.gz"
    gz.write_bytes(gz.read_bytes()[:30])
    with pytest.raises(DataError, match="t10k-images-idx3-ubyte.gz: cannot read IDX file"):
        load_dataset("mnist-idx", path=root)


# -------------------------------------------------------------------------------------- CIFAR


def test_cifar10_batches(tmp_path: Path) -> None:
    root = write_cifar10(tmp_path / "c10")
    d = load_dataset("cifar10", path=root, normalize=False)
    assert d.train_x.shape == (20, 3, 32, 32) and d.test_x.shape == (10, 3, 32, 32)
    assert (d.input_shape, d.num_classes) == files.NOMINAL_SIZES["cifar10"][:2]
    raw = cifar_batch(4, seed=1)[b"data"]  # data_batch_1: R plane, then G, then B, row-major
    assert torch.equal((d.train_x[:4] * 255).round().to(torch.uint8), torch.from_numpy(raw.reshape(4, 3, 32, 32)))
    # the directory holding the batches works as well as its parent
    assert load_dataset("cifar10", path=root / "cifar-10-batches-py").train_x.shape == (20, 3, 32, 32)


def test_cifar_normalize_is_per_channel(tmp_path: Path) -> None:
    d = load_dataset("cifar10", path=write_cifar10(tmp_path / "c"))
    means = d.train_x.mean(dim=(0, 2, 3))
    stds = d.train_x.std(dim=(0, 2, 3))
    assert torch.allclose(means, torch.zeros(3), atol=1e-5) and torch.allclose(stds, torch.ones(3), atol=1e-3)


def test_cifar100_fine_labels(tmp_path: Path) -> None:
    folder = tmp_path / "cifar-100-python"
    folder.mkdir()
    (folder / "train").write_bytes(pickle.dumps(cifar_batch(30, "fine_labels", 100), protocol=4))
    (folder / "test").write_bytes(pickle.dumps(cifar_batch(7, "fine_labels", 100, seed=3)))
    d = load_dataset("cifar100", path=tmp_path)
    assert (d.input_shape, d.num_classes) == files.NOMINAL_SIZES["cifar100"][:2]
    assert d.train_y.tolist() == list(range(30)) and len(d.test_y) == 7


def test_cifar_bad_files_are_named(tmp_path: Path) -> None:
    root = write_cifar10(tmp_path / "c")
    folder = root / "cifar-10-batches-py"
    (folder / "data_batch_3").unlink()
    with pytest.raises(DataError, match="data_batch_3: missing CIFAR batch file"):
        load_dataset("cifar10", path=root)
    no_labels = cifar_batch(4)
    del no_labels[b"labels"]
    (folder / "data_batch_3").write_bytes(pickle.dumps(no_labels))
    with pytest.raises(DataError, match=r"data_batch_3: CIFAR batch has no b'labels' entry"):
        load_dataset("cifar10", path=root)
    (folder / "data_batch_3").write_bytes(b"not a pickle")
    with pytest.raises(DataError, match="data_batch_3: not a CIFAR python batch"):
        load_dataset("cifar10", path=root)


def test_cifar_batch_with_numpy1_module_names(tmp_path: Path) -> None:
    """The published batches name ``numpy.core.multiarray`` (numpy 1.x), not ``numpy._core``."""
    data = pickle.dumps(cifar_batch(3), protocol=2).replace(b"numpy._core.", b"numpy.core.")
    (tmp_path / "test_batch").write_bytes(data)
    x, y = read_batch(tmp_path / "test_batch", "labels")
    assert x.shape == (3, 3, 32, 32) and y.tolist() == [0, 1, 2]


def test_cifar_pickle_cannot_run_code(tmp_path: Path) -> None:
    evil = tmp_path / "data_batch_1"
    evil.write_bytes(pickle.dumps({b"data": io.BytesIO(b"x"), b"labels": []}))
    with pytest.raises(DataError, match="refusing to load _io.BytesIO"):
        read_batch(evil, "labels")


# ----------------------------------------------------------------------------- LEAF / by-writer


def test_leaf_official_split_and_writers(tmp_path: Path) -> None:
    write_leaf(tmp_path / "leaf" / "train" / "a.json", {"w0": 6, "w1": 3})
    write_leaf(tmp_path / "leaf" / "train" / "b.json", {"w2": 5}, seed=1)
    write_leaf(tmp_path / "leaf" / "test" / "a.json", {"w0": 2, "w2": 2}, seed=2)
    d = load_dataset("femnist", path=tmp_path / "leaf", normalize=False)
    assert d.train_x.shape == (14, 1, 8, 8) and d.test_x.shape == (4, 1, 8, 8)
    assert d.train_writers is not None and d.train_writers.tolist() == [0] * 6 + [1] * 3 + [2] * 5
    assert d.num_classes == 5 and 0 <= float(d.train_x.min()) and float(d.train_x.max()) <= 1


def test_leaf_single_file_holds_out_test_fraction(tmp_path: Path) -> None:
    write_leaf(tmp_path / "all.json", {f"w{k}": 10 for k in range(4)})
    d = load_dataset("femnist", path=tmp_path / "all.json", test_fraction=0.2)
    assert len(d.train_y) + len(d.test_y) == 40 and len(d.test_y) == 10  # 5 classes x round(0.2 x 8)
    assert d.train_writers is not None and len(d.train_writers) == len(d.train_y)


def test_leaf_writer_without_samples(tmp_path: Path) -> None:
    write_leaf(tmp_path / "a.json", {"w0": 4, "empty": 0, "w2": 4})
    d = load_dataset("femnist", path=tmp_path / "a.json", test_fraction=0.25)
    assert d.train_writers is not None and set(d.train_writers.tolist()) <= {0, 2}


def test_leaf_bad_file_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"users": ["u"], "user_data": {}}))
    with pytest.raises(DataError, match="bad.json: not a LEAF file"):
        load_dataset("femnist", path=bad)


def test_by_writer_partition_keeps_writers_whole(tmp_path: Path) -> None:
    write_leaf(tmp_path / "f.json", {"a": 9, "b": 2, "c": 4, "d": 4, "e": 1, "f": 3})
    d = load_dataset("femnist", path=tmp_path / "f.json")
    shards = partition(d.train_y, 3, "by-writer", seed=5, writers=d.train_writers)
    w = d.train_writers.numpy()
    owners = [set(w[s].tolist()) for s in shards]
    assert all(owners) and not (owners[0] & owners[1] or owners[0] & owners[2] or owners[1] & owners[2])
    assert sorted(np.concatenate(shards).tolist()) == list(range(len(w)))
    again = partition(d.train_y, 3, "by-writer", seed=5, writers=d.train_writers)
    assert all(np.array_equal(a, b) for a, b in zip(shards, again))  # deterministic
    with pytest.raises(DataError, match=r"7 nodes but only [56] writers"):
        partition(d.train_y, 7, "by-writer", writers=d.train_writers)
    with pytest.raises(DataError, match="needs per-writer data"):
        partition(d.train_y, 2, "by-writer")


# -------------------------------------------------------------------------------- imagefolder


def write_pngs(root: Path, classes: dict[str, int], mode: str = "RGB", size: tuple[int, int] = (12, 10)) -> None:
    from PIL import Image

    rng = np.random.default_rng(0)
    for label, (name, n) in enumerate(classes.items()):
        (root / name).mkdir(parents=True, exist_ok=True)
        for k in range(n):
            shape = (size[1], size[0], 3) if mode == "RGB" else (size[1], size[0])
            pixels = rng.integers(0, 256, shape, dtype=np.uint8)
            pixels[0, 0] = label
            Image.fromarray(pixels, mode=mode).save(root / name / f"{k:03d}.png")


def test_imagefolder_pngs(tmp_path: Path) -> None:
    write_pngs(tmp_path / "img", {"cat": 5, "dog": 5, "eel": 5})
    d = load_dataset("imagefolder", path=tmp_path / "img", test_fraction=0.2, normalize=False)
    assert d.input_shape == (3, 10, 12) and d.num_classes == 3  # [C, H, W]: 12 wide, 10 high
    assert len(d.train_y) == 12 and sorted(d.test_y.tolist()) == [0, 1, 2]  # one per class held out
    assert torch.equal((d.train_x[:, 0, 0, 0] * 255).round().long(), d.train_y)  # red (0, 0) = label


def test_imagefolder_train_test_dirs_and_gray(tmp_path: Path) -> None:
    write_pngs(tmp_path / "img" / "train", {"a": 3, "b": 2}, mode="L")
    write_pngs(tmp_path / "img" / "test", {"b": 2}, mode="L")
    d = load_dataset("imagefolder", path=tmp_path / "img")
    assert d.input_shape == (1, 10, 12) and d.test_y.tolist() == [1, 1]


def test_imagefolder_mixed_gray_and_colour_is_rgb(tmp_path: Path) -> None:
    write_pngs(tmp_path / "img", {"a": 2}, mode="RGB")
    write_pngs(tmp_path / "img", {"b": 2}, mode="L")
    d = load_dataset("imagefolder", path=tmp_path / "img", test_fraction=0.5, normalize=False)
    assert d.input_shape == (3, 10, 12)
    gray = d.train_x[d.train_y == 1]  # [n, 3, H, W]: the gray values in every channel
    assert torch.equal(gray[:, 0], gray[:, 1]) and torch.equal(gray[:, 0], gray[:, 2])


def test_imagefolder_bad_images_are_named(tmp_path: Path) -> None:
    write_pngs(tmp_path / "img", {"a": 2, "b": 2})
    write_pngs(tmp_path / "img", {"c": 1}, size=(8, 8))
    with pytest.raises(DataError, match=r"c/000.png: image is 8x8, the first one 12x10"):
        load_dataset("imagefolder", path=tmp_path / "img")
    (tmp_path / "img" / "c" / "000.png").write_bytes(b"not a png")
    with pytest.raises(DataError, match=r"c/000.png: cannot decode image"):
        load_dataset("imagefolder", path=tmp_path / "img")


# ----------------------------------------------------------------------------------- download


def tiny_cifar_archive(tmp_path: Path) -> Path:
    src = write_cifar10(tmp_path / "src")
    archive = tmp_path / "cifar-10-python.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(src / "cifar-10-batches-py", arcname="cifar-10-batches-py")
    return archive


def test_download_checksum_match_extracts_and_caches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    archive = tiny_cifar_archive(tmp_path)
    md5 = hashlib.md5(archive.read_bytes()).hexdigest()
    monkeypatch.setitem(download.SOURCES, "cifar10", (download.Remote(archive.as_uri(), md5),))
    cache = tmp_path / "cache"
    d = load_dataset("cifar10", download=True, cache_dir=cache)
    assert d.train_x.shape == (20, 3, 32, 32)
    assert (cache / "cifar10" / "cifar-10-python.tar.gz").is_file()
    assert (cache / "cifar10" / "cifar-10-batches-py" / "test_batch").is_file()
    # cached: found again without download, and a second download fetches nothing
    assert load_dataset("cifar10", cache_dir=cache).train_x.shape == (20, 3, 32, 32)
    archive.unlink()
    assert load_dataset("cifar10", download=True, cache_dir=cache).test_x.shape == (10, 3, 32, 32)


def test_download_checksum_mismatch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    archive = tiny_cifar_archive(tmp_path)
    monkeypatch.setitem(download.SOURCES, "cifar10", (download.Remote(archive.as_uri(), "0" * 32),))
    cache = tmp_path / "cache"
    with pytest.raises(DataError, match=r"checksum mismatch for file://.*expected 0{32}"):
        load_dataset("cifar10", download=True, cache_dir=cache)
    assert not any((cache / "cifar10").iterdir())  # the bad file was removed


def test_download_idx_gz_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = write_idx_dir(tmp_path / "src", gz=True)
    remotes = tuple(download.Remote(p.as_uri(), hashlib.md5(p.read_bytes()).hexdigest()) for p in sorted(src.iterdir()))
    monkeypatch.setitem(download.SOURCES, "fashion-mnist", remotes)
    d = load_dataset("fashion-mnist", download=True, cache_dir=tmp_path / "cache")
    assert d.train_x.shape == (20, 1, 28, 28)


def test_tar_members_outside_the_directory_are_refused(tmp_path: Path) -> None:
    archive = tmp_path / "evil.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        info = tarfile.TarInfo("../evil.txt")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    with tarfile.open(archive) as tar, pytest.raises(DataError, match="refusing member '../evil.txt'"):
        download._safe_members(tar, tmp_path / "out", archive)
    with pytest.raises(DataError, match="evil.tar.gz: cannot extract"):
        download.extract(archive, tmp_path / "out")
    assert not (tmp_path / "evil.txt").exists()


def test_download_offline_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def offline(url: str, timeout: float) -> None:
        raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(download.urllib.request, "urlopen", offline)
    cache = tmp_path / "cache"
    with pytest.raises(DataError, match=r"could not download https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz: "
                       r".*name resolution; download it by hand into .*cifar10 or set data.path"):  # fmt: skip
        load_dataset("cifar10", download=True, cache_dir=cache)


def test_no_path_no_download_says_how(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="set data.path .* or set data.download = true"):
        load_dataset("mnist-idx", cache_dir=tmp_path)
    with pytest.raises(DataError, match="does not exist"):
        load_dataset("cifar10", path=tmp_path / "nowhere")


# ------------------------------------------------------------------------------ augmentation


def test_crop_flip_is_seeded_and_shape_preserving() -> None:
    x = torch.arange(2 * 3 * 32 * 32, dtype=torch.float32).reshape(2, 3, 32, 32)
    a = crop_flip(x, torch.Generator().manual_seed(1))
    b = crop_flip(x, torch.Generator().manual_seed(1))
    assert a.shape == x.shape and torch.equal(a, b)
    # padding 0: the crop is the image, only flips remain
    c = crop_flip(x, torch.Generator().manual_seed(2), padding=0)
    assert all(torch.equal(c[i], x[i]) or torch.equal(c[i], x[i].flip(2)) for i in range(2))
    assert augmentation("none") is None and augmentation("crop-flip") is crop_flip
    with pytest.raises(ConfigError, match="valid names: none, crop-flip"):
        augmentation("mixup")


def test_batch_stream_transform_keeps_batch_order() -> None:
    x = torch.randn(10, 3, 8, 8)
    y = torch.arange(10)
    plain = BatchStream(x, y, np.arange(10), 4, seed=3, device=torch.device("cpu"))
    aug = BatchStream(x, y, np.arange(10), 4, seed=3, device=torch.device("cpu"), transform=crop_flip)
    for _ in range(4):
        (xp, yp), (xa, ya) = plain.next(), aug.next()
        assert torch.equal(yp, ya) and xa.shape == xp.shape


# ------------------------------------------------------------------------------ config + run


def test_config_keys_and_cross_checks(tmp_path: Path) -> None:
    assert {"mnist-idx", "fashion-mnist", "cifar10", "cifar100", "femnist", "imagefolder"} <= set(DATASETS)
    s = scenario_from_dict({"data": {"dataset": "cifar10", "path": str(tmp_path), "augment": "crop-flip"}})
    assert s.data.path == str(tmp_path) and s.data.augment == "crop-flip" and s.data.normalize is True
    assert s.data.download is False and s.data.cache_dir == "~/.cache/aiotsim"
    with pytest.raises(ConfigError) as err:
        scenario_from_dict({"data": {"dataset": "mnist", "path": "x", "download": True, "partition": "by-writer"}})
    text = str(err.value)
    assert "data.path: dataset 'mnist' reads no files" in text
    assert "data.download: dataset 'mnist' has no download" in text
    assert "data.partition: 'by-writer' needs per-writer data" in text


def _cifar_scenario(root: Path, augment: str) -> Scenario:
    return scenario_from_dict(
        {
            "scenario": {"name": "cifar-tiny", "seed": 1, "iterations": 2},
            "data": {"dataset": "cifar10", "path": str(root), "batch_size": 4, "augment": augment},
            "model": {"name": "lenet5"},
            "training": {"eval_every": 1},
            "nodes": {"count": 2, "compute_model": "flops"},
        }
    )


def test_two_iteration_run_on_tiny_cifar10(tmp_path: Path) -> None:
    from aiotsim.api import run_scenario

    root = write_cifar10(tmp_path / "c10")
    summary = run_scenario(_cifar_scenario(root, "crop-flip"), tmp_path / "a", device="cpu")
    assert summary["status"] == "complete" and summary["iterations"] == 2 and summary["nodes"] == 2
    run_scenario(_cifar_scenario(root, "crop-flip"), tmp_path / "b", device="cpu")
    run_scenario(_cifar_scenario(root, "none"), tmp_path / "c", device="cpu")
    metrics = {k: (tmp_path / k / "metrics.csv").read_text() for k in "abc"}
    assert metrics["a"] == metrics["b"]  # augmentation is seeded: the same run twice
    assert metrics["a"] != metrics["c"]  # and it does change the batches (the losses)


def test_run_by_writer_on_leaf(tmp_path: Path) -> None:
    from aiotsim.api import run_scenario

    write_leaf(tmp_path / "leaf.json", {f"w{k}": 6 for k in range(5)}, side=28)
    scenario = scenario_from_dict(
        {
            "scenario": {"iterations": 2, "seed": 2},
            "data": {
                "dataset": "femnist",
                "path": str(tmp_path / "leaf.json"),
                "partition": "by-writer",
                "batch_size": 4,
            },  # fmt: skip
            "model": {"name": "mlp"},
            "training": {"eval_every": 1},
            "nodes": {"count": 2, "compute_model": "flops"},
        }
    )
    run_scenario(scenario, tmp_path / "run", device="cpu")
    assert (tmp_path / "run" / "summary.json").is_file()
