"""Measurements in eval mode: BatchNorm on its running statistics, the training flags restored after."""

from __future__ import annotations

import contextlib

import torch
from torch import nn


@contextlib.contextmanager
def eval_mode(*modules: nn.Module):
    """The modules in eval mode (BatchNorm on running statistics) inside the block, each training flag
    restored after it, whatever happens inside."""
    was = [m.training for m in modules]
    for m in modules:
        m.eval()
    try:
        yield
    finally:
        for m, w in zip(modules, was):
            m.train(w)


def embed(model: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(z, h)`` of ``x`` (a model of ``scale.engine.model``: ``model(x)`` returns z, h and the predictor's output),
    in eval mode and without gradients: what every measurement at a probe batch reads."""
    with torch.no_grad(), eval_mode(model):
        z, h, _ = model(x)
    return z, h
