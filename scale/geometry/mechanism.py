r"""The paper's mechanism beyond eq. (1), measured: E1's start collapsed in the measured statistic, the head/backbone
timescale separation, Proposition 5.2 on a trained head, E4's orbit statistics each on its own (D_intra, D_inter,
the untrained head, trained against untrained under one protocol, a curvature free of the orbit's size) and E5 as a
trend over depths. Each function returns a flat dict of JSON-able floats (booleans as 0.0 / 1.0; NaN where a
statistic has no value). The curvature side (M, G's inertia, M on null(G), rho): ``scale.curvature.eq1_terms``
(its docstring lists its keys: M_over_H, M_norm, H_scale, G_negative, G_zero, G_positive, G_eigenvalues,
G_indefinite, lambda_min_G_rel, lambda_max_G_rel, lambda_min_H_rel, loss_hessian_negative, null_dim_G, null_samples,
lambda_min_M_null, negative_M_null, null_identity from ``curvature_mechanism``; loss, rho_norm, rho_rel, rho_nonzero,
h_std, z_std from ``residual_record``).

Use in a run (an E1 unit; ``x``: the probe views the curvature is measured on, e.g. ``scale.replicate``'s):

    trainer = Trainer(cfg, data, device, run_dir=None)      # cfg.init "normal": collapsed_start_ applies the x 0.1
    info = collapsed_start_(trainer.model, trainer.state.probe_x)      # only for the collapsed start, before any
    trainer.hooks.insert(0, ParameterDrift())                          # hook measures the start
    start = residual_record(trainer.model, cfg, x)          # scale.curvature.eq1_terms, like curvature_mechanism
    trainer.fit()
    end = residual_record(trainer.model, cfg, x); times = timescale_record(trainer.state.history)

Every record key of this module, its meaning, its scale and the function that produces it:

``collapsed_start_(model, x_ref, eps)`` (in place) and ``start_record``: E1's start that is collapsed in the
measured statistic (see ``collapsed_start_``); ``start_record(normal, collapsed)`` of two records of
``scale.curvature.eq1_terms.residual_record``:

    h_std_normal, h_std_collapsed    the two starts' h std (paired: same seed, same head before the projection).
    log10_std_ratio    log10(h_std_collapsed / h_std_normal) (< 0: the start is collapsed in the statistic).
    start_collapsed    1.0 when h_std_collapsed <= COLLAPSED_RATIO * h_std_normal (10x below the normal start).
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
rotation of the image by t at t = 0: the backbone's forward-mode derivative along the image's rotation tangent
(a central difference of kornia's rotation by +-``TANGENT_STEP_DEG``), G = J^T J of the measured head map at z
(``head_input``: "raw" = normalize(head(z)), as trained; "normalized" = the paper's E4 map
normalize(head(normalize(z)))).

    tangent_gain       median over images of (v^T G v / |v|^2) / (tr G / d) (``mini.invariance.orbit_gain``): the
                       tangent's stretch against the mean stretch of uniformly random directions of the same
                       norm (exactly E[u^T G u] = tr G / d |u|^2); 0: blind to the augmentation, 1: no preference.
    log10_tangent_gain median over images of log10 of the same.
    tangent_below_random   fraction of images with gain < 1.
    tangent_rel        median |v| (radians) / |z|: the tangent's size against z's (the augmentation moves z).
    fd_error           median |dx_t - dx_{t/2}| / |dx_t| of the image tangent at steps t and t/2: its own error.

``depth_trend({depth: value})``: E5 as a trend, per seed.

    slope              least-squares slope of value on depth (depths 1, 2, 3: (y3 - y1) / 2).
    second_difference  y1 - 2 y2 + y3 (depths 1, 2, 3 only; else NaN).
    monotone           +1.0 strictly increasing, -1.0 strictly decreasing, 0.0 otherwise.

``orbit_record(protocols)``: E4's statistics of one seed from ``scale.geometry.protocols.measure_model``'s
protocols (a, b, c, d, f, g: ``scale.geometry.protocols.PROTOCOLS``), each a log10 ratio (0: no change; 1: 10x):

    learned_compression_c_f    log10(compression under c / under f): the trained head against the untrained one,
                               both on normalised z with BatchNorm statistics of that very input (E4.3 without
                               protocol a's BatchNorm mismatch, which only the trained head has).
    learned_compression_b_g    the same on raw z (b: the head as trained; g: its untrained twin).
    untrained_compression_f    log10 compression (mean orbit spread z / h) of the untrained head under f (near 0:
                               near 1x); ``_g`` under g; ``_d`` under the paper's own control protocol d.
    d_intra_factor_P           log10(D_intra of z / of h) under P in a, b, c, f (> 0: the head shrinks orbits).
    d_inter_factor_P           log10(D_inter of z / of h) under the same (> 0: the head shrinks class separation).
    kappa_factor_P             log10(kappa of h / of z), the paper's curvature (E4.4).
    kappa_rel_factor_P         log10 of the same for kappa_rel = mean kappa / mean sweep step (size-free: E4.4's
                               curvature with the sweep's length divided out; ``scale.geometry.protocols.measure``).
    step_factor_P              log10(mean sweep step of h / of z): the part of kappa_factor that is the sweep
                               being longer (kappa_factor = kappa_rel_factor + step_factor exactly).

A protocol absent from ``protocols`` gives NaN.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from mini.collapse import PSEUDO_COLLAPSE_FACTOR
from mini.invariance import orbit_gain
from scale.engine.heads import collapse_init_
from scale.engine.hooks import Hook
from scale.engine.modes import embed
from scale.geometry.orbits import orbit_batch_at

COLLAPSE_EPS = 1e-3  # collapsed_start_: the weight left off the mean-feature direction
COLLAPSED_RATIO = 0.1  # start_record: a start at most this fraction of the normal start's h std counts as collapsed
TANGENT_STEP_DEG = 0.5  # central-difference step of the image's rotation tangent (degrees); fd_error: its accuracy


# --------------------------------------------------------------------------------------------
# E1's start, collapsed in the measured statistic
# --------------------------------------------------------------------------------------------



def first_linear(module: nn.Module) -> nn.Linear:
    """The head's first Linear layer (the one that reads z)."""
    for m in module.modules():
        if isinstance(m, nn.Linear):
            return m
    raise ValueError(f"{type(module).__name__} has no nn.Linear layer: the collapsed start projects its first one")


