"""Toy manifolds: the group action is a real one-parameter Lie group action with the stated tangent."""

from __future__ import annotations

import numpy as np
import pytest
from autograd import jacobian
from scipy.linalg import expm

from mini.manifolds import MANIFOLDS, PhaseRotation, make_manifold, real_fourier_basis, shift_manifold

EXACT = 1e-12  # closed forms against each other in float64 (values O(1))


@pytest.fixture(params=MANIFOLDS)
def manifold(request):
    return make_manifold(request.param, seed=3)


def test_analytic_tangent_matches_autograd(manifold):
    X = manifold.sample(2, 0).X
    for x in X:
        autograd_tangent = jacobian(lambda t, x=x: manifold.act(x[None, :], t)[0])(0.0)
        np.testing.assert_allclose(manifold.tangent(x[None, :])[0], autograd_tangent, atol=EXACT)


def test_action_is_the_exponential_of_its_generator_and_a_group_law(manifold):
    X = manifold.sample(2, 1).X
    A = manifold.generator()
    for t in (0.0, 0.37, -1.2):
        np.testing.assert_allclose(manifold.act(X, t), X @ expm(t * A).T, atol=1e-10)
    np.testing.assert_allclose(manifold.act(X, 0.0), X, atol=EXACT)
    np.testing.assert_allclose(manifold.act(manifold.act(X, 0.3), -0.8), manifold.act(X, -0.5), atol=EXACT)
    t = np.linspace(-1, 1, X.shape[0])  # one parameter per row
    np.testing.assert_allclose(manifold.act(X, t), np.stack([manifold.act(x[None], s)[0] for x, s in zip(X, t)]),
                               atol=EXACT)


def test_invariants_are_constant_on_orbits_and_not_constant_across_classes(manifold):
    X0, _ = manifold.base(2, 4)
    q = manifold.invariants(X0)
    for t in (0.4, -2.0, 5.0):
        np.testing.assert_allclose(manifold.invariants(manifold.act(X0, t)), q, atol=1e-10)
    assert np.ptp(q, axis=0).max() > 0.1  # control: invariants do separate points of different orbits
    assert not np.allclose(manifold.act(X0, 0.4), X0)  # control: the action itself moves points


def test_compact_groups_are_periodic_isometries():
    for name in ("hue", "shift"):
        M = make_manifold(name)
        X = M.sample(2, 0).X
        np.testing.assert_allclose(M.act(X, M.period), X, atol=1e-10)
        np.testing.assert_allclose(np.linalg.norm(M.act(X, 0.9), axis=1), np.linalg.norm(X, axis=1), atol=EXACT)
        A = M.generator()
        np.testing.assert_allclose(A, -A.T, atol=EXACT)
    assert isinstance(make_manifold("hue"), PhaseRotation)


def test_integer_shift_is_a_cyclic_roll():
    M = shift_manifold(length=11)
    X = M.sample(2, 0).X
    for s in (1, 3, -2):
        np.testing.assert_allclose(M.act(X, float(s)), np.roll(X, s, axis=1), atol=1e-10)
    Q = real_fourier_basis(11)
    np.testing.assert_allclose(Q.T @ Q, np.eye(11), atol=EXACT)


def test_samples_orbits_and_parameters(manifold):
    s = manifold.sample(4, 0)
    n = 4 * manifold.n_classes
    assert s.X.shape == (n, manifold.dim) and s.labels.shape == (n,) and s.t.shape == (n,)
    lo, hi = manifold.train_range
    assert np.all((s.t >= lo) & (s.t <= hi))
    np.testing.assert_allclose(s.X, manifold.act(s.X0, s.t), atol=EXACT)
    O = manifold.orbits(s.X0[:3], manifold.orbit_params(12))
    assert O.shape == (3, 12, manifold.dim)
    np.testing.assert_allclose(O[:, 0], manifold.act(s.X0[:3], manifold.orbit_params(12)[0]), atol=EXACT)
    assert len(np.unique(manifold.probe_params())) == 4
    assert manifold.sweep_params(10).shape == (10,)
    assert np.array_equal(manifold.sample(4, 0).X, s.X)  # seeded


def test_bad_inputs_raise_clear_errors():
    with pytest.raises(ValueError, match="valid: hue, shift, scale"):
        make_manifold("rotate")
    with pytest.raises(ValueError, match="odd"):
        shift_manifold(length=14)
    with pytest.raises(ValueError, match="n_per_class"):
        make_manifold("hue").base(0)
