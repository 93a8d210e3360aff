r"""The typed summary of one run: what ``python -m scale.run`` measured, saved as summary.json and read
back by the report builders (``scale.runs.run_report`` for the run, ``scale.paper_report`` for the paper's grid).

    RunSummary
      provenance      command, config, device, world size, versions, git commit
      outcome         status, wall seconds, epochs done, the last epoch's record
      training        TrainingCheck: the run against its own baselines (loss at chance, the representation's
                      spread, the probe of the backbone at initialisation): whether it trained
      class_probe     ClassProbe: the headline probe (scale.geometry.probes.HEADLINE_PROTOCOL) on the class
                      labels, its h minus z gap with a paired interval
      rotation_probes RotationProbes: E3's rotation probes with the paper's protocol (linear, MLP), gaps likewise
      geometry        GeometrySummary: E4's orbit metrics of z, h and the untrained controls, and the
                      compressor / expander verdict (Verdict: Estimates with their intervals)
      curvature       CurvatureSummary: the Hessian tracker's summary and last record (E2)
      notes           what was not measured, and why (one class: no class probe; ...)

Units: accuracies in percent (``ProbePair.z = 84.67`` is 84.67 %), gaps in percentage points (h - z,
the paper's sign) with the paired bootstrap interval of ``scale.geometry.verdict.paired_gap``; geometry as
measured. Naming: ``z`` is the backbone's output and ``h`` the head's (the paper's notation; SimCLR's paper
and lightly call them h and z the other way round). ``from_dict`` reads what ``to_dict`` wrote; a part that was
not measured is ``None``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from mini.invariance import OrbitGeometry, Stat
from mini.paper_numbers import ProbePair  # one probe's z and h accuracies, the paper's and ours


@dataclass(frozen=True)
class Estimate:
    """A point estimate with its interval (``scale.geometry.verdict.CONFIDENCE``) over ``n`` values
    (``excluded`` left out); a NaN interval where ``n < 2``."""

    value: float
    low: float
    high: float
    n: int
    excluded: int = 0

    def fmt(self, spec: str = ".3g") -> str:
        if math.isnan(self.low):
            return f"{self.value:{spec}}"
        return f"{self.value:{spec}} [{self.low:{spec}}, {self.high:{spec}}]"


@dataclass(frozen=True)
class Verdict:
    """Compressor, expander or neither (``scale.geometry.verdict``): the collapse ratio spread(z) / spread(h)
    of the head and of its untrained control, each with its interval and verdict; the curvature ratio
    kappa(h) / kappa(z) and the alignment gain (h minus z)."""

    collapse_ratio: Estimate
    collapse_ratio_untrained: Estimate
    verdict: str
    verdict_untrained: str
    curvature_ratio: Estimate
    alignment_gain: Estimate
    # R / R_0: the head's collapse ratio over its untrained control's, paired over the same orbits (None in
    # summaries written before it was measured)
    versus_untrained: Estimate | None = None

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Verdict:
        return cls(**{k: (Estimate(**v) if isinstance(v, dict) else v) for k, v in d.items()})


def _estimate(d: dict[str, Any] | None) -> Estimate | None:
    return Estimate(**d) if isinstance(d, dict) else None


@dataclass(frozen=True)
class KnnProbe:
    """The kNN probe on the class labels (``scale.geometry.probes.KNN_PROTOCOL``), on the same images as the
    headline: accuracies of z and h, h minus z, the backbone at initialisation and the trained z minus it, each
    gap paired over the test images. Nothing is fitted, so it reads the neighbourhoods of the features: where a
    linear probe of random features is already near its ceiling, it still shows what training changed."""

    protocol: str
    accuracy: ProbePair
    gap: Estimate | None = None
    initial_z: float | None = None
    initial_gain: Estimate | None = None
    raw_input: float | None = None
    raw_input_gain: Estimate | None = None

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> KnnProbe:
        return cls(**{**d, "accuracy": ProbePair(**d["accuracy"]), "gap": _estimate(d.get("gap")),
                      "initial_gain": _estimate(d.get("initial_gain")),
                      "raw_input_gain": _estimate(d.get("raw_input_gain"))})


@dataclass(frozen=True)
class ClassProbe:
    """The headline probe on the class labels: its protocol, the images it saw, the accuracies, the gap h
    minus z with its paired interval over the test images, and the control: the same probe of the backbone
    at initialisation (``initial_z``) and the trained z minus it (``initial_gain``), paired likewise; and the
    baseline no representation is guaranteed to beat: the same probe of the raw input, the flattened
    normalised pixels (``raw_input``, fitted in float64), and z minus it (``raw_input_gain``). The optional parts
    are ``None`` where not measured (or in summaries written before them)."""

    protocol: str
    train_images: int
    test_images: int
    accuracy: ProbePair
    gap: Estimate | None = None
    initial_z: float | None = None
    initial_gain: Estimate | None = None
    knn: KnnProbe | None = None  # the kNN probe beside it (summaries written before it have none)
    raw_input: float | None = None
    raw_input_gain: Estimate | None = None

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ClassProbe:
        knn = d.get("knn")
        return cls(**{**d, "accuracy": ProbePair(**d["accuracy"]), "gap": _estimate(d.get("gap")),
                      "initial_gain": _estimate(d.get("initial_gain")),
                      "raw_input_gain": _estimate(d.get("raw_input_gain")),
                      "knn": KnnProbe.from_dict(knn) if isinstance(knn, dict) else None})


@dataclass(frozen=True)
class RotationProbes:
    """E3: quarter-turn (4-way) probes with the paper's protocol; ``settings`` as run; ``gaps``: h minus z of
    each kind (``linear``, ``mlp``) with its paired interval over the test base images."""

    settings: dict[str, Any]
    linear: ProbePair
    mlp: ProbePair
    gaps: dict[str, Estimate] | None = None

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RotationProbes:
        gaps = {k: Estimate(**v) for k, v in d["gaps"].items()} if d.get("gaps") else None
        return cls(d["settings"], ProbePair(**d["linear"]), ProbePair(**d["mlp"]), gaps)


@dataclass(frozen=True)
class TrainingCheck:
    """The premise "the network learned", measured (``scale.runs.premise``), read before any verdict:

    learned          True where it holds, False where it fails (``findings`` say why), None where it is not
                     decided: no class probe (no labels), nothing measured, or a summary written before the
                     premise; ``notes``: what is reported beside it (a collapse where the loss has a chance
                     level, probes that moved with weights that did not)
    premise          what it rests on: the loss against chance (or its first step and the collapse detectors),
                     z's class probes against the backbone at initialisation
    chance_loss      the loss of a representation that tells no view from another (``None`` where the
                     method has no such level: its minimum is a collapse)
    initial_loss     the loss of the first step, before any update; ``final_loss`` the last epoch's mean
    h_spread         the head's spread: mean per-dimension std of the normalised rows times sqrt(k), 1 for
                     rows spread evenly over the sphere, 0 for one point; ``z_spread`` the backbone's
    initial_probe    the headline probe of the backbone at initialisation (percent), and ``probe_gain``
                     the trained backbone minus it, paired over the test images (the kNN probe's: the
                     summary's ``class_probe.knn``)
    raw_input_probe  the headline probe of the raw input (flattened normalised pixels, same images), and
                     ``raw_input_gain`` the trained z minus it: reported beside the premise, not part of it
                     ("learned" is against a random backbone, not against the input)
    weight_shift     ||theta - theta_0|| / ||theta_0|| over the backbone's parameters, trained against at
                     initialisation (``None`` where the initial weights are not known: a backbone of your own)
    """

    learned: bool | None
    findings: list[str]
    premise: str = ""
    notes: list[str] = field(default_factory=list)
    chance_loss: float | None = None
    initial_loss: float | None = None
    final_loss: float | None = None
    h_spread: float | None = None
    z_spread: float | None = None
    initial_probe: float | None = None
    probe_gain: Estimate | None = None
    initialisation: str = ""
    raw_input_probe: float | None = None
    raw_input_gain: Estimate | None = None
    weight_shift: float | None = None

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrainingCheck:
        """What ``asdict`` wrote; a check written before the premise (its ``trained`` meant less) reads as
        ``learned=None`` until ``scale.runs.premise.recheck`` reads its numbers again."""
        names = {f.name for f in fields(cls)}
        kept = {k: (_estimate(v) if k in ("probe_gain", "raw_input_gain") else v) for k, v in d.items() if k in names}
        return cls(**{"learned": None, **kept})


def _geometry(d: dict[str, Any] | None) -> OrbitGeometry | None:
    if d is None:
        return None
    stats = {k: (Stat(**v) if isinstance(v, dict) else v) for k, v in d.items()}
    return OrbitGeometry(**stats)


@dataclass(frozen=True)
class GeometrySummary:
    """E4 on one run: metrics of each feature space (mean +- population std over orbits) and the factors."""

    settings: dict[str, Any]
    labels: list[int]
    image_indices: list[int]
    z: OrbitGeometry
    h: OrbitGeometry
    h_untrained: OrbitGeometry
    h_untrained_nobias: OrbitGeometry
    h_raw_input: OrbitGeometry
    compression: float  # mean spread z / mean spread h (paper: 21.85x)
    compression_untrained: float
    compression_untrained_nobias: float
    compression_raw_input: float
    kappa_factor: float | None  # h / z (paper: 1.93x)
    d_intra_factor: float | None  # z / h (paper: 4.76x smaller)
    d_inter_factor: float | None  # z / h (paper: 3.89x smaller)
    ratio_factor: float | None  # h / z (paper: 1.22x higher)
    verdict: Verdict | None = None  # from the per-orbit values (summaries written before it have none)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> GeometrySummary:
        spaces = ("z", "h", "h_untrained", "h_untrained_nobias", "h_raw_input")
        out = {k: (_geometry(v) if k in spaces else v) for k, v in d.items()}
        if out.get("verdict") is not None:
            out["verdict"] = Verdict.from_dict(out["verdict"])
        return cls(**out)


@dataclass(frozen=True)
class CurvatureSummary:
    """The Hessian tracker's summary (``scale.curvature.tracking.HessianTracker.summary``) and its last record."""

    n_measurements: int = 0
    cadence: int | str = "epoch"
    probe_rows: int | None = None
    bn_mode: str = "eval"
    dtype: str = "float64"
    tracking_seconds: float = 0.0
    negative_lambda_min_fraction: float | None = None
    spearman_zstd_condition: float | None = None
    spearman_points: int = 0
    spearman_note: str = ""
    last: dict[str, Any] | None = None

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CurvatureSummary:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


@dataclass
class RunSummary:
    command: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    device: str = ""
    world_size: int = 1
    versions: dict[str, str] = field(default_factory=dict)
    git_commit: str = "unknown"
    status: str = "not run"
    wall_seconds: float = 0.0
    end_of_run_seconds: float | None = None  # the linear probe and, unless skipped, geometry and rotation probes
    measure: dict[str, Any] | None = None  # the end-of-run settings (scale.geometry.measure.EndOfRun) as run
    epochs_done: int = 0
    final: dict[str, float] | None = None
    training: TrainingCheck | None = None
    class_probe: ClassProbe | None = None
    rotation_probes: RotationProbes | None = None
    geometry: GeometrySummary | None = None
    curvature: CurvatureSummary | None = None
    notes: list[str] = field(default_factory=list)  # what was not measured and why, warnings

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunSummary:
        """A summary from its JSON form (missing parts stay at their defaults)."""
        names = {f.name for f in fields(cls)}
        out = {k: v for k, v in d.items() if k in names}
        if out.get("class_probe") is not None:
            out["class_probe"] = ClassProbe.from_dict(out["class_probe"])
        if out.get("rotation_probes") is not None:
            out["rotation_probes"] = RotationProbes.from_dict(out["rotation_probes"])
        if out.get("training") is not None:
            out["training"] = TrainingCheck.from_dict(out["training"])
        if out.get("geometry") is not None:
            out["geometry"] = GeometrySummary.from_dict(out["geometry"])
        if out.get("curvature") is not None:
            out["curvature"] = CurvatureSummary.from_dict(out["curvature"])
        return cls(**out)
