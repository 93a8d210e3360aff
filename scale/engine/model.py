"""The model of an SSL run: ``SSLModel``, backbone + projector (the head) [+ predictor], each part built from a
``TrainConfig`` by name or a module of your own.

    x (2B, 3, S, S) -> backbone -> z (2B, d) -> projector (the head) -> h (2B, k) [-> predictor -> p]

    default_predictor    the predictor spec of a projector spec (2 layers, the projector's activation)
    output_dim           the output width of a part (its ``out_dim``, or one forward of a zero input)
    memory_format_for    the memory layout training uses for a model on a device (channels_last where safe)
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from mini.heads import parse_head_spec
from scale.engine import methods
from scale.engine.backbones import build_backbone
from scale.engine.config import TrainConfig
from scale.engine.heads import build_head, collapse_init_
from scale.engine.modes import eval_mode
from scale.engine.modules import OWN, ModuleSpecError, as_module, is_spec, missing_modules_message, module_record


def default_predictor(head: str) -> str:
    """Predictor spec for a projector spec: 2 layers with the projector's activation (E1); linear -> linear."""
    act = parse_head_spec(head).activation
    return "linear" if act is None else f"{act}2"


class SSLModel(nn.Module):
    """backbone + projector (the head) [+ predictor]: ``forward(x) -> (z, h, p or None)``.

    Each part is built from ``cfg`` by name (``cfg.backbone``, ``cfg.head`` and ``cfg.predictor``: specs of
    the head grammar) unless a module of your own is passed instead, as an ``nn.Module`` or as a
    ``"package.module:callable"`` spec (imported and called without arguments; ``scale.engine.modules``):

    - ``backbone``: maps images ``(B, 3, S, S)`` to ``z`` ``(B, d)``; ``d`` is read from its ``out_dim``
      attribute or, if it has none, from one forward of a ``cfg.image_size`` image (and then set as
      ``out_dim``, which the measurements read);
    - ``head``: maps ``(B, d)`` to ``(B, k)``; a grammar spec string (``"swish3"``) replaces ``cfg.head``;
    - ``predictor``: ``(B, k) -> (B, k)`` for simsiam/byol (default: built from ``cfg.predictor``, or
      from the head's spec; a module head needs ``cfg.predictor`` or this).

    A spec may stand in ``cfg`` itself (``TrainConfig.resolve("digits", backbone="pkg.mod:fn",
    head="pkg.mod:head")``, so that the config you print names your parts): it is imported like one passed
    here. Such a config comes from your Python code; a config read from a run directory is validated and
    names only the project's parts or ``"module"``.

    ``own`` records the parts that are your own (``module_record``; ``TrainConfig.with_modules`` puts them
    in the config). A ``cfg`` whose parts say ``"module"`` (a run trained with your own modules) needs
    those modules again: without them ``ModuleSpecError`` says which and how to pass them.
    ``cfg.init = "collapsed"`` scales every Linear weight of the head by 0.1, module heads included.
    """

    def __init__(self, cfg: TrainConfig, *, backbone: nn.Module | str | None = None,
                 head: nn.Module | str | None = None, predictor: nn.Module | str | None = None) -> None:
        super().__init__()
        # specs named in the config itself (TrainConfig.resolve(..., backbone="pkg.mod:fn")): a config in your
        # Python code; one read from a run directory is validated and names project parts or "module" only
        backbone = cfg.backbone if backbone is None and is_spec(cfg.backbone) else backbone
        head = cfg.head if head is None and is_spec(cfg.head) else head
        predictor = cfg.predictor if predictor is None and is_spec(cfg.predictor) else predictor
        backbone, backbone_spec = as_module(backbone, "backbone")
        head, head_spec_own = as_module(head, "head") if is_spec(head) else (head, None)
        predictor, predictor_spec = as_module(predictor, "predictor")
        has_predictor = methods.get(cfg.method).predictor
        missing = [part for part, given, value in (("backbone", backbone, cfg.backbone), ("head", head, cfg.head),
                                                    ("predictor", predictor, cfg.predictor if has_predictor else None))
                   if value == OWN and given is None]
        if missing:
            raise ModuleSpecError(missing_modules_message(cfg.modules, missing))
        self.own: dict[str, dict[str, Any]] = {}
        self.backbone = build_backbone(cfg.backbone, cfg.image_size, cfg.backbone_width) if backbone is None \
            else backbone
        d = output_dim(self.backbone, (2, 3, cfg.image_size, cfg.image_size))
        if backbone is not None:
            self.own["backbone"] = module_record(backbone, backbone_spec, d)
        head_spec = head if isinstance(head, str) else cfg.head
        if isinstance(head, nn.Module):
            self.projector = head
            k = output_dim(head, (2, d))
            self.own["head"] = module_record(head, head_spec_own, k)
        else:
            self.projector = build_head(head_spec, d, cfg.head_out, cfg.head_width, bias=cfg.head_bias,
                                        batchnorm=cfg.head_bn, out_batchnorm=cfg.head_out_bn, style=cfg.head_style)
            k = cfg.head_out
        if cfg.init == "collapsed":
            collapse_init_(self.projector)
        elif cfg.init != "normal":
            raise ValueError(f"unknown init {cfg.init!r}; valid: normal, collapsed")
        self.predictor: nn.Module | None = None
        if has_predictor:
            if predictor is not None:
                self.predictor = predictor
                self.own["predictor"] = module_record(predictor, predictor_spec, output_dim(predictor, (2, k)))
            else:
                if cfg.predictor is None and isinstance(head, nn.Module):
                    raise ValueError(f"{cfg.method} needs a predictor: pass predictor=<nn.Module> or set "
                                     "cfg.predictor to a head spec (a module head has no spec to copy)")
                spec = cfg.predictor or default_predictor(head_spec)
                # E1: predictor 2048-512-2048, same activation, same bias and BN choice as the projector
                # (paper style: the official predictor is its ProjectionHead, output BatchNorm included)
                self.predictor = build_head(spec, k, k, cfg.pred_width, bias=cfg.head_bias, batchnorm=cfg.head_bn,
                                            style=cfg.head_style)
        self.config = cfg.with_modules(self.own)  # what built this model, your own parts recorded

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        z = self.backbone(x)
        h = self.projector(z)
        p = self.predictor(h) if self.predictor is not None else None
        return z, h, p


