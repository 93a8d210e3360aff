r"""The ledger's statistics: one number per seed in, an interval that stays inside the statistic's range out.

Each claim reads one number per seed (a paired difference, a log ratio, a fraction, a rank correlation). Seeds
are the independent units; a seed whose value is not finite (a diverged run, a degenerate statistic) is left
out and counted. Three kinds of interval, each at ``LEVEL``:

    "mean"         mean +- t_{1-a/2, n-1} s / sqrt(n)                           Student t (unbounded values)
    "nonnegative"  the t interval intersected with [0, inf)                     a ratio of norms
    "cosine"       the t interval intersected with [-1, 1]                      SimSiam's loss, a negative cosine
                   (the true mean lies in the range, so an intersection keeps the interval's coverage)
    "correlation"  tanh(mean_z +- t_{1-a/2, n-1} s_z / sqrt(n)), z = atanh(r)    Fisher z: inside (-1, 1)
    "fraction"     Wilson score interval of the mean p over n seeds:
                   (p + c/2n +- sqrt(c) sqrt(p(1-p)/n + c/4n^2)) / (1 + c/n), c = z_{1-a/2}^2
                   inside [0, 1]; valid without assuming the epochs within a seed independent, because a
                   variable in [0, 1] with mean p has variance at most p(1-p) (Bhatia-Davis)

A seed's correlation of exactly +-1 has no Fisher z: it is left out and counted like a NaN.

Around the interval (``scale.ledger.verdicts`` reads them):

    decisive_p        the smallest a at which the (1-a) interval still gives the same decisive verdict (by
                      bisection: the intervals nest as the level falls), the p-value of the row
    holm              Holm's step-down adjustment over the ledger's decisive rows:
                      p~_(i) = max_{j <= i} min(1, (m - j + 1) p_(j)), p sorted ascending
    seeds_needed      the fewest seeds at which the interval, with the observed mean and spread (on the
                      interval's own scale), would be decisive; None beyond ``SEEDS_CAP``
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
from scipy import stats as sps

from scale.runs.summary import Estimate

LEVEL = 0.95  # every interval's confidence
CLIPPED = {"nonnegative": (0.0, math.inf), "cosine": (-1.0, 1.0)}  # t intervals cut to the statistic's range
KINDS = ("mean", *CLIPPED, "correlation", "fraction")
SEEDS_CAP = 50  # seeds_needed looks no further: a claim that needs more stays undecided
P_TOL = 1e-10  # bisection tolerance of decisive_p


def finite(values: Sequence[float | None]) -> list[float]:
    return [float(v) for v in values if v is not None and math.isfinite(float(v))]


def _on_scale(kind: str, values: list[float]) -> list[float]:
    """The values on the scale where the interval is symmetric (Fisher z for correlations)."""
    if kind == "correlation":
        return [math.atanh(v) for v in values if abs(v) < 1.0]
    return values


def bounds(kind: str, mean: float, sd: float, n: int, level: float = LEVEL) -> tuple[float, float]:
    """The interval of ``kind`` from a summary on its own scale (``mean``, ``sd`` of the Fisher z values for
    correlations; the mean fraction for fractions, whose ``sd`` is not used); NaN below two seeds."""
    if n < 2:
        return math.nan, math.nan
    if kind == "fraction":
        c = float(sps.norm.ppf(0.5 + level / 2)) ** 2
        p = min(max(mean, 0.0), 1.0)
        centre, half = p + c / (2 * n), math.sqrt(c) * math.sqrt(p * (1 - p) / n + c / (4 * n * n))
        return (centre - half) / (1 + c / n), (centre + half) / (1 + c / n)
    half = float(sps.t.ppf(0.5 + level / 2, n - 1)) * sd / math.sqrt(n)
    if kind == "correlation":
        return math.tanh(mean - half), math.tanh(mean + half)
    if kind in CLIPPED:
        a, b = CLIPPED[kind]
        return min(max(mean - half, a), b), min(max(mean + half, a), b)
    return mean - half, mean + half


def summary(kind: str, values: Sequence[float | None]) -> tuple[float, float, int, int]:
    """(mean, sd, n, excluded) of the usable values on ``kind``'s scale."""
    if kind not in KINDS:
        raise ValueError(f"interval kind must be one of {KINDS}, got {kind!r}")
    use = _on_scale(kind, finite(values))
    n = len(use)
    mean = float(np.mean(use)) if n else math.nan
    sd = float(np.std(use, ddof=1)) if n > 1 else math.nan
    return mean, sd, n, len(values) - n


