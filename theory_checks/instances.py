"""Random instances (head, objective, batch) shared by the equation (1) and Section 4 checks.

An instance is drawn from a seed, so a failing case is reproduced by its seed alone.
Two-view objectives get an even batch with at least two samples per view (VICReg and Barlow
Twins need batch statistics); stop-gradient objectives get a predictor of the head's own
activation and targets that differ from the current embeddings, so ``rho != 0``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st
from premises import threshold

from mini.heads import Head, init_head
from mini.losses import Objective, make_objective

OBJECTIVE_NAMES: tuple[str, ...] = ("mse", "mse_views", "simclr", "simsiam", "byol", "vicreg", "barlow")


@dataclass(frozen=True)
class Instance:
    head: Head
    objective: Objective
    Z: np.ndarray
    seed: int

    def __repr__(self) -> str:
        n, d = self.Z.shape
        return f"Instance({self.head.spec}, {self.objective.name}, n={n}, d={d}, k={self.head.k}, seed={self.seed})"


def make_instance(
    spec: str, objective: str, seed: int, *, m: int = 3, d: int = 4, k: int = 3, width: int = 5,
    Z: np.ndarray | None = None,
) -> Instance:
    """A head of ``spec``, an objective by name, and a batch of ``2m`` rows (two views of ``m``)."""
    rng = np.random.default_rng(seed)
    head = init_head(spec, d, k, width, rng)
    if Z is None:
        Z = rng.standard_normal((2 * m, d))
    Hb = head(Z)
    predictor = None
    if objective in ("simsiam", "byol"):
        act = head.spec.activation
        predictor = init_head("linear" if act is None else f"{act}2", k, k, width, rng)
    targets = Hb + 0.5 * rng.standard_normal(Hb.shape) if objective in ("mse", "simsiam", "byol") else None
    return Instance(head, make_objective(objective, Hb, predictor=predictor, targets=targets), Z, seed)


def rho_materiality(rho: np.ndarray, Hb: np.ndarray) -> float:
    """``max |rho| / max |h|``: the premise ``rho_material`` (``premises``) holds above its threshold."""
    return float(np.abs(rho).max() / max(float(np.abs(Hb).max()), np.finfo(float).tiny))


def rho_is_material(rho: np.ndarray, Hb: np.ndarray) -> bool:
    """``rho != 0`` in a sense no rounding can fake: ``rho_materiality`` above the premise's threshold."""
    return rho_materiality(rho, Hb) > threshold("rho_material")


ROUNDOFF_REL = 1e-12  # float64 carries a sum to ~1e-16 of its terms' size; 1e4 of margin for the chains


def nt_xent_term_scale(Hb: np.ndarray, tau: float, J_norm: float = 1.0) -> float:
    """The size of the terms NT-Xent's curvature is summed from: ``|J|^2 / (n tau^2 min_i |h_i|^2)`` (the
    log-sum-exp Hessian ``diag(p) - p p^T`` of the similarities ``u_i . u_j / tau``, ``u = h / |h|``, pulled
    back through the normalisation and the head's Jacobian ``J``).

    Why a tolerance needs it: where a row's softmax sits on one entry (``1 - p = q``), the Hessian has size
    ``q / tau^2`` but is computed from terms of size ``1 / tau^2``, so float64 carries it to ``~1e-16 / tau^2``:
    relative ``1e-16 / q``. The checks compare routes to ``REL_TOL x scale + ROUNDOFF_REL x`` this term
    scale: the accuracy the evaluation has, not more (exploration found saturated batches, residue 4e-7 at
    tau = 0.1 and 5e-10 at tau = 0.0625, where a tolerance of the scale alone asked for digits float64 had
    cancelled away; an earlier premise discarded them)."""
    n = Hb.shape[0]
    return float(J_norm) ** 2 / (n * tau**2 * float(np.min(np.sum(np.asarray(Hb) ** 2, axis=1))))


def objective_temperature(objective: Objective) -> float | None:
    """NT-Xent's ``tau`` as its name records it (``simclr(tau=0.1)``), ``None`` for the other objectives."""
    name = objective.name
    return float(name[name.index("tau=") + 4: name.index(")")]) if name.startswith("simclr(tau=") else None


@st.composite
def instance_shapes(draw, objective: str) -> dict:
    """``m`` pairs of views (3-4 for Barlow Twins, whose standardisation makes ``m = 2`` locally
    constant; 2-4 for VICReg's variances and for NT-Xent, which with one pair has no negative and is
    identically 0; 1-4 for the others), ``d``, ``k`` in [1, 5] (``k >= 2`` for the normalising objectives,
    whose ``k = 1`` embedding is a sign), hidden width in [1, 6]."""
    normalising = objective in ("simclr", "simsiam", "byol")
    m_min = {"barlow": 3, "vicreg": 2, "simclr": 2}.get(objective, 1)
    return {"m": draw(st.integers(m_min, 4)), "d": draw(st.integers(1, 5)),
            "k": draw(st.integers(2 if normalising else 1, 5)), "width": draw(st.integers(1, 6))}
