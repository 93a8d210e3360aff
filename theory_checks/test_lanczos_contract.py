"""Lanczos' ``converged`` flag means what it says (``scale.curvature.lanczos`` and ``scale.curvature.blockwise``,
through their public functions).

Contract, for any correct implementation: a Ritz pair ``(theta, y)`` flagged converged has

    |A y - theta y| <= tol x scale              (its residual, measured here)

so an eigenvalue of ``A`` lies within ``tol x scale`` of ``theta`` whatever the rest of the spectrum, with ``scale``
the operator's spectral scale ``max |lambda|`` (the implementation's own scale, the largest ``|Ritz value|``, is at
most that). It is measured here in float64 from the returned vectors and values, independently of the
implementation's estimates, up to float64's error on the measurement, ``roundoff(N) = ROUNDOFF_FACTOR N eps`` of
the scale: ``A y`` sums ``N`` products per entry (Higham: ``|fl(A y) - A y| <= gamma_N |A| |y|``, at most ``N eps`` of
the scale in norm for a unit ``y``); the factor 4 covers the subtraction and the norm. The eigenvalue error is
checked too: within the residual (an eigenvalue within ``r`` of ``theta``, against ``eigvalsh``).

The allowance is pinned (``test_negative_control_a_pair_three_roundoffs_past_tol_is_flagged``): a pair past ``tol``
by three allowances is flagged, which a 10x looser allowance would pass. The stop itself is pinned at 10x: with the
residual bound taken 10x optimistic (the stop and the flag on ``10 tol``, the result reporting ``tol``), the pinned
draws ``N = 60, tol = 1e-4, k = 1, seed = 4`` and ``N = 60, tol = 1e-8, k = 2, seed = 1`` flag pairs whose residuals
are 9.8 and 9.7 tol (0.56 and 0.30 tol without the mistake). ``lanczos`` has no eigenvalue stop: its ``r^2 / gap``
read the gap off the Ritz values, not off the spectrum, and flagged pairs 1.15 and 1.23 tol from every eigenvalue
(the module docstring of ``scale.curvature.lanczos``).

``blockwise_lanczos`` (one Lanczos per diagonal block) is held to the same contract, each instance run as one block
under ``goal="blocks"`` (every block's two ends waited for, ``answered`` claimed): its flag used to read the same
estimate ``r^2 / gap``, and the pinned draws ``N = 60, tol = 1e-4, seed = 18`` and ``N = 46, tol = 1e-4, seed = 5``
were ``answered`` with ends whose residuals were 18 and 31 tol (an end 12 tol from every eigenvalue on the first);
on residuals they are 0.28 and 0.37 tol (mutant ``blockwise_converged_on_gap_estimate``).

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
@given(N=st.integers(30, 80), log_tol=st.floats(-8.0, -3.0), k=st.integers(1, 3), seed=seeds)
@example(N=60, log_tol=-4.0, k=1, seed=0)
@example(N=60, log_tol=-4.0, k=1, seed=4)  # the residual bound taken 10x optimistic: 9.8 tol
@example(N=60, log_tol=-8.0, k=2, seed=1)  # the residual bound taken 10x optimistic: 9.7 tol
def test_converged_means_within_tol_of_the_scale(N: int, log_tol: float, k: int, seed: int) -> None:
    check_contract(N, log_tol, k, seed)


def contract_violations(A: np.ndarray, theta: np.ndarray, Y: np.ndarray, flagged: np.ndarray, tol: float
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The pairs flagged converged with a residual beyond ``(tol + roundoff(N)) x scale``, and the measured
    residuals and eigenvalue errors, as fractions of the scale."""
    lam = np.linalg.eigvalsh(A)
    scale = float(np.abs(lam).max())
    residuals = np.linalg.norm(A @ Y - Y * theta, axis=0) / scale  # measured here, not the implementation's
    errors = np.abs(lam[:, None] - theta[None, :]).min(axis=0) / scale
    return flagged & (residuals > tol + roundoff(A.shape[0])), residuals, errors


def contract_instance(N: int, log_tol: float, seed: int) -> tuple[np.ndarray, float]:
    """The contract's instance: a symmetric N x N matrix whose eigenvalues have random signs and magnitudes spread
    over three decades (``10^-3`` to 1), and the tolerance ``10^log_tol``."""
    rng = np.random.default_rng(seed)
    eig = rng.choice([-1.0, 1.0], N) * 10.0 ** rng.uniform(-3.0, 0.0, N)
    A = matrix_with_spectrum(eig, rng)
    return 0.5 * (A + A.T), 10.0**log_tol


