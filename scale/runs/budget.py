"""What a run will allocate, counted before anything is: the model's parameters and the memory of a step.

    model_parameters(cfg)   the parameters of backbone + projector (+ predictor) that ``cfg`` names, counted
                            on PyTorch's ``meta`` device (shapes only, no storage): exact, and fast even
                            for a model that would not fit anywhere (cached per architecture)
    need(cfg, world)        bytes one training process holds at least (``Need``): the weights with their
                            gradients and optimiser state (+ BYOL's target copy), the activations a step
                            keeps for its backward (the outputs of every leaf module in one ``meta`` forward
                            of both views of the local batch), the per-epoch statistics (``k x k`` and
                            ``d x d`` float64 covariances and their eigenvalue copies, ``mini.collapse_metrics``)
                            and the dataset held on the device as uint8 when its size is known by name,
                            and ``WORKER_BYTES`` for each augmentation worker process (``--augment-workers``)
    device_memory(device)   what the device has: a CUDA device's total memory; on a CPU the physical memory,
                            or the cgroup's limit where one is lower (a container, a Slurm job)
    check_memory(cfg, ...)  ``ConfigError`` with one line when the need exceeds the device's memory

``need`` is a lower bound (allocator slack, workspaces and the curvature tracker come on top), so a run
refused here could not have run; ``scale.run`` calls ``check_memory`` before it loads data or writes
anything. ``scale.runs.validate`` caps the parameters at ``MAX_MODEL_PARAMS`` on every machine.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from typing import Any

from scale.engine import methods
from scale.engine.config import TrainConfig
from scale.engine.model import SSLModel
from scale.engine.modules import OWN
from scale.runs.faults import ConfigError

MAX_MODEL_PARAMS = 1_000_000_000  # backbone + heads; the paper's largest model (ResNet-18 + E1's heads) has ~3e7
# (training, test) images of a dataset whose name says how many: CIFAR, digits' fixed split, synthetic
DATASET_IMAGES = {"cifar10": (50_000, 10_000), "cifar100": (50_000, 10_000), "digits": (1_347, 450),
                  "synthetic": (256, 64)}
OPTIMIZER_STATES = {"adam": 2, "sgd": 1, "lars": 1}  # tensors of the parameters' size: moments / momentum
GIB = 2**30
# What one forked augmentation worker holds of its own at least: the interpreter, torch and NumPy pages it
# touches after the fork (measured RSS of a worker of scale.engine.workers: 150-300 MiB)
WORKER_BYTES = 256 * 2**20


# The config fields SSLModel builds the model from (scale.engine.model): counts are cached per their values.
MODEL_FIELDS = ("method", "backbone", "backbone_width", "image_size", "head", "head_width", "head_out", "head_bn",
                "head_out_bn", "head_bias", "head_style", "predictor", "pred_width")


def _model_key(cfg: Any) -> tuple:
    return tuple(getattr(cfg, f) for f in MODEL_FIELDS)


def _meta_model(key: tuple):
    import torch


    with torch.device("meta"):
        return SSLModel(TrainConfig(**dict(zip(MODEL_FIELDS, key))))


@functools.lru_cache(maxsize=64)
def _parameters(key: tuple) -> int:
    return sum(p.numel() for p in _meta_model(key).parameters())


@functools.lru_cache(maxsize=64)
def _activations_per_image(key: tuple) -> tuple[int, int]:
    """``(elements of every leaf module's output in one training-mode forward of one image, d)`` on the meta
    device."""
    import torch

    model, image_size = _meta_model(key), key[MODEL_FIELDS.index("image_size")]
    total = [0]

    def count(module, inputs, output) -> None:
        if isinstance(output, torch.Tensor):
            total[0] += output.numel()

    for m in model.modules():
        if next(m.children(), None) is None:
            m.register_forward_hook(count)
    model.train()
    model(torch.empty(2, 3, image_size, image_size, device="meta"))  # 2 images: BatchNorm needs more than one
    return total[0] // 2, int(model.backbone.out_dim)


def model_parameters(cfg: Any) -> int:
    """Parameters of the model ``cfg`` names (backbone, projector, predictor), without allocating them."""
    return _parameters(_model_key(cfg))


@dataclass(frozen=True)
class Need:
    """Bytes a training process needs at least, by part (module docstring)."""

    parameters: int  # count
    batch: int  # images of one process's step (two views each)
    weights: int  # weights, gradients, optimiser state, target network
    activations: int
    statistics: int
    dataset: int
    workers: int = 0  # the augmentation worker processes (``WORKER_BYTES`` each; the "workers" path)

    @property
    def total(self) -> int:
        return self.weights + self.activations + self.statistics + self.dataset + self.workers


def need(cfg: Any, world: int = 1) -> Need:
    """What one of ``world`` training processes of ``cfg`` holds at least (module docstring)."""

    n = model_parameters(cfg)
    copies = 2 + OPTIMIZER_STATES.get(cfg.optimizer, 2) + (1 if methods.get(cfg.method).ema_target else 0)
    element = 2 if cfg.precision == "bf16" else 4
    train, test = DATASET_IMAGES.get(cfg.dataset, (None, 0))
    batch = min(cfg.batch_size, train or cfg.batch_size, cfg.train_subset or cfg.batch_size)  # larger: the
    local_batch = max(1, batch // max(1, world))  # Trainer refuses it, naming the training images
    per_image, d = _activations_per_image(_model_key(cfg))
    activations = per_image * 2 * local_batch * element  # two views
    k = int(cfg.head_out)
    statistics = 2 * 8 * (d * d + k * k)
    images = (train or 0) + test  # loaded whole, --train-subset or not
    workers = WORKER_BYTES * cfg.augment_workers if cfg.augment_path in ("workers", "auto") else 0
    return Need(n, local_batch, 4 * n * copies, activations, statistics, images * 3 * cfg.image_size**2, workers)


def device_memory(device: Any) -> int:
    """Bytes of memory ``device`` has (module docstring)."""
    import torch

    device = torch.device(device)
    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).total_memory)
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for limit in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(limit) as fh:
                text = fh.read().strip()
        except OSError:
            continue
        if text.isdigit():
            total = min(total, int(text))
    return total


def check_memory(cfg: Any, device: Any, world: int = 1) -> Need | None:
    """``need(cfg, world)`` if it fits ``device``'s memory, else ``ConfigError`` naming the parts and the levers;
    ``None`` for a model with a part of your own (built by your code, so not the project's to size)."""

    if OWN in (cfg.backbone, cfg.head, cfg.predictor):
        return None
    got, have = need(cfg, world), device_memory(device)
    if got.total > have:
        raise ConfigError(
            f"this run needs at least {got.total / GIB:.1f} GiB but the {device} has {have / GIB:.1f} GiB: "
            f"model {got.parameters:,} parameters ({got.weights / GIB:.1f} GiB with gradients and optimiser state), "
            f"activations of {got.batch} x 2 views at {cfg.image_size} px ({got.activations / GIB:.1f} GiB), "
            f"per-epoch statistics of z and h ({got.statistics / GIB:.1f} GiB), dataset {got.dataset / GIB:.1f} GiB, "
            f"{cfg.augment_workers} augmentation worker(s) ({got.workers / GIB:.1f} GiB); "
            "reduce --batch-size, --image-size, --backbone-width, --head-width, --head-out or --augment-workers")
    return got
