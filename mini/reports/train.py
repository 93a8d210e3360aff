"""``python -m mini.reports.train``: the toy guillotine report of ``mini.train`` (E3-E4 on toy manifolds).

``--report`` trains one backbone + head per head spec (same seed, same data; ``mini.train``) and
prints, per head, the paper's reference-figure table for the toy run (E4 orbits: 5 classes x 3 base
points x 12 group elements over a full period; kappa over a sweep of 10 parameters over an eighth of
a period; E3 probes predicting the 4-way discretised group element and the class from frozen
features, split by base point), with the untrained-head control (a fresh head of the same
architecture on the same trained ``z``), and the Proposition 5.2 curve over training: the orbit gain
``(v^T G v / |v|^2) / (tr G / d)`` of the head at ``z``. ``--json`` also writes the measurements
(atomically, ``mini.atomic``) with the config and provenance.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from dataclasses import asdict

import numpy as np

from mini import paper_numbers as paper
from mini.atomic import atomic_write_text
from mini.heads import parse_head_spec
from mini.manifolds import MANIFOLDS
from mini.train import REPORT_HEADS, TRAIN_OBJECTIVES, HeadReport, TrainConfig, train_and_measure


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

    def add(label, ref, fn):
        lines.append(_row(label, [ref, *(fn(r) for r in reports)]))

    add("orbit spread z / h", f"{paper.E4['spread'].factor:.4g}x", lambda r: f"{r.compression:.3g}x")
    add("  untrained head", f"{paper.COMPRESSION_UNTRAINED:.2f}x", lambda r: f"{r.compression_untrained:.3g}x")
    add("sweep spread z / h (1/8 period)", "n/a", lambda r: f"{r.sweep_compression:.3g}x")
    add("kappa h / z", f"{paper.E4['kappa'].factor:.4g}x", lambda r: f"{r.h.kappa.mean / r.z.kappa.mean:.3g}x")
    add("D_intra z / h", f"{paper.E4['d_intra'].factor:.4g}x", lambda r: f"{r.z.d_intra.mean / r.h.d_intra.mean:.3g}x")
    add("D_inter z / h", f"{paper.E4['d_inter'].factor:.4g}x", lambda r: f"{r.z.d_inter.mean / r.h.d_inter.mean:.3g}x")
    add("ratio h / z", f"{paper.E4['ratio'].factor:.4g}x", lambda r: f"{r.h.ratio.mean / r.z.ratio.mean:.3g}x")
    for target, kind, ref in (("aug", "linear", f"{paper.E3_PROBES['linear'].gap:+.2f}"),
                              ("aug", "mlp", f"{paper.E3_PROBES['mlp'].gap:+.2f}"), ("class", "linear", "n/a"),
                              ("class", "mlp", "n/a")):
        add(f"{target} probe {kind}, h - z (points)", ref, lambda r, t=target, k=kind: f"{_probe_gap(r, t, k):+.2f}")
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
    """Train and measure one run per head (``mini.train.train_and_measure``) and format the report."""
    reports = train_and_measure(base, heads, probe_steps, n_probe_per_class)
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
    text = json.dumps(payload, indent=2, default=lambda o: asdict(o) if hasattr(o, "__dataclass_fields__") else str(o))
    atomic_write_text(path, text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mini.reports.train", description=__doc__.splitlines()[0])
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
