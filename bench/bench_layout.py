"""The weights' layout for few-row products: a forward matmul timed alone against the whole product it is part of.

``scale.curvature.layout.transposes_pay`` decides, once per process, whether the closed-form products of a chain on
few rows read contiguous transposes of the weights (copies made at every build) or the transposed views. This bench
shows what that decision rests on, at the official tracker's chain (the projector and the predictor of the 5-epoch
run's state, composed as the tracker's float32 recurrence composes them) for each row count: the forward matmuls
alone on each layout (what the decision timed before 2026-12-04), whole products on each layout (``ChainForward.hvp``
through every link: what it times now), the copy's cost, and the answer ``transposes_pay`` gives in this process
with the time it took. Best of ``--repeats`` alternating rounds (the copy: the median of its rounds, fresh memory
each time, as at a build). ``--quick`` (checks that it runs): the run's untrained head and predictor on random
rows, nothing trained or cached, 1 and 2 rows, 2 rounds.

    python -m bench.bench_layout --threads 1 [--state 'epoch 5'] [--repeats 15] [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

from bench._util import interleaved_times, out_help, publish, result_path, run_header

OUT = Path(__file__).resolve().parent / "results" / "layout.md"
ROWS = (1, 2, 4, 8, 16, 32)  # up to mini.loss_hessians.TRANSPOSED_ROWS: above it no pass reads the copies


def _best(fns: dict, repeats: int) -> dict[str, float]:
    """Best wall time of each function over ``repeats`` alternating rounds."""
    return {name: min(ts) for name, ts in interleaved_times(fns, repeats).items()}


def row(links, rows: int, repeats: int) -> str:
    """One table row: forward matmuls and whole products on views and copies, the copy, the decision."""
    import scale.curvature.layout as layout
    from mini.loss_hessians import chain_forward

    gen = torch.Generator().manual_seed(rows)
    xs = [torch.randn(rows, L.W.shape[1], generator=gen) for L in links]
    views, copies = [L.W.T for L in links], [L.W.T.contiguous() for L in links]
    fwd = _best({"views": lambda: [x @ m for x, m in zip(xs, views)],
                 "copies": lambda: [x @ m for x, m in zip(xs, copies)]}, repeats)
    chain = chain_forward(links, torch.randn(rows, links[0].W.shape[1], generator=gen))
    copied = chain.with_transposes()
    D = [torch.ones_like(s) for s in chain.s1]
    V = torch.randn(rows, links[0].W.shape[1], generator=gen)
    prod = _best({"views": lambda: chain.hvp(D, V, top=lambda U: U),
                  "copies": lambda: copied.hvp(D, V, top=lambda U: U)}, repeats)
    copy_s = interleaved_times({"copy": chain.with_transposes}, repeats)["copy"]
    layout._CHOICES.pop((links[0].W.dtype, "cpu", tuple(tuple(L.W.shape) for L in links), rows), None)
    t = time.perf_counter()
    answer = layout.transposes_pay(links, rows)
    decided = time.perf_counter() - t
    return (f"| {rows} | {1e3 * fwd['views']:.2f} | {1e3 * fwd['copies']:.2f} | {fwd['views'] / fwd['copies']:.2f} | "
            f"{1e3 * prod['views']:.2f} | {1e3 * prod['copies']:.2f} | {prod['views'] / prod['copies']:.2f} | "
            f"{1e3 * statistics.median(copy_s):.1f} | {'copies' if answer else 'views'} | {1e3 * decided:.0f} |")


def main(argv: list[str] | None = None) -> int:
    from bench._paper_tracker import OneView
    from bench._states import OFFICIAL, _model, training_states
    from bench.bench_curvature import EPOCHS
    from bench.bench_curvature_parts import MAX_PROBE_PAIRS
    from scale.engine.heads import mini_head_of

    p = argparse.ArgumentParser(prog="python -m bench.bench_layout", description=__doc__.splitlines()[0])
    names = ["init", *(f"epoch {e}" for e in range(1, EPOCHS + 1))]
    p.add_argument("--state", default=f"epoch {EPOCHS}", help=f"one of {', '.join(names)} (default: epoch {EPOCHS})")
    p.add_argument("--repeats", type=int, default=15, help="alternating rounds (default: 15)")
    p.add_argument("--threads", type=int, default=1, help="torch threads, fixed (default: 1)")
    p.add_argument("--quick", action="store_true", help="untrained weights, random rows, 1 and 2 rows, 2 rounds")
    p.add_argument("--out", help=out_help(OUT))
    args = p.parse_args(argv)
    args.out = str(result_path(args.out, OUT, args.quick))
    if args.state not in names or args.repeats < 1 or args.threads < 1:
        print(f"bench_layout: unknown state {args.state!r} or repeats {args.repeats} or threads {args.threads}; "
              f"valid: {', '.join(repr(x) for x in names)}; repeats >= 1; threads >= 1", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    rows, repeats, what = ROWS, args.repeats, f"State `{args.state}` of the {EPOCHS}-epoch run"
    if args.quick:  # the run's model as built, random rows: the code path only
        _, model = _model(OFFICIAL, EPOCHS, 0, args.threads)
        projector, predictor = model.projector.eval(), model.predictor.eval()
        gen = torch.Generator().manual_seed(0)
        z = torch.randn(max(ROWS), projector.d, generator=gen)
        with torch.no_grad():
            t = projector(torch.randn(z.shape, generator=gen))
        rows, repeats, what = ROWS[:2], 2, "Quick check (untrained weights, random rows: timings mean nothing)"
    else:
        state = training_states(OFFICIAL, EPOCHS, MAX_PROBE_PAIRS, threads=args.threads,  # bench_curvature's states
                                log=lambda m: print(m, file=sys.stderr, flush=True))[names.index(args.state)]
        projector, predictor = state.projector, state.predictor
        m = state.z.shape[0] // 2
        z, t = state.z[: max(ROWS)].float(), state.h[m: m + max(ROWS)].float()
    links = OneView(predictor, t).curvature_at(mini_head_of(projector, torch.float32), z, True).fwd.links
    header = run_header("bench.bench_layout", argv if argv is not None else sys.argv[1:], args.threads)
    lines = ["# The weights' layout: forward matmuls alone against whole products", "", header, "",
             f"{what}: the official chain composed for the float32 recurrence "
             f"(weights {' -> '.join(str(L.W.shape[1]) for L in links)} -> {links[-1].W.shape[0]}, "
             f"{sum(L.W.numel() for L in links) * 4 / 2**20:.0f} MiB in float32); milliseconds, best of "
             f"{repeats} alternating rounds; the copy a median. The decision: `transposes_pay` in this process "
             f"(whole products, the copy counted over `LAYOUT_PRODUCTS` products).", "",
             "| rows | forward, views | forward, copies | views / copies | product, views | product, copies | "
             "views / copies | copy | decision | to decide (ms) |", "|---|---|---|---|---|---|---|---|---|---|"]
    lines += [row(links, r, repeats) for r in rows]
    lines += ["", "A ratio views / copies above 1: the copies faster. The forward matmuls alone are what the decision "
              "timed before 2026-12-04; a product reads every weight twice (the forward pass on the copies, the "
              "pullback on the originals), so with the copies it reads from twice the memory."]
    return publish(args.out, lines)


if __name__ == "__main__":
    raise SystemExit(main())
