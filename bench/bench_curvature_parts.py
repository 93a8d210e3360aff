"""Where the time of the tracker's exact ends goes, at one state and row count, against the paper's estimator.

``bench_curvature`` reports ratios; this splits one of them. At a state of the 5-epoch run (``crowded`` by
default: epoch 4, the cell where the exact ends are slowest) and ``--rows`` probe rows, side by side in interleaved
rounds (medians): the paper's float32 power iteration (42 products) and ``blockwise_ends`` (the tracker's exact
ends, cold, as the tracker starts them). Then one more cold run with its parts timed: the two
closed-form operators' construction, the float32 products of the recurrence (calls and seconds each), the final
float64 refinement, the per-step work of the recurrence itself (the tests' extreme Ritz pairs, the
reorthogonalisation, the rest). Last, the convergence of the block that holds ``lambda_min``: at every test, the
error of its lowest Ritz value against the exact spectrum (float64 ``eigvalsh`` of every block), beside its
residual estimate (the stop) and the let-go's estimate ``r^2 / gap``, so that the steps the block needs (its error at
the bound asked) and the steps the certified stop takes can be read apart.

With ``--probes K``: the cold exact ends over ``K`` disjoint probes of ``--rows`` rows at every state from epoch 2 on
(rows ``i rows .. (i + 1) rows - 1`` of one probe of ``K rows`` pairs): their calls, median and most, and how many
float32 runs the float64 refinement found short of the bound (each then run again in float64), so that the cell
timed above can be read against the probes a user might take.

    python -m bench.bench_curvature_parts --threads 1 [--state crowded] [--rows 8] [--repeats 5] [--probes 32]
                                          [--probe I]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch

from bench._util import interleaved_median, publish, run_header

OUT = Path(__file__).resolve().parent / "results" / "curvature_parts.md"
BOUND = 1e-8  # the residual bound asked of the ends, relative to the scale (bench_curvature's)
MAX_PROBE_PAIRS = 256  # --probes: probes x rows at most this many pairs (bench_curvature's largest probe)


@contextmanager
def timed_parts(spent: Counter, calls: Counter):
    """Wall time and calls of the parts of ``blockwise_ends``, by wrapping them for the duration (restored after)."""
    import scale.curvature.blockwise as bw
    import scale.curvature.closed_form as cf
    from scale.curvature.operators import Operator

    def wrap(owner, name: str, label):  # label: a string, or a function of the call's first argument
        f = getattr(owner, name)

        def g(first, *a, **k):
            t = time.perf_counter()
            out = f(first, *a, **k)
            key = label if isinstance(label, str) else label(first)
            spent[key] += time.perf_counter() - t
            calls[key] += 1
            return out
        saved.append((owner, name, f))
        setattr(owner, name, g)

    def dtype_of(op) -> str:
        return str(op.dtype).removeprefix("torch.")

    saved: list[tuple] = []
    for owner, name, label in [
            (cf, "closed_form_operator", "operators built (float32 composed, float64 not)"),
            (bw, "_block_tests", "tests: the tridiagonals' extreme pairs (dstemr)"),
            (bw, "_reorthogonalise_blocks", "reorthogonalisation"),
            (bw, "_blockwise_result", "final extraction and float64 refinement"),
            (cf, "blockwise_lanczos", "the whole per-block Lanczos (products, steps, refinement)"),
            (Operator, "matvec", lambda op: f"products ({dtype_of(op)})"),
            (Operator, "matmat", lambda op: f"products of several columns ({dtype_of(op)})")]:
        wrap(owner, name, label)
    try:
        yield
    finally:
        for owner, name, f in reversed(saved):
            setattr(owner, name, f)


def trajectory(state, rows: int) -> tuple[list[str], dict]:
    """The lowest Ritz value's error at every test of the block holding ``lambda_min``, beside its residual (the stop)
    and the let-go's estimate ``r^2 / gap``."""
    import scale.curvature.blockwise as bw
    from bench._curvature_states import exact_spectrum, probe_rows
    from bench._paper_tracker import OneView
    from scale.curvature.closed_form import blockwise_ends

    z1, t2 = probe_rows(state, rows)
    eig = exact_spectrum(state, rows)
    scale = float(eig.abs().max())
    blk = int(eig[:, 0].argmin())
    lam1, lam2 = float(eig[blk, 0]), float(eig[blk, 1])
    seen: list[tuple] = []
    f, extract, tests = bw._end_estimates, bw._blockwise_result, bw._block_tests
    in_extraction, step = [], [0]

    def tested(alpha, *a):  # the step of each test (tests skip steps while every end is far from the bound)
        step[0] = alpha.shape[1]
        return tests(alpha, *a)

    def logged(theta, r):  # the recurrence's tests only (the let-go's estimate; the stop is the residual)
        out = f(theta, r)
        if not in_extraction:
            seen.append((step[0], theta.copy(), r.copy(), out.copy()))
        return out

    def extraction(*a, **k):
        in_extraction.append(True)
        return extract(*a, **k)
    bw._end_estimates, bw._blockwise_result, bw._block_tests = logged, extraction, tested
    try:
        res = blockwise_ends(z1, state.projector, OneView(state.predictor, t2), tol=BOUND, interaction=False)[0]
    finally:
        bw._end_estimates, bw._blockwise_result, bw._block_tests = f, extract, tests
    lines = ["| step | error of the lowest Ritz value | residual estimate | r^2 / (lambda_2 - lambda_1), exact gap "
             "| r^2 / gap estimate (the let-go's) |", "|---|---|---|---|---|"]
    for k, (m, theta, r, bound) in enumerate(seen):
        i = int(theta[:, 0].argmin())  # the block with the lowest Ritz value: lambda_min's once it leads
        err, r1 = (float(theta[i, 0]) - lam1) / scale, float(r[i, 0]) / scale
        if k % 3 == 0 or k >= len(seen) - 2:  # every third test, and the last two
            lines.append(f"| {m} | {err:.1e} | {r1:.1e} | {r1**2 * scale / (lam2 - lam1):.1e} | "
                         f"{float(bound[i, 0]) / scale:.1e} |")
    final = abs(res.lambda_min - lam1) / scale
    return lines, {"block": blk, "gap": (lam2 - lam1) / scale, "steps": int(res.block_steps.max()),
                   "final_error": final}


