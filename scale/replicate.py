r"""``python -m scale.replicate``: the paper's experimental claims, each with seeds, a 95 % interval, its control,
and a rule fixed before the runs.

    python -m scale.replicate --dataset digits --seeds 5 --out docs/replication        # the CPU ledger
    python -m scale.replicate --dataset cifar10 --data-dir DIR --device cuda --out L    # the paper's sizes
    python -m scale.replicate --quick --out /tmp/ledger                                 # the pipeline, in seconds

Every run is a run of ``scale.paper``'s plan (the official code's settings: bias-free heads, one-direction
InfoNCE, constant learning rate), trained by ``scale.engine.train.Trainer`` and measured with the project's
one implementation of each measurement: ``scale.curvature`` (exact per-sample blocks of ``H_eff = G + M``, the
paper's power iteration beside them), ``scale.e4_study`` (orbits, rotation and class probes under E4's
protocols a-e), ``mini.collapse_metrics`` (E1's std and condition number). The units:

    E1    SimSiam, projector and predictor of one activation, no bias: heads linear, relu2, gelu2, swish2 x
          BatchNorm off/on (linear: off) x lr {0.005, 0.05, 0.5}, from the pseudo-collapsed start (projector
          weights x 0.1); the normal start for BatchNorm off at lr 0.05 (the controls of E1 and Section 3).
          Recorded: h std per epoch (epoch 0: before training) and Section 3's conditioning at both ends.
    E2    SimSiam, no BatchNorm, lr 0.05: normal/swish2, collapsed/swish2, collapsed/relu2; at the start and
          every epoch end on a fixed probe of view pairs: the exact spectra of H_eff, G, M and of the loss
          Hessian (per-sample blocks, float64), the paper's 20+20-step power iteration (float32), and the
          covariance statistics of z on the trainer's probe images.
    E3E4  ``scale.e4_study``'s seed: the E3 model trained twice (head on raw z; on normalised z), measured
          under protocols a-e (orbit geometry, rotation probes, class probe, untrained heads).
    E5    the E3 set-up with a Swish + BatchNorm head of depth 1, 2, 3, measured under protocols a-d.

Results: ``OUT/results.json`` (every unit's values, its config, seed, the code commit, versions and seconds;
written after each unit, so a rerun of the same command continues where it stopped and reuses a unit only if
its plan is unchanged; ``--redo E2`` measures an experiment's units again), then ``OUT/report.md`` with the
ledger table and the figures ``e1_std.png``, ``e2_curvature.png``, ``e5_depth.png``; the E4 study's own report
in ``OUT/e4_study/``. ``--report-only`` rebuilds the report from ``results.json``.

Exit codes: 0 done; 1 the data (CIFAR archive) missing or corrupt, or nothing to report; 2 a bad argument or an
``OUT/results.json`` that is not a ledger (left as it is); 4 an output could not be written; 130 interrupted
(SIGINT or SIGTERM: the running unit stops at its next step and is dropped). A unit is written to
``results.json`` atomically once it has finished, so a stopped or killed ledger loses at most the unit it was
running.

The rules (``CLAIMS``) were written before any ledger run: the statistic, the direction the paper claims, the
bar, and the control shown beside; ``scale.geometry.ledger`` turns the 95 % t interval over seeds into
"reproduced", "not reproduced" or "inconclusive at this power".
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from scale.engine.hooks import Hook
from scale.geometry.ledger import Rule, cell, fraction, interval, log10_ratio
from scale.geometry.verdict import Estimate

# --------------------------------------------------------------------------------------------
# Sizes
# --------------------------------------------------------------------------------------------

CIFAR = ("cifar10", "cifar100")
# Epochs on digits (10 steps of 128 images per epoch): chosen by pilot runs so that the whole ledger fits about
# 3 hours of an idle 2-core CPU; on CIFAR every experiment keeps the paper's (None: scale.paper's plan).
DIGITS_EPOCHS: dict[str, int] = {"E1": 20, "E2": 50, "E3E4": 50, "E5": 50}
# --quick: the pipeline, not the numbers (2 seeds, tiny model, 2 steps an epoch)
QUICK_EPOCHS: dict[str, int] = {"E1": 1, "E2": 4, "E3E4": 1, "E5": 1}
QUICK_FLAGS = ("--train-subset", "64", "--batch-size", "32", "--backbone-width", "8", "--head-width", "32",
               "--head-out", "16", "--pred-width", "8")
QUICK_SEEDS, QUICK_PROBE_IMAGES, QUICK_PROBE_PAIRS = 2, 32, 4
PROBE_IMAGES = 10_000  # rotation probes: base images per split (all of digits)
E1_NORMAL_START = ((False, 0.05),)  # (BatchNorm, lr) of E1's normal-start controls, every head
PROBE_PAIRS = 16  # view pairs of the curvature probe (32 rows), as scale.curvature.tracking's
PROBE_SEED = 2024  # the curvature probe's views, fixed for a run
RANGE_FLOOR = 1e-6  # Section 3: eigenvalues below this fraction of a block's largest |eigenvalue| count as flat
CONTROL_SEED = 12345  # the untrained heads' seed offset (scale.geometry.measure's)


# --------------------------------------------------------------------------------------------
# The plan: units, each one run of scale.paper's plan at one seed
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Unit:
    name: str
    experiment: str  # E1, E2, E3E4, E5
    seed: int
    argv: tuple[str, ...]  # scale.run arguments (E3E4: the flags appended to scale.e4_study's run)
    paper: dict[str, Any]  # the paper's value of each checked setting (scale.paper.PlannedRun.paper)
    labels: dict[str, Any] = field(default_factory=dict)
    measure: dict[str, Any] = field(default_factory=dict)  # the settings outside argv that shape its numbers

    def key(self) -> dict[str, Any]:
        """What must match for a stored result to be reused."""
        return {"argv": list(self.argv), "experiment": self.experiment, "seed": self.seed, "measure": self.measure}


def plan_units(dataset: str, seeds: int, quick: bool, data_dir: str | None = None, threads: int | None = None
               ) -> list[Unit]:
    """Every unit, seed-major (all of seed 0 first), so that a ledger stopped early has every claim at fewer
    seeds rather than some claims at none."""
    from scale.paper import plan

    epochs = QUICK_EPOCHS if quick else ({} if dataset in CIFAR else DIGITS_EPOCHS)
    curv = {"probe_pairs": QUICK_PROBE_PAIRS if quick else PROBE_PAIRS, "probe_seed": PROBE_SEED,
            "range_floor": RANGE_FLOOR}
    probes = {"probe_images": QUICK_PROBE_IMAGES if quick else PROBE_IMAGES, "control_seed": CONTROL_SEED}
    tail: list[str] = list(QUICK_FLAGS) if quick else []
    if data_dir:
        tail += ["--data-dir", data_dir]
    if threads:
        tail += ["--threads", str(threads)]
    by_seed: dict[int, list[Unit]] = {s: [] for s in range(seeds)}

    def argv_of(run, seed: int, *extra: str) -> tuple[str, ...]:
        keep = [a for a in run.argv if a not in ("--track-hessian-every", "epoch")]
        return (*keep, "--seed", str(seed), *extra, *tail)  # argparse: the last occurrence of a flag wins

    for seed in range(seeds):
        for run in plan(dataset, "resnet18", False, ("E1",), seeds=1, epochs=epochs.get("E1")):
            lab = run.labels
            name = f"E1-{lab['head']}-bn{int(lab['bn'])}-lr{lab['lr']:g}"
            by_seed[seed].append(Unit(f"{name}-collapsed-s{seed}", "E1", seed, argv_of(run, seed), run.paper,
                                      dict(lab, init="collapsed"), curv))
            if (lab["bn"], lab["lr"]) in E1_NORMAL_START:
                by_seed[seed].append(Unit(f"{name}-normal-s{seed}", "E1", seed, argv_of(run, seed, "--init", "normal"),
                                          dict(run.paper, init="normal"), dict(lab, init="normal"), curv))
        for run in plan(dataset, "resnet18", False, ("E2",), seeds=1, epochs=epochs.get("E2")):
            lab = run.labels
            by_seed[seed].append(Unit(f"E2-{lab['init']}-{lab['head']}-s{seed}", "E2", seed, argv_of(run, seed),
                                      run.paper, dict(lab), curv))
        e3 = plan(dataset, "resnet18", False, ("E3E4",), seeds=1, epochs=epochs.get("E3E4"))[0]
        by_seed[seed].append(Unit(f"E3E4-s{seed}", "E3E4", seed, tuple(tail), e3.paper, dict(e3.labels),
                                  dict(probes, epochs=epochs.get("E3E4"))))
        for run in plan(dataset, "resnet18", False, ("E5",), seeds=1, epochs=epochs.get("E5")):
            by_seed[seed].append(Unit(f"E5-depth{run.labels['depth']}-s{seed}", "E5", seed, argv_of(run, seed),
                                      run.paper, dict(run.labels), probes))
    return [u for s in range(seeds) for u in by_seed[s]]


# --------------------------------------------------------------------------------------------
# Measurements during training: E1's collapse statistics, E2's curvature, Section 3's conditioning
# --------------------------------------------------------------------------------------------


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
    import torch

    from mini.hessian import NEG_FLOOR
    from scale.curvature.blocks import effective_hessian_blocks
    from scale.curvature.lanczos import shifted_power_iteration
    from scale.curvature.operators import Operator
    from scale.curvature.tracking import probe_objective
    from scale.engine.modes import eval_mode

    with torch.no_grad(), eval_mode(model):
        z, h, _ = model(x)
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
    probe images (the paper's E2 statistics and their 1e-7 clamp)."""

    def __init__(self, trainer, every: str, covariance: bool = False, pairs: int = PROBE_PAIRS) -> None:
        if every not in ("ends", "epoch"):
            raise ValueError(f"every must be 'ends' or 'epoch', got {every!r}")
        self.trainer, self.every, self.covariance, self.pairs = trainer, every, covariance, pairs
        self.x = None
        self.start: dict[str, Any] = {}
        self.records: list[dict[str, Any]] = []
        self.seconds = 0.0

    def _stats(self, state) -> dict[str, Any]:
        from mini.collapse_metrics import collapse_stats, covariance_spectrum

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
        self.records.append(rec)
        self.seconds += time.perf_counter() - t0

    def on_fit_start(self, state) -> None:
        import torch

        tr = self.trainer
        with torch.random.fork_rng(devices=[]):  # the training's own random stream stays untouched
            self.x = tr.augment.views(tr.train_x[:self.pairs], seed=PROBE_SEED)
        self.start = {"epoch": 0, **self._stats(state)}
        self._measure(state, 0)
        self.records[-1].update({k: v for k, v in self.start.items() if k.startswith("z_cov")})

    def on_epoch_end(self, state) -> None:
        if self.every == "epoch" or state.epoch + 1 == state.config.epochs:
            self._measure(state, state.epoch + 1)


