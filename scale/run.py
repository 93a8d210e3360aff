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
from collections.abc import Callable, Sequence
from dataclasses import asdict, fields
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

from mini.heads import parse_head_spec
from scale.curvature.tracking import HessianTracker
from scale.engine import methods, signals
from scale.engine.augment import AUGMENT_PATHS, PRESETS
from scale.engine.backbones import BACKBONES
from scale.engine.checkpoint import unreadable_reason
from scale.engine.config import TrainConfig
from scale.engine.data import CIFAR, DATASETS, FOLDER_PREFIX, load_dataset
from scale.engine.data_errors import DataError
from scale.engine.dataset import Dataset
from scale.engine.devices import device_type
from scale.engine.flags import OneLineParser
from scale.engine.folders import stream_threshold
from scale.engine.heads import HEAD_STYLES
from scale.engine.hooks import Hook, TensorBoardLog
from scale.engine.optim import OPTIMIZERS, SCHEDULES
from scale.engine.recipes import DATASET_DEFAULTS
from scale.engine.train import Interrupted, NonFiniteLoss, Trainer
from scale.geometry.measure import EndOfRun, final_measurement, parse_orbits
from scale.geometry.probes import KNN_PROTOCOL
from scale.monitor.online import OnlineKnn
from scale.runs import budget, faults, rundir, validate
from scale.runs.config_file import ConfigFileError, read_config_file
from scale.runs.run_report import (
    command_line,
    device_name,
    git_commit,
    knn_line,
    probe_line,
    small_test_warning,
    training_lines,
    verdict_line,
    versions,
    write_outputs,
)
from scale.runs.summary import CurvatureSummary, RunSummary

_TORCH_THREADS = torch.get_num_threads()  # torch's own default (physical cores, or OMP_NUM_THREADS), at import


class ArgError(ValueError):
    pass


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
                   "holds one, deleting the old run's files, and only those: a folder that holds anything a run does "
                   "not write is refused, --overwrite or not (default: refused)")
    p.add_argument("--threads", type=int, help="CPU threads for torch (default: torch's own default, "
                   f"{_TORCH_THREADS} here); saved in the config and reused on resume")
    p.add_argument("--ddp-timeout", type=float, default=600.0, help="seconds a rank waits for the others under "
                   "torchrun before it stops with exit code 5 (default: 600)")
    p.add_argument("--quiet", action="store_true", help="no per-step progress (a bar when stderr is a terminal, "
                   "otherwise one line after the first steps with the epoch's estimated length), no per-epoch lines "
                   "and no end-of-run phases; the results are printed either way")
    p.add_argument("--log", default="none", metavar="|".join(validate.LOG_CHOICES), help="tensorboard: also write "
                   "metrics.jsonl's scalars and the curvature records to RUN_DIR/tensorboard/ (the tensorboard "
                   "extra: pip install -e '.[tensorboard]'; give it again with --resume) (default: none)")
    p.add_argument("--orbits", default="5x3", help="end-of-run orbit geometry (E4): CLASSESxIMAGES of the test "
                   "split, 12 rotations each (default: 5x3, the paper's 15 orbits)")
    p.add_argument("--probe-images", type=int, default=None, help="end-of-run rotation probes (E3): at most this "
                   "many training and this many test images, x 4 rotations (default: a quarter of the images the "
                   "training stepped through, between 256 and the paper's 10000, so that the probes cost at most a "
                   "third of the training's forward passes: scale.geometry.measure.probe_budget)")
    p.add_argument("--no-final-measure", action="store_true", help="skip the end-of-run geometry and rotation "
                   "probes (the headline class probe still runs)")
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
    names = {f.name for f in fields(TrainConfig)} - {"dataset", "method", "backbone", "device"}
    given = {key: getattr(args, key) for key in names if getattr(args, key, None) is not None}
    given["threads"] = _TORCH_THREADS if args.threads is None else args.threads
    cfg = TrainConfig.resolve(args.dataset, args.method, args.backbone, device=device, **given)  # scale.engine.recipes
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
    if device_type(name) == "cpu":
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
                            image_size=None if cfg.dataset in CIFAR else cfg.image_size)
    except ValueError as exc:
        raise ArgError(str(exc)) from None


# --------------------------------------------------------------------------------------------
# A run as a library call: the same run directory from Python
# --------------------------------------------------------------------------------------------


DEFAULT_MEASURE = EndOfRun()  # the paper's measurements after training, the rotation probes' cost bounded


