r"""The SSL methods: one record each, in one registry that the trainer, the tracker and the CLI read.

A method is what differs between SimCLR, SimSiam, BYOL, VICReg and Barlow Twins once the backbone and
the head are fixed:

    objective     ``bind(ctx) -> (Hb -> L)``: the loss as a function of an embedding batch, with every
                  stop-gradient quantity (SimSiam's targets, BYOL's target-network embeddings) bound
                  from ``ctx`` (mini.losses semantics). The trainer evaluates it on the predictor's
                  output ``p`` when the method has a predictor (``ctx.predictor`` is then ``None``: the
                  model already applied it) and on ``h`` otherwise; ``H_eff`` differentiates it in ``h``
                  with the predictor inside (``ctx.predictor`` set, held fixed).
    predictor     SSLModel gets a predictor head after the projector (SimSiam, BYOL)
    ema_target    the trainer keeps a momentum copy of the network whose ``h`` are the targets (BYOL)
    hessian       block structure of the loss Hessian ``grad^2_H L`` over the rows of ``Hb``:
                  "per-sample" (block-diagonal: ``L = sum_i l_i(h_i)`` given the bound targets, so the
                  tracker's exact per-sample path applies) or "coupled" (negatives, batch statistics:
                  computed on the global batch under DDP, Lanczos in the tracker)
    recipe        the CIFAR defaults of ``scale.run`` (flags override), and ``recipe_source`` where they
                  come from; ``dataset_recipe`` what differs on one dataset (SimSiam: 20 epochs on CIFAR-100)

Adding a method is one ``register(Method(...))`` (see tests/test_method_registry.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import torch

from scale.engine import objectives as so
from scale.engine.loss_curvature import NTXent, PredictorCosine

Loss = Callable[[torch.Tensor], torch.Tensor]
HESSIAN_STRUCTURES: tuple[str, ...] = ("per-sample", "coupled")


@dataclass(frozen=True)
class ObjectiveContext:
    """What an objective may bind: the batch's own embeddings ``h`` (stop-gradient targets), the target
    network's ``target_h`` (EMA methods), the predictor to apply inside the loss (or ``None``), the
    run's config (temperature, ...), and whether a coupled loss all-gathers the global batch (training
    under DDP) or stays on this process's rows (curvature products)."""

    h: torch.Tensor | None
    target_h: torch.Tensor | None = None
    predictor: Callable[[torch.Tensor], torch.Tensor] | None = None
    config: Any = None
    gather: bool = True

    def coupled(self, fn: Callable[..., torch.Tensor], *args: Any) -> Loss:
        """``Hb -> fn(Hb, *args)`` on the global batch when gathering (``so.global_loss``), else locally."""
        if self.gather:
            return lambda Hb: so.global_loss(fn, Hb, *args)
        return lambda Hb: fn(Hb, *args)

    def targets(self, method: str) -> torch.Tensor:
        """The stop-gradient targets: the target network's embeddings when there are, else the batch's own."""
        t = self.target_h if self.target_h is not None else self.h
        if t is None:
            raise ValueError(f"{method}'s objective needs the embeddings of the batch it is bound to")
        return t.detach()


@dataclass(frozen=True)
class Method:
    name: str
    objective: Callable[[ObjectiveContext], Loss]
    predictor: bool = False
    ema_target: bool = False
    hessian: str = "coupled"
    recipe: Mapping[str, Any] = field(default_factory=dict)
    recipe_source: str = ""
    dataset_recipe: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # per dataset, over the recipe
    failure_hint: str | None = None  # a likely cause of a non-finite loss specific to the method
    # The same objective with its closed-form loss curvature attached (scale.engine.loss_curvature), which the
    # tracker's exact paths use; None: the tracker differentiates ``objective`` by autodiff.
    curvature: Callable[[ObjectiveContext], Loss] | None = None
    # The loss of a representation that tells no view from another, at a global batch of m pairs (a trained run
    # whose loss sits there learned nothing: scale.runs.premise); None where the method has no such
    # level (its minimum is a collapse, or the level depends on the data)
    chance_loss: Callable[[int], float] | None = None

    def __post_init__(self) -> None:
        if self.hessian not in HESSIAN_STRUCTURES:
            raise ValueError(f"method {self.name!r}: hessian must be one of {HESSIAN_STRUCTURES}, got {self.hessian!r}")
        object.__setattr__(self, "recipe", MappingProxyType(dict(self.recipe)))
        object.__setattr__(self, "dataset_recipe",
                           MappingProxyType({k: MappingProxyType(dict(v)) for k, v in self.dataset_recipe.items()}))

    @property
    def per_sample(self) -> bool:
        """The loss Hessian is block-diagonal over samples (the tracker's exact per-sample path applies)."""
        return self.hessian == "per-sample"


# --------------------------------------------------------------------------------------------
# The objectives (scale.engine.objectives' functions, bound)
# --------------------------------------------------------------------------------------------


def _simclr(ctx: ObjectiveContext) -> Loss:
    return ctx.coupled(so.nt_xent, ctx.config.temperature)


def _simclr_paper(ctx: ObjectiveContext) -> Loss:
    return ctx.coupled(so.info_nce_cross_view, ctx.config.temperature)


def _vicreg(ctx: ObjectiveContext) -> Loss:
    return ctx.coupled(so.vicreg)


def _barlow(ctx: ObjectiveContext) -> Loss:
    return ctx.coupled(so.barlow)


