"""The trainer: one SSL run (SimCLR, SimSiam, BYOL, VICReg, Barlow Twins) with hooks. Its settings are
``scale.engine.config.TrainConfig``, its model ``scale.engine.model.SSLModel``, its optimiser and learning-rate
schedule ``scale.engine.optim``.

Data path (the speed of the whole thing): the dataset sits on the device as uint8; a step indexes a
batch from a per-epoch permutation, augments it there in one batched call (``scale/engine/augment.py``) into
two views stacked ``[view1; view2]``, and runs one forward of ``SSLModel`` on the ``2B`` images: ``(z, h, p)``
(``scale/engine/model.py``).

Losses (each method's record in ``scale/engine/methods.py``, built from ``scale/engine/objectives.py``, mirrors of
``mini.losses``):
    simclr   nt_xent(h, tau)               on the global batch (all-gathered across ranks)
    simclr_paper  info_nce_cross_view(h, tau)  the official code's one-direction SimCLR loss, global batch
    simsiam  simsiam(p, targets=h)         = mini's simsiam(targets=stopgrad(h), predictor)(h)
    byol     byol(p, targets=h_target)     targets from the momentum (EMA) target network
    vicreg   vicreg(h), barlow   barlow(h) on the global batch

Determinism: the epoch permutation is drawn from a generator seeded by (seed, epoch) and the
augmentation's randomness is reseeded at every step from (seed, global step, rank), so a run resumed
from a checkpoint (epoch end, or mid-epoch after Ctrl-C) replays exactly the batches and views of the
uninterrupted run; on CPU its metrics are bitwise identical.

Hooks (``scale/engine/hooks.py``: where the curvature tracker and the paper's measurements plug in):
subclass ``Hook`` and pass instances to ``Trainer(hooks=[...])``; progress bar, checkpoints,
metrics.jsonl and the epoch line are built-in hooks appended after them. Each callback receives the
live ``TrainState``: ``state.model`` is the bare ``SSLModel`` (never the DDP wrapper);
``state.probe_x``/``state.probe_y`` a fixed batch of unaugmented, normalised training images (the
same in every epoch and after a resume); ``state.embed(x)`` returns ``(z, h)`` in eval mode without
gradients; ``state.objective(h)`` returns ``L`` as a function of embeddings with every stop-gradient
quantity bound at the current batch (what ``H_eff`` differentiates, ``mini.losses`` semantics).
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from mini.collapse_metrics import collapse_stats
from scale.engine import methods
from scale.engine.augment import build_views, resolve_augment_path
from scale.engine.checkpoint import atomic_write_json, load_checkpoint, save_checkpoint
from scale.engine.config import TrainConfig
from scale.engine.dataset import Dataset
from scale.engine.hooks import Checkpointer, EpochLog, Hook, MetricsFile, ProgressBar
from scale.engine.images import ImageFiles
from scale.engine.model import SSLModel, memory_format_for
from scale.engine.modules import is_spec
from scale.engine.optim import build_optimizer, lr_at
from scale.engine.signals import any_rank, stop_on_signals
from scale.engine.state import TrainState

# --------------------------------------------------------------------------------------------
# The loss of a step
# --------------------------------------------------------------------------------------------


def training_loss(cfg: TrainConfig, h: torch.Tensor, p: torch.Tensor | None, target_h: torch.Tensor | None
                  ) -> torch.Tensor:
    """The loss of one step from the forward's outputs: the objective bound at this batch, evaluated on
    the predictor's output ``p`` (already applied inside the model) or, without a predictor, on ``h``."""
    def full(t):  # losses in fp32 under bf16 autocast; float64 stays float64 (cross-checks)
        return t.float() if t is not None and t.dtype in (torch.bfloat16, torch.float16) else t

    h, p, target_h = full(h), full(p), full(target_h)
    method = methods.get(cfg.method)
    loss = method.objective(methods.ObjectiveContext(h, target_h, None, cfg, gather=True))
    return loss(p if method.predictor else h)


# --------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------


class NonFiniteLoss(RuntimeError):
    pass


class Interrupted(RuntimeError):
    pass


