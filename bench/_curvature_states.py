"""``bench_curvature``'s sweep: the paper's estimator against the tracker's exact ends, at several states of training.

At each state (``bench._states``: init, after each epoch) and each row count ``n``, side by side in interleaved
rounds (medians), each contender building what it needs at the state, as a user would:

    paper         the paper's float32 shifted power iteration (``bench._paper_tracker``; the anchor)
    ends cold     the tracker's route to ``lambda_min`` and ``lambda_max`` (``blockwise_ends``, no ``|M|``), cold
    record cold   the tracker's whole record (``measure(path="auto")``: also ``|M|/|H|``, the negative count)

Both start cold, as the tracker does (a start steered by the previous epoch's Ritz vectors can fool the let-go at an
eigenvalue crossing: ``scale.curvature.blockwise.blockwise_lanczos``; until 2026-12-04 the sweep also timed such warm
starts). Beside each: the products (in full-product equivalents, a call on ``a`` of ``n`` rows counting ``a / n``: the
per-block Lanczos goes on with the rows of the blocks still waited for; and the calls), the errors against the
exact spectrum (float64 ``eigvalsh`` of every block), the spectral gaps ``(lambda_2 - lambda_1) / max|lambda|`` of
the block holding ``lambda_min`` and their median over blocks (what sets Lanczos' product count), and the process's
peak resident memory after the state.
"""

from __future__ import annotations

import resource

import torch

from bench._paper_tracker import OneView, one_view_loss, paper_power_iteration
from bench._util import interleaved_median

BLOCK_BOUND = 1e-8  # the residual bound asked of the exact ends, relative to the scale


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KB on Linux


