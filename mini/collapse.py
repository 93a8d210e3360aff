"""Section 4: collapsed states and Theorem 4.1 (the statics), with the audit table.

A *collapsed state* is a batch whose rows are all one point, ``Z = 1_n z*^T`` (n, d): every input
maps to the same representation. Theorem 4.1 (docs/paper.md) at such a state, with ``rho = grad_H L != 0``:

1. Linear heads (and ReLU heads off their kinks) have ``M = 0``, so ``H_eff = G = J^T (grad^2_H L) J``,
   which is PSD when ``grad^2_H L`` is PSD (the MSE objectives): no direction of negative curvature,
   the collapsed state is not repelling.
2. Smooth heads: if ``G`` has a null space (at collapse all ``J_i`` are equal, so with an MSE loss
   ``null(G) = null(J(z*))`` per sample, non-trivial when ``k < d``), then for ``v`` in ``null(G)``

       v^T H_eff v = v^T G v + v^T M v = v^T M v,

   and a negative eigenvalue of ``M`` restricted to ``null(G)`` forces ``lambda_min(H_eff) < 0``
   (Rayleigh: ``lambda_min(H) <= min_{v in null G} v^T H v / |v|^2``): a strict saddle *if* ``z*`` is
   also a critical point. A collapsed state with random targets is not one (its gradient is a
   material fraction of ``|J| |rho|``), so there only the negative curvature is at issue.

Where collapsed *critical* points with ``rho != 0`` exist (``collapsed_critical_state``): at collapse
every sample shares ``J = J(z*)``, and ``grad_{z_i} L = J^T rho_i`` for a per-sample loss, so the state
is critical in ``Z`` iff every ``rho_i`` lies in ``null(J^T)``; the head's own gradient (the last
layer's ``sum_i rho_i x*^T`` and, through it, every earlier layer's) vanishes iff also
``sum_i rho_i = 0``. For a generic MLP head ``rank J = r = min(d, k, widths)``, so:

- ``r = d < k`` (an expanding head, e.g. the paper's 512 -> 2048): ``null(J^T)`` is non-trivial but
  ``null(G) = {0}`` (``G_i = J^T J / n`` is positive definite). With ``M`` linear in ``rho``,
  ``H_eff(s rho) = G + s M``: a strict local minimum in ``Z`` for ``s < s*`` and a strict saddle for
  ``s > s*``, ``s* = 1 / max_i lambda_max(-G_i^{-1/2} M_i G_i^{-1/2})`` (``saddle_threshold``).
- ``r = w_b < min(d, k)`` (a bottleneck layer of width ``w_b``): ``J^T rho = 0`` forces the gradient
  of ``<rho, h>`` at the bottleneck to vanish, and every later layer's ``P_l`` factors through the
  bottleneck's ``P_b``, whose null space is ``null(J)``: ``v^T M v = 0`` on ``null(G)``. Part 2's
  mechanism (negative ``M`` on ``null(G)``) is absent at every such critical point.

Of the objectives in ``mini.losses`` only MSE to targets and the stop-gradient objectives (SimSiam,
BYOL with a predictor) have ``rho != 0`` at collapse; MSE between views, NT-Xent, VICReg and Barlow
Twins have ``rho = 0`` there by symmetry (equal views, equal similarities, zero centred batch).

Premises are reported, not assumed: ``Objective.hessian_psd`` says whether ``grad^2_H L`` is PSD;
the SimSiam negative cosine is indefinite, outside part 1.

``python -m mini.reports.collapse`` prints the audit table: head x init -> ``|M|/|H_eff|``, negative
eigenvalue counts of ``G`` and ``H_eff`` (below ``-NEG_FLOOR * scale``), ``lambda_min``, scale,
whether the PSD premise holds.

Inits: ``collapsed`` (``Z = 1 z*^T``, a random head), ``pseudo`` (the paper's pseudo-collapse:
every Linear weight of the head multiplied by 0.1, a random batch), ``normal`` (random batch and head).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.linalg

from mini.heads import Head, init_head
from mini.hessian import (
    NEG_FLOOR,
    EffectiveHessian,
    decompose_closed_form,
    head_derivatives,
    relative_norm,
    spectrum,
)
from mini.losses import Objective, mse_targets, simsiam

INITS: tuple[str, ...] = ("collapsed", "pseudo", "normal")
RANK_RTOL = 1e-10  # singular values of J below this fraction of the largest are zero
WILSON_Z95 = 1.959963984540054  # the standard normal's 97.5 % quantile: two-sided 95 % intervals
PSEUDO_COLLAPSE_FACTOR = 0.1  # the paper's E1: every Linear weight of the projector x 0.1
AUDIT_SPECS: tuple[str, ...] = ("linear", "relu2", "relu3", "gelu2", "gelu3", "swish2", "swish3", "tanh2", "softplus2")


def collapsed_batch(z_star: np.ndarray, n: int) -> np.ndarray:
    """``Z = 1_n z*^T``: n copies of one representation, (n, d)."""
    z_star = np.asarray(z_star, dtype=float)
    return np.tile(z_star, (n, 1))


def pseudo_collapse(head: Head, factor: float = PSEUDO_COLLAPSE_FACTOR) -> Head:
    """Every Linear weight multiplied by ``factor`` (biases kept), as in the paper's E1."""
    return head.with_layers([{**layer, "W": factor * layer["W"]} for layer in head.layers])


