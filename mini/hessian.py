r"""Equation (1): the effective Hessian ``H_eff = G + M`` and its spectral summary.

For a batch ``Z`` (n, d), a head ``h`` (row by row, ``R^d -> R^k``) and an objective ``L(Hb)``:

    H_eff = d^2/dZ^2 L(h(Z))                                  (n*d, n*d), index (i, a) -> i*d + a
          = J^T (grad^2_H L) J  +  sum_{i,c} rho_{i,c} grad^2_z h_c(z_i)
            \_____ G _________/    \___________ M ______________/

``J`` is block-diagonal (``J_i = dh(z_i)/dz_i``, (k, d)), ``rho = grad_H L`` (n, k), so ``M`` is
block-diagonal with blocks ``M_i = sum_c rho_{i,c} grad^2 h_c(z_i)`` (d, d), while ``G`` couples
samples through the loss Hessian ``grad^2_H L`` (n, k, n, k).

Three paths, each checking the others (``theory_checks/test_eq1_decomposition.py``):

1. ``effective_hessian``: autograd's exact Hessian of the whole-batch map ``Z -> L(h(Z))``.
2. ``decompose_autograd``: ``G`` and ``M`` from autograd separately (full Jacobian, loss Hessian,
   and the Hessian of ``Z -> <stopgrad(rho), h(Z)>``).
3. ``decompose_closed_form``: per-sample ``J_i`` and ``M_i`` from the explicit recursion below,
   written against the array API (NumPy, CuPy, torch), assembled with the loss Hessian.

Closed form for an MLP head (layers ``a_l = W_l x_{l-1} + b_l``, ``x_l = s(a_l)``, ``x_0 = z``,
``h = a_L``). Write ``P_l = da_l/dz`` (width_l, d):

    P_1 = W_1,    P_l = W_l diag(s'(a_{l-1})) P_{l-1},    J = P_L
    M_i = sum_{l<L} P_l^T diag(g_l * s''(a_l)) P_l,       g_{L-1} = W_L^T rho_i,
                                                          g_{l-1} = W_l^T (s'(a_l) * g_l)

``g_l`` is the gradient of ``<rho_i, h>`` with respect to ``x_l``; only the activations have
second derivatives (affine maps have none), and each contributes its ``s''`` sandwiched between
the Jacobians of its pre-activation. For one hidden layer this is docs/paper.md's
``M_i = W1^T diag((W2^T rho_i) * s''(a_i)) W1``. ReLU and linear layers have ``s'' = 0``: ``M = 0``.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import autograd.numpy as anp
import numpy as np
from autograd import grad, hessian, jacobian

from mini import activations
from mini.arrays import device, namespace
from mini.heads import Head
from mini.losses import Objective
from mini.validation import check_array

Array = Any

NEG_FLOOR = 1e-9  # eigenvalues below -NEG_FLOOR * scale count as negative curvature
SYMMETRY_TOL = 1e-8  # |A - A^T| / scale above this is not a Hessian


# --------------------------------------------------------------------------------------------
# Input checks
# --------------------------------------------------------------------------------------------


def check_batch(head: Head, Z: Array) -> np.ndarray:
    """``Z`` as a float64 (n, d) array matching the head; ``ValueError`` naming any problem."""
    check_array("Z", Z, ndim=2)
    Z = np.asarray(Z, dtype=float)
    if Z.shape[1] != head.d:
        raise ValueError(f"Z has d={Z.shape[1]} columns but head {head.spec} expects d={head.d}")
    for l, layer in enumerate(head.layers):
        for name, value in layer.items():
            check_array(f"head layer {l} parameter {name}", value)
    return Z


def _check_finite(name: str, A: Array) -> Array:
    if not np.all(np.isfinite(np.asarray(A))):
        raise FloatingPointError(f"{name} is not finite (overflow in the head or the objective)")
    return A


# --------------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EffectiveHessian:
    """``H = G + M`` at a batch: full (n*d, n*d) matrices, the residual ``rho`` (n, k)."""

    H: Array
    G: Array
    M: Array
    rho: Array
    n: int
    d: int

    def block(self, A: Array, i: int, j: int) -> Array:
        """The (d, d) block of ``A`` coupling samples ``i`` and ``j``."""
        d = self.d
        return A[i * d:(i + 1) * d, j * d:(j + 1) * d]


# --------------------------------------------------------------------------------------------
# Path 1 and 2: autograd references
# --------------------------------------------------------------------------------------------


def _batch_fn(head: Head, objective: Objective, n: int):
    d = head.d
    return lambda z: objective(head(anp.reshape(z, (n, d))))


def effective_hessian(head: Head, objective: Objective, Z: Array) -> np.ndarray:
    """Autograd's exact Hessian of ``vec(Z) -> L(h(Z))``, shape (n*d, n*d). The reference."""
    Z = check_batch(head, Z)
    objective.check(head(Z))
    H = hessian(_batch_fn(head, objective, Z.shape[0]))(Z.ravel())
    return _check_finite("H_eff", 0.5 * (H + H.T))


