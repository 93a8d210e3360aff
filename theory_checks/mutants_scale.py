"""The mistakes in the curvature routes behind the paper-scale numbers (``mini.loss_hessians``,
``scale.curvature``) and in the replication ledger's rules.
"""

from __future__ import annotations

from theory_checks.mutation import swap, wrap


def nt_xent_hessian_no_positive(mp):
    """NT-Xent's closed-form curvature without the positive pair (``A = P / n`` instead of ``(P - Pi) / n``)."""
    import mini.loss_hessians as LH

    wrap(mp, LH, "_partner_matrix", lambda f: lambda xp, n, like: 0.0 * f(xp, n, like))


def normalization_hessian_factor(mp):
    """The Hessian of ``<g, h/|h|>`` with ``<g,u> u <u,v>`` counted once instead of three times."""
    import mini.loss_hessians as LH

    def normalization_hvp(xp, g, u, r, V):
        gu = xp.sum(g * u, axis=-1, keepdims=True)
        uv = xp.sum(u * V, axis=-1, keepdims=True)
        return -(g * uv + u * xp.sum(g * V, axis=-1, keepdims=True) + gu * V - gu * u * uv) / (r * r)

    swap(mp, LH, "normalization_hvp", normalization_hvp)


def predictor_targets_not_swapped(mp):
    """scale's SimSiam/BYOL curvature pulling each row to its own view's target, not the other view's."""
    import torch

    import scale.engine.loss_curvature as LC

    original = LC.PredictorCosineCurvature

    def build(head, predictor, Z, T, coef, *rest):  # (rest: ``compose``)
        m = T.shape[0] // 2
        return original(head, predictor, Z, torch.cat([T[m:], T[:m]]), coef, *rest)  # undoes the swap

    mp.setattr(LC, "PredictorCosineCurvature", build)


def gauss_newton_cross_blocks_transposed(mp):
    """``G = J^T (grad^2_H L) J`` assembled with each cross-sample block of the loss Hessian transposed."""
    import array_api_compat

    import mini.hessian as H
    import scale.curvature.blocks  # noqa: F401  (binds assemble by name)

    def wrapper(f):
        def assemble(J, loss_hessian, M_blocks):
            xp = array_api_compat.array_namespace(loss_hessian)
            return f(J, xp.permute_dims(loss_hessian, (0, 3, 2, 1)), M_blocks)

        return assemble

    wrap(mp, H, "assemble", wrapper)


def operator_M_wrong_sign(mp):
    """scale's matrix-free ``M v`` with the wrong sign."""
    import scale.curvature.operators as O
    import scale.curvature.tracking  # noqa: F401  (binds EffectiveHessian by name)

    class EffectiveHessian(O.EffectiveHessian):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            M = self.M
            self.M = O.Operator(M.name, M.N, M.dtype, M.device, lambda v: -M.matvec(v), lambda C: -M.matmat(C.T).T,
                                M.info)

    swap(mp, O, "EffectiveHessian", EffectiveHessian)


def scale_interaction_sign(mp):
    """scale's streamed closed-form interaction blocks ``M_i`` with the wrong sign."""
    import mini.loss_hessians as LH
    import scale.curvature.blocks  # noqa: F401  (binds head_jacobian_and_interaction by name)

    def wrapper(f):
        def head_jacobian_and_interaction(fwd, rho):
            J, M = f(fwd, rho)
            return J, -M

        return head_jacobian_and_interaction

    wrap(mp, LH, "head_jacobian_and_interaction", wrapper)


def lanczos_no_reorthogonalisation(mp):
    """Lanczos' three-term recurrence alone: no reorthogonalisation against the basis."""
    import scale.curvature.lanczos as Lz

    mp.setattr(Lz, "_reorthogonalise", lambda w, basis, eta=0.0: w)


def ledger_band_widened(mp):
    """A registered band of the replication ledger widened after the fact (E2's "about 70 %" read as [0.3, 0.95])."""
    import dataclasses

    import scale.ledger.claims as C
    from scale.ledger.verdicts import Rule

    def widen(c):
        return dataclasses.replace(c, rule=Rule("within", band=(0.3, 0.95))) if c.rule.direction == "within" else c

    mp.setattr(C, "CLAIMS", tuple(widen(c) for c in C.CLAIMS))


def ledger_rewritten_consistently(mp):
    """The band widened in the rules *and* every registration rewritten to match (its rules and their hash): the
    comparison of code with files in one tree passes; only the committed history can tell."""
    import json
    from pathlib import Path

    import scale.ledger.claims as C
    from scale.ledger.plan import digest

    ledger_band_widened(mp)
    rules = C.rules_data()
    read_text = Path.read_text

    def rewritten(self, *args, **kwargs):
        text = read_text(self, *args, **kwargs)
        if self.suffix == ".json" and self.parent.name == "registrations":
            return json.dumps({**json.loads(text), "rules": rules, "rules_hash": digest(rules)})
        return text

    mp.setattr(Path, "read_text", rewritten)


def blockwise_converged_on_gap_estimate(mp):
    """``blockwise_lanczos``'s stop and ``converged`` on the estimate ``r^2 / gap`` (its gap read off the block's Ritz
    values, not a bound: an unresolved eigenvalue can sit inside it), as before 2026-12-06."""
    import scale.curvature.blockwise as B

    swap(mp, B, "_certificates", B._end_estimates)
