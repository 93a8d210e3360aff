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


def nt_xent_residue(Hb: np.ndarray, tau: float) -> float:
    """``max_i (1 - max_{j != i} p_ij)``, ``p_i`` the NT-Xent softmax of row ``i`` over the other rows.

    Why it is a premise of a float64 check: the log-sum-exp Hessian ``diag(p) - p p^T`` of a row whose softmax
    sits on one entry (``1 - p = q``) has size ``q / tau^2`` but is computed from terms of size ``1 / tau^2``, so
    its float64 value carries an absolute error of ``~1e-16 / tau^2``: relative ``1e-16 / q``. Where every row
    is that saturated (well-separated views at a low temperature), ``H_eff`` is the cancellation residue of
    its own evaluation and no route can be held to ``1e-10`` of it; ``SOFTMAX_RESIDUE_FLOOR`` keeps the
    relative round-off below ``1e-12``."""
    U = Hb / np.linalg.norm(Hb, axis=1, keepdims=True)
    S = U @ U.T / tau
    np.fill_diagonal(S, -np.inf)
    P = np.exp(S - S.max(axis=1, keepdims=True))
    P /= P.sum(axis=1, keepdims=True)
    return float((1.0 - P.max(axis=1)).max())


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
