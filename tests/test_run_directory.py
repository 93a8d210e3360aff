"""The run directory (``scale/runs/rundir.py``): ``--overwrite`` deletes a run and nothing else, a folder is a run
only if its files are a run's, and a full disk leaves nothing behind.

Each case checks the exit code, the one-line message and that nothing was lost: every file that was there
before is still there, byte for byte, unless it was the old run's.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from scale.run import main
from scale.runs import rundir
from scale.runs.faults import EXIT_USAGE, EXIT_WRITE

ROOT = Path(__file__).resolve().parents[1]
TINY = ["synthetic", "--quiet", "--train-subset", "96", "--batch-size", "32", "--probe-size", "32",
        "--head-width", "16", "--head-out", "8", "--backbone-width", "4", "--image-size", "8", "--no-final-measure",
        "--threads", "1", "--epochs", "1"]


def _run(capsys, argv) -> tuple[int, list[str]]:
    code = main(argv)
    return code, capsys.readouterr().err.strip().splitlines()


def _one_line(err: list[str], *needles: str) -> str:
    assert len(err) == 1, err
    for needle in needles:
        assert needle in err[0], (needle, err[0])
    return err[0]


def _snapshot(folder: Path) -> dict[str, bytes | None]:
    """Every entry under ``folder`` (relative path -> bytes; None for folders)."""
    return {str(p.relative_to(folder)): (None if p.is_dir() else p.read_bytes()) for p in sorted(folder.rglob("*"))}


@pytest.fixture(scope="module")
def a_run(tmp_path_factory) -> Path:
    """A finished run with every file a run writes (curvature tracking and the end-of-run measurement on), and
    an analysis folder as ``scale.analyze`` leaves it; copied by the tests that change it."""
    out = tmp_path_factory.mktemp("runs")
    argv = [a for a in TINY if a != "--no-final-measure"]
    assert main([*argv, "--out", str(out), "--run-name", "r", "--track-hessian-every", "epoch", "--orbits", "2x1",
                 "--probe-images", "8"]) == 0
    run = out / "r"
    (run / "analysis").mkdir()
    for name in ("analysis.json", "report.md", "spectrum.png", "orbits.png"):
        (run / "analysis" / name).write_text("x")
    return run


def test_every_file_a_run_writes_is_known_as_a_run_file(a_run):
    """``RUN_OUTPUTS`` is the list --overwrite removes: a run's own files must all be on it."""
    found = rundir.run_files(a_run)
    assert found.foreign == []
    names = {p.name for p in found.run}
    assert {"config.json", "checkpoint.pt", "metrics.jsonl", "summary.json", "report.md", "curves.png",
            "orbits.npz", "curvature.jsonl", "curvature_summary.json", "curvature.png", "analysis"} <= names
    assert rundir.is_run(a_run)


def test_overwrite_refuses_a_folder_that_merely_holds_run_file_names(tmp_path, capsys):
    """A project's folder with a config.json of its own: nothing in it is deleted, --overwrite or not, and the
    message names what is not a run's instead of advising --overwrite."""
    p = tmp_path / "d" / "p"
    for sub in ("src", ".git"):
        (p / sub).mkdir(parents=True)
        (p / sub / "keep.py").write_text("print('mine')\n")
    (p / "config.json").write_text("{}")
    (p / "notes.md").write_text("x")
    before = _snapshot(p)
    for flags in ([], ["--overwrite"]):
        code, err = _run(capsys, [*TINY, "--out", str(tmp_path / "d"), "--run-name", "p", *flags])
        assert code == EXIT_USAGE
        line = _one_line(err, "files that no run writes (.git/, notes.md, src/)", "nothing was deleted")
        assert "--overwrite" not in line
        assert _snapshot(p) == before
    # only run-named files, but not a run's: config.json is not a run config, and there is no checkpoint
    (q := tmp_path / "d" / "q").mkdir()
    (q / "config.json").write_text('{"head": "gelu3"}')
    (q / "metrics.jsonl").write_text("{}\n")
    code, err = _run(capsys, [*TINY, "--out", str(tmp_path / "d"), "--run-name", "q", "--overwrite"])
    assert code == EXIT_USAGE
    _one_line(err, "config.json, metrics.jsonl but no run", "nothing was deleted")
    assert (q / "config.json").read_text() == '{"head": "gelu3"}' and (q / "metrics.jsonl").exists()