@torch.no_grad()
def output_dim(module: nn.Module, shape: tuple[int, ...]) -> int:
    """``module.out_dim`` if it has one, else the width of its output on a zero input of ``shape`` (one
    forward in eval mode, its training flag restored); the result is set as ``out_dim``."""
    dim = getattr(module, "out_dim", None)
    if isinstance(dim, int):
        return dim
    param = next(module.parameters(), None)
    with eval_mode(module):
        out = module(torch.zeros(shape, device=param.device if param is not None else None,
                                 dtype=param.dtype if param is not None else None))
    if not isinstance(out, torch.Tensor) or out.ndim != 2 or out.shape[0] != shape[0]:
        got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise ValueError(f"{type(module).__name__} must map a batch of shape {shape} to (batch, dim); got {got}")
    module.out_dim = int(out.shape[1])
    return module.out_dim


ONEDNN_MIN_CHANNELS = 8  # memory_format_for: a strided 1x1 convolution with fewer input channels stays channels-first


def memory_format_for(model: nn.Module, device: torch.device) -> torch.memory_format:
    """``channels_last`` for training, except on a CPU when ``model`` has a strided 1x1 convolution with fewer than
    ``ONEDNN_MIN_CHANNELS`` input channels: there torch's oneDNN (torch 2.13, its AVX2 kernels, an AMD EPYC)
    corrupts the heap in channels_last, found as glibc aborts ('corrupted double-linked list') and as gradients of
    two identical steps differing by 3.7e2 (``Conv2d(c, 2c, 1, stride=2)`` for c = 2, 3, 4, 6, not 8 or 16: a
    ResNet-18 of width below 8, whose first shortcut it is); a run there keeps the default layout."""
    if device.type == "cpu" and any(isinstance(m, nn.Conv2d) and m.kernel_size == (1, 1) and m.stride != (1, 1)
                                    and m.in_channels < ONEDNN_MIN_CHANNELS for m in model.modules()):
        return torch.contiguous_format
    return torch.channels_last
