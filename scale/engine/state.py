"""The state of a training, as the trainer hands it to its hooks (``scale.engine.hooks``) at every call: the config,
the model and optimiser, where it is in the run (epoch, step, global step, learning rate), the step's tensors, the
per-epoch history, and the fixed probe batch with ``embed`` (a measurement, never a step). Its own module so that
the hooks and the trainer both read it and neither imports the other."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from scale.engine import methods
from scale.engine.modes import eval_mode


@dataclass
class TrainState:
    config: Any  # scale.engine.config.TrainConfig
    model: Any  # scale.engine.model.SSLModel
    optimizer: torch.optim.Optimizer
    device: torch.device
    probe_x: torch.Tensor
    probe_y: torch.Tensor
    steps_per_epoch: int
    rank: int = 0
    world_size: int = 1
    epoch: int = 0  # current epoch (0-based)
    first_step: int = 0  # the step this epoch starts at (> 0 when a resume lands mid-epoch)
    step: int = 0  # step within the epoch (0-based) of the last finished step
    global_step: int = 0  # optimiser steps done
    lr: float = 0.0
    loss: torch.Tensor | None = None
    x: torch.Tensor | None = None
    z: torch.Tensor | None = None
    h: torch.Tensor | None = None
    target_h: torch.Tensor | None = None  # BYOL targets of the step
    metrics: dict[str, float] = field(default_factory=dict)
    history: list[dict[str, float]] = field(default_factory=list)
    target: Any = None  # BYOL momentum network (an SSLModel)
    autocast: Callable[[], Any] | None = None

    @torch.no_grad()
    def embed(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(z, h)`` of normalised images in eval mode (BatchNorm uses running statistics), without gradients:
        a measurement, never a step (no graph is kept)."""
        with eval_mode(self.model), torch.no_grad():
            z, h, _ = self.model(x)
        return z.detach(), h.detach()  # a view of a parameter made under no_grad still says it requires grad

    def objective(self, h: torch.Tensor | None = None) -> Callable[[torch.Tensor], torch.Tensor]:
        """``Hb -> L(Hb)`` with stop-gradient data bound at ``h`` (default: the step's ``state.h``)."""
        return objective_fn(self.config, self.model, self.h if h is None else h, self.target_h)


def objective_fn(cfg: Any, model: Any, h: torch.Tensor, target_h: torch.Tensor | None = None
                 ) -> Callable[[torch.Tensor], torch.Tensor]:
    """The method's loss as a function of the embedding batch (mini.losses semantics): the registry's
    objective with the stop-gradient data bound at ``h`` (and ``target_h``) and the predictor inside."""
    ctx = methods.ObjectiveContext(h, target_h, model.predictor, cfg, gather=True)
    return methods.get(cfg.method).objective(ctx)