def probe_sweep(states: list, names: list[str], rows: int, probes: int, timed: int = 0) -> list[str]:
    """Calls of the cold exact ends over ``probes`` disjoint probes of ``rows`` rows at each state from epoch 2 on, and
    the runs kept in float64 (the float32 run's refined ends short of the bound: ``info["recurrence"]``)."""
    from bench._curvature_states import probe_rows
    from bench._paper_tracker import OneView
    from scale.curvature.closed_form import blockwise_ends

    lines = [f"| state | probes of {rows} rows | calls, median | calls, most | the slowest probe | probe {timed}'s "
             "(timed above) | float64 reruns |", "|---|---|---|---|---|---|---|"]
    for state, name in zip(states, names):
        if name in ("init", "epoch 1"):
            continue
        z, t = probe_rows(state, rows * probes)
        calls, reruns = [], 0
        for i in range(probes):
            part = slice(i * rows, (i + 1) * rows)
            res, _, info = blockwise_ends(z[part], state.projector, OneView(state.predictor, t[part]), tol=BOUND,
                                          interaction=False)
            calls.append(res.n_products)
            reruns += info["recurrence"] != "float32"
        timed_calls = calls[timed] if timed < probes else "-"
        lines.append(f"| {name} | {probes} | {sorted(calls)[len(calls) // 2]} | {max(calls)} | "
                     f"{int(np.argmax(calls))} | {timed_calls} | {reruns} |")
    return lines


def probe_state(state, part: slice):
    """``state`` with only the pairs ``part`` of its probe (both views), so that its first rows are that probe."""
    from dataclasses import replace

    m = state.z.shape[0] // 2
    rows = torch.cat([torch.arange(m)[part], m + torch.arange(m)[part]])
    return replace(state, z=state.z[rows], h=state.h[rows])


