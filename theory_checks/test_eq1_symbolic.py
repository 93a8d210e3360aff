"""Equation (1) proven symbolically: ``H_eff = G + M`` as an identity of expressions, not a sample.

Statement: for an MLP head ``h`` (``a_l = W_l x_{l-1} + b_l``, ``x_l = s(a_l)``, ``h = a_L``) and a loss
``L`` of the whole batch of embeddings, the Hessian of ``Z -> L(h(z_1), ..., h(z_n))`` is

    G + M,   G = J^T (grad^2_H L) J,   M = blockdiag_i sum_l (da_l/dz_i)^T diag(s''(a_l) * g_l) (da_l/dz_i),

with ``J = blockdiag(J_i)``, ``J_i = W_L D_{L-1} W_{L-1} ... D_1 W_1`` (``D_l = diag(s'(a_l))``), and the backward
recursion of ``mini/hessian.py``: ``g_{L-1} = W_L^T rho_i``, ``g_{l-1} = W_l^T (s'(a_l) * g_l)``, ``rho_i =
grad_{h_i} L``.

What the execution proves. Every weight, bias and input is a symbol; the activation ``s`` is an undefined
function (sympy's ``Function``: any twice-differentiable ``s``, its derivatives kept as ``s'``, ``s''`` at
each pre-activation); the loss is the general quadratic ``L(y) = g^T y + y^T A y / 2`` in the ``n k``
embeddings with symbolic ``g`` and symmetric ``A``. Both sides of the identity are linear in ``L`` and read
``L`` only through its value, gradient and Hessian at ``h(Z)`` (its 2-jet), and ``(g + A h(Z), A)`` ranges
over every 2-jet as ``g`` and ``A`` do: so the identity for the general quadratic is the identity for every
twice-differentiable loss, coupled across samples or not (every objective of ``mini.losses``). sympy expands
``H - G - M`` entry by entry and every entry is the polynomial 0: a proof for every instance of the shapes
below, by execution. The concrete MSE objectives (targets; two views) are run as well, as closed forms.

Shapes covered (``SHAPES``): ``n = 2`` samples (so the loss couples samples and ``G`` has cross blocks),
``d = 2`` inputs, hidden width 2, ``k = 2`` outputs, depths 1 and 2. Deeper heads follow by induction on
depth, the recursion itself: a depth-``l + 1`` head is ``phi o h'`` with ``h'`` of depth ``l`` (its last
pre-activation) and ``phi(y) = W s(y) + b``; equation (1) for ``h'`` and the loss ``L o phi``, with
``grad^2 (L o phi)`` given by the depth-2 identity, is the depth-``l + 1`` identity, the step adding the
term ``diag(s''(a_l) * g_l)`` and carrying ``g_{l-1} = W_l^T (s'(a_l) * g_l)``. Depth 3 (22 s) is run by
``THEORY_CHECKS_SYMBOLIC_DEPTH=3``; other widths change only how many terms of each kind the sums hold
(pairs of units, samples and outputs, each kind present at width 2), an argument, not an execution.

Negative controls: ``M`` dropped, or ``s''`` with the wrong sign, leaves entries that do not vanish.
"""

from __future__ import annotations

import os

import pytest

sp = pytest.importorskip("sympy")

SHAPES = {"n": 2, "d": 2, "width": 2, "k": 2}
DEPTHS = (1, 2, 3) if os.environ.get("THEORY_CHECKS_SYMBOLIC_DEPTH") == "3" else (1, 2)


def symbolic_head(depth: int, d: int, width: int, k: int):
    """Weights and biases as symbols, and the forward pass of one sample returning ``h`` and the hidden
    pre-activations ``a_1 .. a_{L-1}``."""
    dims = [d] + [width] * (depth - 1) + [k]
    Ws = [sp.Matrix(dims[l + 1], dims[l], lambda i, j, l=l: sp.Symbol(f"W{l}_{i}{j}")) for l in range(depth)]
    bs = [sp.Matrix(dims[l + 1], 1, lambda i, j, l=l: sp.Symbol(f"b{l}_{i}")) for l in range(depth)]
    s = sp.Function("s")

    def forward(z):
        x, pres = z, []
        for l in range(depth):
            a = Ws[l] * x + bs[l]
            if l < depth - 1:
                pres.append(a)
                x = a.applyfunc(s)
            else:
                x = a
        return x, pres

    return Ws, forward, s