@torch.no_grad()
def collapsed_start_(model: nn.Module, x_ref: torch.Tensor, eps: float = COLLAPSE_EPS,
                     factor: float = PSEUDO_COLLAPSE_FACTOR) -> dict[str, float]:
    """E1's start collapsed in the measured statistic, in place: the projector's first weight ``W1`` (w, d) becomes

        W1 (u u^T) + eps W1 (I - u u^T),      u = mean(z) / |mean(z)|, z = backbone(x_ref) in eval mode

    and then every Linear weight of the projector is multiplied by ``factor`` (the paper's pseudo-collapse, 0.1).
    The head reads z through its component along the mean feature direction (plus ``eps`` of the rest): every row
    of ``W1 z`` is ``(u . z) W1 u + O(eps)`` with ``u . z > 0`` for the non-negative features of a ReLU backbone,
    so a bias-free linear or ReLU head (positively homogeneous) maps every input to positive multiples of one
    vector and the normalised h (E1's h std) is collapsed to O(eps). A smooth head is not homogeneous: the
    spread of ``u . z`` still turns h, by O(|a|) at pre-activations ``a``, which ``factor`` shrinks. On digits
    (seed 0, the ledger's E1 head, the trainer's 256 probe images) this gave h std 1.4e-5 for linear and ReLU
    heads and 2-4e-4 for GELU and Swish, against 1.4e-2 at the normal start; the paper's pseudo-collapse alone
    leaves a bias-free homogeneous head's normalised output unchanged, hence the normal start's h std. The
    backbone and z are untouched; a hidden BatchNorm in train mode re-spreads the batch (the start is then
    collapsed only in eval mode: E1's premise not met there). ``x_ref``: normalised unaugmented training images
    (the trainer's ``state.probe_x``). Returns ``|mean z| / mean |z|`` (how much of z the direction u carries)
    as ``u_share``."""
    if not 0.0 <= eps < 1.0:
        raise ValueError(f"eps must be in [0, 1), got {eps}")
    if not 0.0 < factor <= 1.0:
        raise ValueError(f"factor must be in (0, 1], got {factor}")
    W = first_linear(model.projector).weight  # (w, d)
    z_ref, _ = embed(model, x_ref)
    mean = z_ref.to(W.dtype).mean(0)
    if float(mean.norm()) == 0.0:
        raise ValueError("the reference features have zero mean: no direction to collapse onto")
    u = mean / mean.norm()
    P = torch.outer(u, u)
    W.copy_(W @ P + eps * (W - W @ P))
    collapse_init_(model.projector, factor)
    return {"u_share": float(mean.norm() / z_ref.norm(dim=1).mean())}


