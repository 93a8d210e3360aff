"""Measurements in eval mode: BatchNorm on its running statistics, the training flags restored after."""

from __future__ import annotations

import contextlib

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
