r"""Orbit geometry at scale (``docs/paper.md``, E4): backbone ``z`` versus head ``h`` on rotation orbits of real images.

Protocol (``docs/paper.md``, E4), all on the training device:

    images   ``classes`` x ``per_class`` held-out images (test split; the first ``per_class`` images of
             each of the first ``classes`` labels, so every run of a grid sees the same orbits);
             the paper's 5 x 3 = 15 is the default, any number works
    orbits   each image rotated by 12 angles, 0 to 330 degrees (``scale.orbits.orbit_batch_at``)
    sweep    each image rotated by 10 angles, 0 to 45 degrees: the path along which kappa is taken
             (``GeometrySettings.for_family``: the same for hue, saturation or blur across the family's
             range, E6)
    z        backbone output (eval mode: BatchNorm running statistics), L2-normalised
    h        the head applied to the normalised z, then L2-normalised (``mini.invariance.normalized_features``)
    raw      beside the protocol: the head on the raw z it was trained on (its BatchNorm running
             statistics come from there), then normalised (``h_raw_input``, ``compression_raw_input``)
    control  a fresh, untrained head of the same architecture (same spec, widths, bias, BatchNorm and
             initialisation scheme, its own seed) applied to the same z: the paper's negative control;
             and the same control without biases (``h_untrained_nobias``): on unit-norm z a default bias
             can outweigh ``W1 z`` and compress orbits by itself

The metrics are ``mini.invariance``'s array-API functions called on the torch tensors (float64):
orbit spread, D_intra, D_inter, ratio, kappa, each a ``Stat`` (mean, population std, n), and the
compression factor ``mean spread(z) / mean spread(h)``. Shapes: orbit features ``(n_orbits, 12, dim)``,
sweep features ``(n_orbits, 10, dim)``, labels ``(n_orbits,)``.
"""

from __future__ import annotations

import contextlib
import io
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from mini.invariance import OrbitGeometry, compression, l2_normalize, normalized_features, orbit_geometry
from scale.heads import build_head, collapse_init_
from scale.orbits import E4_ROTATION_ANGLES, E4_SWEEP_ANGLES, check_family, family_parameters, orbit_batch_at
from scale.summary import GeometrySummary, RotationProbes

CONTROL_SEED = 12345  # the untrained control head's initialisation seed (fixed: the same control in every run)


@dataclass(frozen=True)
class GeometrySettings:
    classes: int = 5
    per_class: int = 3
    family: str = "rotation"  # any of scale.orbits.FAMILIES (hue, saturation, blur: for later use)
    values: tuple[float, ...] = E4_ROTATION_ANGLES  # the orbit's parameter values (degrees for rotation)
    sweep_values: tuple[float, ...] = E4_SWEEP_ANGLES  # the kappa sweep's, equally spaced
    split: str = "test"
    control_seed: int = CONTROL_SEED
    batch: int = 512

    def __post_init__(self) -> None:
        if self.classes < 2:
            raise ValueError(f"orbit geometry needs at least 2 classes (D_inter), got {self.classes}")
        if self.per_class < 1:
            raise ValueError(f"orbit geometry needs at least 1 image per class, got {self.per_class}")
        check_family(self.family)
        if len(self.values) < 2 or len(self.sweep_values) < 3:
            raise ValueError("orbits need >= 2 parameter values and the kappa sweep >= 3")
        if self.split not in ("train", "test"):
            raise ValueError(f"split must be 'train' or 'test', got {self.split!r}")

    @classmethod
    def for_family(cls, family: str, points: int = 12, sweep_points: int = 10, **kw: Any) -> GeometrySettings:
        """E4's rotation orbits (0-330 degrees, sweep 0-45) or, for another family, ``points`` values across
        its range (E6) and a ``sweep_points`` sweep across the same range."""
        if family == "rotation":
            return cls(**kw)
        vals = family_parameters(family, points).tolist()
        sweep = family_parameters(family, sweep_points).tolist()
        return cls(family=family, values=tuple(vals), sweep_values=tuple(sweep), **kw)


def parse_orbits(text: str) -> tuple[int, int]:
    """``"5x3"`` -> (5 classes, 3 images per class)."""
    try:
        c, i = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise ValueError(f"--orbits takes CLASSESxIMAGES, e.g. 5x3 (the paper's 15 orbits), got {text!r}") from None
    if c < 2 or i < 1:
        raise ValueError(f"--orbits needs >= 2 classes and >= 1 image per class, got {text!r}")
    return c, i


