"""The backbone at initialisation: the control of every claim that training changed the backbone
(``scale.runs.premise``'s downstream part, the reports' "z at initialisation")."""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn

from scale.engine.backbones import BACKBONES, build_backbone
from scale.engine.modules import OWN

INITIAL_SEED_NOTE = "rebuilt with the run's seed as the trainer drew it"


def initial_backbone(cfg: Any, backbone: nn.Module) -> tuple[nn.Module, str]:
    """The backbone at initialisation and how it was made: a backbone of the project rebuilt from ``cfg``
    with the run's seed, as ``scale.engine.train.Trainer`` draws it (the same weights), or, for a backbone of
    your own, a fresh copy of it with every ``reset_parameters`` drawn from the run's seed (the architecture at
    initialisation; your own initial weights are not recorded). The global RNG is left untouched."""
    device = next(backbone.parameters()).device
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        if getattr(cfg, "backbone", OWN) in BACKBONES:
            fresh = build_backbone(cfg.backbone, cfg.image_size, cfg.backbone_width)
            how = f"{cfg.backbone} {INITIAL_SEED_NOTE} (seed {cfg.seed})"
        else:
            fresh = copy.deepcopy(backbone).cpu()
            with torch.no_grad():
                for m in fresh.modules():
                    if hasattr(m, "reset_parameters"):
                        m.reset_parameters()
            how = f"a fresh initialisation of your backbone (reset_parameters, seed {cfg.seed})"
    return fresh.to(device).eval(), how


def weight_shift(cfg: Any, backbone: nn.Module, initial: nn.Module) -> float | None:
    """||theta - theta_0|| / ||theta_0|| over the backbone's parameters, float64: the trained ``backbone`` against
    ``initial`` (``initial_backbone``). ``None`` for a backbone of your own, whose initial weights are not
    recorded (its fresh copy is another draw: the distance would measure the draw, not training)."""
    if getattr(cfg, "backbone", OWN) not in BACKBONES:
        return None
    trained, start = list(backbone.parameters()), list(initial.parameters())
    if [p.shape for p in trained] != [p.shape for p in start]:
        return None
    with torch.no_grad():
        diff = sum(float(((p.double() - q.double().to(p.device)) ** 2).sum()) for p, q in zip(trained, start))
        norm = sum(float((q.double() ** 2).sum()) for q in start)
    return (diff / norm) ** 0.5 if norm > 0 else None
