"""Finished runs back into Python, and the trained backbone out of them.

    run = load_run("runs/digits-simclr-gelu3-...")    # config, model with weights, metrics, summary
    z, h, _ = run.model(x)                             # x: normalised images (B, 3, S, S)
    export_backbone(run, "backbone.pt")               # a plain state_dict of the backbone alone

    # in your own code, without this package's run machinery:
    my_backbone.load_state_dict(torch.load("backbone.pt", weights_only=True))

A run directory (``python -m scale.run`` or ``scale.engine.train.Trainer(run_dir=...)``) holds config.json,
checkpoint.pt, metrics.jsonl and, once finished, summary.json. Checkpoints load with
``torch.load(weights_only=True)``: tensors and plain values, no pickled code. A run trained with your
own modules is loaded by passing the same kind of modules again (``backbone=``, ``head=``,
``predictor=``): the checkpoint holds weights, not code. A checkpoint whose keys or shapes do not fit
the model raises ``RunError`` naming the first mismatching keys. The saved config is taken as ``scale.run
--resume`` takes it (``scale.runs.validate``): config.json must agree with the checkpoint's own copy and pass
the validation of flags, so an edited or tampered directory is refused with one line, before anything is built.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from scale.engine.checkpoint import load_checkpoint, save_checkpoint, unreadable_reason
from scale.engine.train import SSLModel, TrainConfig

PARTS: tuple[str, ...] = ("backbone", "projector", "predictor")


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
    module.load_state_dict(state)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise RunError(f"{path} cannot be read as JSON ({exc})") from None


def load_run(run_dir: str | Path, *, backbone: nn.Module | None = None, head: nn.Module | str | None = None,
             predictor: nn.Module | None = None, device: str | torch.device = "cpu") -> Run:
    """Read a run directory: config, model with the checkpoint's weights (eval mode), metrics, summary.

    ``backbone``/``head``/``predictor``: modules of the architecture the run was trained with, when it was
    trained with your own modules (their weights are replaced by the checkpoint's).
    """
    path = Path(run_dir)
    ck_path = path / "checkpoint.pt"
    if not ck_path.is_file():
        raise RunError(f"{path} is not a run directory: no checkpoint.pt there")
    try:
        ck = load_checkpoint(ck_path, map_location=device)
    except OSError as exc:
        raise RunError(f"{ck_path} cannot be read ({exc.strerror or exc}); check its permissions") from None
    except Exception as exc:  # torch raises several kinds on a truncated or foreign file
        raise RunError(f"{ck_path} is not a readable checkpoint ({unreadable_reason(exc)})") from None
    if not isinstance(ck, dict) or "model" not in ck or not isinstance(ck.get("config"), dict):
        raise RunError(f"{ck_path} is not a scale.run checkpoint (no 'model' and 'config' entries)")
    cfg = checked_config(path, ck["config"], str(torch.device(device)))
    model = SSLModel(cfg, backbone=backbone, head=head, predictor=predictor)
    load_state_dict_checked(model, ck["model"], str(ck_path))
    model = model.to(device).eval()
    metrics: list[dict[str, Any]] = []
    if (path / "metrics.jsonl").is_file():
        try:
            metrics = [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines() if line.strip()]
        except (OSError, ValueError) as exc:
            raise RunError(f"{path / 'metrics.jsonl'} cannot be read as JSON lines ({exc})") from None
    summary = _read_json(path / "summary.json") if (path / "summary.json").is_file() else None
    return Run(path, cfg, model, metrics, summary)


def checked_config(path: Path, checkpointed: dict[str, Any], device: str) -> TrainConfig:
    """The run's config as ``scale.run --resume`` takes it (``scale.runs.validate``): config.json (the checkpoint's
    copy where there is none) agreeing with the checkpoint's copy, then validated like flags; ``device`` replaces
    the saved one."""
    from scale.runs import faults, validate

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


def export_backbone(run: Run | SSLModel | str | Path, out: str | Path, part: str = "backbone", **modules: Any) -> Path:
    """Write the trained backbone (or ``part``) alone as a ``state_dict`` file, atomically.

    ``run``: a ``Run``, an ``SSLModel`` or a run directory (``modules`` as for ``load_run``). The file
    loads with ``torch.load(out, weights_only=True)`` into a module of the same architecture.
    """
    if isinstance(run, (str, Path)):
        run = load_run(run, **modules)
    model = run.model if isinstance(run, Run) else run
    state = part_state_dict(model, part)
    out = Path(out)
    save_checkpoint(out, state)
    return out
