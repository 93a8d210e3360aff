"""Every GPU figure of BENCHMARKS.md in one run, within 5 minutes on one H200 by design, written to one file.

    python -m bench.gpu_suite [--device cuda] [--sections NAME ...] [--budget-s 300] [--tiny] [--out FILE]

Sections (``SECTIONS``, in this order; ``--sections`` runs a subset, e.g. one to rerun it):

    imports    what is present (torch, torchvision, cupy, kornia, kornia_rs, PIL, scipy) and what each missing one
               blocks
    paper      the paper's pipeline: torchvision's E3 transforms per image in DataLoader workers (crop, flip,
               rotation, colour jitter), ToTensor, Normalize, the step in fp32 (without torchvision: the same
               transforms in PIL, ``scale.engine.augment.PILAugment``, and the row says so)
    fp32       the project's trainer (batched on-device augmentation), fp32: the paper's pipeline replaced, nothing
               else
    bf16       the same in bf16 autocast (the tracker attached: one measurement per epoch)
    layout     the same as bf16 without channels_last (an ablation of the layout)
    compile    the same as bf16 plus ``torch.compile``
    tracking   the bf16 run's tracker: one measurement against its epoch
    lanczos    SimSiam's H_eff on a 2048-wide head at batch 512 (N = 262,144): exact float64 blocks (the
               reference) against a Lanczos per block (``scale.curvature.blocks.blockwise_ends``) and a Lanczos on
               the whole factored operator
    cupy       the CuPy row of ``scale.crosscheck`` (closed form on CuPy against mini)
    e6         E6 images/s (``bench.bench_pretrained``, random weights, official widths)
    headline   the rows above that change one thing at a time: paper's pipeline -> the project's (both fp32)
               -> bf16 -> torch.compile, with each step's ratio

Not yet a section: the replication ledger's GPU subset (the E3/E4 core at 2 seeds, the E2 mechanism at 1 seed,
short runs). The ledger's runner is being rebuilt as a package; the section is to call that runner once it exists,
with its own ``ESTIMATE_S`` entry, under the same timeout.

Every training row is SimCLR on 50,000 CIFAR-shaped uint8 images (32 x 32, on the device), ResNet-18 of width 64,
the paper's E3 head (relu2: 512-2048 BN ReLU 2048 BN), batch 512, Adam 1e-3; two epochs, the second timed (the
first pays cuDNN autotuning and compilation, shown beside it), images/s and the fraction of the bf16 compute floor
(FLOPs of one step by ``torch.utils.flop_counter`` times the steps, over ``--peak-tflops``).

Isolation: each section runs in its own ``try`` that also catches ``SystemExit`` (a bench's argument error),
records the failure in its heading and lets the rest run; the file is rewritten after every section, so what is
done survives a timeout. Each section has a timeout (``SECTION_SLACK`` times its estimate, within what is left of
``--budget-s``): an alarm stops a section that overruns it and the rest goes on; a section stuck in one long call
that the alarm cannot interrupt ends the process ``HARD_GRACE_S`` later, the file written first. Exit code: 0 when
every section ran, 1 when one failed, 2 for bad arguments, 4 when the budget cut the run (a section stopped at its
timeout or not run); the file's last line and stderr name the sections stopped and not run.

Time by design (``ESTIMATE_S``, seconds on one H200, from counted work: ResNet-18 at 32 px is 0.56 GFLOP per
image forward, about 3.3 GFLOP per image and step with two views and the backward, 167 TFLOP an epoch, a few
seconds in bf16 at 10-25 % of the 989 TFLOP/s peak; the paper's pipeline is bound by PIL in 8 workers): the
sections add up to about 4 minutes, the compile section the largest and last. ``--budget-s`` (default 300)
does not run a section whose estimate no longer fits in what is left, says so, and the run exits 4.

``--tiny`` shrinks every size so that every section runs on a CPU in seconds (``tests/test_gpu_suite.py``): E6 on
stand-in widths (``bench_pretrained --stand-in``), compile with dynamo's eager backend (inductor on a CPU takes
minutes); a check of the suite, not a measurement.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from bench._util import run_header, write_atomic

OUT = Path(__file__).resolve().parent / "results" / "gpu_suite.md"
MEAN, STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)
NEEDS = {
    "torch": "everything", "torchvision": "the paper's pipeline (falls back to PIL transforms)",
    "cupy": "the CuPy cross-check row", "kornia": "the project's on-device augmentation and E6's orbits (pure "
    "Python: bring the kornia wheel)", "kornia_rs": "kornia's import (bring its wheel)",
    "PIL": "the paper's pipeline", "scipy": "Lanczos' tridiagonal solver",
}
HEAD = "relu2"  # the paper's E3 head: 512-2048 BN ReLU 2048 BN (SimCLR's recipe: BatchNorm after both Linear layers)
ESTIMATE_S = {"imports": 10, "paper": 25, "fp32": 25, "bf16": 20, "layout": 15, "tracking": 1, "lanczos": 40,
              "cupy": 15, "e6": 40, "compile": 90, "headline": 1}  # one H200; see the module docstring


@dataclass
class Run:
    """What the sections share: arguments, device, the figures they measured, and the file's lines."""

    args: argparse.Namespace
    dev: torch.device
    imports: dict[str, str | None] = field(default_factory=dict)
    figures: dict = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)


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


