r"""The paper's theory, measured: the mechanism behind its claims, each a row with a rule of its own. The rows
read by E2's curvature records and E4's protocols live beside those claims (``e2.MECHANISM_CLAIMS``,
``e3e4.MECHANISM_CLAIMS``); this module holds the rest, read from the records of ``scale.curvature.eq1_terms``
(rho, M on null(G)) and ``scale.geometry.mechanism`` (timescales, Proposition 5.2's tangent gain) that the E1 and
E5 units take.
"""

from __future__ import annotations

import math

from scale.curvature.eq1_terms import RHO_FLOOR
from scale.ledger.claims.base import (
    COLLAPSED_BY_DESIGN,
    LOG10,
    MECHANISM,
    NEGATIVE,
    NO_UNTRAINED_TWIN,
    PAPER_MD,
    POSITIVE,
    QUALITATIVE,
    Alternative,
    Claim,
    Control,
    Premise,
    Twin,
)
from scale.ledger.readers import e1_name, log10_of_value, mechanism_at, section, start_z_spread, timescale
from scale.ledger.verdicts import Rule
from scale.runs.premise import SPREAD_FLOOR

RHO_RULE = Rule(">", math.log10(RHO_FLOOR))  # rho != 0: rho_rel above scale.curvature.eq1_terms's floor
E1_TRANSFER = ("scale-dependent", "where SimSiam's training ends depends on steps and widths; a CIFAR run must show "
               "whether rho stays non-zero at the paper's sizes")


def _e1(head: str, bn: bool = False, init: str = "collapsed", s: int = 0) -> str:
    return e1_name(head, bn, 0.05, init, s)


def _rho(head: str, at: str, bn: bool = False):
    return lambda res, s: log10_of_value(mechanism_at(res, _e1(head, bn, s=s), "rho_rel", at))


def _mech(head: str, key: str, at: str):
    return lambda res, s: mechanism_at(res, _e1(head, s=s), key, at)


def _drift(head: str, init: str = "collapsed"):
    return lambda res, s: section(res, _e1(head, init=init, s=s), "timescale", "log10_drift_ratio")


def _tangent(depth: int, part: str = "tangent"):
    return lambda res, s: section(res, f"E5-depth{depth}-s{s}", part, "log10_tangent_gain")


def _m_against_g(head: str):
    """log10 of M's negative curvature on null(G) over G's own (both relative to |H_eff|) at the collapsed start."""
    def value(res, s):
        m = mechanism_at(res, _e1(head, s=s), "lambda_min_M_null", "start")
        g = mechanism_at(res, _e1(head, s=s), "lambda_min_G_rel", "start")
        return log10_of_value(abs(m) / abs(g)) if m < 0 and g < 0 else math.nan
    return value


BLIND = Rule("<", -1.0)  # "blind": the tangent's gain at least 10x below random directions' (log10 < -1)
M_AGAINST_G = -2.0  # M.9's premise: M's negative curvature at least 1 % of G's, else G's decides the saddle
THEOREM_PREMISE = "a hypothesis of Theorem 4.1, measured at a state that is collapsed by design"


