"""``python -m scale.run folder:PATH``: your own images, one sub-folder per class or without labels, held in
memory or streamed from disk, of any bit depth Pillow reads (16-bit and [0, 1] float included)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from PIL import Image

from scale import run as scale_run
from scale.engine.data_errors import DataError
from scale.engine.folders import folder_dataset

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


# --------------------------------------------------------------------------------------------
# Images as users keep them: without labels, larger than memory (streamed), 16-bit and float
# --------------------------------------------------------------------------------------------


def make_flat(root, n=20, size=(24, 20)):
    root.mkdir(parents=True)
    rng = np.random.default_rng(1)
    for i in range(n):
        Image.fromarray(rng.integers(0, 255, (*size[::-1], 3), dtype=np.uint8)).save(root / f"img{i:02d}.png")
    return root


def test_a_folder_without_class_sub_folders_trains_and_measures_what_needs_no_labels(tmp_path, capsys):
    folder = make_flat(tmp_path / "flat")
    data = folder_dataset(folder, image_size=16)
    assert not data.labelled and data.classes == 1 and (len(data.train_x), len(data.test_x)) == (16, 4)
    assert scale_run.main([f"folder:{folder}", "--out", str(tmp_path / "runs"), "--run-name", "r", *TINY]) == 0
    summary = json.loads((tmp_path / "runs" / "r" / "summary.json").read_text())
    assert summary["class_probe"] is None and summary["rotation_probes"] is not None
    assert summary["geometry"]["settings"]["n_orbits"] == 2 and summary["geometry"]["verdict"]["verdict"]
    assert any("class probe skipped: the images have no labels" in n for n in summary["notes"])
    assert "class probe skipped" in (tmp_path / "runs" / "r" / "report.md").read_text()


def test_one_class_skips_the_class_probe_with_the_reason(tmp_path, capsys):
    folder = make_folder(tmp_path / "imgs", classes=("only",), per_class=12)
    assert scale_run.main([f"folder:{folder}", "--out", str(tmp_path / "runs"), "--run-name", "r", *TINY]) == 0
    out = capsys.readouterr().out
    assert "nothing to tell apart" in out and "100.00 %" not in out
    assert json.loads((tmp_path / "runs" / "r" / "summary.json").read_text())["class_probe"] is None


def test_a_streamed_folder_gives_the_same_images_and_the_same_run(tmp_path, capsys, monkeypatch):
    """Above the size threshold the splits are decoded from disk by DataLoader workers as training reads them;
    the images, the statistics and the whole run are those of the in-memory path."""
    from scale.engine import folders
    from scale.engine.images import ImageFiles

    folder = make_folder(tmp_path / "imgs", per_class=10)
    held, streamed = folder_dataset(folder, 16, stream=False), folder_dataset(folder, 16, stream=True)
    assert isinstance(streamed.train_x, ImageFiles) and streamed.streamed and not held.streamed
    assert torch.equal(streamed.train_x[torch.arange(len(held.train_x))], held.train_x)
    assert torch.equal(streamed.test_x[:], held.test_x) and streamed.mean == held.mean and streamed.std == held.std
    batches = list(streamed.train_x.batches([torch.tensor([3, 1]), torch.tensor([0, 2, 5])]))
    assert [b.shape[0] for b in batches] == [2, 3] and torch.equal(batches[1], held.train_x[[0, 2, 5]])

    argv = [f"folder:{folder}", "--out", str(tmp_path / "runs"), *TINY, "--augment-path", "batched"]
    assert scale_run.main([*argv, "--run-name", "held"]) == 0
    monkeypatch.setattr(folders, "STREAM_CAP_BYTES", 0)  # every folder streams
    read = []
    batches_of = ImageFiles.batches
    monkeypatch.setattr(ImageFiles, "batches", lambda self, b: (read.append(len(b)), batches_of(self, b))[1])
    assert scale_run.main([*argv, "--run-name", "streamed"]) == 0
    assert read == [2]  # one epoch of 2 steps, read through the workers
    assert "decoded from disk as training reads them" in scale_run.data_notes(folder_dataset(folder, 16))[0]
    runs = [tmp_path / "runs" / name for name in ("held", "streamed")]
    metrics = [(r / "metrics.jsonl").read_text() for r in runs]
    # timings, and the online kNN, which reads images held in memory only (OnlineKnn.applies: not a streamed split)
    drop = {"epoch_seconds", "images_per_s", "knn_z", "knn_z_initial", "loss_chance"}
    strip = [[{k: v for k, v in json.loads(line).items() if k not in drop} for line in m.splitlines()] for m in metrics]
    assert strip[0] == strip[1]  # bitwise the same training on a CPU
    probes = [json.loads((r / "summary.json").read_text())["class_probe"]["accuracy"] for r in runs]
    assert probes[0] == probes[1]


def test_16_bit_and_float_images_are_read_at_their_scale_or_refused(tmp_path):
    from scale.engine.images import image_to_unit, read_image

    ramp = np.linspace(0.0, 1.0, 32 * 32).reshape(32, 32)
    Image.fromarray((ramp * 65535).round().astype(np.uint16)).save(tmp_path / "grey16.png")
    Image.fromarray(ramp.astype(np.float32)).save(tmp_path / "unit.tif")
    Image.fromarray((ramp * 255).round().astype(np.uint8)).save(tmp_path / "grey8.png")
    with Image.open(tmp_path / "grey16.png") as im:
        assert im.mode.startswith("I") and np.asarray(im.convert("RGB")).mean() > 250  # Pillow's 8-bit path: white
    eight = read_image(tmp_path / "grey8.png", 32)
    for name in ("grey16.png", "unit.tif"):
        x = read_image(tmp_path / name, 32)
        assert x.shape == (3, 32, 32) and torch.equal(x[0], x[2])
        assert (x - eight).abs().max() < 1.0 / 255 + 1e-6, name  # the same ramp as the 8-bit file
    for values, mode, needle in ((ramp * 5, np.float32, "values in \\[0, 5\\]"),
                                 (ramp - 0.5, np.float32, "values in \\[-0.5, 0.5\\]")):
        with pytest.raises(DataError, match=needle):
            image_to_unit(Image.fromarray(values.astype(mode)), "x.tif")
    with pytest.raises(DataError, match="beyond 16 bits"):
        image_to_unit(Image.fromarray((ramp * 1e6).astype(np.int32)), "x.tif")


def test_a_refused_image_in_a_folder_is_one_line_exit_1(tmp_path, capsys):
    folder = make_folder(tmp_path / "imgs")
    Image.fromarray((np.ones((20, 14)) * 7).astype(np.float32)).save(folder / "dogs" / "hdr.tif")
    out = tmp_path / "runs"
    assert scale_run.main([f"folder:{folder}", "--out", str(out), *TINY]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "hdr.tif" in err[0] and "only floats in [0, 1]" in err[0] and not out.exists()


def test_a_streamed_file_removed_during_training_is_one_line_exit_1(tmp_path, capsys, monkeypatch):
    """The real fault: an image deleted after the folder was listed, read by a DataLoader worker mid-run."""
    from scale.engine import folders
    from scale.engine.hooks import Hook

    folder = make_folder(tmp_path / "imgs", per_class=10)
    monkeypatch.setattr(folders, "STREAM_CAP_BYTES", 0)

    class RemoveAnImage(Hook):
        def on_fit_start(self, state):
            for path in sorted(folder.rglob("*.png")):
                path.unlink()

    out = tmp_path / "runs"
    code = scale_run.main([f"folder:{folder}", "--out", str(out), "--run-name", "r", *TINY], hooks=[RemoveAnImage()])
    assert code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "data error" in err[0] and ".png" in err[0] and "Traceback" not in err[0], err
    summary = json.loads((out / "r" / "summary.json").read_text())
    assert summary["status"] == "data error" and not (out / "r" / ".lock").exists()
