"""Curvature estimates against what a user would run instead, on the paper's tracker Hessian.

    python -m bench.bench_curvature [--quick] [--threads 1] [--rows 8 32] [--repeats 3]

The state: a SimSiam model (ResNet-18 backbone, the method's head and predictor) after one epoch on
digits. The Hessian is the one the paper's tracker measures (its official ``hessian_tracker.py``):
the SimSiam loss ``-1/2 [mean cos(p(h(z1)), stopgrad h(z2)) + mean cos(p(h(z2)), stopgrad h(z1))]``
differentiated twice in the first view's representations ``z1`` only (``rows`` images, ``N = rows x d``).

Contenders, timed side by side (interleaved rounds, medians), each with its error against the exact
spectrum (relative to ``max |lambda|``):

- paper (the anchor): the official procedure, re-implemented here from its description: float32, the
  loss's gradient graph built once (``create_graph``), 20 normalised power steps on ``H``, ``lambda_max`` as
  a Rayleigh quotient, 20 power steps on ``H - lambda_max I`` from a fresh random vector, ``lambda_min`` as
  the Rayleigh quotient of ``H`` at the result (42 products);
- exact blocks: the view-1 rows' per-sample blocks in one closed-form forward-mode sweep through head,
  predictor and cosine (``mini.loss_hessians.PredictorCosineCurvature``), float64, ``eigvalsh`` of each:
  the whole spectrum;
- Lanczos (project, float64 basis), on the closed-form product (one forward-mode pass and one pullback
  through the weights, ``PredictorCosineCurvature.hvp``) and on autograd's double-backward product through a
  graph built once (``scale.curvature.operators``, the matrix-free path): stopped by the residual test at 1e-10
  (the tracker's) and by the eigenvalue error bound at 1e-8 (``stop="eigenvalue"``); and with float32
  autograd products (tolerance 1e-6);
- eigsh: ``scipy.sparse.linalg.eigsh`` (ARPACK) on a ``LinearOperator`` wrapping the closed-form float64
  product, ``which="SA"`` and ``"LA"`` at tolerance 1e-10: the products each needs.

Writes ``bench/results/curvature.md`` and prints it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

from bench._util import interleaved_median, run_header, write_atomic

OUT = Path(__file__).resolve().parent / "results" / "curvature.md"


def digits_state(pairs: int, seed: int = 0):
    """A digits SimSiam model after one epoch, and its probe's ``z`` (2 * pairs rows, [view1; view2])."""
    from scale.curvature.tracking import HessianTracker
    from scale.engine.data import load_dataset
    from scale.engine.train import Hook, Trainer
    from scale.run import build_parser, resolve_config

    class Keep(Hook):
        def on_epoch_end(self, state):
            self.state = state

    args = build_parser().parse_args(["digits", "--method", "simsiam", "--head", "swish3", "--epochs", "1",
                                      "--seed", str(seed)])
    cfg = resolve_config(args, torch.device("cpu"))
    keep, tracker = Keep(), HessianTracker("epoch", probe_pairs=pairs, path="blocks")
    Trainer(cfg, load_dataset("digits"), torch.device("cpu"), hooks=[keep, tracker], log=None).fit()
    z, h = keep.state.embed(tracker.probe_x)
    model = keep.state.model
    return z.detach(), h.detach(), model.projector.eval(), model.predictor.eval()


