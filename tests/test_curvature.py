"""scale.curvature.operators and scale.curvature.blocks: the matrix-free H, G, M of eq. (1) and the exact
per-sample blocks.

Checked: ``H v = G v + M v`` product by product (with the negative control that ``G`` alone misses
``M`` for smooth heads, and that ``M = 0`` exactly for linear and ReLU heads); dense operators
against mini's autograd reference, BatchNorm in eval mode included (folded into mini's weights);
train-mode BatchNorm couples samples (eval mode does not); the double-backward fallback; the exact
blocks of both paths against the dense operators; coupled objectives refused by the blocks.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mini.hessian import decompose_autograd
from mini.losses import make_objective
from scale.curvature.blocks import block_diag, block_norm, effective_hessian_blocks, factored_operator
from scale.curvature.operators import EffectiveHessian, functional_head
from scale.engine import objectives as O
from scale.engine.heads import build_head, mini_head_of

REL_TOL = 1e-12  # float64 identities, relative to the scale of the quantity
N_ROWS, D, K, WIDTH = 8, 5, 4, 6


def _instance(spec: str, objective: str, seed: int = 0, batchnorm: bool = False):
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    head = build_head(spec, D, K, WIDTH, batchnorm=batchnorm, out_batchnorm=batchnorm).double()
    for m in head.modules():  # non-trivial running statistics and affine parameters
        if isinstance(m, torch.nn.BatchNorm1d):
            with torch.no_grad():
                m.running_mean.normal_(generator=gen)
                m.running_var.uniform_(0.5, 2.0, generator=gen)
                m.weight.normal_(generator=gen)
                m.bias.normal_(generator=gen)
    z = torch.randn(N_ROWS, D, generator=gen, dtype=torch.float64)
    with torch.no_grad():
        T = head.eval()(z) + 0.3 * torch.randn(N_ROWS, K, generator=gen, dtype=torch.float64)
    pred = build_head("tanh2", K, K, WIDTH).double()
    losses = {
        "mse": lambda H: O.mse_targets(H, T),
        "simclr": lambda H: O.nt_xent(H, 0.5),
        "simsiam": lambda H: O.simsiam(H, T, pred),
        "vicreg": O.vicreg,
        "barlow": O.barlow,
    }
    return z, head, losses[objective], T, pred


@pytest.mark.parametrize(("spec", "objective"), [
    ("linear", "simclr"), ("relu2", "vicreg"), ("gelu3", "simsiam"), ("swish3", "barlow"), ("tanh2", "mse"),
    ("softplus2", "simclr"),
])
def test_H_equals_G_plus_M_product_by_product(spec, objective):
    z, head, loss, _, _ = _instance(spec, objective, seed=hash((spec, objective)) % 1000)
    E = EffectiveHessian(z, head, loss)
    V = torch.randn(E.n * E.d, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    Hv, Gv, Mv = E.H.matmat(V), E.G.matmat(V), E.M.matmat(V)
    scale = float(Hv.abs().max())
    assert float((Hv - Gv - Mv).abs().max()) <= REL_TOL * scale
    # batched products are the single products
    assert float((Hv[:, 0] - E.H.matvec(V[:, 0])).abs().max()) <= REL_TOL * scale
    if spec in ("linear", "relu2"):
        assert float(Mv.abs().max()) == 0.0  # s'' = 0: no interaction term at all
    else:  # negative control: G alone is not H for a smooth head with a nonzero residual
        assert float((Hv - Gv).abs().max()) > 1e-6 * scale


@pytest.mark.parametrize(("spec", "objective"), [("gelu3", "simsiam"), ("swish3", "simclr")])
def test_batchnorm_eval_matches_mini_with_folded_weights(spec, objective):
    """Eval-mode BatchNorm is an affine map: the operators equal mini's autograd reference on the
    head with BatchNorm folded into its Linear layers."""
    z, head, loss, T, pred = _instance(spec, objective, seed=3, batchnorm=True)
    E = EffectiveHessian(z, head, loss, bn_mode="eval")
    assert E.info["bn_mode"] == "eval" and E.info["batchnorm"] is True
    mh = mini_head_of(head)
    mh = mh.with_layers([{k: v.numpy() for k, v in layer.items()} for layer in mh.layers])
    from scale.engine.heads import head_to_mini

    mini_pred = head_to_mini(pred)
    Hb = mh(z.numpy())
    obj = {"mse": lambda: make_objective("mse", targets=T.numpy()),
           "simsiam": lambda: make_objective("simsiam", targets=T.numpy(), predictor=mini_pred),
           "simclr": lambda: make_objective("simclr", temperature=0.5)}[objective]()
    assert np.allclose(E.Hb.numpy(), Hb, rtol=0, atol=1e-12 * np.abs(Hb).max())
    ref = decompose_autograd(mh, obj, z.numpy())
    for op, R in ((E.H, ref.H), (E.G, ref.G), (E.M, ref.M)):
        assert np.abs(op.dense().numpy() - R).max() <= 1e-10 * np.abs(ref.H).max()


def test_batchnorm_train_mode_couples_samples_and_is_recorded():
    z, head, loss, _, _ = _instance("swish3", "mse", seed=5, batchnorm=True)
    running = [m.running_mean.clone() for m in head.modules() if isinstance(m, torch.nn.BatchNorm1d)]
    d = D
    off = lambda A: float(A[:d, d:].abs().max())  # noqa: E731  block (sample 0, sample 1)
    E_eval = EffectiveHessian(z, head, loss, bn_mode="eval")
    E_train = EffectiveHessian(z, head, loss, bn_mode="train")
    assert E_train.info["bn_mode"] == "train" and E_eval.info["bn_mode"] == "eval"
    H_eval, H_train = E_eval.H.dense(), E_train.H.dense()
    assert off(H_eval) == 0.0  # mse to targets + row-wise head: block-diagonal
    assert off(H_train) > 1e-6 * float(H_train.abs().max())  # batch statistics couple the samples
    V = torch.randn(N_ROWS * D, 2, dtype=torch.float64)
    assert float((E_train.H.matmat(V) - E_train.G.matmat(V) - E_train.M.matmat(V)).abs().max()) <= (
        REL_TOL * float(H_train.abs().max()) * 10)
    after = [m.running_mean for m in head.modules() if isinstance(m, torch.nn.BatchNorm1d)]
    assert all(torch.equal(a, b) for a, b in zip(running, after))  # the trained head is untouched


class _CubeNoForward(torch.autograd.Function):
    """x -> x^3 with a backward (differentiable, so double backward works) but no forward-mode rule."""

    @staticmethod
    def forward(x):
        return x**3

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 3 * x * x * g


def test_double_backward_fallback_agrees_with_forward_mode():
    z, head, loss, _, _ = _instance("gelu3", "simclr", seed=7)
    fwd = EffectiveHessian(z, head, loss, mode="forward")
    dbl = EffectiveHessian(z, head, loss, mode="double-backward")
    assert fwd.info["hvp_mode"] == "forward-over-reverse" and dbl.info["hvp_mode"] == "double-backward"
    for a, b in ((fwd.H, dbl.H), (fwd.G, dbl.G), (fwd.M, dbl.M)):
        A, B = a.dense(), b.dense()
        assert float((A - B).abs().max()) <= REL_TOL * max(float(fwd.H.dense().abs().max()), 1.0)
    # auto mode is double backward through graphs built once: an op without a forward-mode rule is fine
    head_fn, _ = functional_head(head)
    cubic = lambda x: _CubeNoForward.apply(head_fn(x))  # noqa: E731
    auto = EffectiveHessian(z, cubic, loss, mode="auto")
    assert auto.info["hvp_mode"] == "double-backward"
    with pytest.raises(Exception):  # noqa: B017  forward mode alone cannot do it
        EffectiveHessian(z, cubic, loss, mode="forward").H.matvec(torch.zeros(N_ROWS * D, dtype=torch.float64))
    H = auto.H.dense()
    assert float((H - auto.G.dense() - auto.M.dense()).abs().max()) <= REL_TOL * float(H.abs().max()) * 10


@pytest.mark.parametrize(("spec", "objective", "batchnorm"), [
    ("linear", "mse", False), ("gelu3", "simsiam", False), ("swish3", "simsiam", True), ("tanh2", "mse", True),
])
def test_exact_blocks_both_paths_match_the_dense_operators(spec, objective, batchnorm):
    z, head, loss, _, _ = _instance(spec, objective, seed=11, batchnorm=batchnorm)
    E = EffectiveHessian(z, head, loss, bn_mode="eval")
    dense = {"H": E.H.dense(), "G": E.G.dense(), "M": E.M.dense()}
    scale = float(dense["H"].abs().max())
    audits = []
    for method in ("closed_form", "autodiff"):
        B = effective_hessian_blocks(z, head, loss, method=method)
        for name in ("H", "G", "M"):
            assert float((block_diag(getattr(B, name)) - dense[name]).abs().max()) <= 1e-12 * scale
        audits.append(B.audit())
    eig = torch.linalg.eigvalsh(dense["H"])
    a = audits[0]
    assert abs(a["lambda_min"] - float(eig[0])) <= 1e-12 * a["scale"]
    assert a["n_negative_H"] == int((eig < -a["rel_floor"] * a["scale"]).sum())
    assert a["N"] == N_ROWS * D and a["bn_mode"] == ("eval" if batchnorm else "none")
    assert audits[0]["n_negative_H"] == audits[1]["n_negative_H"]
    lean = effective_hessian_blocks(z, head, loss, spectra="H").audit()  # the tracker's: H's spectrum only
    assert lean["n_negative_G"] is None and lean["loss_hessian_psd_measured"] is None
    assert all(lean[q] == a[q] for q in ("lambda_min", "lambda_max", "n_negative_H", "M_over_H", "condition"))
    if spec == "linear":
        assert a["M_over_H"] == 0.0


@pytest.mark.parametrize("objective", ["simclr", "barlow"])
def test_blocks_refuse_coupled_objectives(objective):
    """Negative control of the block-diagonal premise: losses that couple samples are refused."""
    z, head, loss, _, _ = _instance("gelu3", objective, seed=13)
    with pytest.raises(ValueError, match="not block-diagonal"):
        effective_hessian_blocks(z, head, loss)


def test_psd_premise_is_measured():
    z, head, loss, _, _ = _instance("gelu3", "mse", seed=17)
    assert effective_hessian_blocks(z, head, loss).audit()["loss_hessian_psd_measured"] is True
    z, head, loss, _, _ = _instance("gelu3", "simsiam", seed=17)
    assert effective_hessian_blocks(z, head, loss).audit()["loss_hessian_psd_measured"] is False


def test_bad_inputs_are_named():
    z, head, loss, _, _ = _instance("gelu3", "mse")
    with pytest.raises(ValueError, match="bn_mode"):
        EffectiveHessian(z, head, loss, bn_mode="batch")
    with pytest.raises(ValueError, match="2-D"):
        EffectiveHessian(z[0], head, loss)
    with pytest.raises(ValueError, match="mode"):
        EffectiveHessian(z, head, loss, mode="reverse")
    E = EffectiveHessian(z, head, loss)
    with pytest.raises(ValueError, match="N=40"):
        E.H.matvec(torch.zeros(7, dtype=torch.float64))
    with pytest.raises(ValueError, match="method"):
        effective_hessian_blocks(z, head, loss, method="exact")
    with pytest.raises(ValueError, match="spectra"):
        effective_hessian_blocks(z, head, loss, spectra="G")


@pytest.mark.parametrize(("spec", "objective", "batchnorm"), [
    ("gelu3", "simclr", False), ("swish3", "vicreg", True), ("tanh2", "simsiam", True), ("linear", "barlow", False),
])
def test_factored_operator_is_the_matrix_free_operator(spec, objective, batchnorm):
    """``blockdiag(M) + J^T (grad^2_H L) J`` (J, M exact, the loss coupling samples or not) against the
    forward-over-reverse ``H``: dense, single products and batched products, both paths to J and M."""
    z, head, loss, _, _ = _instance(spec, objective, seed=19, batchnorm=batchnorm)
    E = EffectiveHessian(z, head, loss, bn_mode="eval")
    H = E.H.dense()
    scale = float(H.abs().max())
    V = torch.randn(N_ROWS * D, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    for method in ("closed_form", "autodiff"):
        F, M, info = factored_operator(z, head, loss, method=method)
        assert float((F.dense() - H).abs().max()) <= REL_TOL * scale
        assert float((F.matvec(V[:, 0]) - E.H.matvec(V[:, 0])).abs().max()) <= REL_TOL * scale
        assert float((F.matmat(V) - E.H.matmat(V)).abs().max()) <= REL_TOL * scale
        assert float((block_diag(M) - E.M.dense()).abs().max()) <= REL_TOL * scale
        assert info["bn_mode"] == ("eval" if batchnorm else "none") and info["N"] == N_ROWS * D


@pytest.mark.parametrize("case", ["one_dominant", "spread", "equal", "tiny", "huge", "half_zero", "few"])
def test_block_norm_is_the_largest_block_eigenvalue(case):
    """``block_norm`` solves only the blocks its tests cannot rule out; the result must be exactly the
    largest |eigenvalue| over all blocks (``eigvalsh`` of every block), whatever the blocks' scales."""
    gen = torch.Generator().manual_seed(7)
    n, d = (3, 5) if case == "few" else (24, 9)
    A = torch.randn(n, d, d, dtype=torch.float64, generator=gen)
    A = A + A.transpose(1, 2)
    f64 = {"dtype": torch.float64}
    scales = torch.ones(n, **f64)
    if case == "one_dominant":
        scales[5] = 30.0
    elif case == "spread":
        scales = torch.logspace(-4, 4, n, **f64)[torch.randperm(n, generator=gen)]
    elif case in ("tiny", "huge"):
        scales = torch.full((n,), 1e-150 if case == "tiny" else 1e150, **f64)
    elif case == "half_zero":
        scales[: n // 2] = 0.0
    A = A * scales[:, None, None]
    norms = torch.linalg.eigvalsh(A).abs().amax(1)
    ref = float(norms.max())
    assert abs(block_norm(A) - ref) <= 1e-13 * ref
    assert abs(block_norm(list(A.split(5))) - ref) <= 1e-13 * ref  # the same from chunks
    # the exclusion test it relies on, block by block: t^2 I - (A/l)^2 has a Cholesky factor iff |A|_2 < t l
    level = float(norms.median()) if float(norms.median()) > 0 else ref
    B = A / level
    ok = torch.linalg.cholesky_ex(torch.eye(d, **f64) - B @ B).info == 0
    clear = (norms - level).abs() > 1e-8 * level
    assert bool((ok[clear] == (norms[clear] < level)).all())
    assert block_norm(torch.zeros(n, d, d, dtype=torch.float64)) == 0.0
