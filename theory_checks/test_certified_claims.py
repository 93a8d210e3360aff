"""Theorem 4.1's negative curvature and the ReLU gap's ``M = 0``, certified on the tour's collapsed states.

The headline sign and equality claims, as the tour shows them (``docs/tour/04_collapse.py``:
``toy_state(spec, "collapsed", "mse", seed=0)``), decided in ball arithmetic (``certified_claims``,
``certify``): for GELU, Swish and tanh heads ``lambda_min(H_eff) < 0`` by a Rayleigh quotient whose ball lies
below 0; for the ReLU and linear heads every pre-activation's ball off its kink and ``v^T M v`` a ball of 0
along every coordinate direction. The certificates are printed in ``docs/theory_checks.md``.

Negative control: the same Rayleigh certificate cannot be issued for a linear head (``H_eff = G`` is PSD), and
the interaction's forms of a smooth head are balls away from 0 (the vanishing certificate refuses them).
"""

from __future__ import annotations

import certify
import pytest
from certified_claims import GAP_CLAIMS, SMOOTH_CLAIMS, interaction_vanishes, negative_curvature


@pytest.mark.parametrize("spec", SMOOTH_CLAIMS)
def test_smooth_heads_have_certified_negative_curvature_at_collapse(spec: str) -> None:
    cert = negative_curvature(spec)
    print(cert)
    assert cert.claim.endswith("< 0")


@pytest.mark.parametrize("spec", GAP_CLAIMS)
def test_piecewise_linear_heads_have_certified_zero_interaction(spec: str) -> None:
    off, zero = interaction_vanishes(spec)
    print(off, zero, sep="\n")
    assert zero.bits >= certify.IDENTITY_BITS


def test_negative_control_the_certificates_refuse_false_claims() -> None:
    with pytest.raises(certify.Undecided):
        negative_curvature("linear")  # H_eff = G is PSD: no Rayleigh quotient lies below 0
    with pytest.raises(certify.Undecided, match="ball excludes 0"):
        interaction_vanishes("gelu2")  # a smooth head's interaction is not 0
