"""One validation of a run's whole configuration, at start and on resume.

``check_config(cfg, source)`` refuses, with one line naming the value and the valid range, every
``TrainConfig`` that would train something other than what it says: wrong types, unknown choices,
non-positive sizes, an ``ema`` outside [0, 1), CIFAR at an image size other than 32 (the data is
32 x 32), images larger than ``MAX_IMAGE_SIZE``, a head deeper than ``MAX_HEAD_LAYERS`` or with more than
``MAX_HEAD_PARAMS`` parameters (counted from the spec), a whole model of more than
``scale.runs.budget.MAX_MODEL_PARAMS`` (counted on the meta device), a thread count below 1, more than
``MAX_AUGMENT_WORKERS`` augmentation workers: all before
anything is allocated (the memory a run needs on its device: ``scale.runs.budget``). ``check_log`` does the
same for ``--log`` (a flag or ``log = ...`` in a --config file), which steers the outputs, not the run:
a value outside ``LOG_CHOICES``, or ``tensorboard`` without the package installed.

On resume (``resume_config``), the run's identity is what its checkpoint says:

    config.json must agree with the checkpoint's own copy of the config on every field except
    ``RESUME_CHANGEABLE`` (otherwise the directory mixes two runs: refused, with the differences);
    flags given with --resume that would change the run (``identity``) are refused with their list;
    the safe ones are applied, recorded in config.json and announced:
        --epochs    extend (or shorten, not below the epochs done) the run; the cosine schedule is
                    recomputed over the new total
        --device    continue on another device (numbers then differ in the last bits)
        --threads   another CPU thread count (sums change in the last bits: warned)
    and flags that only steer this invocation (``INVOCATION_FLAGS``: output, logging, measurements,
    data location, DDP timeout) are taken as given. The augmentation path is the one the run was trained
    on: a config saved before the resolved path was recorded gets the path it then stood for
    (``settled_augment_path``), never what ``auto`` would pick on this machine today.
"""

from __future__ import annotations

import argparse
import itertools
import math
from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np

from mini.heads import parse_head_spec
from scale.engine import augment, hooks, methods, read
from scale.engine.augment import AUGMENT_PATHS
from scale.engine.backbones import BACKBONES
from scale.engine.checkpoint import unreadable_reason
from scale.engine.config import TrainConfig
from scale.engine.data import CIFAR, DATASETS, FOLDER_PREFIX
from scale.engine.flags import MAX_IMAGE_SIZE, MAX_THREADS, MAX_WIDTH, SEED_LIMIT
from scale.engine.heads import MAX_LAYERS
from scale.engine.methods import METHODS
from scale.engine.model import default_predictor
from scale.engine.modules import OWN
from scale.engine.optim import OPTIMIZERS, SCHEDULES
from scale.runs.budget import MAX_MODEL_PARAMS, model_parameters
from scale.runs.faults import ConfigError, CorruptFile

MAX_HEAD_LAYERS = MAX_LAYERS  # scale.engine.heads's bound, checked here before anything is built
MAX_HEAD_PARAMS = 200_000_000  # projector + predictor; BYOL's 4096-wide head is ~5e6, E1's gelu3 ~1e7
# the smallest normal float32: a temperature below it makes the logits 1/temperature infinite on the first step
MIN_TEMPERATURE = float(np.finfo(np.float32).tiny)
MAX_AUGMENT_WORKERS = 256  # forked processes; each is also counted in the memory budget (scale.runs.budget)
RESUME_CHANGEABLE = ("epochs", "device", "threads")
INVOCATION_FLAGS = ("resume", "quiet", "track_hessian_every", "probe_images", "orbits", "no_final_measure",
                    "data_dir", "no_download", "ddp_timeout", "overwrite", "log")
LOG_CHOICES = ("none", "tensorboard")  # --log: metrics.jsonl always; tensorboard adds run_dir/tensorboard/


def _choices() -> dict[str, tuple[str, ...]]:
    """Each setting's valid values, read at the call (``augment.register_preset`` adds presets)."""
    return {"dataset": DATASETS, "method": tuple(METHODS), "backbone": (*BACKBONES, OWN), "optimizer": OPTIMIZERS,
            "schedule": SCHEDULES, "augment": augment.PRESETS, "init": ("normal", "collapsed"),
            "precision": ("fp32", "bf16"), "augment_path": AUGMENT_PATHS}


