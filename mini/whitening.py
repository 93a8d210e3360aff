r"""Section 3.1: local subspace whitening (Theorem 3.1) and the curvature barrier (Proposition 3.3).

Objects and shapes
------------------
- ``A = grad^2_h L`` at ``h(z*)``: a symmetric (k, k) loss Hessian (for a batch objective read at
  one sample, the diagonal block ``grad^2_{h_i} L``; for the whole batch as one point, (n*k, n*k)).
- ``S``: an r-dimensional subspace of the tangent space ``T_{z*} Z = R^d``, given by any (d, r)
  matrix whose columns span it (orthonormalised here).
- A linear head ``h(z) = W (z - z*) + h*`` with ``W`` (k, d): its effective Hessian at ``z*`` is
  ``H_eff = W^T A W`` (d, d) (a linear head has ``M = 0``, equation (1)).
- A loss ``phi: R^k -> R`` (autograd-safe, one point ``u`` of shape (k,)) whose Hessian
  ``g_L(u) = grad^2 phi(u)`` is read as a Riemannian metric on ``H = R^k``.

Theorem 3.1 (local subspace whitening), as checked
--------------------------------------------------
Let ``A`` be symmetric with exactly ``r >= 1`` eigenvalues above ``rel_floor * |A|_2`` (its positive
part ``A_+ = V_r diag(lam_r) V_r^T``), and ``S = span(U)``, ``U`` (d, r) orthonormal, ``d >= r``,
``k >= r``. Then ``W = V_r diag(lam_r^{-1/2}) U^T`` (k, d) gives

    W^T A W = U diag(lam_r^{-1/2}) V_r^T A V_r diag(lam_r^{-1/2}) U^T = U U^T = P_S,

so ``v^T H_eff v = |v|^2`` for every ``v`` in ``S`` (and ``H_eff v = 0`` on ``S^perp``). Only the
positive eigenpairs are used, so the identity holds even when ``A`` is indefinite (the negative part
is orthogonal to ``V_r`` and drops out); ``whitening_head`` reports how many eigenvalues it left out.

Consequence: gradient descent on ``z -> L(h(z))`` restricted to ``z* + S`` with a quadratic loss
sees the Hessian ``P_S``; with step 1 it converges in one step whatever the condition number of
``A``. Without the head (``W = I``) the step must be ``<= 2 / lam_max`` and the error in the
weakest direction contracts by ``1 - lam_min / lam_max`` per step: steps grow like ``cond(A)``.

Proposition 3.3 (curvature barrier for linear heads)
----------------------------------------------------
``g_L(u) = grad^2 phi(u)`` is a *Hessian metric*. Its Riemann tensor needs derivatives of ``g`` up
to order two, i.e. derivatives of ``phi`` up to order four; for a Hessian metric the fourth-order
terms cancel (Shima) and only third derivatives remain. Both are computed here and must agree.
Isotropy is taken scale-free: ``H`` is isotropic when ``H = c I`` (``c > 0``), with defect
``delta(H) = log cond(H) = log(lam_max / lam_min)`` (``+inf`` when ``H`` is singular or indefinite).

Stated and checked (``d = k``, ``W`` invertible, so ``H_eff`` can be nondegenerate): for points
``u_1..u_m`` of ``H`` and ``z_p = W^{-1}(u_p - b)`` their preimages under ``h(z) = W z + b``,

    max_p delta(H_eff(z_p)) >= B(u_1..u_m) = 1/2 max_{p<q} log(mu_max / mu_min)(g(u_q), g(u_p)),

``mu`` the generalised eigenvalues of the pencil ``(g(u_q), g(u_p))``. Proof: ``H_p = W^T g_p W``,
so ``H_p^{-1} H_q = W^{-1} g_p^{-1} g_q W`` is similar to ``g_p^{-1} g_q``; its eigenvalues lie in
``[lam_min(H_q)/lam_max(H_p), lam_max(H_q)/lam_min(H_p)]``, hence
``mu_max/mu_min <= cond(H_p) cond(H_q)`` and ``max(delta_p, delta_q) >= 1/2 log(mu_max/mu_min)``.
``B`` depends on the metric at the points only, never on ``W``. It is attained for two points by
``W = V diag(mu^{-1/4})`` (``V`` the ``g_p``-orthonormal generalised eigenvectors; ``attaining_head``).
``B = 0`` for every pair only if ``g(u_q)`` is a multiple of ``g(u_p)`` everywhere; a Hessian metric
of that form is constant, hence flat. So non-vanishing curvature forces ``B > 0`` at some pair and
no constant ``W`` is isotropic everywhere: Proposition 3.3, with a quantitative defect.

The premise ``k = d`` is needed; for ``k > d`` the statement as phrased is false. ``H_eff(z) =
W^T g(W z + b) W`` only sees ``g`` on the d-plane ``P = W R^d + b`` and in directions along it, and a
curved ``(H, g)`` can contain a flat plane on which ``g`` is constant: ``flat_times_curved`` on ``R^4``
(a flat factor times the log-partition surface) with ``W = FLAT_FACTOR_HEAD`` (4 x 2) gives
``H_eff = I`` on all of ``Z = R^2``. Corrected statement, for ``k >= d`` and ``W`` of rank ``d``: with
``psi(z) = phi(W z + b)``, ``H_eff = grad^2 psi`` is itself a Hessian metric on ``Z``, so the argument
above applies to it (``pulled_back_metrics``): no head with image plane ``P`` is isotropic everywhere
unless ``phi`` restricted to ``P`` has a constant Hessian, and ``B`` of the pulled-back metrics bounds
the defect of every parametrisation ``W A`` of ``P``. For ``k = d``, ``P = H`` and this is the statement
above; for ``k > d`` the curvature of ``(H, g)`` does not decide it: it can live in directions the
plane never sees (in the counterexample ``P`` is a totally geodesic flat slice of a product).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import autograd.numpy as anp
import numpy as np
from autograd import hessian, jacobian
from autograd.scipy.special import logsumexp
from scipy.linalg import eigh

from mini.hessian import NEG_FLOOR

Array = Any
Loss = Callable[[Array], Array]  # phi: (k,) -> scalar, autograd-safe


# --------------------------------------------------------------------------------------------
# Theorem 3.1: the whitening construction
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Whitening:
    """``W`` (k, d) whitening ``S`` against ``A``; ``rank`` = r positive eigenpairs used,
    ``n_negative`` eigenvalues of ``A`` below ``-floor`` that were left out (0 when ``A`` is PSD)."""

    W: np.ndarray
    rank: int
    n_negative: int
    eigenvalues: np.ndarray

    @property
    def psd(self) -> bool:
        return self.n_negative == 0


def orthonormal_basis(subspace: Array) -> np.ndarray:
    """An orthonormal (d, r) basis of the column span of ``subspace`` (``ValueError`` if rank-deficient)."""
    S = np.asarray(subspace, dtype=float)
    if S.ndim != 2 or S.shape[1] < 1 or not np.all(np.isfinite(S)):
        raise ValueError(f"subspace must be a finite (d, r) matrix of spanning columns, got shape {S.shape}")
    U, s, _ = np.linalg.svd(S, full_matrices=False)
    if s[-1] <= NEG_FLOOR * s[0]:
        raise ValueError(f"subspace columns are linearly dependent (singular values {s}); give r independent ones")
    return U


def whitening_head(loss_hessian: Array, subspace: Array, rel_floor: float = NEG_FLOOR) -> Whitening:
    """Theorem 3.1: ``W = V_r diag(lam_r^{-1/2}) U^T`` with ``W^T A W = U U^T`` (projector on ``S``).

    ``loss_hessian`` (k, k) symmetric; ``subspace`` (d, r) spanning ``S``; ``r`` must equal the
    number of eigenvalues of ``A`` above ``rel_floor * |A|_2`` (the rank of the positive part).
    """
    A = np.asarray(loss_hessian, dtype=float)
    if A.ndim != 2 or A.shape[0] != A.shape[1] or not np.all(np.isfinite(A)):
        raise ValueError(f"loss_hessian must be a finite square (k, k) matrix, got shape {A.shape}")
    if np.abs(A - A.T).max(initial=0.0) > 1e-8 * max(np.abs(A).max(initial=0.0), 1e-300):
        raise ValueError("loss_hessian is not symmetric")
    U = orthonormal_basis(subspace)  # (d, r)
    lam, V = np.linalg.eigh(0.5 * (A + A.T))
    floor = rel_floor * float(np.abs(lam).max(initial=0.0))
    keep = lam > floor
    r = int(keep.sum())
    if r == 0:
        raise ValueError("loss_hessian has no positive eigenvalue: there is nothing to whiten")
    if U.shape[1] != r:
        raise ValueError(
            f"subspace has dimension {U.shape[1]} but the loss Hessian's positive part has rank r={r}; "
            "Theorem 3.1 whitens an r-dimensional subspace (pass r spanning columns)"
        )
    Vr, lr = V[:, keep], lam[keep]  # (k, r), (r,)
    W = (Vr / np.sqrt(lr)) @ U.T  # (k, r) diag(lam^-1/2) (r, d) -> (k, d)
    return Whitening(W, r, int(np.sum(lam < -floor)), lam)


def restricted(H: Array, subspace: Array) -> np.ndarray:
    """``U^T H U`` (r, r): the quadratic form of ``H`` on ``S = span(U)`` in an orthonormal basis."""
    U = orthonormal_basis(subspace)
    return U.T @ np.asarray(H, dtype=float) @ U


def linear_head_hessian(loss: Callable[[Array], Array], W: Array, z_star: Array, h_star: Array) -> np.ndarray:
    """Autograd's ``H_eff(z*)`` of ``z -> L(W (z - z*) + h*)``: the independent check of ``W^T A W``.

    ``loss`` takes a flat vector of the head's output space (k,), ``W`` (k, d), ``z*`` (d,), ``h*`` (k,).
    """
    W, z_star, h_star = (np.asarray(x, dtype=float) for x in (W, z_star, h_star))
    return hessian(lambda z: loss(anp.dot(W, z - z_star) + h_star))(z_star)


# --------------------------------------------------------------------------------------------
# Theorem 3.1, consequence: gradient descent no longer sees the condition number
# --------------------------------------------------------------------------------------------


def gd_steps(
    grad_fn: Callable[[np.ndarray], np.ndarray],
    z0: np.ndarray,
    z_star: np.ndarray,
    lr: float,
    tol: float,
    max_steps: int,
) -> int:
    """Plain gradient descent ``z <- z - lr grad(z)``: the first ``t`` with ``|z_t - z*| <= tol |z_0 - z*|``
    (``max_steps + 1`` if not reached)."""
    z, e0 = np.array(z0, dtype=float), float(np.linalg.norm(z0 - z_star))
    for t in range(1, max_steps + 1):
        z = z - lr * grad_fn(z)
        if np.linalg.norm(z - z_star) <= tol * e0:
            return t
    return max_steps + 1


def gd_steps_quadratic(H: np.ndarray, e0: np.ndarray, lr: float, tol: float, max_steps: int = 10**9) -> int:
    """The same count for a quadratic with Hessian ``H``, from the exact iterates.

    GD on ``1/2 e^T H e`` gives ``e_t = (I - lr H)^t e_0 = V diag((1 - lr lam)^t) V^T e_0``. With
    ``0 < lr lam < 2`` every factor has ``|1 - lr lam| < 1``, so ``|e_t|`` is non-increasing and the
    first ``t`` with ``|e_t| <= tol |e_0|`` is found by doubling and bisection over exact iterates (GD
    for condition number 1e5 takes ~1e6 steps; this evaluates ~40 of them).

    The guard is the monotonicity premise ``lr lam_max < 2``, not the caller's usual choice
    ``lr = 1 / lam_max``: a step computed from one eigensolver's ``lam_max`` can exceed ``1 / lam_max``
    of another's by an ulp, and that must not turn into an error.
    """
    lam, V = np.linalg.eigh(H)
    if lam.min() <= 0 or not lr * lam.max() < 2:
        raise ValueError("gd_steps_quadratic needs H positive definite and 0 < lr < 2 / lam_max")
    c = V.T @ e0

    def err(t: int) -> float:
        return float(np.linalg.norm(c * (1.0 - lr * lam) ** t))

    target = tol * float(np.linalg.norm(e0))
    hi = 1
    while err(hi) > target:
        hi *= 2
        if hi > max_steps:
            return max_steps + 1
    lo = hi // 2  # err(lo) > target (or lo = 0)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if err(mid) <= target else (mid, hi)
    return hi


# --------------------------------------------------------------------------------------------
# Proposition 3.3: curvature of a metric, and of a Hessian metric
# --------------------------------------------------------------------------------------------


def riemann_tensor(metric: Callable[[Array], Array], u: Array) -> np.ndarray:
    r"""Riemann tensor ``R_{iklm}`` (k, k, k, k) of a metric ``g(u)`` at ``u``, from ``dg`` and ``d^2 g``.

    Landau-Lifshitz convention (2-D: ``K = R_{1212} / det g``, +1 on the unit sphere):

        Gamma_{n,kl} = 1/2 (d_l g_nk + d_k g_nl - d_n g_kl),   Gamma^n_kl = g^{nq} Gamma_{q,kl}
        R_iklm = 1/2 (d_k d_l g_im + d_i d_m g_kl - d_k d_m g_il - d_i d_l g_km)
                 + g_np (Gamma^n_kl Gamma^p_im - Gamma^n_km Gamma^p_il)
    """
    u = np.asarray(u, dtype=float)
    g = np.asarray(metric(u), dtype=float)
    dg = jacobian(metric)(u)  # dg[a, b, c] = d_c g_ab
    ddg = jacobian(jacobian(metric))(u)  # ddg[a, b, c, e] = d_e d_c g_ab
    gamma1 = 0.5 * (np.einsum("nkl->nkl", dg) + np.einsum("nlk->nkl", dg) - np.einsum("kln->nkl", dg))
    gamma2 = np.einsum("nq,qkl->nkl", np.linalg.inv(g), gamma1)  # Gamma^n_kl
    second = 0.5 * (
        np.einsum("imkl->iklm", ddg)  # d_k d_l g_im
        + np.einsum("klim->iklm", ddg)  # d_i d_m g_kl
        - np.einsum("ilkm->iklm", ddg)  # d_k d_m g_il
        - np.einsum("kmil->iklm", ddg)  # d_i d_l g_km
    )
    quad = np.einsum("np,nkl,pim->iklm", g, gamma2, gamma2) - np.einsum("np,nkm,pil->iklm", g, gamma2, gamma2)
    return second + quad


def hessian_metric_riemann(loss: Loss, u: Array) -> np.ndarray:
    r"""Riemann tensor of the Hessian metric ``g = grad^2 phi`` from third derivatives only (Shima):

        R_iklm = 1/4 g^{pq} (phi_pkl phi_qim - phi_pkm phi_qil)

    (``Gamma_{n,kl} = phi_nkl / 2``; the fourth derivatives ``phi_iklm`` are fully symmetric and
    cancel in the bracket of ``riemann_tensor``.)
    """
    u = np.asarray(u, dtype=float)
    g = hessian(loss)(u)
    T = jacobian(hessian(loss))(u)  # T[a, b, c] = phi_abc, fully symmetric
    ginv = np.linalg.inv(g)
    return 0.25 * (np.einsum("pq,pkl,qim->iklm", ginv, T, T) - np.einsum("pq,pkm,qil->iklm", ginv, T, T))


def gaussian_curvature(loss: Loss, u: Array, general: bool = False) -> float:
    """``K = R_1212 / det g`` of ``g = grad^2 phi`` at ``u`` (k = 2); ``general=True`` uses the
    fourth-derivative formula of ``riemann_tensor`` instead of the Hessian-metric one."""
    u = np.asarray(u, dtype=float)
    if u.shape != (2,):
        raise ValueError(f"Gaussian curvature needs a 2-D embedding space, got u of shape {u.shape}")
    R = riemann_tensor(hessian(loss), u) if general else hessian_metric_riemann(loss, u)
    return float(R[0, 1, 0, 1] / np.linalg.det(hessian(loss)(u)))


# Curved and flat losses on H = R^k: ``u`` is one point (k,) or rows (T, k) -> one value per row. The
# mixtures' directions are fixed non-orthogonal unit vectors, so the sums are not separable (those are flat).
MIX_DIRECTIONS = np.array([[1.0, 0.0], [0.0, 1.0], [np.sqrt(0.5), np.sqrt(0.5)]])  # (3, 2)


def quadratic_loss(A: np.ndarray) -> Loss:
    """``phi(u) = 1/2 u^T A u``: constant metric, zero curvature (the control)."""
    A = 0.5 * (np.asarray(A, dtype=float) + np.asarray(A, dtype=float).T)
    return lambda u: 0.5 * anp.sum(u * anp.dot(u, A), axis=-1)


def log_partition(u: Array) -> Array:
    """``phi(u) = log(1 + sum_c exp u_c)``: InfoNCE-like (a positive logit held at 0). Its Hessian is
    the categorical Fisher metric, of constant curvature +1/4 (a piece of the sphere of radius 2)."""
    logits = anp.concatenate([anp.zeros((*anp.shape(u)[:-1], 1)), u], axis=-1)  # (..., k + 1)
    return logsumexp(logits, axis=-1)  # shifted by the max inside: no overflow


def softplus_mix(u: Array) -> Array:
    """``phi(u) = sum_j softplus(a_j . u) + |u|^2 / 20`` over ``MIX_DIRECTIONS`` (k = 2)."""
    return anp.sum(anp.logaddexp(0.0, anp.dot(u, MIX_DIRECTIONS.T)), axis=-1) + 0.05 * anp.sum(u * u, axis=-1)


def logcosh_mix(u: Array) -> Array:
    """``phi(u) = sum_j log cosh(a_j . u)`` over ``MIX_DIRECTIONS`` (k = 2), written overflow-safe."""
    x = anp.dot(u, MIX_DIRECTIONS.T)
    return anp.sum(anp.logaddexp(x, -x) - np.log(2.0), axis=-1)


def flat_times_curved(u: Array) -> Array:
    """``phi(u) = |u_{1:2}|^2 / 2 + log_partition(u_{3:4})`` on ``R^4``: the product of a flat plane and
    the curved log-partition surface (``K = 1/4`` on the ``(u_3, u_4)`` plane), so ``(H, g)`` is curved.
    The linear head ``W = FLAT_FACTOR_HEAD`` (4 x 2) maps ``Z = R^2`` onto the flat factor, where
    ``g`` restricted to the image is the constant identity: ``H_eff(z) = I`` for every ``z`` (and any
    bias). The counterexample to Proposition 3.3 for ``k > d``."""
    return 0.5 * anp.sum(u[..., :2] ** 2, axis=-1) + log_partition(u[..., 2:])


FLAT_FACTOR_HEAD = np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0], [0.0, 0.0]])  # (k, d) = (4, 2)


CURVED_LOSSES: dict[str, Loss] = {
    "log_partition": log_partition,
    "softplus_mix": softplus_mix,
    "logcosh_mix": logcosh_mix,
}


# --------------------------------------------------------------------------------------------
# Proposition 3.3: the W-independent isotropy defect bound
# --------------------------------------------------------------------------------------------


def isotropy_defect(H: Array) -> float:
    """``log cond(H)``: 0 iff ``H = c I`` with ``c > 0``; ``inf`` when ``H`` is not positive definite,
    including ``lam_min`` within round-off (``64 eps x lam_max``) of zero, whose sign is the LAPACK build's."""
    lam = np.linalg.eigvalsh(np.asarray(H, dtype=float))
    definite = lam[0] > 64 * np.finfo(float).eps * abs(lam[-1])
    return float(np.log(lam[-1] / lam[0])) if definite else float("inf")


