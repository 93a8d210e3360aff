r"""Every figure the paper and its official logs print that the released arrays support, recomputed here by the
project's own code (orbit metrics: ``mini.invariance``; Spearman: scipy), beside the printed value.

Definitions (docs/paper.md, E1-E5), on the arrays as saved:

    E1     per seed s, configuration c: end / start = raw[s, -1] / raw[s, 0] of the normalised output's std
           (raw[:, 0] is after the first epoch: no value before training was saved)
    E3     probes as accuracies x 100; h - z in points; the log's "gap" = MLP - linear, its "linear loss" =
           z linear - h linear, its "nonlinearity gap" = gap(h) - gap(z)
    kappa  per sampling seed the mean sweep curvature of z and h, ratio = kappa_h / kappa_z; mean and population std
    E4     orbits grouped by ``orbit_ids`` (15 orbits x 12 rotations): spread = mean squared distance to the orbit
           centroid, D_intra = mean pairwise distance in an orbit, D_inter = mean distance between the 5 class
           centroids (+- over the 10 pairs), ratio D_inter / D_intra = ratio of the means, +- by first-order
           propagation r sqrt((s_inter / m_inter)^2 + (s_intra / m_intra)^2); compression = mean spread z / mean
           spread h. All +- are population std (ddof 0) over orbits.
    E2     Spearman(variances, condition_numbers) over epochs 2..100; epochs with min_eigenvalues < 0
    E5     per depth: the two linear-probe accuracies, h - z, the orbit compression; least-squares slopes over
           depth 1..3 of h - z, h, z (points per layer) and log10 compression (per layer)

A printed figure agrees when the recomputed value rounded to the printed decimals equals it (``agrees``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats as sps

from mini.invariance import OrbitGeometry, compression, orbit_geometry
from scale.ledger.released.schema import DEPTHS, ORBITS, ROTATIONS, TRACKER_RUNS

AGREE_SLACK = 1e-9  # float slack on top of half a unit of the printed last digit


@dataclass(frozen=True)
class Figure:
    """One printed figure (``printed`` None: the paper prints none) beside its recomputation."""

    run: str
    experiment: str
    quantity: str
    printed: float | None
    decimals: int | None
    source: str
    recomputed: float
    tolerance: float | None = None  # an agreement band of its own (the paper's "about 70"), else rounding

    @property
    def agrees(self) -> bool | None:
        if self.printed is None:
            return None
        tol = self.tolerance if self.tolerance is not None else 0.5 * 10.0 ** -self.decimals
        return abs(self.recomputed - self.printed) <= tol + AGREE_SLACK


def orbits_of(data: dict[str, Any], key: str) -> tuple[np.ndarray, np.ndarray]:
    """``(F, labels)``: the saved points of ``key`` ("orbits_z" / "orbits_h") as (orbits, rotations, dim) in
    ascending orbit id and angle, and one label per orbit; ``ValueError`` if an orbit is not 12 points of one label."""
    ids, labels, angles = data["orbit_ids"], data["orbit_labels"], data["orbit_angles"]
    uniq = np.unique(ids)
    if uniq.size != ORBITS:
        raise ValueError(f"{uniq.size} orbit ids, expected {ORBITS}")
    F, lab = [], []
    for oid in uniq:
        rows = np.flatnonzero(ids == oid)
        if rows.size != ROTATIONS or np.unique(labels[rows]).size != 1:
            raise ValueError(f"orbit {oid}: {rows.size} points of labels {np.unique(labels[rows]).tolist()}")
        rows = rows[np.argsort(angles[rows], kind="stable")]
        F.append(np.asarray(data[key], dtype=np.float64)[rows])
        lab.append(int(labels[rows[0]]))
    return np.stack(F), np.asarray(lab)


def geometry(data: dict[str, Any]) -> tuple[OrbitGeometry, OrbitGeometry]:
    """E4's metrics of z and of h (``mini.invariance.orbit_geometry``) in float64."""
    Fz, lab = orbits_of(data, "orbits_z")
    Fh, _ = orbits_of(data, "orbits_h")
    return orbit_geometry(Fz, lab), orbit_geometry(Fh, lab)


def ratio_pm(g: OrbitGeometry) -> float:
    """The +- printed beside D_inter / D_intra: first-order propagation of the two stds (module docstring)."""
    return g.ratio_of_means * math.hypot(g.d_inter.std / g.d_inter.mean, g.d_intra.std / g.d_intra.mean)


def slope(y: list[float], x: tuple[int, ...] = DEPTHS) -> float:
    """Least-squares slope of ``y`` on ``x``: sum (x - xbar)(y - ybar) / sum (x - xbar)^2."""
    xa, ya = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    return float(np.sum((xa - xa.mean()) * (ya - ya.mean())) / np.sum((xa - xa.mean()) ** 2))


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    return float(sps.spearmanr(a, b).statistic)


