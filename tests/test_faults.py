"""Fault injection on ``scale.run`` and ``scale.pretrained``: hostile or unlucky inputs and signals.

Each case gives the input or signal, checks the documented exit code (``scale/runs/faults.py``) and the
one-line message, and checks that nothing was lost: the previous checkpoint still loads and no run
directory holds files of two configurations. Runs are tiny (synthetic 8 x 8 images, 96 of them, batch
32: three steps per epoch).
"""

from __future__ import annotations

import errno
import json
import os
import pickle
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from _hooks import Crash

from scale.engine import checkpoint as ckpt_module
from scale.engine import checksums, signals
from scale.engine.checkpoint import load_checkpoint
from scale.engine.cifar import ARCHIVES
from scale.engine.hooks import Hook
from scale.engine.safe_pickle import UnsafePickleError, safe_loads
from scale.run import main
from scale.runs import validate
from scale.runs.faults import EXIT_INPUT, EXIT_INTERRUPTED, EXIT_NONFINITE, EXIT_PEER, EXIT_USAGE, EXIT_WRITE
from scale.runs.rundir import RunLock

ROOT = Path(__file__).resolve().parents[1]
TINY = ["synthetic", "--quiet", "--train-subset", "96", "--batch-size", "32", "--probe-size", "32",
        "--head-width", "16", "--head-out", "8", "--backbone-width", "4", "--image-size", "8", "--no-final-measure",
        "--threads", "1"]
STEPS_PER_EPOCH = 3


def _run(capsys, argv, hooks=()) -> tuple[int, list[str]]:
    code = main(argv, hooks=hooks)
    return code, capsys.readouterr().err.strip().splitlines()


def _one_line(err: list[str], *needles: str) -> str:
    assert len(err) == 1, err
    for needle in needles:
        assert needle in err[0], (needle, err[0])
    assert "Traceback" not in err[0]
    return err[0]


def _consistent(run_dir: Path) -> dict:
    """The run directory holds one run: its checkpoint loads and agrees with config.json (module docstring)."""
    ck = load_checkpoint(run_dir / "checkpoint.pt")
    saved = json.loads((run_dir / "config.json").read_text())
    assert validate.disagreements(saved, ck["config"]) == []
    assert all(torch.isfinite(v).all() for v in ck["model"].values() if v.is_floating_point())
    return ck


class Signal(Hook):
    """Sends ``signals`` to this process after global step ``at`` (the real handler path)."""

    def __init__(self, at: int, *signals: int) -> None:
        self.at, self.signals = at, signals

    def on_step_end(self, state):
        if state.global_step == self.at:
            for sig in self.signals:
                os.kill(os.getpid(), sig)


class Poison(Hook):
    def __init__(self, at: int) -> None:
        self.at = at

    def on_step_end(self, state):
        if state.global_step == self.at:
            with torch.no_grad():
                state.model.projector.layers[0].weight.fill_(float("nan"))


@pytest.fixture
def interrupted(tmp_path, capsys) -> Path:
    """A run stopped by Ctrl-C after step 2 of epoch 1: a mid-epoch checkpoint."""
    code, _ = _run(capsys, [*TINY, "--epochs", "2", "--out", str(tmp_path), "--run-name", "cut"],
                   hooks=[Signal(2, signal.SIGINT)])
    assert code == EXIT_INTERRUPTED
    return tmp_path / "cut"


@pytest.fixture
def finished(tmp_path, capsys, monkeypatch) -> Path:
    from scale.engine import augment

    monkeypatch.setattr(augment, "free_cores", lambda: (1.0, "fixed: the run and its test resolve alike"))
    code, _ = _run(capsys, [*TINY, "--epochs", "1", "--out", str(tmp_path), "--run-name", "done"])
    assert code == 0
    return tmp_path / "done"


# --------------------------------------------------------------------------------------------
# 1. A CIFAR batch that would run code is refused without running it
# --------------------------------------------------------------------------------------------


class Evil:
    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))  # unpickling it would create the marker file


