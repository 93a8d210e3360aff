"""Proposition 5.2: invariance makes the pullback metric singular on the augmentation tangent space.

Statement (docs/paper.md, paraphrase): if a smooth head is locally invariant to a continuous augmentation,
``h(g_t . z) = h(z)`` for small ``t``, then ``G(z) = J_h(z)^T J_h(z)`` is singular on
``V_aug(z) = span d/dt g_t . z |_{t=0}``: ``v^T G(z) v = 0`` for every ``v`` in ``V_aug(z)``.

Exact hypotheses checked here: the group acts on ``Z`` (the backbone representation) linearly,
``g_t = expm(t A)``; the head is ``h = mlp o q`` with ``q`` a vector of polynomial (or, for the
scaling, degree-0 homogeneous) invariants of the action and ``mlp`` a smooth head of the shared
grammar (gelu / swish / tanh / softplus), so ``h`` is invariant for all ``t`` and smooth at ``z``
(``z`` off the fixed set, e.g. ``z != 0`` for the scaling). Differentiating ``h(g_t z) = h(z)`` at
``t = 0`` gives ``J_h(z) A z = 0``, hence ``v^T G v = |J_h v|^2 = 0``. Groups: the three toy manifolds
(hue rotation, band-limited shift, scaling) and random torus actions ``T^g`` rotating ``g`` random
orthogonal planes of ``R^d`` (``V_aug`` is then ``g``-dimensional).

Numerically ``|J_h v|`` is a cancellation, so it is compared with the head's own scale:
``|J_h v| <= VANISH_RTOL * |J_h|_F |v|``; read off the assembled ``G`` (whose own rounding is
``~ eps tr(G)``), ``v^T G v <= METRIC_RTOL * tr(G) |v|^2``.
Negative control: the same MLP applied to ``z`` itself (not invariant) has
``|J_h v| > CONTROL_FLOOR * |J_h|_F |v|``: the property fails, so the check can fail.

The finite (quotient) statement: the whole orbit ``{g_t . z}`` maps to one point, not only its tangent.
For ``ORBIT_POINTS`` finite group elements (the toy groups over a full period, or the training range
for the non-compact scaling; random angles of the torus), ``|h(g_t z) - h(z)| <= ORBIT_RTOL * s`` with
``s = |h(z)| + |J_h(z)|_F |z|`` the head's own output scale; the control head moves the orbit by more
than ``CONTROL_FLOOR * |J_h|_F max_t |g_t z - z|``.

Approximate invariance: ``h_delta(z) = mlp(q(z) + delta P z)`` (``approximately_invariant_head``, a
random ``P`` with ``|P z| = 1``) for ``delta`` over ``DELTAS`` (five decades, 1e-3 ... 1e-7). Since
``J_q v = 0``, ``J_h v = delta J_mlp(q + delta P z) P v``: ``v^T G v = delta^2 L (1 + O(delta))`` with the
exact limit ``L = |J_mlp(q(z)) P v|^2``, and the orbit moves by ``delta D (1 + O(delta))``,
``D = max_t |J_mlp(q(z)) P (g_t z - z)|``. ``L`` and ``D`` are computed from the MLP's own Jacobian at
``q(z)``, not from ``h_delta``; checked: ``v^T G v / (delta^2 L)`` and the displacement over ``delta D``
within ``PROPORTION_RTOL`` of 1 at every ``delta``, and log-log slopes of 2 and 1 within ``SLOPE_TOL``.
``v^T G v`` is read as ``|J_h v|^2`` (the same number, ``G = J^T J``): assembling ``G`` first costs its
rounding, ``eps tr(G)``, which at ``delta = 1e-6`` is the size of ``v^T G v`` itself (the earlier form of
this check, which did so, failed at d=8, gelu3, seed 7218). Premise (``material_leak`` in ``premises``,
budgeted, pinned by a boundary instance at 5e-6): the leak is seen at first order, ``L`` above the
threshold x ``|J_mlp|_F^2 |P v|^2`` (when ``J_mlp P v = 0`` the next order, ``delta^4``, takes over, a case
the statement does not describe). The deltas scale with ``sqrt`` of that ratio, the size of the first-order
leak against which the ``O(delta)`` corrections are measured.

The measuring functions themselves (``head_jacobian``, ``pullback_metric``, ``orbit_gain``,
``orbit_displacement``) are checked where the answer is known in closed form and not zero, since on an
invariant head every one of them returns 0 whatever it computes: a linear head ``h(z) = W z + b`` has
``J = W``, ``G = W^T W``, and moves the orbit point ``g_t z = expm(t A) z`` by ``|W (g_t z - z)|``; an
isotropic ``G = c I`` has gain 1 in every direction and ``G = diag(lambda)`` has gain
``lambda_i / mean(lambda)`` along ``e_i``. Each to ``MEASURE_RTOL`` of its own scale.

Heads are drawn across the grammar: smooth activations, depths 2-4, hidden widths 2-8, outputs 2-6.
"""

