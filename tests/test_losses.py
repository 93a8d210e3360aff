"""The objectives: formulas against direct evaluations, safe norms, argument errors."""

from __future__ import annotations

import numpy as np
import pytest
from autograd import grad, hessian

from mini.heads import init_head
from mini.losses import OBJECTIVES, barlow, make_objective, mse_targets, mse_views, normalize, nt_xent, vicreg

RNG = np.random.default_rng(0)


def test_nt_xent_matches_a_direct_softmax_cross_entropy() -> None:
    H = RNG.standard_normal((8, 5))
    m, tau = 4, 0.2
    U = H / np.linalg.norm(H, axis=1, keepdims=True)
    S = U @ U.T / tau
    np.fill_diagonal(S, -np.inf)
    partner = np.r_[np.arange(m, 2 * m), np.arange(m)]
    log_softmax = S - np.log(np.exp(S).sum(axis=1, keepdims=True))
    expected = -log_softmax[np.arange(2 * m), partner].mean()
    assert nt_xent(tau)(H) == pytest.approx(expected, rel=1e-12)


def test_barlow_and_vicreg_against_direct_formulas() -> None:
    H = RNG.standard_normal((10, 3))
    A, B = H[:5], H[5:]
    za, zb = (A - A.mean(0)) / np.sqrt(A.var(0) + 1e-5), (B - B.mean(0)) / np.sqrt(B.var(0) + 1e-5)
    C = za.T @ zb / 5
    off = C - np.diag(np.diag(C))
    assert barlow(0.01)(H) == pytest.approx(((1 - np.diag(C)) ** 2).sum() + 0.01 * (off**2).sum(), rel=1e-12)

    def terms(X):
        std = np.sqrt(X.var(0, ddof=1) + 1e-4)
        cov = np.cov(X.T)
        return np.maximum(1 - std, 0).mean() / 2, ((cov - np.diag(np.diag(cov))) ** 2).sum() / 3

    (sa, ca), (sb, cb) = terms(A), terms(B)
    assert vicreg()(H) == pytest.approx(25 * ((A - B) ** 2).mean() + 25 * (sa + sb) + (ca + cb), rel=1e-12)


def test_closed_form_mse_derivatives_match_autograd() -> None:
    H, T = RNG.standard_normal((6, 3)), RNG.standard_normal((6, 3))
    for obj in (mse_targets(T), mse_views()):
        np.testing.assert_allclose(obj.grad_fn(H), grad(obj.fn)(H), rtol=1e-13, atol=1e-15)
        np.testing.assert_allclose(obj.hessian_fn(H), hessian(obj.fn)(H), rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("name", OBJECTIVES)
def test_zero_vectors_give_finite_values_and_gradients(name: str) -> None:
    H = RNG.standard_normal((6, 4))
    H[0] = 0.0
    H[4] = 0.0
    pred = init_head("linear", 4, 4, 4, 1) if name in ("simsiam", "byol") else None
    targets = H + 1.0 if name == "mse" else None
    obj = make_objective(name, H, predictor=pred, targets=targets)
    assert np.isfinite(obj(H))
    assert np.all(np.isfinite(grad(obj.fn)(H)))
    assert np.all(np.isfinite(normalize(np.zeros((2, 3)))))


def test_objective_argument_errors() -> None:
    with pytest.raises(ValueError, match="valid"):
        make_objective("dino")
    with pytest.raises(ValueError, match="positive"):
        nt_xent(0.0)
    with pytest.raises(ValueError, match="even batch"):
        nt_xent()(np.ones((5, 3)))
    with pytest.raises(ValueError, match="needs targets"):
        make_objective("mse")
    with pytest.raises(ValueError, match="mse needs targets"):  # not a silent zero residual at Hb
        make_objective("mse", np.ones((4, 3)))
    with pytest.raises(ValueError, match="do not match"):
        mse_targets(np.ones((4, 3)))(np.ones((4, 2)))
    with pytest.raises(ValueError, match="NaN"):
        mse_targets(np.full((2, 2), np.nan))
