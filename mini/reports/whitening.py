"""``python -m mini.reports.whitening``: the Section 3.1 tables of ``mini.whitening``.

Three tables: gradient-descent steps to a relative error with and without the whitening head
(Theorem 3.1's consequence), the definiteness of the objectives' loss Hessians at random states and
the whitening error there, and Proposition 3.3's curvature barrier (Gaussian curvature, the bound
``B`` and the best defect found over linear heads). Printed, and written into the three blocks of
``docs/section3.md`` that this command generates (``--no-doc`` prints only).
"""

from __future__ import annotations

import argparse
import time
import warnings

import autograd.numpy as anp
import numpy as np
from autograd import grad, hessian

from mini.hessian import NEG_FLOOR, loss_derivatives
from mini.losses import barlow, mse_targets, mse_views, nt_xent, vicreg
from mini.reports.docs import DOCS, add_doc_flags, publish
from mini.whitening import (
    CURVED_LOSSES,
    attaining_head,
    defect_lower_bound,
    gaussian_curvature,
    gd_steps,
    gd_steps_quadratic,
    head_defect,
    linear_head_hessian,
    optimise_linear_head,
    quadratic_loss,
    restricted,
    whitening_head,
)

PROG = "python -m mini.reports.whitening"
DOC = DOCS / "section3.md"  # its blocks [gd], [objectives], [barrier] (mini.reports.docs)


def gd_table(conditions: tuple[float, ...] = (10.0, 1e3, 1e5), k: int = 4, tol: float = 1e-6, seed: int = 0) -> str:
    """Markdown: GD steps to ``|z_t - z*| <= tol |z_0 - z*|`` with the whitening head (step 1) and
    without a head (step ``1 / lam_max``), both by running the loop; the exact-iterate count beside."""
    lines = ["| cond(A) | steps with whitening head | steps without head (loop) | without head (exact iterates) |",
             "|---|---|---|---|"]
    for cond in conditions:
        rng = np.random.default_rng(seed)
        Q, _ = np.linalg.qr(rng.standard_normal((k, k)))
        A = (Q * np.geomspace(1.0, cond, k)) @ Q.T
        h_star, z_star = rng.standard_normal(k), rng.standard_normal(k + 2)
        S = rng.standard_normal((k + 2, k))
        W = whitening_head(A, S).W

        def f(h, A=A, h_star=h_star):
            return 0.5 * anp.dot(h - h_star, anp.dot(A, h - h_star))

        grad_head = grad(lambda z, W=W, z_star=z_star, h_star=h_star, f=f: f(anp.dot(W, z - z_star) + h_star))
        with_head = gd_steps(grad_head, z_star + S @ rng.standard_normal(k), z_star, 1.0, tol, 1000)
        e0 = rng.standard_normal(k)
        lr = 1.0 / np.linalg.eigvalsh(A)[-1]
        loop = gd_steps(lambda h, A=A, h_star=h_star: A @ (h - h_star), h_star + e0, h_star, lr, tol, 10**7)
        lines.append(f"| {cond:.0e} | {with_head} | {loop} | {gd_steps_quadratic(A, e0, lr, tol)} |")
    return "\n".join(lines)


def objectives_table(seeds: tuple[int, ...] = (0, 1, 2), n: int = 6, k: int = 3) -> str:
    """Markdown: definiteness of ``grad^2_h L`` of the real objectives at random states (one-sample block
    and whole batch), the rank ``r`` whitened, and the whitening error ``max |U^T H_eff U - I|`` (autograd)."""
    lines = ["| objective | reading | seed | n_negative | n_zero | r (whitened) | PSD | max abs(U^T H_eff U - I) |",
             "|---|---|---|---|---|---|---|---|"]
    for seed in seeds:
        rng = np.random.default_rng(seed)
        objectives = {"simclr (tau 0.5)": nt_xent(0.5), "vicreg": vicreg(), "barlow": barlow(),
                      "mse (targets)": mse_targets(rng.standard_normal((n, k))), "mse_views": mse_views()}
        Hb = rng.standard_normal((n, k))
        for name, obj in objectives.items():
            _, HL = loss_derivatives(obj, Hb)
            for reading in ("sample", "batch"):
                if reading == "sample":
                    A, h_star = HL[0, :, 0, :], Hb[0]

                    def loss(h, obj=obj, rest=Hb[1:]):
                        return obj(anp.concatenate([h[None, :], rest], axis=0))
                else:
                    A, h_star = HL.reshape(n * k, n * k), Hb.ravel()

                    def loss(h, obj=obj):
                        return obj(anp.reshape(h, (n, k)))
                lam = np.linalg.eigvalsh(A)
                floor = NEG_FLOOR * np.abs(lam).max()
                r, neg = int(np.sum(lam > floor)), int(np.sum(lam < -floor))
                if r == 0:
                    err = "vacuous (r = 0)"
                else:
                    S = rng.standard_normal((r + 1, r))
                    wh = whitening_head(A, S)
                    H = linear_head_hessian(loss, wh.W, rng.standard_normal(r + 1), h_star)
                    err = f"{np.abs(restricted(H, S) - np.eye(r)).max():.1e}"
                psd = "yes" if neg == 0 else "no"
                lines.append(f"| {name} | {reading} | {seed} | {neg} | {len(lam) - r - neg} | {r} | {psd} | {err} |")
    return "\n".join(lines)


def barrier_table(n_starts: int = 30, seed: int = 0) -> str:
    """Markdown: Gaussian curvature, the bound ``B`` and the best defect found over ``W``, per loss."""
    rng = np.random.default_rng(seed)
    losses = {"quadratic": quadratic_loss(np.array([[2.0, 0.5], [0.5, 1.0]])), **CURVED_LOSSES}
    lines = ["| loss | K at 3 points | m | B (bound) | best defect over W (starts) | attained by construction (m=2) |",
             "|---|---|---|---|---|---|"]
    for name, loss in losses.items():
        U = rng.uniform(-1.5, 1.5, (4, 2))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # the quadratic's third derivative is constant
            Ks = ", ".join(f"{gaussian_curvature(loss, u):+.3g}" for u in U[:3])
        for m in (2, 4):
            metrics = [hessian(loss)(u) for u in U[:m]]
            B = defect_lower_bound(metrics)
            best = optimise_linear_head(metrics, n_starts, rng)
            att = f"{head_defect(attaining_head(*metrics), metrics):.6f}" if m == 2 else "-"
            lines.append(f"| {name} | {Ks} | {m} | {B:.6f} | {best:.6f} ({n_starts}) | {att} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    add_doc_flags(parser, DOC)
    args = parser.parse_args(argv)
    t0 = time.time()
    tables = {"gd": gd_table(), "objectives": objectives_table(), "barrier": barrier_table()}
    print("Theorem 3.1, consequence: gradient descent steps to relative error 1e-6 (k = 4, d = 6, seed 0)")
    print(tables["gd"])
    print("\nTheorem 3.1 on the real objectives at random states (n = 6 rows = 2 views x 3, k = 3)")
    print(tables["objectives"])
    print("\nProposition 3.3: curvature of g = grad^2 phi and the W-independent isotropy defect bound")
    print(tables["barrier"])
    print(f"({time.time() - t0:.0f} s)")
    publish(PROG, argv, tables, args.doc, DOC)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
