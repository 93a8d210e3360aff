r"""The collapse statistics of a representation batch (``docs/paper.md``, E1), once, on the array API.

For a batch ``H`` of shape ``(n, k)`` (projector outputs ``h`` or backbone outputs ``z``), with rows
L2-normalised, ``u_i = h_i / |h_i|``:

    std(H)   = 1/k sum_c std_c(u)            mean per-dimension standard deviation; 0 at complete
                                             collapse, about 1/sqrt(k) for rows spread uniformly over
                                             the sphere
    cond(H)  = lambda_max(C) / max(lambda_min(C), COND_FLOOR),   C = cov(u)   (k x k)

Both use the sample statistics (``correction = 1``: divide by ``n - 1``, torch's default); the
condition number does not depend on that choice except through the clamp. ``lambda_min`` is clamped
at ``COND_FLOOR = 1e-7`` as in the paper, so a rank-deficient covariance gives a large finite number.

The spectrum comes from the smaller of two matrices with the same nonzero eigenvalues: with ``U_c`` the
centred rows, ``C = U_c^T U_c / (n - 1)`` (k, k) and the Gram matrix ``G = U_c U_c^T / (n - 1)`` (n, n)
(``A^T A`` and ``A A^T`` share their nonzero eigenvalues). When ``n <= k``, centring leaves ``C`` a rank of at
most ``n - 1 < k``: ``lambda_min(C) = 0`` exactly and ``lambda_max(C) = lambda_max(G)``, so the ``n x n``
eigenproblem replaces the ``k x k`` one (a probe of 256 rows of a 2048-wide head: 256^3 instead of 2048^3).

The functions take NumPy, CuPy or torch arrays alike (``array_api_compat``): ``mini.dynamics``
calls them on NumPy, ``scale.engine.train`` on the probe batch's torch tensors. Pass float64 for exact
comparisons (``scale`` does).
"""

from __future__ import annotations

from typing import Any

from mini.arrays import namespace
from mini.invariance import l2_normalize  # u_i = h_i / max(|h_i|, 1e-12), array API

Array = Any  # NumPy, CuPy or torch array, shape (n, k)

COND_FLOOR = 1e-7  # lambda_min clamp of the covariance condition number (E1)


def _check(H: Array) -> None:
    if len(H.shape) != 2 or H.shape[0] < 2:
        raise ValueError(f"collapse statistics need a batch of shape (n >= 2, k); got {tuple(H.shape)}")


def representation_std(H: Array) -> float:
    """Mean per-dimension sample std of the L2-normalised rows of ``H`` (n, k): the paper's collapse measure."""
    _check(H)
    xp = namespace(H)
    return float(xp.mean(xp.std(l2_normalize(H), axis=0, correction=1)))


def covariance_spectrum(H: Array) -> tuple[float, float]:
    """``(lambda_min, lambda_max)`` of the sample covariance ``C`` (k, k) of the normalised rows of ``H`` (n, k),
    from the smaller of ``C`` and the Gram matrix (module docstring)."""
    _check(H)
    xp = namespace(H)
    U = l2_normalize(H)
    Uc = U - xp.mean(U, axis=0, keepdims=True)  # (n, k)
    n, k = Uc.shape
    if n <= k:  # rank(C) <= n - 1 < k: lambda_min(C) = 0, the rest of C's spectrum is G's
        return 0.0, float(xp.linalg.eigvalsh((Uc @ Uc.T) / (n - 1))[-1])  # G (n, n)
    eig = xp.linalg.eigvalsh((Uc.T @ Uc) / (n - 1))  # C (k, k), ascending
    return float(eig[0]), float(eig[-1])


def covariance_condition(H: Array, floor: float = COND_FLOOR) -> float:
    """``lambda_max(C) / max(lambda_min(C), floor)``, ``C`` the sample covariance (k, k) of the normalised rows."""
    lam_min, lam_max = covariance_spectrum(H)
    return lam_max / max(lam_min, floor) if max(lam_min, floor) > 0 else float("inf")


def collapse_stats(H: Array) -> tuple[float, float]:
    """``(representation_std(H), covariance_condition(H))``."""
    return representation_std(H), covariance_condition(H)