def test_malicious_cifar_batch_is_refused_and_nothing_runs(tmp_path, capsys):
    marker = tmp_path / "pwned"
    folder = tmp_path / "data" / ARCHIVES["cifar10"].folder
    folder.mkdir(parents=True)
    evil = pickle.dumps({"batch_label": "x", "labels": [0], "data": Evil(marker)}, protocol=2)
    for name in (*ARCHIVES["cifar10"].train_files, *ARCHIVES["cifar10"].test_files):
        (folder / name).write_bytes(evil)
    code, err = _run(capsys, ["cifar10", "--data-dir", str(tmp_path / "data"), "--no-download", "--quiet",
                              "--out", str(tmp_path / "runs")])
    assert code == EXIT_INPUT == 1
    _one_line(err, "data_batch_1", "not a genuine CIFAR batch", "could run code")
    assert not marker.exists()
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())  # nothing half-written


def test_restricted_unpickler_reads_arrays_and_refuses_the_rest(tmp_path):
    marker = tmp_path / "ran"
    pickle.loads(pickle.dumps(Evil(marker), protocol=2))  # negative control: the plain unpickler runs it
    assert marker.exists()
    data = np.arange(3 * 32 * 32, dtype=np.uint8).reshape(1, -1)
    for protocol in (2, 4):  # 2: the official archives' protocol (bytes via _codecs.encode when written by py3)
        got = safe_loads(pickle.dumps({"data": data, "labels": [7], "name": "b"}, protocol=protocol))
        assert np.array_equal(got["data"], data) and got["labels"] == [7]
    for hostile in (np.array([None], dtype=object), Evil(Path("/nonexistent/x")), {"f": os.system}):
        with pytest.raises(UnsafePickleError):
            safe_loads(pickle.dumps(hostile, protocol=2))


# --------------------------------------------------------------------------------------------
# 2. --run-name stays inside --out
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["../escaped", "a/b", "..", ".", "/tmp/abs", ".hidden"])
def test_run_name_with_path_parts_is_refused(tmp_path, capsys, name):
    out = tmp_path / "out" / "runs"
    code, err = _run(capsys, [*TINY, "--out", str(out), "--run-name", name])
    assert code == EXIT_USAGE
    _one_line(err, "--run-name", "plain folder name")
    assert not (tmp_path / "out").exists() and not (tmp_path / "escaped").exists()


# --------------------------------------------------------------------------------------------
# 3. Checksums of downloaded files
# --------------------------------------------------------------------------------------------


def test_cached_weights_are_checked_against_published_and_recorded_sha256(tmp_path, monkeypatch, capsys):
    from scale import pretrained

    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "hub"))
    cached = pretrained.hub_cache_path("vicreg_resnet50")
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"the file as downloaded")
    # without its record (put there by hand, or the record lost) it is refused: nothing to check it against
    assert pretrained.main(["vicreg_resnet50", "--out", str(tmp_path / "res")]) == 2
    _one_line(capsys.readouterr().err.strip().splitlines(), "has no recorded SHA256", "sha256sum", "--weights PATH")
    assert not (tmp_path / "res").exists()
    checksums.record(cached)
    assert pretrained.resolve_weights("vicreg_resnet50", None) == cached  # unchanged: accepted
    cached.write_bytes(b"the file as downloaded, then truncated or replaced")
    assert pretrained.main(["vicreg_resnet50", "--out", str(tmp_path / "res")]) == 2
    _one_line(capsys.readouterr().err.strip().splitlines(), "SHA256", "was downloaded with", "fetch")
    # a published digest, when one is known, is checked too, and the message says so
    checksums.record(cached)
    monkeypatch.setitem(checksums.PUBLISHED_SHA256, "vicreg_resnet50", "0" * 16)
    with pytest.raises(checksums.ChecksumError, match="does not match the published SHA256"):
        pretrained.resolve_weights("vicreg_resnet50", None)


def test_corrupt_cifar_archive_is_refused_by_its_md5(tmp_path, capsys):
    spec = ARCHIVES["cifar10"]
    (tmp_path / spec.filename).write_bytes(b"\x1f\x8b not the archive")
    code, err = _run(capsys, ["cifar10", "--data-dir", str(tmp_path), "--no-download", "--quiet",
                              "--out", str(tmp_path / "runs")])
    assert code == EXIT_INPUT
    _one_line(err, "MD5", spec.md5)


# --------------------------------------------------------------------------------------------
# 4. One writer per run directory; no mixing of two runs
# --------------------------------------------------------------------------------------------