def _real_embeddings(objective: Objective, Hb: Array) -> np.ndarray:
    """``Hb`` as float64, checked first: a complex batch is refused, not cut to its real part by the conversion."""
    check_array(f"{objective.name}: embeddings", Hb, ndim=2)
    return np.asarray(Hb, dtype=float)


def loss_derivatives(objective: Objective, Hb: Array) -> tuple[np.ndarray, np.ndarray]:
    """``rho = grad_H L`` (n, k) and ``grad^2_H L`` (n, k, n, k): closed form if the objective
    has one, else autograd (exact)."""
    Hb = _real_embeddings(objective, Hb)
    rho = loss_gradient(objective, Hb)
    HL = objective.hessian_fn(Hb) if objective.hessian_fn else hessian(objective.fn)(Hb)
    return rho, _check_finite("grad^2_H L", HL)


def loss_gradient(objective: Objective, Hb: Array) -> np.ndarray:
    """``rho = grad_H L`` (n, k): closed form if the objective has one, else autograd."""
    Hb = _real_embeddings(objective, Hb)
    objective.check(Hb)
    rho = objective.grad_fn(Hb) if objective.grad_fn else grad(objective.fn)(Hb)
    return _check_finite("grad_H L", rho)


def loss_hessian_blocks(objective: Objective, Hb: Array) -> np.ndarray:
    """The per-sample blocks ``grad^2_{h_i} L`` (n, k, k) of a block-diagonal objective.

    Without a closed form, ``k`` Hessian-vector products suffice instead of ``n*k``: with no
    cross-sample blocks, the product with ``V = 1_n e_c^T`` (direction ``c`` in every sample at
    once) returns column ``c`` of every block.
    """
    if not objective.block_diagonal:
        raise ValueError(f"{objective.name}: its loss Hessian couples samples; use loss_derivatives")
    Hb = _real_embeddings(objective, Hb)  # checked before the float64 conversion (a complex batch is refused)
    objective.check(Hb)
    if objective.hessian_blocks_fn is not None:
        return _check_finite("grad^2_H L", np.asarray(objective.hessian_blocks_fn(Hb)))
    k = Hb.shape[1]
    g = grad(objective.fn)
    columns = [grad(lambda H, c=c: anp.sum(g(H)[:, c]))(Hb) for c in range(k)]  # each (n, k)
    return _check_finite("grad^2_H L", np.stack(columns, axis=2))  # (n, k, k): [i, :, c]


def decompose_autograd(head: Head, objective: Objective, Z: Array) -> EffectiveHessian:
    """``G = J^T (grad^2_H L) J`` and ``M = Hessian of <stopgrad(rho), h(Z)>`` by autograd."""
    Z = check_batch(head, Z)
    n, d = Z.shape
    Hb = head(Z)
    rho, HL = loss_derivatives(objective, Hb)
    N, K = n * d, n * Hb.shape[1]
    J = jacobian(lambda z: anp.ravel(head(anp.reshape(z, (n, d)))))(Z.ravel())  # (n*k, n*d)
    G = J.T @ HL.reshape(K, K) @ J
    with warnings.catch_warnings():  # linear heads: <rho, h> is linear in Z, autograd says so
        warnings.simplefilter("ignore", UserWarning)
        M = hessian(lambda z: anp.sum(rho * head(anp.reshape(z, (n, d)))))(Z.ravel())
    H = effective_hessian(head, objective, Z)
    G, M = 0.5 * (G + G.T), 0.5 * (M + M.T)
    assert G.shape == M.shape == (N, N)
    return EffectiveHessian(H, _check_finite("G", G), _check_finite("M", M), rho, n, d)


# --------------------------------------------------------------------------------------------
# Path 3: closed form, array API
# --------------------------------------------------------------------------------------------


def _like(xp, value: Array, ref: Array) -> Array:
    """``value`` as an array of ``ref``'s library, dtype and device."""
    return xp.asarray(value, dtype=ref.dtype, device=device(ref))


