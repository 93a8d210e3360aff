"""E1's collapse statistics and E4's orbit metrics, recomputed from their definitions (docs/paper.md).

Definitions (docs/paper.md, experiments E1 and E4; ``mini/collapse_metrics.py``, ``mini/invariance.py``):

E1, for a batch ``H`` (n, k) with rows ``u_i = h_i / |h_i|`` ("the L2-normalised projector output"):

    std(H)  = 1/k sum_c sqrt( sum_i (u_ic - mean_i u_ic)^2 / (n - 1) )          mean per-dimension std
    cond(H) = lambda_max(C) / max(lambda_min(C), 1e-7),  C = sum_i (u_i - mean u)(u_i - mean u)^T / (n - 1)

E4, for features ``F`` (n_orbits, P, dim) with one class label per orbit and sweeps ``S`` (n_sweeps, T, dim):

    spread_o  = 1/P sum_p |f_op - c_o|^2,            c_o = 1/P sum_p f_op          (squared distances)
    D_intra_o = mean over the P (P - 1) pairs p != q of |f_op - f_oq|
    D_inter   = mean over the class pairs a != b of |C_a - C_b|,   C_a = mean of all points of class a
    ratio_o   = D_inter(class(o)) / D_intra_o,      D_inter(a) = mean_{b != a} |C_a - C_b|
    kappa_s   = mean_{0 < i < T-1} |r_{i+1} - 2 r_i + r_{i-1}|                      (r_i = S[s, i])
    compression = mean_o spread_o(z) / mean_o spread_o(h)

each reported as mean, population standard deviation and count (over orbits, over unordered class pairs
for ``D_inter``, over sweeps for ``kappa``). E4's features are normalised before and after the head:
``z_n = z / |z|``, ``h_n = h(z_n) / |h(z_n)|``.

Statements checked:

(1) On hypothesis-drawn instances (every ``n >= 2``, ``k >= 1``; rows of norms over twelve decades; nearly
    collapsed batches down to a spread of ``1e-9``; orbits of 2-12 points in 1-8 dimensions, 2-5 classes
    with arbitrary label values in shuffled order, compressed orbits down to ``1e-9`` of their centre,
    sweeps of 3-10 steps) the functions under test equal the definitions above, recomputed here afresh
    in plain NumPy (loops over pairs; the covariance spectrum from an SVD, not ``eigvalsh``), on NumPy
    and on torch tensors (scale calls them on torch; skipped without torch).
(2) On instances whose answer is known in closed form and non-zero: a regular polygon of ``n >= 3``
    unit rows in a plane has ``C = n / (2 (n - 1)) I_2``; a rotated cross-polytope ``{+-Q e_c}`` has
    ``C = 2 / (2k - 1) I_k``; orbits that are regular ``P``-gons of radius ``rho`` have ``spread = rho^2``
    and ``D_intra = 2 rho cot(pi / 2P) / (P - 1)``; class centroids on a regular ``m``-gon of radius
    ``R`` give ``D_inter = 2 R cot(pi / 2m) / (m - 1)`` with chords ``2 R sin(pi j / m)``; a sweep along
    a circle at angular step ``delta`` has ``kappa = 4 rho sin^2(delta / 2)``, along a parabola
    ``a + i b + i^2 c`` it has ``kappa = 2 |c|``.

Hypotheses, exactly: rows of ``H`` and points fed to ``normalized_features`` are non-zero (the definition
divides by ``|h_i|``; the drawn rows are non-zero by construction, asserted); ``D_inter`` needs two classes.
The ratios (``D_inter / D_intra``, the compression) are not set aside where a denominator nears the
features' round-off: their bounds carry the relative error of each factor, ``bound(x) / x``, so they widen
exactly as the ratio's conditioning does (an earlier premise discarded such draws).

Tolerances: every quantity is compared within a bound derived from the rounding of its inputs, relative
to their own scale, never absolute. A coordinate of a normalised row is rounded to ``U_ROUNDOFF`` (of
``|u| = 1``); each coordinate of a difference or mean of at most 64 features to ``DIFF_ROUNDOFF x`` the
largest feature norm, so a distance between two of them to ``2 sqrt(dim)`` times that (a squared distance
``x^2`` to ``2 x`` times that, plus its square; a second difference to twice it); arithmetic on a value to
``ARITH_REL`` of it; a ratio to the sum of its parts' relative bounds. The covariance's eigenvalues move by at most
``2 sqrt(lambda_max n k / (n - 1)) U_ROUNDOFF + n k U_ROUNDOFF^2 / (n - 1) + SOLVER_REL lambda_max``
(the perturbation of ``C`` by the rows' rounding, plus a backward-stable solver), and the condition
number by ``(1 + cond)`` times that over ``max(lambda_min, 1e-7)``. Closed forms: the same bounds around
the constructed points.

Negative controls: rows on half a circle are not isotropic (``cond`` above 1 and ``std`` off the polygon's
formula by more than ``MATERIAL_REL``); an orbit on half a circle is off the ``D_intra`` and ``spread``
formulas and a sweep with uneven steps off the ``kappa`` formula by more than ``MATERIAL_REL``: the
comparisons can fail.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from conftest import seeds
from mini.collapse_metrics import COND_FLOOR, collapse_stats, covariance_condition, representation_std
from mini.heads import init_head
from mini.invariance import (
    compression,
    inter_distances,
    intra_distance,
    normalized_features,
    orbit_geometry,
    orbit_spread,
    sweep_curvature,
)

EPS = float(np.finfo(float).eps)
U_ROUNDOFF = 8 * EPS  # one coordinate of u = h / |h| (either normalisation), of |u| = 1
DIFF_ROUNDOFF = 64 * EPS  # a difference or a mean of <= 64 features, of the largest feature norm
ARITH_REL = 1e-13  # sums of <= 144 terms, square roots, divisions: of the value itself
SOLVER_REL = 64 * EPS  # a backward-stable symmetric eigensolver or SVD (k <= 12), of lambda_max
MATERIAL_REL = 1e-3  # a negative control differs by this fraction of the value (ten decades above round-off)
PAPER_COND_FLOOR = 1e-7  # the paper's clamp of lambda_min (E1)
BACKENDS = ("numpy", "torch")


# --------------------------------------------------------------------------------------------------
# The definitions, written afresh (plain NumPy, loops where the definition has a sum)
# --------------------------------------------------------------------------------------------------


def unit_rows(H: np.ndarray) -> np.ndarray:
    return np.stack([h / math.sqrt(sum(x * x for x in h)) for h in H])


def e1_reference(H: np.ndarray) -> tuple[float, np.ndarray]:
    """``(std, eigenvalues of C)`` from the definition: per-dimension sample stds; ``C``'s spectrum as the
    squared singular values of the centred rows over ``n - 1`` (zero beyond their rank)."""
    U = unit_rows(H)
    n, k = U.shape
    stds = []
    for c in range(k):
        mean = sum(U[:, c]) / n
        stds.append(math.sqrt(sum((x - mean) ** 2 for x in U[:, c]) / (n - 1)))
    s = np.linalg.svd(U - U.mean(axis=0), compute_uv=False)
    lam = np.zeros(k)
    lam[: len(s)] = s**2 / (n - 1)
    return sum(stds) / k, np.sort(lam)


def cond_of(lam: np.ndarray) -> float:
    return float(lam[-1]) / max(float(lam[0]), PAPER_COND_FLOOR)


def cond_bound(lam: np.ndarray, n: int, k: int) -> float:
    """How far ``cond`` may move under the rows' rounding (module docstring)."""
    lmax = max(float(lam[-1]), 0.0)
    dlam = 2 * math.sqrt(lmax * n * k / (n - 1)) * U_ROUNDOFF + n * k * U_ROUNDOFF**2 / (n - 1) + SOLVER_REL * lmax
    return (1 + cond_of(lam)) * dlam / max(lam[0], PAPER_COND_FLOOR) + ARITH_REL * cond_of(lam)


