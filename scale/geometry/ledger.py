r"""The replication ledger's statistics: a claim's per-seed values, their interval, and the rule that reads it.

Each claim of the paper is tested through one number per seed (a paired difference, a log ratio, a
fraction, a rank correlation: ``scale.replicate`` defines each). Over the seeds that gave a finite value:

    mean, low, high   the two-sided Student t interval  mean +- t_{0.975, n-1} s / sqrt(n)   (s: sample std;
                      ``scale.geometry.verdict.t_interval``), an ``Estimate`` of that module; NaN below two seeds

A ``Rule`` turns that interval into one of ``VERDICTS``, and is fixed before the runs:

    ">"  bar b        reproduced if low > b; not reproduced if high < b; otherwise inconclusive
    "<"  bar b        reproduced if high < b; not reproduced if low > b; otherwise inconclusive
    "within" [a, b]   reproduced if a <= low and high <= b; not reproduced if high < a or low > b;
                      otherwise inconclusive

"inconclusive at this power" also stands where fewer than two seeds gave a value (no interval), and
"not measured" where none did. A seed whose value is not finite (a run that diverged, a correlation of a
constant series) is left out and counted (``Estimate.excluded``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from scale.geometry.verdict import Estimate, t_interval

LEVEL = 0.95  # the interval's confidence
REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE, NOT_MEASURED = (
    "reproduced", "not reproduced", "inconclusive at this power", "not measured")
VERDICTS = (REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE, NOT_MEASURED)
DIRECTIONS = (">", "<", "within")


def interval(values: Sequence[float | None], level: float = LEVEL) -> Estimate:
    """The mean and t interval of the finite entries of ``values`` (``None`` and NaN count as excluded), as
    ``scale.geometry.verdict``'s ``Estimate`` (``value`` is the mean)."""
    finite = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    excluded = len(values) - len(finite)
    if not finite:
        return Estimate(math.nan, math.nan, math.nan, 0, excluded)
    mean, low, high = t_interval(np.asarray(finite), level)
    return Estimate(mean, low, high, len(finite), excluded)


def cell(est: Estimate, spec: str = ".3g") -> str:
    """``mean [low, high] (n = N)``, with the excluded count when there is one; ``-`` without values."""
    if est.n == 0:
        return "-"
    return f"{est.fmt(spec)} (n = {est.n}" + (f", {est.excluded} excluded)" if est.excluded else ")")


@dataclass(frozen=True)
class Rule:
    """What the paper claims about a statistic: ``direction`` ">" or "<" a ``bar``, or "within" ``band``."""

    direction: str
    bar: float = 0.0
    band: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        if self.direction not in DIRECTIONS:
            raise ValueError(f"rule direction must be one of {DIRECTIONS}, got {self.direction!r}")
        if self.direction == "within" and (self.band is None or not self.band[0] < self.band[1]):
            raise ValueError(f"a 'within' rule needs a band (a, b) with a < b, got {self.band!r}")

    def text(self) -> str:
        """The rule in words, as the report prints it."""
        if self.direction == "within":
            a, b = self.band
            return (f"reproduced if the interval lies within [{a:g}, {b:g}]; not reproduced if it lies wholly "
                    "outside; otherwise inconclusive")
        side, other = ("above", "below") if self.direction == ">" else ("below", "above")
        return (f"reproduced if the interval lies {side} {self.bar:g}; not reproduced if it lies {other} "
                f"{self.bar:g}; otherwise inconclusive")

    def verdict(self, est: Estimate) -> str:
        """One of ``VERDICTS`` for the interval ``est``."""
        if est.n == 0:
            return NOT_MEASURED
        if math.isnan(est.low):
            return INCONCLUSIVE
        low, high = est.low, est.high
        if self.direction == ">":
            return REPRODUCED if low > self.bar else NOT_REPRODUCED if high < self.bar else INCONCLUSIVE
        if self.direction == "<":
            return REPRODUCED if high < self.bar else NOT_REPRODUCED if low > self.bar else INCONCLUSIVE
        a, b = self.band
        if a <= low and high <= b:
            return REPRODUCED
        return NOT_REPRODUCED if high < a or low > b else INCONCLUSIVE


# --------------------------------------------------------------------------------------------
# Per-seed statistics the claims are made of
# --------------------------------------------------------------------------------------------


def log10_ratio(num: float | None, den: float | None) -> float:
    """``log10(num / den)``; NaN unless both are positive and finite."""
    if num is None or den is None or not (math.isfinite(num) and math.isfinite(den)) or num <= 0 or den <= 0:
        return math.nan
    return math.log10(num / den)


def fraction(flags: Sequence[bool]) -> float:
    """The fraction of true entries; NaN for an empty sequence."""
    return float(np.mean(np.asarray(flags, dtype=bool))) if len(flags) else math.nan
