"""Data files that must not crash the process, exhaust its memory or hang it.

CIFAR batches are read by a restricted unpickler (``scale/engine/safe_pickle.py``) and checked against the
official layout before any conversion (``scale.engine.cifar._checked_batch``); a folder of images is listed
with regular files only and each image's declared size is bounded before it is decoded. Every hostile file
gives one line and its exit code through ``scale.run``, and nothing is written.
"""

from __future__ import annotations

import os
import pickle
import struct
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from scale.engine import cifar
from scale.engine.data_errors import DataError
from scale.engine.folders import folder_dataset
from scale.engine.images import image_files
from scale.engine.safe_pickle import UnsafePickleError, safe_loads
from scale.run import main
from scale.runs.faults import EXIT_INPUT, EXIT_USAGE

SPEC = cifar.ARCHIVES["cifar10"]
CIFAR_TINY = ["--quiet", "--epochs", "1", "--batch-size", "8", "--backbone-width", "4", "--head-width", "16",
              "--head-out", "8", "--probe-size", "8", "--no-final-measure", "--threads", "1"]
TINY = [*CIFAR_TINY, "--image-size", "16"]


def _run(capsys, argv) -> tuple[int, list[str]]:
    code = main(argv)
    return code, capsys.readouterr().err.strip().splitlines()


def _one_line(err: list[str], *needles: str) -> str:
    assert len(err) == 1 and "Traceback" not in err[0], err
    for needle in needles:
        assert needle in err[0], (needle, err[0])
    return err[0]


# --------------------------------------------------------------------------------------------
# CIFAR batches
# --------------------------------------------------------------------------------------------


def _sbs(b: bytes) -> bytes:  # SHORT_BINSTRING: a Python 2 str of < 256 bytes
    return b"U" + bytes([len(b)]) + b


def py2_batch(n: int, label_key: str = "labels") -> bytes:
    """A batch as the official files hold it: written by Python 2's cPickle (protocol 2), the array's dtype
    arguments as ints and its payload a Python 2 str (read back with encoding latin1)."""
    raw = (np.arange(n * 3072) % 251).astype(np.uint8).tobytes()
    array = (b"cnumpy.core.multiarray\n_reconstruct\nq\x01cnumpy\nndarray\nq\x02K\x00\x85" + _sbs(b"b")
             + b"\x87Rq\x03(K\x01(J" + struct.pack("<i", n) + b"M\x00\x0ctcnumpy\ndtype\nq\x04" + _sbs(b"u1")
             + b"K\x00K\x01\x87Rq\x05(K\x03" + _sbs(b"|") + b"NNNJ\xff\xff\xff\xffJ\xff\xff\xff\xffK\x00tb\x89T"
             + struct.pack("<I", len(raw)) + raw + b"tb")
    labels = b"](" + b"".join(b"K" + bytes([i % 10]) for i in range(n)) + b"e"
    return b"\x80\x02}q\x00(" + _sbs(b"data") + array + _sbs(label_key.encode()) + labels + _sbs(b"batch_label") \
        + _sbs(b"training batch 1 of 5") + b"u."


def _write_batches(root: Path, blob_for_first: bytes) -> Path:
    folder = root / SPEC.folder
    folder.mkdir(parents=True)
    for i, name in enumerate((*SPEC.train_files, *SPEC.test_files)):
        (folder / name).write_bytes(blob_for_first if i == 0 else py2_batch(4))
    return root


def test_the_official_python2_layout_loads(tmp_path):
    """Positive control: what the official archive holds passes every check, byte for byte."""
    got = safe_loads(py2_batch(3))
    assert got["data"].dtype == np.uint8 and got["data"].shape == (3, 3072) and got["labels"] == [0, 1, 2]
    assert np.array_equal(got["data"], pickle.loads(py2_batch(3), encoding="latin1")["data"])
    ds = cifar.load_cifar("cifar10", _write_batches(tmp_path, py2_batch(5)), download=False)
    assert ds.train_x.shape == (5 + 4 * 4, 3, 32, 32) and ds.test_x.shape == (4, 3, 32, 32)


