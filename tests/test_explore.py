"""The exploration driver (``python -m theory_checks.explore``): it runs checks on fresh random instances,
counts generated examples and premise discards per check, and reports a falsifying instance with the
seed that reproduces it (its negative control: a check built to fail is reported as failing)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from theory_checks import explore

ROOT = Path(__file__).resolve().parent.parent
GAIN_CHECK = ("theory_checks/test_prop5_2_metric_singularity.py::"
              "test_orbit_gain_is_one_for_an_isotropic_metric_and_lambda_over_mean_on_a_diagonal")


def test_a_real_check_explored_with_a_fixed_seed_reports_its_examples(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text(f"before\n<!-- generated: {explore.COMMAND} -->\nold\n<!-- /generated -->\nafter\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "theory_checks.explore", "--seed", "7", "--examples", "6",
                           "--write", str(doc), GAIN_CHECK], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    row = next(line for line in proc.stdout.splitlines() if "test_orbit_gain_is_one" in line)
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1:] == ["1", "6", "6", "0 (0.0 %)", "", "0"], row  # 1 case, 6 generated, 0 discarded, no certificate
    assert "**Failures: 0.**" in proc.stdout and "seeds 7;" in proc.stdout
    written = doc.read_text()
    assert written.startswith("before\n") and written.endswith("after\n") and "old" not in written
    assert "test_orbit_gain_is_one" in written


def test_a_failing_check_is_reported_with_its_seed_and_discards_are_counted(tmp_path: Path) -> None:
    """Negative control of the driver: a property that fails for large draws is reported as falsified
    (exit 1 from ``main``), and the draws an ``assume`` rejects are counted as discards."""
    (tmp_path / "conftest.py").write_text(textwrap.dedent("""
        import os
        from hypothesis import settings
        settings.register_profile("explore", max_examples=int(os.environ["THEORY_CHECKS_EXAMPLES"]),
                                  derandomize=False, database=None, deadline=None)
        settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "explore"))
    """))
    (tmp_path / "test_bounded.py").write_text(textwrap.dedent("""
        from hypothesis import assume, given, strategies as st

        @given(st.integers(0, 1000))
        def test_every_even_draw_is_small(i):
            assume(i % 2 == 0)
            assert i < 500
    """))
    run = explore.run_seed(11, 40, [str(tmp_path / "test_bounded.py")])
    assert run.exit_code == 1, run.tail
    rows = explore.summarise([run])
    (name, row), = rows.items()
    assert name.endswith("test_every_even_draw_is_small")
    assert row.failed_seeds == [11] and row.discarded > 0 and row.generated > 0
    assert "i=500" in run.failures[next(iter(run.failures))]  # shrunk to the smallest falsifying draw
    code = explore.main(["--seed", "11", "--examples", "40", str(tmp_path / "test_bounded.py")])
    assert code == 1
