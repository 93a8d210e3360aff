"""Real permissions: what a user without read or write access to a file sees, with its documented exit code.

The tests run as root here, and root reads and writes anything (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH), so
``chmod 000`` alone would change nothing. The cases run in one child process started without those two
capabilities (``setpriv``; as a user other than root, ``chmod`` is enough and the child runs as it is). The
child first checks that it really cannot read a ``chmod 000`` file (otherwise the cases would prove nothing).
Every case: its exit code, one line on stderr naming the file, and nothing written.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest

from scale.engine.cifar import ARCHIVES
from scale.runs.faults import EXIT_INPUT, EXIT_USAGE, EXIT_WRITE

ROOT = Path(__file__).resolve().parents[1]
TINY = ["synthetic", "--quiet", "--train-subset", "96", "--batch-size", "32", "--probe-size", "32",
        "--head-width", "16", "--head-out", "8", "--backbone-width", "4", "--image-size", "8", "--no-final-measure",
        "--threads", "1", "--epochs", "1"]
DROP = ["setpriv", "--inh-caps=-dac_override,-dac_read_search", "--bounding-set=-dac_override,-dac_read_search"]

CHILD = r'''
import contextlib, io, json, sys
from scale import export
from scale.run import main
cases, out = json.loads(sys.argv[1]), {}
try:
    open(cases.pop("control"), "rb")
    out["control"] = "readable"
except PermissionError:
    out["control"] = "denied"
for name, (prog, argv) in cases.items():
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = (main if prog == "run" else export.main)(argv)
    out[name] = [code, err.getvalue().strip().splitlines()]
print(json.dumps(out))
'''


def _cifar_batch(n: int, label_key: str) -> bytes:
    data = np.zeros((n, 3072), dtype=np.uint8)
    return pickle.dumps({"batch_label": "b", label_key: [0] * n, "data": data}, protocol=2)


def _cifar_folder(root: Path) -> Path:
    spec = ARCHIVES["cifar10"]
    folder = root / spec.folder
    folder.mkdir(parents=True)
    for name in (*spec.train_files, *spec.test_files):
        (folder / name).write_bytes(_cifar_batch(4, spec.label_key))
    return folder


@pytest.fixture(scope="module")
def denied(tmp_path_factory) -> dict[str, tuple[int, list[str]]]:
    """Builds every case's files (as root), then runs all cases in one child without the capabilities."""
    if os.geteuid() == 0:
        probe = subprocess.run([*DROP, "true"], capture_output=True, text=True) if shutil.which("setpriv") else None
        if probe is None or probe.returncode != 0:
            why = probe.stderr.strip() if probe is not None else "setpriv is not installed"
            pytest.skip(f"running as root and unable to drop the capability to read anything ({why})")
    base = tmp_path_factory.mktemp("perm")
    cases: dict[str, tuple[str, list[str]]] = {}

    control = base / "control"
    control.write_text("x")

    # CIFAR: a batch file, the extracted folder and the archive, each unreadable
    _cifar_folder(base / "c1")
    (base / "c1" / ARCHIVES["cifar10"].folder / "data_batch_1").chmod(0)
    cases["cifar batch file"] = ("run", ["cifar10", "--data-dir", str(base / "c1"), "--no-download", "--quiet",
                                         "--out", str(base / "out1")])
    _cifar_folder(base / "c2")
    (base / "c2" / ARCHIVES["cifar10"].folder).chmod(0)
    cases["cifar folder"] = ("run", ["cifar10", "--data-dir", str(base / "c2"), "--no-download", "--quiet",
                                     "--out", str(base / "out2")])
    (base / "c3").mkdir()
    with tarfile.open(base / "c3" / ARCHIVES["cifar10"].filename, "w:gz") as tar:
        tar.add(_cifar_folder(base / "c3src"), arcname=ARCHIVES["cifar10"].folder)
    (base / "c3" / ARCHIVES["cifar10"].filename).chmod(0)
    cases["cifar archive"] = ("run", ["cifar10", "--data-dir", str(base / "c3"), "--no-download", "--quiet",
                                      "--out", str(base / "out3")])

    # a folder dataset whose class folder cannot be listed (it was silently skipped: a class fewer)
    from PIL import Image

    for cls in ("a", "b"):
        (base / "imgs" / cls).mkdir(parents=True)
        for i in range(3):
            Image.new("RGB", (12, 12), (40 * i, 0, 0)).save(base / "imgs" / cls / f"{i}.png")
    (base / "imgs" / "b").chmod(0)
    cases["image folder"] = ("run", [f"folder:{base / 'imgs'}", *TINY[1:], "--out", str(base / "out4")])

    # outputs: a read-only --out
    (base / "ro").mkdir()
    (base / "ro").chmod(0o555)
    cases["read-only --out"] = ("run", [*TINY, "--out", str(base / "ro"), "--run-name", "r"])

    # a run directory whose files cannot be read: resume and export
    from scale.run import main

    assert main([*TINY, "--out", str(base), "--run-name", "run"]) == 0
    (base / "run" / "checkpoint.pt").chmod(0)
    cases["resume, checkpoint.pt"] = ("run", ["--resume", str(base / "run"), "--quiet"])
    cases["export, checkpoint.pt"] = ("export", [str(base / "run"), str(base / "exported.pt")])
    (base / "recipe.toml").write_text("lr = 0.01\n")
    (base / "recipe.toml").chmod(0)
    cases["--config"] = ("run", ["--config", str(base / "recipe.toml"), *TINY, "--out", str(base / "out5")])

    (control).chmod(0)
    prefix = DROP if os.geteuid() == 0 else []
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    payload = json.dumps({"control": str(control), **cases})
    try:
        res = subprocess.run([*prefix, sys.executable, "-c", CHILD, payload], capture_output=True, text=True,
                             timeout=300, env=env)
    finally:
        for p in sorted(base.rglob("*"), reverse=True):  # let pytest remove its temporary folder
            p.chmod(0o700)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout.strip().splitlines()[-1])
    if out.pop("control") != "denied":
        pytest.skip("the child could still read a chmod 000 file: the platform ignores the capability drop")
    out["base"] = str(base)
    return out


