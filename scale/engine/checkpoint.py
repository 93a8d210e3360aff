"""Atomic files and checkpoints.

Every file a run writes goes through ``mini.atomic`` (a temporary file in the same folder, fsync and
``os.replace``, atomic on POSIX), so a crash or a kill leaves either the old file or the new one, never
half of one.
Checkpoints hold only tensors and plain Python values and load with ``torch.load(weights_only=True)``:
loading runs no pickled code.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import torch

from mini.atomic import atomic_write_bytes, atomic_write_text

__all__ = ["atomic_write_bytes", "atomic_write_json", "atomic_write_text", "load_checkpoint", "save_checkpoint"]


def atomic_write_json(path: str | Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def save_checkpoint(path: str | Path, state: dict[str, Any]) -> None:
    """``torch.save`` into memory, then an atomic write (temporary file + rename)."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    atomic_write_bytes(path, buffer.getvalue())


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Load with ``weights_only=True`` (tensors and plain values only)."""
    return torch.load(path, map_location=map_location, weights_only=True)


def unreadable_reason(exc: BaseException, limit: int = 160) -> str:
    """``Type: first line`` of an exception, without torch.load's multi-line advice (which suggests
    ``weights_only=False``, i.e. running the file's code: never the right fix for an unreadable file)."""
    text = str(exc).strip().splitlines()[0][:limit] if str(exc).strip() else ""
    if "weights_only" in text or "Weights only" in text:
        text = "not a torch checkpoint, or one holding more than tensors and plain values"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
