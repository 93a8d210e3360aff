"""Software tests of ``mini.dynamics`` and ``mini.batchnorm``: fast paths against autograd (both
objectives), small slices of the report grid (MSE and negative cosine; finite, consistent numbers),
the command line and its error paths."""

from __future__ import annotations

from dataclasses import replace

import autograd.numpy as anp
import numpy as np
import pytest
from autograd import grad

from mini import dynamics as dyn
from mini import dynamics_fast as fast_paths
from mini.batchnorm import BN_EPS, batchnorm
from mini.reports import dynamics as report

GRAD_REL_TOL = 1e-10  # hand-written backward vs autograd, relative to the largest entry
HESS_REL_TOL = 1e-9  # complex step vs autograd Hessian, relative to |H|_max
SLICE_CFG = replace(dyn.Config(), horizon=2.0, n_checkpoints=3)
COSINE_CFG = replace(SLICE_CFG, objective="cosine")
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
    with pytest.raises(ValueError, match="NaN or infinite"):
        batchnorm(np.where(a > 0, np.nan, a))


# --------------------------------------------------------------------------------------------
# Fast paths against autograd
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("objective", dyn.OBJECTIVES)
@pytest.mark.parametrize("arch", ARCHS, ids=lambda a: a.label)
def test_hand_gradient_matches_autograd(arch: dyn.Arch, objective: str) -> None:
    params, X = setup(arch)
    lay = dyn.layout(params)
    w = dyn.pack(params, lay)
    T = dyn.swap_views(np.asarray(dyn.projector(arch, params, dyn.backbone(params, X)))) + 0.1
    reference = grad(lambda v: dyn.simsiam_loss(arch, dyn.unpack(v, lay), X, T, objective))(w)
    fast = dyn.pack(fast_paths.simsiam_gradient(arch, params, X, T, objective), lay)
    assert np.abs(fast - reference).max() <= GRAD_REL_TOL * np.abs(reference).max()


def test_losses_are_the_mini_losses_objectives() -> None:
    """``simsiam_mse`` is the ``mse`` loss; the ``cosine`` loss is ``-mean cos(p_i, t_i)`` (SimSiam's)."""
    arch = dyn.Arch("gelu2")
    params, X = setup(arch)
    P = np.asarray(dyn.predictor(arch, params, dyn.projector(arch, params, dyn.backbone(params, X))))
    T = np.random.default_rng(0).standard_normal(P.shape)
    assert dyn.simsiam_loss(arch, params, X, T, "mse") == pytest.approx(dyn.simsiam_mse(arch, params, X, T), rel=1e-14)
    cos = np.sum(P * T, axis=1) / np.linalg.norm(P, axis=1) / np.linalg.norm(T, axis=1)
    assert dyn.simsiam_loss(arch, params, X, T, "cosine") == pytest.approx(-cos.mean(), rel=1e-14)
    assert dyn.loss_objective("mse", T).hessian_psd is True and dyn.loss_objective("cosine", T).hessian_psd is False
    with pytest.raises(ValueError, match="valid choices"):
        dyn.loss_objective("nmse", T)
    with pytest.raises(ValueError, match="valid choices"):
        dyn.Config(objective="byol")


def test_cosine_gradient_at_a_zero_row_follows_the_safe_norm() -> None:
    """A zero prediction row has the clamped norm, a tiny one the exact norm: the hand gradient still
    matches autograd."""
    rng = np.random.default_rng(2)
    P, T = rng.standard_normal((6, 4)), rng.standard_normal((6, 4))
    P[1] = 0.0
    P[2] *= 1e-200
    reference = grad(dyn.loss_objective("cosine", T).fn)(P)
    fast = fast_paths.loss_gradient("cosine", P, T)
    assert np.all(np.isfinite(fast))
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


@pytest.mark.parametrize("bn", [False, True])
@pytest.mark.parametrize("head", ["linear", "relu2", "gelu2"])
def test_cosine_curvature_matches_autograd(head: str, bn: bool) -> None:
    """Negative cosine: the closed form (no BatchNorm) and the complex step (BatchNorm) against
    autograd's full Hessian of the batch map, at a collapsed start."""
    arch = dyn.Arch(head, bn)
    params, X = setup(arch, "collapsed")
    Z = np.asarray(dyn.backbone(params, X))
    fast = dyn.effective_curvature(arch, params, Z, objective="cosine")
    exact = dyn.effective_curvature(arch, params, Z, exact_autograd=True, objective="cosine")
    scale = max(abs(exact.lambda_min), abs(exact.lambda_max))
    assert abs(fast.lambda_min - exact.lambda_min) <= HESS_REL_TOL * scale
    assert abs(fast.lambda_max - exact.lambda_max) <= HESS_REL_TOL * scale
    assert fast.n_negative == exact.n_negative
    assert fast.m_ratio == pytest.approx(exact.m_ratio, rel=1e-6, abs=1e-12)
    assert fast.loss_psd is exact.loss_psd is False