def norm(x: np.ndarray) -> float:
    return math.sqrt(sum(float(v) * float(v) for v in np.ravel(x)))


def mean_and_std(values: list[float]) -> tuple[float, float]:
    m = sum(values) / len(values)
    return m, math.sqrt(sum((v - m) ** 2 for v in values) / len(values))


def e4_reference(F: np.ndarray, labels: list, S: np.ndarray) -> dict:
    """Every E4 metric from its definition: per-orbit lists, class pairs, per-class means, sweeps."""
    n_o, P, _ = F.shape
    spread, intra = [], []
    for o in range(n_o):
        c = sum(F[o, p] for p in range(P)) / P
        spread.append(sum(norm(F[o, p] - c) ** 2 for p in range(P)) / P)
        intra.append(sum(norm(F[o, p] - F[o, q]) for p in range(P) for q in range(P) if p != q) / (P * (P - 1)))
    classes = sorted(set(labels))
    C = {a: sum(F[o, p] for o in range(n_o) if labels[o] == a for p in range(P)) / (P * labels.count(a))
         for a in classes}
    pairs = [norm(C[a] - C[b]) for i, a in enumerate(classes) for b in classes[i + 1:]]
    per_class = {a: sum(norm(C[a] - C[b]) for b in classes if b != a) / (len(classes) - 1) for a in classes}
    ratio = [per_class[labels[o]] / intra[o] for o in range(n_o)]
    kappa = [sum(norm(r[i + 1] - 2 * r[i] + r[i - 1]) for i in range(1, len(r) - 1)) / (len(r) - 2) for r in S]
    return {"spread": spread, "intra": intra, "pairs": pairs, "per_class": [per_class[a] for a in classes],
            "ratio": ratio, "kappa": kappa}