def paper_power_iteration(f, z1: torch.Tensor, iters: int = 20, seed: int = 0) -> float:
    """The official tracker's procedure (float32), written from its description (module docstring)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.enable_grad():
        z = z1.detach().float().requires_grad_(True)
        (g,) = torch.autograd.grad(f(z), z, create_graph=True)

        def hv(v):
            return torch.autograd.grad(g, z, grad_outputs=v, retain_graph=True)[0]

        v = torch.randn(z.shape, generator=gen)
        v = v / (v.norm() + 1e-8)
        for _ in range(iters):
            w = hv(v)
            v = w / (w.norm() + 1e-8)
        lam_max = (v * hv(v)).sum()
        u = torch.randn(z.shape, generator=gen)
        u = u / (u.norm() + 1e-8)
        for _ in range(iters):
            w = hv(u) - lam_max * u
            u = w / (w.norm() + 1e-8)
        return float((u * hv(u)).sum())


def one_view_loss(head, pred, t2: torch.Tensor, dtype: torch.dtype):
    """``z1 -> -1/2 mean cos(p(h(z1)), t2)``: the part of the SimSiam loss that depends on ``z1``."""
    import copy

    from scale.engine import objectives as so

    head, pred = copy.deepcopy(head).to(dtype), copy.deepcopy(pred).to(dtype)
    T = so.normalize(t2.to(dtype))

    def f(z1: torch.Tensor) -> torch.Tensor:
        return -0.5 * (so.normalize(pred(head(z1))) * T).sum(dim=1).mean()

    return f


def compare(z, h, head, pred, rows: int, repeats: int) -> dict:
    from scipy.sparse.linalg import LinearOperator, eigsh

    from mini.loss_hessians import PredictorCosineCurvature
    from scale.curvature.blocks import mini_head_of
    from scale.curvature.lanczos import lanczos
    from scale.curvature.operators import EffectiveHessian, Operator

    m = z.shape[0] // 2
    z1, t2 = z[:rows].double(), h[m:m + rows].double()  # the first view's rows; the other view's targets
    n, d = z1.shape
    mh, mp = mini_head_of(head), mini_head_of(pred)

    def curvature() -> PredictorCosineCurvature:  # -1/2 mean_i cos(p(h(z1_i)), t2_i): coefficient -1/(2 rows)
        return PredictorCosineCurvature(mh, mp, z1, t2, -0.5 / rows)

    def closed_operator() -> Operator:  # built per run, as a user would at a new state
        c = curvature()
        return Operator("H (closed form)", n * d, torch.float64, z1.device,
                        lambda v: c.hvp(v.reshape(n, d)).reshape(-1),
                        lambda C: c.hvp(C.reshape(C.shape[0], n, d)).reshape(C.shape[0], -1))

    def exact():
        return torch.cat([torch.linalg.eigvalsh(M + G) for _, M, G in curvature().blocks()]).flatten()

    eig = exact()
    lam_min, scale = float(eig.min()), float(eig.abs().max())
    f32 = one_view_loss(head, pred, t2, torch.float32)
    f64 = one_view_loss(head, pred, t2, torch.float64)
    identity = lambda x: x  # noqa: E731  the operator's "head" is the identity: H is the Hessian of f in z1
    E64 = EffectiveHessian(z1, identity, f64)
    check = None
    if z1.numel() <= 2048:
        check = float(np.abs(np.linalg.eigvalsh(E64.H.dense().numpy()) - np.sort(eig.numpy())).max() / scale)
    v = torch.randn(n * d, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    product_agreement = float((closed_operator().matvec(v) - E64.H.matvec(v)).abs().max() / E64.H.matvec(v).abs().max())

    out = {"rows": rows, "d": d, "N": n * d, "lambda_min": lam_min, "scale": scale, "dense_check": check,
           "product_agreement": product_agreement}
    results: dict[str, float] = {}

    def run_lanczos(name, make_op, **kw):
        def go():
            r = lanczos(make_op(), max_iter=300, **kw)
            results[name], out[f"{name}_products"] = r.lambda_min, r.n_products
        return go

    def graph64():
        return EffectiveHessian(z1, identity, f64).H

    def graph32():
        return EffectiveHessian(z1.float(), identity, f32).H

    def paper():
        results["paper"] = paper_power_iteration(f32, z1)

    def arpack():
        count = [0]
        op = closed_operator()

        def mv(x):
            count[0] += 1
            return op.matvec(torch.from_numpy(np.ascontiguousarray(x).reshape(-1))).numpy()

        A = LinearOperator((op.N, op.N), matvec=mv, dtype=np.float64)
        lo = eigsh(A, k=1, which="SA", tol=1e-10, return_eigenvectors=False)[0]
        eigsh(A, k=1, which="LA", tol=1e-10, return_eigenvectors=False)
        results["eigsh"], out["eigsh_products"] = float(lo), count[0]

    def blocks():
        results["blocks"] = float(exact().min())

    contenders = {
        "paper": paper, "blocks": blocks,
        "closed_res": run_lanczos("closed_res", closed_operator, tol=1e-10),
        "closed_eig": run_lanczos("closed_eig", closed_operator, tol=1e-8, stop="eigenvalue"),
        "graph_res": run_lanczos("graph_res", graph64, tol=1e-10),
        "graph_eig": run_lanczos("graph_eig", graph64, tol=1e-8, stop="eigenvalue"),
        "graph32": run_lanczos("graph32", graph32, tol=1e-6),
        "eigsh": arpack,
    }
    times = interleaved_median(contenders, repeats)
    for name, t in times.items():
        out[f"{name}_s"] = t
        out[f"{name}_err"] = abs(results[name] - lam_min) / scale
    c64, g64, g32 = closed_operator(), graph64(), graph32()
    t_prod = interleaved_median({"closed": lambda: c64.matvec(v), "graph64": lambda: g64.matvec(v),
                                 "graph32": lambda: g32.matvec(v.float())}, max(20, 5 * repeats))
    out.update({f"product_{k}_s": t for k, t in t_prod.items()})
    return out


ROWS = [  # label, key, products key (None: no products)
    ("paper: float32 20-step shifted power iteration (anchor)", "paper", None),
    ("exact blocks, float64, closed form (whole spectrum)", "blocks", None),
    ("Lanczos, float64 closed-form products, residual tol 1e-10", "closed_res", "closed_res_products"),
    ("Lanczos, float64 closed-form products, eigenvalue bound 1e-8", "closed_eig", "closed_eig_products"),
    ("Lanczos, float64 autograd products, residual tol 1e-10", "graph_res", "graph_res_products"),
    ("Lanczos, float64 autograd products, eigenvalue bound 1e-8", "graph_eig", "graph_eig_products"),
    ("Lanczos, float32 autograd products + float64 basis, tol 1e-6", "graph32", "graph32_products"),
    ("scipy eigsh (ARPACK) SA + LA on the closed-form product, tol 1e-10", "eigsh", "eigsh_products"),
]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.bench_curvature", description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, nargs="+", default=[8, 32], help="view-1 rows of the Hessian")
    p.add_argument("--repeats", type=int, default=3, help="interleaved rounds (default: 3)")
    p.add_argument("--threads", type=int, default=1, help="torch threads, fixed (default: 1)")
    p.add_argument("--quick", action="store_true", help="8 rows, 1 round: checks that it runs")
    p.add_argument("--out", default=str(OUT))
    args = p.parse_args(argv)
    if args.quick:
        args.rows, args.repeats = [8], 1
    torch.set_num_threads(args.threads)
    z, h, head, pred = digits_state(max(args.rows))
    res = [compare(z, h, head, pred, r, args.repeats) for r in args.rows]
    lines = [
        "# Curvature estimates on the paper's tracker Hessian", "",
        run_header("bench.bench_curvature", argv if argv is not None else sys.argv[1:], args.threads), "",
        "State: digits SimSiam (swish3 head, its predictor) after one epoch; the Hessian of the SimSiam loss in "
        "the first view's representations z1 (the official tracker's). Anchor: the paper's estimator. Errors: "
        f"|lambda_min estimate - exact| / max|lambda|. Medians of {args.repeats} interleaved rounds.", "",
        "| rows | N | exact lambda_min | contender | seconds | vs paper's time | products | lambda_min error |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in res:
        for label, key, prods in ROWS:
            p = 42 if key == "paper" else (r[prods] if prods else "-")
            lines.append(f"| {r['rows']} | {r['N']} | {r['lambda_min']:.6g} | {label} | {r[key + '_s']:.3f} | "
                         f"{r[key + '_s'] / r['paper_s']:.2f}x | {p} | {r[key + '_err']:.1e} |")
    lines += ["", "Per product (median): " + "; ".join(
        f"{r['rows']} rows: closed form float64 {1e3 * r['product_closed_s']:.2f} ms, autograd float64 "
        f"{1e3 * r['product_graph64_s']:.2f} ms, autograd float32 {1e3 * r['product_graph32_s']:.2f} ms"
        for r in res) + ".",
        "Closed-form product against the autograd one (max relative difference): " + "; ".join(
        f"{r['rows']} rows: {r['product_agreement']:.1e}" for r in res) + ".",
        "Dense check of the exact spectrum (eigvalsh of the dense autograd H, small N only): " + "; ".join(
        f"{r['rows']} rows: " + ("-" if r["dense_check"] is None else f"{r['dense_check']:.1e}")
        for r in res) + ".", ""]
    text = "\n".join(lines)
    write_atomic(args.out, text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
