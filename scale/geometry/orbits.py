"""Augmentation orbits of E6, generated on the device in batches with kornia.

docs/paper.md, E6: orbits under rotation (0-45 degrees), hue (+-0.4), saturation (0-2) and blur (sigma
0.1-3). A trajectory is one image swept through ``steps`` evenly spaced values of one family's
parameter (default 12 steps), so that consecutive points are neighbours on the orbit and the
discrete curvature kappa (E4) is defined along it.

Shapes: images ``(n, 3, S, S)`` in [0, 1]; ``orbit_batch(images, family, steps)`` returns
``(n * steps, 3, S, S)``, image-major (rows ``i * steps ... (i + 1) * steps - 1`` are image i's
trajectory), still in [0, 1]; the backbone's normalisation (ImageNet statistics for E6) is applied afterwards.

Image sources (all return ``(n, 3, size, size)`` float32 in [0, 1]): ``scale.engine.images.folder_images``
(any folder of PNG/JPEG files, read with Pillow, centre-cropped to a square), ``digits_images`` (scikit-learn's
bundled 8 x 8 digits, offline: upsampled, each digit given two random colours, strokes and
background, because hue and saturation do nothing to a grey image) and ``dataset_images``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from scale.engine.cifar import load_cifar
from scale.engine.data import load_dataset
from scale.engine.images import resize_square


@dataclass(frozen=True)
class Family:
    name: str
    low: float
    high: float
    unit: str


FAMILIES: dict[str, Family] = {
    "rotation": Family("rotation", 0.0, 45.0, "degrees"),
    "hue": Family("hue", -0.4, 0.4, "fraction of the hue circle (torchvision's hue_factor)"),
    "saturation": Family("saturation", 0.0, 2.0, "saturation factor (1 = unchanged)"),
    "blur": Family("blur", 0.1, 3.0, "Gaussian sigma in pixels"),
}

def check_family(name: str) -> Family:
    if name not in FAMILIES:
        raise ValueError(f"unknown augmentation family {name!r}; valid choices: {', '.join(FAMILIES)}")
    return FAMILIES[name]


def family_parameters(name: str, steps: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """The ``steps`` evenly spaced parameter values of one family, low to high, shape (steps,)."""
    if steps < 3:
        raise ValueError(f"an orbit needs at least 3 steps (kappa is a second difference), got {steps}")
    fam = check_family(name)
    return torch.linspace(fam.low, fam.high, steps, device=device)


def orbit_batch(images: torch.Tensor, family: str, steps: int) -> torch.Tensor:
    """Every image swept through the family: (n, 3, S, S) -> (n * steps, 3, S, S), on images' device; the
    ``steps`` values of ``family_parameters`` through ``orbit_batch_at``."""
    return orbit_batch_at(images, family, family_parameters(family, steps).tolist())


# --------------------------------------------------------------------------------------------
# Image sources
# --------------------------------------------------------------------------------------------


def colourise(grey: torch.Tensor, seed: int = 0) -> torch.Tensor:
    """Grey images (n, 1 or 3, S, S) in [0, 1] -> ink in one random colour on a background of another."""
    rng = np.random.default_rng(seed)
    n = grey.shape[0]
    ink = grey[:, :1]
    fg = torch.from_numpy(rng.uniform(0.1, 1.0, size=(n, 3, 1, 1))).float()
    bg = torch.from_numpy(rng.uniform(0.0, 0.6, size=(n, 3, 1, 1))).float()
    return ink * fg + (1 - ink) * bg


def digits_images(n: int, size: int, seed: int = 0) -> torch.Tensor:
    """``n`` test-split digits (``scale.engine.data``), upsampled to ``size``, strokes and background coloured."""

    test = load_dataset("digits", image_size=8).test_x  # uint8 (N, 3, 8, 8)
    idx = torch.from_numpy(np.random.default_rng(seed).choice(len(test), size=n, replace=n > len(test)))
    grey = F.interpolate(test[idx].float() / 255.0, size=(size, size), mode="bilinear", align_corners=False)
    return colourise(grey.clamp(0, 1), seed)


DATASETS = ("digits", "cifar10")


def dataset_images(name: str, n: int, size: int, seed: int = 0, data_dir: str | None = None) -> torch.Tensor:
    """``digits`` (offline) or ``cifar10`` (test split, upsampled as in the paper; see ``scale.engine.data``)."""
    if name == "digits":
        return digits_images(n, size, seed)
    if name == "cifar10":

        test = load_cifar("cifar10", data_dir).test_x  # uint8 (10000, 3, 32, 32)
        idx = torch.from_numpy(np.random.default_rng(seed).choice(len(test), size=n, replace=False))
        return resize_square(test[idx].float() / 255.0, size)
    raise ValueError(f"unknown dataset {name!r}; valid choices: {', '.join(DATASETS)}")


# --------------------------------------------------------------------------------------------
# Orbits at given parameter values (E4: full-circle rotation orbits and the kappa sweep)
# --------------------------------------------------------------------------------------------

E4_ROTATION_ANGLES: tuple[float, ...] = tuple(30.0 * i for i in range(12))  # 0, 30, ..., 330 degrees
E4_SWEEP_ANGLES: tuple[float, ...] = tuple(45.0 * i / 9 for i in range(10))  # 10 angles, 0 to 45 degrees


def orbit_batch_at(images: torch.Tensor, family: str, values) -> torch.Tensor:
    """Every image taken through the family at the given parameter ``values`` (P,), any range (E4's
    rotation orbits go round the full circle, 0 to 330 degrees): (n, 3, S, S) in [0, 1] ->
    (n * P, 3, S, S), image-major as ``orbit_batch``."""
    from kornia.enhance import adjust_hue, adjust_saturation
    from kornia.filters import gaussian_blur2d
    from kornia.geometry.transform import rotate

    check_family(family)
    t = torch.as_tensor(values, dtype=images.dtype, device=images.device).reshape(-1)
    if t.numel() < 1:
        raise ValueError("orbit_batch_at needs at least one parameter value")
    n, P = images.shape[0], t.numel()
    t = t.repeat(n)  # (n * P,), image-major
    x = images.repeat_interleave(P, dim=0)  # (n * P, 3, S, S)
    if family == "rotation":
        out = rotate(x, t)
    elif family == "hue":
        out = adjust_hue(x, t * 2 * math.pi)
    elif family == "saturation":
        out = adjust_saturation(x, t)
    else:  # blur
        size = min(2 * math.ceil(3 * float(t.max())) + 1, 2 * ((x.shape[-1] - 1) // 2) - 1)
        out = gaussian_blur2d(x, (size, size), torch.stack([t, t], dim=1))
    return out.clamp(0.0, 1.0)
