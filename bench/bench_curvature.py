"""Exact curvature against the paper's estimator, on the paper's tracker Hessian, at the paper's sizes.

    python -m bench.bench_curvature [--quick] [--threads 1] [--states ...] [--sweep-rows 8 32 64 128 256]
                                    [--rows 8 32 64] [--digits-rows 8 32] [--repeats 3] [--gaps]

The Hessian is the one the paper's tracker measures (its official ``hessian_tracker.py``): the SimSiam loss
``-1/2 [mean cos(p(h(z1)), stopgrad h(z2)) + mean cos(p(h(z2)), stopgrad h(z1))]`` differentiated twice in the
first view's representations ``z1`` only (``rows`` images, ``N = rows x d``); only the first term depends on
``z1`` (``bench._paper_tracker``).

**The sweep** (``bench._curvature_states``): the official network at several states of one SimSiam run on digits
(``bench._states``, cached between runs: init, and after epochs 1, 3 and 5, "mid-training"; ``crowded``, epoch 4,
the most crowded block ends found; ``epoch E`` for any E, training a run that long once), rows 8 to 256: the
paper's estimator, the tracker's exact ends and its whole record (both cold, as the tracker starts them), their
products, the spectral gaps that set them, and the peak resident memory. ``--gaps``:
the gaps alone, at every snapshot of the run (no timing: where the block ends crowd).

**Every contender** at one state (after one epoch) of two networks:

- official: the official tracker's network: ResNet-18 of width 64 (``d = 512``), projector ``Linear(512, 2048)
  -> SiLU -> Linear(2048, 2048)`` and predictor ``Linear(2048, 512) -> SiLU -> Linear(512, 2048)``, no bias, no
  BatchNorm (``ProjectionHead(..., use_bn=False)`` there; ``swish2``, ``--no-head-bn --no-head-bias`` here);
- digits: the project's digits SimSiam (width-16 ResNet-18, ``d = 128``, swish3 head 256/256/128, predictor 64).

Contenders, timed side by side (interleaved rounds, medians, each building what it needs at the state, as a
user would), each with its errors against the exact spectrum (relative to ``max |lambda|``):

- paper (the anchor): the official procedure, re-expressed here from its code: float32, the loss's gradient
  graph built once (``create_graph``), 20 normalised power steps on ``H``, ``lambda_max`` as a Rayleigh quotient,
  20 power steps on ``H - lambda_max I`` from a fresh random vector, ``lambda_min`` as the Rayleigh quotient of
  ``H`` at the result (42 products; cosine by ``F.cosine_similarity`` as there);
- exact blocks: the rows' per-sample ``d x d`` blocks in one closed-form forward-mode sweep through head,
  predictor and cosine (``mini.loss_hessians.PredictorCosineCurvature``), float64 ``eigvalsh`` of each: the whole
  spectrum, and the dense float64 reference of every error here;
- Lanczos per block (``scale.curvature.blockwise.blockwise_lanczos``): one Lanczos per sample's block, all
  blocks advanced by each closed-form float64 product, stopped when every block's ends meet the residual
  bound 1e-8 of the scale (the estimate ``r^2 / gap``, the stop until 2026-12-06, is not a bound): ``lambda_min``
  and ``lambda_max``;
- the tracker's automatic path (``scale.curvature.tracking.measure(path="auto")``): whatever route it picks,
  with the whole record it writes (``lambda_min``, ``lambda_max``, ``|M|/|H|``, the negative count);
- Lanczos on the whole operator (float64 closed-form products), stopped by the residual test at 1e-10 (the
  previous fastest exact route; its eigenvalue stop at 1e-8, timed until 2026-12-06, was removed from
  ``scale.curvature.lanczos`` as unsound: rows of it in ``bench/results`` are history);
- digits only (cheap there): float32 autograd products, and ``scipy.sparse.linalg.eigsh`` (ARPACK, SA + LA at
  1e-10) on the closed-form product.

Dense checks: the closed-form product against autograd's double backward (a random direction), and the
exact block of the row holding ``lambda_min`` against ``torch.func.hessian`` of that row's loss (float64).

Writes ``bench/results/curvature.md`` and prints it.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from bench._paper_tracker import OneView, one_view_loss, paper_power_iteration
from bench._util import interleaved_median, out_help, result_path, run_header, write_atomic

OUT = Path(__file__).resolve().parent / "results" / "curvature.md"

BLOCK_BOUND = 1e-8  # the residual bound every exact Lanczos contender is asked for, relative to the scale


def compare(z, h, head, pred, rows: int, repeats: int, digits: bool) -> dict:
    from scipy.sparse.linalg import LinearOperator, eigsh

    from mini.loss_hessians import PredictorCosineCurvature
    from scale.curvature.blockwise import blockwise_lanczos
    from scale.curvature.closed_form import blockwise_ends, mini_head_of
    from scale.curvature.lanczos import lanczos
    from scale.curvature.operators import EffectiveHessian, Operator
    from scale.curvature.tracking import measure

    m = z.shape[0] // 2
    z1, t2 = z[:rows].double(), h[m:m + rows].double()  # the first view's rows; the other view's targets
    n, d = z1.shape

    def curvature() -> PredictorCosineCurvature:  # -1/2 mean_i cos(p(h(z1_i)), t2_i): coefficient -1/(2 rows)
        return PredictorCosineCurvature(mini_head_of(head), mini_head_of(pred), z1, t2, -0.5 / rows)

    def closed_operator() -> Operator:  # built per run, as a user would at a new state
        c = curvature()
        return Operator("H (closed form)", n * d, torch.float64, z1.device,
                        lambda v: c.hvp(v.reshape(n, d)).reshape(-1),
                        lambda C: c.hvp(C.reshape(C.shape[0], n, d)).reshape(C.shape[0], -1))

    def exact() -> torch.Tensor:  # (n, d): every block's spectrum, ascending
        return torch.cat([torch.linalg.eigvalsh(M + G) for _, M, G in curvature().blocks()])

    eig = exact()
    lam_min, lam_max, scale = float(eig.min()), float(eig.max()), float(eig.abs().max())
    f32 = one_view_loss(head, pred, t2, torch.float32)
    f64 = one_view_loss(head, pred, t2, torch.float64)
    identity = lambda x: x  # noqa: E731  the operator's "head" is the identity: H is the Hessian of f in z1
    v = torch.randn(n * d, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    E64 = EffectiveHessian(z1, identity, f64)
    ref = E64.H.matvec(v)
    out = {"rows": rows, "d": d, "N": n * d, "lambda_min": lam_min, "lambda_max": lam_max, "scale": scale,
           "product_agreement": float((closed_operator().matvec(v) - ref).abs().max() / ref.abs().max()),
           "dense_block_check": _dense_block_check(head, pred, z1, t2, eig, scale)}
    results: dict[str, tuple[float, float | None]] = {}  # contender -> (lambda_min, lambda_max or None)

    def run_lanczos(name, make_op, **kw):
        def go():
            r = lanczos(make_op(), max_iter=400, **kw)
            results[name], out[f"{name}_products"] = (r.lambda_min, r.lambda_max), r.n_products
        return go

    def blockwise():  # the tracker's route to the ends (scale.curvature.closed_form.blockwise_ends), without |M|
        r, _, info = blockwise_ends(z1, head, OneView(pred, t2), tol=BLOCK_BOUND, interaction=False)
        results["blockwise"], out["blockwise_products"] = (r.lambda_min, r.lambda_max), r.n_products
        out["blockwise_steps"] = f"{int(r.block_steps.min())}-{int(r.block_steps.max())}"
        out["blockwise_recurrence"] = info["recurrence"]

    def blockwise64():
        r = blockwise_lanczos(closed_operator(), n, tol=BLOCK_BOUND)
        results["blockwise64"], out["blockwise64_products"] = (r.lambda_min, r.lambda_max), r.n_products

    def tracker_auto():
        rec, _ = measure(z1, head, OneView(pred, t2), block_diagonal=True, path="auto")
        results["auto"] = (rec["lambda_min"], rec["lambda_max"])
        out["auto_path"], out["auto_products"] = rec["path"], rec["n_products"] + rec.get("n_products_M", 0)

    def paper():
        results["paper"] = (paper_power_iteration(f32, z1), None)

    def blocks():
        e = exact()
        results["blocks"] = (float(e.min()), float(e.max()))

    def graph32():
        return EffectiveHessian(z1.float(), identity, f32).H

    def arpack():
        count = [0]
        op = closed_operator()

        def mv(x):
            count[0] += 1
            return op.matvec(torch.from_numpy(np.ascontiguousarray(x).reshape(-1))).numpy()

        A = LinearOperator((op.N, op.N), matvec=mv, dtype=np.float64)
        lo = eigsh(A, k=1, which="SA", tol=1e-10, return_eigenvectors=False)[0]
        hi = eigsh(A, k=1, which="LA", tol=1e-10, return_eigenvectors=False)[0]
        results["eigsh"], out["eigsh_products"] = (float(lo), float(hi)), count[0]

    contenders = {
        "paper": paper, "blocks": blocks, "blockwise": blockwise, "blockwise64": blockwise64, "auto": tracker_auto,
        "closed_res": run_lanczos("closed_res", closed_operator, tol=1e-10),
    }
    if digits:
        contenders |= {"graph32": run_lanczos("graph32", graph32, tol=1e-6), "eigsh": arpack}
    times = interleaved_median(contenders, repeats)
    for name, t in times.items():
        lo, hi = results[name]
        out[f"{name}_s"] = t
        out[f"{name}_err"] = abs(lo - lam_min) / scale
        out[f"{name}_err_max"] = None if hi is None else abs(hi - lam_max) / scale
    c64, g32 = closed_operator(), graph32()
    t_prod = interleaved_median({"closed": lambda: c64.matvec(v), "graph32": lambda: g32.matvec(v.float())},
                                max(10, 5 * repeats))
    out.update({f"product_{k}_s": t for k, t in t_prod.items()})
    return out


def _dense_block_check(head, pred, z1: torch.Tensor, t2: torch.Tensor, eig: torch.Tensor, scale: float) -> float:
    """The block of the row holding ``lambda_min``, from ``torch.func.hessian`` of that row's own term of the loss
    (``1/rows`` times its one-row loss: the loss is a mean over rows), against the closed-form block's spectrum;
    relative to scale. One row only: ``hessian`` of the whole batch's loss carried every row through its d
    forward tangents (about 215 MB a row at d = 512, k = 2048: the 13.4 GiB peak of a 64-row run)."""
    from torch.func import hessian

    i = int(eig.min(dim=1).values.argmin())
    term = one_view_loss(head, pred, t2[i:i + 1], torch.float64)
    Hi = hessian(lambda x: term(x[None]) / z1.shape[0])(z1[i].clone()).detach()
    return float((torch.linalg.eigvalsh(0.5 * (Hi + Hi.T)) - eig[i]).abs().max() / scale)


ROWS = [  # label, key, products key (None: no products)
    ("paper: float32 20-step shifted power iteration (anchor)", "paper", None),
    ("exact blocks, float64 eigvalsh of every block (whole spectrum; the reference)", "blocks", None),
    ("**Lanczos per block, float32 closed-form products, ends refined and bounded in float64 (1e-8)**",
     "blockwise", "blockwise_products"),
    ("Lanczos per block, float64 closed-form products, residual bound 1e-8", "blockwise64",
     "blockwise64_products"),
    ("the tracker's automatic path (whole record: also abs(M)/abs(H), negative count)", "auto", "auto_products"),
    ("Lanczos on the whole operator, float64 closed-form products, residual tol 1e-10", "closed_res",
     "closed_res_products"),
    ("Lanczos on the whole operator, float32 autograd products + float64 basis, tol 1e-6", "graph32",
     "graph32_products"),
    ("scipy eigsh (ARPACK) SA + LA on the closed-form product, tol 1e-10", "eigsh", "eigsh_products"),
]


def table(state: str, res: list[dict]) -> list[str]:
    lines = ["| rows | N | contender | seconds | vs paper's time | products | lambda_min error | "
             "lambda_max error |", "|---|---|---|---|---|---|---|---|"]
    for r in res:
        for label, key, prods in ROWS:
            if f"{key}_s" not in r:
                continue
            p = 42 if key == "paper" else (r[prods] if prods else "-")
            if key == "auto":
                label = f"{label}: `{r['auto_path']}`"
            if key == "blockwise":
                p = f"{p} (blocks done at steps {r['blockwise_steps']}; kept: {r['blockwise_recurrence']})"
            err_max = "-" if r[f"{key}_err_max"] is None else f"{r[f'{key}_err_max']:.1e}"
            lines.append(f"| {r['rows']} | {r['N']} | {label} | {r[key + '_s']:.3f} | "
                         f"{r[key + '_s'] / r['paper_s']:.2f}x | {p} | {r[key + '_err']:.1e} | {err_max} |")
    lines += ["", f"Exact values ({state}): " + "; ".join(
        f"{r['rows']} rows: lambda_min {r['lambda_min']:.6g}, lambda_max {r['lambda_max']:.6g}" for r in res) + ".",
        "Per product (median): " + "; ".join(
        f"{r['rows']} rows: closed form float64 {1e3 * r['product_closed_s']:.2f} ms, autograd float32 (the "
        f"paper's) {1e3 * r['product_graph32_s']:.2f} ms" for r in res) + ".",
        "Closed-form product against autograd's double backward (max relative difference): " + "; ".join(
        f"{r['rows']} rows: {r['product_agreement']:.1e}" for r in res) + ".",
        "Dense check: the exact block of the row holding lambda_min against torch.func.hessian of that row's loss "
        "(float64; max eigenvalue difference / scale): " + "; ".join(
        f"{r['rows']} rows: {r['dense_block_check']:.1e}" for r in res) + ".", ""]
    return lines


SWEEP_STATES = ["init", "epoch 1", "epoch 3", "epoch 5"]  # the states the sweep reports (EPOCHS of training)
EPOCHS = 5  # "mid-training": a few epochs of SimSiam on digits (the paper trains for hundreds)
CROWDED = "epoch 4"  # "crowded": the most crowded block ends found (gap at lambda_min's block 4.2e-4 of the scale at
# n = 8; epochs 1-15 of a 15-epoch run reached 1.6e-3 at the least; BENCHMARKS.md)


def resolve_states(names: list[str]) -> tuple[int, list[str]]:
    """The length of the run to train and the snapshots asked, from ``--states`` names: ``init``, ``epoch E``
    (1 <= E), ``crowded`` (``CROWDED`` of the ``EPOCHS``-epoch run). One run serves every name: the longest asked, at
    least ``EPOCHS`` (the schedule is cosine over the whole run, so ``epoch 5`` of a longer run is another state than
    that of a 5-epoch run). Raises ``ValueError`` naming the valid forms, or when ``crowded`` is asked with a longer
    run."""
    epochs, out = EPOCHS, []
    for name in names:
        e = _epoch_of(CROWDED) if name == "crowded" else 0 if name == "init" else _epoch_of(name)
        if e is None:
            raise ValueError(f"unknown state {name!r}; valid: 'init', 'epoch E' (E >= 1), 'crowded'")
        epochs = max(epochs, e)
        out.append(name)
    if "crowded" in out and epochs > EPOCHS:
        raise ValueError(f"'crowded' is {CROWDED} of the {EPOCHS}-epoch run; ask states of a {epochs}-epoch run apart")
    return epochs, out


def _epoch_of(name: str) -> int | None:
    head, _, num = name.partition(" ")
    return int(num) if head == "epoch" and num.isdigit() and int(num) >= 1 else None


CROWDED_LABEL = f"crowded ({CROWDED})"


def main(argv: list[str] | None = None) -> int:
    from bench._curvature_states import sweep, sweep_table
    from bench._states import DIGITS, OFFICIAL, training_states

    p = argparse.ArgumentParser(prog="python -m bench.bench_curvature", description=__doc__.splitlines()[0])
    p.add_argument("--states", nargs="+", default=SWEEP_STATES, help=f"the sweep's states (default: {SWEEP_STATES})")
    p.add_argument("--sweep-rows", type=int, nargs="*", default=[8, 32, 64, 128, 256],
                   help="view-1 rows of the sweep (none: no sweep)")
    p.add_argument("--rows", type=int, nargs="*", default=[8, 32, 64],
                   help="view-1 rows of the contender detail, official network after one epoch (none: no detail)")
    p.add_argument("--digits-rows", type=int, nargs="*", default=[8, 32], help="the same on the digits network")
    p.add_argument("--repeats", type=int, default=3, help="interleaved rounds (default: 3)")
    p.add_argument("--threads", type=int, default=1, help="torch threads, fixed (default: 1)")
    p.add_argument("--quick", action="store_true", help="8 rows, 1 round, the state at init, no contender detail: "
                   "checks that it runs")
    p.add_argument("--gaps", action="store_true",
                   help="only the spectral gaps of every snapshot of the run (no timing) at --sweep-rows")
    p.add_argument("--out", help=out_help(OUT))
    args = p.parse_args(argv)
    args.out = str(result_path(args.out, OUT, args.quick))
    if args.quick:
        args.rows, args.digits_rows, args.sweep_rows, args.repeats = [], [], [8], 1
        args.states = ["init"]  # a trained state needs an epoch of training first: 2 min of the check's 3
    torch.set_num_threads(args.threads)

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    header = run_header("bench.bench_curvature", argv if argv is not None else sys.argv[1:], args.threads)
    lines = ["# Exact curvature against the paper's estimator, on the paper's tracker Hessian", "", header, "",
             "The Hessian of the SimSiam loss in the first view's representations z1 (the official tracker's). "
             "Anchor: the paper's estimator. Errors: |estimate - exact| / max|lambda| (exact: float64 eigvalsh of "
             "every block). "
             f"Medians of {args.repeats} interleaved rounds; the machine may be shared: absolute times are noisy, the "
             "ratios (interleaved) and the product counts are what to read.", ""]
    try:
        epochs, names = resolve_states(args.states)
    except ValueError as e:
        log(f"bench_curvature: {e}")
        return 2
    official = training_states(OFFICIAL, epochs, max([*args.sweep_rows, *args.rows]), threads=args.threads,
                               log=log) if (args.sweep_rows or args.rows) else None
    if official and "crowded" in names:  # CROWDED, named for what it is here
        official = [replace(s, name=CROWDED_LABEL) if s.name == CROWDED else s for s in official]
        names = [CROWDED_LABEL if x in ("crowded", CROWDED) else x for x in names]
    if args.gaps:
        from bench._curvature_states import gaps_table

        lines += [f"## Spectral gaps along the run: every snapshot of the {epochs}-epoch run", "",
                  *gaps_table(official, args.sweep_rows, log), ""]
        write_atomic(args.out, "\n".join(lines))
        print("\n".join(lines))
        return 0
    if args.sweep_rows:
        title = [f"## States of training: the official tracker's network, SimSiam on digits ({epochs} epochs)", ""]

        def partial(res: list[dict]) -> None:  # what is done so far, in the results file
            write_atomic(args.out, "\n".join([*lines, *title, *sweep_table(res), "", "(run in progress)"]))

        res = sweep(official, names, args.sweep_rows, args.repeats, log, partial)
        lines += [*title, *sweep_table(res), ""]
    for name, states, rows, digits in (("official", official, args.rows, False),
                                       ("digits", None, args.digits_rows, True)):
        if not rows:
            continue
        states = states or training_states(DIGITS, 1, max(rows), threads=args.threads, log=log)
        st = next(s for s in states if s.name == "epoch 1")
        res = [compare(st.z, st.h, st.projector, st.predictor, r, args.repeats, digits) for r in rows]
        title = ("The official tracker's network after one epoch: d = 512, projector 512-2048-2048 and predictor "
                 "2048-512-2048 (SiLU, no bias, no BatchNorm)" if name == "official" else
                 "The project's digits SimSiam after one epoch: d = 128, swish3 head 256/256/128, predictor 64")
        lines += [f"## Every contender: {title}", "", *table(name, res)]
    text = "\n".join(lines)
    write_atomic(args.out, text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
