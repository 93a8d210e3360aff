"""Batched augmentation on the training device (kornia).

The dataset stays on the device as uint8; each step indexes a batch, converts it to floats in [0, 1]
and augments the whole batch at once (every image gets its own random parameters), then normalises.
No DataLoader, no worker processes, no host-to-device copies per step.

kornia rather than torchvision v2: torchvision from PyPI is built against a specific torch release and
does not import beside the CPU torch build this project is developed with (a binary mismatch), while
kornia is pure Python on top of torch. kornia's colour jitter follows torchvision's definition
(brightness, contrast, saturation factors in [1 - x, 1 + x], hue shift in [-x, x], random order).

Presets:
    e1       random-resized-crop (scale 0.2-1), horizontal flip                 (PAPER.md, E1: SimSiam)
    e3       crop (scale 0.08-1, torchvision's default), flip, rotation of every image by an angle
             uniform in [-45, 45] degrees (nearest-neighbour, as torchvision's default), colour
             jitter (0.4, 0.4, 0.4, 0.1) with p = 0.8, no grayscale        (the paper's official E3 code)
    e3_crop02  this project's former e3: crop scale 0.2-1, rotation on half of the images (bilinear),
             the same flip and jitter
    simclr   the standard SimCLR/BYOL CIFAR recipe: crop (0.08-1), flip, colour jitter (0.4, 0.4, 0.2,
             0.1) p = 0.8, grayscale p = 0.2                                     (solo-learn's CIFAR)
    none     no augmentation (normalisation only)
"""

from __future__ import annotations

from collections.abc import Sequence

import kornia.augmentation as K
import torch
from torch import nn

PRESETS: tuple[str, ...] = ("e1", "e3", "e3_crop02", "simclr", "none")


def build_augment(preset: str, image_size: int) -> nn.Module:
    """A batched augmentation ``(B, 3, S, S) float [0, 1] -> (B, 3, S, S)`` for ``preset``."""
    size = (image_size, image_size)
    if preset == "e1":
        ops = [K.RandomResizedCrop(size, scale=(0.2, 1.0)), K.RandomHorizontalFlip()]
    elif preset in ("e3", "e3_crop02"):
        official = preset == "e3"
        ops = [  # the official order: crop, flip, rotation, jitter
            K.RandomResizedCrop(size, scale=(0.08, 1.0) if official else (0.2, 1.0)),
            K.RandomHorizontalFlip(),
            # torchvision's RandomRotation turns every image, nearest-neighbour (kornia's defaults: p 0.5, bilinear)
            K.RandomRotation(degrees=45.0, p=1.0, resample="nearest") if official else K.RandomRotation(degrees=45.0),
            K.ColorJitter(0.4, 0.4, 0.4, 0.1, p=0.8),
        ]
    elif preset == "simclr":
        ops = [
            K.RandomResizedCrop(size, scale=(0.08, 1.0)),
            K.RandomHorizontalFlip(),
            K.ColorJitter(0.4, 0.4, 0.2, 0.1, p=0.8),
            K.RandomGrayscale(p=0.2),
        ]
    elif preset == "none":
        ops = []
    else:
        raise ValueError(f"unknown augmentation preset {preset!r}; valid: {', '.join(PRESETS)}")
    return nn.Sequential(*ops)


class GPUAugment(nn.Module):
    """uint8 batch on the device -> two normalised augmented views stacked ``[view1; view2]``."""

    def __init__(self, preset: str, image_size: int, mean: Sequence[float], std: Sequence[float]) -> None:
        super().__init__()
        self.preset = preset
        self.augment = build_augment(preset, image_size)
        self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32).view(1, -1, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(std, dtype=torch.float32).view(1, -1, 1, 1), persistent=False)

    def normalize(self, x_uint8: torch.Tensor) -> torch.Tensor:
        """uint8 ``(B, 3, S, S)`` -> normalised float, no augmentation (for probes and evaluation)."""
        return (x_uint8.float() / 255.0 - self.mean) / self.std

    @torch.no_grad()
    def views(self, x_uint8: torch.Tensor, n_views: int = 2) -> torch.Tensor:
        """``(B, 3, S, S)`` uint8 -> ``(n_views B, 3, S, S)`` float, rows ``[view1; view2]``."""
        x = x_uint8.float() / 255.0
        out = [self.augment(x) for _ in range(n_views)]
        return (torch.cat(out).clamp_(0.0, 1.0) - self.mean) / self.std