def test_overwrite_deletes_exactly_the_old_run_and_refuses_anything_else_beside_it(a_run, tmp_path, capsys):
    run = tmp_path / "r"
    shutil.copytree(a_run, run)
    (run / "notes.md").write_text("mine")
    (run / "analysis" / "my_plot.svg").write_text("mine")
    before = _snapshot(run)
    code, err = _run(capsys, [*TINY, "--out", str(tmp_path), "--run-name", "r", "--overwrite"])
    assert code == EXIT_USAGE
    _one_line(err, "holds a run and also files that no run writes", "analysis/my_plot.svg", "notes.md",
              "nothing was deleted")
    assert _snapshot(run) == before
    (run / "notes.md").unlink()
    (run / "analysis" / "my_plot.svg").unlink()
    old = json.loads((run / "summary.json").read_text())["wall_seconds"]
    code, err = _run(capsys, [*TINY, "--out", str(tmp_path), "--run-name", "r", "--overwrite", "--head", "relu2"])
    assert code == 0 and any("removed the previous run's" in line and "analysis" in line for line in err), err
    assert not (run / "analysis").exists() and not (run / "curvature.jsonl").exists()
    assert json.loads((run / "config.json").read_text())["head"] == "relu2"
    assert json.loads((run / "summary.json").read_text())["wall_seconds"] != old


def _private_mount() -> list[str] | None:
    """A command prefix that runs in a mount namespace of its own where tmpfs can be mounted (as root, or as a
    user through a user namespace), or None where the platform allows neither."""
    for prefix in (["unshare", "--mount", "--map-root-user"], ["unshare", "--mount"]):
        try:
            ok = subprocess.run([*prefix, "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt 2>/dev/null || "
                                 "mount -t tmpfs -o size=64k tmpfs /tmp"], capture_output=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if ok.returncode == 0:
            return prefix
    return None


FULL_DISK_CHILD = r"""
import contextlib, io, json, os, sys
from scale.run import main
out = {}
for name, disk in (("full", sys.argv[1]), ("read-only", sys.argv[2])):
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main([*sys.argv[3:], "--out", os.path.join(disk, "runs"), "--run-name", "r"])
    out[name] = [code, err.getvalue().strip().splitlines(), sorted(os.listdir(disk))]
print(json.dumps(out))
"""


def test_a_full_disk_or_a_read_only_file_system_leaves_nothing_behind(tmp_path):
    """A real full disk (a 256 kB tmpfs filled to the last byte) and a real read-only file system (a tmpfs
    mounted read-only): the run stops with exit 4 and one line naming the file, and neither its run
    directory, nor its lock, nor the --out folder it created remains."""
    prefix = _private_mount()
    if prefix is None:
        pytest.skip("no mount namespace here (unshare, or mounting tmpfs in one, is not permitted)")
    full, ro = tmp_path / "full", tmp_path / "ro"
    full.mkdir()
    ro.mkdir()
    script = ('full="$1"; ro="$2"; py="$3"; child="$4"; shift 4; mount -t tmpfs -o size=256k tmpfs "$full" && '
              '(head -c 1M /dev/zero > "$full/fill" 2>/dev/null; true) && mount -t tmpfs -o ro,size=64k tmpfs "$ro" '
              '&& exec "$py" -c "$child" "$full" "$ro" "$@"')
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    res = subprocess.run([*prefix, "sh", "-c", script, "sh", str(full), str(ro), sys.executable, FULL_DISK_CHILD,
                          *TINY], capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout.strip().splitlines()[-1])
    for name, (needle, left) in {"full": ("No space left on device", ["fill"]),
                                 "read-only": ("Read-only file system", [])}.items():
        code, err, listing = got[name]
        assert code == EXIT_WRITE, (name, code, err)
        assert len(err) == 1 and "cannot write" in err[0] and needle in err[0] and "Traceback" not in err[0], err
        assert listing == left, (name, listing)  # nothing else on the disk
