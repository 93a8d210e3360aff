r"""Orbit geometry at scale (``docs/paper.md``, E4): backbone ``z`` versus head ``h`` on rotation orbits of real images.

Protocol (``docs/paper.md``, E4), all on the training device:

    images   ``classes`` x ``per_class`` held-out images (test split; the first ``per_class`` images of
             each of the first ``classes`` labels, so every run of a grid sees the same orbits);
             the paper's 5 x 3 = 15 is the default, any number works
    orbits   each image rotated by 12 angles, 0 to 330 degrees (``scale.geometry.orbits.orbit_batch_at``)
    sweep    each image rotated by 10 angles, 0 to 45 degrees: the path along which kappa is taken
             (``GeometrySettings.for_family``: the same for hue, saturation or blur across the family's
             range, E6)
    z        backbone output (eval mode: BatchNorm running statistics), L2-normalised
    h        the head applied to the normalised z, then L2-normalised (``mini.invariance.normalized_features``);
             ``head_input="raw"``: the head on the raw z it was trained on, then normalised (E6's protocol
             for pretrained heads)
    raw      beside the E4 protocol: the head on the raw z it was trained on (its BatchNorm running
             statistics come from there), then normalised (``h_raw_input``, ``compression_raw_input``; the
             same as ``h`` under ``head_input="raw"``)
    control  a fresh, untrained head of the same architecture (same spec, widths, bias, BatchNorm and
             initialisation scheme, its own seed) applied to the same z: the paper's negative control;
             and the same control without biases (``h_untrained_nobias``): on unit-norm z a default bias
             can outweigh ``W1 z`` and compress orbits by itself
    anchor   the image as given (unaugmented); ``alignment`` = mean over the orbit's points of the cosine
             to the anchor's features (E6)

The metrics are ``mini.invariance``'s array-API functions called on the torch tensors (float64):
orbit spread, D_intra, D_inter, ratio, kappa, each a ``Stat`` (mean, population std, n), and the
compression factor ``mean spread(z) / mean spread(h)``; per orbit (``GeometryResult.per_orbit``, float64)
the spread, kappa and alignment of every space, from which ``scale.analyze`` takes its intervals and verdict.
Shapes: orbit features ``(n_orbits, 12, dim)``, sweep features ``(n_orbits, 10, dim)``, labels ``(n_orbits,)``.
Orbits are made and embedded a chunk of images at a time (``batch`` rows per forward pass), so that
224-pixel orbits of many images never sit in memory at once.
"""

from __future__ import annotations

import copy
import io
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from mini.invariance import (
    OrbitGeometry,
    compression,
    l2_normalize,
    normalized_features,
    orbit_geometry,
    orbit_spread,
    sweep_curvature,
)
from scale.engine.checkpoint import atomic_write_bytes
from scale.engine.heads import build_head, collapse_init_
from scale.engine.modes import eval_mode
from scale.engine.modules import OWN
from scale.engine.progress import Phases
from scale.geometry.initial import initial_backbone, weight_shift
from scale.geometry.orbits import E4_ROTATION_ANGLES, E4_SWEEP_ANGLES, check_family, family_parameters, orbit_batch_at
from scale.geometry.probes import class_probe, class_probe_skip_reason, features, plan_probes, run_probes
from scale.geometry.verdict import orbit_verdict
from scale.runs.premise import check_training
from scale.runs.summary import ClassProbe, GeometrySummary, RotationProbes, TrainingCheck

CONTROL_SEED = 12345  # the untrained control head's initialisation seed (fixed: the same control in every run)
# What the head is applied to: the paper's E4 protocol, or the input it was trained on (E6's pretrained heads).
HEAD_INPUTS = {"normalized": "L2-normalised z (the paper's E4)", "raw": "raw z, as the head was trained (E6)"}


