"""CIFAR-10/100 in the official python-pickle archives (Krizhevsky 2009): downloaded with an MD5 check when
online (``ARCHIVES``, into ``default_data_dir()``), or read from ``--data-dir`` (the ``.tar.gz`` or its extracted
folder). 32 x 32 RGB; 50,000 train / 10,000 test images.

Every batch file is read safely: its size bounded before reading (``max_batch_bytes``), unpickled without executing
code from it (``scale/engine/safe_pickle.py``) and checked against the official layout before any conversion
(``_checked_batch``). A missing, corrupt or foreign file raises ``DataError`` saying which file to put where.
"""

from __future__ import annotations

import hashlib
import os
import tarfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from scale.engine import disk
from scale.engine.data_errors import DataError
from scale.engine.dataset import STATS, Dataset
from scale.engine.safe_pickle import UnsafePickleError, safe_loads


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


def default_data_dir() -> Path:
    return Path(os.environ.get("SCALE_DATA_DIR", Path.home() / ".cache" / "headgeometry" / "data"))


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