def test_second_run_on_a_locked_directory_fails_at_once_naming_the_holder(finished, capsys):
    before = finished.joinpath("checkpoint.pt").read_bytes()
    lock = RunLock(finished)  # a live holder: this process
    try:
        code, err = _run(capsys, ["--resume", str(finished), "--quiet"])
    finally:
        lock.release()
    assert code == EXIT_USAGE
    _one_line(err, "in use by another run", f"pid {os.getpid()} on {socket.gethostname()}", "started")
    assert finished.joinpath("checkpoint.pt").read_bytes() == before


def test_stale_lock_of_a_dead_run_is_taken_over_with_a_note(interrupted, capsys):
    (interrupted / ".lock").write_text(json.dumps({"pid": 2**22 + 12345, "host": socket.gethostname(),
                                                   "started": "2026-01-01T00:00:00"}))
    code, err = _run(capsys, ["--resume", str(interrupted), "--quiet"])
    assert code == 0
    assert any("took over the lock" in line and "pid 4206649" in line for line in err), err
    assert not (interrupted / ".lock").exists()  # released and removed
    _consistent(interrupted)


def test_new_run_in_an_existing_run_directory_needs_overwrite(finished, tmp_path, capsys):
    before = finished.joinpath("checkpoint.pt").read_bytes()
    argv = [*TINY, "--epochs", "1", "--out", str(tmp_path), "--run-name", "done", "--head", "relu2"]
    code, err = _run(capsys, argv)
    assert code == EXIT_USAGE
    _one_line(err, "already holds a run", "--resume", "--overwrite")
    assert finished.joinpath("checkpoint.pt").read_bytes() == before  # untouched
    # the hybrid: the new run is killed before its first checkpoint, then resumed. With --overwrite
    # the old run's files are gone first, so there is nothing to resume into a mix
    with pytest.raises(RuntimeError, match="simulated kill"):
        main([*argv, "--overwrite"], hooks=[Crash(at_step=1)])
    assert any("--overwrite: removed the previous run's checkpoint.pt, config.json" in line
               for line in capsys.readouterr().err.splitlines())
    assert not (finished / "checkpoint.pt").exists() and not (finished / "summary.json").exists()
    # what is left (config.json, no checkpoint) is named the same way by both commands, and each advice leads
    # somewhere: --resume says there is nothing to resume and names --overwrite; a new run names --overwrite
    code, err = _run(capsys, ["--resume", str(finished), "--quiet"])
    assert code == EXIT_USAGE
    _one_line(err, "stopped before its first checkpoint", "nothing to resume", "--run-name done --overwrite")
    code, err = _run(capsys, argv)
    assert code == EXIT_USAGE
    _one_line(err, "stopped before its first checkpoint", "pass --overwrite")
    assert _run(capsys, [*argv, "--overwrite"])[0] == 0
    assert _consistent(finished)["config"]["head"] == "relu2"


@pytest.mark.parametrize(("key", "value"), [("head", "relu2"), ("dataset", "digits"), ("batch_size", -5)])
def test_resume_refuses_a_config_json_that_disagrees_with_the_checkpoint(interrupted, capsys, key, value):
    saved = json.loads((interrupted / "config.json").read_text())
    before = (interrupted / "checkpoint.pt").read_bytes()
    (interrupted / "config.json").write_text(json.dumps({**saved, key: value}))
    code, err = _run(capsys, ["--resume", str(interrupted), "--quiet"])
    assert code == EXIT_USAGE
    _one_line(err, "disagrees with its checkpoint.pt", key, "mixes two runs")
    assert (interrupted / "checkpoint.pt").read_bytes() == before


# --------------------------------------------------------------------------------------------
# 5. Thread count: saved, reused, a change warned about
# --------------------------------------------------------------------------------------------


