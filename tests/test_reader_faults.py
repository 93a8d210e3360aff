"""Every reader validates (``scale.engine.read``): damaged grids for ``scale.paper_report``, crafted ``OUT.json`` for
``load_backbone``, a FIFO where a streamed image was, an unbounded ``--augment-workers``, images a labelled folder
leaves out. Each case: its documented exit code or ``RunError``, one line, no traceback, nothing written; the
cases that hung (a 200000-layer head spec, a FIFO) run in a child with a deadline, so a hang fails instead of
stopping the suite.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from scale import paper_report
from scale.runs.faults import EXIT_INPUT, EXIT_USAGE

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
DROP = ["setpriv", "--inh-caps=-dac_override,-dac_read_search", "--bounding-set=-dac_override,-dac_read_search"]
DEEP = b"[" * 200_000 + b"]" * 200_000  # Python's decoder recurses: RecursionError without a bound


def _grid(root: Path) -> Path:
    """A grid plan folder as scale.paper leaves it, with one finished E1 run's unit file (what the report reads)."""
    from scale.grid import unit_files

    grid = root / "grid-000000000000"
    grid.mkdir(parents=True)
    (grid / "manifest.json").write_text(json.dumps({
        "dataset": "synthetic", "backbone": "resnet18", "quick": True, "command": "python -m scale.paper --quick",
        "experiments": ["E1"], "assumptions": {"E1": "x"}, "paper_choices": None, "versions": {"torch": "2"},
        "git_commit": "abc",
        "runs": [{"name": "e1-linear", "experiment": "E1", "seed": 0,
                  "labels": {"head": "linear", "bn": False, "lr": 0.05}, "argv": [], "paper": {}}]}))
    _unit(grid).parent.mkdir()
    _unit(grid).write_text(json.dumps({  # what the unit store checks: it says what its name says (scale.unit_store)
        "plan": grid.name, "name": "e1-linear", "device": "cpu", "threads": 1,
        "key_hash": unit_files.run_key([], {}, False),
        "experiment": "E1", "seed": 0, "labels": {"head": "linear", "bn": False, "lr": 0.05}, "argv": [],
        "status": "finished", "summary": {"status": "finished", "epochs_done": 1, "wall_seconds": 1.0},
        "metrics": [{"epoch": 1, "loss": 0.5, "h_std": 0.1, "h_cond": 10.0}]}))
    assert unit_files.run_key([], {}, False) == _unit(grid).stem.rsplit("--", 1)[1]
    return grid


def _unit(grid: Path) -> Path:
    from scale.grid import unit_files

    return grid.parent / "units" / f"{grid.name}--e1-linear--cpu-t1--{unit_files.run_key([], {}, False)}.json"


def _damage(grid: Path, **fields) -> None:
    unit = json.loads(_unit(grid).read_text())
    _unit(grid).write_text(json.dumps({**unit, **fields}))


def _report(grid: Path, capsys) -> tuple[int, list[str]]:
    code = paper_report.main([str(grid)])
    return code, capsys.readouterr().err.strip().splitlines()


def test_the_intact_grid_is_reported(tmp_path, capsys):  # the control: the damage below is what is refused
    grid = _grid(tmp_path)
    assert _report(grid, capsys)[0] == 0 and "| e1-linear | finished | 1 |" in (grid / "report.md").read_text()


@pytest.mark.parametrize("case", ["deep manifest", "random bytes manifest", "list manifest", "list as runs",
                                  "string metric", "list metric", "summary status a number",
                                  "summary final a list", "summary probe a string", "manifest a FIFO",
                                  "label lr a string", "experiments a string", "deviations a list", "deep unit",
                                  "metrics a dict", "orbits a string"])
