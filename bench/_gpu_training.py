"""The GPU suite's training sections (``bench.gpu_suite``): the project's trainer in each configuration, the paper's
pipeline on the same device, the tracker's overhead, and the headline that changes one thing at a time.

Every training row is SimCLR on CIFAR-shaped uint8 images on the device, ResNet-18, the paper's E3 head (``HEAD``),
Adam; two epochs, the second timed (the first pays cuDNN autotuning and compilation, shown beside it), images/s and
the fraction of the bf16 compute floor (FLOPs of one step by ``torch.utils.flop_counter`` times the steps, over
``--peak-tflops``).
"""

from __future__ import annotations

import time
from functools import partial

import torch

from bench._gpu_run import Run
from scale.engine.timing import synced_seconds, synchronize

MEAN, STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)
HEAD = "relu2"  # the paper's E3 head: 512-2048 BN ReLU 2048 BN (SimCLR's recipe: BatchNorm after both Linear layers)


def _config(args, precision: str, compile_: bool):
    from scale.engine import methods
    from scale.engine.config import TrainConfig

    d = methods.get("simclr").recipe
    return TrainConfig(
        dataset="cifar-shaped", method="simclr", backbone="resnet18", backbone_width=args.width, image_size=args.size,
        head=HEAD, head_width=args.head_width, head_out=args.head_width, head_bn=d["head_bn"],
        head_out_bn=d["head_out_bn"], head_bias=d["head_bias"], augment="e3", batch_size=args.batch, epochs=2,
        optimizer=d["optimizer"], lr=d["lr"], precision=precision, compile=compile_, probe_size=8, warmup_epochs=0,
        augment_path="batched")


def _data(args):
    from scale.engine.dataset import Dataset

    gen = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (args.images, 3, args.size, args.size), generator=gen, dtype=torch.uint8)
    y = torch.zeros(args.images, dtype=torch.long)
    return Dataset("cifar-shaped", x, y, x[:8], y[:8], 10, MEAN, STD), x


def step_flops(trainer, args) -> float:
    """FLOPs of one training step (forward + backward of both views), counted by torch's FLOP counter."""
    from torch.utils.flop_counter import FlopCounterMode

    x = trainer.augment.views(trainer.train_x[: args.batch])
    counter = FlopCounterMode(display=False)
    with counter:
        loss, *_ = trainer.step_loss(x)
        loss.backward()
    trainer.optimizer.zero_grad(set_to_none=True)
    return float(counter.get_total_flops())


class _Contiguous(torch.nn.Module):
    """The trainer's model fed batches in the default memory layout (the trainer makes them channels_last)."""

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor):
        return self.inner(x.contiguous(memory_format=torch.contiguous_format))


TRAINING = {  # section -> (label, precision, compile, channels_last)
    "fp32": ("fp32", "fp32", False, True), "bf16": ("bf16", "bf16", False, True),
    "layout": ("bf16, channels_last off", "bf16", False, False),
    "compile": ("bf16 + torch.compile", "bf16", True, True),
}


def _training_table(run: Run) -> None:
    """The table's heading, unless the previous section's row ended the same table."""
    if run.figures.get("training_rows_end") == len(run.lines):
        return
    a = run.args
    run.lines += ["## The project's trainer: SimCLR ResNet-18 on a CIFAR-shaped epoch", "",
                  f"{a.images} images of {a.size} px on the device, batch {a.batch}, backbone width {a.width}, head "
                  f"{HEAD} {a.head_width} (the paper's E3 head), Adam; epoch 2 timed (epoch 1 beside it).", "",
                  "| configuration | epoch 1 s | epoch 2 s | images/s | step GFLOP | floor s (bf16 peak) | "
                  "floor / epoch |", "|---|---|---|---|---|---|---|"]


def training(run: Run, section: str) -> None:
    """One configuration of the project's trainer (``TRAINING[section]``); the bf16 one carries the tracker."""
    from scale.curvature.tracking import HessianTracker
    from scale.engine.train import Trainer

    label, precision, compile_, channels_last = TRAINING[section]
    a, dev = run.args, run.dev
    data, _ = _data(a)
    eager = compile_ and a.tiny  # inductor on a CPU takes minutes: dynamo with the eager backend in the check
    cfg = _config(a, precision, compile_ and not eager)
    tracker = HessianTracker("epoch") if section == "bf16" else None
    trainer = Trainer(cfg, data, dev, hooks=[tracker] if tracker else [], log=None)
    if not channels_last:  # weights and batches back in the default layout
        trainer.model.to(memory_format=torch.contiguous_format)
        trainer.forward_model = _Contiguous(trainer.forward_model)
    flops = step_flops(trainer, a) if not compile_ else run.figures.get("step_flops", float("nan"))
    run.figures.setdefault("step_flops", flops)
    if eager:
        trainer.forward_model = torch.compile(trainer.forward_model, backend="eager")
        label += " (tiny: dynamo, eager backend)"
    trainer.fit()
    synchronize(dev)
    h = trainer.state.history
    e2 = h[-1]["epoch_seconds"]
    floor = flops * trainer.steps_per_epoch / (a.peak_tflops * 1e12)
    run.figures[section] = e2
    _training_table(run)
    if run.lines[-1] == "":
        run.lines.pop()  # the table goes on
    run.lines += [f"| {label} | {h[0]['epoch_seconds']:.2f} | {e2:.2f} | {h[-1]['images_per_s']:.0f} | "
                  f"{flops / 1e9:.1f} | {floor:.3f} | {100 * floor / e2:.1f} % |", ""]
    run.figures["training_rows_end"] = len(run.lines)
    if tracker is not None and tracker.records:
        run.figures["tracking"] = ([r["seconds"] for r in tracker.records], e2, tracker.records[-1]["path"])


