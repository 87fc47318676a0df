"""File-based data sets: readers of the standard formats, the opt-in downloader and the transforms.

The public entry point stays :func:`aiotsim.learn.datasets.load_dataset`; this package holds what
it needs to read data sets from files:

``files``
    The registry of file data sets (:data:`FILE_DATASETS`) and :func:`read_files`, which finds the
    files (``data.path``, the download cache, or a download when asked) and parses them.
``idx``, ``cifar``, ``leaf``, ``imagefolder``
    One reader per format: IDX (MNIST, Fashion-MNIST), the CIFAR-10/100 python pickles, LEAF's
    per-writer JSON (FEMNIST) and a directory of class subdirectories of images.
``download``
    The official URLs and MD5 checksums, fetched only when ``data.download = true``.
``transforms``
    Per-channel standardization and the seeded random crop + flip augmentation.

Every reader returns a :class:`~aiotsim.learn.data.base.RawSplit` of numpy arrays; a bad file is a
:class:`~aiotsim.errors.DataError` that names the file.
"""

from aiotsim.learn.data.base import RawSplit
from aiotsim.learn.data.files import DOWNLOADABLE, FILE_DATASETS, NOMINAL_SIZES, read_files
from aiotsim.learn.data.transforms import AUGMENTS, augmentation, crop_flip

__all__ = [
    "AUGMENTS",
    "DOWNLOADABLE",
    "FILE_DATASETS",
    "NOMINAL_SIZES",
    "RawSplit",
    "augmentation",
    "crop_flip",
    "read_files",
]
