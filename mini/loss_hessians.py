r"""Closed-form Hessians of the SSL losses in the embeddings (the ``grad^2_H L`` of eq. (1)).

Written once against the array API (NumPy, CuPy, torch tensors), so that ``mini``'s dense
decomposition and ``scale``'s tracker use the same algebra. Conventions as ``mini.losses``:
embeddings ``Hb`` (n, k), rows ``[view1; view2]``, ``u_i = h_i / r_i`` with ``r_i = |h_i|``
(``safe_norm`` equals the plain norm for ``|h_i| > 1e-12``, the only case treated here).

Normalisation ``u = h / r``. For a fixed vector ``g`` and ``f(h) = <g, u>``:

    grad f          = (g - <g,u> u) / r                                         =: N^T g
    grad^2 f [v]    = -(1/r^2) [ g <u,v> + u <g,v> + <g,u> v - 3 <g,u> u <u,v> ]    (symmetric in v)

NT-Xent (``mini.losses.nt_xent``): ``S = U U^T / tau``, ``P_i = softmax_{j != i}(S_i)``, partner
``p(i) = i +- m``,

    L    = 1/n sum_i [ log sum_{j != i} exp S_ij - S_{i,p(i)} ]
    A    = dL/dS = (P - Pi) / n                        Pi_ij = [j = p(i)]
    G_U  = dL/dU = (A + A^T) U / tau
    HVP along V (n, k):  dU = N V (row by row),  dS = (dU U^T + U dU^T) / tau,
         dA_i = (P_i * dS_i - P_i <P_i, dS_i>) / n          (softmax Jacobian diag(p) - p p^T, per row)
         d G_U = ((dA + dA^T) U + (A + A^T) dU) / tau
         H V  = N^T d G_U + grad^2 <G_U, u> [V]            (row by row)

``O(n^2 k)`` per product, against a backward pass through the loss's autograd graph; a batch of
products ``V`` (p, n, k) broadcasts. ``nt_xent_hessian`` applies it to the ``n k`` unit vectors.

Predictor-cosine objectives (SimSiam, BYOL) are per-sample: ``L = sum_i c <t^_i, p(h_i)/|p(h_i)|>``
(+ a constant) with ``c = -1/n`` (SimSiam, ``-mean cos``) or ``-2/n`` (BYOL, ``mean(2 - 2 cos)``).
``cosine_gradient`` and ``cosine_hessian_sandwich`` give, per row, ``grad_p`` and ``K^T (grad^2_p) K``
for a stack of Jacobians ``K`` (n, k, d), without forming the (k, k) Hessian:

    K^T grad^2 f K = -(1/r^2) [ a b^T + b a^T + <g,u> (K^T K - 3 b b^T) ],   a = K^T g,  b = K^T u

``predictor_cosine_gauss_newton`` chains this through an MLP predictor ``p`` (the recursion of
``mini.hessian``, started from the head's Jacobian ``J`` instead of the identity): with ``Q_l = da_l/dz``
(n, width_l, d), ``K = Q_L = dp/dz``,

    J_i^T (grad^2_{h_i} L) J_i = K_i^T (grad^2_p f_i) K_i + sum_{l<L} Q_l^T diag(g_l * s''(a_l)) Q_l

(``g_l`` the predictor's backward of ``grad_p f``): the Gauss-Newton blocks of eq. (1) in ``O(n w d (k + d))``,
never forming the (k, k) loss blocks.
"""

from __future__ import annotations

from typing import Any

import array_api_compat

from mini import activations
from mini.heads import Head, derivatives

Array = Any


def _xp(x: Array):
    return array_api_compat.array_namespace(x)


def _rownorm(xp, X: Array) -> Array:
    return xp.sqrt(xp.sum(X * X, axis=-1, keepdims=True))


def _dot(xp, X: Array, Y: Array) -> Array:
    return xp.sum(X * Y, axis=-1, keepdims=True)