CLAIMS: tuple[Claim, ...] = (
    Claim("M.3", "E1", MECHANISM, "timescale separation: the head adapts faster than the backbone (a premise of "
          "Theorem 4.1 (2))", (PAPER_MD, 89, "smooth heads destabilise collapse"), "assumed (Thm 4.1 (2))",
          "median over epochs of log10(relative parameter change per epoch, head / backbone), gelu2, BN off, "
          "lr 0.05, collapsed start", LOG10, POSITIVE, _drift("gelu2"),
          controls=(Control("swish2", _drift("swish2")), Control("linear", _drift("linear")),
                    Control("gelu2, normal start", _drift("gelu2", "normal"))),
          transfer=("scale-dependent", "relative update sizes depend on widths and the optimiser; a CIFAR run must "
                    "show the head's relative change above the backbone's"),
          known="v1 recorded rel_update_head and rel_update_backbone per epoch (e.g. 5e-3 against 5e-7 in an E1 "
          "gelu2 run): no claim read them", no_twin=NO_UNTRAINED_TWIN, no_magnitude=QUALITATIVE,
          not_learned=COLLAPSED_BY_DESIGN,
          alternatives=(Alternative("the trainer's lr |g| / |w| at each epoch's last step", "log10 median of "
                                    "rel_update_head / rel_update_backbone",
                                    lambda res, s: timescale(res, _e1("gelu2", s=s)), POSITIVE),)),
    Claim("M.4", "E1", MECHANISM, "rho = grad_h L is non-zero at the collapsed start (Theorem 4.1's premise)",
          (PAPER_MD, 89, "smooth heads put negative curvature"), "assumed (Thm 4.1)",
          "log10 rho_rel at the collapsed start (sum_i |rho_i| |h_i| / |L|), gelu2, BN off, lr 0.05", LOG10,
          RHO_RULE, _rho("gelu2", "start"),
          controls=(Control("linear head", _rho("linear", "start")), Control("swish2", _rho("swish2", "start"))),
          transfer=E1_TRANSFER, known="not measured before v2; v2: 1.36 [1.05, 1.67]", no_twin=THEOREM_PREMISE,
          no_magnitude=QUALITATIVE, not_learned=COLLAPSED_BY_DESIGN),
    Claim("M.8", "E1", MECHANISM, "rho stays non-zero where the run ends (else Theorem 4.1's premise fails there)",
          (PAPER_MD, 89, "smooth heads put negative curvature"), "assumed (Thm 4.1)",
          "log10 rho_rel at the end of training, gelu2, BN off, lr 0.05, collapsed start", LOG10, RHO_RULE,
          _rho("gelu2", "end"),
          controls=(Control("linear head", _rho("linear", "end")), Control("gelu2 with BatchNorm", _rho("gelu2", "end",
                                                                                                       True)),
                    Control("final probe loss (-1: SimSiam's trivial minimum)", _mech("gelu2", "loss", "end"),
                            kind="cosine")),
          transfer=E1_TRANSFER, known="the v1 data: every head without BatchNorm ended at SimSiam's loss -1, where "
          "rho = 0 (a reviewer's recomputation; no v1 row measured it); v2: -3.56 [-3.71, -3.42]",
          no_twin=THEOREM_PREMISE, no_magnitude=QUALITATIVE, not_learned=COLLAPSED_BY_DESIGN),
    Claim("M.9", "E1", MECHANISM, "smooth heads put negative curvature on null(G) through M (Theorem 4.1 (2))",
          (PAPER_MD, 89, "smooth heads put negative curvature in `null(G)`"), "strict saddle (Thm 4.1 (2))",
          "min over samples of lambda_min(M restricted to null(G_i)) / |H_eff|, gelu2, collapsed start", "ratio",
          NEGATIVE, _mech("gelu2", "lambda_min_M_null", "start"),
          controls=(Control("relu2 (M = 0)", _mech("relu2", "lambda_min_M_null", "start")),
                    Control("swish2", _mech("swish2", "lambda_min_M_null", "start"))),
          transfer=("scale-independent", "a property of the head's form at a collapsed state; a CIFAR run must show "
                    "the same sign"),
          premises=(Premise("the backbone output is collapsed where it is measured (its spread below the collapse "
                            f"detectors' {SPREAD_FLOOR:g})", "log10(spread of z at the collapsed start / "
                            f"{SPREAD_FLOOR:g})", lambda res, s: log10_of_value(
                                start_z_spread(res, _e1("gelu2", s=s)) / SPREAD_FLOOR), NEGATIVE),
                    Premise("M's negative curvature on null(G) is at least 1 % of G's own (else SimSiam's loss, "
                            "through G, decides the saddle)", "log10(|lambda_min(M on null(G))| / "
                            "|lambda_min(G)|), gelu2, collapsed start", _m_against_g("gelu2"),
                            Rule(">", M_AGAINST_G))),
          known="theory_checks/test_thm4_1_collapse.py shows it on random smooth heads; v2: -5.79e-05 of |H_eff|, "
          "where z was not collapsed and G's negative curvature about 1e4 larger",
          degenerate="no sample has a null space of G at this state", no_twin=THEOREM_PREMISE,
          no_magnitude=QUALITATIVE, not_learned=COLLAPSED_BY_DESIGN),
    Claim("M.10", "E5", MECHANISM, "a trained head is blind along augmentation tangents: v^T G v small on V_aug "
          "(Proposition 5.2), at least 10x below random directions", (PAPER_MD, 91, "`v^T J^T J v = 0` on `V_aug`"),
          "0 (Prop 5.2)", "log10 of the median over test images of (v^T G v / |v|^2) / (tr G / d), G = J^T J of the "
          "trained head, v the rotation tangent of z, depth-1 E5 head", LOG10, BLIND, _tangent(1),
          controls=(Control("below random directions at all (< 0)", _tangent(1)),
                    Control("untrained head of the same layers", _tangent(1, "tangent_untrained")),
                    Control("depth 3", _tangent(3))),
          twin=Twin("trained minus the untrained head of the same layers", lambda res, s: _tangent(1)(res, s)
                    - _tangent(1, "tangent_untrained")(res, s), NEGATIVE),
          no_magnitude="the rule is the paper's value (0, read as at least 10x below random directions)",
          learned=(("E5-depth1-s{s}", "raw"),),
          transfer=("scale-independent", "a pointwise property of the head's Jacobian; a CIFAR run must show the "
                    "tangent's gain below random directions'"),
          known="v2: -0.0206 [-0.0271, -0.0142] (0.954x of random directions) under the rule < 0, called blind; "
          "the untrained head -0.0122"),
)
