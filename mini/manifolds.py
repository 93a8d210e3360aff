r"""Toy data manifolds with continuous augmentation groups (docs/paper.md section 5; E3-E4 in miniature).

Each manifold has a semantic part (``n_classes`` class templates plus within-class variation) and a
one-parameter Lie group ``g_t`` acting linearly on the data ``x`` in ``R^D``:

    g_t . x = expm(t A) x,       V_aug(x) = d/dt g_t . x |_{t=0} = A x        (the tangent field)

    hue      D = 3P: P "pixels" (luminance, chroma a, chroma b); g_t rotates every chroma plane by the
             angle t (SO(2), period 2 pi): a hue rotation. A is block-diagonal [[0, -1], [1, 0]].
    shift    D = m (odd): a 1-D periodic signal; g_t translates it by t samples (band-limited,
             continuous; t = 1 is np.roll by one; period m). In the real Fourier basis each
             frequency pair (cos_k, sin_k) rotates by the angle 2 pi k t / m.
    scale    D: g_t x = e^t x, a brightness-like scaling (the group (R, +), not compact).

``hue`` and ``shift`` are one ``PhaseRotation``: an orthonormal basis ``Q`` (the data in coordinates
``y = Q^T x``), pairs ``(u_j, v_j)`` of coordinates that rotate with integer orders ``k_j`` at angle
``k_j w t``, and fixed coordinates. Its invariants (functions constant on orbits) are the fixed
coordinates, the squared radii ``|c_j|^2`` of ``c_j = u_j + i v_j``, the cross terms ``c_j conj(c_l)``
of equal orders and the triple products ``c_j c_l conj(c_m)`` with ``k_j + k_l = k_m`` (the
bispectrum of the shift). The scaling's invariant is the direction ``x / |x|``.

Shapes: a batch ``X`` is ``(n, D)``; ``t`` a scalar or ``(n,)``; ``orbits(X0, ts)`` is
``(n, len(ts), D)``; ``invariants(X)`` is ``(n, n_invariants)``. ``act`` and ``invariants`` are
autograd-safe (the analytic tangent is checked against autograd in ``tests/test_manifolds.py``).

Base points are "upright": each class template has a canonical phase (as natural images have an
orientation), so a probe can read a large group element (a 90 degree hue turn) off ``x``, while the
training augmentation covers a smaller range (``train_range``, like the paper's rotations up to 45
degrees).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import autograd.numpy as anp
import numpy as np

Array = Any

MANIFOLDS: tuple[str, ...] = ("hue", "shift", "scale")


@dataclass(frozen=True)
class Sample:
    """Augmented samples: ``X`` (n, D) = ``g_t . X0``, class ``labels`` (n,), parameters ``t`` (n,)."""

    X: np.ndarray
    labels: np.ndarray
    t: np.ndarray
    X0: np.ndarray


@dataclass(frozen=True)
class Manifold:
    """Class templates in ``R^D`` with within-class noise, acted on by a one-parameter group."""

    name: str
    templates: np.ndarray = field(repr=False)  # (n_classes, D)
    noise: float
    period: float | None  # None for a non-compact group
    train_range: tuple[float, float]  # augmentation parameters drawn uniformly from it for SSL views

    @property
    def dim(self) -> int:
        return int(self.templates.shape[1])

    @property
    def n_classes(self) -> int:
        return int(self.templates.shape[0])

    # --- the group -----------------------------------------------------------------------------
    def act(self, X: Array, t: Array) -> Array:  # pragma: no cover - abstract
        raise NotImplementedError

    def generator(self) -> np.ndarray:  # pragma: no cover - abstract
        """``A`` (D, D) with ``g_t = expm(t A)``."""
        raise NotImplementedError

    def tangent(self, X: Array) -> Array:
        """``V_aug(x) = A x`` for every row, (n, D): the analytic tangent of the orbit at ``t = 0``."""
        return anp.dot(X, self.generator().T)

    def invariants(self, X: Array) -> Array:  # pragma: no cover - abstract
        raise NotImplementedError

    # --- data ----------------------------------------------------------------------------------
    def base(self, n_per_class: int, rng: np.random.Generator | int | None = 0) -> tuple[np.ndarray, np.ndarray]:
        """``n_per_class`` un-augmented points per class: ``(X0 (n, D), labels (n,))``, class-major."""
        if n_per_class < 1:
            raise ValueError(f"n_per_class must be >= 1, got {n_per_class}")
        rng = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
        labels = np.repeat(np.arange(self.n_classes), n_per_class)
        X0 = self.templates[labels] + self.noise * rng.standard_normal((labels.size, self.dim))
        return X0, labels

    def draw_params(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """Augmentation parameters uniform on ``train_range``, (n,)."""
        lo, hi = self.train_range
        return rng.uniform(lo, hi, size=n)

    def sample(self, n_per_class: int, rng: np.random.Generator | int | None = 0) -> Sample:
        """Base points with one random augmentation each."""
        rng = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
        X0, labels = self.base(n_per_class, rng)
        t = self.draw_params(labels.size, rng)
        return Sample(self.act(X0, t), labels, t, X0)

    def orbits(self, X0: Array, ts: Array) -> np.ndarray:
        """``g_t . x`` for every base point and every ``t`` in ``ts``: (n, len(ts), D)."""
        X0 = np.asarray(X0, dtype=float)
        ts = np.asarray(ts, dtype=float).reshape(-1)
        n, T = X0.shape[0], ts.size
        flat = self.act(np.repeat(X0, T, axis=0), np.tile(ts, n))
        return flat.reshape(n, T, self.dim)

    def orbit_params(self, n: int = 12) -> np.ndarray:
        """E4's orbit: ``n`` equally spaced group elements over a period (0, 30, ..., 330 degrees)."""
        if self.period is not None:
            return np.arange(n) * self.period / n
        lo, hi = self.train_range
        return np.linspace(lo, hi, n)

    def sweep_params(self, n: int = 10) -> np.ndarray:
        """E4's curvature sweep: ``n`` equally spaced parameters over an eighth of a period (0 to 45
        degrees), or over the upper half of the training range for a non-compact group."""
        if self.period is not None:
            return np.linspace(0.0, self.period / 8, n)
        return np.linspace(0.0, self.train_range[1], n)

    def probe_params(self) -> np.ndarray:
        """The 4-way discretised augmentation of E3 (0/90/180/270 degrees for a compact group)."""
        if self.period is not None:
            return np.arange(4) * self.period / 4
        lo, hi = self.train_range
        return lo + (np.arange(4) + 0.5) * (hi - lo) / 4


