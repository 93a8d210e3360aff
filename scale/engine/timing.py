"""Wall time of work on a device: a CUDA device runs queued kernels after the call returns, so the device is
synchronised before the clock starts (earlier work not counted) and before it stops (this work counted in). On a
CPU both are no-ops."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import torch

T = TypeVar("T")


def synchronize(device: torch.device) -> None:
    """Wait for ``device``'s queued work (CUDA); nothing elsewhere."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def synced_seconds(fn: Callable[[], T], device: torch.device) -> tuple[T, float]:
    """``(fn(), wall seconds)``, ``device`` synchronised before and after."""
    synchronize(device)
    t0 = time.perf_counter()
    out = fn()
    synchronize(device)
    return out, time.perf_counter() - t0
