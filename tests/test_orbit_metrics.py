"""Orbit metrics and probes of ``mini.invariance``: brute-force references, NumPy == torch, errors."""

from __future__ import annotations

import functools
import itertools

import numpy as np
import pytest

from mini import invariance as inv

torch = pytest.importorskip("torch")

AGREE_RTOL = 1e-12  # NumPy and torch run the same float64 arithmetic; only summation order differs
# A probe's prediction is decided on the processor's rounding only where a point's two best scores lie within that
# rounding of each other; on this instance the closest pair is 3e-2 of the largest score apart (measured), and the two
# backends' scores agree to 1e-15 of it (OpenBLAS and MKL, AVX2 and AVX-512 kernels alike). Asserted, so that the
# accuracies' equality holds on any BLAS and processor, not by luck of the round-off.
PROBE_MARGIN = 1e-6  # the smallest gap between a point's two best scores, relative to the largest score


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread():
    """Tiny matrices: intra-op threads only add overhead (and oversubscribe a shared machine)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _orbits(seed: int = 0, n_classes: int = 5, per_class: int = 3, points: int = 12, dim: int = 8):
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((n_classes, 1, 1, dim))
    F = centers + 0.3 * rng.standard_normal((n_classes, per_class, points, dim))
    F = inv.l2_normalize(F.reshape(n_classes * per_class, points, dim))
    labels = np.repeat(np.arange(n_classes), per_class)
    sweep = inv.l2_normalize(np.cumsum(rng.standard_normal((n_classes * per_class, 10, dim)), axis=1))
    return F, labels, sweep


def test_metrics_match_brute_force_definitions():
    F, labels, sweep = _orbits()
    geo = inv.orbit_geometry(F, labels, sweep)
    spread = [np.mean(np.sum((O - O.mean(0)) ** 2, axis=1)) for O in F]
    intra = [np.mean([np.linalg.norm(O[p] - O[q]) for p, q in itertools.combinations(range(len(O)), 2)]) for O in F]
    C = np.stack([F[labels == a].reshape(-1, F.shape[2]).mean(0) for a in range(5)])
    pairs = [np.linalg.norm(C[a] - C[b]) for a, b in itertools.combinations(range(5), 2)]
    per_class = [np.mean([np.linalg.norm(C[a] - C[b]) for b in range(5) if b != a]) for a in range(5)]
    ratio = [per_class[labels[o]] / intra[o] for o in range(len(F))]
    kappa = [np.mean([np.linalg.norm(r[i + 1] - 2 * r[i] + r[i - 1]) for i in range(1, len(r) - 1)]) for r in sweep]
    for got, want in (
        (geo.spread, spread), (geo.d_intra, intra), (geo.d_inter, pairs), (geo.ratio, ratio), (geo.kappa, kappa)
    ):
        assert got.mean == pytest.approx(np.mean(want), rel=1e-12)
        assert got.std == pytest.approx(np.std(want), rel=1e-10, abs=1e-15)
        assert got.n == len(want)
    assert geo.ratio_of_means == pytest.approx(np.mean(pairs) / np.mean(intra), rel=1e-12)


def test_numpy_and_torch_give_identical_metrics_and_probes(monkeypatch):
    """The same metrics and probes on NumPy (its BLAS: OpenBLAS) and torch (MKL) arrays. The probes' scores agree to
    ``AGREE_RTOL``; their accuracies are equal, as the two decide every point alike: no point's two best scores lie
    within ``PROBE_MARGIN`` of each other, far above the backends' disagreement. Negative control: a probe fitted on
    other labels gives other scores."""
    F, labels, sweep = _orbits(seed=3)
    a = inv.orbit_geometry(F, labels, sweep)
    b = inv.orbit_geometry(torch.from_numpy(F), torch.from_numpy(labels), torch.from_numpy(sweep))
    for name in ("spread", "d_intra", "d_inter", "ratio", "kappa"):
        sa, sb = getattr(a, name), getattr(b, name)
        assert sb.mean == pytest.approx(sa.mean, rel=AGREE_RTOL)
        assert sb.std == pytest.approx(sa.std, rel=1e-9, abs=1e-15)
        assert sb.n == sa.n
    X = F.reshape(-1, F.shape[2])
    y = np.repeat(labels, F.shape[1])
    groups = np.repeat(np.arange(F.shape[0]), F.shape[1])
    train, test = inv.group_split(groups, 0.34, seed=1)
    Xt, yt = torch.from_numpy(X), torch.from_numpy(y)
    scores: list[np.ndarray] = []  # what each accuracy was computed from: train, then test scores, per call
    accuracy = inv._accuracy
    monkeypatch.setattr(inv, "_accuracy", lambda xp, s, y: scores.append(np.asarray(s)) or accuracy(xp, s, y))
    mlp = functools.partial(inv.mlp_probe, steps=100)
    for probe in (inv.linear_probe, mlp):
        scores.clear()
        pa, pb = probe(X, y, train, test), probe(Xt, yt, train, test)
        for s_np, s_torch in zip(scores[:2], scores[2:]):
            top = np.abs(s_np).max()
            assert np.abs(s_torch - s_np).max() <= AGREE_RTOL * top
            best_two = np.sort(s_np, axis=1)[:, -2:]
            assert (best_two[:, 1] - best_two[:, 0]).min() > PROBE_MARGIN * top
        assert (pa.train_accuracy, pa.test_accuracy) == (pb.train_accuracy, pb.test_accuracy)
        assert 0.0 <= pa.test_accuracy <= 1.0
        fitted = scores[0]
        probe(X, np.roll(y, len(y) // 2), train, test)  # control: other labels, other scores
        assert np.abs(scores[-2] - fitted).max() > 1e3 * AGREE_RTOL * np.abs(fitted).max()


def test_normalized_features_apply_the_head_to_normalised_z():
    F, _, _ = _orbits()
    Z = 3.0 * F
    W = np.random.default_rng(0).standard_normal((4, F.shape[2]))
    zn, hn = inv.normalized_features(Z, lambda X: X @ W.T)
    np.testing.assert_allclose(zn, F, rtol=1e-12)
    want = (F @ W.T) / np.linalg.norm(F @ W.T, axis=-1, keepdims=True)
    np.testing.assert_allclose(hn, want, rtol=1e-12)
    assert hn.shape == (*F.shape[:2], 4)


def test_probes_learn_a_separable_problem_and_split_by_group():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((300, 5))
    y = np.argmax(X[:, :3] @ np.array([[2.0, 0.0, -1.0], [0.0, 2.0, -1.0], [0.0, 0.0, 1.0]]), axis=1)
    groups = np.arange(300) // 3
    train, test = inv.group_split(groups, 0.3, seed=0)
    assert not set(groups[train]) & set(groups[test])
    assert inv.linear_probe(X, y, train, test).test_accuracy > 0.85
    assert inv.mlp_probe(X, y, train, test).test_accuracy > 0.85
    shuffled = rng.permutation(y)  # control: labels independent of X are not learnable
    assert inv.linear_probe(X, shuffled, train, test).test_accuracy < 0.45


def test_bad_inputs_raise_clear_errors():
    F, labels, _ = _orbits()
    with pytest.raises(ValueError, match="n_orbits, n_points, dim"):
        inv.orbit_geometry(F[0], labels)
    with pytest.raises(ValueError, match="labels must have shape"):
        inv.orbit_geometry(F, labels[:-1])
    with pytest.raises(ValueError, match="two classes"):
        inv.orbit_geometry(F, np.zeros(len(F), dtype=int))
    with pytest.raises(ValueError, match=r"n_steps|points"):
        inv.sweep_curvature(F[:, :2])
    with pytest.raises(ValueError, match="test_fraction"):
        inv.group_split(np.arange(10), 1.5)