HISTORY_KEYS = ("epoch", "loss", "h_std", "h_cond", "z_std", "z_cond", "rel_update_head", "rel_update_backbone")


def train_unit(unit: Unit, data, device: str, pairs: int = PROBE_PAIRS) -> dict[str, Any]:
    """E1 / E2: train ``unit``'s run with a ``LedgerProbe`` (E2: every epoch, with the covariance statistics)."""
    import torch

    from scale.e4_study import close_augment, run_config
    from scale.engine.train import NonFiniteLoss, Trainer

    cfg = run_config(list(unit.argv), device)
    trainer = Trainer(cfg, data, torch.device(device), run_dir=None, progress=False, log=None)
    probe = LedgerProbe(trainer, "epoch" if unit.experiment == "E2" else "ends", covariance=unit.experiment == "E2",
                        pairs=pairs)
    trainer.hooks.append(probe)
    status = "finished"
    try:
        trainer.fit()
    except NonFiniteLoss:
        status = "non-finite loss"
    finally:
        close_augment(trainer)
    history = [{k: r.get(k) for k in HISTORY_KEYS} for r in trainer.state.history]
    return {"status": status, "config": trainer.cfg.to_dict(), "start": probe.start, "history": history,
            "curvature": probe.records, "curvature_seconds": probe.seconds}


def e3e4_unit(unit: Unit, dataset: str, epochs: int | None, data_dir: str | None, probe_images: int, device: str,
              log: Callable[[str], None]) -> dict[str, Any]:
    """E3 + E4: one seed of ``scale.e4_study`` (two trainings, protocols a-e, probes)."""
    from scale.e4_study import one_seed

    return {"status": "finished", **one_seed(dataset, unit.seed, epochs, data_dir, probe_images, log, device,
                                              extra=unit.argv)}


def e5_unit(unit: Unit, data, probe_images: int, device: str) -> dict[str, Any]:
    """E5: train one depth's model, then E4's protocols a-d of it (``scale.e4_study.measure_model``)."""
    from scale.e4_study import measure_model, run_config, train
    from scale.geometry.probes import ProbeSettings

    cfg = run_config(list(unit.argv), device)
    model = train(cfg, data, normalized_input=False, device=device)
    probe = ProbeSettings(train_images=probe_images, test_images=probe_images, seed=unit.seed)
    return {"status": "finished", "config": cfg.to_dict(),
            "protocols": measure_model(model, cfg, data.to(device), probe, CONTROL_SEED + unit.seed)}


# --------------------------------------------------------------------------------------------
# Per-seed statistics
# --------------------------------------------------------------------------------------------

Results = dict[str, dict[str, Any]]  # unit name -> its record
DONE = ("finished", "non-finite loss")  # a unit in another state (an error) is run again by the next invocation


def _unit(res: Results, name: str) -> dict[str, Any] | None:
    r = res.get(name)
    return r if r is not None and r.get("status") == "finished" else None


def _seeds(res: Results) -> list[int]:
    return sorted({int(r["seed"]) for r in res.values()})


def e1_name(head: str, bn: bool, lr: float, init: str, seed: int) -> str:
    return f"E1-{head}-bn{int(bn)}-lr{lr:g}-{init}-s{seed}"


def h_std_final(res: Results, name: str) -> float:
    r = _unit(res, name)
    return r["history"][-1]["h_std"] if r and r["history"] else math.nan


def escape(res: Results, name: str) -> float:
    """E1: ``log10(h std at the end / h std before training)`` (> 0: the head left where it started)."""
    r = _unit(res, name)
    return log10_ratio(h_std_final(res, name), r["start"]["h_std"]) if r else math.nan


def relu_like_linear(res: Results, bn: bool, lr: float, seed: int, init: str = "collapsed") -> float:
    """E1's ReLU gap: ``|log10(relu / smooth)| - |log10(relu / linear)|`` of the final h std, smooth = geometric
    mean of the GELU and Swish heads (> 0: ReLU ends nearer the linear head than the smooth heads)."""
    f = {h: h_std_final(res, e1_name(h, bn, lr, init, seed)) for h in ("relu2", "linear", "gelu2", "swish2")}
    smooth = math.sqrt(f["gelu2"] * f["swish2"]) if f["gelu2"] > 0 and f["swish2"] > 0 else math.nan
    return abs(log10_ratio(f["relu2"], smooth)) - abs(log10_ratio(f["relu2"], f["linear"]))


def curvature(res: Results, name: str) -> list[dict[str, Any]]:
    r = _unit(res, name)
    return r["curvature"] if r else []


def negative_fraction(res: Results, name: str, key: str = "negative", first_epoch: int = 1) -> float:
    """E2: the fraction of epoch-end measurements from ``first_epoch`` on with ``key`` true (``negative``:
    lambda_min(H_eff) below -1e-9 of its scale; ``negative_G``: the same for G; ``power_negative``: by the
    paper's power iteration; ``loss_indefinite``: the loss Hessian's)."""
    recs = [c for c in curvature(res, name) if c["epoch"] >= first_epoch]
    return fraction([bool(c[key]) for c in recs]) if recs else math.nan


