r"""The paper's reference figures (CIFAR-10, ResNet-18; ``docs/paper.md``, "Reference figures"), in one table.

Printed beside our numbers by ``mini.train``'s toy report and ``scale.paper_report``'s grid report; a figure
here never enters a result or a verdict. Units, one per kind of quantity:

    geometry      the metric's own value (orbit spread 2.25e-2, not "2.25 x 1e-2")
    accuracies    percent (52.27 means 52.27 %), gaps in percentage points, h minus z
    factors       plain ratios (21.85 means 21.85x)

``PaperFigure.z``/``.h`` hold the mean over the paper's orbits, ``z_std``/``h_std`` the std it prints
(``None`` where it prints none); ``factor`` is the head-over-backbone factor in the direction the paper
states it (``direction``: spread and distances z / h, kappa and the ratio h / z).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PaperFigure:
    """One row of the paper's reference table: backbone ``z``, head ``h``, and the factor between them."""

    z: float
    h: float
    factor: float
    direction: str  # "z / h" or "h / z"
    word: str  # the paper's word for the factor: "compression", "smaller", "higher", ""
    z_std: float | None = None
    h_std: float | None = None
    decimals: int = 3  # as many as the paper prints (at the scale it prints: spread x 1e2)

    def cell(self, space: str, scale: float = 1.0) -> str:
        """``mean +- std`` of ``space`` ("z" or "h") times ``scale``, with the paper's decimals."""
        mean, std = (self.z, self.z_std) if space == "z" else (self.h, self.h_std)
        spec = f".{self.decimals}f"
        return f"{mean * scale:{spec}}" + ("" if std is None else f" +- {std * scale:{spec}}")

    def factor_text(self) -> str:
        return f"{self.factor:.4g}x" + (f" {self.word}" if self.word else "")


@dataclass(frozen=True)
class ProbePair:
    """One probe's test accuracy in percent on the backbone's ``z`` and the head's ``h`` (``84.67`` is
    84.67 %): the paper's E3 probes here, and every probe ``scale`` measures (``scale.runs.summary``)."""

    z: float
    h: float

    @property
    def gap(self) -> float:
        """``h - z`` in percentage points (negative: the head lost what the probe reads)."""
        return self.h - self.z

    def cells(self) -> tuple[str, str, str]:
        return f"{self.z:.2f} %", f"{self.h:.2f} %", f"{self.gap:+.2f} points"


# E4 orbit geometry: 15 rotation orbits (5 classes x 3 images x 12 angles), L2-normalised features.
E4: dict[str, PaperFigure] = {
    "spread": PaperFigure(2.25e-2, 0.10e-2, 21.85, "z / h", "compression", z_std=1.07e-2, h_std=0.06e-2,
                          decimals=2),
    "kappa": PaperFigure(0.125, 0.242, 1.93, "h / z", ""),
    "d_intra": PaperFigure(0.211, 0.044, 4.76, "z / h", "smaller", z_std=0.045, h_std=0.011),
    "d_inter": PaperFigure(0.432, 0.111, 3.89, "z / h", "smaller", z_std=0.052, h_std=0.014),
    "ratio": PaperFigure(2.04, 2.50, 1.22, "h / z", "higher", z_std=0.52, h_std=0.72, decimals=2),
}
COMPRESSION_UNTRAINED = 0.97  # E4's negative control: an untrained head of the same architecture

# E3 rotation probes (4-way quarter turns), percent.
E3_PROBES: dict[str, ProbePair] = {"linear": ProbePair(52.27, 37.55), "mlp": ProbePair(55.46, 43.56)}

# E2 Hessian tracking (released arrays): Spearman between representation variance and condition number.
E2_SPEARMAN: dict[str, float] = {"normal-swish2": 0.339, "collapsed-swish2": 0.609, "collapsed-relu2": 0.669}
E2_NOTE: dict[str, str] = {
    "normal-swish2": "negative lambda_min in about 70 of 100 epochs",
    "collapsed-swish2": "negative lambda_min in about 70 of 100 epochs",
    "collapsed-relu2": "lambda_min exactly 0 after the first epoch",
}

# E5 head depth (Swish + BatchNorm heads of 1, 2, 3 Linear layers): the linear rotation probe on z and h,
# percent, and the orbit compression (mean spread z / mean spread h).
E5_PROBES: dict[int, ProbePair] = {1: ProbePair(47.52, 47.40), 2: ProbePair(52.82, 39.70), 3: ProbePair(52.35, 35.61)}
E5_COMPRESSION: dict[int, float] = {1: 49.1, 2: 57.2, 3: 78.5}
