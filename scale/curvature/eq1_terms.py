r"""The curvature side of the paper's mechanism, measured on a model at a probe batch: eq. (1)'s interaction term M
(zero for linear and ReLU heads), G's inertia (indefinite under SimSiam's cosine), M restricted to null(G)
(Theorem 4.1 (2)), and the residual rho = grad_h L whose non-vanishing is Theorem 4.1's premise. Each function takes
the model, the run's config and probe views and returns a flat dict of JSON-able floats (booleans as 0.0 / 1.0; NaN
where a statistic has no value). The invariance side, E1's collapsed start and the timescales:
``scale.geometry.mechanism``.

Every record key, its meaning, its scale and the function that produces it:

``curvature_mechanism(model, cfg, x)``: exact float64 per-sample blocks ``H_i = G_i + M_i`` of eq. (1)
(``scale.curvature.blocks.effective_hessian_blocks``, BatchNorm in eval mode) on the probe views ``x``; needs a
per-sample objective (SimSiam, BYOL, MSE to targets). ``scale_H = max_i |H_i|_2``, ``scale_G = max_i |G_i|_2``.

    M_over_H           |M|_2 / |H_eff|_2 (exact, blocks). 0 to round-off for linear and ReLU heads (s'' = 0).
    M_norm, H_scale    |M|_2 and scale_H, in the loss's units per unit of z squared.
    G_negative         number of eigenvalues of G (all n*d) below -NULL_RTOL * scale_G.
    G_zero             number with |lambda| <= NULL_RTOL * scale_G (the numerical null space of G).
    G_positive         number above +NULL_RTOL * scale_G (the three counts sum to G_eigenvalues).
    G_eigenvalues      n * d.
    G_indefinite       1.0 when G_negative > 0 and G_positive > 0 (SimSiam's cosine: Theorem 4.1 (1)'s PSD premise
                       fails; this is what E2.1-E2.3's negative lambda_min without M comes from).
    lambda_min_G_rel   lambda_min(G) / scale_G, in [-1, 1].
    lambda_max_G_rel   lambda_max(G) / scale_G.
    lambda_min_H_rel   lambda_min(H_eff) / scale_H.
    loss_hessian_negative   eigenvalues of the loss blocks grad^2_{h_i} L below -NULL_RTOL times their scale.
    null_dim_G         median over samples of dim null(G_i), null(G_i) = span of G_i's eigenvectors with
                       |lambda| <= NULL_RTOL * scale_G (relative to G's scale over the whole probe).
    null_samples       fraction of samples with a non-trivial null(G_i).
    lambda_min_M_null  min over samples of lambda_min(Q_i^T M_i Q_i) / scale_H, Q_i an orthonormal basis of
                       null(G_i) (Theorem 4.1 (2): < 0 for smooth heads); NaN when no sample has a null space.
    negative_M_null    fraction of the samples with a null space whose restricted minimum is below
                       -NEG_FLOOR * scale_H; NaN when none has one.
    null_identity      max over samples of |Q^T H Q - Q^T M Q|_2 / scale_H (v^T H v = v^T M v on null(G); at most
                       NULL_RTOL * scale_G / scale_H by construction of Q: a check of the blocks, not of the paper).

``residual_record(model, cfg, x)``: rho = grad_h L at the probe views (float64, BatchNorm in eval mode).

    loss               L at the probe (the run's objective, ``scale.curvature.tracking.probe_objective``).
    rho_norm           |rho|_F.
    rho_rel            sum_i |rho_i| |h_i| / |L|: the largest first-order change of L under a perturbation of
                       every h_i by 1 of its own norm, in units of the loss itself (scale-free; NaN at L = 0).
    rho_nonzero        1.0 when rho_rel > RHO_FLOOR: Theorem 4.1's premise rho != 0 at a stated bar. The bar is a
                       convention, not a resolution limit (float arithmetic never gives rho = 0 exactly): below it a
                       perturbation of every h_i by 1 % of its own norm moves L by under 1e-5 of |L|. A rule that
                       reads rho_nonzero should say so; rho_rel is recorded beside it.
    h_std, z_std       E1's collapse statistic (``mini.collapse_metrics.representation_std``) of h and z at x.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch import nn

from mini.collapse import restricted_min
from mini.collapse_metrics import representation_std
from mini.hessian import NEG_FLOOR
from scale.curvature.blocks import block_norm, effective_hessian_blocks
from scale.curvature.tracking import probe_objective
from scale.engine.modes import embed

NULL_RTOL = 1e-8  # |lambda| <= NULL_RTOL * scale_G is null: above float64 round-off (d eps ~ 1e-13), far below data
RHO_FLOOR = 1e-3  # rho_rel at or below: rho counts as vanished (a convention; see rho_nonzero in the docstring)


# --------------------------------------------------------------------------------------------
# Eq. (1) and Theorem 4.1: M, G's inertia, M on null(G)
# --------------------------------------------------------------------------------------------



def inertia(eig: torch.Tensor, rtol: float = NULL_RTOL) -> dict[str, float]:
    """Counts of eigenvalues ``eig`` (any shape) below ``-rtol * scale``, within ``+-rtol * scale`` and above,
    ``scale = max |eig|``; with the extremes relative to the scale."""
    e = eig.detach().double().flatten()
    scale = float(e.abs().max()) if e.numel() else 0.0
    floor = rtol * scale
    neg, pos = int((e < -floor).sum()), int((e > floor).sum())
    return {"negative": float(neg), "positive": float(pos), "zero": float(e.numel() - neg - pos),
            "count": float(e.numel()), "scale": scale,
            "min_rel": float(e.min()) / scale if scale > 0 else math.nan,
            "max_rel": float(e.max()) / scale if scale > 0 else math.nan}


def null_restricted(G: torch.Tensor, M: torch.Tensor, H: torch.Tensor, scale_G: float, rtol: float = NULL_RTOL
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per sample ``i`` of blocks (n, d, d): ``dim null(G_i)`` (|lambda| <= rtol * scale_G: the floor is relative
    to G's scale over the whole probe, so a block that is small everywhere is not called null by its own scale),
    ``lambda_min`` of ``M_i`` on it (``mini.collapse.restricted_min``; ``inf`` when trivial), and
    ``|Q^T (H_i - M_i) Q|_2`` (the identity's residual, 0 when trivial)."""

    w, V = torch.linalg.eigh(G)  # (n, d), (n, d, d)
    dims, mins, resid = [], [], []
    for i in range(G.shape[0]):
        Q = V[i][:, w[i].abs() <= rtol * scale_G]  # (d, m): orthonormal basis of null(G_i)
        dims.append(Q.shape[1])
        mins.append(restricted_min(M[i].cpu().numpy(), Q.cpu().numpy()))
        resid.append(float(torch.linalg.matrix_norm(Q.T @ (H[i] - M[i]) @ Q, ord=2)) if Q.shape[1] else 0.0)
    return np.array(dims), np.array(mins), np.array(resid)