def pencil_spread(g_p: Array, g_q: Array) -> float:
    """``log(mu_max / mu_min)`` of the generalised eigenvalues of ``g_q x = mu g_p x`` (both PD)."""
    mu = eigh(np.asarray(g_q, dtype=float), np.asarray(g_p, dtype=float), eigvals_only=True)
    if mu[0] <= 0:
        raise ValueError("pencil_spread needs positive definite metrics")
    return float(np.log(mu[-1] / mu[0]))


def defect_lower_bound(metrics: list[np.ndarray]) -> float:
    """``B = 1/2 max_{p<q} log(mu_max / mu_min)(g_q, g_p)``: no invertible ``W`` does better (Prop. 3.3)."""
    if len(metrics) < 2:
        raise ValueError("the isotropy defect bound needs the metric at two or more points")
    return max(0.5 * pencil_spread(metrics[p], metrics[q]) for p in range(len(metrics)) for q in range(p))


def pulled_back_metrics(loss: Loss, W: Array, b: Array, Z: Array) -> list[np.ndarray]:
    """``W^T g(W z_p + b) W`` (d, d) at each row ``z_p`` of ``Z`` (m, d): ``H_eff`` of the linear head
    ``h(z) = W z + b`` (``M = 0``), i.e. the Hessian metric of ``psi(z) = phi(W z + b)`` on ``Z``.

    For ``k > d`` these, not ``g`` at the image points, carry the barrier: ``defect_lower_bound`` of
    them bounds the defect of every head ``W A`` (``A`` in GL(d)) with the same image plane, at the
    preimages ``A^{-1} z_p`` (the pencils are similar), and it vanishes when ``phi`` restricted to the
    plane ``W R^d + b`` has a constant Hessian, whatever the curvature of ``(H, g)``."""
    W, b = np.asarray(W, dtype=float), np.asarray(b, dtype=float)
    return [W.T @ hessian(loss)(W @ z + b) @ W for z in np.asarray(Z, dtype=float)]