def _config(args, precision: str, compile_: bool):
    from scale.engine import methods
    from scale.engine.train import TrainConfig

    d = methods.get("simclr").recipe
    return TrainConfig(
        dataset="cifar-shaped", method="simclr", backbone="resnet18", backbone_width=args.width, image_size=args.size,
        head=HEAD, head_width=args.head_width, head_out=args.head_width, head_bn=d["head_bn"],
        head_out_bn=d["head_out_bn"], head_bias=d["head_bias"], augment="e3", batch_size=args.batch, epochs=2,
        optimizer=d["optimizer"], lr=d["lr"], precision=precision, compile=compile_, probe_size=8, warmup_epochs=0,
        augment_path="batched")


def _data(args):
    from scale.engine.data import Dataset

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
    _sync(dev)
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
        run.figures["tracking"] = (tracker.seconds / len(tracker.records), e2, tracker.records[-1]["path"])


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
    run.lines += ["## Tracking overhead at the default cadence (one measurement per epoch)", ""]
    if "tracking" not in run.figures:
        run.lines += ["Not measured (the bf16 section did not run, failed, or did not track).", ""]
        return
    per, epoch, path = run.figures["tracking"]
    run.lines += ["| measurement s | path | epoch s (bf16) | tracking / epoch |", "|---|---|---|---|",
                  f"| {per:.3f} | {path} | {epoch:.2f} | **{100 * per / epoch:.2f} %** |", ""]


def wide_lanczos(run: Run) -> None:
    from scale.curvature.blocks import blockwise_ends, effective_hessian_blocks, factored_operator
    from scale.curvature.lanczos import lanczos
    from scale.engine.heads import build_head
    from scale.engine.loss_curvature import PredictorCosine

    dev = run.dev
    n, d, w, pw = run.args.lanczos_shape
    torch.manual_seed(0)
    head = build_head("swish3", d, w, w).to(dev).double().eval()
    pred = build_head("swish2", w, w, pw).to(dev).double().eval()
    z = torch.randn(n, d, dtype=torch.float64, device=dev)
    with torch.no_grad():
        T = head(z)
    loss = PredictorCosine(T, pred, "cosine")
    rows = []

    def timed(fn):
        _sync(dev)
        t0 = time.perf_counter()
        out = fn()
        _sync(dev)
        return out, time.perf_counter() - t0

    b, s = timed(lambda: effective_hessian_blocks(z, head, loss, spectra="H"))
    eig = b.eig_H.flatten()
    lo, hi = float(eig.min()), float(eig.max())
    rows.append(("exact blocks (float64, whole spectrum): the reference", s, lo, hi, "-"))
    scale = max(abs(lo), abs(hi))
    del b
    (r, _, info), s = timed(lambda: blockwise_ends(z, head, loss, interaction=False))
    rows.append((f"Lanczos per block ({info['recurrence']} products, ends in float64, bound 1e-8)", s,
                 r.lambda_min, r.lambda_max, str(r.n_products)))
    for dtype, tol in ((torch.float64, 1e-10), (torch.float32, 1e-6)):
        def whole(dtype=dtype, tol=tol):
            return lanczos(factored_operator(z, head, loss, dtype=dtype)[0], tol=tol, max_iter=300)

        r, s = timed(whole)
        rows.append((f"Lanczos on the whole factored operator, {str(dtype)[6:]} products, tol {tol:g}", s,
                     r.lambda_min, r.lambda_max, str(r.n_products)))
    run.lines += [f"## Lanczos on a {w}-wide head at batch {n}", "",
                  f"SimSiam, head swish3 {d} -> {w} -> {w}, predictor swish2 {w} -> {pw} -> {w}, n = {n}, "
                  f"N = {n * d}, random weights and inputs, float64 reference from the exact per-sample blocks.", "",
                  "| path | seconds | lambda_min | lambda_max | products | lambda_min error / scale "
                  "| lambda_max error / scale |", "|---|---|---|---|---|---|---|"]
    for label, s, a, c, p in rows:
        run.lines.append(f"| {label} | {s:.2f} | {a:.6g} | {c:.6g} | {p} | {abs(a - lo) / scale:.1e} | "
                         f"{abs(c - hi) / scale:.1e} |")
    run.lines.append("")


