r"""The ledger's unit runner: one unit of the plan in, its record (a JSON-able dict) out, by its experiment.

    E1, E2   ``train_unit``: a ``scale.engine.train.Trainer`` with a ``LedgerProbe`` (E2: every epoch)
    E3E4     ``e3e4_unit``: one seed of ``scale.e4_study`` (two trainings, protocols a-g, probes)
    E5       ``e5_unit``: one depth's model, then E4's protocols a-d, f, g and Proposition 5.2's tangent gains

Each training's config is the unit's (``scale.ledger.plan.Unit.config``: its settings resolved as ``scale.run``
resolves them, at the ledger's thread count), and each record holds the premise "the network learned" of every
training it made (``premise``: ``scale.geometry.measure.learning_premise``, the loss against chance and z's class
probes against the backbone at initialisation), which the claims about trained networks read.

``work``: the unit's work folder (``scale.ledger.work``); each training checkpoints there and resumes from what
it finds, so a unit stopped mid-way continues where it stopped. ``None``: no checkpoint (a unit in memory).
"""

from __future__ import annotations

import platform
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from scale.engine.data_errors import DataError
from scale.engine.train import Interrupted, NonFiniteLoss, Trainer
from scale.experiments.catalog import deviations
from scale.geometry.e4_seed import close_augment, one_seed, premise_record, train
from scale.geometry.measure import standardize
from scale.geometry.mechanism import ParameterDrift, tangent_gain_record, timescale_record
from scale.geometry.probes import ProbeSettings
from scale.geometry.protocols import measure_model, untrained_heads
from scale.ledger.plan import (
    CONTROL_SEED,
    PROBE_IMAGES,
    PROBE_PAIRS,
    QUICK_PROBE_IMAGES,
    QUICK_PROBE_PAIRS,
    TANGENT_IMAGES,
    Unit,
)
from scale.ledger.probe import LedgerProbe
from scale.ledger.store import StoreError
from scale.ledger.work import TRAININGS, make, resume
from scale.runs.run_report import versions

HISTORY_KEYS = ("epoch", "loss", "h_std", "h_cond", "z_std", "z_cond", "rel_update_head", "rel_update_backbone",
                "drift_head", "drift_backbone")


def train_unit(unit: Unit, data, threads: int, pairs: int = PROBE_PAIRS, work: Path | None = None,
               log: Callable[[str], None] = print) -> dict[str, Any]:
    """E1 / E2: train ``unit``'s run with a ``LedgerProbe`` (E2: every epoch, with the covariance statistics)."""
    cfg = unit.config(threads)
    trainer = Trainer(cfg, data, torch.device(unit.device), run_dir=_made(work), progress=False, log=None)
    probe = LedgerProbe(trainer, "epoch" if unit.experiment == "E2" else "ends", covariance=unit.experiment == "E2",
                        pairs=pairs, mechanism=True, collapse=bool(unit.measure.get("collapse")))
    trainer.hooks += [ParameterDrift(), probe]
    status = "finished"
    try:
        _resume(trainer, unit.name, log)
        trainer.fit()
    except NonFiniteLoss:
        status = "non-finite loss"
    finally:
        close_augment(trainer)
    history = [{k: r.get(k) for k in HISTORY_KEYS} for r in trainer.state.history]
    record = {"status": status, "config": trainer.cfg.to_dict(), "start": probe.start, "history": history,
              "curvature": probe.records, "curvature_seconds": probe.seconds,
              "timescale": timescale_record(trainer.state.history)}
    if status == "finished":
        record["premise"] = {"raw": premise_record(trainer, data.to(unit.device))}
    return record


def _made(work: Path | None) -> Path | None:
    return None if work is None else make(work)


def _resume(trainer, name: str, log: Callable[[str], None]) -> None:
    """The trainer from its work folder's checkpoint if one is there (``scale.ledger.work.resume``), said in the log."""
    done = resume(trainer)
    if done:
        log(f"  {name}: resumed at epoch {done} of {trainer.cfg.epochs} from {trainer.checkpoint_path}")


def e3e4_unit(unit: Unit, threads: int, data_dir: str | None, probe_images: int, log: Callable[[str], None],
              work: Path | None = None) -> dict[str, Any]:
    """E3 + E4: one seed of ``scale.e4_study`` (two trainings, protocols a-g, probes, each training's premise)."""
    def trainer_ready(trainer, normalized: bool) -> None:
        _resume(trainer, f"{unit.name} ({TRAININGS[normalized]} z)", log)

    folders = None if work is None else {t: _made(work / t) for t in TRAININGS}
    return {"status": "finished", **one_seed(unit.config(threads), data_dir, probe_images, log, unit.device,
                                              work=folders, ready=trainer_ready)}