@dataclass(frozen=True)
class GeometrySettings:
    classes: int = 5
    per_class: int = 3
    family: str = "rotation"  # any of scale.geometry.orbits.FAMILIES (hue, saturation, blur: for later use)
    values: tuple[float, ...] = E4_ROTATION_ANGLES  # the orbit's parameter values (degrees for rotation)
    sweep_values: tuple[float, ...] = E4_SWEEP_ANGLES  # the kappa sweep's, equally spaced
    split: str = "test"
    control_seed: int = CONTROL_SEED
    batch: int = 512  # rows per backbone forward pass (a chunk of whole orbits)
    head_input: str = "normalized"  # a key of HEAD_INPUTS

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
        if self.head_input not in HEAD_INPUTS:
            raise ValueError(f"head input {self.head_input!r}; valid choices: {', '.join(HEAD_INPUTS)}")
        if self.batch < 1:
            raise ValueError(f"the forward batch must be a positive number of rows, got {self.batch}")

    @classmethod
    def for_family(cls, family: str, points: int = 12, sweep_points: int = 10, **kw: Any) -> GeometrySettings:
        """E4's rotation orbits (0-330 degrees, sweep 0-45) or, for another family, ``points`` values across
        its range (E6) and a ``sweep_points`` sweep across the same range."""
        if family == "rotation":
            return cls(**kw)
        vals = family_parameters(family, points).tolist()
        sweep = family_parameters(family, sweep_points).tolist()
        return cls(family=family, values=tuple(vals), sweep_values=tuple(sweep), **kw)

    @classmethod
    def trajectories(cls, family: str, steps: int, **kw: Any) -> GeometrySettings:
        """E6's trajectories: ``steps`` evenly spaced values across the family's range (rotation included:
        0 to 45 degrees), kappa along the same path (``scale.geometry.orbits.family_parameters``)."""
        vals = tuple(family_parameters(family, steps).tolist())
        return cls(family=family, values=vals, sweep_values=vals, **kw)


def parse_orbits(text: str) -> tuple[int, int]:
    """``"5x3"`` -> (5 classes, 3 images per class)."""
    try:
        c, i = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise ValueError(f"--orbits takes CLASSESxIMAGES, e.g. 5x3 (the paper's 15 orbits), got {text!r}") from None
    if c < 2 or i < 1:
        raise ValueError(f"--orbits needs >= 2 classes and >= 1 image per class, got {text!r}")
    return c, i


def fit_orbits(y: torch.Tensor, classes: int, per_class: int) -> tuple[int, int]:
    """The orbits a split can give when it is smaller than asked (tiny test archives): the first ``classes``
    labels present (label order, as ``orbit_images`` picks them) and their smallest image count. A result
    below (2, 1) means no geometry (D_inter needs two classes)."""
    counts = [int((y == c).sum()) for c in torch.unique(y)]  # per label, ascending labels
    classes = min(classes, len(counts))
    return classes, min([per_class, *counts[:classes]]) if counts else 0


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



def standardize(mean: Sequence[float], std: Sequence[float], device: torch.device | str
                ) -> Callable[[torch.Tensor], torch.Tensor]:
    """Images in [0, 1] ``(n, 3, S, S)`` -> ``(x - mean) / std`` per channel (the dataset's statistics)."""
    mean_t = torch.as_tensor(mean, dtype=torch.float32, device=device).view(1, -1, 1, 1)
    std_t = torch.as_tensor(std, dtype=torch.float32, device=device).view(1, -1, 1, 1)
    return lambda x: (x - mean_t) / std_t


def orbit_features(backbone: nn.Module, images: torch.Tensor, family: str, values: Sequence[float], normalize,
                   batch: int) -> torch.Tensor:
    """Backbone features of every image taken through ``family`` at ``values`` (P,): images in [0, 1]
    ``(n, 3, S, S)`` -> float64 ``(n, P, d)``. Orbits are made a chunk of ``batch // P`` images at a time."""
    n, P = len(images), len(values)
    chunk = max(1, batch // P)
    parts = [features(backbone, orbit_batch_at(images[i : i + chunk], family, values), normalize, batch,
                      torch.float64) for i in range(0, n, chunk)]  # each (chunk * P, d), image-major
    return torch.cat(parts).reshape(n, P, -1)


def head_fn(module: nn.Module) -> Callable[[torch.Tensor], torch.Tensor]:
    """``module`` as a float64 -> float64 map: the head runs in float32, the metrics in float64."""
    return lambda a: module(a.float()).double()


def head_features(fn: Callable[[torch.Tensor], torch.Tensor], Z: torch.Tensor, head_input: str) -> torch.Tensor:
    """Normalised head features of backbone features ``Z`` ``(..., d)`` -> ``(..., k)``: ``normalize(fn(normalize(z)))``
    (``head_input="normalized"``, E4; ``mini.invariance.normalized_features``) or ``normalize(fn(z))`` ("raw")."""
    if head_input == "normalized":
        return normalized_features(Z, fn)[1]
    return l2_normalize(fn(Z.reshape(-1, Z.shape[-1])).reshape(*Z.shape[:-1], -1))


def anchor_alignment(F: torch.Tensor, A: torch.Tensor) -> torch.Tensor:
    """Per orbit, the mean over its points of the cosine to its anchor: normalised ``F`` ``(n, P, k)`` and
    anchors ``A`` ``(n, k)`` -> ``(n,)``; ``a = mean_p <F[:, p], A>``."""
    return (F * A[:, None, :]).sum(-1).mean(1)


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


def untrained_copy(head: nn.Module, seed: int = CONTROL_SEED, bias: bool = True) -> nn.Module:
    """The control for a head the config cannot rebuild (a module of your own): the same architecture
    freshly initialised (``reset_parameters`` of every submodule that has one, from its own generator; the
    global RNG is untouched); ``bias=False`` zeroes every Linear bias. Drawn on the CPU (whose generator
    alone is forked and seeded), so the control is the same on every device."""
    control = copy.deepcopy(head).cpu()
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        torch.manual_seed(seed)
        for m in control.modules():
            if hasattr(m, "reset_parameters"):
                m.reset_parameters()
            if not bias and isinstance(m, nn.Linear) and m.bias is not None:
                m.bias.zero_()
    return control


SPACES = ("z", "h", "h_untrained", "h_untrained_nobias", "h_raw_input")  # the feature spaces measured


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
    # per space of SPACES: {"spread", "kappa", "alignment"} -> float64 (n_orbits,)
    per_orbit: dict[str, dict[str, np.ndarray]] = field(repr=False, default_factory=dict)

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
            verdict=orbit_verdict(self.per_orbit) if self.per_orbit else None,
        )