def _as_column(t: Array, n: int) -> Array:
    """``t`` (scalar or (n,)) as an (n, 1) column, autograd-safe."""
    return anp.reshape(t * anp.ones(n), (n, 1))


@dataclass(frozen=True)
class PhaseRotation(Manifold):
    """A one-parameter subgroup of a torus acting by rotations in an orthonormal basis ``Q``."""

    Q: np.ndarray = field(default=None, repr=False)  # (D, D) orthonormal; y = x Q
    u_idx: np.ndarray = field(default=None, repr=False)  # (K,) coordinates rotating as cos parts
    v_idx: np.ndarray = field(default=None, repr=False)  # (K,) ... and as sin parts
    orders: np.ndarray = field(default=None, repr=False)  # (K,) integer orders k_j
    omega: float = 1.0  # base angular speed: pair j turns by k_j * omega * t

    def _select(self, idx: np.ndarray) -> np.ndarray:
        return np.eye(self.dim)[:, idx]  # (D, len(idx)) column selector

    @property
    def fixed_idx(self) -> np.ndarray:
        return np.setdiff1d(np.arange(self.dim), np.concatenate([self.u_idx, self.v_idx]))

    def _pairs(self, X: Array) -> tuple[Array, Array, Array]:
        Y = anp.dot(X, self.Q)  # (n, D) coordinates
        return anp.dot(Y, self._select(self.u_idx)), anp.dot(Y, self._select(self.v_idx)), Y

    def act(self, X: Array, t: Array) -> Array:
        """Rotate each pair ``(u_j, v_j)`` by ``k_j omega t``; the fixed coordinates stay."""
        X = X if X.ndim == 2 else anp.reshape(X, (1, -1))
        u, v, Y = self._pairs(X)
        angle = _as_column(t, X.shape[0]) * (self.omega * self.orders)[None, :]  # (n, K)
        c, s = anp.cos(angle), anp.sin(angle)
        Su, Sv, Sf = self._select(self.u_idx), self._select(self.v_idx), self._select(self.fixed_idx)
        Y_new = (
            anp.dot(anp.dot(Y, Sf), Sf.T) + anp.dot(c * u - s * v, Su.T) + anp.dot(s * u + c * v, Sv.T)
        )  # (n, D): scatter back without item assignment
        return anp.dot(Y_new, self.Q.T)

    def generator(self) -> np.ndarray:
        """``A = Q (sum_j k_j omega (e_v e_u^T - e_u e_v^T)) Q^T``: skew-symmetric."""
        B = np.zeros((self.dim, self.dim))
        for u, v, k in zip(self.u_idx, self.v_idx, self.orders):
            B[v, u] += k * self.omega
            B[u, v] -= k * self.omega
        return self.Q @ B @ self.Q.T

    def invariants(self, X: Array) -> Array:
        """Fixed coordinates, ``|c_j|^2``, ``c_j conj(c_l)`` (``k_j = k_l``), ``c_j c_l conj(c_m)``
        (``k_j + k_l = k_m``), real and imaginary parts: (n, n_invariants)."""
        X = X if X.ndim == 2 else anp.reshape(X, (1, -1))
        u, v, Y = self._pairs(X)
        cols = [anp.dot(Y, self._select(self.fixed_idx)), u * u + v * v]
        K = len(self.orders)
        for j in range(K):
            for l in range(j + 1, K):
                if self.orders[j] == self.orders[l]:  # c_j conj(c_l)
                    cols += [
                        (u[:, j] * u[:, l] + v[:, j] * v[:, l])[:, None],
                        (v[:, j] * u[:, l] - u[:, j] * v[:, l])[:, None],
                    ]
        for j in range(K):
            for l in range(j, K):
                for m_ in np.flatnonzero(self.orders == self.orders[j] + self.orders[l]):
                    re_jl = u[:, j] * u[:, l] - v[:, j] * v[:, l]  # c_j c_l = re + i im
                    im_jl = u[:, j] * v[:, l] + v[:, j] * u[:, l]
                    cols += [
                        (re_jl * u[:, m_] + im_jl * v[:, m_])[:, None],  # times conj(c_m)
                        (im_jl * u[:, m_] - re_jl * v[:, m_])[:, None],
                    ]
        return anp.concatenate(cols, axis=1)