# Below this a contrastive loss's logits (cosines / temperature) and its gradients are scaled beyond 100x those of
# the usual 0.1-0.5: a non-finite loss is then named on the temperature first.
SMALL_TEMPERATURE = 1e-3


def _likely_cause(cfg: TrainConfig) -> str:
    causes = [f"the learning rate ({cfg.lr:g}, {cfg.optimizer}) is too high for this setup: try a smaller --lr"]
    if "temperature" in methods.get(cfg.method).recipe and cfg.temperature < SMALL_TEMPERATURE:
        causes.insert(0, f"the temperature ({cfg.temperature:g}) is tiny: the logits and gradients reach "
                         f"1/temperature = {1 / cfg.temperature:.3g}; try --temperature 0.1")
    if cfg.precision == "bf16":
        causes.append("bf16 overflow: try --precision fp32")
    hint = methods.get(cfg.method).failure_hint
    if hint:
        causes.append(hint)
    return "; or ".join(causes)


# --------------------------------------------------------------------------------------------
# Trainer
# --------------------------------------------------------------------------------------------


def _seed_for(*parts: int) -> int:
    """A 63-bit seed from integers (stable across runs and platforms)."""
    h = 1469598103934665603
    for p in parts:
        h = ((h ^ (int(p) & 0xFFFFFFFFFFFF)) * 1099511628211) % (1 << 63)
    return h


