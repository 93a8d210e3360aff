r"""A tiny SSL trainer on the toy manifolds, and the guillotine report (docs/paper.md section 5, E3-E4).

Model: ``x (D) -> backbone (an MLP of the head grammar, default tanh2) -> z = b(x) / |b(x)| (d)
-> head h (any spec: linear, relu3, gelu3, swish3, ...) -> h(z) (k)``. The backbone ends in an L2
normalisation so that the paper's measuring protocol (the head applied to normalised ``z``) is the
one the head was trained on. Two views of each base point are ``g_t1 . x0`` and ``g_t2 . x0`` with
``t1, t2`` uniform on the manifold's ``train_range`` (the analogue of "rotation up to 45 degrees");
the objective is one of ``mini.losses`` (SimCLR's NT-Xent by default, temperature 0.1 as in E3;
SimSiam with a relu2 predictor and stop-gradient targets; VICReg; Barlow Twins). Adam (written out
below) on all parameters, full autograd, float64, seeded: the same config gives the same numbers.

``python -m mini.train --report`` trains one backbone + head per head spec (same seed, same data)
and prints, per head, docs/paper.md's reference-figure table for the toy run (E4 orbits: 5 classes x 3
base points x 12 group elements over a full period; kappa over a sweep of 10 parameters over an
eighth of a period; E3 probes predicting the 4-way discretised group element and the class from
frozen features, split by base point), with the untrained-head control (a fresh head of the same
architecture on the same trained ``z``), and the Proposition 5.2 curve over training: the orbit gain
``(v^T G v / |v|^2) / (tr G / d)`` of the head at ``z``, ``v = d/dt z(g_t x)`` (mean over probe points).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np
from autograd import jacobian
from autograd.misc import flatten

from mini.heads import Head, forward, init_head, parse_head_spec
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
    return normalize(forward(spec, layers, X))


def _loss(cfg: TrainConfig, params: dict, X: np.ndarray, predictor_spec: str, targets: np.ndarray | None):
    """The SSL objective of the two stacked views ``X`` (2m, D), as a function of all parameters."""
    Z = embed((cfg.backbone, params["backbone"]), X)
    Hb = forward(cfg.head, params["head"], Z)
    if cfg.objective == "simclr":
        return nt_xent(cfg.temperature)(Hb)
    if cfg.objective == "vicreg":
        return vicreg()(Hb)
    if cfg.objective == "barlow":
        return barlow()(Hb)
    # SimSiam: a predictor (trained) and stop-gradient targets (the current embeddings, fixed data).
    return simsiam(targets, Head(parse_head_spec(predictor_spec), params["predictor"]))(Hb)


def _adam(x: np.ndarray, g: np.ndarray, state: dict, lr: float, b1: float = 0.9, b2: float = 0.999) -> np.ndarray:
    """One Adam step (Kingma & Ba) on the flat parameter vector; ``state`` holds m, v, t."""
    t = state["t"] = state["t"] + 1
    state["m"] = b1 * state["m"] + (1 - b1) * g
    state["v"] = b2 * state["v"] + (1 - b2) * g * g
    return x - lr * (state["m"] / (1 - b1**t)) / (np.sqrt(state["v"] / (1 - b2**t)) + 1e-8)


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
    flat, unflatten = flatten(params)
    state = {"m": np.zeros_like(flat), "v": np.zeros_like(flat), "t": 0}
    gain_X0, _ = manifold.base(max(1, cfg.gain_points // manifold.n_classes), np.random.default_rng(cfg.seed + 2))
    result = TrainResult(cfg, backbone, head, manifold)
    start = time.perf_counter()

    def record_gain(step: int, p: dict) -> None:
        bb, hd = backbone.with_layers(p["backbone"]), head.with_layers(p["head"])
        Z, V = orbit_tangents_in_z(bb, manifold, gain_X0)
        result.gain_curve.append((step, mean_orbit_gain(hd, Z, V)))

    for step in range(cfg.steps):
        p = unflatten(flat)
        if step % cfg.gain_every == 0:
            record_gain(step, p)
        X0 = _batch(manifold, cfg.batch, rng)
        X = np.concatenate([manifold.act(X0, manifold.draw_params(len(X0), rng)),
                            manifold.act(X0, manifold.draw_params(len(X0), rng))])
        targets = None
        if cfg.objective == "simsiam":
            Zc = embed((cfg.backbone, p["backbone"]), X)
            targets = np.asarray(forward(cfg.head, p["head"], Zc))

        def objective(f, X=X, targets=targets):
            return _loss(cfg, unflatten(f), X, predictor_spec, targets)

        value, g = _value_and_grad(objective, flat)
        if not np.isfinite(value) or not np.all(np.isfinite(g)):
            raise FloatingPointError(f"training diverged at step {step} (loss {value}); lower lr (now {cfg.lr})")
        result.losses.append(value)
        flat = _adam(flat, g, state, cfg.lr)
    p = unflatten(flat)
    record_gain(cfg.steps, p)
    result.backbone, result.head = backbone.with_layers(p["backbone"]), head.with_layers(p["head"])
    result.seconds = time.perf_counter() - start
    return result


def _batch(manifold: Manifold, batch: int, rng: np.random.Generator) -> np.ndarray:
    """``batch`` base points (batch, D), classes drawn uniformly (labels are never seen by SSL)."""
    idx = rng.integers(manifold.n_classes, size=batch)
    return manifold.templates[idx] + manifold.noise * rng.standard_normal((batch, manifold.dim))


def _value_and_grad(fn, x):
    from autograd import value_and_grad

    value, g = value_and_grad(fn)(x)
    return float(value), g


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


# Paper's CIFAR-10 / ResNet-18 reference figures (docs/paper.md), shown beside the toy numbers.
PAPER_FIGURES = {
    "spread": ("2.25e-2 +- 1.07e-2", "0.10e-2 +- 0.06e-2", "21.85x compression"),
    "kappa": ("0.125", "0.242", "1.93x"),
    "d_intra": ("0.211 +- 0.045", "0.044 +- 0.011", "4.76x smaller"),
    "d_inter": ("0.432 +- 0.052", "0.111 +- 0.014", "3.89x smaller"),
    "ratio": ("2.04 +- 0.52", "2.50 +- 0.72", "1.22x higher"),
    "aug/linear": ("52.27 %", "37.55 %", "-14.72 points"),
    "aug/mlp": ("55.46 %", "43.56 %", "-11.90 points"),
}


def _row(name: str, cells: list[str]) -> str:
    return "| " + " | ".join([name, *cells]) + " |"


def head_table(rep: HeadReport) -> str:
    """docs/paper.md's reference-figure table for one toy run, with the untrained-head control column."""
    z, h, u = rep.z, rep.h, rep.h_untrained
    acc = {key: 100 * r.test_accuracy for key, r in rep.probes.items()}
    lines = [
        _row("quantity", ["backbone z", "head h(z)", "factor", "untrained head", "factor (untrained)"]),
        _row("---", ["---"] * 5),
        _row("orbit spread (x 1e-2)", [f"{100 * z.spread.mean:.3g} +- {100 * z.spread.std:.2g}",
                                       f"{100 * h.spread.mean:.3g} +- {100 * h.spread.std:.2g}",
                                       f"{rep.compression:.3g}x compression",
                                       f"{100 * u.spread.mean:.3g} +- {100 * u.spread.std:.2g}",
                                       f"{rep.compression_untrained:.3g}x compression"]),
        _row("curvature kappa", [f"{z.kappa.mean:.3g}", f"{h.kappa.mean:.3g}", f"{h.kappa.mean / z.kappa.mean:.3g}x",
                                 f"{u.kappa.mean:.3g}", f"{u.kappa.mean / z.kappa.mean:.3g}x"]),
    ]
    for label, key in (("D_intra", "d_intra"), ("D_inter", "d_inter")):
        a, b, c = getattr(z, key), getattr(h, key), getattr(u, key)
        lines.append(_row(label, [f"{a:.3f}", f"{b:.3f}", f"{a.mean / b.mean:.3g}x smaller",
                                  f"{c:.3f}", f"{a.mean / c.mean:.3g}x smaller"]))
    lines.append(_row("D_inter / D_intra", [
        f"{z.ratio:.3g}", f"{h.ratio:.3g}", f"{h.ratio.mean / z.ratio.mean:.3g}x higher",
        f"{u.ratio:.3g}", f"{u.ratio.mean / z.ratio.mean:.3g}x higher"]))
    for target, label in (("aug", "4-way augmentation probe"), ("class", "class probe")):
        for kind in ("linear", "mlp"):
            zz, hh, uu = (acc[f"{target}/{f}/{kind}"] for f in ("z", "h", "h_untrained"))
            lines.append(_row(f"{label}, {kind}", [f"{zz:.2f} %", f"{hh:.2f} %", f"{hh - zz:+.2f} points",
                                                   f"{uu:.2f} %", f"{uu - zz:+.2f} points"]))
    return "\n".join(lines)


