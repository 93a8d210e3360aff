"""Closed-form H_eff against torch.func (what a user would write instead), how both costs grow, and where
the closed form stops paying.

    python -m bench.bench_hessian [--quick] [--threads 1] [--repeats 3]

Anchor: torch.func, float64, the same quantity:

1. Per-sample objectives, the exact blocks ``H_i`` (n, d, d) and their eigenvalues by
   ``scale.curvature.blocks.effective_hessian_blocks(spectra="H")``:
   - SimSiam (swish3 head, swish2 predictor): closed form = one forward-mode sweep through head, predictor and
     cosine (``mini.loss_hessians.PredictorCosineCurvature``); torch.func = ``method="autodiff"`` with the
     plain loss (per-sample ``vmap(jacrev)`` Jacobians, reverse-over-reverse ``M_i``, autograd loss blocks);
   - MSE to targets: closed-form ``J``, ``M`` against their torch.func versions (the loss blocks from
     autograd in both).
   The share of ``eigvalsh`` (the same in both) is timed apart on the same blocks.
2. SimCLR (coupled): the dense ``H_eff`` (n d x n d): ``factored_operator(...).dense()`` (the route
   ``scale.curvature.blocks.dense_route`` picks), each closed-form route forced (NT-Xent's dense Hessian assembled
   with ``J``; ``n d`` products of the factored operator), against ``torch.func.hessian`` of ``z -> L(h(z))``.
3. Growth: the SimSiam contenders over n, d and the head width one at a time; fitted exponents
   ``t ~ size^p`` (least squares on logs); then d extended to 4096 (``--extend-d 8192`` goes further, about
   4 minutes more): the largest size measured is reported, and where the closed form stops paying, if it does.

Agreement: maximum entrywise difference relative to the largest entry. Interleaved rounds, medians;
thread count fixed and recorded. Writes ``bench/results/hessian.md``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

from bench._util import interleaved_median, out_help, result_path, run_header, write_atomic

OUT = Path(__file__).resolve().parent / "results" / "hessian.md"


def simsiam_instance(n: int, d: int, width: int, k: int, seed: int = 0):
    from scale.engine import objectives as so
    from scale.engine.heads import build_head
    from scale.engine.loss_curvature import PredictorCosine

    torch.manual_seed(seed)
    head = build_head("swish3", d, k, width).double().eval()
    pred = build_head("swish2", k, k, max(8, k // 2)).double().eval()
    z = torch.randn(n, d, dtype=torch.float64)
    with torch.no_grad():
        T = head(z) + 0.1 * torch.randn(n, k, dtype=torch.float64)
    return z, head, PredictorCosine(T, pred), (lambda H: so.simsiam(H, T, pred))


def mse_instance(n: int, d: int, width: int, k: int, seed: int = 0):
    from scale.engine.heads import build_head

    torch.manual_seed(seed)
    head = build_head("swish3", d, k, width).double().eval()
    z = torch.randn(n, d, dtype=torch.float64)
    T = torch.randn(n, k, dtype=torch.float64)
    loss = lambda H: 0.5 * ((H - T) ** 2).sum() / n  # noqa: E731
    return z, head, loss, loss


def blocks_pair(objective: str, n: int, d: int, width: int, k: int, repeats: int) -> dict:
    from scale.curvature.blocks import effective_hessian_blocks

    z, head, closed_loss, plain_loss = (simsiam_instance if objective == "simsiam" else mse_instance)(n, d, width, k)
    a = effective_hessian_blocks(z, head, closed_loss, method="closed_form", spectra="H")
    b = effective_hessian_blocks(z, head, plain_loss, method="autodiff", spectra="H")
    t = interleaved_median({
        "closed": lambda: effective_hessian_blocks(z, head, closed_loss, method="closed_form", spectra="H"),
        "torch.func": lambda: effective_hessian_blocks(z, head, plain_loss, method="autodiff", spectra="H"),
        "eigvalsh": lambda: torch.linalg.eigvalsh(a.H),
    }, repeats)
    return {"objective": objective, "n": n, "d": d, "width": width, "k": k, "closed_s": t["closed"],
            "func_s": t["torch.func"], "eig_s": t["eigvalsh"],
            "agreement": float((a.H - b.H).abs().max() / b.H.abs().max())}


def simclr_dense(n: int, d: int, width: int, k: int, repeats: int) -> dict:
    from scale.curvature.blocks import dense_route, factored_operator
    from scale.engine import objectives as so
    from scale.engine.heads import build_head
    from scale.engine.loss_curvature import NTXent

    torch.manual_seed(1)
    head = build_head("swish3", d, k, width).double().eval()
    z = torch.randn(n, d, dtype=torch.float64)

    def route(how: str):
        return lambda: factored_operator(z, head, NTXent(0.1), dense=how)[0].dense()

    def func():
        f = lambda x: so.nt_xent(head(x.reshape(n, d)), 0.1)  # noqa: E731
        return torch.func.hessian(f)(z.reshape(-1)).detach()

    ref = func()
    contenders = {"auto": route("auto"), "products": route("products"), "torch.func": func}
    if n**3 * k**2 + n**2 * k**2 * d <= 1e9:  # the assembled route where it runs within a few seconds
        contenders["assemble"] = route("assemble")
    t = interleaved_median(contenders, repeats)
    return {"n": n, "d": d, "width": width, "k": k, "route": dense_route(n, d, k),
            **{f"{name}_s": v for name, v in t.items()},
            "agreement": float((route("auto")() - ref).abs().max() / ref.abs().max())}


def exponent(xs, ys) -> float:
    return float(np.polyfit(np.log(xs), np.log(ys), 1)[0])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.bench_hessian", description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1, help="torch threads, fixed (default: 1)")
    p.add_argument("--quick", action="store_true", help="small sizes, 1 round: checks that it runs")
    p.add_argument("--extend-d", type=int, nargs="*", default=[],
                   help="more d values for the SimSiam extension at n=2 (d=8192: about 4 min)")
    p.add_argument("--out", help=out_help(OUT))
    args = p.parse_args(argv)
    args.out = str(result_path(args.out, OUT, args.quick))
    torch.set_num_threads(args.threads)
    if args.quick:
        args.repeats = 1
        base = dict(n=16, d=16, width=32, k=16)
        sweeps = {"n": [8, 16], "d": [8, 16], "width": [16, 32]}
        extend, mse_shapes = [(16, 32)], [(8, 8, 16, 8)]
        simclr_shapes = [(8, 4, 8, 16), (8, 16, 8, 4)]
    else:
        base = dict(n=64, d=128, width=256, k=128)
        sweeps = {"n": [16, 32, 64, 128], "d": [32, 64, 128, 256], "width": [64, 128, 256, 512]}
        extend = [(16, 512), (16, 1024), (2, 2048), (2, 4096)]  # (n, d) at width 256, k 128: where the lead shrinks
        mse_shapes = [(64, 128, 256, 128), (16, 1024, 256, 128), (16, 32, 256, 1024)]
        simclr_shapes = [(32, 16, 64, 32), (32, 16, 64, 128), (32, 8, 64, 256), (64, 16, 64, 64),
                         (32, 32, 128, 32), (32, 64, 32, 64), (32, 128, 32, 32), (16, 128, 16, 128), (32, 64, 16, 16)]
    header = run_header("bench.bench_hessian", argv if argv is not None else sys.argv[1:], args.threads)
    growth = {}
    for key, values in sweeps.items():
        rows = []
        for v in values:
            shape = {**base, key: v}
            if key == "width":
                shape["k"] = v // 2  # the head's output grows with its width (k = width / 2, as the base)
            rows.append(blocks_pair("simsiam", **shape, repeats=args.repeats))
        growth[key] = rows
    extend += [(2, d) for d in args.extend_d]
    extended = [blocks_pair("simsiam", n, d, base["width"], base["k"], repeats=1) for n, d in extend]
    mse = [blocks_pair("mse", *s, repeats=args.repeats) for s in mse_shapes]
    simclr = [simclr_dense(*s, repeats=args.repeats) for s in simclr_shapes]

    def row(r):
        return (f"| {r['objective']} | {r['n']}, {r['d']}, {r['width']}, {r['k']} | {r['closed_s']:.4f} | "
                f"{r['func_s']:.4f} | **{r['func_s'] / r['closed_s']:.2f}x** | "
                f"{(r['func_s'] - r['eig_s']) / (r['closed_s'] - r['eig_s']):.2f}x | {r['eig_s']:.4f} | "
                f"{r['agreement']:.1e} |")

    lines = ["# Closed-form H_eff against torch.func", "", header, "",
             f"Medians of {args.repeats} interleaved rounds (the extended d: 1 round); float64. Anchor: torch.func.",
             "", "## Per-sample blocks (H_i and their eigenvalues)", "",
             "| objective | shape (n, d, width, k) | closed form s | torch.func s | speed-up | speed-up without the "
             "common eigvalsh | eigvalsh s | max rel. difference |", "|---|---|---|---|---|---|---|---|"]
    lines += [row(r) for r in [growth["n"][2 if not args.quick else -1], *mse, *extended]]
    lines += ["", "## Growth (SimSiam blocks; one size varied, the others at the base "
              f"n={base['n']}, d={base['d']}, width={base['width']}, k={base['k']})", "",
              "| varied | values | closed form exponent | torch.func exponent | speed-up at each value |",
              "|---|---|---|---|---|"]
    for key, rows in growth.items():
        xs = [r[key] for r in rows]
        lines.append(f"| {key}{' (k = width/2)' if key == 'width' else ''} | {', '.join(map(str, xs))} | "
                     f"{exponent(xs, [r['closed_s'] for r in rows]):.2f} | "
                     f"{exponent(xs, [r['func_s'] for r in rows]):.2f} | "
                     + ", ".join(f"{r['func_s'] / r['closed_s']:.2f}x" for r in rows) + " |")
    all_blocks = [r for rows in growth.values() for r in rows] + mse + extended
    losing = [f"{r['objective']} {r['n']}, {r['d']}, {r['width']}, {r['k']}" for r in all_blocks
              if r["closed_s"] > r["func_s"]]
    largest = max(extended or all_blocks, key=lambda r: r["d"])
    lines += ["", "Closed form slower than torch.func at: " + (", ".join(losing) if losing else
              "none of the measured sizes") + f". Largest measured: d = {largest['d']} (n = {largest['n']}, "
              f"width {largest['width']}, k {largest['k']}).", "",
              "## SimCLR, dense H_eff (n d x n d)", "",
              "| shape (n, d, width, k) | route the rule picks | auto s | assembled s | n d products s | "
              "torch.func s | torch.func / auto | max rel. difference |", "|---|---|---|---|---|---|---|---|"]
    for r in simclr:
        asm = f"{r['assemble_s']:.4f}" if "assemble_s" in r else "- (skipped: slow)"
        lines.append(f"| {r['n']}, {r['d']}, {r['width']}, {r['k']} | {r['route']} | {r['auto_s']:.4f} | {asm} | "
                     f"{r['products_s']:.4f} | {r['torch.func_s']:.4f} | **{r['torch.func_s'] / r['auto_s']:.2f}x** | "
                     f"{r['agreement']:.1e} |")
    wrong = [r for r in simclr if "assemble_s" in r and
             (r["assemble_s"] < r["products_s"]) != (r["route"] == "assemble")]
    lines += ["", "Rule against the measurement (the faster closed-form route): " + (
        "agrees at every shape where both ran" if not wrong else "disagrees at " + ", ".join(
            f"{r['n']}, {r['d']}, {r['width']}, {r['k']} (assembled {r['assemble_s']:.4f} s, products "
            f"{r['products_s']:.4f} s)" for r in wrong)) + ".", ""]
    text = "\n".join(lines)
    write_atomic(args.out, text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
