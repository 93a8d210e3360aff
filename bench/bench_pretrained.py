"""Throughput of the E6 measurement: images per second through each pretrained model, orbits made on the device.

    python -m bench.bench_pretrained [--image-size 224] [--trajectories 2] [--steps 12] [--device cpu]

Each model is built at its official widths (random weights: throughput does not depend on their
values, and no checkpoint is needed) and run through ``scale.pretrained.measure`` on ``digits``
images, all four families, so the time covers orbit generation (kornia), both forward passes,
the float64 orbit metrics and the transfers of per-trajectory numbers to the host. Orbit generation
alone is timed too. One warm-up pass per model is not counted. Results go to
``bench/results/pretrained.md`` (written atomically) with the device, versions and commit.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import torch

from bench._util import out_help, result_path
from scale.engine.checkpoint import atomic_write_text
from scale.engine.pretrained_models import MODELS, Dims, build_model
from scale.engine.timing import synchronize
from scale.geometry.orbits import FAMILIES, digits_images, orbit_batch
from scale.pretrained import Config, measure
from scale.runs.run_report import device_name, git_commit, versions

RESULTS = Path(__file__).resolve().parent / "results" / "pretrained.md"


STAND_IN = {  # --stand-in: small widths in each model's official layout (a check of the bench, not a measurement)
    "dino_vits16": Dims(backbone=48, hidden=32, bottleneck=16, out=64),
    "dino_resnet50": Dims(backbone=4, hidden=32, bottleneck=16, out=64),
    "vicreg_resnet50": Dims(backbone=4, hidden=32, bottleneck=32),
    "barlow_resnet50": Dims(backbone=4, hidden=32, bottleneck=32),
}


def bench(cfg: Config, models: list[str], stand_in: bool = False) -> list[dict]:
    device = torch.device(cfg.device)
    images = digits_images(cfg.trajectories, cfg.image_size, cfg.seed)
    n_points = cfg.trajectories * len(cfg.families) * (1 + cfg.steps)  # per family: anchors + orbit points
    rows = []
    gen = images.to(device)
    orbit_batch(gen, "blur", cfg.steps)  # warm-up
    synchronize(device)
    start = time.perf_counter()
    for fam in cfg.families:
        orbit_batch(gen, fam, cfg.steps)
    synchronize(device)
    gen_rate = cfg.trajectories * cfg.steps * len(cfg.families) / (time.perf_counter() - start)
    for name in models:
        model = build_model(name, STAND_IN[name] if stand_in else None, seed=cfg.seed).to(device).eval()
        warm = Config([name], **{**_small(cfg), "steps": cfg.steps, "families": ["blur"]})
        measure(model, images[:2], warm)  # warm-up (two images: the least orbit geometry takes); first calls are slow
        synchronize(device)
        start = time.perf_counter()
        measure(model, images, cfg)
        synchronize(device)
        seconds = time.perf_counter() - start
        rows.append({"model": name, "images": n_points, "seconds": seconds, "images_per_s": n_points / seconds})
        print(f"{name}: {n_points} images in {seconds:.2f} s = {n_points / seconds:.1f} images/s", flush=True)
        del model
    return [{"model": "orbit generation only", "images": 0, "seconds": 0.0, "images_per_s": gen_rate}, *rows]


def _small(cfg: Config) -> dict:
    return {k: getattr(cfg, k) for k in ("image_size", "batch_images", "families", "device", "seed")}


def report(cfg: Config, rows: list[dict], stand_in: bool = False) -> str:
    lines = [
        "# E6 throughput: pretrained models with on-device orbit generation",
        "",
        f"`python -m bench.bench_pretrained --image-size {cfg.image_size} --trajectories {cfg.trajectories} "
        f"--steps {cfg.steps} --batch-images {cfg.batch_images} --device {cfg.device} "
        f"--threads {torch.get_num_threads()}{' --stand-in' if stand_in else ''}`",
        *(["", "**Stand-in widths (`--stand-in`): a check that the bench runs, not a measurement.**"] if stand_in
          else []),
        "",
        f"Device: {device_name(torch.device(cfg.device))}. Versions: "
        + ", ".join(f"{k} {v}" for k, v in versions().items())
        + f". Commit: {git_commit()[:12]}. Load average at the end (1/5/15 min): "
        + " / ".join(f"{v:.1f}" for v in os.getloadavg())
        + " (shared machine: rates are lower bounds).",
        "",
        f"Per model: {cfg.trajectories} trajectories x {len(cfg.families)} families x (1 anchor + {cfg.steps} steps) "
        f"images of {cfg.image_size} px, {'stand-in' if stand_in else 'official'} widths, random weights, batches of "
        f"{cfg.batch_images} images x "
        f"{cfg.steps} steps; time covers orbit generation, backbone + head, float64 metrics.",
        "",
        "| model | images | seconds | images/s |",
        "|---|---|---|---|",
    ]
    for r in rows:
        if r["images"]:
            lines.append(f"| {r['model']} | {r['images']} | {r['seconds']:.2f} | {r['images_per_s']:.1f} |")
        else:
            lines.append(f"| {r['model']} (kornia, 4 families) | | | {r['images_per_s']:.1f} |")
    full = 50 * 4 * (1 + 12)
    slowest = min(r["images_per_s"] for r in rows if r["images"])
    lines += [
        "",
        f"The paper's default per model is 50 x 4 x (1 + 12) = {full} images: about {full / slowest:.0f} s per model "
        "at the slowest rate above on this device.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.bench_pretrained", description=__doc__.split("\n\n")[0])
    p.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--trajectories", type=int, default=2)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--batch-images", type=int, default=2)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads, fixed and recorded (default: 2)")
    p.add_argument("--stand-in", action="store_true", help="small widths in the official layouts: checks that the "
                   "bench runs (tests), measures nothing")
    p.add_argument("--out", help=out_help(RESULTS))
    a = p.parse_args(argv)
    a.out = str(result_path(a.out, RESULTS, a.stand_in))
    if a.trajectories < 2:  # as scale.pretrained: the verdict's interval is taken over trajectories
        p.error("--trajectories must be at least 2")
    torch.set_num_threads(a.threads)
    cfg = Config(
        models=a.models, trajectories=a.trajectories, steps=a.steps, image_size=a.image_size,
        batch_images=a.batch_images, families=list(FAMILIES), device=a.device,
    )  # fmt: skip
    rows = bench(cfg, a.models, a.stand_in)
    atomic_write_text(Path(a.out), report(cfg, rows, a.stand_in))
    print(f"results: {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
