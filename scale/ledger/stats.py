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

A fraction of epochs within seeds (``"clustered"``: one ``(k, m)`` per seed, k of its m epochs) uses every epoch
and treats the epochs of a seed as clustered: a beta-binomial random-effects model (seed s's rate p_s ~ Beta(mu
kappa, (1 - mu) kappa), its k_s ~ Binomial(m_s, p_s)), and the profile-likelihood interval of the mean rate mu:

    {mu : 2 (l_p(mu_hat) - l_p(mu)) <= chi2_1(LEVEL)},
    l_p(mu) = max over kappa of sum_s log BetaBin(k_s | m_s, mu kappa, (1 - mu) kappa)

kappa -> infinity is the binomial (epochs independent), kappa -> 0 the all-or-nothing seed (a seed one trial), and
the data choose between them. 10 seeds of 50 of 50 epochs: l_p(mu) = 10 log mu (kappa -> 0 maximises), so the
interval is [exp(-chi2 / 20), 1] = [0.825, 1]; the per-seed view beside it (Wilson over the seeds' fractions) is
[0.722, 1]. Its point is the observed fraction sum k / sum m (what the epochs show), not the beta-binomial's fitted
mean rate, which weighs the seeds otherwise and can lie far from it (0.677 against an observed 0.774).

Around the interval (``scale.ledger.verdicts`` reads them):

    decisive_p        the smallest a at which the (1-a) interval still gives the same decisive verdict (by
                      bisection: the intervals nest as the level falls), the p-value of the row
    holm              Holm's step-down adjustment over a family of rows (the ledger's: ``evaluate.in_family``):
                      p~_(i) = max_{j <= i} min(1, (m - j + 1) p_(j)), p sorted ascending
    seeds_needed      the fewest seeds at which the interval, with the observed mean and spread (on the
                      interval's own scale), would be decisive; None beyond ``SEEDS_CAP``
    prediction        where one more run's value would lie: mean +- t_{1-a/2, n-1} s sqrt(1 + 1/n) on the
                      interval's scale (Fisher z for correlations; a clustered fraction by its seeds' fractions),
                      inside the statistic's range: what a paper's value from a single run is compared with
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from scipy import optimize as sps_optimize
from scipy import special as sps_special
from scipy import stats as sps

from scale.runs.summary import Estimate

LEVEL = 0.95  # every interval's confidence
CLIPPED = {"nonnegative": (0.0, math.inf), "cosine": (-1.0, 1.0)}  # t intervals cut to the statistic's range
KINDS = ("mean", *CLIPPED, "correlation", "fraction", "clustered")
LOG_KAPPA = (-14.0, 14.0)  # the beta-binomial's precision kappa searched between e^-14 (a seed one trial) and e^14
SEEDS_CAP = 50  # seeds_needed looks no further: a claim that needs more stays undecided
P_TOL = 1e-10  # bisection tolerance of decisive_p


def _counts(values: Sequence[Any]) -> list[tuple[int, int]]:
    """The usable ``(k, m)`` per seed of a clustered fraction (m >= 1, 0 <= k <= m)."""
    out = []
    for v in values:
        if isinstance(v, (tuple, list)) and len(v) == 2 and all(isinstance(x, (int, float)) for x in v):
            k, m = v
            if math.isfinite(k) and math.isfinite(m) and m >= 1 and 0 <= k <= m:
                out.append((int(k), int(m)))
    return out


def _betabin_loglik(counts: list[tuple[int, int]], mu: float, log_kappa: float) -> float:
    """sum_s log BetaBin(k_s | m_s, a = mu kappa, b = (1 - mu) kappa), the binomial coefficients left out (they do
    not depend on mu or kappa)."""
    kappa = math.exp(log_kappa)
    a, b = mu * kappa, (1.0 - mu) * kappa
    return float(sum(sps_special.betaln(k + a, m - k + b) - sps_special.betaln(a, b) for k, m in counts))


def _binomial_loglik(counts: list[tuple[int, int]], mu: float) -> float:
    """kappa -> infinity: the epochs independent (0 log 0 = 0)."""
    k = sum(c[0] for c in counts)
    n = sum(c[1] for c in counts)
    return float(sps_special.xlogy(k, mu) + sps_special.xlog1py(n - k, -mu))


def profile_loglik(counts: list[tuple[int, int]], mu: float) -> float:
    """l_p(mu): the beta-binomial log-likelihood maximised over kappa (its binomial limit included)."""
    best = sps_optimize.minimize_scalar(lambda t: -_betabin_loglik(counts, mu, t), bounds=LOG_KAPPA,
                                        method="bounded", options={"xatol": 1e-6})
    ends = [_betabin_loglik(counts, mu, t) for t in LOG_KAPPA]
    return max(-float(best.fun), *ends, _binomial_loglik(counts, mu))


MU_EDGE = 1e-12  # the mean rate's search range [MU_EDGE, 1 - MU_EDGE]; a bound at the edge is reported as 0 or 1


