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

The functions take NumPy, CuPy or torch arrays alike (``array_api_compat``): ``mini.dynamics``
calls them on NumPy, ``scale.engine.train`` on the probe batch's torch tensors. Pass float64 for exact
comparisons (``scale`` does).
"""

from __future__ import annotations

from typing import Any

from mini.invariance import l2_normalize  # u_i = h_i / max(|h_i|, 1e-12), array API

Array = Any  # NumPy, CuPy or torch array, shape (n, k)

COND_FLOOR = 1e-7  # lambda_min clamp of the covariance condition number (E1)


def _xp(x: Array):
    import array_api_compat

    return array_api_compat.array_namespace(x)


def _check(H: Array) -> None:
    if len(H.shape) != 2 or H.shape[0] < 2:
        raise ValueError(f"collapse statistics need a batch of shape (n >= 2, k); got {tuple(H.shape)}")


def representation_std(H: Array) -> float:
    """Mean per-dimension sample std of the L2-normalised rows of ``H`` (n, k): the paper's collapse measure."""
    _check(H)
    xp = _xp(H)
    return float(xp.mean(xp.std(l2_normalize(H), axis=0, correction=1)))


def covariance_extremes(H: Array) -> tuple[float, float]:
    """``(lambda_min(C), lambda_max(C))`` unclamped, ``C`` the sample covariance (k, k) of the normalised rows."""
    _check(H)
    xp = _xp(H)
    U = l2_normalize(H)
    Uc = U - xp.mean(U, axis=0, keepdims=True)  # (n, k)
    C = (Uc.T @ Uc) / (H.shape[0] - 1)  # (k, k)
    eig = xp.linalg.eigvalsh(C)  # ascending
    return float(eig[0]), float(eig[-1])


def covariance_condition(H: Array, floor: float = COND_FLOOR) -> float:
    """``lambda_max(C) / max(lambda_min(C), floor)``, ``C`` the sample covariance (k, k) of the normalised rows."""
    lam_min, lam_max = covariance_extremes(H)
    return lam_max / max(lam_min, floor)


def collapse_stats(H: Array) -> tuple[float, float]:
    """``(representation_std(H), covariance_condition(H))``."""
    return representation_std(H), covariance_condition(H)