def closed_form(Ws, pres_of, s, rho, n: int, d: int, k: int, s2_sign: int = 1, with_M: bool = True):
    """``J`` (block diagonal) and ``M`` from the recursion of equation (1), per sample."""
    t = sp.Symbol("t")

    def s1(x):
        return sp.Subs(sp.Derivative(s(t), t), t, x)

    def s2(x):
        return s2_sign * sp.Subs(sp.Derivative(s(t), (t, 2)), t, x)

    J = sp.zeros(n * k, n * d)
    M = sp.zeros(n * d, n * d)
    for i in range(n):
        pres = pres_of[i]
        Jx = [sp.eye(d)]  # d x_l / d z_i, x_0 = z_i
        for l in range(len(pres)):
            Jx.append(sp.diag(*[s1(a) for a in pres[l]]) * Ws[l] * Jx[-1])
        J[i * k:(i + 1) * k, i * d:(i + 1) * d] = Ws[-1] * Jx[-1]
        g = Ws[-1].T * rho[i * k:(i + 1) * k, 0]  # g_{L-1} = W_L^T rho_i
        Mi = sp.zeros(d, d)
        for l in range(len(pres) - 1, -1, -1):
            Ja = Ws[l] * Jx[l]  # d a_l / d z_i
            Mi += Ja.T * sp.diag(*[s2(pres[l][j]) * g[j] for j in range(len(g))]) * Ja
            g = Ws[l].T * sp.diag(*[s1(a) for a in pres[l]]) * g  # g_{l-1} = W_l^T (s'(a_l) * g_l)
        if with_M:
            M[i * d:(i + 1) * d, i * d:(i + 1) * d] = Mi
    return J, M


def residual(depth: int, loss: str = "quadratic", **mistake) -> sp.Matrix:
    """``H - G - M`` expanded, for the symbolic head of ``depth`` and ``loss``: ``quadratic`` (general),
    ``mse`` (targets ``t``: ``|h - t|^2 / 2n``) or ``mse_views`` (``|h_1 - h_2|^2 / 2``)."""
    n, d, width, k = SHAPES["n"], SHAPES["d"], SHAPES["width"], SHAPES["k"]
    Z = sp.Matrix(n, d, lambda i, j: sp.Symbol(f"z{i}{j}"))
    Ws, forward, s = symbolic_head(depth, d, width, k)
    outs = [forward(Z[i, :].T) for i in range(n)]
    h = sp.Matrix([outs[i][0][c] for i in range(n) for c in range(k)])  # (n k, 1), sample-major
    N = n * k
    y = sp.Matrix(sp.symbols(f"y0:{N}"))
    if loss == "quadratic":
        g = sp.Matrix(N, 1, lambda i, j: sp.Symbol(f"g{i}"))
        A = sp.Matrix(N, N, lambda i, j: sp.Symbol(f"A{min(i, j)}_{max(i, j)}"))
        L_of = (g.T * y)[0] + (y.T * A * y)[0] / 2
    elif loss == "mse":
        T = sp.Matrix(sp.symbols(f"t0:{N}"))
        L_of = ((y - T).T * (y - T))[0] / (2 * n)
    elif loss == "mse_views":
        L_of = ((y[:k, 0] - y[k:, 0]).T * (y[:k, 0] - y[k:, 0]))[0] / 2
    else:
        raise ValueError(f"unknown loss {loss!r}; valid: quadratic, mse, mse_views")
    at_h = dict(zip(y, h))
    rho = sp.Matrix([sp.diff(L_of, v) for v in y]).subs(at_h)  # grad_H L at h(Z)
    HL = sp.hessian(L_of, list(y)).subs(at_h)  # grad^2_H L at h(Z)
    H = sp.hessian(L_of.subs(at_h), list(Z))  # the Hessian of the composition, by sympy's chain rule
    J, M = closed_form(Ws, [o[1] for o in outs], s, rho, n, d, k, **mistake)
    return (H - J.T * HL * J - M).applyfunc(lambda e: sp.expand(e.doit()))


@pytest.mark.parametrize("depth", DEPTHS)
def test_equation_1_is_an_identity_for_every_loss(depth: int) -> None:
    D = residual(depth)
    assert all(e == 0 for e in D), f"depth {depth}: H - G - M has non-zero entries: {[e for e in D if e != 0][:1]}"


@pytest.mark.parametrize("loss", ("mse", "mse_views"))
def test_equation_1_is_an_identity_for_the_closed_form_objectives(loss: str) -> None:
    assert all(e == 0 for e in residual(2, loss))


@pytest.mark.parametrize("mistake", ({"with_M": False}, {"s2_sign": -1}))
def test_negative_control_a_wrong_M_leaves_a_residual(mistake: dict) -> None:
    assert any(e != 0 for e in residual(2, "mse", **mistake))