def test_a_damaged_grid_is_one_line_and_exit_1(tmp_path, capsys, case):
    grid = _grid(tmp_path)
    summary = {"status": "finished", "epochs_done": 1, "wall_seconds": 1.0}
    if case == "deep manifest":
        (grid / "manifest.json").write_bytes(DEEP)
    elif case == "random bytes manifest":
        (grid / "manifest.json").write_bytes(np.random.default_rng(0).bytes(4096))
    elif case == "list manifest":
        (grid / "manifest.json").write_text("[1, 2, 3]")
    elif case == "list as runs":
        m = json.loads((grid / "manifest.json").read_text())
        (grid / "manifest.json").write_text(json.dumps({**m, "runs": [[1]]}))
    elif case == "string metric":
        _damage(grid, metrics=[{"epoch": 1, "h_std": "high", "h_cond": 1.0}])
    elif case == "list metric":
        _damage(grid, metrics=[{"epoch": 1, "h_std": [0.1], "h_cond": 1.0}])
    elif case == "summary status a number":
        _damage(grid, summary={**summary, "status": 5})
    elif case == "summary final a list":
        _damage(grid, summary={**summary, "final": [1, 2]})
    elif case == "summary probe a string":
        _damage(grid, summary={**summary, "class_probe": "high"})
    elif case == "manifest a FIFO":
        (grid / "manifest.json").unlink()
        os.mkfifo(grid / "manifest.json")
    elif case == "label lr a string":
        m = json.loads((grid / "manifest.json").read_text())
        m["runs"][0]["labels"]["lr"] = "fast"
        (grid / "manifest.json").write_text(json.dumps(m))
    elif case == "experiments a string":
        m = json.loads((grid / "manifest.json").read_text())
        (grid / "manifest.json").write_text(json.dumps({**m, "experiments": "E1"}))
    elif case == "deviations a list":
        _damage(grid, deviations=[])
    elif case == "deep unit":
        _unit(grid).write_bytes(DEEP)
    elif case == "metrics a dict":
        _damage(grid, metrics={"epoch": 1})
    elif case == "orbits a string":
        _damage(grid, orbits="a picture")
    code, err = _report(grid, capsys)
    assert code == EXIT_INPUT and len(err) == 1 and err[0].startswith("scale.paper_report: error: "), err
    assert not (grid / "report.md").exists()


def test_an_unreadable_unit_file_is_one_line_and_exit_1(tmp_path):
    """A unit file without read permission (a real one: the child runs without root's capability to read all)."""
    if os.geteuid() == 0 and (shutil.which("setpriv") is None
                              or subprocess.run([*DROP, "true"], capture_output=True).returncode != 0):
        pytest.skip("running as root and unable to drop the capability to read anything")
    grid = _grid(tmp_path / "out")
    unit = _unit(grid)
    unit.chmod(0)
    try:
        done = subprocess.run([*(DROP if os.geteuid() == 0 else []), sys.executable, "-m", "scale.paper_report",
                               str(grid)], capture_output=True, text=True, env=ENV, timeout=120)
    finally:
        unit.chmod(0o644)
    err = done.stderr.strip().splitlines()
    assert done.returncode == EXIT_INPUT and len(err) == 1 and str(unit) in err[0], done.stderr
    assert not (grid / "report.md").exists()


def _exported(tmp_path: Path, arch: bytes) -> Path:
    out = tmp_path / "backbone.pt"
    torch.save({}, out)  # an empty state_dict: loading it is harmless, the architecture decides
    Path(f"{out}.json").write_bytes(arch)
    return out


LOAD = "import sys; from scale import load_backbone\ntry:\n    load_backbone(sys.argv[1])\nexcept Exception as e:\n" \
       "    print(type(e).__name__, str(e), file=sys.stderr); sys.exit(1)\n"


@pytest.mark.parametrize("case", ["deep", "list builder", "dict builder", "200000 layers", "list module"])
def test_a_crafted_architecture_file_is_one_run_error(tmp_path, case):
    arch = {"format": 1, "part": "projector", "builder": "build_head", "module": None,
            "arguments": {"spec": "gelu3", "d": 4, "k": 4, "width": 4}}
    if case == "deep":
        data = b'{"format": 1, "builder": ' + DEEP + b"}"
    else:
        if case == "list builder":
            arch["builder"] = ["build_head"]
        elif case == "dict builder":
            arch["builder"] = {"a": 1}
        elif case == "200000 layers":
            arch["arguments"]["spec"] = "gelu200000"
        elif case == "list module":
            arch.update(builder=None, module=["x"])
        data = json.dumps(arch).encode()
    path = _exported(tmp_path, data)
    done = subprocess.run([sys.executable, "-c", LOAD, str(path)], capture_output=True, text=True, env=ENV,
                          timeout=60)  # the 200000-layer spec built layer after layer without end before
    err = done.stderr.strip().splitlines()
    assert done.returncode == 1 and len(err) == 1 and err[0].startswith("RunError "), done.stderr


