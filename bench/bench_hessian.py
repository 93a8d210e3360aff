"""Closed-form H_eff against torch.func (what a user would write instead), and how both costs grow.

    python -m bench.bench_hessian [--quick] [--threads 1] [--repeats 3]

1. SimSiam (per-sample objective, swish3 head, tanh2-free MLP predictor of the head's width): the exact
   per-sample blocks ``H_i`` (n, d, d) in float64 by ``scale.blocks.effective_hessian_blocks``:
   - closed form: ``J``, ``M`` from ``mini.hessian``'s recursion and the Gauss-Newton blocks through the
     predictor and the cosine (``mini.loss_hessians``), all on torch tensors;
   - torch.func: per-sample ``vmap(jacrev)`` Jacobians, reverse-over-reverse ``M_i`` and the loss blocks
     from batched Hessian-vector products of autograd (``method="autodiff"`` with a plain loss callable).
2. SimCLR (coupled): the dense ``H_eff`` (n d x n d), closed form (``J``, ``M`` and NT-Xent's loss Hessian
   in closed form, assembled by ``mini.hessian.assemble``) against ``torch.func.hessian`` of ``z -> L(h(z))``.
3. Growth: the SimSiam contenders over n, d and the head width one at a time; fitted exponents
   ``t ~ size^p`` (least squares on logs), and the sizes where the closed form stops paying, if any.

Agreement: maximum entrywise difference relative to the largest entry. Interleaved rounds, medians;
thread count fixed and recorded. Writes ``bench/results/hessian.md``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

from bench._util import interleaved_median, run_header, write_atomic

OUT = Path(__file__).resolve().parent / "results" / "hessian.md"


def simsiam_instance(n: int, d: int, width: int, k: int, seed: int = 0):
    from scale import objectives as so
    from scale.heads import build_head
    from scale.loss_curvature import PredictorCosine

    torch.manual_seed(seed)
    head = build_head("swish3", d, k, width).double().eval()
    pred = build_head("swish2", k, k, max(8, k // 2)).double().eval()
    z = torch.randn(n, d, dtype=torch.float64)
    with torch.no_grad():
        T = head(z) + 0.1 * torch.randn(n, k, dtype=torch.float64)
    return z, head, PredictorCosine(T, pred), (lambda H: so.simsiam(H, T, pred))


def simsiam_pair(n: int, d: int, width: int, k: int, repeats: int) -> dict:
    from scale.blocks import effective_hessian_blocks

    z, head, closed_loss, plain_loss = simsiam_instance(n, d, width, k)
    a = effective_hessian_blocks(z, head, closed_loss, method="closed_form", spectra="H").H
    b = effective_hessian_blocks(z, head, plain_loss, method="autodiff", spectra="all").H
    t = interleaved_median({
        "closed": lambda: effective_hessian_blocks(z, head, closed_loss, method="closed_form", spectra="H"),
        "torch.func": lambda: effective_hessian_blocks(z, head, plain_loss, method="autodiff", spectra="all"),
    }, repeats)
    return {"n": n, "d": d, "width": width, "k": k, "closed_s": t["closed"], "func_s": t["torch.func"],
            "agreement": float((a - b).abs().max() / b.abs().max())}


def simclr_pair(n: int, d: int, width: int, k: int, repeats: int) -> dict:
    from mini.hessian import assemble, head_derivatives, interaction_blocks
    from mini.loss_hessians import NTXentCurvature, nt_xent_hessian
    from scale import objectives as so
    from scale.blocks import mini_head_of
    from scale.heads import build_head

    torch.manual_seed(1)
    head = build_head("swish3", d, k, width).double().eval()
    z = torch.randn(n, d, dtype=torch.float64)

    def closed():
        with torch.no_grad():
            der = head_derivatives(mini_head_of(head), z)
            rho = NTXentCurvature(der.h, 0.1).gradient()
            G, M = assemble(der.J, nt_xent_hessian(der.h, 0.1), interaction_blocks(der, rho))
        return G + M

    def func():
        f = lambda x: so.nt_xent(head(x.reshape(n, d)), 0.1)  # noqa: E731
        return torch.func.hessian(f)(z.reshape(-1)).detach()

    a, b = closed(), func()
    t = interleaved_median({"closed": closed, "torch.func": func}, repeats)
    return {"n": n, "d": d, "width": width, "k": k, "closed_s": t["closed"], "func_s": t["torch.func"],
            "agreement": float((a - b).abs().max() / b.abs().max())}


def exponent(xs, ys) -> float:
    return float(np.polyfit(np.log(xs), np.log(ys), 1)[0])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.bench_hessian", description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1, help="torch threads, fixed (default: 1)")
    p.add_argument("--quick", action="store_true", help="small sizes, 1 round: checks that it runs")
    p.add_argument("--out", default=str(OUT))
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.quick:
        args.repeats = 1
        base, simclr_shape = dict(n=16, d=16, width=32, k=16), (16, 8, 16, 16)
        sweeps = {"n": [8, 16], "d": [8, 16], "width": [16, 32]}
    else:
        base, simclr_shape = dict(n=64, d=128, width=256, k=128), (32, 16, 64, 32)
        sweeps = {"n": [16, 32, 64, 128], "d": [32, 64, 128, 256], "width": [64, 128, 256, 512]}
    head = run_header("bench.bench_hessian", argv if argv is not None else sys.argv[1:], args.threads)
    main_row = simsiam_pair(**base, repeats=args.repeats)
    simclr = simclr_pair(*simclr_shape, repeats=args.repeats)
    growth = {}
    for key, values in sweeps.items():
        rows = []
        for v in values:
            shape = {**base, key: v}
            if key == "width":
                shape["k"] = v // 2  # the head's output grows with its width (k = width / 2, as the base)
            rows.append(simsiam_pair(**shape, repeats=args.repeats))
        growth[key] = rows
    lines = ["# Closed-form H_eff against torch.func", "", head, "",
             f"Medians of {args.repeats} interleaved rounds; float64.", "",
             "| objective | shape (n, d, width, k) | closed form s | torch.func s | speed-up | max rel. difference |",
             "|---|---|---|---|---|---|"]
    for name, r in (("simsiam, per-sample blocks", main_row), ("simclr, dense H_eff", simclr)):
        lines.append(f"| {name} | {r['n']}, {r['d']}, {r['width']}, {r['k']} | {r['closed_s']:.4f} | "
                     f"{r['func_s']:.4f} | **{r['func_s'] / r['closed_s']:.1f}x** | {r['agreement']:.1e} |")
    lines += ["", "## Growth (SimSiam blocks; one size varied, the others at the base "
              f"n={base['n']}, d={base['d']}, width={base['width']}, k={base['k']})", "",
              "| varied | values | closed form exponent | torch.func exponent | speed-up at each value |",
              "|---|---|---|---|---|"]
    for key, rows in growth.items():
        xs = [r[key] for r in rows]
        lines.append(f"| {key}{' (k = width/2)' if key == 'width' else ''} | {', '.join(map(str, xs))} | "
                     f"{exponent(xs, [r['closed_s'] for r in rows]):.2f} | "
                     f"{exponent(xs, [r['func_s'] for r in rows]):.2f} | "
                     + ", ".join(f"{r['func_s'] / r['closed_s']:.1f}x" for r in rows) + " |")
    losing = [f"{k}={r[k]}" for k, rows in growth.items() for r in rows if r["closed_s"] > r["func_s"]]
    lines += ["", "Closed form slower than torch.func at: " + (", ".join(losing) if losing else
              "none of the measured sizes") + ".", ""]
    text = "\n".join(lines)
    write_atomic(args.out, text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
