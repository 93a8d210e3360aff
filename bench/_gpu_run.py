"""The GPU suite's runner (``bench.gpu_suite``): what the sections share, each section isolated and stopped at its
timeout, and what became of them (the exit code).

Isolation: each section runs in its own ``try`` that also catches ``SystemExit`` (a bench's argument error),
records the failure in its heading and lets the rest run; the file is rewritten after every section, so what is
done survives a timeout. A section's timeout is ``SECTION_SLACK`` times its estimate, within what is left of the
budget: an alarm stops a section that overruns it and the rest goes on; a section stuck in one long call that the
alarm cannot interrupt ends the process ``HARD_GRACE_S`` later, the file written first (exit ``CUT``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from bench._util import write_atomic


@dataclass
class Run:
    """What the sections share: arguments, device, the figures they measured, and the file's lines."""

    args: argparse.Namespace
    dev: torch.device
    imports: dict[str, str | None] = field(default_factory=dict)
    figures: dict = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Section:
    run: Callable[[Run], None]
    needs: str | None = None  # an import without which the section is skipped



SECTION_SLACK = 3.0  # a section's timeout: this many times its estimate (never past what is left of the budget)
HARD_GRACE_S = 30.0  # past its timeout, a section that the alarm cannot interrupt ends the process (exit CUT)
FAILED, CUT = 1, 4  # exit codes: a section failed; the budget cut the run (a section stopped or not run)


class SectionTimeout(Exception):
    """Raised in the main thread by the section's alarm: the section ran past its timeout."""


@dataclass
class Outcome:
    """What became of the sections: failed (an error), stopped (past their timeout), not run (no time left)."""

    failed: list[str] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)
    not_run: list[str] = field(default_factory=list)

    @property
    def code(self) -> int:
        return FAILED if self.failed else CUT if (self.stopped or self.not_run) else 0

    def line(self) -> str:
        def names(xs: list[str]) -> str:
            return ", ".join(xs) or "none"

        return (f"Failed sections: {names(self.failed)}. Stopped at their timeout: {names(self.stopped)}. "
                f"Not run for lack of budget: {names(self.not_run)}.")


def section_timeout(estimate: float, left: float, tiny: bool) -> float:
    """Seconds the section may run: ``SECTION_SLACK`` times its estimate, within what is left of the budget (tiny:
    the budget alone, the estimates being the GPU's)."""
    return left if tiny else min(left, SECTION_SLACK * estimate)


def _run_with_timeout(fn: Callable[[], None], seconds: float, on_hang: Callable[[], None]) -> None:
    """``fn()``, stopped by ``SectionTimeout`` after ``seconds``: a real-time alarm (``SIGALRM``) whose handler
    raises in the main thread, which interrupts Python code and sleeps but not one long call in C; for that, a
    watchdog thread calls ``on_hang`` (write what is done, exit ``CUT``) ``HARD_GRACE_S`` later."""
    import signal
    import threading

    def alarm(signum, frame):
        raise SectionTimeout(f"past its timeout of {seconds:.0f} s")

    done = threading.Event()
    watchdog = threading.Thread(target=lambda: done.wait(seconds + HARD_GRACE_S) or on_hang(), daemon=True)
    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 1e-3))
    watchdog.start()
    try:
        fn()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        done.set()


def run_sections(run: Run, names: list[str], out: Path, budget_s: float, sections: dict[str, Section],
                 estimates: dict[str, float]) -> Outcome:
    """Each of ``sections[name]`` in turn, isolated and timed out (``estimates[name]``: its seconds by design); the
    file rewritten after each. Returns what became of them."""
    outcome, t_start = Outcome(), time.perf_counter()
    for i, name in enumerate(names):
        section = sections[name]
        left = budget_s - (time.perf_counter() - t_start)
        if section.needs is not None and run.imports.get(section.needs) is not None:
            run.lines += [f"## {name}: skipped ({section.needs} missing: {run.imports[section.needs]})", ""]
        elif (estimates[name] > left and not run.args.tiny) or left <= 0:
            outcome.not_run.append(name)
            run.lines += [f"## {name}: NOT RUN (its estimate, {estimates[name]} s, exceeds the {max(left, 0):.0f} s "
                          f"left of --budget-s {budget_s:g}; rerun it with --sections {name})", ""]
        else:
            t0, limit = time.perf_counter(), section_timeout(estimates[name], left, run.args.tiny)

            def on_hang(name=name, rest=names[i + 1:], limit=limit):  # the watchdog's last word
                lines = [*run.lines, f"## {name}: STOPPED (hung {HARD_GRACE_S:g} s past its {limit:.0f} s timeout "
                         "in a call the alarm cannot interrupt; the process ended)", "",
                         Outcome(outcome.failed, [*outcome.stopped, name], [*outcome.not_run, *rest]).line()]
                write_atomic(out, "\n".join(lines) + "\n")
                print(f"gpu_suite: {name} hung past its timeout; not run: {', '.join(rest) or 'none'}",
                      file=sys.stderr, flush=True)
                os._exit(CUT)

            try:
                _run_with_timeout(lambda section=section: section.run(run), limit, on_hang)
            except SectionTimeout as err:
                outcome.stopped.append(name)
                run.lines += [f"## {name}: STOPPED ({err}; rerun it with --sections {name})", ""]
            except (Exception, SystemExit) as err:  # SystemExit: a bench's own argument check ends only its section
                outcome.failed.append(name)
                first = str(err).splitlines()[0][:200] if str(err) else ""
                run.lines += [f"## {name}: FAILED ({type(err).__name__}: {first})", ""]
                traceback.print_exc()
            print(f"gpu_suite: {name} done in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
        write_atomic(out, "\n".join(run.lines) + "\n")  # what is done so far survives a timeout
    return outcome