def test_indefinite_loss_gives_a_linear_head_negative_curvature() -> None:
    """Linear head, collapsed start: ``M = 0`` under either loss, so ``H_eff = G = J^T B J``. With the
    MSE loss (``B = I/n``) ``G`` is PSD; with the negative cosine each block ``B_i`` has a negative
    eigenvalue in ``span(p_i, t_i)`` when they are not parallel, and ``J`` (full row rank ``k < d``)
    carries it into ``G``: the negative curvature comes from the loss, not the head."""
    arch = dyn.Arch("linear")
    params, X = setup(arch, "collapsed")
    Z = np.asarray(dyn.backbone(params, X))
    mse = dyn.effective_curvature(arch, params, Z, objective="mse")
    cosine = dyn.effective_curvature(arch, params, Z, objective="cosine")
    assert mse.m_ratio == 0.0 and cosine.m_ratio == 0.0
    assert mse.n_negative == 0 and mse.loss_psd is True
    assert cosine.n_negative > 0 and cosine.lambda_min < 0 and cosine.loss_psd is False


@pytest.mark.parametrize("head", ["linear", "relu2", "swish3"])
def test_composite_head_is_predictor_after_projector(head: str) -> None:
    arch = dyn.Arch(head)
    params, X = setup(arch)
    Z = np.asarray(dyn.backbone(params, X))
    composite = dyn.composite_head(arch, params)
    expected = dyn.predictor(arch, params, dyn.projector(arch, params, Z))
    np.testing.assert_allclose(composite(Z), expected, rtol=1e-12, atol=1e-12)
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


@pytest.fixture(scope="module")
def cosine_slice() -> list[dyn.Cell]:
    """Gradient descent over heads x inits x BatchNorm, and one flow (stiff cosine flows would spend the
    whole evaluation budget, seconds each)."""
    steps = dyn.run_grid(heads=("linear", "gelu2"), inits=("normal", "collapsed"), dynamics=("small",),
                         bns=(False, True), seeds=(0,), cfg=COSINE_CFG)
    flow = dyn.run_grid(heads=("gelu2",), inits=("collapsed",), dynamics=("flow",), bns=(False,), seeds=(0,),
                        cfg=COSINE_CFG)
    return steps + flow


@pytest.mark.parametrize("name, n_cells", [("grid_slice", 16), ("cosine_slice", 9)])
def test_slice_numbers_are_finite_and_in_range(name: str, n_cells: int, request) -> None:
    cells = request.getfixturevalue(name)
    assert len(cells) == n_cells
    for cell in cells:
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


def test_cosine_slice_losses_and_premise(cosine_slice) -> None:
    """Negative cosine: the loss is a mean cosine in [-1, 1], the PSD premise is reported as not
    holding at every checkpoint, and a linear head without BatchNorm still has ``M = 0``."""
    for cell in cosine_slice:
        for r in cell.runs:
            assert r.cfg.objective == "cosine"
            for s in r.snapshots:
                assert -1.0 - 1e-12 <= s.loss <= 1.0 + 1e-12
                assert s.curvature.loss_psd is False
            if cell.arch == dyn.Arch("linear"):
                assert np.all(r.series("m_ratio") == 0.0)


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
    table = report.format_table(grid_slice)
    assert len(table.splitlines()) == 2 + len(grid_slice)
    assert "gelu2+BN" in table and "collapsed" in table


def test_command_line_runs_and_rejects_bad_choices(capsys) -> None:
    assert report.main(["--heads", "relu2", "--inits", "collapsed", "--dynamics", "small", "--bn", "off",
                     "--seeds", "1", "--horizon", "0.5"]) == 0
    out = capsys.readouterr().out
    assert "relu2" in out and "escaped" in out and "premise: yes" in out
    assert report.main(["--heads", "gelu2", "--inits", "normal", "--dynamics", "small", "--bn", "off",
                     "--seeds", "1", "--horizon", "0.5", "--objective", "cosine"]) == 0
    out = capsys.readouterr().out
    assert "negative-cosine objective" in out and "premise: no" in out
    for bad in (["--inits", "bogus"], ["--heads", "relu1"], ["--dynamics", "fast"], ["--seeds", "0"],
                ["--objective", "nmse"]):
        with pytest.raises(SystemExit):
            report.main(bad)
        assert "valid" in capsys.readouterr().err or bad[0] == "--seeds"