def head_defect(W: Array, metrics: list[np.ndarray]) -> float:
    """``max_p log cond(W^T g_p W)``: the defect of the linear head ``W`` at the preimages of the points."""
    W = np.asarray(W, dtype=float)
    return max(isotropy_defect(W.T @ g @ W) for g in metrics)


def attaining_head(g_p: Array, g_q: Array) -> np.ndarray:
    """``W = V diag(mu^{-1/4})`` with ``V^T g_p V = I``, ``V^T g_q V = diag(mu)``: then
    ``W^T g_p W = diag(mu^{-1/2})`` and ``W^T g_q W = diag(mu^{1/2})``, both of defect exactly ``B``."""
    mu, V = eigh(np.asarray(g_q, dtype=float), np.asarray(g_p, dtype=float))
    return V * mu ** -0.25


def optimise_linear_head(metrics: list[np.ndarray], n_starts: int, rng: np.random.Generator) -> float:
    """Smallest ``head_defect`` found by minimising over ``W`` from ``n_starts`` random starts.

    The objective ``max_p log cond`` is non-smooth; Nelder-Mead on it (scale-free in ``W``, so the
    search is over all d x d matrices) from random Gaussian starts. Returns the best defect found.
    """
    from scipy.optimize import minimize

    d = metrics[0].shape[0]
    best = float("inf")
    for _ in range(n_starts):
        x0 = rng.standard_normal(d * d)
        res = minimize(lambda x: min(head_defect(x.reshape(d, d), metrics), 1e6), x0, method="Nelder-Mead",
                       options={"xatol": 1e-10, "fatol": 1e-12, "maxiter": 4000})
        best = min(best, head_defect(res.x.reshape(d, d), metrics))
    return best
