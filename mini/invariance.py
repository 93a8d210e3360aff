r"""Section 5: invariance and the guillotine (docs/paper.md, Proposition 5.2, Theorem 5.3, E3-E4).

Three groups of objects, each with its shapes:

Orbit geometry (E4), array API: runs unchanged on NumPy, CuPy and torch tensors (any device)
-------------------------------------------------------------------------------------------------
Features of ``n_orbits`` orbits of ``n_points`` augmented copies each, ``F`` of shape
``(n_orbits, n_points, dim)``, one class label per orbit, ``labels`` of shape ``(n_orbits,)``.
Features are L2-normalised first, the head applied to the normalised ``z`` (``normalized_features``).

    orbit spread_o   = 1/P sum_p |f_op - c_o|^2,          c_o = 1/P sum_p f_op      (squared distances)
    D_intra_o        = mean_{p != q} |f_op - f_oq|                                  (distances)
    D_inter          = mean_{a != b} |C_a - C_b|,          C_a = mean of all points of class a
    ratio_o          = D_inter(class(o)) / D_intra_o,      D_inter(a) = mean_{b != a} |C_a - C_b|
    kappa_s          = mean_i |r_{i+1} - 2 r_i + r_{i-1}|  along sweep s, F_sweep (n_sweeps, n_steps, dim)
    compression      = mean spread(z) / mean spread(h)     (the paper's "x compression")

``orbit_geometry(F, labels)`` returns an ``OrbitGeometry`` of ``Stat(mean, std, n)`` (population
std, ddof = 0, over orbits, over class pairs for ``D_inter``, over sweeps for ``kappa``); the
per-orbit values stay available as arrays of the input library (``orbit_spread``, ``intra_distance``,
...). Results are Python floats, so NumPy and torch give the same numbers (tested).

Proposition 5.2 and Theorem 5.3 (NumPy + autograd, float64)
-----------------------------------------------------------
``pullback_metric(fn, z)``: ``G(z) = J_h(z)^T J_h(z)`` (d, d) for a head ``fn: (n, d) -> (n, k)``.
``orbit_gain(G, V)``: ``(v^T G v / |v|^2) / (tr G / d)`` for each tangent ``v`` (rows of ``V``): the
head's gain along the orbit relative to its mean gain over all directions; 1 for an isotropic ``G``,
0 for an invariant head (Proposition 5.2), independent of the head's overall scale.
``invariant_head(invariants, head)``: a head that is a function of the orbit invariants only;
``approximately_invariant_head``: the same with a ``delta``-leak of ``z`` into its input.
``orbit_displacement(fn, orbit)``: ``|h(g_t z) - h(z)|`` along a finite orbit (the quotient statement:
an invariant head maps the whole orbit ``g_t . z`` to one point).
``fisher_information(phi, xi, sigma)``: ``I(xi) = J^T J / sigma^2`` for the Gaussian observation
model ``y = phi(xi) + sigma * eps``, ``J = d phi / d xi``. ``fisher_rank(I)``: the number of
eigenvalues above ``p eps lambda_max`` (the eigensolver's round-off; Theorem 5.3).

Probes (E3), array API
----------------------
``linear_probe``: ridge least squares onto one-hot targets (closed form, bias column, features
standardised with the training statistics). ``mlp_probe``: one hidden ReLU layer, softmax
cross-entropy, full-batch Adam with hand-written backprop (no autograd library needed, so it runs on
any array library); weights drawn from a seeded NumPy generator and moved to the features' device.
Both return a ``ProbeResult`` (train and test accuracy, in [0, 1]). ``group_split`` splits by
group (e.g. by base image) so that test points come from unseen orbits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from mini.arrays import device, namespace

Array = Any  # NumPy, CuPy or torch array

NORM_EPS = 1e-12  # floor of the L2 norm when normalising features (a zero feature stays zero)


def _float(x: Array) -> float:
    """A 0-d array of any library as a Python float (one device sync on GPU)."""
    return float(x.item()) if hasattr(x, "item") else float(x)


# --------------------------------------------------------------------------------------------
# Feature normalisation (E4: "features L2 normalised; the head is applied to normalised z")
# --------------------------------------------------------------------------------------------


def l2_normalize(X: Array, eps: float = NORM_EPS) -> Array:
    """``x / max(|x|, eps)`` along the last axis, any shape ``(..., dim)``, any array library."""
    xp = namespace(X)
    norm = xp.sqrt(xp.sum(X * X, axis=-1, keepdims=True))
    return X / xp.clip(norm, min=eps)


def normalized_features(Z: Array, head_fn) -> tuple[Array, Array]:
    """The paper's E4 protocol: ``z_n = z / |z|`` and ``h_n = h(z_n) / |h(z_n)|``.

    ``Z`` is ``(..., d)``; ``head_fn`` maps a 2-D batch ``(n, d)`` to ``(n, k)`` (a ``mini`` ``Head``,
    a torch module, any callable in ``Z``'s library). Leading axes are flattened for the head and
    restored: ``(n_orbits, n_points, d)`` gives ``(n_orbits, n_points, d)`` and ``(..., k)``.
    """
    xp = namespace(Z)
    zn = l2_normalize(Z)
    lead = tuple(Z.shape[:-1])
    H = head_fn(xp.reshape(zn, (-1, Z.shape[-1])))
    return zn, l2_normalize(xp.reshape(H, (*lead, H.shape[-1])))


# --------------------------------------------------------------------------------------------
# Orbit geometry
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Stat:
    """Mean and population standard deviation of ``n`` values."""

    mean: float
    std: float
    n: int

    def __format__(self, spec: str) -> str:
        spec = spec or ".3g"
        return f"{format(self.mean, spec)} +- {format(self.std, spec)}"


def stat(values: Array) -> Stat:
    """``Stat`` of a 1-D array of any library (ddof = 0)."""
    xp = namespace(values)
    values = xp.reshape(values, (-1,))
    return Stat(_float(xp.mean(values)), _float(xp.std(values)), int(values.shape[0]))


def _check_orbits(F: Array, name: str = "F", min_points: int = 2) -> None:
    shape = tuple(getattr(F, "shape", ()))
    if len(shape) != 3:
        raise ValueError(f"{name} must have shape (n_orbits, n_points, dim), got {shape}")
    if shape[0] < 1 or shape[1] < min_points or shape[2] < 1:
        raise ValueError(f"{name} needs >= 1 orbit, >= {min_points} points per orbit and dim >= 1, got {shape}")


def _pairwise_distances(X: Array) -> Array:
    """``|x_p - x_q|`` for ``X`` (..., P, dim) -> (..., P, P); differences, not the Gram trick, so
    that nearly equal points (a compressed orbit) keep their relative precision."""
    xp = namespace(X)
    diff = X[..., :, None, :] - X[..., None, :, :]  # (..., P, P, dim)
    return xp.sqrt(xp.sum(diff * diff, axis=-1))


def orbit_centroids(F: Array) -> Array:
    """``c_o`` (n_orbits, dim)."""
    _check_orbits(F, min_points=1)
    return namespace(F).mean(F, axis=1)


def orbit_spread(F: Array) -> Array:
    """Per-orbit spread: mean squared distance of the orbit's points to its centroid, (n_orbits,)."""
    xp = namespace(F)
    _check_orbits(F, min_points=1)
    R = F - xp.mean(F, axis=1, keepdims=True)
    return xp.mean(xp.sum(R * R, axis=-1), axis=1)


def intra_distance(F: Array) -> Array:
    """Per-orbit ``D_intra``: mean distance over the ``P (P - 1)`` ordered pairs ``p != q``, (n_orbits,).

    The diagonal distances are exactly zero, so the sum over all pairs divided by ``P (P - 1)`` is the
    mean over distinct pairs (each unordered pair counted twice, which leaves the mean unchanged).
    """
    xp = namespace(F)
    _check_orbits(F)
    P = F.shape[1]
    return xp.sum(_pairwise_distances(F), axis=(1, 2)) / (P * (P - 1))


def _labels_array(labels: Array, like: Array) -> Array:
    xp = namespace(like)
    if not hasattr(labels, "shape") or namespace(labels) is not xp:
        labels = xp.asarray(np.asarray(labels), device=device(like))
    return labels


def class_centroids(F: Array, labels: Array) -> tuple[Array, Array]:
    """``(classes, C)``: the sorted distinct labels (n_classes,) and ``C_a`` = mean of all points of
    the orbits of class ``a`` (n_classes, dim) (orbits of one class weigh by their point counts,
    which are equal)."""
    xp = namespace(F)
    _check_orbits(F, min_points=1)
    labels = _labels_array(labels, F)
    if tuple(labels.shape) != (F.shape[0],):
        raise ValueError(f"labels must have shape (n_orbits,) = ({F.shape[0]},), got {tuple(labels.shape)}")
    classes = xp.sort(xp.unique_values(labels))
    onehot = xp.astype(labels[None, :] == classes[:, None], F.dtype)  # (n_classes, n_orbits)
    C = (onehot @ orbit_centroids(F)) / xp.sum(onehot, axis=1, keepdims=True)
    return classes, C


def inter_distances(F: Array, labels: Array) -> tuple[Array, Array]:
    """``(D, per_class)``: class-centroid distance matrix (n_classes, n_classes) and, per class,
    ``D_inter(a) = mean_{b != a} |C_a - C_b|`` (n_classes,). Needs at least two classes."""
    xp = namespace(F)
    _, C = class_centroids(F, labels)
    n_c = C.shape[0]
    if n_c < 2:
        raise ValueError(f"D_inter needs at least two classes, got {n_c}")
    D = _pairwise_distances(C)
    return D, xp.sum(D, axis=1) / (n_c - 1)


def sweep_curvature(S: Array) -> Array:
    """Per-sweep ``kappa_s = mean_i |r_{i+1} - 2 r_i + r_{i-1}|`` (second differences of the feature
    path ``r`` along an augmentation sweep of ``n_steps >= 3`` equally spaced parameters), (n_sweeps,)."""
    xp = namespace(S)
    _check_orbits(S, "S", min_points=3)
    d2 = S[:, 2:, :] - 2.0 * S[:, 1:-1, :] + S[:, :-2, :]  # (n_sweeps, n_steps - 2, dim)
    return xp.mean(xp.sqrt(xp.sum(d2 * d2, axis=-1)), axis=1)


def sweep_step(S: Array) -> Array:
    """Per-sweep mean step length ``mean_i |r_{i+1} - r_i|`` (n_sweeps,): the sweep's own scale. ``kappa`` scales
    with it (doubling every point doubles both), so ``mean kappa / mean step`` is a curvature free of the
    orbit's size (the discrete ``|r''| / |r'|``, the turning per step of a path at constant speed)."""
    xp = namespace(S)
    _check_orbits(S, "S", min_points=2)
    d1 = S[:, 1:, :] - S[:, :-1, :]  # (n_sweeps, n_steps - 1, dim)
    return xp.mean(xp.sqrt(xp.sum(d1 * d1, axis=-1)), axis=1)


@dataclass(frozen=True)
class OrbitGeometry:
    """E4's orbit metrics of one feature space (mean +- std; see the module docstring).

    ``ratio`` is the mean over orbits of ``D_inter(class(o)) / D_intra_o``; ``ratio_of_means`` is
    ``D_inter.mean / D_intra.mean``. ``kappa`` is ``None`` unless a sweep was given.
    """

    spread: Stat
    d_intra: Stat
    d_inter: Stat
    ratio: Stat
    ratio_of_means: float
    kappa: Stat | None = None


def orbit_geometry(F: Array, labels: Array, sweep: Array | None = None) -> OrbitGeometry:
    """All E4 metrics of features ``F`` (n_orbits, n_points, dim) with one label per orbit, and the
    curvature of ``sweep`` (n_sweeps, n_steps, dim) when given. Pass normalised features."""
    xp = namespace(F)
    spread = orbit_spread(F)
    d_intra = intra_distance(F)
    D, per_class = inter_distances(F, labels)
    n_c = D.shape[0]
    off = 1.0 - xp.eye(n_c, dtype=F.dtype, device=device(F))
    n_pairs = n_c * (n_c - 1)
    inter_mean = xp.sum(D * off) / n_pairs
    inter_std = xp.sqrt(xp.sum(((D - inter_mean) * off) ** 2) / n_pairs)
    # Each orbit's class inter-distance, gathered through the one-hot of its label.
    classes, _ = class_centroids(F, labels)
    labels = _labels_array(labels, F)
    onehot = xp.astype(labels[:, None] == classes[None, :], F.dtype)  # (n_orbits, n_classes)
    ratio = (onehot @ per_class) / d_intra
    d_intra_stat = stat(d_intra)
    inter = Stat(_float(inter_mean), _float(inter_std), n_pairs // 2)
    return OrbitGeometry(
        spread=stat(spread),
        d_intra=d_intra_stat,
        d_inter=inter,
        ratio=stat(ratio),
        ratio_of_means=inter.mean / d_intra_stat.mean if d_intra_stat.mean > 0 else math.inf,
        kappa=None if sweep is None else stat(sweep_curvature(sweep)),
    )


def compression(z: OrbitGeometry, h: OrbitGeometry) -> float:
    """The paper's compression factor ``mean spread(z) / mean spread(h)`` (> 1: the head compresses)."""
    return z.spread.mean / h.spread.mean if h.spread.mean > 0 else math.inf


# --------------------------------------------------------------------------------------------
# Proposition 5.2: the pullback metric and its restriction to V_aug
# --------------------------------------------------------------------------------------------

# Eigenvalues of I at or below ``p eps lambda_max`` count as zero (Thm 5.3): the normwise round-off of a
# symmetric eigensolver on a p x p matrix (NumPy's ``matrix_rank`` convention), a bound fixed by float64,
# not by the instances. A larger relative tolerance (1e-10 earlier) miscounts real directions: a head with
# a nearly saturated unit has Fisher eigenvalues at 1e-13 of lambda_max that float64 resolves.
FISHER_RANK_EPS_MULTIPLE = 1.0


def head_jacobian(fn, z: np.ndarray) -> np.ndarray:
    """``J_h(z) = dh/dz`` (k, d) at one point ``z`` (d,), by autograd; ``fn`` maps (n, d) to (n, k)."""
    from autograd import jacobian

    z = np.asarray(z, dtype=float)
    if z.ndim != 1:
        raise ValueError(f"z must be one point (d,), got shape {z.shape}")
    return jacobian(lambda x: fn(x[None, :])[0])(z)


def pullback_metric(fn, z: np.ndarray) -> np.ndarray:
    """Proposition 5.2's ``G(z) = J_h(z)^T J_h(z)`` (d, d): the metric the head pulls back onto ``Z``."""
    J = head_jacobian(fn, z)
    return J.T @ J


def orbit_gain(G: np.ndarray, V: np.ndarray) -> np.ndarray:
    """``(v^T G v / |v|^2) / (tr G / d)`` for each row ``v`` of ``V`` (m, d) -> (m,).

    Normalisation: ``tr G / d`` is the mean of ``u^T G u`` over unit directions ``u``, so the gain is
    1 when the head stretches the orbit direction as much as an average direction and 0 when it is
    blind to it; rescaling the head leaves it unchanged. ``ValueError`` if ``G`` vanishes."""
    G = np.asarray(G, dtype=float)
    V = np.atleast_2d(np.asarray(V, dtype=float))
    tr = float(np.trace(G))
    if not tr > 0:
        raise ValueError("orbit_gain: G has zero trace (the head is constant here)")
    quad = np.einsum("md,de,me->m", V, G, V) / np.sum(V * V, axis=1)
    return quad / (tr / G.shape[0])


def invariant_head(invariants, head):
    """``z -> head(invariants(z))``: invariant to the group by construction (Proposition 5.2's premise)."""
    return lambda Z: head(invariants(Z))


def approximately_invariant_head(invariants, head, P: np.ndarray, delta: float):
    """``z -> head(invariants(z) + delta P z)``, ``P`` (q, d): an invariant head whose input layer leaks
    ``delta`` of a non-invariant map, as a learned head that is invariant only approximately.

    Then ``J_h v = delta J_head P v`` on ``V_aug`` (``J_q v = 0``), so ``v^T G v = delta^2 |J_head P v|^2
    = O(delta^2)`` and, over a finite orbit, ``|h(g_t z) - h(z)| = O(delta)``: Proposition 5.2 degrades
    in proportion, not abruptly."""
    P = np.asarray(P, dtype=float)
    return lambda Z: head(invariants(Z) + delta * Z @ P.T)


def orbit_displacement(fn, orbit: np.ndarray) -> np.ndarray:
    """``|h(g_t z) - h(z)|`` (T,) for the points of one orbit ``orbit`` (T, d), ``orbit[0] = z``: the finite
    (quotient) form of Proposition 5.2. An invariant head maps the whole orbit to one point (all 0)."""
    H = np.asarray(fn(np.asarray(orbit, dtype=float)), dtype=float)  # (T, k)
    return np.linalg.norm(H - H[0], axis=1)


# --------------------------------------------------------------------------------------------
# Theorem 5.3: Fisher information of a Gaussian observation model
# --------------------------------------------------------------------------------------------


def fisher_information(phi, xi: np.ndarray, sigma: float = 1.0) -> np.ndarray:
    """``I(xi) = J^T J / sigma^2`` (p, p) for ``y = phi(xi) + sigma * eps``, ``eps ~ N(0, I)``,
    ``J = d phi / d xi`` (autograd); ``phi`` maps latent parameters (p,) to an observation (q,)."""
    from autograd import jacobian

    if not sigma > 0:
        raise ValueError(f"sigma must be positive, got {sigma!r}")
    J = jacobian(phi)(np.asarray(xi, dtype=float))
    return J.T @ J / sigma**2


def fisher_rank_rtol(p: int) -> float:
    """The relative threshold of ``fisher_rank`` for a ``p x p`` information matrix: ``p eps``."""
    return FISHER_RANK_EPS_MULTIPLE * p * float(np.finfo(float).eps)


def fisher_rank(I: np.ndarray, rtol: float | None = None) -> int:
    """Numerical rank: eigenvalues of the PSD matrix ``I`` above ``rtol * lambda_max`` (0 if ``I = 0``);
    ``rtol`` defaults to the eigensolver's round-off, ``fisher_rank_rtol(p)``."""
    eig = np.linalg.eigvalsh(0.5 * (I + I.T))
    top = float(eig.max(initial=0.0))
    rtol = fisher_rank_rtol(I.shape[0]) if rtol is None else rtol
    return 0 if top <= 0 else int(np.sum(eig > rtol * top))


# --------------------------------------------------------------------------------------------
# Probes (E3)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProbeResult:
    """Accuracies in [0, 1] of a probe trained on the train split and evaluated on both splits."""

    kind: str
    train_accuracy: float
    test_accuracy: float
    n_train: int
    n_test: int


def group_split(groups: Array, test_fraction: float = 0.3, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Indices ``(train, test)`` (NumPy int arrays) splitting whole groups: every sample of a group
    (e.g. all augmented copies of one base image) lands on the same side."""
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must lie in (0, 1), got {test_fraction!r}")
    g = np.asarray(groups.cpu() if hasattr(groups, "cpu") else groups).reshape(-1)
    uniq = np.unique(g)
    if uniq.size < 2:
        raise ValueError("group_split needs at least two groups")
    perm = np.random.default_rng(seed).permutation(uniq)
    n_test = min(max(1, round(test_fraction * uniq.size)), uniq.size - 1)
    test_groups = perm[:n_test]
    is_test = np.isin(g, test_groups)
    return np.flatnonzero(~is_test), np.flatnonzero(is_test)


def _prepare(X: Array, y: Array, train: np.ndarray, test: np.ndarray, n_classes: int | None):
    xp = namespace(X)
    if len(tuple(X.shape)) != 2:
        raise ValueError(f"probe features must be 2-D (n, dim), got shape {tuple(X.shape)}")
    y = _labels_array(y, X)
    if tuple(y.shape) != (X.shape[0],):
        raise ValueError(f"probe labels must have shape (n,) = ({X.shape[0]},), got {tuple(y.shape)}")
    dev = device(X)
    tr = xp.asarray(np.asarray(train), device=dev)
    te = xp.asarray(np.asarray(test), device=dev)
    if n_classes is None:
        n_classes = int(_float(xp.max(y))) + 1
    Xtr, Xte = xp.take(X, tr, axis=0), xp.take(X, te, axis=0)
    ytr, yte = xp.take(y, tr, axis=0), xp.take(y, te, axis=0)
    # Standardise with the training statistics (probes see features on a common scale).
    mu = xp.mean(Xtr, axis=0, keepdims=True)
    sd = xp.clip(xp.std(Xtr, axis=0, keepdims=True), min=1e-8 * _float(xp.max(xp.std(Xtr, axis=0))) + 1e-30)
    Xtr, Xte = (Xtr - mu) / sd, (Xte - mu) / sd
    classes = xp.arange(n_classes, device=dev)
    Ytr = xp.astype(ytr[:, None] == xp.astype(classes, ytr.dtype)[None, :], X.dtype)  # one-hot (n_tr, C)
    return xp, Xtr, Xte, ytr, yte, Ytr


def _accuracy(xp, scores: Array, y: Array) -> float:
    pred = xp.argmax(scores, axis=1)
    return _float(xp.mean(xp.astype(pred == xp.astype(y, pred.dtype), scores.dtype)))


def linear_probe(
    X: Array, y: Array, train: np.ndarray, test: np.ndarray, *, ridge: float = 1e-3, n_classes: int | None = None
) -> ProbeResult:
    """Closed-form ridge classifier: ``W = (X^T X + ridge * tr(X^T X)/p * I)^{-1} X^T Y`` on
    standardised features with a bias column; prediction ``argmax(X W)``."""
    xp, Xtr, Xte, ytr, yte, Ytr = _prepare(X, y, train, test, n_classes)
    ones_tr = xp.ones((Xtr.shape[0], 1), dtype=X.dtype, device=device(X))
    ones_te = xp.ones((Xte.shape[0], 1), dtype=X.dtype, device=device(X))
    A = xp.concat([Xtr, ones_tr], axis=1)  # (n_tr, p)
    B = xp.concat([Xte, ones_te], axis=1)
    p = A.shape[1]
    gram = xp.permute_dims(A, (1, 0)) @ A
    lam = ridge * _float(xp.linalg.trace(gram)) / p
    W = xp.linalg.solve(gram + lam * xp.eye(p, dtype=X.dtype, device=device(X)), xp.permute_dims(A, (1, 0)) @ Ytr)
    return ProbeResult("linear", _accuracy(xp, A @ W, ytr), _accuracy(xp, B @ W, yte), Xtr.shape[0], Xte.shape[0])


def mlp_probe(
    X: Array,
    y: Array,
    train: np.ndarray,
    test: np.ndarray,
    *,
    hidden: int = 64,
    steps: int = 300,
    lr: float = 1e-2,
    weight_decay: float = 1e-4,
    seed: int = 0,
    n_classes: int | None = None,
) -> ProbeResult:
    """2-layer MLP probe ``softmax(W2 relu(W1 x + b1) + b2)``, cross-entropy + ``weight_decay |W|^2 / 2``,
    full-batch Adam (beta 0.9 / 0.999) for ``steps`` steps; gradients written out by hand."""
    xp, Xtr, Xte, ytr, yte, Ytr = _prepare(X, y, train, test, n_classes)
    dev, dt = device(X), X.dtype
    n, p = Xtr.shape
    C = Ytr.shape[1]
    rng = np.random.default_rng(seed)
    params = [
        rng.standard_normal((p, hidden)) * math.sqrt(2.0 / p),
        np.zeros(hidden),
        rng.standard_normal((hidden, C)) * math.sqrt(1.0 / hidden),
        np.zeros(C),
    ]
    params = [xp.asarray(w, dtype=dt, device=dev) for w in params]
    m = [xp.zeros_like(w) for w in params]
    v = [xp.zeros_like(w) for w in params]
    b1, b2, eps = 0.9, 0.999, 1e-8

    def logits(Xa, W1, c1, W2, c2):
        a = Xa @ W1 + c1
        r = xp.where(a > 0, a, xp.zeros_like(a))
        return a, r, r @ W2 + c2

    for t in range(1, steps + 1):
        W1, c1, W2, c2 = params
        a, r, s = logits(Xtr, W1, c1, W2, c2)
        s = s - xp.max(s, axis=1, keepdims=True)
        prob = xp.exp(s) / xp.sum(xp.exp(s), axis=1, keepdims=True)
        ds = (prob - Ytr) / n  # d(mean CE)/d logits, (n, C)
        dr = ds @ xp.permute_dims(W2, (1, 0))
        da = xp.where(a > 0, dr, xp.zeros_like(dr))
        grads = [
            xp.permute_dims(Xtr, (1, 0)) @ da + weight_decay * W1,
            xp.sum(da, axis=0),
            xp.permute_dims(r, (1, 0)) @ ds + weight_decay * W2,
            xp.sum(ds, axis=0),
        ]
        new = []
        for i, (w, g) in enumerate(zip(params, grads)):
            m[i] = b1 * m[i] + (1 - b1) * g
            v[i] = b2 * v[i] + (1 - b2) * g * g
            mhat, vhat = m[i] / (1 - b1**t), v[i] / (1 - b2**t)
            new.append(w - lr * mhat / (xp.sqrt(vhat) + eps))
        params = new
    tr_acc = _accuracy(xp, logits(Xtr, *params)[2], ytr)
    te_acc = _accuracy(xp, logits(Xte, *params)[2], yte)
    return ProbeResult("mlp", tr_acc, te_acc, n, Xte.shape[0])
