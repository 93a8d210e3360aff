"""``mini.collapse_metrics``: E1's collapse statistics, one definition on NumPy and torch alike.

Reference: NumPy's own ``std(ddof=1)``, ``cov`` and ``eigvalsh`` on rows normalised here; tolerances
relative to the quantity's magnitude.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mini.collapse_metrics import COND_FLOOR, covariance_condition, covariance_spectrum, representation_std

REL = 1e-12


def _batch(seed: int = 0, n: int = 64, k: int = 12) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, k)) * np.linspace(0.05, 1.0, k)  # anisotropic: a condition number far from 1


def test_matches_numpy_reference_and_is_the_same_on_torch():
    H = _batch()
    U = H / np.linalg.norm(H, axis=1, keepdims=True)
    std_ref = np.mean(np.std(U, axis=0, ddof=1))
    eig = np.linalg.eigvalsh(np.cov(U, rowvar=False))
    cond_ref = eig[-1] / max(eig[0], COND_FLOOR)
    for arr in (H, torch.from_numpy(H)):
        assert representation_std(arr) == pytest.approx(std_ref, rel=REL)
        assert covariance_condition(arr) == pytest.approx(cond_ref, rel=1e-9)
    # Negative control: the population std (ddof 0) is a different number on this batch.
    assert abs(np.mean(np.std(U, axis=0)) - representation_std(H)) > 1e3 * REL * std_ref


def test_collapse_and_clamp():
    row = np.arange(1.0, 6.0)
    collapsed = np.tile(row, (10, 1))  # every row the same direction
    assert representation_std(collapsed) == pytest.approx(0.0, abs=1e-15)
    # 4 rows in 6 dimensions: the covariance has rank <= 3, lambda_min is 0 up to rounding (possibly
    # negative), and the clamp makes the condition number lambda_max / COND_FLOOR.
    H = _batch(n=4, k=6)
    U = H / np.linalg.norm(H, axis=1, keepdims=True)
    eig = np.linalg.eigvalsh(np.cov(U, rowvar=False))
    assert abs(eig[0]) < 1e-12 * eig[-1]
    assert covariance_condition(H) == pytest.approx(eig[-1] / COND_FLOOR, rel=1e-9)


def test_bad_shape_is_refused():
    with pytest.raises(ValueError, match=r"shape \(n >= 2, k\)"):
        representation_std(np.ones(5))


@pytest.mark.parametrize(("n", "k"), [(8, 300), (16, 16), (40, 12)])
def test_the_gram_matrix_gives_the_covariance_spectrum(n, k):
    """``covariance_spectrum`` against ``eigvalsh`` of the (k, k) covariance itself: the n x n Gram matrix of the
    centred rows has the covariance's nonzero eigenvalues (``n <= k``), and the covariance is used when ``n > k``.
    Negative control: without the centring the Gram matrix's spectrum is another one."""
    H = _batch(seed=n, n=n, k=k)
    U = H / np.linalg.norm(H, axis=1, keepdims=True)
    Uc = U - U.mean(axis=0)
    eig_C = np.linalg.eigvalsh(Uc.T @ Uc / (n - 1))
    eig_G = np.linalg.eigvalsh(Uc @ Uc.T / (n - 1))
    top = min(n, k)
    assert np.abs(eig_C[-top:] - eig_G[-top:]).max() <= 1e-12 * eig_C[-1]  # the shared spectrum
    lam_min, lam_max = covariance_spectrum(H)
    assert lam_max == pytest.approx(eig_C[-1], rel=1e-12)
    assert abs(lam_min - eig_C[0]) <= 1e-12 * eig_C[-1] and (lam_min == 0.0) == (n <= k)
    assert covariance_condition(torch.from_numpy(H)) == pytest.approx(eig_C[-1] / max(eig_C[0], COND_FLOOR), rel=1e-9)
    uncentred = np.linalg.eigvalsh(U @ U.T / (n - 1))
    assert np.abs(uncentred[-top:] - eig_G[-top:]).max() > 1e-3 * eig_C[-1]
