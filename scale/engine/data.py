"""Datasets as uint8 tensors that live on the training device (or, for large folders, read from disk).

    cifar10, cifar100   the official python-pickle archives (Krizhevsky 2009): downloaded with an MD5
                        check when online, or read from ``--data-dir`` (the ``.tar.gz`` or its extracted
                        folder). 32 x 32 RGB; 50,000 train / 10,000 test images.
    digits              scikit-learn's bundled handwritten digits (1,797 real 8 x 8 grey images, 0-16,
                        no network), brought to the backbone's format: scaled to 0-255, resized
                        (bilinear) to ``image_size`` and repeated to 3 channels; fixed 1,347/450 split.
    synthetic           random class-patterned images, for unit tests only.
    folder:PATH         your own images: one sub-folder of image files per class, or images without
                        labels; any size and mode Pillow reads, 16-bit and [0, 1] float at their own
                        scale (``scale.engine.folders.folder_dataset``, ``scale.engine.images.image_to_unit``).

A ``Dataset`` (``scale.engine.dataset``) holds each split's images as uint8 and its labels. Each source has its
module: CIFAR's archives ``scale.engine.cifar``, a folder of images ``scale.engine.folders`` (its image files
``scale.engine.images``); digits and synthetic are here. Missing or corrupt files raise ``DataError``
(``scale.engine.data_errors``) with a message saying exactly which file to put where.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from scale.engine.cifar import ARCHIVES, load_cifar
from scale.engine.data_errors import DataError, unreadable
from scale.engine.dataset import STATS, Dataset
from scale.engine.folders import folder_dataset

DATASETS: tuple[str, ...] = ("cifar10", "cifar100", "digits", "synthetic")
CIFAR: tuple[str, ...] = ("cifar10", "cifar100")  # the published archives (scale.engine.cifar), 32 x 32
FOLDER_PREFIX = "folder:"  # folder:PATH, your own images (scale.engine.folders)


DIGITS_TRAIN = 1347  # fixed split of the 1,797 images (a seeded permutation), 75 % / 25 %


def load_digits(image_size: int = 16) -> Dataset:
    """scikit-learn's digits as uint8 RGB ``(N, 3, image_size, image_size)``."""
    from sklearn.datasets import load_digits as _sk_digits

    bunch = _sk_digits()
    x = torch.from_numpy(bunch.images.astype(np.float32) * (255.0 / 16.0))[:, None]  # (1797, 1, 8, 8)
    if image_size != 8:
        x = F.interpolate(x, size=(image_size, image_size), mode="bilinear", align_corners=False)
    x = x.round().clamp(0, 255).to(torch.uint8).expand(-1, 3, -1, -1).contiguous()
    y = torch.from_numpy(bunch.target.astype(np.int64))
    perm = torch.from_numpy(np.random.default_rng(0).permutation(len(y)))
    tr, te = perm[:DIGITS_TRAIN], perm[DIGITS_TRAIN:]
    mean, std = STATS["digits"]
    return Dataset("digits", x[tr], y[tr], x[te], y[te], 10, mean, std)


def load_synthetic(
    n_train: int = 256, n_test: int = 64, image_size: int = 16, classes: int = 4, seed: int = 0
) -> Dataset:
    """Noisy class-coloured blobs: cheap, deterministic, learnable. Unit tests only."""
    g = torch.Generator().manual_seed(seed)
    n = n_train + n_test
    y = torch.arange(n) % classes
    colours = torch.rand(classes, 3, 1, 1, generator=g)
    yy, xx = torch.meshgrid(torch.linspace(-1, 1, image_size), torch.linspace(-1, 1, image_size), indexing="ij")
    centres = torch.rand(n, 2, generator=g) - 0.5
    blob = torch.exp(-((xx - centres[:, :1, None]) ** 2 + (yy - centres[:, 1:, None]) ** 2) * 6.0)  # (n, S, S)
    img = colours[y] * blob[:, None] + 0.15 * torch.rand(n, 3, image_size, image_size, generator=g)
    x = (img.clamp(0, 1) * 255).round().to(torch.uint8)
    mean, std = STATS["synthetic"]
    return Dataset("synthetic", x[:n_train], y[:n_train], x[n_train:], y[n_train:], classes, mean, std)


def load_dataset(name: str, data_dir: str | Path | None = None, *, download: bool = True,
                 image_size: int | None = None) -> Dataset:
    """Any dataset of ``DATASETS``, or ``folder:PATH`` (``folder_dataset``); ``image_size`` applies to
    digits, synthetic and folders (CIFAR is 32 x 32). A file or folder that cannot be read (permissions, an
    I/O error) raises ``DataError`` naming it."""
    try:
        return _load_dataset(name, data_dir, download, image_size)
    except OSError as exc:
        raise DataError(unreadable(exc, data_dir or name)) from None


def _load_dataset(name: str, data_dir: str | Path | None, download: bool, image_size: int | None) -> Dataset:
    if name.startswith(FOLDER_PREFIX):
        return folder_dataset(name[len(FOLDER_PREFIX):], image_size or 32)
    if name in ARCHIVES:
        if image_size not in (None, 32):
            raise ValueError(f"{name} images are 32 x 32; --image-size {image_size} is not supported for it")
        return load_cifar(name, data_dir, download)
    if name == "digits":
        return load_digits(image_size or 16)
    if name == "synthetic":
        return load_synthetic(image_size=image_size or 16)
    raise ValueError(f"unknown dataset {name!r}; valid: {', '.join(DATASETS)}, {FOLDER_PREFIX}PATH")
