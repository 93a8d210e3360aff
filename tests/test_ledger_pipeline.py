"""Each rule of the ledger through the pipeline that applies it: rows built from unit records by ``evaluate_all``
(``evaluate`` then ``holm``, what ``scale.ledger.views`` calls) over the registered claims, not the rule's function
alone. Each test names the edit it guards (a mutant that passed every test before these):

    Holm            switched off in ``evaluate`` (raw p passed on as the adjusted p); or run over every row
    clustered       ``stats.estimate`` reading a fraction of epochs as a Wilson interval over pooled epochs; or its
                    point the beta-binomial's fitted rate instead of the observed fraction
    premise         a unit with no training record masking one that did not learn; E2's premise by run, not by
                    statistic
    twin            protocol a's twin read from d (default BatchNorm statistics) instead of h (a's mismatch)
    magnitude       the factor 2 on the log ratio instead of on the ratio; magnitude tested on the row's protocol
                    only; a paper's one-run value read against the interval of our mean
    labels          "only under the paper's protocol" where the paper's protocol is the one that fails; "the
                    paper's value excluded" dropped on inconclusive rows
    E1              E1.2 decided by the end/start ratio (where the head started); E1.4's statistic without ReLU
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest
from _binomial import binomial_lr
from scipy import stats

from scale import replicate
from scale.ledger.claims import CLAIMS
from scale.ledger.claims.base import MECHANISM, PAPER, PROJECT, Claim
from scale.ledger.evaluate import evaluate_all
from scale.ledger.readers import e1_name
from scale.ledger.stats import clustered_interval
from scale.ledger.verdicts import (
    EXCLUDED,
    INCONCLUSIVE,
    NOT_PAPER_PROTOCOL,
    NOT_REPRODUCED,
    ONLY_PAPER_PROTOCOL,
    OPEN,
    PREMISE_NOT_MET,
    REPRODUCED,
    REPRODUCED_IN_MAGNITUDE,
    SIGN_ONLY,
    Rule,
)

BY_ID = {c.id: c for c in CLAIMS}
LEARNED = {"raw": {"training": {"learned": True, "findings": []}}}


def rows(claims, res) -> dict[str, dict]:
    return {r["id"]: r for r in evaluate_all(claims, res)}


def row(cid: str, res) -> dict:
    return rows([BY_ID[cid]], res)[cid]


# ----------------------------------------------------------------------------- Holm's family


def _stat_claim(cid: str, table: str) -> Claim:
    """A claim of ``table`` whose per-seed value is ``res["E3E4-s{s}"]["v"][cid]`` (> 0)."""
    return Claim(cid, "E3", table, "a test claim", ("docs/paper.md", 125, "52.27 %"), "-", "v", "points",
                 Rule(">", 0.0), lambda res, s: res[f"E3E4-s{s}"]["v"][cid], no_twin="test", no_magnitude="test",
                 not_learned="test")


def _units_of(values: dict[str, list[float]]) -> dict:
    n = len(next(iter(values.values())))
    return {f"E3E4-s{s}": {"status": "finished", "seed": s, "experiment": "E3E4",
                           "v": {cid: v[s] for cid, v in values.items()}} for s in range(n)}


def _p_near(p: float) -> list[float]:
    """Five values whose t interval is decisive (> 0) down to level 1 - p: mean t_{1-p/2, 4} s / sqrt 5."""
    spread = [-2.0, -1.0, 0.0, 1.0, 2.0]  # s = sqrt(2.5)
    mean = float(stats.t.ppf(1 - p / 2, 4)) * math.sqrt(2.5) / math.sqrt(5)
    return [mean + d for d in spread]


def test_holm_adjusts_the_paper_rows_p_through_evaluate():
    """Two paper rows at p 0.03 and 0.04: each reproduced alone, inconclusive after Holm (0.06, 0.06). Guards Holm
    switched off in ``evaluate`` (the raw p passed on)."""
    claims = [_stat_claim("T.1", PAPER), _stat_claim("T.2", PAPER)]
    got = rows(claims, _units_of({"T.1": _p_near(0.03), "T.2": _p_near(0.04)}))
    assert [round(got[c]["p"], 4) for c in ("T.1", "T.2")] == [0.03, 0.04]
    for c in ("T.1", "T.2"):
        assert got[c]["verdict"] == REPRODUCED and got[c]["verdict_holm"] == INCONCLUSIVE
        assert math.isclose(got[c]["p_holm"], 0.06, rel_tol=1e-4)


def test_holm_runs_over_the_testable_paper_rows_only():
    """A paper row at p 0.02 beside another paper row at p 0.02 stays reproduced (2 x 0.02 = 0.04); mechanism and
    project rows at p 0.02, and a paper row whose premise failed, do not enter the family (four rows would give
    0.08). Guards Holm over every row of the ledger."""
    testable = [_stat_claim("T.1", PAPER), _stat_claim("T.2", PAPER)]
    outside = [_stat_claim("T.3", MECHANISM), _stat_claim("T.4", PROJECT)]
    values = {c.id: _p_near(0.02) for c in testable + outside}
    got = rows([*testable, *outside], _units_of(values))
    for c in ("T.1", "T.2"):
        assert math.isclose(got[c]["p_holm"], 0.04, rel_tol=1e-4) and got[c]["verdict_holm"] == REPRODUCED
    for c in ("T.3", "T.4"):
        assert math.isnan(got[c]["p_holm"]) and got[c]["verdict_holm"] == got[c]["verdict"] == REPRODUCED
    # a paper row whose premise fails is no test: out of the family, whatever its p
    premised = Claim("T.5", "E3", PAPER, "premised", ("docs/paper.md", 125, "52.27 %"), "-", "v", "points",
                     Rule(">", 0.0), lambda res, s: res[f"E3E4-s{s}"]["v"]["T.5"], no_twin="t", no_magnitude="t",
                     learned=(("E3E4-s{s}", "raw"),))
    res = _units_of({**values, "T.5": _p_near(0.02)})
    res["E3E4-s0"]["premise"] = {"raw": {"training": {"learned": False, "findings": ["did not"]}}}
    got = rows([*testable, premised], res)
    assert got["T.5"]["verdict"] == PREMISE_NOT_MET and math.isnan(got["T.5"]["p_holm"])
    assert got["T.1"]["verdict_holm"] == REPRODUCED


# ----------------------------------------------------------------------------- fractions of epochs, clustered


def _e2_units(counts: list[tuple[int, int]], run: str = "E2-normal-swish2", learned: bool | None = True) -> dict:
    """E2 runs whose seed s has ``counts[s] = (k, m)``: k of its m epochs 1..m with lambda_min negative."""
    res = {}
    for s, (k, m) in enumerate(counts):
        curv = [{"epoch": e, "negative": e <= k, "negative_G": True, "loss_indefinite": True,
                 "power_negative": e <= k, "z_cov_min": 1.0, "z_cov_max": 2.0} for e in range(1, m + 1)]
        hist = [{"epoch": e, "z_std": 0.1 * e, "z_cond": 2.0 + e * (-1) ** e} for e in range(1, m + 1)]
        premise = {} if learned is None else {"raw": {"training": {"learned": learned, "findings": [
            "the head h collapsed"] if not learned else []}}}
        res[f"{run}-s{s}"] = {"status": "finished", "seed": s, "experiment": "E2", "curvature": curv,
                              "history": hist, "premise": premise}
    return res



def test_all_or_nothing_seeds_are_clustered_in_the_row():
    """E2.2 over 5 seeds negative in all 50 epochs and 5 in none: the seeds are the trials, the row's interval that
    of 5 of 10 Bernoulli, [0.218, 0.782]; a Wilson interval over the 500 pooled epochs would be [0.456, 0.544].
    Guards ``stats.estimate`` reading a fraction of epochs as independent epochs."""
    r = row("E2.2", _e2_units([(50, 50)] * 5 + [(0, 50)] * 5))
    lo, hi = binomial_lr(5, 10)
    assert math.isclose(r["interval"]["low"], lo, rel_tol=1e-4) and math.isclose(r["interval"]["high"], hi,
                                                                                  rel_tol=1e-4)
    assert round(lo, 3) == 0.218 and r["interval"]["value"] == 0.5
    assert r["verdict"] in (REPRODUCED, SIGN_ONLY)  # some epochs negative: the sign, decided by the seeds


def test_the_clustered_point_is_the_observed_fraction():
    """Seeds of 40, 45, 50, 0, 48 of 50 epochs: the row's point is the observed 183 / 250 = 0.732, not the
    beta-binomial's fitted mean rate (which weighs the all-or-nothing seed otherwise)."""
    counts = [(40, 50), (45, 50), (50, 50), (0, 50), (48, 50)]
    r = row("E2.2", _e2_units(counts))
    assert r["interval"]["value"] == 183 / 250
    assert abs(clustered_interval(counts)[0] - 183 / 250) > 0.01  # the fitted rate is another number


