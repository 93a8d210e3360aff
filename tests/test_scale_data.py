"""scale.engine.data and scale.engine.cifar: CIFAR archives in the official python-pickle format (built here, tiny),
offline and corrupt-file messages, digits in the backbone's format."""

from __future__ import annotations

import io
import pickle
import tarfile

import numpy as np
import pytest
import torch

from scale.engine import cifar
from scale.engine import data as sd
from scale.engine.data_errors import DataError
from scale.run import main


def _batch(n: int, label_key: str, rng: np.random.Generator) -> bytes:
    labels = rng.integers(0, 10, n).tolist()
    data = rng.integers(0, 256, (n, 3072), dtype=np.uint8)
    return pickle.dumps({"batch_label": "tiny", label_key: labels, "data": data, "filenames": ["x"] * n}, protocol=2)


def _members(name: str, rng) -> dict[str, bytes]:
    spec = cifar.ARCHIVES[name]
    out = {f"{spec.folder}/{f}": _batch(4, spec.label_key, rng) for f in spec.train_files}
    out.update({f"{spec.folder}/{f}": _batch(3, spec.label_key, rng) for f in spec.test_files})
    return out


def _write_archive(path, members: dict[str, bytes]) -> None:
    with tarfile.open(path, "w:gz") as tar:
        for member, blob in members.items():
            info = tarfile.TarInfo(member)
            info.size = len(blob)
            tar.addfile(info, io.BytesIO(blob))


@pytest.fixture
def tiny_cifar(tmp_path, monkeypatch):
    """A tiny official-format archive for each CIFAR; the MD5 table points at it (as it would at the real one)."""
    rng = np.random.default_rng(0)
    made = {}
    for name, spec in cifar.ARCHIVES.items():
        members = _members(name, rng)
        path = tmp_path / spec.filename
        _write_archive(path, members)
        monkeypatch.setitem(cifar.ARCHIVES, name, cifar.CifarArchive(**{**spec.__dict__, "md5": cifar.md5sum(path)}))
        made[name] = members
    return tmp_path, made


@pytest.mark.parametrize("name", ["cifar10", "cifar100"])
def test_archive_and_extracted_folder_agree(tiny_cifar, tmp_path, name):
    root, made = tiny_cifar
    members = made[name]
    spec = cifar.ARCHIVES[name]
    ds = sd.load_dataset(name, root, download=False)
    n_train = 4 * len(spec.train_files)
    assert ds.train_x.shape == (n_train, 3, 32, 32) and ds.train_x.dtype == torch.uint8
    assert ds.test_x.shape == (3, 3, 32, 32) and ds.classes == spec.classes
    # layout: the first 1024 bytes of a row are the red plane, row-major
    first = pickle.loads(members[f"{spec.folder}/{spec.train_files[0]}"], encoding="latin1")
    assert np.array_equal(ds.train_x[0, 0].numpy().ravel(), first["data"][0, :1024])
    assert ds.train_y[: 4].tolist() == first[spec.label_key]
    # the extracted folder gives the same arrays; so does --data-dir pointing at the archive itself
    folder = tmp_path / "extracted"
    with tarfile.open(root / spec.filename) as tar:
        tar.extractall(folder, filter="data")
    ds2 = sd.load_dataset(name, folder, download=False)
    ds3 = sd.load_dataset(name, root / spec.filename, download=False)
    for other in (ds2, ds3):
        assert torch.equal(other.train_x, ds.train_x) and torch.equal(other.test_y, ds.test_y)


def test_offline_message_names_file_and_place(tmp_path, capsys):
    with pytest.raises(DataError) as err:
        sd.load_dataset("cifar100", tmp_path, download=False)
    msg = str(err.value)
    assert "cifar-100-python.tar.gz" in msg and str(tmp_path) in msg and "cifar-100-python" in msg
    code = main(["cifar10", "--data-dir", str(tmp_path), "--no-download", "--quiet", "--out", str(tmp_path)])
    captured = capsys.readouterr()
    assert code == 1
    assert "cifar-10-python.tar.gz" in captured.err and "Traceback" not in captured.err


def test_truncated_archive_is_reported(tiny_cifar):
    root, _ = tiny_cifar
    path = root / cifar.ARCHIVES["cifar10"].filename
    path.write_bytes(path.read_bytes()[:200])
    with pytest.raises(DataError, match="corrupt or truncated: MD5"):
        sd.load_dataset("cifar10", root, download=False)


def test_truncated_archive_with_matching_checksum_is_reported(tiny_cifar, monkeypatch):
    """Even when the checksum is not what catches it (a matching entry), the tar reader's failure is named."""
    root, _ = tiny_cifar
    spec = cifar.ARCHIVES["cifar10"]
    path = root / spec.filename
    path.write_bytes(path.read_bytes()[:300])
    monkeypatch.setitem(cifar.ARCHIVES, "cifar10", cifar.CifarArchive(**{**spec.__dict__, "md5": cifar.md5sum(path)}))
    with pytest.raises(DataError, match="corrupt or truncated"):
        sd.load_dataset("cifar10", root, download=False)


def test_bad_pickle_is_reported(tmp_path):
    spec = cifar.ARCHIVES["cifar10"]
    folder = tmp_path / spec.folder
    folder.mkdir()
    rng = np.random.default_rng(1)
    for f in (*spec.train_files, *spec.test_files):
        (folder / f).write_bytes(_batch(2, spec.label_key, rng))
    (folder / spec.train_files[2]).write_bytes(b"not a pickle at all")
    with pytest.raises(DataError, match="not a readable CIFAR pickle"):
        sd.load_dataset("cifar10", tmp_path, download=False)


def test_digits_in_backbone_format():
    ds = sd.load_dataset("digits", image_size=16)
    assert ds.train_x.shape == (sd.DIGITS_TRAIN, 3, 16, 16) and ds.train_x.dtype == torch.uint8
    assert len(ds.train_x) + len(ds.test_x) == 1797
    assert torch.equal(ds.train_x[:, 0], ds.train_x[:, 2])  # grey repeated to RGB
    assert int(ds.train_x.max()) == 255 and set(ds.test_y.tolist()) == set(range(10))