def new_summary(trainer: Trainer, device: torch.device, command: str) -> RunSummary:
    """The provenance part of a run's summary (what ran, where, with which versions)."""
    return RunSummary(command=command, config=trainer.cfg.to_dict(), device=device_name(device),
                      world_size=trainer.world, versions=versions(), git_commit=git_commit())


def record_run(trainer: Trainer, data: Dataset, summary: RunSummary, status: str, t_start: float, *,
               measure: EndOfRun | None = DEFAULT_MEASURE, log: Callable[[str], None] | None = print,
               tracker: HessianTracker | None = None) -> RunSummary:
    """After training (one process): the end-of-run measurement (``measure``; ``None`` skips it) of a run
    whose ``status`` is "finished", the outcome, and summary.json, report.md and curves.png in the
    trainer's run directory (when it has one)."""
    history = trainer.state.history
    if status == "finished" and measure is not None:
        res = final_measurement(trainer, data.to(trainer.device), trainer.run_dir, measure, log)
        summary.class_probe, summary.geometry, summary.rotation_probes = res.class_probe, res.geometry, \
            res.rotation_probes
        summary.training = res.training
        summary.notes += res.notes
        if res.class_probe is not None and (warn := small_test_warning(res.class_probe.test_images)):
            summary.notes.append(f"headline probe: {warn}")
        summary.end_of_run_seconds = res.seconds
    summary.status, summary.wall_seconds, summary.epochs_done = status, time.perf_counter() - t_start, len(history)
    summary.final = history[-1] if history else None
    if tracker is not None:
        summary.curvature = CurvatureSummary.from_dict(
            {**tracker.summary(), "last": tracker.records[-1] if tracker.records else None})
    if trainer.run_dir is not None:
        write_outputs(trainer.run_dir, summary, history)
    return summary


def result_lines(summary: RunSummary, dataset: str) -> list[str]:
    """What a finished run prints: first whether it trained (a warning where it did not), then the headline
    probe (h minus z and the initial backbone, intervals), the verdict, the notes."""
    lines = training_lines(summary.training)
    if summary.class_probe is not None:
        lines.append(f"linear probe, the headline ({dataset} class labels, logistic regression; test accuracy "
                     f"[Wilson 95 %], gaps [paired bootstrap 95 %]): {probe_line(summary.class_probe)}")
        if summary.class_probe.knn is not None:
            lines.append(f"kNN probe ({KNN_PROTOCOL}): {knn_line(summary.class_probe)}")
    if summary.geometry is not None and summary.geometry.verdict is not None:
        untrained = summary.training is not None and summary.training.learned is False
        lines.append(verdict_line(summary.geometry.verdict, untrained))
    return lines + [f"note: {note}" for note in summary.notes]


class EndOfRunDataError(DataError):
    """The data failed in the end-of-run measurement (training finished; its checkpoint stands)."""


