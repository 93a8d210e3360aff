"""The ledger's verdicts as a replication reviewer reads them (``scale.ledger.verdicts.compose``, ``.evaluate``,
``.stats``): the clustered interval of a fraction of epochs against hand-computed cases (500 of 500 among them), the
twin and magnitude contrasts composed into the label, the premise "the network learned" naming the units that did
not, every paper and mechanism row declaring its contrasts (or why not), and every paper figure traced to its line."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from _binomial import CHI2, binomial_lr

from scale.ledger import stats as lstats
from scale.ledger.claims import CLAIMS
from scale.ledger.claims.base import CHECK, MECHANISM, PAPER, Claim, Control, Twin, factor_band
from scale.ledger.evaluate import evaluate
from scale.ledger.verdicts import (
    EXCLUDED,
    FAILS,
    HOLDS,
    IN_MAGNITUDE,
    INCONCLUSIVE,
    NOT_REPRODUCED,
    ONLY_PAPER_PROTOCOL,
    OPEN,
    PREMISE_NOT_MET,
    REPRODUCED,
    REPRODUCED_IN_MAGNITUDE,
    SIGN_ONLY,
    Rule,
    compose,
    magnitude_outcome,
)

ROOT = Path(__file__).resolve().parent.parent
REL = 1e-4  # the interval's ends against the hand computation: the profile is maximised numerically


# ----------------------------------------------------------------------------- fractions of epochs, clustered


def test_500_of_500_epochs_the_all_or_nothing_seed_is_the_likelihoods_choice():
    """10 seeds of 50 of 50: every kappa gives P(k = m) <= mu (kappa -> 0: a seed one trial), so the profile is
    10 log mu and the interval [exp(-chi2 / 20), 1] = [0.825, 1]; the paper's "about 70 %" lies outside it, where
    the Wilson interval over seeds, [0.722, 1], could not exclude 0.9 nor decide."""
    mu, low, high = lstats.clustered_interval([(50, 50)] * 10)
    assert mu == 1.0 and high == 1.0 and math.isclose(low, math.exp(-CHI2 / 20), rel_tol=REL)
    assert low > 0.70  # the paper's value excluded
    one = lstats.clustered_interval([(50, 50)])
    assert math.isclose(one[1], math.exp(-CHI2 / 2), rel_tol=REL)  # one seed: one trial



def test_identical_seeds_are_the_binomial_with_every_epoch():
    """10 seeds of 35 of 50: no overdispersion, kappa -> infinity, the binomial interval of 350 of 500."""
    _, low, high = lstats.clustered_interval([(35, 50)] * 10)
    lo, hi = binomial_lr(350, 500)
    assert math.isclose(low, lo, rel_tol=1e-3) and math.isclose(high, hi, rel_tol=1e-3)


def test_all_or_nothing_seeds_count_as_one_trial_each():
    """5 seeds of 50 of 50 and 5 of 0 of 50: the seeds are the trials, the interval that of 5 of 10 Bernoulli."""
    mu, low, high = lstats.clustered_interval([(50, 50)] * 5 + [(0, 50)] * 5)
    lo, hi = binomial_lr(5, 10)
    assert math.isclose(mu, 0.5, abs_tol=1e-6)
    assert math.isclose(low, lo, rel_tol=REL) and math.isclose(high, hi, rel_tol=REL)


def test_the_clustered_kind_reads_counts_and_leaves_out_what_is_not_one():
    est = lstats.estimate("clustered", [(50, 50)] * 3 + [math.nan, (3, 0), (9, 5)])
    assert est.n == 3 and est.excluded == 3 and est.value == 1.0
    with pytest.raises(ValueError):
        lstats.summary("clustered", [(1, 2)])


# ----------------------------------------------------------------------------- composing the contrasts


@pytest.mark.parametrize("sign, twin, magnitude, category, said", [
    (REPRODUCED, HOLDS, IN_MAGNITUDE, REPRODUCED_IN_MAGNITUDE, "in magnitude"),
    (REPRODUCED, HOLDS, OPEN, REPRODUCED, "magnitude open"),
    (REPRODUCED, None, None, REPRODUCED, REPRODUCED),
    (REPRODUCED, OPEN, IN_MAGNITUDE, SIGN_ONLY, "not attributable to training (trained against untrained: open)"),
    (REPRODUCED, FAILS, None, SIGN_ONLY, "the untrained twin does as much or more"),
    (REPRODUCED, HOLDS, EXCLUDED, SIGN_ONLY, EXCLUDED),
    (ONLY_PAPER_PROTOCOL, HOLDS, EXCLUDED, ONLY_PAPER_PROTOCOL, EXCLUDED),
    (NOT_REPRODUCED, HOLDS, IN_MAGNITUDE, NOT_REPRODUCED, NOT_REPRODUCED),
    (INCONCLUSIVE, None, None, INCONCLUSIVE, INCONCLUSIVE),
])
def test_reproduced_needs_the_twin_and_a_magnitude_not_excluded(sign, twin, magnitude, category, said):
    got, label = compose(sign, twin, magnitude)
    assert got == category and said in label


def test_the_label_says_in_magnitude_once():
    """Without named protocols the category already says it ("reproduced in magnitude; in magnitude" once); with
    them each protocol's outcome stays named."""
    assert compose(REPRODUCED, HOLDS, IN_MAGNITUDE) == (REPRODUCED_IN_MAGNITUDE, REPRODUCED_IN_MAGNITUDE)
    _, label = compose(REPRODUCED, HOLDS, IN_MAGNITUDE, by_protocol=(("a", IN_MAGNITUDE), ("b", IN_MAGNITUDE)))
    assert label == f"{REPRODUCED_IN_MAGNITUDE}; in magnitude under a, b"