# ----------------------------------------------------------------------------- the premise "the network learned"


def _e3e4_units(protocols: list[dict], learned: list[bool | None]) -> dict:
    res = {}
    for s, (prot, ok) in enumerate(zip(protocols, learned)):
        premise = {} if ok is None else {"raw": {"training": {"learned": ok, "findings": [] if ok else [
            "the loss ended above chance: 5.16 against 4.85"]}}}
        res[f"E3E4-s{s}"] = {"status": "finished", "seed": s, "experiment": "E3E4", "protocols": prot,
                             "premise": premise}
    return res


def _e4(a: float, h: float = 1.0, d: float = 1.0, b: float | None = None, c: float | None = None) -> dict:
    """Compressions of one seed under a, its twin h (and d), and the other protocols (b, c, e: a's by default)."""
    b, c = a if b is None else b, a if c is None else c
    return {"a_paper": {"compression": a}, "h_untrained_raw_bn": {"compression": h},
            "d_untrained_nobias": {"compression": d}, "b_raw": {"compression": b}, "c_bn_renorm": {"compression": c},
            "e_trained_normalized": {"compression": a}, "g_untrained_raw_renorm": {"compression": 1.0},
            "f_untrained_bn_renorm": {"compression": 1.0}}


@pytest.mark.parametrize("order", [(None, False, True), (False, None, True), (True, False, None)])
def test_a_network_that_did_not_learn_decides_whatever_another_seed_lacks(order):
    """E4.1 with one seed's training unrecorded and one that did not learn (in any order): premise not met, naming
    E3E4-s{that seed}. Guards a unit with no training record masking one that did not learn (inconclusive)."""
    r = row("E4.1", _e3e4_units([_e4(20.0), _e4(22.0), _e4(24.0)], list(order)))
    failed = order.index(False)
    assert r["verdict"] == PREMISE_NOT_MET and r["label"].startswith(f"{PREMISE_NOT_MET}: the network did not learn: "
                                                                     f"E3E4-s{failed} (raw)")


