"""The ReLU gap (docs/paper.md, Section 4): ``grad^2 ReLU = 0`` almost everywhere, so ``M = 0``.

Statement checked: for a linear head, and for a ReLU head at any batch off the kinks (every hidden
pre-activation farther from 0 than the ``off_kink`` premise's threshold), the interaction term vanishes for
*every* residual ``rho``, at every depth (1-4) and shape drawn (``d``, ``k``, ``n``, widths from 1):

    M = sum_{i,c} rho_{i,c} grad^2_z h_c(z_i) = 0,   so   H_eff = G.

Checked on every route that computes ``M``, so that a non-zero ReLU ``s''`` in any of them fails:
(1) autograd's exact Hessians at objectives' own residuals, ``|M|_2 / |H_eff|_2 <= GAP_REL_TOL``;
(2) for an arbitrary ``rho``, autograd's Hessian of ``z -> <rho, h(z)>`` is zero relative to
``|rho| |J|`` (the size it would have if curved); (3) the closed form
(``mini.hessian.decompose_closed_form`` and its ``interaction_blocks`` for an arbitrary ``rho``);
(4) scale's torch path in float64 (``scale.curvature.blocks.effective_hessian_blocks`` on a torch
``MLPHead``, both its closed-form route on torch tensors and its ``torch.func`` autodiff route;
skipped when torch is absent).

Premises of the drawn instances (``premises``: counted, each within its discard budget, each pinned by a
boundary instance just inside its domain): ``off_kink`` (the theorem's "almost everywhere"); ``rho_material``
at the objective's residual (a SimSiam or BYOL predictor whose ReLU units are all off passes no gradient:
``rho = 0`` and ``M = 0`` for every head, which would test nothing). A head dead on the whole batch is not
set aside: there ``h`` is constant, and ``M``, ``G`` and ``H_eff`` must all be exactly 0 (``ALL_ZERO``).

Negative control: for smooth heads (GELU, Swish, tanh, softplus) on fixed seeded instances with
``rho != 0``, ``|M|_2 / |H_eff|_2 > MATERIAL_REL`` on each route: the same measurement does detect
curvature.
"""

from __future__ import annotations

import numpy as np
import pytest
from autograd import hessian
from hypothesis import example, given
from hypothesis import strategies as st
from instances import OBJECTIVE_NAMES, instance_shapes, make_instance, rho_is_material, rho_materiality
from premises import threshold

from conftest import SMOOTH_SPECS, boundary, head_specs, kink_distance, premise, seeds
from mini.heads import init_head, preactivations
from mini.hessian import (
    decompose_autograd,
    decompose_closed_form,
    head_derivatives,
    head_jacobian_autograd,
    interaction_blocks,
    relative_norm,
)

GAP_REL_TOL = 1e-12
MATERIAL_REL = 1e-3
PIECEWISE_LINEAR = ("linear", "relu2", "relu3")
PIECEWISE_LINEAR_SPECS = head_specs(piecewise_linear=True, max_depth=4)  # linear, relu2 ... relu4


def alive(head, Z) -> bool:
    """Some unit of every hidden layer is on for some sample: else ``h`` is constant on the batch."""
    return all(np.any(a > 0) for a in preactivations(head, Z))


def check_vanishing(dec, inst, route: str) -> None:
    """``M = 0`` relative to ``H_eff``; on a head dead on the batch, everything exactly 0."""
    if not alive(inst.head, inst.Z):  # h constant: H_eff = G = M = 0, no relative scale needed
        assert max(np.abs(np.asarray(x)).max() for x in (dec.M, dec.G, dec.H)) == 0.0, f"{route}: dead head at {inst}"
        return
    premise("rho_material", rho_materiality(dec.rho, inst.head(inst.Z)), f"rho at {inst}")
    assert relative_norm(dec.M, dec.H) <= GAP_REL_TOL, f"{route} M != 0 for a piecewise-linear head at {inst}"


@given(spec=PIECEWISE_LINEAR_SPECS, objective=st.sampled_from(OBJECTIVE_NAMES), seed=seeds, data=st.data())
@example(spec="relu3", objective="simsiam", seed=0, data=None)
def test_interaction_vanishes_at_objective_residuals(spec: str, objective: str, seed: int, data) -> None:
    shape = {} if data is None else data.draw(instance_shapes(objective), label="shape")
    inst = make_instance(spec, objective, seed, **shape)
    premise("off_kink", kink_distance(inst.head, inst.Z), f"kinks at {inst}")
    check_vanishing(decompose_autograd(inst.head, inst.objective, inst.Z), inst, "autograd")


