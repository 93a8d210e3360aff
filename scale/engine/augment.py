"""Augmentation: batched on the training device (kornia), or per image with PIL in worker processes.

The dataset stays on the device as uint8; each step indexes a batch, converts it to floats in [0, 1]
and augments the whole batch at once (every image gets its own random parameters), then normalises.
No DataLoader, no worker processes, no host-to-device copies per step.

kornia rather than torchvision v2: torchvision from PyPI is built against a specific torch release and
does not import beside the CPU torch build this project is developed with (a binary mismatch), while
kornia is pure Python on top of torch. kornia's colour jitter follows torchvision's definition
(brightness, contrast, saturation factors in [1 - x, 1 + x], hue shift in [-x, x], random order).

Presets:
    e1       random-resized-crop (scale 0.2-1), horizontal flip                 (docs/paper.md, E1: SimSiam)
    e3       crop (scale 0.08-1, torchvision's default), flip, rotation of every image by an angle
             uniform in [-45, 45] degrees (nearest-neighbour), colour jitter (0.4, 0.4, 0.4, 0.1)
             with p = 0.8, no grayscale                                         (the paper's official E3 code)
    e3_crop02  e3 with crop scale 0.2-1 (this project's former e3)
    simclr   the standard SimCLR/BYOL CIFAR recipe: crop (0.08-1), flip, colour jitter (0.4, 0.4, 0.2,
             0.1) p = 0.8, grayscale p = 0.2                                     (solo-learn's CIFAR)
    digits   for an 8 x 8 source brought to 16 px (scikit-learn's digits): crop (scale 0.3-1), no flip (a
             mirrored digit is another glyph), brightness and contrast jitter 0.4 with p = 0.8 (saturation and
             hue do nothing to grey images)                                     (docs/recipes.md: the search)
    digits_mild  digits with the crop's scale 0.5-1: the main job's (its backbone gained over its
             initialisation at every seed of the search, where digits' did at two of three)
    digits_rotate  digits with every image rotated by an angle uniform in [-45, 45] degrees: E3/E4's
             nuisance kept, so that a head can become invariant to it          (docs/recipes.md)

A preset's parameters never change once a result names it (the ledger's unit keys name presets: a changed
augmentation is a new preset; ``tests/test_recipes.py`` pins the digits presets).
    none     no augmentation (normalisation only)

The presets made for 32 px CIFAR or 224 px images crop too much of an 8-px digit: ``e3``'s 8 % of the area,
turned and jittered, leaves two views of one digit less alike than two different digits, and SimCLR's loss then
ends above chance (``docs/recipes.md``). ``register_preset`` adds one of your own.

Two paths draw from the same distributions (``PRESET_PARAMS`` is the one table both read;
``tests/test_augment_paths.py`` compares the paths' sampled transforms with two-sample KS tests):

    GPUAugment   batched on the device: the path on CUDA, where one call per view augments the batch
    PILAugment   one image at a time with PIL, as torchvision's transforms do (crop box, flip, rotation,
                 jitter factors and order drawn per image; torchvision's sampling rules), meant for
                 worker processes that augment the next batch while the step runs (``WorkerAugment``):
                 the CPU path when a core is free for them (``resolve_augment_path``)

(kornia draws one order of the jitter operations per batch; PIL per image. The factors' distributions
are the same.)
"""

from __future__ import annotations

import math
import os
import random
import time
from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from scale.engine.workers import process_pool