def _simsiam(ctx: ObjectiveContext) -> Loss:
    T = ctx.targets("simsiam")  # stopgrad(h): each view's target is the other view's own embedding
    return lambda Hb: so.simsiam(Hb, T, ctx.predictor)


def _byol(ctx: ObjectiveContext) -> Loss:
    if ctx.target_h is None:
        raise ValueError("byol's objective needs the target network's embeddings of the same batch")
    T = ctx.targets("byol")
    return lambda Hb: so.byol(Hb, T, ctx.predictor)


def _simclr_curvature(ctx: ObjectiveContext) -> Loss:
    return NTXent(ctx.config.temperature)


def _simsiam_curvature(ctx: ObjectiveContext) -> Loss:
    return PredictorCosine(ctx.targets("simsiam"), ctx.predictor, "cosine")


def _byol_curvature(ctx: ObjectiveContext) -> Loss:
    if ctx.target_h is None:
        raise ValueError("byol's curvature needs the target network's embeddings of the probe")
    return PredictorCosine(ctx.targets("byol"), ctx.predictor, "nmse")


# --------------------------------------------------------------------------------------------
# The registry
# --------------------------------------------------------------------------------------------

_LARS = dict(optimizer="lars", momentum=0.9, batch_size=256, epochs=1000, warmup_epochs=10, head_bn=True,
             head_out_bn=False, head_bias=True)
_BATCH_STATS = "{name}'s batch statistics blew up (a tiny batch makes them unstable)"

# byol/vicreg/barlow follow solo-learn's CIFAR files except where configs/README.md lists a difference
SOLO_LEARN_LIKE = "solo-learn-like CIFAR recipe (configs/README.md lists the differences)"

METHODS: dict[str, Method] = {}


def register(method: Method) -> Method:
    """Add ``method`` to the registry (its name must be new)."""
    if method.name in METHODS:
        raise ValueError(f"method {method.name!r} is already registered")
    METHODS[method.name] = method
    return method


def unregister(name: str) -> None:
    METHODS.pop(name)


def get(name: str) -> Method:
    """The registered method ``name``; a ``ValueError`` lists the valid names."""
    try:
        return METHODS[name]
    except KeyError:
        raise ValueError(f"unknown method {name!r}; valid: {', '.join(METHODS)}") from None


def names() -> tuple[str, ...]:
    return tuple(METHODS)


def _nt_xent_chance(m: int) -> float:
    """NT-Xent over n = 2m rows with every similarity equal: each anchor's softmax is uniform over its 2m - 1
    others, so the loss is log(2m - 1) (a constant h gives exactly this)."""
    return math.log(2 * m - 1)


def _info_nce_chance(m: int) -> float:
    """One-direction InfoNCE over m view-2 candidates with equal similarities: log m."""
    return math.log(m)


register(Method(
    "simclr", _simclr, hessian="coupled", recipe_source="the paper, E3", curvature=_simclr_curvature,
    chance_loss=_nt_xent_chance,
    recipe=dict(augment="e3", optimizer="adam", lr=1e-3, momentum=0.9, weight_decay=0.0, batch_size=512, epochs=50,
                warmup_epochs=0, head_width=2048, head_out=2048, head_bn=True, head_out_bn=True, head_bias=True,
                pred_width=512, temperature=0.1),
))
register(Method(  # the paper's official E3 code: one-direction InfoNCE, batch 256, its bias-free heads
    "simclr_paper", _simclr_paper, hessian="coupled", recipe_source="the paper's official E3 code",
    chance_loss=_info_nce_chance,
    recipe=dict(augment="e3", optimizer="adam", lr=1e-3, momentum=0.9, weight_decay=0.0, batch_size=256, epochs=50,
                warmup_epochs=0, head_width=2048, head_out=2048, head_bn=True, head_out_bn=True, head_bias=False,
                head_style="paper", pred_width=512, temperature=0.1),
))
register(Method(
    "simsiam", _simsiam, predictor=True, hessian="per-sample", recipe_source="the paper, E1",
    curvature=_simsiam_curvature,
    dataset_recipe={"cifar100": dict(epochs=20)},
    recipe=dict(augment="e1", optimizer="sgd", lr=0.05, momentum=0.9, weight_decay=0.0, batch_size=512, epochs=50,
                warmup_epochs=0, head_width=2048, head_out=2048, head_bn=False, head_out_bn=False, head_bias=False,
                pred_width=512),
))
register(Method(
    "byol", _byol, predictor=True, ema_target=True, hessian="per-sample", recipe_source=SOLO_LEARN_LIKE,
    curvature=_byol_curvature,
    recipe=dict(_LARS, augment="simclr", lr=1.0, weight_decay=1e-5, head_width=4096, head_out=256, pred_width=4096,
                ema=0.99),
))
register(Method(
    "vicreg", _vicreg, hessian="coupled", recipe_source=SOLO_LEARN_LIKE,
    failure_hint=_BATCH_STATS.format(name="vicreg"),
    recipe=dict(_LARS, augment="simclr", lr=0.3, weight_decay=1e-4, head_width=2048, head_out=2048, pred_width=512),
))
register(Method(
    "barlow", _barlow, hessian="coupled", recipe_source=SOLO_LEARN_LIKE,
    failure_hint=_BATCH_STATS.format(name="barlow"),
    recipe=dict(_LARS, augment="simclr", lr=0.3, weight_decay=1e-4, head_width=2048, head_out=2048, pred_width=512),
))