def test_threads_are_saved_reused_and_a_change_is_warned(interrupted, tmp_path, capsys):

    assert json.loads((interrupted / "config.json").read_text())["threads"] == 1
    code, err = _run(capsys, ["--resume", str(interrupted), "--quiet"])
    assert code == 0 and not any("threads" in line for line in err), err
    assert torch.get_num_threads() == 1 and _consistent(interrupted)["config"]["threads"] == 1
    # another count on resume: applied, recorded and warned about
    code, err = _run(capsys, ["--resume", str(interrupted), "--quiet", "--threads", "2"])
    assert code == 0 and any("warning: 2 CPU threads instead of the run's 1" in line for line in err), err
    _consistent(interrupted)
    assert json.loads((interrupted / "config.json").read_text())["threads"] == 2
    # the default is torch's own at start-up (OMP_NUM_THREADS, else the cores), whatever the process set since
    # (test_default_threads_are_torchs_own_at_start_up_not_the_current_setting)


class ForkedWorkers(Hook):
    """Whether this process had forked worker processes during the run (read from the kernel's table)."""

    seen = False

    def on_step_end(self, state):
        me = str(os.getpid())
        for entry in Path("/proc").iterdir():
            try:
                if entry.name.isdigit() and (entry / "stat").read_text().rsplit(")", 1)[1].split()[1] == me:
                    self.seen = True
            except (OSError, IndexError):
                pass


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or not Path("/proc/self/stat").is_file(),
                    reason="needs CPU affinity and /proc (Linux)")
def test_default_threads_are_torchs_own_at_start_up_not_the_current_setting():
    """Without --threads a run takes torch's default of a fresh process (here OMP_NUM_THREADS=1), not the count
    this process happens to have now (a previous run's --threads, a library call: here 2): the same command
    gives the same config on the same machine."""
    code = ("import torch; from scale import run; torch.set_num_threads(2); "
            "args = run.build_parser().parse_args(['synthetic']); "
            "print(run.resolve_config(args, torch.device('cpu')).threads, torch.get_num_threads())")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1", "2"]


def test_a_new_run_records_the_augmentation_path_it_took(tmp_path, capsys):
    """``auto`` is recorded as the path the run took, observed from outside the rule that picks it: worker
    processes forked during training mean ``workers``, none mean ``batched``. Run with one usable core and
    with all of them (the rule's choice may differ between the two)."""
    cores = sorted(os.sched_getaffinity(0))
    try:
        for i, allowed in enumerate(({cores[0]}, set(cores))):
            os.sched_setaffinity(0, allowed)
            hook = ForkedWorkers()
            name = f"auto{i}"
            code, _ = _run(capsys, [*TINY, "--epochs", "1", "--out", str(tmp_path), "--run-name", name],
                           hooks=[hook])
            assert code == 0
            recorded = json.loads((tmp_path / name / "config.json").read_text())["augment_path"]
            assert recorded == ("workers" if hook.seen else "batched"), (allowed, recorded, hook.seen)
            assert _consistent(tmp_path / name)["config"]["augment_path"] == recorded
    finally:
        os.sched_setaffinity(0, cores)


@pytest.mark.parametrize(("written", "trained_on"), [("auto", "workers"), (None, "batched")])
def test_resume_keeps_the_path_of_a_config_written_before_paths_were_recorded(interrupted, capsys, written,
                                                                              trained_on):
    """A config saved with ``auto`` (which then meant workers on a CPU) or with no path at all (batched was
    the only path) resumes on that path, whatever ``auto`` resolves to on this machine today, and says so;
    config.json then records it, and a checkpoint still holding the old value is not taken for another run."""
    ck_path = interrupted / "checkpoint.pt"
    ck = load_checkpoint(ck_path)
    for config in (ck["config"], cfg := json.loads((interrupted / "config.json").read_text())):
        config.pop("augment_path")
        if written is not None:
            config["augment_path"] = written
    torch.save(ck, ck_path)
    (interrupted / "config.json").write_text(json.dumps(cfg))
    code, err = _run(capsys, ["--resume", str(interrupted), "--quiet", "--epochs", "3", "--threads", "2"])
    assert code == 0 and any(f"augmentation path {written or '(not recorded)'} -> {trained_on}" in line
                             for line in err), err
    assert json.loads((interrupted / "config.json").read_text())["augment_path"] == trained_on
    # config.json (resolved) against a checkpoint from before the resume (still the old value): one run
    torch.save(ck, ck_path)
    code, err = _run(capsys, ["--resume", str(interrupted), "--quiet"])
    assert code == 0 and not any("disagrees" in line for line in err), err


