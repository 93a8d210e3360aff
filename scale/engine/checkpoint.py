"""Atomic files and checkpoints.

Every file a run writes goes through ``scale.engine.disk`` (the one owner of the disk: an atomic write of a
fresh temporary beside the file, fsync and ``os.replace``, never through a link), so a crash or a kill
leaves either the old file or the new one, never half of one.
Checkpoints hold only tensors and plain Python values and load with ``torch.load(weights_only=True)``:
loading runs no pickled code.
"""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

import torch

from scale.engine.disk import write_bytes as atomic_write_bytes
from scale.engine.disk import write_json as atomic_write_json
from scale.engine.disk import write_text as atomic_write_text
from scale.engine.read import open_regular

__all__ = ["atomic_write_bytes", "atomic_write_json", "atomic_write_text", "load_checkpoint", "save_checkpoint"]


def save_checkpoint(path: str | Path, state: dict[str, Any]) -> None:
    """``torch.save`` into memory, then an atomic write (temporary file + rename)."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    atomic_write_bytes(path, buffer.getvalue())


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Load with ``weights_only=True`` (tensors and plain values only), from a regular file only (opened
    non-blocking and checked first: a FIFO would wait forever; ``scale.engine.read.Unreadable`` otherwise)."""

    with open_regular(path) as fh:
        return torch.load(fh, map_location=map_location, weights_only=True)


def unreadable_reason(exc: BaseException, limit: int = 160) -> str:
    """Why a checkpoint could not be read, in one plain line. ``torch.load``'s own texts are replaced: they span
    many lines, advise ``weights_only=False`` (running the file's code: never the fix for an unreadable file)
    or speak of mmap and miniz; other failures (a state_dict that does not fit) keep ``Type: first line``."""
    text = str(exc).strip()
    first = text.splitlines()[0][:limit] if text else ""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    named = re.search(r"GLOBAL ([\w.]+)", text)
    if named:
        return f"it names {named.group(1)}, which loading would call; refused without running it"
    if isinstance(exc, EOFError) or (isinstance(exc, KeyError) and text.isdigit()) \
            or any(s in text for s in ("Weights only load failed", "weights_only", "mmap can only be used",
                                       "PytorchStreamReader", "invalid load key")):
        return "not a checkpoint of tensors and plain values: empty, truncated, corrupt or another format"
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__
