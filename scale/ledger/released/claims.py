r"""The paper's claims re-tested on its own released CIFAR arrays, with the ledger's statistics and verdicts.

Each row is one claim on one run: a statistic per independent unit (E1: training seed; kappa: sampling seed of one
network; E4: orbit of one network), its interval (``scale.ledger.stats.estimate``), the rule and the verdict
(``scale.ledger.verdicts.decide``), the magnitude against the paper's value (``magnitude_outcome`` / ``compose``),
its controls, and what the arrays lack. The statistics, rules, controls and bands are those of the plan committed
before any value was computed (docs/replication/released_plan.md, ``scale.ledger.released.plan``). Magnitude bands
of a factor claim are on the ratio itself, [paper / 2, paper x 2] (read on log10 as log10(paper) +- log10(2)).

A control composes with the verdict in one way: a claim that holds while one of its controls does not (fails or
is open) is "sign only", the control named (E4.1 with E4.2 not holding: the compression is only a shrinking of
the whole space). This composition was written after the recomputation table had been seen (docs/replication/
released_plan.md fixes the controls, not how they compose).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mini.invariance import class_centroids, intra_distance, orbit_spread
from scale.ledger import stats
from scale.ledger.claims.base import NEGATIVE, POSITIVE, factor_band
from scale.ledger.claims.e2 import ABOUT_70, AT_MOST_10, RHO_BAND, SOME
from scale.ledger.released.figures import PAPER_RHO, orbits_of, slope, tracker_rho
from scale.ledger.released.schema import DEPTHS, RUNS, TRACKER_RUNS
from scale.ledger.verdicts import (
    HOLDS,
    NOT_MEASURED,
    REPRODUCED,
    SIGN_ONLY,
    Rule,
    compose,
    decide,
    magnitude_outcome,
)

LOG2 = math.log10(2.0)
ROUNDING_FLOOR = 1e-6  # E2: a recorded negative below 1e-6 x the run's largest |value| is not a certified sign
ESTIMATOR_ERROR = "4.8e-2 to 2.0 of the spectral scale at the official sizes (BENCHMARKS.md, run G)"
NO_TWIN = "no untrained twin saved"
ONE_NETWORK = "one trained network: the interval covers its images, not training runs"
ONE_SEED = "one training seed: no interval (more seeds needed)"
E1_PREMISE = "premise not checkable: no normal-start run and no value before training saved"


@dataclass(frozen=True)
class Band:
    """A magnitude band on the statistic's scale around the paper's value on that scale."""

    paper: float
    band: tuple[float, float]
    how: str


def ratio_band(factor: float) -> Band:
    """The factor-2 band on the ratio itself (issue 59), read on log10."""
    p = math.log10(factor)
    return Band(p, (p - LOG2, p + LOG2), f"ratio within [{factor / 2:.4g}, {factor * 2:.4g}]x")


def band_of(paper: float) -> Band:
    m = factor_band(paper, "")
    return Band(m.paper, m.band, f"within a factor 2 of {paper:g}")


@dataclass
class Row:
    id: str
    run: str
    claim: str
    statistic: str
    rule: Rule
    values: list[float]
    kind: str = "mean"
    magnitude: Band | None = None
    controls: list[tuple[str, list[float], Rule, str]] = field(default_factory=list)  # label, values, rule, kind
    missing: list[str] = field(default_factory=list)
    note: str = ""
    ran: bool = True

    def evaluate(self) -> dict[str, Any]:
        est = stats.estimate(self.kind, self.values)
        sign = decide(self.rule, est, self.ran)
        mag = (magnitude_outcome(self.magnitude.band, self.magnitude.paper, est.low, est.high)
               if self.magnitude is not None and self.ran else None)
        category, label = compose(sign, None, mag)
        ctrl = []
        for name, vals, rule, kind in self.controls:
            c = stats.estimate(kind, vals)
            ctrl.append((name, c, rule.outcome(c.low, c.high)))
        weak = [n for n, _, o in ctrl if o != HOLDS]
        if sign == REPRODUCED and weak:  # the sign holds; what it rests on does not (module docstring)
            rest = label.split("; ", 1)[1:] if category == SIGN_ONLY else []
            category = SIGN_ONLY
            label = "; ".join([f"{SIGN_ONLY} ({REPRODUCED})", *rest, f"control not holding: {', '.join(weak)}"])
        point_side = est.n >= 1 and self.rule.outcome(est.value, est.value) == HOLDS
        return {"id": self.id, "run": self.run, "claim": self.claim, "statistic": self.statistic,
                "point_side": point_side,
                "rule": self.rule.text(), "estimate": est, "category": category, "label": label,
                "controls": ctrl, "magnitude": self.magnitude, "missing": self.missing, "note": self.note,
                "values": self.values}


# ----------------------------------------------------------------------------- E1


def e1_config(run: str, act: str, bn: bool = False, lr: str = "base") -> str:
    """The configuration's name in the run's collapse_results (R18-C100 ran lr base without BatchNorm only, and
    names the activation alone; any other setting of it is a name its file does not hold)."""
    return act if run == "R18-C100" and not bn and lr == "base" else f"{act}_bn_{bn}_lr_{lr}"


def escape(collapse: dict[str, Any], cfg: str) -> np.ndarray:
    """Per seed log10(std at the last epoch / std at the first recorded epoch)."""
    raw = collapse[cfg]["raw"]
    return np.log10(raw[:, -1] / raw[:, 0])


def final(collapse: dict[str, Any], cfg: str) -> np.ndarray:
    return collapse[cfg]["raw"][:, -1]


def _l(a: np.ndarray) -> list[float]:
    return [float(x) for x in a]


def e1_rows(run: str, col: dict[str, Any]) -> list[Row]:
    c = lambda *a, **k: e1_config(run, *a, **k)  # noqa: E731
    has = lambda name: name in col  # noqa: E731
    lin = escape(col, c("linear"))
    rows = [Row("E1.1", run, "a linear head does not leave pseudo-collapse", "log10(std end / first epoch), linear",
                NEGATIVE, _l(lin), missing=[E1_PREMISE])]
    for ident, act in (("E1.2", "gelu"), ("E1.3", "swish")):
        s = escape(col, c(act))
        rows.append(Row(ident, run, f"a {act.upper() if act == 'gelu' else 'Swish'} head leaves pseudo-collapse",
                        f"log10(std end / first epoch), {act}", POSITIVE, _l(s),
                        controls=[(f"{act} minus linear, paired by seed", _l(s - lin), POSITIVE, "mean")],
                        missing=[E1_PREMISE]))
    f_lin, f_relu = final(col, c("linear")), final(col, c("relu"))
    f_smooth = np.sqrt(final(col, c("gelu")) * final(col, c("swish")))
    rows.append(Row("E1.4", run, "without BatchNorm ReLU behaves like linear (lr base)",
                    "abs(log10(relu / smooth)) - abs(log10(relu / linear)) of the final std", POSITIVE,
                    _l(np.abs(np.log10(f_relu / f_smooth)) - np.abs(np.log10(f_relu / f_lin))),
                    missing=[E1_PREMISE, "lr base: gelu and linear were run at lr base only"]))
    for ident, claim, stat, num, den, ctrl_num, ctrl_den in (
            ("E1.5", "BatchNorm is the way out for ReLU", "log10(final std, relu BN / no BN), lr base",
             c("relu", True), c("relu"), c("swish", True), c("swish")),
            ("E1.6", "ReLU escapes through the finite step", "log10(final std, relu lr large / small), BN off",
             c("relu", lr="large"), c("relu", lr="small"), c("swish", lr="large"), c("swish", lr="small"))):
        if not (has(num) and has(den)):
            rows.append(Row(ident, run, claim, stat, POSITIVE, [], ran=False,
                            missing=["no BatchNorm run saved" if ident == "E1.5" else "no lr ablation saved"]))
            continue
        controls = ([("the same for Swish", _l(np.log10(final(col, ctrl_num) / final(col, ctrl_den))), POSITIVE,
                      "mean")] if has(ctrl_num) and has(ctrl_den) else [])
        rows.append(Row(ident, run, claim, stat, POSITIVE, _l(np.log10(final(col, num) / final(col, den))),
                        controls=controls,
                        missing=[E1_PREMISE] + ([] if controls else ["no Swish run of this ablation (control)"])))
    return rows


# ----------------------------------------------------------------------------- E2


def certified(lam: np.ndarray) -> tuple[int, int, int]:
    """(certified negative, undecided, total): a recorded negative is a mean of Rayleigh quotients, so lambda_min is at
    most it (a negative eigenvalue certified) unless it lies below the rounding floor; >= 0 decides nothing."""
    floor = ROUNDING_FLOOR * float(np.max(np.abs(lam))) if lam.size else 0.0
    neg = int(np.sum(lam < -floor))
    return neg, int(lam.size) - neg, int(lam.size)


def e2_rows(run: str, files: dict[str, Any]) -> list[Row]:
    specs = (("E2.1", "collapsed_relu", "collapsed ReLU: lambda_min stays at 0 after the first epoch", 1, AT_MOST_10,
              None),
             ("E2.2", "normal_swish", "normal Swish: negative lambda_min in about 70 % of epochs", 0, SOME,
              Band(ABOUT_70.paper, ABOUT_70.band, "50 % to 90 % (the ledger's)")),
             ("E2.3", "collapsed_swish", "collapsed Swish: negative lambda_min in about 70 % of epochs", 0, SOME,
              Band(ABOUT_70.paper, ABOUT_70.band, "50 % to 90 % (the ledger's)")))
    rows = []
    for ident, t, claim, first, rule, band in specs:
        key = f"tracker:{t}"
        stat = f"fraction of epochs {first + 1}..100 with recorded lambda_min < 0"
        if key not in files:
            rows.append(Row(ident, run, claim, stat, rule, [], "fraction", ran=False,
                            missing=["no Hessian tracker arrays released for this run"]))
            continue
        lam = files[key]["min_eigenvalues"][first:]
        neg, undecided, total = certified(lam)
        note = (f"reliability: {neg} of {total} epochs certified negative (a Rayleigh quotient < 0 bounds "
                f"lambda_min above), {undecided} undecided (>= 0 or under the rounding floor): the estimator's "
                f"measured error, {ESTIMATOR_ERROR}, leaves a value >= 0 without a sign, and the arrays hold no "
                "lambda_max to scale it")
        if t == "collapsed_relu":
            zeros = int(np.sum(lam == 0))
            note += f"; {zeros} of {total} recorded values are exactly 0 (H v = 0 on the probe vector)"
        rows.append(Row(ident, run, claim, stat, rule, [float(np.mean(lam < 0))], "fraction", magnitude=band,
                        missing=[ONE_SEED, NO_TWIN], note=note))
    for i, t in enumerate(TRACKER_RUNS):
        key = f"tracker:{t}"
        claim = f"{t.replace('_', '/')}: variance and condition number correlate positively"
        stat = "Spearman(variance, condition number), epochs 2..100"
        if key not in files:
            rows.append(Row(f"E2.{4 + i}", run, claim, stat, POSITIVE, [], "correlation", ran=False,
                            missing=["no Hessian tracker arrays released for this run"]))
            continue
        cond = files[key]["condition_numbers"][1:]
        implied = cond * 1e-7
        rows.append(Row(f"E2.{4 + i}", run, claim, stat, POSITIVE, [tracker_rho(files[key])], "correlation",
                        magnitude=Band(PAPER_RHO[t], (PAPER_RHO[t] - RHO_BAND, min(PAPER_RHO[t] + RHO_BAND, 1.0)),
                                       f"+-{RHO_BAND:g} (the ledger's)"),
                        missing=[ONE_SEED, NO_TWIN],
                        note=(f"clamp control: 512 centred rows in 512 dimensions have rank <= 511, so the "
                              f"covariance's lambda_min is 0 and clamped at 1e-7 in every batch; the condition number "
                              f"is then 1e7 x lambda_max (implied lambda_max {implied.min():.3g} to "
                              f"{implied.max():.3g}, in (0, 1] in {int(np.sum((implied > 0) & (implied <= 1)))} of "
                              f"{implied.size} epochs): the correlation is of the variance with lambda_max (the "
                              "plan's fraction of epochs at the clamp: all of them, by rank; the arrays hold epoch "
                              "means only)")))
    return rows


# ----------------------------------------------------------------------------- E3, E4, E5


def e3_rows(run: str, g: dict[str, Any]) -> list[Row]:
    out = []
    for ident, probe, paper in (("E3.1", "linear", -14.72), ("E3.2", "mlp", -11.90)):
        diff = 100 * (float(g[f"head_acc_{probe}"]) - float(g[f"backbone_acc_{probe}"]))
        out.append(Row(ident, run, f"rotation is harder to read from h than from z ({probe} probe)",
                       f"h - z rotation accuracy, {probe} probe (points)", NEGATIVE, [diff], magnitude=band_of(paper),
                       missing=[ONE_SEED, NO_TWIN]))
    return out


def orbit_statistics(data: dict[str, Any]) -> dict[str, np.ndarray]:
    """Per orbit: log10 of the compression, of the compression relative to the whole space's, and of the
    D_intra / D_inter ratio z over h (the plan's E4.1-E4.3)."""
    out: dict[str, Any] = {}
    for space in ("z", "h"):
        F, lab = orbits_of(data, f"orbits_{space}")
        pts = F.reshape(-1, F.shape[-1])
        total = float(np.mean(np.sum((pts - pts.mean(axis=0)) ** 2, axis=1)))  # all 180 points about their centroid
        _, C = class_centroids(F, lab)
        D = np.sqrt(np.sum((C[:, None, :] - C[None, :, :]) ** 2, axis=-1))
        n_c = C.shape[0]
        inter = float(np.sum(D) / (n_c * (n_c - 1)))  # mean over distinct class pairs
        out[space] = (orbit_spread(F), total, intra_distance(F), inter)
    (sz, tz, iz, ez), (sh, th, ih, eh) = out["z"], out["h"]
    return {"compression": np.log10(sz / sh), "relative": np.log10((sz / tz) / (sh / th)),
            "intra_inter": np.log10((iz / ez) / (ih / eh))}


def e4_rows(run: str, files: dict[str, Any]) -> list[Row]:
    rows = []
    if "orbits" in files:
        st = orbit_statistics(files["orbits"])
        rel = ("orbit spread relative to the whole space's, z over h (E4.2)", _l(st["relative"]), POSITIVE, "mean")
        rows += [Row("E4.1", run, "the trained head compresses rotation orbits", "log10(spread z / spread h) per orbit",
                     POSITIVE, _l(st["compression"]), magnitude=ratio_band(21.85), controls=[rel],
                     missing=[ONE_NETWORK, NO_TWIN]),
                 Row("E4.2", run, "the compression is more than a shrinking of the whole space",
                     "log10((spread / whole-space spread) z over h) per orbit", POSITIVE, _l(st["relative"]),
                     missing=[ONE_NETWORK, NO_TWIN]),
                 Row("E4.3", run, "the head raises D_inter / D_intra",
                     "log10((D_intra / D_inter) z over h) per orbit", POSITIVE, _l(st["intra_inter"]),
                     magnitude=ratio_band(1.22), missing=[ONE_NETWORK, NO_TWIN])]
    else:
        rows += [Row(i, run, claim, "-", POSITIVE, [], ran=False, missing=["no orbit arrays released for this run"])
                 for i, claim in (("E4.1", "the trained head compresses rotation orbits"),
                                  ("E4.2", "the compression is more than a shrinking of the whole space"),
                                  ("E4.3", "the head raises D_inter / D_intra"))]
    c = files["curvature"]
    kz, kh = np.asarray(c["curvatures_z_per_seed"], float), np.asarray(c["curvatures_h_per_seed"], float)
    rows.append(Row("E4.4", run, "the head raises the curvature kappa along the sweep",
                    "log10(kappa h / kappa z) per sampling seed", POSITIVE, _l(np.log10(kh / kz)),
                    magnitude=ratio_band(1.93),
                    missing=["3 image samples through one network, not training seeds", NO_TWIN]))
    return rows


def e5_rows(run: str, files: dict[str, Any]) -> list[Row]:
    specs = (("E5.1", "the guillotine gap grows with depth", "slope of h - z (points / layer)", NEGATIVE, -8.31),
             ("E5.2", "the head's rotation probe falls with depth", "slope of h (points / layer)", NEGATIVE, -5.895),
             ("E5.3", "orbit compression grows with depth", "slope of log10 compression (/ layer)", POSITIVE, 0.1019),
             ("E5.4", "deeper heads give the backbone better downstream accuracy", "slope of z (points / layer)",
              POSITIVE, 2.415))
    if "depth:1" not in files:
        return [Row(i, run, claim, stat, rule, [], ran=False, missing=["no head-depth arrays released for this run"])
                for i, claim, stat, rule, _ in specs]
    z = [100 * float(files[f"depth:{d}"]["acc_z_linear"]) for d in DEPTHS]
    h = [100 * float(files[f"depth:{d}"]["acc_h_linear"]) for d in DEPTHS]
    st = [orbit_statistics(files[f"depth:{d}"]) for d in DEPTHS]
    gz_gh = [(orbits_of(files[f"depth:{d}"], "orbits_z")[0], orbits_of(files[f"depth:{d}"], "orbits_h")[0])
             for d in DEPTHS]
    log_comp = [math.log10(float(np.mean(orbit_spread(fz)) / np.mean(orbit_spread(fh)))) for fz, fh in gz_gh]
    value = {"slope of h - z (points / layer)": slope([b - a for a, b in zip(z, h, strict=True)]),
             "slope of h (points / layer)": slope(h), "slope of z (points / layer)": slope(z),
             "slope of log10 compression (/ layer)": slope(log_comp)}
    rel = slope([float(np.median(s["relative"])) for s in st])
    rows = []
    for ident, claim, stat, rule, paper in specs:
        note = (f"scale-invariant control: slope of the median relative compression (E4.2's statistic) {rel:+.4f} "
                "per layer" if stat.startswith("slope of log10") else "")
        rows.append(Row(ident, run, claim, stat, rule, [value[stat]], magnitude=band_of(paper),
                        missing=["one seed per depth: no interval", NO_TWIN], note=note))
    return rows


def all_rows(arrays: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Every claim row of every run, evaluated, in claim order then run order."""
    builders: tuple[Callable[[str, dict[str, Any]], list[Row]], ...] = (
        lambda r, f: e1_rows(r, f["collapse"]), e2_rows, lambda r, f: e3_rows(r, f["guillotine"]), e4_rows, e5_rows)
    rows = [row.evaluate() for run in RUNS if run in arrays for b in builders for row in b(run, arrays[run])]
    order = {run: i for i, run in enumerate(RUNS)}
    key = lambda r: (int(r["id"][1]), int(r["id"].split(".")[1]), order[r["run"]])  # noqa: E731
    return sorted(rows, key=key)


def agreement(rows: list[dict[str, Any]]) -> dict[str, str]:
    """Per claim id: whether the runs that could test it agree (rows not measured are left out and named)."""
    out: dict[str, str] = {}
    for ident in dict.fromkeys(r["id"] for r in rows):
        mine = [r for r in rows if r["id"] == ident]
        tested = [r for r in mine if r["category"] != NOT_MEASURED]
        cats = {r["category"] for r in tested}
        absent = [r["run"] for r in mine if r["category"] == NOT_MEASURED]
        tail = f" ({', '.join(absent)}: no arrays)" if absent else ""
        if not tested:
            out[ident] = "no run has the arrays"
            continue
        if len(cats) == 1:
            cat = cats.pop()
            out[ident] = (f"all {len(tested)} agree: {cat}" if len(tested) > 1 else f"one run only: {cat}") + tail
        else:
            out[ident] = "split: " + "; ".join(f"{r['run']} {r['category']}" for r in tested) + tail
        points = [r for r in tested if r["estimate"].n == 1]
        if points:  # one value per run: no interval, but the side each value lies on is a fact worth stating
            side = sum(r["point_side"] for r in points)
            out[ident] += f"; the single value on the claimed side in {side} of {len(points)}"
    return out