@dataclass(frozen=True)
class Scaling(Manifold):
    """``g_t x = e^t x`` (brightness-like); ``A = I``; invariant: the direction ``x / |x|``."""

    def act(self, X: Array, t: Array) -> Array:
        X = X if X.ndim == 2 else anp.reshape(X, (1, -1))
        return anp.exp(_as_column(t, X.shape[0])) * X

    def generator(self) -> np.ndarray:
        return np.eye(self.dim)

    def invariants(self, X: Array) -> Array:
        X = X if X.ndim == 2 else anp.reshape(X, (1, -1))
        return X / anp.sqrt(anp.sum(X * X, axis=1, keepdims=True))


# --------------------------------------------------------------------------------------------
# The three toy manifolds
# --------------------------------------------------------------------------------------------


def real_fourier_basis(m: int) -> np.ndarray:
    """Orthonormal real DFT basis of ``R^m`` (m odd), columns ``[1, cos_1, sin_1, ..., cos_K, sin_K]``
    with ``cos_k[j] = sqrt(2/m) cos(2 pi k j / m)``; ``K = (m - 1) / 2``."""
    j = np.arange(m)
    cols = [np.full(m, 1.0 / math.sqrt(m))]
    for k in range(1, (m - 1) // 2 + 1):
        angle = 2 * math.pi * k * j / m
        cols += [math.sqrt(2.0 / m) * np.cos(angle), math.sqrt(2.0 / m) * np.sin(angle)]
    return np.stack(cols, axis=1)


def hue_manifold(n_classes: int = 5, pixels: int = 4, noise: float = 0.15, seed: int = 0) -> PhaseRotation:
    """Hue rotation of ``pixels`` (luminance, a, b) triples. Class templates: a luminance pattern and
    chroma vectors of class-specific lengths whose hues lie within +-30 degrees of hue 0 ("upright")."""
    rng = np.random.default_rng(seed)
    lum = rng.uniform(-1.0, 1.0, (n_classes, pixels))
    radius = rng.uniform(0.5, 1.5, (n_classes, pixels))
    hue = rng.uniform(-math.pi / 6, math.pi / 6, (n_classes, pixels))
    templates = np.stack([lum, radius * np.cos(hue), radius * np.sin(hue)], axis=2).reshape(n_classes, 3 * pixels)
    idx = np.arange(pixels) * 3
    return PhaseRotation(
        "hue", templates, noise, 2 * math.pi, (-math.pi / 4, math.pi / 4),
        Q=np.eye(3 * pixels), u_idx=idx + 1, v_idx=idx + 2, orders=np.ones(pixels, dtype=int), omega=1.0,
    )


def shift_manifold(n_classes: int = 5, length: int = 15, noise: float = 0.15, seed: int = 0) -> PhaseRotation:
    """Band-limited translation of periodic signals of odd ``length``. Templates: smooth random bumps
    whose largest peak sits near sample 0 ("upright")."""
    if length % 2 == 0 or length < 5:
        raise ValueError(f"length must be odd and >= 5 (a real Fourier basis without a Nyquist term), got {length}")
    rng = np.random.default_rng(seed)
    j = np.arange(length)
    templates = []
    for _ in range(n_classes):
        centers = np.concatenate([[0.0], rng.uniform(2, length - 2, 2)])
        heights = np.concatenate([[1.5], rng.uniform(-0.8, 0.8, 2)])
        widths = rng.uniform(0.8, 2.0, 3)
        dist = np.abs(((j[None, :] - centers[:, None]) + length / 2) % length - length / 2)  # periodic distance
        templates.append(np.sum(heights[:, None] * np.exp(-0.5 * (dist / widths[:, None]) ** 2), axis=0))
    K = (length - 1) // 2
    return PhaseRotation(
        "shift", np.array(templates), noise, float(length), (-length / 8, length / 8),
        Q=real_fourier_basis(length), u_idx=1 + 2 * np.arange(K), v_idx=2 + 2 * np.arange(K),
        orders=np.arange(1, K + 1), omega=2 * math.pi / length,
    )


def scale_manifold(n_classes: int = 5, dim: int = 10, noise: float = 0.1, seed: int = 0) -> Scaling:
    """Brightness-like scaling ``x -> e^t x`` of unit-norm class directions (with noise)."""
    rng = np.random.default_rng(seed)
    T = rng.standard_normal((n_classes, dim))
    return Scaling("scale", T / np.linalg.norm(T, axis=1, keepdims=True), noise, None, (-0.5, 0.5))


def make_manifold(name: str, seed: int = 0, **kwargs) -> Manifold:
    """One of ``MANIFOLDS`` by name (``ValueError`` listing them otherwise)."""
    makers = {"hue": hue_manifold, "shift": shift_manifold, "scale": scale_manifold}
    if name not in makers:
        raise ValueError(f"unknown manifold {name!r}; valid: {', '.join(MANIFOLDS)}")
    return makers[name](seed=seed, **kwargs)
