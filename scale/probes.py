r"""Probes on frozen features, backbone ``z`` versus head ``h`` (docs/paper.md, E3: the guillotine).

Rotation probe (the paper's protocol): every image turned by 0, 90, 180 and 270 degrees (exact quarter
turns, ``torch.rot90``: no interpolation), the frozen model's ``z`` and ``h`` computed (eval mode),
and a probe trained to predict the quarter turn (4 classes):

    linear   nn.Linear(dim, 4)
    MLP      Linear(dim, hidden) - ReLU - Linear(hidden, 4), hidden 256 on z and 512 on h
    both     cross-entropy, Adam lr 1e-3, 5 epochs over the rotated training images in shuffled
             mini-batches of 256; features standardised with the probe-training statistics

Probe-training images come from the training split, test images from the test split, so no base image
is seen on both sides. These two probes are minimal torch code: ``mini.invariance.mlp_probe`` is
full-batch Adam (5 epochs would be 5 steps) and ``mini.invariance.linear_probe`` a closed-form ridge
classifier, neither the paper's mini-batch protocol.

Where ``mini.invariance`` fits, it is used unchanged on the torch tensors: its ridge
``linear_probe`` gives the class-label probe (which the paper does not report) and a closed-form
rotation probe beside the paper's (a cross-reference that does not depend on optimiser noise).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from mini.invariance import linear_probe as ridge_probe
from scale.linprobe import features

QUARTER_TURNS = (0, 1, 2, 3)  # 0, 90, 180, 270 degrees


@dataclass(frozen=True)
class ProbeSettings:
    hidden_z: int = 256
    hidden_h: int = 512
    lr: float = 1e-3
    epochs: int = 5
    batch: int = 256
    train_images: int | None = 10_000  # cap on base images from the training split (x 4 rotations)
    test_images: int | None = None  # cap on base images from the test split (None: all)
    seed: int = 0

    def __post_init__(self) -> None:
        for key in ("hidden_z", "hidden_h", "epochs", "batch"):
            if getattr(self, key) < 1:
                raise ValueError(f"probe setting {key} must be a positive integer, got {getattr(self, key)}")
        for key in ("train_images", "test_images"):
            v = getattr(self, key)
            if v is not None and v < 2:
                raise ValueError(f"probe setting {key} must be >= 2 or None, got {v}")
        if not self.lr > 0:
            raise ValueError(f"probe lr must be positive, got {self.lr}")


def rotated(x_uint8: torch.Tensor, limit: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(images (4n, 3, S, S), quarter-turn labels (4n,))``, rotation-major, of the first ``limit`` images."""
    x = x_uint8[:limit] if limit is not None else x_uint8
    out = torch.cat([torch.rot90(x, k, dims=(-2, -1)) for k in QUARTER_TURNS])
    y = torch.arange(len(QUARTER_TURNS), device=x.device).repeat_interleave(len(x))
    return out, y


