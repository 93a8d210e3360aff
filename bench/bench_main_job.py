"""The main job on a CPU, its time split into parts: this revision against an earlier one, and the two
augmentation paths against each other.

    python -m bench.bench_main_job [--quick] [--threads 1 2] [--rounds 3] [--baseline DIR] [--epochs E]

Runs the README's main job, ``python -m scale.run digits --head gelu3`` (its defaults: 8 epochs, the
end-of-run measurement included), each run in a fresh process (``bench/_main_job_split.py`` splits its
time: import, data, augmentation, training, end of run, other), at fixed thread counts (``--threads``
for torch and ``OMP_NUM_THREADS`` for everything else). At each thread count, in interleaved rounds:

    before    ``--baseline DIR``: a checkout of an earlier revision (e.g. ``git worktree add /tmp/base
              95819cc``, the revision the performance issue measured), its own defaults
    batched   this checkout, ``--augment-path batched``
    workers   this checkout, ``--augment-path workers`` (per image, 1 worker process)

and names the path this checkout's default (``auto``) takes at that thread count on this machine. Round
``r`` runs every contender with ``--seed r``, so the results (final loss, probe accuracies) are compared
against the spread over seeds, not bit for bit (the paths draw the same transforms from different
random streams). ``--quick``: 1 epoch, 1 round, 1 thread (checks that it runs). Writes
``bench/results/main_job.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench._util import out_help, result_path, run_header, write_atomic

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "results" / "main_job.md"
DRIVER = Path(__file__).resolve().parent / "_main_job_split.py"
PARTS = ("import", "data", "augmentation", "training", "end", "other")
JOB = ["digits", "--head", "gelu3"]


def one_run(tree: Path, threads: int, seed: int, extra: list[str]) -> dict:
    """The main job of checkout ``tree`` in a fresh process: the driver's split, and the process's wall time."""
    with tempfile.TemporaryDirectory() as tmp:
        result = Path(tmp) / "split.json"
        env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": str(threads),
               "MKL_NUM_THREADS": str(threads)}
        argv = [sys.executable, str(DRIVER), str(result), "--", *JOB, "--threads", str(threads), "--seed", str(seed),
                "--quiet", "--out", tmp, "--run-name", "r", *extra]
        t0 = time.perf_counter()
        proc = subprocess.run(argv, cwd=tree, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if proc.returncode != 0 or not result.is_file():
            raise RuntimeError(f"the main job failed in {tree} (exit {proc.returncode}): {proc.stderr[-2000:]}")
        out = json.loads(result.read_text())
    out["wall"] = wall
    out["other"] += wall - out["main"] - out["import"]  # interpreter start-up and exit
    out["steps"] = out["training"] + out["augmentation"]
    return out


def _med(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def _spread(values: list[float]) -> str:
    if len(values) < 2:
        return f"{values[0]:.2f}"
    return f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.bench_main_job", description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--epochs", type=int, help="passed to scale.run (default: the job's own, 8)")
    p.add_argument("--baseline", help="a checkout of an earlier revision, run with its own defaults")
    p.add_argument("--quick", action="store_true", help="1 epoch, 1 round, 1 thread")
    p.add_argument("--out", help=out_help(OUT))
    args = p.parse_args(argv)
    args.out = str(result_path(args.out, OUT, args.quick))
    if args.quick:
        args.threads, args.epochs, args.rounds = [1], 1, 1
    import torch

    from scale.engine.augment import resolve_augment_path, usable_cores

    epochs = [] if args.epochs is None else ["--epochs", str(args.epochs)]
    contenders: dict[str, tuple[Path, list[str]]] = {}
    if args.baseline:
        contenders["before"] = (Path(args.baseline).resolve(), epochs)
    contenders["batched"] = (ROOT, [*epochs, "--augment-path", "batched"])
    contenders["workers"] = (ROOT, [*epochs, "--augment-path", "workers"])
    header = run_header("bench.bench_main_job", argv if argv is not None else sys.argv[1:], args.threads[0])
    base = ""
    if args.baseline:
        rev = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=args.baseline, capture_output=True,
                             text=True).stdout.strip()
        base = f" `before`: the checkout {args.baseline} (commit {rev or 'unknown'}), with its own defaults."
    lines = ["# The main job on a CPU: where its time goes, before and after", "", header, "",
             f"`python -m scale.run {' '.join(JOB)}{' ' + ' '.join(epochs) if epochs else ''}` (the job's defaults, "
             f"end-of-run measurement included), each run a fresh process at a fixed thread count (`--threads T`, "
             f"`OMP_NUM_THREADS=T`); {usable_cores()} usable cores; medians of {args.rounds} interleaved rounds, "
             f"round r with `--seed r`.{base} Seconds:", "",
             "| T | contender | path | wall | import | data | augmentation (training process) | training steps | "
             "end of run | other | final loss | probe z % | probe h % |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    notes = []
    for threads in args.threads:
        runs: dict[str, list[dict]] = {name: [] for name in contenders}
        for r in range(args.rounds):
            for name, (tree, extra) in contenders.items():
                runs[name].append(one_run(tree, threads, r, extra))
        auto, why = resolve_augment_path("auto", torch.device("cpu"), threads=threads, workers=1)
        for name, rs in runs.items():
            label = f"{name} (the default here)" if name == auto else name
            lines.append(f"| {threads} | {label} | {rs[0]['augment_path']} | {_med(rs, 'wall'):.2f} | "
                         + " | ".join(f"{_med(rs, k):.2f}" for k in PARTS) + " | "
                         + " | ".join(_spread([x[k] for x in rs]) for k in ("loss", "probe_z", "probe_h")) + " |")
        default = runs[auto]
        other = runs["workers" if auto == "batched" else "batched"]

        def ratio(a: list[dict], key: str, default: list[dict] = default) -> str:
            return f"{_med(a, key) / _med(default, key):.2f}x"

        note = (f"{threads} thread(s): the default path ({auto}; {why}) against the other: wall "
                f"{ratio(other, 'wall')}, training steps + augmentation {ratio(other, 'steps')}")
        if "before" in runs:
            b = runs["before"]
            note += (f"; before / after (the default): wall {ratio(b, 'wall')}, training steps + augmentation "
                     f"{ratio(b, 'steps')}, end of run {ratio(b, 'end')}")
        notes.append(note + ".")
    lines += ["", "Ratios (above 1: the second is faster):", "", *[f"- {n}" for n in notes], "",
              "Final loss and probe accuracies: mean ± standard deviation over the rounds' seeds.", ""]
    text = "\n".join(lines)
    write_atomic(args.out, text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
