r"""E2 (curvature along SimSiam training, exact spectra of ``H_eff = G + M``): the paper's claims about
lambda_min and the variance-conditioning correlation, and the mechanism rows the same records measure.

Fractions are of the epoch-end measurements, epochs clustered within seeds: each seed gives ``(k, m)``, k of its m
epochs, read by the beta-binomial profile-likelihood interval (``scale.ledger.stats``, kind ``clustered``), with
the per-seed view beside it (the Wilson interval over the seeds' fractions). Correlations are Spearman's over
epochs 2.. (Fisher z over seeds); a seed whose covariance sits at the paper's 1e-7 clamp in every epoch has no
correlation (NaN: not measurable).

The premise "the network learned" is decided per statistic, the same way for all three runs: a negative
lambda_min under SimSiam is a property of the loss's indefinite Hessian at any state (M.2: in every epoch of
every run), so the fractions (E2.1-E2.3) need no learned network; a Spearman correlation over a trajectory is a
claim about training that moved the representation, so E2.4-E2.6 need their run to have learned
(``scale.runs.premise``), from the normal and from the collapsed start alike. The paper's E2 values come from one
run each (``Magnitude.runs``).
"""

from __future__ import annotations

from scale.ledger.claims.base import (
    CHECK,
    COLLAPSED_BY_DESIGN,
    MECHANISM,
    NO_UNTRAINED_TWIN,
    PAPER,
    PAPER_MD,
    POSITIVE,
    QUALITATIVE,
    Alternative,
    Claim,
    Control,
    Magnitude,
)
from scale.ledger.readers import clamp_fraction, largest, negative_count, negative_fraction, spearman_e2
from scale.ledger.verdicts import Rule

ABOUT_70 = Magnitude(0.70, (0.5, 0.9), "\"about 70 of 100 epochs\": 50 % to 90 %", f"{PAPER_MD}:130: in about 70",
                     runs=1)
AT_MOST_10 = Rule("<", 0.1)  # "at 0 after the first epoch": negative in under 10 % of the epochs
SOME = Rule(">", 0.0)  # negative lambda_min in some epochs: the sign of E2.2 / E2.3
RHO_BAND = 0.2  # a Spearman correlation within +-0.2 of the paper's is its magnitude
FRACTION_NEEDS_NO_LEARNING = ("a negative lambda_min under SimSiam is a property of the loss's indefinite Hessian "
                              "at any state (M.2): the fraction needs no learned network")
M_ZERO = 1e-9  # |M| / |H_eff| below this counts as M = 0 (float64 blocks; the theory check's floor is 1e-12)
E2_TRANSFER = ("scale-independent", "the signs of lambda_min(H_eff), G and M follow from the head's form and the "
               "loss; a CIFAR run must show the same fractions at the paper's sizes")
CORR_TRANSFER = ("scale-dependent", "the correlation lives on the training trajectory; a CIFAR run must show a "
                 "positive Spearman with the covariance off its clamp")
CORR_DEGENERATE = "every epoch at the 1e-7 clamp, a constant series, or a correlation of exactly +-1 (no Fisher z)"


def _run(init: str, head: str) -> str:
    return f"E2-{init}-{head}"


def _frac(run: str, key: str = "negative", first: int = 1):
    return lambda res, s: negative_fraction(res, f"{run}-s{s}", key, first)


def _count(run: str, key: str = "negative", first: int = 1):
    return lambda res, s: negative_count(res, f"{run}-s{s}", key, first)


def _rho(run: str, clamped: bool = True):
    return lambda res, s: spearman_e2(res, f"{run}-s{s}", clamped)


def _clamp(run: str):
    return lambda res, s: clamp_fraction(res, f"{run}-s{s}")


def _learning(init: str, head: str) -> dict:
    """The premise "the network learned" of a correlation over an E2 run's trajectory, whatever its start (module
    docstring)."""
    return {"learned": ((f"{_run(init, head)}-s{{s}}", "raw"),)}


def _lambda_min_fraction(init: str, head: str, first: int, rule: Rule, ident: str, claim: str, known: str,
                         magnitude: Magnitude | None) -> Claim:
    run = _run(init, head)
    return Claim(ident, "E2", PAPER, claim, (PAPER_MD, 130, "the Swish runs have a negative `lambda_min`") if
                 head == "swish2" else (PAPER_MD, 130, "keeps `lambda_min` at 0 after the first epoch"),
                 "about 70 of 100" if head == "swish2" else "0 after epoch 1",
                 f"fraction of epochs {first}.. with lambda_min(H_eff) < -1e-9 x scale, {init}/{head}, epochs "
                 "clustered within seeds", "fraction", rule, _count(run, first=first), kind="clustered",
                 controls=(Control("per seed (Wilson over the seeds' fractions)", _frac(run, first=first),
                                   kind="fraction"),
                           Control("the same for G alone", _count(run, "negative_G", first)),
                           Control("loss Hessian indefinite", _count(run, "loss_indefinite", first))),
                 transfer=E2_TRANSFER, known=known, no_twin=NO_UNTRAINED_TWIN,
                 magnitude=magnitude, no_magnitude="" if magnitude else "the rule is the paper's value (0 after "
                 "epoch 1)", not_learned=FRACTION_NEEDS_NO_LEARNING,
                 alternatives=(Alternative("the paper's estimator (20 + 20 power iterations, float32)",
                                           f"fraction of epochs {first}.. with the power iteration's lambda_min < 0",
                                           _count(run, "power_negative", first), rule, "clustered"),))


