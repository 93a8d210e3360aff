"""Lanczos' ``converged`` flag means what it says (``scale.curvature.lanczos``, through its public function).

Contract, for any correct implementation: a Ritz pair ``(theta, y)`` flagged converged has

    stop="residual":    |A y - theta y| <= tol x scale              (its residual, measured here)
    stop="eigenvalue":  min_j |lambda_j - theta| <= tol x scale     (its eigenvalue error, against eigvalsh)

(either way an eigenvalue of ``A`` lies within ``tol x scale`` of ``theta``), with ``scale`` the operator's
spectral scale ``max |lambda|`` (the implementation's own scale, the largest ``|Ritz value|``, is at most
that). Both sides are measured here in float64 from the returned vectors and values, independently of the
implementation's estimates, up to float64's error on the measurement, ``roundoff(N) = ROUNDOFF_FACTOR N eps``
of the scale: ``A y`` sums ``N`` products per entry (Higham: ``|fl(A y) - A y| <= gamma_N |A| |y|``, at most
``N eps`` of the scale in norm for a unit ``y``), and ``eigvalsh``'s eigenvalues are backward stable to a
small multiple of ``N eps`` of the scale; the factor 4 covers the subtraction and the norm. The allowance is
pinned (``test_negative_control_a_pair_three_roundoffs_past_tol_is_flagged``): a pair past ``tol`` by three
allowances is flagged, which a 10x looser allowance would pass. A flag that is 100x looser than ``tol`` (a
stop on ``100 tol``) passes every check of the ends' accuracy at the default tolerance, and fails here; so
does the eigenvalue stop's ``r^2 / gap`` taken 10x optimistic (the pinned ``N = 40, tol = 1e-4, k = 1, seed =
2``: 12 tol with it, 0.004 tol without).

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

ROUNDOFF_FACTOR = 4.0  # float64's error on a measured residual or eigenvalue gap: ROUNDOFF_FACTOR N eps x scale
EPS = float(np.finfo(float).eps)


PAST_TOL = 1.6e-13  # three allowances at N = 60 (3 x 4 x 60 eps), as a number: it pins the allowance


def roundoff(N: int) -> float:
    """Float64's error on ``|A y - theta y|`` and on ``min |lambda - theta|`` for ``A`` (N, N), relative to the
    scale (module docstring)."""
    return ROUNDOFF_FACTOR * N * EPS


@settings(max_examples=examples(0.5))  # each example is a Lanczos run and a dense eigendecomposition
@given(N=st.integers(30, 80), log_tol=st.floats(-8.0, -3.0), k=st.integers(1, 3),
       stop=st.sampled_from(["residual", "eigenvalue"]), seed=seeds)
@example(N=60, log_tol=-4.0, k=1, stop="residual", seed=0)
@example(N=60, log_tol=-4.0, k=2, stop="eigenvalue", seed=1)
@example(N=40, log_tol=-4.0, k=1, stop="eigenvalue", seed=2)  # r^2 / gap taken 10x optimistic: 12 tol
def test_converged_means_within_tol_of_the_scale(N: int, log_tol: float, k: int, stop: str, seed: int) -> None:
    check_contract(N, log_tol, k, stop, seed)


FINDINGS = {  # (N, log_tol, k, stop, seed) of the check's construction
    "inner pair": (46, -3.0, 2, "eigenvalue", 0),
    "outermost pair": (40, -3.0, 1, "eigenvalue", 2),
}


@pytest.mark.xfail(strict=True, raises=AssertionError, reason="finding: stop='eigenvalue' flags a pair whose "
                   "eigenvalue error exceeds tol x scale (its bound r^2 / gap takes the gap to the next Ritz value "
                   "inwards, not to an unresolved eigenvalue nearer than that)")
@pytest.mark.parametrize("which", sorted(FINDINGS))
def test_finding_eigenvalue_stop_flags_a_pair_beyond_tol(which: str) -> None:
    """Exploration (seed 3466700275), the inner pair: N = 46, tol = 1e-3, k = 2, ``stop="eigenvalue"``. The
    second-highest Ritz value, 0.47660 of the scale, lies between the eigenvalues 0.47515 and 0.47774 with
    residual 3.6e-3; its bound ``r^2 / gap`` takes the gap to the inward Ritz value (0.042), not to the
    unresolved eigenvalue on its outward side (1.1e-3 away), so it reads 3e-4 and flags the pair converged
    while its eigenvalue error is 1.15e-3 of the scale.

    The outermost pair (k = 1; found while pinning the 10x-optimistic mutant): N = 40, tol = 1e-3, seed 2. The
    lowest Ritz value, -0.56852 of the scale, lies between the eigenvalues -0.56975 and -0.56571 with residual
    4.8e-3; the next Ritz value inwards is -0.45805 (gap 0.11), so ``r^2 / gap`` reads 2.1e-4 while the
    unresolved eigenvalue -0.56571 lies 4e-3 inwards: the eigenvalue error is 1.23e-3 of the scale. Kato-Temple
    needs the gap to every other eigenvalue. Strict: when ``scale.curvature.lanczos`` is fixed these fail, and
    go."""
    check_contract(*FINDINGS[which])


def contract_violations(A: np.ndarray, theta: np.ndarray, Y: np.ndarray, flagged: np.ndarray, tol: float,
                        stop: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The pairs flagged converged beyond ``(tol + roundoff(N)) x scale`` (in the measure of ``stop``), and the
    measured residuals and eigenvalue errors, as fractions of the scale."""
    lam = np.linalg.eigvalsh(A)
    scale = float(np.abs(lam).max())
    residuals = np.linalg.norm(A @ Y - Y * theta, axis=0) / scale  # measured here, not the implementation's
    errors = np.abs(lam[:, None] - theta[None, :]).min(axis=0) / scale
    measured = residuals if stop == "residual" else errors
    return flagged & (measured > tol + roundoff(A.shape[0])), residuals, errors


