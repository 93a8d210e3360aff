r"""The head-geometry monitor, free of any training framework: the project's measurements of a model that
somebody else's code trains, on a fixed probe every ``every`` steps.

The user gives the pieces their own training already has:

    backbone   x -> z       (n, d)     a module or any callable
    head       z -> h       (n, k)     a module (also the untrained control's architecture) or a callable
    loss       (h1, h2) -> L           their SSL loss on two views (lightly's ``NTXentLoss``, their own ...)
    probe      (x1, x2)                a fixed batch of view pairs: row i of x1 pairs with row i of x2

and at each measurement, in eval mode (BatchNorm on its running statistics), without gradients, under a forked
RNG (the training's stream is untouched), it records

    lambda_min, lambda_max, n_negative    of H_eff = d^2 L(h(z)) / dz^2 at z = [backbone(x1); backbone(x2)]
    M_over_H                              |M| / |H| (eq. (1): H_eff = G + M)
    z_spread, h_spread                    mean per-dimension std of the L2-normalised rows (``z_std`` of a run)
    compression, compression_control      mean orbit spread of z over that of h on fixed augmentation orbits,
                                          for the trained head and for an untrained head of the same layers
    knn_z, knn_input                      weighted kNN accuracy (%) of z and of the raw input (labels given)

``H_eff`` goes through ``scale.curvature.tracking.measure``, the trainer's own tracker route, with the user's
loss bound as ``Hb -> loss(Hb[:m], Hb[m:])``: a head that is not the project's row-wise ``MLPHead`` takes the
matrix-free path (``scale.EffectiveHessian``, Lanczos in float64, |M|/|H| a Hutchinson estimate of the Frobenius
norms), the project's heads the exact blockwise paths. The spread is ``mini.collapse_metrics.representation_std``,
the orbits' spread and compression ``mini.invariance`` (E4's protocol: z and h(z) L2-normalised), the control head
``scale.geometry.measure.untrained_copy`` and the kNN vote ``scale.geometry.probes.knn_correct`` (k = 20, T = 0.07):
one definition of each, shared with ``python -m scale.run``.

Cost: ``budget`` is the largest share of wall time (since the first call) the monitor may take; a measurement
that falls due while the monitor is over its share is skipped and counted (``skipped``), and every record
carries its own ``seconds``. Records stay in ``records``; with ``path`` they are also rewritten to a JSON-lines
file after each measurement, atomically, through ``scale.engine.disk`` (a symlink or a hard link there is refused,
and the records in memory are kept).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from mini.collapse_metrics import representation_std
from mini.invariance import normalized_features, orbit_spread
from scale.curvature.tracking import measure as measure_curvature
from scale.engine import disk
from scale.engine.modes import eval_mode
from scale.geometry.measure import untrained_copy
from scale.geometry.probes import knn_correct

CURVATURE_KEYS = ("lambda_min", "lambda_max", "n_negative", "n_negative_is", "M_over_H", "M_over_H_is", "condition",
                  "converged_min", "converged_max", "residual_min", "residual_max", "scale", "path", "loss")
FEATURE_BATCH = 512  # rows per forward pass when the kNN features are computed


class MonitorInputError(ValueError):
    """What the monitor was given cannot be measured; the message is one line naming the problem and the fix."""


def _modules(*fns: Any) -> list[nn.Module]:
    return [f for f in fns if isinstance(f, nn.Module)]


def check_pairs(probe: Any) -> tuple[Tensor, Tensor]:
    """``probe`` as ``(x1, x2)``: two tensors of one shape with at least 2 rows (BatchNorm and the loss's
    negatives need two rows per view)."""
    if not (isinstance(probe, (tuple, list)) and len(probe) == 2 and all(isinstance(t, Tensor) for t in probe)):
        got = type(probe).__name__ + (f" of {len(probe)}" if isinstance(probe, (tuple, list)) else "")
        raise MonitorInputError(f"the probe batch must be a pair of views (x1, x2), two tensors whose row i are two "
                                f"views of one image; got {got}")
    x1, x2 = probe
    if x1.shape != x2.shape or x1.ndim < 2 or len(x1) < 2:
        raise MonitorInputError(f"the probe's two views must have one shape (n >= 2 rows, ...); got {tuple(x1.shape)} "
                                f"and {tuple(x2.shape)}")
    return x1.detach().clone(), x2.detach().clone()


def check_training(**modules: Any) -> None:
    """Refuse to watch a model in eval mode: its BatchNorm would not be learning the statistics that eval-mode
    measurements read, and a loop that forgot ``model.train()`` is a bug the user wants to hear about."""
    off = [name for name, m in modules.items() if isinstance(m, nn.Module) and not m.training]
    if off:
        raise MonitorInputError(f"the monitor watches training, but the {' and '.join(off)} is in eval mode: call "
                                "model.train() before the training loop (the monitor switches to eval mode itself "
                                "for its measurements)")


@torch.no_grad()
def features(fn: Callable[[Tensor], Tensor], x: Tensor, device: torch.device, batch: int = FEATURE_BATCH) -> Tensor:
    """``fn`` of ``x`` in batches, rows flattened to 2-D, float64 on the CPU."""
    out = [fn(x[i : i + batch].to(device)).reshape(min(batch, len(x) - i), -1) for i in range(0, len(x), batch)]
    return torch.cat(out).double().cpu()


def knn_accuracy(train: Tensor, train_y: Tensor, test: Tensor, test_y: Tensor) -> float:
    """The weighted kNN vote's accuracy in percent (``scale.geometry.probes.knn_correct``)."""
    classes = int(max(train_y.max(), test_y.max())) + 1
    return 100 * float(knn_correct(train, train_y.cpu(), test, test_y.cpu(), classes).double().mean())