def _probe_gap(rep: HeadReport, target: str, kind: str) -> float:
    """Test accuracy of the probe on h minus on z, in points."""
    return 100 * (rep.probes[f"{target}/h/{kind}"].test_accuracy - rep.probes[f"{target}/z/{kind}"].test_accuracy)


def summary_table(reports: list[HeadReport]) -> str:
    """Head-to-backbone factors side by side for all heads, the paper's CIFAR factor first."""
    lines = [_row("factor (head vs backbone)", ["paper (CIFAR-10)", *(r.head for r in reports)]),
             _row("---", ["---"] * (1 + len(reports)))]

    def add(label, paper, fn):
        lines.append(_row(label, [paper, *(fn(r) for r in reports)]))

    add("orbit spread z / h", "21.85x", lambda r: f"{r.compression:.3g}x")
    add("  untrained head", "0.97x", lambda r: f"{r.compression_untrained:.3g}x")
    add("sweep spread z / h (1/8 period)", "n/a", lambda r: f"{r.sweep_compression:.3g}x")
    add("kappa h / z", "1.93x", lambda r: f"{r.h.kappa.mean / r.z.kappa.mean:.3g}x")
    add("D_intra z / h", "4.76x", lambda r: f"{r.z.d_intra.mean / r.h.d_intra.mean:.3g}x")
    add("D_inter z / h", "3.89x", lambda r: f"{r.z.d_inter.mean / r.h.d_inter.mean:.3g}x")
    add("ratio h / z", "1.22x", lambda r: f"{r.h.ratio.mean / r.z.ratio.mean:.3g}x")
    for target, kind, paper in (("aug", "linear", "-14.72"), ("aug", "mlp", "-11.90"), ("class", "linear", "n/a"),
                                ("class", "mlp", "n/a")):
        add(f"{target} probe {kind}, h - z (points)", paper, lambda r, t=target, k=kind: f"{_probe_gap(r, t, k):+.2f}")
    add("orbit gain at init -> end (Prop 5.2)", "n/a",
        lambda r: f"{r.gain_curve[0][1]:.3g} -> {r.gain_curve[-1][1]:.3g}")
    return "\n".join(lines)


