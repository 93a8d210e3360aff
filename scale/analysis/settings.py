"""What ``scale.analysis`` measures and on how many images: ``AnalysisSettings`` (the flags of ``python -m
scale.analyze``), its checks (``AnalyzeError``: a bad argument, exit code 2) and the run's own probe protocol."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from scale.engine.dataset import Dataset
from scale.geometry.measure import (
    HEAD_INPUTS,
    GeometrySettings,
    parse_orbits,
)
from scale.geometry.orbits import check_family
from scale.runs.summary import RunSummary


class AnalyzeError(ValueError):
    """A bad argument to the analysis; the message names it (exit code 2)."""


@dataclass(frozen=True)
class AnalysisSettings:
    hessian_images: int = 32  # images of the probe batch (x 2 views: n = 64 rows of z)
    lanczos_iter: int = 80
    orbits: str = "5x3"
    family: str = "rotation"  # E4's rotation orbits, or an E6 family: hue, saturation, blur
    steps: int | None = None  # E6's trajectories: this many values across the family's range, kappa along them
    head_input: str = "normalized"  # the head on the normalised z (E4) or on the raw z it was trained on (E6)
    batch: int = 512  # rows per backbone forward pass of the orbits
    probe_images: int | None = 2000  # probes: at most this many base images per split (x 4 rotations)
    # A run's own probe protocol (``from_run``): the images per split of its headline and rotation probes and
    # the rotation probes' seed, so that the analysis of its weights repeats its end-of-run probes
    class_images: tuple[int, int] | None = None
    rotation_images: tuple[int, int] | None = None
    rotation_seed: int | None = None
    probes: bool = True
    curvature: bool = True  # H_eff needs the method's loss: off for a head without one of the registry
    seed: int = 0

    def __post_init__(self) -> None:
        if self.hessian_images < 2:
            raise AnalyzeError(f"--hessian-images must be >= 2, got {self.hessian_images}")
        if self.lanczos_iter < 2:
            raise AnalyzeError(f"--lanczos-iter must be >= 2, got {self.lanczos_iter}")
        if self.probe_images is not None and self.probe_images < 2:
            raise AnalyzeError(f"--probe-images must be >= 2, got {self.probe_images}")
        if self.steps is not None and self.steps < 3:
            raise AnalyzeError(f"--steps must be >= 3 (kappa is a second difference), got {self.steps}")
        if self.head_input not in HEAD_INPUTS:
            raise AnalyzeError(f"--head-input {self.head_input!r}; valid choices: {', '.join(HEAD_INPUTS)}")
        if self.batch < 1:
            raise AnalyzeError(f"the forward batch must be >= 1 rows, got {self.batch}")
        try:
            parse_orbits(self.orbits)
            check_family(self.family)
        except ValueError as exc:
            raise AnalyzeError(str(exc)) from None

    def from_run(self, summary: dict[str, Any] | None) -> AnalysisSettings:
        """These settings with the probe protocol of a run's end-of-run measurement (its summary.json): the
        headline probe on the same images, the rotation probes on the same base images with the same seed.
        Unchanged where the run recorded none."""
        typed = RunSummary.from_dict(summary or {})
        changes: dict[str, Any] = {}
        if typed.class_probe is not None:
            changes["class_images"] = (typed.class_probe.train_images, typed.class_probe.test_images)
        if typed.rotation_probes is not None:
            rs = typed.rotation_probes.settings
            changes.update(rotation_images=(rs["train_base_images"], rs["test_base_images"]),
                           rotation_seed=rs.get("seed", 0))
        return replace(self, **changes)

    def orbits_of_run(self, summary: dict[str, Any] | None) -> AnalysisSettings:
        """These settings with the E4 orbits a run's end-of-run measurement asked for (unchanged where none)."""
        asked = ((summary or {}).get("geometry") or {}).get("settings", {}).get("asked")
        return replace(self, orbits=asked) if isinstance(asked, str) else self

    def probe_sizes(self, data: Dataset) -> tuple[tuple[int, int], tuple[int, int], int]:
        """The headline probe's (training, test) images, the rotation probes' base images per split and their
        seed: the run's protocol where ``from_run`` recorded one, else at most ``probe_images`` per split."""
        capped = tuple(min(len(x), self.probe_images or len(x)) for x in (data.train_x, data.test_x))
        fit = lambda sizes: (min(sizes[0], len(data.train_x)), min(sizes[1], len(data.test_x)))  # noqa: E731
        return (fit(self.class_images or capped), fit(self.rotation_images or capped),
                self.seed if self.rotation_seed is None else self.rotation_seed)

    def geometry(self, classes: int, per_class: int) -> GeometrySettings:
        """The orbit settings: E4's orbits of ``family`` (``GeometrySettings.for_family``), or with ``steps``
        E6's trajectories (``GeometrySettings.trajectories``)."""
        kw = dict(classes=classes, per_class=per_class, head_input=self.head_input, batch=self.batch)
        if self.steps is not None:
            return GeometrySettings.trajectories(self.family, self.steps, **kw)
        return GeometrySettings.for_family(self.family, **kw)