def check_contract(N: int, log_tol: float, k: int, seed: int) -> None:
    torch = pytest.importorskip("torch")
    from scale.curvature.lanczos import lanczos
    from scale.curvature.operators import operator_from_matrix

    A, tol = contract_instance(N, log_tol, seed)
    res = lanczos(operator_from_matrix(torch.as_tensor(A)), k=k, tol=tol, seed=seed % 2**31)
    flagged = np.asarray(res.converged, dtype=bool)
    assert flagged.any() or res.exhausted, "stopped with no converged pair and the Krylov space not exhausted"
    bad, residuals, errors = contract_violations(A, np.asarray(res.values), res.vectors.numpy(), flagged, tol)
    assert not bad.any(), f"converged pairs beyond tol x scale: {residuals[bad]} x scale, tol {tol:.1e}, N={N}, k={k}"
    assert np.all(errors[flagged] <= residuals[flagged] + roundoff(N))  # an eigenvalue within the residual


def test_negative_control_a_pair_three_roundoffs_past_tol_is_flagged() -> None:
    """The allowance pinned: ``A = diag(1, 1/2, ...)`` (N = 60) and the pair ``y = cos(phi) e_0 + sin(phi) e_1``,
    ``theta = y^T A y``, whose residual ``|A y - theta y| = sin(phi) cos(phi) / 2`` is known in closed form. With
    ``tol`` ``PAST_TOL`` below it (three of today's allowances, as a number), the pair flagged converged is a
    violation (a 10x looser allowance passes it); with ``tol`` at the residual, not."""
    N, phi = 60, 1e-3
    assert roundoff(N) < PAST_TOL <= 10 * roundoff(N), f"the excess {PAST_TOL:.2e} is not within 10x the allowance"
    A = np.diag(np.concatenate([[1.0, 0.5], np.linspace(-0.4, 0.4, N - 2)]))
    y = np.zeros((N, 1))
    y[0, 0], y[1, 0] = np.cos(phi), np.sin(phi)
    theta = np.array([float(y[:, 0] @ A @ y[:, 0])])
    exact = np.sin(phi) * np.cos(phi) / 2
    flagged = np.array([True])
    past, _, _ = contract_violations(A, theta, y, flagged, exact - PAST_TOL)
    assert past.all(), "a pair 3 allowances past tol was accepted"
    at, _, _ = contract_violations(A, theta, y, flagged, exact)
    assert not at.any(), "a pair at tol was flagged"


@settings(max_examples=examples(0.5))  # each example is a Lanczos run and a dense eigendecomposition
@given(N=st.integers(30, 80), log_tol=st.floats(-8.0, -3.0), seed=seeds)
@example(N=60, log_tol=-4.0, seed=18)  # flagged on r^2 / gap: residual 18 tol, 12 tol from every eigenvalue
@example(N=46, log_tol=-4.0, seed=5)  # flagged on r^2 / gap: residual 31 tol
def test_blockwise_converged_means_within_tol_of_the_scale(N: int, log_tol: float, seed: int) -> None:
    """``blockwise_lanczos``'s ``converged`` and ``answered`` under the module's contract, the instance as one block
    (``goal="blocks"``: ``answered`` claims both ends of every block)."""
    torch = pytest.importorskip("torch")
    from scale.curvature.blockwise import blockwise_lanczos
    from scale.curvature.operators import operator_from_matrix

    A, tol = contract_instance(N, log_tol, seed)
    res = blockwise_lanczos(operator_from_matrix(torch.as_tensor(A)), 1, tol=tol, seed=seed % 2**31, goal="blocks")
    flagged = np.asarray(res.converged, dtype=bool)
    assert res.answered == bool(flagged.all()), "answered is not its one block's two flags"
    assert flagged.all() or res.exhausted or res.n_iter == min(N, 200), "stopped unanswered before its step cap"
    bad, residuals, errors = contract_violations(A, np.asarray(res.values), res.vectors.numpy(), flagged, tol)
    assert not bad.any(), f"converged ends beyond tol x scale: {residuals[bad]} x scale, tol {tol:.1e}, N={N}"
    assert np.all(errors[flagged] <= residuals[flagged] + roundoff(N))  # an eigenvalue within the residual