def tracker_rho(t: dict[str, Any]) -> float:
    """E2's Spearman over epochs 2..100 (the first epoch left out, as the paper computes it)."""
    return spearman(t["variances"][1:], t["condition_numbers"][1:])


def e1_end_over_start(cfg: dict[str, Any]) -> np.ndarray:
    raw = cfg["raw"]
    return raw[:, -1] / raw[:, 0]


def e1_consistency(cfg: dict[str, Any]) -> float:
    """Largest |stored mean - mean of raw| and |stored std - population std of raw| over epochs."""
    return float(max(np.max(np.abs(cfg["mean"] - cfg["raw"].mean(axis=0))),
                     np.max(np.abs(cfg["std"] - cfg["raw"].std(axis=0)))))


# The printed figures: (run, experiment, quantity, printed, decimals, source). Sources: the paper's reference table
# (docs/paper.md), the runs' experiment_log.txt (upstream results/<run>/experiment_log.txt), docs/paper.md's E5
# table (typed from these arrays by an earlier round of this project).
PAPER_TABLE = "paper, reference table (docs/paper.md)"
E2_TEXT = "paper, E2 (docs/paper.md)"
E5_TABLE = "docs/paper.md E5 table (typed by hand from the arrays)"
LOG = "experiment_log.txt"
LOG_PROBES = {  # run: z linear, z MLP, h linear, h MLP, log's z gap, h gap, linear loss, nonlinearity gap (fractions)
    "R18-C10": (0.5227, 0.5546, 0.3755, 0.4356, 0.0319, 0.0601, 0.1472, 0.0282),
    "ViT-C10": (0.4075, 0.4422, 0.3492, 0.4087, 0.0347, 0.0595, 0.0583, 0.0248),
    "R18-C100": (0.4201, 0.4453, 0.3119, 0.3416, 0.0252, 0.0297, 0.1082, 0.0045),
}
LOG_KAPPA = {  # run: per seed (z, h, ratio), then mean z, std z, mean h, std h, mean ratio, std ratio
    "R18-C10": (((0.124117, 0.240222, 1.94), (0.128678, 0.248455, 1.93), (0.123348, 0.238339, 1.93)),
                (0.125381, 0.002353, 0.242339, 0.004392, 1.93, 0.00)),
    "ViT-C10": (((0.122452, 0.316167, 2.58), (0.122799, 0.320362, 2.61), (0.122328, 0.314525, 2.57)),
                (0.122526, 0.000200, 0.317018, 0.002458, 2.59, 0.02)),
    "R18-C100": (((0.125224, 0.232913, 1.86), (0.128437, 0.235928, 1.84), (0.128703, 0.234756, 1.82)),
                 (0.127455, 0.001581, 0.234532, 0.001241, 1.84, 0.01)),
}
PAPER_E4 = {  # R18-C10, the paper's table: (quantity, printed, decimals)
    "orbit spread z (x 1e-2)": (2.25, 2), "orbit spread z std (x 1e-2)": (1.07, 2),
    "orbit spread h (x 1e-2)": (0.10, 2), "orbit spread h std (x 1e-2)": (0.06, 2),
    "compression (x)": (21.85, 2), "D_intra z": (0.211, 3), "D_intra z std": (0.045, 3), "D_intra h": (0.044, 3),
    "D_intra h std": (0.011, 3), "D_intra z / h (x)": (4.76, 2), "D_inter z": (0.432, 3), "D_inter z std": (0.052, 3),
    "D_inter h": (0.111, 3), "D_inter h std": (0.014, 3), "D_inter z / h (x)": (3.89, 2),
    "D_inter / D_intra z": (2.04, 2), "D_inter / D_intra z +-": (0.52, 2), "D_inter / D_intra h": (2.50, 2),
    "D_inter / D_intra h +-": (0.72, 2), "D_inter / D_intra h / z (x)": (1.22, 2),
}
PAPER_RHO = {"normal_swish": 0.339, "collapsed_swish": 0.609, "collapsed_relu": 0.669}
ABOUT_70 = (70.0, 5.0)  # "about 70 of 100 epochs": agreement within 65..75
E5_PRINTED = {1: (47.52, 47.40, -0.12, 49.1), 2: (52.82, 39.70, -13.12, 57.2), 3: (52.35, 35.61, -16.74, 78.5)}
E5_SLOPES = {"slope of h - z (points / layer)": (-8.31, 2), "slope of h (points / layer)": (-5.895, 3),
             "slope of log10 compression (/ layer)": (0.1019, 4), "slope of z (points / layer)": (2.415, 3)}