class Monitor:
    """See the module docstring. ``labelled``: ``(train_x, train_y, test_x, test_y)``, inputs as the backbone takes
    them, for the kNN accuracy (the training images are the neighbours, the test images are voted on);
    ``orbits``: ``(n_orbits, n_points, *input)`` fixed augmentation orbits for the compression; ``every``: measure
    at steps divisible by it; ``budget``: largest share of wall time (0 < budget <= 1); ``max_iter``/``tol``: the
    Lanczos settings (``scale.curvature.lanczos``; ``tol`` None: its float64 default)."""

    def __init__(self, backbone: nn.Module | Callable[[Tensor], Tensor], head: nn.Module | Callable[[Tensor], Tensor],
                 loss: Callable[[Tensor, Tensor], Tensor], probe: Sequence[Tensor], *,
                 labelled: Sequence[Tensor] | None = None, orbits: Tensor | None = None, every: int = 100,
                 budget: float = 0.1, max_iter: int = 120, tol: float | None = None,
                 path: str | Path | None = None, control_seed: int = 0):
        for name, f in (("backbone", backbone), ("head", head), ("loss", loss)):
            if not callable(f):
                raise MonitorInputError(f"the {name} must be a module or a callable, got {type(f).__name__}")
        if not (isinstance(every, int) and every >= 1):
            raise MonitorInputError(f"every must be a positive number of steps, got {every!r}")
        if not (isinstance(budget, (int, float)) and 0 < budget <= 1):
            raise MonitorInputError(f"budget is the largest share of wall time the monitor may take, in (0, 1]; "
                                    f"got {budget!r}")
        self.backbone, self.head, self.loss = backbone, head, loss
        self.x1, self.x2 = check_pairs(probe)
        self.labelled = None if labelled is None else self._check_labelled(labelled)
        self.orbits = None if orbits is None else self._check_orbits(orbits)
        self.control = untrained_copy(head, seed=control_seed).eval() if isinstance(head, nn.Module) else None
        self.every, self.budget, self.max_iter, self.tol = every, float(budget), max_iter, tol
        self.path = Path(path) if path is not None else None
        self.records: list[dict[str, Any]] = []
        self.seconds, self.skipped, self.t_start = 0.0, 0, None
        self.knn_input: float | None = None

    @staticmethod
    def _check_labelled(labelled: Sequence[Tensor]) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        if not (isinstance(labelled, (tuple, list)) and len(labelled) == 4):
            raise MonitorInputError("labelled must be (train_x, train_y, test_x, test_y)")
        tx, ty, vx, vy = labelled
        if len(tx) != len(ty) or len(vx) != len(vy) or len(tx) < 1 or len(vx) < 1:
            raise MonitorInputError(f"labelled images and labels must be non-empty and of equal counts; got "
                                    f"{len(tx)}/{len(ty)} training and {len(vx)}/{len(vy)} test")
        return tx, ty.long(), vx, vy.long()

    @staticmethod
    def _check_orbits(orbits: Tensor) -> Tensor:
        if not isinstance(orbits, Tensor) or orbits.ndim < 3 or orbits.shape[0] < 1 or orbits.shape[1] < 2:
            raise MonitorInputError(f"orbits must be a tensor (n_orbits, n_points >= 2, *input); got "
                                    f"{tuple(getattr(orbits, 'shape', ()))}")
        return orbits.detach().clone()

    # ---- cadence
    def due(self, step: int) -> bool:
        return step % self.every == 0

    def within_budget(self) -> bool:
        elapsed = time.perf_counter() - self.t_start if self.t_start is not None else 0.0
        return not self.records or self.seconds <= self.budget * elapsed

    def step(self, step: int, epoch: int | None = None) -> dict[str, Any] | None:
        """Call after each optimiser step: checks the model is training, then measures when ``step`` is due and
        the monitor is within its budget (else counts a skip). Returns the record, or ``None``."""
        if self.t_start is None:
            self.t_start = time.perf_counter()
        check_training(backbone=self.backbone, head=self.head)
        if not self.due(step):
            return None
        if not self.within_budget():
            self.skipped += 1
            return None
        return self.measure(step, epoch)

    def attach(self, optimizer: torch.optim.Optimizer):
        """The plain-PyTorch hook: measure after optimiser steps 0, every, 2 every, ... (a step post-hook, so a
        hand-written loop changes nothing). Returns the handle (``handle.remove()`` detaches)."""
        count = [0]

        def hook(opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
            self.step(count[0])
            count[0] += 1

        return optimizer.register_step_post_hook(hook)

    # ---- the measurement
    def _device(self) -> torch.device:
        for m in _modules(self.backbone, self.head):
            for p in m.parameters():
                return p.device
        return self.x1.device

    def _views_loss(self, m: int) -> Callable[[Tensor], Tensor]:
        def loss(Hb: Tensor) -> Tensor:  # rows [view 1; view 2] (scale.EffectiveHessian's convention)
            return self.loss(Hb[:m], Hb[m:])
        return loss

    def _check_loss(self, h: Tensor, m: int) -> None:
        try:
            value = self._views_loss(m)(h)
        except (RuntimeError, ValueError, IndexError, TypeError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise MonitorInputError(f"the head's output {tuple(h.shape)} (two views of {m} rows) does not fit the "
                                    f"loss: {first}") from None
        if not isinstance(value, Tensor) or value.numel() != 1:
            raise MonitorInputError(f"the loss of the head's output {tuple(h.shape)} must be a scalar; got "
                                    f"{tuple(getattr(value, 'shape', ())) or type(value).__name__}")

    def _compression(self, device: torch.device) -> dict[str, float]:
        """E4's compression factor on the orbits: mean spread of normalised z over that of normalised h(z)."""
        n_o, n_p = self.orbits.shape[:2]
        Z = features(self.backbone, self.orbits.flatten(0, 1), device).reshape(n_o, n_p, -1)
        out = {}
        for key, head in (("compression", self.head), ("compression_control", self.control)):
            if head is None:
                continue
            if isinstance(head, nn.Module):
                head = head.to(device)

            def fn(z: Tensor, head=head) -> Tensor:
                return head(z.to(device=device, dtype=torch.float32)).double().cpu()

            zn, hn = normalized_features(Z, fn)
            s_z, s_h = float(orbit_spread(zn).mean()), float(orbit_spread(hn).mean())
            out[key] = s_z / s_h if s_h > 0 else math.inf
        return out

    def measure(self, step: int = 0, epoch: int | None = None) -> dict[str, Any]:
        """One record at the model's current state (see the module docstring)."""
        if self.t_start is None:
            self.t_start = time.perf_counter()
        t0 = time.perf_counter()
        device = self._device()
        m = len(self.x1)
        cuda = [device] if device.type == "cuda" else []
        with torch.random.fork_rng(devices=cuda), eval_mode(*_modules(self.backbone, self.head)), torch.no_grad():
            z = self.backbone(torch.cat([self.x1, self.x2]).to(device))
            if z.ndim != 2:
                raise MonitorInputError(f"the backbone must map a batch to features (n, d); got {tuple(z.shape)}")
            h = self.head(z)
            if not isinstance(h, Tensor) or h.ndim != 2 or len(h) != 2 * m:
                raise MonitorInputError(f"the head must map z {tuple(z.shape)} to h (n, k); got "
                                        f"{tuple(getattr(h, 'shape', ())) or type(h).__name__}")
            self._check_loss(h, m)
            curv, _ = measure_curvature(z.double(), self.head, self._views_loss(m), block_diagonal=False,
                                        bn_mode="eval", dtype=torch.float64, max_iter=self.max_iter, tol=self.tol)
            rec: dict[str, Any] = {"step": step, **({"epoch": epoch} if epoch is not None else {})}
            rec.update({k: curv.get(k) for k in CURVATURE_KEYS})
            rec.update(z_spread=representation_std(z.double()), h_spread=representation_std(h.double()))
            if self.orbits is not None:
                rec.update(self._compression(device))
            if self.labelled is not None:
                tx, ty, vx, vy = self.labelled
                if self.knn_input is None:  # the raw input's neighbourhoods: the baseline, fixed
                    flat = lambda x: x  # noqa: E731
                    self.knn_input = knn_accuracy(features(flat, tx, device), ty, features(flat, vx, device), vy)
                rec.update(knn_z=knn_accuracy(features(self.backbone, tx, device), ty,
                                              features(self.backbone, vx, device), vy), knn_input=self.knn_input)
        rec["seconds"] = time.perf_counter() - t0
        self.seconds += rec["seconds"]
        rec["monitor_share"] = self.seconds / max(time.perf_counter() - self.t_start, 1e-9)
        self.records.append(rec)
        if self.path is not None:  # after the record is kept: a refused write loses nothing in memory
            disk.write_bytes(self.path, "".join(json.dumps(r, sort_keys=True) + "\n" for r in self.records).encode())
        return rec

    def scalars(self, rec: dict[str, Any]) -> dict[str, float]:
        """The record's numbers, for a logger (booleans and text left out, ``None`` left out)."""
        return {k: float(v) for k, v in rec.items()
                if isinstance(v, (int, float)) and not isinstance(v, bool) and k not in ("step", "epoch")}
