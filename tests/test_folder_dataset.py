"""``python -m scale.run folder:PATH``: your own images, one sub-folder per class (read with Pillow)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from scale import run as scale_run
from scale.engine.data import DataError, folder_dataset

TINY = ["--epochs", "1", "--batch-size", "8", "--backbone-width", "4", "--head-width", "16", "--head-out", "8",
        "--image-size", "16", "--probe-size", "8", "--orbits", "2x1", "--probe-images", "4", "--quiet",
        "--threads", "1"]


def make_folder(root, classes=("cats", "dogs"), per_class=6, size=(20, 14)):
    rng = np.random.default_rng(0)
    for c, name in enumerate(classes):
        (root / name).mkdir(parents=True)
        for i in range(per_class):
            arr = rng.integers(0, 255, (*size[::-1], 3), dtype=np.uint8)
            arr[..., c] = 255  # a class colour
            Image.fromarray(arr).save(root / name / f"{i}.{'png' if i % 2 else 'jpg'}")
    return root


def test_folder_dataset_reads_classes_and_splits(tmp_path):
    data = folder_dataset(make_folder(tmp_path / "imgs"), image_size=16)
    assert data.classes == 2 and data.train_x.dtype.is_floating_point is False
    assert data.train_x.shape[1:] == (3, 16, 16) and len(data.train_x) + len(data.test_x) == 12
    assert sorted(set(data.test_y.tolist())) == [0, 1]  # every class has held-out images
    assert len(data.mean) == 3 and all(s > 0 for s in data.std)
    red = [float(data.train_x[data.train_y == c][:, 0].float().mean()) for c in (0, 1)]
    assert red[0] > 240 > 160 > red[1]  # class 0 = "cats" (sorted names) = the saturated red channel


def test_scale_run_trains_on_a_folder(tmp_path, capsys):
    folder = make_folder(tmp_path / "imgs")
    assert scale_run.main([f"folder:{folder}", "--out", str(tmp_path / "runs"), "--run-name", "r", *TINY]) == 0
    run_dir = tmp_path / "runs" / "r"
    cfg = json.loads((run_dir / "config.json").read_text())
    assert cfg["dataset"] == f"folder:{folder}" and cfg["image_size"] == 16
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "finished"


@pytest.mark.parametrize("make", ["missing", "empty", "no-images"])
def test_an_empty_or_missing_folder_is_one_line_exit_2(tmp_path, capsys, make):
    folder = tmp_path / "imgs"
    if make != "missing":
        folder.mkdir()
    if make == "no-images":
        (folder / "cats").mkdir()
        (folder / "cats" / "notes.txt").write_text("not an image")
    out = tmp_path / "runs"
    assert scale_run.main([f"folder:{folder}", "--out", str(out), *TINY]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(folder) in err[0], err
    assert not out.exists()


def test_an_unreadable_image_is_a_data_error(tmp_path, capsys):
    folder = make_folder(tmp_path / "imgs")
    (folder / "dogs" / "broken.png").write_bytes(b"not a png at all")
    with pytest.raises(DataError, match=r"cannot be read"):
        folder_dataset(folder, image_size=16)
    out = tmp_path / "runs"
    assert scale_run.main([f"folder:{folder}", "--out", str(out), *TINY]) == 1
    assert len(capsys.readouterr().err.strip().splitlines()) == 1 and not out.exists()
