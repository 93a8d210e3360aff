"""``docs/monitor.md``'s examples run as written (each ```python block in a fresh folder, in a subprocess, with this
checkout on the path; before it, ``tests/_torchvision_cpu.py`` makes torchvision importable on a CPU-only torch):
lightly's SimCLR with the Lightning callback, and a hand-written loop with the optimiser hook.

``python tests/test_monitor_docs.py`` runs the first example and puts its figure at ``docs/monitor.png``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "monitor.md"
RUNNER = ("import runpy, _torchvision_cpu; _torchvision_cpu.install(); "
          "runpy.run_path('example.py', run_name='__main__')")


def blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.S)


def run_example(code: str, folder: Path) -> subprocess.CompletedProcess:
    (folder / "example.py").write_text(code)
    path = os.pathsep.join([str(ROOT), str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-c", RUNNER], cwd=folder, env={**os.environ, "PYTHONPATH": path},
                          capture_output=True, text=True, timeout=900)


def test_the_page_has_the_two_examples():
    code = blocks()
    assert len(code) == 2
    assert "from lightly.loss import NTXentLoss" in code[0] and "SimCLRProjectionHead" in code[0]
    assert "GeometryCallback" in code[0] and "pl.Trainer" in code[0]
    assert "monitor.attach(opt)" in code[1] and "lightning" not in code[1]
    assert "![the monitor's curves](monitor.png)" in PAGE.read_text() and (ROOT / "docs" / "monitor.png").is_file()


@pytest.mark.parametrize("index", [0, 1], ids=["lightly-lightning", "plain-loop"])
def test_example_runs(index, tmp_path):
    proc = run_example(blocks()[index], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [s for s in proc.stdout.splitlines() if s.startswith("step ")]
    assert lines and all("lambda_min" in s and "knn z" in s for s in lines), proc.stdout
    if index == 1:  # steps 0, 10, 20, 30 fall due: each measured or skipped by the budget, step 0 always measured
        measured, skipped = map(int, re.search(r"(\d+) measured, (\d+) skipped", proc.stdout).groups())
        assert measured == len(lines) and lines[0].startswith("step  0") and measured + skipped == 4
    if index == 0:
        assert len(lines) >= 2  # the first step that fell due (always measured) and the trained state
        assert (tmp_path / "monitor.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert "geometry/lambda_min" in (tmp_path / "logs" / "lightning_logs" / "version_0" / "metrics.csv").read_text()


if __name__ == "__main__":
    import tempfile

    from scale.engine import disk

    with tempfile.TemporaryDirectory() as tmp:
        done = run_example(blocks()[0], Path(tmp))
        print(done.stdout, done.stderr[-2000:] if done.returncode else "", sep="\n")
        if done.returncode:
            raise SystemExit(done.returncode)
        disk.write_bytes(PAGE.parent / "monitor.png", (Path(tmp) / "monitor.png").read_bytes())
