"""Closed-form block H_eff against autograd's full-batch Hessian, side by side in one run.

    python bench/bench_hessian.py [--repeats 5] [--out bench/results/hessian.md]

Instance: n=64, d=16, k=32, head gelu3 (width 64). Two objectives: MSE to fixed targets (its loss
Hessian I/n is closed form, so the closed-form path is pure head algebra) and SimCLR (its loss
Hessian comes from autograd on the (n, k) embeddings, which then dominates the closed-form path).
Agreement is the entrywise maximum difference relative to the spectral scale of H_eff.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _util import interleaved_median, machine, write_atomic

from mini.heads import init_head
from mini.hessian import decompose_closed_form, effective_hessian, spectrum
from mini.losses import mse_targets, nt_xent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default="bench/results/hessian.md")
    args = parser.parse_args()
    n, d, k, width = 64, 16, 32, 64
    rng = np.random.default_rng(0)
    head = init_head("gelu3", d, k, width, rng)
    Z = rng.standard_normal((n, d))
    rows = []
    for name, obj, repeats in (
        ("mse", mse_targets(rng.standard_normal((n, k))), args.repeats),
        ("simclr", nt_xent(0.1), max(1, args.repeats // 2)),
    ):
        ref = effective_hessian(head, obj, Z)
        closed = decompose_closed_form(head, obj, Z).H
        agreement = float(np.abs(ref - closed).max() / spectrum(ref).scale)
        t = interleaved_median(
            {"autograd": lambda obj=obj: effective_hessian(head, obj, Z),
             "closed": lambda obj=obj: decompose_closed_form(head, obj, Z)},
            repeats,
        )
        rows.append((name, t["autograd"], t["closed"], t["autograd"] / t["closed"], agreement))
        print(f"{name}: autograd {t['autograd']:.3f} s, closed form {t['closed']:.4f} s, "
              f"speed-up {t['autograd'] / t['closed']:.1f}x, agreement {agreement:.1e}", flush=True)
    lines = [
        "| objective | autograd full Hessian (s) | closed-form blocks (s) | speed-up | max rel. difference |",
        "|---|---|---|---|---|",
        *(f"| {r[0]} | {r[1]:.3f} | {r[2]:.4f} | {r[3]:.1f}x | {r[4]:.1e} |" for r in rows),
    ]
    text = (
        f"H_eff of gelu3 (width {width}) at n={n}, d={d}, k={k}; medians of interleaved runs "
        f"({args.repeats} for mse, {max(1, args.repeats // 2)} for simclr) on {machine()}.\n\n"
        + "\n".join(lines) + "\n"
    )
    write_atomic(args.out, text)
    print(text)


if __name__ == "__main__":
    main()