def _flags_dtype_batch(flags: int) -> bytes:
    """An allowed ``numpy.dtype('u1')`` whose BUILD state sets NumPy's object flags (1: NPY_ITEM_REFCOUNT),
    then an array of it."""
    blob = pickle.dumps({"data": np.full((4, 3072), 0x41, np.uint8), "labels": [0] * 4}, protocol=2)
    plain = b"J\xff\xff\xff\xffJ\xff\xff\xff\xffK\x00t"  # elsize -1, alignment -1, flags 0
    assert blob.count(plain) == 1
    return blob.replace(plain, b"J\xff\xff\xff\xffJ\xff\xff\xff\xffK" + bytes([flags]) + b"t")


def test_a_dtype_state_with_object_flags_is_refused_before_numpy_sees_it(tmp_path, capsys):
    """NumPy's ``__setstate__`` trusts such a state: a uint8 dtype then says it holds object references
    (flags 1), or loading fails inside NumPy with a SystemError (63); memory it then reads as pointers. The
    negative control runs in a child process, which it may corrupt."""
    probe = ("import pickle, sys; d = pickle.loads(sys.stdin.buffer.read(), encoding='latin1')['data']; "
             "print(d.dtype, d.dtype.hasobject, flush=True)")
    res = subprocess.run([sys.executable, "-c", probe], input=_flags_dtype_batch(1), capture_output=True,
                         timeout=60)
    assert res.stdout.split() == [b"uint8", b"True"], (res.returncode, res.stdout, res.stderr[-300:])
    for flags in (1, 63):
        with pytest.raises(UnsafePickleError, match="dtype state other than a plain uint8"):
            safe_loads(_flags_dtype_batch(flags))
    blob = _flags_dtype_batch(63)
    code, err = _run(capsys, ["cifar10", "--data-dir", str(_write_batches(tmp_path / "d", blob)), "--no-download",
                              "--out", str(tmp_path / "runs"), *CIFAR_TINY])
    assert code == EXIT_INPUT
    _one_line(err, "data_batch_1 is not a genuine CIFAR batch", "dtype state")
    assert not (tmp_path / "runs").exists()


def _nested(depth: int, width: int) -> list:
    """``width ** depth`` zeros as nested lists that share every level: a few hundred bytes pickled."""
    level: list = [0] * width
    for _ in range(depth - 1):
        level = [level] * width
    return level


def test_shared_references_that_would_expand_to_gigabytes_are_refused_unexpanded(tmp_path, capsys):
    """``np.asarray`` of ``data`` below would build 8**11 = 8.6e9 bytes (8 GiB) from a file of under 1 kB; the
    labels likewise. Refused on their types and lengths, before any conversion."""
    for data, labels, needle in ((_nested(11, 8), [0] * 8, "'data' must be a uint8 array"),
                                 (np.zeros((8, 3072), np.uint8), _nested(11, 8), "'labels' must be 8 integers")):
        blob = pickle.dumps({"data": data, "labels": labels}, protocol=2)
        assert len(pickle.dumps(_nested(11, 8), protocol=2)) < 1024
        folder = tmp_path / needle[:6].strip("' ")
        with pytest.raises(DataError, match=needle):
            cifar.load_cifar("cifar10", _write_batches(folder, blob), download=False)
    code, err = _run(capsys, ["cifar10", "--data-dir", str(folder), "--no-download", "--out",
                              str(tmp_path / "runs"), *CIFAR_TINY])
    assert code == EXIT_INPUT
    _one_line(err, "does not have the official CIFAR layout", "'labels' must be 8 integers")
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(("payload", "needle"), [
    # _reconstruct asked for a 1 TB array: ndarray pickles only ever ask for shape (0,)
    (b"\x80\x02cnumpy.core.multiarray\n_reconstruct\ncnumpy\nndarray\n\x8a\x06\x00\x00\x00\x00\x00\x01\x85"
     + _sbs(b"b") + b"\x87R.", "only as ndarray pickles use it"),
    # numpy.ndarray itself called with a 1 TB shape: the name is a marker, not the class
    (b"\x80\x02cnumpy\nndarray\n\x8a\x06\x00\x00\x00\x00\x00\x01\x85\x85R.", "not callable"),
    # BUILD on something other than a dtype or an array
    (b"\x80\x02]}b.", "BUILD on a list"),
    # a structured and an object dtype
    (b"\x80\x02cnumpy\ndtype\n" + _sbs(b"u1,u1") + b"\x85R.", "refused"),
    (b"\x80\x02cnumpy\ndtype\n" + _sbs(b"O") + b"\x85R.", "refused"),
])
def test_numpy_names_are_allowed_only_as_array_pickles_use_them(payload, needle):
    with pytest.raises((UnsafePickleError, TypeError), match=needle):
        safe_loads(payload)