def _T(xp, X: Array) -> Array:
    """Swap the last two axes."""
    axes = (*range(X.ndim - 2), X.ndim - 1, X.ndim - 2)
    return xp.permute_dims(X, axes)


def normalization_hvp(xp, g: Array, u: Array, r: Array, V: Array) -> Array:
    """Row by row ``grad^2 <g, h/|h|> [V]`` (see the module docstring); broadcasts over leading axes."""
    gu = _dot(xp, g, u)
    uv = _dot(xp, u, V)
    return -(g * uv + u * _dot(xp, g, V) + gu * V - 3.0 * gu * u * uv) / (r * r)


def _partner_matrix(xp, n: int, like: Array) -> Array:
    """``Pi`` (n, n): ``Pi_ij = 1`` iff ``j = i +- m`` (the other view of the same image)."""
    m = n // 2
    eye = xp.eye(m, dtype=like.dtype, device=array_api_compat.device(like))
    zero = xp.zeros((m, m), dtype=like.dtype, device=array_api_compat.device(like))
    return xp.concat([xp.concat([zero, eye], axis=1), xp.concat([eye, zero], axis=1)], axis=0)


class NTXentCurvature:
    """NT-Xent's gradient and exact Hessian-vector products in ``Hb`` at one point (module docstring).

    Everything that does not depend on the direction (``U``, ``r``, ``P``, ``A``, ``G_U``) is computed
    once here; ``hvp(V)`` then costs a few ``(n, n) x (n, k)`` products.
    """

    def __init__(self, Hb: Array, temperature: float = 0.1):
        if not temperature > 0:
            raise ValueError(f"temperature must be positive, got {temperature!r}")
        if Hb.ndim != 2 or Hb.shape[0] % 2:
            raise ValueError(f"NT-Xent needs Hb of shape (2m, k), rows [view1; view2]; got {tuple(Hb.shape)}")
        xp = self.xp = _xp(Hb)
        n = Hb.shape[0]
        self.tau = float(temperature)
        self.r = _rownorm(xp, Hb)  # (n, 1)
        self.U = Hb / self.r
        S = self.U @ _T(xp, self.U) / self.tau
        off = 1.0 - xp.eye(n, dtype=Hb.dtype, device=array_api_compat.device(Hb))
        E = off * xp.exp(S - 1.0 / self.tau)  # S_ij <= 1/tau: no overflow
        self.P = E / xp.sum(E, axis=1, keepdims=True)  # (n, n), zero diagonal
        A = (self.P - _partner_matrix(xp, n, Hb)) / n
        self.As = A + _T(xp, A)
        self.GU = self.As @ self.U / self.tau  # dL/dU (n, k)
        self.n = n

    def gradient(self) -> Array:
        """``dL/dHb`` (n, k)."""
        return (self.GU - _dot(self.xp, self.GU, self.U) * self.U) / self.r

    def hvp(self, V: Array) -> Array:
        """``(grad^2_H L) V`` for ``V`` (..., n, k)."""
        xp, U, r, P = self.xp, self.U, self.r, self.P
        dU = (V - _dot(xp, U, V) * U) / r  # N V, row by row
        dS = (dU @ _T(xp, U) + U @ _T(xp, dU)) / self.tau  # (..., n, n)
        dA = (P * dS - P * xp.sum(P * dS, axis=-1, keepdims=True)) / self.n
        dGU = ((dA + _T(xp, dA)) @ U + self.As @ dU) / self.tau
        return (dGU - _dot(xp, dGU, U) * U) / r + normalization_hvp(xp, self.GU, U, r, V)


