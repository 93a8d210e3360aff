r"""A claim as data: what it tests, where the paper says it, the per-seed statistic, the rule, the controls, the
premises, what transfers to CIFAR, what was known when the rule was written, and the alternatives considered; and
the contrasts every row of the paper's claims and its mechanism declares (or says, with its reason, why it has none):

    sign       the statistic against 0 (or the rule's bar): the rule
    twin       the trained network against its untrained twin under the same protocol (``Twin``), for every claim
               about what a head or training does: "reproduced" needs it to hold
    magnitude  the effect against the paper's value, with a band registered around it (``Magnitude``):
               "reproduced in magnitude", or "the paper's value excluded", under the row's protocol and every
               protocol control where the sign holds too
    premises   the theorem's own hypotheses, measured (``premises``), and "the network learned"
               (``learned``: the units whose trainings must have passed ``scale.runs.premise``)

Everything but the statistics' functions is data (``Claim.as_data``); ``scale.ledger.claims.rules_data`` gathers
it for every claim, and its SHA-256 (``rules_hash``) is registered before the first unit runs.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from scale.ledger.stats import KINDS
from scale.ledger.verdicts import Rule

Results = dict[str, dict[str, Any]]  # unit name -> its record
Statistic = Callable[[Results, int], float]  # (units, seed) -> one value (NaN: absent or degenerate)
PAPER, PROJECT, MECHANISM, CHECK = "paper", "project", "mechanism", "check"
TABLES = (PAPER, MECHANISM, PROJECT, CHECK)
MAGNITUDE_FACTOR = 2.0  # the default band: the effect within a factor 2 of the paper's (of a ratio: of the ratio)
PAPER_PROTOCOL = "a"  # E4's protocol letters (scale.geometry.protocols): a is the paper's
TRANSFERS = ("scale-independent", "scale-dependent")


@dataclass(frozen=True)
class Control:
    """A statistic shown beside a claim; ``protocol=True``: the same claim under another measurement protocol,
    which contradicts a holding claim when it fails the claim's own rule."""

    label: str
    value: Statistic
    protocol: bool = False
    kind: str | None = None  # its interval (None: the claim's)


@dataclass(frozen=True)
class RuledStatistic:
    """A statistic with a rule of its own beside a claim: a premise (what must hold for the run to test the claim at
    all) or an alternative (a rule considered and not chosen: a secondary row, outside every tally)."""

    label: str
    statistic: str
    value: Statistic
    rule: Rule
    kind: str = "mean"

    def as_data(self, name: str) -> dict[str, Any]:
        """Without its function; ``name`` is the registered key of ``label`` (premises registered it as ``text``)."""
        return {name: self.label, "statistic": self.statistic, "kind": self.kind, "rule": self.rule.as_data()}


Premise = Alternative = RuledStatistic


@dataclass(frozen=True)
class Twin:
    """The trained network against its untrained twin under the same protocol: per seed, the claim's statistic of
    the trained network minus the same statistic of the twin, read by ``rule`` (the claim's direction at 0)."""

    label: str
    value: Statistic
    rule: Rule

    def as_data(self) -> dict[str, Any]:
        return {"label": self.label, "rule": self.rule.as_data()}


@dataclass(frozen=True)
class Magnitude:
    """The paper's value on the statistic's scale, its source, and the band registered around it: the interval
    inside the band is "reproduced in magnitude"; the paper's value outside the interval, "the paper's value
    excluded". A paper's value from one run (``runs=1``: E2's runs, E5's released arrays) is one draw with its own
    noise, which a band around it does not hold: it is "excluded" only outside the prediction interval of one run
    from our seeds (``scale.ledger.stats.prediction``), not the interval of our mean."""

    paper: float
    band: tuple[float, float]
    how: str  # how the band was set
    source: str  # where the paper's value comes from
    runs: int = 0  # the runs behind the paper's value: 1 for one run (one seed); 0 several or not stated

    def __post_init__(self) -> None:
        if not self.band[0] < self.band[1] or not self.band[0] <= self.paper <= self.band[1]:
            raise ValueError(f"a magnitude band must hold the paper's value {self.paper}, got {self.band}")

    def as_data(self) -> dict[str, Any]:
        return {"paper": self.paper, "band": list(self.band), "how": self.how, "source": self.source,
                "runs": self.runs}


def factor_band(paper: float, source: str, factor: float = MAGNITUDE_FACTOR, runs: int = 0) -> Magnitude:
    """The paper's effect within ``factor`` of itself (an effect of either sign, on the statistic's scale: a
    difference or a slope, never a log ratio: ``ratio_band``)."""
    a, b = sorted((paper / factor, paper * factor))
    return Magnitude(paper, (a, b), f"the effect within a factor {factor:g} of the paper's", source, runs)


