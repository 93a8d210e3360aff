"""The per-epoch collapse statistics: the covariance's eigenproblem against the Gram matrix's, at the trainer's shapes.

    python -m bench.bench_epoch [--quick] [--threads 1] [--repeats 5]

Every epoch the trainer measures E1's collapse statistics of its probe batch (``Trainer._epoch_metrics``: the
representation spread and the covariance condition number of ``z`` and of ``h``, ``mini.collapse_metrics``). The
condition number needs the extreme eigenvalues of the covariance ``C`` (k, k) of the normalised rows; with ``n``
probe rows and ``n <= k`` the Gram matrix (n, n) has the same nonzero spectrum (``covariance_spectrum``).

Contenders, side by side (interleaved rounds, medians), float64 as the trainer:

- covariance (the anchor; the trainer's computation before, re-expressed here): ``eigvalsh`` of ``C`` (k, k);
- Gram: ``mini.collapse_metrics.collapse_stats`` (the trainer's now).

Shapes: the probe's rows (the trainer's default 256, and 8) against the widths a run measures: ``z`` of a
ResNet-18 (512) and ResNet-50 (2048), ``h`` of the CIFAR heads (2048) and of digits (128). Each row also gives
the largest relative difference of the two condition numbers. Writes ``bench/results/epoch.md``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from bench._util import interleaved_median, out_help, publish, result_path, run_header

OUT = Path(__file__).resolve().parent / "results" / "epoch.md"
SHAPES = [(256, 2048), (256, 512), (256, 128), (8, 2048), (8, 512)]


def covariance_stats(H: torch.Tensor, floor: float) -> tuple[float, float]:
    """The anchor: spread and condition number from ``eigvalsh`` of the (k, k) covariance itself."""
    from mini.collapse_metrics import representation_std
    from mini.invariance import l2_normalize

    U = l2_normalize(H)
    Uc = U - U.mean(dim=0, keepdim=True)
    eig = torch.linalg.eigvalsh(Uc.T @ Uc / (H.shape[0] - 1))
    return representation_std(H), float(eig[-1]) / max(float(eig[0]), floor)


def main(argv: list[str] | None = None) -> int:
    from mini.collapse_metrics import COND_FLOOR, collapse_stats

    p = argparse.ArgumentParser(prog="python -m bench.bench_epoch", description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=7, help="interleaved rounds (default: 7)")
    p.add_argument("--threads", type=int, default=1, help="torch threads, fixed (default: 1)")
    p.add_argument("--quick", action="store_true", help="two small shapes, 1 round: checks that it runs")
    p.add_argument("--out", help=out_help(OUT))
    args = p.parse_args(argv)
    args.out = str(result_path(args.out, OUT, args.quick))
    shapes = [(8, 512), (64, 128)] if args.quick else SHAPES
    repeats = 1 if args.quick else args.repeats
    torch.set_num_threads(args.threads)
    lines = ["# Per-epoch collapse statistics: covariance against Gram matrix", "",
             run_header("bench.bench_epoch", argv if argv is not None else sys.argv[1:], args.threads), "",
             f"Medians of {repeats} interleaved rounds after one warm-up call each; random rows with an anisotropic "
             "spectrum, float64. Both "
             "statistics of one batch (spread and condition number), as the trainer computes them per epoch for z "
             "and for h.", "",
             "| probe rows n | width k | covariance (k x k) ms | Gram (n x n) ms | covariance / Gram | "
             "condition numbers, max relative difference |", "|---|---|---|---|---|---|"]
    for n, k in shapes:
        gen = torch.Generator().manual_seed(n * k)
        H = torch.randn(n, k, generator=gen, dtype=torch.float64) * torch.linspace(0.05, 1.0, k, dtype=torch.float64)
        (s_a, c_a), (s_b, c_b) = covariance_stats(H, COND_FLOOR), collapse_stats(H)  # also the warm-up
        t = interleaved_median({"cov": lambda H=H: covariance_stats(H, COND_FLOOR),
                                "gram": lambda H=H: collapse_stats(H)}, repeats)
        diff = max(abs(s_a - s_b) / s_a, abs(c_a - c_b) / c_a)
        lines.append(f"| {n} | {k} | {1e3 * t['cov']:.2f} | {1e3 * t['gram']:.2f} | **{t['cov'] / t['gram']:.1f}x** | "
                     f"{diff:.1e} |")
    return publish(args.out, lines)


if __name__ == "__main__":
    sys.exit(main())