def nt_xent_hessian(Hb: Array, temperature: float = 0.1) -> Array:
    """The dense loss Hessian (n, k, n, k) of NT-Xent at ``Hb``: the HVP of each unit vector."""
    xp = _xp(Hb)
    n, k = Hb.shape
    curv = NTXentCurvature(Hb, temperature)
    E = xp.reshape(xp.eye(n * k, dtype=Hb.dtype, device=array_api_compat.device(Hb)), (n * k, n, k))
    cols = xp.reshape(curv.hvp(E), (n, k, n, k))  # cols[j, e] = H e_{je}: (i, c) entries; H is symmetric
    return 0.5 * (cols + xp.permute_dims(cols, (2, 3, 0, 1)))


def cosine_gradient(P: Array, T: Array, coef: float) -> tuple[Array, Array, Array, Array]:
    """Per row, ``f_i(p) = coef <t_i/|t_i|, p/|p|>``: returns ``(grad_p f, g, u, r)`` with ``g = coef t^``."""
    xp = _xp(P)
    g = coef * T / _rownorm(xp, T)
    r = _rownorm(xp, P)
    u = P / r
    return (g - _dot(xp, g, u) * u) / r, g, u, r


def cosine_hessian_sandwich(K: Array, g: Array, u: Array, r: Array) -> Array:
    """``K_i^T (grad^2_p f_i) K_i`` (n, d, d) for Jacobians ``K`` (n, k, d) (module docstring)."""
    xp = _xp(K)
    Kt = _T(xp, K)
    a = (Kt @ g[:, :, None])  # (n, d, 1)
    b = (Kt @ u[:, :, None])
    gu = _dot(xp, g, u)[:, :, None]  # (n, 1, 1)
    ab = a @ _T(xp, b)
    out = ab + _T(xp, ab) + gu * (Kt @ K - 3.0 * (b @ _T(xp, b)))
    return -out / (r[:, :, None] ** 2)


def predictor_cosine_gauss_newton(predictor: Head | None, Hb: Array, J: Array, T: Array, coef: float):
    """``(rho, G, cos)`` for ``L = sum_i coef <t_i/|t_i|, p(h_i)/|p(h_i)|>`` (module docstring).

    ``Hb`` (n, k) head outputs, ``J`` (n, k, d) head Jacobians, ``T`` (n, k_p) the targets each row is
    pulled to; ``predictor`` a ``mini.heads.Head`` with weights of ``Hb``'s library (``None``: ``p = h``).
    Returns ``rho = dL/dHb`` (n, k), ``G_i = J_i^T (grad^2_{h_i} L) J_i`` (n, d, d) and the cosines (n,).
    """
    xp = _xp(Hb)
    Q, S1, S2, W = [], [], [], []
    if predictor is None:
        p, K = Hb, J
    else:
        act = predictor.spec.activation
        x, KJ = Hb, J  # KJ = dx_{l-1}/dz, (n, width, d)
        for l, layer in enumerate(predictor.layers):
            W.append(layer["W"])
            a = x @ _T(xp, layer["W"])
            if "b" in layer:
                a = a + layer["b"]
            Ql = layer["W"] @ KJ  # (n, w_l, d)
            if l == len(predictor.layers) - 1:
                p, K = a, Ql
                break
            s1, s2 = derivatives(act, a)
            Q.append(Ql)
            S1.append(s1)
            S2.append(s2)
            KJ = s1[:, :, None] * Ql
            x = activations.get(act).value(xp, a)
    rho_p, g, u, r = cosine_gradient(p, T, coef)
    G = cosine_hessian_sandwich(K, g, u, r)
    rho = rho_p
    if W:
        rho = rho_p @ W[-1]  # g_{L-1} = W_L^T rho_p, as rows
        for l in range(len(Q) - 1, -1, -1):
            G = G + _T(xp, Q[l]) @ ((rho * S2[l])[:, :, None] * Q[l])
            rho = (rho * S1[l]) @ W[l]  # g_{l-1}; after the first layer: dL/dHb
    cos = xp.sum(u * T / _rownorm(xp, T), axis=-1)
    return rho, 0.5 * (G + _T(xp, G)), cos
