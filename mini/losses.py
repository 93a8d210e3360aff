"""SSL objectives as functions of the embedding batch (docs/paper.md, "Setting and notation").

Every objective is an ``Objective``: a scalar function ``L(Hb)`` of the embeddings ``Hb = h(Z)``,
shape ``(n, k)``. Two-view objectives read ``Hb`` as two stacked views, rows ``0..m-1`` the first
view and rows ``m..2m-1`` the second (``n = 2m``, row ``i`` pairs with row ``i + m``). Anything the
objective holds fixed (stop-gradient targets, a predictor head, a temperature) is bound when the
objective is built, so ``H_eff`` is always the Hessian of ``z -> L(h(z))`` with those held fixed.

    mse_targets(T)        L = 1/(2n) sum_i |h_i - t_i|^2                       grad^2 L = I / n  (PSD)
    mse_views()           L = 1/(2m) sum_i |h_i - h_{i+m}|^2                   PSD, couples i, i+m
    nt_xent(tau)          L = 1/n sum_i [-s_{i,p(i)} + log sum_{j != i} exp s_ij],
                          s_ij = <u_i, u_j> / tau, u = h / |h|, p(i) = i +- m (SimCLR)
    simsiam(pred, T)      L = 1/2 [D(p(h^1), t^2) + D(p(h^2), t^1)], targets t = stopgrad(h):
                          D = -mean cos (form "cosine")  or  mean |p/|p| - t/|t||^2 (form "nmse")
    byol(pred, T)         the "nmse" form with targets from a (momentum) target network
    vicreg(25, 25, 1)     lam * mean |h^1 - h^2|^2 + mu * sum_views mean_c relu(1 - sqrt(var_c + 1e-4)) / 2
                          + nu * sum_views sum_{c != c'} cov_{cc'}^2 / k   (unbiased var / cov)
    barlow(lam=5e-3)      C = (h^1 - mean)/std)^T ((h^2 - mean)/std) / m   (biased std, eps 1e-5)
                          L = sum_c (1 - C_cc)^2 + lam sum_{c != c'} C_cc'^2

Norms are numerically safe and exact over the float64 range: ``|x| = c sqrt(max(|x/c|^2, eps^2))``
with ``c`` the power of two at or below ``max_j |x_j|`` (a constant for autograd, since the value does
not depend on it): nothing overflows or underflows in the squares, a nonzero vector of any size is
normalised exactly (the scaling by a power of two is itself exact), and a zero vector gives the
finite value ``eps`` with finite derivatives (no NaN).

Input is checked where it enters (``Objective.check``): NaN, infinite, complex or empty embeddings
raise ``ValueError``. The scale-invariant objectives (NT-Xent, SimSiam, BYOL) take embeddings of any
finite size. The others square the embeddings (MSE, Barlow Twins' variances) or raise them to the
fourth power (VICReg's covariance penalty) and refuse entries beyond ``SQUARES_FINITE`` or
``FOURTH_POWERS_FINITE``, where that would overflow, instead of returning an infinite or wrong value.

``Objective.hessian_psd`` states the premise of Theorem 4.1 part 1: ``True`` when ``grad^2_H L``
is PSD everywhere (the MSE forms), ``False`` when it is known to be indefinite (negative cosine),
``None`` when it depends on the state (contrastive and decorrelation losses).
``Objective.block_diagonal`` is ``True`` when ``grad^2_H L`` has no cross-sample blocks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import autograd.numpy as anp
import numpy as np

from mini.heads import Head
from mini.validation import check_array, value_of

Array = Any
NORM_EPS = 1e-12  # the safe norm of a zero vector (nonzero vectors are normalised exactly)
SQUARES_FINITE = 1e150  # |h| above this: sums of squares could overflow float64 (max 1.8e308)
FOURTH_POWERS_FINITE = 1e75  # the same for fourth powers (VICReg's squared covariances)

OBJECTIVES: tuple[str, ...] = ("mse", "mse_views", "simclr", "simsiam", "byol", "vicreg", "barlow")


@dataclass(frozen=True)
class Objective:
    """A scalar SSL objective ``L(Hb)`` of the embedding batch ``Hb`` (n, k)."""

    name: str
    fn: Callable[[Array], Array] = field(repr=False)
    n_views: int = 1
    hessian_psd: bool | None = None
    block_diagonal: bool = False
    # Closed forms where they are simple (the MSE forms); otherwise hessian.py uses autograd.
    grad_fn: Callable[[np.ndarray], np.ndarray] | None = field(default=None, repr=False)
    hessian_fn: Callable[[np.ndarray], np.ndarray] | None = field(default=None, repr=False)
    # For block-diagonal objectives: the per-sample blocks grad^2_{h_i} L, (n, k, k), in closed form.
    hessian_blocks_fn: Callable[[np.ndarray], np.ndarray] | None = field(default=None, repr=False)
    shape: tuple[int | None, int | None] | None = None  # (n, k) pinned by fixed data; None = free
    max_abs: float | None = None  # largest |h| it computes exactly (None: the whole float64 range)

    def check(self, Hb: Array) -> None:
        """Raise ``ValueError`` naming the problem when ``Hb`` cannot be fed to this objective."""
        check_array(f"{self.name}: embeddings", Hb, ndim=2)
        shape = value_of(Hb).shape
        if self.max_abs is not None and float(np.max(np.abs(value_of(Hb)))) > self.max_abs:
            raise ValueError(f"{self.name}: embeddings reach |h| = {float(np.max(np.abs(value_of(Hb)))):.3g}, "
                             f"beyond {self.max_abs:g} where its powers overflow float64; rescale them")
        if self.n_views == 2 and shape[0] % 2:
            raise ValueError(f"{self.name}: two views need an even batch (rows [view1; view2]), got n={shape[0]}")
        if self.shape is not None and any(want not in (None, got) for want, got in zip(self.shape, shape)):
            raise ValueError(f"{self.name}: embeddings of shape {tuple(shape)} do not match its data {self.shape}")

    def __call__(self, Hb: Array) -> Array:
        self.check(Hb)
        value = self.fn(Hb)
        if not np.isfinite(value_of(value)):
            raise FloatingPointError(f"{self.name}: the loss is not finite (overflow, e.g. in its predictor)")
        return value


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def safe_norm(x: Array, axis: int = -1) -> Array:
    """``|x|`` along ``axis``, kept as a column: exact for any finite nonzero ``x``, ``NORM_EPS`` at 0.

    ``|x| = c sqrt(max(|x / c|^2, eps^2))`` with ``c = 2^floor(log2 max|x_j|)`` (1 for a zero
    vector) read off the values and held constant: ``|x / c|^2`` lies in ``[1, 4 dim)``, so the
    squares neither overflow nor underflow, and the eps floor only ever acts on a zero vector.
    """
    c = _power_of_two_scale(x, axis)
    return c * _scaled_norm(x / c, axis)


def normalize(x: Array, axis: int = -1) -> Array:
    """``x / |x|`` with the safe norm, computed as ``(x / c) / |x / c|`` (same ``c``): exact, and its
    derivatives stay finite for tiny vectors too (``|x|^2`` never appears)."""
    y = x / _power_of_two_scale(x, axis)
    return y / _scaled_norm(y, axis)


def _power_of_two_scale(x: Array, axis: int) -> np.ndarray:
    """``c = 2^floor(log2 max_j |x_j|)`` along ``axis`` (1 for a zero vector), a constant to autograd."""
    m = np.max(np.abs(value_of(x)), axis=axis, keepdims=True)
    return np.where(m > 0, np.ldexp(1.0, np.frexp(m)[1] - 1), 1.0)  # c <= m < 2c


def _scaled_norm(y: Array, axis: int) -> Array:
    return anp.sqrt(anp.maximum(anp.sum(y * y, axis=axis, keepdims=True), NORM_EPS**2))


def split_views(Hb: Array) -> tuple[Array, Array]:
    m = Hb.shape[0] // 2
    return Hb[:m], Hb[m:]


def _fixed(name: str, value: Array, max_abs: float | None = None) -> np.ndarray:
    check_array(name, value, ndim=2)
    arr = np.asarray(value, dtype=float)
    if max_abs is not None and np.abs(arr).max() > max_abs:
        raise ValueError(f"{name} reach |t| = {np.abs(arr).max():.3g}, beyond {max_abs:g} where squares overflow")
    return arr


# --------------------------------------------------------------------------------------------
# MSE alignment
# --------------------------------------------------------------------------------------------


def mse_targets(targets: Array) -> Objective:
    """``L = 1/(2n) sum_i |h_i - t_i|^2`` against fixed (stop-gradient) targets; ``grad^2 L = I/n``."""
    T = _fixed("targets", targets, SQUARES_FINITE)
    n, k = T.shape

    def fn(Hb):
        return 0.5 * anp.sum((Hb - T) ** 2) / n

    def hessian(Hb):
        return np.eye(n * k).reshape(n, k, n, k) / n  # (n, k, n, k)

    return Objective(
        "mse", fn, 1, hessian_psd=True, block_diagonal=True,
        grad_fn=lambda Hb: (np.asarray(Hb) - T) / n, hessian_fn=hessian,
        hessian_blocks_fn=lambda Hb: np.broadcast_to(np.eye(k) / n, (n, k, k)), shape=(n, k),
        max_abs=SQUARES_FINITE,
    )


def mse_views() -> Objective:
    """``L = 1/(2m) sum_i |h_i - h_{i+m}|^2`` between two views; PSD Hessian coupling i and i+m."""

    def fn(Hb):
        A, B = split_views(Hb)
        return 0.5 * anp.sum((A - B) ** 2) / A.shape[0]

    def grad(Hb):
        A, B = split_views(np.asarray(Hb))
        m = A.shape[0]
        return np.concatenate([A - B, B - A]) / m

    def hessian(Hb):
        n, k = np.shape(Hb)
        m = n // 2
        P = np.array([[1.0, -1.0], [-1.0, 1.0]]) / m  # on (view1, view2) of one pair
        return np.kron(P, np.eye(m * k)).reshape(n, k, n, k)

    return Objective("mse_views", fn, 2, hessian_psd=True, block_diagonal=False, grad_fn=grad, hessian_fn=hessian,
                     max_abs=SQUARES_FINITE)


# --------------------------------------------------------------------------------------------
# Contrastive: SimCLR / NT-Xent
# --------------------------------------------------------------------------------------------


def nt_xent(temperature: float = 0.1) -> Objective:
    """SimCLR's NT-Xent (InfoNCE over the 2m - 1 others), mean over all 2m anchors.

    ``s_ij = <u_i, u_j> / tau`` is at most ``1/tau``, so ``c = 1/tau`` is an exact, constant
    log-sum-exp shift: no overflow and no data-dependent max in the derivative.
    """
    if not temperature > 0:
        raise ValueError(f"temperature must be positive, got {temperature!r}")
    tau = float(temperature)

    def fn(Hb):
        n = Hb.shape[0]
        m = n // 2
        U = normalize(Hb)
        S = anp.dot(U, U.T) / tau  # (n, n)
        off_diag = 1.0 - np.eye(n)
        lse = 1.0 / tau + anp.log(anp.sum(off_diag * anp.exp(S - 1.0 / tau), axis=1))  # (n,)
        partner = np.concatenate([np.arange(m, n), np.arange(0, m)])
        positives = anp.sum(U * U[partner], axis=1) / tau  # (n,)
        return anp.mean(lse - positives)

    return Objective(f"simclr(tau={tau:g})", fn, 2, hessian_psd=None, block_diagonal=False)


# --------------------------------------------------------------------------------------------
# Non-contrastive with stop-gradient: SimSiam / BYOL
# --------------------------------------------------------------------------------------------


def _predict(predictor: Head | None, Hb):
    return Hb if predictor is None else predictor(Hb)


def simsiam(targets: Array, predictor: Head | None = None, form: str = "cosine") -> Objective:
    """SimSiam with stop-gradient targets ``T`` (the current embeddings, held fixed).

    ``L = 1/2 [D(p(h^1), t^2) + D(p(h^2), t^1)]``, ``D = -mean cos`` (``form="cosine"``) or
    ``D = mean |p/|p| - t/|t||^2 = 2 - 2 mean cos`` (``form="nmse"``, BYOL's form). Each sample's
    term depends only on its own row, so ``grad^2_H L`` is block-diagonal; it is indefinite
    (negative cosine is not convex), outside Theorem 4.1's PSD premise.
    """
    if form not in ("cosine", "nmse"):
        raise ValueError(f"form must be 'cosine' or 'nmse', got {form!r}")
    T = _fixed("targets", targets)
    if T.shape[0] % 2:
        raise ValueError(f"two views need an even number of targets, got {T.shape[0]}")
    m = T.shape[0] // 2
    # View 1 is predicted towards view 2's target and vice versa: swap the halves once.
    Tn = normalize(np.concatenate([T[m:], T[:m]]))

    def fn(Hb):
        P = normalize(_predict(predictor, Hb))
        cos = anp.sum(P * Tn, axis=1)  # (n,)
        return -anp.mean(cos) if form == "cosine" else anp.mean(2.0 - 2.0 * cos)

    name = "simsiam" if form == "cosine" else "simsiam(nmse)"
    return Objective(name, fn, 2, hessian_psd=False, block_diagonal=True, shape=(T.shape[0], None))


def byol(targets: Array, predictor: Head | None = None) -> Objective:
    """BYOL: the normalised-MSE form ``2 - 2 cos(p(h^v), t^{v'})`` with targets from a target network."""
    base = simsiam(targets, predictor, form="nmse")
    return Objective("byol", base.fn, 2, hessian_psd=False, block_diagonal=True, shape=base.shape)


# --------------------------------------------------------------------------------------------
# Decorrelation: VICReg, Barlow Twins
# --------------------------------------------------------------------------------------------


def _off_diagonal_sq_sum(C):
    return anp.sum(C * C) - anp.sum(anp.diag(C) ** 2)


def vicreg(sim_coeff: float = 25.0, std_coeff: float = 25.0, cov_coeff: float = 1.0, eps: float = 1e-4) -> Objective:
    """VICReg: invariance + variance hinge + covariance decorrelation (unbiased statistics)."""

    def one_view(X):
        m, k = X.shape
        Xc = X - anp.mean(X, axis=0)
        std = anp.sqrt(anp.sum(Xc * Xc, axis=0) / (m - 1) + eps)
        cov = anp.dot(Xc.T, Xc) / (m - 1)
        return anp.mean(anp.maximum(1.0 - std, 0.0)) / 2.0, _off_diagonal_sq_sum(cov) / k

    def fn(Hb):
        A, B = split_views(Hb)
        if A.shape[0] < 2:
            raise ValueError("vicreg needs at least 2 samples per view for its variance")
        inv = anp.mean((A - B) ** 2)
        std_a, cov_a = one_view(A)
        std_b, cov_b = one_view(B)
        return sim_coeff * inv + std_coeff * (std_a + std_b) + cov_coeff * (cov_a + cov_b)

    return Objective("vicreg", fn, 2, hessian_psd=None, block_diagonal=False, max_abs=FOURTH_POWERS_FINITE)


def barlow(lambd: float = 5e-3, eps: float = 1e-5) -> Objective:
    """Barlow Twins: cross-correlation of batch-standardised views pushed to the identity."""

    def standardize(X):
        Xc = X - anp.mean(X, axis=0)
        return Xc / anp.sqrt(anp.mean(Xc * Xc, axis=0) + eps)

    def fn(Hb):
        A, B = split_views(Hb)
        C = anp.dot(standardize(A).T, standardize(B)) / A.shape[0]  # (k, k)
        return anp.sum((1.0 - anp.diag(C)) ** 2) + lambd * _off_diagonal_sq_sum(C)

    return Objective(f"barlow(lambda={lambd:g})", fn, 2, hessian_psd=None, block_diagonal=False,
                     max_abs=SQUARES_FINITE)


def make_objective(
    name: str,
    Hb: Array | None = None,
    *,
    predictor: Head | None = None,
    targets: Array | None = None,
    temperature: float = 0.1,
) -> Objective:
    """Build an objective by name. ``mse`` needs its ``targets``; SimSiam's and BYOL's stop-gradient
    targets default to the current ``Hb``."""
    if name not in OBJECTIVES:
        raise ValueError(f"unknown objective {name!r}; valid: {', '.join(OBJECTIVES)}")
    if name == "mse" and targets is None:
        raise ValueError("mse needs targets (an (n, k) array); with targets = Hb its residual would be zero")
    if name in ("simsiam", "byol") and targets is None:
        if Hb is None:
            raise ValueError(f"{name} needs targets (or the current embeddings Hb to stop gradients at)")
        targets = np.asarray(Hb, dtype=float)
    if name == "mse":
        return mse_targets(targets)
    if name == "mse_views":
        return mse_views()
    if name == "simclr":
        return nt_xent(temperature)
    if name == "simsiam":
        return simsiam(targets, predictor)
    if name == "byol":
        return byol(targets, predictor)
    if name == "vicreg":
        return vicreg()
    return barlow()
