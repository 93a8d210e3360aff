"""The ``--device`` flag of the commands: ``cpu``, ``cuda``, or ``auto`` (CUDA where it is visible)."""

from __future__ import annotations

import torch


def device_type(flag: str) -> str:
    """``cuda`` for ``--device cuda``, and for ``auto`` where CUDA is visible; ``cpu`` otherwise. Whether CUDA is
    there when it was asked for is the caller's check (each command says so in its own words)."""
    return "cuda" if flag == "cuda" or (flag == "auto" and torch.cuda.is_available()) else "cpu"