def spearman_e2(res: Results, name: str, clamped: bool = True) -> float:
    """E2: Spearman between the std of normalised z and its covariance condition number over epochs 2.. (the
    official plot drops epoch 1); ``clamped=False``: the condition number with the unclamped lambda_min."""
    from scale.curvature.tracking import spearman

    r = _unit(res, name)
    if not r:
        return math.nan
    hist = [h for h in r["history"] if h["epoch"] >= 2]
    if clamped:
        cond = [h["z_cond"] for h in hist]
    else:
        by_epoch = {c["epoch"]: c for c in r["curvature"]}
        cond = [by_epoch[h["epoch"]]["z_cov_max"] / by_epoch[h["epoch"]]["z_cov_min"]
                if by_epoch[h["epoch"]]["z_cov_min"] > 0 else math.nan for h in hist]
        if not all(math.isfinite(c) for c in cond):
            return math.nan
    rho = spearman([h["z_std"] for h in hist], cond)
    return math.nan if rho is None else rho


def clamp_fraction(res: Results, name: str) -> float:
    """E2: the fraction of epochs 2.. where the covariance's lambda_min lies below the paper's 1e-7 clamp (there
    the condition number is lambda_max / 1e-7, a variance)."""
    from mini.collapse_metrics import COND_FLOOR

    recs = [c for c in curvature(res, name) if c["epoch"] >= 2]
    return fraction([c["z_cov_min"] < COND_FLOOR for c in recs]) if recs else math.nan


def conditioning(res: Results, name: str, at: str = "end") -> float:
    """Section 3: the median over the probe's samples of ``log10 kappa(H_i) - log10 kappa(grad^2_{h_i} L)``
    (``range_condition``) at the end of training or at its start (< 0: H_eff in z better conditioned than the
    loss Hessian in h, the head whitens)."""
    recs = curvature(res, name)
    if not recs:
        return math.nan
    rec = recs[0] if at == "start" else recs[-1]
    return rec["cond_log_ratio"] if at == "start" or rec["epoch"] > 0 else math.nan


def protocol(res: Results, name: str, proto: str, key: str) -> float:
    r = _unit(res, name)
    return float(r["protocols"][proto][key]) if r else math.nan


def gap(res: Results, name: str, proto: str, probe: str) -> float:
    """E3 / E5: probe accuracy on h minus on z, in points (the project's sign; ``probe``: rot_linear, rot_mlp,
    class). The paper's "drop" of 14.72 points is a gap of -14.72."""
    return 100 * (protocol(res, name, proto, f"{probe}_h") - protocol(res, name, proto, f"{probe}_z"))


def log10_of(res: Results, name: str, proto: str, key: str) -> float:
    v = protocol(res, name, proto, key)
    return math.log10(v) if v > 0 else math.nan


# --------------------------------------------------------------------------------------------
# The claims and their rules (fixed before the runs)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Claim:
    """One row of the ledger: the paper's claim and figure, the per-seed statistic (``value(results, seed)``)
    and its unit, the rule, and the controls (label, ``value(results, seed)``) shown beside it."""

    id: str
    experiment: str
    claim: str
    paper: str
    statistic: str
    unit: str
    rule: Rule
    value: Callable[[Results, int], float]
    controls: tuple[tuple[str, Callable[[Results, int], float]], ...] = ()


def _e1(head: str, bn: bool = False, lr: float = 0.05, init: str = "collapsed"):
    return lambda res, s: escape(res, e1_name(head, bn, lr, init, s))


def _e1_bn_gain(head: str, lr: float):
    return lambda res, s: log10_ratio(h_std_final(res, e1_name(head, True, lr, "collapsed", s)),
                                      h_std_final(res, e1_name(head, False, lr, "collapsed", s)))


def _e2(init: str, head: str) -> str:
    return f"E2-{init}-{head}"


def _frac(run: str, key: str = "negative", first: int = 1):
    return lambda res, s: negative_fraction(res, f"{run}-s{s}", key, first)


def _rho(run: str, clamped: bool = True):
    return lambda res, s: spearman_e2(res, f"{run}-s{s}", clamped)


def _clamp(run: str):
    return lambda res, s: clamp_fraction(res, f"{run}-s{s}")


def _gap(proto: str, probe: str, unit: str = "E3E4"):
    return lambda res, s: gap(res, f"{unit}-s{s}", proto, probe)


def _log(proto: str, key: str):
    return lambda res, s: log10_of(res, f"E3E4-s{s}", proto, key)


def _depth_gap(proto: str):
    return lambda res, s: gap(res, f"E5-depth3-s{s}", proto, "rot_linear") - gap(res, f"E5-depth1-s{s}", proto,
                                                                                 "rot_linear")


def _depth_compression(proto: str):
    return lambda res, s: log10_ratio(protocol(res, f"E5-depth3-s{s}", proto, "compression"),
                                      protocol(res, f"E5-depth1-s{s}", proto, "compression"))


def _depth_head_probe(proto: str):
    return lambda res, s: 100 * (protocol(res, f"E5-depth3-s{s}", proto, "rot_linear_h")
                                 - protocol(res, f"E5-depth1-s{s}", proto, "rot_linear_h"))


def _cond(head: str, init: str = "normal", at: str = "end"):
    return lambda res, s: conditioning(res, e1_name(head, False, 0.05, init, s), at)


POSITIVE = Rule(">", 0.0)
NEGATIVE = Rule("<", 0.0)
ABOUT_70 = Rule("within", band=(0.5, 0.9))  # "about 70 of 100 epochs": 50 % to 90 %
AT_MOST_10 = Rule("<", 0.1)  # "exactly 0 after the first epoch": negative in under 10 % of the epochs
LOG10 = "log10 ratio"

