"""``GeometryCallback``: the monitor (``scale.monitor.core``) as a PyTorch Lightning ``Callback``, logging through
whatever loggers the ``Trainer`` has (TensorBoard, CSV, W&B, ...) under ``geometry/``.

The module's parts are found by name unless given: the backbone as ``backbone``; the head as ``projection_head``
(lightly's examples), ``projector`` (solo-learn) or ``head``; the loss as ``criterion`` (lightly's examples) or
``loss_fn``. It measures after the training batches whose global step (optimiser steps done, counted from 1) is
divisible by ``every``, and once more when training ends, so the last record is the trained state's. Needs the
``lightning`` extra: ``pip install -e '.[lightning]'``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
from torch import Tensor, nn

from scale.monitor.core import Monitor, MonitorInputError

BACKBONE_NAMES = ("backbone",)
HEAD_NAMES = ("projection_head", "projector", "head")
LOSS_NAMES = ("criterion", "loss_fn")


def _part(module: nn.Module, given: Any, names: tuple[str, ...], what: str) -> Any:
    if given is not None:
        return given
    for name in names:
        if callable(getattr(module, name, None)):
            return getattr(module, name)
    raise MonitorInputError(f"{type(module).__name__} has no {what} attribute ({', '.join(names)}); pass {what}= to "
                            "GeometryCallback")


class GeometryCallback(pl.Callback):
    """See the module docstring; the keyword arguments are ``Monitor``'s. ``monitor`` is built at ``setup``."""

    def __init__(self, probe: Sequence[Tensor], *, backbone: nn.Module | Callable | None = None,
                 head: nn.Module | Callable | None = None, loss: Callable | None = None,
                 labelled: Sequence[Tensor] | None = None, orbits: Tensor | None = None, every: int = 50,
                 budget: float = 0.1, max_iter: int = 120, tol: float | None = None,
                 path: str | Path | None = None, prefix: str = "geometry/"):
        super().__init__()
        self.given = {"backbone": backbone, "head": head, "loss": loss}
        self.options = dict(labelled=labelled, orbits=orbits, every=every, budget=budget, max_iter=max_iter, tol=tol,
                            path=path)
        self.probe, self.prefix = probe, prefix
        self.monitor: Monitor | None = None

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if self.monitor is None:
            self.monitor = Monitor(_part(pl_module, self.given["backbone"], BACKBONE_NAMES, "backbone"),
                                   _part(pl_module, self.given["head"], HEAD_NAMES, "head"),
                                   _part(pl_module, self.given["loss"], LOSS_NAMES, "loss"), self.probe, **self.options)

    def _log(self, trainer: pl.Trainer, rec: dict[str, Any] | None) -> None:
        if rec is None:
            return
        metrics = {self.prefix + k: v for k, v in self.monitor.scalars(rec).items()}
        for logger in trainer.loggers:
            logger.log_metrics(metrics, step=rec["step"])

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        self._log(trainer, self.monitor.step(trainer.global_step, trainer.current_epoch))

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        last = self.monitor.records[-1]["step"] if self.monitor.records else None
        if last != trainer.global_step:  # the trained state's record (the last step may have been measured)
            self._log(trainer, self.monitor.measure(trainer.global_step, trainer.current_epoch))
