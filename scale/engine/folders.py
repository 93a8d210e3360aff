"""Your own images as a ``Dataset`` (``folder_dataset``, the dataset ``folder:PATH``): one sub-folder of image
files per class, or images without labels; ``train/`` and ``test/`` splits as given, or a seeded held-out fraction;
any size and mode Pillow reads, 16-bit and [0, 1] float at their own scale (``scale.engine.images``). A folder
whose decoded images would not fit in memory streams from disk (``ImageFiles``, above ``stream_threshold()``);
normalisation statistics are the training split's own (``channel_stats``).
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from scale.engine.dataset import Dataset
from scale.engine.images import ImageFiles, decode_files, image_files

FOLDER_TEST_FRACTION = 0.2


def _class_folders(root: Path) -> list[Path]:
    """The sub-folders of ``root`` that hold at least one image file (searched recursively), by name."""
    return [d for d in sorted(p for p in root.iterdir() if p.is_dir()) if image_files(d)]


def _labelled_files(root: Path, classes: list[str]) -> tuple[list[Path], torch.Tensor]:
    """Every image file under ``root/<class>/`` and its class index (the position of ``<class>`` in ``classes``)."""
    files, labels = [], []
    for label, name in enumerate(classes):
        found = image_files(root / name) if (root / name).is_dir() else []
        files += found
        labels += [label] * len(found)
    return files, torch.tensor(labels, dtype=torch.int64)


STATS_IMAGES = 10_000  # normalisation statistics of a streamed split: a seeded sample of at most this many
STREAM_CAP_BYTES = 4 << 30  # decoded bytes above which a folder streams, whatever the memory (4 GiB)


def stream_threshold() -> int:
    """Decoded bytes (``N x 3 x S x S``) above which ``folder_dataset`` streams: a quarter of this machine's
    physical memory, at most ``STREAM_CAP_BYTES`` (the in-memory path also copies the split to the training
    device, whose memory may be smaller)."""
    try:
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        physical = 4 * STREAM_CAP_BYTES
    return int(min(STREAM_CAP_BYTES, physical // 4))


def channel_stats(x: torch.Tensor | ImageFiles, sample: int = STATS_IMAGES, seed: int = 0, chunk: int = 256
                  ) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-channel mean and (N - 1) std in [0, 1] of uint8 images, summed in float64 a chunk at a time; over
    a seeded sample of ``sample`` images when there are more."""
    n = len(x)
    idx = torch.arange(n) if n <= sample else torch.randperm(n, generator=torch.Generator().manual_seed(seed))[
        :sample].sort().values
    total, squares, count = torch.zeros(3, dtype=torch.float64), torch.zeros(3, dtype=torch.float64), 0
    for i in range(0, len(idx), chunk):
        f = x[idx[i : i + chunk]].double() / 255.0  # (c, 3, S, S)
        total += f.sum(dim=(0, 2, 3))
        squares += (f * f).sum(dim=(0, 2, 3))
        count += f.shape[0] * f.shape[2] * f.shape[3]
    mean = total / count
    var = (squares - count * mean * mean) / max(count - 1, 1)
    return tuple(float(v) for v in mean), tuple(max(float(v), 1e-3) for v in var.clamp_min(0).sqrt())


