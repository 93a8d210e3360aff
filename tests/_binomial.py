"""The binomial likelihood-ratio interval solved directly with scipy: the hand computation the ledger's clustered
fraction (``scale.ledger.stats.clustered_interval``) is checked against where seeds are identical or all-or-nothing."""

from __future__ import annotations

import math

from scipy import optimize, stats

CHI2 = float(stats.chi2.ppf(0.95, 1))  # 3.8415: the 95 % likelihood-ratio cut of one parameter


def binomial_lr(k: int, n: int) -> tuple[float, float]:
    """The 95 % likelihood-ratio interval of a binomial rate from ``k`` of ``n`` (0 < k < n)."""
    p = k / n

    def dev(u: float) -> float:
        return 2 * (k * math.log(p / u) + (n - k) * math.log((1 - p) / (1 - u))) - CHI2
    return optimize.brentq(dev, 1e-9, p), optimize.brentq(dev, p, 1 - 1e-9)
