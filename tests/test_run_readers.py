"""Every reader of a run directory validates what it reads, and every reader of a user's file gives one line.

``load_run`` (so ``scale.analyze RUN_DIR`` and ``scale.export``) takes config.json as ``--resume`` does: the same
validation as ``scale.run`` (``scale.runs.validate``) and agreement with the checkpoint's own config; nothing a
run directory says is imported or executed. Recipes (``--config``) that are not text, not regular files or say
one setting twice; checkpoints that are not checkpoints; a stdout that closes under a run.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import shutil
import sys
import threading
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from scale import analyze, export
from scale.engine.checkpoint import load_checkpoint
from scale.run import main
from scale.runs.faults import EXIT_INPUT, EXIT_USAGE
from scale.runs.load import RunError, load_run

TINY = ["synthetic", "--train-subset", "96", "--batch-size", "32", "--probe-size", "32", "--head-width", "16",
        "--head-out", "8", "--backbone-width", "4", "--image-size", "8", "--no-final-measure", "--threads", "1",
        "--epochs", "1"]


def _lines(capsys) -> list[str]:
    return capsys.readouterr().err.strip().splitlines()


def _one_line(err: list[str], *needles: str) -> str:
    assert len(err) == 1 and "Traceback" not in err[0], err
    for needle in needles:
        assert needle in err[0], (needle, err[0])
    return err[0]


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("runs")
    assert main([*TINY, "--quiet", "--out", str(out), "--run-name", "done"]) == 0
    return out / "done"


@pytest.fixture
def run_copy(finished, tmp_path) -> Path:
    shutil.copytree(finished, tmp_path / "run")
    return tmp_path / "run"


def _edit(run: Path, in_checkpoint: bool = False, **changes) -> None:
    """Change config.json (and the checkpoint's copy of the config, so that the two agree); None removes."""
    def apply(cfg: dict) -> dict:
        for k, v in changes.items():
            cfg.pop(k) if v is None else cfg.__setitem__(k, v)
        return cfg

    (run / "config.json").write_text(json.dumps(apply(json.loads((run / "config.json").read_text()))))
    if in_checkpoint:
        ck = load_checkpoint(run / "checkpoint.pt")
        ck["config"] = apply(ck["config"])
        torch.save(ck, run / "checkpoint.pt")


@pytest.mark.parametrize(("changes", "needle"), [
    # config.json edited alone: a silently wrong analysis before (another dataset, another activation)
    (dict(dataset="digits"), "disagrees with its checkpoint.pt on dataset ('digits' vs 'synthetic')"),
    (dict(head="relu3"), "disagrees with its checkpoint.pt on head ('relu3' vs 'gelu3')"),
    (dict(dataset=None), "disagrees with its checkpoint.pt on dataset (None vs 'synthetic')"),
])
def test_load_run_refuses_a_config_json_that_disagrees_with_its_checkpoint(run_copy, capsys, changes, needle):
    _edit(run_copy, **changes)
    with pytest.raises(RunError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        load_run(run_copy)
    assert export.main([str(run_copy), str(run_copy / "backbone.pt")]) == EXIT_USAGE
    _one_line(_lines(capsys), "scale.export: error:", needle)
    assert not (run_copy / "backbone.pt").exists()


@pytest.mark.parametrize(("changes", "needle"), [
    (dict(head="gelu999999"), "999999 Linear layers; at most 32"),  # it allocated 12 GB over a minute
    (dict(dataset=None), "lacks the keys ['dataset']"),  # it fell back to synthetic
    (dict(head_width="wide"), "head_width in"),
    (dict(image_size=-1), "image_size in"),
    (dict(image_size=4096), "above the supported maximum 1024"),
    (dict(backbone="vit_huge"), "backbone in"),
    (dict(method="moco"), "method in"),
    (dict(head_bias="yes"), "must be of type bool"),
    (dict(backbone_width=65536), "at most 1,000,000,000 are supported"),
])
def test_load_run_validates_the_saved_config_as_scale_run_does(run_copy, changes, needle):
    """config.json and the checkpoint agreeing on a value scale.run refuses: refused by the same function, with
    the same one line, before anything is built (``scale.runs.validate.config_from_dict``)."""
    _edit(run_copy, in_checkpoint=True, **changes)
    with pytest.raises(RunError, match=needle.replace("[", r"\[").replace("]", r"\]")):
        load_run(run_copy)
    (run_copy / "config.json").unlink()  # without config.json, the checkpoint's copy is validated the same way
    with pytest.raises(RunError, match=needle.replace("[", r"\[").replace("]", r"\]")):
        load_run(run_copy)


def test_a_run_directory_never_names_a_module_to_import(run_copy, tmp_path, monkeypatch, capsys):
    """``module:callable`` is taken from the command line only: a config.json naming one is refused by its
    validation, and the module is never imported (it would leave a marker file)."""
    marker = tmp_path / "imported"
    (tmp_path / "evilmod.py").write_text(f"open({str(marker)!r}, 'w').close()\ndef make():\n    return None\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    _edit(run_copy, in_checkpoint=True, backbone="evilmod:make", head="evilmod:make")
    with pytest.raises(RunError, match="not one of"):
        load_run(run_copy)
    assert analyze.main([str(run_copy), "--device", "cpu"]) == EXIT_USAGE
    _one_line(_lines(capsys), "scale.analyze: error:", "'evilmod:make' is not one of")
    assert not marker.exists() and "evilmod" not in sys.modules
    assert not (run_copy / "analysis").exists()


@pytest.mark.parametrize("content", [b"", b"this is a text file\n", b"\x00\xff" * 64, "truncated", "code"])
def test_a_garbage_checkpoint_is_one_plain_line_for_every_reader(run_copy, capsys, content):
    """No reader shows torch's multi-line text (its advice to load with weights_only=False would run the
    file's code), nor the mmap or miniz messages."""
    path = run_copy / "checkpoint.pt"
    if content == "truncated":
        blob = path.read_bytes()[: path.stat().st_size // 2]
    elif content == "code":
        blob = pickle.dumps(type("Evil", (), {"__reduce__": lambda self: (os.system, ("true",))})(), protocol=2)
    else:
        blob = content
    path.write_bytes(blob)
    assert main(["--resume", str(run_copy), "--quiet"]) == EXIT_INPUT
    assert export.main([str(run_copy), str(run_copy / "b.pt")]) == EXIT_USAGE
    err = _lines(capsys)
    assert len(err) == 2, err
    for line in err:
        assert "checkpoint.pt is not a readable checkpoint (" in line
        for torch_text in ("weights_only", "Weights only", "mmap", "miniz", "PytorchStreamReader", "Traceback"):
            assert torch_text not in line, (torch_text, line)
    if content == "code":
        assert all("it names posix.system" in line or "it names os.system" in line for line in err), err
    assert path.read_bytes() == blob


# --------------------------------------------------------------------------------------------
# --config: a recipe that is not text, not a regular file, or says one setting twice
# --------------------------------------------------------------------------------------------


def test_a_recipe_of_random_bytes_or_with_a_setting_written_twice_is_one_line(tmp_path, capsys):
    recipe = tmp_path / "recipe.toml"
    for blob, needle in ((os.urandom(256) + b"\xff", "not a text file"),
                         (b"head_width = 16\nhead-width = 32\n", "'head_width' and 'head-width' are the same setting")):
        recipe.write_bytes(blob)
        assert main(["--config", str(recipe), *TINY, "--out", str(tmp_path / "runs")]) == EXIT_USAGE
        _one_line(_lines(capsys), f"--config {recipe}", needle)
    assert not (tmp_path / "runs").exists()


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_a_recipe_that_is_a_fifo_is_refused_without_waiting(tmp_path, capsys):
    fifo = tmp_path / "recipe.toml"
    os.mkfifo(fifo)
    codes: list[int] = []
    worker = threading.Thread(target=lambda: codes.append(main(["--config", str(fifo), *TINY])), daemon=True)
    worker.start()
    worker.join(timeout=60)
    if worker.is_alive():
        with open(fifo, "wb"):  # release the blocked open so that the test process can end
            pass
        worker.join(timeout=10)
        pytest.fail("--config waited on the FIFO")
    assert codes == [EXIT_USAGE]
    _one_line(_lines(capsys), "not a regular file")


# --------------------------------------------------------------------------------------------
# A closed stdout
# --------------------------------------------------------------------------------------------


def test_a_stdout_closed_under_a_run_does_not_change_its_result(tmp_path, monkeypatch):
    """``python -m scale.run ... | head -1``: the reader goes away after a line; the run finishes, exit 0."""
    read, write = os.pipe()
    os.close(read)  # the reader is gone: every write now fails with EPIPE
    stream = io.TextIOWrapper(io.FileIO(write, "w"), line_buffering=True)
    with pytest.raises(BrokenPipeError):  # negative control: a plain write to it fails
        print("x", file=stream)
    monkeypatch.setattr(sys, "stdout", stream)
    try:
        code = main([*TINY, "--out", str(tmp_path), "--run-name", "piped"])
    finally:
        monkeypatch.undo()
    assert code == 0
    assert json.loads((tmp_path / "piped" / "summary.json").read_text())["status"] == "finished"
    stream.close()  # its descriptor now points at /dev/null


# --------------------------------------------------------------------------------------------
# scale.e4_study: results of another plan are never mixed in; a corrupt results file is one line
# --------------------------------------------------------------------------------------------

E4_RESULTS = Path(__file__).resolve().parents[1] / "docs" / "e4_study" / "results.json"


@pytest.mark.skipif(not E4_RESULTS.is_file(), reason="docs/e4_study/results.json is not in this checkout")
def test_e4_study_reuses_only_seeds_of_the_same_plan(tmp_path, capsys, monkeypatch):
    """The committed study (5 seeds, 8 epochs, --probe-images 10000, the `e3` views of the recipe it was run with,
    before the digits recipes that learn) is its own plan: asked for that plan, every seed is reused and only the
    report is written. Asked for other probe images or epochs, the study refuses, naming the seeds and the
    differences, and leaves results.json as it is. Asked for today's recipe, it refuses as well."""
    from scale import e4_study

    out = tmp_path / "e4"
    out.mkdir()
    shutil.copy(E4_RESULTS, out / "results.json")
    assert e4_study.main(["--dataset", "digits", "--seeds", "5", "--out", str(out)]) == EXIT_USAGE
    _one_line(_lines(capsys), "holds seeds of another plan", "seed 0:", "augment ('e3' vs 'digits_rotate')")
    shutil.rmtree(out)

    today = e4_study.e3_config  # the committed study's plan: today's E3 config with its recorded views and epochs
    monkeypatch.setattr(e4_study, "e3_config", lambda dataset, seed, epochs=None: replace(
        today(dataset, seed, 8 if epochs is None else epochs), augment="e3"))
    out = tmp_path / "e4"
    out.mkdir()
    shutil.copy(E4_RESULTS, out / "results.json")
    before = (out / "results.json").read_bytes()
    for argv, needle in ((["--probe-images", "256"], "probe_images (10000 vs 256)"), (["--epochs", "3"],
                                                                                        "epochs (8 vs 3)")):
        assert e4_study.main(["--dataset", "digits", "--seeds", "5", "--out", str(out), *argv]) == EXIT_USAGE
        _one_line(_lines(capsys), "holds seeds of another plan", "seed 0:", needle)
        assert (out / "results.json").read_bytes() == before and not (out / "report.md").exists()
    assert e4_study.main(["--dataset", "digits", "--seeds", "5", "--out", str(out)]) == 0
    assert (out / "results.json").read_bytes() == before and (out / "report.md").is_file()
    assert "seed 0" not in capsys.readouterr().out  # nothing was trained again


@pytest.mark.parametrize("blob", [b"\x00\xffnot json", b"[1, 2]", b'{"seeds": [{"seed": "zero"}]}'])
def test_e4_study_names_a_results_file_that_is_not_its_own(tmp_path, capsys, blob):
    from scale import e4_study

    (tmp_path / "results.json").write_bytes(blob)
    assert e4_study.main(["--dataset", "digits", "--seeds", "1", "--out", str(tmp_path)]) == EXIT_INPUT
    _one_line(_lines(capsys), "results.json is not a results file of scale.e4_study")
    assert (tmp_path / "results.json").read_bytes() == blob
