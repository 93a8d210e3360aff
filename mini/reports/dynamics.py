r"""``python -m mini.reports.dynamics``: the Section 4 grid of ``mini.dynamics`` as a table.

Runs ``mini.dynamics.run_grid`` over the chosen slice (head x BatchNorm x init x {gradient flow,
small step, large step} x seeds) and prints the legend (sizes, tolerances, thresholds) and one row
per cell: the paper's columns first (activation, init, condition-number behaviour, ``lambda_min < 0``
epochs, escape), then the measurements behind them. ``--help`` lists the slices.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from mini.dynamics import (
    COND_CLAMP,
    DYNAMICS,
    ESCAPE_STD,
    FLOW_ATOL,
    FLOW_MAX_EVALS,
    FLOW_METHOD,
    FLOW_RTOL,
    HEADS,
    INITS,
    OBJECTIVES,
    Cell,
    Config,
    check_choice,
    loss_objective,
    run_grid,
)
from mini.heads import parse_head_spec
from mini.hessian import NEG_FLOOR


def statuses(c: Cell) -> str:
    """``ok``, or each non-ok status with its count and the last checkpoint time reached."""
    parts = []
    for status in sorted({r.status for r in c.runs} - {"ok"}):
        bad = [r for r in c.runs if r.status == status]
        reached = max(r.snapshots[-1].t for r in bad)
        parts.append(f"{len(bad)} {status} (t<={reached:.3g})")
    return ", ".join(parts) or "ok"


COLUMNS = ("head", "init", "dynamics", "cond", "lmin<0 epochs", "escaped", "t_esc", "std t0->T", "z std x",
           "cond t0->T", "lmin (med)", "|M|/|H|", "head/bb upd", "rho_s", "status")


def _update_ratio(run) -> float:
    """Median head/backbone relative update; a backbone that does not move gives +inf, not a warning."""
    head, backbone = run.series("rel_update_head"), run.series("rel_update_backbone")
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(np.median(np.where(backbone > 0, head / backbone, np.inf)))


def format_row(c: Cell) -> list[str]:
    """One row: the paper's columns first (activation, init, condition-number behaviour, lambda_min < 0
    injected, escape), then the measurements behind them."""
    epochs = len(c.runs[0].cfg.times)
    neg = [r.negative_epochs for r in c.runs]
    decided = [r for r in c.runs if r.status == "ok"]  # stiff or diverged runs decide nothing

    def fmt(x: float, spec: str = ".2g") -> str:
        return "-" if not np.isfinite(x) else format(x, spec)

    first = c.median(lambda r: r.snapshots[0].std if r.snapshots else None)
    last = c.median(lambda r: r.snapshots[-1].std if r.status == "ok" else None)
    cond0 = c.median(lambda r: r.snapshots[0].cond if r.snapshots else None)
    cond1 = c.median(lambda r: r.snapshots[-1].cond if r.status == "ok" else None)
    z_growth = c.median(lambda r: r.snapshots[-1].z_std / r.snapshots[0].z_std if r.status == "ok" else None)
    ratio = c.median(lambda r: _update_ratio(r) if r.snapshots else None)
    lmins = c.median(lambda r: float(np.min(r.series("lambda_min"))) if r.snapshots else None)
    return [
        c.arch.label, c.init, c.dynamics, c.cond_behaviour(), f"{'/'.join(str(v) for v in neg)} of {epochs}",
        f"{sum(r.escaped for r in decided)}/{len(decided)}" if decided else "-",
        fmt(c.median(lambda r: r.escape_time), ".3g"),
        f"{fmt(first)}->{fmt(last)}", fmt(z_growth), f"{fmt(cond0, '.1e')}->{fmt(cond1, '.1e')}",
        fmt(lmins, ".1e"), fmt(c.median(lambda r: float(np.max(r.series("m_ratio"))) if r.snapshots else None), ".1e"),
        fmt(ratio), fmt(c.median(lambda r: r.spearman), "+.2f"), statuses(c),
    ]


def format_table(cells: Sequence[Cell]) -> str:
    rows = [list(COLUMNS), *(format_row(c) for c in cells)]
    widths = [max(len(r[j]) for r in rows) for j in range(len(COLUMNS))]
    lines = ["| " + " | ".join(v.ljust(w) for v, w in zip(r, widths)) + " |" for r in rows]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def premise(objective: str) -> str:
    """Theorem 4.1's premise for the toy's objective, read off ``Objective.hessian_psd``."""
    psd = loss_objective(objective, np.ones((2, 1))).hessian_psd  # a property of the loss, not the data
    return {True: "yes", False: "no (indefinite)", None: "depends on the state"}[psd]


def legend(cfg: Config, seeds: Sequence[int]) -> str:
    name = {"mse": "MSE", "cosine": "negative-cosine"}[cfg.objective]
    return (
        f"SimSiam toy, {name} objective (grad^2_P L PSD, Theorem 4.1's premise: {premise(cfg.objective)}): "
        f"m={cfg.m} per view, d_in={cfg.d_in}, backbone tanh2 width {cfg.backbone_width}, "
        f"d={cfg.d}, projector width {cfg.proj_width} (no bias), k={cfg.k}, predictor width {cfg.pred_width}; "
        f"full batch, horizon t={cfg.horizon:g}, lr small {cfg.lr_small:g}, large {cfg.lr_large:g}; "
        f"flow {FLOW_METHOD} rtol={FLOW_RTOL:g} atol={FLOW_ATOL:g}; {cfg.n_checkpoints} epochs (checkpoints); "
        f"seeds {list(seeds)}.\n"
        f"std = mean per-dim std of L2-normalised projector output (isotropic value 1/sqrt(k) = "
        f"{1 / math.sqrt(cfg.k):.3f}); escaped = final std >= {ESCAPE_STD:g}/sqrt(k) = "
        f"{ESCAPE_STD / math.sqrt(cfg.k):.3f}, counted over the runs that reached the horizon finite ('status' lists "
        f"the others: stiff = the flow spent {FLOW_MAX_EVALS} evaluations first); t_esc = first epoch time at/above "
        f"the threshold (median).\n"
        f"z std x = final/initial ratio of the same std measured on the backbone output z (ok runs).\n"
        f"cond = covariance condition number (lambda_min clamped at {COND_CLAMP:g}), medians over seeds; "
        f"'cond' column: rises/falls if the median final/initial ratio passes 10x.\n"
        f"lmin<0 epochs = epochs with an eigenvalue of H_eff below -{NEG_FLOOR:g} |H_eff| (per seed); lmin = "
        f"median over seeds of the smallest lambda_min seen; |M|/|H| = largest ratio seen; head/bb upd = "
        f"median relative-update ratio (|g|/|w| head over backbone); rho_s = Spearman(std, cond) over epochs."
    )


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mini.reports.dynamics", description=__doc__.splitlines()[0])
    ap.add_argument("--heads", default=",".join(HEADS), help=f"comma list from {', '.join(HEADS)} (any head spec)")
    ap.add_argument("--inits", default="normal,pseudo,collapsed", help=f"comma list from {', '.join(INITS)}")
    ap.add_argument("--dynamics", default=",".join(DYNAMICS), help=f"comma list from {', '.join(DYNAMICS)}")
    ap.add_argument("--bn", default="off,on", help="comma list from off, on")
    ap.add_argument("--objective", default="mse", choices=OBJECTIVES,
                    help="mse (PSD loss Hessian, the theorem's premise; default) or cosine (SimSiam's, indefinite)")
    ap.add_argument("--seeds", type=int, default=3, help="number of seeds (0..n-1), at least 1")
    ap.add_argument("--horizon", type=float, default=Config.horizon)
    ap.add_argument("--progress", action="store_true", help="print a timing line per cell to stderr")
    args = ap.parse_args(argv)

    def split(text: str, valid: Sequence[str] | None, name: str) -> list[str]:
        items = [s.strip() for s in text.split(",") if s.strip()]
        if not items:
            ap.error(f"--{name} is empty")
        try:
            for item in items:
                check_choice(name, item, valid) if valid else parse_head_spec(item)
        except ValueError as err:
            ap.error(str(err))
        return items

    heads = split(args.heads, None, "heads")
    inits = split(args.inits, INITS, "inits")
    dyns = split(args.dynamics, DYNAMICS, "dynamics")
    bns = [b == "on" for b in split(args.bn, ("off", "on"), "bn")]
    if args.seeds < 1:
        ap.error("--seeds must be at least 1")
    if not args.horizon > 0:
        ap.error("--horizon must be positive")
    cfg = replace(Config(), horizon=args.horizon, objective=args.objective)
    seeds = list(range(args.seeds))
    start = time.perf_counter()
    progress = (lambda s: print(s, file=sys.stderr, flush=True)) if args.progress else None
    cells = run_grid(heads, inits, dyns, bns, seeds, cfg, progress)
    print(legend(cfg, seeds))
    print()
    print(format_table(cells))
    print(f"\n{len(cells) * len(seeds)} runs in {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
