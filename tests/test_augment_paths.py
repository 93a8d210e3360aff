"""The two augmentation paths draw the same transforms (scale.engine.augment).

The batched path's parameters come from kornia's own samplers (``forward_parameters``), the per-image
path's from ``PILAugment.sample``; each statistic is compared with a two-sample Kolmogorov-Smirnov test
on ``N_SAMPLES`` draws per path. ``KS_ALPHA`` is the false-alarm rate of each comparison when the
distributions are equal; with ``N_SAMPLES = 4000`` per side the test detects a CDF gap of about
``1.63 * sqrt(2 / 4000) ~ 0.04`` (at alpha 1e-3 the critical value is ``1.95 * sqrt(2/N) ~ 0.044``). Rates
(flip, jitter applied) are checked within ``RATE_SIGMAS`` binomial standard deviations. Negative
control: a crop scale range of (0.08, 1) against the e3 table's (0.2, 1) is rejected by the same test.
Outputs: on one image, the average over ``N_OUTPUT`` views of each view's pixel mean and standard
deviation agree between the paths within ``OUTPUT_SYSTEMATIC + RATE_SIGMAS`` standard errors (pixel values
in [0, 1]; the standard error from the samples themselves). ``OUTPUT_SYSTEMATIC`` (1/255) allows PIL's
rounding to uint8 after each operation and its integer grey mean in the contrast step (each op alone
shifts the average by under 0.002, measured). Negative control: the batched path rotating only half of
the images (kornia's default ``p=0.5``, a shift of about 0.02) fails the same check.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from scipy.stats import ks_2samp

from scale.engine.augment import PRESET_PARAMS, GPUAugment, PILAugment, _crop_box

N_SAMPLES = 4000
KS_ALPHA = 1e-3
RATE_SIGMAS = 5.0
SIDE = 32
N_OUTPUT = 2000
OUTPUT_SYSTEMATIC = 1.0 / 255.0
MEAN3, STD3 = (0.5, 0.4, 0.3), (0.2, 0.25, 0.3)
OUT_SIDE = 16  # images of the output check (small: the check is about distributions, not resolution)


def _kornia_params(preset: str) -> dict[str, np.ndarray]:
    torch.manual_seed(0)
    aug = GPUAugment(preset, SIDE, (0.5,) * 3, (0.25,) * 3).augment
    shape = torch.Size([N_SAMPLES, 3, SIDE, SIDE])
    out = {}
    for op in aug:
        p = op.forward_parameters(shape)
        name = type(op).__name__
        if name == "RandomResizedCrop":
            src = p["src"]
            w = src[:, 1, 0] - src[:, 0, 0] + 1
            h = src[:, 2, 1] - src[:, 1, 1] + 1
            out["area"], out["aspect"] = (w * h / SIDE**2).numpy(), (w / h).numpy()
        elif name == "RandomHorizontalFlip":
            out["flip"] = p["batch_prob"].numpy()
        elif name == "RandomRotation":
            out["angle"], out["rotated"] = p["degrees"].numpy(), p["batch_prob"].numpy()
        elif name == "ColorJitter":
            on = p["batch_prob"].numpy() > 0.5
            out["jitter_on"] = on
            for key in ("brightness", "contrast", "saturation", "hue"):
                out[key] = p[f"{key}_factor"].numpy()[on]
    return out


def _pil_params(preset: str, seed: int = 0) -> dict[str, np.ndarray]:
    rng = random.Random(seed)
    aug = PILAugment(preset, SIDE, (0.5,) * 3, (0.25,) * 3)
    draws = [aug.sample(SIDE, rng) for _ in range(N_SAMPLES)]
    out = {"flip": np.array([d["flip"] for d in draws], float), "angle": np.array([d["angle"] for d in draws]),
           "jitter_on": np.array(["jitter" in d for d in draws])}
    if "box" in draws[0]:
        h = np.array([d["box"][2] for d in draws], float)
        w = np.array([d["box"][3] for d in draws], float)
        out["area"], out["aspect"] = w * h / SIDE**2, w / h
    jit = [d["jitter"] for d in draws if "jitter" in d]
    for i, key in enumerate(("brightness", "contrast", "saturation", "hue")):
        out[key] = np.array([j[i] for j in jit])
    return out


@pytest.mark.parametrize("preset", ["e3", "simclr"])
def test_per_image_and_batched_paths_draw_the_same_transforms(preset):
    k, p = _kornia_params(preset), _pil_params(preset)
    P = PRESET_PARAMS[preset]
    keys = ["area", "aspect", "brightness", "contrast", "saturation", "hue"] + (["angle"] if P["rotation"] else [])
    for key in keys:
        res = ks_2samp(k[key], p[key])
        assert res.pvalue > KS_ALPHA, f"{preset} {key}: KS statistic {res.statistic:.3f}, p {res.pvalue:.1e}"
    for key, rate in (("flip", P["flip"]), ("jitter_on", P["jitter_p"])):
        sd = np.sqrt(rate * (1 - rate) / N_SAMPLES)
        for draws in (k[key], p[key]):
            assert abs(float(np.mean(draws)) - rate) <= RATE_SIGMAS * sd, (preset, key)
    if P["rotation"]:  # every image is rotated (torchvision's rule), by an angle that may be near 0
        assert np.all(k["rotated"] == 1.0)


def test_negative_control_other_crop_scale_is_detected():
    k = _kornia_params("e3")
    rng = random.Random(1)
    boxes = [_crop_box(SIDE, SIDE, (0.2, 1.0), rng) for _ in range(N_SAMPLES)]
    area = np.array([b[2] * b[3] for b in boxes], float) / SIDE**2
    assert ks_2samp(k["area"], area).pvalue < 1e-6


def _view_stats(views: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """(average of the per-view mean and std, their standard errors)."""
    stats = torch.stack([views.mean(dim=(1, 2, 3)), views.std(dim=(1, 2, 3))]).double()
    return stats.mean(dim=1).numpy(), (stats.std(dim=1) / np.sqrt(stats.shape[1])).numpy()


def test_outputs_agree_on_one_image(monkeypatch):
    """Per-view pixel mean and std, averaged over views of one image: batched (kornia) vs per image (PIL)."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (3, OUT_SIDE, OUT_SIDE), generator=gen, dtype=torch.uint8)
    x[:, :, : OUT_SIDE // 2] //= 4  # a dark left half: crops and rotations move the mean
    mean, std = (0.0,) * 3, (1.0,) * 3
    random.seed(0)
    per_image = _view_stats(torch.stack([PILAugment("e3", OUT_SIDE, mean, std).views(x)[0] for _ in range(N_OUTPUT)]))

    def batched() -> np.ndarray:
        torch.manual_seed(0)
        return _view_stats(GPUAugment("e3", OUT_SIDE, mean, std).views(x[None].expand(N_OUTPUT, -1, -1, -1))[:N_OUTPUT])

    def gap_in_tolerances() -> np.ndarray:
        (a, se_a), (b, se_b) = batched(), per_image
        return np.abs(a - b) / (OUTPUT_SYSTEMATIC + RATE_SIGMAS * np.hypot(se_a, se_b))

    assert np.all(gap_in_tolerances() <= 1.0), f"gap (mean, std) in tolerances: {gap_in_tolerances()}"
    import kornia.augmentation as K  # negative control: rotating half of the images only

    half = K.RandomRotation
    monkeypatch.setattr(K, "RandomRotation", lambda degrees, p=1.0, **kw: half(degrees=degrees, p=0.5, **kw))
    assert gap_in_tolerances().max() > 1.0


CROP_ROUNDING = 1e-4  # pixels in [0, 1]: float32 rounding of the two samplers' coordinates (7e-6 measured)


@pytest.mark.parametrize("preset", [p for p, v in PRESET_PARAMS.items() if v["crop"] is not None])
def test_the_batched_crop_is_kornias_slice_crop_to_rounding(preset):
    """The trainer's crop warps the box in one batched resample (speed: ``build_augment``); kornia's default
    slices each box and resizes it. Same seed, same boxes: the views agree to float rounding. Negative control:
    the slice crop with the other corner convention (``align_corners=False``, half a pixel) is far outside it."""
    import kornia.augmentation as K

    from scale.engine.augment import RATIO

    crop = GPUAugment(preset, SIDE, (0.5,) * 3, (0.25,) * 3).augment[0]
    assert type(crop).__name__ == "RandomResizedCrop" and crop.flags["cropping_mode"] == "resample"
    x = torch.rand(256, 3, SIDE, SIDE, generator=torch.Generator().manual_seed(0))

    def views(op) -> torch.Tensor:
        torch.manual_seed(1)
        return op(x)

    ours = views(crop)
    scale = PRESET_PARAMS[preset]["crop"]
    sliced = views(K.RandomResizedCrop((SIDE, SIDE), scale=scale, ratio=RATIO, cropping_mode="slice"))
    assert float((ours - sliced).abs().max()) <= CROP_ROUNDING
    shifted = views(K.RandomResizedCrop((SIDE, SIDE), scale=scale, ratio=RATIO, cropping_mode="slice",
                                        align_corners=False))
    assert float((ours - shifted).abs().max()) > 100 * CROP_ROUNDING


def test_worker_path_is_deterministic_and_prefetch_changes_nothing():
    """WorkerAugment: the views depend on the images and the seed only (not on the worker count, nor on
    whether the batch was prefetched); another seed gives other views (control)."""
    from scale.engine.augment import WorkerAugment

    gen = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (20, 3, OUT_SIDE, OUT_SIDE), generator=gen, dtype=torch.uint8)
    one, two = WorkerAugment("e3", OUT_SIDE, MEAN3, STD3, 1), WorkerAugment("e3", OUT_SIDE, MEAN3, STD3, 2)
    try:
        a = one.views(x, seed=5)
        two.prefetch(x, 5)
        b = two.views(x, seed=5)
        assert a.shape == (40, 3, OUT_SIDE, OUT_SIDE) and a.dtype == torch.float32
        assert torch.equal(a, b)
        assert not torch.equal(a, one.views(x, seed=6))
        assert torch.equal(one.normalize(x), GPUAugment("none", OUT_SIDE, MEAN3, STD3).normalize(x))
    finally:
        one.close()
        two.close()