def train(cfg: TrainConfig, data: Dataset, run_dir: str | Path | None = None, *,
          device: str | torch.device | None = None, backbone: nn.Module | str | None = None,
          head: nn.Module | str | None = None, predictor: nn.Module | str | None = None, hooks: Sequence[Hook] = (),
          measure: EndOfRun | None = DEFAULT_MEASURE, resume: bool = False, progress: bool = True,
          log: Callable[[str], None] | None = print, tracker: HessianTracker | None = None,
          overwrite: bool = False, command: str = "scale.train (Python)", tensorboard: bool = False,
          rank: int = 0, world: int = 1, lock: rundir.RunLock | None = None,
          results: Callable[[str], None] | str | None = "log",
          on_ready: Callable[[Trainer, list[str]], None] | None = None) -> RunSummary:
    """One run as ``python -m scale.run`` makes it (its ``main`` parses the flags and calls this), with your
    modules and data: ``Trainer.fit`` (``backbone``, ``head``, ``predictor``: modules or ``module:callable``
    specs, recorded in config.json), then the end-of-run measurement (``scale.geometry.measure.EndOfRun``: the
    headline probe, E4 orbits with the verdict, E3 rotation probes), and in ``run_dir`` the files of a CLI run:
    config.json, metrics.jsonl, checkpoint.pt, summary.json, report.md, curves.png, orbits.npz. ``python -m
    scale.analyze``, ``python -m scale.export`` and ``scale.load_run`` read it (with ``--backbone``/``backbone=``
    for your own modules). The directory is locked while the run writes and a new run refuses one that holds a
    run (``resume=True`` continues it from its checkpoint; ``overwrite=True`` deletes a run's files there first, as
    ``--overwrite`` does). A non-finite loss or an interruption raises ``NonFiniteLoss`` / ``Interrupted`` after
    the summary records it (``EndOfRunDataError`` when the data fails in the measurement after training).
    ``progress``: a per-step bar when stderr is a terminal, otherwise one line through ``log`` after the first
    steps. ``tracker``: a ``HessianTracker``, run as a hook and summarised (E2); ``tensorboard``: the epoch
    records (the tracker's too) as TensorBoard scalars in ``run_dir``; ``command``: what the summary records as the
    run's command. ``cfg``: e.g. ``TrainConfig.resolve``.

    Under torchrun (``rank``, ``world``): only rank 0 locks, clears, tracks, logs and records. ``lock``: the run
    directory's lock when the caller took it already (``--resume`` locks before it reads the saved config).
    ``results``: where the result lines go (``"log"``: through ``log``); ``on_ready(trainer, notes)``: called once the
    run stands ready to train (removal applied, checkpoint loaded), with the run directory's notes (a takeover of
    its lock, what was removed or cleaned)."""
    t_start = time.perf_counter()
    device = torch.device(device if device is not None else cfg.device)
    budget.check_memory(cfg, device, world)  # before anything is written
    lead = rank == 0
    if lock is None and run_dir is not None and lead:
        lock = rundir.RunLock(run_dir)
    try:
        removal = rundir.prepare_new(Path(run_dir), overwrite) if run_dir is not None and not resume and lead \
            else None
        extra = [tracker] if tracker is not None else []
        if tensorboard and lead and run_dir is not None:  # after the tracker: it adds hess_* to the epoch's record
            extra.append(TensorBoardLog(Path(run_dir), tracker))
        try:
            trainer = Trainer(cfg, data, device, run_dir, [*hooks, *extra], progress, log if lead else None,
                              backbone=backbone, head=head, predictor=predictor)
        except ValueError as exc:
            raise ArgError(str(exc)) from None
        notes = [lock.note if lock is not None else None]
        if lead and run_dir is not None:  # the old run's files go once every check of the new run has passed
            notes += [rundir.apply_removal(Path(run_dir), removal) if removal is not None else None,
                      rundir.clean_temporaries(Path(run_dir))]
        if resume and trainer.checkpoint_path is not None and trainer.checkpoint_path.is_file():
            try:
                trainer.load(trainer.checkpoint_path)
            except (RuntimeError, KeyError, ValueError, TypeError) as exc:
                raise faults.CorruptFile(f"{trainer.checkpoint_path} does not fit its config "
                                         f"({unreadable_reason(exc)}); it was left as it is") from None
        if on_ready is not None:
            on_ready(trainer, [n for n in notes if n])
        summary = new_summary(trainer, device, command)
        summary.measure = asdict(measure) if measure is not None else None
        status: str = "finished"
        try:
            trainer.fit()
        except NonFiniteLoss:
            status = "non-finite loss"
            raise
        except Interrupted:
            status = "interrupted"
            raise
        except DataError:  # a streamed file gone or corrupt since it was listed
            status = "data error"
            raise
        finally:
            if lead and status != "finished":
                record_run(trainer, data, summary, status, t_start, measure=None, tracker=tracker)
        if lead:
            try:
                record_run(trainer, data, summary, "finished", t_start, measure=measure, log=log, tracker=tracker)
            except DataError as exc:  # the end-of-run measurement reads a streamed split again
                raise EndOfRunDataError(str(exc)) from exc
    finally:
        if lock is not None:
            lock.release()
    say = log if results == "log" else results
    if lead and callable(say):
        for line in result_lines(summary, data.name):
            say(line)
    return summary


