"""Lanczos' ``converged`` flag means what it says (``scale.curvature.lanczos``, through its public function).

Contract, for any correct implementation: a Ritz pair ``(theta, y)`` flagged converged has

    stop="residual":    |A y - theta y| <= tol x scale              (its residual, measured here)
    stop="eigenvalue":  min_j |lambda_j - theta| <= tol x scale     (its eigenvalue error, against eigvalsh)

(either way an eigenvalue of ``A`` lies within ``tol x scale`` of ``theta``), with ``scale`` the operator's
spectral scale ``max |lambda|`` (the implementation's own scale, the largest ``|Ritz value|``, is at most
that). Both sides are measured here in float64 from the returned vectors and values, independently of the
implementation's estimates, up to ``ROUNDOFF`` of the scale. A flag that is 100x looser than ``tol`` (a
stop on ``100 tol``) passes every check of the ends' accuracy at the default tolerance, and fails here.

Instances: symmetric matrices of chosen spectra (``N`` in [30, 80], both signs, clusters), ``tol`` drawn
from 1e-3 to 1e-8 so that Lanczos stops on its flag well before the Krylov space is exhausted; ``k`` in
[1, 3]. Skipped without torch.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from conftest import examples, matrix_with_spectrum, seeds

ROUNDOFF = 1e-12  # float64 measurement of a residual or an eigenvalue gap, relative to the scale


@settings(max_examples=examples(0.5))  # each example is a Lanczos run and a dense eigendecomposition
@given(N=st.integers(30, 80), log_tol=st.floats(-8.0, -3.0), k=st.integers(1, 3),
       stop=st.sampled_from(["residual", "eigenvalue"]), seed=seeds)
@example(N=60, log_tol=-4.0, k=1, stop="residual", seed=0)
@example(N=60, log_tol=-4.0, k=2, stop="eigenvalue", seed=1)
def test_converged_means_within_tol_of_the_scale(N: int, log_tol: float, k: int, stop: str, seed: int) -> None:
    check_contract(N, log_tol, k, stop, seed)


@pytest.mark.xfail(strict=True, raises=AssertionError, reason="finding: stop='eigenvalue' flags an inner pair "
                   "whose eigenvalue error is 1.15 tol x scale (its bound r^2 / gap uses the inward gap only)")
def test_finding_eigenvalue_stop_flags_an_inner_pair_beyond_tol() -> None:
    """Exploration (seed 3466700275): N = 46, tol = 1e-3, k = 2, ``stop="eigenvalue"``. The second-highest Ritz
    value, 0.47660 of the scale, lies between the eigenvalues 0.47515 and 0.47774 with residual 3.6e-3; its
    bound ``r^2 / gap`` takes the gap to the inward Ritz value (0.042), not to the unresolved eigenvalue on its
    outward side (1.1e-3 away), so it reads 3e-4 and flags the pair converged while its eigenvalue error is
    1.15e-3 of the scale. Strict: when ``scale.curvature.lanczos`` is fixed this test fails, and goes."""
    check_contract(46, -3.0, 2, "eigenvalue", 0)


def check_contract(N: int, log_tol: float, k: int, stop: str, seed: int) -> None:
    torch = pytest.importorskip("torch")
    from scale.curvature.lanczos import lanczos
    from scale.curvature.operators import operator_from_matrix

    rng = np.random.default_rng(seed)
    eig = rng.choice([-1.0, 1.0], N) * 10.0 ** rng.uniform(-3.0, 0.0, N)
    A = matrix_with_spectrum(eig, rng)
    A = 0.5 * (A + A.T)
    lam = np.linalg.eigvalsh(A)
    scale = float(np.abs(lam).max())
    tol = 10.0**log_tol
    res = lanczos(operator_from_matrix(torch.as_tensor(A)), k=k, tol=tol, seed=seed % 2**31, stop=stop)
    Y, theta = res.vectors.numpy(), np.asarray(res.values)
    residuals = np.linalg.norm(A @ Y - Y * theta, axis=0)  # measured here, not the implementation's
    errors = np.abs(lam[:, None] - theta[None, :]).min(axis=0)
    flagged = np.asarray(res.converged, dtype=bool)
    assert flagged.any() or res.exhausted, "stopped with no converged pair and the Krylov space not exhausted"
    measured = residuals if stop == "residual" else errors
    bad = flagged & (measured > (tol + ROUNDOFF) * scale)
    assert not bad.any(), (f"converged pairs beyond tol x scale ({stop}): {measured[bad] / scale} x scale, "
                           f"tol {tol:.1e}, N={N}, k={k}")
    assert np.all(errors[flagged] <= residuals[flagged] + ROUNDOFF * scale)  # an eigenvalue within the residual