# --------------------------------------------------------------------------------------------
# 6. Flags given with --resume
# --------------------------------------------------------------------------------------------


def test_resume_refuses_flags_that_change_the_run(interrupted, capsys):
    before = (interrupted / "config.json").read_text()
    code, err = _run(capsys, ["--resume", str(interrupted), "--head", "relu2", "--lr", "0.5", "--seed", "3"])
    assert code == EXIT_USAGE
    _one_line(err, "would change it: --head, --lr, --seed", "--epochs, --device, --threads")
    assert (interrupted / "config.json").read_text() == before


def test_resume_applies_and_records_the_safe_flags(interrupted, capsys):
    # flags equal to the run's own values and measurement flags are accepted; --epochs extends the run
    code, err = _run(capsys, ["--resume", str(interrupted), "--quiet", "--epochs", "3", "--method", "simclr",
                              "--device", "cpu", "--probe-images", "8"])
    assert code == 0 and any("--epochs 2 -> 3" in line for line in err), err
    assert _consistent(interrupted)["config"]["epochs"] == 3
    assert len((interrupted / "metrics.jsonl").read_text().splitlines()) == 3
    code, err = _run(capsys, ["--resume", str(interrupted), "--quiet", "--epochs", "1"])
    assert code == EXIT_USAGE and "below the 3 epochs" in err[-1]


# --------------------------------------------------------------------------------------------
# 7. The whole config validated in one place
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--batch-size", "-5"], "--batch-size must be a positive integer, got -5"),
        (["--ema", "5"], "--ema must be in [0, 1)"),
        (["--ema", "1"], "--ema must be in [0, 1)"),
        (["--head", "gelu999999"], "999999 Linear layers; at most 32"),
        (["--head-width", "1000000000"], "above the supported maximum 65536"),
        (["--head-width", "60000", "--head", "gelu9"], "parameters; at most 200,000,000"),
        (["--threads", "-1"], "--threads must be a positive integer, got -1"),
        (["--momentum", "-1"], "--momentum must be a finite number >= 0"),
        # a temperature whose logits overflow float32 ended in a NaN loss blamed on the learning rate (issue 58)
        (["--method", "simclr", "--temperature", "1e-300"], "--temperature 1e-300 is below 1.18e-38"),
        (["--temperature", "nan"], "--temperature must be a positive finite number, got nan"),
        (["--ddp-timeout", "0"], "--ddp-timeout must be a positive"),
        # sizes refused before anything is allocated (they ended in allocation tracebacks)
        (["--image-size", "4096"], "--image-size 4096 is above the supported maximum 1024"),
        (["--backbone-width", "65536"], "the model (resnet18 of width 65536 with its heads) would have 11,699,"),
    ],
)
def test_bad_config_values_are_refused(tmp_path, capsys, argv, needle):
    code, err = _run(capsys, [*TINY, *argv, "--out", str(tmp_path)])
    assert code == EXIT_USAGE
    _one_line(err, needle)
    assert not any(tmp_path.iterdir())  # no run directory was created


def test_a_run_needing_more_memory_than_the_device_has_is_refused_before_allocating(tmp_path, capsys):
    """--head-out 65536: the per-epoch statistics of h alone (two 65536 x 65536 float64 matrices) take 64 GiB;
    the run failed at its first epoch end, leaving a directory with config.json only."""
    from scale.runs.budget import GIB, device_memory

    if device_memory("cpu") > 80 * GIB:
        pytest.skip(f"this machine has {device_memory('cpu') / GIB:.0f} GiB: the case needs a smaller one")
    code, err = _run(capsys, [*TINY, "--head-out", "65536", "--out", str(tmp_path / "runs")])
    assert code == EXIT_USAGE
    _one_line(err, "this run needs at least", "per-epoch statistics of z and h (64.0 GiB)", "--head-out")
    assert not (tmp_path / "runs").exists()


def test_cifar_at_another_image_size_is_refused(tmp_path, capsys):
    code, err = _run(capsys, ["cifar10", "--image-size", "16", "--out", str(tmp_path)])
    assert code == EXIT_USAGE
    _one_line(err, "--image-size 16", "32 x 32")


