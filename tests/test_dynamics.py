"""Software tests of ``mini.dynamics`` and ``mini.batchnorm``: fast paths against autograd, a small
slice of the report grid (finite, consistent numbers), the command line and its error paths."""

from __future__ import annotations

from dataclasses import replace

import autograd.numpy as anp
import numpy as np
import pytest
from autograd import grad

from mini import dynamics as dyn
from mini.batchnorm import BN_EPS, batchnorm
from mini.heads import forward

GRAD_REL_TOL = 1e-10  # hand-written backward vs autograd, relative to the largest entry
HESS_REL_TOL = 1e-9  # complex step vs autograd Hessian, relative to |H|_max
SLICE_CFG = replace(dyn.Config(), horizon=2.0, n_checkpoints=3)
ARCHS = [dyn.Arch(h, bn) for h in ("linear", "relu2", "gelu2", "swish3") for bn in (False, True)]


def setup(arch: dyn.Arch, init: str = "normal", seed: int = 3):
    rng = np.random.default_rng(seed)
    cfg = dyn.Config()
    X = dyn.make_views(cfg, rng)
    return dyn.init_params(arch, cfg, init, rng), X


# --------------------------------------------------------------------------------------------
# BatchNorm
# --------------------------------------------------------------------------------------------


def test_batchnorm_normalises_each_group() -> None:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((8, 3)) * [1.0, 5.0, 0.1] + 2.0
    out = batchnorm(a, groups=2)
    for rows in (slice(0, 4), slice(4, 8)):
        np.testing.assert_allclose(out[rows].mean(axis=0), 0.0, atol=1e-12)
        var = a[rows].var(axis=0)  # biased, as batchnorm uses
        np.testing.assert_allclose(out[rows].var(axis=0), var / (var + BN_EPS), rtol=1e-12)
    gamma, beta = np.array([2.0, 1.0, 3.0]), np.array([0.5, 0.0, -1.0])
    np.testing.assert_allclose(batchnorm(a, gamma, beta, 2), out * gamma + beta)


def test_batchnorm_is_differentiable_and_rejects_bad_input() -> None:
    rng = np.random.default_rng(1)
    a = rng.standard_normal((6, 2))
    g = grad(lambda x: anp.sum(batchnorm(x, groups=2) ** 3))(a)
    assert np.all(np.isfinite(g))
    with pytest.raises(ValueError, match="groups"):
        batchnorm(a, groups=4)
    with pytest.raises(ValueError, match="2-D"):
        batchnorm(a[0])
    with pytest.raises(ValueError, match="at least 2 rows"):
        batchnorm(a, groups=6)


# --------------------------------------------------------------------------------------------
# Fast paths against autograd
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("arch", ARCHS, ids=lambda a: a.label)
def test_hand_gradient_matches_autograd(arch: dyn.Arch) -> None:
    params, X = setup(arch)
    lay = dyn.layout(params)
    w = dyn.pack(params, lay)
    T = dyn.swap_views(np.asarray(dyn.projector(arch, params, dyn.backbone(params, X)))) + 0.1
    reference = grad(lambda v: dyn.simsiam_mse(arch, dyn.unpack(v, lay), X, T))(w)
    fast = dyn.pack(dyn.simsiam_gradient(arch, params, X, T), lay)
    assert np.abs(fast - reference).max() <= GRAD_REL_TOL * np.abs(reference).max()


@pytest.mark.parametrize("init", ["normal", "collapsed"])
@pytest.mark.parametrize("head", ["linear", "relu2", "gelu2"])
def test_complex_step_curvature_matches_autograd(head: str, init: str) -> None:
    arch = dyn.Arch(head, bn=True)
    params, X = setup(arch, init)
    Z = np.asarray(dyn.backbone(params, X))
    fast = dyn.effective_curvature(arch, params, Z)
    exact = dyn.effective_curvature(arch, params, Z, exact_autograd=True)
    scale = max(abs(exact.lambda_min), abs(exact.lambda_max))
    assert abs(fast.lambda_min - exact.lambda_min) <= HESS_REL_TOL * scale
    assert abs(fast.lambda_max - exact.lambda_max) <= HESS_REL_TOL * scale
    assert fast.n_negative == exact.n_negative
    assert fast.m_ratio == pytest.approx(exact.m_ratio, rel=1e-6)


