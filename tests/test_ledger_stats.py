"""scale.ledger.stats and scale.ledger.verdicts: every interval, p-value, correction, seeds-needed count and
verdict rule against values computed by hand or by scipy on fixed small inputs."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from scale.ledger import stats
from scale.ledger.stats import cell, decisive_p, estimate, holm, interval, seeds_needed
from scale.ledger.verdicts import (
    FAILS,
    HOLDS,
    INCONCLUSIVE,
    NOT_MEASURABLE,
    NOT_MEASURED,
    NOT_REPRODUCED,
    ONLY_PAPER_PROTOCOL,
    OPEN,
    PREMISE_NOT_MET,
    REPRODUCED,
    Rule,
    after_holm,
    decide,
)
from scale.runs.summary import Estimate

T975_4 = 2.7764451051977934  # t_{0.975, 4} (tables: 2.776)
T975_2 = 4.302652729749462  # t_{0.975, 2} (tables: 4.303)
Z975 = 1.959963984540054  # z_{0.975}
REL = 1e-9  # agreement with a hand computation of the same formula


def test_t_interval_by_hand():
    est = interval([1.0, 2.0, 3.0, 4.0, 5.0])  # mean 3, s^2 = 2.5
    half = T975_4 * math.sqrt(2.5) / math.sqrt(5)
    assert est.n == 5 and est.excluded == 0 and est.value == 3.0
    assert math.isclose(est.low, 3 - half, rel_tol=REL) and math.isclose(est.high, 3 + half, rel_tol=REL)
    est = interval([0.2, None, 0.4, math.nan, 0.9, math.inf])  # non-finite and None: left out, counted
    s = float(np.std([0.2, 0.4, 0.9], ddof=1))
    assert est.n == 3 and est.excluded == 3 and math.isclose(est.value, 0.5)
    assert math.isclose(est.high - est.value, T975_2 * s / math.sqrt(3), rel_tol=REL)
    assert math.isnan(interval([7.0]).low) and interval([math.nan]).n == 0 and cell(interval([math.nan])) == "-"
    assert cell(interval([1.0, 2.0, 3.0, 4.0, 5.0, None])) == "3 [1.04, 4.96] (n = 5, 1 excluded)"


def test_fisher_z_interval_of_correlations_by_hand_and_inside_minus_one_one():
    r = [0.2, 0.5, 0.7]
    z = np.arctanh(r)
    half = T975_2 * np.std(z, ddof=1) / math.sqrt(3)
    est = estimate("correlation", r)
    assert math.isclose(est.value, math.tanh(z.mean()), rel_tol=REL)
    assert math.isclose(est.low, math.tanh(z.mean() - half), rel_tol=REL)
    assert math.isclose(est.high, math.tanh(z.mean() + half), rel_tol=REL)
    # the v1 ledger's E2.4 values gave a t interval reaching -1.11; Fisher z stays inside (-1, 1)
    wide = [-0.9, 0.6, -0.5, 0.4, -0.6]
    assert interval(wide).low < -1.0
    fz = estimate("correlation", wide)
    assert -1.0 < fz.low < fz.high < 1.0
    one = estimate("correlation", [1.0, 0.3, 0.5])  # exactly 1 has no Fisher z: left out and counted
    assert one.n == 2 and one.excluded == 1


def test_wilson_interval_of_fractions_by_hand_and_inside_zero_one():
    est = estimate("fraction", [0.5, 1.0, 0.75, 0.75])  # mean 0.75 over n = 4 seeds
    c = Z975 ** 2
    centre = (0.75 + c / 8) / (1 + c / 4)
    half = Z975 * math.sqrt(0.75 * 0.25 / 4 + c / 64) / (1 + c / 4)
    assert math.isclose(est.low, centre - half, rel_tol=REL) and math.isclose(est.high, centre + half, rel_tol=REL)
    assert math.isclose(est.low, 0.3006, abs_tol=1e-4) and math.isclose(est.high, 0.9544, abs_tol=1e-4)  # tables
    ones = estimate("fraction", [1.0] * 5)  # all ones: the t interval is the point [1, 1]; Wilson is not
    assert math.isclose(ones.low, 5 / (5 + c), rel_tol=REL) and ones.high == 1.0
    assert 0.0 <= estimate("fraction", [0.0, 0.02, 0.0]).low
    with pytest.raises(ValueError, match="kind"):
        estimate("median", [1.0, 2.0])


def test_nonnegative_interval_is_the_t_interval_cut_at_zero():
    v = [0.0, 0.1, 0.9]
    t = interval(v)
    cut = estimate("nonnegative", v)
    assert t.low < 0 and cut.low == 0.0 and cut.high == t.high and cut.value == t.value
    loss = [-1.0, -0.9999, -0.99]  # a negative cosine: the interval stays inside [-1, 1]
    assert interval(loss).low < -1.0 and estimate("cosine", loss).low == -1.0


def test_p_value_is_scipys_t_test_and_fisher_z_test():
    values = [0.3, -0.1, 0.8, 0.5, 0.2]
    for bar in (0.0, 0.1, -0.4):
        want = sps.ttest_1samp(values, bar).pvalue
        assert math.isclose(decisive_p("mean", values, Rule(">", bar).decisive), want, rel_tol=1e-6)
    r = [0.4, 0.6, 0.3, 0.7]
    want = sps.ttest_1samp(np.arctanh(r), 0.0).pvalue
    assert math.isclose(decisive_p("correlation", r, Rule(">", 0.0).decisive), want, rel_tol=1e-6)
    assert math.isnan(decisive_p("mean", [1.0], Rule(">", 0.0).decisive))
    # a band rule: decisive (inside) while both one-sided tests pass at a/2: p = 2 max(one-sided p)
    v = [0.6, 0.7, 0.65, 0.72, 0.68]
    t = sps.ttest_1samp
    want = 2 * max(t(v, 0.5, alternative="greater").pvalue, t(v, 0.9, alternative="less").pvalue)
    assert math.isclose(decisive_p("mean", v, Rule("within", band=(0.5, 0.9)).decisive), want, rel_tol=1e-6)


def test_holm_by_hand():
    adjusted = holm([0.01, 0.04, 0.03, 0.005, math.nan])
    # sorted 0.005 (x4 = 0.02), 0.01 (x3 = 0.03), 0.03 (x2 = 0.06), 0.04 (x1 = 0.04 -> kept at 0.06)
    assert np.allclose(adjusted[:4], [0.03, 0.06, 0.06, 0.02]) and math.isnan(adjusted[4])
    assert holm([0.6, 0.6]) == [1.0, 1.0]  # capped at 1


def test_seeds_needed_by_hand():
    # mean 1, sd 1: decisive once t_{0.975, n-1} / sqrt(n) < 1: n = 6 gives 1.0497, n = 7 gives 0.9249
    assert seeds_needed("mean", [0.0, 1.0, 2.0], Rule(">", 0.0).decisive) == 7
    assert seeds_needed("mean", [-1.0, 1.0, 0.0], Rule(">", 0.0).decisive) is None  # mean on the bar: never
    assert seeds_needed("mean", [1.0], Rule(">", 0.0).decisive) is None  # no spread yet
    # a fraction of 1 in every seed against "within [0.5, 0.9]": Wilson's low end n / (n + z^2) passes 0.9 at 35
    assert seeds_needed("fraction", [1.0, 1.0], Rule("within", band=(0.5, 0.9)).decisive) == 35
    assert stats.SEEDS_CAP == 50


def test_rules_at_their_edges():
    above, below, band = Rule(">", 0.0), Rule("<", 0.1), Rule("within", band=(0.5, 0.9))
    assert above.outcome(0.01, 2.0) == HOLDS and above.outcome(-2.0, -0.01) == FAILS
    assert above.outcome(-0.01, 2.0) == OPEN and above.outcome(math.nan, math.nan) == OPEN
    assert below.outcome(0.0, 0.09) == HOLDS and below.outcome(0.11, 1.0) == FAILS and below.outcome(0.05, 0.2) == OPEN
    assert band.outcome(0.5, 0.9) == HOLDS  # the band's ends belong to it
    assert band.outcome(0.91, 1.0) == FAILS and band.outcome(0.1, 0.49) == FAILS
    assert band.outcome(0.6, 0.95) == OPEN and band.outcome(0.4, 1.0) == OPEN
    with pytest.raises(ValueError, match="direction"):
        Rule("=", 0.0)
    with pytest.raises(ValueError, match="band"):
        Rule("within", band=(0.9, 0.5))


def test_verdict_categories_in_their_order():
    rule = Rule(">", 0.0)
    holds, fails, open_ = Estimate(1, 0.5, 1.5, 5), Estimate(-1, -1.5, -0.5, 5), Estimate(0, -1, 1, 5)
    assert decide(rule, holds, ran=False) == NOT_MEASURED
    assert decide(rule, Estimate(math.nan, math.nan, math.nan, 0, 5), ran=True) == NOT_MEASURABLE
    assert decide(rule, holds, True, premise=FAILS) == PREMISE_NOT_MET
    assert decide(rule, holds, True, premise=OPEN) == INCONCLUSIVE
    assert decide(rule, holds, True, premise=HOLDS) == REPRODUCED
    assert decide(rule, holds, True, contradicting=("BatchNorm re-estimated (c)",)) == ONLY_PAPER_PROTOCOL
    assert decide(rule, fails, True, contradicting=("c",)) == NOT_REPRODUCED
    assert decide(rule, open_, True) == INCONCLUSIVE
    assert decide(rule, Estimate(3.0, math.nan, math.nan, 1), True) == INCONCLUSIVE  # one seed: no interval
    assert after_holm(REPRODUCED, 0.049) == REPRODUCED and after_holm(REPRODUCED, 0.05) == INCONCLUSIVE
    assert after_holm(NOT_REPRODUCED, 0.2) == INCONCLUSIVE and after_holm(PREMISE_NOT_MET, 0.9) == PREMISE_NOT_MET


def test_per_seed_statistic_helpers():
    assert math.isclose(stats.log10_ratio(200.0, 2.0), 2.0)
    assert math.isnan(stats.log10_ratio(0.0, 1.0)) and math.isnan(stats.log10_ratio(1.0, None))
    assert stats.fraction([True, False, True, True]) == 0.75 and math.isnan(stats.fraction([]))
