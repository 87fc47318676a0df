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


def _decode(files: list[Path], size: tuple[int, int] | None = None) -> list[np.ndarray]:
    """Decode images, one pass: grayscale ones to ``[1, H, W]``, others to RGB ``[3, H, W]`` uint8.

    Every image must have ``size`` (default: the first image's), given as PIL's ``(W, H)``.
    """
    image = _pil()
    out = []
    for f in files:
        try:
            with image.open(f) as img:
                size = size or img.size
                if img.size != size:
                    raise DataError(f"{f}: image is {img.size[0]}x{img.size[1]}, the first one {size[0]}x{size[1]}")
                arr = np.asarray(img.convert("L" if img.mode in _GRAY_MODES else "RGB"), dtype=np.uint8)
        except (OSError, ValueError, image.DecompressionBombError) as exc:  # UnidentifiedImageError: an OSError
            # DecompressionBombError: over twice Pillow's MAX_IMAGE_PIXELS (89.5 M), a crafted header
            raise DataError(f"{f}: cannot decode image: {exc}") from exc
        except MemoryError:
            raise DataError(f"{f}: cannot decode image: too large to hold in memory") from None
        out.append(arr[None] if arr.ndim == 2 else arr.transpose(2, 0, 1))  # [H, W] or [H, W, 3] -> [C, H, W]
    return out


def _stack(images: list[np.ndarray], channels: int) -> np.ndarray:
    """``[N, channels, H, W]``: grayscale images repeated to RGB when any image is colour (as
    PIL's L -> RGB conversion does)."""
    return np.stack([np.repeat(a, channels // a.shape[0], axis=0) for a in images])


def _labelled(classes: dict[str, list[Path]], names: list[str]) -> tuple[list[Path], np.ndarray]:
    """Every file of ``classes`` and its label: the position of its class in ``names``."""
    label_of = {name: k for k, name in enumerate(names)}
    files = [f for name in classes for f in classes[name]]
    labels = np.asarray([label_of[name] for name in classes for _ in classes[name]], dtype=np.int64)  # [N]
    return files, labels


def image_classes(path: Path) -> tuple[dict[str, list[Path]], dict[str, list[Path]] | None]:
    """``(training classes, test classes or None)``: class name -> image files, as
    :func:`read_imagefolder` reads them (no image decoded). DataError when a split has no class
    with images, or the test split has a class the training split lacks."""
    if not path.is_dir():
        raise DataError(f"{path}: not a directory; an imagefolder is a directory of class subdirectories")
    test_dir = next((path / d for d in ("test", "val") if (path / d).is_dir()), None)
    split = (path / "train").is_dir() and test_dir is not None
    train_classes = _class_files(path / "train" if split else path)
    if not split or test_dir is None:
        return train_classes, None
    test_classes = _class_files(test_dir)
    unknown = sorted(set(test_classes) - set(train_classes))
    if unknown:
        raise DataError(f"{test_dir}: test classes {unknown} are not training classes {list(train_classes)}")
    return train_classes, test_classes


def read_imagefolder(path: Path) -> RawSplit:
    """The images under ``path`` (see the module docstring)."""
    train_classes, test_classes = image_classes(path)
    names = list(train_classes)
    train_files, train_y = _labelled(train_classes, names)
    test_files: list[Path] = []
    test_y = None
    if test_classes is not None:
        test_files, test_y = _labelled(test_classes, names)
    images = _decode(train_files + test_files)
    channels = max(a.shape[0] for a in images)  # 1 if every image is grayscale, else 3
    train_x = _stack(images[: len(train_files)], channels)  # [N, C, H, W] uint8
    test_x = _stack(images[len(train_files) :], channels) if test_files else None
    return RawSplit(train_x, train_y, test_x, test_y, len(names))
