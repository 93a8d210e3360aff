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

import math
from dataclasses import dataclass, replace
from typing import Any

from mini import activations
from mini.arrays import device, namespace
from mini.heads import Head

Array = Any


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
    eye = xp.eye(m, dtype=like.dtype, device=device(like))
    zero = xp.zeros((m, m), dtype=like.dtype, device=device(like))
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
        xp = self.xp = namespace(Hb)
        n = Hb.shape[0]
        self.tau = float(temperature)
        self.r = _rownorm(xp, Hb)  # (n, 1)
        self.U = Hb / self.r
        S = self.U @ _T(xp, self.U) / self.tau
        off = 1.0 - xp.eye(n, dtype=Hb.dtype, device=device(Hb))
        E = off * xp.exp(S - 1.0 / self.tau)  # S_ij <= 1/tau: no overflow
        self.P = E / xp.sum(E, axis=1, keepdims=True)  # (n, n), zero diagonal
        A = (self.P - _partner_matrix(xp, n, Hb)) / n
        self.As = A + _T(xp, A)
        self.GU = self.As @ self.U / self.tau  # dL/dU (n, k)
        self.n = n
        self._rinv = 1.0 / self.r  # the per-row constants of hvp, computed once
        self._gu = _dot(xp, self.GU, self.U)  # <G_U, u> (n, 1)

    def gradient(self) -> Array:
        """``dL/dHb`` (n, k)."""
        return (self.GU - _dot(self.xp, self.GU, self.U) * self.U) / self.r

    def hvp(self, V: Array) -> Array:
        """``(grad^2_H L) V`` for ``V`` (..., n, k): the module docstring's steps, with ``N^T dG_U`` and the
        normalisation term (``normalization_hvp`` at ``g = G_U``) gathered into one expression:

            N^T dG_U + grad^2 <G_U, u>[V] = (dG_U - <G_U,u> V/r - G_U <u,V>/r) / r
                                             + u (3 <G_U,u> <u,V>/r - <dG_U,u> - <G_U,V>/r) / r
        """
        xp, U, P, rinv, gu = self.xp, self.U, self.P, self._rinv, self._gu
        uv = _dot(xp, U, V)  # <u, v> per row
        dU = (V - uv * U) * rinv  # N V, row by row
        UdU = dU @ _T(xp, U)
        dS = (UdU + _T(xp, UdU)) / self.tau  # (..., n, n)
        PdS = P * dS
        dA = (PdS - P * xp.sum(PdS, axis=-1, keepdims=True)) / self.n
        dGU = ((dA + _T(xp, dA)) @ U + self.As @ dU) / self.tau
        along_u = 3.0 * gu * uv * rinv - _dot(xp, dGU, U) - _dot(xp, self.GU, V) * rinv
        return (dGU - (gu * V + self.GU * uv) * rinv + U * along_u) * rinv


def nt_xent_hessian(Hb: Array, temperature: float = 0.1) -> Array:
    """The dense loss Hessian (n, k, n, k) of NT-Xent at ``Hb``: the HVP of each unit vector."""
    xp = namespace(Hb)
    n, k = Hb.shape
    curv = NTXentCurvature(Hb, temperature)
    E = xp.reshape(xp.eye(n * k, dtype=Hb.dtype, device=device(Hb)), (n * k, n, k))
    cols = xp.reshape(curv.hvp(E), (n, k, n, k))  # cols[j, e] = H e_{je}: (i, c) entries; H is symmetric
    return 0.5 * (cols + xp.permute_dims(cols, (2, 3, 0, 1)))


def cosine_gradient(P: Array, T: Array, coef: float) -> tuple[Array, Array, Array, Array]:
    """Per row, ``f_i(p) = coef <t_i/|t_i|, p/|p|>``: returns ``(grad_p f, g, u, r)`` with ``g = coef t^``."""
    xp = namespace(P)
    g = coef * T / _rownorm(xp, T)
    r = _rownorm(xp, P)
    u = P / r
    return (g - _dot(xp, g, u) * u) / r, g, u, r