def check_contract(N: int, log_tol: float, k: int, stop: str, seed: int) -> None:
    torch = pytest.importorskip("torch")
    from scale.curvature.lanczos import lanczos
    from scale.curvature.operators import operator_from_matrix

    rng = np.random.default_rng(seed)
    eig = rng.choice([-1.0, 1.0], N) * 10.0 ** rng.uniform(-3.0, 0.0, N)
    A = matrix_with_spectrum(eig, rng)
    A = 0.5 * (A + A.T)
    tol = 10.0**log_tol
    res = lanczos(operator_from_matrix(torch.as_tensor(A)), k=k, tol=tol, seed=seed % 2**31, stop=stop)
    flagged = np.asarray(res.converged, dtype=bool)
    assert flagged.any() or res.exhausted, "stopped with no converged pair and the Krylov space not exhausted"
    bad, residuals, errors = contract_violations(A, np.asarray(res.values), res.vectors.numpy(), flagged, tol, stop)
    measured = residuals if stop == "residual" else errors
    assert not bad.any(), (f"converged pairs beyond tol x scale ({stop}): {measured[bad]} x scale, "
                           f"tol {tol:.1e}, N={N}, k={k}")
    assert np.all(errors[flagged] <= residuals[flagged] + roundoff(N))  # an eigenvalue within the residual


@pytest.mark.parametrize("stop", ["residual", "eigenvalue"])
def test_negative_control_a_pair_three_roundoffs_past_tol_is_flagged(stop: str) -> None:
    """The allowance pinned: ``A = diag(1, 1/2, ...)`` (N = 60) and the pair ``y = cos(phi) e_0 + sin(phi) e_1``,
    ``theta = y^T A y``, whose residual ``|A y - theta y| = sin(phi) cos(phi) / 2`` and eigenvalue error
    ``sin(phi)^2 / 2`` are known in closed form. With ``tol`` ``PAST_TOL`` below the measure (three of today's
    allowances, as a number), the pair flagged converged is a violation (a 10x looser allowance passes it);
    with ``tol`` at the measure, not."""
    N, phi = 60, 1e-3
    assert roundoff(N) < PAST_TOL <= 10 * roundoff(N), f"the excess {PAST_TOL:.2e} is not within 10x the allowance"
    A = np.diag(np.concatenate([[1.0, 0.5], np.linspace(-0.4, 0.4, N - 2)]))
    y = np.zeros((N, 1))
    y[0, 0], y[1, 0] = np.cos(phi), np.sin(phi)
    theta = np.array([float(y[:, 0] @ A @ y[:, 0])])
    exact = np.sin(phi) * np.cos(phi) / 2 if stop == "residual" else np.sin(phi) ** 2 / 2
    flagged = np.array([True])
    past, _, _ = contract_violations(A, theta, y, flagged, exact - PAST_TOL, stop)
    assert past.all(), f"a pair 3 allowances past tol ({stop}) was accepted"
    at, _, _ = contract_violations(A, theta, y, flagged, exact, stop)
    assert not at.any(), f"a pair at tol ({stop}) was flagged"