def e4_values(data: dict[str, Any]) -> dict[str, float]:
    """The E4 quantities of ``PAPER_E4`` (and the same for a run the paper prints none of)."""
    gz, gh = geometry(data)
    return {"orbit spread z (x 1e-2)": 100 * gz.spread.mean, "orbit spread z std (x 1e-2)": 100 * gz.spread.std,
            "orbit spread h (x 1e-2)": 100 * gh.spread.mean, "orbit spread h std (x 1e-2)": 100 * gh.spread.std,
            "compression (x)": compression(gz, gh), "D_intra z": gz.d_intra.mean, "D_intra z std": gz.d_intra.std,
            "D_intra h": gh.d_intra.mean, "D_intra h std": gh.d_intra.std,
            "D_intra z / h (x)": gz.d_intra.mean / gh.d_intra.mean, "D_inter z": gz.d_inter.mean,
            "D_inter z std": gz.d_inter.std, "D_inter h": gh.d_inter.mean, "D_inter h std": gh.d_inter.std,
            "D_inter z / h (x)": gz.d_inter.mean / gh.d_inter.mean, "D_inter / D_intra z": gz.ratio_of_means,
            "D_inter / D_intra z +-": ratio_pm(gz), "D_inter / D_intra h": gh.ratio_of_means,
            "D_inter / D_intra h +-": ratio_pm(gh),
            "D_inter / D_intra h / z (x)": gh.ratio_of_means / gz.ratio_of_means}


def e5_values(data: dict[str, dict[str, Any]]) -> dict[int, tuple[float, float, float, float]]:
    """Per depth: z and h linear-probe accuracy (%), h - z (points), orbit compression (x)."""
    out = {}
    for d in DEPTHS:
        f = data[f"depth:{d}"]
        z, h = 100 * float(f["acc_z_linear"]), 100 * float(f["acc_h_linear"])
        gz, gh = geometry(f)
        out[d] = (z, h, h - z, compression(gz, gh))
    return out


def e5_slopes(per_depth: dict[int, tuple[float, float, float, float]]) -> dict[str, float]:
    col = {k: [per_depth[d][i] for d in DEPTHS] for i, k in enumerate(("z", "h", "gap", "comp"))}
    return {"slope of h - z (points / layer)": slope(col["gap"]), "slope of h (points / layer)": slope(col["h"]),
            "slope of log10 compression (/ layer)": slope([math.log10(c) for c in col["comp"]]),
            "slope of z (points / layer)": slope(col["z"])}