@pytest.mark.parametrize(("threads", "cores", "free", "expected"), [
    (1, 2, 2.0, "workers"), (2, 2, 2.0, "batched"), (1, 1, 1.0, "batched"), (3, 8, 8.0, "workers"),
    (8, 8, 8.0, "batched"),
    (1, 2, 1.0, "batched"), (1, 2, 1.6, "workers"), (3, 8, 3.4, "batched"),  # cores another job keeps busy
])
def test_auto_takes_workers_only_when_they_get_a_free_core(monkeypatch, threads, cores, free, expected):
    """On a CPU, ``auto`` is the per-image path when torch's threads leave a core for each worker process among
    the cores other processes leave free (measured faster there), batched otherwise (measured faster when every
    core is busy); the reason names the cores counted."""
    from scale.engine import augment

    monkeypatch.setattr(augment, "usable_cores", lambda: cores)
    monkeypatch.setattr(augment, "free_cores", lambda: (free, "stand-in"))
    path, why = augment.resolve_augment_path("auto", torch.device("cpu"), threads=threads, workers=1)
    assert path == expected and why.startswith("auto:") and f"{free:.1f} of {cores} core" in why
    # an explicit path is never second-guessed; CUDA and torch.distributed are batched whatever the cores
    assert augment.resolve_augment_path("workers", torch.device("cpu"), threads=8)[0] == "workers"
    assert augment.resolve_augment_path("auto", torch.device("cuda"), threads=1)[0] == "batched"
    assert augment.resolve_augment_path("auto", torch.device("cpu"), threads=1, distributed=True)[0] == "batched"
    with pytest.raises(ValueError, match="one of auto, batched, workers"):
        augment.resolve_augment_path("sideways", torch.device("cpu"), threads=1)


def test_free_cores_sees_a_core_kept_busy(monkeypatch):
    """``free_cores`` on this machine's own counters: a process spinning on a core this process may use leaves
    at most a fraction of that core free (the real fault: another job), and nothing exceeds the usable cores."""
    import os
    import subprocess
    import sys

    from scale.engine import augment

    cpus = sorted(os.sched_getaffinity(0))
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {cpus[0]})  # count one core: the one kept busy
    monkeypatch.setattr(augment, "usable_cores", lambda: 1)
    monkeypatch.setattr(augment, "_free_cache", None)
    spin = f"import os\nos.sched_setaffinity(0, {{{cpus[0]}}})\nwhile True: pass"
    busy = subprocess.Popen([sys.executable, "-c", spin])
    try:
        import time

        time.sleep(0.3)  # the spinner is running
        free, how = augment.free_cores()
        assert 0.0 <= free <= 0.5 and "idle time" in how
        assert augment.free_cores() == (free, how)  # reused within FREE_TTL_S
    finally:
        busy.kill()
        busy.wait()