def e5_unit(unit: Unit, data, threads: int, probe_images: int, work: Path | None = None,
            log: Callable[[str], None] = print) -> dict[str, Any]:
    """E5: train one depth's model, then E4's protocols of it (``scale.geometry.protocols.measure_model``),
    Proposition 5.2 on its head and on an untrained head of its layers (``tangent_gain_record``), and its premise."""
    cfg = unit.config(threads)
    trainer = train(cfg, data, normalized_input=False, device=unit.device, run_dir=_made(work),
                    ready=lambda t, _: _resume(t, unit.name, log))
    model = trainer.model
    probe = ProbeSettings(train_images=probe_images, test_images=probe_images, seed=unit.seed)
    data = data.to(unit.device)
    images = data.test_x[:unit.measure.get("tangent_images", TANGENT_IMAGES)].float() / 255.0  # uint8 -> [0, 1]
    normalize = standardize(data.mean, data.std, data.test_x.device)
    untrained = untrained_heads(cfg, model.backbone.out_dim, CONTROL_SEED + unit.seed)["d_untrained_nobias"]
    return {"status": "finished", "config": cfg.to_dict(), "premise": {"raw": premise_record(trainer, data)},
            "protocols": measure_model(model, cfg, data, probe, CONTROL_SEED + unit.seed),
            "tangent": tangent_gain_record(model.backbone, model.projector.eval(), images, normalize),
            "tangent_untrained": tangent_gain_record(model.backbone, untrained.to(images.device).eval(), images,
                                                     normalize)}


def run_unit(u: Unit, data, threads: int, quick: bool, data_dir: str | None, log: Callable[[str], None],
             work: Path | None = None) -> dict[str, Any]:
    """One unit's record, by its experiment's runner; ``work``: its work folder (module docstring)."""
    probe_images = QUICK_PROBE_IMAGES if quick else PROBE_IMAGES
    if u.experiment in ("E1", "E2"):
        return train_unit(u, data, threads, QUICK_PROBE_PAIRS if quick else PROBE_PAIRS, work, log)
    if u.experiment == "E5":
        return e5_unit(u, data, threads, probe_images, work, log)
    return e3e4_unit(u, threads, data_dir, probe_images, log, work)


def unit_record(u: Unit, data, dataset: str, threads: int, quick: bool, data_dir: str | None,
                probe_images: int | None, commit: str, log: Callable[[str], None], work: Path | None = None
                ) -> dict[str, Any]:
    """The whole record of unit ``u`` as its file holds it, but for what the store adds from the file's name (plan,
    name, device, threads, key hash: ``scale.ledger.store.save_unit``): its measurements (``run_unit``; an error
    of the unit's own is recorded as its status, and the unit is run again next time), what it is (experiment,
    seed, labels, key), where and by what it was computed (``commit``, versions, machine, threads, seconds, time)
    and its deviations from the paper (``probe_images``: the plan's cap of the rotation probes, None at the
    default)."""
    t0 = time.perf_counter()
    try:
        rec = run_unit(u, data, threads, quick, data_dir, log, work)
    except (KeyboardInterrupt, Interrupted, OSError, DataError, StoreError):  # the store's, not the unit's
        raise
    except Exception as exc:  # one broken unit must not lose the rest; recorded, retried next time
        traceback.print_exc()
        rec = {"status": f"error: {type(exc).__name__}: {exc}", "config": {}}
    rec.update(name=u.name, experiment=u.experiment, seed=u.seed, labels=u.labels, key=u.key(), git_commit=commit,
               versions=versions(), machine=machine(), seconds=time.perf_counter() - t0,
               torch_threads=torch.get_num_threads(), finished_at=time.strftime("%Y-%m-%d %H:%M:%S"),
               deviations=deviations(rec["config"], u.paper, dataset, probe_images) if rec["config"] else {})
    return rec


def machine() -> dict[str, str]:
    """What selects the float kernels a unit ran on: torch's CPU capability (AVX2, AVX512, ...) and the processor's
    name (``scale.ledger.verify`` expects bitwise equality only on the same kind)."""
    name = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu_capability": str(torch.backends.cpu.get_cpu_capability()), "processor": name}
