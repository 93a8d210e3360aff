r"""A claim as data: what it tests, where the paper says it, the per-seed statistic, the rule, the controls, the
premise, what transfers to CIFAR, what was known when the rule was written, and the alternatives considered.

Everything but the statistics' functions is data (``Claim.as_data``); ``scale.ledger.claims.rules_data`` gathers
it for every claim, and its SHA-256 (``rules_hash``) is registered before the first unit runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from scale.ledger.stats import KINDS
from scale.ledger.verdicts import Rule

Results = dict[str, dict[str, Any]]  # unit name -> its record
Statistic = Callable[[Results, int], float]  # (units, seed) -> one value (NaN: absent or degenerate)
PAPER, PROJECT, MECHANISM = "paper", "project", "mechanism"
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

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"{self.id}: kind must be one of {KINDS}, got {self.kind!r}")
        if self.table not in (PAPER, PROJECT, MECHANISM):
            raise ValueError(f"{self.id}: table must be paper, mechanism or project, got {self.table!r}")
        if self.transfer[0] not in TRANSFERS:
            raise ValueError(f"{self.id}: transfer must be one of {TRANSFERS}, got {self.transfer[0]!r}")

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
        }


POSITIVE = Rule(">", 0.0)
NEGATIVE = Rule("<", 0.0)
LOG10 = "log10 ratio"
PAPER_MD = "docs/paper.md"