PRESETS: tuple[str, ...] = ("e1", "e3", "e3_crop02", "simclr", "digits", "digits_mild", "digits_rotate", "none")
# One table for both paths: crop scale range (None: no crop), flip probability, rotation (max |degrees|),
# colour jitter (brightness, contrast, saturation, hue) and its probability, grayscale probability.
PRESET_PARAMS: dict[str, dict] = {
    "e1": dict(crop=(0.2, 1.0), flip=0.5, rotation=0.0, jitter=None, jitter_p=0.0, gray=0.0),
    "e3": dict(crop=(0.08, 1.0), flip=0.5, rotation=45.0, jitter=(0.4, 0.4, 0.4, 0.1), jitter_p=0.8, gray=0.0),
    "e3_crop02": dict(crop=(0.2, 1.0), flip=0.5, rotation=45.0, jitter=(0.4, 0.4, 0.4, 0.1), jitter_p=0.8, gray=0.0),
    "simclr": dict(crop=(0.08, 1.0), flip=0.5, rotation=0.0, jitter=(0.4, 0.4, 0.2, 0.1), jitter_p=0.8, gray=0.2),
    "digits": dict(crop=(0.3, 1.0), flip=0.0, rotation=0.0, jitter=(0.4, 0.4, 0.0, 0.0), jitter_p=0.8, gray=0.0),
    "digits_mild": dict(crop=(0.5, 1.0), flip=0.0, rotation=0.0, jitter=(0.4, 0.4, 0.0, 0.0), jitter_p=0.8,
                        gray=0.0),
    "digits_rotate": dict(crop=(0.3, 1.0), flip=0.0, rotation=45.0, jitter=(0.4, 0.4, 0.0, 0.0), jitter_p=0.8,
                          gray=0.0),
    "none": dict(crop=None, flip=0.0, rotation=0.0, jitter=None, jitter_p=0.0, gray=0.0),
}
PARAM_KEYS = ("crop", "flip", "rotation", "jitter", "jitter_p", "gray")
RATIO = (3.0 / 4.0, 4.0 / 3.0)  # the crop's aspect-ratio range (torchvision's and kornia's default)


def register_preset(name: str, params: dict) -> None:
    """Add a preset of your own to the one table both paths read (``params``: every key of ``PARAM_KEYS``); a
    ``ValueError`` for a name taken or a key missing. A run names it by ``augment=name`` (``TrainConfig``)."""
    if name in PRESET_PARAMS:
        raise ValueError(f"augmentation preset {name!r} exists already; taken: {', '.join(PRESET_PARAMS)}")
    missing = sorted(set(PARAM_KEYS) - set(params))
    if missing or set(params) - set(PARAM_KEYS):
        raise ValueError(f"augmentation preset {name!r} needs exactly the keys {', '.join(PARAM_KEYS)}")
    global PRESETS
    PRESET_PARAMS[name] = dict(params)
    PRESETS = (*PRESETS, name)


def _params(preset: str) -> dict:
    if preset not in PRESET_PARAMS:
        raise ValueError(f"unknown augmentation preset {preset!r}; valid: {', '.join(PRESETS)}")
    return PRESET_PARAMS[preset]


def build_augment(preset: str, image_size: int) -> nn.Module:
    """A batched augmentation ``(B, 3, S, S) float [0, 1] -> (B, 3, S, S)`` for ``preset``."""
    import kornia.augmentation as K

    P, size = _params(preset), (image_size, image_size)
    ops: list[nn.Module] = []
    if P["crop"] is not None:
        # "resample": one batched warp (grid_sample) instead of kornia's default per-image slice-and-resize loop,
        # whose B interpolate calls made the crop 5x slower on an H200 (21.6 against 4.2 ms a view of 512 at
        # 32 px; the augmentation was 2/3 of a bf16 step) and no faster on a CPU. Both sample the box's corners onto
        # the output's corners bilinearly (align_corners): the same views to float rounding
        # (tests/test_augment_paths.py; BENCHMARKS.md, "GPU suite").
        ops.append(K.RandomResizedCrop(size, scale=P["crop"], ratio=RATIO, cropping_mode="resample"))
    if P["flip"]:
        ops.append(K.RandomHorizontalFlip(p=P["flip"]))
    if P["rotation"]:
        # p=1 and nearest-neighbour: torchvision's RandomRotation defaults (kornia's are p=0.5 and bilinear)
        ops.append(K.RandomRotation(degrees=P["rotation"], p=1.0, resample="nearest"))
    if P["jitter"] is not None:
        ops.append(K.ColorJitter(*P["jitter"], p=P["jitter_p"]))
    if P["gray"]:
        ops.append(K.RandomGrayscale(p=P["gray"]))
    return nn.Sequential(*ops)


