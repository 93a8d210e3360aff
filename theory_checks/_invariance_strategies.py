"""Random torus actions for the section 5 theory checks (Proposition 5.2, Theorem 5.3)."""

from __future__ import annotations

import autograd.numpy as anp
import numpy as np


class Torus:
    """``T^g`` acting on ``R^d`` (``2 g <= d``) by rotating the planes ``(Q e_{2j}, Q e_{2j+1})``, j < g,
    with ``Q`` Haar-random orthogonal: ``g_t z = Q R(t) Q^T z``, ``R(t)`` block rotations by ``t_j``."""

    def __init__(self, d: int, g: int, rng: np.random.Generator):
        if not 1 <= g <= d // 2:
            raise ValueError(f"a torus T^g on R^d needs 1 <= g <= d // 2, got d={d}, g={g}")
        Q, R = np.linalg.qr(rng.standard_normal((d, d)))
        self.Q, self.d, self.g = Q * np.sign(np.diag(R)), d, g

    def generators(self) -> list[np.ndarray]:
        """``A_j = Q (e_{2j+1} e_{2j}^T - e_{2j} e_{2j+1}^T) Q^T``, skew-symmetric."""
        out = []
        for j in range(self.g):
            B = np.zeros((self.d, self.d))
            B[2 * j + 1, 2 * j], B[2 * j, 2 * j + 1] = 1.0, -1.0
            out.append(self.Q @ B @ self.Q.T)
        return out

    def tangents(self, z: np.ndarray) -> np.ndarray:
        """``V_aug(z)`` as columns ``A_j z``: (d, g)."""
        return np.stack([A @ z for A in self.generators()], axis=1)

    def act(self, z, t):
        """``g_t z`` for one point ``z`` (d,) and ``t`` (g,); autograd-safe in both."""
        y = anp.dot(self.Q.T, z)
        u, v = y[0 : 2 * self.g : 2], y[1 : 2 * self.g : 2]
        c, s = anp.cos(t), anp.sin(t)
        rotated = anp.reshape(anp.stack([c * u - s * v, s * u + c * v], axis=1), (2 * self.g,))
        return anp.dot(self.Q, anp.concatenate([rotated, y[2 * self.g :]]))

    def invariants(self, Z):
        """Fixed coordinates and squared radii of the rotating planes: (n, d) -> (n, d - g)."""
        Y = anp.dot(Z, self.Q)
        radii = [Y[:, 2 * j : 2 * j + 1] ** 2 + Y[:, 2 * j + 1 : 2 * j + 2] ** 2 for j in range(self.g)]
        return anp.concatenate([Y[:, 2 * self.g :], *radii], axis=1)