def curvature_mechanism(model: nn.Module, cfg: Any, x: torch.Tensor) -> dict[str, float]:
    """Eq. (1)'s parts on the probe views ``x`` (module docstring): ``|M|/|H|``, G's inertia, M on null(G)."""

    z, h = embed(model, x)
    loss = probe_objective(cfg.method, model, h.double(), None, config=cfg)
    b = effective_hessian_blocks(z.double(), model.projector, loss, spectra="all")
    scale_H = float(b.eig_H.abs().max())
    norm_M = block_norm(b.M)
    iG = inertia(b.eig_G)
    iL = inertia(b.loss_hessian_eig)
    dims, mins, resid = null_restricted(b.G, b.M, b.H, iG["scale"])
    has = dims > 0
    rel = lambda v: v / scale_H if scale_H > 0 else math.nan  # noqa: E731
    return {
        "M_over_H": rel(norm_M), "M_norm": norm_M, "H_scale": scale_H,
        "G_negative": iG["negative"], "G_zero": iG["zero"], "G_positive": iG["positive"], "G_eigenvalues": iG["count"],
        "G_indefinite": float(iG["negative"] > 0 and iG["positive"] > 0),
        "lambda_min_G_rel": iG["min_rel"], "lambda_max_G_rel": iG["max_rel"],
        "lambda_min_H_rel": rel(float(b.eig_H.min())),
        "loss_hessian_negative": iL["negative"],
        "null_dim_G": float(np.median(dims)), "null_samples": float(has.mean()),
        "lambda_min_M_null": rel(float(mins[has].min())) if has.any() else math.nan,
        "negative_M_null": float((mins[has] < -NEG_FLOOR * scale_H).mean()) if has.any() else math.nan,
        "null_identity": rel(float(resid.max())),
    }


# --------------------------------------------------------------------------------------------
# Theorem 4.1's premise: rho = grad_h L
# --------------------------------------------------------------------------------------------


def residual_record(model: nn.Module, cfg: Any, x: torch.Tensor) -> dict[str, float]:
    """``rho = grad_h L`` at the probe views ``x`` and its size against the loss (module docstring). The objective is
    the run's at the probe with its stop-gradient data bound at the probe's own h (SimSiam's targets, SimCLR's
    batch); a momentum target network (BYOL) is not consulted."""

    z, h = embed(model, x)
    H = h.double().detach().requires_grad_(True)
    loss_fn = probe_objective(cfg.method, model, h.double(), None, config=cfg)
    with torch.enable_grad():
        value = loss_fn(H)
        (rho,) = torch.autograd.grad(value, H)
    L = float(value.detach())
    sens = float((rho.norm(dim=1) * H.detach().norm(dim=1)).sum())
    rho_rel = sens / abs(L) if L != 0 else math.nan
    return {"loss": L, "rho_norm": float(rho.norm()), "rho_rel": rho_rel,
            "rho_nonzero": float(rho_rel > RHO_FLOOR) if math.isfinite(rho_rel) else math.nan,
            "h_std": representation_std(h.double()), "z_std": representation_std(z.double())}