def data_notes(data: Dataset) -> list[str]:
    """What a run says about data kept in an unusual way: streamed from disk, or without labels."""
    notes = []
    if data.streamed:
        size = len(data.train_x) * 3 * data.image_size ** 2
        notes.append(f"{len(data.train_x)} training images decoded from disk as training reads them, in "
                     f"{data.train_x.workers} worker process(es) ({size / 2**30:.2f} GiB decoded, above "
                     f"{stream_threshold() / 2**30:.2f} GiB: scale.engine.folders.folder_dataset)")
    if not data.labelled:
        notes.append("images without labels: the class probe is skipped; the orbit geometry (each image its own "
                     "class) and the rotation probes are measured")
    return notes


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
    validate.check_log(args.log)  # before anything is written
    if not 0 < args.ddp_timeout < float("inf"):
        raise faults.ConfigError(f"--ddp-timeout must be a positive number of seconds, got {args.ddp_timeout}")
    local_rank = _setup_distributed(args.device, args.ddp_timeout)
    rank, world = (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)

    def say(msg: str, err: bool = False) -> None:
        if rank == 0:
            print(msg, file=sys.stderr if err else sys.stdout, flush=True)

    try:
        lock = None
        if args.resume:
            run_dir = Path(args.resume)
            rundir.check_resumable(run_dir)
            device = select_device(args.device if args.device != "auto" else "auto", local_rank)
            lock = rundir.RunLock(run_dir) if rank == 0 else None  # before reading: no writer can change it
            if lock is not None:
                faults.on_exit(lock.release)
            given = validate.given_flags(parser, argv)
            cfg, notes = validate.resume_config(run_dir, args, given, str(device), _TORCH_THREADS)
            budget.check_memory(cfg, device, world)
            data = _load_data(cfg, args)
        else:
            device = select_device(args.device, local_rank)
            cfg = resolve_config(args, device)
            budget.check_memory(cfg, device, world)  # before the data or the run directory take any memory
            run_dir = _run_dir(args, cfg)
            data = _load_data(cfg, args)  # before the run directory exists: bad data leaves nothing written
            notes = []
        faults.set_run_dir(run_dir)
        tracker = None
        if args.track_hessian_every is not None and rank == 0:
            tracker = hessian_tracker(args.track_hessian_every, run_dir, None if args.quiet else print)
    except ArgError as exc:
        say(f"scale.run: error: {exc}", err=True)
        return 2
    except DataError as exc:
        say(f"scale.run: data error: {exc}", err=True)
        return 1

    def ready(trainer: Trainer, dir_notes: list[str]) -> None:
        """What a run says before it trains: the run directory's notes, the resume point, the data's notes."""
        for note in [*notes, *dir_notes]:
            say(f"scale.run: {note}", err=True)
        if args.resume:
            say(f"resuming {run_dir} at epoch {trainer.start_epoch + 1}, step {trainer.start_step + 1}")
        for note in data.notes:  # what loading left out is said even with --quiet
            say(f"scale.run: note: {note}", err=True)
        if rank == 0 and not args.quiet:  # config.json is written by Trainer.fit
            print(f"run directory: {run_dir}", flush=True)
            if not args.resume:  # trainer.cfg: with the augmentation path "auto" stood for here
                print(f"augmentation: {trainer.cfg.augment} preset, {trainer.cfg.augment_path} path "
                      f"({trainer.augment_why})", flush=True)
            for line in data_notes(data):
                print(f"data: {line}", flush=True)

    code = 0
    log = None if args.quiet else (lambda line: print(line, flush=True))
    try:
        if rank == 0 and OnlineKnn.applies(data):  # knn_z and loss_chance in every epoch's record and line
            hooks = [*hooks, OnlineKnn(data)]
        summary = train(cfg, data, run_dir, device=device, hooks=hooks, tracker=tracker, resume=bool(args.resume),
                        overwrite=args.overwrite, progress=not args.quiet, log=log,
                        measure=EndOfRun(args.orbits, args.probe_images, geometry=not args.no_final_measure),
                        command=command_line(), tensorboard=args.log == "tensorboard", rank=rank, world=world,
                        lock=lock, results=lambda line: print(line, flush=True), on_ready=ready)
        if rank == 0 and not args.quiet:
            print(f"done in {summary.wall_seconds:.1f} s; report: {run_dir / 'report.md'}", flush=True)
    except ArgError as exc:
        say(f"scale.run: error: {exc}", err=True)
        code = 2
    except NonFiniteLoss as exc:
        say(f"scale.run: stopped: {exc}", err=True)
        code = 3
    except Interrupted as exc:
        say(f"scale.run: {exc} by {signals.received() or 'a stop request'}; checkpoint saved in {run_dir}; "
            f"continue with: python -m scale.run --resume {run_dir}", err=True)
        code = 130
    except EndOfRunDataError as exc:
        say(f"scale.run: data error in the end-of-run measurement: {exc}; {faults.last_checkpoint(run_dir)}",
            err=True)
        code = 1
    except DataError as exc:
        say(f"scale.run: data error: {exc}; {faults.last_checkpoint(run_dir)}", err=True)
        code = 1
    if dist.is_initialized():
        dist.destroy_process_group()
    return code


if __name__ == "__main__":
    sys.exit(main())
