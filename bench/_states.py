"""Network states for the curvature benchmarks: one SimSiam run on digits, snapshots along it, cached on disk.

A benchmark of curvature at one state says little about another: the spectrum's crowding at the ends, which sets
Lanczos' product count, changes as the head trains. ``training_states`` trains once (``scale.run``'s trainer) and
keeps, at the start and after each epoch, the probe's ``z`` and ``h`` and the projector's and predictor's weights:

    init      the network before its first step
    epoch e   after e epochs (the last of them "mid-training": a few epochs into a run the paper trains for far longer)

The probe is the first steps' augmented views, ``pairs`` of them: rows ``[view1; view2]``, the same images for
every snapshot (as the tracker's fixed probe). The cache (``torch.save`` of tensors only, read back with
``weights_only=True``: nothing in it is executed) lives outside the repository (``cache_dir``; several tens of MB a
snapshot at the paper's sizes), keyed by the network, the epochs, the probe size and the seed.
"""

from __future__ import annotations

import copy
import hashlib
import io
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from mini.atomic import atomic_write_bytes

# TrainConfig fields on top of digits' SimSiam: the official tracker's network (ResNet-18 of width 64, d = 512;
# projector 512-2048-2048 and predictor 2048-512-2048, SiLU, no bias, no BatchNorm: k = 2048)
OFFICIAL = {"head": "swish2", "backbone_width": 64, "head_width": 2048, "head_out": 2048, "pred_width": 512,
            "head_bn": False, "head_bias": False}
DIGITS = {"head": "swish3"}  # the project's digits SimSiam: d = 128, swish3 256/256/128, predictor 64


@dataclass(frozen=True)
class State:
    """One snapshot: the probe's ``z`` and ``h`` (2 pairs rows, [view1; view2]) and the head and predictor (eval)."""

    name: str
    z: torch.Tensor
    h: torch.Tensor
    projector: nn.Module
    predictor: nn.Module


def cache_dir() -> Path:
    """Where trained states are kept between runs: ``$BENCH_STATE_CACHE`` or the system's temporary folder."""
    return Path(os.environ.get("BENCH_STATE_CACHE") or Path(tempfile.gettempdir()) / "bench_curvature_states")


def _config(network: dict[str, Any], epochs: int, seed: int, threads: int):
    """The run's config, as ``python -m scale.run digits --method simsiam`` resolves it with ``network``'s fields."""
    from scale.engine.config import TrainConfig

    return TrainConfig.resolve("digits", "simsiam", device="cpu", epochs=epochs, seed=seed, threads=threads,
                               augment_path="batched", **network)


def _model(network: dict[str, Any], epochs: int, seed: int, threads: int):
    from scale.engine.model import SSLModel

    cfg = _config(network, epochs, seed, threads)
    return cfg, SSLModel(cfg)


def training_states(network: dict[str, Any], epochs: int, pairs: int, *, threads: int = 1, seed: int = 0,
                    log=print) -> list[State]:
    """``init`` and ``epoch 1 .. epochs`` of one SimSiam run on digits with ``network`` (cached; see the module)."""
    key = hashlib.sha256(repr((sorted(network.items()), epochs, pairs, seed)).encode()).hexdigest()[:16]
    path = cache_dir() / f"states-{key}.pt"
    if path.is_file():
        log(f"states: cached in {path}")
        saved = torch.load(path, weights_only=True)
    else:
        log(f"states: training {epochs} epochs (cache: {path})")
        saved = _train(network, epochs, pairs, threads, seed)
        buf = io.BytesIO()
        torch.save(saved, buf)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(path, buf.getvalue())
    _, model = _model(network, epochs, seed, threads)
    out = []
    for snap in saved["snapshots"]:
        projector, predictor = copy.deepcopy(model.projector), copy.deepcopy(model.predictor)
        projector.load_state_dict(snap["projector"])
        predictor.load_state_dict(snap["predictor"])
        out.append(State(snap["name"], snap["z"], snap["h"], projector.eval(), predictor.eval()))
    return out


def _train(network: dict[str, Any], epochs: int, pairs: int, threads: int, seed: int) -> dict:
    from scale.engine.data import load_dataset
    from scale.engine.hooks import Hook
    from scale.engine.modes import eval_mode
    from scale.engine.train import Trainer

    class Snapshots(Hook):
        def __init__(self):
            self.views: list[torch.Tensor] = []
            self.snapshots: list[dict] = []
            self.init = None

        def on_fit_start(self, state):
            self.init = copy.deepcopy(state.model).eval()

        def on_step_end(self, state):  # the probe: the first steps' views until ``pairs`` pairs are held
            if sum(v.shape[0] for v in self.views) // 2 < pairs:
                self.views.append(state.x.detach().clone())

        def probe(self) -> torch.Tensor:
            halves = [v.chunk(2) for v in self.views]
            v1, v2 = torch.cat([a for a, _ in halves])[:pairs], torch.cat([b for _, b in halves])[:pairs]
            if v1.shape[0] < pairs:
                raise ValueError(f"{pairs} probe pairs asked, the first epoch's views hold {v1.shape[0]}")
            return torch.cat([v1, v2])

        def keep(self, name, model):
            with torch.no_grad(), eval_mode(model):
                z, h, _ = model(self.probe())
            self.snapshots.append({"name": name, "z": z.detach().float(), "h": h.detach().float(),
                                   "projector": copy.deepcopy(model.projector.state_dict()),
                                   "predictor": copy.deepcopy(model.predictor.state_dict())})

        def on_epoch_end(self, state):
            if self.init is not None:
                self.keep("init", self.init)
                self.init = None
            self.keep(f"epoch {state.epoch + 1}", state.model)

    torch.set_num_threads(threads)
    cfg = _config(network, epochs, seed, threads)
    snaps = Snapshots()
    Trainer(cfg, load_dataset("digits"), torch.device("cpu"), hooks=[snaps], log=None).fit()
    return {"snapshots": snaps.snapshots}
