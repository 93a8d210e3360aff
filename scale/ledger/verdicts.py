r"""The ledger's verdicts: a ``Rule`` reads an interval; ``decide`` adds the premise, the contradicting controls,
the degenerate cases, Holm's correction and the leave-one-seed-out stability; ``compose`` adds the contrasts every
row declares (its untrained twin, the paper's magnitude) and says what holds.

A ``Rule`` (fixed before the runs) maps an interval ``[low, high]`` to one of three outcomes:

    ">"  bar b        holds if low > b; fails if high < b; otherwise open
    "<"  bar b        holds if high < b; fails if low > b; otherwise open
    "within" [a, b]   holds if a <= low and high <= b; fails if high < a or low > b; otherwise open

``decide`` turns the outcome into one of ``VERDICTS``, in this order of precedence:

    not measured        no unit gave a value (nothing ran)
    not measurable      units ran but no seed gave a usable value (a degenerate statistic: a correlation of a
                        constant series, a condition number at its clamp; the reason is named)
    premise not met     the claim's premise, a rule of its own on its own statistic, fails: the run is not a
                        test of the claim (a premise whose interval is open makes the row inconclusive)
    reproduced only under the paper's protocol
                        the claim holds under the paper's protocol, and a protocol control (another protocol) read
                        with the same rule fails: the label names it
    reproduced, but not under the paper's protocol
                        the claim holds under the row's own protocol (not the paper's), and the paper's protocol,
                        a control read with the same rule, fails: the label names it
    reproduced / not reproduced / inconclusive
                        the rule's outcome; an inconclusive row carries the seeds its observed spread needs
                        (``scale.ledger.stats.seeds_needed``)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scale.runs.summary import Estimate

HOLDS, FAILS, OPEN = "holds", "fails", "open"
REPRODUCED = "reproduced"
ONLY_PAPER_PROTOCOL = "reproduced only under the paper's protocol"
NOT_PAPER_PROTOCOL = "reproduced, but not under the paper's protocol"
NOT_REPRODUCED = "not reproduced"
PREMISE_NOT_MET = "premise not met"
INCONCLUSIVE = "inconclusive"
NOT_MEASURABLE = "not measurable"
NOT_MEASURED = "not measured"
VERDICTS = (REPRODUCED, ONLY_PAPER_PROTOCOL, NOT_PAPER_PROTOCOL, NOT_REPRODUCED, PREMISE_NOT_MET, INCONCLUSIVE,
            NOT_MEASURABLE, NOT_MEASURED)
DECISIVE = (REPRODUCED, ONLY_PAPER_PROTOCOL, NOT_PAPER_PROTOCOL, NOT_REPRODUCED)
HOLDING = (REPRODUCED, ONLY_PAPER_PROTOCOL, NOT_PAPER_PROTOCOL)  # the sign holds under the row's protocol
UNTESTED = (PREMISE_NOT_MET, NOT_MEASURABLE, NOT_MEASURED)  # rows that are no test of their claim (outside Holm)
DIRECTIONS = (">", "<", "within")
FAMILY_ALPHA = 0.05  # Holm's family-wise level across the paper's testable rows (evaluate.in_family)


@dataclass(frozen=True)
class Rule:
    """What is claimed about a statistic: ``direction`` ">" or "<" a ``bar``, or "within" ``band``."""

    direction: str
    bar: float = 0.0
    band: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        if self.direction not in DIRECTIONS:
            raise ValueError(f"rule direction must be one of {DIRECTIONS}, got {self.direction!r}")
        if self.direction == "within" and (self.band is None or not self.band[0] < self.band[1]):
            raise ValueError(f"a 'within' rule needs a band (a, b) with a < b, got {self.band!r}")

    def text(self) -> str:
        if self.direction == "within":
            a, b = self.band
            return f"interval within [{a:g}, {b:g}]"
        return f"interval {'above' if self.direction == '>' else 'below'} {self.bar:g}"

    def outcome(self, low: float, high: float) -> str:
        """``HOLDS``, ``FAILS`` or ``OPEN`` for the interval ``[low, high]`` (NaN ends: open)."""
        if math.isnan(low) or math.isnan(high):
            return OPEN
        if self.direction == ">":
            return HOLDS if low > self.bar else FAILS if high < self.bar else OPEN
        if self.direction == "<":
            return HOLDS if high < self.bar else FAILS if low > self.bar else OPEN
        a, b = self.band
        if a <= low and high <= b:
            return HOLDS
        return FAILS if high < a or low > b else OPEN

    def decisive(self, low: float, high: float) -> bool:
        return self.outcome(low, high) != OPEN

    def as_data(self) -> dict:
        return {"direction": self.direction, "bar": self.bar, "band": list(self.band) if self.band else None}


def outcome_of(rule: Rule, est: Estimate) -> str:
    return rule.outcome(est.low, est.high)


def decide(rule: Rule, est: Estimate, ran: bool, premise: str | None = None,
           contradicting: tuple[str, ...] = (), paper_protocol: bool = True) -> str:
    """The row's verdict (module docstring): ``ran`` whether any unit of the row ran; ``premise`` the outcome of
    the premise's rule (None: no premise); ``contradicting`` the labels of protocol controls that fail the rule;
    ``paper_protocol`` whether the row's own statistic is measured under the paper's protocol (else a contradicting
    control is the paper's protocol)."""
    if not ran:
        return NOT_MEASURED
    if est.n == 0:
        return NOT_MEASURABLE
    if premise == FAILS:
        return PREMISE_NOT_MET
    out = outcome_of(rule, est)
    if premise == OPEN:
        return INCONCLUSIVE
    if out == HOLDS:
        return (ONLY_PAPER_PROTOCOL if paper_protocol else NOT_PAPER_PROTOCOL) if contradicting else REPRODUCED
    return NOT_REPRODUCED if out == FAILS else INCONCLUSIVE


# The verdicts of the contrasts (``compose``): the sign of the claim, then what it rests on.
IN_MAGNITUDE, EXCLUDED = "in magnitude", "the paper's value excluded"
REPRODUCED_IN_MAGNITUDE = "reproduced in magnitude"
SIGN_ONLY = "sign only"
NOT_ATTRIBUTABLE = "not attributable to training"
CATEGORIES = (REPRODUCED_IN_MAGNITUDE, REPRODUCED, ONLY_PAPER_PROTOCOL, NOT_PAPER_PROTOCOL, SIGN_ONLY, NOT_REPRODUCED,
              PREMISE_NOT_MET, INCONCLUSIVE, NOT_MEASURABLE, NOT_MEASURED)
TWIN_NOT_MEASURED = "not measured"  # a twin whose statistic no unit recorded (a unit older than the measurement)


def magnitude_outcome(band: tuple[float, float], paper: float, low: float, high: float,
                      around: tuple[float, float] | None = None) -> str:
    """``IN_MAGNITUDE`` where the interval lies inside the registered band, ``EXCLUDED`` where the paper's value
    lies outside ``around`` (default: the interval; for a paper's value from one run, the prediction interval of
    one run, ``scale.ledger.stats.prediction``), ``OPEN`` otherwise (an interval inside the band that misses the
    paper's value is in magnitude: the band is what was registered)."""
    if math.isnan(low) or math.isnan(high):
        return OPEN
    if band[0] <= low and high <= band[1]:
        return IN_MAGNITUDE
    a, b = around if around is not None else (low, high)
    if math.isnan(a) or math.isnan(b):
        return OPEN
    return EXCLUDED if paper < a or paper > b else OPEN


def magnitude_of(by_protocol: tuple[tuple[str, str], ...]) -> str | None:
    """One magnitude outcome over the protocols where the sign holds (``(protocol, outcome)``, the row's own first):
    in magnitude under every one, the paper's value excluded under any one, else open; ``None`` without any."""
    outcomes = [o for _, o in by_protocol]
    if not outcomes:
        return None
    return IN_MAGNITUDE if all(o == IN_MAGNITUDE for o in outcomes) else EXCLUDED if EXCLUDED in outcomes else OPEN


def _magnitude_notes(magnitude: str | None, by_protocol: tuple[tuple[str, str], ...]) -> list[str]:
    """The magnitude as the label says it: one note for a row without named protocols, else each outcome with the
    protocols it holds under."""
    words = {OPEN: "magnitude open"}
    named = [(p, o) for p, o in by_protocol if p]
    if not named:
        return [] if magnitude is None else [words.get(magnitude, magnitude)]
    return [f"{words.get(outcome, outcome)} under {', '.join(p for p, o in named if o == outcome)}"
            for outcome in (IN_MAGNITUDE, EXCLUDED, OPEN) if any(o == outcome for _, o in named)]


def compose(sign: str, twin: str | None, magnitude: str | None, open_protocols: tuple[str, ...] = (),
            contradicting: tuple[str, ...] = (), by_protocol: tuple[tuple[str, str], ...] = ()
            ) -> tuple[str, str]:
    """``(category, label)`` of a row from ``decide``'s verdict (``sign``), the twin contrast's outcome (``None``: not
    applicable; ``TWIN_NOT_MEASURED``: no unit recorded it) and the magnitude's (``None``: not applicable;
    ``by_protocol``: its outcome under each protocol where the sign holds, named in the label). "reproduced" needs
    the twin to hold; a holding sign whose twin does not, or whose magnitude excludes the paper's value under any
    protocol that holds, is "sign only", with what failed named; a protocol that fails the rule is named. An
    inconclusive or not reproduced row whose interval excludes the paper's value says so."""
    if sign in (INCONCLUSIVE, NOT_REPRODUCED):
        return sign, "; ".join([sign, *([EXCLUDED] if magnitude == EXCLUDED else [])])
    if sign not in HOLDING:
        return sign, sign
    notes = []
    category = sign
    if contradicting:
        notes.append("fails under " + ", ".join(contradicting))
    if twin is not None and twin != HOLDS:
        category = SIGN_ONLY
        notes.append(NOT_ATTRIBUTABLE + (" (the untrained twin does as much or more)" if twin == FAILS else
                                         " (its untrained twin not measured)" if twin == TWIN_NOT_MEASURED else
                                         " (trained against untrained: open)"))
    if magnitude == EXCLUDED and category == REPRODUCED:
        category = SIGN_ONLY
    elif magnitude == IN_MAGNITUDE and category == REPRODUCED:
        category = REPRODUCED_IN_MAGNITUDE
    # a bare "in magnitude" (no protocol named) repeats what "reproduced in magnitude" already says
    notes += [n for n in _magnitude_notes(magnitude, by_protocol)
              if not (n == IN_MAGNITUDE and category == REPRODUCED_IN_MAGNITUDE)]
    if open_protocols:
        notes.append("open under " + ", ".join(open_protocols))
    head = category if category != SIGN_ONLY else f"{SIGN_ONLY} ({sign})"
    return category, "; ".join([head, *notes])


def after_holm(verdict: str, adjusted_p: float) -> str:
    """The verdict beside Holm's correction: a decisive verdict (its sign decided) whose adjusted p is not below
    ``FAMILY_ALPHA`` becomes inconclusive; every other verdict stays."""
    if verdict in (*DECISIVE, REPRODUCED_IN_MAGNITUDE, SIGN_ONLY) and not adjusted_p < FAMILY_ALPHA:
        return INCONCLUSIVE
    return verdict