def test_e2s_premise_is_decided_per_statistic_the_same_for_every_run():
    """Collapsed E2 runs that did not learn: the lambda_min fraction (E2.3) needs no learned network and is decided;
    the Spearman over their trajectory (E2.5) is premise not met, as the normal start's (E2.4) is. Guards E2's
    premise applied by run (the normal start's only, or to every statistic)."""
    res = {**_e2_units([(50, 50)] * 3, "E2-collapsed-swish2", learned=False),
           **_e2_units([(50, 50)] * 3, "E2-normal-swish2", learned=False)}
    got = rows([BY_ID[c] for c in ("E2.2", "E2.3", "E2.4", "E2.5")], res)
    assert got["E2.2"]["sign"] == got["E2.3"]["sign"] == REPRODUCED
    assert got["E2.4"]["verdict"] == got["E2.5"]["verdict"] == PREMISE_NOT_MET
    assert "E2-collapsed-swish2-s0 (raw)" in got["E2.5"]["label"]


# ----------------------------------------------------------------------------- the twin under the paper's protocol


def test_protocol_as_twin_is_the_untrained_head_with_as_mismatch():
    """E4.1 compresses 20-24x under a; an untrained head carrying raw-z statistics onto normalised z (h) compresses
    as much, while d (default statistics) does not: not attributable to training. Guards a - d as a's pair."""
    res = _e3e4_units([_e4(20.0, h=21.0), _e4(22.0, h=23.0), _e4(24.0, h=25.0)], [True] * 3)
    r = row("E4.1", res)
    assert "h_untrained_raw_bn" in r["twin_result"]["label"]
    assert r["verdict"] == SIGN_ONLY and "the untrained twin does as much or more" in r["label"]
    learned = row("E4.1", _e3e4_units([_e4(20.0), _e4(22.0), _e4(24.0)], [True] * 3))
    assert learned["verdict"] == REPRODUCED_IN_MAGNITUDE  # h at 1x: the compression is the training's
    for seed in (0, 1, 2):  # units measured before h existed: the twin not measured, the row not "reproduced"
        del res[f"E3E4-s{seed}"]["protocols"]["h_untrained_raw_bn"]
    old = row("E4.1", res)
    assert old["twin_result"]["outcome"] == "not measured" and old["verdict"] == SIGN_ONLY
    assert "its untrained twin not measured" in old["label"]