def dist_roundoff(F: np.ndarray) -> float:
    """The round-off of a distance between two points or means of ``F`` (..., dim): each coordinate of
    either is rounded to ``DIFF_ROUNDOFF`` of the largest feature norm."""
    return 2 * math.sqrt(F.shape[-1]) * DIFF_ROUNDOFF * float(np.linalg.norm(F, axis=-1).max())


def dist_bound(value: float, D: float) -> float:
    """A distance-like value (a norm of differences or means), its inputs rounded to ``D``."""
    return ARITH_REL * abs(value) + D


def sq_bound(value: float, D: float) -> float:
    """A squared distance: ``|(x + e)^2 - x^2| <= 2 |x| e + e^2``."""
    return ARITH_REL * abs(value) + 2 * math.sqrt(abs(value)) * D + D * D


def as_backend(x: np.ndarray, backend: str):
    if backend == "numpy":
        return x
    torch = pytest.importorskip("torch")
    return torch.from_numpy(np.ascontiguousarray(x))


def to_numpy(x) -> np.ndarray:
    return np.asarray(x.cpu().numpy() if hasattr(x, "cpu") else x, dtype=float)


# --------------------------------------------------------------------------------------------------
# (1) Hypothesis-drawn instances against the definitions
# --------------------------------------------------------------------------------------------------


@st.composite
def e1_batches(draw) -> np.ndarray:
    """A batch (n, k): rows of norms over twelve decades, either spread or nearly collapsed onto one row."""
    n, k, seed = draw(st.integers(2, 40)), draw(st.integers(1, 12)), draw(seeds)
    spread = draw(st.sampled_from([1.0, 1e-3, 1e-6, 1e-9]))  # 1: generic; below: near-collapse
    rng = np.random.default_rng(seed)
    rows = rng.standard_normal(k) + spread * rng.standard_normal((n, k))
    return rows * 10.0 ** rng.uniform(-6, 6, size=(n, 1))


@pytest.mark.parametrize("backend", BACKENDS)
@given(H=e1_batches())
def test_collapse_statistics_are_their_definition(backend: str, H: np.ndarray) -> None:
    n, k = H.shape
    assert np.all(np.linalg.norm(H, axis=1) > 0)  # the definition divides by |h_i|: e1_batches draws no 0 row
    std_ref, lam = e1_reference(H)
    X = as_backend(H, backend)
    std, cond = collapse_stats(X)
    assert COND_FLOOR == PAPER_COND_FLOOR
    assert std == representation_std(X) and cond == covariance_condition(X)
    assert abs(std - std_ref) <= 4 * U_ROUNDOFF + ARITH_REL * std_ref, (n, k, std, std_ref)
    assert abs(cond - cond_of(lam)) <= cond_bound(lam, n, k), (n, k, cond, cond_of(lam), lam)


