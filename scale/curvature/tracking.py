r"""Curvature tracking during training: ``H_eff`` on a fixed probe batch, every N steps or per epoch.

At each measurement, on the same probe batch (the first training step's augmented views, the first
``probe_pairs`` pairs, fixed for the whole run and saved with the checkpoint):

    z, h = backbone(x), head(z)                eval mode, no gradient (BatchNorm: running statistics)
    L    = the method's loss of h, stop-gradient data bound at the probe (mini.losses semantics)

and then, by the cheapest exact path that applies (``measure``; the record's ``path`` says which):

    blocks       block-diagonal objective (simsiam, byol), row-wise head: the whole spectrum from the
                 per-sample d x d blocks (float64 eigvalsh): lambda_min, lambda_max, the negative count
                 and |M|/|H| (spectral norms) exact; no Lanczos at all
    factored     any objective, row-wise head (MLPHead, BatchNorm in eval mode): Lanczos on
                 blockdiag(M) + J^T (grad^2_H L) J with J and M exact and computed once, so a product
                 is a loss Hessian-vector product plus small batched matmuls (no pass through the
                 head); a cold (seeded) start at every measurement; |M| exact from the blocks, |H| from
                 the converged ends; negative count a lower bound
    closed-form  the same, when a product through the head's weights in closed form costs less than
                 forming J and reading it twice per product (wide heads: scale.curvature.closed_form.operator_route);
                 M's blocks are still formed, for |M| exact
    matrix-free  anything else (other heads, train-mode BatchNorm): Lanczos on scale.curvature.operators's H,
                 |M|_F / |H|_F by a Hutchinson estimate (``E|Av|^2 = |A|_F^2``, Rademacher v)

    condition = lambda_max / lambda_min        only when positive definite
    z_std                                      mean per-dimension std of the L2-normalised z
                                               (``mini.collapse_metrics``, E1's collapse statistic)

Records go to ``curvature.jsonl`` in the run directory, the last one of each epoch into the epoch's
metrics (``hess_*``), and at the end ``curvature.png`` (the paper's Figure 3 in our form: lambda_min,
lambda_max and the condition number against training time) and ``curvature_summary.json`` with the
Spearman correlation between representation spread (z_std; a rank statistic, so the same as with
the variance) and condition number over the measurements
where ``H_eff`` was positive definite (the condition number exists only there; the number of such
points is reported next to it).
"""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from mini.collapse_metrics import representation_std
from mini.hessian import NEG_FLOOR
from scale.curvature import layout
from scale.curvature.blocks import block_norm, effective_hessian_blocks, factored_operator
from scale.curvature.blockwise import BLOCKWISE_TOL
from scale.curvature.closed_form import (
    block_route,
    blockwise_ends,
    closed_form_operator,
    interaction_norm,
    operator_route,
)
from scale.curvature.lanczos import LanczosResult, lanczos
from scale.curvature.operators import EffectiveHessian
from scale.engine import methods
from scale.engine.checkpoint import atomic_write_bytes
from scale.engine.heads import MLPHead
from scale.engine.hooks import Hook
from scale.engine.modes import eval_mode
from scale.engine.plots import png, pyplot

BLOCK_MEMORY = 2**28  # bytes of kept float64 arrays (blocks, J) beyond which ``choose_path`` takes the next path


def probe_objective(method: str, model: nn.Module, h: Tensor, target_h: Tensor | None, temperature: float = 0.1,
                    *, config: Any = None):
    """The method's loss as a function of the probe's embeddings, computed locally (no all-gather:
    curvature products run on one process), stop-gradient data bound at the probe. The predictor
    is a copy in eval mode and in ``h``'s dtype (it is held fixed: part of the objective). ``config``
    (the run's ``TrainConfig``) gives the objective its settings; without it only ``temperature``.
    A method with a closed-form loss curvature (``Method.curvature``: NT-Xent's factored loss product,
    the Gauss-Newton blocks through the predictor and the cosine for SimSiam and BYOL) comes with it."""
    m = methods.get(method)
    pred = None
    if m.predictor and model.predictor is not None:
        pred = copy.deepcopy(model.predictor).to(h.dtype).eval()
    ctx = methods.ObjectiveContext(h, target_h, pred, config or SimpleNamespace(temperature=temperature),
                                   gather=False)
    return (m.curvature or m.objective)(ctx)


