"""Every GPU figure of BENCHMARKS.md in one run, within 6 minutes on one H200 by design, written to one file.

    python -m bench.gpu_suite [--device cuda] [--sections NAME ...] [--budget-s 360] [--ledger-out DIR] [--tiny]
                              [--out FILE]

Sections (``SECTIONS``, in this order; ``--sections`` runs a subset, e.g. one to rerun it):

    imports    what is present (torch, torchvision, cupy, kornia, kornia_rs, PIL, scipy, submitit) and what each
               missing one blocks
    paper      the paper's pipeline: torchvision's E3 transforms per image in DataLoader workers (crop, flip,
               rotation, colour jitter), ToTensor, Normalize, the step in fp32 (without torchvision: the same
               transforms in PIL, ``scale.engine.augment.PILAugment``, and the row says so)
    fp32       the project's trainer (batched on-device augmentation), fp32: the paper's pipeline replaced, nothing
               else
    bf16       the same in bf16 autocast (the tracker attached: one measurement per epoch)
    layout     the same as bf16 without channels_last (an ablation of the layout)
    split      where a bf16 step's time goes: its parts between device syncs (batch, augmentation, forward and
               loss, backward, optimiser), each augmentation op on one view, the whole step without syncs beside
    compile    the same as bf16 plus ``torch.compile``
    tracking   the bf16 run's tracker: one measurement against its epoch
    lanczos    SimSiam's H_eff on a 2048-wide head at batch 512 (N = 262,144): exact float64 blocks (the
               reference) against a Lanczos per block (``scale.curvature.closed_form.blockwise_ends``) and a Lanczos on
               the whole factored operator
    cupy       the CuPy row of ``scale.crosscheck`` (closed form on CuPy against mini)
    e6         E6 images/s (``bench.bench_pretrained``, random weights, official widths)
    ledger     the replication ledger's GPU subset: ``python -m scale.replicate --dataset digits --device cuda``
               for the E3/E4 core at 2 seeds and the E2 mechanism at 1 seed, 10 epochs each (``LEDGER_RUNS``),
               each into its own store (``--ledger-out``, default a fresh temporary folder), its claims' rows
    headline   the rows above that change one thing at a time: paper's pipeline -> the project's (both fp32)
               -> bf16 -> torch.compile, with each step's ratio

The sections live in ``bench._gpu_training`` (the trainer's rows, the paper's pipeline, tracking, the headline)
and ``bench._gpu_sections`` (Lanczos, CuPy, E6, the ledger); the runner (isolation, timeouts, exit code) in
``bench._gpu_run``.

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

Time (``ESTIMATE_S``, seconds on one H200): the section times measured there on 2026-12-04 (BENCHMARKS.md, "GPU
suite"), the slower of two calls, rounded up: about 6 minutes in all, the ledger (83 s) and compile (63 s before
the batched crop became one warp, 37 s after) the largest; the whole suite took 224 s with its ledger section
failing at once. ``--budget-s`` (default 360)
does not run a section whose estimate no longer fits in what is left, says so, and the run exits 4.

``--tiny`` shrinks every size so that every section runs on a CPU in seconds (``tests/test_bench_checks.py``): E6 on
stand-in widths (``bench_pretrained --stand-in``), compile with dynamo's eager backend (inductor on a CPU takes
minutes), the ledger's commands planned with ``--dry-run``; a check of the suite, not a measurement, so it
writes into a fresh temporary folder unless ``--out`` names a file (``bench._util.result_path``): it never
replaces ``bench/results/gpu_suite.md``.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
from pathlib import Path

import torch

from bench._gpu_run import CUT, Run, Section, run_sections
from bench._gpu_sections import cupy_row, e6, ledger, wide_lanczos
from bench._gpu_training import headline, paper_pipeline, split, tracking, training
from bench._util import out_help, result_path, run_header, write_atomic

__all__ = ["CUT", "SECTIONS", "Section", "main"]  # the runner's names the suite's users need

OUT = Path(__file__).resolve().parent / "results" / "gpu_suite.md"
NEEDS = {
    "torch": "everything", "torchvision": "the paper's pipeline (falls back to PIL transforms)",
    "cupy": "the CuPy cross-check row", "kornia": "the project's on-device augmentation and E6's orbits (pure "
    "Python: bring the kornia wheel)", "kornia_rs": "kornia's import (bring its wheel)",
    "PIL": "the paper's pipeline", "scipy": "Lanczos' tridiagonal solver",
    "submitit": "the ledger section (scale.replicate's launcher; pure Python: bring its wheel)",
}
ESTIMATE_S = {"imports": 5, "paper": 30, "fp32": 25, "bf16": 25, "layout": 30, "split": 10, "tracking": 1,
              "lanczos": 10, "cupy": 15, "e6": 45, "ledger": 90, "compile": 65,
              "headline": 1}  # one H200, measured; see the module docstring


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


SECTIONS: dict[str, Section] = {
    "imports": Section(lambda run: None),  # the table is written before any section runs
    "paper": Section(paper_pipeline, "PIL"),
    "fp32": Section(lambda run: training(run, "fp32"), "kornia"),
    "bf16": Section(lambda run: training(run, "bf16"), "kornia"),
    "layout": Section(lambda run: training(run, "layout"), "kornia"),
    "split": Section(split, "kornia"),
    "tracking": Section(tracking),
    "lanczos": Section(wide_lanczos, "scipy"),
    "cupy": Section(cupy_row),
    "e6": Section(e6, "kornia"),
    "ledger": Section(ledger, "submitit"),
    "compile": Section(lambda run: training(run, "compile"), "kornia"),
    "headline": Section(headline),
}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.gpu_suite", description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--sections", nargs="+", choices=list(SECTIONS), default=list(SECTIONS),
                   help="the sections to run, in the suite's order (default: all)")
    p.add_argument("--budget-s", type=float, default=360.0, help="skip a section whose estimate no longer fits "
                   "(default: 360)")
    p.add_argument("--ledger-out", default=None, help="the ledger section's stores (default: a fresh temporary "
                   "folder)")
    p.add_argument("--tiny", action="store_true", help="tiny sizes: every section in seconds on a CPU (tests)")
    p.add_argument("--threads", type=int, default=16, help="torch CPU threads, fixed (default: 16)")
    p.add_argument("--workers", type=int, default=8, help="DataLoader workers of the paper's pipeline (default: 8)")
    p.add_argument("--peak-tflops", type=float, default=989.0, help="dense bf16 peak of the device (H200: 989)")
    p.add_argument("--out", help=out_help(OUT))
    args = p.parse_args(argv)
    args.out = str(result_path(args.out, OUT, args.tiny))
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
    outcome = run_sections(run, names, Path(args.out), args.budget_s, SECTIONS, ESTIMATE_S)
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