@given(spec=PIECEWISE_LINEAR_SPECS, seed=seeds, rho_scale=st.floats(1e-3, 1e3),
       shape=st.tuples(st.integers(1, 6), st.integers(1, 5), st.integers(1, 6), st.integers(1, 8)))
@example(spec="relu2", seed=0, rho_scale=1.0, shape=(4, 3, 5, 6))
def test_interaction_vanishes_for_any_residual(spec: str, seed: int, rho_scale: float, shape) -> None:
    rng = np.random.default_rng(seed)
    d, k, n, width = shape
    head = init_head(spec, d, k, width, rng)
    Z = rng.standard_normal((n, d))
    premise("off_kink", kink_distance(head, Z), f"kinks at {spec}, seed {seed}")
    rho = rho_scale * rng.standard_normal((n, k))
    M = hessian(lambda z: np.sum(rho * head(z.reshape(n, d))))(Z.ravel())
    J_scale = max(np.linalg.norm(head_jacobian_autograd(head, z), 2) for z in Z)
    assert np.abs(M).max() <= GAP_REL_TOL * np.abs(rho).max() * J_scale


@pytest.mark.parametrize("objective", OBJECTIVE_NAMES)
@pytest.mark.parametrize("spec", SMOOTH_SPECS)
def test_negative_control_smooth_heads_have_material_interaction(spec: str, objective: str) -> None:
    inst = make_instance(spec, objective, seed=11)
    dec = decompose_autograd(inst.head, inst.objective, inst.Z)
    assert rho_is_material(dec.rho, inst.head(inst.Z))
    assert relative_norm(dec.M, dec.H) > MATERIAL_REL, f"smooth head without material M at {inst}"


@given(spec=PIECEWISE_LINEAR_SPECS, objective=st.sampled_from(OBJECTIVE_NAMES), seed=seeds, data=st.data())
@example(spec="relu2", objective="mse", seed=0, data=None)
def test_closed_form_interaction_vanishes(spec: str, objective: str, seed: int, data) -> None:
    """Route (3): the closed form at the objective's residual and at an arbitrary residual."""
    shape = {} if data is None else data.draw(instance_shapes(objective), label="shape")
    inst = make_instance(spec, objective, seed, **shape)
    premise("off_kink", kink_distance(inst.head, inst.Z), f"kinks at {inst}")
    dec = decompose_closed_form(inst.head, inst.objective, inst.Z)
    check_vanishing(dec, inst, "closed-form")
    rho = np.random.default_rng(seed).standard_normal(dec.rho.shape)
    der = head_derivatives(inst.head, inst.Z)
    J_scale = float(np.abs(np.asarray(der.J)).max())
    assert np.abs(interaction_blocks(der, rho)).max() <= GAP_REL_TOL * np.abs(rho).max() * max(J_scale, 1.0)


def _torch_blocks(spec: str, seed: int, method: str):
    """Route (4): scale's exact float64 blocks on a torch head under MSE to random targets."""
    torch = pytest.importorskip("torch")
    from scale.curvature.blocks import effective_hessian_blocks
    from scale.engine.heads import MLPHead

    torch.manual_seed(seed)
    head = MLPHead(spec, 4, 3, 6).double()
    z = torch.randn(5, 4, dtype=torch.float64)
    with torch.no_grad():
        pre = head.preactivations(z)
        T = head(z) + torch.randn(5, 3, dtype=torch.float64)
    if any(float(a.abs().min()) <= threshold("off_kink") for a in pre):
        return None
    blocks = effective_hessian_blocks(z, head, lambda Hb: 0.5 * ((Hb - T) ** 2).sum() / Hb.shape[0], method=method)
    return float(blocks.M.abs().max()), float(blocks.H.abs().max())