from __future__ import annotations

import numpy as np
from _invariance_strategies import Torus
from hypothesis import example, given
from hypothesis import strategies as st
from scipy.linalg import expm

from conftest import boundary, premise, seeds
from mini.heads import ACTIVATIONS, init_head
from mini.invariance import (
    approximately_invariant_head,
    head_jacobian,
    invariant_head,
    orbit_displacement,
    orbit_gain,
    pullback_metric,
)
from mini.manifolds import MANIFOLDS, make_manifold

VANISH_RTOL = 1e-10  # |J v| / (|J|_F |v|) of an invariant head: float64 cancellation is ~1e-15
METRIC_RTOL = 1e-12  # v^T G v / (tr(G) |v|^2) from the assembled G: rounding of G itself is ~d * 1e-16
CONTROL_FLOOR = 1e-4  # a non-invariant random head sees the orbit direction far above this
ORBIT_RTOL = 1e-10  # |h(g_t z) - h(z)| / (|h(z)| + |J_h|_F |z|): rounding of the invariants is ~1e-15
ORBIT_POINTS = 12
DELTAS = 10.0 ** -np.arange(3.0, 8.0)  # 1e-3 ... 1e-7 (the leak P is scaled to |P z| = 1)
PROPORTION_RTOL = 0.25  # v^T G v / (delta^2 L) within 25 % of 1 (O(delta) corrections)
SLOPE_TOL = 0.05  # log-log slope of v^T G v against delta within 2 +- 0.05 (1 +- 0.05 for the orbit)
MEASURE_RTOL = 1e-12  # closed-form values of the measuring functions, relative to their own scale
SMOOTH = tuple(a for a in ACTIVATIONS if a != "relu")


@st.composite
def head_shapes(draw) -> dict:
    """A smooth head's spec (depth 2-4), hidden widths (2-8) and output size (2-6)."""
    depth = draw(st.integers(2, 4))
    return {"spec": f"{draw(st.sampled_from(SMOOTH))}{depth}", "k": draw(st.integers(2, 6)),
            "widths": [draw(st.integers(2, 8)) for _ in range(depth - 1)]}


def make_head(shape: dict, q: int, rng: np.random.Generator):
    return init_head(shape["spec"], q, shape["k"], shape["widths"], rng)


PINNED_HEAD = {"spec": "gelu3", "k": 4, "widths": [8, 8]}


def relative_gain(J: np.ndarray, V: np.ndarray) -> float:
    """``max_v |J v| / (|J|_F |v|)`` over the columns ``v`` of ``V`` (d, m)."""
    return float(np.max(np.linalg.norm(J @ V, axis=0) / (np.linalg.norm(J) * np.linalg.norm(V, axis=0))))


@given(name=st.sampled_from(MANIFOLDS), shape=head_shapes(), seed=seeds)
@example(name="shift", shape=PINNED_HEAD, seed=0)
def test_invariant_head_metric_vanishes_on_toy_orbits(name, shape, seed):
    """Hue, shift and scaling: an invariant head's ``G`` annihilates ``V_aug(z) = A z``; the control does not."""
    rng = np.random.default_rng(seed)
    M = make_manifold(name, seed=seed % 7)
    z = M.sample(1, rng).X[int(rng.integers(M.n_classes))]
    v = M.tangent(z[None, :])[0][:, None]  # (d, 1)
    q = M.invariants(z[None, :]).shape[1]
    mlp = make_head(shape, q, rng)
    J = head_jacobian(invariant_head(M.invariants, mlp), z)
    assert relative_gain(J, v) <= VANISH_RTOL
    G = pullback_metric(invariant_head(M.invariants, mlp), z)
    assert float(v[:, 0] @ G @ v[:, 0]) <= METRIC_RTOL * np.trace(G) * float(v[:, 0] @ v[:, 0])
    # Negative control: the same kind of head on z itself is not invariant.
    J_control = head_jacobian(make_head(shape, M.dim, rng), z)
    assert relative_gain(J_control, v) > CONTROL_FLOOR