# ----------------------------------------------------------------------------- magnitude


def test_the_factor_is_on_the_ratio():
    """E4.1 (paper 21.85x) at 5.0-5.4x: outside [10.9x, 43.7x], the paper's value excluded (a factor 2 on the log
    ratio, [4.67x, 477x], would call it in magnitude); at 15-17x, in magnitude. Guards the band on the log."""
    low = row("E4.1", _e3e4_units([_e4(5.0), _e4(5.2), _e4(5.4)], [True] * 3))
    assert low["magnitude_result"]["outcome"] == EXCLUDED and low["verdict"] == SIGN_ONLY
    assert [round(10 ** x, 1) for x in low["magnitude"]["band"]] == [10.9, 43.7]
    near = row("E4.1", _e3e4_units([_e4(15.0), _e4(16.0), _e4(17.0)], [True] * 3))
    assert near["verdict"] == REPRODUCED_IN_MAGNITUDE


def _e45(a_ratio: float, b_ratio: float, c_ratio: float) -> dict:
    """E4.5's D_inter / D_intra of h over z under a, b, c (and 1 for its twins), three seeds."""
    out = []
    for s in range(3):
        prot = {p: {"ratio_h": 2.0 * r * (1 + 0.01 * s), "ratio_z": 2.0} for p, r in
                (("a_paper", a_ratio), ("b_raw", b_ratio), ("c_bn_renorm", c_ratio))}
        prot.update({p: {"ratio_h": 2.0, "ratio_z": 2.0} for p in ("h_untrained_raw_bn", "d_untrained_nobias")})
        out.append(prot)
    return _e3e4_units(out, [True] * 3)


def test_magnitude_is_tested_under_every_protocol_that_holds():
    """E4.5 (paper 1.22x): 1.22x under a, 1.04x under b and c (both holding, > 1): the paper's value excluded
    under b and c, so not "reproduced in magnitude" though a alone is. Guards magnitude on the row's protocol only."""
    r = row("E4.5", _e45(1.22, 1.04, 1.04))
    assert r["sign"] == REPRODUCED and r["verdict"] == SIGN_ONLY
    assert "in magnitude under protocol a" in r["label"]
    assert "the paper's value excluded under protocol b, BatchNorm re-estimated (c)" in r["label"]
    assert row("E4.5", _e45(1.22, 1.2, 1.25))["verdict"] == REPRODUCED_IN_MAGNITUDE