def test_a_batch_file_larger_than_any_official_one_is_not_read(tmp_path, capsys):
    big = tmp_path / "d"
    _write_batches(big, py2_batch(4))
    with open(big / SPEC.folder / "data_batch_1", "r+b") as fh:  # sparse: no disk space used
        fh.truncate(cifar.max_batch_bytes("data_batch_1") + 1)
    code, err = _run(capsys, ["cifar10", "--data-dir", str(big), "--no-download", "--out", str(tmp_path / "runs"),
                              *CIFAR_TINY])
    assert code == EXIT_INPUT
    _one_line(err, "data_batch_1 is", "more than an official data_batch_1 can be")


# --------------------------------------------------------------------------------------------
# A folder of class folders
# --------------------------------------------------------------------------------------------


def _folder(root: Path, per_class: int = 3, classes=("a", "b")) -> Path:
    for c, name in enumerate(classes):
        (root / name).mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            Image.new("RGB", (20, 16), (100 * c, 10 * i, 50)).save(root / name / f"{i}.png")
    return root


def test_an_image_declaring_more_pixels_than_allowed_is_refused_before_decoding(tmp_path, capsys):
    """A 13000 x 13000 PNG compresses to about 160 kB and decodes to 2 GB of float32 (4.4 GB at the peak)."""
    root = _folder(tmp_path / "imgs")
    bomb = root / "a" / "bomb.png"
    Image.new("L", (13000, 13000)).save(bomb, optimize=True)
    assert bomb.stat().st_size < 300_000
    code, err = _run(capsys, [f"folder:{root}", *TINY, "--out", str(tmp_path / "runs")])
    assert code == EXIT_INPUT
    _one_line(err, "bomb.png is 13000 x 13000 pixels (169 megapixels)", "more than 50 megapixels")
    assert not (tmp_path / "runs").exists()


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_only_regular_files_count_as_images(tmp_path):
    """A FIFO named x.png (its open would wait forever for a writer) and a folder named y.png are no images."""
    root = _folder(tmp_path / "imgs")
    os.mkfifo(root / "a" / "x.png")
    (root / "b" / "y.png").mkdir()
    result: list = []
    worker = threading.Thread(target=lambda: result.append(folder_dataset(root, image_size=8)), daemon=True)
    worker.start()
    worker.join(timeout=60)
    if worker.is_alive():  # the FIFO's open blocks: release it so that the test process can end
        with open(root / "a" / "x.png", "wb"):
            pass
        worker.join(timeout=10)
        pytest.fail("loading the folder waited on the FIFO")
    ds = result[0]
    assert len(ds.train_x) + len(ds.test_x) == 6 and ds.classes == 2
    assert image_files(root) == sorted(root.glob("*/[0-9].png"))


@pytest.mark.parametrize("layout", ["one image per class", "test classes differ", "test split empty"])
def test_a_folder_whose_test_split_would_be_empty_is_refused_before_training(tmp_path, capsys, layout):
    root = tmp_path / "imgs"
    if layout == "one image per class":
        _folder(root, per_class=1, classes=("a", "b", "c"))
        needle = "every class has a single image"
    elif layout == "test classes differ":
        _folder(root / "train", per_class=2)
        _folder(root / "test", per_class=2, classes=("c", "d"))
        needle = "test/ has classes that train/ lacks (c, d)"
    else:
        _folder(root / "train", per_class=2)
        (root / "test" / "a").mkdir(parents=True)
        needle = "test/ holds no images of train/'s classes"
    code, err = _run(capsys, [f"folder:{root}", *TINY, "--batch-size", "2", "--out", str(tmp_path / "runs")])
    assert code == EXIT_USAGE
    _one_line(err, needle)
    assert not (tmp_path / "runs").exists()  # refused before training: no run directory, no IndexError