CLAIMS: tuple[Claim, ...] = (
    # E1: collapse dynamics (SimSiam, BatchNorm off, lr 0.05 unless said; pseudo-collapsed start)
    Claim("E1.1", "E1", "a linear head does not leave pseudo-collapse", "qualitative (Thm 4.1 (1))",
          "log10(h std at the end / before training), linear, BN off, lr 0.05", LOG10, NEGATIVE, _e1("linear"),
          (("normal start", _e1("linear", init="normal")),)),
    Claim("E1.2", "E1", "a GELU head leaves pseudo-collapse", "qualitative (Thm 4.1 (2))",
          "log10(h std at the end / before training), gelu2, BN off, lr 0.05", LOG10, POSITIVE, _e1("gelu2"),
          (("normal start", _e1("gelu2", init="normal")), ("linear head", _e1("linear")))),
    Claim("E1.3", "E1", "a Swish head leaves pseudo-collapse", "qualitative (Thm 4.1 (2))",
          "log10(h std at the end / before training), swish2, BN off, lr 0.05", LOG10, POSITIVE, _e1("swish2"),
          (("normal start", _e1("swish2", init="normal")), ("linear head", _e1("linear")))),
    Claim("E1.4", "E1", "without BatchNorm, at the smallest step, ReLU behaves like linear", "qualitative (ReLU gap)",
          "abs(log10(relu / smooth)) - abs(log10(relu / linear)) of the final h std, BN off, lr 0.005 (smooth: "
          "geometric mean of gelu2, swish2)", "log10 units", POSITIVE,
          lambda res, s: relu_like_linear(res, False, 0.005, s),
          (("lr 0.05", lambda res, s: relu_like_linear(res, False, 0.05, s)),
           ("lr 0.5", lambda res, s: relu_like_linear(res, False, 0.5, s)))),
    Claim("E1.5", "E1", "BatchNorm is the way out for ReLU", "qualitative (ReLU gap)",
          "log10(final h std with BN / without), relu2, lr 0.005", LOG10, POSITIVE, _e1_bn_gain("relu2", 0.005),
          (("gelu2 (BN's effect on a smooth head)", _e1_bn_gain("gelu2", 0.005)),
           ("relu2 at lr 0.05", _e1_bn_gain("relu2", 0.05)))),
    # E2: curvature at collapse (exact spectra of H_eff; SimSiam, whose loss Hessian is indefinite)
    Claim("E2.1", "E2", "collapsed ReLU head: lambda_min(H_eff) stays at 0 after the first epoch",
          "0 after epoch 1", "fraction of epochs 2.. with lambda_min(H_eff) < -1e-9 x scale, collapsed/relu2",
          "fraction", AT_MOST_10, _frac(_e2("collapsed", "relu2"), first=2),
          (("the same for G alone", _frac(_e2("collapsed", "relu2"), "negative_G", 2)),
           ("the paper's power iteration", _frac(_e2("collapsed", "relu2"), "power_negative", 2)),
           ("loss Hessian indefinite", _frac(_e2("collapsed", "relu2"), "loss_indefinite", 2)))),
    Claim("E2.2", "E2", "normal Swish head: negative lambda_min(H_eff) in about 70 % of epochs", "about 70 of 100",
          "fraction of epochs with lambda_min(H_eff) < -1e-9 x scale, normal/swish2", "fraction", ABOUT_70,
          _frac(_e2("normal", "swish2")),
          (("the same for G alone", _frac(_e2("normal", "swish2"), "negative_G")),
           ("the paper's power iteration", _frac(_e2("normal", "swish2"), "power_negative")))),
    Claim("E2.3", "E2", "collapsed Swish head: negative lambda_min(H_eff) in about 70 % of epochs", "about 70 of 100",
          "fraction of epochs with lambda_min(H_eff) < -1e-9 x scale, collapsed/swish2", "fraction", ABOUT_70,
          _frac(_e2("collapsed", "swish2")),
          (("the same for G alone", _frac(_e2("collapsed", "swish2"), "negative_G")),
           ("the paper's power iteration", _frac(_e2("collapsed", "swish2"), "power_negative")))),
    *(Claim(f"E2.{4 + i}", "E2", f"{init}/{head}: representation variance and condition number correlate positively",
            f"rho_s {paper_rho}", "Spearman(std of normalised z, covariance condition number with the 1e-7 clamp) "
            f"over epochs 2.., {init}/{head}", "rank correlation", POSITIVE, _rho(_e2(init, head)),
            (("unclamped condition number", _rho(_e2(init, head), False)),
             ("epochs at the clamp", _clamp(_e2(init, head)))))
      for i, (init, head, paper_rho) in enumerate((("normal", "swish2", 0.339), ("collapsed", "swish2", 0.609),
                                                   ("collapsed", "relu2", 0.669)))),
    # E3: the guillotine probes (official protocol b: the head on the raw z it was trained on)
    Claim("E3.1", "E3", "rotation is harder to read from h than from z (linear probe)", "52.27 -> 37.55 % (-14.72)",
          "rotation probe, linear: accuracy on h minus on z (protocol b)", "points", NEGATIVE,
          _gap("b_raw", "rot_linear"), (("untrained head", _gap("d_untrained_nobias", "rot_linear")),)),
    Claim("E3.2", "E3", "the same with the MLP probe", "55.46 -> 43.56 % (-11.90)",
          "rotation probe, MLP: accuracy on h minus on z (protocol b)", "points", NEGATIVE,
          _gap("b_raw", "rot_mlp"), (("untrained head", _gap("d_untrained_nobias", "rot_mlp")),)),
    Claim("E3.3", "E3", "the backbone serves the downstream task better than the head (the guillotine)",
          "not reported (the paper's premise)", "class probe (logistic regression): accuracy on h minus on z "
          "(protocol b)", "points", NEGATIVE, _gap("b_raw", "class"),
          (("untrained head", _gap("d_untrained_nobias", "class")),)),
    # E4: orbit geometry (scale.e4_study's protocols; docs/e4_study)
    Claim("E4.1", "E4", "the trained head compresses rotation orbits (paper protocol a)", "21.85x",
          "log10(mean orbit spread of z / of h), protocol a", LOG10, POSITIVE, _log("a_paper", "compression"),
          (("untrained head", _log("d_untrained_nobias", "compression")),
           ("BatchNorm re-estimated (c)", _log("c_bn_renorm", "compression")))),
    Claim("E4.2", "E4", "the compression holds on the z the head was trained on (protocol b)", "21.85x",
          "log10(mean orbit spread of z / of h), protocol b (head on raw z)", LOG10, POSITIVE,
          _log("b_raw", "compression"),
          (("head trained on normalised z (e)", _log("e_trained_normalized", "compression")),)),
    Claim("E4.3", "E4", "the compression is learned (trained head against an untrained one, protocol a)",
          "21.85x vs 0.97x", "log10(compression trained / untrained bias-free head), protocol a", LOG10, POSITIVE,
          lambda res, s: _log("a_paper", "compression")(res, s) - _log("d_untrained_nobias", "compression")(res, s),
          (("the same under protocol b", lambda res, s: _log("b_raw", "compression")(res, s)
            - _log("d_untrained_nobias", "compression")(res, s)),)),
    Claim("E4.4", "E4", "the head raises the curvature kappa along the sweep", "1.93x",
          "log10(kappa of h / of z), protocol b (the official kappa)", LOG10, POSITIVE, _log("b_raw", "kappa_factor"),
          (("protocol a", _log("a_paper", "kappa_factor")), ("untrained head", _log("d_untrained_nobias",
                                                                                   "kappa_factor")))),
    Claim("E4.5", "E4", "the head raises D_inter / D_intra", "2.04 -> 2.50 (1.22x)",
          "log10((D_inter/D_intra of h) / (of z)), protocol a",
          LOG10, POSITIVE, lambda res, s: log10_ratio(protocol(res, f"E3E4-s{s}", "a_paper", "ratio_h"),
                                                      protocol(res, f"E3E4-s{s}", "a_paper", "ratio_z")),
          (("protocol b", lambda res, s: log10_ratio(protocol(res, f"E3E4-s{s}", "b_raw", "ratio_h"),
                                                     protocol(res, f"E3E4-s{s}", "b_raw", "ratio_z"))),
           ("untrained head", lambda res, s: log10_ratio(protocol(res, f"E3E4-s{s}", "d_untrained_nobias", "ratio_h"),
                                                         protocol(res, f"E3E4-s{s}", "d_untrained_nobias",
                                                                  "ratio_z"))))),
    # E5: head depth (Swish + BatchNorm heads of depth 1, 2, 3)
    Claim("E5.1", "E5", "the guillotine gap grows with depth (rotation, linear probe)", "-0.12 -> -16.74 points",
          "(h - z at depth 3) - (h - z at depth 1), rotation probe, linear, protocol b", "points", NEGATIVE,
          _depth_gap("b_raw"), (("untrained heads", _depth_gap("d_untrained_nobias")),)),
    Claim("E5.2", "E5", "the head's rotation probe falls with depth", "47.40 -> 35.61 %",
          "rotation probe, linear, on h: depth 3 minus depth 1, protocol b", "points", NEGATIVE,
          _depth_head_probe("b_raw"), (("untrained heads", _depth_head_probe("d_untrained_nobias")),)),
    Claim("E5.3", "E5", "orbit compression grows with depth", "49.1x -> 78.5x",
          "log10(compression at depth 3 / at depth 1), protocol a", LOG10, POSITIVE, _depth_compression("a_paper"),
          (("protocol b", _depth_compression("b_raw")),
           ("BatchNorm re-estimated (c)", _depth_compression("c_bn_renorm")),
           ("untrained heads", _depth_compression("d_untrained_nobias")))),
    # Section 3: conditioning in training (E1's runs, normal start, BatchNorm off, lr 0.05)
    *(Claim(f"S3.{i + 1}", "S3", f"the {head} head whitens: H_eff in z better conditioned than the loss Hessian in h",
            "qualitative (Thm 3.1, 3.2)", "median over probe samples of log10 kappa(H_i) - log10 kappa(L_i) at the "
            f"end of training, {head}, BN off, lr 0.05, normal start", LOG10, NEGATIVE, _cond(head),
            (("before training", _cond(head, at="start")), ("pseudo-collapsed start", _cond(head, "collapsed"))))
      for i, head in enumerate(("linear", "relu2", "gelu2", "swish2"))),
)
# E6 is not run here: the pretrained checkpoints cannot be fetched offline (``python -m scale.pretrained``).
NOT_RUN = {"E6": ("DINO heads compress orbits, VICReg / Barlow Twins heads expand them", "compressor / expander",
                  "not run: no pretrained checkpoint is reachable offline; `python -m scale.pretrained all --weights "
                  "PATH` (docs/pretrained.md)")}