def test_a_paper_value_from_one_run_is_read_against_one_runs_prediction():
    """E5.4 (paper +2.415 points per layer, one run): ten seeds' slopes 1 + (-1.5 .. 1.5) points per layer, mean 1
    [0.37, 1.63]. The paper's value lies outside the interval of our mean but inside where one run of ours would
    fall ([-1.09, 3.09]): open, not excluded. Guards the one-run source read against the mean's interval."""
    slopes = [1.0 + d for d in (-1.5, -1.0, -0.5, 0.0, 0.0, 0.0, 0.0, 0.5, 1.0, 1.5)]
    res = {}
    for s, slope in enumerate(slopes):
        for d in (1, 2, 3):
            acc = 0.5 + (d - 1) * slope / 100  # the rotation probe on z at depth d
            res[f"E5-depth{d}-s{s}"] = {"status": "finished", "seed": s, "experiment": "E5", "premise": LEARNED,
                                        "protocols": {"a_paper": {"rot_linear_z": acc, "class_z": acc}}}
    r = row("E5.4", res)
    est = r["interval"]
    assert est["high"] < 2.415  # outside the interval of the mean
    assert r["magnitude_result"]["outcome"] == OPEN and EXCLUDED not in r["label"]


# ----------------------------------------------------------------------------- labels


def test_the_label_names_the_protocol_that_fails():
    """E4.4 holds under b (its own protocol) and fails under a (the paper's): "reproduced, but not under the
    paper's protocol", naming a. Guards "reproduced only under the paper's protocol" on a row whose a fails."""
    prots = []
    for s in range(3):
        prots.append({"b_raw": {"kappa_factor": 2.0 + 0.05 * s, "compression": 0.2},
                      "a_paper": {"kappa_factor": 0.5 + 0.01 * s},
                      "g_untrained_raw_renorm": {"kappa_factor": 1.0, "compression": 1.0}})
    r = row("E4.4", _e3e4_units(prots, [True] * 3))
    assert r["sign"] == r["verdict"] == NOT_PAPER_PROTOCOL and "fails under protocol a" in r["label"]
    assert ONLY_PAPER_PROTOCOL not in r["label"]
    e41 = row("E4.1", _e3e4_units([_e4(20.0, b=0.2, c=0.2)] * 3, [True] * 3))
    assert e41["sign"] == ONLY_PAPER_PROTOCOL and "fails under BatchNorm re-estimated (c)" in e41["label"]


def test_an_inconclusive_or_not_reproduced_row_says_the_paper_value_is_excluded():
    """E3.1 (paper -14.72 points): an interval around 0 excludes it (inconclusive), one above 0 too (not
    reproduced); each label says so."""
    def units(gaps):
        return _e3e4_units([{"b_raw": {"rot_linear_z": 0.6, "rot_linear_h": 0.6 + g / 100},
                             "g_untrained_raw_renorm": {"rot_linear_z": 0.6, "rot_linear_h": 0.6}} for g in gaps],
                           [True] * len(gaps))
    inconclusive = row("E3.1", units([-1.0, 1.0, -0.5, 0.5]))
    assert inconclusive["verdict"] == INCONCLUSIVE and inconclusive["label"] == f"{INCONCLUSIVE}; {EXCLUDED}"
    wrong = row("E3.1", units([2.0, 3.0, 2.5, 3.5]))
    assert wrong["verdict"] == NOT_REPRODUCED and wrong["label"] == f"{NOT_REPRODUCED}; {EXCLUDED}"


# ----------------------------------------------------------------------------- E1


def _e1_units(finals: dict[str, float], starts: dict[str, float], seeds: int = 3, lr: float = 0.05,
              init: str = "collapsed") -> dict:
    """E1 runs of each head (BN off) ending at ``finals`` (times 1.05^s) from ``starts``, rho_rel 0.1 at the start;
    and for the collapsed start, the same heads' normal starts (h std 0.1), so that E1's premises are measured."""
    res = {}
    for s in range(seeds):
        for head, end in finals.items():
            for where, start in ((init, starts[head]), *((("normal", 0.1),) if init == "collapsed" else ())):
                res[e1_name(head, False, lr, where, s)] = {
                    "status": "finished", "seed": s, "experiment": "E1", "start": {"h_std": start},
                    "history": [{"epoch": 1, "h_std": end * 1.05 ** s}],
                    "curvature": [{"epoch": 0, "mechanism": {"rho_rel": 0.1}}]}
    return res


