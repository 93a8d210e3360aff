"""Why the tracker's per-block Lanczos starts cold: warm starts against the let-go, at the official tracker's sizes.

Until 2026-12-04 each measurement started every block from the previous measurement's lowest plus highest Ritz
vector (plus ``WARM_NOISE`` of a random one). Between measurements a block's eigenvalues may cross; its old lowest
Ritz vector is then its new second eigenvector, and ``goal="ends"``'s let-go reads the block's lowest Ritz value,
settled at that second eigenvalue, as the block's end. This bench measures that at the 5-epoch run's snapshots
(``bench._states``, epochs 2-5), on ``--rows``-row probes, each against the exact spectrum (float64 ``eigvalsh`` of
every block), with the recurrence as ``blockwise_ends`` runs it (float32 products, float64 refinement):

    cold         random starts (what the tracker does)
    crossing     every block started at its second eigenvector and its highest (a crossing in every block), with
                 the random part the tracker used (``WARM_NOISE``) and with one as large as the steered part
    previous     the previous epoch's cold result's Ritz vectors on the same probe rows (the tracker's warm start
                 as it was), on ``--probes`` probes per epoch

Each: how many runs reported an answer (``answered``) whose ``lambda_min`` is more than 100 ``tol`` of the scale
off, the worst error, and the products (full-product equivalents, median). Beside them, on the crossing starts'
probes: how far the lowest eigenvector of the block holding ``lambda_min`` turned in one epoch (its overlap with the
previous epoch's lowest eigenvector of the same block, and with the span of the previous lowest three).

    python -m bench.bench_warm_crossing --threads 1 [--rows 8] [--probes 32]
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from bench._util import publish, run_header

OUT = Path(__file__).resolve().parent / "results" / "warm_crossing.md"
TIMED_PROBES = (0, 9, 26, 29)  # the crossing starts' probes: the sweep's cell and the slowest probes of run E
EPOCHS_SEEN = (2, 3, 4, 5)  # mid-training, where the block ends crowd and cross


def _ends(state, rows: int, warm=None):
    """``blockwise_ends``' run on ``H`` (float32 recurrence, float64 refinement), with an optional start."""
    from bench._curvature_states import BLOCK_BOUND, probe_rows
    from bench._paper_tracker import OneView
    from scale.curvature.blockwise import blockwise_lanczos
    from scale.curvature.closed_form import RECURRENCE_DTYPE, closed_form_operator

    z1, t2 = probe_rows(state, rows)
    loss = OneView(state.predictor, t2)
    exact = closed_form_operator(z1, state.projector, loss, compose=False)[0]
    fast = closed_form_operator(z1, state.projector, loss, dtype=RECURRENCE_DTYPE)[0]
    return blockwise_lanczos(fast, rows, refine=exact, tol=BLOCK_BOUND, goal="ends", warm=warm)


class Tally:
    """Runs, wrong answers reported as answered, the worst error and the products of one kind of start."""

    def __init__(self) -> None:
        self.runs, self.fooled, self.worst, self.products = 0, 0, 0.0, []

    def add(self, res, eig: torch.Tensor) -> None:
        from bench._curvature_states import BLOCK_BOUND

        scale = float(eig.abs().max())
        err = abs(res.lambda_min - float(eig[:, 0].min())) / scale
        self.runs += 1
        self.fooled += bool(res.answered and err > 100 * BLOCK_BOUND)
        self.worst = max(self.worst, err)
        self.products.append(res.product_cost)

    def row(self, label: str) -> str:
        return (f"| {label} | {self.runs} | **{self.fooled}** | {self.worst:.1e} | "
                f"{float(np.median(self.products)):.1f} |")


