r"""Whether a run trained: the run read against its own baselines before any verdict is given.

Every report (``python -m scale.run``, ``scale.train``, ``python -m scale.analyze`` of a run) checks:

    loss at chance   the last epoch's mean loss against the loss of a representation that tells no view
                     from another (the method's ``chance_loss`` in ``scale.engine.methods``; NT-Xent over
                     n = 2m rows: all similarities equal give log(n - 1)); within ``CHANCE_TOLERANCE`` of
                     it (relative) the loss is "at chance"
    loss moved       the last epoch's mean loss against the loss of the first step, before any update: a
                     decrease below ``MOVED_TOLERANCE`` of it (relative) is "did not move"
    spread           mean per-dimension std of the L2-normalised rows of the probe batch times sqrt(dim):
                     rows spread evenly over the sphere give 1, rows in r of k dimensions sqrt(r / k), one
                     point 0; below ``SPREAD_FLOOR`` the representation is collapsed (fewer than 1 % of its
                     dimensions in use)
    initial probe    the headline probe (``scale.geometry.probes``) of the backbone at initialisation on the
                     same images: what the training added to it, paired over the test images

A run whose loss is at chance or did not move is reported as not trained: that finding is printed first
and its verdict is labelled as describing an untrained representation. A collapse or a probe that gained
nothing is reported beside it (a collapsed head can be the object of study: E1).
"""

from __future__ import annotations

import copy
import math
from typing import Any

import torch
from torch import nn

from scale.engine import methods
from scale.engine.backbones import BACKBONES, build_backbone
from scale.engine.modules import OWN
from scale.runs.summary import ClassProbe, TrainingCheck

CHANCE_TOLERANCE = 0.01  # |final - chance| / chance below this: the loss sits at chance
MOVED_TOLERANCE = 0.01  # (initial - final) / |initial| below this: the loss did not move
SPREAD_FLOOR = 0.1  # spread (1 for rows spread evenly over the sphere) below this: collapsed
INITIAL_SEED_NOTE = "rebuilt with the run's seed as the trainer drew it"


def spread(std: float | None, dim: int | None) -> float | None:
    """The spread of a representation from its mean per-dimension std of normalised rows (``collapse_stats``):
    ``std * sqrt(dim)``, 1 for rows spread evenly over the unit sphere in ``dim`` dimensions, 0 for one point."""
    if std is None or dim is None or not math.isfinite(std):
        return None
    return float(std) * math.sqrt(dim)


def chance_loss(cfg: Any) -> float | None:
    """The method's loss of a representation that tells no view from another, at the run's global batch (``None``
    where the method has no such level)."""
    fn = methods.get(cfg.method).chance_loss
    return None if fn is None else float(fn(cfg.batch_size))


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


def check_training(cfg: Any, history: list[dict[str, Any]], dims: tuple[int, int] | None,
                   probe: ClassProbe | None, initialisation: str = "") -> TrainingCheck:
    """The run against its baselines (module docstring): ``history`` the per-epoch records (``metrics.jsonl``;
    the first holds ``initial_loss``), ``dims`` ``(d, k)`` of z and h, ``probe`` the headline probe with its
    initial-backbone control. Findings that make the run untrained come first."""
    last = history[-1] if history else {}
    final = last.get("loss")
    initial = history[0].get("initial_loss") if history else None
    chance = chance_loss(cfg)
    h_spread = spread(last.get("h_std"), dims[1] if dims else None)
    z_spread = spread(last.get("z_std"), dims[0] if dims else None)
    untrained, other = [], []
    if final is not None and chance is not None and abs(final - chance) <= CHANCE_TOLERANCE * chance:
        untrained.append(f"the loss ended at chance: {final:.4f} against {chance:.4f} for a representation that "
                         f"tells no view from another ({cfg.method} at batch {cfg.batch_size})")
    if final is not None and initial is not None and initial - final < MOVED_TOLERANCE * abs(initial):
        untrained.append(f"the loss did not move: {final:.4f} at the end against {initial:.4f} at the first step "
                         f"(less than {100 * MOVED_TOLERANCE:g} % lower)")
    for name, value in (("head h", h_spread), ("backbone z", z_spread)):
        if value is not None and value < SPREAD_FLOOR:
            other.append(f"the {name} collapsed: spread {value:.3f} (1 for rows spread evenly over the sphere, "
                         f"below {SPREAD_FLOOR:g} fewer than 1 % of its dimensions in use)")
    gain = probe.initial_gain if probe is not None else None
    if gain is not None and not math.isnan(gain.low) and gain.low <= 0:
        what = "lowered the headline probe of z" if gain.high < 0 else "added nothing measurable to the headline " \
            "probe of z"
        other.append(f"the training {what}: {probe.accuracy.z:.2f} % against {probe.initial_z:.2f} % for the "
                     f"backbone at initialisation (gain {gain.value:+.2f} points [{gain.low:+.1f}, {gain.high:+.1f}])")
    return TrainingCheck(
        trained=not untrained, findings=untrained + other, chance_loss=chance, initial_loss=initial,
        final_loss=final, h_spread=h_spread, z_spread=z_spread,
        initial_probe=probe.initial_z if probe is not None else None, probe_gain=gain,
        initialisation=initialisation)