def test_head_width_that_is_not_an_integer_is_refused_wherever_it_is_given(interrupted, tmp_path, capsys):
    """On the command line, in a recipe and in a saved run (config.json and checkpoint agreeing on it): exit 2,
    one line naming the setting, nothing written; a float that happens to be whole is refused too."""
    with pytest.raises(SystemExit) as exc:
        main([*TINY, "--head-width", "1e9", "--out", str(tmp_path / "a")])
    assert exc.value.code == EXIT_USAGE
    _one_line(capsys.readouterr().err.strip().splitlines(), "--head-width", "invalid int value: '1e9'")
    recipe = tmp_path / "recipe.toml"
    for text in ("head-width = 1e9\n", "head_width = 64.0\n"):
        recipe.write_text(text)
        code, err = _run(capsys, ["--config", str(recipe), *TINY, "--out", str(tmp_path / "a")])
        assert code == EXIT_USAGE
        _one_line(err, "head", "expected an integer")
    assert not (tmp_path / "a").exists()
    ck_path, cfg_path = interrupted / "checkpoint.pt", interrupted / "config.json"
    ck = load_checkpoint(ck_path)
    ck["config"]["head_width"] = 16.0  # the run's own width, as a float
    torch.save(ck, ck_path)
    cfg_path.write_text(json.dumps({**json.loads(cfg_path.read_text()), "head_width": 16.0}))
    before = ck_path.read_bytes()
    code, err = _run(capsys, ["--resume", str(interrupted), "--quiet"])
    assert code == EXIT_USAGE
    _one_line(err, "head_width in", "config.json must be of type int, got 16.0")
    assert ck_path.read_bytes() == before


def test_saved_config_is_validated_like_flags(interrupted):
    saved = json.loads((interrupted / "config.json").read_text())
    for key, value, needle in [("batch_size", -5, "batch_size in X must be a positive"), ("ema", 5.0, "[0, 1)"),
                               ("head", "gelu999999", "at most 32"), ("dataset", "imagenet", "not one of"),
                               ("lr", "fast", "must be of type float"), ("bogus", 1, "unknown keys"),
                               ("image_size", 4096, "above the supported maximum 1024"),
                               ("backbone_width", 65536, "at most 1,000,000,000")]:
        with pytest.raises(validate.ConfigError, match=needle.replace("[", r"\[").replace(")", r"\)")):
            validate.config_from_dict({**saved, key: value}, "X")


