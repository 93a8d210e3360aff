r"""The paper's theory, measured: the mechanism behind its claims, each a row with a rule of its own. The rows
read by E2's curvature records and E4's protocols live beside those claims (``e2.MECHANISM_CLAIMS``,
``e3e4.MECHANISM_CLAIMS``); this module holds the rest, read from the records of ``scale.curvature.mechanism``
(rho, M on null(G)) and ``scale.geometry.mechanism`` (timescales, Proposition 5.2's tangent gain) that the E1 and
E5 units take.
"""

from __future__ import annotations

import math

from scale.curvature.mechanism import RHO_FLOOR
from scale.ledger.claims.base import LOG10, MECHANISM, NEGATIVE, PAPER_MD, POSITIVE, Alternative, Claim, Control
from scale.ledger.readers import e1_name, log10_of_value, mechanism_at, section, timescale
from scale.ledger.verdicts import Rule

RHO_RULE = Rule(">", math.log10(RHO_FLOOR))  # rho != 0: rho_rel above scale.curvature.mechanism's floor
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
          "gelu2 run): no claim read them",
          alternatives=(Alternative("the trainer's lr |g| / |w| at each epoch's last step", "log10 median of "
                                    "rel_update_head / rel_update_backbone",
                                    lambda res, s: timescale(res, _e1("gelu2", s=s)), POSITIVE),)),
    Claim("M.4", "E1", MECHANISM, "rho = grad_h L is non-zero at the collapsed start (Theorem 4.1's premise)",
          (PAPER_MD, 89, "smooth heads put negative curvature"), "assumed (Thm 4.1)",
          "log10 rho_rel at the collapsed start (sum_i |rho_i| |h_i| / |L|), gelu2, BN off, lr 0.05", LOG10,
          RHO_RULE, _rho("gelu2", "start"),
          controls=(Control("linear head", _rho("linear", "start")), Control("swish2", _rho("swish2", "start"))),
          transfer=E1_TRANSFER, known="not measured before; the start is new in this registration"),
    Claim("M.8", "E1", MECHANISM, "rho stays non-zero where the run ends (else Theorem 4.1's premise fails there)",
          (PAPER_MD, 89, "smooth heads put negative curvature"), "assumed (Thm 4.1)",
          "log10 rho_rel at the end of training, gelu2, BN off, lr 0.05, collapsed start", LOG10, RHO_RULE,
          _rho("gelu2", "end"),
          controls=(Control("linear head", _rho("linear", "end")), Control("gelu2 with BatchNorm", _rho("gelu2", "end",
                                                                                                       True)),
                    Control("final probe loss (-1: SimSiam's trivial minimum)", _mech("gelu2", "loss", "end"),
                            kind="cosine")),
          transfer=E1_TRANSFER, known="the v1 data: every head without BatchNorm ended at SimSiam's loss -1, where "
          "rho = 0 (a reviewer's recomputation; no v1 row measured it)"),
    Claim("M.9", "E1", MECHANISM, "smooth heads put negative curvature on null(G) through M (Theorem 4.1 (2))",
          (PAPER_MD, 89, "smooth heads put negative curvature in `null(G)`"), "strict saddle (Thm 4.1 (2))",
          "min over samples of lambda_min(M restricted to null(G_i)) / |H_eff|, gelu2, collapsed start", "ratio",
          NEGATIVE, _mech("gelu2", "lambda_min_M_null", "start"),
          controls=(Control("relu2 (M = 0)", _mech("relu2", "lambda_min_M_null", "start")),
                    Control("swish2", _mech("swish2", "lambda_min_M_null", "start"))),
          transfer=("scale-independent", "a property of the head's form at a collapsed state; a CIFAR run must show "
                    "the same sign"),
          known="theory_checks/test_thm4_1_collapse.py shows it on random smooth heads; never on a trained model",
          degenerate="no sample has a null space of G at this state"),
    Claim("M.10", "E5", MECHANISM, "a trained head is blind along augmentation tangents: v^T G v small on V_aug "
          "(Proposition 5.2)", (PAPER_MD, 91, "`v^T J^T J v = 0` on `V_aug`"), "0 (Prop 5.2)",
          "log10 of the median over test images of (v^T G v / |v|^2) / (tr G / d), G = J^T J of the trained head, "
          "v the rotation tangent of z, depth-1 E5 head", LOG10, NEGATIVE, _tangent(1),
          controls=(Control("untrained head of the same layers", _tangent(1, "tangent_untrained")),
                    Control("depth 3", _tangent(3))),
          transfer=("scale-independent", "a pointwise property of the head's Jacobian; a CIFAR run must show the "
                    "tangent's gain below random directions'"),
          known="orbit compression (E4.1) was the only proxy measured in v1"),
)