class GPUAugment(nn.Module):
    """uint8 batch on the device -> two normalised augmented views stacked ``[view1; view2]``."""

    def __init__(self, preset: str, image_size: int, mean: Sequence[float], std: Sequence[float]) -> None:
        super().__init__()
        self.preset = preset
        self.augment = build_augment(preset, image_size)
        self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32).view(1, -1, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(std, dtype=torch.float32).view(1, -1, 1, 1), persistent=False)

    def normalize(self, x_uint8: torch.Tensor) -> torch.Tensor:
        """uint8 ``(B, 3, S, S)`` -> normalised float, no augmentation (for probes and evaluation)."""
        return (x_uint8.float() / 255.0 - self.mean) / self.std

    @torch.no_grad()
    def views(self, x_uint8: torch.Tensor, n_views: int = 2, seed: int | None = None) -> torch.Tensor:
        """``(B, 3, S, S)`` uint8 -> ``(n_views B, 3, S, S)`` float, rows ``[view1; view2]``
        (``seed``: reseed torch's generator first, which kornia draws from)."""
        if seed is not None:
            torch.manual_seed(seed)
        x = x_uint8.float() / 255.0
        out = [self.augment(x) for _ in range(n_views)]
        return (torch.cat(out).clamp_(0.0, 1.0) - self.mean) / self.std

    def prefetch(self, x_uint8: torch.Tensor, seed: int) -> None:
        """Nothing to do ahead of time for the batched path (see ``WorkerAugment.prefetch``)."""

    def close(self) -> None:
        """Nothing to end: the batched path has no worker processes (see ``WorkerAugment.close``)."""


class PILAugment:
    """Per-image augmentation with PIL (torchvision's rules), for DataLoader workers on a CPU.

    ``views(x_uint8)``: ``(3, S, S)`` uint8 (torch or NumPy) -> ``(n_views, 3, S, S)`` normalised float32.
    ``sample(S)`` draws one image's parameters (the dictionary ``apply`` consumes), so the distributions
    can be compared with the batched path's. Randomness: Python's ``random`` module of the process (each
    DataLoader worker is seeded by torch).
    """

    def __init__(self, preset: str, image_size: int, mean: Sequence[float], std: Sequence[float]) -> None:
        self.preset, self.P, self.size = preset, _params(preset), image_size
        self.mean = np.asarray(mean, dtype=np.float32).reshape(3, 1, 1)
        self.std = np.asarray(std, dtype=np.float32).reshape(3, 1, 1)

    def sample(self, side: int, rng: random.Random | None = None) -> dict:
        rng = rng or random
        P, out = self.P, {}
        if P["crop"] is not None:
            out["box"] = _crop_box(side, side, P["crop"], rng)
        out["flip"] = rng.random() < P["flip"]
        out["angle"] = rng.uniform(-P["rotation"], P["rotation"]) if P["rotation"] else 0.0
        if P["jitter"] is not None and rng.random() < P["jitter_p"]:
            b, c, s, h = P["jitter"]
            order = [0, 1, 2, 3]
            rng.shuffle(order)
            out["jitter"] = (rng.uniform(1 - b, 1 + b), rng.uniform(1 - c, 1 + c), rng.uniform(1 - s, 1 + s),
                             rng.uniform(-h, h), order)
        out["gray"] = rng.random() < P["gray"]
        return out

    def apply(self, img, params: dict):
        """One PIL RGB image transformed by ``params`` (from ``sample``)."""
        from PIL import Image, ImageEnhance

        if "box" in params:
            top, left, h, w = params["box"]
            img = img.resize((self.size, self.size), Image.BILINEAR, box=(left, top, left + w, top + h))
        elif img.size != (self.size, self.size):
            img = img.resize((self.size, self.size), Image.BILINEAR)
        if params["flip"]:
            img = img.transpose(Image.FLIP_LEFT_RIGHT)
        if params["angle"]:
            img = img.rotate(params["angle"], resample=Image.NEAREST, fillcolor=(0, 0, 0))  # torchvision's default
        if "jitter" in params:
            b, c, s, h, order = params["jitter"]
            for op in order:
                if op == 0:
                    img = ImageEnhance.Brightness(img).enhance(b)
                elif op == 1:
                    img = ImageEnhance.Contrast(img).enhance(c)
                elif op == 2:
                    img = ImageEnhance.Color(img).enhance(s)
                else:
                    img = _adjust_hue(img, h)
        if params["gray"]:
            img = img.convert("L").convert("RGB")
        return img

    def view(self, x_uint8) -> np.ndarray:
        from PIL import Image

        arr = np.asarray(x_uint8, dtype=np.uint8).transpose(1, 2, 0)  # (S, S, 3)
        img = self.apply(Image.fromarray(arr, "RGB"), self.sample(arr.shape[0]))
        out = np.asarray(img, dtype=np.float32).transpose(2, 0, 1) / 255.0
        return (out - self.mean) / self.std

    def views(self, x_uint8, n_views: int = 2) -> torch.Tensor:
        return torch.from_numpy(np.stack([self.view(x_uint8) for _ in range(n_views)]))


