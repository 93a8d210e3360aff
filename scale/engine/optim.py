"""The optimisers and the learning-rate schedule of a run: ``build_optimizer`` makes the optimiser a
``TrainConfig`` names (``OPTIMIZERS``: SGD, Adam, ``LARS``), ``lr_at`` the learning rate of a step (``SCHEDULES``:
cosine to 0 or constant, after a linear warmup).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from scale.engine.config import TrainConfig

OPTIMIZERS: tuple[str, ...] = ("sgd", "adam", "lars")
SCHEDULES: tuple[str, ...] = ("cosine", "constant")


class LARS(torch.optim.Optimizer):
    """SGD with momentum and layer-wise trust ratios (You et al. 2017), as used in SSL recipes.

    For each weight with ``ndim > 1``: ``g <- g + wd w``, then ``g <- g * min(eta |w| / (|g| + wd |w|) / lr, 1)``
    (the "clipped" variant); biases and norm parameters get plain SGD without weight decay.
    """

    def __init__(self, params, lr: float, momentum: float = 0.9, weight_decay: float = 0.0, eta: float = 0.02):
        super().__init__(params, dict(lr=lr, momentum=momentum, weight_decay=weight_decay, eta=eta))

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            lr, mom, wd, eta = group["lr"], group["momentum"], group["weight_decay"], group["eta"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                g = p.grad
                if p.ndim > 1:
                    g = g.add(p, alpha=wd)
                    w_norm, g_norm = torch.linalg.vector_norm(p), torch.linalg.vector_norm(p.grad)
                    trust = eta * w_norm / (g_norm + wd * w_norm + 1e-12)
                    trust = torch.where((w_norm > 0) & (g_norm > 0), torch.clamp(trust / lr, max=1.0), 1.0)
                    g = g * trust
                state = self.state[p]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = g.clone()
                else:
                    state["momentum_buffer"].mul_(mom).add_(g)
                p.add_(state["momentum_buffer"], alpha=-lr)


def build_optimizer(cfg: TrainConfig, params: Sequence[nn.Parameter], device: torch.device) -> torch.optim.Optimizer:
    fused = {"fused": True} if device.type == "cuda" else {}
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(params, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay, **fused)
    if cfg.optimizer == "adam":
        return torch.optim.Adam(params, lr=cfg.lr, weight_decay=cfg.weight_decay, **fused)
    if cfg.optimizer == "lars":
        return LARS(params, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)
    raise ValueError(f"unknown optimizer {cfg.optimizer!r}; valid: {', '.join(OPTIMIZERS)}")


def lr_at(cfg: TrainConfig, step: int, total: int, warmup: int) -> float:
    """Linear warmup over ``warmup`` steps, then cosine to 0 (or constant)."""
    if step < warmup:
        return cfg.lr * (step + 1) / warmup
    if cfg.schedule == "constant":
        return cfg.lr
    progress = (step - warmup) / max(1, total - warmup)
    return cfg.lr * 0.5 * (1.0 + math.cos(math.pi * progress))
