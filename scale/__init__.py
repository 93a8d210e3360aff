"""scale: the paper's experiments at scale (PyTorch; CUDA when present, CPU otherwise).

``scale`` imports ``mini`` (the head grammar, the objectives' definitions, the array-API
measurements) and never the other way round.

The public surface, imported lazily (``import scale`` does not import torch until a name is used):

    TrainConfig, SSLModel, Trainer, Hook   train a backbone + head, by name or with your own modules
                                           (``TrainConfig.resolve``: the settings ``scale.run`` resolves)
    train                                  a whole run as ``python -m scale.run`` makes it: training, the
                                           end-of-run measurement, summary.json and report.md
    load_run, Run, export_backbone         a finished run back into Python; its backbone as a state_dict
    load_backbone                          an exported part rebuilt from its recorded architecture
    EffectiveHessian                       H_eff = G + M of any head at a batch, matrix-free (operators H, G, M)
    lanczos                                extreme eigenvalues of such an operator (Lanczos, Ritz residuals)
    nt_xent, info_nce_cross_view, vicreg,  the objectives, ``f(Hb (n, k), ...) -> scalar`` on rows
    barlow, simsiam, byol, mse_views       ``[view 1; view 2]`` (``scale.engine.objectives``)
    build_head, build_backbone             the project's heads (the grammar of ``mini.heads``) and backbones
    load_dataset, folder_dataset           datasets as uint8 tensors (CIFAR, digits, a folder of class folders)
    analyze_model                          the paper's measurements on any model (``python -m scale.analyze``)
    analyze_orbits                         orbit geometry of z versus h of any model on your own images

``scale.lanczos`` is the function ``scale.curvature.lanczos.lanczos`` (there is no module ``scale.lanczos``).
Naming: ``z`` is the backbone's output and ``h`` the head's, the paper's notation (SimCLR's paper and lightly
call them h and z the other way round).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS: dict[str, str] = {
    "TrainConfig": "scale.engine.config",
    "SSLModel": "scale.engine.model",
    "Trainer": "scale.engine.train",
    "Hook": "scale.engine.hooks",
    "load_run": "scale.runs.load",
    "Run": "scale.runs.load",
    "RunError": "scale.runs.load",
    "export_backbone": "scale.runs.load",
    "load_backbone": "scale.runs.load",
    "train": "scale.run",
    "EffectiveHessian": "scale.curvature.operators",
    "lanczos": "scale.curvature.lanczos",
    "nt_xent": "scale.engine.objectives",
    "info_nce_cross_view": "scale.engine.objectives",
    "vicreg": "scale.engine.objectives",
    "barlow": "scale.engine.objectives",
    "simsiam": "scale.engine.objectives",
    "byol": "scale.engine.objectives",
    "mse_views": "scale.engine.objectives",
    "build_head": "scale.engine.heads",
    "build_backbone": "scale.engine.backbones",
    "load_dataset": "scale.engine.data",
    "folder_dataset": "scale.engine.folders",
    "analyze_model": "scale.analyze",
    "analyze_orbits": "scale.analyze",
}

__all__ = [
    "EffectiveHessian",
    "Hook",
    "Run",
    "RunError",
    "SSLModel",
    "TrainConfig",
    "Trainer",
    "analyze_model",
    "analyze_orbits",
    "barlow",
    "build_backbone",
    "build_head",
    "byol",
    "export_backbone",
    "folder_dataset",
    "info_nce_cross_view",
    "lanczos",
    "load_backbone",
    "load_dataset",
    "load_run",
    "mse_views",
    "nt_xent",
    "simsiam",
    "train",
    "vicreg",
]

if TYPE_CHECKING:
    from scale.analysis import analyze_model, analyze_orbits
    from scale.curvature.lanczos import lanczos
    from scale.curvature.operators import EffectiveHessian
    from scale.engine.backbones import build_backbone
    from scale.engine.config import TrainConfig
    from scale.engine.data import load_dataset
    from scale.engine.folders import folder_dataset
    from scale.engine.heads import build_head
    from scale.engine.hooks import Hook
    from scale.engine.model import SSLModel
    from scale.engine.objectives import barlow, byol, info_nce_cross_view, mse_views, nt_xent, simsiam, vicreg
    from scale.engine.train import Trainer
    from scale.run import train
    from scale.runs.load import Run, RunError, export_backbone, load_backbone, load_run


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'scale' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