@pytest.mark.parametrize("head", ["linear", "relu2", "swish3"])
def test_composite_head_is_predictor_after_projector(head: str) -> None:
    arch = dyn.Arch(head)
    params, X = setup(arch)
    Z = np.asarray(dyn.backbone(params, X))
    composite = dyn.composite_head(arch, params)
    expected = dyn.predictor(arch, params, dyn.projector(arch, params, Z))
    np.testing.assert_allclose(forward(composite.spec, composite.layers, Z), expected, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="BatchNorm"):
        dyn.composite_head(dyn.Arch(head, bn=True), params)


def test_pseudo_and_collapsed_initialisations() -> None:
    arch = dyn.Arch("gelu2")
    normal, X = setup(arch, "normal", seed=5)
    pseudo, _ = setup(arch, "pseudo", seed=5)
    collapsed, _ = setup(arch, "collapsed", seed=5)
    for a, b in zip(normal["proj"], pseudo["proj"]):
        np.testing.assert_allclose(b["W"], dyn.PSEUDO_SCALE * a["W"])
    Z = np.asarray(dyn.backbone(collapsed, X))
    assert np.ptp(Z, axis=0).max() < 1e-4 * np.abs(Z).max()  # every input maps (nearly) to one point
    with pytest.raises(ValueError, match="valid choices"):
        dyn.init_params(arch, dyn.Config(), "random", np.random.default_rng(0))


# --------------------------------------------------------------------------------------------
# A slice of the grid
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def grid_slice() -> list[dyn.Cell]:
    return dyn.run_grid(heads=("linear", "gelu2"), inits=("normal", "collapsed"), dynamics=("flow", "small"),
                        bns=(False, True), seeds=(0,), cfg=SLICE_CFG)


def test_slice_numbers_are_finite_and_in_range(grid_slice) -> None:
    assert len(grid_slice) == 2 * 2 * 2 * 2
    for cell in grid_slice:
        for r in cell.runs:
            assert r.snapshots, f"{cell.arch.label} {cell.init} {cell.dynamics}: no snapshot"
            assert [s.t for s in r.snapshots] == pytest.approx(list(SLICE_CFG.times[:len(r.snapshots)]))
            for s in r.snapshots:
                assert all(np.isfinite(v) for v in dyn._numbers(s))
                # cond < 1 is possible: at collapse every covariance eigenvalue is below the paper's clamp
                assert 0.0 <= s.std <= 1.0 and s.cond > 0.0
                assert s.curvature.lambda_min <= s.curvature.lambda_max
            if r.status == "ok":
                assert len(r.snapshots) == SLICE_CFG.n_checkpoints
            assert r.escaped == (r.status == "ok" and r.snapshots[-1].std >= r.threshold)


def test_slice_is_consistent_with_theorem_part_one(grid_slice) -> None:
    """Linear head without BatchNorm, MSE loss: ``M = 0`` and no eigenvalue below the floor, always."""
    for cell in grid_slice:
        if cell.arch == dyn.Arch("linear"):
            for r in cell.runs:
                assert np.all(r.series("m_ratio") == 0.0) and np.all(r.series("n_negative") == 0)


@pytest.mark.parametrize("head", ["linear", "gelu2"])
def test_gradient_descent_converges_to_the_flow(head: str) -> None:
    """Euler steps are first order: the gap to the flow shrinks about 4x when lr shrinks 4x."""
    cfg = replace(dyn.Config(), horizon=0.4, n_checkpoints=2, lr_small=0.02, lr_large=0.005)
    arch = dyn.Arch(head)
    flow, coarse, fine = (dyn.run(arch, "normal", d, 0, cfg) for d in ("flow", "small", "large"))

    def gap(r: dyn.Trajectory) -> float:
        return abs(r.snapshots[-1].loss - flow.snapshots[-1].loss) / flow.snapshots[-1].loss

    assert all(r.status == "ok" for r in (flow, coarse, fine))
    assert 0 < gap(fine) < gap(coarse) / 2.5, (gap(fine), gap(coarse))


def test_table_lists_every_cell(grid_slice) -> None:
    table = dyn.format_table(grid_slice)
    assert len(table.splitlines()) == 2 + len(grid_slice)
    assert "gelu2+BN" in table and "collapsed" in table


def test_command_line_runs_and_rejects_bad_choices(capsys) -> None:
    assert dyn.main(["--heads", "relu2", "--inits", "collapsed", "--dynamics", "small", "--bn", "off",
                     "--seeds", "1", "--horizon", "0.5"]) == 0
    out = capsys.readouterr().out
    assert "relu2" in out and "escaped" in out
    for bad in (["--inits", "bogus"], ["--heads", "relu1"], ["--dynamics", "fast"], ["--seeds", "0"]):
        with pytest.raises(SystemExit):
            dyn.main(bad)
        assert "valid" in capsys.readouterr().err or bad[0] == "--seeds"
