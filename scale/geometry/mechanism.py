r"""The paper's mechanism, measured: the pieces of eq. (1), Theorem 4.1 and Proposition 5.2 that a replication
run can show directly, each as a function of the model (or its modules), the run's config and a probe batch,
returning a flat dict of JSON-able floats (booleans as 0.0 / 1.0; NaN where a statistic has no value).

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
    rho_nonzero        1.0 when rho_rel > RHO_FLOOR (Theorem 4.1's premise rho != 0, decided at the float32
                       training's resolution of a cosine).
    h_std, z_std       E1's collapse statistic (``mini.collapse_metrics.representation_std``) of h and z at x.

``collapsed_start_(model, x_ref, eps)`` (in place) and ``start_record``: E1's start that is collapsed in the
measured statistic (see ``collapsed_start_``); ``start_record(normal, collapsed)`` of two ``residual_record``s:

    h_std_normal, h_std_collapsed    the two starts' h std (paired: same seed, same head before the projection).
    log10_std_ratio    log10(h_std_collapsed / h_std_normal) (< 0: the start is collapsed in the statistic).
    rho_rel_collapsed, rho_nonzero_collapsed   the collapsed start's rho (the premise at the start).
    u_share            (from ``collapsed_start_``) |mean z| / mean |z|: how much of z the kept direction carries.

``ParameterDrift`` (a trainer hook) adds to each epoch's history record ``drift_head`` and ``drift_backbone``:
|w_e - w_{e-1}| / |w_{e-1}| over all parameters of the projector and of the backbone in that epoch (relative
parameter change per epoch). ``timescale_record(history)``:

    log10_drift_ratio  median over epochs of log10(drift_head / drift_backbone) (> 0: the head moves faster, the
                       timescale separation Theorem 4.1 assumes).
    head_faster        fraction of epochs with drift_head > drift_backbone.
    log10_update_ratio median over epochs of log10(rel_update_head / rel_update_backbone), the trainer's own
                       ``lr |g| / |w|`` at each epoch's last step (NaN when the history lacks it).

``tangent_gain_record(backbone, head, images, normalize)``: Proposition 5.2 on a trained head. v = dz/dt of a
rotation of the image by t degrees at t = 0 (central difference, ``TANGENT_STEP_DEG``), G = J^T J of the
measured head map at z (``head_input``: "raw" = normalize(head(z)), as trained; "normalized" = the paper's E4
map normalize(head(normalize(z)))).

    tangent_gain       median over images of (v^T G v / |v|^2) / (tr G / d) (``mini.invariance.orbit_gain``): the
                       tangent's stretch against the mean stretch of uniformly random directions of the same
                       norm (exactly E[u^T G u] = tr G / d |u|^2); 0: blind to the augmentation, 1: no preference.
    log10_tangent_gain median over images of log10 of the same.
    tangent_below_random   fraction of images with gain < 1.
    tangent_rel        median |v| (radians) / |z|: the tangent's size against z's (the augmentation moves z).
    fd_error           median |v_t - v_{t/2}| / |v_t|: the finite difference's own error (small: v is a tangent).

``depth_trend({depth: value})``: E5 as a trend, per seed.

    slope              least-squares slope of value on depth (depths 1, 2, 3: (y3 - y1) / 2).
    second_difference  y1 - 2 y2 + y3 (depths 1, 2, 3 only; else NaN).
    monotone           +1.0 strictly increasing, -1.0 strictly decreasing, 0.0 otherwise.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from mini.hessian import NEG_FLOOR
from scale.engine.hooks import Hook

NULL_RTOL = 1e-8  # |lambda| <= NULL_RTOL * scale_G is null: above float64 round-off (d eps ~ 1e-13), far below data
RHO_FLOOR = 1e-3  # rho_rel below ~3 sqrt(eps_float32): a trained cosine is at its float32 resolution of the optimum
TANGENT_STEP_DEG = 2.0  # central-difference step of the rotation tangent (degrees); fd_error reports its accuracy
COLLAPSE_EPS = 1e-3  # collapsed_start_: the weight left off the mean-feature direction


# --------------------------------------------------------------------------------------------
# Eq. (1) and Theorem 4.1: M, G's inertia, M on null(G)
# --------------------------------------------------------------------------------------------


def _embed(model: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    from scale.engine.modes import eval_mode

    with torch.no_grad(), eval_mode(model):
        z, h, _ = model(x)
    return z, h


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
    """Per sample ``i`` of blocks (n, d, d): ``dim null(G_i)`` (|lambda| <= rtol * scale_G), ``lambda_min`` of
    ``M_i`` on it (``inf`` when trivial), and ``|Q^T (H_i - M_i) Q|_2`` (the identity's residual, 0 when trivial)."""
    w, V = torch.linalg.eigh(G)  # (n, d), (n, d, d)
    dims, mins, resid = [], [], []
    for i in range(G.shape[0]):
        Q = V[i][:, w[i].abs() <= rtol * scale_G]  # (d, m)
        dims.append(Q.shape[1])
        if Q.shape[1] == 0:
            mins.append(math.inf)
            resid.append(0.0)
            continue
        mins.append(float(torch.linalg.eigvalsh(Q.T @ M[i] @ Q)[0]))
        resid.append(float(torch.linalg.matrix_norm(Q.T @ (H[i] - M[i]) @ Q, ord=2)))
    return np.array(dims), np.array(mins), np.array(resid)


def curvature_mechanism(model: nn.Module, cfg: Any, x: torch.Tensor) -> dict[str, float]:
    """Eq. (1)'s parts on the probe views ``x`` (module docstring): ``|M|/|H|``, G's inertia, M on null(G)."""
    from scale.curvature.blocks import block_norm, effective_hessian_blocks
    from scale.curvature.tracking import probe_objective

    z, h = _embed(model, x)
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
# Theorem 4.1's premise: rho = grad_h L, and E1's collapsed start
# --------------------------------------------------------------------------------------------


def residual_record(model: nn.Module, cfg: Any, x: torch.Tensor) -> dict[str, float]:
    """``rho = grad_h L`` at the probe views ``x`` and its size against the loss (module docstring)."""
    from mini.collapse_metrics import representation_std
    from scale.curvature.tracking import probe_objective

    z, h = _embed(model, x)
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


def first_linear(module: nn.Module) -> nn.Linear:
    """The head's first Linear layer (the one that reads z)."""
    for m in module.modules():
        if isinstance(m, nn.Linear):
            return m
    raise ValueError(f"{type(module).__name__} has no nn.Linear layer: the collapsed start projects its first one")


@torch.no_grad()
def collapsed_start_(model: nn.Module, x_ref: torch.Tensor, eps: float = COLLAPSE_EPS) -> dict[str, float]:
    """E1's start collapsed in the measured statistic, in place: the projector's first weight ``W1`` (w, d) becomes

        W1 (u u^T) + eps W1 (I - u u^T),      u = mean(z) / |mean(z)|, z = backbone(x_ref) in eval mode

    so the head reads z through its component along the mean feature direction (plus ``eps`` of the rest). Every
    row of ``W1 z`` is then ``(u . z) W1 u + O(eps)``; ``u . z > 0`` for the non-negative features of a ReLU
    backbone, so a bias-free linear or ReLU head maps every input to positive multiples of one vector and the
    normalised h (E1's h std) is collapsed to O(eps). The paper's pseudo-collapse (weights x 0.1) leaves a
    bias-free homogeneous head's normalised output unchanged, hence the same h std as the normal start. The
    backbone and z are untouched; a hidden BatchNorm in train mode re-spreads the batch (its premise is then
    not met: the start is collapsed only in eval mode). ``x_ref``: normalised unaugmented training images (the
    trainer's ``state.probe_x``). Returns ``|mean z| / mean |z|`` (how much of z the direction u carries) as
    ``u_share``."""
    if not 0.0 <= eps < 1.0:
        raise ValueError(f"eps must be in [0, 1), got {eps}")
    W = first_linear(model.projector).weight  # (w, d)
    z_ref, _ = _embed(model, x_ref)
    mean = z_ref.to(W.dtype).mean(0)
    if float(mean.norm()) == 0.0:
        raise ValueError("the reference features have zero mean: no direction to collapse onto")
    u = mean / mean.norm()
    P = torch.outer(u, u)
    W.copy_(W @ P + eps * (W - W @ P))
    return {"u_share": float(mean.norm() / z_ref.norm(dim=1).mean())}


def start_record(normal: Mapping[str, float], collapsed: Mapping[str, float]) -> dict[str, float]:
    """The paired starts of one seed (two ``residual_record``s): is the collapsed start collapsed in h std, and does
    it meet Theorem 4.1's premise rho != 0."""
    a, b = normal["h_std"], collapsed["h_std"]
    return {"h_std_normal": a, "h_std_collapsed": b,
            "log10_std_ratio": math.log10(b / a) if a > 0 and b > 0 else math.nan,
            "rho_rel_collapsed": collapsed["rho_rel"], "rho_nonzero_collapsed": collapsed["rho_nonzero"]}


# --------------------------------------------------------------------------------------------
# Timescale separation: relative parameter change per epoch, head against backbone
# --------------------------------------------------------------------------------------------


class ParameterDrift(Hook):
    """A trainer hook: adds ``drift_head`` and ``drift_backbone`` to each
    epoch's history record, ``|w_e - w_{e-1}| / |w_{e-1}|`` over the module's parameters (float64 norms)."""

    def __init__(self) -> None:
        self.last: dict[str, torch.Tensor] = {}

    @staticmethod
    def _flat(module: nn.Module) -> torch.Tensor:
        return torch.cat([p.detach().double().flatten() for p in module.parameters()]).cpu()

    def _parts(self, state) -> dict[str, nn.Module]:
        return {"head": state.model.projector, "backbone": state.model.backbone}

    def on_fit_start(self, state) -> None:
        self.last = {k: self._flat(m) for k, m in self._parts(state).items()}

    def on_epoch_start(self, state) -> None:
        if not self.last:
            self.on_fit_start(state)

    def on_epoch_end(self, state) -> None:
        rec = state.history[-1]
        for k, m in self._parts(state).items():
            now = self._flat(m)
            prev = self.last[k]
            rec[f"drift_{k}"] = float((now - prev).norm() / prev.norm()) if float(prev.norm()) > 0 else math.nan
            self.last[k] = now


TIMESCALE_KEYS = ("drift_head", "drift_backbone", "rel_update_head", "rel_update_backbone")


def _log_ratios(history: Sequence[Mapping[str, Any]], a: str, b: str) -> np.ndarray:
    out = [math.log10(r[a] / r[b]) for r in history
           if r.get(a) is not None and r.get(b) is not None and r[a] > 0 and r[b] > 0]
    return np.array(out)


def timescale_record(history: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Head against backbone over a run's per-epoch history (module docstring)."""
    drift = _log_ratios(history, "drift_head", "drift_backbone")
    upd = _log_ratios(history, "rel_update_head", "rel_update_backbone")
    return {"log10_drift_ratio": float(np.median(drift)) if drift.size else math.nan,
            "head_faster": float((drift > 0).mean()) if drift.size else math.nan,
            "log10_update_ratio": float(np.median(upd)) if upd.size else math.nan}


# --------------------------------------------------------------------------------------------
# Proposition 5.2: v^T G v along augmentation tangents, against random directions
# --------------------------------------------------------------------------------------------


def head_map(head: nn.Module, head_input: str) -> Callable[[torch.Tensor], torch.Tensor]:
    """The measured map z (d,) -> h (k,) in float64 on a copy of ``head`` (eval mode): ``normalize(head(z))``
    ("raw") or ``normalize(head(normalize(z)))`` ("normalized")."""
    if head_input not in ("raw", "normalized"):
        raise ValueError(f"head_input must be 'raw' or 'normalized', got {head_input!r}")
    h64 = copy.deepcopy(head).double().eval()
    unit = lambda a: a / a.norm().clamp_min(1e-300)  # noqa: E731

    def f(z: torch.Tensor) -> torch.Tensor:
        zin = unit(z) if head_input == "normalized" else z
        return unit(h64(zin[None])[0])

    return f


def tangent_gains(f: Callable[[torch.Tensor], torch.Tensor], Z: torch.Tensor, V: torch.Tensor) -> np.ndarray:
    """``(v^T G v / |v|^2) / (tr G / d)`` per row (``mini.invariance.orbit_gain``), ``G = J_f^T J_f`` at each
    row of ``Z`` (n, d), ``v`` the rows of ``V`` (n, d)."""
    from torch.func import jacrev

    from mini.invariance import orbit_gain

    out = []
    for z, v in zip(Z.double(), V.double()):
        J = jacrev(f)(z)  # (k, d)
        G = (J.T @ J).detach().numpy()
        out.append(float(orbit_gain(G, v.numpy()[None])[0]))
    return np.array(out)


def rotation_tangents(backbone: nn.Module, images: torch.Tensor, normalize, step_deg: float,
                      batch: int = 512) -> tuple[torch.Tensor, torch.Tensor]:
    """``(z, v)`` (n, d) float64: z of each image and the central-difference tangent dz/dt (per radian) of its
    rotation by t (``scale.geometry.measure.orbit_features``, kornia's rotation)."""
    from scale.engine.modes import eval_mode
    from scale.geometry.measure import orbit_features

    with eval_mode(backbone):
        F = orbit_features(backbone, images, "rotation", (-step_deg, 0.0, step_deg), normalize, batch)  # (n, 3, d)
    return F[:, 1], (F[:, 2] - F[:, 0]) / (2 * math.radians(step_deg))


def tangent_gain_record(backbone: nn.Module, head: nn.Module, images: torch.Tensor, normalize,
                        head_input: str = "raw", step_deg: float = TANGENT_STEP_DEG) -> dict[str, float]:
    """Proposition 5.2 measured (module docstring): ``images`` (n, 3, S, S) in [0, 1], ``normalize`` the
    dataset's standardisation (``scale.geometry.measure.standardize``)."""
    Z, V = rotation_tangents(backbone, images, normalize, step_deg)
    _, V_half = rotation_tangents(backbone, images, normalize, step_deg / 2)
    gains = tangent_gains(head_map(head, head_input), Z, V)
    vn = V.norm(dim=1)
    with np.errstate(divide="ignore"):
        logs = np.log10(gains)
    return {"tangent_gain": float(np.median(gains)), "log10_tangent_gain": float(np.median(logs)),
            "tangent_below_random": float((gains < 1).mean()),
            "tangent_rel": float((vn / Z.norm(dim=1)).median()),
            "fd_error": float(((V - V_half).norm(dim=1) / vn).median())}


# --------------------------------------------------------------------------------------------
# E5: the trend over depths, per seed
# --------------------------------------------------------------------------------------------


def depth_trend(values: Mapping[int, float]) -> dict[str, float]:
    """Least-squares slope of ``values[depth]`` on depth, E5's second difference and monotonicity (module
    docstring). NaN when fewer than two finite values."""
    pts = sorted((int(d), float(v)) for d, v in values.items() if math.isfinite(v))
    if len(pts) < 2:
        return {"slope": math.nan, "second_difference": math.nan, "monotone": math.nan}
    x = np.array([p[0] for p in pts], dtype=float)
    y = np.array([p[1] for p in pts])
    xc = x - x.mean()
    slope = float((xc * y).sum() / (xc * xc).sum())  # sum (x - xbar) y / sum (x - xbar)^2
    dy = np.diff(y)
    mono = 1.0 if (dy > 0).all() else -1.0 if (dy < 0).all() else 0.0
    second = float(y[0] - 2 * y[1] + y[2]) if [p[0] for p in pts] == [1, 2, 3] else math.nan
    return {"slope": slope, "second_difference": second, "monotone": mono}