@dataclass(frozen=True)
class HeadDerivatives:
    """Per-sample head derivatives: ``h`` (n, k), ``J`` (n, k, d) and the pieces ``M`` needs."""

    h: Array
    J: Array
    P: list[Array]  # P_l = da_l/dz, (n, width_l, d) for the hidden layers l < L
    s1: list[Array]  # s'(a_l), (n, width_l)
    s2: list[Array]  # s''(a_l), (n, width_l)
    W: list[Array]  # the weights as arrays of Z's library


def head_derivatives(head: Head, Z: Array) -> HeadDerivatives:
    """Forward pass carrying ``P_l = da_l/dz`` (the recursion in the module docstring).

    ``Z`` (n, d) of any array-API library; ``ValueError`` on complex, empty or non-finite input."""
    check_array("Z", Z, ndim=2)
    xp = namespace(Z)
    n = Z.shape[0]
    act = activations.get(head.spec.activation)
    W = [_like(xp, layer["W"], Z) for layer in head.layers]
    b = [_like(xp, layer["b"], Z) if "b" in layer else None for layer in head.layers]
    x, Jx = Z, None  # Jx = dx_{l-1}/dz; None stands for the identity (x_0 = z)
    P, S1, S2 = [], [], []
    for l in range(len(W)):
        a = x @ xp.permute_dims(W[l], (1, 0))
        if b[l] is not None:
            a = a + b[l]
        Pl = xp.broadcast_to(W[l], (n, *W[l].shape)) if Jx is None else W[l] @ Jx  # (n, w_l, d)
        if l == len(W) - 1:
            return HeadDerivatives(a, Pl, P, S1, S2, W)
        s1, s2 = act.derivatives(xp, a)
        P.append(Pl)
        S1.append(s1)
        S2.append(s2)
        Jx = s1[:, :, None] * Pl
        x = act.value(xp, a)
    raise AssertionError("unreachable: a head has at least one layer")


def interaction_blocks(der: HeadDerivatives, rho: Array) -> Array:
    """``M_i = sum_l P_l^T diag(g_l * s''(a_l)) P_l`` for every sample: (n, d, d)."""
    xp = namespace(rho)
    n, d = der.J.shape[0], der.J.shape[2]
    M = xp.zeros((n, d, d), dtype=rho.dtype, device=device(rho))
    g = rho @ der.W[-1]  # g_{L-1} = W_L^T rho_i, as rows: (n, w_{L-1})
    for l in range(len(der.P) - 1, -1, -1):
        Pl = der.P[l]
        M = M + xp.permute_dims(Pl, (0, 2, 1)) @ ((g * der.s2[l])[:, :, None] * Pl)
        g = (g * der.s1[l]) @ der.W[l]  # g_{l-1} = W_l^T (s'(a_l) * g_l)
    return M


def assemble(J: Array, loss_hessian: Array, M_blocks: Array) -> tuple[Array, Array]:
    """Full ``G = J^T (grad^2_H L) J`` and block-diagonal ``M``, both (n*d, n*d).

    ``J`` (n, k, d), ``loss_hessian`` (n, k, n, k), ``M_blocks`` (n, d, d); any array-API library.
    ``G[i,a,j,b] = sum_{c,e} J[i,c,a] HL[i,c,j,e] J[j,e,b]`` as two batched matmuls.
    """
    xp = namespace(J)
    n, k, d = J.shape
    HLj = xp.reshape(xp.permute_dims(loss_hessian, (2, 0, 1, 3)), (n, n * k, k))  # (j, (i,c), e)
    T = xp.reshape(HLj @ J, (n, n, k, d))  # (j, i, c, b)
    T = xp.reshape(xp.permute_dims(T, (1, 2, 0, 3)), (n, k, n * d))  # (i, c, (j,b))
    G = xp.reshape(xp.permute_dims(J, (0, 2, 1)) @ T, (n * d, n * d))  # (i, a) x (j, b)
    return 0.5 * (G + xp.permute_dims(G, (1, 0))), block_diagonal(M_blocks)


def block_diagonal(blocks: Array) -> Array:
    """``(n, d, d)`` blocks as the ``(n*d, n*d)`` block-diagonal matrix (array API, no item writes)."""
    xp = namespace(blocks)
    n, d, _ = blocks.shape
    eye = xp.eye(n, dtype=blocks.dtype, device=device(blocks))
    return xp.reshape(blocks[:, :, None, :] * eye[:, None, :, None], (n * d, n * d))