def main(argv: list[str] | None = None) -> int:
    import scale.curvature.blockwise as blockwise
    from bench._curvature_states import exact_blocks
    from bench._states import OFFICIAL, training_states
    from bench.bench_curvature import EPOCHS
    from bench.bench_curvature_parts import MAX_PROBE_PAIRS, probe_state

    p = argparse.ArgumentParser(prog="python -m bench.bench_warm_crossing", description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=8, help="probe rows (default: 8)")
    p.add_argument("--probes", type=int, default=32, help="probes per epoch (default: 32)")
    p.add_argument("--threads", type=int, default=1, help="torch threads, fixed (default: 1)")
    p.add_argument("--out", default=str(OUT))
    args = p.parse_args(argv)
    if (args.rows < 1 or args.probes < 1 or args.threads < 1 or args.rows * args.probes > MAX_PROBE_PAIRS
            or args.rows * (max(TIMED_PROBES) + 1) > MAX_PROBE_PAIRS):
        print(f"bench_warm_crossing: rows {args.rows}, probes {args.probes} or threads {args.threads} out of range; "
              f"valid: rows, probes, threads >= 1, rows x probes <= {MAX_PROBE_PAIRS} and rows x "
              f"{max(TIMED_PROBES) + 1} <= {MAX_PROBE_PAIRS}", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    states = training_states(OFFICIAL, EPOCHS, MAX_PROBE_PAIRS, threads=args.threads,
                             log=lambda m: print(m, file=sys.stderr, flush=True))
    tallies = {k: Tally() for k in ("cold", "crossing", "crossing, equal", "previous")}
    saved, turned = blockwise.WARM_NOISE, []
    for e in EPOCHS_SEEN:
        for probe in range(args.probes):
            part = slice(probe * args.rows, (probe + 1) * args.rows)
            now, before = probe_state(states[e], part), probe_state(states[e - 1], part)
            w, V = torch.linalg.eigh(torch.cat(list(exact_blocks(now, args.rows))))
            cold = _ends(now, args.rows)
            tallies["cold"].add(cold, w)
            tallies["previous"].add(_ends(now, args.rows, warm=_ends(before, args.rows)), w)
            if probe in TIMED_PROBES:
                i = int(w[:, 0].argmin())
                old = torch.linalg.eigh(torch.cat(list(exact_blocks(before, args.rows)))[i])[1]
                turned.append((float((old[:, 0] @ V[i][:, 0]).abs()), float((old[:, :3].T @ V[i][:, 0]).norm()),
                               e, probe))
                crossing = replace(cold, block_vectors=torch.stack([V[:, :, 1], V[:, :, -1]]))
                tallies["crossing"].add(_ends(now, args.rows, warm=crossing), w)
                try:  # a random part as large as the steered one (the steered part's norm is about sqrt 2)
                    blockwise.WARM_NOISE = 2**0.5
                    tallies["crossing, equal"].add(_ends(now, args.rows, warm=crossing), w)
                finally:
                    blockwise.WARM_NOISE = saved
        print(f"bench_warm_crossing: epoch {e} done", file=sys.stderr, flush=True)
    header = run_header("bench.bench_warm_crossing", argv if argv is not None else sys.argv[1:], args.threads)
    lines = ["# Warm starts against the let-go", "", header, "",
             f"Epochs {', '.join(map(str, EPOCHS_SEEN))} of the {EPOCHS}-epoch run, n = {args.rows} rows; crossing "
             f"starts on probes {', '.join(map(str, TIMED_PROBES))} of each epoch, the other kinds on {args.probes} "
             f"probes of each. Fooled: reported answered with `lambda_min` more than 100 x 1e-8 of the scale off.", "",
             "| start | runs | fooled | worst lambda_min error (of the scale) | products, median |",
             "|---|---|---|---|---|",
             tallies["cold"].row("cold (random; the tracker)"),
             tallies["crossing"].row(f"every block at its second eigenvector and its highest, random part "
                                     f"`WARM_NOISE` = {saved:g}"),
             tallies["crossing, equal"].row("the same, random part as large as the steered one"),
             tallies["previous"].row("the previous epoch's Ritz vectors (the tracker's warm start until 2026-12-04)")]
    one, three, e, probe = min(turned)
    lines += ["", f"The lowest eigenvector of the block holding `lambda_min`, against the same block's previous epoch "
              f"(exact eigenvectors, the {len(turned)} crossing probes): overlap with the previous lowest "
              f"{min(t[0] for t in turned):.2f}-{max(t[0] for t in turned):.2f} (least at epoch {e}, probe {probe}: "
              f"{one:.2f}, {three:.2f} with the span of the previous lowest three)."]
    return publish(args.out, lines)


if __name__ == "__main__":
    raise SystemExit(main())