def default_controls(cfg: Any, head: nn.Module, d: int, seed: int = CONTROL_SEED
                     ) -> tuple[tuple[nn.Module, nn.Module], str]:
    """The untrained control head and its bias-free twin, and how they were made: rebuilt from ``cfg``
    (``control_head``), or fresh copies of ``head`` where it is a module of your own (``untrained_copy``).
    The control without biases: on unit-norm inputs a default-initialised bias can dominate the first
    layer's output and pull every point together, which the bias-free control separates out."""
    if getattr(cfg, "head", None) == OWN:
        return (untrained_copy(head, seed), untrained_copy(head, seed, bias=False)), (
            f"fresh copies of your head measured (reset_parameters, seed {seed})")
    return (control_head(cfg, d, seed), control_head(cfg, d, seed, bias=False)), (
        f"untrained {cfg.head} head, init {cfg.init}, seed {seed}")


def measure_geometry(backbone: nn.Module, head: nn.Module, cfg: Any, x_uint8: torch.Tensor, y: torch.Tensor | None,
                     mean, std, settings: GeometrySettings = GeometrySettings(),
                     controls: tuple[nn.Module, nn.Module] | None = None) -> GeometryResult:
    """E4 on the images of one split (uint8 ``(N, 3, S, S)`` with labels ``(N,)``), all on their device:
    ``orbit_images`` picks them, ``measure_orbits`` measures. ``y=None`` (images without labels): the first
    ``classes x per_class`` images, each its own class (D_inter between images). ``controls``: the
    untrained head and its bias-free twin (default: ``default_controls``)."""
    if y is None:
        n = min(len(x_uint8), settings.classes * settings.per_class)
        images, labels, idx = x_uint8[:n].float() / 255.0, None, torch.arange(n)
    else:
        images, labels, idx = orbit_images(x_uint8, y, settings.classes, settings.per_class)
    if controls is None:
        controls, note = default_controls(cfg, head, backbone.out_dim, settings.control_seed)
    else:
        note = "the untrained heads given (scale.analyze: fresh copies of the head measured)"
    return measure_orbits(backbone, head, images, mean, std, settings, controls, labels=labels, image_indices=idx,
                          control_note=note + ("" if y is not None else "; images without labels, each its own "
                                               "class"))


