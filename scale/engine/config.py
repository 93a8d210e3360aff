"""A run's settings: ``TrainConfig``, every field resolved (``scale.run`` fills each one; saved as config.json
with every result).

``TrainConfig.resolve`` is the one resolution of a run's settings that ``python -m scale.run`` makes (your values >
the method's per-dataset recipe > the dataset's adjustments > the method's recipe > the defaults here;
``scale.engine.recipes``); ``TrainConfig.with_modules`` marks the parts that are modules of your own
(``scale.engine.modules``). The optimisers and schedules a config names are ``scale.engine.optim``'s; the model it
builds is ``scale.engine.model.SSLModel``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any

import torch

from scale.engine import methods
from scale.engine.modules import OWN
from scale.engine.recipes import resolve


@dataclass
class TrainConfig:
    """A fully resolved run configuration (``scale.run`` fills every field; saved as config.json)."""

    dataset: str = "synthetic"
    method: str = "simclr"
    backbone: str = "resnet18"
    backbone_width: int | None = None  # resnet18 base channels (64 = standard) / vit model dim (192)
    image_size: int = 16
    head: str = "gelu3"
    head_width: int | None = 2048  # None with a head of your own (head = "module")
    head_out: int = 2048
    head_bn: bool = False
    head_out_bn: bool = False
    head_bias: bool = True
    head_style: str = "grammar"  # scale.engine.heads.HEAD_STYLES; "paper": the official code's heads
    predictor: str | None = None  # simsiam / byol: spec of the predictor (2-layer, same activation)
    pred_width: int = 512
    init: str = "normal"  # or "collapsed": projector Linear weights x 0.1 (E1)
    augment: str = "e3"
    # auto: batched on CUDA, per image in worker processes on a CPU with a core free for them
    # (scale.engine.augment.resolve_augment_path); the Trainer keeps the resolved path in its config
    augment_path: str = "auto"
    augment_workers: int = 1  # worker processes of the per-image path
    epochs: int = 2
    batch_size: int = 64
    optimizer: str = "adam"
    lr: float = 1e-3
    momentum: float = 0.9
    weight_decay: float = 0.0
    warmup_epochs: int = 0
    schedule: str = "cosine"
    temperature: float = 0.1
    ema: float = 0.99  # BYOL base target momentum, raised to 1 by a cosine
    seed: int = 0
    device: str = "cpu"
    precision: str = "fp32"
    compile: bool = False
    sync_bn: bool = False
    probe_size: int = 256
    train_subset: int | None = None
    log_every: int = 10
    threads: int | None = None  # torch CPU threads: sums depend on it, so it is saved and reused on resume
    # the parts that are modules of your own (backbone, head and predictor then say "module"): what was used,
    # per part (scale.engine.modules.module_record); None when every part is built from this config
    modules: dict[str, dict[str, Any]] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def with_modules(self, records: dict[str, dict[str, Any]]) -> TrainConfig:
        """This config with the parts in ``records`` (``scale.engine.modules.module_record`` per part) marked
        as your own: ``backbone``/``head``/``predictor`` ``"module"``, the widths they no longer set ``None``
        (``head_out`` the head's measured output width; ``head_bn`` whether your head holds a BatchNorm, where
        no predictor is built from these flags), and ``modules`` recording each."""
        if not records:
            return self
        changes: dict[str, Any] = {"modules": {**(self.modules or {}), **records}}
        if "backbone" in records:
            changes.update(backbone=OWN, backbone_width=None)
        if "head" in records:
            changes.update(head=OWN, head_width=None, head_out=records["head"]["out_dim"])
            # BatchNorm as your head has it, where no predictor is built from these flags (they shape it)
            built_predictor = methods.get(self.method).predictor and "predictor" not in records and \
                (self.modules or {}).get("predictor") is None
            if "batchnorm" in records["head"] and not built_predictor:
                changes.update(head_bn=bool(records["head"]["batchnorm"]), head_out_bn=False)
        if "predictor" in records:
            changes.update(predictor=OWN)
        return replace(self, **changes)

    @classmethod
    def resolve(cls, dataset: str, method: str = "simclr", backbone: str = "resnet18", *,
                device: str | torch.device = "cpu", **values: Any) -> TrainConfig:
        """The config ``python -m scale.run DATASET --method METHOD --backbone BACKBONE`` resolves, with
        ``values`` (fields of this class) in place of flags: yours > the method's per-dataset recipe > the
        dataset's adjustments > the method's recipe > these defaults (``scale.engine.recipes``). ``backbone``,
        ``head`` and ``predictor`` may be ``module:callable`` specs of your own modules (``SSLModel`` imports
        them): the config then names them, and ``scale.train`` records them."""

        names = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - names)
        if unknown:
            raise TypeError(f"TrainConfig has no fields {', '.join(unknown)}")
        device = torch.device(device)
        resolved = resolve(dataset, method, backbone, device.type, **values)
        return cls(**{k: v for k, v in resolved.items() if k in names and k != "device"}, device=str(device))