def start_record(normal: Mapping[str, float], collapsed: Mapping[str, float]) -> dict[str, float]:
    """The paired starts of one seed (two ``residual_record``s): is the collapsed start collapsed in h std, and does
    it meet Theorem 4.1's premise rho != 0."""
    a, b = normal["h_std"], collapsed["h_std"]
    return {"h_std_normal": a, "h_std_collapsed": b,
            "log10_std_ratio": math.log10(b / a) if a > 0 and b > 0 else math.nan,
            "start_collapsed": float(b <= COLLAPSED_RATIO * a) if a > 0 else math.nan,
            "rho_rel_collapsed": collapsed["rho_rel"], "rho_nonzero_collapsed": collapsed["rho_nonzero"]}


# --------------------------------------------------------------------------------------------
# Timescale separation: relative parameter change per epoch, head against backbone
# --------------------------------------------------------------------------------------------


class ParameterDrift(Hook):
    """A trainer hook: adds ``drift_head`` and ``drift_backbone`` to each epoch's history record,
    ``|w_e - w_{e-1}| / |w_{e-1}|`` over the module's parameters (float64 norms; BatchNorm buffers excluded). The
    whole epoch's movement, where the trainer's ``rel_update_*`` is one step's ``lr |g| / |w|``."""

    def __init__(self) -> None:
        self.last: dict[str, torch.Tensor] = {}

    @staticmethod
    def _flat(module: nn.Module) -> torch.Tensor:
        return torch.cat([p.detach().double().flatten() for p in module.parameters()]).cpu()

    def _parts(self, state) -> dict[str, nn.Module]:
        return {"head": state.model.projector, "backbone": state.model.backbone}

    def state_dict(self) -> dict[str, Any]:
        return {"last": dict(self.last)}  # a checkpoint mid-epoch resumes against the last epoch's weights

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.last = dict(state["last"])

    def on_fit_start(self, state) -> None:
        if not self.last:  # (resumed: the weights of the last epoch end came with the checkpoint)
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


TIMESCALE_KEYS = ("drift_head", "drift_backbone", "rel_update_head", "rel_update_backbone")  # history keys it reads


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


    out = []
    for z, v in zip(Z.double(), V.double()):
        J = jacrev(f)(z)  # (k, d)
        G = (J.T @ J).detach().numpy()
        out.append(float(orbit_gain(G, v.numpy()[None])[0]))
    return np.array(out)


def image_tangent(images: torch.Tensor, step_deg: float) -> torch.Tensor:
    """``d/dt rotate(images, t)`` at t = 0 (per radian), (n, 3, S, S): the central difference of kornia's bilinear
    rotation by +-``step_deg``. Bilinear interpolation is piecewise bilinear in the sampling point and the rotation
    moves it by ``+-sin(t) R' p``, so this is the image's central spatial gradient along the rotation field, with
    an error of O(step) from the cells' cross terms (``fd_error`` of ``tangent_gain_record`` measures it)."""

    pair = orbit_batch_at(images, "rotation", (-step_deg, step_deg)).reshape(len(images), 2, *images.shape[1:])
    return (pair[:, 1] - pair[:, 0]) / (2 * math.radians(step_deg))