def hutchinson_ratio(num, den, N: int, probes: int, dtype, device, seed: int = 0) -> float:
    """``|num|_F / |den|_F`` from ``probes`` Rademacher vectors (the same ones for both)."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    V = (torch.randint(0, 2, (N, probes), generator=gen) * 2 - 1).to(dtype=dtype, device=device)
    a = float((num.matmat(V).double() ** 2).sum())
    b = float((den.matmat(V).double() ** 2).sum())
    return float(np.sqrt(a / b)) if b > 0 else float("nan")


def rowwise(head: nn.Module, bn_mode: str) -> bool:
    """The head acts row by row and its closed-form derivatives apply (``MLPHead``, BatchNorm in eval mode)."""
    has_bn = any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in head.modules())
    return isinstance(head, MLPHead) and (bn_mode == "eval" or not has_bn)


def _linear_widths(module: nn.Module | None) -> list[int]:
    return [] if module is None else [m.out_features for m in module.modules() if isinstance(m, nn.Linear)]


def choose_path(z: Tensor, head: nn.Module, *, block_diagonal: bool, bn_mode: str, k: int | None = None,
                closed_form: bool = False, predictor: nn.Module | None = None) -> str:
    """The cheapest exact way to measure ``H_eff`` here (see ``measure``), within ``BLOCK_MEMORY`` bytes of
    kept float64 arrays. ``closed_form``: the objective carries SimSiam/BYOL's closed form (its blocks are
    streamed in chunks of rows, only ``M``'s (n, d, d) kept for ``|M|``), through ``predictor`` if it has one;
    then ``scale.curvature.closed_form.block_route`` weighs the whole spectrum (``blocks``) against a Lanczos per block
    (``block-lanczos``), which needs no kept blocks at all."""
    if not rowwise(head, bn_mode):
        return "matrix-free"
    n, d = z.shape
    widths = _linear_widths(head)
    k = widths[-1] if k is None else k
    m_blocks = n * d * d * 8  # M's blocks, kept by every exact path for |M|
    if block_diagonal and closed_form:
        chain = widths[:-1] + (_linear_widths(predictor) or widths[-1:])  # head's last map composed with predictor's
        route = block_route(n, d, chain, len(widths) - 1)
        return "blocks" if route == "blocks" and m_blocks <= BLOCK_MEMORY else "block-lanczos"
    if block_diagonal:
        # autograd's blocks also keep J (n, k, d) and the loss blocks, or the loss Hessian along J's d columns
        kept = m_blocks if closed_form else m_blocks + n * k * (d + min(k, d)) * 8
        if kept <= BLOCK_MEMORY:
            return "blocks"
    if m_blocks > BLOCK_MEMORY:
        return "matrix-free"
    route = operator_route(n, d, widths[:-1], k)
    if route == "factored" and m_blocks + 2 * n * k * d * 8 > BLOCK_MEMORY:  # J and its transposed copy
        route = "closed-form"
    return route


PATHS = ("auto", "blocks", "block-lanczos", "factored", "closed-form", "matrix-free")


def measure(
    z: Tensor,
    head: nn.Module,
    loss,
    *,
    block_diagonal: bool,
    bn_mode: str = "eval",
    dtype: torch.dtype = torch.float64,
    warm: LanczosResult | None = None,
    max_iter: int = 120,
    tol: float | None = None,
    hutchinson_probes: int = 4,
    path: str = "auto",
    rel_floor: float = NEG_FLOOR,
) -> tuple[dict[str, Any], LanczosResult | None]:
    """One curvature measurement of ``H_eff`` at ``z`` (n, d); returns the record and the Lanczos result of the
    whole-operator paths (``warm`` itself on the ``blocks`` and ``block-lanczos`` paths).

    Every Lanczos starts cold (seeded), whatever ``warm`` holds: a start steered by the previous measurement's Ritz
    vectors can be fooled at an eigenvalue crossing. On the per-block path the let-go then drops the block holding
    ``lambda_min`` (``blockwise_lanczos``, ``warm``); on a whole operator the residual stop accepts the second
    eigenvalue as the lowest whenever ``tol`` is loose enough to be met before the lowest eigenvector shows. Started at
    the second eigenvector, ``tests/test_lanczos.py``'s crossing instance was fooled at float32's default ``tol``
    (1e-5) in 9 of 10 seeds, cold starts in none, and neither at float64's (1e-10). ``warm`` is accepted and unused,
    so a caller's previous result changes nothing.

    ``path`` (``"auto"`` picks the first that applies):

    - ``"blocks"``: block-diagonal objective (simsiam, byol) and a row-wise head: the whole spectrum
      from the per-sample ``d x d`` blocks (float64 ``eigvalsh``), so ``lambda_min``, ``lambda_max``,
      the negative count and ``|M|/|H|`` are exact and no Lanczos runs;
    - ``"block-lanczos"``: the same objectives and heads: a Lanczos per block on closed-form products
      (``scale.curvature.blockwise.blockwise_lanczos``, all blocks in each product), stopped when every block's
      ends are within ``tol`` (default ``BLOCKWISE_TOL``, 1e-8) of the scale by their measured residuals (float64
      products then: float32's cannot meet so small a ``tol``, ``blockwise_ends``); ``|M|`` from
      the same on ``M``'s blocks; the negative count a lower bound. ``auto`` takes it when
      ``scale.curvature.closed_form.block_route`` finds it cheaper than forming the blocks (wide heads); the stop waits
      for ``H``'s two ends and ``|M|`` only (``goal="ends"``/``"norm"``); every measurement starts cold (a start
      steered by the previous measurement's Ritz vectors can fool the let-go at an eigenvalue crossing:
      ``blockwise_lanczos``), so ``warm`` is passed through unused;
    - ``"factored"``: a row-wise head (``MLPHead``, BatchNorm in eval mode) and any objective: Lanczos
      on ``blockdiag(M) + J^T (grad^2_H L) J`` with ``J`` and ``M`` exact (``scale.curvature.blocks.factored_operator``,
      products without a pass through the head); ``|M|`` exact from the blocks, ``|H|`` from Lanczos;
    - ``"closed-form"``: the same with products through the head's weights in closed form
      (``scale.curvature.closed_form.closed_form_operator``; no ``J`` formed): ``auto`` takes it when
      ``scale.curvature.closed_form.operator_route`` finds it cheaper (wide heads);
    - ``"matrix-free"``: Lanczos on ``scale.curvature.operators``'s matrix-free ``H`` (any head, train-mode
      BatchNorm), ``|M|_F/|H|_F`` by a Hutchinson estimate.
    """
    if path not in PATHS:
        raise ValueError(f"path must be one of {PATHS}, got {path!r}")
    t0 = time.perf_counter()
    if path == "auto":
        path = choose_path(z, head, block_diagonal=block_diagonal, bn_mode=bn_mode,
                           closed_form=getattr(loss, "closed_form", False), predictor=getattr(loss, "predictor", None))
    elif path in ("blocks", "block-lanczos", "factored", "closed-form") and not rowwise(head, bn_mode):
        raise ValueError(f"path {path!r} needs a row-wise MLPHead (BatchNorm in eval mode); use 'matrix-free'")
    if path in ("blocks", "block-lanczos") and not block_diagonal:
        raise ValueError(f"path {path!r} needs a block-diagonal (per-sample) objective; use 'closed-form'")
    n, d = z.shape
    rec: dict[str, Any] = {"path": path, "z_std": representation_std(z.double()), "N": n * d}
    res = warm
    if path == "blocks":
        blocks = effective_hessian_blocks(z, head, loss, dtype=torch.float64, spectra="H", keep_blocks=False)
        audit = blocks.audit(rel_floor)
        value = blocks.info["loss"]  # L at the probe, from the Gauss-Newton route's own forward pass
        rec.update(lambda_min=audit["lambda_min"], lambda_max=audit["lambda_max"], scale=audit["scale"],
                   lambda_is="exact (per-sample blocks, float64 eigvalsh)", residual_min=None, residual_max=None,
                   converged_min=True, converged_max=True, condition=audit["condition"], n_products=0, n_iter=0,
                   n_negative=audit["n_negative_H"], n_negative_is="exact (blocks)", M_over_H=audit["M_over_H"],
                   M_over_H_is=audit["M_over_H_is"], bn_mode=audit["bn_mode"], hvp_mode="none (blocks)",
                   dtype="float64", loss=value, rel_floor=rel_floor)
    elif path == "block-lanczos":
        resH, resM, info = blockwise_ends(z, head, loss, dtype=dtype, tol=BLOCKWISE_TOL if tol is None else tol,
                                          max_iter=max_iter, rel_floor=rel_floor)
        rec.update({k: v for k, v in resH.summary().items() if k not in ("n_negative", "n_negative_is")})
        norm_M = float(np.abs(resM.values).max())
        rec.update(lambda_is=f"Lanczos per block ({n} blocks, closed-form products in {info['recurrence']}, "
                   f"float64 basis; ends refined and bounded in {info['dtype']})",
                   bn_mode=info["bn_mode"], hvp_mode=info["hvp_mode"], dtype=info["dtype"], loss=info["loss"],
                   n_negative=resH.n_negative, n_negative_is="lower bound (Ritz intervals below the floor, per block)",
                   n_products_M=resM.n_products, product_cost=resH.product_cost, product_cost_M=resM.product_cost,
                   converged_M=resM.answered,  # |M|'s end certified by its measured residual (else reported so)
                   M_over_H=norm_M / resH.scale if resH.scale else float("nan"),
                   M_over_H_is="spectral norms: |M| and |H| from per-block Lanczos ends (residual bound)")
    else:
        if path == "factored":
            op, M, info = factored_operator(z, head, loss, dtype=dtype)
            value = info["loss"]
        elif path == "closed-form":
            op, M, info = closed_form_operator(z, head, loss, dtype=dtype)
            value = info["loss"]
        else:
            E = EffectiveHessian(z, head, loss, bn_mode=bn_mode, dtype=dtype)
            op, info, value = E.H, E.info, E.value
        res = lanczos(op, k=1, max_iter=max_iter, tol=tol, rel_floor=rel_floor)  # cold: see the docstring
        rec.update({k: v for k, v in res.summary().items() if k not in ("n_negative", "n_negative_is")})
        rec.update(lambda_is=f"Lanczos ({path} operator, float64 basis)", bn_mode=info["bn_mode"],
                   hvp_mode=info["hvp_mode"], dtype=info["dtype"], loss=value, n_negative=res.n_negative,
                   n_negative_is="exact (Krylov exhausted)" if res.exhausted else "lower bound (converged Ritz values)")
        if path in ("factored", "closed-form"):
            norm_M = block_norm(M) if path == "factored" else interaction_norm(M)
            rec.update(M_over_H=norm_M / res.scale if res.scale else float("nan"),
                       M_over_H_is="spectral norms: |M| exact (blocks), |H| = max(|lambda_min|, |lambda_max|) Lanczos")
        else:
            rec.update(M_over_H=hutchinson_ratio(E.M, E.H, op.N, hutchinson_probes, E.z.dtype, E.z.device),
                       M_over_H_is=f"frobenius, Hutchinson estimate ({hutchinson_probes} probes)")
    rec["seconds"] = time.perf_counter() - t0
    return rec, res


def spearman(x: list[float], y: list[float]) -> float | None:
    """Spearman's rank correlation (``None`` with fewer than 3 points or a constant series)."""
    if len(x) < 3 or len(set(x)) < 2 or len(set(y)) < 2:
        return None
    from scipy.stats import spearmanr

    return float(spearmanr(x, y).statistic)