def evaluate(claim: Claim, res: Results) -> dict[str, Any]:
    """The claim's per-seed values, interval and verdict, and each control's values and interval."""
    seeds = _seeds(res)
    values = [claim.value(res, s) for s in seeds]
    est = interval(values)
    controls = []
    for label, fn in claim.controls:
        cv = [fn(res, s) for s in seeds]
        controls.append({"label": label, "values": cv, "interval": asdict(interval(cv))})
    return {"id": claim.id, "experiment": claim.experiment, "claim": claim.claim, "paper": claim.paper,
            "statistic": claim.statistic, "unit": claim.unit, "rule": claim.rule.text(), "seeds": seeds,
            "values": values, "interval": asdict(est), "verdict": claim.rule.verdict(est), "controls": controls}


# --------------------------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------------------------


def code_commit() -> str:
    """HEAD, with ``+dirty`` when the code that produces the numbers (``mini/``, ``scale/``, ``pyproject.toml``)
    differs from it (docs and outputs written meanwhile do not count); ``unknown`` outside git."""
    root = Path(__file__).resolve().parent.parent
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "mini", "scale", "pyproject.toml"], cwd=root,
                               capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    if sha.returncode:
        return "unknown"
    return sha.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def load_results(path: Path) -> dict[str, Any]:
    """``results.json`` as written by ``run``; an absent file is an empty ledger. A file that is not a ledger
    raises ``ValueError`` (it is left as it is)."""
    if not path.is_file():
        return {"units": {}}
    try:
        saved = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path} is not readable as a ledger ({type(exc).__name__}); move it away or choose "
                         "another --out") from None
    if not isinstance(saved, dict) or not isinstance(saved.get("units"), dict):
        raise ValueError(f"{path} is not a ledger written by scale.replicate (no 'units'); move it away or "
                         "choose another --out")
    return saved


def run_unit(u: Unit, args: argparse.Namespace, data, epochs: dict[str, int], probe_images: int,
             log: Callable[[str], None]) -> dict[str, Any]:
    """One unit's record, by its experiment's runner."""
    if u.experiment in ("E1", "E2"):
        return train_unit(u, data, args.device, QUICK_PROBE_PAIRS if args.quick else PROBE_PAIRS)
    if u.experiment == "E5":
        return e5_unit(u, data, probe_images, args.device)
    return e3e4_unit(u, args.dataset, epochs.get("E3E4"), args.data_dir, probe_images, args.device, log)


@contextlib.contextmanager
def locked(out: Path):
    """An exclusive ``flock`` on ``OUT/.results.lock`` for one read-merge-write of ``results.json``: shards of one
    ledger (``--shard``) running at once each add their own units to the file, never overwrite the others'."""
    import fcntl

    out.mkdir(parents=True, exist_ok=True)
    fd = os.open(out / ".results.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def parse_shard(text: str) -> tuple[int, int]:
    """``"K/N"`` -> (K, N) with 0 <= K < N: this process runs the plan's units whose index is K modulo N."""
    try:
        k, n = (int(v) for v in text.split("/"))
    except ValueError:
        raise ValueError(f"--shard takes K/N (e.g. 0/2), got {text!r}") from None
    if not 0 <= k < n:
        raise ValueError(f"--shard K/N needs 0 <= K < N, got {text!r}")
    return k, n


def run(args: argparse.Namespace, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Run every unit of the plan (of this ``--shard``) not yet in ``OUT/results.json``; the file gets each unit as
    it finishes, merged under ``locked`` with what other shards wrote meanwhile."""
    import torch

    from scale.engine.checkpoint import atomic_write_json
    from scale.engine.data import DataError, load_dataset
    from scale.engine.signals import stop_on_signals
    from scale.engine.train import Interrupted
    from scale.paper import deviations
    from scale.runs.run_report import versions

    out = Path(args.out)
    path = out / "results.json"
    saved = load_results(path)
    units = plan_units(args.dataset, args.seeds, args.quick, args.data_dir, args.threads)
    commit = code_commit()
    stored: Results = {}
    for u in units:
        r = saved["units"].get(u.name)
        if r is not None and r.get("key") == u.key() and u.experiment not in args.redo:
            stored[u.name] = r
    k, n = args.shard
    todo = [u for i, u in enumerate(units)
            if i % n == k and (u.name not in stored or stored[u.name]["status"] not in DONE)]
    log(f"scale.replicate: {len(units)} units in {out} ({len(units) - len(todo)} done or another shard's, "
        f"{len(todo)} to run); code {commit}")
    epochs = QUICK_EPOCHS if args.quick else ({} if args.dataset in CIFAR else DIGITS_EPOCHS)
    probe_images = QUICK_PROBE_IMAGES if args.quick else PROBE_IMAGES
    data = None
    if todo:
        data = load_dataset(args.dataset, args.data_dir, image_size=16 if args.dataset == "digits" else None)

    mine: Results = {}  # the units this invocation ran
    keys = {u.name: u.key() for u in units}  # a unit on disk of another plan (stale) is dropped, not kept

    def save() -> None:
        with locked(out):
            disk = {k: r for k, r in load_results(path)["units"].items() if r.get("key") == keys.get(k)}
            merged = {u.name: mine.get(u.name) or disk.get(u.name) or stored.get(u.name) for u in units}
            ledger = {"format": 1, "command": args.command, "dataset": args.dataset, "seeds": args.seeds,
                      "quick": args.quick, "epochs": epochs, "probe_images": probe_images, "device": args.device,
                      "threads": args.threads, "units": {k: v for k, v in merged.items() if v is not None}}
            atomic_write_json(path, ledger)

    probe_flag = ["--probe-images", str(probe_images)] if probe_images != PROBE_IMAGES else []
    t_all = time.perf_counter()
    stop: list[bool] = []  # a SIGINT/SIGTERM between units (inside a training the trainer's own handler stops it)
    with stop_on_signals(lambda: stop.append(True)):
        for i, u in enumerate(todo):
            if stop:
                raise Interrupted(f"stopped before unit {u.name}")
            t0 = time.perf_counter()
            try:
                rec = run_unit(u, args, data, epochs, probe_images, log)
            except (KeyboardInterrupt, Interrupted, OSError, DataError):  # Interrupted: the trainer's SIGINT/SIGTERM
                raise
            except Exception as exc:  # one broken unit must not lose the rest; it is recorded and retried next time
                import traceback

                traceback.print_exc()
                rec = {"status": f"error: {type(exc).__name__}: {exc}", "config": {}}
            rec.update(name=u.name, experiment=u.experiment, seed=u.seed, labels=u.labels, key=u.key(),
                       git_commit=commit, versions=versions(), seconds=time.perf_counter() - t0,
                       torch_threads=torch.get_num_threads(), finished_at=time.strftime("%Y-%m-%d %H:%M:%S"),
                       deviations=deviations(rec["config"], u.paper, args.dataset, probe_flag) if rec["config"] else {})
            mine[u.name] = rec  # the output folder is made only once a unit has finished: bad input leaves nothing
            save()
            log(f"  [{i + 1}/{len(todo)}] {u.name}: {rec['status']}, {rec['seconds']:.1f} s")
    log(f"scale.replicate: {len(todo)} units in {time.perf_counter() - t_all:.0f} s")
    if stored and not todo:
        save()  # the command and settings of this invocation
    return {"units": {}} if not path.is_file() else load_results(path)


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: Path) -> bool:
    """Lay out, write and close ``fig``."""
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    _plt().close(fig)
    return True


def figure_e1(res: Results, path: Path) -> bool:
    """Per-seed curves of E1's h std (epoch 0: before training): rows BatchNorm off/on, columns lr; solid
    pseudo-collapsed start, dashed normal start."""
    e1 = [r for r in res.values() if r["experiment"] == "E1" and r.get("history")]
    if not e1:
        return False
    plt = _plt()
    lrs = sorted({r["labels"]["lr"] for r in e1})
    heads = [h for h in ("linear", "relu2", "gelu2", "swish2") if any(r["labels"]["head"] == h for r in e1)]
    fig, axes = plt.subplots(2, len(lrs), figsize=(4.2 * len(lrs), 7), squeeze=False, sharex=True)
    for i, bn in enumerate((False, True)):
        for j, lr in enumerate(lrs):
            ax = axes[i][j]
            for c, head in enumerate(heads):
                for r in e1:
                    lab = r["labels"]
                    if (lab["head"], lab["bn"], lab["lr"]) != (head, bn, lr):
                        continue
                    ys = [r["start"]["h_std"]] + [h["h_std"] for h in r["history"]]
                    ax.plot(range(len(ys)), ys, color=f"C{c}", lw=0.9, alpha=0.75,
                            ls="-" if lab["init"] == "collapsed" else "--",
                            label=head if lab["init"] == "collapsed" and r["seed"] == 0 else None)
            ax.set_yscale("log")
            ax.set_title(f"BatchNorm {'on' if bn else 'off'}, lr {lr:g}", fontsize=9)
            ax.set_xlabel("epoch (0: before training)")
            if j == 0:
                ax.set_ylabel("h std (normalised projector output)")
    axes[0][0].legend(fontsize=7, title="solid: pseudo-collapsed\ndashed: normal start", title_fontsize=7)
    fig.suptitle("E1: per-seed h std (one line per seed)", fontsize=10)
    return _save(fig, path)


def figure_e2(res: Results, path: Path) -> bool:
    """E2's per-seed traces of lambda_min of H_eff, of G and of M (relative to H_eff's scale, symlog), with the
    paper's power-iteration estimate as points, one panel per run."""
    runs = [("normal", "swish2"), ("collapsed", "swish2"), ("collapsed", "relu2")]
    e2 = [r for r in res.values() if r["experiment"] == "E2" and r.get("curvature")]
    if not e2:
        return False
    plt = _plt()
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.4), squeeze=False)
    for ax, (init, head) in zip(axes[0], runs):
        for r in e2:
            if (r["labels"]["init"], r["labels"]["head"]) != (init, head):
                continue
            cs = r["curvature"]
            ep = [c["epoch"] for c in cs]
            for key, color, lab in (("lambda_min", "C3", "H_eff"), ("lambda_min_G", "C0", "G"),
                                    ("lambda_min_M", "C2", "M")):
                ax.plot(ep, [c[key] / c["scale"] for c in cs], color=color, lw=0.8, alpha=0.7,
                        label=lab if r["seed"] == 0 else None)
            ax.plot(ep, [c["power_lambda_min"] / c["scale"] for c in cs], "x", color="k", ms=3, alpha=0.5,
                    label="power iteration (paper)" if r["seed"] == 0 else None)
        ax.axhline(0.0, color="grey", lw=0.5)
        ax.set_yscale("symlog", linthresh=1e-4)
        ax.set_title(f"{init}/{head}", fontsize=10)
        ax.set_xlabel("epoch (0: before training)")
        ax.set_ylabel("lambda_min / max|lambda(H_eff)|")
    axes[0][0].legend(fontsize=7)
    fig.suptitle("E2: lambda_min of H_eff = G + M, of G and of M, per seed (exact blocks, float64)", fontsize=10)
    return _save(fig, path)