def orbit_images(x_uint8: torch.Tensor, y: torch.Tensor, classes: int, per_class: int
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(images in [0, 1] (n, 3, S, S), labels (n,), indices (n,))``: the first ``per_class`` images of
    each of the first ``classes`` labels present, class-major."""
    present = torch.unique(y).tolist()
    if len(present) < classes:
        raise ValueError(f"orbit geometry asks for {classes} classes, the split has {len(present)}")
    idx = []
    for c in present[:classes]:
        where = torch.nonzero(y == c).flatten()[:per_class]
        if len(where) < per_class:
            raise ValueError(f"class {c} has {len(where)} images in the split, {per_class} asked for")
        idx.append(where)
    idx_t = torch.cat(idx)
    return x_uint8[idx_t].float() / 255.0, y[idx_t], idx_t


@contextlib.contextmanager
def eval_mode(*modules: nn.Module):
    """The modules in eval mode (BatchNorm on running statistics) inside the block, each training flag
    restored after it, whatever happens inside."""
    was = [m.training for m in modules]
    for m in modules:
        m.eval()
    try:
        yield
    finally:
        for m, w in zip(modules, was):
            m.train(w)


@torch.no_grad()
def _backbone_features(backbone: nn.Module, x01: torch.Tensor, mean: torch.Tensor, std: torch.Tensor, batch: int
                       ) -> torch.Tensor:
    """Backbone output of images in [0, 1] (normalised with the dataset's statistics), float64 (N, d)."""
    out = [backbone((x01[i : i + batch] - mean) / std).double() for i in range(0, len(x01), batch)]
    return torch.cat(out)


def control_head(cfg: Any, d: int, seed: int = CONTROL_SEED, bias: bool | None = None) -> nn.Module:
    """An untrained head of the run's architecture (``cfg`` is the run's ``TrainConfig``; ``bias`` overrides
    its bias setting), drawn from its own generator so that building it leaves the global RNG untouched."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        use_bias = cfg.head_bias if bias is None else bias
        head = build_head(cfg.head, d, cfg.head_out, cfg.head_width, bias=use_bias, batchnorm=cfg.head_bn,
                          out_batchnorm=cfg.head_out_bn, style=getattr(cfg, "head_style", "grammar"))
    if cfg.init == "collapsed":
        collapse_init_(head)
    return head


@dataclass
class GeometryResult:
    settings: dict[str, Any]
    z: OrbitGeometry
    h: OrbitGeometry
    h_untrained: OrbitGeometry
    h_untrained_nobias: OrbitGeometry
    h_raw_input: OrbitGeometry
    labels: list[int]
    image_indices: list[int]
    arrays: dict[str, np.ndarray] = field(repr=False, default_factory=dict)

    def summary(self) -> GeometrySummary:
        """The typed, JSON-ready record: every metric of z, h and the controls, and the head / backbone factors."""
        def ratio(a: float, b: float) -> float | None:
            return a / b if b else None

        z, h, h0 = self.z, self.h, self.h_untrained
        return GeometrySummary(
            settings=self.settings, labels=self.labels, image_indices=self.image_indices,
            z=z, h=h, h_untrained=h0, h_untrained_nobias=self.h_untrained_nobias, h_raw_input=self.h_raw_input,
            compression=compression(z, h), compression_untrained=compression(z, h0),
            compression_untrained_nobias=compression(z, self.h_untrained_nobias),
            compression_raw_input=compression(z, self.h_raw_input),
            kappa_factor=ratio(h.kappa.mean, z.kappa.mean), d_intra_factor=ratio(z.d_intra.mean, h.d_intra.mean),
            d_inter_factor=ratio(z.d_inter.mean, h.d_inter.mean), ratio_factor=ratio(h.ratio.mean, z.ratio.mean),
        )


@torch.no_grad()
def measure_geometry(backbone: nn.Module, head: nn.Module, cfg: Any, x_uint8: torch.Tensor, y: torch.Tensor,
                     mean, std, settings: GeometrySettings = GeometrySettings(),
                     controls: tuple[nn.Module, nn.Module] | None = None) -> GeometryResult:
    """E4 on the images of one split (uint8 ``(N, 3, S, S)`` with labels ``(N,)``), all on their device.
    ``controls``: the untrained head and its bias-free twin, for a head that ``cfg`` cannot rebuild (a
    user's module; default: ``control_head`` from ``cfg``)."""
    device = x_uint8.device
    mean_t = torch.as_tensor(mean, dtype=torch.float32, device=device).view(1, -1, 1, 1)
    std_t = torch.as_tensor(std, dtype=torch.float32, device=device).view(1, -1, 1, 1)
    images, labels, idx = orbit_images(x_uint8, y, settings.classes, settings.per_class)
    n, P, Q = len(images), len(settings.values), len(settings.sweep_values)
    # The control without biases: on unit-norm inputs a default-initialised bias can dominate the first
    # layer's output and pull every point together, which the bias-free control separates out.
    control, control_nb = controls or (control_head(cfg, backbone.out_dim), control_head(cfg, backbone.out_dim,
                                                                                          bias=False))
    control, control_nb = control.to(device), control_nb.to(device)
    with eval_mode(backbone, head, control, control_nb):
        orbit_x = orbit_batch_at(images, settings.family, settings.values)  # (n * P, 3, S, S), image-major
        sweep_x = orbit_batch_at(images, settings.family, settings.sweep_values)  # (n * Q, 3, S, S)
        Z = _backbone_features(backbone, orbit_x, mean_t, std_t, settings.batch).reshape(n, P, -1)  # (n, P, d)
        S = _backbone_features(backbone, sweep_x, mean_t, std_t, settings.batch).reshape(n, Q, -1)  # (n, Q, d)

        def as_fn(module: nn.Module):
            return lambda a: module(a.float()).double()  # the head runs in float32, metrics in float64

        zn, hn = normalized_features(Z, as_fn(head))
        _, h0n = normalized_features(Z, as_fn(control))
        _, h0b = normalized_features(Z, as_fn(control_nb))
        _, sh0b = normalized_features(S, as_fn(control_nb))
        # Beside the paper's protocol: the head on the raw z it was trained on (BatchNorm's running
        # statistics were gathered there), then normalised; same metrics.
        hrn = l2_normalize(as_fn(head)(Z.reshape(n * P, -1)).reshape(n, P, -1))
        hrs = l2_normalize(as_fn(head)(S.reshape(n * Q, -1)).reshape(n, Q, -1))
        sz, sh = normalized_features(S, as_fn(head))
        _, sh0 = normalized_features(S, as_fn(control))
    lab = labels.to(device)
    res = GeometryResult(
        settings={**asdict(settings), "n_orbits": n, "points_per_orbit": P, "sweep_points": Q,
                  "head_input": "L2-normalised z (the paper's E4)", "bn_mode": "eval (running statistics)",
                  "control": f"untrained {cfg.head} head, init {cfg.init}, seed {settings.control_seed}"},
        z=orbit_geometry(zn, lab, sweep=sz), h=orbit_geometry(hn, lab, sweep=sh),
        h_untrained=orbit_geometry(h0n, lab, sweep=sh0), h_untrained_nobias=orbit_geometry(h0b, lab, sweep=sh0b),
        h_raw_input=orbit_geometry(hrn, lab, sweep=hrs),
        labels=[int(v) for v in labels.tolist()], image_indices=[int(v) for v in idx.tolist()],
    )
    res.arrays = {"z": zn.float().cpu().numpy(), "h": hn.float().cpu().numpy(),
                  "h_untrained": h0n.float().cpu().numpy(), "labels": labels.cpu().numpy(),
                  "values": np.asarray(settings.values)}
    return res


def save_orbits(path: str | Path, arrays: dict[str, np.ndarray]) -> None:
    """The normalised orbit features (for the report's scatter plots), written atomically as .npz."""
    path = Path(path)
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(buf.getvalue())
    tmp.replace(path)


# --------------------------------------------------------------------------------------------
# The end-of-run measurement of ``python -m scale.run``: geometry + rotation probes, for the run's summary
# --------------------------------------------------------------------------------------------


def final_measurement(trainer: Any, data: Any, run_dir: Path, orbits: str = "5x3",
                      probe_images: int | None = 10_000) -> tuple[GeometrySummary | None, RotationProbes | None]:
    """E4 geometry and E3 rotation probes of a trained model (``trainer``: a ``scale.train.Trainer``;
    ``data``: the dataset on the training device). A part is ``None`` when the split is too small for it
    (geometry needs 2 classes, probes 2 images per split). Writes the orbit features to ``run_dir/orbits.npz``."""
    from scale.probes import ProbeSettings, run_rotation_probes

    cfg, model = trainer.cfg, trainer.model
    classes, per_class = parse_orbits(orbits)
    split_x, split_y = (data.test_x, data.test_y)
    # A split smaller than asked (tiny test archives) gives the orbits it can: the first classes present (label
    # order, as orbit_images picks them) and their smallest image count; the settings record what was measured.
    counts = [int((split_y == c).sum()) for c in torch.unique(split_y)]  # per label, ascending labels
    classes = min(classes, len(counts))
    per_class = min([per_class, *counts[:classes]])
    geometry, probes = None, None
    if classes >= 2 and per_class >= 1:
        geo = measure_geometry(model.backbone, model.projector, cfg, split_x, split_y, data.mean, data.std,
                               GeometrySettings(classes=classes, per_class=per_class))
        save_orbits(run_dir / "orbits.npz", geo.arrays)
        geo.settings["asked"] = orbits
        geometry = geo.summary()
    if min(len(data.train_x), len(data.test_x)) >= 2:
        probes = run_rotation_probes(trainer.state.embed, trainer.augment.normalize, data.train_x, data.test_x,
                                     ProbeSettings(train_images=probe_images, test_images=probe_images, seed=cfg.seed))
    return geometry, probes
