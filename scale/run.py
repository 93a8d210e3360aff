"""``python -m scale.run DATASET --head SPEC``: one SSL training run, measured and saved.

Every flag left out takes the default of the chosen method (PAPER.md where it states them, solo-learn's
CIFAR recipes elsewhere), then the dataset's adjustments (``digits``/``synthetic`` are small and run on
a CPU); ``--help`` lists them all. The run directory receives config.json (resolved), metrics.jsonl
(one record per epoch), checkpoint.pt (every epoch end and on Ctrl-C), summary.json and report.md with
curves.png. Exit codes: 0 done, 1 data missing or corrupt, 2 bad arguments, 3 non-finite loss,
130 interrupted (checkpoint saved; continue with ``--resume RUN_DIR``).

Multi-GPU: ``torchrun --nproc_per_node N -m scale.run ...`` (DDP; ``--batch-size`` is global).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import fields
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from mini.heads import parse_head_spec
from scale.augment import PRESETS
from scale.backbones import BACKBONES
from scale.checkpoint import atomic_write_json
from scale.data import DATASETS, DataError, load_dataset
from scale.geometry import append_report, final_measurement, parse_orbits
from scale.heads import HEAD_STYLES
from scale.linprobe import features, linear_probe_accuracy
from scale.run_report import command_line, device_name, git_commit, versions, write_outputs
from scale.tracking import HessianTracker
from scale.train import METHODS, OPTIMIZERS, SCHEDULES, Hook, Interrupted, NonFiniteLoss, TrainConfig, Trainer

# Per-method defaults. simsiam: PAPER.md E1; simclr: PAPER.md E3; byol/vicreg/barlow: solo-learn's CIFAR
# recipes (LARS, warmup 10, 1000 epochs). Schedules: cosine (the paper states none; cosine as in SimSiam).
METHOD_DEFAULTS: dict[str, dict[str, Any]] = {
    "simsiam": dict(augment="e1", optimizer="sgd", lr=0.05, momentum=0.9, weight_decay=0.0, batch_size=512,
                    epochs=50, warmup_epochs=0, head_width=2048, head_out=2048, head_bn=False, head_out_bn=False,
                    head_bias=False, pred_width=512),
    "simclr": dict(augment="e3", optimizer="adam", lr=1e-3, momentum=0.9, weight_decay=0.0, batch_size=512,
                   epochs=50, warmup_epochs=0, head_width=2048, head_out=2048, head_bn=True, head_out_bn=True,
                   head_bias=True, pred_width=512, temperature=0.1),
    # the paper's official E3 code: one-direction InfoNCE, batch 256, its bias-free heads (scale.heads "paper")
    "simclr_paper": dict(augment="e3", optimizer="adam", lr=1e-3, momentum=0.9, weight_decay=0.0, batch_size=256,
                         epochs=50, warmup_epochs=0, head_width=2048, head_out=2048, head_bn=True, head_out_bn=True,
                         head_bias=False, head_style="paper", pred_width=512, temperature=0.1),
    "byol": dict(augment="simclr", optimizer="lars", lr=1.0, momentum=0.9, weight_decay=1e-5, batch_size=256,
                 epochs=1000, warmup_epochs=10, head_width=4096, head_out=256, head_bn=True, head_out_bn=False,
                 head_bias=True, pred_width=4096, ema=0.99),
    "vicreg": dict(augment="simclr", optimizer="lars", lr=0.3, momentum=0.9, weight_decay=1e-4, batch_size=256,
                   epochs=1000, warmup_epochs=10, head_width=2048, head_out=2048, head_bn=True, head_out_bn=False,
                   head_bias=True, pred_width=512),
    "barlow": dict(augment="simclr", optimizer="lars", lr=0.3, momentum=0.9, weight_decay=1e-4, batch_size=256,
                   epochs=1000, warmup_epochs=10, head_width=2048, head_out=2048, head_bn=True, head_out_bn=False,
                   head_bias=True, pred_width=512),
}
# Dataset adjustments on top of the method's. digits: 1,347 training images of 16 x 16 on a CPU, so a
# narrower ResNet-18 (base width 16, z 128-d) and a 256-wide head; the whole run takes about 40 s on an idle 2-core CPU.
DATASET_DEFAULTS: dict[str, dict[str, Any]] = {
    "cifar10": dict(image_size=32),
    "cifar100": dict(image_size=32),
    "digits": dict(image_size=16, backbone_width={"resnet18": 16, "vit_tiny": 48}, head_width=256, head_out=128,
                   pred_width=64, batch_size=128, epochs=8, warmup_epochs=0),
    "synthetic": dict(image_size=16, backbone_width={"resnet18": 8, "vit_tiny": 24}, head_width=32, head_out=16,
                      pred_width=8, batch_size=32, epochs=2, warmup_epochs=0, probe_size=64),
}
METHOD_EPOCH_OVERRIDES = {("cifar100", "simsiam"): 20}  # E1: 20 epochs on CIFAR-100


class ArgError(ValueError):
    pass


class OneLineParser(argparse.ArgumentParser):
    """argparse that reports a bad argument as one line (no usage dump) and exits with code 2."""

    def error(self, message: str):
        print(f"scale.run: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def _defaults_table() -> str:
    rows = ["per-method defaults (CIFAR; flags override):"]
    for m, d in METHOD_DEFAULTS.items():
        src = {"simsiam": "PAPER.md E1", "simclr": "PAPER.md E3",
               "simclr_paper": "the paper's official E3 code"}.get(m, "solo-learn CIFAR recipe")
        rows.append(
            f"  {m:8s} aug {d['augment']}, {d['optimizer']} lr {d['lr']:g} wd {d['weight_decay']:g}, batch "
            f"{d['batch_size']}, {d['epochs']} epochs, warmup {d['warmup_epochs']}, head {d['head_width']}->"
            f"{d['head_out']} bias {d['head_bias']} BN {d['head_bn']} out-BN {d['head_out_bn']} style "
            f"{d.get('head_style', 'grammar')}"
            + (f", predictor width {d['pred_width']}" if m in ("simsiam", "byol") else "") + f"  [{src}]"
        )
    rows.append("  simsiam on cifar100: 20 epochs (E1). simclr temperature 0.1; byol target momentum 0.99 -> 1.")
    rows.append("dataset adjustments:")
    for name, d in DATASET_DEFAULTS.items():
        rows.append("  " + name + ": " + ", ".join(f"{k} {v}" for k, v in d.items()))
    rows.append("precision: bf16 autocast on CUDA, fp32 on CPU. Exit codes: 0 ok, 1 data, 2 arguments, "
                "3 non-finite loss, 130 interrupted.")
    return "\n".join(rows)


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="python -m scale.run",
        description="Train a backbone + projection head with an SSL objective; save metrics, checkpoint and "
        "report; print a linear probe of backbone z versus head h on the class labels.",
        epilog=_defaults_table(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("dataset", nargs="?", choices=DATASETS, help="dataset (synthetic: unit tests only)")
    p.add_argument("--head", default="gelu3", help="projector spec of the shared grammar: 'linear' or '<act><n>', "
                   "act in relu/gelu/swish/tanh/softplus, n >= 2 Linear layers (default: gelu3)")
    p.add_argument("--method", choices=METHODS, default="simclr", help="SSL objective (default: simclr)")
    p.add_argument("--backbone", choices=BACKBONES, default="resnet18", help="default: resnet18 (CIFAR stem)")
    p.add_argument("--backbone-width", type=int, help="resnet18 base channels / vit_tiny model dim "
                   "(default: 64 / 192; digits 16 / 48, synthetic 8 / 24)")
    p.add_argument("--image-size", type=int, help="digits/synthetic image side (default 16); CIFAR is 32")
    p.add_argument("--epochs", type=int, help="default: per method and dataset (see below)")
    p.add_argument("--batch-size", type=int, help="global batch (two views each); default per method")
    p.add_argument("--lr", type=float, help="peak learning rate; default per method")
    p.add_argument("--optimizer", choices=OPTIMIZERS, help="default per method")
    p.add_argument("--momentum", type=float, help="SGD/LARS momentum (default 0.9)")
    p.add_argument("--weight-decay", type=float, help="default per method")
    p.add_argument("--warmup-epochs", type=int, help="linear warmup epochs (default per method)")
    p.add_argument("--schedule", choices=SCHEDULES, default="cosine", help="after warmup (default: cosine)")
    p.add_argument("--head-width", type=int, help="hidden width of the projector (default per method)")
    p.add_argument("--head-out", type=int, help="projector output dim k (default per method)")
    p.add_argument("--head-bn", action=argparse.BooleanOptionalAction, default=None,
                   help="BatchNorm1d after each hidden Linear of projector and predictor (default per method)")
    p.add_argument("--head-out-bn", action=argparse.BooleanOptionalAction, default=None,
                   help="BatchNorm1d on the projector output (default: on for simclr, E3)")
    p.add_argument("--head-bias", action=argparse.BooleanOptionalAction, default=None,
                   help="biases in head Linear layers (default: off for simsiam, E1; on otherwise)")
    p.add_argument("--head-style", choices=HEAD_STYLES, help="grammar: the flags above as given; paper: the official "
                   "code's heads (no biases; with --head-bn, BatchNorm after every Linear, output included; 'linear' "
                   "is two bias-free Linear layers) (default: paper for simclr_paper, grammar otherwise)")
    p.add_argument("--predictor", help="simsiam/byol predictor spec (default: 2 layers, the head's activation)")
    p.add_argument("--pred-width", type=int, help="predictor hidden width (default: 512 simsiam, 4096 byol)")
    p.add_argument("--init", choices=("normal", "collapsed"), default="normal",
                   help="collapsed = pseudo-collapse: projector Linear weights x 0.1 (E1) (default: normal)")
    p.add_argument("--augment", choices=PRESETS, help="augmentation preset (default: e1 simsiam, e3 simclr, "
                   "simclr otherwise)")
    p.add_argument("--temperature", type=float, default=0.1, help="NT-Xent temperature (default: 0.1)")
    p.add_argument("--ema", type=float, default=0.99, help="BYOL base target momentum (default: 0.99)")
    p.add_argument("--seed", type=int, default=0, help="default: 0")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto", help="default: auto")
    p.add_argument("--precision", choices=("fp32", "bf16"), help="default: bf16 on CUDA, fp32 on CPU")
    p.add_argument("--compile", action="store_true", help="torch.compile the model (default: off)")
    p.add_argument("--sync-bn", action="store_true", help="SyncBatchNorm across ranks under torchrun (CUDA)")
    p.add_argument("--track-hessian-every", nargs="?", const="epoch", default=None, metavar="N|epoch",
                   help="track H_eff (lambda_min, lambda_max, negative count, |M|/|H|, condition) on a fixed probe "
                        "every N steps, or once per epoch (the flag alone or 'epoch'); default: off")
    p.add_argument("--probe-size", type=int, help="fixed probe batch for the per-epoch measurements (default 256)")
    p.add_argument("--train-subset", type=int, help="train on the first N images only (quick checks)")
    p.add_argument("--data-dir", help="folder with the CIFAR archive or its extracted folder "
                   "(default: $SCALE_DATA_DIR or ~/.cache/headgeometry/data)")
    p.add_argument("--no-download", action="store_true", help="never try to download CIFAR")
    p.add_argument("--out", default="runs", help="parent folder of run directories (default: runs)")
    p.add_argument("--run-name", help="run directory name (default: dataset-method-head-backbone-sSEED-time)")
    p.add_argument("--resume", metavar="RUN_DIR", help="continue the run saved in RUN_DIR (its config is used)")
    p.add_argument("--threads", type=int, help="CPU threads for torch (default: the cores not already busy "
                   "by the 1-minute load average, at least 1; oversubscribed cores make torch many times slower)")
    p.add_argument("--quiet", action="store_true", help="no progress bar and no per-epoch lines")
    p.add_argument("--orbits", default="5x3", help="end-of-run orbit geometry (E4): CLASSESxIMAGES of the test "
                   "split, 12 rotations each (default: 5x3, the paper's 15 orbits)")
    p.add_argument("--probe-images", type=int, default=10_000, help="end-of-run probes (E3): at most this many "
                   "training and this many test images, x 4 rotations (default: 10000)")
    p.add_argument("--no-final-measure", action="store_true", help="skip the end-of-run geometry and probes")
    return p


def resolve_config(args: argparse.Namespace, device: torch.device) -> TrainConfig:
    """Flags > dataset adjustments > method defaults > TrainConfig defaults."""
    if args.dataset is None:
        raise ArgError("a DATASET is required (one of: " + ", ".join(DATASETS) + ")")
    try:
        parse_head_spec(args.head)
        if args.predictor:
            parse_head_spec(args.predictor)
    except ValueError as exc:
        raise ArgError(str(exc)) from None
    values: dict[str, Any] = dict(METHOD_DEFAULTS[args.method])
    for key, v in DATASET_DEFAULTS[args.dataset].items():
        values[key] = v[args.backbone] if isinstance(v, dict) else v
    if (args.dataset, args.method) in METHOD_EPOCH_OVERRIDES:
        values["epochs"] = METHOD_EPOCH_OVERRIDES[(args.dataset, args.method)]
    names = {f.name for f in fields(TrainConfig)}
    for key in names:
        v = getattr(args, key, None)
        if v is not None:
            values[key] = v
    if values.get("head_style") == "paper":  # bias-free, BatchNorm after every Linear or none (scale.heads)
        if args.head_bias:
            raise ArgError("--head-style paper has no biases; drop --head-bias")
        if args.head_out_bn is not None and args.head_out_bn != values.get("head_bn", False):
            raise ArgError("--head-style paper puts BatchNorm after every Linear or none: set it with --head-bn alone")
        values.update(head_bias=False, head_out_bn=bool(values.get("head_bn", False)))
    values.update(dataset=args.dataset, device=str(device),
                  precision=args.precision or ("bf16" if device.type == "cuda" else "fp32"))
    cfg = TrainConfig(**{k: v for k, v in values.items() if k in names})
    for key in ("epochs", "batch_size", "head_width", "head_out", "pred_width", "probe_size", "image_size"):
        if getattr(cfg, key) is not None and getattr(cfg, key) < 1:
            raise ArgError(f"--{key.replace('_', '-')} must be a positive integer, got {getattr(cfg, key)}")
    for key in ("lr", "temperature"):
        if not (0 < getattr(cfg, key) < float("inf")):
            raise ArgError(f"--{key} must be a positive finite number, got {getattr(cfg, key)}")
    if cfg.warmup_epochs < 0 or cfg.warmup_epochs > cfg.epochs:
        raise ArgError(f"--warmup-epochs must be between 0 and --epochs ({cfg.epochs}), got {cfg.warmup_epochs}")
    try:
        parse_orbits(args.orbits)
    except ValueError as exc:
        raise ArgError(str(exc)) from None
    if args.probe_images is not None and args.probe_images < 2:
        raise ArgError(f"--probe-images must be >= 2, got {args.probe_images}")
    if cfg.train_subset is not None and cfg.train_subset < 1:
        raise ArgError(f"--train-subset must be positive, got {cfg.train_subset}")
    return cfg


def select_device(name: str, local_rank: int | None) -> torch.device:
    if name == "cuda" and not torch.cuda.is_available():
        raise ArgError("--device cuda was asked for but CUDA is not available here (use --device cpu or auto)")
    if name == "cpu" or (name == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    return torch.device("cuda", local_rank or 0)


def _setup_distributed(device_flag: str) -> int | None:
    """Initialise torch.distributed under torchrun; returns the local rank (None when single-process)."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return None
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    cuda = device_flag != "cpu" and torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(local_rank)
    dist.init_process_group(backend="nccl" if cuda else "gloo")
    return local_rank