@torch.no_grad()
def measure_orbits(backbone: nn.Module, head: nn.Module, images: torch.Tensor, mean, std, settings: GeometrySettings,
                   controls: tuple[nn.Module, nn.Module], *, labels: torch.Tensor | None = None,
                   image_indices: torch.Tensor | None = None, control_note: str = "the untrained heads given"
                   ) -> GeometryResult:
    """The orbit geometry of images in [0, 1] ``(n, 3, S, S)`` (normalised with ``mean``, ``std``) on their
    device: ``settings.family`` at ``settings.values``, kappa along ``settings.sweep_values`` (the orbit
    itself when they are equal), the head applied as ``settings.head_input`` says, the ``controls``
    (untrained head, its bias-free twin) likewise. ``labels`` (n,) name each orbit's class (D_inter);
    without them every image is its own class."""
    device = images.device
    n, P, Q = len(images), len(settings.values), len(settings.sweep_values)
    labels = torch.arange(n) if labels is None else labels
    normalize = standardize(mean, std, device)
    control, control_nb = (c.to(device) for c in controls)
    heads = {"h": head, "h_untrained": control, "h_untrained_nobias": control_nb}
    with eval_mode(backbone, *heads.values()):
        Z = orbit_features(backbone, images, settings.family, settings.values, normalize, settings.batch)  # (n, P, d)
        same = tuple(settings.sweep_values) == tuple(settings.values)
        S = Z if same else orbit_features(backbone, images, settings.family, settings.sweep_values, normalize,
                                          settings.batch)  # (n, Q, d)
        A = features(backbone, images, normalize, settings.batch, torch.float64)[:, None]  # anchors (n, 1, d)
        feats = {"z": tuple(l2_normalize(X) for X in (Z, S, A))}  # each space: (orbits, sweeps, anchors)
        for key, module in heads.items():
            feats[key] = tuple(head_features(head_fn(module), X, settings.head_input) for X in (Z, S, A))
        # Beside the E4 protocol: the head on the raw z it was trained on (BatchNorm's running statistics were
        # gathered there), then normalised; the protocol itself under head_input="raw".
        feats["h_raw_input"] = feats["h"] if settings.head_input == "raw" else tuple(
            head_features(head_fn(head), X, "raw") for X in (Z, S, A))
    lab = labels.to(device)
    geometry = {key: orbit_geometry(F, lab, sweep=Sw) for key, (F, Sw, _) in feats.items()}
    per_orbit = {key: {"spread": orbit_spread(F), "kappa": sweep_curvature(Sw),
                       "alignment": anchor_alignment(F, An[:, 0])} for key, (F, Sw, An) in feats.items()}
    idx = torch.arange(n) if image_indices is None else image_indices
    res = GeometryResult(
        settings={**asdict(settings), "n_orbits": n, "points_per_orbit": P, "sweep_points": Q,
                  "head_input": HEAD_INPUTS[settings.head_input], "bn_mode": "eval (running statistics)" if any(
                      isinstance(m, nn.modules.batchnorm._BatchNorm) for m in head.modules()) else "none in the head",
                  "control": control_note},
        **geometry, labels=[int(v) for v in labels.tolist()], image_indices=[int(v) for v in idx.tolist()],
        per_orbit={key: {m: v.cpu().numpy() for m, v in d.items()} for key, d in per_orbit.items()},
    )
    res.arrays = {"z": feats["z"][0].float().cpu().numpy(), "h": feats["h"][0].float().cpu().numpy(),
                  "h_untrained": feats["h_untrained"][0].float().cpu().numpy(), "labels": labels.cpu().numpy(),
                  "values": np.asarray(settings.values)}
    return res


def save_orbits(path: str | Path, arrays: dict[str, np.ndarray]) -> None:
    """The normalised orbit features (for the report's scatter plots), written atomically as .npz."""
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    atomic_write_bytes(Path(path), buf.getvalue())


# --------------------------------------------------------------------------------------------
# The end-of-run measurement of a run (``scale.train``, ``python -m scale.run``): probes and geometry
# --------------------------------------------------------------------------------------------

E3_PROBE_IMAGES = 10_000  # the paper's E3: rotation probes on at most this many images per split
MIN_PROBE_IMAGES = 256  # the default cap never goes below this (1,024 rotated test samples: +-3 points)


