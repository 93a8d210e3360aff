"""The ReLU gap (docs/paper.md, Section 4): ``grad^2 ReLU = 0`` almost everywhere, so ``M = 0``.

Statement checked: for a linear head, and for a ReLU head at any batch off the kinks (every hidden
pre-activation at distance at least ``KINK_MARGIN`` from 0), the interaction term vanishes for
*every* residual ``rho``:

    M = sum_{i,c} rho_{i,c} grad^2_z h_c(z_i) = 0,   so   H_eff = G.

Checked two ways, with autograd's exact Hessians: (1) at objectives' own residuals,
``|M|_2 / |H_eff|_2 <= GAP_REL_TOL``; (2) for an arbitrary ``rho``, the Hessian of
``z -> <rho, h(z)>`` is zero relative to ``|rho| |J|`` (the size it would have if curved).

Negative control: for smooth heads (GELU, Swish, tanh, softplus) on fixed seeded instances with
``rho != 0``, ``|M|_2 / |H_eff|_2 > MATERIAL_REL``: the same measurement does detect curvature.
"""

from __future__ import annotations

import numpy as np
import pytest
from autograd import hessian
from conftest import SMOOTH_SPECS, seeds
from hypothesis import assume, example, given
from hypothesis import strategies as st
from instances import OBJECTIVE_NAMES, make_instance

from mini.heads import init_head, preactivations
from mini.hessian import decompose_autograd, head_jacobian_autograd, relative_norm

GAP_REL_TOL = 1e-12
KINK_MARGIN = 1e-6  # distance of every ReLU pre-activation from its kink
MATERIAL_REL = 1e-3
PIECEWISE_LINEAR = ("linear", "relu2", "relu3")


def off_kinks(head, Z) -> bool:
    return all(np.abs(a).min() > KINK_MARGIN for a in preactivations(head, Z))


@given(spec=st.sampled_from(PIECEWISE_LINEAR), objective=st.sampled_from(OBJECTIVE_NAMES), seed=seeds)
@example(spec="relu3", objective="simsiam", seed=0)
def test_interaction_vanishes_at_objective_residuals(spec: str, objective: str, seed: int) -> None:
    inst = make_instance(spec, objective, seed)
    assume(off_kinks(inst.head, inst.Z))
    dec = decompose_autograd(inst.head, inst.objective, inst.Z)
    assert np.abs(dec.rho).max() > 0, f"rho = 0 makes the check empty at {inst}"
    assert relative_norm(dec.M, dec.H) <= GAP_REL_TOL, f"M != 0 for a piecewise-linear head at {inst}"


@given(spec=st.sampled_from(PIECEWISE_LINEAR), seed=seeds, rho_scale=st.floats(1e-3, 1e3))
def test_interaction_vanishes_for_any_residual(spec: str, seed: int, rho_scale: float) -> None:
    rng = np.random.default_rng(seed)
    d, k, n = 4, 3, 5
    head = init_head(spec, d, k, 6, rng)
    Z = rng.standard_normal((n, d))
    assume(off_kinks(head, Z))
    rho = rho_scale * rng.standard_normal((n, k))
    M = hessian(lambda z: np.sum(rho * head(z.reshape(n, d))))(Z.ravel())
    J_scale = max(np.linalg.norm(head_jacobian_autograd(head, z), 2) for z in Z)
    assert np.abs(M).max() <= GAP_REL_TOL * np.abs(rho).max() * J_scale


@pytest.mark.parametrize("objective", OBJECTIVE_NAMES)
@pytest.mark.parametrize("spec", SMOOTH_SPECS)
def test_negative_control_smooth_heads_have_material_interaction(spec: str, objective: str) -> None:
    inst = make_instance(spec, objective, seed=11)
    dec = decompose_autograd(inst.head, inst.objective, inst.Z)
    assert np.abs(dec.rho).max() > 0
    assert relative_norm(dec.M, dec.H) > MATERIAL_REL, f"smooth head without material M at {inst}"