class Trainer:
    """One SSL run. ``fit()`` trains to ``config.epochs``; ``run_dir`` gets config.json (the resolved config,
    your own modules recorded), checkpoint.pt and metrics.jsonl. The end-of-run measurement, summary.json
    and report.md of a run directory come from ``scale.train`` (``python -m scale.run`` runs it).

    ``rank``/``world_size`` > 1: torch.distributed must be initialised; each rank takes its slice of
    every global batch (``batch_size`` is global) and the model is wrapped in DDP.

    ``backbone``/``head``/``predictor``: your own modules instead of the ones ``cfg`` names, as modules or
    ``module:callable`` specs (see ``SSLModel``); ``self.cfg`` records them (``TrainConfig.with_modules``).
    """

    def __init__(self, cfg: TrainConfig, data: Dataset, device: torch.device, run_dir: str | Path | None = None,
                 hooks: Sequence[Hook] = (), progress: bool = False, log: Callable[[str], None] | None = print,
                 *, backbone: nn.Module | str | None = None, head: nn.Module | str | None = None,
                 predictor: nn.Module | str | None = None):
        if isinstance(head, str) and not is_spec(head):  # a grammar spec given here is the run's head spec
            cfg, head = replace(cfg, head=head), None
        self.cfg, self.device, self.hooks = cfg, device, list(hooks)
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self.progress, self.log = progress, log or (lambda s: None)
        self.distributed = dist.is_available() and dist.is_initialized()
        # the augmentation path "auto" stands for here, kept in the config (checkpoint, config.json): a resume
        # continues the run's random stream of views on whatever machine it runs
        path, self.augment_why = resolve_augment_path(cfg.augment_path, device, threads=torch.get_num_threads(),
                                                      workers=cfg.augment_workers, distributed=self.distributed)
        cfg = self.cfg = replace(cfg, augment_path=path)
        self.rank = dist.get_rank() if self.distributed else 0
        self.world = dist.get_world_size() if self.distributed else 1
        if cfg.batch_size % self.world:
            raise ValueError(f"--batch-size {cfg.batch_size} is not divisible by the {self.world} processes")
        self.local_batch = cfg.batch_size // self.world

        train_x, train_y = data.train_x, data.train_y
        if cfg.train_subset is not None:  # (a streamed split stays on disk: ImageFiles.head)
            train_x = train_x.head(cfg.train_subset) if isinstance(train_x, ImageFiles) else train_x[: cfg.train_subset]
            train_y = train_y[: cfg.train_subset]
        self.data = data
        self.train_x, self.train_y = train_x.to(device), train_y.to(device)
        if cfg.batch_size > len(self.train_x):
            raise ValueError(f"--batch-size {cfg.batch_size} is larger than the {len(self.train_x)} training images")
        self.steps_per_epoch = len(self.train_x) // cfg.batch_size  # drop the last partial batch
        self.total_steps = self.steps_per_epoch * cfg.epochs
        self.warmup_steps = self.steps_per_epoch * cfg.warmup_epochs

        torch.manual_seed(cfg.seed)  # model initialisation
        self.model = SSLModel(cfg, backbone=backbone, head=head, predictor=predictor).to(device)
        cfg = self.cfg = self.model.config  # your own modules recorded (config.json, checkpoint)
        self.cuda = device.type == "cuda"
        # channels_last: cuDNN's fast convolutions on CUDA, oneDNN's on a CPU (a ResNet-18 step 1.14-1.30x faster
        # on a CPU at digits' and CIFAR's shapes; BENCHMARKS.md, the main job), where it is safe (memory_format_for)
        self.memory_format = memory_format_for(self.model, device)
        self.model = self.model.to(memory_format=self.memory_format)
        if self.distributed and cfg.sync_bn:
            self.model = nn.SyncBatchNorm.convert_sync_batchnorm(self.model)
        self.target: SSLModel | None = None
        if methods.get(cfg.method).ema_target:
            self.target = copy.deepcopy(self.model).requires_grad_(False)
            self.target.predictor = None
        self.forward_model: nn.Module = self.model
        if self.distributed:
            ids = [device.index] if self.cuda else None
            self.forward_model = nn.parallel.DistributedDataParallel(self.model, device_ids=ids)
        if cfg.compile:
            self.forward_model = torch.compile(self.forward_model)
        self.optimizer = build_optimizer(cfg, [p for p in self.model.parameters() if p.requires_grad], device)
        self.augment = build_views(cfg.augment, data.image_size, data.mean, data.std, device, cfg.augment_path,
                                   cfg.augment_workers)

        g = torch.Generator().manual_seed(_seed_for(cfg.seed, 7))
        probe_idx = torch.randperm(len(self.train_x), generator=g)[: min(cfg.probe_size, len(self.train_x))]
        probe_idx = probe_idx.to(device)
        self.state = TrainState(
            config=cfg, model=self.model, optimizer=self.optimizer, device=device,
            probe_x=self.augment.normalize(self.train_x[probe_idx]), probe_y=self.train_y[probe_idx],
            steps_per_epoch=self.steps_per_epoch, rank=self.rank, world_size=self.world, target=self.target,
        )
        self.start_epoch, self.start_step = 0, 0
        self.partial = {"loss_sum": 0.0, "steps": 0, "images": 0, "seconds": 0.0}
        self._stop_requested = False
        # After the user's hooks, so that an epoch-end checkpoint holds what they added to the epoch.
        self.builtin_hooks: list[Hook] = [Checkpointer(self)]
        if self.rank == 0 and self.run_dir is not None:
            self.builtin_hooks.append(MetricsFile(self.run_dir))
        self.builtin_hooks.append(EpochLog(self.log))
        if self.progress and self.rank == 0:
            self.builtin_hooks.append(ProgressBar(cfg.log_every, log))

    # ---------------------------------------------------------------- checkpoints

    @property
    def checkpoint_path(self) -> Path | None:
        return self.run_dir / "checkpoint.pt" if self.run_dir is not None else None

    def _checkpoint(self, epoch: int, step: int) -> dict[str, Any]:
        """``epoch``/``step``: where training continues (epoch-end checkpoints have step 0 of the next)."""
        return {
            "format": 1,
            "config": self.cfg.to_dict(),
            "epoch": epoch,
            "step": step,
            "global_step": self.state.global_step,
            "model": self.model.state_dict(),
            "target": self.target.state_dict() if self.target is not None else None,
            "optimizer": self.optimizer.state_dict(),
            "partial": dict(self.partial),
            "history": list(self.state.history),
            "hooks": dict(zip(self._hook_keys(), (h.state_dict() for h in self.hooks))),
        }

    def _hook_keys(self) -> list[str]:
        """``ClassName#i`` per hook: a resume matches saved hook states by kind, not by list position,
        so adding or dropping a stateless hook (a crash hook, a logger) cannot misroute a state."""
        seen: dict[str, int] = {}
        keys = []
        for hook in self.hooks:
            name = type(hook).__name__
            keys.append(f"{name}#{seen.get(name, 0)}")
            seen[name] = seen.get(name, 0) + 1
        return keys

    def save(self, epoch: int, step: int) -> None:
        if self.rank == 0 and self.checkpoint_path is not None:
            save_checkpoint(self.checkpoint_path, self._checkpoint(epoch, step))

    def load(self, path: str | Path) -> None:
        ck = load_checkpoint(path, map_location=self.device)
        self.model.load_state_dict(ck["model"])
        if self.target is not None:
            self.target.load_state_dict(ck["target"])
        self.optimizer.load_state_dict(ck["optimizer"])
        self.start_epoch, self.start_step = int(ck["epoch"]), int(ck["step"])
        self.state.global_step = int(ck["global_step"])
        self.state.history = list(ck["history"])
        self.partial = dict(ck["partial"])
        saved = ck["hooks"]
        for key, hook in zip(self._hook_keys(), self.hooks):
            if key in saved:
                hook.load_state_dict(saved[key])

    # ---------------------------------------------------------------- training

    def _autocast(self):
        if self.cfg.precision == "bf16":
            return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16)
        return torch.autocast(device_type=self.device.type, enabled=False)

    def _permutation(self, epoch: int) -> torch.Tensor:
        g = torch.Generator().manual_seed(_seed_for(self.cfg.seed, 11, epoch))
        return torch.randperm(len(self.train_x), generator=g).to(self.device)

    @torch.no_grad()
    def _ema_update(self) -> None:
        """BYOL: target <- tau target + (1 - tau) online, tau from ``ema`` to 1 by a cosine."""
        progress = self.state.global_step / max(1, self.total_steps)
        tau = 1.0 - (1.0 - self.cfg.ema) * (math.cos(math.pi * progress) + 1) / 2
        online = dict(self.model.named_parameters())
        for name, p in self.target.named_parameters():
            p.lerp_(online[name], 1.0 - tau)
        buffers = dict(self.model.named_buffers())
        for name, b in self.target.named_buffers():
            b.copy_(buffers[name])

    def step_loss(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Forward and loss of one batch ``x`` (local ``[view1; view2]``): ``(loss, z, h, target_h)``."""
        x = x.contiguous(memory_format=self.memory_format)
        with self._autocast():
            z, h, p = self.forward_model(x)
            target_h = None
            if self.target is not None:
                with torch.no_grad():
                    _, target_h, _ = self.target(x)
        return training_loss(self.cfg, h, p, target_h), z, h, target_h

    @torch.no_grad()
    def _grad_stats(self) -> dict[str, float]:
        """Gradient norms and relative update ``lr |g| / |w|`` of head and backbone (timescale separation)."""
        out = {}
        for name, module in (("head", self.model.projector), ("backbone", self.model.backbone)):
            ps = [p for p in module.parameters() if p.grad is not None]
            if not ps:
                continue
            g = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad) for p in ps]))
            w = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p) for p in ps]))
            out[f"grad_norm_{name}"] = float(g)
            out[f"rel_update_{name}"] = float(self.state.lr * g / w.clamp_min(1e-30))
        return out

    def _check_finite(self, losses: list[tuple[int, int, torch.Tensor]]) -> None:
        if not losses:
            return
        values = torch.stack([v for _, _, v in losses]).double().cpu()
        for v in values.tolist():  # sequential float64 sum: the same however the epoch was cut by resumes
            self.partial["loss_sum"] += v
        self.partial["steps"] += len(losses)
        bad = (~torch.isfinite(values)).nonzero()
        if len(bad):
            epoch, step, v = losses[int(bad[0])]
            where = (f"epoch {epoch + 1}, step {step + 1} of {self.steps_per_epoch} "
                     f"(global step {epoch * self.steps_per_epoch + step + 1})")
            if self.checkpoint_path is not None and self.start_epoch_done > 0:
                kept = (f"The last good checkpoint ({self.checkpoint_path}, end of epoch {self.start_epoch_done}) "
                        "is kept")
            else:
                kept = "No checkpoint was written (the failure came before the first epoch end)"
            raise NonFiniteLoss(f"loss became {float(v)} at {where}; likely cause: {_likely_cause(self.cfg)}. {kept}.")

    def _epoch_metrics(self, epoch: int) -> dict[str, float]:
        p = self.partial
        zs, hs = self.state.embed(self.state.probe_x)
        if not (torch.isfinite(zs).all() and torch.isfinite(hs).all()):  # the last step's update blew up
            raise NonFiniteLoss(
                f"the model's outputs became non-finite after the last step of epoch {epoch + 1}; likely cause: "
                f"{_likely_cause(self.cfg)}. " + (f"The last good checkpoint ({self.checkpoint_path}, end of epoch "
                f"{self.start_epoch_done}) is kept." if self.checkpoint_path is not None and self.start_epoch_done
                else "No checkpoint was written (the failure came before the first epoch end)."))
        z_std, z_cond = collapse_stats(zs.double())  # E1's collapse statistics (mini.collapse_metrics)
        h_std, h_cond = collapse_stats(hs.double())
        loss = p["loss_sum"] / max(1, p["steps"])
        if self.distributed:  # mean loss over ranks (each rank saw its slice)
            t = torch.tensor([loss], dtype=torch.float64, device=self.device)
            dist.all_reduce(t)
            loss = float(t) / self.world
        return {
            "epoch": epoch + 1, "step": self.state.global_step, "loss": loss, "lr": self.state.lr,
            "h_std": h_std, "h_cond": h_cond, "z_std": z_std, "z_cond": z_cond,
            "images_per_s": p["images"] * self.world / max(p["seconds"], 1e-9), "epoch_seconds": p["seconds"],
            **({"initial_loss": p["initial_loss"]} if "initial_loss" in p else {}),  # the first epoch only
        }

    def request_stop(self) -> None:
        """Finish the current step, save a checkpoint, and raise ``Interrupted`` (what Ctrl-C does)."""
        self._stop_requested = True

    def _emit(self, event: str) -> None:
        """Call ``event`` on every hook: the user's, then the built-ins."""
        for hook in (*self.hooks, *self.builtin_hooks):
            getattr(hook, event)(self.state)

    def _should_stop(self, step: int) -> bool:
        """The stop flag; under DDP agreed by all ranks at the steps they all check (scale/engine/signals.py)."""
        if self.distributed and (step % max(1, self.cfg.log_every) == 0 or step == self.steps_per_epoch - 1):
            self._stop_requested = any_rank(self._stop_requested, self.device)
        elif self.distributed:
            return False
        return self._stop_requested

    def fit(self) -> TrainState:
        if self.rank == 0 and self.run_dir is not None:  # the run's resolved config, own modules recorded
            atomic_write_json(self.run_dir / "config.json", self.cfg.to_dict())
        try:
            with stop_on_signals(self.request_stop):  # SIGINT/SIGTERM: finish the step, save, stop
                self.state.epoch, self.state.first_step = self.start_epoch, self.start_step  # where (re)started
                self._emit("on_fit_start")
                self._fit_loop()
                self._emit("on_fit_end")
        finally:  # however fit ends (finished, interrupted, non-finite, an error): no worker process outlives it
            self.augment.close()
        return self.state

    def _batch_indices(self, perm: torch.Tensor, step: int) -> torch.Tensor:
        """This process's slice of the global batch of ``step`` (``batch_size`` is global)."""
        start = step * self.cfg.batch_size + self.rank * self.local_batch
        return perm[start : start + self.local_batch]

    def _stream(self, perm: torch.Tensor, first: int) -> Iterator[torch.Tensor] | None:
        """A streamed training split (``ImageFiles``): the epoch's batches from ``first`` on, decoded ahead in
        worker processes; ``None`` for a split held in memory (indexed at each step)."""
        if not isinstance(self.train_x, ImageFiles):
            return None
        return self.train_x.batches([self._batch_indices(perm, s).cpu() for s in range(first, self.steps_per_epoch)])

    def _step(self, epoch: int, step: int, perm: torch.Tensor, stream: Iterator[torch.Tensor] | None = None) -> None:
        """One optimiser step: batch, augment, forward, loss, backward, step (and BYOL's EMA)."""
        cfg, state = self.cfg, self.state
        state.lr = lr_at(cfg, state.global_step, self.total_steps, self.warmup_steps)
        for group in self.optimizer.param_groups:
            group["lr"] = state.lr
        idx = self._batch_indices(perm, step)
        seed = _seed_for(cfg.seed, 13, state.global_step, self.rank)
        torch.manual_seed(seed)
        x_uint8 = next(stream) if stream is not None else self.train_x[idx]
        x = self.augment.views(x_uint8, seed=seed)  # (2b, 3, S, S), rows [view1; view2]
        if step + 1 < self.steps_per_epoch and stream is None:  # the CPU path augments the next batch meanwhile
            nxt = self._batch_indices(perm, step + 1)
            self.augment.prefetch(self.train_x[nxt], _seed_for(cfg.seed, 13, state.global_step + 1, self.rank))
        loss, z, h, target_h = self.step_loss(x)
        if state.global_step == 0:  # the loss before any update: the baseline of scale.runs.premise
            self.partial["initial_loss"] = float(loss.detach())  # kept in the checkpoint: a resume keeps it
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if step == self.steps_per_epoch - 1:
            state.metrics.update(self._grad_stats())
        self.optimizer.step()
        if self.target is not None:
            self._ema_update()
        state.global_step += 1
        state.step, state.loss = step, loss.detach()
        state.x, state.z, state.h, state.target_h = x, z.detach(), h.detach(), target_h

    def _fit_loop(self) -> None:
        cfg, state = self.cfg, self.state
        self.model.train()
        self.start_epoch_done = self.start_epoch
        for epoch in range(self.start_epoch, cfg.epochs):
            first = self.start_step if epoch == self.start_epoch else 0
            state.epoch, state.first_step, state.metrics = epoch, first, {}
            if first == 0:
                self.partial = {"loss_sum": 0.0, "steps": 0, "images": 0, "seconds": 0.0}
            perm = self._permutation(epoch)
            self._emit("on_epoch_start")
            pending: list[tuple[int, int, torch.Tensor]] = []  # losses not yet checked (one sync per log_every)
            t0, images = time.perf_counter(), 0
            stream = self._stream(perm, first)
            for step in range(first, self.steps_per_epoch):
                self._step(epoch, step, perm, stream)
                pending.append((epoch, step, state.loss))
                images += self.local_batch
                if not self.cuda or len(pending) >= cfg.log_every or step == self.steps_per_epoch - 1:
                    self._check_finite(pending)
                    pending = []
                for hook in (*self.hooks, *self.builtin_hooks):
                    hook.on_step_end(state)
                if self._should_stop(step) and step + 1 < self.steps_per_epoch:
                    self._check_finite(pending)
                    self._accumulate(images, time.perf_counter() - t0)
                    self._emit("on_interrupt")  # the Checkpointer saves (epoch, step + 1)
                    raise Interrupted(f"interrupted at epoch {epoch + 1}, step {step + 1}")
            self._accumulate(images, time.perf_counter() - t0)
            record = self._epoch_metrics(epoch)
            record.update(state.metrics)  # the last step's gradient statistics
            state.metrics = record
            state.history.append(record)  # hooks add to the record in place
            self.partial = {"loss_sum": 0.0, "steps": 0, "images": 0, "seconds": 0.0}
            self._emit("on_epoch_end")  # the user's hooks, then checkpoint, metrics.jsonl, the epoch line
            self.start_epoch_done = epoch + 1
            if self._stop_requested:
                raise Interrupted(f"interrupted at the end of epoch {epoch + 1}")

    def _accumulate(self, images: int, seconds: float) -> None:
        self.partial["images"] += images
        self.partial["seconds"] += seconds
