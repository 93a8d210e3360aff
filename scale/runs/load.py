"""Finished runs back into Python, and the trained backbone out of them.

    run = load_run("runs/digits-simclr-gelu3-...")    # config, model with weights, metrics, summary
    z, h, _ = run.model(x)                             # x: normalised images (B, 3, S, S)
    export_backbone(run, "backbone.pt")               # a plain state_dict, its architecture beside it
    backbone = load_backbone("backbone.pt")           # the architecture rebuilt, the weights loaded

    # in your own code, without this package's run machinery:
    my_backbone.load_state_dict(torch.load("backbone.pt", weights_only=True))

A run directory (``python -m scale.run``, ``scale.train`` or ``scale.engine.train.Trainer(run_dir=...)``)
holds config.json, checkpoint.pt, metrics.jsonl and, once finished through ``scale.train``, summary.json
and report.md. Checkpoints load with ``torch.load(weights_only=True)``: tensors and plain values, no
pickled code. A run trained with your own modules records them in its config (``modules``; the parts say
``"module"``) and is loaded by passing the same kind of modules again (``backbone=``, ``head=``,
``predictor=``, each a module or a ``module:callable`` spec): the checkpoint holds weights, not code, and a
spec recorded in the config is named, never imported. Without them ``RunError`` says which to pass; a
checkpoint whose keys or shapes do not fit the model raises ``RunError`` naming the first mismatching keys.
The saved config is taken as ``scale.run --resume`` takes it (``scale.runs.validate``): config.json must agree
with the checkpoint's own copy and pass the validation of flags, so an edited or tampered directory is refused
with one line, before anything is built.

``export_backbone`` writes ``OUT`` (the part's ``state_dict``) and ``OUT.json`` (``architecture``: the
project's builder and its arguments, or the record of your own module), from which ``load_backbone``
rebuilds the part; only the project's builders (``BUILDERS``) are ever called from that file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from scale.engine import disk, read
from scale.engine.backbones import build_backbone
from scale.engine.checkpoint import atomic_write_json, load_checkpoint, save_checkpoint, unreadable_reason
from scale.engine.config import TrainConfig
from scale.engine.heads import build_head
from scale.engine.model import SSLModel, default_predictor, output_dim
from scale.engine.modules import (
    OWN,
    ModuleSpecError,
    as_module,
    describe,
    import_recorded,
    missing_modules_message,
    module_record,
)
from scale.runs import faults, validate
from scale.runs.validate import MAX_WIDTH

PARTS: tuple[str, ...] = ("backbone", "projector", "predictor")
CONFIG_PART = {"backbone": "backbone", "projector": "head", "predictor": "predictor"}  # the config's name of a part
BUILDERS = {"build_backbone": build_backbone, "build_head": build_head}  # all load_backbone may call
ARCHITECTURE_FORMAT = 1


class RunError(ValueError):
    """A run directory or checkpoint cannot be read as asked; the message says what is wrong."""


@dataclass
class Run:
    """A run read back: its resolved config, the model with its weights (eval mode, on ``device``),
    one metrics record per finished epoch, and summary.json (``None`` while the run is unfinished)."""

    path: Path
    config: TrainConfig
    model: SSLModel
    metrics: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, Any] | None = None

    @property
    def backbone(self) -> nn.Module:
        return self.model.backbone

    @property
    def head(self) -> nn.Module:
        return self.model.projector


def load_state_dict_checked(module: nn.Module, state: dict[str, torch.Tensor], what: str) -> None:
    """``module.load_state_dict(state)`` strictly, with one readable error for missing, unexpected or
    mis-shaped keys (the first three of each)."""
    check_state_dict(module, state, what)
    module.load_state_dict(state)


def check_state_dict(module: nn.Module, state: dict[str, torch.Tensor], what: str) -> None:
    """``RunError`` naming the missing, unexpected or mis-shaped keys of ``state`` for ``module`` (the first
    three of each); ``module`` may live on the meta device (shapes only, nothing allocated)."""
    own = module.state_dict()
    missing = [k for k in own if k not in state]
    unexpected = [k for k in state if k not in own]
    shapes = [f"{k} {tuple(state[k].shape)} in the checkpoint, {tuple(v.shape)} in the model" for k, v in own.items()
              if k in state and hasattr(state[k], "shape") and tuple(state[k].shape) != tuple(v.shape)]
    if missing or unexpected or shapes:
        parts = []
        for label, keys in (("missing keys", missing), ("unexpected keys", unexpected), ("shape mismatches", shapes)):
            if keys:
                more = f" (+{len(keys) - 3} more)" if len(keys) > 3 else ""
                parts.append(f"{label}: {', '.join(keys[:3])}{more}")
        raise RunError(f"{what} does not match the {type(module).__name__} given: " + "; ".join(parts))


def _read_json(path: Path) -> Any:
    """A JSON object through the one bounded reader (``scale.engine.read``), its failure as one ``RunError`` line."""
    try:
        return read.read_json(path, dict)
    except read.Unreadable as exc:
        raise RunError(str(exc)) from None


def load_run(run_dir: str | Path, *, backbone: nn.Module | None = None, head: nn.Module | str | None = None,
             predictor: nn.Module | None = None, device: str | torch.device = "cpu",
             recorded_modules: bool = False, log: Any = None) -> Run:
    """Read a run directory: config, model with the checkpoint's weights (eval mode), metrics, summary.

    ``backbone``/``head``/``predictor``: modules of the architecture the run was trained with (or
    ``module:callable`` specs that build them), when it was trained with your own modules (their
    weights are replaced by the checkpoint's). ``recorded_modules=True``: your opt-in to import the specs
    the run recorded for the parts not given (``scale.engine.modules.import_recorded``; each named through
    ``log`` as it is imported, and its code runs). A run directory of ``Trainer`` without config.json
    (written before the trainer wrote one) is read from the checkpoint's own config.
    """
    path = Path(run_dir)
    ck, cfg = _checkpoint_and_config(path, device)
    given = {"backbone": backbone, "head": head, "predictor": predictor}
    if recorded_modules:
        given.update(_recorded(cfg, [p for p, m in given.items() if m is None], log, path))
    try:
        model = SSLModel(cfg, **given)
    except ModuleSpecError as exc:
        raise RunError(f"{path}: {exc}") from None
    load_state_dict_checked(model, ck["model"], str(path / "checkpoint.pt"))
    model = model.to(device).eval()
    metrics: list[dict[str, Any]] = []
    if os.path.lexists(path / "metrics.jsonl"):
        try:
            metrics = read.read_jsonl(path / "metrics.jsonl")
        except read.Unreadable as exc:
            raise RunError(str(exc)) from None
    summary = _read_json(path / "summary.json") if os.path.lexists(path / "summary.json") else None
    return Run(path, cfg, model, metrics, summary)


def _recorded(cfg: TrainConfig, parts: list[str], log: Any, path: Path) -> dict[str, nn.Module]:
    """The run's own modules among ``parts``, imported from their recorded specs (the opt-in)."""
    own = [p for p in parts if getattr(cfg, p) == OWN]
    try:
        return import_recorded(cfg.modules, own, log)
    except ModuleSpecError as exc:
        raise RunError(f"{path}: {exc}") from None


def _checkpoint_and_config(path: Path, device: str | torch.device) -> tuple[dict[str, Any], TrainConfig]:
    """A run directory's checkpoint and its checked config (``checked_config``)."""
    ck_path = path / "checkpoint.pt"
    if not ck_path.is_file():
        raise RunError(f"{path} is not a run directory: no checkpoint.pt there")
    try:
        ck = load_checkpoint(ck_path, map_location=device)
    except (OSError, read.Unreadable) as exc:
        if exc.strerror is None:  # a FIFO or device where the checkpoint should be
            raise RunError(str(exc)) from None
        raise RunError(f"{ck_path} cannot be read ({exc.strerror}); check its permissions") from None
    except Exception as exc:  # torch raises several kinds on a truncated or foreign file
        raise RunError(f"{ck_path} is not a readable checkpoint ({unreadable_reason(exc)})") from None
    if not isinstance(ck, dict) or "model" not in ck or not isinstance(ck.get("config"), dict):
        raise RunError(f"{ck_path} is not a scale.run checkpoint (no 'model' and 'config' entries)")
    return ck, checked_config(path, ck["config"], str(torch.device(device)))


def checked_config(path: Path, checkpointed: dict[str, Any], device: str) -> TrainConfig:
    """The run's config as ``scale.run --resume`` takes it (``scale.runs.validate``): config.json (the checkpoint's
    copy where there is none) agreeing with the checkpoint's copy, then validated like flags; ``device`` replaces
    the saved one."""

    has_json = (path / "config.json").is_file()
    try:
        written = validate.read_config_json(path / "config.json") if has_json else checkpointed
        saved = validate.agreeing_config(path, written, checkpointed, device)
        source = str(path / "config.json") if has_json else f"{path / 'checkpoint.pt'}'s config"
        return validate.config_from_dict({**saved, "device": device}, source)
    except faults.RunError as exc:
        raise RunError(str(exc)) from None


def part_state_dict(model: SSLModel, part: str = "backbone") -> dict[str, torch.Tensor]:
    """The ``state_dict`` of one part of the model (``backbone``, ``projector`` or ``predictor``), on the CPU."""
    if part not in PARTS:
        raise RunError(f"unknown part {part!r}; valid: {', '.join(PARTS)}")
    module = getattr(model, part)
    if module is None:
        raise RunError(f"this model has no {part} (only simsiam and byol have a predictor)")
    return {k: v.detach().cpu().clone() for k, v in module.state_dict().items()}


def architecture(config: TrainConfig, model: SSLModel, part: str = "backbone") -> dict[str, Any]:
    """How to rebuild ``part`` of a run's model: ``builder`` (a key of ``BUILDERS``) and its ``arguments``,
    or, for a module of your own, ``builder`` ``None`` and its record under ``module``."""
    if part not in PARTS:
        raise RunError(f"unknown part {part!r}; valid: {', '.join(PARTS)}")
    own = getattr(config, CONFIG_PART[part]) == OWN or CONFIG_PART[part] in model.own
    record = (config.modules or {}).get(CONFIG_PART[part]) or model.own.get(CONFIG_PART[part])
    return _architecture(config, part, record if own else None, model.backbone.out_dim, model.predictor is not None)


def _architecture(config: TrainConfig, part: str, own: dict[str, Any] | None, d: int, has_predictor: bool
                  ) -> dict[str, Any]:
    """``architecture`` from the parts it reads: ``own`` the record of a module of your own (else ``None``),
    ``d`` the backbone's output width."""
    out: dict[str, Any] = {"format": ARCHITECTURE_FORMAT, "part": part, "builder": None, "arguments": None,
                           "module": own}
    if own is not None:
        pass  # your own module: rebuilt by you (load_backbone's module=)
    elif part == "backbone":
        out.update(builder="build_backbone", arguments={"name": config.backbone, "image_size": config.image_size,
                                                        "width": config.backbone_width})
    elif part == "projector":
        out.update(builder="build_head", arguments={
            "spec": config.head, "d": d, "k": config.head_out, "width": config.head_width, "bias": config.head_bias,
            "batchnorm": config.head_bn, "out_batchnorm": config.head_out_bn, "style": config.head_style})
    elif not has_predictor:
        raise RunError("this model has no predictor (only simsiam and byol have one)")
    else:  # as SSLModel builds it: k -> pred_width -> k, the projector's bias, BatchNorm and style
        k = config.head_out
        out.update(builder="build_head", arguments={
            "spec": config.predictor or default_predictor(config.head), "d": k, "k": k, "width": config.pred_width,
            "bias": config.head_bias, "batchnorm": config.head_bn, "style": config.head_style})
    return out


def architecture_path(out: str | Path) -> Path:
    """Where ``export_backbone`` puts the architecture of ``out``: ``out`` + ``.json``."""
    return Path(f"{out}.json")


def check_export_target(out: Path) -> None:
    """``RunError`` when ``out`` or ``out.json`` exists but is not an earlier export (a plain ``out.json``
    architecture record of this format): a user's file of that name is never replaced."""

    def is_record(p: Path) -> bool:
        try:
            return read.read_json(p, dict).get("format") == ARCHITECTURE_FORMAT
        except read.Unreadable:
            return False

    try:
        disk.check_outputs_ours(out.parent, (out.name, architecture_path(out).name), architecture_path(out).name,
                                is_record)
        disk.check_replaceable(out)
    except disk.NotOurs as exc:
        raise RunError(str(exc)) from None


def export_backbone(run: Run | SSLModel | str | Path, out: str | Path, part: str = "backbone", **modules: Any) -> Path:
    """Write the trained backbone (or ``part``) alone as a ``state_dict`` file, and beside it ``OUT.json``
    with its architecture (``architecture``), both atomically.

    ``run``: a ``Run``, an ``SSLModel`` (its own config: ``SSLModel.config``) or a run directory
    (``modules`` as for ``load_run``). The file loads with ``torch.load(out, weights_only=True)`` into a
    module of the same architecture, or whole with ``load_backbone(out)``.
    """
    if isinstance(run, (str, Path)) and part == "backbone":  # the backbone alone: the head is not needed
        return _export_run_backbone(Path(run), Path(out), **modules)
    if isinstance(run, (str, Path)):
        run = load_run(run, **modules)
    model = run.model if isinstance(run, Run) else run
    config = run.config if isinstance(run, Run) else model.config
    state = part_state_dict(model, part)
    arch = architecture(config, model, part)
    out = Path(out)
    check_export_target(out)
    save_checkpoint(out, state)
    atomic_write_json(architecture_path(out), {**arch, "source": str(run.path) if isinstance(run, Run) else None})
    return out


def _export_run_backbone(path: Path, out: Path, backbone: nn.Module | str | None = None, recorded_modules: bool = False,
                         log: Any = None, **others: Any) -> Path:
    """``export_backbone`` of a run directory's backbone: only the backbone is built and loaded (a run of your own
    head exports its backbone without it); ``others`` (the other parts) are not needed."""
    ck, cfg = _checkpoint_and_config(path, "cpu")
    if backbone is None and cfg.backbone == OWN:
        if not recorded_modules:
            raise RunError(f"{path}: {missing_modules_message(cfg.modules, ['backbone'])}")
        backbone = _recorded(cfg, ["backbone"], log, path)["backbone"]
    try:
        module, spec = as_module(backbone, "backbone")
        module = module if module is not None else build_backbone(cfg.backbone, cfg.image_size, cfg.backbone_width)
        d = output_dim(module, (2, 3, cfg.image_size, cfg.image_size))
    except (ModuleSpecError, ValueError) as exc:
        raise RunError(f"{path}: {exc}") from None
    prefix = "backbone."
    state = {k[len(prefix):]: v for k, v in ck["model"].items() if k.startswith(prefix)}
    load_state_dict_checked(module, state, f"{path / 'checkpoint.pt'} (its backbone.* weights)")
    own = None  # the record of a backbone of your own: the run's, or of the module given here
    if cfg.backbone == OWN or backbone is not None:
        own = (cfg.modules or {}).get("backbone") or module_record(module, spec, d)
    save_checkpoint(out, {k: v.detach().cpu().clone() for k, v in module.state_dict().items()})
    atomic_write_json(architecture_path(out), {**_architecture(cfg, "backbone", own, d, False), "source": str(path)})
    return out


def load_backbone(path: str | Path, module: nn.Module | str | None = None, device: str | torch.device = "cpu"
                  ) -> nn.Module:
    """A part written by ``export_backbone`` (``python -m scale.export``), rebuilt and loaded (eval mode).

    The architecture comes from ``path.json``: the project's builder called with its recorded arguments,
    or ``module`` (an ``nn.Module`` or a ``module:callable`` spec) for a part that is your own module, or
    for a file without an architecture beside it. Weights are loaded strictly; ``RunError`` names what
    does not fit.
    """
    path = Path(path)
    try:
        state = load_checkpoint(path, map_location=device)
    except Exception as exc:
        raise RunError(f"{path} cannot be loaded ({type(exc).__name__}: {str(exc).splitlines()[0][:200]})") from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise RunError(f"{path} is not a state_dict (a mapping of names to tensors)")
    try:
        given, _ = as_module(module, "module")
    except ModuleSpecError as exc:
        raise RunError(str(exc)) from None
    arch_file = architecture_path(path)
    if given is None:
        if not arch_file.is_file():
            raise RunError(f"{path} has no architecture beside it ({arch_file.name}): pass module=<a module of its "
                           "architecture> (or a module:callable spec)")
        arch = _read_json(arch_file)
        if arch.get("format") != ARCHITECTURE_FORMAT:
            raise RunError(f"{arch_file} is not an architecture record of format {ARCHITECTURE_FORMAT}")
        if arch.get("builder") is None:
            record = arch.get("module") if isinstance(arch.get("module"), dict) else {}
            spec = record.get("spec") or "module:callable"
            raise RunError(f"{path} is a module of your own ({describe(record) if record else 'not recorded'}): pass "
                           f"module=<a module of its architecture> or module=\"{spec}\"")
        builder = BUILDERS.get(arch["builder"]) if isinstance(arch["builder"], str) else None
        if builder is None or not isinstance(arch.get("arguments"), dict):
            raise RunError(f"{arch_file}: unknown builder {arch.get('builder')!r}; valid: {', '.join(BUILDERS)}")
        sizes = {k: v for k, v in arch["arguments"].items() if k in ("image_size", "width", "d", "k")}
        if any(v is not None and (not isinstance(v, int) or not 1 <= v <= MAX_WIDTH) for v in sizes.values()):
            raise RunError(f"{arch_file}: sizes {sizes} outside 1..{MAX_WIDTH}; the file is not an export of this "
                           "project")

        def build() -> nn.Module:
            args = dict(arch["arguments"])
            try:
                return builder(*(args.pop(k) for k in ("name", "image_size", "width"))) \
                    if builder is build_backbone else \
                    builder(args.pop("spec"), args.pop("d"), args.pop("k"), args.pop("width"), **args)
            except (TypeError, ValueError, KeyError) as exc:
                raise RunError(f"{arch_file}: the recorded arguments do not build a module ({exc})") from None

        with torch.device("meta"):  # shapes first, nothing allocated: a file cannot ask for more than its weights
            check_state_dict(build(), state, f"{path} (architecture {arch_file.name})")
        given = build()
    load_state_dict_checked(given, state, str(path))
    return given.to(device).eval()
