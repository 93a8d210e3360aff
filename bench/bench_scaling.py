"""How the exact curvature measurement scales with the rows n and the representation width d.

    python -m bench.bench_scaling [--quick] [--threads 1] [--rows 8 16 32 64 128 256] [--widths 128 512 2048]

One measurement of the tracker (``scale.curvature.tracking.measure(path="auto")``: the fastest exact route, whose
record holds ``lambda_min`` and ``lambda_max`` to 1e-8 of the scale, ``|M|/|H|`` and the negative count) of
SimSiam's ``H_eff`` (the stop-gradient targets the rows' own embeddings, the predictor fixed) at three widths:

    d = 128    the project's digits network: swish3 head 128-256-256-128, predictor 128-64-128
    d = 512    the paper's tracker network (ResNet-18's z): swish2 head 512-2048-2048, predictor 2048-512-2048
    d = 2048   a ResNet-50's z with a VICReg-style head: swish3 2048-8192-8192-8192 (VICReg's projector widths),
               predictor 8192-2048-8192 (SimSiam's 4:1 bottleneck)

PyTorch's default initialisation, ``z`` the absolute value of a standard normal (a ReLU backbone's output). Each
point runs in a fresh process (its peak memory its own): seconds of the measurement (best of ``--repeats``; one at
d = 2048), the route taken, the products, and the process's peak resident memory, with its part above the state's
own (modules, their float64 copies excluded: measured after building them). The growth exponent ``p`` of
``seconds ~ n^p`` is fitted per width by least squares on the logarithms. Writes ``bench/results/scaling.md``.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from bench._util import out_help, publish, result_path, run_header

OUT = Path(__file__).resolve().parent / "results" / "scaling.md"
NETS = {  # d -> (head spec, head hidden width, head output k, predictor hidden width)
    128: ("swish3", 256, 128, 64),
    512: ("swish2", 2048, 2048, 512),
    2048: ("swish3", 8192, 8192, 2048),
}


def _rss_mb() -> float:
    """This process's resident memory now (MB), from /proc/self/status."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def point(d: int, n: int, repeats: int, threads: int) -> dict:
    """One (d, n) point, in this process."""
    import torch

    from scale.curvature.tracking import measure
    from scale.engine.heads import build_head
    from scale.engine.loss_curvature import PredictorCosine

    torch.set_num_threads(threads)
    spec, width, k, pw = NETS[d]
    torch.manual_seed(0)
    head = build_head(spec, d, k, width, bias=False).eval()
    pred = build_head("swish2", k, k, pw, bias=False).eval()
    z = torch.randn(n, d, dtype=torch.float64, generator=torch.Generator().manual_seed(1)).abs()
    with torch.no_grad():  # the head stays float32, as in training
        h = head(z.float()).double()
    loss = PredictorCosine(h, pred, "cosine")
    base = _rss_mb()
    seconds = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        rec, _ = measure(z, head, loss, block_diagonal=True, path="auto")
        seconds.append(time.perf_counter() - t0)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KB on Linux
    return {"d": d, "n": n, "seconds": min(seconds), "path": rec["path"],
            "products": rec["n_products"] + rec.get("n_products_M", 0), "peak_mb": peak, "base_mb": base,
            "lambda_min": rec["lambda_min"], "converged": bool(rec["converged_min"] and rec["converged_max"])}


def fit_exponent(ns: list[int], ts: list[float]) -> float:
    """``p`` of ``t ~ n^p`` by least squares on the logarithms."""
    return float(np.polyfit(np.log(ns), np.log(ts), 1)[0])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.bench_scaling", description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, nargs="+", default=[8, 16, 32, 64, 128, 256])
    p.add_argument("--widths", type=int, nargs="+", default=list(NETS), choices=list(NETS))
    p.add_argument("--repeats", type=int, default=2, help="measurements per point, best kept (1 at d = 2048)")
    p.add_argument("--threads", type=int, default=1, help="torch threads, fixed (default: 1)")
    p.add_argument("--quick", action="store_true", help="d 128 and 512, rows 8 and 16, 1 repeat")
    p.add_argument("--point", type=int, nargs=2, metavar=("D", "N"), help=argparse.SUPPRESS)  # a child process
    p.add_argument("--out", help=out_help(OUT))
    args = p.parse_args(argv)
    args.out = str(result_path(args.out, OUT, args.quick))
    if args.point:
        print(json.dumps(point(*args.point, args.repeats, args.threads)))
        return 0
    if args.quick:
        args.rows, args.widths, args.repeats = [8, 16], [128, 512], 1
    header = run_header("bench.bench_scaling", argv if argv is not None else sys.argv[1:], args.threads)
    rows = []
    for d in args.widths:
        for n in args.rows:
            reps = 1 if d == 2048 else args.repeats
            cmd = [sys.executable, "-m", "bench.bench_scaling", "--point", str(d), str(n), "--repeats", str(reps),
                   "--threads", str(args.threads)]
            proc = subprocess.run(cmd, capture_output=True, text=True, cwd=Path(__file__).resolve().parent.parent)
            if proc.returncode != 0:
                raise RuntimeError(f"point d={d} n={n} failed: {proc.stderr[-2000:]}")
            rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
            r = rows[-1]
            print(f"d={d} n={n}: {r['seconds']:.2f} s, {r['path']}, {r['products']} products, "
                  f"peak {r['peak_mb']:.0f} MB", file=sys.stderr, flush=True)
    lines = ["# Exact curvature: cost against the rows n and the width d", "", header, "",
             "One tracker measurement (`measure(path=\"auto\")`) of SimSiam's H_eff; each point a fresh process. "
             "Peak memory: the process's peak resident set; above the state: less the resident set after building "
             "the modules and z.", "",
             "| d | network (head; predictor) | n | N = n d | route | products (H + M) | seconds | "
             "peak MB | above the state MB | ends converged |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        spec, width, k, pw = NETS[r["d"]]
        net = f"{spec} {r['d']}-{width}-...-{k}; {k}-{pw}-{k}"
        lines.append(f"| {r['d']} | {net} | {r['n']} | {r['n'] * r['d']} | {r['path']} | {r['products']} | "
                     f"{r['seconds']:.3f} | {r['peak_mb']:.0f} | {r['peak_mb'] - r['base_mb']:.0f} | "
                     f"{r['converged']} |")
    lines += ["", "Growth exponent p of seconds ~ n^p (least squares on the logarithms, all rows of the width):", ""]
    for d in args.widths:
        rs = [r for r in rows if r["d"] == d]
        if len(rs) >= 2:
            lines.append(f"- d = {d}: p = {fit_exponent([r['n'] for r in rs], [r['seconds'] for r in rs]):.2f} "
                         f"(n {rs[0]['n']}-{rs[-1]['n']}; seconds {rs[0]['seconds']:.3g}-{rs[-1]['seconds']:.3g})")
    return publish(args.out, lines)


if __name__ == "__main__":
    sys.exit(main())