def estimate(kind: str, values: Sequence[float | None], level: float = LEVEL) -> Estimate:
    """The point and interval of ``kind`` over the usable seeds (``value``: the mean; for correlations the
    back-transformed mean Fisher z)."""
    mean, sd, n, excluded = summary(kind, values)
    low, high = bounds(kind, mean, sd, n, level)
    value = math.tanh(mean) if kind == "correlation" and n else mean
    return Estimate(value, low, high, n, excluded)


def interval(values: Sequence[float | None], level: float = LEVEL) -> Estimate:
    """The Student t interval of the finite entries (``estimate("mean", ...)``)."""
    return estimate("mean", values, level)


def cell(est: Estimate, spec: str = ".3g") -> str:
    """``mean [low, high] (n = N)``, with the excluded count when there is one; ``-`` without values."""
    if est.n == 0:
        return "-"
    return f"{est.fmt(spec)} (n = {est.n}" + (f", {est.excluded} excluded)" if est.excluded else ")")


def decisive_p(kind: str, values: Sequence[float | None], decisive: Callable[[float, float], bool]) -> float:
    """The smallest ``a`` such that the (1 - a) interval is still decisive (``decisive(low, high)``); 1 where even
    a vanishing interval is not, NaN below two seeds."""
    mean, sd, n, _ = summary(kind, values)
    if n < 2:
        return math.nan
    if not decisive(*bounds(kind, mean, sd, n, 1e-12)):
        return 1.0
    lo, hi = 1e-12, 1.0 - 1e-16  # decisive at level lo, not decisive (or still decisive) at hi
    if decisive(*bounds(kind, mean, sd, n, hi)):
        return 1.0 - hi
    while hi - lo > P_TOL:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if decisive(*bounds(kind, mean, sd, n, mid)) else (lo, mid)
    return 1.0 - lo


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's adjusted p-values, in the input order (NaN stays NaN and does not count in m)."""
    idx = [i for i, p in enumerate(pvalues) if math.isfinite(p)]
    order = sorted(idx, key=lambda i: pvalues[i])
    m, out, running = len(order), [math.nan] * len(pvalues), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        out[i] = running
    return out


def seeds_needed(kind: str, values: Sequence[float | None], decisive: Callable[[float, float], bool],
                 cap: int = SEEDS_CAP) -> int | None:
    """The fewest seeds n (more than now) at which the interval with the observed mean and spread would be
    decisive; ``None`` if more than ``cap`` (or no spread is known: fewer than two seeds)."""
    mean, sd, n, _ = summary(kind, values)
    if n < 2 or not math.isfinite(sd):
        return None
    for m in range(n + 1, cap + 1):
        if decisive(*bounds(kind, mean, sd, m)):
            return m
    return None


def log10_ratio(num: float | None, den: float | None) -> float:
    """``log10(num / den)``; NaN unless both are positive and finite."""
    if num is None or den is None or not (math.isfinite(num) and math.isfinite(den)) or num <= 0 or den <= 0:
        return math.nan
    return math.log10(num / den)


def fraction(flags: Sequence[bool]) -> float:
    """The fraction of true entries; NaN for an empty sequence."""
    return float(np.mean(np.asarray(flags, dtype=bool))) if len(flags) else math.nan
