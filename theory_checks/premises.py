"""The premises that remain in the theory checks: the theorems' own hypotheses, each with a discard budget.

A premise is not a decidability band (those are gone: where float64 cannot decide, ``certify`` does). It is
a hypothesis of the statement checked (a ReLU head off its kinks, every hidden unit alive, ``rho != 0``, a
material leak), measured on each instance by a number compared with a threshold. Each is declared here
once, as data: the threshold, the statement it stands for, and its *budget*, the largest fraction of a
check's draws it may set aside. The suite measures the fraction itself (every call of ``premise`` /
``gate`` is counted per test; ``conftest``'s hook checks ``over_budget`` after each) and fails a check
whose fraction is above its budget beyond
sampling error (the Wilson 95 % interval's lower end above the budget), so a premise widened until it
discards most draws fails the check that states it. The discards themselves are counted by hypothesis, not
by name: ``conftest``'s hook collects hypothesis's statistics of every property a test runs (the status of
each test case), and every draw hypothesis set aside (an ``assume`` under any name, a ``filter``, a
``reject``) must be one that ``premise`` set aside; a discard by any other route fails the test, whatever its
share. A premise widened less (10x) is caught at its
*boundary instance*: each premise has a pinned instance just inside its domain (its measured value
between the threshold and ten times it), on which the check must run and hold; a fixed instance whose
premise fails is a failure, not a discard.

Check modules read ``PREMISES[name]`` at call time, and ``theory_checks.mutants`` replaces entries to widen
a premise (this module is kept across the mutation driver's re-imports of the checks).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from hypothesis import assume, currently_in_test_context
from hypothesis.control import current_build_context

from mini.collapse import wilson_interval


@dataclass(frozen=True)
class Premise:
    name: str
    statement: str  # the hypothesis of the theorem it stands for, and how it is measured
    threshold: float  # the premise holds where the measured value is above this
    budget: float  # declared: the largest fraction of a check's draws this premise may set aside


PREMISES: dict[str, Premise] = {
    p.name: p
    for p in (
        Premise("off_kink", "ReLU heads are differentiable at the batch: every hidden pre-activation |a| above "
                "the threshold (Theorem 4.1's ReLU gap and part 1)", 1e-6, 0.25),
        Premise("flow_off_kink", "the linearised flow stays on one linear piece of a ReLU head: every hidden "
                "|a| above the threshold (perturbations of 1e-6 cannot cross a kink)", 1e-3, 0.25),
        Premise("alive_units", "the head is as wide as its widths say: every hidden unit's |s'(a)| above the "
                "threshold (the equality of Theorem 5.3; ReLU gap: a unit with s' = 0 everywhere is no unit)",
                1e-8, 0.25),
        Premise("rho_material", "rho != 0: the loss gradient's largest entry above the threshold x max |h| "
                "(a dead predictor makes M = 0 trivially)", 1e-6, 0.1),
        Premise("curvature_nonzero", "the eq. (1) matrices are not all exactly 0 (a head or predictor whose ReLUs "
                "are all dead on the batch makes them 0, and 0 = 0 tests nothing); a threshold of 0, so no "
                "widening by a factor applies", 0.0, 0.1),
        Premise("material_leak", "Prop 5.2's leak is material: |J_mlp P v|^2 above the threshold x |J_mlp|^2 "
                "|P v|^2 (a leak direction the MLP annihilates has no delta^2 law to check)", 1e-6, 0.1),
    )
}


def threshold(name: str) -> float:
    return PREMISES[name].threshold


# ------------------------------------------------------------------------------------------------
# Stating a premise, and its budget (conftest's hook resets the counts before each test, checks them after)
# ------------------------------------------------------------------------------------------------

class OverBudget(AssertionError):
    """A test's draws set aside beyond a premise's budget, or by a route other than ``premise``."""


# Premise counts of the running test: name -> [instances that reached the premise, instances it set aside].
COUNTS: dict[str, list[int]] = {}
# Hypothesis's own count of the running test's test cases by status ("valid", "invalid": set aside, "overrun",
# "interesting": failing), from the statistics of every property the test ran (``note_statistics``).
DRAWS: Counter = Counter()
# The draws ``premise`` set aside inside a generated test case (each an ``assume(False)`` hypothesis counts).
ASIDE: Counter = Counter()


def reset_counts() -> None:
    COUNTS.clear()
    DRAWS.clear()
    ASIDE.clear()


def note_statistics(stats: dict[str, Any]) -> None:
    """Hypothesis's statistics of one property run (``hypothesis.statistics.collector``'s callback)."""
    for key, phase in stats.items():
        if key.endswith("-phase") and isinstance(phase, dict):
            DRAWS.update(case["status"] for case in phase.get("test-cases", ()))


def _count(name: str, holds: bool) -> None:
    c = COUNTS.setdefault(name, [0, 0])
    c[0] += 1
    c[1] += not holds


def _generated() -> bool:
    """Inside a test case hypothesis generated (not an explicit ``@example``, which it runs as final)."""
    return currently_in_test_context() and not current_build_context().is_final


def premise(name: str, value: float, what: str) -> bool:
    """A remaining premise of a check's instance, holding where ``value`` is above ``PREMISES[name]``'s
    threshold. Inside a generated test case, ``assume`` (a counted discard, held to the premise's budget); in a
    fixed instance or a pinned ``@example``, where nothing may be discarded silently (hypothesis skips an
    explicit example whose ``assume`` fails without a word), a failure naming it."""
    holds = bool(value > PREMISES[name].threshold)
    _count(name, holds)
    if _generated():
        ASIDE[name] += not holds
        assume(holds)
    elif not holds:
        raise AssertionError(f"premise {name} fails on a fixed instance ({value:.3g} <= "
                             f"{PREMISES[name].threshold:g}): {what}")
    return holds


def gate(name: str, value: float) -> bool:
    """A premise that restricts one assertion of a check rather than the instance: whether it holds (the
    assertion is made only then), counted against the premise's budget like a discard."""
    holds = bool(value > PREMISES[name].threshold)
    _count(name, holds)
    return holds


def boundary(name: str, value: float, what: str) -> None:
    """A premise's boundary instance: its measured value must lie inside the domain and within ten times the
    threshold (``t < value <= 10 t``), so that the pinned instance holds the premise where it is."""
    t = PREMISES[name].threshold
    if not t < value <= 10.0 * t:
        raise AssertionError(f"premise {name}: the boundary instance measures {value:.3g}, outside ({t:g}, "
                             f"{10 * t:g}]: {what}")


def over_budget(counts: dict[str, list[int]] | None = None, draws: Counter | None = None,
                aside: Counter | None = None) -> list[str]:
    """What breaks a budget: a premise whose share of set-aside instances exceeds its budget beyond sampling
    error (the Wilson 95 % interval's lower end above the declared budget), and any draw hypothesis set aside
    that no ``premise`` did (a raw or aliased ``assume``, a ``filter``, a ``reject``: no budget covers it)."""
    out = []
    for name, (tried, set_aside) in sorted((COUNTS if counts is None else counts).items()):
        lo, _ = wilson_interval(set_aside, tried)
        if lo > PREMISES[name].budget:
            out.append(f"{name}: {set_aside}/{tried} set aside, Wilson 95 % lower end {lo:.3f} > budget "
                       f"{PREMISES[name].budget:g}")
    invalid = (DRAWS if draws is None else draws)["invalid"]
    by_premises = sum((ASIDE if aside is None else aside).values())
    if invalid > by_premises:
        out.append(f"{invalid - by_premises} of {invalid} draws hypothesis set aside were not set aside by a "
                   f"premise (an assume under any name, a filter, a reject): no budget covers them")
    return out
