"""The GPU suite's measurement sections (``bench.gpu_suite``): Lanczos on a wide head, the CuPy cross-check, E6
throughput, and the replication ledger's GPU subset.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from bench._gpu_run import Run
from scale.engine.timing import synced_seconds


def wide_lanczos(run: Run) -> None:
    from scale.curvature.blocks import effective_hessian_blocks, factored_operator
    from scale.curvature.closed_form import blockwise_ends
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
        return synced_seconds(fn, dev)

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


# the ledger's GPU subset: (experiment, seeds, epochs on digits) - the E3/E4 core at 2 seeds, the E2 mechanism at
# 1 seed, short runs (the registered plan's digits epochs are 50: another plan, stored apart)
LEDGER_RUNS = (("E3E4", 2, 10), ("E2", 1, 10))
LEDGER_CLAIMS = {"E3E4": ("E3.", "E4."), "E2": ("E2.",)}  # the report rows each run speaks to


def ledger_commands(device: str, out: Path, dry_run: bool) -> list[list[str]]:
    """``python -m scale.replicate`` for each of ``LEDGER_RUNS``, each into its own store under ``out``."""
    return [[sys.executable, "-m", "scale.replicate", "--dataset", "digits", "--device", device, "--seeds", str(seeds),
             "--experiments", exp, "--epochs", f"{exp}={epochs}", "--out", str(out / exp.lower()),
             *(["--dry-run"] if dry_run else [])] for exp, seeds, epochs in LEDGER_RUNS]


def ledger(run: Run) -> None:
    """The ledger's GPU subset, one ``scale.replicate`` process per run (the section's timeout interrupts the wait
    and ``subprocess.run`` ends the child); each run's command, exit code, seconds and its claims' rows of the
    report (claim, ours, verdict). ``--tiny``: the same commands for CUDA with ``--dry-run`` (a check that they are
    built right and planned without a GPU; nothing run, nothing written)."""
    a = run.args
    device = "cuda" if a.tiny or run.dev.type == "cuda" else "cpu"
    if a.ledger_out:
        out = Path(a.ledger_out)
    elif a.tiny:  # a dry run writes nothing: no folder made for it
        out = Path(tempfile.gettempdir()) / "gpu_suite_ledger"
    else:
        out = Path(tempfile.mkdtemp(prefix="gpu_ledger_"))
    run.lines += ["## The replication ledger's GPU subset", "",
                  "The E3/E4 core at 2 seeds and the E2 mechanism at 1 seed, short runs on digits "
                  f"({'; '.join(f'{e}: {s} seeds, {n} epochs' for e, s, n in LEDGER_RUNS)}): another plan than the "
                  f"registered one, so not evidence for its claims; stores under `{out}`." if not a.tiny else
                  "Tiny: the commands planned with `--dry-run` (nothing run).", ""]
    rows = ["| command | exit | seconds |", "|---|---|---|"]
    claims = []
    for (exp, _, _), cmd in zip(LEDGER_RUNS, ledger_commands(device, out, a.tiny)):
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        rows.append(f"| `python -m scale.replicate {' '.join(cmd[3:])}` | {proc.returncode} | "
                    f"{time.perf_counter() - t0:.1f} |")
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd[1:])} exited {proc.returncode}: {proc.stderr.strip()[-300:]}")
        report = out / exp.lower() / "report.md"
        if not a.tiny and report.is_file():
            for line in report.read_text().splitlines():
                cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
                if cells[0].startswith(LEDGER_CLAIMS[exp]) and len(cells) > 8:
                    claims.append(f"| {cells[0]} | {cells[4]} | {cells[8]} |")
    run.lines += [*rows, ""]
    if claims:
        run.lines += ["| claim | ours: mean [95 % interval] (n) | verdict |", "|---|---|---|", *claims, ""]
