"""Equation (1) proven symbolically, of ``mini``'s own code: ``H_eff = G + M`` as an identity of expressions.

Statement: for an MLP head ``h`` (``a_l = W_l x_{l-1} + b_l``, ``x_l = s(a_l)``, ``h = a_L``) and a loss ``L`` of
the whole batch of embeddings, the Hessian of ``Z -> L(h(z_1), ..., h(z_n))`` is ``G + M``,
``G = J^T (grad^2_H L) J``, ``M = blockdiag_i sum_l (da_l/dz_i)^T diag(s''(a_l) * g_l) (da_l/dz_i)``.

What is proven, and of what code. ``mini.hessian.decompose_closed_form`` itself runs here, line for line, on
NumPy object arrays of sympy expressions: every weight, bias and input is a symbol, and the activation is an
undefined function ``s`` registered in ``mini.activations``' table for the run (``value``: ``s(a)``;
``derivatives``: ``s'(a)``, ``s''(a)`` as sympy's derivatives of ``s``), so the proof covers mini's closed form
for every twice-differentiable activation. What runs is mini's: ``head_derivatives`` (the forward recursion
``P_l``), ``interaction_blocks`` (the backward recursion ``g_{l-1} = W_l^T (s'(a_l) * g_l)`` and the sum of
``P_l^T diag(g_l s''(a_l)) P_l``), ``assemble`` (the coupled ``G`` and its symmetrisation) or ``assemble_blocks``
(per-sample blocks), ``block_diagonal``, ``H = G + M``, and the objectives' closed forms. Only the input checks,
which compare values with float64 limits and compute nothing (``check_array``, ``check_batch``'s float64
conversion, ``_real_embeddings``, ``_check_finite``, ``Objective.check``), are replaced by pass-throughs.

The reference is independent of that code: sympy's own Hessian of the scalar ``L(h(Z))``, with ``h(Z)`` mini's
forward pass (``Head.__call__``) and ``L`` the objective's value. The residual ``H_ref - H_mini`` (and
``H_ref - G - M``) is expanded entry by entry in exact rational arithmetic (mini's float constants, such as the
``0.5`` of the symmetrisation, are dyadic and converted exactly) and every entry is the polynomial 0.

Losses: the general quadratic ``L(y) = g^T y + y^T A y / 2`` in the ``n k`` embeddings (symbolic ``g``,
symmetric ``A``; an ``Objective`` with its closed-form gradient and Hessian, through mini's coupled path). Both
sides read ``L`` only through its 2-jet at ``h(Z)``, and ``(g + A h(Z), A)`` ranges over every 2-jet, so this is
the identity for every twice-differentiable loss, coupled across samples or not. mini's own objectives with
closed forms run too: ``mse_targets`` (per-sample blocks, ``assemble_blocks``; dyadic float targets) and
``mse_views`` (coupled).

Shapes proven (``SHAPES``): ``n = 2`` samples (so the loss couples samples and ``G`` has cross blocks), ``d = 2``
inputs, hidden width 2, ``k = 2`` outputs, depths 1, 2 and 3 (depth 3 is the first where the backward recursion
carries ``s'`` between two hidden layers). For other shapes the code runs the same lines with other loop counts
(an argument, not an execution); the numeric checks (``test_eq1_decomposition.py``) cover them.

mini's activation table, proven entry by entry (``test_every_table_entry_is_its_sympy_expression``): each entry's
``value``, ``s'`` and ``s''`` (``mini.activations``, run on object arrays of sympy expressions through a namespace of
sympy's elementwise functions) against the activation's definition written here in sympy (``DEFINITIONS``: ``a
Phi(a)``, ``a / (1 + e^-a)``, ``log(1 + e^a)``, ...) and sympy's first and second derivative of it. The difference
is simplified to 0 for a real ``a`` and on each side of 0 (ReLU's kink: the table holds ``s'`` and ``s''`` almost
everywhere). mini's irrational constants (``1 / sqrt 2``, ``1 / sqrt(2 pi)``) are the exact numbers during the
proof and are checked separately to be those numbers correctly rounded. With the proof above (for every ``s``
whose ``s'``, ``s''`` are its derivatives) this proves equation (1) of mini's closed form over its real table.

Pinned: the depths proven (``DEPTHS``) reach the first depth where the backward recursion carries ``s'``
between two hidden layers: mini's recursion with ``s'`` dropped passes depths 1 and 2 and fails at 3
(``test_the_depths_proven_see_the_recursion_through_two_hidden_layers``); and every identity test checks, along
its own call, that mini's closed form with a mistake in it (``J`` doubled) leaves a residual, so a test whose
reference were mini's own ``G + M`` would fail there.

Negative controls: mini's ``M`` with its sign flipped leaves a residual (the proof is of mini's code, not of a
copy of the formula); and the same control run against a *tautological* reference (``H_ref`` taken from mini's
own ``G + M``) passes the mistake, which is what the control exists to refuse.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest

import mini.heads as mini_heads
import mini.hessian as mini_hessian
import mini.losses as mini_losses
from mini import activations
from mini.heads import Head, parse_head_spec

sp = pytest.importorskip("sympy")

SHAPES = {"n": 2, "d": 2, "width": 2, "k": 2}
DEPTHS = (1, 2, 3)
TARGETS = np.array([[0.5, -1.25], [2.0, 0.75]])  # dyadic: exact as floats and as rationals

s_fn = sp.Function("s")
_t = sp.Symbol("t")


def _elementwise(f: Callable[[Any], Any]) -> Callable[[Any], np.ndarray]:
    return np.vectorize(f, otypes=[object])


SYMBOLIC = activations.Activation(
    "sym",
    lambda xp, a: _elementwise(s_fn)(a),
    lambda xp, a: (_elementwise(lambda e: sp.Subs(sp.Derivative(s_fn(_t), _t), _t, e))(a),
                   _elementwise(lambda e: sp.Subs(sp.Derivative(s_fn(_t), (_t, 2)), _t, e))(a)),
)


@contextmanager
def symbolic_mini() -> Iterator[None]:
    """mini with the symbolic activation ``sym`` registered and its input checks passed through (they compare
    values with float64 limits; object arrays of expressions have none)."""
    mp = pytest.MonkeyPatch()
    try:
        mp.setitem(activations.TABLE, "sym", SYMBOLIC)
        for module in (mini_hessian, mini_heads, mini_losses):
            mp.setattr(module, "check_array", lambda name, x, ndim=None: x)
        mp.setattr(mini_hessian, "check_batch", lambda head, Z: Z)
        mp.setattr(mini_hessian, "_real_embeddings", lambda objective, Hb: Hb)
        mp.setattr(mini_hessian, "_check_finite", lambda name, A: A)
        mp.setattr(mini_losses.Objective, "check", lambda self, Hb: None)
        yield
    finally:
        mp.undo()


def symbolic_head(depth: int, d: int, width: int, k: int) -> Head:
    """A mini ``Head`` of spec ``sym<depth>`` (``linear`` at depth 1) whose weights and biases are symbols."""
    dims = [d] + [width] * (depth - 1) + [k]
    layers = [{"W": np.array([[sp.Symbol(f"W{l}_{i}{j}") for j in range(dims[l])] for i in range(dims[l + 1])],
                             dtype=object),
               "b": np.array([sp.Symbol(f"b{l}_{i}") for i in range(dims[l + 1])], dtype=object)}
              for l in range(depth)]
    return Head(parse_head_spec("linear" if depth == 1 else f"sym{depth}"), layers)


def quadratic_objective(n: int, k: int) -> mini_losses.Objective:
    """``L(y) = g^T y + y^T A y / 2`` in ``y = vec(Hb)`` (sample-major), symbolic ``g`` and symmetric ``A``."""
    N = n * k
    g = np.array([sp.Symbol(f"g{i}") for i in range(N)], dtype=object)
    A = np.array([[sp.Symbol(f"A{min(i, j)}_{max(i, j)}") for j in range(N)] for i in range(N)], dtype=object)

    def fn(Hb):
        y = np.reshape(Hb, (N,))
        return y @ g + (y @ A @ y) / 2

    return mini_losses.Objective("quadratic", fn, grad_fn=lambda Hb: np.reshape(g + A @ np.reshape(Hb, (N,)), (n, k)),
                                 hessian_fn=lambda Hb: np.reshape(A, (n, k, n, k)))


def objective_named(loss: str, n: int, k: int) -> mini_losses.Objective:
    if loss == "quadratic":
        return quadratic_objective(n, k)
    if loss == "mse":
        return mini_losses.mse_targets(TARGETS[:n, :k])
    if loss == "mse_views":
        return mini_losses.mse_views()
    raise ValueError(f"unknown loss {loss!r}; valid: quadratic, mse, mse_views")


def exact(e: Any) -> Any:
    """``e`` with every float replaced by the rational it is (mini's constants are floats), then ``doit`` (the
    ``Subs`` of ``s'``, ``s''`` to derivatives at the pre-activations) and expanded."""
    e = sp.sympify(e)
    return sp.expand(e.xreplace({f: sp.Rational(f) for f in e.atoms(sp.Float)}).doit())


def reference_hessian(head: Head, objective: mini_losses.Objective, Z: np.ndarray) -> Any:
    """sympy's Hessian of the scalar ``L(h(Z))`` in the entries of ``Z``: mini's forward pass and loss value,
    differentiated by sympy's chain rule (no line of mini's closed form)."""
    return sp.hessian(objective.fn(head(Z)), list(Z.ravel()))


def residual(depth: int, loss: str = "quadratic", reference: str = "sympy") -> Any:
    """``H_ref - H_mini`` and ``H_ref - G_mini - M_mini`` expanded, stacked; ``reference="mini"`` takes
    ``H_ref`` from mini's own ``G + M`` (the tautology the negative control must expose)."""
    return residual_unexpanded(depth, loss, reference).applyfunc(exact)


def residual_unexpanded(depth: int, loss: str = "quadratic", reference: str = "sympy") -> Any:
    """``residual`` before its entries are expanded (``any_nonzero`` expands them one at a time)."""
    n, d, width, k = SHAPES["n"], SHAPES["d"], SHAPES["width"], SHAPES["k"]
    with symbolic_mini():
        head = symbolic_head(depth, d, width, k)
        Z = np.array([[sp.Symbol(f"z{i}{j}") for j in range(d)] for i in range(n)], dtype=object)
        objective = objective_named(loss, n, k)
        dec = mini_hessian.decompose_closed_form(head, objective, Z)
        H_ref = reference_hessian(head, objective, Z) if reference == "sympy" else sp.Matrix(dec.G + dec.M)
        return sp.Matrix.vstack(H_ref - sp.Matrix(dec.H), H_ref - sp.Matrix(dec.G) - sp.Matrix(dec.M))


def any_nonzero(R: Any) -> bool:
    """Some entry of ``R`` expands to a non-zero polynomial (stops at the first)."""
    return any(exact(e) != 0 for e in R)


def doubled_J(mp: pytest.MonkeyPatch) -> None:
    """mini's head Jacobian doubled in its closed form (a mistake visible at every depth: ``G`` is ``4 J^T A J``)."""
    original = mini_hessian.head_derivatives
    mp.setattr(mini_hessian, "head_derivatives",
               lambda head, Z: (lambda der: dataclasses.replace(der, J=2 * der.J))(original(head, Z)))


def check_identity(depth: int, loss: str = "quadratic", reference: str = "sympy") -> None:
    """Equation (1) of mini's closed form against ``reference``; and, along the same call, the check's own control:
    with mini's ``J`` doubled the residual is not 0 (a reference built from mini's closed form would cancel it)."""
    R = residual(depth, loss, reference)
    assert all(e == 0 for e in R), f"depth {depth}: H - G - M has non-zero entries: {[e for e in R if e != 0][:1]}"
    with pytest.MonkeyPatch.context() as mp:
        doubled_J(mp)
        assert any_nonzero(residual_unexpanded(depth, loss, reference)), (
            f"depth {depth}, {loss}: mini's J doubled leaves no residual against the {reference} reference")


@pytest.mark.parametrize("depth", DEPTHS)
def test_equation_1_is_an_identity_of_minis_closed_form_for_every_loss(depth: int) -> None:
    check_identity(depth)


@pytest.mark.parametrize("loss", ("mse", "mse_views"))
def test_equation_1_is_an_identity_of_minis_closed_form_objectives(loss: str) -> None:
    check_identity(2, loss)


def recursion_without_s1(mp: pytest.MonkeyPatch) -> None:
    """mini's backward recursion ``g_{l-1} = W_l^T g_l`` without ``s'(a_l)`` (``s'`` is read nowhere else in
    ``interaction_blocks``): the mistake first shows at depth 3, where ``g`` passes a hidden layer."""
    original = mini_hessian.interaction_blocks

    def blocks(der, rho):
        return original(dataclasses.replace(der, s1=[np.ones_like(s1) for s1 in der.s1]), rho)

    mp.setattr(mini_hessian, "interaction_blocks", blocks)


def test_the_depths_proven_see_the_recursion_through_two_hidden_layers() -> None:
    """With ``s'`` dropped from mini's backward recursion, the proof over ``DEPTHS`` fails; the mistake is invisible
    at depths 1 and 2 (shown), so the depths proven must reach 3."""
    with pytest.MonkeyPatch.context() as mp:
        recursion_without_s1(mp)
        assert not any_nonzero(residual_unexpanded(2)), "the recursion mistake shows at depth 2 already"
        failing = [depth for depth in DEPTHS if depth > 2 and any_nonzero(residual_unexpanded(depth))]
    assert failing, f"mini's recursion without s' passes the proof at every depth of {DEPTHS}"


def negated_M(mp: pytest.MonkeyPatch) -> None:
    """mini's interaction blocks with the wrong sign (the mistake the control must see)."""
    original = mini_hessian.interaction_blocks
    mp.setattr(mini_hessian, "interaction_blocks", lambda der, rho: -original(der, rho))


def check_sees_negated_M(reference: str) -> None:
    """The negative control: with mini's ``M`` negated, the residual against ``reference`` is not 0."""
    with pytest.MonkeyPatch.context() as mp:
        negated_M(mp)
        R = residual(2, "mse", reference)
    assert any(e != 0 for e in R), f"mini's M negated, and the residual against the {reference} reference is 0"


def test_negative_control_minis_M_with_the_wrong_sign_leaves_a_residual() -> None:
    check_sees_negated_M("sympy")


def test_negative_control_a_tautological_reference_fails_the_control() -> None:
    """The control above is what refuses a tautology: against ``H_ref = G_mini + M_mini`` mini's negated ``M``
    leaves no residual, so the control fails; against sympy's Hessian it does not."""
    with pytest.raises(AssertionError, match="residual against the mini reference is 0"):
        check_sees_negated_M("mini")


# ------------------------------------------------------------------------------------------------
# mini's activation table, entry by entry
# ------------------------------------------------------------------------------------------------


class SympyArrays:
    """The elementwise functions ``mini.activations`` calls on its namespace ``xp``, on object arrays of sympy
    expressions."""

    tanh = staticmethod(_elementwise(sp.tanh))
    exp = staticmethod(_elementwise(sp.exp))
    erf = staticmethod(_elementwise(sp.erf))
    maximum = staticmethod(_elementwise(sp.Max))
    logaddexp = staticmethod(_elementwise(lambda x, y: sp.log(sp.exp(x) + sp.exp(y))))
    where = staticmethod(_elementwise(lambda c, x, y: sp.Piecewise((x, c), (y, True))))

    @staticmethod
    def zeros_like(a):
        return np.full(np.shape(a), sp.Integer(0), dtype=object)

    @staticmethod
    def ones_like(a):
        return np.full(np.shape(a), sp.Integer(1), dtype=object)


_a = sp.Symbol("a", real=True)
DEFINITIONS = {  # each activation of the grammar, from its definition (docs/paper.md), in sympy
    "identity": _a,
    "relu": sp.Piecewise((_a, _a > 0), (0, True)),  # max(a, 0)
    "gelu": _a * (1 + sp.erf(_a / sp.sqrt(2))) / 2,  # a Phi(a)
    "swish": _a / (1 + sp.exp(-_a)),  # a sigma(a)
    "tanh": sp.tanh(_a),
    "softplus": sp.log(1 + sp.exp(_a)),
}
EXACT_CONSTANTS = {"_INV_SQRT2": 1 / sp.sqrt(2), "_INV_SQRT2PI": 1 / sp.sqrt(2 * sp.pi)}  # mini's float constants


def entry(name: str) -> activations.Activation:
    return activations.get(name)


def is_zero(e: Any) -> bool:
    """``e`` simplifies to 0 (in exponentials: ``tanh`` and ``sigma`` forms meet there)."""
    return sp.simplify(sp.expand(sp.sympify(e).rewrite(sp.exp))) == 0


def table_values(name: str, a: Any) -> tuple[Any, Any, Any]:
    """mini's ``value``, ``s'``, ``s''`` of activation ``name`` at the sympy expression ``a``: the entry's own code on
    a one-element object array, its float constants the exact numbers, ``erf`` sympy's."""
    x = np.array([a], dtype=object)
    with pytest.MonkeyPatch.context() as mp:
        for constant, value in EXACT_CONSTANTS.items():
            mp.setattr(activations, constant, value)
        mp.setattr(activations, "erf", lambda xp, u: xp.erf(u))
        e = entry(name)
        s0 = e.value(SympyArrays, x)
        s1, s2 = e.derivatives(SympyArrays, x)
    return tuple(sp.nsimplify(np.asarray(v, dtype=object).ravel()[0], rational=True) for v in (s0, s1, s2))


def test_every_activation_of_the_table_has_a_definition_here() -> None:
    missing = sorted(set(activations.names()) - set(DEFINITIONS))
    assert not missing, f"activations without a sympy definition (so without a proof): {missing}"


@pytest.mark.parametrize("name", sorted(DEFINITIONS))
def test_every_table_entry_is_its_sympy_expression(name: str) -> None:
    """``value == s``, ``s' == ds/da``, ``s'' == d^2 s/da^2`` on each side of 0 and, unless ``s`` is piecewise (its
    table compares ``a > 0``, which a real symbol cannot decide), for a real ``a``."""
    s = DEFINITIONS[name]
    p = sp.Symbol("p", positive=True)
    for at in (p, -p) if s.has(sp.Piecewise) else (_a, p, -p):
        want = [s.subs(_a, at), sp.diff(s, _a).subs(_a, at), sp.diff(s, _a, 2).subs(_a, at)]
        got = table_values(name, at)
        for order, (g, w) in enumerate(zip(got, want)):
            assert is_zero(g - w), f"{name}: the table's s{chr(39) * order} at a = {at} is {g}, not {w}"


@pytest.mark.parametrize("constant", sorted(EXACT_CONSTANTS))
def test_minis_constants_are_the_exact_numbers_to_one_ulp(constant: str) -> None:
    """Each is computed in float64 by two roundings (``1.0 / math.sqrt(...)``), so within one ulp of the exact number
    (``_INV_SQRT2`` is one ulp off the correctly rounded value: 6.3e-17 from ``1 / sqrt 2``, half an ulp is 5.6e-17)."""
    value = getattr(activations, constant)
    error = abs(sp.Rational(value) - EXACT_CONSTANTS[constant])
    assert sp.N(error, 60) <= sp.Rational(float(np.spacing(value))), f"{constant} = {value!r} is not 1/sqrt(...)"