def _crop_box(height: int, width: int, scale: tuple[float, float], rng) -> tuple[int, int, int, int]:
    """torchvision's RandomResizedCrop box ``(top, left, h, w)``: area fraction uniform in ``scale``, log
    aspect ratio uniform in ``log RATIO``, 10 attempts, else the central crop clamped to the ratio range."""
    area = height * width
    lo, hi = math.log(RATIO[0]), math.log(RATIO[1])
    for _ in range(10):
        target = area * rng.uniform(*scale)
        aspect = math.exp(rng.uniform(lo, hi))
        w = round(math.sqrt(target * aspect))
        h = round(math.sqrt(target / aspect))
        if 0 < w <= width and 0 < h <= height:
            return rng.randint(0, height - h), rng.randint(0, width - w), h, w
    ratio = width / height
    if ratio < RATIO[0]:
        w, h = width, round(width / RATIO[0])
    elif ratio > RATIO[1]:
        h, w = height, round(height * RATIO[1])
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


def _adjust_hue(img, factor: float):
    """Shift the hue by ``factor`` of a turn in HSV (torchvision's rule for PIL images)."""
    from PIL import Image

    h, s, v = img.convert("HSV").split()
    hue = (np.asarray(h, dtype=np.uint8).astype(np.int16) + round(factor * 255)) % 256
    return Image.merge("HSV", (Image.fromarray(hue.astype(np.uint8), "L"), s, v)).convert("RGB")


class PerImageViews(torch.utils.data.Dataset):
    """A dataset of uint8 images ``(N, 3, S, S)`` giving ``(view1, view2)`` per index through ``PILAugment``:
    the CPU pipeline (a ``DataLoader`` with worker processes over it)."""

    def __init__(self, x_uint8: torch.Tensor, augment: PILAugment) -> None:
        self.x = x_uint8.numpy() if isinstance(x_uint8, torch.Tensor) else np.asarray(x_uint8)
        self.augment = augment

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        v = self.augment.views(self.x[i])
        return v[0], v[1]


CHUNK = 16  # images per worker job; seeds are per chunk, so results do not depend on the worker count
AUGMENT_PATHS = ("auto", "batched", "workers")


def _augment_chunk(preset: str, size: int, mean, std, x: np.ndarray, seed: int, n_views: int) -> np.ndarray:
    """Worker job: ``x`` (b, 3, S, S) uint8 -> (n_views, b, 3, S, S) float32, PIL per image."""
    aug, rng = PILAugment(preset, size, mean, std), random.Random(seed)
    out = np.empty((n_views, *x.shape), dtype=np.float32)
    for i in range(len(x)):
        arr = x[i].transpose(1, 2, 0)
        from PIL import Image

        img = Image.fromarray(np.ascontiguousarray(arr), "RGB")
        for v in range(n_views):
            view = np.asarray(aug.apply(img, aug.sample(arr.shape[0], rng)), dtype=np.float32)
            out[v, i] = (view.transpose(2, 0, 1) / 255.0 - aug.mean) / aug.std
    return out