def rotation_tangents(backbone: nn.Module, images: torch.Tensor, normalize, step_deg: float
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(z, v, dx)``: z (n, d) of each image, the tangent ``v = J_f(x) dx`` (n, d) of z along the rotation, by a
    forward-mode product through a float64 copy of the backbone (eval mode), and the image tangent ``dx``
    (``image_tangent``). Exact in the backbone: a finite difference in z would cross the ReLU kinks of a
    piecewise-linear network within the step (measured: 36 % disagreement between steps of 2 and 1 degrees on a
    trained digits ResNet)."""
    from torch.func import jvp

    f64 = copy.deepcopy(backbone).double().eval()
    x = normalize(images).double()
    dx = image_tangent(images, step_deg).double()
    dxn = normalize(images + dx).double() - x  # normalize is affine: its linear part applied to dx
    with torch.no_grad():
        z, v = jvp(f64, (x,), (dxn,))
    return z, v, dx


def tangent_gain_record(backbone: nn.Module, head: nn.Module, images: torch.Tensor, normalize,
                        head_input: str = "raw", step_deg: float = TANGENT_STEP_DEG) -> dict[str, float]:
    """Proposition 5.2 measured (module docstring): ``images`` (n, 3, S, S) in [0, 1], ``normalize`` the
    dataset's standardisation (``scale.geometry.measure.standardize``)."""
    Z, V, dx = rotation_tangents(backbone, images, normalize, step_deg)
    dx_half = image_tangent(images, step_deg / 2).double()
    gains = tangent_gains(head_map(head, head_input), Z, V)
    vn = V.norm(dim=1)
    with np.errstate(divide="ignore"):
        logs = np.log10(gains)
    flat, flat_half = dx.flatten(1), dx_half.flatten(1)
    return {"tangent_gain": float(np.median(gains)), "log10_tangent_gain": float(np.median(logs)),
            "tangent_below_random": float((gains < 1).mean()),
            "tangent_rel": float((vn / Z.norm(dim=1)).median()),
            "fd_error": float(((flat - flat_half).norm(dim=1) / flat.norm(dim=1)).median())}


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


# --------------------------------------------------------------------------------------------
# E4: the orbit statistics of one seed
# --------------------------------------------------------------------------------------------


def _log10(a: float, b: float = 1.0) -> float:
    return math.log10(a / b) if a > 0 and b > 0 and math.isfinite(a / b) else math.nan


ORBIT_PAIRS = (("c_bn_renorm", "f_untrained_bn_renorm"), ("b_raw", "g_untrained_raw_renorm"))  # trained, untrained


def orbit_record(protocols: dict[str, dict[str, float]]) -> dict[str, float]:
    """E4's statistics of one seed (module docstring) from ``scale.geometry.protocols.measure_model``'s protocols."""
    nan = {"compression": math.nan}

    def get(p: str, k: str) -> float:
        return float(protocols.get(p, nan).get(k, math.nan))

    out = {f"learned_compression_{t[0]}_{u[0]}": _log10(get(t, "compression"), get(u, "compression"))
           for t, u in ORBIT_PAIRS}
    for p in ("f_untrained_bn_renorm", "g_untrained_raw_renorm", "d_untrained_nobias"):
        out[f"untrained_compression_{p[0]}"] = _log10(get(p, "compression"))
    for p in ("a_paper", "b_raw", "c_bn_renorm", "f_untrained_bn_renorm"):
        for k in ("d_intra_factor", "d_inter_factor", "kappa_factor", "kappa_rel_factor", "step_factor"):
            out[f"{k}_{p[0]}"] = _log10(get(p, k))
    return out