def ratio_band(ratio: float, source: str, factor: float = MAGNITUDE_FACTOR, runs: int = 0) -> Magnitude:
    """The paper's ratio within ``factor`` of itself, on the log10 scale the statistic is read on, and its effect
    (the log10 ratio) within ``factor`` of the paper's effect: the narrower of the two. 21.85x -> [10.9x, 43.7x]
    (the factor on the ratio; on its logarithm alone it would accept 4.67x to 477x); 1.22x -> [1.10x, 1.49x] (the
    factor on the effect; on the ratio alone it would accept 0.61x, an effect of the other sign)."""
    paper, half = math.log10(ratio), math.log10(factor)
    on_effect = sorted((paper / factor, paper * factor))
    band = (max(paper - half, on_effect[0]), min(paper + half, on_effect[1]))
    return Magnitude(paper, band, f"the ratio within a factor {factor:g} of the paper's and its log10 within a "
                     f"factor {factor:g} of the paper's ({10 ** band[0]:.3g}x to {10 ** band[1]:.3g}x)", source, runs)


@dataclass(frozen=True)
class Claim:
    id: str
    experiment: str
    table: str  # PAPER (the paper's own claims), MECHANISM (the paper's theory, measured), PROJECT
    claim: str
    source: tuple[str, int, str]  # (file, line, a phrase of that line) of what it tests
    paper: str  # the paper's figure, or "qualitative"
    statistic: str
    unit: str
    rule: Rule
    value: Statistic
    kind: str = "mean"  # the interval (scale.ledger.stats.KINDS)
    controls: tuple[Control, ...] = ()
    premises: tuple[Premise, ...] = ()  # each must hold for the run to test the claim
    transfer: tuple[str, str] = ("scale-dependent", "")  # (TRANSFERS entry, what a CIFAR run must show)
    known: str = ""  # what was already known when the rule was written
    alternatives: tuple[Alternative, ...] = ()
    degenerate: str = ""  # when a seed's value is not measurable (NaN), why
    twin: Twin | None = None
    no_twin: str = ""  # why no untrained twin applies (every paper and mechanism row without a twin says why)
    magnitude: Magnitude | None = None
    no_magnitude: str = ""  # why the paper gives no value to test (qualitative, or the rule is the value)
    # the trainings that must have learned (scale.runs.premise): (unit name with {s} for the seed, training), the
    # training a key of the unit record's "premise" (raw, normalized); empty: not_learned says why not a premise
    learned: tuple[tuple[str, str], ...] = ()
    not_learned: str = ""
    protocol: str = ""  # the E4 protocol letter the statistic is measured under ("": none); "a" is the paper's

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"{self.id}: kind must be one of {KINDS}, got {self.kind!r}")
        if self.table not in TABLES:
            raise ValueError(f"{self.id}: table must be one of {TABLES}, got {self.table!r}")
        if self.transfer[0] not in TRANSFERS:
            raise ValueError(f"{self.id}: transfer must be one of {TRANSFERS}, got {self.transfer[0]!r}")
        if self.table in (PAPER, MECHANISM):  # every contrast declared, or its absence explained
            for present, why, what in ((self.twin, self.no_twin, "twin"), (self.magnitude, self.no_magnitude,
                                       "magnitude"), (self.learned, self.not_learned, "learned")):
                if bool(present) == bool(why):
                    raise ValueError(f"{self.id}: give exactly one of {what} and the reason it does not apply")

    def as_data(self) -> dict[str, Any]:
        """The claim without its functions: what registration hashes."""
        return {
            "id": self.id, "experiment": self.experiment, "table": self.table, "claim": self.claim,
            "source": list(self.source), "paper": self.paper, "statistic": self.statistic, "unit": self.unit,
            "kind": self.kind, "rule": self.rule.as_data(), "rule_text": self.rule.text(),
            "controls": [{"label": c.label, "protocol": c.protocol, "kind": c.kind} for c in self.controls],
            "premises": [p.as_data("text") for p in self.premises],
            "transfer": list(self.transfer), "known": self.known, "degenerate": self.degenerate,
            "alternatives": [a.as_data("label") for a in self.alternatives],
            "twin": self.twin.as_data() if self.twin else None, "no_twin": self.no_twin,
            "magnitude": self.magnitude.as_data() if self.magnitude else None, "no_magnitude": self.no_magnitude,
            "learned": [list(x) for x in self.learned], "not_learned": self.not_learned, "protocol": self.protocol,
        }


POSITIVE = Rule(">", 0.0)
NEGATIVE = Rule("<", 0.0)
LOG10 = "log10 ratio"
PAPER_MD = "docs/paper.md"
# reasons shared by many rows (why a contrast does not apply)
COLLAPSE_IS_THE_CLAIM = ("the run starts collapsed by design: whether training leaves the collapse is the claim, "
                         "not its premise")
COLLAPSED_BY_DESIGN = "the run starts collapsed by design: its state, not a learned representation, is measured"
QUALITATIVE = "the paper states no value, only the direction"
NO_UNTRAINED_TWIN = "a property of training dynamics: an untrained network has no such trajectory"
