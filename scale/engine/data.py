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
                        scale (``folder_dataset``, ``image_to_unit``).

A ``Dataset`` holds ``train_x``/``test_x`` as uint8 ``(N, 3, H, W)`` and int64 labels, or, for a folder
too large to hold, ``ImageFiles`` that decode them from disk as they are read (DataLoader workers during
training); the augmentation turns batches into normalised floats on the device
(``scale/engine/augment.py``). Missing or corrupt files raise ``DataError`` with a message saying
exactly which file to put where.
"""

from __future__ import annotations

import errno
import hashlib
import os
import tarfile
import urllib.request
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from scale.engine import disk
from scale.engine.read import Unreadable, open_regular
from scale.engine.safe_pickle import UnsafePickleError, safe_loads

DATASETS: tuple[str, ...] = ("cifar10", "cifar100", "digits", "synthetic")


class DataError(RuntimeError):
    """A dataset cannot be found or read; the message says what to do."""


@dataclass(frozen=True)
class CifarArchive:
    name: str
    filename: str
    md5: str
    folder: str  # top folder inside the archive
    train_files: tuple[str, ...]
    test_files: tuple[str, ...]
    label_key: str
    classes: int

    @property
    def url(self) -> str:
        return f"https://www.cs.toronto.edu/~kriz/{self.filename}"


ARCHIVES: dict[str, CifarArchive] = {
    "cifar10": CifarArchive(
        "CIFAR-10", "cifar-10-python.tar.gz", "c58f30108f718f92721af3b95e74349a", "cifar-10-batches-py",
        tuple(f"data_batch_{i}" for i in range(1, 6)), ("test_batch",), "labels", 10,
    ),
    "cifar100": CifarArchive(
        "CIFAR-100", "cifar-100-python.tar.gz", "eb9058c3a382ffc7106e4002c42a8d85", "cifar-100-python",
        ("train",), ("test",), "fine_labels", 100,
    ),
}

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


def unreadable(exc: OSError, where: str | Path) -> str:
    """One line for a data file or folder that cannot be read."""
    hint = "; check its permissions" if exc.errno in (errno.EACCES, errno.EPERM) else ""
    return f"cannot read {exc.filename or where} ({exc.strerror or exc}){hint}"


def default_data_dir() -> Path:
    return Path(os.environ.get("SCALE_DATA_DIR", Path.home() / ".cache" / "headgeometry" / "data"))


# --------------------------------------------------------------------------------------------
# CIFAR
# --------------------------------------------------------------------------------------------


def md5sum(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.md5()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def _missing_message(spec: CifarArchive, data_dir: Path, why: str) -> str:
    return (
        f"{spec.name} not found ({why}). Put {spec.filename} (from {spec.url}, MD5 {spec.md5}) "
        f"into {data_dir}/ , or its extracted folder as {data_dir / spec.folder}/ , "
        f"then rerun (or pass --data-dir DIR pointing at the folder that holds either)."
    )


def _download(spec: CifarArchive, target: Path, timeout: float = 30.0) -> None:
    """The archive into ``target`` through the one owner of the disk (a fresh temporary, renamed only once its
    MD5 matches: a failed or corrupt download leaves nothing)."""

    digest = hashlib.md5()
    with urllib.request.urlopen(spec.url, timeout=timeout) as response, disk.writing(target) as fh:
        while block := response.read(1 << 20):
            digest.update(block)
            fh.write(block)
        if digest.hexdigest() != spec.md5:
            raise DataError(f"downloaded {spec.filename} has MD5 {digest.hexdigest()}, expected {spec.md5}; try "
                            "again later")


CIFAR_ROW = 3 * 32 * 32  # one image: R (1024) G (1024) B (1024), each 32 x 32 row-major


def official_rows(fname: str) -> int:
    """Images in an official batch file: CIFAR-100's ``train`` 50,000, every other file 10,000."""
    return 50_000 if fname == "train" else 10_000


def max_batch_bytes(fname: str) -> int:
    """The largest file accepted as ``fname``: its images, 256 bytes per image for labels and file names,
    and 1 MiB (the official files are 31.0 MB and CIFAR-100's ``train`` 155 MB)."""
    return official_rows(fname) * (CIFAR_ROW + 256) + 2**20


def _too_large(size: int, fname: str, where: str) -> None:
    if size > max_batch_bytes(fname):
        raise DataError(f"{where} is {size:,} bytes, more than an official {fname} can be "
                        f"({max_batch_bytes(fname):,}); it is not a CIFAR batch: delete it and get the archive again")


def _unpickle(blob: bytes, where: str) -> dict:
    try:
        obj = safe_loads(blob, encoding="latin1")  # never executes code from the file (scale/engine/safe_pickle.py)
    except UnsafePickleError as exc:
        raise DataError(f"{where} is not a genuine CIFAR batch: {exc}; delete it and get the official "
                        "archive again") from None
    except Exception as exc:  # pickle raises many types on garbage
        raise DataError(f"{where} is not a readable CIFAR pickle ({type(exc).__name__}: {exc}); "
                        "the file is corrupt: delete it and download or copy it again") from None
    if not isinstance(obj, dict) or "data" not in obj:
        raise DataError(f"{where} is not a CIFAR batch (no 'data' entry); the file is corrupt or not CIFAR")
    return obj