SPLIT_STEPS = (5, 15)  # the split's warm-up steps, then the timed ones (medians)


def _median_ms(xs: list[float]) -> float:
    return 1e3 * sorted(xs)[len(xs) // 2]


def split(run: Run) -> None:
    """Where a bf16 training step's time goes: each part of the trainer's step between device syncs (the batch's
    indexing, the augmentation of both views, forward and loss, backward, the optimiser), medians over the timed
    steps; each augmentation op on one view; and the whole step without syncs inside, beside their sum (what the
    host's running ahead of the device hides)."""
    from scale.engine.train import Trainer

    a, dev = run.args, run.dev
    data, _ = _data(a)
    tr = Trainer(_config(a, "bf16", False), data, dev, log=None)
    warm, timed = (1, 3) if a.tiny else SPLIT_STEPS
    perm = tr._permutation(0)
    names = ("batch", "augmentation (2 views)", "forward and loss", "backward", "optimizer")
    parts: dict[str, list[float]] = {k: [] for k in (*names, "whole step, no syncs inside")}

    def timed_part(fn):
        return synced_seconds(fn, dev)

    def backward(loss):
        tr.optimizer.zero_grad(set_to_none=True)
        loss.backward()

    def whole_step(idx, seed):
        loss, *_ = tr.step_loss(tr.augment.views(tr.train_x[idx], seed=seed))
        backward(loss)
        tr.optimizer.step()

    for step in range(warm + timed):
        idx = tr._batch_indices(perm, step)
        x8, t_batch = timed_part(partial(tr.train_x.__getitem__, idx))
        x, t_aug = timed_part(partial(tr.augment.views, x8, seed=step))
        (loss, *_), t_fwd = timed_part(partial(tr.step_loss, x))
        _, t_bwd = timed_part(partial(backward, loss))
        _, t_opt = timed_part(tr.optimizer.step)
        _, t_whole = timed_part(partial(whole_step, idx, step))
        if step >= warm:
            for k, t in zip(parts, (t_batch, t_aug, t_fwd, t_bwd, t_opt, t_whole)):
                parts[k].append(t)
    ms = {k: _median_ms(v) for k, v in parts.items()}
    total = sum(ms[k] for k in names)
    x0 = tr.train_x[perm[: a.batch]].float() / 255.0
    ops = []
    for op in tr.augment.augment:
        ts = [timed_part(partial(op, x0))[1] for _ in range(warm + timed)][warm:]
        ops.append((type(op).__name__, _median_ms(ts)))
    run.figures["split"] = ms
    run.lines += ["## Where a bf16 step's time goes", "",
                  f"The trainer's step (batch {a.batch}, the bf16 configuration above) cut by device syncs into its "
                  f"parts; medians of {timed} steps after {warm}.", "",
                  "| part | ms | share of the parts' sum |", "|---|---|---|",
                  *(f"| {k} | {ms[k]:.1f} | {100 * ms[k] / total:.0f} % |" for k in names),
                  f"| the parts' sum | {total:.1f} | 100 % |",
                  f"| the whole step, no syncs inside | {ms['whole step, no syncs inside']:.1f} | - |", "",
                  f"| augmentation op (one view of {a.batch}) | ms |", "|---|---|",
                  *(f"| {name} | {t:.2f} |" for name, t in ops), ""]


def paper_pipeline(run: Run) -> None:
    from scale.engine.augment import PerImageViews, PILAugment
    from scale.engine.train import Trainer

    a, dev = run.args, run.dev
    data, x = _data(a)
    trainer = Trainer(_config(a, "fp32", False), data, dev, log=None)
    if run.imports.get("torchvision") is None:  # the official E3 transforms (its experiments.py), no Normalize
        import torchvision.transforms as T

        tf = T.Compose([T.RandomResizedCrop(a.size), T.RandomHorizontalFlip(), T.RandomRotation(45),
                        T.RandomApply([T.ColorJitter(0.4, 0.4, 0.4, 0.1)], p=0.8), T.ToTensor()])
        ds = _TorchvisionViews(x, tf)
        what = "torchvision transforms (PIL) per image, as the official E3 code"
    else:
        ds = PerImageViews(x, PILAugment("e3", a.size, MEAN, STD))
        what = "PIL transforms per image (scale.engine.augment.PILAugment; torchvision not importable)"
    # workers restart every epoch, as the official loader's (no persistent_workers); it uses 2, the default here 8
    loader = torch.utils.data.DataLoader(ds, batch_size=a.batch, shuffle=True, drop_last=True, num_workers=a.workers,
                                         pin_memory=dev.type == "cuda")
    times = []
    for _ in range(2):
        synchronize(dev)
        t0 = time.perf_counter()
        for v1, v2 in loader:
            xb = torch.cat([v1, v2]).to(dev, non_blocking=True)
            loss, *_ = trainer.step_loss(xb)
            trainer.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            trainer.optimizer.step()
        synchronize(dev)
        times.append(time.perf_counter() - t0)
    run.figures["paper"] = times[-1]
    run.lines += ["## The paper's pipeline on the same device", "",
                  f"{what} in {a.workers} DataLoader workers, fp32, the same model, batch and step; epoch 2 timed.",
                  "", "| pipeline | epoch 1 s | epoch 2 s | images/s |", "|---|---|---|---|",
                  f"| paper's (per image, workers) | {times[0]:.2f} | {times[1]:.2f} | "
                  f"{len(loader) * a.batch / times[1]:.0f} |", ""]


class _TorchvisionViews(torch.utils.data.Dataset):
    def __init__(self, x_uint8: torch.Tensor, tf) -> None:
        self.x, self.tf = x_uint8.permute(0, 2, 3, 1).numpy(), tf

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int):
        from PIL import Image

        img = Image.fromarray(self.x[i], "RGB")
        return self.tf(img), self.tf(img)