def gain_table(reports: list[HeadReport]) -> str:
    steps = [s for s, _ in reports[0].gain_curve]
    lines = [_row("step", [r.head for r in reports]), _row("---", ["---"] * len(reports))]
    for i, s in enumerate(steps):
        lines.append(_row(str(s), [f"{r.gain_curve[i][1]:.4f}" for r in reports]))
    return "\n".join(lines)


def run_report(base: TrainConfig, heads: tuple[str, ...] = REPORT_HEADS, probe_steps: int = 300,
               n_probe_per_class: int = 40) -> tuple[list[HeadReport], str]:
    """Train one run per head (same seed, data and backbone init) and format the full report."""
    reports = []
    for spec in heads:
        res = train(replace(base, head=spec))
        reports.append(measure(res, n_probe_per_class=n_probe_per_class, probe_steps=probe_steps))
    cfg = asdict(base)
    cfg.pop("head")
    parts = [
        f"# Toy guillotine report: {base.objective} on the '{base.manifold}' manifold",
        "",
        "config: " + ", ".join(f"{k}={v}" for k, v in cfg.items()),
        "runs: " + ", ".join(f"{r.head}: final loss {r.final_loss:.4f}, {r.seconds:.1f} s" for r in reports),
        "",
        "## Side by side (factor of the trained head over the backbone; paper = CIFAR-10 ResNet-18)",
        "",
        summary_table(reports),
    ]
    for r in reports:
        title = f"## Head {r.head} (E4 orbits 15 x 12, kappa sweep 10 steps over 1/8 period; probe test accuracy)"
        parts += ["", title, "", head_table(r)]
    parts += ["", "## Proposition 5.2 over training: orbit gain (v^T G v / |v|^2) / (tr G / d), mean over points",
              "", gain_table(reports)]
    return reports, "\n".join(parts)


def _provenance() -> dict:
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=False,
                                cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
    except OSError:
        commit = ""
    return {"python": platform.python_version(), "numpy": np.__version__, "device": "cpu", "git_commit": commit}


def _write_json_atomic(path: str, payload: dict) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(payload, f, indent=2, default=lambda o: asdict(o) if hasattr(o, "__dataclass_fields__") else str(o))
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mini.train", description=__doc__.split("\n")[0])
    ap.add_argument("--report", action="store_true", help="train linear/relu3/gelu3/swish3 heads and print the table")
    ap.add_argument("--manifold", default="hue", choices=MANIFOLDS)
    ap.add_argument("--objective", default="simclr", choices=TRAIN_OBJECTIVES)
    ap.add_argument("--head", default="relu3", help="head spec for a single run (without --report)")
    ap.add_argument("--heads", default=",".join(REPORT_HEADS), help="comma-separated head specs for --report")
    ap.add_argument("--steps", type=int, default=TrainConfig.steps)
    ap.add_argument("--batch", type=int, default=TrainConfig.batch)
    ap.add_argument("--lr", type=float, default=TrainConfig.lr)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None, help="also write the measurements to this JSON file (atomically)")
    args = ap.parse_args(argv)
    try:
        base = TrainConfig(manifold=args.manifold, objective=args.objective, head=args.head, steps=args.steps,
                           batch=args.batch, lr=args.lr, seed=args.seed).validate()
        heads = tuple(h.strip() for h in args.heads.split(",") if h.strip()) if args.report else (args.head,)
        for h in heads:
            parse_head_spec(h)
    except ValueError as err:
        ap.error(str(err))
    reports, text = run_report(base, heads)
    print(text)
    if args.json:
        _write_json_atomic(args.json, {"config": asdict(base), "heads": list(heads), "reports": reports,
                                       "provenance": _provenance()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