def recompute(arrays: dict[str, dict[str, Any]]) -> list[Figure]:
    """Every printed figure the arrays support, and the E1 / E4 figures the paper prints none of."""
    out: list[Figure] = []
    for run, files in arrays.items():
        g = files["guillotine"]
        zl, zm, hl, hm = (100 * float(g[k]) for k in ("backbone_acc_linear", "backbone_acc_mlp", "head_acc_linear",
                                                       "head_acc_mlp"))
        p = LOG_PROBES[run]
        for q, printed, value in (
                ("z linear probe (%)", p[0], zl), ("z MLP probe (%)", p[1], zm), ("h linear probe (%)", p[2], hl),
                ("h MLP probe (%)", p[3], hm), ("z MLP - linear (points)", p[4], zm - zl),
                ("h MLP - linear (points)", p[5], hm - hl), ("z - h linear, 'linear loss' (points)", p[6], zl - hl),
                ("h gap - z gap, 'nonlinearity gap' (points)", p[7], (hm - hl) - (zm - zl)),
                ("stored gap_backbone = z MLP - linear (points)", p[4], 100 * float(g["gap_backbone"])),
                ("stored gap_head = h MLP - linear (points)", p[5], 100 * float(g["gap_head"]))):
            out.append(Figure(run, "E3", q, round(100 * printed, 2), 2, LOG, value))
        if run == "R18-C10":
            for q, printed, value in (("z linear probe (%)", 52.27, zl), ("h linear probe (%)", 37.55, hl),
                                      ("h - z linear (points)", -14.72, hl - zl), ("z MLP probe (%)", 55.46, zm),
                                      ("h MLP probe (%)", 43.56, hm), ("h - z MLP (points)", -11.90, hm - zm)):
                out.append(Figure(run, "E3", q, printed, 2, PAPER_TABLE, value))
        c = files["curvature"]
        seeds, summ = LOG_KAPPA[run]
        kz, kh = np.asarray(c["curvatures_z_per_seed"], float), np.asarray(c["curvatures_h_per_seed"], float)
        ratios = np.asarray(c["ratios_per_seed"], float)
        for i, (pz, ph, pr) in enumerate(seeds):
            out += [Figure(run, "E3 kappa", f"kappa z, sampling seed {i + 1}", pz, 6, LOG, kz[i]),
                    Figure(run, "E3 kappa", f"kappa h, sampling seed {i + 1}", ph, 6, LOG, kh[i]),
                    Figure(run, "E3 kappa", f"kappa h / z, sampling seed {i + 1}", pr, 2, LOG, kh[i] / kz[i])]
        for q, printed, dec, value in (("kappa z mean", summ[0], 6, kz.mean()), ("kappa z std", summ[1], 6, kz.std()),
                                       ("kappa h mean", summ[2], 6, kh.mean()), ("kappa h std", summ[3], 6, kh.std()),
                                       ("kappa ratio mean", summ[4], 2, ratios.mean()),
                                       ("kappa ratio std", summ[5], 2, ratios.std()),
                                       ("stored mean_ratio", summ[4], 2, float(c["mean_ratio"])),
                                       ("stored mean_curv_z", summ[0], 6, float(c["mean_curv_z"]))):
            out.append(Figure(run, "E3 kappa", q, printed, dec, LOG, float(value)))
        if run == "R18-C10":
            out += [Figure(run, "E3 kappa", "kappa z (paper)", 0.125, 3, PAPER_TABLE, kz.mean()),
                    Figure(run, "E3 kappa", "kappa h (paper)", 0.242, 3, PAPER_TABLE, kh.mean()),
                    Figure(run, "E3 kappa", "kappa h / z (paper)", 1.93, 2, PAPER_TABLE, kh.mean() / kz.mean())]
        if "orbits" in files:
            for q, value in e4_values(files["orbits"]).items():
                printed, dec = PAPER_E4[q] if run == "R18-C10" else (None, None)
                out.append(Figure(run, "E4", q, printed, dec, PAPER_TABLE if printed is not None else "-", value))
        for t in TRACKER_RUNS:
            if f"tracker:{t}" not in files:
                continue
            tr = files[f"tracker:{t}"]
            out.append(Figure(run, "E2", f"{t}: Spearman(variance, condition number), epochs 2..100", PAPER_RHO[t],
                              3, E2_TEXT, tracker_rho(tr)))
            lam = tr["min_eigenvalues"]
            if t.endswith("swish"):
                out.append(Figure(run, "E2", f"{t}: epochs of 100 with recorded lambda_min < 0", ABOUT_70[0], 0,
                                  E2_TEXT + ': "about 70 of 100"', float(np.sum(lam < 0)), tolerance=ABOUT_70[1]))
            else:
                out.append(Figure(run, "E2", f"{t}: epochs 2..100 with recorded lambda_min != 0", 0.0, 0,
                                  E2_TEXT + ': "at exactly 0 after the first epoch"', float(np.sum(lam[1:] != 0))))
        if "depth:1" in files:
            per = e5_values(files)
            for d in DEPTHS:
                for q, printed, dec, value in zip(("z linear probe (%)", "h linear probe (%)", "h - z (points)",
                                                   "orbit compression (x)"), E5_PRINTED[d], (2, 2, 2, 1), per[d],
                                                  strict=True):
                    out.append(Figure(run, "E5", f"depth {d}: {q}", printed, dec, E5_TABLE, value))
            for q, value in e5_slopes(per).items():
                printed, dec = E5_SLOPES[q]
                out.append(Figure(run, "E5", q, printed, dec, E5_TABLE, value))
        for cfg, traj in files["collapse"].items():
            out.append(Figure(run, "E1", f"{cfg}: std end / first epoch, mean over seeds", None, None,
                              "paper: figure only", float(e1_end_over_start(traj).mean())))
            out.append(Figure(run, "E1", f"{cfg}: stored mean/std vs raw, largest difference", 0.0, 12,
                              "internal: mean and std over seeds", e1_consistency(traj)))
    return out


# Printed figures no released array supports.
UNSUPPORTED: tuple[tuple[str, str], ...] = (
    ("E4: the untrained head's 0.97x 'compression' (the compression is learned)",
     "no untrained head's orbits were saved, in any run"),
    ("E6: DINO heads compress, VICReg / Barlow Twins heads expand", "no array of the pretrained models was released"),
    ("E2 on ViT-C10 and R18-C100", "the Hessian tracker was released for R18-C10 only"),
    ("E4 on R18-C100", "no orbit_visualization.npy in results/cifar100"),
    ("E5 on ViT-C10 and R18-C100", "the head-depth ablation was released for R18-C10 only"),
    ("E1 as numbers", "the paper shows E1 as figures; the recomputed end / first-epoch ratios stand without a printed "
                      "value"),
)