def folder_dataset(path: str | Path, image_size: int = 32, *, test_fraction: float = FOLDER_TEST_FRACTION,
                   seed: int = 0, stream: bool | None = None) -> Dataset:
    """Your own images: ``path/<class>/*.png|jpg|...`` (one sub-folder per class, named as you like), or
    images without labels: ``path/*.png|jpg|...`` with no class sub-folders (solo-learn's ``no_labels``).

    With ``path/train/`` and ``path/test/`` (each of class sub-folders, or flat) the two splits are taken as
    given; otherwise ``test_fraction`` of each class (at least one image where the class has two or more;
    of all images without labels) is held out by a seeded permutation. Images of any size and mode are
    centre-cropped to a square and resized to ``image_size``; 16-bit and [0, 1] float images are read at
    their own scale, others refused with one line (``image_to_unit``). A dataset without labels has
    ``labelled`` False (one class 0): what needs no labels is measured, the class probe is skipped.

    ``stream``: decode from disk as training reads (``ImageFiles``, bounded memory) instead of holding the
    splits as uint8 (``N x 3 x S x S`` bytes) in memory and on the training device; ``None`` chooses it
    when the decoded training split is above ``stream_threshold()``. Both paths give the same images and
    the same training. Normalisation statistics are the training split's per-channel mean and std
    (``channel_stats``). An absent or empty folder, a test split that would be empty, or a ``test/`` with
    classes ``train/`` lacks raises ``ValueError`` (a bad argument, before any training); an image or folder
    that cannot be read, or an image declaring more than ``MAX_IMAGE_PIXELS``, raises ``DataError``. Only
    regular files count as images (``image_files``).
    """
    root = Path(path).expanduser()
    if not root.is_dir():
        raise ValueError(f"folder:{path}: not a directory (expected class sub-folders of PNG/JPEG images, or the "
                         "images themselves)")
    if not 0.0 <= test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in [0, 1), got {test_fraction}")
    if image_size < 8:
        raise ValueError(f"folder images need --image-size >= 8, got {image_size}")
    split = (root / "train").is_dir() and (root / "test").is_dir()
    base = root / "train" if split else root
    classes = [d.name for d in _class_folders(base)]
    labelled = bool(classes)
    if not labelled and not image_files(base, recursive=False):
        raise ValueError(f"folder:{path}: no images (.png, .jpg, ...) in {base}, neither in class sub-folders "
                         f"({base}/<class>/<image files>) nor directly ({base}/<image files>)")

    def files_of(folder: Path) -> tuple[list[Path], torch.Tensor]:
        if labelled:
            return _labelled_files(folder, classes)
        found = image_files(folder, recursive=False)
        return found, torch.zeros(len(found), dtype=torch.int64)

    if split:
        (tf, ty), (vf, vy) = files_of(root / "train"), files_of(root / "test")
    else:
        files, y = files_of(root)
        g = torch.Generator().manual_seed(seed)
        test_idx = []
        for c in range(max(1, len(classes))):
            where = torch.nonzero(y == c).flatten()
            where = where[torch.randperm(len(where), generator=g)]
            n_test = max(1, round(test_fraction * len(where))) if len(where) >= 2 and test_fraction > 0 else 0
            test_idx.append(where[:n_test])
        is_test = torch.zeros(len(y), dtype=torch.bool)
        is_test[torch.cat(test_idx)] = True
        held = is_test.tolist()
        tf, vf = [f for f, t in zip(files, held) if not t], [f for f, t in zip(files, held) if t]
        ty, vy = y[~is_test], y[is_test]
    if len(tf) == 0:
        raise ValueError(f"folder:{path}: no training images found")
    _check_test_split(path, root, classes, len(vf), split)
    if stream is None:
        stream = len(tf) * 3 * image_size * image_size > stream_threshold()
    if stream:
        tx, vx = ImageFiles(tf, image_size), ImageFiles(vf, image_size)
    else:
        tx, vx = decode_files(tf, image_size), decode_files(vf, image_size)
    mean, std = channel_stats(tx, seed=seed)
    notes = tuple(_unused_images(d) for d in ((root / "train", root / "test") if split else (root,)) if labelled)
    return Dataset(f"folder-{root.name}", tx, ty, vx, vy, max(1, len(classes)), mean, std, labelled=labelled,
                   notes=tuple(filter(None, notes)))


def _unused_images(folder: Path) -> str | None:
    """The note that images directly in a labelled ``folder`` (beside its class folders) are not used."""
    loose = image_files(folder, recursive=False) if folder.is_dir() else []
    if not loose:
        return None
    names = ", ".join(p.name for p in loose[:3]) + (f" and {len(loose) - 3} more" if len(loose) > 3 else "")
    return (f"{len(loose)} image(s) directly in {folder} ({names}) are not used: with class sub-folders there, only "
            "the images inside them are read (each sub-folder is a class); move them into one to use them")


def _check_test_split(path: str | Path, root: Path, classes: list[str], n_test: int, split: bool) -> None:
    """Refuse, before any training, a folder whose test split would be empty or hold classes the training
    split lacks (the end-of-run probes need test images of the training classes). ``classes`` is empty for
    images without labels."""
    if split:
        extra = sorted({d.name for d in _class_folders(root / "test")} - set(classes)) if classes else []
        if extra:
            raise ValueError(f"folder:{path}: test/ has classes that train/ lacks ({', '.join(extra[:6])}); "
                             f"train/'s classes are {', '.join(classes[:6])}; give both splits the same class folders")
        if n_test == 0:
            where = f"of train/'s classes ({', '.join(classes[:6])}); put test images in test/<class>/" if classes \
                else "; put test images in test/"
            raise ValueError(f"folder:{path}: test/ holds no images {where}")
    elif n_test == 0:
        what = "every class has a single image; give classes at least 2 images" if classes else \
            "a single image without labels; give at least 2"
        raise ValueError(f"folder:{path}: no image could be held out for testing: {what}, or train/ and test/ folders")
