r"""Section 3.2: what a head can do for conditioning (Theorem 3.2) and what its errors cost
(Proposition 3.4, Corollary 3.5).

Objects and shapes
------------------
- A per-point loss ``phi: R^k -> R`` (``mini.whitening``: rows (T, k) -> (T,)), a head ``h`` and a
  trajectory ``gamma``: ``T`` sampled points ``Z`` (T, d) of a smooth curve in ``Z = R^d``.
- ``H_eff(z) = grad^2_z phi(h(z))`` (d, d) at each point: ``pointwise_hessians`` -> (T, d, d).
- Proposition 3.4: Jacobians ``J`` (n, k, d) (block-diagonal batch), loss Hessian ``A`` (n, k, n, k),
  head Hessians ``T`` (n, k, d, d) (``T[i, c] = grad^2 h_c(z_i)``), residual ``rho`` (n, k).

Theorem 3.2 (epsilon-isotropy along a trajectory), the definition checked
--------------------------------------------------------------------------
A head is *epsilon-isotropic along gamma* when ``|H_eff(gamma(s)) - I|_2 <= eps`` at every point of the
curve. It is fitted at samples ``z_j = gamma(s_j)`` (``trajectory``) and measured at *held-out* points
strictly between them (``heldout_trajectory``, ``per_gap`` in every gap):

    eps(h, gamma) = max_{s held out} |H_eff(gamma(s)) - I|_2           (head_isotropy_error)

The value at the fit points (``IsotropicFit.eps``) is a training error: a head fitted to few samples
can be near-isotropic there and far from it in between. (``eps < 1`` gives ``H_eff`` positive definite
with ``cond <= (1 + eps) / (1 - eps)``.) The target is the identity, not ``c I``: a scale-free target
would let a linear head cheat by shrinking the curve's image to a point where the metric is nearly
constant. The paper's statement (paraphrase): for a smooth non-self-intersecting ``gamma`` an MLP head
reaches any ``eps``. What is checked: fitting an MLP head (L-BFGS on ``mean_j |H_eff(z_j) - I|_F^{2p}``,
the gradient through the Hessian by autograd) reaches a held-out ``eps`` at least 10x below the best
constant linear head's held-out ``eps``, for a curved loss; for a linear head ``eps >= tanh(B/2)`` with
``B`` Proposition 3.3's bound at the head's own image points, since ``|H - I|_2 <= eps`` implies
``log cond H <= log((1 + eps)/(1 - eps))``.

Proposition 3.4 (capacity bound), made precise
----------------------------------------------
Two heads ``phi`` (fitted) and ``*`` (ideal) at the same batch, ``E = J_phi - J_*``. With the common
loss Hessian ``A`` (both heads read at the same embeddings, or a quadratic loss):

    G_phi - G_* = E^T A J_* + J_*^T A E + E^T A E
    |G_phi - G_*|_2 <= 2 L M eps + M eps^2,     eps = |E|_2, L = |J_*|_2, M = |A|_2      (3.4)

(``|J|_2`` of the block-diagonal batch Jacobian is ``max_i |J_i|_2``; ``M`` is any bound on
``|A|_2``, PSD or not.) When the loss Hessians differ (``A_phi != A_*``), add ``(L + eps)^2 |A_phi - A_*|_2``.
Attained: ``A u = +-M u`` with ``|A|_2 = M``, ``J_* = L u v^T + B`` (``B`` maps ``v^perp`` into ``u^perp``,
``|B| <= L``), ``E = eps u v^T`` give ``G_phi - G_* = +-M (2 L eps + eps^2) v v^T``: (3.4) is sharp.

Interaction term (the extension). ``M_i = sum_c rho_{i,c} T_{i,c}`` and

    M_phi,i - M_*,i = sum_c rho^phi_{i,c} (T^phi - T^*)_{i,c} + sum_c (rho^phi - rho^*)_{i,c} T^*_{i,c}
    |M_phi - M_*|_2 <= max_i ( |rho^phi_i| delta_i + |rho^phi_i - rho^*_i| C_i )               (3.4')

with the head-curvature error ``delta_i = (sum_c |T^phi_{i,c} - T^*_{i,c}|_2^2)^{1/2}`` and the ideal
head's curvature ``C_i = (sum_c |T^*_{i,c}|_2^2)^{1/2}`` (triangle and Cauchy-Schwarz inequalities).
Attained when ``rho^phi``, ``rho^phi - rho^*`` are non-negative multiples of one unit ``w`` and
``T^phi - T^* = delta w (x) S``, ``T^* = C w (x) S`` with one unit-norm symmetric ``S``.

Corollary 3.5 (through Weyl's inequality ``|lam_j(H_phi) - lam_j(H_*)| <= |H_phi - H_*|_2``). With
``b`` the bound of (3.4) (+ (3.4') when the interaction term differs) and ``b < lam_min(H_*)``:
``H_phi`` is positive definite and ``cond(H_phi) <= (lam_max(H_*) + b) / (lam_min(H_*) - b)``. For
the Gauss-Newton error alone, ``b < lam_min`` holds exactly when

    eps < eps* = sqrt(L^2 + lam_min / M) - L        (= lam_min / (2 L M) to first order).

The paraphrase's threshold ``lam_min / (2 L M)`` drops the ``M eps^2`` term and is larger than
``eps*``: between the two, definiteness can be lost (``definiteness_loss_instance`` shows it). The
exact threshold is sharp: on that instance ``lam_min(H_phi) = lam_min(H_*) - b``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import autograd.numpy as anp
import numpy as np
from autograd import elementwise_grad, grad

from mini.heads import Head, init_head, parse_head_spec
from mini.hessian import assemble, decompose_closed_form, head_derivatives, interaction_blocks, loss_derivatives
from mini.whitening import defect_lower_bound

Array = Any
RowLoss = Callable[[Array], Array]  # rows (T, k) -> (T,)


# --------------------------------------------------------------------------------------------
# Trajectories: smooth, non-self-intersecting curves in Z = R^2, sampled
# --------------------------------------------------------------------------------------------


def trajectory_at(name: str, t: Array) -> np.ndarray:
    """Points (T, 2) of a named curve at parameters ``t`` (T,) in [0, 1]: ``arc`` (3/4 of the unit
    circle), ``segment`` (length 2), ``spiral`` (r = 0.4 + 0.25 s, s = 2 pi t: one turn, never crossing
    itself)."""
    t = np.asarray(t, dtype=float)
    if name == "arc":
        s = 1.5 * np.pi * t
        return np.stack([np.cos(s), np.sin(s)], axis=1)
    if name == "segment":
        return np.stack([-1.0 + 2.0 * t, 0.3 * np.ones_like(t)], axis=1)
    if name == "spiral":
        s = 2.0 * np.pi * t
        r = 0.4 + 0.25 * s
        return np.stack([r * np.cos(s), r * np.sin(s)], axis=1)
    raise ValueError(f"unknown trajectory {name!r}; valid: {', '.join(TRAJECTORIES)}")


def trajectory(name: str, n_points: int = 12) -> np.ndarray:
    """The fit samples (T, 2): ``n_points`` equally spaced parameters, endpoints included."""
    return trajectory_at(name, np.linspace(0.0, 1.0, n_points))


def heldout_params(n_points: int, per_gap: int) -> np.ndarray:
    """``per_gap`` equally spaced parameters strictly inside each of the ``n_points - 1`` gaps between
    the fit parameters ``j / (n_points - 1)``: ((n_points - 1) per_gap,), none equal to a fit parameter.
    Together with the fit samples they cover the whole curve at spacing ``1 / ((n_points - 1)(per_gap + 1))``."""
    if n_points < 2 or per_gap < 1:
        raise ValueError(f"held-out points need n_points >= 2 and per_gap >= 1, got {n_points}, {per_gap}")
    inner = np.arange(1, per_gap + 1) / (per_gap + 1)  # (per_gap,) in (0, 1)
    return ((np.arange(n_points - 1)[:, None] + inner[None, :]) / (n_points - 1)).ravel()


def heldout_trajectory(name: str, n_points: int = 12, per_gap: int = 8) -> np.ndarray:
    """Held-out samples (T', 2) of the curve, between the fit samples of ``trajectory(name, n_points)``."""
    return trajectory_at(name, heldout_params(n_points, per_gap))


TRAJECTORIES: tuple[str, ...] = ("arc", "segment", "spiral")


# --------------------------------------------------------------------------------------------
# H_eff at each point of a trajectory, differentiable in the head's parameters
# --------------------------------------------------------------------------------------------


def pointwise_hessians(f: Callable[[Array], Array], Z: Array) -> Array:
    """``H[t] = grad^2_{z_t} f`` (T, d, d) for ``f(Z) = sum_t f_t(z_t)`` separable over rows.

    ``g = grad f`` (T, d) has ``g[t]`` depending on ``z_t`` only, so the gradient of
    ``sum_t g[t, b]`` with respect to ``Z`` is row ``t``: ``d g[t, b] / d z_t`` — column ``b`` of
    every ``H[t]`` in one backward pass; ``d`` passes in all. Autograd-safe (nestable in ``grad``).
    """
    g = elementwise_grad(f)
    cols = [elementwise_grad(lambda X, b=b: anp.sum(g(X)[:, b]))(Z) for b in range(Z.shape[1])]
    return anp.stack(cols, axis=1)  # (T, d [b], d [a]), symmetric


def trajectory_hessians(loss: RowLoss, spec: str, layers: list, Z: Array) -> Array:
    """``H_eff(z_t) = grad^2_z phi(h(z))`` at every sample: (T, d, d).

    A linear head has ``M = 0`` and ``J = W``: eq. (1) gives ``W^T g(h(z_t)) W``, one derivative order
    cheaper than differentiating through the head (the same numbers; the check compares them).
    """
    if parse_head_spec(spec).activation is None and len(layers) == 1:
        W = layers[0]["W"]  # (k, d)
        g = pointwise_hessians(lambda U: anp.sum(loss(U)), Head(parse_head_spec(spec), layers)(Z))  # (T, k, k)
        return anp.matmul(anp.matmul(W.T, g), W)
    return pointwise_hessians(lambda X: anp.sum(loss(Head(parse_head_spec(spec), layers)(X))), Z)


def isotropy_error(Hs: Array) -> float:
    """``eps = max_t |H_t - I|_2`` (Theorem 3.2's epsilon)."""
    Hs = np.asarray(Hs, dtype=float)
    eye = np.eye(Hs.shape[-1])
    return float(max(np.abs(np.linalg.eigvalsh(H - eye)).max() for H in Hs))


def head_isotropy_error(loss: RowLoss, head: Head, Z: Array) -> float:
    """``eps`` of ``head`` at the points ``Z`` (T, d): ``max_t |H_eff(z_t) - I|_2``. Called with held-out
    points (``heldout_trajectory``) it measures the head along the curve, not only where it was fitted."""
    return isotropy_error(trajectory_hessians(loss, head.spec.name, head.layers, np.asarray(Z, dtype=float)))


# --------------------------------------------------------------------------------------------
# Theorem 3.2: fitting heads to be isotropic along a trajectory
# --------------------------------------------------------------------------------------------


def _flatten(layers: list) -> tuple[np.ndarray, list[tuple[int, int]]]:
    shapes = [tuple(layer["W"].shape) for layer in layers]
    return np.concatenate([np.concatenate([lay["W"].ravel(), lay["b"].ravel()]) for lay in layers]), shapes


def _unflatten(x: Array, shapes: list[tuple[int, int]]) -> list:
    out, i = [], 0
    for o, n in shapes:
        W = anp.reshape(x[i:i + o * n], (o, n))
        i += o * n
        out.append({"W": W, "b": x[i:i + o]})
        i += o
    return out


@dataclass(frozen=True)
class IsotropicFit:
    """A fitted head and its ``eps`` on the trajectory; ``surrogate`` is the final training objective."""

    head: Head
    eps: float
    surrogate: float
    iterations: int


def fit_isotropic_head(
    loss: RowLoss,
    Z: np.ndarray,
    spec: str,
    width: int,
    k: int,
    seed: int,
    iters: int = 300,
    power: int = 2,
) -> IsotropicFit:
    """Fit ``h`` (``spec``, hidden ``width``) so that ``H_eff(z_t) ~ I`` at the samples ``Z`` (T, d).

    L-BFGS on ``mean_t |H_eff(z_t) - I|_F^{2 power}`` (``power > 1`` leans towards the max over ``t``),
    exact gradients (autograd through the Hessian: third derivatives of ``h``).
    """
    from scipy.optimize import minimize

    spec_name = parse_head_spec(spec).name
    head0 = init_head(spec_name, Z.shape[1], k, width, seed)
    x0, shapes = _flatten(head0.layers)
    eye = np.eye(Z.shape[1])

    def surrogate(x):
        Hs = trajectory_hessians(loss, spec_name, _unflatten(x, shapes), Z)
        return anp.mean(anp.sum((Hs - eye) ** 2, axis=(1, 2)) ** power)

    # ftol = 0: run the budget (f is tiny near the optimum). A trial step of the line search may
    # overflow (huge trial weights); L-BFGS-B backs off, and the result is checked below.
    with np.errstate(over="ignore", invalid="ignore"):
        res = minimize(surrogate, x0, jac=grad(surrogate), method="L-BFGS-B",
                       options={"maxiter": iters, "ftol": 0.0, "gtol": 1e-14})
    layers = [{"W": np.asarray(lay["W"]), "b": np.asarray(lay["b"])} for lay in _unflatten(res.x, shapes)]
    head = Head(head0.spec, layers)
    eps = isotropy_error(trajectory_hessians(loss, spec_name, layers, Z))
    if not np.isfinite(eps):
        raise FloatingPointError(f"fitting {spec_name} (width {width}, seed {seed}) ended at a non-finite H_eff")
    return IsotropicFit(head, eps, float(res.fun), int(res.nit))


def best_linear_head(loss: RowLoss, Z: np.ndarray, k: int, n_starts: int, seed: int, iters: int = 200) -> IsotropicFit:
    """The best constant linear head found from ``n_starts`` random starts (smallest ``eps``)."""
    fits = [fit_isotropic_head(loss, Z, "linear", 1, k, seed + s, iters, power=4) for s in range(n_starts)]
    return min(fits, key=lambda f: f.eps)


def linear_certificate(loss: Callable[[Array], Array], head: Head, Z: np.ndarray) -> float:
    """``tanh(B / 2)`` with ``B`` Proposition 3.3's bound at the linear head's image points: no linear
    head with this image can have ``eps`` below it."""
    from autograd import hessian


    metrics = [hessian(loss)(u) for u in head(Z)]
    return math.tanh(0.5 * defect_lower_bound(metrics))


# --------------------------------------------------------------------------------------------
# Proposition 3.4: Gauss-Newton error, interaction error, their bounds
# --------------------------------------------------------------------------------------------


def spectral_norm(A: Array) -> float:
    return float(np.linalg.norm(np.asarray(A, dtype=float), 2))


def batch_jacobian_norm(J: Array) -> float:
    """``|J|_2`` of the block-diagonal batch Jacobian: ``max_i |J_i|_2`` (J is (n, k, d))."""
    return max(spectral_norm(Ji) for Ji in np.asarray(J))


def gauss_newton_bound(L: float, M: float, eps: float) -> float:
    """(3.4): ``2 L M eps + M eps^2``."""
    return 2.0 * L * M * eps + M * eps * eps


@dataclass(frozen=True)
class GaussNewtonGap:
    """``|G_phi - G_*|_2`` against the bound (3.4), and the constants that enter it."""

    gap: float
    bound: float
    eps: float
    L: float
    M: float


def gauss_newton_gap(J_star: Array, J_phi: Array, A: Array) -> GaussNewtonGap:
    """``J`` (n, k, d) per-sample Jacobians, ``A`` (n, k, n, k) the common loss Hessian."""
    J_star, J_phi, A = (np.asarray(x, dtype=float) for x in (J_star, J_phi, A))
    n, k, _ = J_star.shape
    zero = np.zeros((n, J_star.shape[2], J_star.shape[2]))
    G_star, _ = assemble(J_star, A, zero)
    G_phi, _ = assemble(J_phi, A, zero)
    eps, L, M = batch_jacobian_norm(J_phi - J_star), batch_jacobian_norm(J_star), spectral_norm(A.reshape(n * k, n * k))
    return GaussNewtonGap(spectral_norm(G_phi - G_star), gauss_newton_bound(L, M, eps), eps, L, M)


def head_hessians(head: Head, Z: Array) -> np.ndarray:
    """``T[i, c] = grad^2 h_c(z_i)`` (n, k, d, d), from the closed-form recursion with ``rho = e_c``."""
    der = head_derivatives(head, np.asarray(Z, dtype=float))
    n, k = der.h.shape
    return np.stack([interaction_blocks(der, np.tile(np.eye(k)[c], (n, 1))) for c in range(k)], axis=1)


def interaction_bound(rho_phi: Array, rho_star: Array, T_phi: Array, T_star: Array) -> float:
    """(3.4'): ``max_i |rho^phi_i| delta_i + |rho^phi_i - rho^*_i| C_i``; ``rho`` (n, k), ``T`` (n, k, d, d)."""
    rho_phi, rho_star = np.asarray(rho_phi, dtype=float), np.asarray(rho_star, dtype=float)
    out = 0.0
    for i in range(rho_phi.shape[0]):
        # hypot, not sqrt(sum of squares) (nor np.linalg.norm of a vector): the squares of tiny norms
        # underflow to 0 and would put the bound below the gap it bounds.
        delta = math.hypot(*(spectral_norm(D) for D in T_phi[i] - T_star[i]))
        C = math.hypot(*(spectral_norm(D) for D in T_star[i]))
        out = max(out, math.hypot(*rho_phi[i]) * delta + math.hypot(*(rho_phi[i] - rho_star[i])) * C)
    return out


def interaction_gap(rho_phi: Array, rho_star: Array, T_phi: Array, T_star: Array) -> float:
    """``|M_phi - M_*|_2 = max_i |sum_c rho^phi_{ic} T^phi_{ic} - rho^*_{ic} T^*_{ic}|_2`` (block diagonal)."""
    M_phi = np.einsum("ic,icab->iab", rho_phi, T_phi)
    M_star = np.einsum("ic,icab->iab", rho_star, T_star)
    return max(spectral_norm(D) for D in M_phi - M_star)


@dataclass(frozen=True)
class EffectiveHessianGap:
    """``|H_phi - H_*|_2`` for two real heads on one batch, and the bound's parts:
    (3.4) ``gauss_newton``, the loss-Hessian change ``(L + eps)^2 |A_phi - A_*|_2``, and (3.4')."""

    gap: float
    gauss_newton: float
    loss_hessian_change: float
    interaction: float

    @property
    def bound(self) -> float:
        return self.gauss_newton + self.loss_hessian_change + self.interaction


def effective_hessian_gap(head_phi: Head, head_star: Head, objective, Z: Array) -> EffectiveHessianGap:
    """``H_eff`` of two heads (closed form, eq. (1)) against the full bound:

        |H_phi - H_*|_2 <= 2 L M eps + M eps^2 + (L + eps)^2 |A_phi - A_*|_2 + (3.4'),

    ``M = |A_*|_2``; from ``G_phi - G_* = J_phi^T (A_phi - A_*) J_phi + (J_phi^T A_* J_phi - J_*^T A_* J_*)``.
    """

    Z = np.asarray(Z, dtype=float)
    n = Z.shape[0]
    d_phi, d_star = head_derivatives(head_phi, Z), head_derivatives(head_star, Z)
    rho_phi, A_phi = loss_derivatives(objective, d_phi.h)
    rho_star, A_star = loss_derivatives(objective, d_star.h)
    k = rho_phi.shape[1]
    gn = gauss_newton_gap(d_star.J, d_phi.J, A_star)
    dA = spectral_norm((A_phi - A_star).reshape(n * k, n * k))
    inter = interaction_bound(rho_phi, rho_star, head_hessians(head_phi, Z), head_hessians(head_star, Z))
    H_phi, H_star = (decompose_closed_form(h, objective, Z).H for h in (head_phi, head_star))
    gap = spectral_norm(H_phi - H_star)
    return EffectiveHessianGap(gap, gn.bound, (gn.L + gn.eps) ** 2 * dA, inter)


# --------------------------------------------------------------------------------------------
# Sharpness: instances attaining (3.4) and (3.4')
# --------------------------------------------------------------------------------------------


def _orthonormal(m: int, cols: int, rng: np.random.Generator) -> np.ndarray:
    Q, R = np.linalg.qr(rng.standard_normal((m, cols)))
    return Q * np.sign(np.diag(R))


def tight_gauss_newton_instance(
    d: int, k: int, L: float, M: float, eps: float, rng: np.random.Generator, sign: float = 1.0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(J_*, J_phi, A)`` as (1, k, d), (1, k, d), (1, k, 1, k) attaining (3.4): ``A u = sign M u``,
    ``J_* = L u v^T + B`` (``B``: ``v^perp -> u^perp``, ``|B|_2 <= L``), ``E = eps u v^T``."""
    if k < 2 or d < 2:
        raise ValueError("tight instances need k >= 2 and d >= 2")
    Qk, Qd = _orthonormal(k, k, rng), _orthonormal(d, d, rng)
    u, v = Qk[:, 0], Qd[:, 0]
    lam = np.concatenate([[sign * M], M * rng.uniform(-1.0, 1.0, k - 1)])  # |A|_2 = M, attained on u
    A = (Qk * lam) @ Qk.T
    r = min(k, d) - 1
    B = (Qk[:, 1:1 + r] * (L * rng.uniform(0.0, 1.0, r))) @ Qd[:, 1:1 + r].T  # v^perp -> u^perp
    J_star = L * np.outer(u, v) + B
    J_phi = J_star + eps * np.outer(u, v)
    return J_star[None], J_phi[None], A[None, :, None, :]


def tight_interaction_instance(
    d: int, k: int, r_phi: float, dr: float, delta: float, C: float, rng: np.random.Generator
) -> tuple[np.ndarray, ...]:
    """``(rho_phi, rho_star, T_phi, T_star)`` for one sample attaining (3.4') with equality."""
    w = _orthonormal(k, 1, rng)[:, 0]
    S = _orthonormal(d, d, rng)
    S = (S * np.concatenate([[1.0], rng.uniform(-1.0, 1.0, d - 1)])) @ S.T  # |S|_2 = 1
    T_star = C * np.einsum("c,ab->cab", w, S)
    T_phi = T_star + delta * np.einsum("c,ab->cab", w, S)
    rho_phi = r_phi * w
    return rho_phi[None], (rho_phi - dr * w)[None], T_phi[None], T_star[None]


# --------------------------------------------------------------------------------------------
# Corollary 3.5: Weyl
# --------------------------------------------------------------------------------------------


def exact_threshold(L: float, M: float, lam_min: float) -> float:
    """``eps* = sqrt(L^2 + lam_min / M) - L``: ``2 L M eps + M eps^2 < lam_min`` iff ``eps < eps*``."""
    return math.sqrt(L * L + lam_min / M) - L


def first_order_threshold(L: float, M: float, lam_min: float) -> float:
    """The paraphrase's ``lam_min / (2 L M)`` (drops ``M eps^2``; larger than ``eps*``)."""
    return lam_min / (2.0 * L * M)


WEYL_ROUNDOFF = 64 * np.finfo(float).eps  # eigenvalue round-off of a small symmetric matrix, relative


def weyl_condition_bound(H_star: Array, b: float) -> float | None:
    """``(lam_max + b) / (lam_min - b)`` when ``b < lam_min(H_*)`` (``H_phi`` then PD); else ``None``.

    ``lam_min - b`` within ``WEYL_ROUNDOFF`` of the scale counts as zero (``None``): its sign there is
    round-off, which two LAPACK builds can give differently."""
    lam = np.linalg.eigvalsh(np.asarray(H_star, dtype=float))
    margin = WEYL_ROUNDOFF * max(float(np.abs(lam).max()), abs(b))
    return (lam[-1] + b) / (lam[0] - b) if lam[0] - b > margin else None


def definiteness_loss_instance(
    d: int, k: int, L: float, M: float, lam0: float, eps: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, GaussNewtonGap]:
    """``(H_*, H_phi, gap)`` with ``H = G + M_0`` (``M_0`` the interaction term, common to both):
    ``lam_min(H_*) = lam0`` and ``lam_min(H_phi) = lam0 - (2 L M eps + M eps^2)`` exactly, so ``H_phi``
    loses definiteness precisely when ``eps > eps*``. Built on the tight instance with ``sign = -1``
    (``G_*`` has ``-M L^2`` on ``v``, the interaction term lifts it to ``lam0``)."""
    J_star, J_phi, A = tight_gauss_newton_instance(d, k, L, M, eps, rng, sign=-1.0)
    G_star, _ = assemble(J_star, A, np.zeros((1, d, d)))
    G_phi, _ = assemble(J_phi, A, np.zeros((1, d, d)))
    if not eps > 0:
        raise ValueError(f"eps must be positive, got {eps!r}")
    _, vecs = np.linalg.eigh(G_phi - G_star)  # rank one: -b v v^T, v the most negative direction
    v = vecs[:, 0]
    P = np.eye(d) - np.outer(v, v)
    lifted = P @ (rng.uniform(2.0, 5.0) * lam0 * np.eye(d)) @ P
    M0 = (lam0 - float(v @ G_star @ v)) * np.outer(v, v) + lifted - P @ G_star @ P
    H_star, H_phi = G_star + M0, G_phi + M0
    gap = gauss_newton_gap(J_star, J_phi, A)
    return 0.5 * (H_star + H_star.T), 0.5 * (H_phi + H_phi.T), gap