def tracking(run: Run) -> None:
    """The tracker's measurement against the epoch, both of the timed epoch (the second): its first measurement pays
    one-off costs (the layout's timing, the first solver calls), as epoch 1 pays compilation, and is shown beside it,
    with the mean of the two (what this section reported before 2026-12-04: 4.26 % on the H200)."""
    run.lines += ["## Tracking overhead at the default cadence (one measurement per epoch)", ""]
    if "tracking" not in run.figures:
        run.lines += ["Not measured (the bf16 section did not run, failed, or did not track).", ""]
        return
    each, epoch, path = run.figures["tracking"]
    mean = sum(each) / len(each)
    run.lines += ["| measurement s, epoch 1 | measurement s, epoch 2 (timed) | path | epoch 2 s (bf16) | "
                  "tracking / epoch | the mean of both / epoch |", "|---|---|---|---|---|---|",
                  f"| {each[0]:.3f} | {each[-1]:.3f} | {path} | {epoch:.2f} | **{100 * each[-1] / epoch:.2f} %** | "
                  f"{100 * mean / epoch:.2f} % |", ""]


def headline(run: Run) -> None:
    """The comparisons that change one thing at a time, from the sections that ran."""
    f = run.figures
    steps = [("paper", "the paper's pipeline, fp32 (per image, DataLoader workers)", None),
             ("fp32", "the project's batched on-device augmentation, fp32", "the pipeline"),
             ("bf16", "the same in bf16", "the precision"),
             ("compile", "the same with torch.compile", "compilation")]
    run.lines += ["## Headline: one change at a time", "",
                  "Each row changes one thing against the row above (same model, E3 head, batch, images); "
                  "epoch 2 seconds.", "", "| row | epoch s | what changed | faster than the row above | "
                  "faster than the paper's pipeline |", "|---|---|---|---|---|"]
    prev = None
    for key, label, change in steps:
        if key not in f:
            run.lines.append(f"| {label} | not measured | {change or '-'} | - | - |")
            prev = None
            continue
        step = "-" if prev is None else f"**{prev / f[key]:.2f}x**"
        overall = f"{f['paper'] / f[key]:.2f}x" if "paper" in f and key != "paper" else "-"
        run.lines.append(f"| {label} | {f[key]:.2f} | {change or '-'} | {step} | {overall} |")
        prev = f[key]
    best = min((f[k] for k in ("fp32", "bf16", "compile") if k in f), default=None)
    if best is not None:
        run.lines += ["", f"Goals on an H200: an epoch in at most 5 s (best here {best:.2f} s); at least 3x the "
                      "paper's pipeline" + (f" (here {f['paper'] / best:.2f}x)." if "paper" in f else ".")]
    run.lines.append("")
