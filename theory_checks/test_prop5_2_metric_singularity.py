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
"""

from __future__ import annotations

import numpy as np
from _invariance_strategies import Torus
from conftest import seeds, smooth_specs
from hypothesis import example, given
from hypothesis import strategies as st

from mini.heads import init_head
from mini.invariance import head_jacobian, invariant_head, orbit_gain, pullback_metric
from mini.manifolds import MANIFOLDS, make_manifold

VANISH_RTOL = 1e-10  # |J v| / (|J|_F |v|) of an invariant head: float64 cancellation is ~1e-15
METRIC_RTOL = 1e-12  # v^T G v / (tr(G) |v|^2) from the assembled G: rounding of G itself is ~d * 1e-16
CONTROL_FLOOR = 1e-4  # a non-invariant random head sees the orbit direction far above this



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


@given(d=st.integers(3, 9), data=st.data(), spec=smooth_specs, seed=seeds)
@example(d=4, data=None, spec="swish2", seed=1)
def test_invariant_head_metric_vanishes_on_torus_orbits(d, data, spec, seed):
    """Random ``T^g`` on ``R^d``: every direction of the ``g``-dimensional ``V_aug(z)`` is null for ``G``."""
    g = data.draw(st.integers(1, d // 2)) if data is not None else 1
    rng = np.random.default_rng(seed)
    torus = Torus(d, g, rng)
    z = rng.standard_normal(d)
    V = torus.tangents(z)
    mlp = init_head(spec, d - g, 3, 6, rng)
    head = invariant_head(torus.invariants, mlp)
    assert relative_gain(head_jacobian(head, z), V) <= VANISH_RTOL
    gains = orbit_gain(pullback_metric(head, z), V.T)
    assert np.all(gains <= METRIC_RTOL * d)
    control = init_head(spec, d, 3, 6, rng)
    assert relative_gain(head_jacobian(control, z), V) > CONTROL_FLOOR
