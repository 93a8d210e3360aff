"""The main job on a CPU with each augmentation path: batched kornia in the training process (before)
against per-image PIL in worker processes preparing the next batch (after, the CPU default).

    python -m bench.bench_main_job [--quick] [--threads 1 2] [--epochs 3] [--rounds 2]

Runs ``python -m scale.run digits --head gelu3 --epochs E --threads T --no-final-measure`` in this process,
the two paths interleaved (before, after, before, after, ...) at each fixed thread count; reports the
training seconds (sum of the epochs' step time), the wall time of the run, and the final epoch's loss
(the two paths draw the same transforms with different random streams, so losses agree within seed
noise, not bit for bit). Writes ``bench/results/main_job.md``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench._util import run_header, write_atomic

OUT = Path(__file__).resolve().parent / "results" / "main_job.md"


def one_run(path: str, threads: int, epochs: int, workers: int) -> dict:
    import scale.engine.augment as aug
    import scale.engine.train as train
    from scale.run import main as run_main

    original = aug.build_views

    def forced(*args, **kwargs):
        kwargs.update(path=path, workers=workers)
        return original(*args[:5], **kwargs)

    train.build_views = forced  # the benchmark's choice of path; the trainer's own default is "auto"
    try:
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            code = run_main(["digits", "--head", "gelu3", "--epochs", str(epochs), "--threads", str(threads),
                             "--no-final-measure", "--quiet", "--out", tmp, "--run-name", "r"])
            wall = time.perf_counter() - t0
            hist = [json.loads(x) for x in (Path(tmp) / "r" / "metrics.jsonl").read_text().splitlines()]
    finally:
        train.build_views = original
    return {"exit": code, "wall": wall, "train": sum(h["epoch_seconds"] for h in hist), "loss": hist[-1]["loss"]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.bench_main_job", description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--workers", type=int, default=1, help="worker processes of the per-image path (default: 1)")
    p.add_argument("--quick", action="store_true", help="1 epoch, 1 round, 1 thread")
    p.add_argument("--out", default=str(OUT))
    args = p.parse_args(argv)
    if args.quick:
        args.threads, args.epochs, args.rounds = [1], 1, 1
    header = run_header("bench.bench_main_job", argv if argv is not None else sys.argv[1:], args.threads[0])
    lines = ["# The main job on a CPU: batched augmentation (before) against per-image workers (after)", "",
             header, "", f"`scale.run digits --head gelu3 --epochs {args.epochs} --no-final-measure`, "
             f"{args.workers} worker process(es) on the per-image path; medians of {args.rounds} interleaved rounds.",
             "", "| torch threads | path | exit codes | training s | wall s | final loss (all rounds) |",
             "|---|---|---|---|---|---|"]
    ratios = []
    for threads in args.threads:
        runs: dict[str, list[dict]] = {"batched": [], "workers": []}
        for _ in range(args.rounds):
            for path in runs:
                runs[path].append(one_run(path, threads, args.epochs, args.workers))
        med = {k: (statistics.median(r["train"] for r in v), statistics.median(r["wall"] for r in v))
               for k, v in runs.items()}
        for path, v in runs.items():
            lines.append(f"| {threads} | {path} | {sorted({r['exit'] for r in v})} | {med[path][0]:.2f} | "
                         f"{med[path][1]:.2f} | " + ", ".join(f"{r['loss']:.4f}" for r in v) + " |")
        ratios.append(f"{threads} thread(s): training {med['batched'][0] / med['workers'][0]:.2f}x, "
                      f"wall {med['batched'][1] / med['workers'][1]:.2f}x")
    lines += ["", "Speed-up of the per-image worker path over the batched path (before / after): "
              + "; ".join(ratios) + ".", ""]
    text = "\n".join(lines)
    write_atomic(args.out, text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
