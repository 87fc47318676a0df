"""A directory of class subdirectories of image files (torchvision's ImageFolder layout).

::

    path/cat/0001.png  path/cat/0002.jpg  path/dog/0001.png ...

Classes are the subdirectory names in sorted order (label = position). When ``path`` has ``train/``
and ``test/`` (or ``val/``) subdirectories, each in that layout, they are the official split (test
classes must be training classes); otherwise ``test_fraction`` is held out. Images are decoded with
Pillow: all grayscale gives one channel, any colour image makes every image RGB (alpha dropped).
Every image must have the size of the first one: nothing is resized.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from aiotsim.errors import DataError
from aiotsim.learn.data.base import RawSplit

IMAGE_SUFFIXES: tuple[str, ...] = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".ppm", ".pgm", ".tif", ".tiff", ".webp")
_GRAY_MODES = ("1", "L", "I", "I;16", "F")


def _pil() -> Any:
    try:
        from PIL import Image
    except ImportError:
        raise DataError("dataset 'imagefolder' decodes images with Pillow: pip install pillow") from None
    return Image


def _class_files(root: Path) -> dict[str, list[Path]]:
    """Class name -> sorted image files, for every subdirectory of ``root`` holding images."""
    classes = {
        d.name: sorted(f for f in d.iterdir() if f.is_file() and f.suffix.lower() in IMAGE_SUFFIXES)
        for d in sorted(root.iterdir())
        if d.is_dir()
    }
    classes = {name: files for name, files in classes.items() if files}
    if not classes:
        raise DataError(f"{root}: no class subdirectories with images ({', '.join(IMAGE_SUFFIXES)})")
    return classes


def _decode(files: list[Path], mode: str, size: tuple[int, int]) -> np.ndarray:
    """Decode images to ``[N, C, H, W]`` uint8 in ``mode`` ('L' or 'RGB'); sizes must equal ``size``."""
    image = _pil()
    out = []
    for f in files:
        try:
            with image.open(f) as img:
                if img.size != size:
                    raise DataError(f"{f}: image is {img.size[0]}x{img.size[1]}, the first one {size[0]}x{size[1]}")
                arr = np.asarray(img.convert(mode), dtype=np.uint8)  # [H, W] or [H, W, 3]
        except (OSError, ValueError) as exc:  # PIL.UnidentifiedImageError is an OSError
            raise DataError(f"{f}: cannot decode image: {exc}") from exc
        out.append(arr[None] if arr.ndim == 2 else arr.transpose(2, 0, 1))
    return np.stack(out)


def _probe(files: list[Path]) -> tuple[str, tuple[int, int]]:
    """The common mode ('L' if every image is grayscale, else 'RGB') and the first image's size."""
    image = _pil()
    modes = set()
    size = (0, 0)
    for k, f in enumerate(files):
        try:
            with image.open(f) as img:
                modes.add(img.mode)
                size = img.size if k == 0 else size
        except (OSError, ValueError) as exc:
            raise DataError(f"{f}: cannot decode image: {exc}") from exc
    return ("L" if modes <= set(_GRAY_MODES) else "RGB"), size


def _labelled(classes: dict[str, list[Path]], names: list[str]) -> tuple[list[Path], np.ndarray]:
    """Every file of ``classes`` and its label: the position of its class in ``names``."""
    label_of = {name: k for k, name in enumerate(names)}
    files = [f for name in classes for f in classes[name]]
    labels = np.asarray([label_of[name] for name in classes for _ in classes[name]], dtype=np.int64)  # [N]
    return files, labels


def read_imagefolder(path: Path) -> RawSplit:
    """The images under ``path`` (see the module docstring)."""
    test_dir = next((path / d for d in ("test", "val") if (path / d).is_dir()), None)
    split = (path / "train").is_dir() and test_dir is not None
    train_classes = _class_files(path / "train" if split else path)
    names = list(train_classes)
    train_files, train_y = _labelled(train_classes, names)
    test_files: list[Path] = []
    test_y = None
    if split and test_dir is not None:
        test_classes = _class_files(test_dir)
        unknown = sorted(set(test_classes) - set(names))
        if unknown:
            raise DataError(f"{test_dir}: test classes {unknown} are not training classes {names}")
        test_files, test_y = _labelled(test_classes, names)
    mode, size = _probe(train_files + test_files)
    train_x = _decode(train_files, mode, size)
    test_x = _decode(test_files, mode, size) if test_files else None
    return RawSplit(train_x, train_y, test_x, test_y, len(names))