CLAIMS: tuple[Claim, ...] = (
    _lambda_min_fraction("collapsed", "relu2", 2, AT_MOST_10, "E2.1",
                         "collapsed ReLU head: lambda_min(H_eff) stays at 0 after the first epoch",
                         "v1: 1 in every seed (negative in every epoch, through G: the SimSiam loss Hessian is "
                         "indefinite), 'not reproduced'; v2 (10 seeds): 1 in every seed", None),
    _lambda_min_fraction("normal", "swish2", 1, SOME, "E2.2",
                         "normal Swish head: negative lambda_min(H_eff) in about 70 % of epochs",
                         "v1: 1 in every seed; v2: 500 of 500 epochs negative, the Wilson interval over seeds "
                         "[0.722, 1] inconclusive", ABOUT_70),
    _lambda_min_fraction("collapsed", "swish2", 1, SOME, "E2.3",
                         "collapsed Swish head: negative lambda_min(H_eff) in about 70 % of epochs",
                         "v1: 1 in every seed; v2: 500 of 500 epochs negative, inconclusive", ABOUT_70),
    *(Claim(f"E2.{4 + i}", "E2", PAPER,
            f"{init}/{head}: representation variance and condition number correlate positively",
            (PAPER_MD, 129, f"{paper_rho}"), f"rho_s {paper_rho}",
            f"Spearman(std of normalised z, covariance condition number with the 1e-7 clamp) over epochs 2.., "
            f"{init}/{head}", "rank correlation", POSITIVE, _rho(_run(init, head)), kind="correlation",
            controls=(Control("epochs at the clamp", _clamp(_run(init, head)), kind="fraction"),),
            transfer=CORR_TRANSFER, known=known, degenerate=CORR_DEGENERATE, no_twin=NO_UNTRAINED_TWIN,
            magnitude=Magnitude(paper_rho, (paper_rho - RHO_BAND, min(paper_rho + RHO_BAND, 1.0)),
                                f"the paper's rho_s +-{RHO_BAND:g}", f"{PAPER_MD}:129: {paper_rho}", runs=1),
            **_learning(init, head),
            alternatives=(Alternative("the unclamped condition number", "Spearman with lambda_max / lambda_min "
                                      "unclamped", _rho(_run(init, head), False), POSITIVE, "correlation"),))
      for i, (init, head, paper_rho, known) in enumerate((
          ("normal", "swish2", 0.339, "v1: -0.198 [-1.11, 0.717] (a t interval outside [-1, 1]), inconclusive; v2: "
           "-0.536 [-0.773, -0.168]"),
          ("collapsed", "swish2", 0.609, "v1: -0.113 [-0.582, 0.355], inconclusive; v2: -0.172 [-0.340, 0.007], the "
           "paper's 0.609 outside it"),
          ("collapsed", "relu2", 0.669, "v1: -0.141 [-0.307, 0.026], inconclusive; v2: -0.029 [-0.317, 0.264], the "
           "paper's 0.669 outside it")))),
)

CHECKS: tuple[Claim, ...] = (  # identities of the code: checks, not reproductions (outside every tally)
    Claim("M.1", "E2", CHECK, "a ReLU head has M = 0 (eq. (1): s'' = 0 off the kinks), an identity of the head's "
          "form", (PAPER_MD, 65, "a linear or ReLU head has `M = 0`"), "exact (eq. (1))",
          "largest |M| / |H_eff| over the epochs (median over probe samples), collapsed/relu2", "ratio",
          Rule("<", M_ZERO), lambda res, s: largest(res, f"{_run('collapsed', 'relu2')}-s{s}", "M_over_H"),
          kind="nonnegative",
          controls=(Control("swish2 (collapsed): M is not 0", lambda res, s: largest(
              res, f"{_run('collapsed', 'swish2')}-s{s}", "M_over_H")),),
          transfer=("scale-independent", "an identity of the head's form: M = 0 at any size"),
          known="v1, v2: M_over_H exactly 0 at every epoch of every collapsed/relu2 seed (s'' = 0 in the code)"),
)

MECHANISM_CLAIMS: tuple[Claim, ...] = (
    Claim("M.2", "E2", MECHANISM, "under SimSiam G is indefinite (the loss Hessian is): negative curvature without M",
          (PAPER_MD, 55, "not NT-Xent, not the SimSiam"), "qualitative (eq. (1) and its premise)",
          "fraction of epochs with lambda_min(G) < -1e-9 x scale, collapsed/relu2 (M = 0: H_eff = G), epochs "
          "clustered within seeds", "fraction", Rule(">", 0.5), _count(_run("collapsed", "relu2"), "negative_G", 1),
          kind="clustered",
          controls=(Control("loss Hessian indefinite", _count(_run("collapsed", "relu2"), "loss_indefinite", 1)),
                    Control("normal/swish2", _count(_run("normal", "swish2"), "negative_G", 1))),
          transfer=E2_TRANSFER, known="v1, v2: lambda_min(G) < 0 and the loss Hessian indefinite at every epoch of "
          "every E2 run; this explains E2.1-E2.3's fractions of 1",
          no_twin="a property of the loss (its Hessian in h), not of training", no_magnitude=QUALITATIVE,
          not_learned=COLLAPSED_BY_DESIGN),
)