def assemble_blocks(J: Array, loss_blocks: Array, M_blocks: Array) -> tuple[Array, Array]:
    """Block-diagonal objectives: ``G_i = J_i^T (grad^2_{h_i} L) J_i`` (n, d, d), then full matrices."""
    xp = namespace(J)
    Jt = xp.permute_dims(J, (0, 2, 1))
    G_blocks = Jt @ (loss_blocks @ J)
    G_blocks = 0.5 * (G_blocks + xp.permute_dims(G_blocks, (0, 2, 1)))
    return block_diagonal(G_blocks), block_diagonal(M_blocks)


def decompose_closed_form(head: Head, objective: Objective, Z: Array) -> EffectiveHessian:
    """``H_eff = G + M`` from the closed-form head derivatives and the loss derivatives."""
    Z = check_batch(head, Z)
    der = head_derivatives(head, Z)
    if objective.block_diagonal:
        Hb = np.asarray(der.h)
        rho = loss_gradient(objective, Hb)
        G, M = assemble_blocks(der.J, loss_hessian_blocks(objective, Hb), interaction_blocks(der, rho))
    else:
        rho, HL = loss_derivatives(objective, der.h)
        G, M = assemble(der.J, HL, interaction_blocks(der, rho))
    H = G + M
    return EffectiveHessian(_check_finite("H_eff", H), G, M, rho, *Z.shape)


def head_jacobian_autograd(head: Head, z: np.ndarray) -> np.ndarray:
    """``J(z)`` (k, d) of one sample by autograd (a reference for ``head_derivatives``)."""
    return jacobian(lambda x: head(x[None, :])[0])(np.asarray(z, dtype=float))



# --------------------------------------------------------------------------------------------
# Spectral summary
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Spectrum:
    """Eigenvalues of a symmetric matrix with a relative floor ``floor = rel_floor * scale``.

    ``scale`` is the spectral norm ``max |lambda|``. An eigenvalue counts as negative only below
    ``-floor`` and as positive only above ``+floor``: round-off is never read as curvature.
    ``condition`` is ``lambda_max / lambda_min`` only when the matrix is positive definite.
    """

    eigenvalues: np.ndarray
    scale: float
    floor: float
    rel_floor: float

    @property
    def lambda_min(self) -> float:
        return float(self.eigenvalues[0])

    @property
    def lambda_max(self) -> float:
        return float(self.eigenvalues[-1])

    @property
    def n_negative(self) -> int:
        return int(np.sum(self.eigenvalues < -self.floor))

    @property
    def n_positive(self) -> int:
        return int(np.sum(self.eigenvalues > self.floor))

    @property
    def n_zero(self) -> int:
        return len(self.eigenvalues) - self.n_negative - self.n_positive

    @property
    def definiteness(self) -> str:
        if self.scale == 0.0:
            return "zero"
        if self.n_negative and self.n_positive:
            return "indefinite"
        if self.n_negative:
            return "negative definite" if not self.n_zero else "negative semidefinite"
        return "positive definite" if not self.n_zero else "positive semidefinite"

    @property
    def condition(self) -> float | None:
        return self.lambda_max / self.lambda_min if self.definiteness == "positive definite" else None

    def summary(self) -> dict[str, Any]:
        return {
            "lambda_min": self.lambda_min,
            "lambda_max": self.lambda_max,
            "scale": self.scale,
            "n_negative": self.n_negative,
            "n_zero": self.n_zero,
            "n_positive": self.n_positive,
            "definiteness": self.definiteness,
            "condition": self.condition,
        }


def spectrum(A: Array, rel_floor: float = NEG_FLOOR) -> Spectrum:
    """Spectral summary of a symmetric matrix (``ValueError`` if it is not symmetric or finite)."""
    A = np.asarray(A, dtype=float)
    if A.ndim != 2 or A.shape[0] != A.shape[1]:
        raise ValueError(f"spectrum needs a square matrix, got shape {A.shape}")
    if not np.all(np.isfinite(A)):
        raise ValueError("spectrum: matrix contains NaN or infinite values")
    scale_bound = max(np.abs(A).max(initial=0.0), np.finfo(float).tiny)
    if np.abs(A - A.T).max(initial=0.0) > SYMMETRY_TOL * scale_bound:
        raise ValueError("spectrum: matrix is not symmetric")
    eig = np.linalg.eigvalsh(0.5 * (A + A.T))
    scale = float(np.abs(eig).max(initial=0.0))
    return Spectrum(eig, scale, rel_floor * scale, rel_floor)


def relative_norm(A: Array, B: Array) -> float:
    """``|A|_2 / |B|_2`` (spectral norms); 0 when both vanish."""
    a = float(np.linalg.norm(np.asarray(A), 2))
    b = float(np.linalg.norm(np.asarray(B), 2))
    return 0.0 if a == 0.0 else a / b if b else float("inf")