def flag(key: str) -> str:
    return "--" + key.replace("_", "-")


def _type_error(key: str, annotation: str, value: Any) -> str | None:
    """Whether ``value`` fits the dataclass annotation (a string under ``from __future__ import annotations``)."""
    if value is None:
        return None if "None" in annotation else f"{key} must not be null"
    base = annotation.replace(" | None", "").strip()
    ok = {"int": isinstance(value, int) and not isinstance(value, bool),
          "float": isinstance(value, (int, float)) and not isinstance(value, bool),
          "bool": isinstance(value, bool), "str": isinstance(value, str)}.get(base, True)
    return None if ok else f"{key} must be of type {base}, got {value!r}"


def head_parameters(spec: str, d: int, k: int, width: int, bias: bool) -> int:
    """Parameters of an MLP head ``d -> width (x n-1) -> k`` of ``spec``'s ``n`` Linear layers."""
    n = parse_head_spec(spec).n_layers
    dims = [d] + [width] * (n - 1) + [k]
    return sum(a * b + (b if bias else 0) for a, b in itertools.pairwise(dims))


def backbone_dim(cfg: Any) -> int:
    """``z``'s dimension without building the backbone (resnet18: 8 x base width; vit_tiny: model dim)."""
    if cfg.backbone == OWN:  # your own backbone: its recorded output width (scale.engine.modules)
        return int(cfg.modules["backbone"]["out_dim"])
    if cfg.backbone == "resnet18":
        return 8 * (cfg.backbone_width or 64)
    return cfg.backbone_width or 192


