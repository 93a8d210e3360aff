"""Curvature estimates against what a user would run instead, on the paper's tracker Hessian.

    python -m bench.bench_curvature [--quick] [--threads 1] [--rows 8 32] [--repeats 3]

The state: a SimSiam model (ResNet-18 backbone, the method's head and predictor) after one epoch on
digits. The Hessian is the one the paper's tracker measures (its official ``hessian_tracker.py``):
the SimSiam loss ``-1/2 [mean cos(p(h(z1)), stopgrad h(z2)) + mean cos(p(h(z2)), stopgrad h(z1))]``
differentiated twice in the first view's representations ``z1`` only (``rows`` images, ``N = rows x d``).

Contenders, timed side by side (interleaved rounds, medians), each with its error against the exact
spectrum (relative to ``max |lambda|``):

- paper: the official procedure, re-implemented here from its description: float32, the loss's gradient
  graph built once (``create_graph``), 20 normalised power steps on ``H``, ``lambda_max`` as a Rayleigh
  quotient, 20 power steps on ``H - lambda_max I`` from a fresh random vector, ``lambda_min`` as the
  Rayleigh quotient of ``H`` at the result (42 products);
- exact blocks: ``scale.blocks.effective_hessian_blocks`` with the closed-form SimSiam Gauss-Newton blocks,
  float64, the whole spectrum (``eigvalsh`` of per-sample blocks; computed on both views' rows, twice the
  rows the paper's Hessian needs, and the view-1 blocks read off);
- Lanczos (project): ``scale.lanczos.lanczos`` on the matrix-free ``H`` of ``scale.curvature`` (graphs built
  once) in float64 (tolerances 1e-10 and 1e-8) and with float32 products and the float64 basis (1e-6);
- eigsh: ``scipy.sparse.linalg.eigsh`` (ARPACK) on a ``LinearOperator`` wrapping the same float64 product,
  ``which="SA"`` and ``"LA"`` at tolerance 1e-10: the products each needs and the time per product.

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
    from scale.data import load_dataset
    from scale.run import build_parser, resolve_config
    from scale.tracking import HessianTracker
    from scale.train import Hook, Trainer

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

    from scale import objectives as so

    head, pred = copy.deepcopy(head).to(dtype), copy.deepcopy(pred).to(dtype)
    T = so.normalize(t2.to(dtype))

    def f(z1: torch.Tensor) -> torch.Tensor:
        return -0.5 * (so.normalize(pred(head(z1))) * T).sum(dim=1).mean()

    return f


def compare(z, h, head, pred, rows: int, repeats: int) -> dict:
    from scipy.sparse.linalg import LinearOperator, eigsh

    from scale.blocks import effective_hessian_blocks
    from scale.curvature import EffectiveHessian
    from scale.lanczos import lanczos
    from scale.loss_curvature import PredictorCosine

    m = z.shape[0] // 2
    z, h = z[np.r_[0:rows, m:m + rows]], h[np.r_[0:rows, m:m + rows]]  # rows pairs, [view1; view2]
    z1, t2 = z[:rows].double(), h[rows:].double()
    objective = PredictorCosine(h.double(), pred, "cosine")

    def exact():
        b = effective_hessian_blocks(z.double(), head, objective, spectra="H")
        return b.eig_H[:rows]  # view-1 blocks: the Hessian in z1

    eig = exact().flatten()
    lam_min, scale = float(eig.min()), float(eig.abs().max())
    f32 = one_view_loss(head, pred, t2, torch.float32)
    f64 = one_view_loss(head, pred, t2, torch.float64)
    identity = lambda x: x  # noqa: E731  the operator's "head" is the identity: H is the Hessian of f in z1
    E64 = EffectiveHessian(z1, identity, f64)
    E32 = EffectiveHessian(z1.float(), identity, f32)
    check = None
    if z1.numel() <= 2048:
        check = float(np.abs(np.linalg.eigvalsh(E64.H.dense().numpy()) - np.sort(eig.numpy())).max() / scale)

    out = {"rows": rows, "d": z.shape[1], "N": z1.numel(), "lambda_min": lam_min, "scale": scale,
           "dense_check": check}
    results: dict[str, float] = {}

    def paper():
        results["paper"] = paper_power_iteration(f32, z1)

    def lz64():
        r = lanczos(E64.H, tol=1e-10, max_iter=300)
        results["lanczos64"], out["lanczos64_products"] = r.lambda_min, r.n_products

    def lz64_8():
        r = lanczos(E64.H, tol=1e-8, max_iter=300)
        results["lanczos64_8"], out["lanczos64_8_products"] = r.lambda_min, r.n_products

    def lz32():
        r = lanczos(E32.H, tol=1e-6, max_iter=300)
        results["lanczos32"], out["lanczos32_products"] = r.lambda_min, r.n_products

    def arpack():
        count = [0]

        def mv(v):
            count[0] += 1
            return E64.H.matvec(torch.from_numpy(np.ascontiguousarray(v).reshape(-1))).numpy()

        A = LinearOperator((E64.H.N, E64.H.N), matvec=mv, dtype=np.float64)
        lo = eigsh(A, k=1, which="SA", tol=1e-10, return_eigenvectors=False)[0]
        eigsh(A, k=1, which="LA", tol=1e-10, return_eigenvectors=False)
        results["eigsh"], out["eigsh_products"] = float(lo), count[0]

    def blocks():
        results["blocks"] = float(exact().min())

    times = interleaved_median({"paper": paper, "blocks": blocks, "lanczos64": lz64, "lanczos64_8": lz64_8,
                                "lanczos32": lz32,
                                "eigsh": arpack}, repeats)
    for name, t in times.items():
        out[f"{name}_s"] = t
        out[f"{name}_err"] = abs(results[name] - lam_min) / scale
    v = torch.randn(E64.H.N, dtype=torch.float64)
    t_prod = interleaved_median({"p64": lambda: E64.H.matvec(v), "p32": lambda: E32.H.matvec(v.float())},
                                max(20, 5 * repeats))
    out["product64_s"], out["product32_s"] = t_prod["p64"], t_prod["p32"]
    return out


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
        "the first view's representations z1 (the official tracker's). Errors: |lambda_min estimate - exact| / "
        f"max|lambda|. Medians of {args.repeats} interleaved rounds.", "",
        "| rows | N | exact lambda_min | contender | seconds | vs paper's time | products | lambda_min error |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in res:
        rows = [("paper: float32 20-step shifted power iteration", "paper", 42),
                ("exact blocks, float64 (whole spectrum)", "blocks", 0),
                ("Lanczos, float64 products, tol 1e-10", "lanczos64", r["lanczos64_products"]),
                ("Lanczos, float64 products, tol 1e-8", "lanczos64_8", r["lanczos64_8_products"]),
                ("Lanczos, float32 products + float64 basis, tol 1e-6", "lanczos32", r["lanczos32_products"]),
                ("scipy eigsh (ARPACK) SA + LA, tol 1e-10", "eigsh", r["eigsh_products"])]
        for label, key, prods in rows:
            lines.append(f"| {r['rows']} | {r['N']} | {r['lambda_min']:.6g} | {label} | {r[key + '_s']:.3f} | "
                         f"{r[key + '_s'] / r['paper_s']:.2f}x | {prods or '-'} | {r[key + '_err']:.1e} |")
    lines += ["", "Per product (the matrix-free H, graphs built once): " + "; ".join(
        f"{r['rows']} rows: float64 {1e3 * r['product64_s']:.2f} ms, float32 {1e3 * r['product32_s']:.2f} ms"
        for r in res) + ".",
        "Dense check of the exact spectrum (eigvalsh of the dense matrix-free H, small N only): " + "; ".join(
        f"{r['rows']} rows: " + ("-" if r["dense_check"] is None else f"{r['dense_check']:.1e}")
        for r in res) + ".", ""]
    text = "\n".join(lines)
    write_atomic(args.out, text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
