"""Curvature tracking: its cost during training, and Lanczos against the paper's power iteration.

    python -m bench.bench_tracking [--quick] [--threads 1] [--epochs 3] [--methods simsiam simclr] [--repeats 2]
                                   [--baseline DIR]

Thread count fixed (``--threads``, default 1) for the benchmark process and every ``scale.run`` it starts.
``--quick``: 1 epoch (one measurement per tracked run), 1 off/on pair, no CIFAR-shape section, 1 toy seed (checks
that it runs).

1. Cost on digits: the same ``scale.run`` training with tracking off and with ``--track-hessian-every``
   (per epoch, the default cadence), interleaved off/on in one process; the tracker's own time over
   the training time of the tracked run, the excess over the untracked run, and the wall-time ratio.
2. Cost at a CIFAR epoch's shape: training seconds per image of the CIFAR-sized network (synthetic
   32 x 32 images, ResNet-18 of width 64, the method's CIFAR head) times 50,000, against the seconds
   of one measurement at that state.
``--baseline DIR`` (a checkout of another revision, e.g. ``git worktree add /tmp/base <commit>``): the digits
runs of section 1 alternate between that checkout and this one, each in its own process
(``PYTHONPATH`` set to the checkout), and the two trackers' seconds are compared side by side.

3. Accuracy: on toy SimSiam and SimCLR instances of ``scale.crosscheck`` (float64), the error of
   Lanczos and of the 20-step shifted power iteration (float32, as in the paper) against dense
   ``eigvalsh``, relative to the spectral scale.

Results go to ``bench/results/tracking.md`` (written atomically), with the command and versions.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from bench._util import out_help, result_path, run_header, write_atomic
from scale.crosscheck import build_instance
from scale.curvature.lanczos import lanczos, shifted_power_iteration
from scale.curvature.operators import EffectiveHessian

OUT = Path(__file__).resolve().parent / "results" / "tracking.md"


THREADS = ["--threads", "1"]  # set by main


def _run(argv: list[str]) -> dict:
    """One ``scale.run`` training; its training time (sum of epoch times) and tracking time."""
    from scale.run import main as run_main

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        code = run_main([*argv, *THREADS, "--no-final-measure", "--quiet", "--out", tmp, "--run-name", "r"])
        wall = time.perf_counter() - t0
        run_dir = Path(tmp) / "r"
        hist = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        track_s, paths = 0.0, set()
        if (run_dir / "curvature_summary.json").is_file():
            track_s = json.loads((run_dir / "curvature_summary.json").read_text())["tracking_seconds"]
            paths = {json.loads(line)["path"] for line in (run_dir / "curvature.jsonl").read_text().splitlines()}
    # epoch_seconds times the steps only; a per-epoch measurement runs after them (on_epoch_end)
    return {"exit": code, "wall_s": wall, "train_s": sum(r["epoch_seconds"] for r in hist), "track_s": track_s,
            "epochs": len(hist), "paths": sorted(paths)}


def _run_checkout(tree: Path, argv: list[str]) -> dict:
    """``scale.run`` of the checkout ``tree`` in a fresh process: its tracker's and its training's seconds."""
    import os
    import subprocess

    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": THREADS[1]}
        code = subprocess.run([sys.executable, "-m", "scale.run", *argv, *THREADS, "--no-final-measure", "--quiet",
                               "--out", tmp, "--run-name", "r"], cwd=tree, env=env, capture_output=True).returncode
        run_dir = Path(tmp) / "r"
        hist = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        track_s = json.loads((run_dir / "curvature_summary.json").read_text())["tracking_seconds"]
    return {"exit": code, "train_s": sum(r["epoch_seconds"] for r in hist), "track_s": track_s}


def baseline_cost(baseline: Path, epochs: int, methods: list[str], head: str, repeats: int) -> list[dict]:
    """The same tracked digits run in the baseline checkout and in this one, alternated, each in its own process."""
    here = Path(__file__).resolve().parent.parent
    rows = []
    for method in methods:
        argv = ["digits", "--head", head, "--method", method, "--epochs", str(epochs), "--track-hessian-every"]
        runs: dict[str, list[dict]] = {"baseline": [], "this": []}
        for _ in range(repeats):
            for label, tree in (("baseline", baseline), ("this", here)):
                runs[label].append(_run_checkout(tree, argv))
        med = {label: {key: float(np.median([r[key] for r in rs])) for key in ("train_s", "track_s")}
               for label, rs in runs.items()}
        rows.append({"method": method, "exits": sorted({r["exit"] for rs in runs.values() for r in rs}), **{
            f"{label}_{key}": v for label, m in med.items() for key, v in m.items()}})
    return rows


def training_cost(epochs: int, methods: list[str], head: str, repeats: int) -> list[dict]:
    """Digits, tracking off and per epoch, interleaved (off, on, off, on, ...) so that load drifts hit both."""
    rows = []
    for method in methods:
        runs: dict[str, list[dict]] = {"off": [], "on": []}
        for _ in range(repeats):
            for label, extra in (("off", []), ("on", ["--track-hessian-every"])):
                runs[label].append(_run(["digits", "--head", head, "--method", method, "--epochs", str(epochs),
                                         *extra]))
        off_train = float(np.median([r["train_s"] for r in runs["off"]]))
        on_train = float(np.median([r["train_s"] for r in runs["on"]]))
        track = float(np.median([r["track_s"] for r in runs["on"]]))
        rows.append({
            "method": method, "exits": sorted({r["exit"] for r in runs["off"] + runs["on"]}),
            "off_train_s": off_train, "on_train_s": on_train, "track_s": track,
            "per_measurement_s": track / epochs, "paths": runs["on"][0]["paths"],
            "overhead_same_run": track / on_train,
            "overhead_vs_off": (on_train + track - off_train) / off_train,
            "wall_ratio": float(np.median([a["wall_s"] for a in runs["on"]]) /
                                np.median([a["wall_s"] for a in runs["off"]])),
        })
    return rows


def cifar_shape_cost(methods: list[str], head: str, batch: int, steps: int, repeats: int) -> list[dict]:
    """A CIFAR-sized run's shape (32 x 32 images, ResNet-18 of width 64, the method's CIFAR head and
    predictor) on synthetic images: training seconds per image from ``steps`` steps of ``batch``, times
    50,000 images = one epoch; against the seconds of one tracker measurement at that state."""
    from scale.curvature.tracking import HessianTracker
    from scale.engine.config import TrainConfig
    from scale.engine.data import load_dataset
    from scale.engine.hooks import Hook
    from scale.engine.train import Trainer

    class Keep(Hook):
        def on_epoch_end(self, state):
            self.state = state

    rows = []
    for method in methods:
        cfg = TrainConfig.resolve("synthetic", method, device="cpu", head=head, image_size=32, backbone_width=64,
                                  batch_size=batch, train_subset=batch * steps, epochs=1,
                                  threads=torch.get_num_threads())
        from scale.engine.methods import get as method_record  # the CIFAR head and predictor widths, not synthetic's
        for key in ("head_width", "head_out", "pred_width", "head_bn", "head_out_bn", "head_bias"):
            setattr(cfg, key, method_record(method).recipe[key])
        keep, tracker = Keep(), HessianTracker("epoch")
        trainer = Trainer(cfg, load_dataset("synthetic", image_size=32), torch.device("cpu"), hooks=[keep, tracker],
                          log=None)
        trainer.fit()
        hist = trainer.state.history[-1]
        per_image = hist["epoch_seconds"] / (batch * steps)
        times = [tracker.records[0]["seconds"]]  # the run's first measurement (pays one-off warm-up)
        for _ in range(repeats - 1):  # every measurement starts cold (``measure``)
            times.append(tracker.track(keep.state)["seconds"])
        r = tracker.records[-1]
        other = {"factored": "closed-form", "closed-form": "factored"}.get(r["path"])
        other_s = None
        # the operator route not taken, once, cold: what the rule (scale.curvature.closed_form.operator_route) saved
        if other:
            tracker.path = other
            other_s = tracker.track(keep.state)["seconds"]
            tracker.path = "auto"
        rows.append({
            "method": method, "d": r["N"] // r["probe_rows"], "head": f"{head} {cfg.head_width}/{cfg.head_out}",
            "probe_rows": r["probe_rows"], "N": r["N"], "path": r["path"], "n_iter": r["n_iter"],
            "per_image_s": per_image, "epoch_s": per_image * 50_000, "first_s": times[0],
            "median_s": float(np.median(times[1:] if len(times) > 1 else times)), "other": other, "other_s": other_s,
        })
    return rows


def _revision(tree: Path) -> str:
    import subprocess

    out = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True)
    return out.stdout.strip() or "unknown"


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
    p.add_argument("--epochs", type=int, default=3, help="digits epochs per run (default: 3)")
    p.add_argument("--methods", nargs="+", default=["simsiam", "simclr"])
    p.add_argument("--head", default="swish3")
    p.add_argument("--repeats", type=int, default=2, help="interleaved off/on pairs per method (default: 2)")
    p.add_argument("--cifar-batch", type=int, default=64, help="batch of the CIFAR-shape timing (default: 64)")
    p.add_argument("--cifar-steps", type=int, default=2, help="steps of the CIFAR-shape timing (default: 2)")
    p.add_argument("--seeds", type=int, default=4, help="toy instances per head and objective")
    p.add_argument("--threads", type=int, default=1, help="torch threads, fixed, here and in every run (default: 1)")
    p.add_argument("--quick", action="store_true", help="1 epoch, 1 pair, no CIFAR shape, 1 seed")
    p.add_argument("--baseline", type=Path, help="a checkout of another revision to compare the digits runs with")
    p.add_argument("--out", help=out_help(OUT))
    args = p.parse_args(argv)
    args.out = str(result_path(args.out, OUT, args.quick))
    if args.quick:
        args.epochs, args.repeats, args.seeds = 1, 1, 1
    torch.set_num_threads(args.threads)
    THREADS[1] = str(args.threads)
    header = run_header("bench.bench_tracking", argv if argv is not None else sys.argv[1:], args.threads)
    digits = training_cost(args.epochs, args.methods, args.head, args.repeats)
    cifar = [] if args.quick else cifar_shape_cost(args.methods, args.head, args.cifar_batch, args.cifar_steps,
                                                   repeats=3)
    rows = accuracy_table(args.seeds)
    base = baseline_cost(args.baseline, args.epochs, args.methods, args.head, args.repeats) if args.baseline else []
    lines = [
        "# Curvature tracking: cost and accuracy", "", header,
        "Only ratios measured side by side in this one run mean anything on a shared machine.", "",
        "Default cadence: once per epoch (`--track-hessian-every` alone), as the paper measures. A measurement "
        "runs after the epoch's steps, so `epoch_seconds` (the steps) and the tracker's own seconds are "
        "separate clocks of the same run.", "",
        f"## Cost on digits ({args.head}, {args.epochs} epochs, per-epoch tracking; median of {args.repeats} "
        "interleaved off/on runs)", "",
        "| method | measurement path | exit codes | training s, off | training s, on | tracking s | "
        "per measurement s | tracking / training (same run) | (training + tracking, on) / training off - 1 | "
        "wall on / off |", "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in digits:
        lines.append(
            f"| {r['method']} | {', '.join(r['paths'])} | {r['exits']} | {r['off_train_s']:.2f} | "
            f"{r['on_train_s']:.2f} | {r['track_s']:.2f} | {r['per_measurement_s']:.3f} | "
            f"**{100 * r['overhead_same_run']:.1f} %** | {100 * r['overhead_vs_off']:+.1f} % | {r['wall_ratio']:.3f} |")
    if base:
        lines += ["", f"Against the revision in `{args.baseline}` (`git -C {args.baseline} rev-parse HEAD`: "
                  f"{_revision(args.baseline)}), the same tracked runs alternated, each in its own process (median of "
                  f"{args.repeats}):", "",
                  "| method | exit codes | tracking s, baseline | tracking s, this | baseline / this | "
                  "training s, baseline | training s, this |", "|---|---|---|---|---|---|---|"]
        lines += [f"| {r['method']} | {r['exits']} | {r['baseline_track_s']:.3f} | {r['this_track_s']:.3f} | "
                  f"**{r['baseline_track_s'] / r['this_track_s']:.2f}x** | {r['baseline_train_s']:.2f} | "
                  f"{r['this_train_s']:.2f} |" for r in base]
    lines += [
        "", "Goal: at most 3 %. " + "; ".join(
            f"{r['method']}: {'met' if r['overhead_same_run'] <= 0.03 else 'NOT met'}" for r in digits)
        + " (tracking / training of the same run).", "",
        "## Cost at a CIFAR epoch's shape (synthetic 32 x 32 images, ResNet-18 width 64, the method's CIFAR head)",
        "",
        f"A CIFAR epoch (50,000 images) is too slow to run on this CPU, so it is estimated: seconds per image from "
        f"{args.cifar_steps} training steps of batch {args.cifar_batch} "
        f"(one epoch of a {args.cifar_steps * args.cifar_batch}-image subset, the first step's warm-up included), "
        "times 50,000. The measurement is timed at the state "
        "after those steps, on the tracker's default probe; the first measurement of a run pays one-off warm-up, "
        "the median is over 2 more at the same state, each started cold (a warm start from the same state "
        "would flatter Lanczos; in training the state moves between measurements).", "",
        "| method | d | head | probe rows | N | path | Lanczos steps | s per image (training) | "
        "epoch s (estimated) | first measurement s | median measurement s | measurement / epoch | "
        "the other operator path, once |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    if not cifar:
        lines.append("| (skipped: --quick) | | | | | | | | | | | | |")
    for r in cifar:
        lines.append(
            f"| {r['method']} | {r['d']} | {r['head']} | {r['probe_rows']} | {r['N']} | {r['path']} | {r['n_iter']} | "
            f"{r['per_image_s']:.4f} | {r['epoch_s']:.0f} | {r['first_s']:.2f} | {r['median_s']:.2f} | "
            f"**{100 * r['median_s'] / r['epoch_s']:.2f} %** | "
            + (f"{r['other']}: {r['other_s']:.2f} s |" if r["other"] else "- |"))
    lines += [
        "", "## lambda_min: Lanczos against the paper's 20-step shifted power iteration", "",
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
    write_atomic(args.out, "\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