def main(argv: list[str] | None = None) -> int:
    from bench._curvature_states import probe_rows
    from bench._paper_tracker import OneView, one_view_loss, paper_power_iteration
    from bench._states import OFFICIAL, training_states
    from bench.bench_curvature import CROWDED, EPOCHS
    from scale.curvature.closed_form import blockwise_ends

    p = argparse.ArgumentParser(prog="python -m bench.bench_curvature_parts", description=__doc__.splitlines()[0])
    p.add_argument("--state", default="crowded", help=f"'crowded' ({CROWDED}), 'init' or 'epoch E' (E <= {EPOCHS})")
    p.add_argument("--rows", type=int, default=8, help="view-1 probe rows (default: 8)")
    p.add_argument("--repeats", type=int, default=5, help="interleaved rounds (default: 5)")
    p.add_argument("--threads", type=int, default=1, help="torch threads, fixed (default: 1)")
    p.add_argument("--probes", type=int, default=0,
                   help="also the cold ends over this many disjoint probes at every state from epoch 2 (default: 0)")
    p.add_argument("--probe", type=int, default=0,
                   help="time the I-th disjoint probe of --rows rows (rows I rows .. (I + 1) rows - 1; default: 0), "
                        "e.g. the one a --probes sweep found slowest")
    p.add_argument("--out", default=str(OUT))
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    name = CROWDED if args.state == "crowded" else args.state
    names = ["init", *(f"epoch {e}" for e in range(1, EPOCHS + 1))]
    if (name not in names or args.rows < 1 or not 0 <= args.probes * args.rows <= MAX_PROBE_PAIRS
            or args.probe < 0 or (args.probe + 1) * args.rows > MAX_PROBE_PAIRS):
        print(f"bench_curvature_parts: unknown state {args.state!r}, rows {args.rows}, probes {args.probes} or probe "
              f"{args.probe}; valid: 'crowded', {', '.join(repr(x) for x in names)}; rows >= 1; 0 <= probes x rows "
              f"<= {MAX_PROBE_PAIRS}; probe >= 0 and (probe + 1) x rows <= {MAX_PROBE_PAIRS}", file=sys.stderr)
        return 2
    pairs = max(args.rows * (args.probe + 1), args.rows * args.probes)
    states = training_states(OFFICIAL, EPOCHS, pairs, threads=args.threads,
                             log=lambda m: print(m, file=sys.stderr, flush=True))
    part = slice(args.probe * args.rows, (args.probe + 1) * args.rows)
    state = probe_state(states[names.index(name)], part)
    z1, t2 = probe_rows(state, args.rows)
    loss = OneView(state.predictor, t2)
    f32 = one_view_loss(state.projector, state.predictor, t2, torch.float32)

    def ends():
        return blockwise_ends(z1, state.projector, loss, tol=BOUND, interaction=False)

    med = interleaved_median({"paper": lambda: paper_power_iteration(f32, z1), "ends cold": ends}, args.repeats)
    spent, calls = Counter(), Counter()
    with timed_parts(spent, calls):
        t = time.perf_counter()
        res = ends()[0]
        whole = time.perf_counter() - t
    header = run_header("bench.bench_curvature_parts", argv if argv is not None else sys.argv[1:], args.threads)
    paper = med["paper"]
    lines = ["# Where the exact ends' time goes, against the paper's estimator", "", header, "",
             f"State `{name}` of the {EPOCHS}-epoch run, n = {args.rows} rows (N = {z1.numel()}; probe {args.probe}: "
             f"pairs {part.start}-{part.stop - 1}); medians of {args.repeats} interleaved rounds.", "",
             "| contender | seconds | vs paper |", "|---|---|---|"]
    lines += [f"| {k} | {v:.3f} | {v / paper:.2f}x |" for k, v in med.items()]
    lines += ["", f"One more cold run, its parts timed ({whole:.3f} s in all, {whole / paper:.2f}x; "
              f"{res.n_products} calls):", "", "| part | seconds | share of the paper's time | calls | each |",
              "|---|---|---|---|---|"]
    lines += [f"| {k} | {v:.3f} | {v / paper:.2f}x | {calls[k]} | {1e3 * v / calls[k]:.2f} ms |"
              for k, v in spent.most_common()]
    lines += ["", "Nested: the products, the tests, the reorthogonalisation and the final extraction are parts of the "
              "per-block Lanczos; the products of several columns (the ends measured: float32 over every row, float64 "
              "on the refined blocks' rows) are part of the final extraction."]
    rows, info = trajectory(state, args.rows)
    lines += ["", f"The block holding `lambda_min` (block {info['block']}, gap {info['gap']:.1e} of the scale): "
              f"its lowest Ritz value's error (float32 products: floor about 1e-7 of the scale) and the stopping "
              f"bound at the tests; the stop came at step {info['steps']}, the ends' `lambda_min` after the float64 "
              f"refinement {info['final_error']:.1e} of the scale off.", "", *rows]
    if args.probes:
        lines += ["", f"The cold exact ends over {args.probes} disjoint probes of {args.rows} rows at each state "
                  f"from epoch 2 on (probe i: pairs i x {args.rows} on; probe {args.probe} is the one timed above "
                  f"at its state):", "", *probe_sweep(states, names, args.rows, args.probes, args.probe)]
    return publish(args.out, lines)


if __name__ == "__main__":
    sys.exit(main())