def null_space(A: np.ndarray, rel_floor: float = NEG_FLOOR) -> np.ndarray:
    """Orthonormal basis (columns) of the eigenvectors of symmetric ``A`` with
    ``|lambda| <= rel_floor * scale``: the numerical null space."""
    w, V = np.linalg.eigh(A)
    scale = np.abs(w).max(initial=0.0)
    return V[:, np.abs(w) <= rel_floor * scale]


def restricted_min(M: np.ndarray, basis: np.ndarray) -> float:
    """``min_{v in span(basis), |v|=1} v^T M v`` (``+inf`` for an empty basis)."""
    if basis.shape[1] == 0:
        return float("inf")
    return float(np.linalg.eigvalsh(basis.T @ M @ basis)[0])


def left_null_space(J: np.ndarray, rtol: float = RANK_RTOL) -> np.ndarray:
    """Orthonormal basis (columns, (k, k - r)) of ``null(J^T)`` for ``J`` (k, d); ``r`` counts the
    singular values above ``rtol`` times the largest."""
    U, svals, _ = np.linalg.svd(np.asarray(J, dtype=float))
    r = int(np.sum(svals > rtol * svals.max(initial=0.0))) if svals.size and svals.max() > 0 else 0
    return U[:, r:]


def collapsed_critical_state(
    head: Head, z_star: np.ndarray, n: int, rng: np.random.Generator, *, joint: bool = True, scale: float = 1.0
) -> tuple[np.ndarray, Objective, np.ndarray]:
    """A collapsed batch ``Z* = 1_n z*^T``, MSE targets ``T`` making it critical, and its ``rho`` (n, k).

    ``rho`` is drawn, not chosen: a random residual ``(h(z*) - t0_i) / n`` with ``t0_i ~ N(0, I)`` is
    projected onto ``null(J(z*)^T)`` (critical in ``Z``), then, when ``joint``, centred over the samples
    (``sum_i rho_i = 0``: critical in the head's parameters too), then multiplied by ``scale``.
    ``T = h(z*) - n rho``. ``ValueError`` when ``null(J^T)`` is trivial (no such point exists).
    """
    z_star = np.asarray(z_star, dtype=float)
    Z = collapsed_batch(z_star, n)
    h = np.asarray(head(Z))
    basis = left_null_space(np.asarray(head_derivatives(head, Z).J[0]))
    if basis.shape[1] == 0:
        raise ValueError(f"null(J^T) is trivial for head {head.spec} (d={head.d}, k={head.k}): a collapsed "
                         "critical point with rho != 0 needs rank J < k")
    rho = ((h - rng.standard_normal(h.shape)) / n) @ basis @ basis.T  # rows projected onto null(J^T)
    if joint:
        rho = rho - rho.mean(axis=0)
    rho = scale * rho
    return Z, mse_targets(h - n * rho), rho


def saddle_threshold(G_block: np.ndarray, M_blocks: np.ndarray) -> float:
    """``s* = 1 / max_i lambda_max(-M_i, G)`` (generalised eigenvalues; ``G`` positive definite):
    ``G + s M_i`` is positive definite for every ``i`` iff ``s < s*``; ``inf`` if no ``M_i`` has a
    direction of negative curvature relative to ``G`` (none above ``NEG_FLOOR`` of the largest
    ``|eigenvalue|``: round-off is not curvature)."""
    eig = np.concatenate([scipy.linalg.eigh(-Mi, G_block, eigvals_only=True) for Mi in M_blocks])
    top = float(eig.max())
    return 1.0 / top if top > NEG_FLOOR * float(np.abs(eig).max()) else float("inf")