def _check(denied, case: str, code: int, *needles: str) -> None:
    got, err = denied[case]
    assert got == code, (case, got, err)
    assert len(err) == 1 and "Traceback" not in err[0], (case, err)
    for needle in needles:
        assert needle in err[0], (case, needle, err[0])


@pytest.mark.parametrize(("case", "what"), [("cifar batch file", "data_batch_1"),
                                            ("cifar folder", "cifar-10-batches-py"),
                                            ("cifar archive", "cifar-10-python.tar.gz")])
def test_an_unreadable_cifar_file_folder_or_archive_is_exit_1(denied, case, what):
    _check(denied, case, EXIT_INPUT, "cannot read", what, "Permission denied", "check its permissions")
    out = Path(denied["base"]) / f"out{1 + ['cifar batch file', 'cifar folder', 'cifar archive'].index(case)}"
    assert not out.exists()  # nothing written


def test_an_unlistable_class_folder_is_exit_1_not_a_class_fewer(denied):
    _check(denied, "image folder", EXIT_INPUT, "cannot read", "imgs/b", "Permission denied")
    assert not (Path(denied["base"]) / "out4").exists()


def test_a_read_only_out_is_exit_4_and_leaves_nothing(denied):
    _check(denied, "read-only --out", EXIT_WRITE, "cannot write", "ro/r", "Permission denied")
    assert list((Path(denied["base"]) / "ro").iterdir()) == []


def test_an_unreadable_checkpoint_is_one_plain_line_on_resume_and_export(denied):
    for case, code in (("resume, checkpoint.pt", EXIT_INPUT), ("export, checkpoint.pt", EXIT_USAGE)):
        _check(denied, case, code, "checkpoint.pt cannot be read (Permission denied); check its permissions")
        assert "--overwrite" not in denied[case][1][0]  # the file may be fine: nothing advises deleting it
    assert not (Path(denied["base"]) / "exported.pt").exists()


def test_an_unreadable_recipe_is_exit_2(denied):
    _check(denied, "--config", EXIT_USAGE, "--config", "recipe.toml", "Permission denied")
    assert not (Path(denied["base"]) / "out5").exists()