FIFO_MID_RUN = r'''
import os, sys
from pathlib import Path
import scale.engine.folders as folders
from scale.engine.hooks import Hook
from scale.run import main
folders.stream_threshold = lambda: 0  # every folder streams: images are decoded as training reads them
victims = sorted(Path(sys.argv[1]).rglob("*.png"))

class Fifo(Hook):  # after the first epoch every image becomes a FIFO (a real one) where the file was
    def on_epoch_end(self, state):
        for p in victims:
            p.unlink()
            os.mkfifo(p)

sys.exit(main(sys.argv[2:], hooks=[Fifo()]))
'''


def _folder(root: Path, classes=("a", "b"), per_class=6, loose=0) -> Path:
    from PIL import Image

    rng = np.random.default_rng(0)
    for c in classes:
        (root / c).mkdir(parents=True)
        for i in range(per_class):
            Image.fromarray(rng.integers(0, 255, (12, 12, 3), dtype=np.uint8)).save(root / c / f"{i}.png")
    for i in range(loose):
        Image.fromarray(rng.integers(0, 255, (12, 12, 3), dtype=np.uint8)).save(root / f"loose{i}.png")
    return root


FOLDER_TINY = ["--batch-size", "8", "--backbone-width", "4", "--head-width", "16", "--head-out", "8",
               "--image-size", "8", "--probe-size", "8", "--no-final-measure", "--quiet", "--threads", "1"]


def test_a_streamed_image_that_becomes_a_fifo_ends_the_run_with_exit_1(tmp_path):
    folder = _folder(tmp_path / "imgs")
    done = subprocess.run([sys.executable, "-c", FIFO_MID_RUN, str(folder), f"folder:{folder}", *FOLDER_TINY,
                           "--epochs", "3", "--out", str(tmp_path / "out")], capture_output=True, text=True, env=ENV,
                          timeout=180)  # the open of a FIFO waited for a writer forever before
    assert done.returncode == EXIT_INPUT, done.stderr
    assert "not a regular file" in done.stderr and "last good checkpoint" in done.stderr, done.stderr


def test_augment_workers_are_bounded_and_counted_in_the_memory_budget(tmp_path, capsys):
    from scale.engine.config import TrainConfig
    from scale.run import main
    from scale.runs import budget
    from scale.runs.validate import MAX_AUGMENT_WORKERS

    code = main(["synthetic", *FOLDER_TINY, "--augment-workers", "100000", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == EXIT_USAGE and "--augment-workers 100000" in err and str(MAX_AUGMENT_WORKERS) in err, err
    assert not any(tmp_path.iterdir())
    cfg = TrainConfig(dataset="synthetic", augment_workers=200, augment_path="workers")
    assert budget.need(cfg).workers == 200 * budget.WORKER_BYTES
    assert budget.need(cfg).total - budget.need(TrainConfig(dataset="synthetic", augment_workers=1,
                                                           augment_path="workers")).total == 199 * budget.WORKER_BYTES


def test_images_beside_the_class_folders_are_announced(tmp_path, capsys):
    from scale.engine.folders import folder_dataset
    from scale.run import main

    folder = _folder(tmp_path / "imgs", loose=2)
    data = folder_dataset(folder, 8)
    assert len(data.notes) == 1 and "2 image(s)" in data.notes[0] and "loose0.png" in data.notes[0]
    assert folder_dataset(_folder(tmp_path / "clean"), 8).notes == ()  # the control: nothing left out
    assert main([f"folder:{folder}", *FOLDER_TINY, "--epochs", "1", "--out", str(tmp_path / "out")]) == 0
    assert "loose0.png" in capsys.readouterr().err  # said even with --quiet
