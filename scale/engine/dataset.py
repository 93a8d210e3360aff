"""The ``Dataset`` type: a dataset's images and labels, as the trainer and the measurements read it, and the
per-channel statistics that normalise the named datasets (``STATS``).

A ``Dataset`` holds ``train_x``/``test_x`` as uint8 ``(N, 3, H, W)`` and int64 labels, or, for a folder
too large to hold, ``ImageFiles`` (``scale.engine.images``) that decode them from disk as they are read
(DataLoader workers during training); the augmentation turns batches into normalised floats on the device
(``scale/engine/augment.py``). The datasets by name are ``scale.engine.data.load_dataset``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from scale.engine.images import ImageFiles

# Per-channel statistics used to normalise the augmented floats (CIFAR: the usual published values).
STATS: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    "cifar100": ((0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)),
    "digits": ((0.3, 0.3, 0.3), (0.4, 0.4, 0.4)),
    "synthetic": ((0.5, 0.5, 0.5), (0.29, 0.29, 0.29)),
}


@dataclass
class Dataset:
    name: str
    train_x: torch.Tensor | ImageFiles  # uint8 (N, 3, H, W), or decoded from disk when read (folders)
    train_y: torch.Tensor  # int64 (N,)
    test_x: torch.Tensor | ImageFiles
    test_y: torch.Tensor
    classes: int
    mean: tuple[float, ...]
    std: tuple[float, ...]
    labelled: bool = True  # False: images without labels (every label 0); the class probe is skipped
    notes: tuple[str, ...] = ()  # what loading left out, said by every run that uses it

    @property
    def image_size(self) -> int:
        return int(self.train_x.shape[-1])

    @property
    def streamed(self) -> bool:
        """Whether the images are decoded from disk as they are read (``ImageFiles``) rather than held."""
        return isinstance(self.train_x, ImageFiles)

    def to(self, device: torch.device | str) -> Dataset:
        return Dataset(
            self.name, self.train_x.to(device), self.train_y.to(device), self.test_x.to(device),
            self.test_y.to(device), self.classes, self.mean, self.std, self.labelled, self.notes,
        )