@st.composite
def e4_instances(draw) -> tuple[np.ndarray, list, np.ndarray]:
    """Orbits around class-dependent centres, radii from 1 down to 1e-9 of the centre (compressed orbits),
    arbitrary label values in shuffled order, random-walk sweeps; optionally on the unit sphere (E4)."""
    n_classes, per_class = draw(st.integers(2, 5)), draw(st.integers(1, 3))
    P, dim, n_sweeps, steps = draw(st.integers(2, 12)), draw(st.integers(1, 8)), draw(st.integers(1, 4)), \
        draw(st.integers(3, 10))
    radius, seed = draw(st.sampled_from([1.0, 1e-2, 1e-5, 1e-9])), draw(seeds)
    unit = draw(st.booleans()) if dim >= 2 else False  # on the unit sphere of R^1 an orbit is one point
    rng = np.random.default_rng(seed)
    values = [int(v) for v in rng.choice(1000, size=n_classes, replace=False)]  # arbitrary label values
    labels = [values[a] for a in rng.permutation(np.repeat(np.arange(n_classes), per_class))]
    centre = {v: rng.standard_normal(dim) for v in values}
    F = np.stack([centre[a] + 0.3 * rng.standard_normal(dim) + radius * rng.standard_normal((P, dim))
                  for a in labels])
    S = np.cumsum(rng.standard_normal((n_sweeps, steps, dim)), axis=1) * 10.0 ** rng.uniform(-3, 3)
    if unit:
        F, S = F / np.linalg.norm(F, axis=-1, keepdims=True), S / np.linalg.norm(S, axis=-1, keepdims=True)
    return F * 10.0 ** rng.uniform(-3, 3), labels, S


def check_stat(stat, values: list[float], bound: float, name: str) -> None:
    mean, std = mean_and_std(values)
    assert stat.n == len(values), name
    assert abs(stat.mean - mean) <= bound + ARITH_REL * abs(mean), (name, stat.mean, mean)
    assert abs(stat.std - std) <= bound + ARITH_REL * std, (name, stat.std, std)


@pytest.mark.parametrize("backend", BACKENDS)
@given(inst=e4_instances(), inst_h=e4_instances())
@example(inst=(np.array([[[1.0, 0.0], [0.0, 1.0]], [[2.0, 2.0], [2.0, 3.0]]]), [7, 3],
               np.array([[[0.0, 0.0], [1.0, 0.0], [3.0, 1.0]]])), inst_h=None)
def test_orbit_metrics_are_their_definition(backend: str, inst, inst_h) -> None:
    F, labels, S = inst
    ref = e4_reference(F, labels, S)
    D = dist_roundoff(F)
    Ds = dist_roundoff(S)
    Fx, Sx, lab = as_backend(F, backend), as_backend(S, backend), as_backend(np.array(labels), backend)

    # the per-orbit, per-class and per-sweep arrays
    for got, want, bound in (
        (orbit_spread(Fx), ref["spread"], sq_bound),
        (intra_distance(Fx), ref["intra"], dist_bound),
        (inter_distances(Fx, lab)[1], ref["per_class"], dist_bound),
    ):
        got = to_numpy(got)
        assert got.shape == (len(want),)
        for g, w in zip(got, want):
            assert abs(g - w) <= bound(w, D), (g, w)
    for g, w in zip(to_numpy(sweep_curvature(Sx)), ref["kappa"], strict=True):
        assert abs(g - w) <= dist_bound(w, 2 * Ds), (g, w)

    # the reported statistics
    geo = orbit_geometry(Fx, lab, Sx)
    check_stat(geo.spread, ref["spread"], max(sq_bound(v, D) for v in ref["spread"]), "spread")
    check_stat(geo.d_intra, ref["intra"], max(dist_bound(v, D) for v in ref["intra"]), "D_intra")
    check_stat(geo.d_inter, ref["pairs"], max(dist_bound(v, D) for v in ref["pairs"]), "D_inter")
    check_stat(geo.kappa, ref["kappa"], max(dist_bound(v, 2 * Ds) for v in ref["kappa"]), "kappa")
    ratio_bound = max(r * (dist_bound(i, D) / i + dist_bound(r * i, D) / (r * i)) * 1.01
                      for r, i in zip(ref["ratio"], ref["intra"]))
    check_stat(geo.ratio, ref["ratio"], ratio_bound, "ratio")
    inter_mean, intra_mean = mean_and_std(ref["pairs"])[0], mean_and_std(ref["intra"])[0]
    rom = inter_mean / intra_mean
    assert abs(geo.ratio_of_means - rom) <= 1.01 * rom * (dist_bound(inter_mean, D) / inter_mean
                                                          + dist_bound(intra_mean, D) / intra_mean)
    if inst_h is not None:  # compression: mean spread of one feature space over another's
        Fh = inst_h[0]
        spread_h = e4_reference(Fh, inst_h[1], inst_h[2])["spread"]
        Dh = dist_roundoff(Fh)
        h_mean, z_mean = sum(spread_h) / len(spread_h), sum(ref["spread"]) / len(ref["spread"])
        geo_h = orbit_geometry(as_backend(Fh, backend), as_backend(np.array(inst_h[1]), backend))
        want = z_mean / h_mean
        err = max(sq_bound(v, D) for v in ref["spread"]) / z_mean + max(sq_bound(v, Dh) for v in spread_h) / h_mean
        assert abs(compression(geo, geo_h) - want) <= 1.01 * want * err + ARITH_REL * want