def clustered_interval(counts: list[tuple[int, int]], level: float = LEVEL) -> tuple[float, float, float]:
    """(mu_hat, low, high): the beta-binomial mean rate and its profile-likelihood interval (module docstring)."""
    k, n = sum(c[0] for c in counts), sum(c[1] for c in counts)
    lo_edge, hi_edge = MU_EDGE, 1.0 - MU_EDGE
    if k == n:
        mu_hat = 1.0
    elif k == 0:
        mu_hat = 0.0
    else:
        fit = sps_optimize.minimize_scalar(lambda u: -profile_loglik(counts, u), bounds=(lo_edge, hi_edge),
                                           method="bounded", options={"xatol": 1e-10})
        mu_hat = float(fit.x)
    top = profile_loglik(counts, min(max(mu_hat, lo_edge), hi_edge))
    cut = float(sps.chi2.ppf(level, 1)) / 2.0

    def inside(u: float) -> bool:
        return top - profile_loglik(counts, u) <= cut

    def edge(a: float, b: float) -> float:  # a inside, b outside: the crossing between them
        for _ in range(60):
            mid = (a + b) / 2
            a, b = (mid, b) if inside(mid) else (a, mid)
        return (a + b) / 2

    centre = min(max(mu_hat, lo_edge), hi_edge)
    low = 0.0 if inside(lo_edge) else edge(centre, lo_edge)
    high = 1.0 if inside(hi_edge) else edge(centre, hi_edge)
    return mu_hat, low, high


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
    if kind not in KINDS or kind == "clustered":
        raise ValueError(f"interval kind must be one of {KINDS} (clustered: read by estimate), got {kind!r}")
    use = _on_scale(kind, finite(values))
    n = len(use)
    mean = float(np.mean(use)) if n else math.nan
    sd = float(np.std(use, ddof=1)) if n > 1 else math.nan
    return mean, sd, n, len(values) - n


def estimate(kind: str, values: Sequence[Any], level: float = LEVEL) -> Estimate:
    """The point and interval of ``kind`` over the usable seeds (``value``: the mean; for correlations the
    back-transformed mean Fisher z; for a clustered fraction the observed fraction of epochs, its interval the
    beta-binomial profile-likelihood one)."""
    if kind == "clustered":
        counts = _counts(values)
        if not counts:
            return Estimate(math.nan, math.nan, math.nan, 0, len(values))
        _, low, high = clustered_interval(counts, level)
        observed = sum(k for k, _ in counts) / sum(m for _, m in counts)
        return Estimate(observed, low, high, len(counts), len(values) - len(counts))
    mean, sd, n, excluded = summary(kind, values)
    low, high = bounds(kind, mean, sd, n, level)
    value = math.tanh(mean) if kind == "correlation" and n else mean
    return Estimate(value, low, high, n, excluded)


def prediction(kind: str, values: Sequence[Any], level: float = LEVEL) -> tuple[float, float]:
    """``(low, high)`` where one more run's value would lie (module docstring); NaN below two usable seeds."""
    if kind == "clustered":
        kind, values = "fraction", [k / m for k, m in _counts(values)]
    mean, sd, n, _ = summary(kind, values)
    if n < 2:
        return math.nan, math.nan
    half = float(sps.t.ppf(0.5 + level / 2, n - 1)) * sd * math.sqrt(1 + 1 / n)
    if kind == "correlation":
        return math.tanh(mean - half), math.tanh(mean + half)
    a, b = {"fraction": (0.0, 1.0), **CLIPPED}.get(kind, (-math.inf, math.inf))
    return min(max(mean - half, a), b), min(max(mean + half, a), b)


def interval(values: Sequence[float | None], level: float = LEVEL) -> Estimate:
    """The Student t interval of the finite entries (``estimate("mean", ...)``)."""
    return estimate("mean", values, level)


def cell(est: Estimate, spec: str = ".3g") -> str:
    """``mean [low, high] (n = N)``, with the excluded count when there is one; ``-`` without values."""
    if est.n == 0:
        return "-"
    return f"{est.fmt(spec)} (n = {est.n}" + (f", {est.excluded} excluded)" if est.excluded else ")")


def decisive_p(kind: str, values: Sequence[Any], decisive: Callable[[float, float], bool]) -> float:
    """The smallest ``a`` such that the (1 - a) interval is still decisive (``decisive(low, high)``); 1 where even
    a vanishing interval is not, NaN below two seeds."""
    if kind == "clustered":
        counts = _counts(values)
        if len(counts) < 2:
            return math.nan

        def at(level: float) -> tuple[float, float]:
            return clustered_interval(counts, level)[1:]
        tol = 1e-6  # each level's interval is itself a bisection: a coarser p suffices
    else:
        mean, sd, n, _ = summary(kind, values)
        if n < 2:
            return math.nan

        def at(level: float) -> tuple[float, float]:
            return bounds(kind, mean, sd, n, level)
        tol = P_TOL
    if not decisive(*at(1e-12)):
        return 1.0
    lo, hi = 1e-12, 1.0 - 1e-16  # decisive at level lo, not decisive (or still decisive) at hi
    if decisive(*at(hi)):
        return 1.0 - hi
    while hi - lo > tol:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if decisive(*at(mid)) else (lo, mid)
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
    decisive; ``None`` if more than ``cap`` (or no spread is known: fewer than two seeds). A clustered fraction:
    the observed seeds repeated in turn until decisive."""
    if kind == "clustered":
        counts = _counts(values)
        if len(counts) < 2:
            return None
        for m in range(len(counts) + 1, cap + 1):
            if decisive(*clustered_interval([counts[i % len(counts)] for i in range(m)])[1:]):
                return m
        return None
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
