r"""``python -m scale.crosscheck``: scale's numbers against mini's, on the same toy instances.

For every head in ``HEADS`` and objective in ``OBJECTIVES`` one toy instance (``n = 6`` rows as two
views of 3, ``d = 4``, ``k = 3``, hidden width 5, float64, a seed per instance) is built once in
``mini`` (NumPy + autograd) and copied into ``scale`` (torch: ``scale.engine.heads.head_from_mini``,
``scale.engine.objectives``, the same targets and predictor). Compared, as the maximum relative error
``max|scale - mini| / max|mini|`` over the instance:

    head output h(Z), loss L, gradient dL/dz          scale forward / torch.func.grad
    dense H_eff, G, M                                 scale.curvature.operators operators, dense()
    closed form on torch                              mini.hessian's array-API recursion on torch tensors
    closed form on CuPy                               the same on CuPy arrays (skipped without CuPy + GPU)
    lambda_min, lambda_max of H_eff                   mini eigvalsh against scale.curvature.lanczos, error / scale

``M`` of a linear or ReLU head is exactly zero in mini; its error is then taken relative to the
scale of ``H_eff``. The run fails (exit 1) when any error exceeds ``TOL`` (``TOL_EIG`` for the
eigenvalues); a skipped row says so and never counts as a pass.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from autograd import grad as ag_grad

from mini.heads import Head, init_head
from mini.hessian import assemble, decompose_autograd, head_derivatives, interaction_blocks
from mini.losses import Objective, make_objective
from scale.curvature.lanczos import lanczos
from scale.curvature.operators import EffectiveHessian
from scale.engine import objectives as O
from scale.engine.flags import OneLineParser
from scale.engine.heads import head_from_mini

HEADS: tuple[str, ...] = ("linear", "relu2", "gelu3", "swish3", "tanh2", "softplus2")
OBJECTIVES: tuple[str, ...] = ("mse", "simclr", "simsiam", "byol", "vicreg", "barlow")
TOL = 1e-9  # relative, float64 against float64
TOL_EIG = 1e-8  # eigenvalue error relative to the spectral scale
N_ROWS, D, K, WIDTH = 6, 4, 3, 5

QUANTITIES: tuple[str, ...] = (
    "head output h", "loss L", "gradient dL/dz", "H_eff (dense)", "G (dense)", "M (dense)",
    "closed form on torch", "closed form on CuPy", "lambda_min (Lanczos)", "lambda_max (Lanczos)",
)


@dataclass
class Instance:
    head_spec: str
    objective: str
    mini_head: object
    mini_obj: Objective
    torch_loss: Callable[[torch.Tensor], torch.Tensor]
    Z: np.ndarray
    scale_head: torch.nn.Module


def build_instance(head_spec: str, objective: str, seed: int, perturb: float = 0.0) -> Instance:
    """The toy instance in both libraries. ``perturb`` > 0 moves scale's first weight matrix by
    that relative amount (the negative control: the cross-check must then fail)."""
    rng = np.random.default_rng(seed)
    head = init_head(head_spec, D, K, WIDTH, rng)
    Z = rng.standard_normal((N_ROWS, D))
    Hb = head(Z)
    pred = init_head("gelu2", K, K, WIDTH, rng) if objective in ("simsiam", "byol") else None
    targets = None
    if objective == "mse":
        targets = Hb + 0.5 * rng.standard_normal(Hb.shape)  # nonzero residual, so M lives
    elif objective == "byol":
        targets = Hb + 0.3 * rng.standard_normal(Hb.shape)  # a target network's output
    elif objective == "simsiam":
        targets = Hb  # stop-gradient of the current embeddings
    mini_obj = make_objective(objective, Hb, predictor=pred, targets=targets)
    shead = head_from_mini(head)
    if perturb:
        with torch.no_grad():
            shead.layers[0].weight.mul_(1.0 + perturb)
    T = None if targets is None else torch.as_tensor(targets)
    spred = head_from_mini(pred) if pred is not None else None
    losses: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
        "mse": lambda H: O.mse_targets(H, T),
        "simclr": lambda H: O.nt_xent(H, 0.1),
        "simsiam": lambda H: O.simsiam(H, T, spred),
        "byol": lambda H: O.byol(H, T, spred),
        "vicreg": lambda H: O.vicreg(H),
        "barlow": lambda H: O.barlow(H),
    }
    return Instance(head_spec, objective, head, mini_obj, losses[objective], Z, shead)


def _rel(a, b, scale: float | None = None) -> float:
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    ref = float(np.abs(b).max()) if scale is None else scale
    diff = float(np.abs(a - b).max())
    if ref == 0.0:
        return 0.0 if diff == 0.0 else float("inf")
    return diff / ref


def _closed_form(inst: Instance, Z, loss_hessian, xp_asarray) -> np.ndarray:
    """mini's array-API closed form on another library's arrays; the result back as NumPy."""

    head = Head(inst.mini_head.spec, [{k: xp_asarray(v) for k, v in layer.items()} for layer in inst.mini_head.layers])
    der = head_derivatives(head, Z)
    rho = xp_asarray(np.asarray(ag_grad(inst.mini_obj.fn)(np.asarray(inst.mini_head(inst.Z)))))
    G, M = assemble(der.J, loss_hessian, interaction_blocks(der, rho))
    return G + M


def _cupy_available() -> str | None:
    """``None`` when CuPy and a GPU are usable, else the reason to skip."""
    try:
        import cupy
    except ImportError:
        return "CuPy not installed"
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return "no CUDA device"
    except Exception as err:  # a CuPy without a driver raises its own CUDARuntimeError
        return f"no CUDA device ({type(err).__name__})"
    return None


def check_instance(inst: Instance) -> dict[str, float | None]:
    """Relative errors of every quantity for one instance (``None``: skipped)."""
    Zt = torch.as_tensor(inst.Z)
    ref = decompose_autograd(inst.mini_head, inst.mini_obj, inst.Z)
    Hb_mini = inst.mini_head(inst.Z)
    n, d = inst.Z.shape
    g_mini = ag_grad(lambda z: inst.mini_obj(inst.mini_head(z.reshape(n, d))))(inst.Z.ravel())
    E = EffectiveHessian(Zt, inst.scale_head, inst.torch_loss, dtype=torch.float64)
    scale_H = float(np.abs(ref.H).max())
    m_scale = float(np.abs(ref.M).max()) or scale_H
    out: dict[str, float | None] = {
        "head output h": _rel(E.Hb.numpy(), Hb_mini),
        "loss L": _rel(E.value, float(inst.mini_obj(Hb_mini))),
        "gradient dL/dz": _rel(E.gradient().numpy(), g_mini),
        "H_eff (dense)": _rel(E.H.dense().numpy(), ref.H),
        "G (dense)": _rel(E.G.dense().numpy(), ref.G),
        "M (dense)": _rel(E.M.dense().numpy(), ref.M, m_scale),
    }
    with torch.no_grad():
        HL = torch.func.hessian(inst.torch_loss)(E.Hb).detach()  # (n, k, n, k), the loss Hessian in torch
    H_torch = _closed_form(inst, Zt, HL, lambda v: torch.as_tensor(np.asarray(v)))
    out["closed form on torch"] = _rel(H_torch.numpy(), ref.H)
    if _cupy_available() is None:
        import cupy

        H_cp = _closed_form(inst, cupy.asarray(inst.Z), cupy.asarray(HL.numpy()), cupy.asarray)
        out["closed form on CuPy"] = _rel(cupy.asnumpy(H_cp), ref.H)
    else:
        out["closed form on CuPy"] = None
    eig = np.linalg.eigvalsh(ref.H)
    scale = float(np.abs(eig).max())
    res = lanczos(E.H, k=1)
    out["lambda_min (Lanczos)"] = abs(res.lambda_min - eig[0]) / scale
    out["lambda_max (Lanczos)"] = abs(res.lambda_max - eig[-1]) / scale
    return out


def tolerance(quantity: str) -> float:
    return TOL_EIG if quantity.startswith("lambda") else TOL


def run(heads=HEADS, objectives=OBJECTIVES, perturb: float = 0.0, verbose: bool = False, stream=sys.stdout):
    """Run the grid; print the table; return ``(ok, rows)`` with ``rows[q] = (max error, worst, status)``."""
    errors: dict[str, list[tuple[float, str]]] = {q: [] for q in QUANTITIES}
    skipped = _cupy_available()
    for i, (h, o) in enumerate((h, o) for h in heads for o in objectives):
        result = check_instance(build_instance(h, o, seed=1000 + i, perturb=perturb))
        if verbose:
            print(f"{h:>10} x {o:<8} " + " ".join(f"{v:.1e}" if v is not None else "skip" for v in result.values()),
                  file=stream)
        for q, v in result.items():
            if v is not None:
                errors[q].append((v, f"{h} x {o}"))
    rows, ok = {}, True
    print(f"{'quantity':<24} {'max rel. error':>15} {'tolerance':>10}  {'worst instance':<22} status", file=stream)
    for q in QUANTITIES:
        if not errors[q]:
            rows[q] = (None, None, f"skipped ({skipped})")
            print(f"{q:<24} {'-':>15} {tolerance(q):>10.0e}  {'-':<22} SKIPPED: {skipped}", file=stream)
            continue
        worst, where = max(errors[q], key=lambda t: t[0])
        status = "ok" if worst <= tolerance(q) else "FAIL"
        ok &= status == "ok"
        rows[q] = (worst, where, status)
        print(f"{q:<24} {worst:>15.2e} {tolerance(q):>10.0e}  {where:<22} {status}", file=stream)
    return ok, rows


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="python -m scale.crosscheck", description=__doc__.splitlines()[0])
    parser.add_argument("--heads", nargs="+", default=list(HEADS), choices=HEADS, metavar="HEAD",
                        help=f"heads to check (default: all of {', '.join(HEADS)})")
    parser.add_argument("--objectives", nargs="+", default=list(OBJECTIVES), choices=OBJECTIVES, metavar="OBJ",
                        help=f"objectives to check (default: all of {', '.join(OBJECTIVES)})")
    parser.add_argument("--verbose", action="store_true", help="one line of errors per instance")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    print(f"scale vs mini, float64: {len(args.heads)} heads x {len(args.objectives)} objectives, "
          f"n={N_ROWS} d={D} k={K} width={WIDTH}; tolerance {TOL:g} (eigenvalues {TOL_EIG:g} of scale)")
    ok, _ = run(args.heads, args.objectives, verbose=args.verbose)
    print(f"{'PASS' if ok else 'FAIL'} in {time.perf_counter() - t0:.1f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
