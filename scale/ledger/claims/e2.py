r"""E2 (curvature along SimSiam training, exact spectra of ``H_eff = G + M``): the paper's claims about
lambda_min and the variance-conditioning correlation, and the mechanism rows the same records measure.

Fractions are of the epoch-end measurements of one run (one value per seed; ``scale.ledger.stats``' Wilson
interval over seeds). Correlations are Spearman's over epochs 2.. (Fisher z over seeds); a seed whose
covariance sits at the paper's 1e-7 clamp in every epoch has no correlation (NaN: not measurable).
"""

from __future__ import annotations

from scale.ledger.claims.base import MECHANISM, PAPER, PAPER_MD, POSITIVE, Alternative, Claim, Control
from scale.ledger.readers import clamp_fraction, largest, negative_fraction, spearman_e2
from scale.ledger.verdicts import Rule

ABOUT_70 = Rule("within", band=(0.5, 0.9))  # "about 70 of 100 epochs": 50 % to 90 %
AT_MOST_10 = Rule("<", 0.1)  # "at 0 after the first epoch": negative in under 10 % of the epochs
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


def _rho(run: str, clamped: bool = True):
    return lambda res, s: spearman_e2(res, f"{run}-s{s}", clamped)


def _clamp(run: str):
    return lambda res, s: clamp_fraction(res, f"{run}-s{s}")


def _lambda_min_fraction(init: str, head: str, first: int, rule: Rule, ident: str, claim: str, known: str) -> Claim:
    run = _run(init, head)
    return Claim(ident, "E2", PAPER, claim, (PAPER_MD, 130, "the Swish runs have a negative `lambda_min`") if
                 head == "swish2" else (PAPER_MD, 130, "keeps `lambda_min` at 0 after the first epoch"),
                 "about 70 of 100" if head == "swish2" else "0 after epoch 1",
                 f"fraction of epochs {first}.. with lambda_min(H_eff) < -1e-9 x scale, {init}/{head}", "fraction",
                 rule, _frac(run, first=first), kind="fraction",
                 controls=(Control("the same for G alone", _frac(run, "negative_G", first)),
                           Control("loss Hessian indefinite", _frac(run, "loss_indefinite", first))),
                 transfer=E2_TRANSFER, known=known,
                 alternatives=(Alternative("the paper's estimator (20 + 20 power iterations, float32)",
                                           f"fraction of epochs {first}.. with the power iteration's lambda_min < 0",
                                           _frac(run, "power_negative", first), rule, "fraction"),))


CLAIMS: tuple[Claim, ...] = (
    _lambda_min_fraction("collapsed", "relu2", 2, AT_MOST_10, "E2.1",
                         "collapsed ReLU head: lambda_min(H_eff) stays at 0 after the first epoch",
                         "v1: 1 in every seed (negative in every epoch, through G: the SimSiam loss Hessian is "
                         "indefinite), 'not reproduced'"),
    _lambda_min_fraction("normal", "swish2", 1, ABOUT_70, "E2.2",
                         "normal Swish head: negative lambda_min(H_eff) in about 70 % of epochs",
                         "v1: 1 in every seed, 'not reproduced'"),
    _lambda_min_fraction("collapsed", "swish2", 1, ABOUT_70, "E2.3",
                         "collapsed Swish head: negative lambda_min(H_eff) in about 70 % of epochs",
                         "v1: 1 in every seed, 'not reproduced'"),
    *(Claim(f"E2.{4 + i}", "E2", PAPER,
            f"{init}/{head}: representation variance and condition number correlate positively",
            (PAPER_MD, 129, f"{paper_rho}"), f"rho_s {paper_rho}",
            f"Spearman(std of normalised z, covariance condition number with the 1e-7 clamp) over epochs 2.., "
            f"{init}/{head}", "rank correlation", POSITIVE, _rho(_run(init, head)), kind="correlation",
            controls=(Control("epochs at the clamp", _clamp(_run(init, head)), kind="fraction"),),
            transfer=CORR_TRANSFER, known=known, degenerate=CORR_DEGENERATE,
            alternatives=(Alternative("the unclamped condition number", "Spearman with lambda_max / lambda_min "
                                      "unclamped", _rho(_run(init, head), False), POSITIVE, "correlation"),))
      for i, (init, head, paper_rho, known) in enumerate((
          ("normal", "swish2", 0.339, "v1: -0.198 [-1.11, 0.717] (a t interval outside [-1, 1]), inconclusive"),
          ("collapsed", "swish2", 0.609, "v1: -0.113 [-0.582, 0.355], inconclusive"),
          ("collapsed", "relu2", 0.669, "v1: -0.141 [-0.307, 0.026], inconclusive")))),
)

MECHANISM_CLAIMS: tuple[Claim, ...] = (
    Claim("M.1", "E2", MECHANISM, "a ReLU head has M = 0 (eq. (1): s'' = 0 off the kinks)",
          (PAPER_MD, 65, "a linear or ReLU head has `M = 0`"), "exact (eq. (1))",
          "largest |M| / |H_eff| over the epochs (median over probe samples), collapsed/relu2", "ratio",
          Rule("<", M_ZERO), lambda res, s: largest(res, f"{_run('collapsed', 'relu2')}-s{s}", "M_over_H"),
          kind="nonnegative",
          controls=(Control("swish2 (collapsed): M is not 0", lambda res, s: largest(
              res, f"{_run('collapsed', 'swish2')}-s{s}", "M_over_H")),),
          transfer=("scale-independent", "an identity of the head's form: M = 0 at any size"),
          known="v1: M_over_H exactly 0 at every epoch of every collapsed/relu2 seed"),
    Claim("M.2", "E2", MECHANISM, "under SimSiam G is indefinite (the loss Hessian is): negative curvature without M",
          (PAPER_MD, 55, "not NT-Xent, not the SimSiam"), "qualitative (eq. (1) and its premise)",
          "fraction of epochs with lambda_min(G) < -1e-9 x scale, collapsed/relu2 (M = 0: H_eff = G)", "fraction",
          Rule(">", 0.5), _frac(_run("collapsed", "relu2"), "negative_G", 1), kind="fraction",
          controls=(Control("loss Hessian indefinite", _frac(_run("collapsed", "relu2"), "loss_indefinite", 1)),
                    Control("normal/swish2", _frac(_run("normal", "swish2"), "negative_G", 1))),
          transfer=E2_TRANSFER, known="v1: lambda_min(G) < 0 and the loss Hessian indefinite at every epoch of "
          "every E2 run; this explains E2.1-E2.3's fractions of 1"),
)