def cosine_hessian_sandwich(K: Array, g: Array, u: Array, r: Array) -> Array:
    """``K_i^T (grad^2_p f_i) K_i`` (n, d, d) for Jacobians ``K`` (n, k, d) (module docstring)."""
    xp = namespace(K)
    Kt = _T(xp, K)
    a = (Kt @ g[:, :, None])  # (n, d, 1)
    b = (Kt @ u[:, :, None])
    gu = _dot(xp, g, u)[:, :, None]  # (n, 1, 1)
    ab = a @ _T(xp, b)
    out = ab + _T(xp, ab) + gu * (Kt @ K - 3.0 * (b @ _T(xp, b)))
    return -out / (r[:, :, None] ** 2)


# --------------------------------------------------------------------------------------------
# Per-sample blocks through an MLP chain, streamed in chunks of rows
# --------------------------------------------------------------------------------------------

CHUNK_BYTES = 2**19  # one (rows, d, width) temporary per chunk: large enough for efficient matmuls, small enough
#                      to stay in a core's cache (a broadcast multiply over 2 MiB taken cold from memory cost 0.7 ms
#                      inside the sweep against 0.04 ms warm; measured at the digits head, 2^17..2^23: 2^19 fastest)


@dataclass(frozen=True)
class Link:
    """One affine map of a chain, ``a = x W^T + b``, and the activation after it (``None``: the last link)."""

    W: Array  # (out, in)
    b: Array | None  # (out,)
    act: Any  # mini.activations.Activation, or None for the chain's output
    WT: Array | None = None  # (in, out) contiguous: the forward pass's operand on a few rows (``with_transposes``)


TRANSPOSED_ROWS = 32  # with_transposes: at most this many rows in a pass read ``WT`` (measured gain below; none above)


def with_transposes(links: list[Link]) -> list[Link]:
    """``links`` with each weight's transpose stored contiguously. A forward pass computes ``x W^T``; on a few rows
    some BLAS builds run that product on a transposed view much slower than on a contiguous ``(in, out)`` matrix
    (torch's MKL on an Intel Xeon: 2.0-2.2x, float32, 8 rows, 512 x 2048 to 2048 x 2048, 1 thread), others faster
    (the same MKL on an AMD EPYC), so a chain that will take many products on few rows may pay one copy of its
    weights for it (1-5 ms a layer): ``scale.curvature.layout`` measures which."""
    return [Link(L.W, L.b, L.act, _transposed(namespace(L.W), L.W)) for L in links]


def chain_links(head: Head | None, predictor: Head | None, like: Array, compose: bool = True) -> list[Link]:
    """``z -> h -> p`` as links, weights as arrays of ``like``'s library. The head's last map and the
    predictor's first are both affine with nothing between, so they compose into one link
    ``Wp_1 (W_L x + b_L) + bp_1``: the predictor's first Jacobian is never formed at the head's width.
    ``compose=False`` keeps them apart (the head's output a hidden layer with the identity activation, whose
    ``s'' = 0`` adds no curvature): composing costs ``w_p1 k w_L`` multiply-adds once and saves
    ``k (w_L + w_p1) - w_p1 w_L`` per row and pass, so a few products on a few rows are cheaper without it."""
    xp = namespace(like)
    dev = device(like)
    links: list[Link] = []
    for part in (head, predictor):
        if part is None:
            continue
        act = activations.get(part.spec.activation)
        for l, layer in enumerate(part.layers):
            W = xp.asarray(layer["W"], dtype=like.dtype, device=dev)
            b = xp.asarray(layer["b"], dtype=like.dtype, device=dev) if "b" in layer else None
            final = l == len(part.layers) - 1
            link = Link(W, b, act if not final else (activations.IDENTITY if part is head and predictor is not None
                                                      and not compose else None))
            if compose and part is predictor and l == 0 and links:  # compose with the head's output map
                last = links.pop()
                bias = None if last.b is None else last.b @ _T(xp, W)
                bias = b if bias is None else (bias if b is None else bias + b)
                link = Link(W @ last.W, bias, link.act)
            links.append(link)
    if not links:
        raise ValueError("chain_links needs a head or a predictor")
    return links


