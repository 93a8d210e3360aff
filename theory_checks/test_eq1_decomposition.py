"""Equation (1): ``H_eff = J^T (grad^2_H L) J + sum_i [grad_H L]_i grad^2_z h_i = G + M``.

Statement checked (exact, for every head of the grammar up to depth 3 and every objective of
``mini.losses``): at any batch ``Z`` where the head and the objective are twice differentiable
(off ReLU kinks; random batches almost surely),

    (a) the exact Hessian of ``Z -> L(h(Z))`` equals ``G + M`` with ``G`` and ``M`` each computed
        by autograd on its own (``decompose_autograd``);
    (b) the closed-form path (per-sample ``J_i`` and ``M_i`` from the layer recursion in
        ``mini/hessian.py``, assembled with the loss Hessian) equals the autograd Hessian.

Tolerance: ``EQ1_REL_TOL`` of the matrix scale ``max |lambda(H_eff)|`` (entrywise maximum error). Where
``H_eff = 0`` exactly (a ReLU head dead on the whole batch, which the widened shapes reach) there is no
scale, and every part must be exactly 0 too. For NT-Xent the tolerance adds ``ROUNDOFF_REL`` of the size of
the terms its curvature is summed from (``instances.nt_xent_term_scale``): a batch whose every softmax row
sits on one entry has a loss Hessian that is the cancellation residue of terms up to 1e9 times larger, and
float64 carries it only to their round-off (exploration: tanh3, n = 4, d = 1, tau = 0.1, residue 4e-7,
routes 1.15e-10 of the scale apart). Nothing is discarded.
Negative control: dropping ``M`` breaks the equality for smooth heads whenever ``rho != 0`` — the
check is shown to fail by a margin ``MATERIAL_REL`` far above the tolerance.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from instances import (
    OBJECTIVE_NAMES,
    ROUNDOFF_REL,
    instance_shapes,
    make_instance,
    nt_xent_term_scale,
    objective_temperature,
    rho_is_material,
)

from conftest import ALL_SPECS, SMOOTH_SPECS, head_specs, seeds
from mini.hessian import decompose_autograd, decompose_closed_form, head_derivatives, spectrum

EQ1_REL_TOL = 1e-10  # float64 round-off of these small Hessians is ~1e-15 of scale
MATERIAL_REL = 1e-3  # "materially non-zero": a hundred million times the equality tolerance


def rel_err(A: np.ndarray, B: np.ndarray, scale: float) -> float:
    return float(np.abs(A - B).max()) / scale


def check_equation_1(spec: str, objective: str, seed: int, **shape: int) -> None:
    inst = make_instance(spec, objective, seed, **shape)
    tau = objective_temperature(inst.objective)
    ref = decompose_autograd(inst.head, inst.objective, inst.Z)
    closed = decompose_closed_form(inst.head, inst.objective, inst.Z)
    scale = spectrum(ref.H).scale
    if scale == 0:  # H_eff = 0 exactly (a ReLU head whose units are all off on the batch): so are G and M
        for name, A in (("G", ref.G), ("M", ref.M), ("closed H", closed.H), ("closed G", closed.G),
                        ("closed M", closed.M)):
            assert np.abs(A).max() == 0.0, f"H_eff = 0 but {name} is not at {inst}"
        return
    tol = EQ1_REL_TOL
    if tau is not None:  # the accuracy of NT-Xent's evaluation (instances.nt_xent_term_scale)
        J_norm = max(np.linalg.norm(np.asarray(J), 2) for J in np.asarray(head_derivatives(inst.head, inst.Z).J))
        tol += ROUNDOFF_REL * nt_xent_term_scale(inst.head(inst.Z), tau, J_norm) / scale
    assert rel_err(ref.H, ref.G + ref.M, scale) <= tol, f"(a) H != G + M at {inst}"
    assert rel_err(closed.H, ref.H, scale) <= tol, f"(b) closed form != autograd at {inst}"
    assert rel_err(closed.G, ref.G, scale) <= tol, f"(b) closed-form G != autograd G at {inst}"
    assert rel_err(closed.M, ref.M, scale) <= tol, f"(b) closed-form M != autograd M at {inst}"


@pytest.mark.parametrize("objective", OBJECTIVE_NAMES)
@pytest.mark.parametrize("spec", ALL_SPECS)
def test_decomposition_every_head_and_objective(spec: str, objective: str) -> None:
    """Every activation, depths 1-3, every objective: one seeded instance each."""
    check_equation_1(spec, objective, seed=zlib.crc32(f"{spec}/{objective}".encode()))


@pytest.mark.parametrize("objective", ("mse", "simsiam"))
@pytest.mark.parametrize("spec", ("linear", "gelu2"))
def test_decomposition_square_head(spec: str, objective: str) -> None:
    """The same identity with ``k = d``, where a transposed product (``J A J^T`` for ``J^T A J``)
    has the right shape and only the values can tell."""
    check_equation_1(spec, objective, seed=3, d=4, k=4)


@given(spec=head_specs(max_depth=4), objective=st.sampled_from(OBJECTIVE_NAMES), seed=seeds, data=st.data())
@example(spec="gelu3", objective="simclr", seed=0, data=None)
@example(spec="swish2", objective="vicreg", seed=1, data=None)
def test_decomposition_random_instances(spec: str, objective: str, seed: int, data) -> None:
    """The same identity over hypothesis-drawn heads (depth 1-4), objectives, shapes and batches."""
    shape = {} if data is None else data.draw(instance_shapes(objective), label="shape")
    check_equation_1(spec, objective, seed, **shape)


@pytest.mark.parametrize("objective", OBJECTIVE_NAMES)
@pytest.mark.parametrize("spec", SMOOTH_SPECS)
def test_negative_control_dropping_M_breaks_equation_1(spec: str, objective: str) -> None:
    """Control: with a smooth head and ``rho != 0``, ``H_eff != G`` by a material margin."""
    inst = make_instance(spec, objective, seed=7)
    ref = decompose_autograd(inst.head, inst.objective, inst.Z)
    scale = spectrum(ref.H).scale
    assert rho_is_material(ref.rho, inst.head(inst.Z)), f"control needs rho != 0 at {inst}"
    assert rel_err(ref.H, ref.G, scale) > MATERIAL_REL, f"M is not material at {inst}"
    assert rel_err(ref.H, ref.G, scale) > 1e6 * EQ1_REL_TOL