@pytest.mark.parametrize("method", ("closed_form", "autodiff"))
@pytest.mark.parametrize("spec", PIECEWISE_LINEAR)
def test_scale_torch_path_interaction_vanishes(spec: str, method: str) -> None:
    checked = 0
    for seed in range(4):
        out = _torch_blocks(spec, seed, method)
        if out is None:
            continue
        M_max, H_max = out
        assert M_max <= GAP_REL_TOL * H_max, f"scale ({method}) M != 0 for {spec}, seed {seed}: {M_max:.2e}"
        checked += 1
    assert checked > 0, "every draw hit a kink: the check is empty"


@pytest.mark.parametrize("spec", (*PIECEWISE_LINEAR, "gelu2", "swish3", "tanh2", "softplus2"))
def test_scale_torch_head_is_minis_head(spec: str) -> None:
    """Route (4) measures the same function: a torch ``MLPHead`` holding a mini head's weights
    computes that head's ``h(Z)`` to float64 round-off (one activation table for both)."""
    torch = pytest.importorskip("torch")
    from scale.engine.heads import head_from_mini

    inst = make_instance(spec, "mse", seed=5)
    h_mini = np.asarray(inst.head(inst.Z))
    with torch.no_grad():
        h_torch = head_from_mini(inst.head)(torch.as_tensor(np.asarray(inst.Z))).numpy()
    assert np.abs(h_torch - h_mini).max() <= GAP_REL_TOL * max(np.abs(h_mini).max(), 1.0), spec


@pytest.mark.parametrize("method", ("closed_form", "autodiff"))
@pytest.mark.parametrize("spec", ("gelu2", "swish3", "tanh2", "softplus2"))
def test_negative_control_scale_torch_path_sees_smooth_curvature(spec: str, method: str) -> None:
    M_max, H_max = _torch_blocks(spec, 0, method)
    assert M_max > MATERIAL_REL * H_max


@pytest.mark.parametrize("spec", ("gelu2", "swish3", "tanh2", "softplus2"))
def test_negative_control_closed_form_sees_smooth_curvature(spec: str) -> None:
    inst = make_instance(spec, "mse", seed=11)
    dec = decompose_closed_form(inst.head, inst.objective, inst.Z)
    assert relative_norm(dec.M, dec.H) > MATERIAL_REL


BOUNDARY_SEED = 3  # a relu2 instance whose premises are moved to their boundaries below


def test_off_kink_boundary_instance() -> None:
    """The ``off_kink`` premise's boundary: the unit nearest its kink moved to ``|a| = 5e-6`` (within ten times
    the threshold); ``M = 0`` must be asserted and hold there on both routes (a premise widened 10x sets this
    instance aside: a failure)."""
    inst = make_instance("relu2", "mse", BOUNDARY_SEED)
    a = np.asarray(preactivations(inst.head, inst.Z)[0])  # (n, width)
    i, j = np.unravel_index(np.argmin(np.abs(a)), a.shape)
    layer = inst.head.layers[0]
    b = layer["b"] - (a[i, j] - np.sign(a[i, j]) * 5e-6) * np.eye(layer["b"].size)[j]
    head = inst.head.with_layers([{**layer, "b": b}, *inst.head.layers[1:]])
    moved = type(inst)(head, inst.objective, inst.Z, inst.seed)
    boundary("off_kink", kink_distance(head, inst.Z), "ReLU gap, unit moved to its kink")
    for decompose, route in ((decompose_autograd, "autograd"), (decompose_closed_form, "closed-form")):
        premise("off_kink", kink_distance(head, inst.Z), "boundary instance")
        check_vanishing(decompose(head, moved.objective, moved.Z), moved, route)


def test_rho_material_boundary_instance() -> None:
    """The ``rho_material`` premise's boundary: MSE targets at ``h`` except one entry, so that ``max |rho| =
    5e-6 max |h|``; ``M = 0`` must be asserted and hold (a premise widened 10x sets it aside: a failure)."""
    from mini.losses import make_objective

    inst = make_instance("relu2", "mse", BOUNDARY_SEED)
    Hb = np.asarray(inst.head(inst.Z))
    n = Hb.shape[0]
    T = Hb - n * 5e-6 * np.abs(Hb).max() * np.eye(*Hb.shape)
    moved = type(inst)(inst.head, make_objective("mse", Hb, targets=T), inst.Z, inst.seed)
    dec = decompose_autograd(moved.head, moved.objective, moved.Z)
    boundary("rho_material", rho_materiality(dec.rho, Hb), "ReLU gap, targets at h")
    check_vanishing(dec, moved, "autograd")