@dataclass(frozen=True)
class ChainForward:
    """The forward pass of a chain at ``Z`` (n, d): output (n, k) and ``s'``, ``s''`` of every hidden layer."""

    links: list[Link]
    Z: Array
    out: Array
    s1: list[Array]  # (n, w_l)
    s2: list[Array]

    def backward(self, g_out: Array) -> tuple[list[Array], list[Array]]:
        """From ``g_out = dL/d out`` (n, k): ``D_l = (dL/dx_l) * s''(a_l)`` (n, w_l) for every hidden layer (the
        diagonal middles of the sandwiches, ``mini.hessian``'s ``g_l * s''``) and ``dL/da_l`` (n, w_l)."""
        D: list[Array] = [None] * len(self.s1)
        ga: list[Array] = [None] * len(self.s1)
        g = g_out
        for l in range(len(self.s1) - 1, -1, -1):
            gx = g @ self.links[l + 1].W  # dL/dx_l
            D[l] = gx * self.s2[l]
            g = ga[l] = gx * self.s1[l]  # dL/da_l
        return D, ga

    def tangents(self, V: Array, layers: int | None = None) -> tuple[list[Array], Array | None]:
        """Forward mode along ``V`` (..., n, d): the hidden pre-activations' tangents ``P_l v`` (..., n, w_l)
        and the output's ``J v`` (..., n, k); row by row, so a batch of directions is a taller matmul.
        ``layers``: stop after that many hidden layers (no output tangent: ``None``)."""
        xp = namespace(V)
        T, x = [], V
        if layers == 0:
            return T, None
        rows = math.prod(V.shape[:-1])
        for l, link in enumerate(self.links):
            t = x @ (link.WT if link.WT is not None and rows <= TRANSPOSED_ROWS else _T(xp, link.W))
            if l == len(self.links) - 1:
                return T, t
            T.append(t)
            if layers is not None and len(T) == layers:
                return T, None
            x = t * self.s1[l]

    def hvp(self, D: list[Array], V: Array, top=None, upto: int | None = None) -> Array:
        """``sum_{l < upto} P_l^T diag(D_l) P_l V + J^T top(J V)`` (..., n, d), in closed form: one forward-mode
        pass (``tangents``) and one pullback through the weights, no Jacobian formed. With ``D`` from
        ``backward`` the sum is the chain's own curvature (``M``'s part of eq. (1) for a head, ``upto`` its
        hidden layers); ``top`` (optional) is the curvature at the output (the loss Hessian-vector product)."""
        xp = namespace(V)
        upto = len(self.s1) if upto is None else upto
        T, jv = self.tangents(V, None if top is not None else upto)  # without ``top`` nothing above ``upto`` counts
        g = None if top is None else top(jv)
        for l in range(len(T) - 1, -1, -1):
            gl = None if g is None else (g @ self.links[l + 1].W) * self.s1[l]
            if l < upto:
                gl = D[l] * T[l] if gl is None else gl + D[l] * T[l]
            g = gl
        return xp.zeros_like(V) if g is None else g @ self.links[0].W

    def with_transposes(self) -> ChainForward:
        """The same pass, its links carrying contiguous transposes for the products' forward passes
        (``with_transposes``)."""
        return replace(self, links=with_transposes(self.links))

    def on_rows(self, idx: Array) -> ChainForward:
        """The same forward pass on the rows ``idx`` alone (every per-row array taken, the links shared): the chain
        acts row by row, so its products on those rows are the full pass's rows, at their cost."""
        xp = namespace(self.Z)
        return ChainForward(self.links, xp.take(self.Z, idx, axis=0), xp.take(self.out, idx, axis=0),
                            [xp.take(s, idx, axis=0) for s in self.s1], [xp.take(s, idx, axis=0) for s in self.s2])


def chain_forward(links: list[Link], Z: Array) -> ChainForward:
    xp = namespace(Z)
    x, S1, S2 = Z, [], []
    for l, link in enumerate(links):
        a = x @ _T(xp, link.W)
        if link.b is not None:
            a = a + link.b
        if l == len(links) - 1:
            return ChainForward(links, Z, a, S1, S2)
        s1, s2 = link.act.derivatives(xp, a)
        S1.append(s1)
        S2.append(s2)
        x = link.act.value(xp, a)
    raise AssertionError("unreachable: a chain has at least one link")


