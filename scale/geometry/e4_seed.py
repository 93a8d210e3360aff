r"""One seed of the E4 study (``python -m scale.e4_study``, and the ledger's E3/E4 units): the grid's E3 model
(``scale.experiments.catalog``; on digits its digits recipe) trained twice, the head on raw z and on normalised z,
measured under every protocol of ``scale.geometry.protocols``, with each training's premise "the network learned"
(``scale.runs.premise`` through ``scale.geometry.measure.learning_premise``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from scale.engine.data import load_dataset
from scale.engine.train import Trainer
from scale.experiments.catalog import plan
from scale.geometry.measure import CONTROL_SEED, GeometrySettings, head_fn, learning_premise
from scale.geometry.probes import ProbeSettings
from scale.geometry.protocols import NormalizedInput, measure, measure_model, model_features, z_probes
from scale.runs.run_report import git_commit


def e3_config(dataset: str, seed: int, epochs: int | None = None, device: torch.device | str = "cpu", **changes: Any):
    """The ``TrainConfig`` of the grid's E3E4 run (``scale.experiments.catalog``) for ``dataset`` and ``seed`` (on
    digits its digits recipe); ``changes``: more settings (a smaller run for a pipeline check)."""
    run = plan(dataset, "resnet18", quick=False, experiments=("E3E4",), seeds=1, epochs=epochs)[0]
    run.seed = seed
    return run.config(str(torch.device(device)), **changes)


def train(cfg, data, normalized_input: bool, device: torch.device | str = "cpu", run_dir: Path | None = None,
          ready: Callable[[Any, bool], None] | None = None):
    """Train the E3 model and return its ``scale.engine.train.Trainer`` (``.model``, ``.state.history``);
    ``normalized_input``: the projector sees ``normalize(z)`` (protocol e). The wrapper holds the same parameters,
    so the optimiser the trainer built still updates them. ``run_dir``: the trainer's checkpoints go there;
    ``ready(trainer, normalized_input)`` is called before training (a caller resumes it from its checkpoint there:
    ``scale.ledger.work``)."""
    trainer = Trainer(cfg, data, torch.device(device), run_dir=run_dir, progress=False, log=None)
    if normalized_input:
        trainer.model.projector = NormalizedInput(trainer.model.projector)
    try:
        if ready is not None:
            ready(trainer, normalized_input)
        trainer.fit()
    finally:
        close_augment(trainer)
    trainer.model.eval()
    return trainer


def close_augment(trainer) -> None:
    """Stop the trainer's augmentation worker processes now (the per-image CPU path), also when training was
    stopped: a study or a ledger builds a trainer per run and must not leave workers behind."""
    close = getattr(trainer.augment, "close", None)
    if close is not None:
        close()


def one_seed(cfg, data_dir: str | None, probe_images: int | None, log: Callable[[str], None],
             device: torch.device | str = "cpu", work: dict[str, Path] | None = None,
             ready: Callable[[Any, bool], None] | None = None) -> dict[str, Any]:
    """Every protocol's numbers for one seed of the E3 config ``cfg`` (two trainings: raw-z head, normalised-z head),
    and each training's premise "the network learned" (``premise``: ``scale.geometry.measure.learning_premise``);
    ``work`` ({"raw": folder, "normalized": folder}) and ``ready``: each training's checkpoint folder and its
    resume (``train``)."""
    data = load_dataset(cfg.dataset, data_dir, image_size=cfg.image_size if cfg.dataset == "digits" else None)
    data_dev = data.to(device)
    probe = ProbeSettings(train_images=probe_images, test_images=probe_images, seed=cfg.seed)
    out: dict[str, Any] = {"seed": cfg.seed, "config": cfg.to_dict(), "probe_images": probe_images,
                           "git_commit": git_commit()}
    t0 = time.perf_counter()
    where = work or {}
    trainer = train(cfg, data, normalized_input=False, device=device, run_dir=where.get("raw"), ready=ready)
    log(f"  seed {cfg.seed}: trained on raw z in {time.perf_counter() - t0:.0f} s")
    premise = {"raw": premise_record(trainer, data_dev)}
    results = measure_model(trainer.model, cfg, data_dev, probe, CONTROL_SEED + cfg.seed)
    t1 = time.perf_counter()
    trainer_e = train(cfg, data, normalized_input=True, device=device, run_dir=where.get("normalized"), ready=ready)
    log(f"  seed {cfg.seed}: trained on normalised z in {time.perf_counter() - t1:.0f} s")
    premise["normalized"] = premise_record(trainer_e, data_dev)
    model_e = trainer_e.model
    f_e = model_features(model_e.backbone, data_dev, GeometrySettings(), probe)
    inner = model_e.projector.head.eval()  # measured under the paper's protocol: normalize(inner(normalize(z)))
    results["e_trained_normalized"] = measure(head_fn(inner), True, f_e, probe, z_probes(f_e, probe))
    out.update(protocols=results, premise=premise, seconds=time.perf_counter() - t0)
    return out


def premise_record(trainer, data) -> dict[str, Any]:
    """A training's premise "the network learned", JSON-ready: the check and the class probes it rests on."""
    check, probe = learning_premise(trainer, data)
    return {"training": asdict(check), "class_probe": asdict(probe) if probe is not None else None}
