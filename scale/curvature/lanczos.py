r"""Extreme eigenvalues of a symmetric operator: Lanczos, and the paper's shifted power iteration.

``lanczos(op)`` builds the Krylov basis ``Q = [q_1 .. q_m]`` of ``op`` in float64 whatever the
operator's own dtype (each product is cast back and accumulated in float64), with full
reorthogonalisation (classical Gram-Schmidt, applied twice: "twice is enough"), so that the
tridiagonal ``T = Q^T A Q`` is exact to round-off and its eigenvalues (Ritz values) approach BOTH
ends of the spectrum at once: ``lambda_min`` is read directly, never by shifting.

For a Ritz pair ``(theta, y = Q s)`` the residual is ``|A y - theta y| = beta_m |s_m|`` (exact in
exact arithmetic; used for stopping) and, for the returned pairs, measured with one more product
each. A pair is converged when its residual is at most ``tol * scale`` (``scale`` = the largest
|Ritz value|); an eigenvalue of ``A`` lies within the residual of each Ritz value, whatever the rest of the
spectrum. When the Krylov space is the whole space (``exhausted``) the Ritz values are the spectrum.

There is no eigenvalue stop (``r^2 / gap``). Kato-Temple's ``|lambda - theta| <= r^2 / gap`` needs ``gap``, the
distance from ``theta`` to every *other* eigenvalue of ``A``, from below; Lanczos knows Ritz values, which bound
eigenvalues from the inside (Cauchy interlacing), never from the outside, so an eigenvalue the Krylov space has not
resolved can sit within any gap read off them. The stop that estimated it (the next Ritz value inwards less its
residual) flagged pairs whose eigenvalue error exceeded ``tol x scale`` (1.15 and 1.23 tol at ``tol = 1e-3``:
``theory_checks/test_lanczos_contract.py``'s history), so it was removed rather than kept unsound.

Negative counts use the relative floor of ``mini.hessian`` (``lambda < -NEG_FLOOR * scale``); from
Lanczos they count converged Ritz values only (a lower bound unless ``exhausted``). The condition
number is reported only when the operator is positive definite (``lambda_min > floor``).

``shifted_power_iteration`` is the estimator of the paper's E2 (20 power steps on ``A`` for the
dominant eigenvalue ``mu``, then 20 on ``A - mu I``, ``lambda_min = mu + (result)``), kept to
measure its error. It assumes the dominant eigenvalue is the largest; when the largest-magnitude
eigenvalue is negative, the first run returns it, the shift moves the spectrum the wrong way and
the "lambda_min" lands near ``lambda_max``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch
from scipy.linalg import eigh_tridiagonal
from scipy.linalg.lapack import dstemr
from torch import Tensor

from mini.hessian import NEG_FLOOR

TOL = {torch.float64: 1e-10, torch.float32: 1e-5, torch.bfloat16: 1e-2, torch.float16: 1e-2}
RESUME_FLOOR_ULPS = 8  # lanczos: no resume to an estimate target below this many epsilons of the products' dtype


class SymmetricOperator(Protocol):
    N: int
    dtype: torch.dtype
    device: torch.device

    def matvec(self, v: Tensor) -> Tensor: ...


@dataclass(frozen=True)
class LanczosResult:
    """Extreme Ritz pairs: ``values`` ascending, the ``k`` lowest then the ``k`` highest (deduplicated)."""

    values: np.ndarray  # (p,) Ritz values, ascending
    vectors: Tensor = field(repr=False)  # (N, p) float64 Ritz vectors
    residuals: np.ndarray  # (p,) |A y - theta y|, measured
    converged: np.ndarray  # (p,) bool: residual <= tol * scale
    ritz_all: np.ndarray = field(repr=False)  # every Ritz value of the final T, ascending
    residual_estimates: np.ndarray = field(repr=False)  # beta_m |s_m| for ritz_all
    n_products: int
    n_iter: int
    exhausted: bool
    tol: float
    rel_floor: float

    @property
    def lambda_min(self) -> float:
        return float(self.values[0])

    @property
    def lambda_max(self) -> float:
        return float(self.values[-1])

    @property
    def scale(self) -> float:
        return float(max(abs(self.values[0]), abs(self.values[-1])))

    @property
    def floor(self) -> float:
        return self.rel_floor * self.scale

    @property
    def ends_converged(self) -> bool:
        return bool(self.converged[0] and self.converged[-1])

    @property
    def n_negative(self) -> int:
        """Converged Ritz values below ``-floor`` (a lower bound on the count unless ``exhausted``)."""
        ok = self.residual_estimates <= self.tol * self.scale
        return int(np.sum((self.ritz_all < -self.floor) & ok))

    @property
    def condition(self) -> float | None:
        """``lambda_max / lambda_min`` when positive definite at both converged ends, else ``None``."""
        if self.ends_converged and self.lambda_min > self.floor:
            return self.lambda_max / self.lambda_min
        return None

    def summary(self) -> dict[str, Any]:
        return {
            "lambda_min": self.lambda_min, "lambda_max": self.lambda_max, "scale": self.scale,
            "residual_min": float(self.residuals[0]), "residual_max": float(self.residuals[-1]),
            "converged_min": bool(self.converged[0]), "converged_max": bool(self.converged[-1]),
            "n_negative": self.n_negative, "n_negative_is": "exact" if self.exhausted else "lower bound",
            "condition": self.condition, "n_products": self.n_products, "n_iter": self.n_iter,
            "exhausted": self.exhausted, "tol": self.tol, "rel_floor": self.rel_floor,
        }


def _eigh_tridiagonal(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Eigenpairs of the symmetric tridiagonal ``T`` (diagonal ``a``, off-diagonal ``b``): LAPACK's
    tridiagonal solver, O(m^2) and free of BLAS threading (a dense eigh per step was the bottleneck)."""
    if len(a) == 1:
        return a.copy(), np.ones((1, 1))
    return eigh_tridiagonal(a, b)