def _checked_batch(b: dict, spec: CifarArchive, fname: str, where: str) -> tuple[np.ndarray, np.ndarray]:
    """A batch's ``(images (n, 3, 32, 32) uint8, labels (n,) int64)``, checked against the official layout
    before any conversion: ``data`` a uint8 ndarray ``(n, 3072)`` with ``1 <= n <=`` the official count, the
    labels a list (or integer ndarray) of ``n`` integers in ``[0, classes)``. Anything else (a nested list
    that ``np.asarray`` would expand, another dtype, a label that is not a class) is refused."""
    data, labels = b.get("data"), b.get(spec.label_key)
    bad = f"{where} does not have the official CIFAR layout"
    if not (isinstance(data, np.ndarray) and data.dtype == np.uint8 and data.ndim == 2 and data.shape[1] == CIFAR_ROW
            and 1 <= data.shape[0] <= official_rows(fname)):
        got = f"{type(data).__name__} {getattr(data, 'dtype', '')} {getattr(data, 'shape', '')}".strip()
        raise DataError(f"{bad}: 'data' must be a uint8 array of shape (n <= {official_rows(fname)}, {CIFAR_ROW}), "
                        f"got {got}; the file is corrupt or not CIFAR")
    n = data.shape[0]
    if isinstance(labels, np.ndarray) and labels.dtype.kind in "iu" and labels.shape == (n,):
        y = labels.astype(np.int64)
    elif isinstance(labels, list) and len(labels) == n and all(type(v) is int for v in labels):
        y = np.array(labels, dtype=np.int64)
    else:
        raise DataError(f"{bad}: {spec.label_key!r} must be {n} integers, one per image; the file is corrupt or "
                        "not CIFAR")
    if n and (y.min() < 0 or y.max() >= spec.classes):
        raise DataError(f"{bad}: a label outside 0..{spec.classes - 1}; the file is corrupt or not {spec.name}")
    return data.reshape(n, 3, 32, 32), y


def _batches_to_arrays(batches: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    return np.concatenate([x for x, _ in batches]), np.concatenate([y for _, y in batches])


def _read_archive(spec: CifarArchive, path: Path, verify_md5: bool) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    if verify_md5:
        got = md5sum(path)
        if got != spec.md5:
            raise DataError(
                f"{path} is corrupt or truncated: MD5 {got}, expected {spec.md5} (the official {spec.filename}); "
                "delete it and download or copy it again"
            )
    out = {}
    try:
        with tarfile.open(path, "r:gz") as tar:
            for split, files in (("train", spec.train_files), ("test", spec.test_files)):
                batches = []
                for fname in files:
                    member, where = f"{spec.folder}/{fname}", f"{path}:{spec.folder}/{fname}"
                    try:
                        info = tar.getmember(member)
                    except KeyError:
                        raise DataError(f"{path} has no {member}; it is not the official {spec.filename}") from None
                    _too_large(info.size, fname, where)
                    fh = tar.extractfile(info)
                    if fh is None:
                        raise DataError(f"{where} is not a regular file; {path} is not the official {spec.filename}")
                    batches.append(_checked_batch(_unpickle(fh.read(), where), spec, fname, where))
                out[split] = _batches_to_arrays(batches)
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise DataError(f"{path} is corrupt or truncated ({type(exc).__name__}: {exc}); "
                        "delete it and download or copy it again") from None
    return out


def _read_folder(spec: CifarArchive, folder: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    out = {}
    for split, files in (("train", spec.train_files), ("test", spec.test_files)):
        batches = []
        for fname in files:
            f = folder / fname
            if not f.is_file():
                raise DataError(f"{folder} lacks {fname}: the extracted {spec.folder}/ folder is incomplete; "
                                f"put the whole folder (or {spec.filename}) there")
            _too_large(f.stat().st_size, fname, str(f))
            batches.append(_checked_batch(_unpickle(f.read_bytes(), str(f)), spec, fname, str(f)))
        out[split] = _batches_to_arrays(batches)
    return out


def load_cifar(name: str, data_dir: str | Path | None = None, download: bool = True) -> Dataset:
    """CIFAR-10/100 from ``data_dir`` (archive or extracted folder), downloading the archive if allowed."""
    spec = ARCHIVES[name]
    data_dir = Path(data_dir) if data_dir is not None else default_data_dir()
    folder_candidates = [data_dir / spec.folder, data_dir] if data_dir.name == spec.folder else [data_dir / spec.folder]
    archive = data_dir / spec.filename
    if data_dir.exists() and not data_dir.is_dir() and not data_dir.name.endswith(".tar.gz"):
        raise DataError(f"--data-dir {data_dir} is a file, not a folder nor {spec.filename}; "
                        "pass the folder that holds the archive or its extracted folder")
    arrays = None
    for folder in folder_candidates:
        if (folder / spec.train_files[0]).is_file():
            arrays = _read_folder(spec, folder)
            break
    if arrays is None and data_dir.is_file() and data_dir.name.endswith(".tar.gz"):
        arrays = _read_archive(spec, data_dir, verify_md5=True)  # --data-dir points at the archive itself
    if arrays is None:
        if not archive.is_file():
            if not download:
                raise DataError(_missing_message(spec, data_dir, "downloads are off"))
            try:
                _download(spec, archive)
            except DataError:
                raise
            except Exception as exc:  # no network, DNS failure, HTTP error, timeout
                raise DataError(_missing_message(spec, data_dir, f"offline? download failed: {exc}")) from None
        arrays = _read_archive(spec, archive, verify_md5=True)
    (tx, ty), (vx, vy) = arrays["train"], arrays["test"]
    mean, std = STATS[name]
    return Dataset(name, torch.from_numpy(tx), torch.from_numpy(ty), torch.from_numpy(vx), torch.from_numpy(vy),
                   spec.classes, mean, std)


# --------------------------------------------------------------------------------------------
# digits, synthetic
# --------------------------------------------------------------------------------------------

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


# --------------------------------------------------------------------------------------------
# A folder of class folders (your own images)
# --------------------------------------------------------------------------------------------

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".webp", ".tif", ".tiff")
FOLDER_PREFIX = "folder:"
FOLDER_TEST_FRACTION = 0.2
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
