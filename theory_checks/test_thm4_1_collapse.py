"""Theorem 4.1 (generic instability of collapse), docs/paper.md Section 4.

Statement. Let ``z*`` be a collapsed state (all inputs map to one point: ``Z = 1_n z*^T``) with
``rho = grad_H L != 0``.
  1. Linear heads preserve collapse: ``M = 0`` and ``H_eff = G`` is PSD when ``grad^2_H L`` is PSD.
  2. Smooth nonlinear heads make ``z*`` generically a strict saddle: ``G(z*)`` has a null space and
     ``M(z*)`` brings negative eigenvalues there.

Exact hypotheses of these checks.
  - Objective: MSE to fixed stop-gradient targets, ``L = 1/(2n) sum_i |h_i - t_i|^2``, so
    ``grad^2_H L = I/n`` is PSD (the premise of part 1); targets are distinct random points, so
    ``rho = (h(z*) - t_i)/n != 0``.
  - Part 1 holds for linear heads and for ReLU heads off their kinks (every hidden pre-activation
    at distance at least ``KINK_MARGIN`` from 0), where ``s'' = 0`` so ``M = 0`` exactly.
  - Part 2 is checked as its lemma, exactly: for ``v`` in ``null(G)`` (numerical null space,
    eigenvalues within ``NULL_REL`` of the scale), ``v^T H_eff v = v^T M v``; hence
    ``lambda_min(H_eff) <= min_{v in null G} v^T M v``. We take ``k < d`` so that ``null(G)`` is
    non-trivial (at collapse every ``J_i = J(z*)`` and ``null(G) = (null J(z*))^n``).
  - "Generically" is reported as a measured fraction over a fixed, seeded set of random smooth
    heads (``GENERIC_SET``), asserted to be at least ``GENERIC_MIN_FRACTION``.

Negative controls: (1) the same linear heads under the SimSiam negative cosine (indefinite loss
Hessian: outside the premise) do have negative curvature, so part 1's check can fail and the
premise is necessary; (2) a direction outside ``null(G)`` breaks the lemma's identity.

Tolerances: ``NEG_FLOOR`` (from ``mini.hessian``) of the spectral scale for "negative";
``LEMMA_REL_TOL`` of the scale for the identity.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import SMOOTH_SPECS, seeds
from hypothesis import assume, given
from hypothesis import strategies as st

from mini.collapse import null_space, restricted_min, toy_state
from mini.heads import preactivations
from mini.hessian import NEG_FLOOR, decompose_closed_form, loss_derivatives, spectrum

KINK_MARGIN = 1e-6
NULL_REL = 1e-9
LEMMA_REL_TOL = 1e-10
MATERIAL_REL = 1e-3
GENERIC_SET = {"activations": ("gelu", "swish", "tanh", "softplus"), "depths": (2, 3), "heads_each": 25}
GENERIC_MIN_FRACTION = 0.9


def _collapsed(spec: str, seed: int, objective: str = "mse"):
    head, obj, Z = toy_state(spec, "collapsed", objective, seed)
    assert np.ptp(Z, axis=0).max() == 0.0  # all rows identical: a collapsed state
    return head, obj, Z, decompose_closed_form(head, obj, Z)


@given(spec=st.sampled_from(("linear", "relu2", "relu3")), seed=seeds)
def test_part1_linear_and_relu_heads_have_no_negative_curvature(spec: str, seed: int) -> None:
    head, obj, Z, dec = _collapsed(spec, seed)
    assume(all(np.abs(a).min() > KINK_MARGIN for a in preactivations(head, Z)))
    assert obj.hessian_psd is True and np.abs(dec.rho).max() > 0  # the premise, checked
    assert np.abs(dec.M).max() == 0.0  # s'' = 0: M vanishes identically
    sH = spectrum(dec.H, NEG_FLOOR)
    assert sH.n_negative == 0, f"{spec} seed={seed}: lambda_min={sH.lambda_min:.3e} below -{sH.floor:.3e}"


def test_part1_negative_control_premise_matters_simsiam_cosine() -> None:
    """Outside the premise (negative cosine: indefinite ``grad^2_H L``) linear heads are not safe."""
    hits = 0
    for seed in range(20):
        head, obj, Z, dec = _collapsed("linear", seed, objective="simsiam")
        _, HL = loss_derivatives(obj, head(Z))
        n_k = HL.shape[0] * HL.shape[1]
        assert spectrum(HL.reshape(n_k, n_k)).n_negative > 0  # premise violated on every instance
        hits += spectrum(dec.H).n_negative > 0
    print(f"SimSiam negative cosine, linear head at collapse: {hits}/20 instances with lambda_min(H_eff) < 0")
    assert hits > 0


@given(spec=st.sampled_from(SMOOTH_SPECS), seed=seeds)
def test_part2_lemma_on_null_space_of_G(spec: str, seed: int) -> None:
    _, _, _, dec = _collapsed(spec, seed)
    sH = spectrum(dec.H)
    basis = null_space(dec.G, NULL_REL)
    assert basis.shape[1] >= dec.n * (dec.d - 3)  # k = 3 < d: null(J(z*)) per sample at least
    rng = np.random.default_rng(seed)
    for v in (basis @ rng.standard_normal((basis.shape[1], 5))).T:
        assert abs(v @ dec.H @ v - v @ dec.M @ v) <= LEMMA_REL_TOL * sH.scale * (v @ v)
    # A negative eigenvalue of M on null(G) forces negative curvature of H_eff (Rayleigh).
    assert sH.lambda_min <= restricted_min(dec.M, basis) + LEMMA_REL_TOL * sH.scale


@pytest.mark.parametrize("spec", SMOOTH_SPECS)
def test_part2_negative_control_identity_fails_off_the_null_space(spec: str) -> None:
    _, _, _, dec = _collapsed(spec, seed=3)
    scale = spectrum(dec.H).scale
    V = np.linalg.eigh(dec.G)[1]
    v = V[:, -1]  # the top eigenvector of G: as far from null(G) as can be
    assert abs(v @ dec.H @ v - v @ dec.M @ v) > MATERIAL_REL * scale


def test_part2_generic_negative_curvature_fraction() -> None:
    """Over a fixed set of random smooth heads at collapse: the fraction that is a strict saddle."""
    hits = total = 0
    lines = []
    for act in GENERIC_SET["activations"]:
        for depth in GENERIC_SET["depths"]:
            h = 0
            for i in range(GENERIC_SET["heads_each"]):
                _, _, _, dec = _collapsed(f"{act}{depth}", seed=10_000 + i)
                sH = spectrum(dec.H)
                h += sH.n_negative > 0
            lines.append(f"{act}{depth}: {h}/{GENERIC_SET['heads_each']}")
            hits, total = hits + h, total + GENERIC_SET["heads_each"]
    report = f"strict saddles at collapse: {hits}/{total} ({', '.join(lines)})"
    print(report)
    assert hits / total >= GENERIC_MIN_FRACTION, report
