"""Closed-form loss curvature (mini.loss_hessians, scale.engine.loss_curvature) against the autograd paths.

Each fast path must equal the existing exact path to ``FAST_TOL`` relative (float64): NT-Xent's
Hessian-vector products and dense Hessian (mini, NumPy and torch), the factored operator with the
closed-form product, SimSiam/BYOL blocks through the predictor and the cosine, and the Gauss-Newton
blocks from ``d`` products along ``J``'s columns. Negative controls: a wrong temperature, a wrong
target pairing, and a coupled loss refused by the ``d``-product path.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from autograd import hessian

from mini.loss_hessians import NTXentCurvature, nt_xent_hessian
from mini.losses import nt_xent as mini_nt_xent
from scale.curvature.blocks import effective_hessian_blocks, factored_operator
from scale.curvature.operators import EffectiveHessian
from scale.engine import objectives as O
from scale.engine.heads import build_head
from scale.engine.loss_curvature import NTXent, PredictorCosine

FAST_TOL = 1e-10  # relative to the largest entry of the reference
N_ROWS, D, K, WIDTH = 8, 5, 7, 6  # K > D: the d-product path applies


def _rel(a, b) -> float:
    return float((a - b).abs().max() / b.abs().max())


def _heads(spec: str, seed: int, batchnorm: bool = False):
    torch.manual_seed(seed)
    head = build_head(spec, D, K, WIDTH, batchnorm=batchnorm, out_batchnorm=batchnorm).double()
    pred = build_head("tanh2", K, K, WIDTH, batchnorm=batchnorm).double()
    gen = torch.Generator().manual_seed(seed)
    for m in [*head.modules(), *pred.modules()]:
        if isinstance(m, torch.nn.BatchNorm1d):
            with torch.no_grad():
                m.running_mean.normal_(generator=gen)
                m.running_var.uniform_(0.5, 2.0, generator=gen)
    z = torch.randn(N_ROWS, D, generator=gen, dtype=torch.float64)
    T = torch.randn(N_ROWS, K, generator=gen, dtype=torch.float64)
    return head.eval(), pred.eval(), z, T


@pytest.mark.parametrize("tau", [0.1, 0.5])
def test_nt_xent_hvp_and_dense_hessian_match_autograd(tau):
    gen = torch.Generator().manual_seed(3)
    Hb = torch.randn(N_ROWS, K, generator=gen, dtype=torch.float64)
    V = torch.randn(4, N_ROWS, K, generator=gen, dtype=torch.float64)
    g = torch.func.grad(lambda x: O.nt_xent(x, tau))
    ref = torch.stack([torch.func.jvp(g, (Hb,), (v,))[1] for v in V])
    curv = NTXentCurvature(Hb, tau)
    assert _rel(curv.hvp(V), ref) <= FAST_TOL
    assert _rel(curv.gradient(), g(Hb)) <= FAST_TOL
    assert _rel(NTXentCurvature(Hb, 2 * tau).hvp(V), ref) > 1e-3  # negative control: another temperature
    # mini, NumPy: the dense (n, k, n, k) Hessian against autograd's of mini.losses.nt_xent
    H_np = Hb.numpy()
    dense = hessian(mini_nt_xent(tau).fn)(H_np)
    closed = nt_xent_hessian(H_np, tau)
    assert np.abs(closed - dense).max() <= FAST_TOL * np.abs(dense).max()


@pytest.mark.parametrize("spec", ["gelu3", "swish3", "relu2"])
def test_factored_operator_with_closed_form_nt_xent(spec):
    head, _, z, _ = _heads(spec, seed=1)
    auto, _, _ = factored_operator(z, head, lambda H: O.nt_xent(H, 0.3))
    fast, _, info = factored_operator(z, head, NTXent(0.3))
    assert "closed form" in info["hvp_mode"]
    V = torch.randn(N_ROWS * D, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    ref = auto.matmat(V)
    assert _rel(fast.matmat(V), ref) <= FAST_TOL
    assert _rel(fast.matvec(V[:, 0]), ref[:, 0]) <= FAST_TOL
    # and the whole operator against the matrix-free Hessian of z -> L(h(z)) (forward mode: independent)
    Hd = EffectiveHessian(z, head, NTXent(0.3), mode="forward").H.dense()
    assert _rel(fast.dense(), Hd) <= FAST_TOL


@pytest.mark.parametrize(("spec", "form", "batchnorm"), [
    ("gelu3", "cosine", False), ("swish3", "nmse", True), ("relu2", "cosine", True), ("tanh2", "nmse", False),
])
def test_predictor_cosine_blocks_match_autograd_loss_blocks(spec, form, batchnorm):
    head, pred, z, T = _heads(spec, seed=5, batchnorm=batchnorm)
    ref = effective_hessian_blocks(z, head, lambda H: O.simsiam(H, T, pred, form))
    fast = effective_hessian_blocks(z, head, PredictorCosine(T, pred, form))
    assert fast.info["gauss_newton"].startswith("closed form")
    for a, b in ((fast.H, ref.H), (fast.G, ref.G), (fast.M, ref.M), (fast.eig_H, ref.eig_H)):
        assert float((a - b).abs().max()) <= FAST_TOL * float(ref.H.abs().max())  # M = 0 for relu
    assert float((fast.loss_hessian_eig - ref.loss_hessian_eig).abs().max()) <= FAST_TOL * float(
        ref.loss_hessian_eig.abs().max())
    assert abs(fast.info["loss"] - ref.info["loss"]) <= FAST_TOL * abs(ref.info["loss"])
    # no predictor at all (p = h)
    ref0 = effective_hessian_blocks(z, head, lambda H: O.simsiam(H, T, None, form))
    assert _rel(effective_hessian_blocks(z, head, PredictorCosine(T, None, form)).H, ref0.H) <= FAST_TOL
    # negative control: the views' targets not swapped is another objective
    swapped = torch.cat([T[N_ROWS // 2:], T[: N_ROWS // 2]])
    assert _rel(effective_hessian_blocks(z, head, PredictorCosine(swapped, pred, form)).H, ref.H) > 1e-3
    # the tracker's lean form: blocks reduced chunk by chunk, not kept
    lean = effective_hessian_blocks(z, head, PredictorCosine(T, pred, form), spectra="H", keep_blocks=False)
    assert lean.H is None and lean.M is None and _rel(lean.eig_H, ref.eig_H) <= FAST_TOL
    assert lean.audit()["M_over_H"] == pytest.approx(ref.audit()["M_over_H"], rel=FAST_TOL, abs=FAST_TOL)


@pytest.mark.parametrize(("spec", "objective", "batchnorm"), [
    ("gelu3", "simsiam", False), ("swish3", "byol", True), ("tanh2", "simclr", True), ("softplus2", "mse", False),
    ("linear", "simclr", False),
])
def test_closed_form_operator_matches_the_matrix_free_hessian(spec, objective, batchnorm):
    """``closed_form_operator``: products through the head's weights in closed form (the loss's curvature in
    closed form for SimSiam/BYOL/SimCLR, autograd for MSE) against ``scale.curvature.operators``'s forward-mode
    operators (an independent route), for ``H`` and ``M``, one vector and a batch."""
    from scale.curvature.closed_form import closed_form_operator

    head, pred, z, T = _heads(spec, seed=21, batchnorm=batchnorm)
    closed, plain = {
        "simsiam": (PredictorCosine(T, pred, "cosine"), lambda H: O.simsiam(H, T, pred, "cosine")),
        "byol": (PredictorCosine(T, pred, "nmse"), lambda H: O.simsiam(H, T, pred, "nmse")),
        "simclr": (NTXent(0.3), lambda H: O.nt_xent(H, 0.3)),
        "mse": (lambda H: 0.5 * ((H - T) ** 2).sum() / N_ROWS, None),
    }[objective]
    E = EffectiveHessian(z, head, plain or closed, mode="forward")
    V = torch.randn(N_ROWS * D, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    for compose in (True, False):  # the predictor's first map composed with the head's last, or kept apart
        H, M, info = closed_form_operator(z, head, closed, compose=compose)
        for ours, ref in ((H, E.H), (M, E.M)):
            want = ref.matmat(V)
            assert _rel(ours.matmat(V), want) <= FAST_TOL or float(want.abs().max()) == 0.0
            assert float((ours.matvec(V[:, 1]) - want[:, 1]).abs().max()) <= FAST_TOL * float(want.abs().max())
        assert "closed form" in info["hvp_mode"] and abs(info["loss"] - float(E.value)) <= FAST_TOL * abs(E.value)
    # negative control: another temperature / another target pairing is another operator
    if objective == "simclr":
        assert _rel(closed_form_operator(z, head, NTXent(0.6))[0].matmat(V), E.H.matmat(V)) > 1e-3


def test_gauss_newton_from_d_products_matches_k_columns():
    head, pred, z, T = _heads("swish3", seed=9)
    loss = lambda H: O.simsiam(H, T, pred)  # noqa: E731  autograd only: no closed form attached
    ref = effective_hessian_blocks(z, head, loss, spectra="all")  # k loss-block columns
    fast = effective_hessian_blocks(z, head, loss, spectra="H")  # K > D: d products
    assert "products along J's columns" in fast.info["gauss_newton"]
    assert _rel(fast.H, ref.H) <= FAST_TOL and _rel(fast.eig_H, ref.eig_H) <= FAST_TOL
    assert fast.premise_residual <= 1e-12
    with pytest.raises(ValueError, match="not block-diagonal"):  # a coupled loss is still refused
        effective_hessian_blocks(z, head, lambda H: O.nt_xent(H, 0.5), spectra="H")


@pytest.mark.parametrize(("d", "k", "route"), [(3, 12, "products"), (12, 3, "assemble")])
def test_dense_route_rule_picks_each_route_in_its_regime(d, k, route):
    """``scale.curvature.blocks.dense_route``: the dense SimCLR ``H_eff`` is assembled from NT-Xent's dense Hessian
    when the head narrows (``k < d``) and built from ``n d`` products when it widens; either way it is the Hessian of
    ``z -> L(h(z))`` (``torch.func.hessian``, an independent route), and the rule is what ``dense()`` used."""
    from scale.curvature.blocks import dense_route

    n = 8
    assert dense_route(n, d, k) == route
    # the measured regimes (bench/results/hessian.md): products faster at k >= d, assembling at k = d / 4
    assert {dense_route(32, 16, 128), dense_route(32, 32, 32), dense_route(16, 128, 128)} == {"products"}
    assert {dense_route(32, 128, 32), dense_route(32, 64, 16)} == {"assemble"}
    torch.manual_seed(2)
    head = build_head("gelu3", d, k, 6).double().eval()
    z = torch.randn(n, d, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    op, _, info = factored_operator(z, head, NTXent(0.4))
    assert info["dense_route"] == route
    ref = torch.func.hessian(lambda x: O.nt_xent(head(x.reshape(n, d)), 0.4))(z.reshape(-1)).detach()
    assert _rel(op.dense(), ref) <= FAST_TOL
    assert _rel(op.matmat(torch.eye(n * d, dtype=torch.float64)), ref) <= FAST_TOL  # the product route itself