def figure_e5(res: Results, path: Path) -> bool:
    """E5: rotation probes (linear) on z and h and the compression against depth, per seed and the mean."""
    from mini import paper_numbers as paper

    e5 = [r for r in res.values() if r["experiment"] == "E5" and r.get("status") == "finished"]
    if not e5:
        return False
    plt = _plt()
    depths = sorted({r["labels"]["depth"] for r in e5})
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for key, color, lab in (("rot_linear_z", "C0", "z (backbone)"), ("rot_linear_h", "C3", "h (head)")):
        for d in depths:
            v = [100 * r["protocols"]["b_raw"][key] for r in e5 if r["labels"]["depth"] == d]
            ax1.plot([d] * len(v), v, "o", color=color, alpha=0.4, ms=4)
        means = [np.mean([100 * r["protocols"]["b_raw"][key] for r in e5 if r["labels"]["depth"] == d])
                 for d in depths]
        ax1.plot(depths, means, "-", color=color, label=f"ours, {lab}")
    ax1.plot(list(paper.E5_PROBES), [p.z for p in paper.E5_PROBES.values()], ":", color="C0", label="paper z")
    ax1.plot(list(paper.E5_PROBES), [p.h for p in paper.E5_PROBES.values()], ":", color="C3", label="paper h")
    ax1.set_xlabel("head depth (Linear layers)")
    ax1.set_ylabel("rotation probe, linear (test %)")
    ax1.legend(fontsize=7)
    for proto, color in (("a_paper", "C1"), ("b_raw", "C4"), ("d_untrained_nobias", "C7")):
        for d in depths:
            v = [r["protocols"][proto]["compression"] for r in e5 if r["labels"]["depth"] == d]
            ax2.plot([d] * len(v), v, "o", color=color, alpha=0.4, ms=4)
        ax2.plot(depths, [np.exp(np.mean(np.log([r["protocols"][proto]["compression"] for r in e5
                                                 if r["labels"]["depth"] == d]))) for d in depths],
                 "-", color=color, label=proto)
    ax2.plot(list(paper.E5_COMPRESSION), list(paper.E5_COMPRESSION.values()), ":", color="C1", label="paper")
    ax2.set_yscale("log")
    ax2.axhline(1.0, color="grey", lw=0.5)
    ax2.set_xlabel("head depth (Linear layers)")
    ax2.set_ylabel("orbit compression spread(z) / spread(h)")
    ax2.legend(fontsize=7)
    for ax in (ax1, ax2):
        ax.set_xticks(depths)
    fig.suptitle("E5: Swish + BatchNorm heads by depth (points: seeds; lines: mean, geometric for compression)",
                 fontsize=10)
    return _save(fig, path)


# What the ledger changes from the paper's set-up besides the per-run settings (scale.paper.deviations).
DEVIATIONS: tuple[str, ...] = (
    "digits (1,347 training images, 16 x 16, ResNet-18 of base width 16, head 256 wide / 128 out, predictor 64, "
    "batch 128) instead of CIFAR-10 at the paper's sizes; each run's settings against the paper's are listed per "
    "experiment below",
    "epochs on digits, chosen by pilot runs (CPU time per epoch, on the shared machine) to fit an estimated 3 hours "
    "of an idle 2-core CPU: E1 {E1} (paper 50), E2 {E2} (paper 100), "
    "E3/E4 {E3E4} (paper 50), E5 {E5} (paper 50); a digits epoch is 10 steps of 128 images (CIFAR-10's at batch 512: "
    "97)",
    "E1's h std (and E2's z statistics) on the trainer's fixed 256 unaugmented probe images at each epoch end; the "
    "official code averages them over the epoch's training batches",
    "E1's normal start only at BatchNorm off, lr 0.05 (the paper's grid starts every configuration pseudo-"
    "collapsed; the normal start is the control here)",
    "E2's curvature on a fixed probe of 16 view pairs (32 rows) drawn before training, exactly (per-sample blocks, "
    "float64), at the start and every epoch end; the paper: 20 + 20 power iterations in float32 on the first 5 "
    "training batches of each epoch (run here beside the exact spectra, on a float32 copy of the same blocks, so "
    "that what differs is the estimator itself)",
    "E2 has 5 seeds here (the paper: one run each)",
    "E3's probes: every training image x 4 quarter turns for fitting, the test split for scoring (the official "
    "code: one random turn per image); the class probe is this project's (not in the paper)",
    "E5 measured under E4's protocols a-d (protocol e, a second training per depth, is cut)",
    "Section 3's conditioning on E1's SimSiam runs only (per-sample objectives: the whole spectrum is exact); "
    "the SimCLR runs' coupled loss would need interior eigenvalues",
)


