"""The project's batched augmentation against the paper's pipeline (per-image PIL in DataLoader workers).

Same model (SSLModel: ResNet-18 CIFAR stem + head), same batch, same augmentation preset, same SimCLR
step; only the way the two augmented views reach the model differs:

    batched     uint8 dataset on the device, one batched kornia call per view (scale.engine.augment.GPUAugment),
                in the training process (the trainer's path)
    paper's     torch DataLoader over uint8 images, each image augmented on its own with PIL by worker
                processes (scale.engine.augment.PILAugment: torchvision's transforms and sampling rules, written
                with PIL because torchvision does not import beside the CPU torch build), collated, copied

Thread counts are fixed per comparison (``--threads``, each value a separate side-by-side comparison:
the training process's torch threads; workers run 1 thread each). Data: CIFAR-shaped uint8 images made
on the spot. The two pipelines run interleaved (A, B, A, B, ...); reported are medians of the rounds.

    python -m bench.bench_pipeline [--quick] [--threads 1 2] [--device auto] [--width 16] [--batch 128]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch

from bench._util import out_help, result_path, run_header, write_atomic
from scale.engine.augment import PerImageViews, PILAugment
from scale.engine.config import TrainConfig
from scale.engine.timing import synchronize
from scale.engine.train import Trainer

OUT = Path(__file__).resolve().parent / "results" / "pipeline.md"

MEAN, STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)


def _one_thread(_: int) -> None:  # DataLoader worker_init_fn: a worker augments on one core
    torch.set_num_threads(1)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--width", type=int, default=16, help="ResNet-18 base width (64 = standard; default 16)")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--steps", type=int, default=3, help="timed steps per round and pipeline")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workers", type=int, default=1, help="DataLoader workers of the paper's pipeline")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="torch threads of the training "
                    "process, fixed; one comparison per value (default: 1 2)")
    ap.add_argument("--preset", default="e3")
    ap.add_argument("--precision", default=None)
    ap.add_argument("--quick", action="store_true", help="width 8, batch 32, 1 step, 1 round, 1 thread")
    ap.add_argument("--out", help=out_help(OUT))
    args = ap.parse_args(argv)
    args.out = str(result_path(args.out, OUT, args.quick))
    if args.quick:
        args.width, args.batch, args.steps, args.rounds, args.threads = 8, 32, 1, 1, [1]
    argv = argv if argv is not None else sys.argv[1:]
    header = run_header("bench.bench_pipeline", argv, args.threads[0])
    sections = [compare(args, t) for t in args.threads]
    text = ("# Pipeline: batched augmentation against the paper's per-image pipeline\n\n" + header + "\n\n"
            + "\n".join(sections))
    write_atomic(args.out, text)
    print(text)
    return 0


def compare(args, threads: int) -> str:
    torch.set_num_threads(threads)
    dev = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else
                       ("cpu" if args.device == "auto" else args.device))
    n = args.batch * (args.steps + 1)
    x = torch.randint(0, 256, (n, 3, 32, 32), dtype=torch.uint8)

    from scale.engine.dataset import Dataset

    data = Dataset("cifar-shaped", x, torch.zeros(n, dtype=torch.long), x[:8], torch.zeros(8, dtype=torch.long),
                   10, MEAN, STD)
    cfg = TrainConfig(dataset="cifar-shaped", method="simclr", backbone="resnet18", backbone_width=args.width,
                      image_size=32, head="relu2", head_width=2048, head_out=2048, head_bn=True, head_out_bn=True,
                      augment=args.preset, batch_size=args.batch, epochs=1, optimizer="adam", lr=1e-3,
                      precision=args.precision or ("bf16" if dev.type == "cuda" else "fp32"), probe_size=8,
                      augment_path="batched")
    trainer = Trainer(cfg, data, dev, log=None)
    pil = PILAugment(args.preset, 32, MEAN, STD)
    loader = torch.utils.data.DataLoader(PerImageViews(x, pil), batch_size=args.batch, shuffle=True,
                                         num_workers=args.workers, drop_last=True, persistent_workers=args.workers > 0,
                                         worker_init_fn=_one_thread)

    def step(views: torch.Tensor) -> None:
        loss, *_ = trainer.step_loss(views)
        trainer.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        trainer.optimizer.step()

    def on_device(steps: int) -> float:
        synchronize(dev)
        t = time.perf_counter()
        for _ in range(steps):
            idx = torch.randint(0, n, (args.batch,), device=dev)
            step(trainer.augment.views(trainer.train_x[idx]))
        synchronize(dev)
        return steps * args.batch / (time.perf_counter() - t)

    it = iter(loader)

    def conventional(steps: int) -> float:
        nonlocal it
        synchronize(dev)
        t = time.perf_counter()
        for _ in range(steps):
            try:
                v1, v2 = next(it)
            except StopIteration:
                it = iter(loader)
                v1, v2 = next(it)
            step(torch.cat([v1, v2]).to(dev, non_blocking=True))
        synchronize(dev)
        return steps * args.batch / (time.perf_counter() - t)

    def aug_only_device(steps: int) -> float:
        synchronize(dev)
        t = time.perf_counter()
        for _ in range(steps):
            trainer.augment.views(trainer.train_x[torch.randint(0, n, (args.batch,), device=dev)])
        synchronize(dev)
        return steps * args.batch / (time.perf_counter() - t)

    per_image = PerImageViews(x, pil)

    def aug_only_per_image(steps: int) -> float:  # in this process, one image at a time
        t = time.perf_counter()
        for _ in range(steps):
            torch.stack([torch.cat(per_image[int(i)]) for i in torch.randint(0, n, (args.batch,))])
        return steps * args.batch / (time.perf_counter() - t)

    on_device(1)
    conventional(1)  # warm-up (workers start, kernels load)
    rows = {"on-device": [], "conventional": [], "aug on-device": [], "aug per-image": []}
    for _ in range(args.rounds):
        rows["on-device"].append(on_device(args.steps))
        rows["conventional"].append(conventional(args.steps))
        rows["aug on-device"].append(aug_only_device(args.steps))
        rows["aug per-image"].append(aug_only_per_image(max(1, args.steps // 2)))
    med = {k: statistics.median(v) for k, v in rows.items()}
    ratio, aug_ratio = med["on-device"] / med["conventional"], med["aug on-device"] / med["aug per-image"]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    names = {"on-device": "training step, batched (kornia, in process)",
             "conventional": f"training step, paper's (PIL per image, {args.workers} worker(s))",
             "aug on-device": "augmentation only, batched (kornia)",
             "aug per-image": "augmentation only, PIL per image"}
    return f"""## {threads} torch thread(s) in the training process

SimCLR step (NT-Xent), ResNet-18 CIFAR stem of base width {args.width}, head relu2 2048-2048 with BN, Adam,
{cfg.precision}; batch {args.batch} images (2 views each), preset {args.preset}, CIFAR-shaped uint8 data;
device {dev}; 1-minute load average at the end {load:.1f}; medians of {args.rounds} interleaved rounds.

| pipeline | images/s (median) | all rounds |
|---|---|---|
""" + "".join(f"| {names[k]} | {med[k]:.1f} | {', '.join(f'{v:.1f}' for v in rows[k])} |\n" for k in rows) + f"""
Training step, batched / paper's pipeline: **{ratio:.2f}x**. Augmentation alone, batched / PIL per image:
**{aug_ratio:.2f}x** ({threads} thread(s)).
"""


if __name__ == "__main__":
    sys.exit(main())