def cupy_row(run: Run) -> None:
    import io

    from scale.crosscheck import _cupy_available
    from scale.crosscheck import run as crosscheck

    reason = _cupy_available()
    ok, rows = crosscheck(["gelu3", "swish3"], ["simsiam", "simclr"], stream=io.StringIO())
    err, worst, status = rows["closed form on CuPy"]
    value = f"skipped ({reason})" if reason else f"max relative error {err:.1e} ({worst}), {status}"
    run.lines += ["## The CuPy row of scale.crosscheck", "",
                  f"closed form on CuPy against mini (gelu3, swish3 x simsiam, simclr): {value}; "
                  f"whole cross-check {'PASS' if ok else 'FAIL'}.", ""]


def e6(run: Run) -> None:
    from bench.bench_pretrained import main as bench_main

    a = run.args
    with tempfile.TemporaryDirectory() as tmp:
        res = Path(tmp) / "pretrained.md"
        argv = ["--device", str(run.dev), "--trajectories", "2", "--steps", str(a.e6_steps), "--batch-images",
                str(a.e6_batch), "--image-size", str(a.e6_size), "--threads", str(a.threads), "--out", str(res)]
        if a.tiny:
            argv += ["--stand-in", "--models", "dino_vits16", "vicreg_resnet50"]
        code = bench_main(argv)
        text = res.read_text()
    run.lines += ["## E6 throughput (bench.bench_pretrained)", "",
                  f"`python -m bench.bench_pretrained {' '.join(argv)}` (exit {code})", "",
                  *[line for line in text.splitlines() if line.startswith(("|", "**"))], ""]


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


@dataclass(frozen=True)
class Section:
    run: Callable[[Run], None]
    needs: str | None = None  # an import without which the section is skipped


SECTIONS: dict[str, Section] = {
    "imports": Section(lambda run: None),  # the table is written before any section runs
    "paper": Section(paper_pipeline, "PIL"),
    "fp32": Section(lambda run: training(run, "fp32"), "kornia"),
    "bf16": Section(lambda run: training(run, "bf16"), "kornia"),
    "layout": Section(lambda run: training(run, "layout"), "kornia"),
    "tracking": Section(tracking),
    "lanczos": Section(wide_lanczos, "scipy"),
    "cupy": Section(cupy_row),
    "e6": Section(e6, "kornia"),
    "compile": Section(lambda run: training(run, "compile"), "kornia"),
    "headline": Section(headline),
}


SECTION_SLACK = 3.0  # a section's timeout: this many times its estimate (never past what is left of the budget)
HARD_GRACE_S = 30.0  # past its timeout, a section that the alarm cannot interrupt ends the process (exit CUT)
FAILED, CUT = 1, 4  # exit codes: a section failed; the budget cut the run (a section stopped or not run)


class SectionTimeout(Exception):
    """Raised in the main thread by the section's alarm: the section ran past its timeout."""


@dataclass
class Outcome:
    """What became of the sections: failed (an error), stopped (past their timeout), not run (no time left)."""

    failed: list[str] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)
    not_run: list[str] = field(default_factory=list)

    @property
    def code(self) -> int:
        return FAILED if self.failed else CUT if (self.stopped or self.not_run) else 0

    def line(self) -> str:
        def names(xs: list[str]) -> str:
            return ", ".join(xs) or "none"

        return (f"Failed sections: {names(self.failed)}. Stopped at their timeout: {names(self.stopped)}. "
                f"Not run for lack of budget: {names(self.not_run)}.")


def section_timeout(name: str, left: float, tiny: bool) -> float:
    """Seconds the section may run: ``SECTION_SLACK`` times its estimate, within what is left of the budget (tiny:
    the budget alone, the estimates being the GPU's)."""
    return left if tiny else min(left, SECTION_SLACK * ESTIMATE_S[name])


def _run_with_timeout(fn: Callable[[], None], seconds: float, on_hang: Callable[[], None]) -> None:
    """``fn()``, stopped by ``SectionTimeout`` after ``seconds``: a real-time alarm (``SIGALRM``) whose handler
    raises in the main thread, which interrupts Python code and sleeps but not one long call in C; for that, a
    watchdog thread calls ``on_hang`` (write what is done, exit ``CUT``) ``HARD_GRACE_S`` later."""
    import signal
    import threading

    def alarm(signum, frame):
        raise SectionTimeout(f"past its timeout of {seconds:.0f} s")

    done = threading.Event()
    watchdog = threading.Thread(target=lambda: done.wait(seconds + HARD_GRACE_S) or on_hang(), daemon=True)
    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 1e-3))
    watchdog.start()
    try:
        fn()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        done.set()


