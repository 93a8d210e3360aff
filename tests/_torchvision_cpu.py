"""Make PyPI's torchvision importable beside this machine's CPU build of torch, for the tests of lightly.

lightly imports ``torchvision.ops`` at import (``lightly.models.utils``, ``lightly.loss``), though its SimCLR
projection head and ``NTXentLoss`` use none of torchvision. The ``lightning`` extra pins ``torchvision==0.28.*``, the
release built for torch 2.13, so that pip keeps the installed torch; but PyPI's wheel of it is linked against
torch's CUDA libraries (``libtorch_cuda.so``), which the CPU build has not, so its C extension does not load, and
``import torchvision`` then fails in its own ``_meta_registrations`` ("operator torchvision::nms does not exist"), and
so do ``import lightly`` and ``import pytorch_lightning`` (its torchmetrics imports torchvision):
it registers fake kernels for ``nms`` and ``qnms`` whether or not the extension loaded. ``install`` declares those
two operators' schemas, without kernels, only where the extension cannot load, so that the import goes through;
calling one still fails (torchvision checks ``_has_ops()`` first). Where torchvision works (a CUDA build, a
matching CPU pair) it does nothing.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch

_SCHEMAS = ("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
            "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
_KEEP: list[torch.library.Library] = []  # a Library's definitions live as long as the object


def extension_loads() -> bool:
    """torchvision's C extension loads beside this torch (or torchvision is not installed: nothing to do)."""
    spec = importlib.util.find_spec("torchvision")
    if spec is None or spec.origin is None:
        return True
    found = sorted(Path(spec.origin).parent.glob("_C*.so"))
    if not found:
        return False
    try:
        torch.ops.load_library(str(found[0]))
        return True
    except OSError:
        return False


def install() -> bool:
    """Declare the two schemas where they are needed; ``True`` when it did."""
    if _KEEP or extension_loads():
        return False
    lib = torch.library.Library("torchvision", "DEF")  # the namespace torchvision's extension would own
    for schema in _SCHEMAS:
        lib.define(schema)
    _KEEP.append(lib)
    return True
