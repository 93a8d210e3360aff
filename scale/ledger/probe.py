r"""The ledger's measurements during training: Section 3's conditioning and E2's curvature at one state
(``curvature_record``), E1's collapse statistics, and the trainer hook that takes them (``LedgerProbe``).
"""

from __future__ import annotations

import json
import math
import time
from typing import Any

import numpy as np
import torch

from mini.collapse_metrics import collapse_stats, covariance_spectrum
from mini.hessian import NEG_FLOOR
from scale.curvature.blocks import effective_hessian_blocks
from scale.curvature.eq1_terms import curvature_mechanism, residual_record
from scale.curvature.lanczos import shifted_power_iteration
from scale.curvature.operators import Operator
from scale.curvature.tracking import probe_objective
from scale.engine.hooks import Hook
from scale.engine.modes import embed
from scale.geometry.mechanism import collapsed_start_
from scale.ledger.plan import PROBE_PAIRS, PROBE_SEED, RANGE_FLOOR


def range_condition(eig) -> tuple[np.ndarray, np.ndarray]:
    """Per row of eigenvalues ``eig`` (n, m) of symmetric blocks: the condition number on the numerical range,
    ``max|lambda| / min{|lambda| : |lambda| >= RANGE_FLOOR max|lambda|}``, and the range's dimension. A block
    whose eigenvalues are all zero has no range: NaN and 0."""
    a = np.abs(np.asarray(eig, dtype=np.float64))
    top = a.max(axis=1)
    kept = a >= RANGE_FLOOR * top[:, None]
    low = np.where(kept, a, np.inf).min(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        kappa = np.where(top > 0, top / low, np.nan)
    return kappa, np.where(top > 0, kept.sum(axis=1), 0)


def curvature_record(model, cfg, x) -> dict[str, Any]:
    """Everything E2 and Section 3 read at one state, on the probe views ``x`` (2m, 3, S, S) (BatchNorm in eval
    mode): exact per-sample spectra of ``H_eff``, ``G``, ``M`` and the loss Hessian (``effective_hessian_blocks``),
    the paper's estimator (``shifted_power_iteration``: 20 + 20 steps in float32) on a float32 copy of the same
    ``H_eff``, and the conditioning of ``H_eff`` in z against the loss Hessian in h (``range_condition``, per
    sample)."""

    z, h = embed(model, x)
    head = model.projector
    loss = probe_objective(cfg.method, model, h.double(), None, config=cfg)
    blocks = effective_hessian_blocks(z.double(), head, loss, spectra="all")
    audit = blocks.audit(NEG_FLOOR)
    eig_M = torch.linalg.eigvalsh(blocks.M)  # (n, d) per sample
    eL = blocks.loss_hessian_eig
    scale, scale_L = audit["scale"], float(eL.abs().max())
    n, d = blocks.H.shape[:2]
    H32 = blocks.H.float()  # the paper's estimator in float32, on the same H_eff (index i*d + a, as the blocks')
    power = shifted_power_iteration(Operator("H_eff blocks (float32)", n * d, torch.float32, H32.device,
                                             lambda v: (H32 @ v.view(n, d, 1)).reshape(-1)), 20)
    kappa_H, dim_H = range_condition(blocks.eig_H.cpu())
    kappa_L, dim_L = range_condition(eL.cpu())
    with np.errstate(invalid="ignore"):
        log_ratio = np.log10(kappa_H) - np.log10(kappa_L)
    return {
        "lambda_min": audit["lambda_min"], "lambda_max": audit["lambda_max"], "scale": scale,
        "negative": audit["lambda_min"] < -NEG_FLOOR * scale, "n_negative": audit["n_negative_H"],
        "lambda_min_G": audit["lambda_min_G"], "n_negative_G": audit["n_negative_G"],
        "negative_G": audit["lambda_min_G"] < -NEG_FLOOR * scale,
        "lambda_min_M": float(eig_M.min()), "lambda_max_M": float(eig_M.max()), "M_over_H": audit["M_over_H"],
        "loss_hessian_min": float(eL.min()), "loss_hessian_max": float(eL.max()),
        "loss_indefinite": float(eL.min()) < -NEG_FLOOR * scale_L,
        "power_lambda_min": power.lambda_min, "power_dominant": power.lambda_dominant,
        "power_negative": power.lambda_min < -NEG_FLOOR * scale,
        "cond_log_ratio": float(np.nanmedian(log_ratio)) if np.isfinite(log_ratio).any() else math.nan,
        "kappa_H": float(np.nanmedian(kappa_H)) if np.isfinite(kappa_H).any() else math.nan,
        "kappa_L": float(np.nanmedian(kappa_L)) if np.isfinite(kappa_L).any() else math.nan,
        "range_dim_H": float(np.median(dim_H)), "range_dim_L": float(np.median(dim_L)), "probe_rows": int(x.shape[0]),
    }


class LedgerProbe(Hook):
    """A trainer hook: E1's collapse statistics before training, and
    ``curvature_record`` at the start and at the end (``every="ends"``) or after every epoch (``"epoch"``), on
    ``pairs`` view pairs of the first training images drawn once (seed ``PROBE_SEED``). With
    ``covariance``, also the unclamped extreme eigenvalues of the covariance of normalised z on the trainer's
    probe images (the paper's E2 statistics and their 1e-7 clamp). With ``mechanism``, at the start and at the end
    also ``scale.curvature.eq1_terms``'s record (M, G's inertia, M on null(G), rho and the loss); with ``collapse``,
    the paper's pseudo-collapsed start is then collapsed in the measured statistic
    (``scale.geometry.mechanism.collapsed_start_``), its h std before that kept as ``h_std_paper_start``."""

    def __init__(self, trainer, every: str, covariance: bool = False, pairs: int = PROBE_PAIRS,
                 mechanism: bool = False, collapse: bool = False) -> None:
        if every not in ("ends", "epoch"):
            raise ValueError(f"every must be 'ends' or 'epoch', got {every!r}")
        self.trainer, self.every, self.covariance, self.pairs = trainer, every, covariance, pairs
        self.mechanism, self.collapse = mechanism, collapse
        self.x = None
        self.start: dict[str, Any] = {}
        self.records: list[dict[str, Any]] = []
        self.seconds = 0.0

    def _stats(self, state) -> dict[str, Any]:
        z, h = state.embed(state.probe_x)
        h_std, h_cond = collapse_stats(h.double())
        z_std, z_cond = collapse_stats(z.double())
        out = {"h_std": h_std, "h_cond": h_cond, "z_std": z_std, "z_cond": z_cond}
        if self.covariance:
            out["z_cov_min"], out["z_cov_max"] = covariance_spectrum(z.double())
        return out

    def _measure(self, state, epoch: int) -> None:
        t0 = time.perf_counter()
        rec = {"epoch": epoch, **curvature_record(state.model, state.config, self.x)}
        if epoch > 0 and self.covariance:
            rec.update({k: v for k, v in self._stats(state).items() if k.startswith("z_cov")})
        if self.mechanism and (epoch == 0 or epoch == state.config.epochs):
            rec["mechanism"] = self._mechanism(state)
        self.records.append(rec)
        self.seconds += time.perf_counter() - t0

    def _mechanism(self, state) -> dict[str, Any]:
        """``scale.curvature.eq1_terms``'s record at this state: eq. (1)'s M, G's inertia, M on null(G), rho."""

        return {**curvature_mechanism(state.model, state.config, self.x),
                **residual_record(state.model, state.config, self.x)}

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps (``scale.ledger.work``): the start and the records as JSON text, the form the
        unit file stores them in (NumPy scalars as the store writes them), and the seconds spent."""
        return {"start": json.dumps(self.start, default=str), "records": json.dumps(self.records, default=str),
                "seconds": self.seconds}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.start, self.records = json.loads(state["start"]), json.loads(state["records"])
        self.seconds = float(state["seconds"])

    def on_fit_start(self, state) -> None:
        tr = self.trainer
        with torch.random.fork_rng(devices=[]):  # the training's own random stream stays untouched
            self.x = tr.augment.views(tr.train_x[:self.pairs], seed=PROBE_SEED)
        if self.start:  # resumed from a checkpoint: the start was measured (and the model collapsed) before it
            return
        collapsed: dict[str, Any] = {}
        if self.collapse:  # the paper's start (weights x 0.1), then collapsed in the measured statistic

            before = self._stats(state)
            # factor 1: the run's --init collapsed has applied the paper's x 0.1 already (the projection is linear
            # in the weights, so the order of the two does not matter)
            collapsed = {"h_std_paper_start": before["h_std"],
                         **collapsed_start_(state.model, state.probe_x, factor=1.0)}
        self.start = {"epoch": 0, **self._stats(state), **collapsed}
        self._measure(state, 0)
        self.records[-1].update({k: v for k, v in self.start.items() if k.startswith("z_cov")})

    def on_epoch_end(self, state) -> None:
        if self.every == "epoch" or state.epoch + 1 == state.config.epochs:
            self._measure(state, state.epoch + 1)