@given(seed=seeds, n=st.integers(1, 12), d=st.integers(1, 6), spec=st.sampled_from(["linear", "gelu2", "tanh3"]),
       log_scale=st.floats(-6, 6))
def test_e4_features_are_normalised_before_and_after_the_head(seed: int, n: int, d: int, spec: str,
                                                              log_scale: float) -> None:
    """``normalized_features``: ``z_n = z / |z|`` and ``h_n = h(z_n) / |h(z_n)|`` (the head sees ``z_n``)."""
    rng = np.random.default_rng(seed)
    head = init_head(spec, d, 3, 4, rng)
    Z = rng.standard_normal((2, n, d)) * 10.0**log_scale
    zn, hn = normalized_features(Z, head)
    assert zn.shape == Z.shape and hn.shape == (2, n, 3)
    assert np.abs(zn - np.stack([unit_rows(O) for O in Z])).max() <= 4 * U_ROUNDOFF
    # the head sees those z_n (its output there, normalised): the same z_n, so only h's normalisation rounds
    assert np.abs(hn - np.stack([unit_rows(head(O)) for O in zn])).max() <= 4 * U_ROUNDOFF


# --------------------------------------------------------------------------------------------------
# (2) Instances with answers in closed form
# --------------------------------------------------------------------------------------------------


def plane(dim: int, rng: np.random.Generator) -> np.ndarray:
    """Two orthonormal columns of ``R^dim`` (dim, 2)."""
    return np.linalg.qr(rng.standard_normal((dim, 2)))[0]


def on_circle(t: np.ndarray, rho: float, E: np.ndarray, centre: np.ndarray) -> np.ndarray:
    """The points ``centre + rho (cos t e1 + sin t e2)`` (len(t), dim) of the circle in the plane ``E``."""
    return centre + rho * (np.cos(t)[:, None] * E[:, 0] + np.sin(t)[:, None] * E[:, 1])


def polygon(P: int, rho: float, phase: float, E: np.ndarray, centre: np.ndarray) -> np.ndarray:
    """A regular ``P``-gon on that circle, ``t_p = phase + 2 pi p / P``."""
    return on_circle(phase + 2 * np.pi * np.arange(P) / P, rho, E, centre)


def regular_intra(P: int, rho: float) -> float:
    return 2 * rho / math.tan(math.pi / (2 * P)) / (P - 1)


