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
random ``P`` with ``|P z| = 1``) for ``delta`` over ``DELTAS`` (five decades). Then ``v^T G v = delta^2 |J_mlp P v|^2``
(1 + O(delta)) and the orbit moves by O(delta): checked as ``v^T G v / delta^2`` and
``max_t |h(g_t z) - h(z)| / delta`` agreeing across the decades within ``PROPORTION_RTOL`` (relative to
their value at the smallest ``delta``), with a log-log slope of 2 (resp. 1) within ``SLOPE_TOL``.
"""

from __future__ import annotations

import numpy as np
from _invariance_strategies import Torus
from conftest import seeds, smooth_specs
from hypothesis import example, given
from hypothesis import strategies as st

from mini.heads import init_head
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
DELTAS = 10.0 ** -np.arange(2.0, 7.0)  # 1e-2 ... 1e-6 (the leak P is scaled to |P z| = 1)
PROPORTION_RTOL = 0.25  # v^T G v / delta^2 within 25 % of its small-delta value (O(delta) corrections)
SLOPE_TOL = 0.05  # log-log slope of v^T G v against delta within 2 +- 0.05 (1 +- 0.05 for the orbit)


def relative_gain(J: np.ndarray, V: np.ndarray) -> float:
    """``max_v |J v| / (|J|_F |v|)`` over the columns ``v`` of ``V`` (d, m)."""
    return float(np.max(np.linalg.norm(J @ V, axis=0) / (np.linalg.norm(J) * np.linalg.norm(V, axis=0))))


@given(name=st.sampled_from(MANIFOLDS), spec=smooth_specs, k=st.integers(2, 6), seed=seeds)
@example(name="shift", spec="gelu3", k=4, seed=0)
def test_invariant_head_metric_vanishes_on_toy_orbits(name, spec, k, seed):
    """Hue, shift and scaling: an invariant head's ``G`` annihilates ``V_aug(z) = A z``; the control does not."""
    rng = np.random.default_rng(seed)
    M = make_manifold(name, seed=seed % 7)
    z = M.sample(1, rng).X[int(rng.integers(M.n_classes))]
    v = M.tangent(z[None, :])[0][:, None]  # (d, 1)
    q = M.invariants(z[None, :]).shape[1]
    mlp = init_head(spec, q, k, 8, rng)
    J = head_jacobian(invariant_head(M.invariants, mlp), z)
    assert relative_gain(J, v) <= VANISH_RTOL
    G = pullback_metric(invariant_head(M.invariants, mlp), z)
    assert float(v[:, 0] @ G @ v[:, 0]) <= METRIC_RTOL * np.trace(G) * float(v[:, 0] @ v[:, 0])
    # Negative control: the same kind of head on z itself is not invariant.
    J_control = head_jacobian(init_head(spec, M.dim, k, 8, rng), z)
    assert relative_gain(J_control, v) > CONTROL_FLOOR