def run_sections(run: Run, names: list[str], out: Path, budget_s: float) -> Outcome:
    """Each section in turn, isolated and timed out; the file rewritten after each. Returns what became of them."""
    outcome, t_start = Outcome(), time.perf_counter()
    for i, name in enumerate(names):
        section = SECTIONS[name]
        left = budget_s - (time.perf_counter() - t_start)
        if section.needs is not None and run.imports.get(section.needs) is not None:
            run.lines += [f"## {name}: skipped ({section.needs} missing: {run.imports[section.needs]})", ""]
        elif (ESTIMATE_S[name] > left and not run.args.tiny) or left <= 0:
            outcome.not_run.append(name)
            run.lines += [f"## {name}: NOT RUN (its estimate, {ESTIMATE_S[name]} s, exceeds the {max(left, 0):.0f} s "
                          f"left of --budget-s {budget_s:g}; rerun it with --sections {name})", ""]
        else:
            t0, limit = time.perf_counter(), section_timeout(name, left, run.args.tiny)

            def on_hang(name=name, rest=names[i + 1:], limit=limit):  # the watchdog's last word
                lines = [*run.lines, f"## {name}: STOPPED (hung {HARD_GRACE_S:g} s past its {limit:.0f} s timeout "
                         "in a call the alarm cannot interrupt; the process ended)", "",
                         Outcome(outcome.failed, [*outcome.stopped, name], [*outcome.not_run, *rest]).line()]
                write_atomic(out, "\n".join(lines) + "\n")
                print(f"gpu_suite: {name} hung past its timeout; not run: {', '.join(rest) or 'none'}",
                      file=sys.stderr, flush=True)
                os._exit(CUT)

            try:
                _run_with_timeout(lambda section=section: section.run(run), limit, on_hang)
            except SectionTimeout as err:
                outcome.stopped.append(name)
                run.lines += [f"## {name}: STOPPED ({err}; rerun it with --sections {name})", ""]
            except (Exception, SystemExit) as err:  # SystemExit: a bench's own argument check ends only its section
                outcome.failed.append(name)
                first = str(err).splitlines()[0][:200] if str(err) else ""
                run.lines += [f"## {name}: FAILED ({type(err).__name__}: {first})", ""]
                traceback.print_exc()
            print(f"gpu_suite: {name} done in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
        write_atomic(out, "\n".join(run.lines) + "\n")  # what is done so far survives a timeout
    return outcome


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.gpu_suite", description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--sections", nargs="+", choices=list(SECTIONS), default=list(SECTIONS),
                   help="the sections to run, in the suite's order (default: all)")
    p.add_argument("--budget-s", type=float, default=300.0, help="skip a section whose estimate no longer fits "
                   "(default: 300)")
    p.add_argument("--tiny", action="store_true", help="tiny sizes: every section in seconds on a CPU (tests)")
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
        args.lanczos_shape, args.workers, args.e6_size, args.e6_batch, args.e6_steps = (8, 6, 12, 5), 0, 32, 1, 3
    else:
        args.images, args.size, args.batch, args.width, args.head_width = 50_000, 32, 512, 64, 2048
        args.lanczos_shape, args.e6_size, args.e6_batch, args.e6_steps = (512, 512, 2048, 512), 224, 4, 12
    names = [name for name in SECTIONS if name in args.sections]  # the suite's order whatever the flag's
    t_start = time.perf_counter()
    run = Run(args, dev, imports=check_imports())
    for k, v in run.imports.items():
        if v is not None:
            print(f"gpu_suite: missing {k} ({v}): blocks {NEEDS[k]}", file=sys.stderr)
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else f"cpu ({os.cpu_count()} cores)"
    mode = "tiny (a CPU check of the suite, not a measurement)" if args.tiny else "full"
    run.lines = ["# GPU suite", "", run_header("bench.gpu_suite", argv, args.threads), "",
                 f"Device: {name}. Mode: {mode}. Sections: {', '.join(names)}.", ""]
    if "imports" in names:
        run.lines += ["## Imports", "", "| module | status | needed for |", "|---|---|---|",
                      *(f"| {k} | {'ok' if v is None else 'MISSING: ' + v} | {NEEDS[k]} |"
                        for k, v in run.imports.items()), ""]
    outcome = run_sections(run, names, Path(args.out), args.budget_s)
    run.lines.append(f"Suite wall time: {time.perf_counter() - t_start:.0f} s. {outcome.line()}")
    text = "\n".join(run.lines) + "\n"
    write_atomic(args.out, text)
    print(text)
    if outcome.stopped or outcome.not_run:
        print(f"gpu_suite: the budget cut the run: stopped {', '.join(outcome.stopped) or 'none'}; not run "
              f"{', '.join(outcome.not_run) or 'none'} (exit {CUT})", file=sys.stderr)
    return outcome.code


if __name__ == "__main__":
    sys.exit(main())