def test_e1_2_is_decided_by_the_final_level_not_by_where_the_head_started():
    """GELU starts 30x above linear (4.3e-4 against 1.4e-5) and both end near the trivial minimum, GELU 10^0.2
    above (1.6e-4 against 1e-4): its end/start ratio falls (v3's statistic: "not reproduced"), its final level is
    above linear's (reproduced). Guards E1.2 decided by the end/start ratio."""
    finals = {"linear": 1e-4, "gelu2": 10 ** 0.2 * 1e-4}
    r = row("E1.2", _e1_units(finals, {"linear": 1.4e-5, "gelu2": 4.3e-4}))
    assert math.isclose(r["interval"]["value"], 0.2, abs_tol=1e-9) and r["sign"] == REPRODUCED
    assert r["alternative_results"][0]["verdict"] == NOT_REPRODUCED  # the end/start ratio: where it started


def test_e1_4_sees_relus_own_level():
    """ReLU ending below linear (0.5 decades) and the smooth heads 0.2 above it: v3's statistic is log10(smooth /
    linear) = 0.2 whatever ReLU's level ("reproduced"); E1.4 now reads 0.2 - 0.5 = -0.3 (ReLU farther from linear
    than the smooth heads): not reproduced; ReLU at 0.05 below linear: reproduced."""
    def units(relu):
        return _e1_units({"linear": 1e-3, "relu2": relu, "gelu2": 10 ** 0.2 * 1e-3, "swish2": 10 ** 0.2 * 1e-3},
                         dict.fromkeys(("linear", "relu2", "gelu2", "swish2"), 1e-2), lr=0.005)
    far = row("E1.4", units(10 ** -0.5 * 1e-3))
    assert math.isclose(far["interval"]["value"], -0.3, abs_tol=1e-9) and far["sign"] == NOT_REPRODUCED
    assert math.isclose(far["alternative_results"][0]["interval"]["value"], 0.2, abs_tol=1e-9)
    near = row("E1.4", units(10 ** -0.05 * 1e-3))
    assert near["sign"] == REPRODUCED


# ----------------------------------------------------------------------------- the committed dry run


@pytest.mark.slow
def test_the_committed_v3_reread_is_todays_rules_over_v3s_units(tmp_path):
    """docs/replication/v3-reread/report.md is what ``--report-only --reread`` writes today from v3's stored units,
    byte for byte: a rule changed since, or a page edited by hand, fails here (rebuild it with the command in
    docs/replication/README.md)."""
    root = Path(__file__).resolve().parents[1] / "docs" / "replication"
    dest = tmp_path / "reread"
    assert replicate.main(["--report-only", "--plan", "511cfdd496f5", "--out", str(root / "v3"), "--reread",
                           str(dest)]) == 0
    committed = (root / "v3-reread" / "report.md").read_text()
    assert (dest / "report.md").read_text().replace(str(root / "v3"), "docs/replication/v3") == committed


def test_the_committed_ledger_report_is_its_units_view(tmp_path):
    """docs/replication/report.md is what ``--report-only`` writes today from the registration and unit files beside
    it, byte for byte (in progress or complete): a count edited by hand, a unit file added or removed without the
    report rebuilt, or a view that now reads the units otherwise, fails here."""
    root = Path(__file__).resolve().parents[1] / "docs" / "replication"
    if not (root / "report.md").is_file():
        pytest.skip("no ledger report at the top of docs/replication (a registration without units yet)")
    regs = sorted((root / "registrations").glob("*.json"))
    assert len(regs) == 1, f"one registration in force at the top of docs/replication, found {len(regs)}"
    for part in ("registrations", "units", "amendments", "verifications"):
        if (root / part).is_dir():
            shutil.copytree(root / part, tmp_path / part)
    assert replicate.main(["--report-only", "--plan", regs[0].stem, "--out", str(tmp_path)]) == 0
    assert (tmp_path / "report.md").read_text() == (root / "report.md").read_text()
