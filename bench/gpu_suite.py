"""Every GPU figure of BENCHMARKS.md in one run (about 8 minutes on one H200), written to one file.

    python -m bench.gpu_suite [--device cuda] [--out bench/results/gpu_suite.md] [--tiny] [--threads 16]

Sections (each independent: one that fails or lacks an import is recorded as such, the rest still run):

1. imports: what is present (torch, torchvision, timm, cupy, kornia, PIL, scipy) and what each missing
   one blocks;
2. SimCLR ResNet-18 epoch on CIFAR-shaped data (50,000 synthetic uint8 images of 32 x 32 on the device,
   the CIFAR head, batch 512): the project's trainer (batched on-device augmentation) in fp32, bf16, bf16
   without channels_last, and bf16 + ``torch.compile``; the second epoch's time (the first pays cuDNN
   autotuning and compilation, shown beside it), images/s, and the fraction of the bf16 compute floor
   (FLOPs of one training step counted with ``torch.utils.flop_counter``, times the steps of an epoch,
   over the device's peak dense bf16 rate ``--peak-tflops``);
3. the paper's pipeline on the same GPU: torchvision transforms per image in DataLoader workers (E3:
   crop, flip, rotation, colour jitter), ToTensor, Normalize, the same model and step in fp32 as the paper
   (without torchvision: the same transforms in PIL, ``scale.engine.augment.PILAugment``, and the row says so);
4. tracking overhead at the default cadence (one measurement per epoch) against that epoch;
5. Lanczos on a 2048-wide head (swish3 512 -> 2048 -> 2048 with the 2048-512-2048 predictor) at batch
   512 (N = 262,144): SimSiam's exact float64 blocks as the dense reference, against Lanczos on the
   factored operator with float64 and with float32 products;
6. the CuPy row of ``scale.crosscheck`` (closed form on CuPy against mini);
7. E6 images/s (``bench.bench_pretrained``, random weights, official widths).

``--tiny`` shrinks every size so that the whole suite runs on a CPU in seconds (the test of this file).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

import torch

from bench._util import run_header, write_atomic

OUT = Path(__file__).resolve().parent / "results" / "gpu_suite.md"
MEAN, STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)
NEEDS = {
    "torch": "everything", "torchvision": "the paper's pipeline (falls back to PIL transforms)",
    "timm": "E6 (the ViT models)", "cupy": "the CuPy cross-check row", "kornia": "the project's on-device "
    "augmentation (sections 2 and 4; pure Python: bring the kornia and kornia_rs wheels)",
    "PIL": "the paper's pipeline", "scipy": "Lanczos' tridiagonal solver",
}


def check_imports() -> dict[str, str | None]:
    """``{module: None if importable else the error}``."""
    out = {}
    for name in NEEDS:
        try:
            importlib.import_module(name)
            out[name] = None
        except Exception as err:
            out[name] = f"{type(err).__name__}: {str(err).splitlines()[0][:120]}"
    return out


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def _config(args, dev: torch.device, precision: str, compile_: bool):
    from scale.engine import methods
    from scale.engine.train import TrainConfig

    d = methods.get("simclr").recipe
    return TrainConfig(
        dataset="cifar-shaped", method="simclr", backbone="resnet18", backbone_width=args.width, image_size=args.size,
        head_width=args.head_width,
        head_out=args.head_width, head_bn=d["head_bn"], head_out_bn=d["head_out_bn"], head_bias=d["head_bias"],
        augment="e3", batch_size=args.batch, epochs=2, precision=precision, compile=compile_, probe_size=8,
        warmup_epochs=0, augment_path="batched")


def _data(args, dev: torch.device):
    from scale.engine.data import Dataset

    gen = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (args.images, 3, args.size, args.size), generator=gen, dtype=torch.uint8)
    y = torch.zeros(args.images, dtype=torch.long)
    return Dataset("cifar-shaped", x, y, x[:8], y[:8], 10, MEAN, STD), x


def step_flops(trainer, args, dev: torch.device) -> float:
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


def project_epochs(args, dev: torch.device, out: list[str], figures: dict) -> None:
    from scale.curvature.tracking import HessianTracker
    from scale.engine.train import Trainer

    data, _ = _data(args, dev)
    configs = [("fp32", "fp32", False, True), ("bf16", "bf16", False, True), ("bf16, channels_last off", "bf16",
               False, False), ("bf16 + torch.compile", "bf16", True, True)]
    if args.tiny:  # compiling on a CPU takes minutes: not in the tiny check
        configs = [c for c in configs if not c[2]]
    out += ["## 2. SimCLR ResNet-18, CIFAR-shaped epoch (the project's trainer)", "",
            f"{args.images} images of {args.size} px on the device, batch {args.batch}, backbone width {args.width}, "
            f"head {_config(args, dev, 'fp32', False).head} {args.head_width} (SimCLR's CIFAR widths), Adam; "
            "epoch 2 timed (epoch 1 beside it).", "",
            "| configuration | epoch 1 s | epoch 2 s | images/s | step GFLOP | floor s (bf16 peak) | floor / epoch |",
            "|---|---|---|---|---|---|---|"]
    for label, precision, compile_, channels_last in configs:
        try:
            cfg = _config(args, dev, precision, compile_)
            tracker = HessianTracker("epoch") if label == "bf16" else None
            trainer = Trainer(cfg, data, dev, hooks=[tracker] if tracker else [], log=None)
            if not channels_last:  # weights and batches back in the default layout
                trainer.model.to(memory_format=torch.contiguous_format)
                trainer.forward_model = _Contiguous(trainer.forward_model)
            flops = step_flops(trainer, args, dev) if not compile_ else figures.get("step_flops", float("nan"))
            figures.setdefault("step_flops", flops)
            trainer.fit()
            _sync(dev)
            h = trainer.state.history
            e2 = h[-1]["epoch_seconds"]
            floor = flops * trainer.steps_per_epoch / (args.peak_tflops * 1e12)
            figures[label] = e2
            out.append(f"| {label} | {h[0]['epoch_seconds']:.2f} | {e2:.2f} | {h[-1]['images_per_s']:.0f} | "
                       f"{flops / 1e9:.1f} | {floor:.3f} | {100 * floor / e2:.1f} % |")
            if tracker is not None:
                per = tracker.seconds / max(len(tracker.records), 1)
                figures["tracking"] = (per, e2, tracker.records[-1]["path"] if tracker.records else "-")
        except Exception as err:
            out.append(f"| {label} | failed: {type(err).__name__}: {str(err).splitlines()[0][:150]} | | | | | |")
            traceback.print_exc()
    out.append("")


def paper_pipeline(args, dev: torch.device, out: list[str], figures: dict, have_tv: bool) -> None:
    from scale.engine.augment import PerImageViews, PILAugment
    from scale.engine.train import Trainer

    data, x = _data(args, dev)
    cfg = _config(args, dev, "fp32", False)
    trainer = Trainer(cfg, data, dev, log=None)
    if have_tv:
        import torchvision.transforms as T

        tf = T.Compose([T.RandomResizedCrop(args.size, scale=(0.2, 1.0)), T.RandomHorizontalFlip(),
                        T.RandomRotation(45), T.RandomApply([T.ColorJitter(0.4, 0.4, 0.4, 0.1)], p=0.8),
                        T.ToTensor(), T.Normalize(MEAN, STD)])
        ds = _TorchvisionViews(x, tf)
        what = "torchvision transforms (PIL) per image"
    else:
        ds = PerImageViews(x, PILAugment("e3", args.size, MEAN, STD))
        what = "PIL transforms per image (scale.engine.augment.PILAugment; torchvision not importable)"
    loader = torch.utils.data.DataLoader(ds, batch_size=args.batch, shuffle=True, drop_last=True,
                                         num_workers=args.workers, pin_memory=dev.type == "cuda",
                                         persistent_workers=args.workers > 0)
    times = []
    for _ in range(2):
        _sync(dev)
        t0 = time.perf_counter()
        for v1, v2 in loader:
            xb = torch.cat([v1, v2]).to(dev, non_blocking=True)
            loss, *_ = trainer.step_loss(xb)
            trainer.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            trainer.optimizer.step()
        _sync(dev)
        times.append(time.perf_counter() - t0)
    figures["paper"] = times[-1]
    out += ["## 3. The paper's pipeline on the same device", "",
            f"{what} in {args.workers} DataLoader workers, fp32, the same model, batch and step; epoch 2 timed.", "",
            "| pipeline | epoch 1 s | epoch 2 s | images/s |", "|---|---|---|---|",
            f"| paper's (per image, workers) | {times[0]:.2f} | {times[1]:.2f} | "
            f"{len(loader) * args.batch / times[1]:.0f} |", ""]
    best = min((v for k, v in figures.items() if k in ("bf16", "bf16 + torch.compile", "fp32")), default=None)
    if best is not None:
        out += [f"Project's best epoch / paper's pipeline: **{times[1] / best:.2f}x** faster "
                "(goal: at least 3x on an H200; epoch goal: at most 5 s).", ""]


class _TorchvisionViews(torch.utils.data.Dataset):
    def __init__(self, x_uint8: torch.Tensor, tf) -> None:
        self.x, self.tf = x_uint8.permute(0, 2, 3, 1).numpy(), tf

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int):
        from PIL import Image

        img = Image.fromarray(self.x[i], "RGB")
        return self.tf(img), self.tf(img)


def tracking(out: list[str], figures: dict) -> None:
    out += ["## 4. Tracking overhead at the default cadence (one measurement per epoch)", ""]
    if "tracking" not in figures:
        out += ["Not measured (the bf16 run failed or did not track).", ""]
        return
    per, epoch, path = figures["tracking"]
    out += ["| measurement s | path | epoch s (bf16) | tracking / epoch |", "|---|---|---|---|",
            f"| {per:.3f} | {path} | {epoch:.2f} | **{100 * per / epoch:.2f} %** |", ""]


def wide_lanczos(args, dev: torch.device, out: list[str]) -> None:
    from scale.curvature.blocks import effective_hessian_blocks, factored_operator
    from scale.curvature.lanczos import lanczos
    from scale.engine.heads import build_head
    from scale.engine.loss_curvature import PredictorCosine

    n, d, w, pw = args.lanczos_shape
    torch.manual_seed(0)
    head = build_head("swish3", d, w, w).to(dev).double().eval()
    pred = build_head("swish2", w, w, pw).to(dev).double().eval()
    z = torch.randn(n, d, dtype=torch.float64, device=dev)
    with torch.no_grad():
        T = head(z)
    loss = PredictorCosine(T, pred, "cosine")
    rows = []
    _sync(dev)
    t0 = time.perf_counter()
    b = effective_hessian_blocks(z, head, loss, spectra="H")
    eig = b.eig_H.flatten()
    lo, hi = float(eig.min()), float(eig.max())
    _sync(dev)
    rows.append(("exact blocks (float64, whole spectrum): the reference", time.perf_counter() - t0, lo, hi, "-"))
    scale = max(abs(lo), abs(hi))
    del b
    for dtype, tol in ((torch.float64, 1e-10), (torch.float32, 1e-6)):
        _sync(dev)
        t0 = time.perf_counter()
        op, _, _ = factored_operator(z, head, loss, dtype=dtype)
        r = lanczos(op, tol=tol, max_iter=300)
        _sync(dev)
        rows.append((f"Lanczos, factored, {str(dtype)[6:]} products, tol {tol:g}", time.perf_counter() - t0,
                     r.lambda_min, r.lambda_max, str(r.n_products)))
        del op
    out += ["## 5. Lanczos on a 2048-wide head at batch 512", "",
            f"SimSiam, head swish3 {d} -> {w} -> {w}, predictor swish2 {w} -> {pw} -> {w}, n = {n}, N = {n * d}, "
            "random weights and inputs, float64 reference from the exact per-sample blocks.", "",
            "| path | seconds | lambda_min | lambda_max | products | lambda_min error / scale "
            "| lambda_max error / scale |",
            "|---|---|---|---|---|---|---|"]
    for label, s, a, c, p in rows:
        out.append(f"| {label} | {s:.2f} | {a:.6g} | {c:.6g} | {p} | {abs(a - lo) / scale:.1e} | "
                   f"{abs(c - hi) / scale:.1e} |")
    out.append("")


def cupy_row(out: list[str]) -> None:
    import io

    from scale.crosscheck import _cupy_available, run

    reason = _cupy_available()
    buf = io.StringIO()
    ok, rows = run(["gelu3", "swish3"], ["simsiam", "simclr"], stream=buf)
    err, worst, status = rows["closed form on CuPy"]
    value = f"skipped ({reason})" if reason else f"max relative error {err:.1e} ({worst}), {status}"
    out += ["## 6. The CuPy row of scale.crosscheck", "",
            f"closed form on CuPy against mini (gelu3, swish3 x simsiam, simclr): {value}; "
            f"whole cross-check {'PASS' if ok else 'FAIL'}.", ""]


def e6(args, dev: torch.device, out: list[str]) -> None:
    from bench.bench_pretrained import main as bench_main

    with tempfile.TemporaryDirectory() as tmp:
        res = Path(tmp) / "pretrained.md"
        argv = ["--device", str(dev), "--trajectories", "1", "--steps", "12", "--batch-images", str(args.e6_batch),
                "--image-size", str(args.e6_size), "--out", str(res)]
        if args.tiny:
            argv += ["--models", "dino_resnet50"]
        bench_main(argv)
        text = res.read_text()
    out += ["## 7. E6 throughput (bench.bench_pretrained)", "", f"`python -m bench.bench_pretrained {' '.join(argv)}`",
            "", *[line for line in text.splitlines() if line.startswith("|")], ""]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.gpu_suite", description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--tiny", action="store_true", help="tiny sizes: the whole suite in seconds on a CPU (tests)")
    p.add_argument("--threads", type=int, default=16, help="torch CPU threads, fixed (default: 16)")
    p.add_argument("--workers", type=int, default=8, help="DataLoader workers of the paper's pipeline (default: 8)")
    p.add_argument("--peak-tflops", type=float, default=989.0, help="dense bf16 peak of the device (H200: 989)")
    p.add_argument("--out", default=str(OUT))
    args = p.parse_args(argv)
    argv = argv if argv is not None else sys.argv[1:]
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("gpu_suite: --device cuda but no CUDA device is visible; valid: --device cpu (with --tiny)",
              file=sys.stderr)
        return 2
    dev = torch.device(args.device)
    torch.set_num_threads(args.threads)
    if args.tiny:
        args.images, args.size, args.batch, args.width, args.head_width = 64, 16, 16, 4, 32
        args.lanczos_shape, args.workers, args.e6_size, args.e6_batch = (8, 6, 12, 5), 0, 32, 1
    else:
        args.images, args.size, args.batch, args.width, args.head_width = 50_000, 32, 512, 64, 2048
        args.lanczos_shape, args.e6_size, args.e6_batch = (512, 512, 2048, 512), 224, 4
    t_start = time.perf_counter()
    imports = check_imports()
    missing = {k: v for k, v in imports.items() if v is not None}
    for k, v in missing.items():
        print(f"gpu_suite: missing {k} ({v}): blocks {NEEDS[k]}", file=sys.stderr)
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else f"cpu ({os.cpu_count()} cores)"
    out = ["# GPU suite", "", run_header("bench.gpu_suite", argv, args.threads), "",
           f"Device: {name}. Mode: "
           f"{'tiny (a CPU check of the suite, not a measurement)' if args.tiny else 'full'}.", "",
           "## 1. Imports", "", "| module | status | needed for |", "|---|---|---|",
           *(f"| {k} | {'ok' if v is None else 'MISSING: ' + v} | {NEEDS[k]} |" for k, v in imports.items()), ""]
    figures: dict = {}
    sections = [
        ("project epochs", lambda: project_epochs(args, dev, out, figures), "kornia"),
        ("paper pipeline", lambda: paper_pipeline(args, dev, out, figures, imports["torchvision"] is None), "PIL"),
        ("tracking", lambda: tracking(out, figures), None),
        ("wide Lanczos", lambda: wide_lanczos(args, dev, out), "scipy"),
        ("cupy", lambda: cupy_row(out), None),
        ("e6", lambda: e6(args, dev, out), "timm"),
    ]
    failed = []
    for label, fn, need in sections:
        if need is not None and imports[need] is not None:
            out += [f"## {label}: skipped ({need} missing: {imports[need]})", ""]
            continue
        t0 = time.perf_counter()
        try:
            fn()
        except Exception as err:
            failed.append(label)
            out += [f"## {label}: FAILED ({type(err).__name__}: {str(err).splitlines()[0][:200]})", ""]
            traceback.print_exc()
        print(f"gpu_suite: {label} done in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
        write_atomic(args.out, "\n".join(out))  # what is done so far survives a timeout
    out.append(f"Suite wall time: {time.perf_counter() - t_start:.0f} s. "
               f"Failed sections: {', '.join(failed) or 'none'}.")
    text = "\n".join(out) + "\n"
    write_atomic(args.out, text)
    print(text)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