@given(n=st.integers(3, 40), seed=seeds, k=st.integers(2, 12))
@example(n=3, seed=0, k=2)
def test_collapse_statistics_of_isotropic_and_planar_batches(n: int, seed: int, k: int) -> None:
    """A regular ``n``-gon of rows (norms over twelve decades): in ``R^2`` ``std = sqrt(n / (2 (n - 1)))``,
    ``cond = 1``; in a plane of ``R^k`` (k > 2) ``C`` has eigenvalues ``n / (2 (n - 1))`` twice and 0, so
    ``cond = n / (2 (n - 1)) / 1e-7``. A rotated cross-polytope ``{+-Q e_c}``: ``std = sqrt(2 / (2k - 1))``,
    ``cond = 1``. A collapsed batch (positive multiples of one row): ``std = 0``, ``cond = 0``."""
    rng = np.random.default_rng(seed)
    radii = 10.0 ** rng.uniform(-6, 6, size=(n, 1))
    lam = n / (2 * (n - 1))
    flat = polygon(n, 1.0, rng.uniform(0, 2 * np.pi), plane(2, rng), np.zeros(2))
    std, cond = collapse_stats(flat * radii)
    assert abs(std - math.sqrt(lam)) <= 4 * U_ROUNDOFF + ARITH_REL * math.sqrt(lam), (std, math.sqrt(lam))
    iso = np.array([lam, lam])
    assert abs(cond - 1.0) <= cond_bound(iso, n, 2), cond

    E = plane(k, rng)
    tilted = polygon(n, 1.0, rng.uniform(0, 2 * np.pi), E, np.zeros(k)) * radii
    std_t, cond_t = collapse_stats(tilted)
    # per-dimension variance lam |E_c|^2 (E's rows): the mean of their square roots
    want = float(np.mean(np.sqrt(lam) * np.linalg.norm(E, axis=1)))
    assert abs(std_t - want) <= 4 * U_ROUNDOFF + ARITH_REL * want, (std_t, want)
    spectrum = np.array([0.0] * (k - 2) + [lam, lam])
    assert abs(cond_t - cond_of(spectrum)) <= cond_bound(spectrum, n, k), (cond_t, cond_of(spectrum))

    Q = np.linalg.qr(rng.standard_normal((k, k)))[0]
    cross = np.concatenate([Q.T, -Q.T]) * 10.0 ** rng.uniform(-6, 6, size=(2 * k, 1))
    std_c, cond_c = collapse_stats(cross)
    lam_c = 2 / (2 * k - 1)
    assert abs(std_c - math.sqrt(lam_c)) <= 4 * U_ROUNDOFF + ARITH_REL * math.sqrt(lam_c), std_c
    assert abs(cond_c - 1.0) <= cond_bound(np.full(k, lam_c), 2 * k, k), cond_c

    collapsed = rng.standard_normal(k)[None, :] * radii
    std_0, cond_0 = collapse_stats(collapsed)
    assert std_0 <= 4 * U_ROUNDOFF and cond_0 <= cond_bound(np.zeros(k), n, k), (std_0, cond_0)


@pytest.mark.parametrize("n", (3, 5, 8))
def test_negative_control_points_on_a_half_circle_are_not_isotropic(n: int) -> None:
    """Unit rows on the same circle but spread over half of it, ``t_p = pi p / n``: the covariance is
    anisotropic and ``std`` is off the regular polygon's formula, by far more than the tolerance: the
    closed-form comparisons can fail."""
    H = on_circle(np.pi * np.arange(n) / n, 1.0, np.eye(2), np.zeros(2))
    std, cond = collapse_stats(H)
    assert cond - 1.0 > MATERIAL_REL
    assert abs(std - math.sqrt(n / (2 * (n - 1)))) > MATERIAL_REL * math.sqrt(n / (2 * (n - 1)))


@st.composite
def polygon_orbits(draw):
    """Regular ``P``-gon orbits (radii over eight decades) in random planes; orbit centres offset from their
    class centroid by vectors summing to zero; class centroids on a regular ``m``-gon of radius ``R``."""
    m, per_class, P, dim = draw(st.integers(2, 5)), draw(st.integers(1, 3)), draw(st.integers(2, 12)), \
        draw(st.integers(2, 8))
    rng = np.random.default_rng(draw(seeds))
    R = 10.0 ** rng.uniform(-2, 2)
    class_centres = polygon(m, R, rng.uniform(0, 2 * np.pi), plane(dim, rng), rng.standard_normal(dim))
    F, labels, rhos = [], [], []
    for a in range(m):
        offsets = R * rng.standard_normal((per_class, dim))
        offsets -= offsets.mean(axis=0)  # the orbits' centroids average to the class centre
        for j in range(per_class):
            rho = 10.0 ** rng.uniform(-6, 2) * R
            F.append(polygon(P, rho, rng.uniform(0, 2 * np.pi), plane(dim, rng), class_centres[a] + offsets[j]))
            labels.append(a)
            rhos.append(rho)
    return np.stack(F), np.array(labels), np.array(rhos), R, m, P


@given(inst=polygon_orbits(), delta=st.floats(1e-3, 1.0), seed=seeds)
@example(inst=(polygon(3, 2.0, 0.0, np.eye(2), np.zeros(2))[None], np.array([0]), np.array([2.0]), 1.0, 1, 3),
         delta=0.1, seed=0)
