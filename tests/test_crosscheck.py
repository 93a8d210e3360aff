"""``python -m scale.crosscheck``: the whole grid passes, the CuPy row is never a silent pass, and a
perturbation of scale's weights far below any visible change makes the cross-check fail."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

from scale.crosscheck import HEADS, OBJECTIVES, QUANTITIES, TOL, _cupy_available, run

ROOT = Path(__file__).resolve().parent.parent


def test_full_grid_passes_and_cupy_row_is_explicit():
    out = io.StringIO()
    ok, rows = run(HEADS, OBJECTIVES, stream=out)
    assert ok, out.getvalue()
    assert set(rows) == set(QUANTITIES)
    reason = _cupy_available()
    if reason is None:
        assert rows["closed form on CuPy"][2] == "ok"
    else:  # absent CuPy/GPU: the row says skipped and why; it is not counted as a pass
        assert rows["closed form on CuPy"][2].startswith("skipped") and "SKIPPED" in out.getvalue()
    for q, (err, _, status) in rows.items():
        if status == "ok":
            assert err <= (1e-8 if q.startswith("lambda") else TOL)


def test_negative_control_perturbed_weights_fail():
    """A relative change of 1e-6 in scale's first weight matrix must be caught."""
    ok, rows = run(("gelu3",), ("simsiam", "vicreg"), perturb=1e-6, stream=io.StringIO())
    assert not ok
    assert rows["head output h"][2] == "FAIL" and rows["H_eff (dense)"][2] == "FAIL"


def test_command_line_exit_codes():
    cmd = [sys.executable, "-m", "scale.crosscheck", "--heads", "swish3", "--objectives", "byol"]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "PASS" in done.stdout and "lambda_min (Lanczos)" in done.stdout
    bad = subprocess.run([sys.executable, "-m", "scale.crosscheck", "--heads", "gelu9x"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "invalid choice" in bad.stderr
