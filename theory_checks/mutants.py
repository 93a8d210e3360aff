"""The checks that check the checks: plausible implementation mistakes in ``mini/`` (and in the ``scale``
code that computes the paper-scale curvature), each with the theory check that must fail when the
mistake is made.

A mutant is applied in-process by monkeypatching (no file is edited), the named checks are run with
pytest under it, and the mutant is *killed* when at least one of them fails. A check that no mutant
can fail proves nothing; a mutant that survives is a finding (strengthen the check, or say why no
check can catch it in ``docs/theory_checks.md``).

    python -m theory_checks.mutants                 # run every mutant, print the table
    python -m theory_checks.mutants --write docs/theory_checks.md
    python -m theory_checks.mutants --only relu_s2_nonzero nt_xent_no_positive

Before any mutant runs, the union of the killing checks is run unmutated and must pass: a kill only
counts against checks that pass on the real code (``--no-baseline`` leaves that to a caller that runs them itself,
as the test suite does). The ``mutants`` hypothesis profile (``conftest``)
is the CI profile without shrinking, so a failing example is reported at once.

Exit status: 0 when every mutant is killed, 1 when one survives or the baseline fails, 2 on usage.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from mini.reports.docs import fill_block

ROOT = Path(__file__).resolve().parent.parent
CHECKS = "theory_checks"


@dataclass(frozen=True)
class Mutant:
    """One mistake: ``apply`` installs it on a ``MonkeyPatch``; ``killers`` are pytest node ids."""

    name: str
    mistake: str
    killers: tuple[str, ...]
    apply: Callable[[pytest.MonkeyPatch], None]


# --------------------------------------------------------------------------------------------
# Where each mistake is installed. The patch targets are the names the code looks up at call time.
# --------------------------------------------------------------------------------------------


PATCHED_PACKAGES = ("mini", "scale")  # where a mistake is installed; check modules are re-imported instead


def _in_patched_package(mod) -> bool:
    name = getattr(mod, "__name__", "") or ""
    return any(name == pkg or name.startswith(pkg + ".") for pkg in PATCHED_PACKAGES)


def _replace(mp: pytest.MonkeyPatch, module, name: str, new) -> None:
    """``module.name = new``, and the same in every ``mini`` or ``scale`` module that imported the original
    by name (``from mini.hessian import spectrum`` binds the object, not the attribute). Modules that bind
    it must be imported before the patch (the mutants below import them), else they would bind the
    mistake at import and keep it after ``undo``."""
    original = getattr(module, name)
    for mod in list(sys.modules.values()):
        if _in_patched_package(mod) and getattr(mod, name, None) is original:
            mp.setattr(mod, name, new)
    mp.setattr(module, name, new)


KEPT_CHECK_MODULES = ("premises",)  # the premise registry: patched by mutants, so kept across re-imports


def _forget_checks() -> None:
    """Drop the imported check modules so the next run imports them afresh and binds whatever
    ``mini`` holds now (a check module imported under one mutant must not keep its functions); the
    premise registry is kept, so that a mutant can widen a premise."""
    folder = str(ROOT / CHECKS)
    for key, mod in list(sys.modules.items()):
        if (getattr(mod, "__file__", None) or "").startswith(folder) and key not in KEPT_CHECK_MODULES:
            del sys.modules[key]


def _premises():
    """The premise registry as the checks import it (a top-level ``premises``, from the checks' folder)."""
    folder = str(ROOT / CHECKS)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    import premises

    return premises


def _patch_activation(mp: pytest.MonkeyPatch, activation: str, mutate) -> None:
    """Replace ``(s', s'')`` of one entry of the activation table (``mini.activations.TABLE``, which
    the closed form and the heads read at call time) by ``mutate(a, s1, s2)``; ``s`` is kept."""
    import dataclasses

    from mini import activations

    entry = activations.TABLE[activation]

    def derivatives(xp, a):
        s1, s2 = entry.derivatives(xp, a)
        return mutate(np.asarray(a), np.asarray(s1), np.asarray(s2))

    mp.setitem(activations.TABLE, activation, dataclasses.replace(entry, derivatives=derivatives))


def _wrap(mp: pytest.MonkeyPatch, module, name: str, wrapper) -> None:
    """``module.name = wrapper(original)``, wherever ``mini`` or ``scale`` bound it."""
    _replace(mp, module, name, wrapper(getattr(module, name)))


def _patch_objective(mp: pytest.MonkeyPatch, factory: str, fn_builder) -> None:
    """Replace the loss function of the objectives built by ``mini.losses.<factory>``."""
    import mini.losses as L

    original = getattr(L, factory)

    def build(*args, **kwargs):
        obj = original(*args, **kwargs)
        return L.Objective(obj.name, fn_builder(*args, **kwargs), obj.n_views, hessian_psd=obj.hessian_psd,
                           block_diagonal=obj.block_diagonal)

    _replace(mp, L, factory, build)


# --------------------------------------------------------------------------------------------
# The mistakes
# --------------------------------------------------------------------------------------------


def closed_form_without_M(mp):
    import mini.hessian as H

    _wrap(mp, H, "interaction_blocks", lambda f: lambda der, rho: 0.0 * f(der, rho))


def M_wrong_sign(mp):
    import mini.hessian as H

    _wrap(mp, H, "interaction_blocks", lambda f: lambda der, rho: -f(der, rho))


def G_as_J_A_JT(mp):
    """``J A J^T`` where ``J^T A J`` is meant (per-sample blocks; shapes agree only when k = d)."""
    import mini.hessian as H

    def assemble_blocks(J, loss_blocks, M_blocks):
        G = np.asarray(J) @ np.asarray(loss_blocks) @ np.swapaxes(np.asarray(J), 1, 2)
        return H.block_diagonal(G), H.block_diagonal(M_blocks)

    _replace(mp, H, "assemble_blocks", assemble_blocks)


def interaction_drops_s1(mp):
    """The backward recursion of ``g`` forgets the ``s'(a_l)`` factor (wrong for depth >= 3)."""
    import mini.hessian as H

    def interaction_blocks(der, rho):
        M = np.zeros((der.J.shape[0], der.J.shape[2], der.J.shape[2]))
        g = rho @ der.W[-1]
        for l in range(len(der.P) - 1, -1, -1):
            Pl = der.P[l]
            M = M + np.swapaxes(Pl, 1, 2) @ ((g * der.s2[l])[:, :, None] * Pl)
            g = g @ der.W[l]
        return M

    _replace(mp, H, "interaction_blocks", interaction_blocks)


def gelu_s2_sign(mp):
    _patch_activation(mp, "gelu", lambda a, s1, s2: (s1, -s2))


def gelu_tanh_approx_s1(mp):
    """GELU's tanh approximation used for ``s'`` while ``s`` is the exact erf form."""
    c = np.sqrt(2.0 / np.pi)

    def mutate(a, s1, s2):
        u = c * (a + 0.044715 * a**3)
        t = np.tanh(u)
        return 0.5 * (1 + t) + 0.5 * a * (1 - t * t) * c * (1 + 3 * 0.044715 * a * a), s2

    _patch_activation(mp, "gelu", mutate)


def swish_s2_factor(mp):
    """Swish ``s''`` with ``1 + a(1 - 2 sig)`` instead of ``2 + a(1 - 2 sig)``."""

    def mutate(a, s1, s2):
        sig = 0.5 * (1.0 + np.tanh(0.5 * a))
        ds = sig * (1 - sig)
        return s1, ds * (1.0 + a * (1.0 - 2.0 * sig))

    _patch_activation(mp, "swish", mutate)


def tanh_s2_factor(mp):
    _patch_activation(mp, "tanh", lambda a, s1, s2: (s1, 0.5 * s2))


def softplus_s1_shift(mp):
    """Softplus ``s'`` evaluated as ``sigma(-a)`` (a sign slip in the logistic)."""
    _patch_activation(mp, "softplus", lambda a, s1, s2: (1.0 - s1, s2))


def relu_s2_nonzero(mp):
    """ReLU's ``s''`` as a smoothed delta (a "helpful" soft kink) instead of 0 a.e."""
    _patch_activation(mp, "relu", lambda a, s1, s2: (s1, np.exp(-0.5 * a * a) / np.sqrt(2 * np.pi)))


def loss_hessian_blocks_times_two(mp):
    import mini.hessian as H

    _wrap(mp, H, "loss_hessian_blocks", lambda f: lambda obj, Hb: 2.0 * f(obj, Hb))


def coupled_loss_hessian_times_two(mp):
    import mini.hessian as H

    def wrapper(f):
        def loss_derivatives(obj, Hb):
            rho, HL = f(obj, Hb)
            return rho, 2.0 * HL

        return loss_derivatives

    _wrap(mp, H, "loss_derivatives", wrapper)


def nt_xent_no_positive(mp):
    """NT-Xent's denominator without the positive pair (only the 2m - 2 negatives)."""
    import autograd.numpy as anp

    import mini.losses as L

    def builder(temperature=0.1):
        tau = float(temperature)

        def fn(Hb):
            n = Hb.shape[0]
            m = n // 2
            U = L.normalize(Hb)
            S = anp.dot(U, U.T) / tau
            partner = np.concatenate([np.arange(m, n), np.arange(0, m)])
            neg = 1.0 - np.eye(n) - np.eye(n)[partner]
            lse = 1.0 / tau + anp.log(anp.sum(neg * anp.exp(S - 1.0 / tau), axis=1))
            return anp.mean(lse - anp.sum(U * U[partner], axis=1) / tau)

        return fn

    _patch_objective(mp, "nt_xent", builder)


def vicreg_variance_wrong_axis(mp):
    """VICReg's variance hinge over the features of each sample instead of over the batch."""
    import autograd.numpy as anp

    import mini.losses as L

    def builder(sim_coeff=25.0, std_coeff=25.0, cov_coeff=1.0, eps=1e-4):
        def one_view(X):
            m, k = X.shape
            Xc = X - anp.mean(X, axis=0)
            Xr = X - anp.mean(X, axis=1, keepdims=True)
            std = anp.sqrt(anp.sum(Xr * Xr, axis=1) / (k - 1) + eps)
            cov = anp.dot(Xc.T, Xc) / (m - 1)
            return anp.mean(anp.maximum(1.0 - std, 0.0)) / 2.0, L._off_diagonal_sq_sum(cov) / k

        def fn(Hb):
            A, B = L.split_views(Hb)
            std_a, cov_a = one_view(A)
            std_b, cov_b = one_view(B)
            return sim_coeff * anp.mean((A - B) ** 2) + std_coeff * (std_a + std_b) + cov_coeff * (cov_a + cov_b)

        return fn

    _patch_objective(mp, "vicreg", builder)


def barlow_lambda_on_diagonal(mp):
    """Barlow Twins with the off-diagonal weight applied to the diagonal term too."""
    import autograd.numpy as anp

    import mini.losses as L

    def builder(lambd=5e-3, eps=1e-5):
        def standardize(X):
            Xc = X - anp.mean(X, axis=0)
            return Xc / anp.sqrt(anp.mean(Xc * Xc, axis=0) + eps)

        def fn(Hb):
            A, B = L.split_views(Hb)
            C = anp.dot(standardize(A).T, standardize(B)) / A.shape[0]
            return lambd * anp.sum((1.0 - anp.diag(C)) ** 2) + lambd * L._off_diagonal_sq_sum(C)

        return fn

    _patch_objective(mp, "barlow", builder)


def floor_1e3(mp):
    import mini.hessian as H

    _wrap(mp, H, "spectrum", lambda f: lambda A, rel_floor=1e-3: f(A, 1e-3))


def floor_absolute(mp):
    """The negative-curvature floor as an absolute 1e-9 instead of 1e-9 x the spectral scale."""
    import mini.hessian as H

    def wrapper(f):
        def spectrum(A, rel_floor=H.NEG_FLOOR):
            s = f(A, rel_floor)
            return H.Spectrum(s.eigenvalues, s.scale, rel_floor, rel_floor)

        return spectrum

    _wrap(mp, H, "spectrum", wrapper)


def restricted_min_returns_max(mp):
    import mini.collapse as C

    def restricted_min(M, basis):
        if basis.shape[1] == 0:
            return float("inf")
        return float(np.linalg.eigvalsh(basis.T @ M @ basis)[-1])

    _replace(mp, C, "restricted_min", restricted_min)


def null_space_absolute(mp):
    """The null space of ``G`` with an absolute tolerance 1e-9 instead of a relative one."""
    import mini.collapse as C

    def null_space(A, rel_floor=1e-9):
        w, V = np.linalg.eigh(A)
        return V[:, np.abs(w) <= 1e-9]

    _replace(mp, C, "null_space", null_space)


def collapsed_not_collapsed(mp):
    """A "collapsed" batch whose rows differ slightly (jitter 1e-3)."""
    import mini.collapse as C

    def collapsed_batch(z_star, n):
        z_star = np.asarray(z_star, dtype=float)
        rng = np.random.default_rng(0)
        return np.tile(z_star, (n, 1)) + 1e-3 * rng.standard_normal((n, z_star.size))

    _replace(mp, C, "collapsed_batch", collapsed_batch)


def whitening_inverse(mp):
    """The whitening head built with ``A^{-1}`` instead of ``A^{-1/2}``."""
    import mini.whitening as W

    def wrapper(f):
        def whitening_head(A, subspace, rel_floor=W.NEG_FLOOR):
            w = f(A, subspace, rel_floor)
            lam = w.eigenvalues
            keep = lam > rel_floor * float(np.abs(lam).max(initial=0.0))
            _, V = np.linalg.eigh(0.5 * (np.asarray(A) + np.asarray(A).T))
            U = W.orthonormal_basis(subspace)
            return W.Whitening((V[:, keep] / lam[keep]) @ U.T, w.rank, w.n_negative, lam)

        return whitening_head

    _wrap(mp, W, "whitening_head", wrapper)


def restricted_transposed(mp):
    """``U H U^T`` (d, d) where ``U^T H U`` (r, r) is meant."""
    import mini.whitening as W

    def restricted(H, subspace):
        U = W.orthonormal_basis(subspace)
        R = np.asarray(H, dtype=float)
        return (U @ U.T @ R @ U @ U.T)[: U.shape[1], : U.shape[1]]

    _replace(mp, W, "restricted", restricted)


def gn_bound_without_square(mp):
    """Proposition 3.4's bound as ``2 L M eps`` (the ``M eps^2`` term dropped)."""
    import mini.capacity as Cap

    _replace(mp, Cap, "gauss_newton_bound", lambda L, M, eps: 2.0 * L * M * eps)


def threshold_first_order(mp):
    """Corollary 3.5's threshold from the first-order expansion instead of the exact root."""
    import mini.capacity as Cap

    _replace(mp, Cap, "exact_threshold", Cap.first_order_threshold)


def spectral_norm_frobenius(mp):
    import mini.capacity as Cap

    _replace(mp, Cap, "spectral_norm", lambda A: float(np.linalg.norm(np.asarray(A))))


def fisher_JJt(mp):
    """The Fisher information as ``J J^T`` instead of ``J^T J``."""
    import mini.invariance as Inv

    def fisher_information(phi, xi, sigma=1.0):
        from autograd import jacobian

        J = jacobian(phi)(np.asarray(xi, dtype=float))
        return J @ J.T / sigma**2

    _replace(mp, Inv, "fisher_information", fisher_information)


def fisher_rank_absolute(mp):
    """Fisher rank with an absolute tolerance 1e-10 instead of one relative to lambda_max."""
    import mini.invariance as Inv

    def fisher_rank(I, rtol=1e-10):
        eig = np.linalg.eigvalsh(0.5 * (I + I.T))
        return int(np.sum(eig > 1e-10))

    _replace(mp, Inv, "fisher_rank", fisher_rank)


def pullback_JJt(mp):
    import mini.invariance as Inv

    def pullback_metric(fn, z):
        J = Inv.head_jacobian(fn, z)
        return J @ J.T

    _replace(mp, Inv, "pullback_metric", pullback_metric)


def flow_ascends(mp):
    """The gradient flow integrated with the wrong sign (ascent)."""
    import mini.dynamics as D

    def wrapper(f):
        def z_flow(head, objective, Z0, t, *args, **kwargs):
            out = f(head, objective, Z0, t, *args, **kwargs)
            Z0 = np.asarray(Z0, dtype=float)
            return 2.0 * Z0 - out if np.ndim(t) == 0 else 2.0 * Z0[None] - out

        return z_flow

    _wrap(mp, D, "z_flow", wrapper)


def orthonormal_basis_raw(mp):
    """The subspace's columns used as they come (no orthonormalisation)."""
    import mini.whitening as W

    def orthonormal_basis(subspace):
        return np.asarray(subspace, dtype=float)

    _replace(mp, W, "orthonormal_basis", orthonormal_basis)


def spectrum_scale_from_max(mp):
    """The spectral scale as the largest eigenvalue instead of the largest ``|eigenvalue|``."""
    import mini.hessian as H

    def wrapper(f):
        def spectrum(A, rel_floor=H.NEG_FLOOR):
            s = f(A, rel_floor)
            scale = max(float(s.eigenvalues[-1]), 0.0)
            return H.Spectrum(s.eigenvalues, scale, rel_floor * scale, rel_floor)

        return spectrum

    _wrap(mp, H, "spectrum", wrapper)


def torch_gelu_tanh(mp):
    """scale's torch GELU module in its tanh approximation while mini's ``s`` is the exact erf form."""
    import dataclasses

    from mini import activations

    entry = activations.TABLE["gelu"]
    mp.setitem(activations.TABLE, "gelu", dataclasses.replace(entry, torch_kwargs=(("approximate", "tanh"),)))



def nt_xent_fixed_temperature(mp):
    """NT-Xent that ignores the temperature it is given (always 0.1, the default)."""
    import mini.losses as L

    original = L.nt_xent
    _patch_objective(mp, "nt_xent", lambda temperature=0.1: original(0.1).fn)


def vicreg_coefficients_swapped(mp):
    """VICReg with the invariance and variance coefficients swapped (equal at the defaults, 25 / 25)."""
    import mini.losses as L

    original = L.vicreg
    _patch_objective(mp, "vicreg", lambda sim_coeff=25.0, std_coeff=25.0, cov_coeff=1.0, eps=1e-4:
                     original(std_coeff, sim_coeff, cov_coeff, eps).fn)


def barlow_lambda_ignored(mp):
    """Barlow Twins with its off-diagonal weight fixed at the default 5e-3 whatever it is given."""
    import mini.losses as L

    original = L.barlow
    _patch_objective(mp, "barlow", lambda lambd=5e-3, eps=1e-5: original(5e-3, eps).fn)


def wilson_wald(mp):
    """The Wald interval ``p -+ z sqrt(p (1 - p) / N)`` where the Wilson score interval is meant."""
    import mini.collapse as C

    def wilson_interval(hits, total, z=C.WILSON_Z95):
        p = hits / total
        half = z * np.sqrt(p * (1 - p) / total)
        return float(max(0.0, p - half)), float(min(1.0, p + half))

    _replace(mp, C, "wilson_interval", wilson_interval)


def wilson_by_subtraction(mp):
    """The Wilson ends as ``(c -+ h) / (1 + z^2/N)`` evaluated as written: at ``0/N`` the lower end rounds to
    ~1e-17 instead of 0 (and the upper to 1 - 1e-16 at ``N/N``)."""
    import mini.collapse as C

    def wilson_interval(hits, total, z=C.WILSON_Z95):
        p, z2 = hits / total, z * z
        centre, denom = p + z2 / (2 * total), 1 + z2 / total
        half = z * np.sqrt(p * (1 - p) / total + z2 / (4 * total * total))
        return float(max(0.0, (centre - half) / denom)), float(min(1.0, (centre + half) / denom))

    _replace(mp, C, "wilson_interval", wilson_interval)


def orbit_gain_unnormalised(mp):
    """The orbit gain as ``v^T G v / |v|^2``, without dividing by the mean ``tr G / d``."""
    import mini.invariance as Inv

    def orbit_gain(G, V):
        V = np.atleast_2d(np.asarray(V, dtype=float))
        return np.einsum("md,de,me->m", V, np.asarray(G, dtype=float), V) / np.sum(V * V, axis=1)

    _replace(mp, Inv, "orbit_gain", orbit_gain)


def orbit_displacement_from_centroid(mp):
    """Orbit displacement measured from the orbit's centroid instead of from ``h(z)``."""
    import mini.invariance as Inv

    def orbit_displacement(fn, orbit):
        H = np.asarray(fn(np.asarray(orbit, dtype=float)), dtype=float)
        return np.linalg.norm(H - H.mean(axis=0), axis=1)

    _replace(mp, Inv, "orbit_displacement", orbit_displacement)


def leak_quadratic(mp):
    """The approximately invariant head leaking ``delta^2 P z`` instead of ``delta P z``."""
    import mini.invariance as Inv

    def approximately_invariant_head(invariants, head, P, delta):
        P = np.asarray(P, dtype=float)
        return lambda Z: head(invariants(Z) + delta**2 * Z @ P.T)

    _replace(mp, Inv, "approximately_invariant_head", approximately_invariant_head)
# --------------------------------------------------------------------------------------------
# The curvature routes behind the paper-scale numbers (mini.loss_hessians, scale.curvature)
# --------------------------------------------------------------------------------------------


def nt_xent_hessian_no_positive(mp):
    """NT-Xent's closed-form curvature without the positive pair (``A = P / n`` instead of ``(P - Pi) / n``)."""
    import mini.loss_hessians as LH

    _wrap(mp, LH, "_partner_matrix", lambda f: lambda xp, n, like: 0.0 * f(xp, n, like))


def normalization_hessian_factor(mp):
    """The Hessian of ``<g, h/|h|>`` with ``<g,u> u <u,v>`` counted once instead of three times."""
    import mini.loss_hessians as LH

    def normalization_hvp(xp, g, u, r, V):
        gu = xp.sum(g * u, axis=-1, keepdims=True)
        uv = xp.sum(u * V, axis=-1, keepdims=True)
        return -(g * uv + u * xp.sum(g * V, axis=-1, keepdims=True) + gu * V - gu * u * uv) / (r * r)

    _replace(mp, LH, "normalization_hvp", normalization_hvp)


def predictor_targets_not_swapped(mp):
    """scale's SimSiam/BYOL curvature pulling each row to its own view's target, not the other view's."""
    import torch

    import scale.engine.loss_curvature as LC

    original = LC.PredictorCosineCurvature

    def build(head, predictor, Z, T, coef):
        m = T.shape[0] // 2
        return original(head, predictor, Z, torch.cat([T[m:], T[:m]]), coef)  # undoes the swap

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

    _wrap(mp, H, "assemble", wrapper)


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

    _replace(mp, O, "EffectiveHessian", EffectiveHessian)


def scale_interaction_sign(mp):
    """scale's streamed closed-form interaction blocks ``M_i`` with the wrong sign."""
    import mini.loss_hessians as LH
    import scale.curvature.blocks  # noqa: F401  (binds head_jacobian_and_interaction by name)

    def wrapper(f):
        def head_jacobian_and_interaction(fwd, rho):
            J, M = f(fwd, rho)
            return J, -M

        return head_jacobian_and_interaction

    _wrap(mp, LH, "head_jacobian_and_interaction", wrapper)


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


# --------------------------------------------------------------------------------------------
# The premises that remain (theory_checks/premises.py), the ranks' thresholds, Lanczos' contract
# --------------------------------------------------------------------------------------------


def _widen(name: str):
    """A premise's threshold raised tenfold: it sets aside instances its statement covers."""

    def apply(mp):
        import dataclasses

        P = _premises()
        mp.setitem(P.PREMISES, name, dataclasses.replace(P.PREMISES[name], threshold=10 * P.PREMISES[name].threshold))

    return apply


def premise_noop(mp):
    """``premise`` that never sets an instance aside nor fails a fixed one."""
    mp.setattr(_premises(), "premise", lambda name, value, what: True)


def premise_fixed_instance_silent(mp):
    """``premise`` without its failure on a fixed instance: there it returns quietly."""
    P = _premises()
    original = P.premise

    def premise(name, value, what):
        if P.currently_in_test_context():
            return original(name, value, what)
        return bool(value > P.PREMISES[name].threshold)

    mp.setattr(P, "premise", premise)


def premise_discards_most(mp):
    """``premise`` setting four instances in five aside, whatever they measure."""
    P = _premises()
    original = P.premise
    calls = [0]

    def premise(name, value, what):
        calls[0] += 1
        if P.currently_in_test_context() and calls[0] % 5:
            P._count(name, False)
            P.assume(False)
        return original(name, value, what)

    mp.setattr(P, "premise", premise)


def fisher_rank_rtol_loose(mp):
    """``fisher_rank``'s relative threshold 1e-4 instead of the eigensolver's round-off ``p eps``."""
    import mini.invariance as Inv

    original = Inv.fisher_rank
    _replace(mp, Inv, "fisher_rank", lambda I, rtol=None: original(I, 1e-4 if rtol is None else rtol))


def lanczos_converged_loose(mp):
    """Lanczos' ``converged`` flag (and its stop) on ``100 tol``, the result still reporting ``tol``."""
    import dataclasses

    import scale.curvature.lanczos as Lz

    original = Lz.lanczos

    def lanczos(op, k=1, *, tol=None, **kwargs):
        t = 1e-10 if tol is None else float(tol)
        return dataclasses.replace(original(op, k, tol=100 * t, **kwargs), tol=t)

    _replace(mp, Lz, "lanczos", lanczos)


# --------------------------------------------------------------------------------------------
# E1's collapse statistics and E4's orbit metrics (mini.collapse_metrics, mini.invariance)
# --------------------------------------------------------------------------------------------


def spread_about_origin(mp):
    """Orbit spread as the mean squared norm (about the origin, not the orbit's centroid)."""
    import mini.invariance as Inv

    _replace(mp, Inv, "orbit_spread", lambda F: Inv._xp(F).mean(Inv._xp(F).sum(F * F, axis=-1), axis=1))


def d_intra_with_diagonal(mp):
    """``D_intra`` averaged over all ``P^2`` pairs, the zero distances ``p = q`` included."""
    import mini.invariance as Inv

    _wrap(mp, Inv, "intra_distance", lambda f: lambda F: f(F) * (F.shape[1] - 1) / F.shape[1])


def class_centroid_sum(mp):
    """A class centroid as the sum of its orbits' centroids, not their mean."""
    import mini.invariance as Inv

    def wrapper(f):
        def class_centroids(F, labels):
            classes, C = f(F, labels)
            lab = np.asarray(labels).reshape(-1)
            counts = np.array([np.sum(lab == c) for c in np.asarray(classes)], dtype=float)[:, None]
            return classes, C * Inv._xp(C).asarray(counts, dtype=C.dtype)

        return class_centroids

    _wrap(mp, Inv, "class_centroids", wrapper)


def _orbit_geometry_field(mp: pytest.MonkeyPatch, field: str, value) -> None:
    """``mini.invariance.orbit_geometry`` reporting ``value(F, labels)`` (a ``Stat``) as its ``field``."""
    import dataclasses

    import mini.invariance as Inv

    def wrapper(f):
        def orbit_geometry(F, labels, sweep=None):
            return dataclasses.replace(f(F, labels, sweep), **{field: value(F, labels)})

        return orbit_geometry

    _wrap(mp, Inv, "orbit_geometry", wrapper)


def d_inter_with_diagonal(mp):
    """``D_inter`` as the mean over all ``n_c^2`` class pairs, ``a = b`` included."""
    import mini.invariance as Inv

    _orbit_geometry_field(mp, "d_inter", lambda F, labels: Inv.stat(Inv.inter_distances(F, labels)[0]))


def ratio_inverted(mp):
    """The orbit ratio ``D_intra_o / D_inter(class(o))`` instead of ``D_inter / D_intra``."""
    import mini.invariance as Inv

    def inverted(F, labels):
        classes, _ = Inv.class_centroids(F, labels)
        per_class = np.asarray(Inv.inter_distances(F, labels)[1])
        where = {c: j for j, c in enumerate(np.asarray(classes).tolist())}
        inter = np.array([per_class[where[c]] for c in np.asarray(labels).tolist()])
        return Inv.stat(np.asarray(Inv.intra_distance(F)) / inter)

    _orbit_geometry_field(mp, "ratio", inverted)


def kappa_first_difference(mp):
    """The sweep curvature from first differences ``|r_{i+1} - r_i|`` instead of second differences."""
    import mini.invariance as Inv

    def sweep_curvature(S):
        xp = Inv._xp(S)
        d1 = S[:, 1:, :] - S[:, :-1, :]
        return xp.mean(xp.sqrt(xp.sum(d1 * d1, axis=-1)), axis=1)

    _replace(mp, Inv, "sweep_curvature", sweep_curvature)


def compression_inverted(mp):
    """The compression factor as ``spread(h) / spread(z)``."""
    import mini.invariance as Inv

    _wrap(mp, Inv, "compression", lambda f: lambda z, h: f(h, z))


def std_population(mp):
    """E1's std with the population normalisation (``n``) instead of the sample one (``n - 1``)."""
    import mini.collapse_metrics as CM

    def representation_std(H):
        xp = CM._xp(H)
        return float(xp.mean(xp.std(CM.l2_normalize(H), axis=0, correction=0)))

    _replace(mp, CM, "representation_std", representation_std)


def std_unnormalised(mp):
    """E1's std of the raw rows, not of the L2-normalised ones."""
    import mini.collapse_metrics as CM

    def representation_std(H):
        xp = CM._xp(H)
        return float(xp.mean(xp.std(H, axis=0, correction=1)))

    _replace(mp, CM, "representation_std", representation_std)


def cond_without_floor(mp):
    """E1's condition number ``lambda_max / lambda_min`` without the paper's clamp at 1e-7."""
    import mini.collapse_metrics as CM

    _wrap(mp, CM, "covariance_condition", lambda f: lambda H, floor=CM.COND_FLOOR: f(H, floor=1e-300))


def cond_of_raw_rows(mp):
    """E1's condition number of the raw rows' covariance, not the normalised rows'."""
    import mini.collapse_metrics as CM

    _replace(mp, CM, "covariance_condition",
             lambda H, floor=CM.COND_FLOOR: (lambda e: float(e[-1]) / max(float(e[0]), floor))(
                 np.linalg.eigvalsh(np.cov(np.asarray(H), rowvar=False).reshape(H.shape[1], H.shape[1]))))


def head_on_raw_z(mp):
    """E4's features: the head applied to the raw ``z`` instead of the normalised ``z / |z|``."""
    import mini.invariance as Inv

    def normalized_features(Z, head_fn):
        xp = Inv._xp(Z)
        H = head_fn(xp.reshape(Z, (-1, Z.shape[-1])))
        return Inv.l2_normalize(Z), Inv.l2_normalize(xp.reshape(H, (*Z.shape[:-1], H.shape[-1])))

    _replace(mp, Inv, "normalized_features", normalized_features)


T = CHECKS
EQ1 = f"{T}/test_eq1_decomposition.py::test_decomposition_every_head_and_objective"
EQ1_SQUARE = f"{T}/test_eq1_decomposition.py::test_decomposition_square_head"
RELU_CLOSED = f"{T}/test_relu_gap.py::test_closed_form_interaction_vanishes"
RELU_TORCH = f"{T}/test_relu_gap.py::test_scale_torch_head_is_minis_head"
TORCH = f"{T}/test_independent_torch.py::test_mini_routes_match_the_published_formulas"
SIMCLR, VICREG, BARLOW = f"{TORCH}[simclr]", f"{TORCH}[vicreg]", f"{TORCH}[barlow]"
FLOOR = f"{T}/test_negative_floor.py::test_floor_counts_minus_1e6_and_not_minus_1e12"
FLOOR_SIGN = f"{T}/test_negative_floor.py::test_scale_is_the_largest_magnitude_of_either_sign"
LEMMA = f"{T}/test_thm4_1_collapse.py::test_part2_lemma_on_null_space_of_G"
LEMMA_UNITS = f"{T}/test_thm4_1_collapse.py::test_part2_lemma_is_unit_free"
CRITICAL = f"{T}/test_thm4_1_collapse.py::test_critical_states_are_jointly_critical_with_nonzero_rho"
WHITEN = f"{T}/test_thm3_1_whitening.py::test_whitening_head_makes_H_eff_the_identity_on_S"
WHITEN_REAL = f"{T}/test_thm3_1_whitening.py::test_whitening_real_objectives"
GN = f"{T}/test_prop3_4_capacity.py::test_gauss_newton_bound_is_attained"
COROLLARY = f"{T}/test_prop3_4_capacity.py::test_corollary_threshold_is_sharp_and_negative_control_past_it"
FISHER_VALUES = f"{T}/test_thm5_3_fisher_rank.py::test_fisher_information_is_the_expected_outer_product_of_the_score"
FISHER_RANK = f"{T}/test_thm5_3_fisher_rank.py::test_fisher_rank_drops_by_one_on_toy_manifolds"
PULLBACK = f"{T}/test_prop5_2_metric_singularity.py::test_invariant_head_metric_vanishes_on_toy_orbits"
FLOW = f"{T}/test_collapse_dynamics.py::test_strict_saddle_grows_at_rate_minus_lambda_min"
WILSON = f"{T}/test_thm4_1_collapse.py::test_wilson_interval_matches_scipy_at_every_count"
PROP52 = f"{T}/test_prop5_2_metric_singularity.py"
GAIN = f"{PROP52}::test_orbit_gain_is_one_for_an_isotropic_metric_and_lambda_over_mean_on_a_diagonal"
LINEAR_ORBIT = f"{PROP52}::test_measuring_functions_on_a_linear_head_along_a_rotation_orbit"
LEAK = f"{PROP52}::test_approximately_invariant_head_metric_scales_with_delta_squared"
SC = f"{T}/test_scale_curvature.py"
NTXENT_CLOSED = f"{SC}::test_nt_xent_loss_curvature_in_closed_form"
PREDICTOR_CLOSED = f"{SC}::test_predictor_cosine_curvature_in_closed_form"
SCALE_ROUTES = f"{SC}::test_scale_routes_are_equation_1"
LANCZOS = f"{SC}::test_lanczos_ends_are_the_spectrum_ends"
EM = f"{T}/test_e1_e4_metrics.py"
E1_DEF = f"{EM}::test_collapse_statistics_are_their_definition"
E1_CLOSED = f"{EM}::test_collapse_statistics_of_isotropic_and_planar_batches"
E4_DEF = f"{EM}::test_orbit_metrics_are_their_definition"
E4_CLOSED = f"{EM}::test_orbit_metrics_of_regular_polygons_circles_and_parabolas"
E4_COMPRESSION = f"{EM}::test_compression_is_the_ratio_of_mean_spreads"
E4_FEATURES = f"{EM}::test_e4_features_are_normalised_before_and_after_the_head"
PREMISE_TESTS = f"{T}/test_premises.py::test_a_premise_failing_on_a_fixed_instance_is_a_failure"
BOUNDARY = {
    "off_kink": f"{T}/test_relu_gap.py::test_off_kink_boundary_instance",
    "flow_off_kink": f"{T}/test_collapse_dynamics.py::test_flow_off_kink_boundary_instance",
    "alive_units": f"{T}/test_thm5_3_fisher_rank.py::test_alive_units_boundary_instance",
    "rho_material": f"{T}/test_relu_gap.py::test_rho_material_boundary_instance",
    "material_leak": f"{PROP52}::test_material_leak_boundary_instance",
}
RELU_ANY = f"{T}/test_relu_gap.py::test_interaction_vanishes_for_any_residual"
FISHER_629 = f"{T}/test_thm5_3_fisher_rank.py::test_pinned_saturated_raw_head_is_decided_by_certificate"
LANCZOS_CONTRACT = f"{T}/test_lanczos_contract.py::test_converged_means_within_tol_of_the_scale"
LEDGER_RULES = f"{T}/test_ledger_registration.py::test_every_rule_is_the_registered_one"
MUTANTS: tuple[Mutant, ...] = (
    Mutant("closed_form_without_M", "closed-form H_eff = G only (M dropped)", (EQ1,), closed_form_without_M),
    Mutant("M_wrong_sign", "M added with the wrong sign", (EQ1,), M_wrong_sign),
    Mutant("G_as_J_A_JT", "G_i = J A J^T instead of J^T A J", (EQ1_SQUARE,), G_as_J_A_JT),
    Mutant("interaction_drops_s1", "recursion g_{l-1} = W_l^T g_l without s'(a_l)", (EQ1,), interaction_drops_s1),
    Mutant("gelu_s2_sign", "GELU s'' with the wrong sign", (EQ1,), gelu_s2_sign),
    Mutant("gelu_tanh_approx_s1", "GELU s' from the tanh approximation, s exact", (EQ1,), gelu_tanh_approx_s1),
    Mutant("swish_s2_factor", "Swish s'' with 1 + a(1-2 sig) instead of 2 + ...", (EQ1,), swish_s2_factor),
    Mutant("tanh_s2_factor", "tanh s'' = -t(1-t^2) (factor 2 lost)", (EQ1,), tanh_s2_factor),
    Mutant("softplus_s1_shift", "softplus s' = sigma(-a)", (EQ1,), softplus_s1_shift),
    Mutant("relu_s2_nonzero", "ReLU s'' a smoothed delta instead of 0", (RELU_CLOSED,), relu_s2_nonzero),
    Mutant("torch_gelu_tanh", "scale's torch GELU module in the tanh approximation, mini's s exact",
           (RELU_TORCH,), torch_gelu_tanh),
    Mutant("loss_hessian_blocks_x2", "per-sample loss Hessian blocks off by a factor 2", (EQ1,),
           loss_hessian_blocks_times_two),
    Mutant("coupled_loss_hessian_x2", "coupled loss Hessian off by a factor 2", (EQ1,),
           coupled_loss_hessian_times_two),
    Mutant("nt_xent_no_positive", "NT-Xent denominator without the positive pair", (SIMCLR,),
           nt_xent_no_positive),
    Mutant("vicreg_variance_wrong_axis", "VICReg variance hinge over features, not over the batch", (VICREG,),
           vicreg_variance_wrong_axis),
    Mutant("barlow_lambda_on_diagonal", "Barlow Twins' lambda applied to the invariance term too", (BARLOW,),
           barlow_lambda_on_diagonal),
    Mutant("floor_1e-3", "negative-curvature floor 1e-3 instead of 1e-9", (FLOOR,), floor_1e3),
    Mutant("floor_absolute", "negative-curvature floor absolute instead of relative", (FLOOR,), floor_absolute),
    Mutant("spectrum_scale_from_max", "spectral scale max(lambda) instead of max |lambda|", (FLOOR, FLOOR_SIGN),
           spectrum_scale_from_max),
    Mutant("restricted_min_returns_max", "restricted minimum returns the maximum", (LEMMA,),
           restricted_min_returns_max),
    Mutant("null_space_absolute", "null(G) with an absolute tolerance", (LEMMA_UNITS,), null_space_absolute),
    Mutant("collapsed_not_collapsed", "a collapsed batch whose rows differ by 1e-3", (CRITICAL,),
           collapsed_not_collapsed),
    Mutant("whitening_inverse", "whitening head built with A^{-1} instead of A^{-1/2}", (WHITEN,), whitening_inverse),
    Mutant("restricted_transposed", "U H U^T instead of U^T H U", (WHITEN, WHITEN_REAL), restricted_transposed),
    Mutant("orthonormal_basis_raw", "the subspace's columns used without orthonormalising", (WHITEN,),
           orthonormal_basis_raw),
    Mutant("gn_bound_without_square", "Prop. 3.4 bound without the M eps^2 term", (GN,), gn_bound_without_square),
    Mutant("threshold_first_order", "Cor. 3.5 threshold lambda_min / (2 L M) instead of the exact root",
           (COROLLARY,), threshold_first_order),
    Mutant("spectral_norm_frobenius", "Frobenius norm where the spectral norm is meant", (GN,),
           spectral_norm_frobenius),
    Mutant("fisher_JJt", "Fisher information J J^T instead of J^T J", (FISHER_VALUES,), fisher_JJt),
    Mutant("fisher_rank_absolute", "Fisher rank with an absolute tolerance", (FISHER_RANK,), fisher_rank_absolute),
    Mutant("pullback_JJt", "pullback metric J J^T instead of J^T J", (PULLBACK,), pullback_JJt),
    Mutant("flow_ascends", "gradient flow integrated with the wrong sign", (FLOW,), flow_ascends),
    Mutant("nt_xent_fixed_temperature", "NT-Xent ignores its temperature (always 0.1)", (SIMCLR,),
           nt_xent_fixed_temperature),
    Mutant("vicreg_coefficients_swapped", "VICReg's invariance and variance coefficients swapped", (VICREG,),
           vicreg_coefficients_swapped),
    Mutant("barlow_lambda_ignored", "Barlow Twins' lambda fixed at 5e-3 whatever is given", (BARLOW,),
           barlow_lambda_ignored),
    Mutant("wilson_wald", "the Wald interval where the Wilson score interval is meant", (WILSON,), wilson_wald),
    Mutant("wilson_by_subtraction", "the Wilson ends by subtraction, rounding off the exact 0 and 1 at the edges",
           (WILSON,), wilson_by_subtraction),
    Mutant("orbit_gain_unnormalised", "orbit gain v^T G v / |v|^2 without dividing by tr G / d", (GAIN,),
           orbit_gain_unnormalised),
    Mutant("orbit_displacement_from_centroid", "orbit displacement from the orbit's centroid, not from h(z)",
           (LINEAR_ORBIT,), orbit_displacement_from_centroid),
    Mutant("leak_quadratic", "the approximately invariant head leaks delta^2 P z, not delta P z", (LEAK,),
           leak_quadratic),
    Mutant("nt_xent_hessian_no_positive", "closed-form NT-Xent curvature without the positive pair", (NTXENT_CLOSED,),
           nt_xent_hessian_no_positive),
    Mutant("normalization_hessian_factor", "Hessian of <g, h / norm(h)> with its 3 <g,u> u <u,v> term counted once",
           (PREDICTOR_CLOSED,), normalization_hessian_factor),
    Mutant("predictor_targets_not_swapped", "scale's SimSiam/BYOL curvature pulls each row to its own view's target",
           (SCALE_ROUTES,), predictor_targets_not_swapped),
    Mutant("gauss_newton_cross_blocks_transposed", "G assembled with each cross-sample loss-Hessian block transposed",
           (SCALE_ROUTES,), gauss_newton_cross_blocks_transposed),
    Mutant("operator_M_wrong_sign", "scale's matrix-free M v with the wrong sign", (SCALE_ROUTES,),
           operator_M_wrong_sign),
    Mutant("scale_interaction_sign", "scale's closed-form interaction blocks M_i with the wrong sign", (SCALE_ROUTES,),
           scale_interaction_sign),
    Mutant("lanczos_no_reorthogonalisation", "Lanczos without reorthogonalisation (three-term recurrence only)",
           (LANCZOS,), lanczos_no_reorthogonalisation),
    Mutant("spread_about_origin", "E4 orbit spread about the origin, not the orbit's centroid", (E4_CLOSED, E4_DEF),
           spread_about_origin),
    Mutant("d_intra_with_diagonal", "E4 D_intra averaged over P^2 pairs, p = q included", (E4_CLOSED, E4_DEF),
           d_intra_with_diagonal),
    Mutant("class_centroid_sum", "E4 class centroid as the sum of its orbits' centroids", (E4_CLOSED, E4_DEF),
           class_centroid_sum),
    Mutant("d_inter_with_diagonal", "E4 D_inter over all n_c^2 class pairs, a = b included", (E4_CLOSED, E4_DEF),
           d_inter_with_diagonal),
    Mutant("ratio_inverted", "E4 ratio D_intra / D_inter instead of D_inter / D_intra", (E4_CLOSED, E4_DEF),
           ratio_inverted),
    Mutant("kappa_first_difference", "E4 kappa from first differences r_{i+1} - r_i", (E4_CLOSED, E4_DEF),
           kappa_first_difference),
    Mutant("compression_inverted", "E4 compression spread(h) / spread(z)", (E4_COMPRESSION,), compression_inverted),
    Mutant("std_population", "E1 std with ddof 0 instead of 1", (E1_CLOSED, E1_DEF), std_population),
    Mutant("std_unnormalised", "E1 std of the raw rows, not the L2-normalised ones", (E1_CLOSED, E1_DEF),
           std_unnormalised),
    Mutant("cond_without_floor", "E1 condition number without the 1e-7 clamp of lambda_min", (E1_CLOSED, E1_DEF),
           cond_without_floor),
    Mutant("cond_of_raw_rows", "E1 condition number of the raw rows' covariance", (E1_CLOSED, E1_DEF),
           cond_of_raw_rows),
    Mutant("head_on_raw_z", "E4 head applied to the raw z instead of z / norm(z)", (E4_FEATURES,), head_on_raw_z),
    *(Mutant(f"premise_{name}_x10", f"premise {name} widened 10x", (killer,), _widen(name))
      for name, killer in BOUNDARY.items()),
    Mutant("premise_noop", "premise() never sets an instance aside nor fails a fixed one", (PREMISE_TESTS,),
           premise_noop),
    Mutant("premise_fixed_instance_silent", "premise() returns quietly on a fixed instance outside it",
           (PREMISE_TESTS,), premise_fixed_instance_silent),
    Mutant("premise_discards_most", "premise() sets four instances in five aside", (RELU_ANY,), premise_discards_most),
    Mutant("fisher_rank_rtol_1e-4", "fisher_rank's threshold 1e-4 of lambda_max, not the eigensolver's round-off",
           (FISHER_629,), fisher_rank_rtol_loose),
    Mutant("ledger_band_widened", "a registered band of the ledger widened after the fact", (LEDGER_RULES,),
           ledger_band_widened),
    Mutant("lanczos_converged_100x", "Lanczos' converged flag on 100 tol while reporting tol", (LANCZOS_CONTRACT,),
           lanczos_converged_loose),
)


# --------------------------------------------------------------------------------------------
# Running them
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    mutant: Mutant
    killed: bool
    exit_code: int
    seconds: float
    failed: tuple[str, ...]
    reason: str  # the first failure's message: an assertion of the check, or the error it raised


class _Failures:
    """A pytest plugin that records the node ids of failed tests."""

    def __init__(self) -> None:
        self.failed: list[str] = []
        self.reasons: list[str] = []

    def pytest_runtest_logreport(self, report) -> None:
        if report.failed:
            self.failed.append(report.nodeid)
            crash = getattr(report.longrepr, "reprcrash", None)
            message = (crash.message if crash else str(report.longrepr)).strip().splitlines()
            self.reasons.append(message[0][:100] if message else "")


def _pytest(nodeids: tuple[str, ...], first_failure: bool) -> tuple[int, list[str], list[str]]:
    rec = _Failures()
    _forget_checks()
    args = [*nodeids, "-q", "--tb=no", "-p", "no:cacheprovider", "--no-header", "-o", "addopts="]
    if first_failure:
        args.append("-x")
    with contextlib.redirect_stdout(io.StringIO()):
        code = int(pytest.main(args, plugins=[rec]))
    return code, rec.failed, rec.reasons


def run_mutant(mutant: Mutant) -> Outcome:
    """Install the mistake, run its killers (stopping at the first failure), undo it."""
    mp = pytest.MonkeyPatch()
    t0 = time.perf_counter()
    try:
        mutant.apply(mp)
        code, failed, reasons = _pytest(mutant.killers, first_failure=True)
    finally:
        mp.undo()
        _forget_checks()
    # pytest exit 1: tests ran and some failed. 0: all passed (survivor). Others: usage/collection errors.
    return Outcome(mutant, code == 1, code, time.perf_counter() - t0, tuple(failed), reasons[0] if reasons else "")


def baseline(mutants: tuple[Mutant, ...]) -> tuple[int, list[str]]:
    nodes = tuple(dict.fromkeys(k for m in mutants for k in m.killers))
    code, failed, _ = _pytest(nodes, first_failure=False)
    return code, failed


def table(outcomes: list[Outcome]) -> str:
    lines = [
        "| mutant | the mistake | killing checks | result (first failing test) |",
        "|---|---|---|---|",
    ]
    for o in outcomes:
        check = "<br>".join(f"`{k.split('/', 1)[1]}`" for k in o.mutant.killers)
        if o.killed:
            first = o.failed[0].split("::", 1)[1] if o.failed and "::" in o.failed[0] else "collection"
            how = "assertion" if o.reason.startswith("AssertionError") or o.reason.startswith("assert") else "raised"
            result = f"killed by {how}: `{first}`"
        else:
            result = "**survived**" if o.exit_code == 0 else f"error (pytest exit {o.exit_code})"
        lines.append(f"| `{o.mutant.name}` | {o.mutant.mistake} | {check} | {result} |")
    return "\n".join(lines)


COMMAND = "python -m theory_checks.mutants"  # the generated block of docs/theory_checks.md (mini.reports.docs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m theory_checks.mutants", description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", metavar="NAME", help="run only these mutants")
    parser.add_argument("--write", type=Path, metavar="DOC", help="fill the mutant table block of DOC")
    parser.add_argument("--no-baseline", action="store_true",
                        help="skip running the killing checks on the real code first (for a caller that runs them "
                             "itself: the test suite runs every killer unmutated in the same run)")
    args = parser.parse_args(argv)
    by_name = {m.name: m for m in MUTANTS}
    unknown = sorted(set(args.only or ()) - set(by_name))
    if unknown:
        parser.error(f"unknown mutant(s) {', '.join(unknown)}; valid: {', '.join(by_name)}")
    chosen = tuple(by_name[n] for n in args.only) if args.only else MUTANTS

    os.chdir(ROOT)
    os.environ["HYPOTHESIS_PROFILE"] = "mutants"
    code, failed = (0, []) if args.no_baseline else baseline(chosen)
    if code != 0:
        print(f"baseline: the killing checks fail on the real code (pytest exit {code}): {failed}", file=sys.stderr)
        return 1
    outcomes = []
    for m in chosen:
        o = run_mutant(m)
        outcomes.append(o)
        state = "killed" if o.killed else "SURVIVED" if o.exit_code == 0 else f"ERROR {o.exit_code}"
        where = f"{o.failed[0]}: {o.reason}" if o.failed else ""
        print(f"{m.name:28s} {state:9s} {o.seconds:5.1f} s  {where}", flush=True)
    text = table(outcomes)
    print(f"\n{text}\n\n{sum(o.killed for o in outcomes)} of {len(outcomes)} mutants killed")
    if args.write:
        fill_block(args.write, COMMAND, text)
    return 0 if all(o.killed for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
