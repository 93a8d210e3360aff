"""Trainer hooks: the callback protocol, and the built-in hooks that keep the training loop to forward,
loss, backward, step.

A hook subclasses ``Hook`` and overrides what it needs; each callback receives the live
``scale.engine.state.TrainState``. In one epoch the trainer calls, in the order of its hook list (the user's
hooks first, then the built-ins below):

    on_fit_start(state)     once, after the model, optimiser and probe batch exist (and after a resume)
    on_epoch_start(state)   ``state.epoch``; ``state.first_step`` is > 0 when a resume lands mid-epoch
    on_step_end(state)      after each optimiser step: ``state.x``, ``state.z``, ``state.h`` (detached),
                            ``state.loss`` (0-d tensor), ``state.global_step``
    on_epoch_end(state)     ``state.metrics`` is the epoch's record (loss, lr, h_std, ...) and already
                            ``state.history[-1]``: a hook adds numbers to it and they land in
                            metrics.jsonl and the checkpoint
    on_interrupt(state)     the run stops mid-epoch (Ctrl-C, ``Trainer.request_stop``); ``state.step`` is
                            the last finished step; ``Interrupted`` is raised next
    on_fit_end(state)       once, after the last epoch

Hooks that keep state across epochs implement ``state_dict``/``load_state_dict``; the checkpoint
stores them by kind (``ClassName#i``), so adding or dropping a stateless hook cannot misroute a state.

Built-ins (``Trainer`` appends them after the user's hooks; a checkpoint taken at an epoch end
therefore includes everything the user's hooks added to that epoch):

    ProgressBar   a tqdm bar per epoch, live only on a terminal
    Checkpointer  checkpoint.pt at every epoch end, and where a stop request lands mid-epoch
    MetricsFile   metrics.jsonl, the whole history rewritten atomically at every epoch end
    EpochLog      one line per epoch through the trainer's ``log``

Optional (``python -m scale.run ... --log tensorboard`` adds it after the curvature tracker):

    TensorBoardLog  run_dir/tensorboard/: the scalars of metrics.jsonl and the tracker's curvature
                    records, through ``torch.utils.tensorboard`` (the ``tensorboard`` extra)
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from scale.engine.checkpoint import atomic_write_text
from scale.engine.state import TrainState


class Saver(Protocol):
    """What ``Checkpointer`` needs of a trainer (``scale.engine.train.Trainer``)."""

    def save(self, epoch: int, step: int) -> Any: ...


class Hook:
    """Base class for trainer callbacks; override what you need (see the module docstring)."""

    def on_fit_start(self, state: TrainState) -> None: ...
    def on_epoch_start(self, state: TrainState) -> None: ...
    def on_step_end(self, state: TrainState) -> None: ...
    def on_epoch_end(self, state: TrainState) -> None: ...
    def on_interrupt(self, state: TrainState) -> None: ...
    def on_fit_end(self, state: TrainState) -> None: ...

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


EARLY_FRACTION = 5  # without a terminal, the first line comes after at most a fifth of the first epoch


class ProgressBar(Hook):
    """A per-step tqdm bar (steps, loss, images/s) when stderr is a terminal. Elsewhere (a log file, a pipe,
    a notebook's captured output) one line through ``log`` after the first ``log_every`` steps of the run (or
    the first fifth of an epoch, if shorter):
    their time and the epoch's estimated length, so that a slow machine is seen long before the first
    epoch line."""

    def __init__(self, log_every: int = 10, log: Callable[[str], None] | None = None) -> None:
        self.log_every = max(1, log_every)
        self.log = log
        self.bar = None
        self.early_said = False

    def on_epoch_start(self, state: TrainState) -> None:
        from tqdm import tqdm

        self.bar = tqdm(total=state.steps_per_epoch, initial=state.first_step,
                        desc=f"epoch {state.epoch + 1}/{state.config.epochs}", leave=False, dynamic_ncols=True,
                        disable=not sys.stderr.isatty())
        self.t0, self.images, self.steps = time.perf_counter(), 0, 0

    def on_step_end(self, state: TrainState) -> None:
        self.images += state.x.shape[0] // 2  # rows are [view1; view2]
        self.steps += 1
        if state.step % self.log_every == 0 or state.step == state.steps_per_epoch - 1:
            rate = self.images * state.world_size / max(time.perf_counter() - self.t0, 1e-9)
            self.bar.set_postfix(loss=f"{float(state.loss):.4f}", img_s=f"{rate:.0f}")
        self.bar.update(1)
        early = max(1, min(self.log_every, state.steps_per_epoch // EARLY_FRACTION))
        if self.bar.disable and not self.early_said and self.log is not None and self.steps >= early:
            self.early_said = True
            seconds = time.perf_counter() - self.t0
            per_epoch = seconds / self.steps * state.steps_per_epoch
            self.log(f"epoch {state.epoch + 1}/{state.config.epochs}: first {self.steps} of {state.steps_per_epoch} "
                     f"steps in {seconds:.1f} s (loss {float(state.loss):.4f}); about {per_epoch:.0f} s per epoch")

    def _close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def on_epoch_end(self, state: TrainState) -> None:
        self._close()

    def on_interrupt(self, state: TrainState) -> None:
        self._close()


class Checkpointer(Hook):
    """``Trainer.save`` at every epoch end (resume at the next epoch's step 0) and on a mid-epoch stop
    (resume at the step after the last finished one)."""

    def __init__(self, trainer: Saver) -> None:
        self.trainer = trainer

    def on_epoch_end(self, state: TrainState) -> None:
        self.trainer.save(state.epoch + 1, 0)

    def on_interrupt(self, state: TrainState) -> None:
        self.trainer.save(state.epoch, state.step + 1)


class MetricsFile(Hook):
    """``run_dir/metrics.jsonl``: one JSON record per finished epoch (keys sorted), rewritten atomically."""

    def __init__(self, run_dir: str | Path) -> None:
        self.path = Path(run_dir) / "metrics.jsonl"

    def on_epoch_end(self, state: TrainState) -> None:
        atomic_write_text(self.path, "".join(json.dumps(r, sort_keys=True) + "\n" for r in state.history))


class EpochLog(Hook):
    """One line per epoch: loss (against chance and with z's kNN accuracy where a hook put them in the record), lr,
    the collapse statistics of ``h`` and ``z``, throughput."""

    def __init__(self, log: Callable[[str], None]) -> None:
        self.log = log

    def on_epoch_end(self, state: TrainState) -> None:
        r = state.metrics
        chance = f" (chance {r['loss_chance']:.4f})" if "loss_chance" in r else ""
        knn = f"  knn z {r['knn_z']:.1f} %" if "knn_z" in r else ""  # scale.monitor.online.OnlineKnn
        self.log(f"epoch {state.epoch + 1:>3}/{state.config.epochs}  loss {r['loss']:.4f}{chance}{knn}  "
                 f"lr {r['lr']:.3g}  h_std {r['h_std']:.4f}  z_std {r['z_std']:.4f}  "
                 f"{r['images_per_s']:.0f} img/s  {r['epoch_seconds']:.1f} s")


TENSORBOARD_INSTALL = "pip install -e '.[tensorboard]'"
TRACKER_PREFIX = "hess_"  # what the curvature tracker copies into the epoch's record (its last measurement)


def summary_writer_class() -> Callable[..., Any]:
    """``torch.utils.tensorboard.SummaryWriter``; an ``ImportError`` naming the extra to install without it."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        raise ImportError(f"--log tensorboard needs the tensorboard package, which is not installed here: "
                          f"{TENSORBOARD_INSTALL}") from None
    return SummaryWriter


def _scalars(record: dict[str, Any], skip: tuple[str, ...]) -> dict[str, float]:
    """The numeric entries of a record (booleans, strings and None left out)."""
    return {k: float(v) for k, v in record.items()
            if k not in skip and isinstance(v, (int, float)) and not isinstance(v, bool)}


class TensorBoardLog(Hook):
    """``run_dir/tensorboard/``: what metrics.jsonl holds, as TensorBoard scalars, and the curvature records.

    At every epoch end, each numeric entry of the epoch's record (``loss``, ``lr``, ``h_std``, ...: the keys
    of metrics.jsonl) under its own name, at the record's ``step`` (optimiser steps done); each record of
    ``tracker`` (a ``scale.curvature.tracking.HessianTracker``) as ``curvature/<key>`` at the step it was
    measured, as soon as it exists. The record's ``hess_*`` entries, the tracker's last measurement copied
    there, are left out when the tracker is given: one tag per quantity (``curvature/lambda_min``). Put the
    hook after the hooks that add to the record (the tracker): ``scale.run`` does. Events are flushed at
    every epoch end and on a stop.

    Resume: a run continued from a checkpoint at global step G appends to the same folder with
    ``purge_step=G + 1``, so TensorBoard hides whatever a crashed process wrote after that checkpoint and
    each step appears once; into a folder without events (a run first trained without the hook) it
    writes the checkpoint's history and curvature records first. Under torch.distributed only rank 0
    writes. ``writer``: what builds the writer, ``writer(log_dir=..., purge_step=...)`` (default:
    ``SummaryWriter``; tests pass a recorder).
    """

    def __init__(self, run_dir: str | Path, tracker: Any = None, writer: Callable[..., Any] | None = None) -> None:
        self.log_dir = Path(run_dir) / "tensorboard"
        self.tracker = tracker
        self.make_writer = writer or summary_writer_class()
        self.writer: Any = None
        self.curvature_written = 0

    def on_fit_start(self, state: TrainState) -> None:
        if state.rank != 0:
            return
        resumed_at = state.global_step  # optimiser steps in the checkpoint (0: a new run)
        backfill = resumed_at > 0 and not any(self.log_dir.glob("events.out.tfevents.*"))
        self.writer = self.make_writer(log_dir=str(self.log_dir),
                                       purge_step=resumed_at + 1 if resumed_at > 0 and not backfill else None)
        if backfill:
            for record in state.history:
                self._epoch(record)
            self._curvature()
        else:  # the records up to the checkpoint are in the folder already
            self.curvature_written = len(self._curvature_records())

    def _curvature_records(self) -> list[dict[str, Any]]:
        return [] if self.tracker is None else self.tracker.records

    def _epoch(self, record: dict[str, Any]) -> None:
        for key, value in _scalars(record, ("step",)).items():
            if self.tracker is not None and key.startswith(TRACKER_PREFIX):
                continue  # the tracker's own records are logged as curvature/*: one tag per quantity
            self.writer.add_scalar(key, value, int(record["step"]))

    def _curvature(self) -> None:
        records = self._curvature_records()
        for record in records[self.curvature_written:]:
            for key, value in _scalars(record, ("step", "epoch")).items():
                self.writer.add_scalar(f"curvature/{key}", value, int(record["step"]))
        self.curvature_written = len(records)

    def on_step_end(self, state: TrainState) -> None:
        if self.writer is not None:
            self._curvature()

    def on_epoch_end(self, state: TrainState) -> None:
        if self.writer is not None:
            self._curvature()
            self._epoch(state.metrics)
            self.writer.flush()

    def on_interrupt(self, state: TrainState) -> None:
        if self.writer is not None:
            self.writer.flush()

    def on_fit_end(self, state: TrainState) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None
