"""``python -m scale.crosscheck``: the whole grid passes, the CuPy row is never a silent pass, and a
perturbation of scale's weights far below any visible change makes the cross-check fail."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest

from scale import crosscheck
from scale.crosscheck import QUANTITIES, TOL, _cupy_available, run

ROOT = Path(__file__).resolve().parent.parent


def test_full_grid_passes_and_cupy_row_is_explicit(monkeypatch, capsys):
    """The whole grid once, through the command line's ``main`` (exit code and printed table), with the
    rows it computed captured on the way (so the grid is not computed a second time for the CLI)."""
    seen = []

    def spy(*args, **kwargs):
        kwargs.setdefault("stream", sys.stdout)  # run's default stream is bound at import, before capture
        seen.append(run(*args, **kwargs))  # the original, imported before the patch
        return seen[-1]

    monkeypatch.setattr(crosscheck, "run", spy)
    assert crosscheck.main([]) == 0
    out = capsys.readouterr().out
    assert "PASS" in out and "lambda_min (Lanczos)" in out
    (ok, rows), = seen
    assert ok, out
    assert set(rows) == set(QUANTITIES)
    reason = _cupy_available()
    if reason is None:
        assert rows["closed form on CuPy"][2] == "ok"
    else:  # absent CuPy/GPU: the row says skipped and why; it is not counted as a pass
        assert rows["closed form on CuPy"][2].startswith("skipped") and "SKIPPED" in out
    for q, (err, _, status) in rows.items():
        if status == "ok":
            assert err <= (1e-8 if q.startswith("lambda") else TOL)


def test_negative_control_perturbed_weights_fail():
    """A relative change of 1e-6 in scale's first weight matrix must be caught."""
    ok, rows = run(("gelu3",), ("simsiam", "vicreg"), perturb=1e-6, stream=io.StringIO())
    assert not ok
    assert rows["head output h"][2] == "FAIL" and rows["H_eff (dense)"][2] == "FAIL"


def test_command_line_exit_codes(capsys):
    """``python -m scale.crosscheck`` as a process (its cheapest instance: the exit code reaches the
    shell), and a bad argument named with exit code 2."""
    cmd = [sys.executable, "-m", "scale.crosscheck", "--heads", "linear", "--objectives", "mse"]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "PASS" in done.stdout and "lambda_min (Lanczos)" in done.stdout
    with pytest.raises(SystemExit) as bad:
        crosscheck.main(["--heads", "gelu9x"])
    assert bad.value.code == 2 and "invalid choice" in capsys.readouterr().err