def _free_cores() -> int:
    cores = os.cpu_count() or 1
    try:
        busy = round(os.getloadavg()[0])
    except OSError:
        busy = 0
    return max(1, min(torch.get_num_threads(), cores - busy))


def _run_dir(args: argparse.Namespace, cfg: TrainConfig) -> Path:
    name = args.run_name or (
        f"{cfg.dataset}-{cfg.method}-{cfg.head}-{cfg.backbone}-s{cfg.seed}-{time.strftime('%Y%m%d-%H%M%S')}"
    )
    return Path(args.out) / name


def hessian_tracker(every: str, run_dir: Path, log) -> HessianTracker:
    """``--track-hessian-every`` as a tracker hook (an ``ArgError`` names a bad value)."""
    try:
        cadence: int | str = "epoch" if every == "epoch" else int(every)
        return HessianTracker(cadence, run_dir=run_dir, log=log)
    except ValueError as exc:
        raise ArgError(f"--track-hessian-every {every!r}: expected a positive number of steps or 'epoch'") from exc


def main(argv: list[str] | None = None, hooks: list[Hook] | tuple[Hook, ...] = ()) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    t_start = time.perf_counter()
    torch.set_num_threads(args.threads or _free_cores())
    local_rank = _setup_distributed(args.device)
    rank = dist.get_rank() if dist.is_initialized() else 0

    def say(msg: str, err: bool = False) -> None:
        if rank == 0:
            print(msg, file=sys.stderr if err else sys.stdout, flush=True)

    try:
        if args.resume:
            run_dir = Path(args.resume)
            if not (run_dir / "config.json").is_file() or not (run_dir / "checkpoint.pt").is_file():
                raise ArgError(f"--resume {run_dir}: no config.json and checkpoint.pt there (not a run directory)")
            saved = json.loads((run_dir / "config.json").read_text())
            if args.dataset not in (None, saved["dataset"]):
                raise ArgError(f"--resume {run_dir} is a {saved['dataset']} run, not {args.dataset}")
            device = select_device(args.device if args.device != "auto" else "auto", local_rank)
            saved["device"] = str(device)
            cfg = TrainConfig(**saved)
        else:
            device = select_device(args.device, local_rank)
            cfg = resolve_config(args, device)
            run_dir = _run_dir(args, cfg)
        try:
            data = load_dataset(cfg.dataset, args.data_dir, download=not args.no_download,
                                image_size=cfg.image_size if cfg.dataset in ("digits", "synthetic") else None)
        except ValueError as exc:
            raise ArgError(str(exc)) from None
        tracker = None
        if args.track_hessian_every is not None and rank == 0:
            tracker = hessian_tracker(args.track_hessian_every, run_dir, None if args.quiet else print)
            hooks = [*hooks, tracker]
        try:
            trainer = Trainer(cfg, data, device, run_dir=run_dir, hooks=hooks, progress=not args.quiet,
                              log=None if args.quiet or rank else print)
        except ValueError as exc:
            raise ArgError(str(exc)) from None
    except ArgError as exc:
        say(f"scale.run: error: {exc}", err=True)
        return 2
    except DataError as exc:
        say(f"scale.run: data error: {exc}", err=True)
        return 1

    if args.resume:
        trainer.load(run_dir / "checkpoint.pt")
        say(f"resuming {run_dir} at epoch {trainer.start_epoch + 1}, step {trainer.start_step + 1}")
    if rank == 0:
        run_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_json(run_dir / "config.json", cfg.to_dict())
        if not args.quiet:
            print(f"run directory: {run_dir}", flush=True)

    summary: dict[str, Any] = {
        "command": command_line(), "config": cfg.to_dict(), "device": device_name(device),
        "world_size": trainer.world, "versions": versions(), "git_commit": git_commit(),
    }
    status, code = "finished", 0
    try:
        trainer.fit()
    except NonFiniteLoss as exc:
        say(f"scale.run: stopped: {exc}", err=True)
        status, code = "non-finite loss", 3
    except Interrupted as exc:
        say(f"scale.run: {exc}; checkpoint saved in {run_dir}; continue with: python -m scale.run --resume {run_dir}",
            err=True)
        status, code = "interrupted", 130

    history = trainer.state.history
    if code == 0 and rank == 0:
        data_dev = data.to(device)
        fn = trainer.state.embed
        ztr, htr = features(fn, data_dev.train_x, trainer.augment.normalize)
        zte, hte = features(fn, data_dev.test_x, trainer.augment.normalize)
        acc_z = linear_probe_accuracy(ztr, data_dev.train_y, zte, data_dev.test_y, data.classes)
        acc_h = linear_probe_accuracy(htr, data_dev.train_y, hte, data_dev.test_y, data.classes)
        summary["linear_probe"] = {"z": acc_z, "h": acc_h, "train_images": len(ztr), "test_images": len(zte)}
        if not args.no_final_measure:  # E4 orbit geometry and E3 probes (scale/geometry.py, scale/probes.py)
            summary.update(final_measurement(trainer, data_dev, run_dir, args.orbits, args.probe_images))
    summary.update(status=status, wall_seconds=time.perf_counter() - t_start, epochs_done=len(history),
                   final=history[-1] if history else None)
    if tracker is not None:
        summary["curvature"] = tracker.summary()
    if rank == 0:
        write_outputs(run_dir, cfg.to_dict(), history, summary)
        if tracker is not None:
            tracker.append_report(run_dir)
        append_report(run_dir, summary)
        if "linear_probe" in summary:
            lp = summary["linear_probe"]
            print(f"linear probe ({data.name} classes, test accuracy): backbone z {100 * lp['z']:.2f} %  "
                  f"head h {100 * lp['h']:.2f} %  (z minus h: {100 * (lp['z'] - lp['h']):+.2f} points)", flush=True)
        if not args.quiet:
            print(f"done in {summary['wall_seconds']:.1f} s; report: {run_dir / 'report.md'}", flush=True)
    if dist.is_initialized():
        dist.destroy_process_group()
    return code


if __name__ == "__main__":
    sys.exit(main())
