r"""Section 4 dynamics: gradient flow versus discrete steps at collapse, with exact ``H_eff`` tracking.

Theorem 4.1 is a statement about the *effective Hessian* ``H_eff`` at a collapsed state (docs/paper.md,
Section 4): with an MSE-type loss (``grad^2_h L`` PSD) a linear or ReLU head has ``M = 0`` and
``H_eff = G`` PSD, so gradient flow has no infinitesimal escape direction; a smooth head's ``M``
brings negative eigenvalues, a strict saddle that the flow leaves. The paper's experiments E1-E2 add
that ReLU heads escape only through finite step sizes and BatchNorm. This module makes both sides
executable on a toy SimSiam problem small enough for exact Hessians.

Local analysis (checked in ``theory_checks/test_collapse_dynamics.py``)
---------------------------------------------------------------------
- ``z_flow(head, objective, Z0, t)``: the flow ``dZ/dt = -grad_Z L(h(Z))`` with the head and the
  objective's fixed data (stop-gradient targets) held fixed; its Jacobian is ``-H_eff``.
- ``collapsed_critical_point(head, z_star, n, rng)``: targets ``T`` making the collapsed batch
  ``Z* = 1 z*^T`` a critical point of ``Z -> mse_targets(T)(h(Z))`` with ``rho != 0``: each
  ``rho_i = (h(z*) - t_i) / n`` lies in ``null(J(z*)^T)`` (needs ``k > d``), scaled so that, for a
  smooth head, ``lambda_min(H_i) <= -lambda_max(G_i) < 0`` in every block (a strict saddle).

The toy (the dynamics grid)
---------------------------
- Data: ``m`` points in ``R^{d_in}`` from three Gaussian clusters, two views by additive Gaussian
  jitter, fixed once per seed; rows stacked ``X = [view1; view2]`` (2m, d_in), centred.
- Backbone ``f``: ``tanh2`` MLP ``d_in -> backbone_width -> d`` (bias); ``Z = f(X)`` (2m, d).
- Projector: ``n_proj`` Linear layers without bias (the paper's E1), ``d -> proj_width -> ... -> k``.
  Predictor: 2 Linear layers with bias, ``k -> pred_width -> k``. Same activation in both
  (``linear`` = the paper's linear head: the same Linear layers with no activation).
  BatchNorm (``mini.batchnorm``, statistics per view) after every hidden Linear of both, before
  the activation; none on outputs.
- Objectives (``OBJECTIVES``, ``Config.objective``), with ``p = pred(proj(Z))`` and
  ``t = stopgrad([h^2; h^1])`` (each view predicts the other's projection), ``n = 2m``:

  ``mse``     ``L = 1/(2n) sum_i |p_i - t_i|^2`` (``mini.losses.mse_targets``): ``grad^2_P L = I/n``
              is PSD, Theorem 4.1's premise holds. The default.
  ``cosine``  ``L = -1/n sum_i <p_i/|p_i|, t_i/|t_i|>`` (``mini.losses.simsiam``, form ``cosine``:
              the paper's E1 loss). Per row ``grad^2_{p_i} L = [w u^T + u w^T + c (I - u u^T)] / (n r^2)``
              with ``r = |p_i|``, ``u = p_i/r``, ``c = <u, t_i/|t_i|>``, ``w = t_i/|t_i| - c u``: in the
              basis ``(u, w/|w|)`` it is ``[[0, |w|], [|w|, c]]``, indefinite whenever ``p_i`` and ``t_i``
              are not aligned. Outside Theorem 4.1's premise (``Objective.hessian_psd`` is False).

  ``H_eff`` is taken for the composite head ``z -> pred(proj(z))`` with ``t`` fixed: the Hessian
  with respect to the backbone output that E2 tracks.
- Initialisations: ``normal`` (LeCun-normal, ``mini.heads.init_head``); ``pseudo`` (the paper's
  pseudo-collapse: every Linear weight of the projector times 0.1); ``collapsed`` (the backbone's
  first weight set to ``COLLAPSE_EPS`` times a normal draw, so every input maps to one point up to
  a generic perturbation; with centred inputs exact collapse, ``W1 = 0``, is an invariant set of
  both flow and gradient descent, and only the perturbation can be amplified).
- Dynamics: gradient flow ``d theta/dt = -g(theta)`` (``solve_ivp``, ``FLOW_METHOD``, tolerances
  ``FLOW_RTOL``/``FLOW_ATOL``) and gradient descent ``theta <- theta - lr g`` with a small and a large
  ``lr``, compared at equal time ``t = steps * lr``. The vector field ``g`` is the SimSiam gradient:
  the stop-gradient makes it non-conservative, so the flow is not the gradient flow of any function
  of ``theta`` (the theorem's ``H_eff`` is the symmetric part that ignores how targets move).

Tracked at ``n_checkpoints`` times ("epochs") along every trajectory (``Snapshot``): ``std`` (mean
per-dimension std of the L2-normalised projector output), ``cond`` (its covariance condition number,
``lambda_min`` clamped at ``COND_CLAMP``), ``lambda_min``/``lambda_max`` of ``H_eff``, the count of
eigenvalues below ``-NEG_FLOOR * scale`` (``mini.hessian.spectrum``), ``|M|_2/|H_eff|_2``, gradient
norms of head and backbone, relative updates ``lr |g| / |w|`` of each; per run, Spearman ``rho_s``
between ``std`` and ``cond`` over the checkpoints (E2's statistic).

Escape criterion (``ESCAPE_STD``): a run has escaped (is not collapsed) when its final ``std`` is at
least ``ESCAPE_STD / sqrt(k)`` (a fraction of the isotropic value ``1/sqrt(k)`` of unit vectors
spread over ``R^k``) and every tracked number is finite; its time to escape is the first checkpoint
time with ``std`` at or above the threshold. A run whose state becomes non-finite "diverged".

``python -m mini.reports.dynamics`` prints the grid (``--help`` for the slices). The grid's vector field
and its BatchNorm curvature run on the fast paths of ``mini.dynamics_fast`` (a hand-written backward
pass and a complex-step Hessian, checked against the autograd references of this module).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import autograd.numpy as anp
import numpy as np
from autograd import grad, hessian, jacobian
from scipy.integrate import RK45, solve_ivp
from scipy.stats import spearmanr

from mini.batchnorm import batchnorm
from mini.dynamics_fast import complex_step_curvature, simsiam_gradient
from mini.heads import Head, HeadSpec, init_head, parse_head_spec
from mini.hessian import (
    block_diagonal,
    decompose_closed_form,
    head_derivatives,
    interaction_blocks,
    loss_hessian_blocks,
    spectrum,
)
from mini.losses import Objective, mse_targets, normalize, simsiam

Array = Any
Params = dict[str, Any]

# --------------------------------------------------------------------------------------------
# Named constants (every threshold of the report)
# --------------------------------------------------------------------------------------------

COND_CLAMP = 1e-7  # covariance lambda_min clamp of the paper's condition number
ESCAPE_STD = 0.2  # escaped: final std >= ESCAPE_STD / sqrt(k)
COLLAPSE_EPS = 1e-6  # size of the generic perturbation of an exactly collapsed backbone
PSEUDO_SCALE = 0.1  # the paper's pseudo-collapse: projector Linear weights times 0.1
FLOW_METHOD = "RK45"  # explicit: the evaluation budget exposes stiffness instead of hiding it
FLOW_RTOL = 1e-6  # solve_ivp tolerances of the grid's gradient flow
FLOW_ATOL = 1e-9
FLOW_MAX_EVALS = 4_000  # a flow needing more field evaluations stops there, reported as stiff@t
DIVERGED_NORM = 1e3  # a parameter vector this large (100x its initial size) has diverged

HEADS: tuple[str, ...] = ("linear", "relu2", "gelu2", "swish2", "swish3")
INITS: tuple[str, ...] = ("normal", "pseudo", "collapsed")
DYNAMICS: tuple[str, ...] = ("flow", "small", "large")
OBJECTIVES: tuple[str, ...] = ("mse", "cosine")


@dataclass(frozen=True)
class Config:
    """Sizes, horizon and step sizes of the toy (defaults: the printed grid)."""

    m: int = 6  # samples per view; the batch has 2m rows
    d_in: int = 5
    backbone_width: int = 12
    d: int = 6  # backbone output (the space of H_eff)
    proj_width: int = 8
    k: int = 4  # projector output; k < d leaves null(J) at every sample, as Theorem 4.1 assumes (r < d)
    pred_width: int = 4
    horizon: float = 16.0  # flow time; gradient descent runs horizon / lr steps
    lr_small: float = 0.05
    lr_large: float = 0.5
    n_checkpoints: int = 9
    aug: float = 0.15  # std of the additive view jitter
    cluster_std: float = 0.3
    objective: str = "mse"  # one of OBJECTIVES

    def __post_init__(self) -> None:
        check_choice("objective", self.objective, OBJECTIVES)

    def lr(self, dynamics: str) -> float | None:
        check_choice("dynamics", dynamics, DYNAMICS)
        return None if dynamics == "flow" else self.lr_small if dynamics == "small" else self.lr_large

    @property
    def times(self) -> np.ndarray:
        return np.linspace(0.0, self.horizon, self.n_checkpoints)


def check_choice(name: str, value: str, valid: Sequence[str]) -> str:
    if value not in valid:
        raise ValueError(f"unknown {name} {value!r}; valid choices: {', '.join(valid)}")
    return value


# --------------------------------------------------------------------------------------------
# Local analysis: the z-flow of a fixed head and a strict saddle at collapse
# --------------------------------------------------------------------------------------------


def z_flow(head: Head, objective: Objective, Z0: np.ndarray, t: float | Sequence[float],
           rtol: float = 1e-11, atol: float = 1e-14, method: str = "DOP853") -> np.ndarray:
    """Integrate ``dZ/dt = -grad_Z L(h(Z))`` (head, objective fixed) from ``Z0`` (n, d).

    Returns ``Z(t)`` (n, d) for a scalar ``t``, else (len(t), n, d). Near a critical point ``Z*``
    the linearisation is ``d delta/dt = -H_eff(Z*) delta`` (equation (1) is this Jacobian).
    """
    Z0 = np.asarray(Z0, dtype=float)
    n, d = Z0.shape
    g = grad(lambda z: objective(head(anp.reshape(z, (n, d)))))
    ts = np.atleast_1d(np.asarray(t, dtype=float))
    sol = solve_ivp(lambda _, z: -g(z), (0.0, float(ts[-1])), Z0.ravel(), method=method,
                    t_eval=ts, rtol=rtol, atol=atol)
    if not sol.success:
        raise RuntimeError(f"z_flow: solve_ivp failed: {sol.message}")
    out = sol.y.T.reshape(len(ts), n, d)
    return out[0] if np.ndim(t) == 0 else out


def collapsed_critical_point(head: Head, z_star: np.ndarray, n: int,
                             rng: np.random.Generator) -> tuple[np.ndarray, Objective]:
    """A collapsed batch ``Z* = 1 z*^T`` (n, d) and an MSE objective for which it is critical.

    ``L = mse_targets(T)``, ``rho_i = (h(z*) - t_i) / n``; ``grad_{z_i} L = J^T rho_i = 0`` when
    ``rho_i`` is in ``null(J^T)``, which is nontrivial when ``k > rank J`` (needs ``k > d``
    generically). Each ``rho_i`` is a random direction of that null space whose interaction block
    ``M_i = sum_c rho_ic grad^2 h_c`` has a negative eigenvalue (its sign flipped if needed),
    scaled to ``2 lambda_max(G_i) / |lambda_min(M_i)|`` so that ``lambda_min(G_i + M_i) <=
    -lambda_max(G_i) < 0``. When ``M_i = 0`` (linear, ReLU heads) ``rho_i`` is a unit null vector:
    the point is critical with ``rho != 0`` and ``H_eff = G`` is PSD.
    """
    z_star = np.asarray(z_star, dtype=float)
    d, k = head.d, head.k
    if z_star.shape != (d,):
        raise ValueError(f"z_star must have shape ({d},), got {z_star.shape}")
    Z = np.tile(z_star, (n, 1))
    h = head(z_star[None, :])[0]
    der = head_derivatives(head, Z)
    J = der.J[0]  # (k, d), equal for every row
    U, svals, _ = np.linalg.svd(J)
    rank = int(np.sum(svals > 1e-10 * max(svals.max(initial=0.0), 1e-300)))
    null = U[:, rank:]  # (k, k - rank): orthonormal basis of null(J^T)
    if null.shape[1] == 0:
        raise ValueError(f"null(J^T) is trivial (k={k}, rank J={rank}): a collapsed critical point with "
                         "rho != 0 needs k > rank J")
    G_block = J.T @ J / n  # mse_targets: grad^2 L = I/n, so G_i = J^T J / n
    rhos = []
    for _ in range(n):
        r = null @ rng.standard_normal(null.shape[1])
        r = r / np.linalg.norm(r)
        M_i = interaction_blocks(der, np.tile(r, (n, 1)))[0]
        lo, hi = np.linalg.eigvalsh(M_i)[[0, -1]]
        scale_M = max(abs(lo), abs(hi))
        if scale_M > 1e-12 * np.linalg.norm(J, 2) ** 2:
            if -lo < hi:  # make the most negative eigenvalue the large one: flip rho
                r, lo = -r, -hi
            r = r * 2.0 * np.linalg.eigvalsh(G_block)[-1] / abs(lo)
        rhos.append(r)
    rho = np.stack(rhos)  # (n, k)
    T = h[None, :] - n * rho
    return Z, mse_targets(T)


# --------------------------------------------------------------------------------------------
# The toy SimSiam model
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Arch:
    """A head variant of the grid: its name (``linear`` or ``<act><n>``) and BatchNorm on/off."""

    head: str
    bn: bool = False

    @property
    def spec(self) -> HeadSpec:
        return parse_head_spec(self.head)

    @property
    def activation(self) -> str | None:
        return self.spec.activation

    @property
    def n_proj(self) -> int:
        """Projector Linear layers: ``<act><n>`` has ``n``; ``linear`` has 2 (the paper's linear head)."""
        return 2 if self.spec.activation is None else self.spec.n_layers

    @property
    def label(self) -> str:
        return f"{self.head}{'+BN' if self.bn else ''}"


def make_views(cfg: Config, rng: np.random.Generator) -> np.ndarray:
    """Two views of ``m`` clustered points: ``X = [x + aug e; x + aug e']`` (2m, d_in), centred."""
    centres = rng.standard_normal((3, cfg.d_in))
    labels = rng.integers(0, 3, cfg.m)
    base = centres[labels] + cfg.cluster_std * rng.standard_normal((cfg.m, cfg.d_in))
    X = np.concatenate([base + cfg.aug * rng.standard_normal(base.shape) for _ in range(2)])
    return X - X.mean(axis=0)  # centred: exact collapse (W1 = 0) is then an invariant set


def init_params(arch: Arch, cfg: Config, init: str, rng: np.random.Generator) -> Params:
    """Backbone, projector, predictor (and BatchNorm affine parameters) for one initialisation."""
    check_choice("init", init, INITS)
    backbone = init_head("tanh2", cfg.d_in, cfg.d, cfg.backbone_width, rng).layers
    proj_spec = arch.spec if arch.activation else HeadSpec(None, 2)
    proj = init_head(_grammar(proj_spec), cfg.d, cfg.k, cfg.proj_width, rng, bias=False).layers
    pred = init_head(_grammar(HeadSpec(arch.activation, 2)), cfg.k, cfg.k, cfg.pred_width, rng).layers
    if init == "pseudo":
        proj = [{"W": PSEUDO_SCALE * layer["W"]} for layer in proj]
    if init == "collapsed":
        first = backbone[0]
        backbone = [{"W": COLLAPSE_EPS * rng.standard_normal(first["W"].shape) / math.sqrt(cfg.d_in),
                     "b": first["b"]}, *backbone[1:]]
    params: Params = {"backbone": backbone, "proj": proj, "pred": pred}
    if arch.bn:
        params["bn_proj"] = [{"gamma": np.ones(L["W"].shape[0]), "beta": np.zeros(L["W"].shape[0])}
                             for L in proj[:-1]]
        params["bn_pred"] = [{"gamma": np.ones(L["W"].shape[0]), "beta": np.zeros(L["W"].shape[0])}
                             for L in pred[:-1]]
    return params


def _grammar(spec: HeadSpec) -> str:
    """A spec string ``init_head`` accepts; an activation-free 2-layer stack is drawn as ``relu2``
    (only the weight shapes and their LeCun scaling are used, the activation is ours)."""
    return spec.name if spec.activation else ("linear" if spec.n_layers == 1 else f"relu{spec.n_layers}")


def mlp(activation: str | None, layers: list, X: Array, bn: list | None = None, groups: int = 2) -> Array:
    """``x_l = s(bn(W_l x_{l-1} + b_l))`` for the hidden layers, ``W_L x_{L-1} + b_L`` last. (n, out)."""
    head = Head(HeadSpec(activation, len(layers)), layers)
    if bn is None:
        return head(X)
    return head(X, hidden=lambda l, a: batchnorm(a, bn[l]["gamma"], bn[l]["beta"], groups))


def backbone(params: Params, X: Array) -> Array:
    return Head(HeadSpec("tanh", 2), params["backbone"])(X)


def projector(arch: Arch, params: Params, Z: Array) -> Array:
    return mlp(arch.activation, params["proj"], Z, params.get("bn_proj"))


def predictor(arch: Arch, params: Params, Hb: Array) -> Array:
    return mlp(arch.activation, params["pred"], Hb, params.get("bn_pred"))


def swap_views(Hb: np.ndarray) -> np.ndarray:
    """``[h^2; h^1]``: the stop-gradient target of each row is its partner's projection."""
    m = Hb.shape[0] // 2
    return np.concatenate([Hb[m:], Hb[:m]])


def simsiam_mse(arch: Arch, params: Params, X: Array, targets: np.ndarray) -> Array:
    """``L = 1/(4m) sum_i |pred(proj(f(x_i))) - t_i|^2`` with fixed targets (2m, k)."""
    P = predictor(arch, params, projector(arch, params, backbone(params, X)))
    return 0.5 * anp.sum((P - targets) ** 2) / P.shape[0]


def loss_objective(objective: str, targets: np.ndarray) -> Objective:
    """The ``mini.losses`` objective of the predictions ``P`` (2m, k), given the row-aligned targets
    ``t = [h^2; h^1]`` (2m, k) (``swap_views`` of the projections), held fixed.

    ``mse``: ``mse_targets(t)``. ``cosine``: ``simsiam(h, form="cosine")`` with no predictor (the
    toy's predictor is part of the head); ``simsiam`` takes the unswapped projections ``h`` and swaps
    the views itself, and ``swap_views`` is its own inverse.
    """
    check_choice("objective", objective, OBJECTIVES)
    if objective == "mse":
        return mse_targets(targets)
    return simsiam(swap_views(np.asarray(targets)), None, form="cosine")


def simsiam_loss(arch: Arch, params: Params, X: Array, targets: np.ndarray, objective: str = "mse") -> Array:
    """``L(pred(proj(f(X))))`` for either objective, targets (2m, k) fixed; autograd-safe (the reference)."""
    P = predictor(arch, params, projector(arch, params, backbone(params, X)))
    return loss_objective(objective, targets).fn(P)

# --------------------------------------------------------------------------------------------
# Measurements
# --------------------------------------------------------------------------------------------


def representation_std(Hb: np.ndarray) -> float:
    """Mean per-dimension std of the L2-normalised projector output (the paper's collapse measure)."""
    return float(np.mean(np.std(np.asarray(normalize(Hb)), axis=0)))


def covariance_condition(Hb: np.ndarray) -> float:
    """``lambda_max / max(lambda_min, COND_CLAMP)`` of the covariance of the normalised output."""
    U = np.asarray(normalize(Hb))
    eig = np.linalg.eigvalsh(np.cov(U, rowvar=False, bias=True))
    return float(eig[-1] / max(eig[0], COND_CLAMP))


def composite_head(arch: Arch, params: Params) -> Head:
    """``pred o proj`` as one ``mini.heads.Head`` (no BatchNorm): the projector's last Linear and the
    predictor's first Linear meet without an activation, so they merge exactly into one layer
    (``W = Q1 W_p``, ``b = Q1 b_p + c1``). The function of ``z`` is unchanged."""
    if arch.bn:
        raise ValueError("a BatchNorm head acts on the whole batch; it has no row-by-row Head form")
    proj, pred = params["proj"], params["pred"]
    last, first = proj[-1], pred[0]
    merged = {"W": first["W"] @ last["W"],
              "b": first["W"] @ last.get("b", np.zeros(last["W"].shape[0])) + first.get("b", 0.0)}
    layers = [*proj[:-1], merged, *pred[1:]]
    layers = [{"W": L["W"], "b": L.get("b", np.zeros(L["W"].shape[0]))} for L in layers]
    if arch.activation is None:  # a product of affine maps: one Linear layer
        W, b = layers[0]["W"], layers[0]["b"]
        for L in layers[1:]:
            W, b = L["W"] @ W, L["W"] @ b + L["b"]
        return Head(HeadSpec(None, 1), [{"W": W, "b": b}])
    return Head(HeadSpec(arch.activation, len(layers)), layers)


@dataclass(frozen=True)
class Curvature:
    lambda_min: float
    lambda_max: float
    n_negative: int
    m_ratio: float  # |M|_2 / |H_eff|_2
    loss_psd: bool | None = None  # Objective.hessian_psd: Theorem 4.1's premise (grad^2_P L PSD)


def effective_curvature(arch: Arch, params: Params, Z: np.ndarray, exact_autograd: bool = False,
                        objective: str = "mse") -> Curvature:
    """Exact ``H_eff`` of ``Z -> L(pred(proj(Z)))`` with stop-gradient targets at the current state.

    Without BatchNorm: the closed form of ``mini.hessian`` on the composite head (both objectives
    are block-diagonal in the rows: ``loss_hessian_blocks``). With BatchNorm the head couples the
    rows: the complex step (default, fast). ``exact_autograd``: autograd's full Hessian of the batch
    map, with or without BatchNorm (the reference). Outside the closed form ``M = H - G`` with
    ``G = J^T B J``, ``B`` the block-diagonal loss Hessian (``I/n`` for ``mse``).
    """
    Hb = np.asarray(projector(arch, params, Z))
    targets = swap_views(Hb)
    loss = loss_objective(objective, targets)
    if not arch.bn and not exact_autograd:
        dec = decompose_closed_form(composite_head(arch, params), loss, Z)
        H, M = np.asarray(dec.H), np.asarray(dec.M)
    else:
        n, d = Z.shape
        if exact_autograd:  # per-view batch statistics: autograd on the batch map P(Z)

            def P(z):
                return predictor(arch, params, projector(arch, params, anp.reshape(z, (n, d))))

            z0 = Z.ravel()
            H = hessian(lambda z: loss.fn(P(z)))(z0)  # (n d, n d)
            J = jacobian(lambda z: anp.ravel(P(z)))(z0)  # (n k, n d), not block-diagonal with BatchNorm
            H = 0.5 * (H + H.T)
        else:
            H, J = complex_step_curvature(arch, params, Z, targets, objective)
        P0 = np.asarray(predictor(arch, params, Hb))
        B = block_diagonal(loss_hessian_blocks(loss, P0))  # (n k, n k)
        M = H - J.T @ B @ J  # M = H - G is the Hessian of <stopgrad(rho), P(Z)>
    spec = spectrum(H)
    norm_H = float(np.linalg.norm(H, 2))
    return Curvature(spec.lambda_min, spec.lambda_max, spec.n_negative,
                     float(np.linalg.norm(M, 2)) / norm_H if norm_H else 0.0, loss.hessian_psd)


# --------------------------------------------------------------------------------------------
# Trajectories
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Snapshot:
    t: float
    loss: float
    std: float
    z_std: float  # the same measure on the backbone output z (Theorem 4.1's collapse is in Z)
    cond: float
    curvature: Curvature
    grad_head: float
    grad_backbone: float
    rel_update_head: float  # lr |g| / |w| (per unit time for the flow)
    rel_update_backbone: float


@dataclass
class Trajectory:
    arch: Arch
    init: str
    dynamics: str
    seed: int
    cfg: Config
    snapshots: list[Snapshot] = field(default_factory=list)
    status: str = "ok"  # ok | diverged | stiff (the flow used its evaluation budget before the horizon)
    n_evals: int = 0

    def series(self, name: str) -> np.ndarray:
        if name in ("lambda_min", "lambda_max", "n_negative", "m_ratio"):
            return np.array([getattr(s.curvature, name) for s in self.snapshots], dtype=float)
        return np.array([getattr(s, name) for s in self.snapshots], dtype=float)

    @property
    def threshold(self) -> float:
        return ESCAPE_STD / math.sqrt(self.cfg.k)

    @property
    def escaped(self) -> bool:
        return self.status == "ok" and bool(self.snapshots) and self.snapshots[-1].std >= self.threshold

    @property
    def escape_time(self) -> float | None:
        if not self.escaped:
            return None
        return next(s.t for s in self.snapshots if s.std >= self.threshold)

    @property
    def negative_epochs(self) -> int:
        return int(np.sum(self.series("n_negative") > 0))

    @property
    def spearman(self) -> float:
        std, cond = self.series("std"), self.series("cond")
        if len(std) < 3 or np.ptp(std) == 0 or np.ptp(cond) == 0:
            return float("nan")
        return float(spearmanr(std, cond).statistic)


# Parameters as one flat vector, in a fixed order: (group, layer, name) with groups sorted.
Layout = list[tuple[str, int, str, tuple[int, ...]]]


def layout(params: Params) -> Layout:
    return [(key, l, name, np.shape(value)) for key in sorted(params)
            for l, layer in enumerate(params[key]) for name, value in sorted(layer.items())]


def pack(params: Params, lay: Layout) -> np.ndarray:
    return np.concatenate([np.ravel(params[key][l][name]) for key, l, name, _ in lay])


def unpack(w: np.ndarray, lay: Layout) -> Params:
    out: Params = {}
    i = 0
    for key, l, name, shape in lay:
        size = math.prod(shape)
        layers = out.setdefault(key, [])
        if len(layers) <= l:
            layers.append({})
        layers[l][name] = w[i:i + size].reshape(shape)
        i += size
    return out

class _Problem:
    """The flat parameter vector, the SimSiam vector field and the measurements of one run."""

    def __init__(self, arch: Arch, params: Params, X: np.ndarray, objective: str = "mse"):
        self.arch, self.X, self.objective = arch, X, check_choice("objective", objective, OBJECTIVES)
        self.layout = layout(params)
        self.w0 = pack(params, self.layout)
        head = {key: [{name: np.full(np.shape(v), key != "backbone") for name, v in layer.items()}
                      for layer in layers] for key, layers in params.items()}
        self.head_mask = pack(head, self.layout).astype(bool)  # projector, predictor, BatchNorm entries
        self.n_evals = 0

    def targets(self, p: Params) -> np.ndarray:
        return swap_views(np.asarray(projector(self.arch, p, backbone(p, self.X))))

    def field(self, w: np.ndarray) -> np.ndarray:
        """``g(theta)``: the SimSiam gradient with the targets stopped at the current projections."""
        self.n_evals += 1
        p = unpack(w, self.layout)
        return pack(simsiam_gradient(self.arch, p, self.X, self.targets(p), self.objective), self.layout)

    def snapshot(self, t: float, w: np.ndarray, lr: float, curvature: bool = True) -> Snapshot:
        p = unpack(w, self.layout)
        Z = np.asarray(backbone(p, self.X))
        Hb = np.asarray(projector(self.arch, p, Z))
        T = swap_views(Hb)
        g = pack(simsiam_gradient(self.arch, p, self.X, T, self.objective), self.layout)
        h, b = self.head_mask, ~self.head_mask
        gh, gb = float(np.linalg.norm(g[h])), float(np.linalg.norm(g[b]))
        wh, wb = float(np.linalg.norm(w[h])), float(np.linalg.norm(w[b]))
        return Snapshot(
            t=t, loss=float(simsiam_loss(self.arch, p, self.X, T, self.objective)), std=representation_std(Hb),
            z_std=representation_std(Z), cond=covariance_condition(Hb),
            curvature=effective_curvature(self.arch, p, Z, objective=self.objective),
            grad_head=gh, grad_backbone=gb, rel_update_head=lr * gh / wh, rel_update_backbone=lr * gb / wb,
        )


def _finite(w: np.ndarray) -> bool:
    return bool(np.all(np.isfinite(w))) and float(np.linalg.norm(w)) < DIVERGED_NORM


def run(arch: Arch, init: str, dynamics: str, seed: int, cfg: Config = Config()) -> Trajectory:
    """One trajectory of the grid: data and weights from ``seed``, integrated to ``cfg.horizon``."""
    check_choice("init", init, INITS)
    check_choice("dynamics", dynamics, DYNAMICS)
    rng = np.random.default_rng(seed)
    X = make_views(cfg, rng)
    problem = _Problem(arch, init_params(arch, cfg, init, rng), X, cfg.objective)
    traj = Trajectory(arch, init, dynamics, seed, cfg)
    times = cfg.times
    lr = cfg.lr(dynamics)
    if lr is None:
        states, status = _flow(problem, times)
        rate = 1.0  # per unit time
    else:
        states, status = _descent(problem, times, lr)
        rate = lr
    traj.status, traj.n_evals = status, problem.n_evals
    for t, w in states:
        with np.errstate(all="ignore"):
            try:
                snap = problem.snapshot(t, w, rate)
            except (ValueError, FloatingPointError):  # overflow inside the head: H_eff not finite
                snap = None
        if snap is None or not all(np.isfinite(v) for v in _numbers(snap)):
            traj.status = "diverged"
            break
        traj.snapshots.append(snap)
    return traj


def _numbers(snap: Snapshot) -> list[float]:
    c = snap.curvature
    return [snap.loss, snap.std, snap.cond, c.lambda_min, c.lambda_max, c.m_ratio, snap.grad_head, snap.grad_backbone]


def _flow(problem: _Problem, times: np.ndarray) -> tuple[list[tuple[float, np.ndarray]], str]:
    """Adaptive RK45 (``solve_ivp``'s stepper, driven step by step so that a flow too stiff for the
    evaluation budget keeps the checkpoints it reached; dense output gives the checkpoint states)."""
    def rhs(_, w):
        with np.errstate(all="ignore"):
            return -problem.field(w)

    solver = RK45(rhs, times[0], problem.w0, times[-1], rtol=FLOW_RTOL, atol=FLOW_ATOL)
    states = [(float(times[0]), problem.w0)]
    while solver.status == "running":
        if problem.n_evals >= FLOW_MAX_EVALS:
            return states, "stiff"
        solver.step()
        if solver.status == "failed" or not _finite(solver.y):
            return states, "diverged"
        interp = solver.dense_output()
        for t in times[len(states):]:
            if t > solver.t:
                break
            states.append((float(t), interp(t)))
    return states, "ok"


def _descent(problem: _Problem, times: np.ndarray, lr: float) -> tuple[list[tuple[float, np.ndarray]], str]:
    marks = np.rint(times / lr).astype(int)  # checkpoint step numbers
    w = problem.w0
    states = [(0.0, w)]
    for step in range(1, marks[-1] + 1):
        with np.errstate(all="ignore"):
            w = w - lr * problem.field(w)
        if not _finite(w):
            return states, "diverged"
        if step in marks:
            states.append((step * lr, w))
    return states, "ok"


# --------------------------------------------------------------------------------------------
# The grid and its report
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cell:
    """The seeds of one (head, BN, init, dynamics) cell, summarised as a row of the report."""

    arch: Arch
    init: str
    dynamics: str
    runs: tuple[Trajectory, ...]

    def median(self, fn: Callable[[Trajectory], float | None]) -> float:
        vals = [v for v in (fn(r) for r in self.runs) if v is not None and np.isfinite(v)]
        return float(np.median(vals)) if vals else float("nan")

    @property
    def n_escaped(self) -> int:
        return sum(r.escaped for r in self.runs)

    def cond_behaviour(self) -> str:
        """``rises``/``falls``/``flat``: median of log10(final/initial cond) beyond +-1 decade."""
        change = self.median(lambda r: math.log10(r.snapshots[-1].cond / r.snapshots[0].cond)
                             if len(r.snapshots) > 1 else None)
        if not np.isfinite(change):
            return "-"
        return "rises" if change > 1 else "falls" if change < -1 else "flat"


def run_grid(heads: Sequence[str] = HEADS, inits: Sequence[str] = ("normal", "pseudo"),
             dynamics: Sequence[str] = DYNAMICS, bns: Sequence[bool] = (False, True),
             seeds: Sequence[int] = (0, 1, 2), cfg: Config = Config(),
             progress: Callable[[str], None] | None = None) -> list[Cell]:
    cells = []
    for head in heads:
        parse_head_spec(head)
        for bn in bns:
            arch = Arch(head, bn)
            for init in inits:
                for dyn in dynamics:
                    start = time.perf_counter()
                    runs = tuple(run(arch, init, dyn, seed, cfg) for seed in seeds)
                    cells.append(Cell(arch, init, dyn, runs))
                    if progress:
                        progress(f"{arch.label:>10} {init:>9} {dyn:>5}: {time.perf_counter() - start:5.2f} s")
    return cells