def check_config(cfg: Any, source: str = "flags") -> None:
    """Raise ``ConfigError`` naming the first invalid value of a ``TrainConfig``.

    ``source``: ``"flags"`` names values as ``--flag``, otherwise as ``KEY in SOURCE`` (e.g. config.json).
    """

    def name(key: str) -> str:
        return flag(key) if source == "flags" else f"{key} in {source}"

    for f in fields(cfg):
        problem = _type_error(name(f.name), str(f.type), getattr(cfg, f.name))
        if problem:
            raise ConfigError(problem)

    for key, valid in _choices().items():
        v = getattr(cfg, key)
        if key == "dataset":  # a name, or a folder of class folders (checked when it is loaded)
            if v in valid or (v.startswith(FOLDER_PREFIX) and len(v) > len(FOLDER_PREFIX)):
                continue
            valid = (*valid, f"{FOLDER_PREFIX}PATH")
        if v not in valid:
            raise ConfigError(f"{name(key)} {v!r} is not one of: {', '.join(valid)}")
    for key in ("epochs", "batch_size", "head_width", "head_out", "pred_width", "probe_size", "image_size",
                "log_every", "backbone_width", "train_subset", "threads", "augment_workers"):
        v = getattr(cfg, key)
        if v is not None and v < 1:
            raise ConfigError(f"{name(key)} must be a positive integer, got {v}")
    for key in ("head_width", "head_out", "pred_width", "backbone_width"):
        v = getattr(cfg, key)
        if v is not None and v > MAX_WIDTH:
            raise ConfigError(f"{name(key)} {v} is above the supported maximum {MAX_WIDTH}")
    if cfg.image_size > MAX_IMAGE_SIZE:
        raise ConfigError(f"{name('image_size')} {cfg.image_size} is above the supported maximum {MAX_IMAGE_SIZE} "
                          "(every image is held and augmented at this size)")
    if cfg.augment_workers > MAX_AUGMENT_WORKERS:
        raise ConfigError(f"{name('augment_workers')} {cfg.augment_workers} is above {MAX_AUGMENT_WORKERS} (each is a "
                          "forked process of its own memory); use at most one per CPU core")
    if cfg.threads is not None and cfg.threads > MAX_THREADS:
        raise ConfigError(f"{name('threads')} {cfg.threads} is above {MAX_THREADS}")
    if not 0 <= cfg.seed < SEED_LIMIT:
        raise ConfigError(f"{name('seed')} must be in [0, 2**63) (the seeds torch's generators take), got {cfg.seed}")
    for key in ("lr", "temperature"):
        v = getattr(cfg, key)
        if not (0 < v < math.inf):
            raise ConfigError(f"{name(key)} must be a positive finite number, got {v}")
    if cfg.temperature < MIN_TEMPERATURE:
        raise ConfigError(f"{name('temperature')} {cfg.temperature:g} is below {MIN_TEMPERATURE:.3g}: the logits "
                          "(cosines / temperature) would overflow float32 on the first step; the paper uses 0.1-0.5")
    for key in ("momentum", "weight_decay"):
        v = getattr(cfg, key)
        if not (0 <= v < math.inf):
            raise ConfigError(f"{name(key)} must be a finite number >= 0, got {v}")
    if not (0 <= cfg.ema < 1):
        raise ConfigError(f"{name('ema')} must be in [0, 1) (the target network's momentum), got {cfg.ema}")
    if not 0 <= cfg.warmup_epochs <= cfg.epochs:
        raise ConfigError(f"{name('warmup_epochs')} must be between 0 and the epochs ({cfg.epochs}), "
                          f"got {cfg.warmup_epochs}")
    if cfg.dataset in CIFAR and cfg.image_size != 32:
        raise ConfigError(f"{name('image_size')} {cfg.image_size}: {cfg.dataset} images are 32 x 32 "
                          "(only digits and synthetic are resized)")
    if cfg.backbone == "vit_tiny" and (cfg.image_size % 4 or (cfg.backbone_width or 192) % 3):
        raise ConfigError(f"vit_tiny needs {name('image_size')} a multiple of its patch 4 and "
                          f"{name('backbone_width')} a multiple of its 3 heads (got {cfg.image_size}, "
                          f"{cfg.backbone_width or 192})")
    # the official heads (scale.engine.heads): no biases, BatchNorm after every Linear or none
    if cfg.head_style == "paper":
        if cfg.head_bias:
            raise ConfigError(f"{name('head_style')} paper has no biases: {name('head_bias')} must be off")
        if cfg.head_out_bn != cfg.head_bn:
            raise ConfigError(f"{name('head_style')} paper puts BatchNorm after every Linear or after none: "
                              f"{name('head_out_bn')} must equal {name('head_bn')} ({cfg.head_bn})")
    for key in ("backbone", "head", "predictor"):
        record = (cfg.modules or {}).get(key) if getattr(cfg, key) == OWN else {"out_dim": 1}
        if not isinstance(record, dict) or not isinstance(record.get("out_dim"), int) or record["out_dim"] < 1:
            raise ConfigError(f"{name(key)} is {OWN!r} (a module of your own) but {name('modules')} has no record "
                              f"of it with its out_dim")
    # grammar specs only: a part of your own (OWN) was built by your code, its record is in cfg.modules
    specs = [(k, v) for k, v in (("head", cfg.head), ("predictor", cfg.predictor)) if v and v != OWN]
    for key, spec in specs:
        try:
            n = parse_head_spec(spec).n_layers
        except ValueError as exc:
            raise ConfigError(f"{name(key)}: {exc}") from None
        if n > MAX_HEAD_LAYERS:
            raise ConfigError(f"{name(key)} {spec!r} has {n} Linear layers; at most {MAX_HEAD_LAYERS} are supported")
    if cfg.head == OWN:
        return
    d = backbone_dim(cfg)
    total = head_parameters(cfg.head, d, cfg.head_out, cfg.head_width, cfg.head_bias)

    if methods.get(cfg.method).predictor and cfg.predictor != OWN:  # the registry: which methods have one

        spec = cfg.predictor or default_predictor(cfg.head)
        total += head_parameters(spec, cfg.head_out, cfg.head_out, cfg.pred_width, cfg.head_bias)
    if total > MAX_HEAD_PARAMS:
        raise ConfigError(f"the head ({cfg.head}, width {cfg.head_width}, out {cfg.head_out}) would have "
                          f"{total:,} parameters; at most {MAX_HEAD_PARAMS:,} are supported (reduce --head-width, "
                          "--head-out, --pred-width or the depth)")

    if OWN in (cfg.backbone, cfg.head, cfg.predictor):
        return  # a part of your own was built (and sized) by your code: the project's parts are capped above
    whole = model_parameters(cfg)  # counted on the meta device: nothing is allocated
    if whole > MAX_MODEL_PARAMS:
        raise ConfigError(f"the model ({cfg.backbone} of width {cfg.backbone_width or 'default'} with its heads) would "
                          f"have {whole:,} parameters; at most {MAX_MODEL_PARAMS:,} are supported (reduce "
                          f"{name('backbone_width')}, {name('head_width')} or {name('head_out')})")


