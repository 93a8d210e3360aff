"""The "Python" section of ``docs/usage.md`` (where the README sends a user of the libraries): every ```python block
there runs as it stands (in a subprocess, in a fresh folder, with this checkout on the path) and exits 0; the third
trains your own backbone through ``scale.train`` and reads the run back with ``python -m scale.analyze`` and
``python -m scale.export``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def python_section_blocks() -> list[str]:
    text = (ROOT / "docs" / "usage.md").read_text()
    start = text.index("\n## Python\n")
    end = text.find("\n## ", start + 1)
    section = text[start : end if end >= 0 else len(text)]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


def test_the_section_has_the_three_examples():
    blocks = python_section_blocks()
    assert len(blocks) == 3
    assert "from mini import" in blocks[0] and "decompose_closed_form" in blocks[0]
    assert "lanczos" in blocks[1] and "torch.randn(512" in blocks[1]
    assert "lanczos" in blocks[1] and "to_scipy" in blocks[1]
    assert "scale.train(" in blocks[2] and "scale.analyze" in blocks[2] and "scale.export" in blocks[2]
    assert "load_backbone" in blocks[2] and "load_run" in blocks[2]


@pytest.mark.parametrize("index", [0, 1, 2], ids=["mini-heff", "scale-lanczos", "own-backbone"])
def test_readme_example_runs(index, tmp_path):
    code = python_section_blocks()[index]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip(), "an example prints its result"
