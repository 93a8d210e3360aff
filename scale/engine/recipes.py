"""One resolution of a run's settings, for ``python -m scale.run`` and for Python (``TrainConfig.resolve``).

    your values  >  the method's per-dataset recipe  >  the dataset's adjustments  >  the method's recipe
                 >  ``TrainConfig``'s defaults

The method's recipe is its record in ``scale.engine.methods`` (the paper's settings where it states them,
solo-learn's CIFAR recipes elsewhere). ``DATASET_DEFAULTS`` adjusts any method to a dataset: ``digits`` and
``synthetic`` are small and run on a CPU, so narrower backbones and heads, smaller batches and fewer epochs.
Then the official heads' defaults (``head_style="paper"``: no biases, BatchNorm after every Linear or
after none) where the values leave them open, and the precision of the device (bf16 on CUDA).
"""

from __future__ import annotations

from typing import Any

from scale.engine import methods
from scale.engine.data import FOLDER_PREFIX

# The digits recipes: what each of the paper's experiments trains with on scikit-learn's digits, found by the
# search of docs/recipes.md (python -m bench.recipe_search), each a network that learns (scale.runs.premise) where
# one could be found. "main" is the main job (python -m scale.run digits --head gelu3) and every method's digits
# default; the experiments' recipes are read by the grid and the ledger (scale.experiments.catalog) on
# top of the paper's settings. E3/E4 and E5 keep the paper's rotation nuisance in the views (digits_rotate).
# E1/E2 (SimSiam, SGD 0.05): no recipe of docs/recipes.md's SimSiam search learns on digits (without BatchNorm the
# heads collapse; with BatchNorm in the hidden layers they do not, but z's class probes end below the backbone at
# initialisation), and their rows say so.
DIGITS_RECIPES: dict[str, dict[str, Any]] = {
    "main": dict(augment="digits_mild", epochs=20),
    "E1": dict(augment="digits", epochs=20),
    "E2": dict(augment="digits", epochs=50),
    "E3E4": dict(augment="digits_rotate", epochs=50),
    "E5": dict(augment="digits_rotate", epochs=50),
}

# Dataset adjustments on top of the method's. digits: 1,347 training images of 16 x 16 on a CPU, so a narrower
# ResNet-18 (base width 16, z 128-d) and a 256-wide head, with the main job's recipe; the whole run takes about
# 40 s on an idle 2-core CPU. A value given per backbone is a dict keyed by the backbone's name.
DATASET_DEFAULTS: dict[str, dict[str, Any]] = {
    "cifar10": dict(image_size=32),
    "cifar100": dict(image_size=32),
    "digits": dict(image_size=16, backbone_width={"resnet18": 16, "vit_tiny": 48}, head_width=256, head_out=128,
                   pred_width=64, batch_size=128, warmup_epochs=0, **DIGITS_RECIPES["main"]),
    "synthetic": dict(image_size=16, backbone_width={"resnet18": 8, "vit_tiny": 24}, head_width=32, head_out=16,
                      pred_width=8, batch_size=32, epochs=2, warmup_epochs=0, probe_size=64),
    "folder": dict(image_size=32),  # folder:PATH, your own images: CIFAR's size unless image_size says otherwise
}


def dataset_key(dataset: str) -> str:
    """The key of ``DATASET_DEFAULTS`` for a dataset name (``folder:PATH`` -> ``folder``)."""
    return "folder" if dataset.startswith(FOLDER_PREFIX) else dataset


def resolve(dataset: str, method: str = "simclr", backbone: str = "resnet18", device_type: str = "cpu",
            **given: Any) -> dict[str, Any]:
    """The resolved settings (module docstring) as a dict of ``TrainConfig`` fields; ``given`` holds your
    values (``None`` counts as not given). A backbone of your own (not a name of the project) takes no
    per-backbone adjustment."""
    given = {k: v for k, v in given.items() if v is not None}
    rec = methods.get(method)
    values: dict[str, Any] = dict(rec.recipe)
    for key, v in DATASET_DEFAULTS.get(dataset_key(dataset), {}).items():
        if isinstance(v, dict):
            if backbone in v:
                values[key] = v[backbone]
        else:
            values[key] = v
    values.update(rec.dataset_recipe.get(dataset, {}))
    values.update(given)
    if values.get("head_style") == "paper":  # the official heads' defaults (scale.engine.heads)
        if "head_bias" not in given:
            values["head_bias"] = False
        if "head_out_bn" not in given:
            values["head_out_bn"] = bool(values.get("head_bn", False))
    values.update(dataset=dataset, method=method, backbone=backbone)
    values.setdefault("precision", "bf16" if device_type == "cuda" else "fp32")
    return values