def torus_instance(d: int, data, seed: int) -> tuple[int, np.random.Generator, Torus, np.ndarray]:
    """A random ``T^g`` on ``R^d`` (``g`` drawn in ``[1, d // 2]``; 1 in the explicit examples), the generator
    that made it (the head's weights come from it next) and a point ``z``."""
    g = data.draw(st.integers(1, d // 2)) if data is not None else 1
    rng = np.random.default_rng(seed)
    torus = Torus(d, g, rng)
    return g, rng, torus, rng.standard_normal(d)


@given(d=st.integers(3, 9), data=st.data(), shape=head_shapes(), seed=seeds)
@example(d=4, data=None, shape={"spec": "swish2", "k": 3, "widths": [6]}, seed=1)
def test_invariant_head_metric_vanishes_on_torus_orbits(d, data, shape, seed):
    """Random ``T^g`` on ``R^d``: every direction of the ``g``-dimensional ``V_aug(z)`` is null for ``G``."""
    g, rng, torus, z = torus_instance(d, data, seed)
    V = torus.tangents(z)
    mlp = make_head(shape, d - g, rng)
    head = invariant_head(torus.invariants, mlp)
    assert relative_gain(head_jacobian(head, z), V) <= VANISH_RTOL
    gains = orbit_gain(pullback_metric(head, z), V.T)
    assert np.all(gains <= METRIC_RTOL * d)
    control = make_head(shape, d, rng)
    assert relative_gain(head_jacobian(control, z), V) > CONTROL_FLOOR


def output_scale(fn, z: np.ndarray) -> float:
    """``|h(z)| + |J_h(z)|_F |z|``: the size of the head's output and of its variation over ``|z|``."""
    return float(np.linalg.norm(fn(z[None, :])[0]) + np.linalg.norm(head_jacobian(fn, z)) * np.linalg.norm(z))


def toy_orbit(M, z: np.ndarray) -> np.ndarray:
    """``g_t . z`` (ORBIT_POINTS, d) with ``t = 0`` first: a full period (hue, shift) or the training range."""
    ts = np.concatenate([[0.0], M.orbit_params(ORBIT_POINTS)[1:]]) if M.period is not None else \
        np.concatenate([[0.0], np.linspace(*M.train_range, ORBIT_POINTS - 1)])
    return M.orbits(z[None, :], ts)[0]


@given(name=st.sampled_from(MANIFOLDS), shape=head_shapes(), seed=seeds)
@example(name="scale", shape={"spec": "tanh2", "k": 3, "widths": [8]}, seed=0)
def test_invariant_head_maps_whole_toy_orbit_to_one_point(name, shape, seed):
    """Quotient statement on hue, shift, scaling: ``h(g_t . z) = h(z)`` for finite ``t``; control moves."""
    rng = np.random.default_rng(seed)
    M = make_manifold(name, seed=seed % 7)
    z = M.sample(1, rng).X[int(rng.integers(M.n_classes))]
    orbit = toy_orbit(M, z)
    mlp = make_head(shape, M.invariants(z[None, :]).shape[1], rng)
    head = invariant_head(M.invariants, mlp)
    assert np.all(orbit_displacement(head, orbit) <= ORBIT_RTOL * output_scale(head, z))
    control = make_head(shape, M.dim, rng)
    reach = float(np.max(np.linalg.norm(orbit - z, axis=1)))
    assert orbit_displacement(control, orbit).max() > CONTROL_FLOOR * np.linalg.norm(head_jacobian(control, z)) * reach


@given(d=st.integers(3, 9), data=st.data(), shape=head_shapes(), seed=seeds)
@example(d=4, data=None, shape={"spec": "swish2", "k": 3, "widths": [6]}, seed=1)
def test_invariant_head_maps_whole_torus_orbit_to_one_point(d, data, shape, seed):
    """Quotient statement on random ``T^g``: random finite angles ``t`` in ``[-pi, pi]^g``; control moves."""
    g, rng, torus, z = torus_instance(d, data, seed)
    orbit = np.stack([z] + [torus.act(z, t) for t in rng.uniform(-np.pi, np.pi, (ORBIT_POINTS - 1, g))])
    head = invariant_head(torus.invariants, make_head(shape, d - g, rng))
    assert np.all(orbit_displacement(head, orbit) <= ORBIT_RTOL * output_scale(head, z))
    control = make_head(shape, d, rng)
    reach = float(np.max(np.linalg.norm(orbit - z, axis=1)))
    assert orbit_displacement(control, orbit).max() > CONTROL_FLOOR * np.linalg.norm(head_jacobian(control, z)) * reach


def log_slope(deltas: np.ndarray, values: np.ndarray) -> float:
    return float(np.polyfit(np.log(deltas), np.log(values), 1)[0])


def leak_ratio(J_mlp: np.ndarray, P: np.ndarray, v: np.ndarray) -> float:
    """``|J_mlp P v|^2 / (|J_mlp|_F^2 |P v|^2)``: how much of the leak the MLP sees at first order."""
    return float(np.sum((J_mlp @ P @ v) ** 2) / (np.sum(J_mlp**2) * np.sum((P @ v) ** 2)))


def leak_at_ratio(J_mlp: np.ndarray, P: np.ndarray, v: np.ndarray, z: np.ndarray, target: float) -> np.ndarray:
    """``P`` changed along ``v`` only so that ``leak_ratio = target``: ``P v`` moved towards ``null(J_mlp)``."""
    w = P @ v
    _, _, Vt = np.linalg.svd(J_mlp)
    N = Vt[J_mlp.shape[0]:].T  # null(J_mlp), (d - 1, d - 1 - k)
    w_null = N @ (N.T @ w)
    lo, hi = 0.0, 1.0  # leak_ratio of w_null + e (w - w_null) rises from 0 with e: bisect for the target
    for _ in range(200):
        e = 0.5 * (lo + hi)
        Pe = P + np.outer(w_null + e * (w - w_null) - w, v) / (v @ v)
        lo, hi = (e, hi) if leak_ratio(J_mlp, Pe, v) < target else (lo, e)
    return Pe / np.linalg.norm(Pe @ z)


def check_leak(d: int, shape: dict, seed: int, target_ratio: float | None = None) -> float:
    rng = np.random.default_rng(seed)
    torus = Torus(d, 1, rng)
    z = rng.standard_normal(d)
    v = torus.tangents(z)[:, 0]
    orbit = np.stack([z] + [torus.act(z, t) for t in rng.uniform(-np.pi, np.pi, (ORBIT_POINTS - 1, 1))])
    mlp = make_head(shape, d - 1, rng)
    P = rng.standard_normal((d - 1, d))
    P = P / np.linalg.norm(P @ z)  # |delta P z| = delta: delta is the leak's size at z
    J_mlp = head_jacobian(mlp, torus.invariants(z[None, :])[0])  # (k, d - 1), at delta = 0
    if target_ratio is not None:
        P = leak_at_ratio(J_mlp, P, v, z, target_ratio)
    ratio = leak_ratio(J_mlp, P, v)
    premise("material_leak", ratio, f"Prop 5.2 leak at d={d}, {shape}, seed {seed}")
    L = float(np.sum((J_mlp @ P @ v) ** 2))
    D = float(np.max(np.linalg.norm((orbit - z) @ P.T @ J_mlp.T, axis=1)))
    # The O(delta) corrections are relative to the first-order leak sqrt(L): deltas scale with sqrt(ratio).
    deltas = DELTAS * min(1.0, float(np.sqrt(ratio)))
    quad, moved = [], []
    for delta in deltas:
        head = approximately_invariant_head(torus.invariants, mlp, P, delta)
        Jv = head_jacobian(head, z) @ v
        quad.append(float(Jv @ Jv))  # v^T G v with G = J^T J, read without assembling G
        moved.append(float(orbit_displacement(head, orbit).max()))
    quad, moved = np.array(quad), np.array(moved)
    assert np.all(np.abs(quad / (deltas**2 * L) - 1.0) <= PROPORTION_RTOL), quad / (deltas**2 * L)
    assert np.all(np.abs(moved / (deltas * D) - 1.0) <= PROPORTION_RTOL), moved / (deltas * D)
    assert abs(log_slope(deltas, quad) - 2.0) <= SLOPE_TOL
    assert abs(log_slope(deltas, moved) - 1.0) <= SLOPE_TOL
    # delta = 0 is the invariant head: v^T G v vanishes to the rounding of G
    G0 = pullback_metric(approximately_invariant_head(torus.invariants, mlp, P, 0.0), z)
    assert float(v @ G0 @ v) <= METRIC_RTOL * np.trace(G0) * float(v @ v)
    return ratio


@given(d=st.integers(3, 9), shape=head_shapes(), seed=seeds)
@example(d=5, shape={"spec": "gelu2", "k": 3, "widths": [6]}, seed=0)
@example(d=8, shape={"spec": "gelu3", "k": 3, "widths": [6, 6]}, seed=7218)  # v^T G v at G's rounding at 1e-6
def test_approximately_invariant_head_metric_scales_with_delta_squared(d, shape, seed):
    """``h_delta = mlp(q(z) + delta P z)`` on a random ``T^1``: ``v^T G v = delta^2 L (1 + O(delta))`` and the
    finite orbit's displacement ``delta D (1 + O(delta))``, ``L``, ``D`` from the MLP's Jacobian at ``q(z)``."""
    check_leak(d, shape, seed)


def test_material_leak_boundary_instance():
    """The ``material_leak`` premise's boundary: the leak moved towards ``null(J_mlp)`` until the MLP sees
    ``5e-6`` of it at first order; the delta^2 law must be asserted and hold there (a premise widened 10x
    sets the instance aside: a failure)."""
    ratio = check_leak(6, {"spec": "gelu2", "k": 2, "widths": [6]}, 0, target_ratio=5e-6)
    boundary("material_leak", ratio, "Prop 5.2, leak near null(J_mlp)")


# --------------------------------------------------------------------------------------------
# The measuring functions where their answer is known in closed form and not zero
# --------------------------------------------------------------------------------------------


@given(d=st.integers(2, 9), data=st.data(), k=st.integers(1, 7), seed=seeds)
@example(d=4, data=None, k=3, seed=0)
def test_measuring_functions_on_a_linear_head_along_a_rotation_orbit(d, data, k, seed):
    """``h(z) = W z + b``: ``head_jacobian = W``, ``pullback_metric = W^T W``, ``orbit_displacement`` of
    ``g_t z = expm(t A) z`` equal to ``|W (g_t z - z)|`` (non-zero), ``orbit_gain`` along ``A z`` equal to
    ``(|W A z|^2 / |A z|^2) / (|W|_F^2 / d)``."""
    _, rng, torus, z = torus_instance(d, data, seed)
    W, b = rng.standard_normal((k, d)), rng.standard_normal(k)
    head = init_head("linear", d, k, 1, rng).with_layers([{"W": W, "b": b}])
    J = head_jacobian(head, z)
    assert J.shape == (k, d) and np.abs(J - W).max() <= MEASURE_RTOL * np.abs(W).max()
    G = pullback_metric(head, z)
    assert np.abs(G - W.T @ W).max() <= MEASURE_RTOL * np.abs(W.T @ W).max()
    A = torus.generators()[0]
    ts = rng.uniform(-np.pi, np.pi, ORBIT_POINTS - 1)
    orbit = np.stack([z] + [expm(t * A) @ z for t in ts])  # the group's own exponential, not Torus.act
    expected = np.linalg.norm((orbit - z) @ W.T, axis=1)
    moved = orbit_displacement(head, orbit)
    assert moved.shape == (ORBIT_POINTS,) and moved[0] == 0.0
    assert np.abs(moved - expected).max() <= MEASURE_RTOL * (np.linalg.norm(W, 2) * np.linalg.norm(z))
    v = A @ z
    gain = orbit_gain(G, v[None, :])[0]
    expected_gain = (np.sum((W @ v) ** 2) / (v @ v)) / (np.sum(W**2) / d)
    assert abs(gain - expected_gain) <= MEASURE_RTOL * max(1.0, expected_gain)


@given(d=st.integers(1, 9), scale=st.floats(1e-6, 1e6), seed=seeds)
def test_orbit_gain_is_one_for_an_isotropic_metric_and_lambda_over_mean_on_a_diagonal(d, scale, seed):
    """``G = c I``: gain 1 along every direction (any ``c > 0``); ``G = diag(lambda)``: gain
    ``lambda_i / mean(lambda)`` along ``e_i``, and 0 where ``lambda_i = 0``."""
    rng = np.random.default_rng(seed)
    V = rng.standard_normal((3, d))
    assert np.abs(orbit_gain(scale * np.eye(d), V) - 1.0).max() <= MEASURE_RTOL
    lam = scale * rng.uniform(0.0, 1.0, d)
    if d > 1:
        lam[rng.integers(d)] = 0.0  # a direction the metric does not see: gain exactly 0
    gains = orbit_gain(np.diag(lam), np.eye(d))
    assert np.abs(gains - lam / lam.mean()).max() <= MEASURE_RTOL * (lam.max() / lam.mean())