# --------------------------------------------------------------------------------------------
# 8. Every failure one line with its exit code, the last good checkpoint intact
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("content", [b"", b"this is a text file\n", b"\x00\xff" * 64, "truncated"])
def test_unreadable_checkpoint_is_one_line_exit_1(interrupted, capsys, content):
    path = interrupted / "checkpoint.pt"
    blob = path.read_bytes()[: len(path.read_bytes()) // 2] if content == "truncated" else content
    path.write_bytes(blob)
    code, err = _run(capsys, ["--resume", str(interrupted), "--quiet"])
    assert code == EXIT_INPUT
    _one_line(err, "checkpoint.pt is not a readable checkpoint", "left as it is")
    assert path.read_bytes() == blob and "weights_only" not in err[0]


def test_broken_config_json_is_one_line_exit_1(interrupted, capsys):
    (interrupted / "config.json").write_text('{"dataset": "synthetic", ')
    code, err = _run(capsys, ["--resume", str(interrupted), "--quiet"])
    assert code == EXIT_INPUT
    _one_line(err, "config.json is not readable JSON")
    load_checkpoint(interrupted / "checkpoint.pt")


def test_a_data_dir_that_is_a_plain_file_is_one_line_exit_1(tmp_path, capsys):
    """(Unreadable data files and folders, with real permissions: tests/test_permissions.py.)"""
    not_a_folder = tmp_path / "notes.txt"
    not_a_folder.write_text("hello")
    code, err = _run(capsys, ["cifar10", "--data-dir", str(not_a_folder), "--no-download", "--quiet",
                              "--out", str(tmp_path / "runs")])
    assert code == EXIT_INPUT
    _one_line(err, "is a file, not a folder")
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("blob", [os.urandom(4096), b"", b"plain text\n"])
def test_pretrained_weights_of_random_bytes_is_one_line(tmp_path, capsys, blob):
    from scale import pretrained

    weights = tmp_path / "w.pth"
    weights.write_bytes(blob)
    assert pretrained.main(["dino_resnet50", "--weights", str(weights), "--out", str(tmp_path / "res")]) == 2
    _one_line(capsys.readouterr().err.strip().splitlines(), "not readable as a weights-only torch checkpoint")


@pytest.mark.parametrize(("err_no", "needle"), [(errno.ENOSPC, "No space left"), (errno.EROFS, "Read-only")])
def test_write_failure_mid_run_is_one_line_exit_4_and_keeps_the_checkpoint(tmp_path, capsys, monkeypatch, err_no,
                                                                          needle):
    real, calls = ckpt_module.atomic_write_bytes, []

    def failing(path, data):
        calls.append(Path(path).name)
        if Path(path).name == "checkpoint.pt" and calls.count("checkpoint.pt") == 2:  # the epoch-2 save
            raise OSError(err_no, os.strerror(err_no), str(path))
        real(path, data)

    monkeypatch.setattr(ckpt_module, "atomic_write_bytes", failing)
    code, err = _run(capsys, [*TINY, "--epochs", "2", "--out", str(tmp_path), "--run-name", "full"])
    assert code == EXIT_WRITE
    _one_line(err, "cannot write", "checkpoint.pt", needle, "epoch 1 step 0) is intact", "--resume")
    assert int(_consistent(tmp_path / "full")["epoch"]) == 1
    monkeypatch.setattr(ckpt_module, "atomic_write_bytes", real)
    assert _run(capsys, ["--resume", str(tmp_path / "full"), "--quiet"])[0] == 0


def test_nan_on_the_last_step_of_an_epoch_exits_3_with_a_fresh_summary(tmp_path, capsys):
    run_dir = tmp_path / "nan"
    code, err = _run(capsys, [*TINY, "--epochs", "3", "--out", str(tmp_path), "--run-name", "nan"],
                     hooks=[Poison(at=2 * STEPS_PER_EPOCH)])  # the last step of epoch 2
    assert code == EXIT_NONFINITE
    _one_line(err, "non-finite after the last step of epoch 2", "likely cause", "end of epoch 1) is kept")
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "non-finite loss" and summary["epochs_done"] == 1
    assert int(_consistent(run_dir)["epoch"]) == 1


def test_a_signal_delivered_twice_at_once_counts_once(tmp_path, capsys):
    """Ctrl-C under torchrun reaches a worker from the terminal and again from the agent: one request."""
    code, err = _run(capsys, [*TINY, "--epochs", "2", "--out", str(tmp_path), "--run-name", "dup"],
                     hooks=[Signal(STEPS_PER_EPOCH + 1, signal.SIGINT, signal.SIGINT)])
    assert code == EXIT_INTERRUPTED
    _one_line(err, "interrupted at epoch 2, step 1 by SIGINT; checkpoint saved")
    ck = _consistent(tmp_path / "dup")
    assert (int(ck["epoch"]), int(ck["step"])) == (1, 1)


def test_second_ctrl_c_stops_at_once_keeping_the_last_checkpoint(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(signals, "DUPLICATE_WINDOW_S", 0.0)  # the second press comes later than the window
    code, err = _run(capsys, [*TINY, "--epochs", "2", "--out", str(tmp_path), "--run-name", "twice"],
                     hooks=[Signal(STEPS_PER_EPOCH + 1, signal.SIGINT, signal.SIGINT)])
    assert code == EXIT_INTERRUPTED
    _one_line(err, "stopped at once by a second stop signal (SIGINT) without saving", "epoch 1 step 0) is intact")
    assert int(_consistent(tmp_path / "twice")["epoch"]) == 1
    assert not list((tmp_path / "twice").glob(".*.tmp"))


# --------------------------------------------------------------------------------------------
# 9. SIGTERM is handled like SIGINT
# --------------------------------------------------------------------------------------------


def test_sigterm_saves_a_checkpoint_and_exits_130(tmp_path, capsys):
    code, err = _run(capsys, [*TINY, "--epochs", "2", "--out", str(tmp_path), "--run-name", "term"],
                     hooks=[Signal(2, signal.SIGTERM)])
    assert code == EXIT_INTERRUPTED
    _one_line(err, "interrupted at epoch 1, step 2 by SIGTERM", "checkpoint saved", "--resume")
    ck = _consistent(tmp_path / "term")
    assert (int(ck["epoch"]), int(ck["step"])) == (0, 2)
    assert _run(capsys, ["--resume", str(tmp_path / "term"), "--quiet"])[0] == 0


def test_sigterm_to_a_real_process_exits_130_with_a_checkpoint(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "scale.run", *TINY, "--epochs", "200", "--out", str(tmp_path),
                             "--run-name", "proc"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    metrics, deadline = tmp_path / "proc" / "metrics.jsonl", time.time() + 120
    while not metrics.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == EXIT_INTERRUPTED, err
    assert "by SIGTERM; checkpoint saved" in err and "Traceback" not in err
    _consistent(tmp_path / "proc")


# --------------------------------------------------------------------------------------------
# 10. torch.distributed: a frozen peer times out; interrupts give 130 on every rank
# --------------------------------------------------------------------------------------------


class Freeze(Hook):
    def on_step_end(self, state):
        if state.rank == 1 and state.global_step == 1:
            time.sleep(120)  # a frozen rank (the test kills it)


class InterruptRank1(Hook):
    def on_step_end(self, state):
        if state.rank == 1 and state.global_step == 1:
            os.kill(os.getpid(), signal.SIGINT)


def _ddp_worker(rank: int, ports: tuple[int, int], out: str) -> None:
    """Two runs in one process pair (one start-up): Ctrl-C on rank 1, then rank 1 frozen."""
    os.environ.update(WORLD_SIZE="2", RANK=str(rank), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1")
    base = [*TINY, "--device", "cpu", "--epochs", "2", "--out", str(Path(out) / "runs")]
    os.environ["MASTER_PORT"] = str(ports[0])
    code = main([*base, "--run-name", "interrupted"], hooks=[InterruptRank1()])
    Path(out, f"interrupted{rank}").write_text(str(code))
    os.environ["MASTER_PORT"] = str(ports[1])
    code = main([*base, "--run-name", "frozen", "--ddp-timeout", "3"], hooks=[Freeze()])
    Path(out, f"frozen{rank}").write_text(str(code))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed is not built")
def test_ddp_interrupt_stops_every_rank_with_130_and_a_frozen_peer_gives_5(tmp_path, capfd):
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    ports = (_free_port(), _free_port())
    procs = [ctx.Process(target=_ddp_worker, args=(r, ports, str(tmp_path))) for r in range(2)]
    for p in procs:
        p.start()
    try:
        procs[0].join(timeout=200)
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
    codes = {f.name: int(f.read_text()) for f in tmp_path.glob("[if]*[01]")}
    err = capfd.readouterr().err
    # Ctrl-C reaches rank 1 only, after its first step; the ranks agree on the flag there, rank 0 saves
    assert codes["interrupted0"] == codes["interrupted1"] == EXIT_INTERRUPTED, (codes, err)
    assert "interrupted at epoch 1, step 1" in err
    ck = _consistent(tmp_path / "runs" / "interrupted")
    assert (int(ck["epoch"]), int(ck["step"])) == (0, 1)
    # rank 1 frozen at its second step: rank 0 gives up after --ddp-timeout 3 s with one line
    assert codes["frozen0"] == EXIT_PEER and "frozen1" not in codes, (codes, err)
    assert "a distributed peer stopped answering or died" in err and "no checkpoint had been written yet" in err


# --------------------------------------------------------------------------------------------
# 11. Stale temporaries of interrupted atomic writes are cleaned
# --------------------------------------------------------------------------------------------


def test_stale_temporaries_are_removed_on_resume(interrupted, capsys):
    stale = [interrupted / ".checkpoint.pt.0a2b4c6d.tmp", interrupted / ".metrics.jsonl.9e8f7a6b.tmp"]
    for p in stale:
        p.write_bytes(b"\0" * 2**20)
    keep = interrupted / "notes.tmp"  # not a name the atomic writer makes
    keep.write_text("mine")
    code, err = _run(capsys, ["--resume", str(interrupted), "--quiet"])
    assert code == 0
    assert any("removed 2 temporary file(s) (2.0 MiB)" in line for line in err), err
    assert not any(p.exists() for p in stale) and keep.exists()
    _consistent(interrupted)
