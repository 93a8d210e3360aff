r"""A tiny SSL trainer on the toy manifolds and its E3-E4 measurements (docs/paper.md section 5).

Model: ``x (D) -> backbone (an MLP of the head grammar, default tanh2) -> z = b(x) / |b(x)| (d)
-> head h (any spec: linear, relu3, gelu3, swish3, ...) -> h(z) (k)``. The backbone ends in an L2
normalisation so that the paper's measuring protocol (the head applied to normalised ``z``) is the
one the head was trained on. Two views of each base point are ``g_t1 . x0`` and ``g_t2 . x0`` with
``t1, t2`` uniform on the manifold's ``train_range`` (the analogue of "rotation up to 45 degrees");
the objective is one of ``mini.losses`` (SimCLR's NT-Xent by default, temperature 0.1 as in E3;
SimSiam with a relu2 predictor and stop-gradient targets; VICReg; Barlow Twins). Adam
(``autograd.misc.optimizers.adam``) on all parameters, full autograd, float64, seeded: the same
config gives the same numbers.

``measure`` takes a trained run to the paper's E3-E4 measurements (orbit geometry of ``z``, of the
trained head and of an untrained control head on the same ``z``; linear and MLP probes), and
``train_and_measure`` does both for several head specs. Along training, ``train`` records the
Proposition 5.2 orbit gain ``(v^T G v / |v|^2) / (tr G / d)`` of the head at ``z``,
``v = d/dt z(g_t x)`` (mean over probe points). The tables: ``python -m mini.reports.train --report``.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from autograd import jacobian, value_and_grad
from autograd.misc import flatten
from autograd.misc.optimizers import adam

from mini.heads import Head, init_head, parse_head_spec
from mini.hessian import head_derivatives
from mini.invariance import (
    OrbitGeometry,
    ProbeResult,
    compression,
    group_split,
    l2_normalize,
    linear_probe,
    mlp_probe,
    orbit_geometry,
    orbit_spread,
)
from mini.losses import barlow, normalize, nt_xent, simsiam, vicreg
from mini.manifolds import MANIFOLDS, Manifold, make_manifold

TRAIN_OBJECTIVES: tuple[str, ...] = ("simclr", "simsiam", "vicreg", "barlow")
REPORT_HEADS: tuple[str, ...] = ("linear", "relu3", "gelu3", "swish3")
Array = Any


@dataclass(frozen=True)
class TrainConfig:
    """One toy SSL run. Widths: data ``D`` (from the manifold) -> ``backbone_width`` -> ``d`` -> head -> ``k``."""

    manifold: str = "hue"
    objective: str = "simclr"
    head: str = "relu3"
    backbone: str = "tanh2"
    d: int = 16
    k: int = 16
    backbone_width: int = 64
    head_width: int = 32
    batch: int = 64  # base points per step (2 * batch views)
    steps: int = 200
    lr: float = 5e-3
    temperature: float = 0.1
    seed: int = 0
    gain_every: int = 25  # record the Proposition 5.2 orbit gain every this many steps
    gain_points: int = 32

    def validate(self) -> TrainConfig:
        if self.manifold not in MANIFOLDS:
            raise ValueError(f"unknown manifold {self.manifold!r}; valid: {', '.join(MANIFOLDS)}")
        if self.objective not in TRAIN_OBJECTIVES:
            raise ValueError(f"unknown objective {self.objective!r}; valid: {', '.join(TRAIN_OBJECTIVES)}")
        parse_head_spec(self.head)
        parse_head_spec(self.backbone)
        for name in ("d", "k", "backbone_width", "head_width", "batch", "steps", "gain_every", "gain_points"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)!r}")
        if self.batch < 2:
            raise ValueError("batch must be >= 2 (the objectives need several samples)")
        if not self.lr > 0:
            raise ValueError(f"lr must be positive, got {self.lr!r}")
        return self


@dataclass
class TrainResult:
    config: TrainConfig
    backbone: Head
    head: Head
    manifold: Manifold
    losses: list[float] = field(default_factory=list)
    gain_curve: list[tuple[int, float]] = field(default_factory=list)  # (step, mean orbit gain)
    seconds: float = 0.0


# --------------------------------------------------------------------------------------------
# Model and objective
# --------------------------------------------------------------------------------------------


def embed(backbone: Head | tuple, X: Array) -> Array:
    """``z = b(x) / |b(x)|`` (n, d); ``backbone`` is a Head or ``(spec, layers)`` for autograd."""
    spec, layers = (backbone.spec, backbone.layers) if isinstance(backbone, Head) else backbone
    return normalize(Head(parse_head_spec(spec), layers)(X))


def _loss(cfg: TrainConfig, params: dict, X: np.ndarray, predictor_spec: str, targets: np.ndarray | None):
    """The SSL objective of the two stacked views ``X`` (2m, D), as a function of all parameters."""
    Z = embed((cfg.backbone, params["backbone"]), X)
    Hb = Head(parse_head_spec(cfg.head), params["head"])(Z)
    if cfg.objective == "simclr":
        return nt_xent(cfg.temperature)(Hb)
    if cfg.objective == "vicreg":
        return vicreg()(Hb)
    if cfg.objective == "barlow":
        return barlow()(Hb)
    # SimSiam: a predictor (trained) and stop-gradient targets (the current embeddings, fixed data).
    return simsiam(targets, Head(parse_head_spec(predictor_spec), params["predictor"]))(Hb)


# --------------------------------------------------------------------------------------------
# Proposition 5.2 along training
# --------------------------------------------------------------------------------------------


def orbit_tangents_in_z(backbone: Head, manifold: Manifold, X0: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(Z, V)``: ``z_i = z(x0_i)`` and the pushed-forward orbit tangents ``v_i = d/dt z(g_t x0_i)|_0``,
    both (n, d). Rows are independent, so one scalar ``t`` shared by all rows gives every ``v_i``."""
    Z = embed(backbone, X0)
    V = jacobian(lambda t: embed(backbone, manifold.act(X0, t)))(0.0)  # (n, d)
    return Z, V