class WorkerAugment:
    """The CPU path: ``PILAugment`` per image in worker processes, the next batch prepared while the
    current step runs (``prefetch``). Same interface as ``GPUAugment`` (``views``, ``normalize``).

    Deterministic: a batch's views depend only on its images and ``seed`` (chunk ``c`` of ``CHUNK``
    images draws from ``random.Random(seed + c)``), not on the number of workers or on timing."""

    def __init__(self, preset: str, image_size: int, mean: Sequence[float], std: Sequence[float],
                 workers: int = 1) -> None:
        _params(preset)
        if workers < 1:
            raise ValueError(f"WorkerAugment needs at least 1 worker process, got {workers}")
        self.preset, self.size, self.workers = preset, image_size, workers
        self.mean_t, self.std_t = tuple(float(m) for m in mean), tuple(float(s) for s in std)
        self._norm = GPUAugment("none", image_size, mean, std)
        self._pool = None  # forked on first use, ended by close() (scale.engine.workers: their lifecycle)
        self._pending: tuple[int, int, list] | None = None  # (key of the batch, seed, futures)

    def normalize(self, x_uint8: torch.Tensor) -> torch.Tensor:
        return self._norm.normalize(x_uint8)

    def _submit(self, x_uint8: torch.Tensor, seed: int, n_views: int) -> list:
        if self._pool is None:
            self._pool = process_pool(self.workers)
        x = x_uint8.cpu().numpy()
        return [self._pool.submit(_augment_chunk, self.preset, self.size, self.mean_t, self.std_t,
                                  x[s:s + CHUNK], seed + c, n_views)
                for c, s in enumerate(range(0, len(x), CHUNK))]

    def prefetch(self, x_uint8: torch.Tensor, seed: int, n_views: int = 2) -> None:
        """Start augmenting the next batch in the workers (collected by the ``views`` call with this seed)."""
        self._pending = (seed, n_views, self._submit(x_uint8, seed, n_views))

    def views(self, x_uint8: torch.Tensor, n_views: int = 2, seed: int | None = None) -> torch.Tensor:
        """``(B, 3, S, S)`` uint8 -> ``(n_views B, 3, S, S)`` float32, rows ``[view1; view2]``. Without a
        ``seed``, one is drawn from torch's generator (which the trainer reseeds every step)."""
        if seed is None:
            seed = int(torch.randint(0, 2**62, (1,)))
        if self._pending is not None and self._pending[:2] == (seed, n_views):
            futures = self._pending[2]
        else:
            futures = self._submit(x_uint8, seed, n_views)
        self._pending = None
        out = np.concatenate([f.result() for f in futures], axis=1)  # (n_views, B, 3, S, S)
        return torch.from_numpy(out.reshape(-1, *out.shape[2:])).to(x_uint8.device)  # (a CPU run resumed on CUDA)

    def close(self) -> None:
        """End the worker processes (waiting for them); the next ``views`` forks new ones."""
        pool, self._pool, self._pending = self._pool, None, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)

    def __del__(self) -> None:  # a trainer dropped without close() (runs in one process, tests) frees its workers
        pool = getattr(self, "_pool", None)
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)