def ledger_command(command: str) -> tuple[str, str]:
    """The ledger's command without its ``--shard K/N`` and, if it had one, the words saying it ran in N shards."""
    words = command.split()
    i = words.index("--shard") if "--shard" in words else len(words)
    if i + 1 >= len(words):
        return command, ""
    n = words[i + 1].split("/")[-1]
    shards = f" (in {n} processes, `--shard 0/{n}` to `--shard {int(n) - 1}/{n}`)" if n.isdigit() else ""
    return " ".join(words[:i] + words[i + 2:]), shards


def _deviation_rows(res: Results) -> list[str]:
    rows: dict[tuple[str, str], tuple[str, set[str]]] = {}
    for r in res.values():
        for k, (p, o) in (r.get("deviations") or {}).items():
            exp = "E3/E4" if r["experiment"] == "E3E4" else r["experiment"]
            rows.setdefault((exp, k), (str(p), set()))[1].add(str(o))
    return [f"| {e} | {k} | {p} | {', '.join(sorted(o))} |" for (e, k), (p, o) in sorted(rows.items())]


def _cell(est: dict[str, Any]) -> str:
    return cell(Estimate(**est))


def _e2_table(res: Results) -> list[str]:
    L = ["| run | lambda_min(H) < 0 | lambda_min(G) < 0 | loss Hessian indefinite | power iteration < 0 | "
         "median abs(M)/abs(H) | lambda_min(M) < 0 | power iteration within 10 % of scale |",
         "|---|---|---|---|---|---|---|---|"]
    for init, head in (("normal", "swish2"), ("collapsed", "swish2"), ("collapsed", "relu2")):
        run = _e2(init, head)
        seeds = _seeds(res)

        def per_seed(fn, run=run, seeds=seeds):
            return cell(interval([fn(curvature(res, f"{run}-s{s}")) for s in seeds]))

        def frac_of(pred):
            return lambda cs: fraction([pred(c) for c in cs]) if cs else math.nan

        L.append(f"| {init}/{head} | {per_seed(frac_of(lambda c: c['negative']))} | "
                 f"{per_seed(frac_of(lambda c: c['negative_G']))} | {per_seed(frac_of(lambda c: c['loss_indefinite']))}"
                 f" | {per_seed(frac_of(lambda c: c['power_negative']))} | "
                 f"{per_seed(lambda cs: float(np.median([c['M_over_H'] for c in cs])) if cs else math.nan)} | "
                 f"{per_seed(frac_of(lambda c: c['lambda_min_M'] < -1e-9 * c['scale']))} | "
                 f"{per_seed(frac_of(lambda c: abs(c['power_lambda_min'] - c['lambda_min']) <= 0.1 * c['scale']))} |")
    return L


def _e5_table(res: Results) -> list[str]:
    from mini import paper_numbers as paper

    L = ["| depth | rotation linear, z (%) | on h (%) | paper z / h | compression, protocol a | protocol b | "
         "untrained | paper |", "|---|---|---|---|---|---|---|---|"]
    seeds = _seeds(res)
    for d in (1, 2, 3):
        name = [f"E5-depth{d}-s{s}" for s in seeds]
        z = cell(interval([100 * protocol(res, n, "b_raw", "rot_linear_z") for n in name]))
        h = cell(interval([100 * protocol(res, n, "b_raw", "rot_linear_h") for n in name]))
        comp = {p: cell(interval([protocol(res, n, p, "compression") for n in name]))
                for p in ("a_paper", "b_raw", "d_untrained_nobias")}
        pp = paper.E5_PROBES[d]
        L.append(f"| {d} | {z} | {h} | {pp.z:.2f} / {pp.h:.2f} | {comp['a_paper']} | {comp['b_raw']} | "
                 f"{comp['d_untrained_nobias']} | {paper.E5_COMPRESSION[d]:g}x |")
    return L


def write_report(out: Path, ledger: dict[str, Any]) -> Path:
    """``OUT/report.md`` and its figures from the ledger's units; the E4 study's report in ``OUT/e4_study``."""
    with locked(out):  # the units as they are on disk now (another shard may have added some)
        if (out / "results.json").is_file():
            ledger = dict(ledger, units=load_results(out / "results.json")["units"])
        return _write_report(out, ledger)


