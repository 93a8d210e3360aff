"""Image files, read safely: the regular files with an image suffix under a folder (``image_files``), one file
decoded with Pillow at its own bit depth (``image_to_unit``; at most ``MAX_IMAGE_PIXELS``) and centre-cropped to a
resized square (``read_image``), many into uint8 (``decode_files``), and ``ImageFiles``: a split decoded from disk
as it is read (the streaming path of a folder too large to hold; ``scale.engine.folders``). A file that cannot be
read raises ``DataError`` naming it.

``folder_images`` is the first images of a folder as floats in [0, 1] (an image source of the orbit measurements).
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from scale.engine.data_errors import DataError, unreadable
from scale.engine.read import Unreadable, open_regular

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".webp", ".tif", ".tiff")
# Decoded pixels one image may have: it is decoded whole, 16 bytes a pixel (RGB float32 and its uint8
# source), so 50 megapixels (a 48 MP camera frame) take 0.8 GB; a small compressed file can declare far more.
MAX_IMAGE_PIXELS = 50_000_000


def image_files(root: Path, recursive: bool = True) -> list[Path]:
    """The regular files with an image suffix under ``root`` (recursively, or only those directly in it; sorted):
    no directory named ``x.png``, no FIFO (whose open would wait for a writer forever), no device. A folder that
    cannot be listed raises ``DataError`` naming it (a silently skipped class would change the labels)."""
    def fail(exc: OSError) -> None:
        raise exc

    found = []
    try:
        for folder, subfolders, names in os.walk(root, onerror=fail):
            subfolders.sort()
            found += [p for p in (Path(folder) / n for n in names) if p.suffix.lower() in IMAGE_SUFFIXES
                      and p.is_file()]
            if not recursive:
                break
    except OSError as exc:
        raise DataError(unreadable(exc, root)) from None
    return sorted(found)


def _open_image(fh, path: Path):
    """``Image.open(fh)`` of the file ``path`` (the header only; nothing decoded yet) if it declares at most
    ``MAX_IMAGE_PIXELS``; ``DataError`` with one line otherwise (Pillow's own bomb warning, at a larger size, is
    ours to give here)."""
    from PIL import Image

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        try:
            im = Image.open(fh)
        except Image.DecompressionBombError:
            w = h = None
        else:
            w, h = im.size
    if w is None or w * h > MAX_IMAGE_PIXELS:
        size = f"{w} x {h} pixels ({w * h / 1e6:.0f} megapixels)" if w is not None else "larger than Pillow opens"
        if w is not None:
            im.close()
        raise DataError(f"{path} is {size}; images of more than {MAX_IMAGE_PIXELS / 1e6:.0f} megapixels are "
                        "refused (decoding takes 16 bytes a pixel): shrink it first")
    return im


def resize_square(x: torch.Tensor, size: int) -> torch.Tensor:
    """(n, 3, H, W) -> centre crop to a square -> (n, 3, size, size), antialiased bilinear."""
    h, w = x.shape[-2:]
    s = min(h, w)
    x = x[..., (h - s) // 2 : (h - s) // 2 + s, (w - s) // 2 : (w - s) // 2 + s]
    return F.interpolate(x, size=(size, size), mode="bilinear", align_corners=False, antialias=s > size).clamp(0, 1)


# Pillow's modes of more than 8 bits per channel, and their full scale (grey images: repeated to 3 channels)
WIDE_MODES: dict[str, float] = {"I;16": 65535.0, "I;16L": 65535.0, "I;16B": 65535.0, "I;16N": 65535.0}


def image_to_unit(im, where: str = "image") -> np.ndarray:
    """A Pillow image as RGB float32 ``(H, W, 3)`` in [0, 1], every bit depth read at its own scale:

        8-bit modes (L, P, RGB, RGBA, LA, CMYK, 1, ...)   Pillow's RGB conversion, / 255 (alpha dropped)
        16-bit grey (I;16, I;16B, ...)                     / 65535
        32-bit integer grey (I)                            / 65535 when every value lies in [0, 65535]
                                                           (how Pillow opens 16-bit PNGs), else refused
        32-bit float grey (F)                              as is when every value lies in [0, 1], else refused

    A refused image raises ``DataError`` naming it and what to do (converting through Pillow's 8-bit path
    would clip a 16-bit image to white and a [0, 1] float image to black)."""
    mode = im.mode
    if mode in WIDE_MODES or mode in ("I", "F"):
        a = np.asarray(im, dtype=np.float64)
        lo, hi = (float(a.min()), float(a.max())) if a.size else (0.0, 0.0)
        if not np.isfinite(a).all():
            raise DataError(f"{where}: a {mode} image with non-finite values; convert it to 8 or 16 bits")
        if mode == "F":
            if lo < 0.0 or hi > 1.0:
                raise DataError(f"{where}: a float image with values in [{lo:g}, {hi:g}]; only floats in [0, 1] are "
                                "read: rescale it to [0, 1] or convert it to 8 or 16 bits")
            unit = a
        elif mode == "I" and (lo < 0 or hi > 65535):
            raise DataError(f"{where}: a 32-bit integer image with values in [{lo:g}, {hi:g}], beyond 16 bits; "
                            "convert it to 8 or 16 bits")
        else:
            unit = a / WIDE_MODES.get(mode, 65535.0)
        return np.repeat(unit.astype(np.float32)[..., None], 3, axis=-1)
    return np.asarray(im.convert("RGB"), dtype=np.float32) / 255.0


def read_image(path: Path, size: int) -> torch.Tensor:
    """One image file as ``(3, size, size)`` float32 in [0, 1]: read with Pillow (``image_to_unit``) if it
    declares at most ``MAX_IMAGE_PIXELS`` (``_open_image``), centre-cropped to a square, resized
    (``resize_square``)."""

    try:
        fh = open_regular(path)  # non-blocking, regular files only: a file swapped for a FIFO cannot hang a run
    except Unreadable as exc:
        raise DataError(str(exc)) from None
    with fh, _open_image(fh, path) as im:
        arr = image_to_unit(im, str(path))
    return resize_square(torch.from_numpy(arr).permute(2, 0, 1)[None], size)[0]


def folder_images(directory: str | Path, n: int, size: int) -> torch.Tensor:
    """The first ``n`` images (sorted by name) of a folder, RGB in [0, 1]."""
    root = Path(directory)
    if not root.is_dir():
        raise FileNotFoundError(f"{root} is not a directory")
    files = image_files(root)
    if not files:
        raise FileNotFoundError(f"no image files ({', '.join(IMAGE_SUFFIXES)}) under {root}")
    out = [read_image(path, size)[None] for path in files[:n]]
    if len(out) < n:
        raise ValueError(f"{root} holds {len(out)} images, {n} asked for")
    return torch.cat(out)


def decode_files(files: list[Path], size: int) -> torch.Tensor:
    """Image files as uint8 ``(n, 3, S, S)`` (``read_image``: centre-cropped square, resized), decoded one at
    a time into the result (one image's float copy at a time). A file that cannot be read raises
    ``DataError`` naming it."""
    out = torch.empty(len(files), 3, size, size, dtype=torch.uint8)
    for i, path in enumerate(files):
        try:
            x01 = read_image(path, size)
        except DataError:
            raise
        except Exception as exc:  # Pillow raises several kinds on a truncated or foreign file
            raise DataError(f"{path}: the image cannot be read ({type(exc).__name__}: "
                            f"{str(exc).splitlines()[0][:200]}); remove or replace the file") from None
        out[i] = (x01 * 255.0).round().clamp(0, 255).to(torch.uint8)
    return out


class ImageFiles:
    """One split of a folder dataset, decoded from disk when indexed: the streaming path, for folders whose
    decoded images would not fit in memory (``folder_dataset``). It stands where the uint8 tensor
    ``(N, 3, S, S)`` of an in-memory split would: ``len``, ``shape``, ``device``, ``to(device)``, and indexing by
    an integer, a slice, a list or an index tensor returns the decoded uint8 images on ``device``
    (``decode_files``). ``head(n)`` is the first ``n`` images, still on disk. Training reads it through
    ``batches``: a ``DataLoader`` whose ``workers`` processes decode the coming batches while the current
    step runs, at most ``workers x 2`` batches ahead (bounded memory)."""

    dtype = torch.uint8

    def __init__(self, files: list[Path], size: int, device: str | torch.device = "cpu",
                 workers: int | None = None) -> None:
        self.files, self.size, self.device = list(files), int(size), torch.device(device)
        self.workers = workers if workers is not None else max(1, min(4, (os.cpu_count() or 2) - 1))

    def __len__(self) -> int:
        return len(self.files)

    @property
    def shape(self) -> torch.Size:
        return torch.Size((len(self.files), 3, self.size, self.size))

    def __getitem__(self, index) -> torch.Tensor:
        if isinstance(index, slice):
            chosen = self.files[index]
        elif isinstance(index, int):
            return decode_files([self.files[index]], self.size)[0].to(self.device)
        else:
            chosen = [self.files[int(i)] for i in torch.as_tensor(index).reshape(-1).tolist()]
        return decode_files(chosen, self.size).to(self.device)

    def head(self, n: int) -> ImageFiles:
        return ImageFiles(self.files[:n], self.size, self.device, self.workers)

    def to(self, device: str | torch.device) -> ImageFiles:
        return ImageFiles(self.files, self.size, device, self.workers)

    def batches(self, index_batches: list[torch.Tensor]):
        """The decoded batches of ``index_batches`` (each an index tensor), in order, on ``device``. A file that
        cannot be read any more (removed, truncated since the split was listed) raises ``DataError`` naming it,
        in one line (a worker's error arrives with its traceback, which is dropped)."""
        loader = torch.utils.data.DataLoader(
            _OneFile(self), batch_sampler=[b.tolist() for b in index_batches], num_workers=self.workers,
            collate_fn=torch.stack, prefetch_factor=2 if self.workers else None)
        try:
            for batch in loader:
                yield batch.to(self.device)
        except Exception as exc:
            lines = [line for line in str(exc).strip().splitlines() if line.strip()]
            last = lines[-1].strip() if lines else type(exc).__name__
            raise DataError(last.removeprefix(f"{DataError.__module__}.").removeprefix("DataError: ")) from None


class _OneFile(torch.utils.data.Dataset):
    """``ImageFiles`` as a map-style dataset of single images (what a ``DataLoader`` worker decodes)."""

    def __init__(self, images: ImageFiles) -> None:
        self.files, self.size = images.files, images.size

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int) -> torch.Tensor:
        return decode_files([self.files[i]], self.size)[0]