def check_log(value: str) -> None:
    """``--log``: one of ``LOG_CHOICES``, and ``tensorboard`` only where the package is installed."""
    if value not in LOG_CHOICES:
        raise ConfigError(f"--log {value!r} is not one of: {', '.join(LOG_CHOICES)}")
    if value == "tensorboard":
        try:
            hooks.summary_writer_class()  # through the module: a test injects its recorder there
        except ImportError as exc:
            raise ConfigError(str(exc)) from None


# --------------------------------------------------------------------------------------------
# Resume
# --------------------------------------------------------------------------------------------


def read_config_json(path: Path) -> dict[str, Any]:
    """config.json as a dict, or ``CorruptFile`` saying what is wrong with it (the one bounded reader,
    ``scale.engine.read``: a regular file, its size and nesting bounded)."""

    try:
        return read.read_json(path, dict)
    except read.Unreadable as exc:
        raise CorruptFile(f"{exc}; the run cannot be resumed from it") from None


def read_checkpoint_config(path: Path) -> tuple[dict[str, Any], int]:
    """The config stored inside checkpoint.pt and its epoch (memory-mapped: the tensors are not read; a file
    that is not in torch's zip format is read whole, so that the reason it is refused is the same as for the
    other readers)."""
    import torch

    try:
        try:
            ck = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError as exc:
            if "mmap can only be used" not in str(exc):
                raise
            ck = torch.load(path, map_location="cpu", weights_only=True)
        config, epoch = ck["config"], int(ck["epoch"])
        if not isinstance(config, dict):
            raise TypeError("its config entry is not a dict")
    except OSError as exc:  # permissions, an I/O error: the file may be fine
        raise CorruptFile(f"{path} cannot be read ({exc.strerror or exc}); check its permissions") from None
    except Exception as exc:
        raise CorruptFile(f"{path} is not a readable checkpoint ({unreadable_reason(exc)}); it was left as it is. "
                          "Restore it from a copy, or start the run again with --overwrite") from None
    return config, epoch


def config_from_dict(values: dict[str, Any], source: str) -> Any:
    """A ``TrainConfig`` from a saved dict; unknown or missing keys are refused by name."""

    names = {f.name for f in fields(TrainConfig)}
    unknown = sorted(set(values) - names)
    if unknown:
        raise ConfigError(f"{source} has unknown keys {unknown}; valid keys: {', '.join(sorted(names))}")
    optional = {"threads", "modules"}  # added later; configs saved before them lack them
    missing = sorted(names - set(values) - optional - {"log_every"})
    if missing:
        raise ConfigError(f"{source} lacks the keys {missing}")
    cfg = TrainConfig(**values)
    check_config(cfg, source)
    return cfg


def disagreements(a: dict[str, Any], b: dict[str, Any], ignore: tuple[str, ...] = RESUME_CHANGEABLE) -> list[str]:
    return [f"{k} ({a.get(k)!r} vs {b.get(k)!r})" for k in sorted(set(a) | set(b))
            if k not in ignore and a.get(k) != b.get(k)]


def plan_disagreements(saved: dict[str, Any], planned: dict[str, Any]) -> list[str]:
    """Where a saved run's config is not the planned one (``scale.paper``, ``scale.e4_study`` reusing results):
    every field but where it ran (``device``, ``threads``, the path ``augment_path`` "auto" resolved to) and
    the fields a config saved before they existed lacks."""
    ignore = ("device", "threads", "augment_path", *(k for k in planned if k not in saved))
    return disagreements(saved, planned, ignore)


def given_flags(parser: argparse.ArgumentParser, argv: list[str] | None) -> set[str]:
    """The ``dest`` of every option and positional written on the command line (defaults left out)."""
    actions = [a for a in parser._actions if a.option_strings]
    defaults = [a.default for a in actions]
    try:
        for a in actions:
            a.default = argparse.SUPPRESS
        ns = vars(parser.parse_args(argv))
        # positionals keep their defaults (3.11 checks a suppressed default against choices): None = absent
        return {k for k, v in ns.items() if v is not None or any(a.dest == k for a in actions)}
    finally:
        for a, d in zip(actions, defaults):
            a.default = d