def usable_cores() -> int:
    """CPUs this process may run on (its affinity mask where the OS keeps one, else the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


FREE_WINDOW_S = 0.1  # free_cores: how long the idle time of the usable cores is sampled
FREE_TTL_S = 10.0  # free_cores: a measurement younger than this is reused (runs built back to back agree)
_free_cache: tuple[float, float, str] | None = None  # (when, free cores, how)


def free_cores() -> tuple[float, str]:
    """``(free, how)``: how many of this process's usable cores (``usable_cores``) other processes leave idle now.

    Measured on Linux: each usable core's idle time (``idle + iowait`` in ``/proc/stat``) over ``FREE_WINDOW_S``
    while this process sleeps, summed over the cores (a core busy with another job counts 0, an idle one 1).
    Elsewhere: the usable cores less the 1-minute load average (which lags, and counts this process too). A
    measurement is reused for ``FREE_TTL_S``."""
    global _free_cache
    now = time.monotonic()
    if _free_cache is not None and now - _free_cache[0] < FREE_TTL_S:
        return _free_cache[1], _free_cache[2]
    cores = usable_cores()
    try:
        cpus = os.sched_getaffinity(0)
        before = _cpu_times(cpus)
        time.sleep(FREE_WINDOW_S)
        after = _cpu_times(cpus)
        shares = [(after[c][0] - before[c][0]) / (after[c][1] - before[c][1]) for c in after
                  if c in before and after[c][1] > before[c][1]]
        if not shares:
            raise OSError("no CPU time advanced")
        free, how = min(float(cores), sum(shares) * len(cpus) / len(shares)), f"idle time over {FREE_WINDOW_S:g} s"
    except (OSError, AttributeError, ValueError, KeyError):  # no /proc/stat or no affinity (macOS, Windows)
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
        free, how = max(0.0, cores - load), "usable cores less the 1-minute load average"
    _free_cache = (now, free, how)
    return free, how


def _cpu_times(cpus: set[int]) -> dict[int, tuple[int, int]]:
    """``{cpu: (idle, total)}`` clock ticks of the given cores from ``/proc/stat`` (Linux)."""
    out = {}
    with open("/proc/stat") as f:
        for line in f:
            name, *vals = line.split()
            if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cpus:
                v = [int(x) for x in vals[:8]]  # user nice system idle iowait irq softirq steal
                out[int(name[3:])] = (v[3] + v[4], sum(v))
    return out


def resolve_augment_path(path: str, device: torch.device, *, threads: int, workers: int = 1,
                         distributed: bool = False) -> tuple[str, str]:
    """``(path, why)``: the path ``"auto"`` stands for here, and the reason in words.

    ``"auto"`` is batched on CUDA (one call augments the batch on the device) and under torch.distributed
    (worker processes forked from a process whose process-group threads already run can hang its exit:
    a frozen peer then never lets a rank stop). On a CPU it is the per-image worker path when the worker
    processes get cores of their own: ``threads + workers`` at most the cores other processes leave free
    (``free_cores``, rounded), where they prepare the next batch while the step runs; batched otherwise: with
    every core busy, with torch's threads or another job, the workers take cycles from the step (the main job
    on 2 cores, wall time: workers 1.02x faster at 1 torch thread on an idle machine, batched 1.17x faster at 2;
    at 1 thread beside another job the workers lost, 0.95x; BENCHMARKS.md, ``bench.bench_main_job``). The choice
    depends on the machine and its load, so the ``Trainer`` keeps the resolved path in its config (checkpoint,
    config.json) and a resume keeps it; ``why`` gives the cores counted and how."""
    if path not in AUGMENT_PATHS:
        raise ValueError(f"augment path must be one of {', '.join(AUGMENT_PATHS)}, got {path!r}")
    if path != "auto":
        return path, "as asked"
    if device.type != "cpu":
        return "batched", f"auto: on {device.type} the batch is augmented on the device"
    if distributed:
        return "batched", "auto: worker processes are not forked under torch.distributed"
    cores = usable_cores()
    free, how = free_cores()
    counted = f"{free:.1f} of {cores} core(s) free ({how})"
    if threads + workers <= round(free):
        return "workers", f"auto: {threads} torch thread(s) and {workers} worker process(es) fit in {counted}"
    return "batched", f"auto: {threads} torch thread(s) and {workers} worker process(es) need more than {counted}"


def build_views(preset: str, image_size: int, mean: Sequence[float], std: Sequence[float], device: torch.device,
                path: str, workers: int = 1):
    """The augmentation of a training run on a resolved ``path`` (``resolve_augment_path``): ``GPUAugment``
    (``"batched"``) or ``WorkerAugment`` (``"workers"``)."""
    if path == "batched":
        return GPUAugment(preset, image_size, mean, std).to(device)
    if path == "workers":
        return WorkerAugment(preset, image_size, mean, std, workers)
    raise ValueError(f"build_views takes a resolved path, batched or workers (resolve_augment_path), got {path!r}")
