"""The premises that remain in the theory checks: the theorems' own hypotheses, each with a discard budget.

A premise is not a decidability band (those are gone: where float64 cannot decide, ``certify`` does). It is
a hypothesis of the statement checked (a ReLU head off its kinks, every hidden unit alive, ``rho != 0``, a
material leak), measured on each instance by a number compared with a threshold. Each is declared here
once, as data: the threshold, the statement it stands for, and its *budget*, the largest fraction of a
check's draws it may set aside. The suite measures the fraction itself (every call of ``premise`` /
``gate`` is counted per test; ``conftest``'s hook checks ``over_budget`` after each) and fails a check
whose fraction is above its budget beyond
sampling error (the Wilson 95 % interval's lower end above the budget), so a premise widened until it
discards most draws fails the check that states it. A premise widened less (10x) is caught at its
*boundary instance*: each premise has a pinned instance just inside its domain (its measured value
between the threshold and ten times it), on which the check must run and hold; a fixed instance whose
premise fails is a failure, not a discard.

Check modules read ``PREMISES[name]`` at call time, and ``theory_checks.mutants`` replaces entries to widen
a premise (this module is kept across the mutation driver's re-imports of the checks).
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import assume, currently_in_test_context

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

# Premise counts of the running test: name -> [instances that reached the premise, instances it set aside].
COUNTS: dict[str, list[int]] = {}


def reset_counts() -> None:
    COUNTS.clear()


def _count(name: str, holds: bool) -> None:
    c = COUNTS.setdefault(name, [0, 0])
    c[0] += 1
    c[1] += not holds


def premise(name: str, value: float, what: str) -> bool:
    """A remaining premise of a check's instance, holding where ``value`` is above ``PREMISES[name]``'s
    threshold. Inside a property, ``assume`` (a counted discard, held to the premise's budget); in a fixed
    example, where nothing may be discarded silently, a failure naming it."""
    holds = bool(value > PREMISES[name].threshold)
    _count(name, holds)
    if currently_in_test_context():
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


def over_budget(counts: dict[str, list[int]] | None = None) -> list[str]:
    """The premises whose share of set-aside instances exceeds their budget beyond sampling error: the
    Wilson 95 % interval's lower end above the declared budget."""
    out = []
    for name, (tried, aside) in sorted((COUNTS if counts is None else counts).items()):
        lo, _ = wilson_interval(aside, tried)
        if lo > PREMISES[name].budget:
            out.append(f"{name}: {aside}/{tried} set aside, Wilson 95 % lower end {lo:.3f} > budget "
                       f"{PREMISES[name].budget:g}")
    return out