def probe_rows(state, rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``z1`` (rows, d): the first view's rows; ``t2`` (rows, k): the other view's embeddings, the targets."""
    m = state.z.shape[0] // 2
    return state.z[:rows].double(), state.h[m:m + rows].double()


def exact_blocks(state, rows: int):
    """Every block of ``H_eff`` at the probe's first ``rows`` rows, float64, in closed form, chunk by chunk (m, d, d)
    (``PredictorCosineCurvature.blocks``: never all at once; the solvers downstream read one triangle)."""
    from mini.loss_hessians import PredictorCosineCurvature
    from scale.engine.heads import mini_head_of

    z1, t2 = probe_rows(state, rows)
    c = PredictorCosineCurvature(mini_head_of(state.projector), mini_head_of(state.predictor), z1, t2, -0.5 / rows)
    return (M + G for _, M, G in c.blocks())


def exact_spectrum(state, rows: int) -> torch.Tensor:
    """(rows, d): every block's eigenvalues, ascending (float64 ``eigvalsh`` of ``exact_blocks``)."""
    return torch.cat([torch.linalg.eigvalsh(B) for B in exact_blocks(state, rows)])


def gaps(state, rows: int) -> dict:
    """The spectral gaps ``(lambda_2 - lambda_1) / max|lambda|`` at ``state`` on ``rows`` probe rows: of the block
    holding ``lambda_min``, their median and their least over the blocks (what sets the per-block Lanczos' steps)."""
    eig = exact_spectrum(state, rows)
    scale = float(eig.abs().max())
    g = (eig[:, 1] - eig[:, 0]) / scale
    return {"state": state.name, "rows": rows, "gap_at_min": float(g[int(eig[:, 0].argmin())]),
            "gap_median": float(g.median()), "gap_least": float(g.min())}


def gaps_table(states: list, rows: list[int], log) -> list[str]:
    """``gaps`` of every snapshot at every row count: where the block ends crowd along the run."""
    lines = ["| state | n | gap at lambda_min's block | median gap | least gap |", "|---|---|---|---|---|"]
    for state in states:
        for n in rows:
            r = gaps(state, n)
            log(f"bench_curvature: gaps at {state.name}, n = {n}: {r['gap_at_min']:.1e} / {r['gap_median']:.1e}")
            lines.append(f"| {r['state']} | {n} | {r['gap_at_min']:.1e} | {r['gap_median']:.1e} | "
                         f"{r['gap_least']:.1e} |")
    return lines


def compare_state(state, rows: int, repeats: int) -> dict:
    from scale.curvature.closed_form import blockwise_ends
    from scale.curvature.tracking import measure

    z1, t2 = probe_rows(state, rows)
    eig = exact_spectrum(state, rows)
    scale = float(eig.abs().max())
    i = int(eig[:, 0].argmin())
    gaps = (eig[:, 1] - eig[:, 0]) / scale
    out = {"state": state.name, "rows": rows, "N": z1.numel(), "scale": scale, "lambda_min": float(eig.min()),
           "lambda_max": float(eig.max()), "gap_at_min": float(gaps[i]), "gap_median": float(gaps.median())}
    f32 = one_view_loss(state.projector, state.predictor, t2, torch.float32)
    loss = OneView(state.predictor, t2)
    got: dict[str, tuple] = {}

    def ends(name):
        def go():
            r = blockwise_ends(z1, state.projector, loss, tol=BLOCK_BOUND, interaction=False)[0]
            got[name] = (r.lambda_min, r.lambda_max, (r.product_cost, r.n_products), r.ends_converged)
        return go

    def record(name):
        def go():
            rec, _ = measure(z1, state.projector, loss, block_diagonal=True, path="auto")
            calls = rec["n_products"] + rec.get("n_products_M", 0)
            cost = rec.get("product_cost", rec["n_products"]) + rec.get("product_cost_M", rec.get("n_products_M", 0))
            ok = rec["converged_min"] and rec["converged_max"]
            got[name] = (rec["lambda_min"], rec["lambda_max"], (cost, calls), ok)
        return go

    def paper():
        got["paper"] = (paper_power_iteration(f32, z1), None, (42, 42), None)

    fns = {"paper": paper, "ends cold": ends("ends cold"), "record cold": record("record cold")}
    times = interleaved_median(fns, repeats)
    for name, t in times.items():
        lo, hi, products, converged = got[name]
        out[name] = {"s": t, "ratio": t / times["paper"], "products": products[0], "calls": products[1],
                     "converged": converged,
                     "err_min": abs(lo - out["lambda_min"]) / scale,
                     "err_max": None if hi is None else abs(hi - out["lambda_max"]) / scale}
    out["peak_rss_mb"] = peak_rss_mb()
    return out


CONTENDERS = ("paper", "ends cold", "record cold")
LABELS = {"paper": "paper: float32 shifted power iteration (anchor)",
          "ends cold": "**tracker's exact ends, cold** (`blockwise_ends`)",
          "record cold": "tracker's whole record, cold (`measure`, also abs(M)/abs(H))"}


def sweep_table(results: list[dict]) -> list[str]:
    lines = ["| state | n (N) | gap at lambda_min's block / median | contender | seconds | vs paper | "
             "products: full-product equivalents (calls) | "
             "lambda_min error | lambda_max error | peak RSS after the state |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        for name in CONTENDERS:
            if name not in r:
                continue
            c = r[name]
            err_max = "-" if c["err_max"] is None else f"{c['err_max']:.1e}"
            conv = "" if c["converged"] in (None, True) else " (not converged)"
            lines.append(f"| {r['state']} | {r['rows']} ({r['N']}) | {r['gap_at_min']:.1e} / {r['gap_median']:.1e} | "
                         f"{LABELS[name]} | {c['s']:.3f} | {c['ratio']:.2f}x | "
                         f"{c['products']:.1f} ({c['calls']}){conv} | "
                         f"{c['err_min']:.1e} | {err_max} | {r['peak_rss_mb']:.0f} MB |")
    worst = {}
    for r in results:
        for name in CONTENDERS[1:]:
            if name in r:
                worst[name] = max(worst.get(name, (0.0, "")), (r[name]["ratio"], f"{r['state']}, n = {r['rows']}"))
    lines += ["", "Worst ratio to the paper's time over the states and rows: " + "; ".join(
        f"{name}: {v:.2f}x ({where})" for name, (v, where) in worst.items()) + "."]
    return lines


def sweep(states: list, names: list[str], rows: list[int], repeats: int, log, on_result=None) -> list[dict]:
    """Every named state at every row count. ``on_result(results)`` after each point (the caller writes what is done
    so far)."""
    results = []
    for state in states:
        if state.name not in names:
            continue
        for n in rows:
            results.append(compare_state(state, n, repeats))
            r = results[-1]
            log(f"bench_curvature: {state.name}, n = {n}: " + ", ".join(
                f"{c} {r[c]['ratio']:.2f}x ({r[c]['products']:.1f}, {r[c]['calls']} calls)" for c in CONTENDERS[1:]
                if c in r))
            if on_result is not None:
                on_result(results)
    return results

