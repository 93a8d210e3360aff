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
   (Rayleigh: ``lambda_min(H) <= min_{v in null G} v^T H v / |v|^2``): a strict saddle.

Premises are reported, not assumed: ``Objective.hessian_psd`` says whether ``grad^2_H L`` is PSD;
the SimSiam negative cosine is indefinite, outside part 1.

``python -m mini.collapse`` prints the audit table: head x init -> ``|M|/|H_eff|``, negative
eigenvalue counts of ``G`` and ``H_eff`` (below ``-NEG_FLOOR * scale``), ``lambda_min``, scale,
whether the PSD premise holds.

Inits: ``collapsed`` (``Z = 1 z*^T``, a random head), ``pseudo`` (the paper's pseudo-collapse:
every Linear weight of the head multiplied by 0.1, a random batch), ``normal`` (random batch and head).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import numpy as np

from mini.heads import Head, init_head
from mini.hessian import NEG_FLOOR, EffectiveHessian, decompose_closed_form, relative_norm, spectrum
from mini.losses import Objective, mse_targets, simsiam

INITS: tuple[str, ...] = ("collapsed", "pseudo", "normal")
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
    under the MSE objective, how many have ``lambda_min(H_eff) < -NEG_FLOOR * scale``."""
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


def format_table(rows: list[Audit]) -> str:
    head = (
        "| objective | PSD premise | head | init | seeds | |M|/|H_eff| | neg(G) | neg(H_eff) | dim null(G) "
        "| lambda_min(H_eff) | scale | min M on null(G) |"
    )
    lines = [head, "|" + "---|" * 12]
    groups: dict[tuple[str, str, str], list[Audit]] = {}
    for r in rows:
        groups.setdefault((r.objective, r.spec, r.init), []).append(r)
    for (objective, spec, init), g in groups.items():
        premise = {True: "yes", False: "no (indefinite)", None: "state-dependent"}[g[0].psd_premise]

        def span(values, fmt="{:.3g}"):
            lo, hi = min(values), max(values)
            return fmt.format(lo) if lo == hi else f"{fmt.format(lo)} .. {fmt.format(hi)}"

        lines.append(
            f"| {objective} | {premise} | {spec} | {init} | {len(g)} | {span([r.m_over_h for r in g])} "
            f"| {span([r.neg_G for r in g], '{}')} | {span([r.neg_H for r in g], '{}')} "
            f"| {span([r.null_G for r in g], '{}')} | {span([r.lambda_min for r in g])} "
            f"| {span([r.scale for r in g])} | {span([r.min_M_on_null_G for r in g])} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m mini.collapse",
        description="Theorem 4.1 audit at collapsed, pseudo-collapsed and normal states (toy instances).",
    )
    parser.add_argument("--seeds", type=int, default=3, help="instances per row (default 3)")
    parser.add_argument("--generic", type=int, default=100, help="random heads per activation for the "
                        "'generic' fraction (default 100)")
    args = parser.parse_args(argv)
    if args.seeds < 1 or args.generic < 1:
        parser.error("--seeds and --generic must be positive")
    print("Theorem 4.1 audit: n=4 samples, d=6, k=3 (so null(G) is non-trivial at collapse), width 8,")
    print(f"negative = eigenvalue below -{NEG_FLOOR:g} x scale, scale = max |lambda(H_eff)|.\n")
    print(format_table(audit_table(args.seeds)))
    print("\nGeneric negative curvature at collapse (MSE to fixed targets, PSD premise holds):")
    print("| head | heads with lambda_min(H_eff) < 0 |\n|---|---|")
    for act in ("gelu", "swish", "tanh", "softplus"):
        for depth in (2, 3):
            hits, total = generic_fraction(act, depth, args.generic)
            print(f"| {act}{depth} | {hits}/{total} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