def settled_augment_path(values: dict[str, Any], device: str) -> dict[str, Any]:
    """A saved config with the augmentation path its run used, for configs written before ``scale.run``
    recorded the resolved path: no ``augment_path`` (written before the per-image path existed: every run
    was batched), or ``"auto"`` (which then meant batched on CUDA and under torch.distributed, per image in
    workers on a CPU). A resumed run keeps its random stream of views only on its own path."""
    import torch.distributed as dist

    if values.get("augment_path") not in (None, "auto"):
        return values
    if "augment_path" not in values:
        path = "batched"
    else:
        path = "batched" if not device.startswith("cpu") or dist.is_initialized() else "workers"
    return {**values, "augment_path": path}


def agreeing_config(run_dir: Path, written: dict[str, Any], checkpointed: dict[str, Any], device: str
                    ) -> dict[str, Any]:
    """config.json's values (``written``, the augmentation path settled) once they agree with the checkpoint's
    own copy on every field but ``RESUME_CHANGEABLE``; ``ConfigError`` listing the differences otherwise."""
    saved, checkpointed = (settled_augment_path(c, device) for c in (written, checkpointed))
    diff = disagreements(saved, checkpointed)
    if diff:
        raise ConfigError(f"{run_dir}/config.json disagrees with its checkpoint.pt on {', '.join(diff)}: the directory "
                          "mixes two runs, or config.json was edited; nothing was changed. Start a new run (another "
                          "--run-name, or --overwrite)")
    return saved


def resume_config(run_dir: Path, args: argparse.Namespace, given: set[str], device: str, default_threads: int
                  ) -> tuple[Any, list[str]]:
    """The resumed run's ``TrainConfig`` and the notes to print (module docstring); refuses what would mix runs."""

    written = read_config_json(run_dir / "config.json")
    checkpointed, done = read_checkpoint_config(run_dir / "checkpoint.pt")
    saved = agreeing_config(run_dir, written, checkpointed, device)
    config_names = {f.name for f in fields(TrainConfig)}
    refused = []
    for dest in sorted(given - set(INVOCATION_FLAGS) - set(RESUME_CHANGEABLE)):
        value = getattr(args, dest, None)
        if dest in config_names and saved.get(dest) == value:
            continue  # the same value as the run's: harmless
        if dest == "dataset" and saved.get("dataset") == value:
            continue
        refused.append(flag(dest) if dest != "dataset" else "DATASET")
    if refused:
        raise ConfigError(f"--resume continues the saved run; these flags would change it: {', '.join(refused)}. "
                          f"Only {', '.join(flag(k) for k in RESUME_CHANGEABLE)} (and output/measurement flags) may "
                          "be given with --resume; start a new run for other settings")
    notes = []
    values = dict(saved)
    if written.get("augment_path") != values["augment_path"]:
        notes.append(f"augmentation path {written.get('augment_path', '(not recorded)')} -> {values['augment_path']}, "
                     "the path this run was trained on (now recorded in config.json)")
    if values["device"] != device:
        notes.append(f"device {values['device']} -> {device} (numbers differ in the last bits)")
    values["device"] = device
    saved_threads = values.get("threads")
    threads = args.threads if "threads" in given else (saved_threads or default_threads)
    if threads != saved_threads:
        was = f"the run's {saved_threads}" if saved_threads else "an unrecorded count (a run saved before threads were)"
        notes.append(f"warning: {threads} CPU threads instead of {was}; sums change in the last bits, so the "
                     "resumed run is not bitwise the uninterrupted one")
    values["threads"] = threads
    if "epochs" in given and args.epochs is not None and args.epochs < done:
        raise ConfigError(f"--epochs {args.epochs} is below the {done} epochs this run has already done")
    if "epochs" in given and args.epochs != values["epochs"]:
        notes.append(f"--epochs {values['epochs']} -> {args.epochs} (the cosine schedule spans the new total)")
        values["epochs"] = args.epochs
    cfg = config_from_dict(values, f"{run_dir}/config.json")
    return cfg, notes