def torus_instance(d: int, data, seed: int) -> tuple[int, np.random.Generator, Torus, np.ndarray]:
    """A random ``T^g`` on ``R^d`` (``g`` drawn in ``[1, d // 2]``; 1 in the explicit examples), the generator
    that made it (the head's weights come from it next) and a point ``z``."""
    g = data.draw(st.integers(1, d // 2)) if data is not None else 1
    rng = np.random.default_rng(seed)
    torus = Torus(d, g, rng)
    return g, rng, torus, rng.standard_normal(d)


@given(d=st.integers(3, 9), data=st.data(), spec=smooth_specs, seed=seeds)
@example(d=4, data=None, spec="swish2", seed=1)
def test_invariant_head_metric_vanishes_on_torus_orbits(d, data, spec, seed):
    """Random ``T^g`` on ``R^d``: every direction of the ``g``-dimensional ``V_aug(z)`` is null for ``G``."""
    g, rng, torus, z = torus_instance(d, data, seed)
    V = torus.tangents(z)
    mlp = init_head(spec, d - g, 3, 6, rng)
    head = invariant_head(torus.invariants, mlp)
    assert relative_gain(head_jacobian(head, z), V) <= VANISH_RTOL
    gains = orbit_gain(pullback_metric(head, z), V.T)
    assert np.all(gains <= METRIC_RTOL * d)
    control = init_head(spec, d, 3, 6, rng)
    assert relative_gain(head_jacobian(control, z), V) > CONTROL_FLOOR


def output_scale(fn, z: np.ndarray) -> float:
    """``|h(z)| + |J_h(z)|_F |z|``: the size of the head's output and of its variation over ``|z|``."""
    return float(np.linalg.norm(fn(z[None, :])[0]) + np.linalg.norm(head_jacobian(fn, z)) * np.linalg.norm(z))


def toy_orbit(M, z: np.ndarray) -> np.ndarray:
    """``g_t . z`` (ORBIT_POINTS, d) with ``t = 0`` first: a full period (hue, shift) or the training range."""
    ts = np.concatenate([[0.0], M.orbit_params(ORBIT_POINTS)[1:]]) if M.period is not None else \
        np.concatenate([[0.0], np.linspace(*M.train_range, ORBIT_POINTS - 1)])
    return M.orbits(z[None, :], ts)[0]


@given(name=st.sampled_from(MANIFOLDS), spec=smooth_specs, k=st.integers(2, 6), seed=seeds)
@example(name="scale", spec="tanh2", k=3, seed=0)
def test_invariant_head_maps_whole_toy_orbit_to_one_point(name, spec, k, seed):
    """Quotient statement on hue, shift, scaling: ``h(g_t . z) = h(z)`` for finite ``t``; control moves."""
    rng = np.random.default_rng(seed)
    M = make_manifold(name, seed=seed % 7)
    z = M.sample(1, rng).X[int(rng.integers(M.n_classes))]
    orbit = toy_orbit(M, z)
    mlp = init_head(spec, M.invariants(z[None, :]).shape[1], k, 8, rng)
    head = invariant_head(M.invariants, mlp)
    assert np.all(orbit_displacement(head, orbit) <= ORBIT_RTOL * output_scale(head, z))
    control = init_head(spec, M.dim, k, 8, rng)
    reach = float(np.max(np.linalg.norm(orbit - z, axis=1)))
    assert orbit_displacement(control, orbit).max() > CONTROL_FLOOR * np.linalg.norm(head_jacobian(control, z)) * reach


@given(d=st.integers(3, 9), data=st.data(), spec=smooth_specs, seed=seeds)
@example(d=4, data=None, spec="swish2", seed=1)
def test_invariant_head_maps_whole_torus_orbit_to_one_point(d, data, spec, seed):
    """Quotient statement on random ``T^g``: random finite angles ``t`` in ``[-pi, pi]^g``; control moves."""
    g, rng, torus, z = torus_instance(d, data, seed)
    orbit = np.stack([z] + [torus.act(z, t) for t in rng.uniform(-np.pi, np.pi, (ORBIT_POINTS - 1, g))])
    head = invariant_head(torus.invariants, init_head(spec, d - g, 3, 6, rng))
    assert np.all(orbit_displacement(head, orbit) <= ORBIT_RTOL * output_scale(head, z))
    control = init_head(spec, d, 3, 6, rng)
    reach = float(np.max(np.linalg.norm(orbit - z, axis=1)))
    assert orbit_displacement(control, orbit).max() > CONTROL_FLOOR * np.linalg.norm(head_jacobian(control, z)) * reach


def log_slope(deltas: np.ndarray, values: np.ndarray) -> float:
    return float(np.polyfit(np.log(deltas), np.log(values), 1)[0])


@given(d=st.integers(4, 9), spec=smooth_specs, seed=seeds)
@example(d=5, spec="gelu2", seed=0)
def test_approximately_invariant_head_metric_scales_with_delta_squared(d, spec, seed):
    """``h_delta = mlp(q(z) + delta P z)`` on a random ``T^1``: ``v^T G v`` in proportion to ``delta^2`` and
    the finite orbit's displacement in proportion to ``delta``, over five decades of ``delta``."""
    rng = np.random.default_rng(seed)
    torus = Torus(d, 1, rng)
    z = rng.standard_normal(d)
    v = torus.tangents(z)[:, 0]
    orbit = np.stack([z] + [torus.act(z, t) for t in rng.uniform(-np.pi, np.pi, (ORBIT_POINTS - 1, 1))])
    mlp = init_head(spec, d - 1, 3, 6, rng)
    P = rng.standard_normal((d - 1, d))
    P = P / np.linalg.norm(P @ z)  # |delta P z| = delta: delta is the leak's size at z
    quad, moved = [], []
    for delta in DELTAS:
        head = approximately_invariant_head(torus.invariants, mlp, P, delta)
        quad.append(float(v @ pullback_metric(head, z) @ v))
        moved.append(float(orbit_displacement(head, orbit).max()))
    quad, moved = np.array(quad), np.array(moved)
    assert quad.min() > 0 and moved.min() > 0  # not exactly invariant: the leak is seen
    assert np.all(np.abs(quad / DELTAS**2 / (quad[-1] / DELTAS[-1] ** 2) - 1.0) <= PROPORTION_RTOL)
    assert np.all(np.abs(moved / DELTAS / (moved[-1] / DELTAS[-1]) - 1.0) <= PROPORTION_RTOL)
    assert abs(log_slope(DELTAS, quad) - 2.0) <= SLOPE_TOL
    assert abs(log_slope(DELTAS, moved) - 1.0) <= SLOPE_TOL
    # delta = 0 is the invariant head: v^T G v vanishes to the rounding of G
    G0 = pullback_metric(approximately_invariant_head(torus.invariants, mlp, P, 0.0), z)
    assert float(v @ G0 @ v) <= METRIC_RTOL * np.trace(G0) * float(v @ v)
