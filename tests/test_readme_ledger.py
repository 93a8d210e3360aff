"""The README's sentence about the replication ledger is the report's own: its verdict counts word for word, and, while
the plan is not complete, how many of its units are stored. A README that drifts from ``docs/replication/report.md``
(a rerun, a new unit, an edited count) fails here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from scale.ledger.views import IN_PROGRESS

ROOT = Path(__file__).resolve().parents[1]
REPORT = ROOT / "docs" / "replication" / "report.md"  # the ledger in force (v4)
MARKERS = ("<!-- ledger-counts -->", "<!-- /ledger-counts -->")


def ledger_block(readme: str) -> str:
    """The README's text between the ledger markers (one paragraph, joined into one line)."""
    start, end = readme.index(MARKERS[0]), readme.index(MARKERS[1])
    return " ".join(readme[start + len(MARKERS[0]) : end].split())


def report_facts(report: str) -> tuple[str, str | None]:
    """The report's verdict sentence (the first line under "## Verdicts") and, for a plan in progress, its
    "N of the plan's M units" (None when complete)."""
    verdicts = report.split("\n## Verdicts\n", 1)[1].strip().splitlines()[0]
    stored = re.search(rf"{re.escape(IN_PROGRESS)}: (\d+ of the plan's \d+ units)", report)
    return verdicts, stored.group(1) if stored else None


def check(readme: str, report: str) -> None:
    block = ledger_block(readme)
    verdicts, stored = report_facts(report)
    assert verdicts in block, f"the README's ledger sentence is not the report's: {verdicts!r}"
    if stored is None:
        assert "in progress" not in block, "the README calls a complete ledger in progress"
    else:
        assert stored in block and "in progress" in block, f"the README must say the ledger is in progress ({stored})"


@pytest.mark.skipif(not REPORT.is_file(), reason="docs/replication/report.md is not in this checkout")
def test_the_readme_states_the_reports_counts():
    check((ROOT / "README.md").read_text(), REPORT.read_text())


def test_negative_control_a_count_that_drifted_fails():
    report = (f"# ledger\n\n> {IN_PROGRESS}: 118 of the plan's 320 units are stored.\n\n## Verdicts\n\n"
              "The paper's claims: 3 reproduced, 3 not reproduced.\n")
    good = (f"x\n{MARKERS[0]}\nThe ledger, in progress (118 of the plan's 320 units): The paper's claims: "
            f"3 reproduced,\n3 not reproduced.\n{MARKERS[1]}\n")
    check(good, report)
    for bad in (good.replace("3 not reproduced", "2 not reproduced"), good.replace("118", "117"),
                good.replace("in progress ", "")):
        with pytest.raises(AssertionError):
            check(bad, report)
    with pytest.raises(AssertionError):  # the ledger complete, the README still says in progress
        check(good, report.replace(f"> {IN_PROGRESS}: 118 of the plan's 320 units are stored.\n", ""))