def _fold(xp, X: Array, W: Array) -> Array:
    """``X @ W`` for X (m, d, w) and a shared W (w, v) as one (m d, w) x (w, v) matmul."""
    if X.ndim == 2:
        return X @ W
    m, d, w = X.shape
    return xp.reshape(xp.reshape(X, (m * d, w)) @ W, (m, d, W.shape[1]))


def _transposed(xp, W: Array) -> Array:
    """``W^T`` laid out row-major (products broadcast against it keep the rows' layout, so they reshape freely)."""
    return xp.reshape(xp.reshape(_T(xp, W), (-1,)), (W.shape[1], W.shape[0]))


def chain_block_chunks(fwd: ChainForward, D: list[Array], n_head: int, *, last_mid=None, layers: int | None = None):
    """Per-sample sandwiches of the chain's hidden layers, by forward mode, chunk by chunk of rows.

    With ``P_l = da_l/dz`` (w_l, d) per row, carried transposed (``P_l^T`` (m, d, w_l); ``P_1 = W_1`` is
    shared) and advanced by ``P_{l+1}^T = (P_l^T diag(s'_l)) W_{l+1}^T`` as one matmul per chunk:

        M_i = sum_{l < n_head} P_l^T diag(D_l) P_l,     G0_i = sum_{l >= n_head} P_l^T diag(D_l) P_l   (d, d)

    ``last_mid(rows)`` (optional, (m, w, w)) is a dense middle added at the last hidden layer, into ``G0``.
    ``layers``: stream only the first ``layers`` hidden layers (``M`` alone: ``layers = n_head``).
    Yields ``(rows, M, G0, X)`` per chunk, ``X = (dx/dz)^T`` (m, d, w) of the last link's input (``None``: the
    identity, a chain of one link; and whenever ``layers`` stops short of the last hidden layer). Chunks hold
    ``CHUNK_BYTES`` of ``(m, d, width)``: no ``(n, w, d)`` Jacobian of any layer is ever kept. The blocks are
    symmetric up to rounding (each is ``A mid A^T`` from one matmul; not symmetrised: at large ``d`` the
    extra passes over (m, d, d) cost more than the matmuls, and the symmetric solvers downstream read one
    triangle).
    """
    xp = namespace(fwd.Z)
    n, d = fwd.Z.shape
    links, S1 = fwd.links, fwd.s1
    width = max(max(link.W.shape) for link in links)
    step = max(1, CHUNK_BYTES // (d * width * _itemsize(fwd.Z)))
    P1T = _transposed(xp, links[0].W)  # (d, w_1), shared by every row
    n_layers = len(S1) if layers is None else min(layers, len(S1))
    for start in range(0, n, step):
        rows = slice(start, min(n, start + step))
        sums = {True: None, False: None}  # to M, to G0
        PT, X = P1T, None
        for l in range(n_layers):
            mids = [(l < n_head, PT * D[l][rows][:, None, :])]  # P^T diag(D_l)
            if l == len(S1) - 1 and last_mid is not None:
                dense = last_mid(rows)
                if l >= n_head:  # both belong to G0: one sandwich
                    eye = xp.eye(dense.shape[-1], dtype=dense.dtype, device=device(dense))
                    dense = dense + eye * D[l][rows][:, None, :]
                    mids = []
                mids.append((False, _fold(xp, PT, dense) if PT.ndim == 2 else PT @ dense))
            for to_M, S in mids:
                S = S @ _T(xp, PT) if PT.ndim == 3 else _fold(xp, S, links[0].W)  # P^T mid P (m, d, d)
                sums[to_M] = S if sums[to_M] is None else sums[to_M] + S
            X = PT * S1[l][rows][:, None, :]  # (dx_l/dz)^T
            if l + 1 < n_layers:
                PT = _fold(xp, X, _T(xp, links[l + 1].W))
        if n_layers < len(S1):
            X = None
        M, G = (sums[key] if sums[key] is not None else
                xp.zeros((rows.stop - rows.start, d, d), dtype=fwd.Z.dtype, device=device(fwd.Z))
                for key in (True, False))
        yield rows, M, G, X


def concat_chunks(chunks) -> tuple[Array, ...]:
    """The per-row arrays of a chunk stream (all but ``rows``), concatenated along rows."""
    parts = [c[1:] for c in chunks]
    xp = namespace(parts[0][0])
    return tuple(xp.concat(list(col), axis=0) for col in zip(*parts))


def _itemsize(x: Array) -> int:
    return int(getattr(x, "itemsize", None) or x.dtype.itemsize)


def interaction_chunks(fwd: ChainForward, D: list[Array], n_head: int):
    """Stream of ``(rows, M)``: the interaction blocks of the chain's first ``n_head`` hidden layers (a head's
    ``M``) alone, without the Jacobian or any later layer."""
    for rows, M, _, _ in chain_block_chunks(fwd, D, n_head, layers=n_head):
        yield rows, M


def head_jacobian_and_interaction(fwd: ChainForward, rho: Array) -> tuple[Array, Array]:
    """A head's ``J`` (n, k, d) and interaction blocks ``M`` (n, d, d) at ``rho = dL/dh`` (n, k), from its
    forward pass ``fwd`` (``chain_forward(chain_links(head, None, Z), Z)``): ``mini.hessian``'s
    ``head_derivatives`` and ``interaction_blocks``, streamed (no (n, w, d) Jacobian of any layer is kept)."""
    xp = namespace(rho)
    WT = _transposed(xp, fwd.links[-1].W)  # (w, k)

    def chunks():
        for rows, M, _, X in chain_block_chunks(fwd, fwd.backward(rho)[0], len(fwd.s1)):
            JT = xp.broadcast_to(WT[None, :, :], (rows.stop - rows.start, *WT.shape)) if X is None else _fold(xp, X, WT)
            yield rows, _T(xp, JT), M

    return concat_chunks(chunks())


class PredictorCosineCurvature:
    """Per-sample curvature of ``L = sum_i f_i``, ``f_i(z) = coef <t_i/|t_i|, p(h(z_i))/|p(h(z_i))|>`` at ``Z``
    (module docstring): SimSiam and BYOL's objective through an MLP head and an MLP predictor.

    ``Z`` (n, d) the rows (the head's input, or the embeddings themselves when ``head`` is ``None``), ``T``
    (n, k_p) the targets each row is pulled to, ``predictor`` ``None`` for ``p = h``. Holds ``rho = dL/dh``
    (n, k) and the cosines ``cos`` (n,); ``blocks()`` streams the exact per-sample blocks and
    ``hvp``/``interaction_hvp`` are the matrix-free products of ``H`` and ``M``, all in closed form.

    The cosine's part ``K^T (grad^2_p f) K`` (``K = dp/dz = W_out X``, ``X = diag(s') P`` the last link's input
    Jacobian) is never formed at the output's width: with ``a = K^T g = X^T (W_out^T g)``, ``b = K^T u``,

        K^T (grad^2 f) K = X^T [ -(<g,u>/r^2) W_out^T W_out - (1/r^2)(a' b'^T + b' a'^T - 3 <g,u> b' b'^T) ] X
                           a' = W_out^T g, b' = W_out^T u        (w, w): the last hidden layer's middle

    so it joins that layer's sandwich ``P^T (diag(D) + diag(s') [.] diag(s')) P``: one matmul for the whole term.
    """

    def __init__(self, head: Head | None, predictor: Head | None, Z: Array, T: Array, coef: float,
                 compose: bool = True):
        xp = self.xp = namespace(Z)
        dev = device(Z)
        if head is None and predictor is None:  # p = z: the cosine's own Hessian blocks (one identity link)
            links = [Link(xp.eye(Z.shape[1], dtype=Z.dtype, device=dev), None, None)]
        else:
            links = chain_links(head, predictor, Z, compose)  # compose=False: products only (see chain_links)
        self.n_head = 0 if head is None else len(head.layers) - 1  # the head's hidden layers come first
        fwd = self.fwd = chain_forward(links, Z)
        rho_p, self.g, self.u, self.r = cosine_gradient(fwd.out, T, coef)
        self.D, ga = fwd.backward(rho_p)
        self.rho = rho_p  # dL/dh: through the predictor's first map when there is one (composed into a link)
        if head is not None and predictor is not None and not compose:
            self.rho = ga[self.n_head]  # the head's output is a hidden layer (identity): dL/da there is dL/dh
        elif head is not None and predictor is not None:
            g_first = rho_p if self.n_head == len(fwd.s1) else ga[self.n_head]
            self.rho = g_first @ xp.asarray(predictor.layers[0]["W"], dtype=Z.dtype, device=dev)
        elif head is None and predictor is not None:
            self.rho = (rho_p if not fwd.s1 else ga[0]) @ links[0].W
        self.cos = xp.sum(self.u * T / _rownorm(xp, T), axis=-1)

    def on_rows(self, idx: Array) -> PredictorCosineCurvature:
        """The same curvature on the rows ``idx`` alone: every per-row quantity taken, the links and the coefficient
        (its ``1/n`` of the whole batch) kept, so ``on_rows(idx).hvp(V[idx])`` is ``hvp(V)[idx]``: the objective is a
        sum of per-row terms through a row-wise chain, so ``H`` is block-diagonal over rows."""
        xp, out = self.xp, object.__new__(PredictorCosineCurvature)
        out.xp, out.n_head, out.fwd = xp, self.n_head, self.fwd.on_rows(idx)
        for name in ("g", "u", "r", "rho", "cos"):
            setattr(out, name, xp.take(getattr(self, name), idx, axis=0))
        out.D = [xp.take(D, idx, axis=0) for D in self.D]
        return out

    def with_transposes(self) -> PredictorCosineCurvature:
        """The same curvature, its chain carrying contiguous transposes for many products on few rows
        (``with_transposes``)."""
        out = object.__new__(PredictorCosineCurvature)
        out.__dict__.update(self.__dict__)
        out.fwd = self.fwd.with_transposes()
        return out

    def hvp(self, V: Array) -> Array:
        """``H V`` (..., n, d): the whole per-sample Hessian applied row by row (forward mode, then a pullback)."""
        return self.fwd.hvp(self.D, V, top=lambda pv: normalization_hvp(self.xp, self.g, self.u, self.r, pv))

    def interaction_hvp(self, V: Array) -> Array:
        """``M V`` (..., n, d): the head's interaction part alone."""
        return self.fwd.hvp(self.D, V, upto=self.n_head)

    def interaction_blocks(self):
        """Stream of ``(rows, M)``: the head's interaction blocks alone (``interaction_chunks``)."""
        return interaction_chunks(self.fwd, self.D, self.n_head)

    def blocks(self):
        """Stream of ``(rows, M, G)``: the head's interaction blocks ``M`` (zero without a head) and the rest
        ``G = H - M`` (the Gauss-Newton blocks ``J_i^T (grad^2_{h_i} L) J_i``, or the loss blocks themselves when
        ``head`` is ``None``), each (m, d, d); ``concat_chunks`` gives ``(M, G)`` (n, d, d)."""
        xp, fwd, g, u, r = self.xp, self.fwd, self.g, self.u, self.r
        W = fwd.links[-1].W  # (k_p, w)
        C = _T(xp, W) @ W  # (w, w): K^T K = X^T C X
        gu = _dot(xp, g, u)  # (n, 1)
        c = -gu / (r * r)  # the coefficient of K^T K in K^T (grad^2 f) K
        Wg, Wu = g @ W, u @ W  # K^T g = X^T (W^T g): rows (n, w)

        def cosine_middle(rows):  # K^T (grad^2 f) K = X^T [this] X, X the last link's input Jacobian (m, w, w)
            a, b = Wg[rows][:, :, None], Wu[rows][:, :, None]  # W^T g, W^T u as columns
            ab = a @ _T(xp, b)
            rank_two = ab + _T(xp, ab) - 3.0 * gu[rows][:, :, None] * (b @ _T(xp, b))
            return c[rows][:, :, None] * C - rank_two / (r[rows] * r[rows])[:, :, None]

        def dense_mid(rows):  # the same in the last hidden layer's pre-activation coordinates: X = diag(s') P
            s = fwd.s1[-1][rows]
            return s[:, :, None] * cosine_middle(rows) * s[:, None, :]

        for rows, M, G, X in chain_block_chunks(fwd, self.D, self.n_head, last_mid=dense_mid if fwd.s1 else None):
            if X is None:  # no hidden layer: X = I, the middle is the cosine's part itself
                G = G + cosine_middle(rows)
            yield rows, M, G
