"""The mutation suite runs in CI: every mutant of ``theory_checks/mutants.py`` must be killed by the
theory check it names, and the committed table in ``docs/theory_checks.md`` must be the one the
current code produces."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_mutant_is_killed_and_the_committed_table_is_current(tmp_path: Path) -> None:
    """Every mutant fails one of its killing checks. The driver's baseline (the killers on the real code) is skipped:
    this suite runs every killer unmutated itself (``theory_checks/``, same examples: the driver's profile differs
    from the suite's only in not shrinking and in no target phase, which no check uses), so a killer that failed
    without its mutant fails the suite."""
    doc = tmp_path / "theory_checks.md"
    committed = (ROOT / "docs" / "theory_checks.md").read_text()
    doc.write_text(committed)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "theory_checks.mutants", "--no-baseline", "--write", str(doc)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "SURVIVED" not in proc.stdout
    stale = "docs/theory_checks.md is stale: run python -m theory_checks.mutants --write docs/theory_checks.md"
    assert doc.read_text() == committed, stale


def test_a_survivor_fails_the_suite() -> None:
    """Negative control of the driver itself: a mutant that changes nothing must be reported as
    surviving, with exit status 1."""
    code = (
        "import sys, theory_checks.mutants as m\n"
        "noop = m.Mutant('noop', 'changes nothing', (m.EQ1 + '[gelu2-mse]',), lambda mp: None)\n"
        "m.MUTANTS = (noop,)\n"
        "sys.exit(m.main([]))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "SURVIVED" in proc.stdout