def wilson_interval(hits: int, total: int, z: float = WILSON_Z95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion ``p = hits / total``:

        (c -+ h) / (1 + z^2/N),   c = p + z^2/(2N),   h = z sqrt(p(1-p)/N + z^2/(4N^2)).

    Evaluated without cancellation: ``c^2 - h^2 = p^2 (1 + z^2/N)``, so the lower end is ``p^2 / (c + h)``,
    and the upper end is ``1 -`` the lower end of ``1 - p`` (the interval is symmetric under
    ``p -> 1 - p``). ``c - h`` itself rounds to about 1e-17 at ``p = 0``, where the end is exactly 0.
    """
    if total < 1 or not 0 <= hits <= total:
        raise ValueError(f"need 0 <= hits <= total and total >= 1, got {hits}/{total}")
    p, q, z2 = hits / total, (total - hits) / total, z * z
    half = z * np.sqrt(p * q / total + z2 / (4 * total * total))
    return float(p * p / (p + z2 / (2 * total) + half)), float(1.0 - q * q / (q + z2 / (2 * total) + half))


@dataclass(frozen=True)
class Audit:
    """One row of the audit table."""

    spec: str
    init: str
    objective: str
    psd_premise: bool | None
    rho_norm: float
    m_over_h: float
    neg_G: int
    neg_H: int
    null_G: int
    lambda_min: float
    lambda_max: float
    scale: float
    min_M_on_null_G: float

    @property
    def strict_saddle(self) -> bool:
        return self.neg_H > 0


def audit(head: Head, objective: Objective, Z: np.ndarray, init: str = "") -> Audit:
    """Theorem 4.1's quantities at one state."""
    dec: EffectiveHessian = decompose_closed_form(head, objective, Z)
    sH, sG = spectrum(dec.H), spectrum(dec.G)
    return Audit(
        spec=str(head.spec), init=init, objective=objective.name, psd_premise=objective.hessian_psd,
        rho_norm=float(np.linalg.norm(dec.rho)), m_over_h=relative_norm(dec.M, dec.H),
        neg_G=sG.n_negative, neg_H=sH.n_negative, null_G=null_space(dec.G).shape[1],
        lambda_min=sH.lambda_min, lambda_max=sH.lambda_max, scale=sH.scale,
        min_M_on_null_G=restricted_min(dec.M, null_space(dec.G)),
    )


def toy_state(
    spec: str, init: str, objective: str, seed: int, *, n: int = 4, d: int = 6, k: int = 3, width: int = 8
) -> tuple[Head, Objective, np.ndarray]:
    """A toy instance: ``k < d`` so that ``G`` has a null space at collapse (Theorem 4.1, part 2).

    ``mse``: fixed random targets (distinct per sample, so ``rho != 0``; PSD premise holds).
    ``simsiam``: negative cosine against the stop-gradient embeddings of the other view, through a
    predictor of the head's activation (two views of ``n/2`` samples; premise does not hold).
    """
    if init not in INITS:
        raise ValueError(f"unknown init {init!r}; valid: {', '.join(INITS)}")
    rng = np.random.default_rng(seed)
    head = init_head(spec, d, k, width, rng)
    if init == "collapsed":
        Z = collapsed_batch(rng.standard_normal(d), n)
    else:
        Z = rng.standard_normal((n, d))
    if init == "pseudo":
        head = pseudo_collapse(head)
    Hb = head(Z)
    if objective == "mse":
        return head, mse_targets(rng.standard_normal(Hb.shape)), Z
    if objective == "simsiam":
        act = head.spec.activation
        predictor = init_head("linear" if act is None else f"{act}2", k, k, width, rng)
        return head, simsiam(Hb, predictor), Z
    raise ValueError(f"unknown objective {objective!r}; valid: mse, simsiam")


def generic_fraction(activation: str, depth: int, n_heads: int, seed: int = 0) -> tuple[int, int]:
    """Theorem 4.1 part 2, "generically": of ``n_heads`` random smooth heads at a collapsed state
    under the MSE objective, how many have ``lambda_min(H_eff) < -NEG_FLOOR * scale``. A measured
    fraction: ``wilson_interval`` gives its 95 % interval."""
    hits = 0
    for i in range(n_heads):
        head, obj, Z = toy_state(f"{activation}{depth}", "collapsed", "mse", seed=seed * 100_003 + i)
        hits += spectrum(decompose_closed_form(head, obj, Z).H).n_negative > 0
    return hits, n_heads


def audit_table(seeds: int = 3, objectives: tuple[str, ...] = ("mse", "simsiam")) -> list[Audit]:
    rows = []
    for objective in objectives:
        for spec in AUDIT_SPECS:
            for init in INITS:
                for seed in range(seeds):
                    rows.append(audit(*toy_state(spec, init, objective, seed), init=init))
    return rows
