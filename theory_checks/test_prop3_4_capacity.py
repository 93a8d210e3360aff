"""Proposition 3.4 (capacity bound) and Corollary 3.5 (the isotropy threshold).

Proposition 3.4 (docs/paper.md, paraphrase): ``|H_eff^phi - H_eff^*|_2 <= 2 L M eps + M eps^2``.
Made precise (``mini/capacity.py``): ``eps = |J_phi - J_*|_2``, ``L = |J_*|_2``, ``M = |grad^2_h L|_2``
(any symmetric loss Hessian, PSD or not, common to both heads; batch Jacobians block-diagonal):

    (3.4)   |G_phi - G_*|_2 <= 2 L M eps + M eps^2,                                  attained;
    (3.4')  |M_phi - M_*|_2 <= max_i |rho^phi_i| delta_i + |rho^phi_i - rho^*_i| C_i,  attained,

``delta_i = (sum_c |grad^2 h^phi_c(z_i) - grad^2 h^*_c(z_i)|_2^2)^{1/2}`` the head-curvature error,
``C_i`` the same norm of the ideal head's curvature. For two real heads whose loss Hessians differ,
``(L + eps)^2 |A_phi - A_*|_2`` is added, and ``|H_phi - H_*|_2`` is bounded by the sum.

Corollary 3.5 (paraphrase): isotropic conditioning needs ``eps < lam_min(H_*) / (2 L M)``. Made
precise through Weyl: if the bound ``b < lam_min(H_*)``, ``H_phi`` is positive definite with
``cond(H_phi) <= (lam_max(H_*) + b) / (lam_min(H_*) - b)``; for the Jacobian error alone that is
``eps < eps* = sqrt(L^2 + lam_min / M) - L``, which is smaller than the paraphrase's first-order
threshold. ``eps*`` is sharp.

Tolerances: ``BOUND_REL_TOL`` (round-off, relative to the scale of the matrices compared, e.g.
``M (L + eps)^2`` for ``G``); tightness ``TIGHT`` = within 1%: on the tight instances the gap is asserted
between ``TIGHT * bound`` and ``bound`` (plus round-off), so a bound that is too small fails too.
Negative controls: a tight instance breaks any bound 1% smaller; with loss Hessians that differ the
common-Hessian bound (3.4) fails; for a smooth head (3.4) alone does not bound ``H_eff``; past
``eps*`` (and between ``eps*`` and the paraphrase's ``lam_min / (2 L M)``) the tight instance loses
definiteness.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from conftest import bounded_floats, matrix_with_spectrum, seeds
from mini.capacity import (
    definiteness_loss_instance,
    effective_hessian_gap,
    exact_threshold,
    first_order_threshold,
    gauss_newton_gap,
    interaction_bound,
    interaction_gap,
    tight_gauss_newton_instance,
    tight_interaction_instance,
    weyl_condition_bound,
)
from mini.heads import init_head
from mini.losses import barlow, mse_targets, mse_views, nt_xent, vicreg

BOUND_REL_TOL = 1e-10  # round-off allowance, relative to the scale of the matrices compared
TIGHT = 0.99  # "attained within 1%": gap >= TIGHT * bound
WEYL_REL_TOL = 1e-9  # eigenvalue round-off allowance, relative to the spectral scale
MATERIAL_FACTOR = 2.0  # "exceeded": by at least this factor, far beyond round-off
sizes = st.integers(1, 6)  # d, k: every size from a scalar head up
tight_sizes = st.integers(2, 6)  # the tight Gauss-Newton instance needs a direction orthogonal to u and to v


@st.composite
def gauss_newton_instances(draw):
    """Batch ``n``, per-sample ``J_*``, ``E`` of any relative size, symmetric ``A`` (n, k, n, k) of chosen spectrum."""
    n, k, d = draw(st.integers(1, 4)), draw(sizes), draw(sizes)
    rng = np.random.default_rng(draw(seeds))
    scale_E = np.exp(draw(bounded_floats(np.log(1e-3), np.log(10.0))))
    lam = rng.uniform(0.1, 3.0, n * k) * np.where(rng.random(n * k) < draw(st.floats(0.0, 1.0)), -1.0, 1.0)
    A = matrix_with_spectrum(lam, rng).reshape(n, k, n, k)
    J_star = rng.standard_normal((n, k, d))
    return J_star, J_star + scale_E * rng.standard_normal((n, k, d)), A


@given(gauss_newton_instances())
@example((np.ones((1, 2, 2)), np.ones((1, 2, 2)), np.eye(2).reshape(1, 2, 1, 2)))  # eps = 0: gap 0
def test_gauss_newton_bound_random_instances(inst) -> None:
    """(3.4) over random batches, Jacobian errors from 1e-3 to 10x, PSD and indefinite ``A``."""
    g = gauss_newton_gap(*inst)
    assert g.gap <= g.bound + BOUND_REL_TOL * g.M * (g.L + g.eps) ** 2


@given(sign=st.sampled_from([1.0, -1.0]), d=tight_sizes, k=tight_sizes, seed=seeds,
       L=bounded_floats(0.1, 3.0), M=bounded_floats(0.1, 3.0), eps=bounded_floats(0.01, 3.0))
def test_gauss_newton_bound_is_attained(sign, d, k, seed, L, M, eps) -> None:
    """Sharpness of (3.4): ``A u = +-M u``, ``J_* = L u v^T + B``, ``E = eps u v^T`` attain it (within 1%);
    negative control: a bound 1% smaller is violated."""
    g = gauss_newton_gap(*tight_gauss_newton_instance(d, k, L, M, eps, np.random.default_rng(seed), sign))
    assert g.gap >= TIGHT * g.bound
    assert g.gap > 0.99 * (2 * g.L * g.M * g.eps + g.M * g.eps**2) * (1.0 + BOUND_REL_TOL)
    # ... and still below it: equality up to the rounding of G = J^T A J, whose scale is M (L + eps)^2.
    assert g.gap <= g.bound + BOUND_REL_TOL * g.M * (g.L + g.eps) ** 2
    assert abs(g.L - L) <= 1e-9 * L and abs(g.M - M) <= 1e-9 * M and abs(g.eps - eps) <= 1e-9 * eps


def test_negative_control_loss_hessians_that_differ_break_the_common_bound() -> None:
    """Control: with ``J_phi = J_*`` (``eps = 0``) but ``A_phi = 2 A_*`` the gap is ``|G_*| > 0 = (3.4)``;
    (3.4) needs the common loss Hessian (the ``(L + eps)^2 |A_phi - A_*|`` term covers the rest)."""
    rng = np.random.default_rng(0)
    J = rng.standard_normal((2, 3, 3))
    A = matrix_with_spectrum(rng.uniform(0.5, 2.0, 6), rng).reshape(2, 3, 2, 3)
    g_same = gauss_newton_gap(J, J, A)
    from mini.hessian import assemble

    z = np.zeros((2, 3, 3))
    gap = np.linalg.norm(assemble(J, 2 * A, z)[0] - assemble(J, A, z)[0], 2)
    assert g_same.bound == 0.0 and gap > 0.1


@given(n=st.integers(1, 4), k=sizes, d=sizes, seed=seeds, spread=bounded_floats(0.0, 2.0))
def test_interaction_bound_random_instances(n, k, d, seed, spread) -> None:
    """(3.4') over random residuals and head Hessians (symmetric (d, d) per output and sample)."""
    rng = np.random.default_rng(seed)

    def sym(*shape):
        X = rng.standard_normal((*shape, d, d))
        return X + np.swapaxes(X, -1, -2)

    T_star = sym(n, k)
    T_phi = T_star + spread * sym(n, k)
    rho_star = rng.standard_normal((n, k))
    rho_phi = rho_star + spread * rng.standard_normal((n, k))
    scale = max(float(np.abs(rho_phi).max()) * float(np.abs(T_phi).max()),
                float(np.abs(rho_star).max()) * float(np.abs(T_star).max())) * k * d
    assert interaction_gap(rho_phi, rho_star, T_phi, T_star) <= interaction_bound(
        rho_phi, rho_star, T_phi, T_star) + BOUND_REL_TOL * scale


@given(d=sizes, k=sizes, seed=seeds, r=bounded_floats(0.0, 2.0), dr=bounded_floats(0.0, 2.0),
       delta=bounded_floats(0.0, 2.0), C=bounded_floats(0.0, 2.0))
@example(d=2, k=2, seed=0, r=1e-150, dr=0.0, delta=1e-150, C=0.0)  # delta^2 underflows: the norm uses hypot
@example(d=2, k=2, seed=0, r=1e-217, dr=0.0, delta=1.0, C=0.0)  # |rho|^2 underflows: likewise
def test_interaction_bound_is_attained(d, k, seed, r, dr, delta, C) -> None:
    """Sharpness of (3.4'): aligned residuals and a rank-one curvature error attain it (within 1%), and the
    gap stays below the bound up to the rounding of ``M = sum_c rho_c T_c`` (scale ``|rho| (C + delta)``)."""
    inst = tight_interaction_instance(d, k, r, dr, delta, C, np.random.default_rng(seed))
    gap, bound = interaction_gap(*inst), interaction_bound(*inst)
    scale = r * (C + delta) + dr * C
    assert gap >= TIGHT * bound - BOUND_REL_TOL * scale
    assert gap <= bound + BOUND_REL_TOL * scale


OBJECTIVES = {
    "simclr": lambda rng: nt_xent(0.5),
    "vicreg": lambda rng: vicreg(),
    "barlow": lambda rng: barlow(),
    "mse": lambda rng: mse_targets(rng.standard_normal((6, 3))),
    "mse_views": lambda rng: mse_views(),
}


@pytest.mark.parametrize("spec", ["gelu2", "swish3", "tanh2"])
@pytest.mark.parametrize("name", sorted(OBJECTIVES))
def test_full_bound_on_real_heads_and_objectives(spec: str, name: str) -> None:
    """``|H_phi - H_*|_2 <= (3.4) + (L + eps)^2 |A_phi - A_*|_2 + (3.4')`` for a head and a perturbed copy
    on a real objective (closed-form ``H_eff`` of eq. (1)); for MSE to fixed targets ``A`` is common."""
    rng = np.random.default_rng(zlib.crc32(f"{spec}/{name}".encode()))
    head_star = init_head(spec, 3, 3, 4, rng)
    head_phi = head_star.with_layers([{key: w + 0.05 * rng.standard_normal(w.shape) for key, w in layer.items()}
                                      for layer in head_star.layers])
    Z = rng.standard_normal((6, 3))
    g = effective_hessian_gap(head_phi, head_star, OBJECTIVES[name](rng), Z)
    assert g.gap > 0
    assert g.gap <= g.bound * (1.0 + BOUND_REL_TOL)
    if name == "mse":
        assert g.loss_hessian_change <= 1e-12 * g.gauss_newton


def test_negative_control_gauss_newton_part_alone_does_not_bound_H_eff() -> None:
    """Control: for a smooth head on MSE (common ``A``), the Gauss-Newton bound (3.4) alone is exceeded by
    ``|H_phi - H_*|_2`` (here by ``MATERIAL_FACTOR``): the interaction extension (3.4') is needed."""
    rng = np.random.default_rng(1)
    head_star = init_head("swish3", 3, 3, 4, rng)
    head_phi = head_star.with_layers([{key: w + 0.05 * rng.standard_normal(w.shape) for key, w in layer.items()}
                                      for layer in head_star.layers])
    Z = rng.standard_normal((6, 3))
    g = effective_hessian_gap(head_phi, head_star, mse_targets(rng.standard_normal((6, 3))), Z)
    assert g.loss_hessian_change <= BOUND_REL_TOL * g.gauss_newton
    assert g.gap > MATERIAL_FACTOR * g.gauss_newton
    assert g.gap <= g.bound * (1.0 + BOUND_REL_TOL)


# --------------------------------------------------------------------------------------------
# Corollary 3.5
# --------------------------------------------------------------------------------------------


@given(k=st.integers(3, 5), seed=seeds, frac=bounded_floats(0.0, 0.99))
def test_corollary_below_threshold_definite_with_weyl_condition_bound(k, seed, frac) -> None:
    """Below ``eps*`` (any direction of ``E``): ``H_phi`` PD and ``cond(H_phi) <= (lam_max + b)/(lam_min - b)``."""
    rng = np.random.default_rng(seed)
    d = 3
    A = matrix_with_spectrum(rng.uniform(0.2, 2.0, k), rng)[None, :, None, :]
    J_star = rng.standard_normal((1, k, d))
    E = rng.standard_normal((1, k, d))
    g0 = gauss_newton_gap(J_star, J_star, A)
    from mini.hessian import assemble

    H_star = assemble(J_star, A, np.zeros((1, d, d)))[0]
    lam = np.linalg.eigvalsh(H_star)
    eps = frac * exact_threshold(g0.L, g0.M, lam[0])
    J_phi = J_star + eps * E / np.linalg.norm(E[0], 2)
    g = gauss_newton_gap(J_star, J_phi, A)
    H_phi = assemble(J_phi, A, np.zeros((1, d, d)))[0]
    mu = np.linalg.eigvalsh(H_phi)
    bound = weyl_condition_bound(H_star, g.bound)
    assert g.bound < lam[0] and bound is not None
    scale = max(lam[-1], mu[-1])  # eigenvalues are accurate to ~ machine epsilon x the spectral scale
    assert mu[0] >= lam[0] - g.bound - WEYL_REL_TOL * scale
    assert mu[0] > 0
    assert mu[-1] <= bound * mu[0] + WEYL_REL_TOL * scale * (1.0 + bound)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_corollary_threshold_is_sharp_and_negative_control_past_it(seed: int) -> None:
    """On the sharp instance ``lam_min(H_phi) = lam_min(H_*) - b``: PD at ``0.99 eps*``; negative
    control: definiteness lost at ``1.01 eps*``, and already between ``eps*`` and the paraphrase's
    first-order threshold ``lam_min / (2 L M)`` (which is therefore not sufficient)."""
    L, M, lam0 = 1.3, 2.0, 0.5
    e_star, e_first = exact_threshold(L, M, lam0), first_order_threshold(L, M, lam0)
    assert e_star < e_first
    for eps, definite in ((0.99 * e_star, True), (1.01 * e_star, False), (0.5 * (e_star + e_first), False)):
        H_star, H_phi, g = definiteness_loss_instance(3, 4, L, M, lam0, eps, np.random.default_rng(seed))
        lam_star, lam_phi = np.linalg.eigvalsh(H_star)[0], np.linalg.eigvalsh(H_phi)[0]
        scale = max(np.linalg.norm(H_star, 2), np.linalg.norm(H_phi, 2))
        assert abs(lam_star - lam0) <= WEYL_REL_TOL * scale
        assert abs(lam_phi - (lam0 - g.bound)) <= WEYL_REL_TOL * scale  # Weyl attained
        assert (lam_phi > 0) == definite, f"eps={eps:.4f}: lam_min(H_phi) = {lam_phi:.3e}"
        assert (weyl_condition_bound(H_star, g.bound) is not None) == definite
