"""scale's torch heads and objectives against mini's (float64): values and gradients, relative 1e-10."""

from __future__ import annotations

import autograd
import numpy as np
import pytest
import torch

from mini import heads as mh
from mini import losses as ml
from scale.engine import heads as sh
from scale.engine import objectives as so

REL_TOL = 1e-10  # float64 rounding differences between two implementations of one formula
N, K, D = 8, 5, 6


def _rel(a, b) -> float:
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300))


def _torch_value_grad(fn, Hb: np.ndarray):
    H = torch.tensor(Hb, dtype=torch.float64, requires_grad=True)
    value = fn(H)
    (grad,) = torch.autograd.grad(value, H)
    return value.item(), grad.numpy()


def _mini_value_grad(objective, Hb: np.ndarray):
    return float(objective(Hb)), autograd.grad(objective.fn)(Hb)


def _cases(rng: np.random.Generator):
    Hb = rng.standard_normal((N, K))
    T = rng.standard_normal((N, K))
    pred = mh.init_head("gelu2", K, K, width=7, rng=3)
    tpred = sh.head_from_mini(pred)
    return Hb, [
        ("mse", ml.mse_targets(T), lambda H: so.mse_targets(H, torch.tensor(T))),
        ("mse_views", ml.mse_views(), so.mse_views),
        ("simclr", ml.nt_xent(0.1), lambda H: so.nt_xent(H, 0.1)),
        ("simclr_tau0.5", ml.nt_xent(0.5), lambda H: so.nt_xent(H, 0.5)),
        ("simsiam", ml.simsiam(Hb), so.simsiam),
        ("simsiam_pred", ml.simsiam(Hb, pred), lambda H: so.simsiam(H, predictor=tpred)),
        ("simsiam_nmse", ml.simsiam(Hb, pred, form="nmse"), lambda H: so.simsiam(H, None, tpred, "nmse")),
        ("byol", ml.byol(T, pred), lambda H: so.byol(H, torch.tensor(T), tpred)),
        ("vicreg", ml.vicreg(), so.vicreg),
        ("barlow", ml.barlow(), so.barlow),
    ]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_objectives_match_mini(seed):
    rng = np.random.default_rng(seed)
    Hb, cases = _cases(rng)
    assert len(cases) >= len(ml.OBJECTIVES)
    for name, mini_obj, torch_fn in cases:
        mv, mg = _mini_value_grad(mini_obj, Hb)
        tv, tg = _torch_value_grad(torch_fn, Hb)
        assert abs(tv - mv) <= REL_TOL * max(abs(mv), 1.0), (name, tv, mv)
        assert _rel(tg, mg) <= REL_TOL, (name, _rel(tg, mg))


def test_objective_mismatch_is_detected():
    """Negative control: a different temperature / lambda is seen by the same comparison."""
    Hb = np.random.default_rng(5).standard_normal((N, K))
    mv, _ = _mini_value_grad(ml.nt_xent(0.1), Hb)
    tv, _ = _torch_value_grad(lambda H: so.nt_xent(H, 0.11), Hb)
    assert abs(tv - mv) > REL_TOL * abs(mv)
    mv, _ = _mini_value_grad(ml.barlow(5e-3), Hb)
    tv, _ = _torch_value_grad(lambda H: so.barlow(H, 5.1e-3), Hb)
    assert abs(tv - mv) > REL_TOL * abs(mv)


def test_safe_norm_zero_vector_is_finite():
    H = torch.zeros(4, 3, dtype=torch.float64, requires_grad=True)
    value = so.nt_xent(H) + so.simsiam(H)
    (g,) = torch.autograd.grad(value, H)
    assert torch.isfinite(value) and torch.isfinite(g).all()


@pytest.mark.parametrize("spec", ["linear", "relu2", "gelu3", "swish3", "tanh2", "softplus2"])
@pytest.mark.parametrize("bias", [True, False])
def test_head_from_mini_matches(spec, bias):
    head = mh.init_head(spec, D, K, width=[9, 7][: mh.parse_head_spec(spec).n_layers - 1], rng=1, bias=bias)
    # large pre-activations exercise softplus far from 0 (torch's nn.Softplus would cut off at 20)
    Z = 30.0 * np.random.default_rng(2).standard_normal((N, D))
    module = sh.head_from_mini(head)
    out = module(torch.tensor(Z)).detach().numpy()
    assert _rel(out, head(Z)) <= REL_TOL
    back = sh.head_to_mini(module)
    assert all(np.array_equal(a["W"], b["W"]) for a, b in zip(back.layers, head.layers))
    for t_pre, m_pre in zip(module.preactivations(torch.tensor(Z)), mh.preactivations(head, Z)):
        assert _rel(t_pre.detach().numpy(), m_pre) <= REL_TOL


def test_head_layout_and_options():
    head = sh.build_head("gelu3", 16, 8, 32, bias=False, batchnorm=True)
    assert [tuple(lin.weight.shape) for lin in head.layers] == [(32, 16), (32, 32), (8, 32)]
    assert all(lin.bias is None for lin in head.layers)
    assert sum(isinstance(m, torch.nn.BatchNorm1d) for m in head.modules()) == 2
    assert isinstance(head.act, torch.nn.GELU) and head.act.approximate == "none"
    before = [lin.weight.detach().clone() for lin in head.layers]
    sh.collapse_init_(head)
    assert all(torch.equal(lin.weight, 0.1 * w) for lin, w in zip(head.layers, before))


@pytest.mark.parametrize("bad", ["gelu1", "foo3", "relu", "", "gelu-3"])
def test_bad_spec_raises_the_parser_error(bad):
    with pytest.raises(ValueError, match="valid forms"):
        sh.build_head(bad, 4, 4, 4)


@pytest.mark.parametrize(("m", "k"), [(6, 40), (40, 6)])
def test_off_diagonal_sum_from_the_gram_matrices_equals_the_k_by_k_one(m, k):
    """VICReg's and Barlow's off-diagonal term from two (m, m) Gram matrices (``m < k``) or from the (k, k)
    matrix itself: the value, its gradient and a Hessian-vector product equal those of the (k, k) formula."""
    g = torch.Generator().manual_seed(m * k)
    X, Y = (torch.randn(m, k, dtype=torch.float64, generator=g) for _ in range(2))
    V = torch.randn(m, k, dtype=torch.float64, generator=g)

    def reference(X):  # the k x k formula
        C = X.T @ Y / 3.0
        return (C * C).sum() - (torch.diagonal(C) ** 2).sum()

    for fn in (reference, lambda X: so.cross_off_diagonal_sq_sum(X, Y, 3.0)):
        Xg = X.clone().requires_grad_(True)
        value = fn(Xg)
        (grad,) = torch.autograd.grad(value, Xg, create_graph=True)
        (hv,) = torch.autograd.grad(grad, Xg, grad_outputs=V)
        if fn is reference:
            want = (value.item(), grad.detach(), hv)
            continue
        assert value.item() == pytest.approx(want[0], rel=1e-12)
        assert _rel(grad.detach().numpy(), want[1].numpy()) <= 1e-12 and _rel(hv.numpy(), want[2].numpy()) <= 1e-12
