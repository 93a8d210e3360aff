"""The checks that check the checks: plausible implementation mistakes in ``mini/`` (and in the ``scale``
code that computes the paper-scale curvature, and in the checks' own machinery: the certificates, the
premises' budgets, the derived tolerances), each with the theory check that must fail when the mistake is
made. This module runs them; the mistakes are data elsewhere: ``mutant_table`` (the table: each mutant and its
killing checks), ``mutants_mini``, ``mutants_metrics``, ``mutants_scale``, ``mutants_checks`` (the mistakes),
``mutation`` (how one is installed).

A mutant is applied in-process (a monkeypatch, or a check-side file's text edited on import; no file is
edited), the named checks are run with pytest under it, and the mutant is *killed* when at least one of them
fails. A check that no mutant can fail proves nothing; a mutant that survives is a finding (strengthen the
check, or say why no check can catch it in ``docs/theory_checks.md``).

    python -m theory_checks.mutants                 # run every mutant, print the table
    python -m theory_checks.mutants --write docs/theory_checks.md
    python -m theory_checks.mutants --only relu_s2_nonzero nt_xent_no_positive

Before any mutant runs, the union of the killing checks is run unmutated and must pass: a kill only
counts against checks that pass on the real code (``--no-baseline`` leaves that to a caller that runs them itself,
as the test suite does). The ``mutants`` hypothesis profile (``conftest``)
is the CI profile without shrinking, so a failing example is reported at once.

Exit status: 0 when every mutant is killed, 1 when one survives or the baseline fails, 2 on usage.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

try:  # where pytest collects garbage at a session's end, how many times (``_Failures.pytest_configure``)
    from _pytest.unraisableexception import gc_collect_iterations_key
except ImportError:  # a pytest without the key (9.2 has it)
    gc_collect_iterations_key = None

from mini.reports.docs import fill_block
from theory_checks.mutant_table import EQ1, MUTANTS  # noqa: F401 (EQ1: the driver's own control names it)
from theory_checks.mutation import ROOT, Mutant, forget_checks

# --------------------------------------------------------------------------------------------
# Running them
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    mutant: Mutant
    killed: bool
    exit_code: int
    seconds: float
    failed: tuple[str, ...]
    reason: str  # the first failure's message: an assertion of the check, or the error it raised
    by_assertion: bool = False  # the first failure was a statement of the check, not an error of the code


class _Failures:
    """A pytest plugin that records the failed tests: node id, message, and whether the check's own statement
    failed (an ``AssertionError`` of any kind, an expected refusal that did not come (``pytest.raises``), a
    strict ``xfail`` that passed) or the code raised something else."""

    def __init__(self) -> None:
        self.failed: list[str] = []
        self.reasons: list[str] = []
        self.assertions: list[bool] = []
        self._statement: dict[str, bool] = {}

    def pytest_configure(self, config) -> None:
        # No forced garbage collection at the session's end (pytest's own in-process runs, ``pytester``, skip it
        # too): with torch and sympy loaded, each took about 0.2 s, twice per mutant, half of the driver's CPU time.
        # An unraisable exception is still caught by pytest's hook, as it happens (CPython frees by reference
        # counting); the suite's own run keeps the collection.
        if gc_collect_iterations_key is not None:
            config.stash[gc_collect_iterations_key] = 0

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item, call):
        report = yield
        if report.failed:
            e = call.excinfo
            self._statement[report.nodeid] = e is None or e.errisinstance(AssertionError) or (
                e.typename == "Failed" and "DID NOT RAISE" in str(e.value))
        return report

    def pytest_runtest_logreport(self, report) -> None:
        if report.failed:
            self.failed.append(report.nodeid)
            crash = getattr(report.longrepr, "reprcrash", None)
            message = (crash.message if crash else str(report.longrepr)).strip().splitlines()
            self.reasons.append(message[0][:100] if message else "")
            self.assertions.append(self._statement.get(report.nodeid, False))


def _pytest(nodeids: tuple[str, ...], first_failure: bool, plain_asserts: bool = False
            ) -> tuple[int, list[str], list[str], list[bool]]:
    rec = _Failures()
    forget_checks()
    args = [*nodeids, "-q", "--tb=no", "-p", "no:cacheprovider", "--no-header", "-o", "addopts="]
    if first_failure:
        args.append("-x")
    if plain_asserts:  # a source edit: pytest's assertion rewriting would read the file itself, not the edit
        args.append("--assert=plain")
    with contextlib.redirect_stdout(io.StringIO()):
        code = int(pytest.main(args, plugins=[rec]))
    return code, rec.failed, rec.reasons, rec.assertions


def run_mutant(mutant: Mutant) -> Outcome:
    """Install the mistake, run its killers (stopping at the first failure), undo it."""
    mp = pytest.MonkeyPatch()
    t0 = time.perf_counter()
    try:
        mutant.apply(mp)
        code, failed, reasons, statements = _pytest(mutant.killers, True, getattr(mutant.apply, "plain_asserts", False))
    finally:
        mp.undo()
        forget_checks(keep=())  # an edited registry too
    # pytest exit 1: tests ran and some failed. 0: all passed (survivor). Others: usage/collection errors.
    return Outcome(mutant, code == 1, code, time.perf_counter() - t0, tuple(failed), reasons[0] if reasons else "",
                   bool(statements and statements[0]))


def baseline(mutants: tuple[Mutant, ...]) -> tuple[int, list[str]]:
    nodes = tuple(dict.fromkeys(k for m in mutants for k in m.killers))
    code, failed, _, _ = _pytest(nodes, first_failure=False)
    return code, failed


def table(outcomes: list[Outcome]) -> str:
    lines = [
        "| mutant | the mistake | killing checks | result (first failing test) |",
        "|---|---|---|---|",
    ]
    for o in outcomes:
        check = "<br>".join(f"`{k.split('/', 1)[1]}`" for k in o.mutant.killers)
        if o.killed:
            first = o.failed[0].split("::", 1)[1] if o.failed and "::" in o.failed[0] else "collection"
            how = "assertion" if o.by_assertion else "raised"
            result = f"killed by {how}: `{first}`"
        else:
            result = "**survived**" if o.exit_code == 0 else f"error (pytest exit {o.exit_code})"
        lines.append(f"| `{o.mutant.name}` | {o.mutant.mistake} | {check} | {result} |")
    return "\n".join(lines)


COMMAND = "python -m theory_checks.mutants"  # the generated block of docs/theory_checks.md (mini.reports.docs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m theory_checks.mutants", description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", metavar="NAME", help="run only these mutants")
    parser.add_argument("--write", type=Path, metavar="DOC", help="fill the mutant table block of DOC")
    parser.add_argument("--no-baseline", action="store_true",
                        help="skip running the killing checks on the real code first (for a caller that runs them "
                             "itself: the test suite runs every killer unmutated in the same run)")
    args = parser.parse_args(argv)
    by_name = {m.name: m for m in MUTANTS}
    unknown = sorted(set(args.only or ()) - set(by_name))
    if unknown:
        parser.error(f"unknown mutant(s) {', '.join(unknown)}; valid: {', '.join(by_name)}")
    chosen = tuple(by_name[n] for n in args.only) if args.only else MUTANTS

    os.chdir(ROOT)
    os.environ["HYPOTHESIS_PROFILE"] = "mutants"
    code, failed = (0, []) if args.no_baseline else baseline(chosen)
    if code != 0:
        print(f"baseline: the killing checks fail on the real code (pytest exit {code}): {failed}", file=sys.stderr)
        return 1
    outcomes = []
    for m in chosen:
        o = run_mutant(m)
        outcomes.append(o)
        state = "killed" if o.killed else "SURVIVED" if o.exit_code == 0 else f"ERROR {o.exit_code}"
        where = f"{o.failed[0]}: {o.reason}" if o.failed else ""
        print(f"{m.name:28s} {state:9s} {o.seconds:5.1f} s  {where}", flush=True)
    text = table(outcomes)
    print(f"\n{text}\n\n{sum(o.killed for o in outcomes)} of {len(outcomes)} mutants killed")
    if args.write:
        fill_block(args.write, COMMAND, text)
    return 0 if all(o.killed for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
