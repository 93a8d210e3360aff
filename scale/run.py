"""``python -m scale.run DATASET --head SPEC``: one SSL training run, measured and saved.

Every flag left out takes the default of the chosen method (its record in ``scale.engine.methods``: the paper's
settings where it states them, solo-learn's CIFAR recipes elsewhere), then the dataset's adjustments
(``digits``/``synthetic`` are small and run on a CPU); ``--help`` lists them all. The run directory
receives config.json (resolved), metrics.jsonl (one record per epoch), checkpoint.pt (every epoch end
and on Ctrl-C), summary.json and report.md with curves.png. Exit codes (``scale/runs/faults.py``): 0 done,
1 an input file missing, corrupt or unsafe, 2 arguments or configuration refused, 3 non-finite loss,
4 an output could not be written, 5 a distributed peer stopped answering,
130 interrupted by SIGINT or SIGTERM (checkpoint saved; continue with ``--resume RUN_DIR``).

Multi-GPU: ``torchrun --nproc_per_node N -m scale.run ...`` (DDP; ``--batch-size`` is global).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import fields
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from mini.heads import parse_head_spec
from scale.curvature.tracking import HessianTracker
from scale.engine import methods, signals
from scale.engine.augment import AUGMENT_PATHS, PRESETS
from scale.engine.backbones import BACKBONES
from scale.engine.checkpoint import atomic_write_json, unreadable_reason
from scale.engine.data import DATASETS, FOLDER_PREFIX, DataError, load_dataset
from scale.engine.heads import HEAD_STYLES
from scale.engine.hooks import TensorBoardLog
from scale.engine.train import OPTIMIZERS, SCHEDULES, Hook, Interrupted, NonFiniteLoss, TrainConfig, Trainer
from scale.geometry.measure import final_measurement, parse_orbits
from scale.geometry.probes import class_probe
from scale.runs import faults, rundir, validate
from scale.runs.config_file import ConfigFileError, read_config_file
from scale.runs.run_report import command_line, device_name, git_commit, versions, write_outputs
from scale.runs.summary import CurvatureSummary, RunSummary

# Dataset adjustments on top of the method's. digits: 1,347 training images of 16 x 16 on a CPU, so a
# narrower ResNet-18 (base width 16, z 128-d) and a 256-wide head; the whole run takes about 40 s on an idle 2-core CPU.
DATASET_DEFAULTS: dict[str, dict[str, Any]] = {
    "cifar10": dict(image_size=32),
    "cifar100": dict(image_size=32),
    "digits": dict(image_size=16, backbone_width={"resnet18": 16, "vit_tiny": 48}, head_width=256, head_out=128,
                   pred_width=64, batch_size=128, epochs=8, warmup_epochs=0),
    "synthetic": dict(image_size=16, backbone_width={"resnet18": 8, "vit_tiny": 24}, head_width=32, head_out=16,
                      pred_width=8, batch_size=32, epochs=2, warmup_epochs=0, probe_size=64),
    "folder": dict(image_size=32),  # folder:PATH, your own images: CIFAR's size unless --image-size says otherwise
}


_TORCH_THREADS = torch.get_num_threads()  # torch's own default (physical cores, or OMP_NUM_THREADS), at import


class ArgError(ValueError):
    pass


class OneLineParser(argparse.ArgumentParser):
    """argparse that reports a bad argument as one line (no usage dump) and exits with code 2."""

    def error(self, message: str):
        print(f"scale.run: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def _defaults_table() -> str:
    rows = ["per-method defaults (CIFAR; flags override):"]
    for m, method in methods.METHODS.items():
        d, src = {**TrainConfig().to_dict(), **method.recipe}, method.recipe_source or "TrainConfig defaults"
        rows.append(
            f"  {m:8s} aug {d['augment']}, {d['optimizer']} lr {d['lr']:g} wd {d['weight_decay']:g}, batch "
            f"{d['batch_size']}, {d['epochs']} epochs, warmup {d['warmup_epochs']}, head {d['head_width']}->"
            f"{d['head_out']} bias {d['head_bias']} BN {d['head_bn']} out-BN {d['head_out_bn']} style "
            f"{d.get('head_style', 'grammar')}"
            + (f", predictor width {d['pred_width']}" if method.predictor else "") + f"  [{src}]"
        )
    for m, method in methods.METHODS.items():
        for dataset, d in method.dataset_recipe.items():
            changes = ", ".join(f"{k} {v}" for k, v in d.items())
            rows.append(f"  {m} on {dataset}: {changes}  [{method.recipe_source}]")
    rows.append("  simclr temperature 0.1; byol target momentum 0.99 -> 1.")
    rows.append("dataset adjustments:")
    for name, d in DATASET_DEFAULTS.items():
        rows.append("  " + name + ": " + ", ".join(f"{k} {v}" for k, v in d.items()))
    rows.append("precision: bf16 autocast on CUDA, fp32 on CPU. Exit codes: 0 ok, 1 input file missing/corrupt/"
                "unsafe, 2 arguments or configuration refused, 3 non-finite loss, 4 output not writable, "
                "5 distributed peer lost, 130 interrupted (SIGINT or SIGTERM; checkpoint saved).")
    return "\n".join(rows)


def _dataset_arg(text: str) -> str:
    if text in DATASETS or (text.startswith(FOLDER_PREFIX) and len(text) > len(FOLDER_PREFIX)):
        return text
    raise argparse.ArgumentTypeError(f"unknown dataset {text!r}; valid: {', '.join(DATASETS)}, {FOLDER_PREFIX}PATH")


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="python -m scale.run",
        description="Train a backbone + projection head with an SSL objective; save metrics, checkpoint and "
        "report; print a linear probe of backbone z versus head h on the class labels.",
        epilog=_defaults_table(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("dataset", nargs="?", type=_dataset_arg, help="one of " + ", ".join(DATASETS)
                   + " (synthetic: unit tests only), or folder:PATH (class sub-folders of PNG/JPEG images)")
    p.add_argument("--head", default="gelu3", help="projector spec of the shared grammar: 'linear' or '<act><n>', "
                   "act in relu/gelu/swish/tanh/softplus, n >= 2 Linear layers (default: gelu3)")
    p.add_argument("--method", choices=methods.names(), default="simclr", help="SSL objective (default: simclr)")
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
    p.add_argument("--augment-path", choices=AUGMENT_PATHS, help="where views are drawn: batched (kornia, in the "
                   "training process), workers (per image, PIL, in worker processes); auto: batched on CUDA and under "
                   "torchrun, on a CPU workers when --threads leaves them an idle core and batched otherwise "
                   "(the faster path measured on a CPU, BENCHMARKS.md); the resolved path is saved in config.json "
                   "(default: auto)")
    p.add_argument("--augment-workers", type=int, help="worker processes of the per-image path (default: 1)")
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
    p.add_argument("--config", metavar="FILE.toml", help="a recipe: TOML keys are these flags (lr = 0.05, "
                   "head-bn = true) and dataset; flags on the command line override it (examples: configs/)")
    p.add_argument("--resume", metavar="RUN_DIR", help="continue the run saved in RUN_DIR (its config is used; "
                   "only --epochs, --device, --threads and output/measurement flags may be given with it)")
    p.add_argument("--overwrite", action="store_true", help="start a new run in a run directory that already "
                   "holds one, deleting the old run's files (default: refused)")
    p.add_argument("--threads", type=int, help="CPU threads for torch (default: torch's own default, "
                   f"{_TORCH_THREADS} here); saved in the config and reused on resume")
    p.add_argument("--ddp-timeout", type=float, default=600.0, help="seconds a rank waits for the others under "
                   "torchrun before it stops with exit code 5 (default: 600)")
    p.add_argument("--quiet", action="store_true", help="no progress bar and no per-epoch lines")
    p.add_argument("--log", default="none", metavar="|".join(validate.LOG_CHOICES), help="tensorboard: also write "
                   "metrics.jsonl's scalars and the curvature records to RUN_DIR/tensorboard/ (the tensorboard "
                   "extra: pip install -e '.[tensorboard]'; give it again with --resume) (default: none)")
    p.add_argument("--orbits", default="5x3", help="end-of-run orbit geometry (E4): CLASSESxIMAGES of the test "
                   "split, 12 rotations each (default: 5x3, the paper's 15 orbits)")
    p.add_argument("--probe-images", type=int, default=10_000, help="end-of-run probes (E3): at most this many "
                   "training and this many test images, x 4 rotations (default: 10000)")
    p.add_argument("--no-final-measure", action="store_true", help="skip the end-of-run geometry and probes")
    return p


def resolve_config(args: argparse.Namespace, device: torch.device) -> TrainConfig:
    """Flags > the method's per-dataset recipe > dataset adjustments > method defaults > TrainConfig defaults."""
    if args.dataset is None:
        raise ArgError("a DATASET is required (one of: " + ", ".join(DATASETS) + ")")
    try:
        parse_head_spec(args.head)
        if args.predictor:
            parse_head_spec(args.predictor)
    except ValueError as exc:
        raise ArgError(str(exc)) from None
    values: dict[str, Any] = dict(methods.get(args.method).recipe)
    for key, v in DATASET_DEFAULTS["folder" if args.dataset.startswith(FOLDER_PREFIX) else args.dataset].items():
        values[key] = v[args.backbone] if isinstance(v, dict) else v
    values.update(methods.get(args.method).dataset_recipe.get(args.dataset, {}))
    names = {f.name for f in fields(TrainConfig)}
    for key in names:
        v = getattr(args, key, None)
        if v is not None:
            values[key] = v
    if values.get("head_style") == "paper":  # the official heads' defaults; validate.check_config refuses the rest
        if args.head_bias is None:
            values["head_bias"] = False
        if args.head_out_bn is None:
            values["head_out_bn"] = bool(values.get("head_bn", False))
    values.update(dataset=args.dataset, device=str(device),
                  precision=args.precision or ("bf16" if device.type == "cuda" else "fp32"))
    values["threads"] = _TORCH_THREADS if args.threads is None else args.threads
    cfg = TrainConfig(**{k: v for k, v in values.items() if k in names})
    validate.check_config(cfg)  # the one validation of the whole config (scale/runs/validate.py)
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