def test_orbit_metrics_of_regular_polygons_circles_and_parabolas(inst, delta: float, seed: int) -> None:
    F, labels, rhos, R, m, P = inst
    D = dist_roundoff(F)
    intra = [regular_intra(P, rho) for rho in rhos]
    for got, rho in zip(orbit_spread(F), rhos, strict=True):
        assert abs(got - rho**2) <= sq_bound(rho**2, D), (got, rho**2)
    for got, want in zip(intra_distance(F), intra, strict=True):
        assert abs(got - want) <= dist_bound(want, D), (got, want)
    if m >= 2:
        # vertices a < b of the regular m-gon are 2 R sin(pi (b - a) / m) apart; the cot formula is their mean
        inter = regular_intra(m, R)
        _, per_class = inter_distances(F, labels)
        assert np.all(np.abs(to_numpy(per_class) - inter) <= dist_bound(inter, D)), (per_class, inter)
        geo = orbit_geometry(F, labels)
        pairs = [2 * R * math.sin(math.pi * (b - a) / m) for a in range(m) for b in range(a + 1, m)]
        check_stat(geo.d_inter, pairs, dist_bound(2 * R, D), "D_inter")
        ratios = [inter / i for i in intra]
        ratio_bound = 1.01 * max(r * (dist_bound(inter, D) / inter + dist_bound(i, D) / i)
                                 for r, i in zip(ratios, intra))
        check_stat(geo.ratio, ratios, ratio_bound, "ratio")

    # sweeps: a circle at angular step delta, a parabola a + i b + i^2 c
    rng = np.random.default_rng(seed)
    dim = F.shape[2]
    rho = 10.0 ** rng.uniform(-3, 3)
    circle = on_circle(rng.uniform(0, 2 * np.pi) + delta * np.arange(10), rho, plane(dim, rng),
                       rng.standard_normal(dim))
    i = np.arange(10)[:, None]
    a, b, c = (rng.standard_normal(dim) for _ in range(3))
    parabola = a + i * b + i**2 * c
    kappa = sweep_curvature(np.stack([circle, parabola]))
    for got, want, S in zip(kappa, (4 * rho * math.sin(delta / 2) ** 2, 2 * norm(c)), (circle, parabola)):
        assert abs(got - want) <= dist_bound(want, 2 * dist_roundoff(S)), (got, want)


@given(z_rho=st.floats(1e-3, 1e3), h_rho=st.floats(1e-3, 1e3), seed=seeds)
def test_compression_is_the_ratio_of_mean_spreads(z_rho: float, h_rho: float, seed: int) -> None:
    """Orbits of radii ``z_rho r_o`` and ``h_rho r_o``: ``compression = (z_rho / h_rho)^2``."""
    rng = np.random.default_rng(seed)
    r = 10.0 ** rng.uniform(-1, 1, 4)
    dim = 5

    def orbits(scale: float) -> np.ndarray:
        return np.stack([polygon(6, scale * ro, rng.uniform(0, 6.3), plane(dim, rng), rng.standard_normal(dim))
                         for ro in r])

    Fz, Fh = orbits(z_rho), orbits(h_rho)
    labels = np.array([0, 1, 0, 1])
    got = compression(orbit_geometry(Fz, labels), orbit_geometry(Fh, labels))
    want = (z_rho / h_rho) ** 2
    err = max(sq_bound((z_rho * ro) ** 2, dist_roundoff(Fz)) / (z_rho * ro) ** 2
              + sq_bound((h_rho * ro) ** 2, dist_roundoff(Fh)) / (h_rho * ro) ** 2 for ro in r)
    assert abs(got - want) <= 1.01 * want * err, (got, want)


@pytest.mark.parametrize("P", (3, 7, 12))
def test_negative_control_half_circle_orbits_and_uneven_sweeps_break_the_formulas(P: int) -> None:
    """An orbit of ``P`` points on a circle of radius ``rho`` but over half of it (``t_p = pi p / P``) is off
    the ``D_intra`` and ``spread`` formulas, and a circular sweep with uneven steps off
    ``4 rho sin^2(delta / 2)``, by more than ``MATERIAL_REL``: the closed-form comparisons can fail."""
    rng = np.random.default_rng(P)
    rho = 1.5
    F = on_circle(np.pi * np.arange(P) / P, rho, plane(4, rng), rng.standard_normal(4))[None]
    assert abs(intra_distance(F)[0] - regular_intra(P, rho)) > MATERIAL_REL * regular_intra(P, rho)
    assert abs(orbit_spread(F)[0] - rho**2) > MATERIAL_REL * rho**2
    delta = 0.2
    S = on_circle(delta * np.arange(10) ** 1.5, rho, plane(4, rng), np.zeros(4))
    want = 4 * rho * math.sin(delta / 2) ** 2
    assert abs(sweep_curvature(S[None])[0] - want) > MATERIAL_REL * want