def _write_report(out: Path, ledger: dict[str, Any]) -> Path:
    from scale.e4_study import write_report as e4_report
    from scale.engine.checkpoint import atomic_write_json, atomic_write_text

    res: Results = ledger["units"]
    rows = [evaluate(c, res) for c in CLAIMS]
    figs = {name: fn(res, out / name) for name, fn in (("e1_std.png", figure_e1), ("e2_curvature.png", figure_e2),
                                                       ("e5_depth.png", figure_e5))}
    e4_seeds = sorted((r for r in res.values() if r["experiment"] == "E3E4" and r.get("status") == "finished"),
                      key=lambda r: r["seed"])
    if e4_seeds:
        study = [{k: r[k] for k in ("seed", "config", "git_commit", "protocols", "seconds")} for r in e4_seeds]
        atomic_write_json(out / "e4_study" / "results.json", {"dataset": ledger["dataset"], "seeds": study,
                                                              "command": ledger["command"]})
        e4_report(out / "e4_study", study, ledger["command"] + "  (the ledger's E3/E4 units)")
    commits = sorted({r["git_commit"] for r in res.values()})
    versions = sorted({json.dumps(r["versions"], sort_keys=True) for r in res.values()})
    seconds = sum(r["seconds"] for r in res.values())
    n_seeds = len(_seeds(res))
    counts = {v: sum(r["verdict"] == v for r in rows) for v in ("reproduced", "not reproduced",
                                                                  "inconclusive at this power", "not measured")}
    epochs = ledger.get("epochs", {})
    command, shards = ledger_command(ledger["command"])
    finished = sorted(r["finished_at"] for r in res.values())
    threads = ledger.get("threads")
    L = [f"# The paper's claims, replicated on {ledger['dataset']}: {n_seeds} seed{'s' if n_seeds != 1 else ''}", "",
         f"Generated by `{command}`{shards}; code commit{'s' if len(commits) > 1 else ''} {', '.join(commits)}; "
         f"versions {', '.join(versions)}. Every seed's values: `results.json`. Compute: {len(res)} units, "
         f"{seconds:.0f} s of wall time summed over them ({seconds / 3600:.2f} h; concurrent shards overlap), "
         f"{threads} torch thread{'s' if threads != 1 else ''} each, on {ledger.get('device')}; units finished from "
         f"{finished[0]} to {finished[-1]}.", "",
         "Each rule was written in `scale/replicate.py` (`CLAIMS`) before the ledger ran. A row reads one statistic "
         "per seed; ours is its mean [95 % t interval] over the seeds that gave a finite value (n; non-finite ones "
         "excluded and counted); the verdict is the rule applied to that interval (`scale/geometry/ledger.py`). The "
         "paper's figure is CIFAR-10 / ResNet-18 and never enters a verdict.", "",
         f"Verdicts: {counts['reproduced']} reproduced, {counts['not reproduced']} not reproduced, "
         f"{counts['inconclusive at this power']} inconclusive at this power, {counts['not measured']} not measured, "
         f"{len(NOT_RUN)} not run (E6).", "",
         "## The ledger", "",
         "| claim | paper | statistic | ours | control | rule | verdict |", "|---|---|---|---|---|---|---|"]
    for row in rows:
        ctrl = "; ".join(f"{c['label']}: {_cell(c['interval'])}" for c in row["controls"]) or "-"
        L.append(f"| **{row['id']}** {row['claim']} | {row['paper']} | {row['statistic']} ({row['unit']}) | "
                 f"{_cell(row['interval'])} | {ctrl} | {row['rule']} | **{row['verdict']}** |")
    for exp, (claim, paper_fig, why) in NOT_RUN.items():
        L.append(f"| **{exp}** {claim} | {paper_fig} | - | - | - | - | {why} |")
    L += ["", "Units: log10 ratio (0: no change; 0.3: 2x); points: percentage points of test accuracy; fraction: of "
          "the epoch-end measurements. E1 and E2 use SimSiam's negative cosine, whose loss Hessian is indefinite "
          "(outside Theorem 4.1 (1)'s PSD premise: the `loss Hessian indefinite` control measures it); E3-E5 use the "
          "official code's one-direction InfoNCE. E4's protocols are those of the E4 study (`docs/e4_study/report.md`;"
          " this ledger's own run of it: [`e4_study/report.md`](e4_study/report.md)): a = the paper's "
          "(head on normalised z, BatchNorm statistics from raw z), b = the head on the raw z it was trained on, "
          "c = a with BatchNorm re-estimated, d = untrained heads, e = a head trained on normalised z.", ""]
    if figs["e1_std.png"]:
        L += ["## E1: h std per seed", "", "![E1 h std](e1_std.png)", ""]
    if figs["e2_curvature.png"]:
        L += ["## E2: lambda_min of H_eff, G and M", "",
              "Fractions of the measurements (start and every epoch end), mean [95 % interval] over seeds. `G` alone "
              "negative means the negative curvature comes from the loss Hessian, not from the head's `M`.", "",
              *_e2_table(res), "", "![E2 curvature](e2_curvature.png)", ""]
    if figs["e5_depth.png"]:
        L += ["## E5: probes and compression against depth", "", *_e5_table(res), "", "![E5 depth](e5_depth.png)", ""]
    L += ["## Deviations from the paper's set-up", ""]
    L += [f"- {d.format(**{k: epochs.get(k, '-') for k in ('E1', 'E2', 'E3E4', 'E5')})}" for d in DEVIATIONS]
    L += ["", "Per run, the resolved settings against the paper's (`scale.paper.deviations`):", "",
          "| experiment | setting | paper | ours |", "|---|---|---|---|", *_deviation_rows(res), ""]
    L += ["## Per-seed values", "", "| claim | " + " | ".join(f"seed {s}" for s in _seeds(res)) + " |",
          "|---|" + "---|" * n_seeds]
    for row in rows:
        L.append(f"| {row['id']} | " + " | ".join("-" if not math.isfinite(v) else f"{v:.3g}" for v in row["values"])
                 + " |")
    L.append("")
    atomic_write_text(out / "report.md", "\n".join(L))
    ledger_out = dict(ledger, claims=rows, report_commit=code_commit())
    atomic_write_json(out / "results.json", ledger_out)
    return out / "report.md"


# --------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------

EXPERIMENTS = ("E1", "E2", "E3E4", "E5")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m scale.replicate", description="The paper's claims E1-E5 and Section "
                                "3 with seeds, 95 %% t intervals, controls and rules fixed before the runs.")
    p.add_argument("--dataset", default="digits", choices=("digits", "cifar10", "cifar100"),
                   help="default: digits (offline, CPU sizes); cifar10 at the paper's sizes")
    p.add_argument("--seeds", type=int, default=5, help="seeds 0 .. N-1 (default 5; --quick 2)")
    p.add_argument("--out", default="replication", help="output folder (default: replication)")
    p.add_argument("--data-dir", help="folder with the CIFAR archive (see scale.run)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="default: cpu")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1: on a shared 2-core CPU one "
                   "thread trained a digits epoch about 4x faster than two, which wait on each other's cores)")
    p.add_argument("--quick", action="store_true", help="the pipeline in about a minute: 2 seeds, a tiny model, "
                   "1-4 epochs of 2 steps (not comparable in value)")
    p.add_argument("--shard", default="0/1", metavar="K/N", help="run only the units whose index in the plan is K "
                   "modulo N: N processes with K = 0 .. N-1 and the same other arguments share one ledger (default "
                   "0/1: all)")
    p.add_argument("--redo", default="", help=f"comma-separated experiments ({', '.join(EXPERIMENTS)}) whose units "
                   "are measured again even when stored")
    p.add_argument("--report-only", action="store_true", help="rebuild report.md from OUT/results.json, run nothing")
    p.add_argument("--dry-run", action="store_true", help="print the plan (every unit and its scale.run arguments) "
                   "and the rules; run and write nothing")
    return p


def print_plan(args: argparse.Namespace) -> None:
    """The units of the plan with their ``scale.run`` arguments, then every claim's rule."""
    units = plan_units(args.dataset, args.seeds, args.quick, args.data_dir, args.threads)
    print(f"scale.replicate: {len(units)} units ({args.dataset}, {args.seeds} seeds{', quick' if args.quick else ''})")
    for u in units:
        how = "scale.e4_study seed" + (f", flags {' '.join(u.argv)}" if u.argv else "") if u.experiment == "E3E4" \
            else "python -m scale.run " + " ".join(u.argv)
        print(f"  {u.name}: {how}")
    print("rules:")
    for c in CLAIMS:
        print(f"  {c.id} {c.claim}: {c.statistic}; {c.rule.text()}")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.command = " ".join(["python -m scale.replicate", *(argv if argv is not None else sys.argv[1:])])
    if args.quick and "--seeds" not in (argv if argv is not None else sys.argv[1:]):
        args.seeds = QUICK_SEEDS
    for key in ("seeds", "threads"):
        if getattr(args, key) < 1:
            print(f"scale.replicate: error: --{key} must be a positive integer, got {getattr(args, key)}",
                  file=sys.stderr)
            return 2
    args.redo = tuple(e.strip() for e in args.redo.split(",") if e.strip())
    try:
        args.shard = parse_shard(args.shard)
    except ValueError as exc:
        print(f"scale.replicate: error: {exc}", file=sys.stderr)
        return 2
    bad = [e for e in args.redo if e not in EXPERIMENTS]
    if bad:
        print(f"scale.replicate: error: --redo {','.join(bad)}: unknown; valid: {', '.join(EXPERIMENTS)}",
              file=sys.stderr)
        return 2
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("scale.replicate: error: --device cuda was asked for but CUDA is not available here", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    from scale.engine.data import DataError
    from scale.engine.train import Interrupted

    if args.dry_run:
        print_plan(args)
        return 0
    out = Path(args.out)
    try:
        ledger = load_results(out / "results.json") if args.report_only else run(args)
        if not ledger["units"]:
            print(f"scale.replicate: error: no units in {out / 'results.json'}: nothing to report", file=sys.stderr)
            return 1
        ledger.setdefault("command", args.command)
        path = write_report(out, ledger)
    except ValueError as exc:
        print(f"scale.replicate: error: {exc}", file=sys.stderr)
        return 2
    except DataError as exc:
        print(f"scale.replicate: data error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"scale.replicate: error: cannot write {out} ({exc}); the units finished so far are in "
              f"{out / 'results.json'} if it exists: rerun the same command once fixed", file=sys.stderr)
        return 4
    except (KeyboardInterrupt, Interrupted):
        print(f"scale.replicate: interrupted; the units finished so far are in {out / 'results.json'}: rerun the "
              "same command to continue", file=sys.stderr)
        return 130
    print(f"scale.replicate: report {path}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
