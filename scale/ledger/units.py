r"""The ledger's unit runner: one unit of the plan in, its record (a JSON-able dict) out, by its experiment.

    E1, E2   ``train_unit``: a ``scale.engine.train.Trainer`` with a ``LedgerProbe`` (E2: every epoch)
    E3E4     ``e3e4_unit``: one seed of ``scale.e4_study`` (two trainings, protocols a-e, probes)
    E5       ``e5_unit``: one depth's model, then E4's protocols a-d

``work``: the unit's work folder (``scale.ledger.work``); each training checkpoints there and resumes from what
it finds, so a unit stopped mid-way continues where it stopped. ``None``: no checkpoint (a unit in memory).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from scale.ledger.plan import CONTROL_SEED, PROBE_PAIRS, TANGENT_IMAGES, Unit
from scale.ledger.probe import LedgerProbe

HISTORY_KEYS = ("epoch", "loss", "h_std", "h_cond", "z_std", "z_cond", "rel_update_head", "rel_update_backbone",
                "drift_head", "drift_backbone")


def train_unit(unit: Unit, data, device: str, pairs: int = PROBE_PAIRS, work: Path | None = None,
               log: Callable[[str], None] = print) -> dict[str, Any]:
    """E1 / E2: train ``unit``'s run with a ``LedgerProbe`` (E2: every epoch, with the covariance statistics)."""
    import torch

    from scale.e4_study import close_augment, run_config
    from scale.engine.train import NonFiniteLoss, Trainer
    from scale.geometry.mechanism import ParameterDrift, timescale_record

    cfg = run_config(list(unit.argv), device)
    trainer = Trainer(cfg, data, torch.device(device), run_dir=_made(work), progress=False, log=None)
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
    return {"status": status, "config": trainer.cfg.to_dict(), "start": probe.start, "history": history,
            "curvature": probe.records, "curvature_seconds": probe.seconds,
            "timescale": timescale_record(trainer.state.history)}


def _made(work: Path | None) -> Path | None:
    from scale.ledger.work import make

    return None if work is None else make(work)


def _resume(trainer, name: str, log: Callable[[str], None]) -> None:
    """The trainer from its work folder's checkpoint if one is there (``scale.ledger.work.resume``), said in the log."""
    from scale.ledger.work import resume

    done = resume(trainer)
    if done:
        log(f"  {name}: resumed at epoch {done} of {trainer.cfg.epochs} from {trainer.checkpoint_path}")


def e3e4_unit(unit: Unit, dataset: str, epochs: int | None, data_dir: str | None, probe_images: int, device: str,
              log: Callable[[str], None], work: Path | None = None) -> dict[str, Any]:
    """E3 + E4: one seed of ``scale.e4_study`` (two trainings, protocols a-e, probes)."""
    from scale.e4_study import one_seed
    from scale.ledger.work import TRAININGS

    def trainer_ready(trainer, normalized: bool) -> None:
        _resume(trainer, f"{unit.name} ({TRAININGS[normalized]} z)", log)

    folders = None if work is None else {t: _made(work / t) for t in TRAININGS}
    return {"status": "finished", **one_seed(dataset, unit.seed, epochs, data_dir, probe_images, log, device,
                                              extra=unit.argv, work=folders, ready=trainer_ready)}


def e5_unit(unit: Unit, data, probe_images: int, device: str, work: Path | None = None,
            log: Callable[[str], None] = print) -> dict[str, Any]:
    """E5: train one depth's model, then E4's protocols a-d of it (``scale.geometry.protocols.measure_model``) and
    Proposition 5.2 on its head and on an untrained head of its layers (``tangent_gain_record``)."""
    from scale.e4_study import run_config, train
    from scale.geometry.measure import standardize
    from scale.geometry.mechanism import tangent_gain_record
    from scale.geometry.probes import ProbeSettings
    from scale.geometry.protocols import measure_model, untrained_heads

    cfg = run_config(list(unit.argv), device)
    model = train(cfg, data, normalized_input=False, device=device, run_dir=_made(work),
                  ready=lambda trainer, _: _resume(trainer, unit.name, log))
    probe = ProbeSettings(train_images=probe_images, test_images=probe_images, seed=unit.seed)
    data = data.to(device)
    images = data.test_x[:unit.measure.get("tangent_images", TANGENT_IMAGES)].float() / 255.0  # uint8 -> [0, 1]
    normalize = standardize(data.mean, data.std, data.test_x.device)
    untrained = untrained_heads(cfg, model.backbone.out_dim, CONTROL_SEED + unit.seed)["d_untrained_nobias"]
    return {"status": "finished", "config": cfg.to_dict(),
            "protocols": measure_model(model, cfg, data, probe, CONTROL_SEED + unit.seed),
            "tangent": tangent_gain_record(model.backbone, model.projector.eval(), images, normalize),
            "tangent_untrained": tangent_gain_record(model.backbone, untrained.to(images.device).eval(), images,
                                                     normalize)}


def run_unit(u: Unit, dataset: str, data, device: str, quick: bool, data_dir: str | None,
             log: Callable[[str], None], work: Path | None = None) -> dict[str, Any]:
    """One unit's record, by its experiment's runner; ``work``: its work folder (module docstring)."""
    from scale.ledger.plan import PROBE_IMAGES, QUICK_PROBE_IMAGES, QUICK_PROBE_PAIRS

    probe_images = QUICK_PROBE_IMAGES if quick else PROBE_IMAGES
    if u.experiment in ("E1", "E2"):
        return train_unit(u, data, device, QUICK_PROBE_PAIRS if quick else PROBE_PAIRS, work, log)
    if u.experiment == "E5":
        return e5_unit(u, data, probe_images, device, work, log)
    return e3e4_unit(u, dataset, u.measure.get("epochs"), data_dir, probe_images, device, log, work)