def probe_budget(images_trained: int) -> int:
    """The default cap on the rotation probes' base images per split, bounded by the training it follows: a
    quarter of the images the training stepped through (``images_trained``), at least ``MIN_PROBE_IMAGES``
    and at most the paper's 10,000. A trained image costs about 6 forward passes (2 views, forward and
    backward), a probe image 4 (its quarter turns) in each of the 2 splits: so the probes' forward passes
    stay within a third of the training's. CIFAR at 50 epochs and the digits main job (8 epochs) keep
    every image they would have had; a 1-epoch run probes a quarter of its training set."""
    return int(min(E3_PROBE_IMAGES, max(MIN_PROBE_IMAGES, images_trained // 4)))


@dataclass(frozen=True)
class EndOfRun:
    """What is measured after training: the headline class probe always (when the data allows it); with
    ``geometry``, E4's orbit geometry (``orbits``: CLASSESxIMAGES of the test split) and E3's rotation probes
    on at most ``probe_images`` images per split (``None``: ``probe_budget``)."""

    orbits: str = "5x3"
    probe_images: int | None = None
    geometry: bool = True


@dataclass
class EndOfRunResult:
    class_probe: ClassProbe | None = None
    geometry: GeometrySummary | None = None
    rotation_probes: RotationProbes | None = None
    training: TrainingCheck | None = None  # the run against its baselines (scale.runs.premise)
    notes: list[str] = field(default_factory=list)  # what was skipped and why, warnings
    seconds: float = 0.0


def learning_premise(trainer: Any, data: Any) -> tuple[TrainingCheck, ClassProbe | None]:
    """The premise "the network learned" (``scale.runs.premise``) of a ``scale.engine.train.Trainer`` after its
    training, on ``data`` (on the training device): the class probes (linear and kNN) of z and h on every image,
    with the backbone at initialisation beside, and the loss against its baselines. The class probe is ``None`` (the
    premise then rests on the loss) where the data has no labels or one class."""
    cfg, model, state = trainer.cfg, trainer.model, trainer.state
    probe = None
    start, how = initial_backbone(cfg, model.backbone)
    if class_probe_skip_reason(data) is None:
        probe = class_probe(state.embed, trainer.augment.normalize, data.train_x, data.train_y, data.test_x,
                            data.test_y, data.classes, initial=torch.no_grad()(start))
    k = state.embed(state.probe_x[:2])[1].shape[1]
    return check_training(cfg, state.history, (model.backbone.out_dim, k), probe, how,
                          weight_shift(cfg, model.backbone, start)), probe


def final_measurement(trainer: Any, data: Any, run_dir: Path | None, settings: EndOfRun = EndOfRun(),
                      log: Callable[[str], None] | None = print) -> EndOfRunResult:
    """The measurement after training (``EndOfRun``) of a ``scale.engine.train.Trainer``'s model on ``data``
    (on the training device), each phase announced through ``log`` with its size, its time and an estimate
    of the rest (``scale.engine.progress``). Writes the orbit features to ``run_dir/orbits.npz``. A part the
    data cannot give is skipped with the reason in ``notes``: the class probe without labels or with one
    class (``class_probe_skip_reason``), geometry with fewer than 2 orbits' classes, probes with fewer than 2
    images per split."""

    cfg, model, state = trainer.cfg, trainer.model, trainer.state
    res = EndOfRunResult()
    labelled = getattr(data, "labelled", True)
    classes, per_class = parse_orbits(settings.orbits)
    if labelled:  # the settings record what was measured
        classes, per_class = fit_orbits(data.test_y, classes, per_class)
    else:  # each image its own class
        classes, per_class = min(classes * per_class, len(data.test_x)), 1
    cap = settings.probe_images or probe_budget(state.global_step * cfg.batch_size)
    n_class = (len(data.train_x), len(data.test_x))  # the headline: every image
    n_rotation = (min(n_class[0], cap), min(n_class[1], cap)) if settings.geometry and min(n_class) >= 2 else None
    geometry = settings.geometry and classes >= 2 and per_class >= 1
    phases = Phases("end-of-run measurement", log)
    if geometry:
        phases.plan("orbit geometry", classes * per_class * (len(E4_ROTATION_ANGLES) + len(E4_SWEEP_ANGLES) + 1),
                    "images")
    plan_probes(phases, n_class, n_rotation, initial=True)
    if geometry:
        with phases.run("orbit geometry", f"{classes * per_class} test images x 12 rotations, z vs h and the "
                        "untrained controls"):
            geo = measure_geometry(model.backbone, model.projector, cfg, data.test_x, data.test_y if labelled else None,
                                   data.mean, data.std, GeometrySettings(classes=classes, per_class=per_class))
            if run_dir is not None:
                save_orbits(Path(run_dir) / "orbits.npz", geo.arrays)
            geo.settings["asked"] = settings.orbits
            res.geometry = geo.summary()
    elif settings.geometry:
        res.notes.append("orbit geometry skipped: the test split has fewer than 2 classes (D_inter needs 2)")
    if settings.geometry and n_rotation is None:
        res.notes.append("rotation probes skipped: fewer than 2 images in a split")
    start, how = initial_backbone(cfg, model.backbone)
    res.class_probe, res.rotation_probes = run_probes(state.embed, trainer.augment.normalize, data, n_class,
                                                      n_rotation, cfg.seed, phases, res.notes,
                                                      initial=torch.no_grad()(start))
    k = state.embed(state.probe_x[:2])[1].shape[1]
    res.training = check_training(cfg, state.history, (model.backbone.out_dim, k), res.class_probe, how,
                                  weight_shift(cfg, model.backbone, start))
    res.seconds = phases.elapsed()
    return res