class HessianTracker(Hook):
    """A trainer hook: curvature of ``H_eff`` every ``every`` steps
    (an int) or once per epoch (``every="epoch"``), on a fixed probe of ``probe_pairs`` view pairs."""

    def __init__(self, every: int | str = "epoch", *, probe_pairs: int = 16, run_dir: str | Path | None = None,
                 dtype: torch.dtype = torch.float64, max_iter: int = 120, tol: float | None = None,
                 hutchinson_probes: int = 4, bn_mode: str = "eval", path: str = "auto", log=None):
        if every != "epoch" and not (isinstance(every, int) and every >= 1):
            raise ValueError(f"--track-hessian-every takes a positive number of steps or 'epoch', got {every!r}")
        if probe_pairs < 2:
            raise ValueError(f"probe_pairs must be >= 2 (batch statistics need two rows per view), got {probe_pairs}")
        self.every, self.probe_pairs, self.dtype = every, probe_pairs, dtype
        if path not in PATHS:
            raise ValueError(f"path must be one of {PATHS}, got {path!r}")
        self.max_iter, self.tol, self.hutchinson_probes, self.bn_mode = max_iter, tol, hutchinson_probes, bn_mode
        self.path = path
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self.log = log
        self.records: list[dict[str, Any]] = []
        self.probe_x: Tensor | None = None
        self.seconds = 0.0

    # ---- the hook protocol
    def on_fit_start(self, state) -> None: ...

    def on_step_end(self, state) -> None:
        if self.probe_x is None:  # the first step's views: rows [view1; view2] of the first probe_pairs pairs
            b = state.x.shape[0] // 2
            m = min(self.probe_pairs, b)
            self.probe_x = torch.cat([state.x[:m], state.x[b:b + m]]).detach().clone()
        if self.every != "epoch" and state.global_step % self.every == 0:
            self.track(state)

    def on_epoch_end(self, state) -> None:
        if self.every == "epoch" and self.probe_x is not None:
            self.track(state)
        last = [r for r in self.records if r["epoch"] == state.epoch + 1]
        if last:
            r = last[-1]
            for key in ("lambda_min", "lambda_max", "n_negative", "M_over_H", "condition", "seconds"):
                if r.get(key) is not None:
                    state.metrics[f"hess_{key}"] = float(r[key])

    def on_fit_end(self, state) -> None:
        summary = self.summary()
        if self.run_dir is not None and self.records:
            atomic_write_bytes(self.run_dir / "curvature_summary.json", json.dumps(summary, indent=2).encode())
            atomic_write_bytes(self.run_dir / "curvature.png", plot_curvature(self.records))

    def state_dict(self) -> dict[str, Any]:
        return {"records": self.records, "probe_x": self.probe_x, "seconds": self.seconds,
                "layouts": layout.answers()}  # the weights' layouts the products ran in (a resume keeps them)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.records = list(state.get("records", []))
        self.probe_x = state.get("probe_x")
        self.seconds = float(state.get("seconds", 0.0))
        # an earlier version's "warm" and "warm_blocks" (Ritz vectors for warm starts) are not read: measurements start
        # cold (``measure``)
        layout.adopt(state.get("layouts"))

    # ---- the measurement
    @torch.no_grad()
    def track(self, state) -> dict[str, Any]:
        t0 = time.perf_counter()
        cfg, model = state.config, state.model
        x = self.probe_x.to(state.device)
        z, h = state.embed(x)
        target_h = None
        if methods.get(cfg.method).ema_target and state.target is not None:
            with eval_mode(state.target):
                target_h = state.target(x)[1]
        th = None if target_h is None else target_h.to(self.dtype)
        loss = probe_objective(cfg.method, model, h.to(self.dtype), th, cfg.temperature, config=cfg)
        rec, _ = measure(z, model.projector, loss, block_diagonal=methods.get(cfg.method).per_sample,
                         bn_mode=self.bn_mode, dtype=self.dtype, max_iter=self.max_iter, tol=self.tol,
                         hutchinson_probes=self.hutchinson_probes, path=self.path)
        rec.update(epoch=state.epoch + 1, step=state.global_step, probe_rows=int(x.shape[0]), method=cfg.method)
        self.seconds += time.perf_counter() - t0
        self.records.append(rec)
        if self.run_dir is not None:
            lines = "".join(json.dumps(r, sort_keys=True) + "\n" for r in self.records)
            atomic_write_bytes(self.run_dir / "curvature.jsonl", lines.encode())
        if self.log is not None:
            cond = rec["condition"]
            self.log(f"  H_eff  lambda_min {rec['lambda_min']:+.3e}  lambda_max {rec['lambda_max']:+.3e}  "
                     f"neg {rec['n_negative']}  |M|/|H| {rec['M_over_H']:.3f}  "
                     f"cond {'- (defined only when H_eff is positive definite)' if cond is None else f'{cond:.3g}'}"
                     f"  ({rec['seconds']:.2f} s)")
        return rec

    def summary(self) -> dict[str, Any]:
        pd = [r for r in self.records if r.get("condition") is not None]
        return {
            "n_measurements": len(self.records), "tracking_seconds": self.seconds,
            "spearman_zstd_condition": spearman([r["z_std"] for r in pd], [r["condition"] for r in pd]),
            "spearman_points": len(pd),
            "spearman_note": "over measurements where H_eff was positive definite (condition defined only there)",
            "cadence": self.every, "probe_rows": self.records[0]["probe_rows"] if self.records else None,
            "bn_mode": self.bn_mode, "dtype": str(self.dtype).removeprefix("torch."),
            "negative_lambda_min_fraction": (float(np.mean([r["lambda_min"] < -NEG_FLOOR * r["scale"]
                                                            for r in self.records])) if self.records else None),
        }


def plot_curvature(records: list[dict[str, Any]]) -> bytes:
    """lambda_min, lambda_max (symlog) and condition number against the training step, as PNG bytes."""
    plt = pyplot()

    steps = [r["step"] for r in records]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.4))
    ax1.plot(steps, [r["lambda_max"] for r in records], marker="o", label="lambda_max")
    ax1.plot(steps, [r["lambda_min"] for r in records], marker="o", label="lambda_min")
    ax1.axhline(0.0, color="grey", lw=0.5)
    ax1.set_yscale("symlog", linthresh=max(1e-8, 1e-3 * max(r["scale"] for r in records)))
    ax1.set_xlabel("step")
    ax1.set_ylabel("eigenvalue of H_eff (probe batch)")
    ax1.legend()
    pd = [(r["step"], r["condition"]) for r in records if r.get("condition") is not None]
    if pd:
        ax2.semilogy(*zip(*pd), marker="o")
    ax2.set_xlabel("step")
    ax2.set_ylabel("condition number (when PD)")
    ax2.set_title(f"PD at {len(pd)} of {len(records)} measurements", fontsize=9)
    return png(fig, dpi=110)
