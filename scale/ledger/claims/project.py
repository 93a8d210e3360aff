r"""The project's own questions: not claims of the paper, outside its tally. Theorems 3.1 / 3.2 say a whitening
head *exists* and Proposition 3.3 that a linear one cannot whiten everywhere; whether a *trained* head whitens
is this project's question (Section 3's conditioning on E1's runs). The class probe (does the backbone serve
the downstream task better than the head) is the guillotine's premise, not a measured claim of the paper.
"""

from __future__ import annotations

from scale.experiments.catalog import E1_HEADS
from scale.ledger.claims.base import LOG10, NEGATIVE, PAPER_MD, PROJECT, Claim, Control, Twin
from scale.ledger.readers import conditioning, e1_name, gap

COND_TRANSFER = ("scale-dependent", "conditioning after training depends on the trajectory; a CIFAR run must "
                 "show the same sign per head")


def _cond(head: str, init: str = "normal", at: str = "end"):
    return lambda res, s: conditioning(res, e1_name(head, False, 0.05, init, s), at)


V1 = {"linear": "0.704 [0.568, 0.84]", "relu2": "-0.523 [-0.799, -0.246]", "gelu2": "-0.448 [-0.725, -0.171]",
      "swish2": "-0.214 [-0.568, 0.14]"}

CLAIMS: tuple[Claim, ...] = (
    *(Claim(f"S3.{i + 1}", "S3", PROJECT,
            f"a trained {head} head whitens: H_eff in z better conditioned than the loss Hessian in h",
            (PAPER_MD, 83 if head != "linear" else 84, "Theorem 3.1" if head != "linear" else "Proposition 3.3"),
            "qualitative (a head exists: Thm 3.1, 3.2; linear fails: Prop 3.3)",
            "median over probe samples of log10 kappa(H_i) - log10 kappa(L_i) at the end of training, "
            f"{head}, BN off, lr 0.05, normal start", LOG10, NEGATIVE, _cond(head),
            controls=(Control("before training", _cond(head, at="start")),
                      Control("pseudo-collapsed start", _cond(head, "collapsed"))),
            twin=Twin("after training minus before (the same head at initialisation)", lambda res, s, h=head:
                      _cond(h)(res, s) - _cond(h, at="start")(res, s), NEGATIVE),
            learned=((f"E1-{head}-bn0-lr0.05-normal-s{{s}}", "raw"),),
            transfer=COND_TRANSFER, known=f"v1: {V1[head]}")
      for i, head in enumerate(E1_HEADS)),
    Claim("E3.3", "E3", PROJECT, "the backbone serves the downstream task better than the head (the guillotine)",
          (PAPER_MD, 17, "throws the head away"), "not reported (the paper's premise)",
          "class probe (logistic regression): accuracy on h minus on z (protocol b)", "points", NEGATIVE,
          lambda res, s: gap(res, f"E3E4-s{s}", "b_raw", "class"),
          controls=(Control("untrained head, protocol a (d)",
                            lambda res, s: gap(res, f"E3E4-s{s}", "d_untrained_nobias", "class")),),
          twin=Twin("trained minus its untrained twin, protocol b (g)", lambda res, s: gap(res, f"E3E4-s{s}", "b_raw",
                    "class") - gap(res, f"E3E4-s{s}", "g_untrained_raw_renorm", "class"), NEGATIVE),
          learned=(("E3E4-s{s}", "raw"),),
          transfer=("scale-dependent", "the class gap depends on data and width"),
          known="v1: -1.96 [-3.8, -0.111], 'reproduced', fragile (dropping any one seed made it inconclusive)"),
)
