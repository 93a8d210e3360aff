"""Curvature tracking: its cost during training, and Lanczos against the paper's power iteration.

    python -m bench.bench_tracking [--epochs 2] [--method simsiam] [--head swish3]

1. Cost: the same ``scale.run`` training (digits, defaults otherwise) with tracking off and with
   ``--track-hessian-every`` (per epoch, the default cadence), side by side in one process; the
   tracker's own time over the training time of the tracked run, and the wall-time ratio.
2. Accuracy: on toy SimSiam and SimCLR instances of ``scale.crosscheck`` (float64), the error of
   Lanczos and of the 20-step shifted power iteration (float32, as in the paper) against dense
   ``eigvalsh``, relative to the spectral scale.

Results go to ``bench/results/tracking.md`` (written atomically), with the command and versions.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from scale.crosscheck import build_instance
from scale.curvature import EffectiveHessian
from scale.lanczos import lanczos, shifted_power_iteration

OUT = Path(__file__).resolve().parent / "results" / "tracking.md"


def training_cost(epochs: int, method: str, head: str) -> dict:
    from scale.run import main as run_main

    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for label, extra in (("off", []), ("per epoch", ["--track-hessian-every"])):
            argv = ["digits", "--head", head, "--method", method, "--epochs", str(epochs), "--quiet",
                    "--out", tmp, "--run-name", label.replace(" ", "_"), *extra]
            t0 = time.perf_counter()
            code = run_main(argv)
            wall = time.perf_counter() - t0
            run_dir = Path(tmp) / label.replace(" ", "_")
            hist = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
            train_s = sum(r["epoch_seconds"] for r in hist)
            track_s = 0.0
            if (run_dir / "curvature_summary.json").is_file():
                track_s = json.loads((run_dir / "curvature_summary.json").read_text())["tracking_seconds"]
            out[label] = {"exit": code, "wall_s": wall, "train_s": train_s, "track_s": track_s}
    return out


def accuracy_table(n_seeds: int) -> list[dict]:
    rows = []
    for objective in ("simsiam", "simclr"):
        for spec in ("gelu3", "swish3", "tanh2", "softplus2"):
            for seed in range(n_seeds):
                inst = build_instance(spec, objective, seed=seed)
                E = EffectiveHessian(torch.as_tensor(inst.Z), inst.scale_head, inst.torch_loss)
                eig = np.linalg.eigvalsh(E.H.dense().numpy())
                scale = float(np.abs(eig).max())
                lz = lanczos(E.H)
                pw = shifted_power_iteration(E.H, 20)
                rows.append({
                    "objective": objective, "head": spec, "seed": seed, "dominant_negative": bool(-eig[0] > eig[-1]),
                    "lanczos_err": abs(lz.lambda_min - eig[0]) / scale, "lanczos_products": lz.n_products,
                    "power_err": abs(pw.lambda_min - eig[0]) / scale, "power_lambda_min": pw.lambda_min,
                    "lambda_min": float(eig[0]), "lambda_max": float(eig[-1]),
                })
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.bench_tracking", description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--method", default="simsiam")
    p.add_argument("--head", default="swish3")
    p.add_argument("--seeds", type=int, default=4, help="toy instances per head and objective")
    args = p.parse_args(argv)
    cost = training_cost(args.epochs, args.method, args.head)
    rows = accuracy_table(args.seeds)
    on, off = cost["per epoch"], cost["off"]
    lines = [
        "# Curvature tracking: cost and accuracy", "",
        f"`python -m bench.bench_tracking {' '.join(argv if argv is not None else sys.argv[1:])}`  ",
        f"{platform.processor() or platform.machine()}, torch {torch.__version__}, {torch.get_num_threads()} threads; "
        "the machine is shared, so only ratios measured in this one run mean anything.", "",
        f"## Cost (digits, {args.method}, head {args.head}, {args.epochs} epochs, tracking per epoch)", "",
        "| run | exit | training s (epoch sum) | tracking s | wall s |", "|---|---|---|---|---|",
        f"| tracking off | {off['exit']} | {off['train_s']:.1f} | - | {off['wall_s']:.1f} |",
        f"| tracking per epoch | {on['exit']} | {on['train_s']:.1f} | {on['track_s']:.2f} | {on['wall_s']:.1f} |",
        "",
        f"Tracking time / training time of the tracked run: **{100 * on['track_s'] / on['train_s']:.1f} %** "
        f"(goal: at most 3 %). Wall-time ratio on/off: {on['wall_s'] / off['wall_s']:.3f}.", "",
        "## lambda_min: Lanczos against the paper's 20-step shifted power iteration", "",
        "Toy instances of `scale.crosscheck` (n=6, d=4, k=3, float64 operators; the power iteration in float32 "
        "as in the paper). Errors are |estimate - eigvalsh| / max|lambda|.", "",
        "| objective | instances | dominant eigenvalue negative | Lanczos max error | power max error | "
        "power median error | power error, dominant negative (median) |", "|---|---|---|---|---|---|---|",
    ]
    for objective in ("simsiam", "simclr"):
        rs = [r for r in rows if r["objective"] == objective]
        neg = [r["power_err"] for r in rs if r["dominant_negative"]]
        lines.append(
            f"| {objective} | {len(rs)} | {len(neg)} | {max(r['lanczos_err'] for r in rs):.1e} | "
            f"{max(r['power_err'] for r in rs):.2f} | {np.median([r['power_err'] for r in rs]):.2f} | "
            f"{np.median(neg) if neg else float('nan'):.2f} |")
    worst = max(rows, key=lambda r: r["power_err"])
    lines += ["", f"Worst power-iteration case: {worst['head']} x {worst['objective']} seed {worst['seed']}: "
              f"lambda_min {worst['lambda_min']:.4g}, lambda_max {worst['lambda_max']:.4g}, power iteration's "
              f"lambda_min {worst['power_lambda_min']:.4g} (error {worst['power_err']:.2f} x scale).", ""]
    OUT.parent.mkdir(parents=True, exist_ok=True)
    tmp = OUT.with_name(OUT.name + ".tmp")
    tmp.write_text("\n".join(lines))
    tmp.replace(OUT)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