def _tridiagonal_ends(a: np.ndarray, b: np.ndarray, k: int,
                      halves: tuple[bool, bool] = (True, True)) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` lowest and ``k`` highest eigenvalues of ``T`` and the last components of their eigenvectors
    (the residual estimates' ``s_m``): LAPACK's ``dstemr`` for the selected indices only (two calls of a few
    microseconds), not the whole eigendecomposition, which a stopping test at every step does not need.
    ``halves``: which of the two ends to compute (the other's ``k`` entries are NaN) once ``m > 2 k``."""
    m = len(a)
    if m <= 2 * k:
        theta, s = _eigh_tridiagonal(a, b)
        return theta, s[-1]
    e = np.zeros(m)
    e[: m - 1] = b
    theta, last = np.full(2 * k, np.nan), np.full(2 * k, np.nan)
    for half, (il, iu) in enumerate(((1, k), (m - k + 1, m))):
        if not halves[half]:
            continue
        found, w, z, info = dstemr(a, e.copy(), 2, 0.0, 0.0, il, iu)  # range 'I': eigenpairs il..iu (1-based)
        if info != 0 or found != k:
            theta, s = _eigh_tridiagonal(a, b)
            ends = np.concatenate([np.arange(k), np.arange(m - k, m)])
            return theta[ends], s[-1, ends]
        theta[half * k:(half + 1) * k], last[half * k:(half + 1) * k] = w[:k], z[-1, :k]
    return theta, last


def _reorthogonalise(w: Tensor, basis: Tensor, eta: float = 2.0**-0.5) -> Tensor:
    """Full reorthogonalisation of ``w`` against the rows of ``basis`` (classical Gram-Schmidt), repeated once
    when the pass removed more than ``1 - eta`` of ``w``'s norm (Daniel-Gragg-Kaufman-Stewart: then the
    first pass's own rounding may matter; otherwise a second pass changes nothing at working precision)."""
    for _ in range(2):
        before = w.norm()
        w = w - basis.T @ (basis @ w)
        if w.norm() > eta * before:
            break
    return w


def _start_vector(N: int, device, v0: Tensor | None, warm: LanczosResult | None, seed: int) -> Tensor:
    gen = torch.Generator(device="cpu").manual_seed(seed)
    r = torch.randn(N, generator=gen, dtype=torch.float64).to(device)
    r = r / r.norm()
    if v0 is not None:
        q = v0.detach().to(dtype=torch.float64, device=device).reshape(-1)
    elif warm is not None:
        if warm.vectors.shape[0] != N:
            raise ValueError(f"warm start from a result of dimension {warm.vectors.shape[0]}, operator has N={N}")
        q = warm.vectors.to(device).sum(dim=1)  # the previous extreme Ritz vectors, both ends
        q = q / q.norm() + 1e-2 * r  # plus a little of everything else
    else:
        return r
    if q.shape[0] != N or not torch.isfinite(q).all() or q.norm() == 0:
        raise ValueError(f"start vector must be a finite nonzero vector of length N={N}")
    return q / q.norm()


def lanczos(
    op: SymmetricOperator,
    k: int = 1,
    *,
    max_iter: int | None = None,
    tol: float | None = None,
    v0: Tensor | None = None,
    warm: LanczosResult | None = None,
    seed: int = 0,
    rel_floor: float = NEG_FLOOR,
    min_iter: int = 2,
) -> LanczosResult:
    """The ``k`` lowest and ``k`` highest eigenpairs of ``op`` by Lanczos (full reorthogonalisation).

    Stops when the ``k`` extreme Ritz pairs at each end are converged, when the Krylov space is
    exhausted, or after ``max_iter`` products (default ``min(N, 200)``): residual estimates ``r <= tol * scale``
    (no eigenvalue stop: module docstring). ``tol`` defaults by the operator's dtype (float64: 1e-10, float32:
    1e-5). ``warm``: start from a previous result's Ritz vectors (same operator dimension), for a rerun on the same
    operator. Not from a previous measurement's: after an eigenvalue crossing its lowest Ritz vector is the new second
    eigenvector, and a loose ``tol`` (float32's default, 1e-5) can be met there before the lowest eigenvector shows
    (``tests/test_lanczos.py``), so ``scale.curvature.tracking.measure`` starts cold.
    """
    N = int(op.N)
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    m_max = min(N, 200) if max_iter is None else min(int(max_iter), N)
    if m_max < 1:
        raise ValueError(f"max_iter must be >= 1, got {max_iter}")
    tol = TOL.get(op.dtype, 1e-5) if tol is None else float(tol)
    device = op.device
    Q = torch.empty(m_max + 1, N, dtype=torch.float64, device=device)  # rows q_1 .. q_m (written before read)
    Q[0] = _start_vector(N, device, v0, warm, seed)
    alpha = np.zeros(m_max)
    beta = np.zeros(m_max)  # beta[j] couples q_j and q_{j+1}
    gen = torch.Generator(device="cpu").manual_seed(seed + 1)
    n_products, m, exhausted = 0, 0, False
    # The stop test reads the residual estimates ``beta_m |s_m|`` of dstemr's end vectors; the returned pairs'
    # residuals are measured. The two agree to rounding, except where near-repeated Ritz values leave the vectors
    # ill-determined: then the measurement may sit just above ``tol``. The iteration then resumes with the
    # estimate's target halved, until the measured residuals pass, the budget is spent, or the target would fall
    # below the products' rounding floor (``resume_floor``): there the estimates keep shrinking while the measured
    # residuals cannot, and every resume would buy one step and two products for nothing.
    target, floor = tol, resume_floor(op.dtype)
    while True:
        for j in range(m, m_max):
            w = op.matvec(Q[j].to(op.dtype)).to(torch.float64)
            n_products += 1
            alpha[j] = float(Q[j] @ w)
            w = w - alpha[j] * Q[j] - (beta[j - 1] * Q[j - 1] if j else 0.0)  # the three-term recurrence
            w = _reorthogonalise(w, Q[: j + 1])
            b = float(w.norm())
            m = j + 1
            if m == N:
                exhausted = True
                break
            theta_ends, s_last = _tridiagonal_ends(alpha[:m], beta[: m - 1], k)
            scale = max(float(np.abs(theta_ends).max()), np.finfo(float).tiny)
            if m >= min_iter and np.all(b * np.abs(s_last) <= target * scale):
                break
            if m == m_max:
                break
            _next_basis_vector(Q, beta, j, w, b, scale, gen)
        result = _ritz_pairs(op, Q, alpha, beta, m, b, k, tol, exhausted, n_products, rel_floor)
        if result.ends_converged or exhausted or m == m_max or target / 2 < floor:
            return result
        _next_basis_vector(Q, beta, m - 1, w, b, scale, gen)
        n_products, target = result.n_products, target / 2


def resume_floor(dtype: torch.dtype) -> float:
    """The lowest estimate target, relative to the scale, that ``lanczos`` resumes to: ``RESUME_FLOOR_ULPS``
    epsilons of the operator's products. A measured residual ``|fl(A y) - theta y|`` carries the product's own
    rounding, a few epsilons of ``|A|`` (measured: 0.6-0.9 eps on float32 block products, about 8 eps on
    float32 closed-form and autograd products through 2048-wide layers), which no further Lanczos step removes."""
    return RESUME_FLOOR_ULPS * float(torch.finfo(dtype).eps) if dtype.is_floating_point else 0.0


def _next_basis_vector(Q: Tensor, beta: np.ndarray, j: int, w: Tensor, b: float, scale: float,
                       gen: torch.Generator) -> None:
    """``q_{j+1} = w / beta_j``; on an invariant subspace (``beta_j`` at round-off), a fresh random direction
    orthogonal to the basis, with ``beta_j = 0``."""
    if b <= 1e-12 * scale:
        b = 0.0
        r = torch.randn(Q.shape[1], generator=gen, dtype=torch.float64).to(Q.device)
        for _ in range(2):
            r = r - Q[: j + 1].T @ (Q[: j + 1] @ r)
        Q[j + 1] = r / r.norm()
    else:
        Q[j + 1] = w / b
    beta[j] = b


def _ritz_pairs(op: SymmetricOperator, Q: Tensor, alpha: np.ndarray, beta: np.ndarray, m: int, b: float, k: int,
                tol: float, exhausted: bool, n_products: int, rel_floor: float) -> LanczosResult:
    """The ``k`` extreme Ritz pairs at each end of ``T_m``, their residuals measured with one product each."""
    device = Q.device
    theta, s = _eigh_tridiagonal(alpha[:m], beta[: m - 1])
    est = b * np.abs(s[-1]) if not exhausted else np.zeros(m)
    pick = sorted(set(range(min(k, m))) | set(range(max(m - k, 0), m)))
    S = torch.as_tensor(s[:, pick], dtype=torch.float64, device=device)
    Y = Q[:m].T @ S  # (N, p) Ritz vectors
    Y = Y / Y.norm(dim=0, keepdim=True)
    AY = op.matmat(Y.to(op.dtype)).to(torch.float64)  # the returned pairs' residuals, measured (one batch)
    n_products += Y.shape[1]
    residuals = (AY - Y * torch.as_tensor(theta[pick], dtype=torch.float64, device=device)).norm(dim=0).cpu().numpy()
    scale = max(float(np.abs(theta).max()), np.finfo(float).tiny)
    return LanczosResult(
        values=theta[pick], vectors=Y, residuals=residuals, converged=residuals <= max(tol, 1e-13) * scale,
        ritz_all=theta, residual_estimates=est, n_products=n_products, n_iter=m, exhausted=exhausted,
        tol=tol, rel_floor=rel_floor,
    )


# --------------------------------------------------------------------------------------------
# The paper's estimator, for comparison
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PowerResult:
    lambda_dominant: float  # first run: the eigenvalue of largest magnitude (the paper reads it as lambda_max)
    lambda_min: float  # dominant + second run on A - dominant I
    n_products: int
    dtype: str


def shifted_power_iteration(op: SymmetricOperator, n_iter: int = 20, *, dtype: torch.dtype = torch.float32,
                            seed: int = 0) -> PowerResult:
    """The paper's E2 estimator: ``n_iter`` power steps on ``A``, then ``n_iter`` on ``A - mu I``.

    Vectors are kept in ``dtype`` (float32 as in the paper); eigenvalue estimates are Rayleigh
    quotients. The result is what the estimator returns, right or wrong.
    """
    gen = torch.Generator(device="cpu").manual_seed(seed)

    def run(shift: float) -> float:
        v = torch.randn(op.N, generator=gen, dtype=torch.float64).to(dtype=dtype, device=op.device)
        v = v / v.norm()
        lam = 0.0
        for _ in range(n_iter):
            w = (op.matvec(v.to(op.dtype)).to(dtype) - shift * v).to(dtype)
            lam = float(v @ w)
            nrm = w.norm()
            if nrm == 0:
                break
            v = w / nrm
        return lam

    mu = run(0.0)
    shifted = run(mu)
    return PowerResult(mu, mu + shifted, 2 * n_iter, str(dtype).removeprefix("torch."))
