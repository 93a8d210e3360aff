r"""The paper's theory, measured: the mechanism behind its claims, each a row with a rule of its own. The rows
read by E2's curvature records and E4's protocols live beside those claims (``e2.MECHANISM_CLAIMS``,
``e3e4.MECHANISM_CLAIMS``); this module holds the rest.
"""

from __future__ import annotations

from scale.ledger.claims.base import LOG10, MECHANISM, PAPER_MD, POSITIVE, Claim, Control
from scale.ledger.readers import e1_name, timescale


def _timescale(head: str, init: str = "collapsed"):
    return lambda res, s: timescale(res, e1_name(head, False, 0.05, init, s))


CLAIMS: tuple[Claim, ...] = (
    Claim("M.3", "E1", MECHANISM, "timescale separation: the head adapts faster than the backbone (a premise of "
          "Theorem 4.1 (2))", (PAPER_MD, 89, "smooth heads destabilise collapse"), "assumed (Thm 4.1 (2))",
          "log10 of the median over epochs of (relative update of the head / of the backbone), gelu2, BN off, "
          "lr 0.05, pseudo-collapsed start", LOG10, POSITIVE, _timescale("gelu2"),
          controls=(Control("swish2", _timescale("swish2")), Control("linear", _timescale("linear")),
                    Control("gelu2, normal start", _timescale("gelu2", "normal"))),
          transfer=("scale-dependent", "relative update sizes depend on widths and the optimiser; a CIFAR run must "
                    "show the head's relative update above the backbone's"),
          known="v1 recorded rel_update_head and rel_update_backbone per epoch (e.g. 5e-3 against 5e-7 in an E1 "
          "gelu2 run): no claim read them"),
)