def mean_orbit_gain(head: Head, Z: np.ndarray, V: np.ndarray) -> float:
    """Mean over points of ``(|J_h v|^2 / |v|^2) / (|J_h|_F^2 / d)`` (``mini.invariance.orbit_gain``),
    with the closed-form per-sample Jacobians ``J_h(z_i)`` (n, k, d)."""
    J = np.asarray(head_derivatives(head, Z).J)
    Jv = np.einsum("nkd,nd->nk", J, V)
    num = np.sum(Jv**2, axis=1) / np.sum(V**2, axis=1)
    den = np.sum(J**2, axis=(1, 2)) / Z.shape[1]
    return float(np.mean(num / den))


# --------------------------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------------------------


def train(cfg: TrainConfig) -> TrainResult:
    """Train backbone + head (+ predictor for SimSiam) with Adam; deterministic given ``cfg.seed``."""
    cfg.validate()
    manifold = make_manifold(cfg.manifold, seed=cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    backbone = init_head(cfg.backbone, manifold.dim, cfg.d, cfg.backbone_width, rng)
    head = init_head(cfg.head, cfg.d, cfg.k, cfg.head_width, np.random.default_rng(cfg.seed + 1))
    predictor_spec = "relu2"
    params = {"backbone": backbone.layers, "head": head.layers}
    if cfg.objective == "simsiam":
        params["predictor"] = init_head(predictor_spec, cfg.k, cfg.k, cfg.head_width, rng).layers
    gain_X0, _ = manifold.base(max(1, cfg.gain_points // manifold.n_classes), np.random.default_rng(cfg.seed + 2))
    result = TrainResult(cfg, backbone, head, manifold)
    start = time.perf_counter()

    def record_gain(step: int, p: dict) -> None:
        bb, hd = backbone.with_layers(p["backbone"]), head.with_layers(p["head"])
        Z, V = orbit_tangents_in_z(bb, manifold, gain_X0)
        result.gain_curve.append((step, mean_orbit_gain(hd, Z, V)))

    def gradient(p: dict, step: int) -> dict:
        """The stochastic gradient of step ``step`` at parameters ``p`` (a fresh batch of two views)."""
        if step % cfg.gain_every == 0:
            record_gain(step, p)
        X0 = _batch(manifold, cfg.batch, rng)
        X = np.concatenate([manifold.act(X0, manifold.draw_params(len(X0), rng)),
                            manifold.act(X0, manifold.draw_params(len(X0), rng))])
        targets = None
        if cfg.objective == "simsiam":
            Zc = embed((cfg.backbone, p["backbone"]), X)
            targets = np.asarray(Head(parse_head_spec(cfg.head), p["head"])(Zc))
        value, g = value_and_grad(lambda q: _loss(cfg, q, X, predictor_spec, targets))(p)
        if not np.isfinite(value) or not np.all(np.isfinite(flatten(g)[0])):
            raise FloatingPointError(f"training diverged at step {step} (loss {value}); lower lr (now {cfg.lr})")
        result.losses.append(float(value))
        return g

    p = adam(gradient, params, num_iters=cfg.steps, step_size=cfg.lr)
    record_gain(cfg.steps, p)
    result.backbone, result.head = backbone.with_layers(p["backbone"]), head.with_layers(p["head"])
    result.seconds = time.perf_counter() - start
    return result


def _batch(manifold: Manifold, batch: int, rng: np.random.Generator) -> np.ndarray:
    """``batch`` base points (batch, D), classes drawn uniformly (labels are never seen by SSL)."""
    idx = rng.integers(manifold.n_classes, size=batch)
    return manifold.templates[idx] + manifold.noise * rng.standard_normal((batch, manifold.dim))


# --------------------------------------------------------------------------------------------
# The guillotine report (E3-E4 on the toy run)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HeadReport:
    """Measurements of one trained run: orbit geometry of ``z``, of the trained head and of the
    untrained control head (both on the same normalised ``z``), probes, and the gain curve."""

    head: str
    z: OrbitGeometry
    h: OrbitGeometry
    h_untrained: OrbitGeometry
    compression: float
    compression_untrained: float
    sweep_compression: float  # spread(z) / spread(h) over the kappa sweep (inside the training range)
    probes: dict[str, ProbeResult]  # keys "<target>/<features>/<kind>", target aug | class
    gain_curve: list[tuple[int, float]]
    final_loss: float
    seconds: float


def measure(result: TrainResult, n_probe_per_class: int = 40, probe_steps: int = 300) -> HeadReport:
    """E4 orbit metrics and E3 probes of a trained run (the paper's protocol, see module docstring)."""
    cfg, M = result.config, result.manifold
    rng = np.random.default_rng(cfg.seed + 3)
    control = init_head(cfg.head, cfg.d, cfg.k, cfg.head_width, np.random.default_rng(cfg.seed + 4))

    def feats(X):  # (..., D) -> z, h, h_untrained, all L2-normalised; the heads act on normalised z
        lead = X.shape[:-1]
        Z = l2_normalize(embed(result.backbone, X.reshape(-1, M.dim)))
        return (Z.reshape(*lead, -1), l2_normalize(result.head(Z)).reshape(*lead, -1),
                l2_normalize(control(Z)).reshape(*lead, -1))

    X0, labels = M.base(3, rng)  # 5 classes x 3 base points
    orbit_f = feats(M.orbits(X0, M.orbit_params(12)))  # (15, 12, .)
    sweep_f = feats(M.orbits(X0, M.sweep_params(10)))  # (15, 10, .)
    geo = [orbit_geometry(F, labels, S) for F, S in zip(orbit_f, sweep_f)]
    sweep_spread = [float(np.mean(orbit_spread(S))) for S in sweep_f]

    # Probes: every base point under the 4 probe group elements; split by base point.
    P0, plabels = M.base(n_probe_per_class, rng)
    ts = M.probe_params()
    Xp = M.orbits(P0, ts)  # (n, 4, D)
    aug_y = np.tile(np.arange(4), len(P0))
    class_y = np.repeat(plabels, 4)
    train_idx, test_idx = group_split(np.repeat(np.arange(len(P0)), 4), 0.3, seed=cfg.seed)
    probes = {}
    for fname, F in zip(("z", "h", "h_untrained"), feats(Xp)):
        F2 = F.reshape(-1, F.shape[-1])
        for target, y in (("aug", aug_y), ("class", class_y)):
            probes[f"{target}/{fname}/linear"] = linear_probe(F2, y, train_idx, test_idx)
            probes[f"{target}/{fname}/mlp"] = mlp_probe(F2, y, train_idx, test_idx, steps=probe_steps, seed=cfg.seed)
    return HeadReport(
        cfg.head, geo[0], geo[1], geo[2], compression(geo[0], geo[1]), compression(geo[0], geo[2]),
        sweep_spread[0] / sweep_spread[1],
        probes, list(result.gain_curve), float(np.mean(result.losses[-10:])) if result.losses else math.nan,
        result.seconds,
    )


def train_and_measure(base: TrainConfig, heads: tuple[str, ...] = REPORT_HEADS, probe_steps: int = 300,
                      n_probe_per_class: int = 40) -> list[HeadReport]:
    """One run per head spec (same seed, data and backbone init), each measured by ``measure``."""
    return [measure(train(replace(base, head=spec)), n_probe_per_class=n_probe_per_class, probe_steps=probe_steps)
            for spec in heads]