def _setup_distributed(device_flag: str, timeout: float) -> int | None:
    """Initialise torch.distributed under torchrun; returns the local rank (None when single-process)."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return None
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    cuda = device_flag != "cpu" and torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(local_rank)
    dist.init_process_group(backend="nccl" if cuda else "gloo", timeout=timedelta(seconds=timeout))
    return local_rank


def _run_dir(args: argparse.Namespace, cfg: TrainConfig) -> Path:
    dataset = f"folder-{Path(cfg.dataset[len(FOLDER_PREFIX):]).name}" if cfg.dataset.startswith(FOLDER_PREFIX) \
        else cfg.dataset
    name = rundir.check_run_name(args.run_name) if args.run_name is not None else (
        f"{dataset}-{cfg.method}-{cfg.head}-{cfg.backbone}-s{cfg.seed}-{time.strftime('%Y%m%d-%H%M%S')}"
    )
    return Path(args.out) / name


def hessian_tracker(every: str, run_dir: Path, log) -> HessianTracker:
    """``--track-hessian-every`` as a tracker hook (an ``ArgError`` names a bad value)."""
    try:
        cadence: int | str = "epoch" if every == "epoch" else int(every)
        return HessianTracker(cadence, run_dir=run_dir, log=log)
    except ValueError as exc:
        raise ArgError(f"--track-hessian-every {every!r}: expected a positive number of steps or 'epoch'") from exc


def _load_data(cfg: TrainConfig, args: argparse.Namespace):
    torch.set_num_threads(cfg.threads or _TORCH_THREADS)
    try:
        return load_dataset(cfg.dataset, args.data_dir, download=not args.no_download,
                            image_size=None if cfg.dataset in ("cifar10", "cifar100") else cfg.image_size)
    except ValueError as exc:
        raise ArgError(str(exc)) from None


@faults.guarded("scale.run")
def main(argv: list[str] | None = None, hooks: list[Hook] | tuple[Hook, ...] = ()) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.config:  # the recipe's values become defaults: flags given on the command line still win
        try:
            if args.resume:
                raise ConfigFileError("--config describes a new run; --resume continues one with its saved config")
            parser.set_defaults(**read_config_file(args.config, parser))
        except ConfigFileError as exc:
            print(f"scale.run: error: {exc}", file=sys.stderr)
            return 2
        args = parser.parse_args(argv)
    t_start = time.perf_counter()
    validate.check_log(args.log)  # before anything is written
    if not 0 < args.ddp_timeout < float("inf"):
        raise faults.ConfigError(f"--ddp-timeout must be a positive number of seconds, got {args.ddp_timeout}")
    local_rank = _setup_distributed(args.device, args.ddp_timeout)
    rank = dist.get_rank() if dist.is_initialized() else 0

    def say(msg: str, err: bool = False) -> None:
        if rank == 0:
            print(msg, file=sys.stderr if err else sys.stdout, flush=True)

    try:
        if args.resume:
            run_dir = Path(args.resume)
            if not (run_dir / "config.json").is_file() or not (run_dir / "checkpoint.pt").is_file():
                raise ArgError(f"--resume {run_dir}: no config.json and checkpoint.pt there (not a run directory)")
            device = select_device(args.device if args.device != "auto" else "auto", local_rank)
            lock = rundir.RunLock(run_dir) if rank == 0 else None  # before reading: no writer can change it
            if lock is not None:
                faults.on_exit(lock.release)
            given = validate.given_flags(parser, argv)
            cfg, notes = validate.resume_config(run_dir, args, given, str(device), _TORCH_THREADS)
            data = _load_data(cfg, args)
        else:
            device = select_device(args.device, local_rank)
            cfg = resolve_config(args, device)
            run_dir = _run_dir(args, cfg)
            data = _load_data(cfg, args)  # before the run directory exists: bad data leaves nothing written
            lock = rundir.RunLock(run_dir) if rank == 0 else None
            if lock is not None:
                faults.on_exit(lock.release)
            notes = [rundir.prepare_new(run_dir, args.overwrite)] if rank == 0 else []
        faults.set_run_dir(run_dir)
        notes += [lock.note if lock else None, rundir.clean_temporaries(run_dir) if rank == 0 else None]
        for note in filter(None, notes):
            say(f"scale.run: {note}", err=True)
        tracker = None
        if args.track_hessian_every is not None and rank == 0:
            tracker = hessian_tracker(args.track_hessian_every, run_dir, None if args.quiet else print)
            hooks = [*hooks, tracker]
        if args.log == "tensorboard" and rank == 0:  # after the tracker: it adds hess_* to the epoch's record
            hooks = [*hooks, TensorBoardLog(run_dir, tracker)]
        try:
            trainer = Trainer(cfg, data, device, run_dir=run_dir, hooks=hooks, progress=not args.quiet,
                              log=None if args.quiet or rank else print)
            cfg = trainer.cfg  # with the augmentation path "auto" stood for here (config.json records it)
        except ValueError as exc:
            raise ArgError(str(exc)) from None
    except ArgError as exc:
        say(f"scale.run: error: {exc}", err=True)
        return 2
    except DataError as exc:
        say(f"scale.run: data error: {exc}", err=True)
        return 1

    if args.resume:
        try:
            trainer.load(run_dir / "checkpoint.pt")
        except (RuntimeError, KeyError, ValueError, TypeError) as exc:
            raise faults.CorruptFile(f"{run_dir}/checkpoint.pt does not fit its config ({unreadable_reason(exc)}); it "
                                     "was left as it is") from None
        say(f"resuming {run_dir} at epoch {trainer.start_epoch + 1}, step {trainer.start_step + 1}")
    if rank == 0:
        run_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_json(run_dir / "config.json", cfg.to_dict())
        if not args.quiet:
            print(f"run directory: {run_dir}", flush=True)
            if not args.resume:
                print(f"augmentation: {cfg.augment} preset, {cfg.augment_path} path ({trainer.augment_why})",
                      flush=True)

    summary = RunSummary(command=command_line(), config=cfg.to_dict(), device=device_name(device),
                         world_size=trainer.world, versions=versions(), git_commit=git_commit())
    status, code = "finished", 0
    try:
        trainer.fit()
    except NonFiniteLoss as exc:
        say(f"scale.run: stopped: {exc}", err=True)
        status, code = "non-finite loss", 3
    except Interrupted as exc:
        say(f"scale.run: {exc} by {signals.received() or 'a stop request'}; checkpoint saved in {run_dir}; "
            f"continue with: python -m scale.run --resume {run_dir}", err=True)
        status, code = "interrupted", 130

    history = trainer.state.history
    if code == 0 and rank == 0:
        t_end = time.perf_counter()
        if not args.quiet:  # announced and timed: on a small dataset it is a tenth of the job or more
            print(f"end-of-run measurement: linear probe of z and h on {len(data.train_x)} training and "
                  f"{len(data.test_x)} test images"
                  + ("" if args.no_final_measure else f", E4 orbit geometry ({args.orbits}), E3 rotation probes (at "
                     f"most {args.probe_images} images per split, 4 rotations)") + " ...", flush=True)
        data_dev = data.to(device)
        summary.class_probe = class_probe(trainer.state.embed, trainer.augment.normalize, data_dev.train_x,
                                          data_dev.train_y, data_dev.test_x, data_dev.test_y, data.classes)
        # E4 orbit geometry and E3 rotation probes (scale/geometry/measure.py, scale/geometry/probes.py)
        if not args.no_final_measure:
            summary.geometry, summary.rotation_probes = final_measurement(trainer, data_dev, run_dir, args.orbits,
                                                                          args.probe_images)
        summary.end_of_run_seconds = time.perf_counter() - t_end
        if not args.quiet:
            print(f"end-of-run measurement done in {summary.end_of_run_seconds:.1f} s", flush=True)
    summary.status, summary.wall_seconds, summary.epochs_done = status, time.perf_counter() - t_start, len(history)
    summary.final = history[-1] if history else None
    if tracker is not None:
        summary.curvature = CurvatureSummary.from_dict(
            {**tracker.summary(), "last": tracker.records[-1] if tracker.records else None})
    if rank == 0:
        write_outputs(run_dir, summary, history)
        if summary.class_probe is not None:
            a = summary.class_probe.accuracy
            print(f"linear probe, the headline ({data.name} class labels, logistic regression; test accuracy): "
                  f"backbone z {a.z:.2f} %  "
                  f"head h {a.h:.2f} %  (z minus h: {-a.gap:+.2f} points)", flush=True)
        if not args.quiet:
            print(f"done in {summary.wall_seconds:.1f} s; report: {run_dir / 'report.md'}", flush=True)
    if dist.is_initialized():
        dist.destroy_process_group()
    return code


if __name__ == "__main__":
    sys.exit(main())