def test_magnitude_against_the_registered_band():
    band = (0.5, 0.9)
    assert magnitude_outcome(band, 0.7, 0.6, 0.8) == IN_MAGNITUDE
    assert magnitude_outcome(band, 0.7, 0.825, 1.0) == EXCLUDED  # 500 of 500 epochs
    assert magnitude_outcome(band, 0.7, 0.65, 0.95) == OPEN
    assert magnitude_outcome(band, 0.7, math.nan, math.nan) == OPEN
    m = factor_band(-14.72, "x")
    assert m.band == (-29.44, -7.36)


# ----------------------------------------------------------------------------- a row on units


def _units(learned_by_seed: dict[int, bool | None], value: float = -5.0, twin_value: float = -1.0) -> dict:
    res = {}
    for s, ok in learned_by_seed.items():
        premise = {} if ok is None else {"raw": {"training": {"learned": ok, "findings": [] if ok else [
            "the loss ended above chance: 5.16 against 4.85"]}}}
        res[f"E3E4-s{s}"] = {"status": "finished", "seed": s, "experiment": "E3E4", "premise": premise,
                             "protocols": {"b_raw": {"v": value + 0.1 * s}, "g": {"v": twin_value + 0.1 * s}}}
    return res


def _claim(**kw) -> Claim:
    def of(proto):
        return lambda res, s: res[f"E3E4-s{s}"]["protocols"][proto]["v"]
    base = dict(twin=Twin("trained minus twin", lambda res, s: of("b_raw")(res, s) - of("g")(res, s),
                          Rule("<", 0.0)), magnitude=factor_band(-6.0, "docs/paper.md:125: -14.72 points"),
                learned=(("E3E4-s{s}", "raw"),))
    return Claim("T.1", "E3", PAPER, "a test claim", ("docs/paper.md", 125, "52.27 %"), "-6", "a gap", "points",
                 Rule("<", 0.0), of("b_raw"), controls=(Control("twin alone", of("g")),), **{**base, **kw})


def test_a_row_whose_networks_learned_with_its_twin_and_magnitude_is_reproduced_in_magnitude():
    row = evaluate(_claim(), _units({0: True, 1: True, 2: True}))
    assert row["verdict"] == REPRODUCED_IN_MAGNITUDE and row["twin_result"]["outcome"] == HOLDS
    assert row["learned_result"]["outcome"] == HOLDS and row["learned_result"]["trainings"] == 3


def test_a_network_that_did_not_learn_is_named_and_the_row_not_decided():
    row = evaluate(_claim(), _units({0: True, 1: False, 2: True}))
    assert row["verdict"] == PREMISE_NOT_MET
    assert "the network did not learn: E3E4-s1 (raw): the loss ended above chance" in row["label"]
    unrecorded = evaluate(_claim(), _units({0: True, 1: None, 2: True}))
    assert unrecorded["verdict"] == INCONCLUSIVE and unrecorded["learned_result"]["missing"] == ["E3E4-s1 (raw)"]


def test_a_twin_that_does_as_much_makes_the_row_sign_only():
    row = evaluate(_claim(), _units({0: True, 1: True, 2: True}, value=-5.0, twin_value=-5.0))
    assert row["verdict"] == SIGN_ONLY and "not attributable to training" in row["label"]


def test_every_paper_and_mechanism_row_declares_each_contrast_or_why_not():
    for c in CLAIMS:
        if c.table in (PAPER, MECHANISM):
            assert bool(c.twin) != bool(c.no_twin), c.id
            assert bool(c.magnitude) != bool(c.no_magnitude), c.id
            assert bool(c.learned) != bool(c.not_learned), c.id
    with pytest.raises(ValueError, match="give exactly one of twin"):
        _claim(twin=None)  # neither a twin nor its reason
    with pytest.raises(ValueError, match="give exactly one of learned"):
        _claim(learned=(), not_learned="")
    assert [c.id for c in CLAIMS if c.table == CHECK] == ["M.1"]  # an identity of the code: a check


def test_every_paper_figure_is_traced_to_its_line():
    """A paper row's source line holds its phrase, and each magnitude's value is written on the line it cites."""
    lines = (ROOT / "docs" / "paper.md").read_text().splitlines()
    for c in CLAIMS:
        if c.magnitude is None:
            continue
        where, text = c.magnitude.source.split(": ", 1)
        file, line = where.rsplit(":", 1)
        assert file == "docs/paper.md" and text in lines[int(line) - 1], (c.id, c.magnitude.source)