def train_probe(Xtr: torch.Tensor, ytr: torch.Tensor, Xte: torch.Tensor, yte: torch.Tensor, n_classes: int,
                hidden: int | None, settings: ProbeSettings) -> dict[str, float]:
    """A linear (``hidden=None``) or 2-layer MLP probe trained with the paper's protocol; accuracies in [0, 1]."""
    mu, sd = Xtr.mean(0), Xtr.std(0).clamp_min(1e-6)
    Xtr, Xte = (Xtr - mu) / sd, (Xte - mu) / sd
    gen = torch.Generator().manual_seed(settings.seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(settings.seed)
        d = Xtr.shape[1]
        probe = (nn.Linear(d, n_classes) if hidden is None
                 else nn.Sequential(nn.Linear(d, hidden), nn.ReLU(), nn.Linear(hidden, n_classes))).to(Xtr.device)
    opt = torch.optim.Adam(probe.parameters(), lr=settings.lr)
    with torch.enable_grad():
        for _ in range(settings.epochs):
            perm = torch.randperm(len(Xtr), generator=gen).to(Xtr.device)
            for i in range(0, len(Xtr), settings.batch):
                b = perm[i : i + settings.batch]
                loss = F.cross_entropy(probe(Xtr[b]), ytr[b])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
    with torch.no_grad():
        acc = [float((probe(X).argmax(1) == y).float().mean()) for X, y in ((Xtr, ytr), (Xte, yte))]
    return {"train": acc[0], "test": acc[1]}


def _ridge(Ftr: torch.Tensor, ytr: torch.Tensor, Fte: torch.Tensor, yte: torch.Tensor, n_classes: int
           ) -> dict[str, float]:
    """``mini.invariance.linear_probe`` (closed-form ridge) on the torch tensors, float64."""
    X = torch.cat([Ftr, Fte]).double()
    y = torch.cat([ytr, yte])
    tr, te = np.arange(len(Ftr)), np.arange(len(Ftr), len(X))
    r = ridge_probe(X, y, tr, te, n_classes=n_classes)
    return {"train": r.train_accuracy, "test": r.test_accuracy}


def run_probes(embed, normalize, train_x: torch.Tensor, train_y: torch.Tensor, test_x: torch.Tensor,
               test_y: torch.Tensor, classes: int, settings: ProbeSettings = ProbeSettings()) -> dict[str, Any]:
    """All probes of one frozen model. ``embed(normalised images) -> (z, h)`` (eval mode, no gradient),
    ``normalize(uint8) -> float``; images uint8 ``(N, 3, S, S)`` on the model's device."""
    n_tr = min(len(train_x), settings.train_images or len(train_x))
    n_te = min(len(test_x), settings.test_images or len(test_x))
    rx_tr, ry_tr = rotated(train_x, n_tr)
    rx_te, ry_te = rotated(test_x, n_te)
    ztr, htr = features(embed, rx_tr, normalize)
    zte, hte = features(embed, rx_te, normalize)
    rotation: dict[str, Any] = {}
    for name, Ftr, Fte, hidden in (("z", ztr, zte, settings.hidden_z), ("h", htr, hte, settings.hidden_h)):
        rotation[name] = {
            "linear": train_probe(Ftr, ry_tr, Fte, ry_te, 4, None, settings),
            "mlp": train_probe(Ftr, ry_tr, Fte, ry_te, 4, hidden, settings),
            "ridge": _ridge(Ftr, ry_tr, Fte, ry_te, 4),
        }
    # Class labels on the unrotated images (rows 0 .. n-1 of the rotated sets are the 0-degree copies).
    cy_tr, cy_te = train_y[:n_tr], test_y[:n_te]
    klass = {"z": _ridge(ztr[:n_tr], cy_tr, zte[:n_te], cy_te, classes),
             "h": _ridge(htr[:n_tr], cy_tr, hte[:n_te], cy_te, classes)}
    return {
        "settings": {**asdict(settings), "train_base_images": n_tr, "test_base_images": n_te,
                     "rotation_samples": {"train": len(rx_tr), "test": len(rx_te)},
                     "linear_and_mlp": "torch, paper protocol (Adam, mini-batches, standardised features)",
                     "ridge": "mini.invariance.linear_probe (closed form, ridge 1e-3) on the torch tensors"},
        "rotation": rotation,
        "class_ridge": klass,
    }


def format_probes(p: dict[str, Any]) -> list[str]:
    """Markdown lines for a run's report."""
    s = p["settings"]
    r, c = p["rotation"], p["class_ridge"]

    def pct(v: float) -> str:
        return f"{100 * v:.2f} %"

    lines = [
        f"### Probes on frozen features (E3): rotation 4-way on {s['rotation_samples']['train']} train / "
        f"{s['rotation_samples']['test']} test rotated images",
        "",
        "| probe (test accuracy) | backbone z | head h | z minus h |",
        "|---|---|---|---|",
    ]
    for key, label in (("linear", f"rotation, linear (Adam {s['lr']:g}, {s['epochs']} epochs)"),
                       ("mlp", f"rotation, MLP (hidden {s['hidden_z']} on z, {s['hidden_h']} on h)"),
                       ("ridge", "rotation, ridge (mini.invariance, closed form)")):
        z, h = r["z"][key]["test"], r["h"][key]["test"]
        lines.append(f"| {label} | {pct(z)} | {pct(h)} | {100 * (z - h):+.2f} points |")
    lines.append(f"| class labels, ridge (mini.invariance) | {pct(c['z']['test'])} | {pct(c['h']['test'])} | "
                 f"{100 * (c['z']['test'] - c['h']['test']):+.2f} points |")
    lines.append("")
    return lines
