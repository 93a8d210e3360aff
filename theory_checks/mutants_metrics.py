"""The mistakes in E1's collapse statistics and E4's orbit metrics (``mini.collapse_metrics``, ``mini.invariance``).
"""

from __future__ import annotations

import numpy as np
import pytest

from mini.arrays import namespace
from theory_checks.mutation import swap, wrap


def spread_about_origin(mp):
    """Orbit spread as the mean squared norm (about the origin, not the orbit's centroid)."""
    import mini.invariance as Inv

    swap(mp, Inv, "orbit_spread", lambda F: namespace(F).mean(namespace(F).sum(F * F, axis=-1), axis=1))


def d_intra_with_diagonal(mp):
    """``D_intra`` averaged over all ``P^2`` pairs, the zero distances ``p = q`` included."""
    import mini.invariance as Inv

    wrap(mp, Inv, "intra_distance", lambda f: lambda F: f(F) * (F.shape[1] - 1) / F.shape[1])


def class_centroid_sum(mp):
    """A class centroid as the sum of its orbits' centroids, not their mean."""
    import mini.invariance as Inv

    def wrapper(f):
        def class_centroids(F, labels):
            classes, C = f(F, labels)
            lab = np.asarray(labels).reshape(-1)
            counts = np.array([np.sum(lab == c) for c in np.asarray(classes)], dtype=float)[:, None]
            return classes, C * namespace(C).asarray(counts, dtype=C.dtype)

        return class_centroids

    wrap(mp, Inv, "class_centroids", wrapper)


def _orbit_geometry_field(mp: pytest.MonkeyPatch, field: str, value) -> None:
    """``mini.invariance.orbit_geometry`` reporting ``value(F, labels)`` (a ``Stat``) as its ``field``."""
    import dataclasses

    import mini.invariance as Inv

    def wrapper(f):
        def orbit_geometry(F, labels, sweep=None):
            return dataclasses.replace(f(F, labels, sweep), **{field: value(F, labels)})

        return orbit_geometry

    wrap(mp, Inv, "orbit_geometry", wrapper)


def d_inter_with_diagonal(mp):
    """``D_inter`` as the mean over all ``n_c^2`` class pairs, ``a = b`` included."""
    import mini.invariance as Inv

    _orbit_geometry_field(mp, "d_inter", lambda F, labels: Inv.stat(Inv.inter_distances(F, labels)[0]))


def ratio_inverted(mp):
    """The orbit ratio ``D_intra_o / D_inter(class(o))`` instead of ``D_inter / D_intra``."""
    import mini.invariance as Inv

    def inverted(F, labels):
        classes, _ = Inv.class_centroids(F, labels)
        per_class = np.asarray(Inv.inter_distances(F, labels)[1])
        where = {c: j for j, c in enumerate(np.asarray(classes).tolist())}
        inter = np.array([per_class[where[c]] for c in np.asarray(labels).tolist()])
        return Inv.stat(np.asarray(Inv.intra_distance(F)) / inter)

    _orbit_geometry_field(mp, "ratio", inverted)


def kappa_first_difference(mp):
    """The sweep curvature from first differences ``|r_{i+1} - r_i|`` instead of second differences."""
    import mini.invariance as Inv

    def sweep_curvature(S):
        xp = namespace(S)
        d1 = S[:, 1:, :] - S[:, :-1, :]
        return xp.mean(xp.sqrt(xp.sum(d1 * d1, axis=-1)), axis=1)

    swap(mp, Inv, "sweep_curvature", sweep_curvature)


def compression_inverted(mp):
    """The compression factor as ``spread(h) / spread(z)``."""
    import mini.invariance as Inv

    wrap(mp, Inv, "compression", lambda f: lambda z, h: f(h, z))


def std_population(mp):
    """E1's std with the population normalisation (``n``) instead of the sample one (``n - 1``)."""
    import mini.collapse_metrics as CM

    def representation_std(H):
        xp = namespace(H)
        return float(xp.mean(xp.std(CM.l2_normalize(H), axis=0, correction=0)))

    swap(mp, CM, "representation_std", representation_std)


def std_unnormalised(mp):
    """E1's std of the raw rows, not of the L2-normalised ones."""
    import mini.collapse_metrics as CM

    def representation_std(H):
        xp = namespace(H)
        return float(xp.mean(xp.std(H, axis=0, correction=1)))

    swap(mp, CM, "representation_std", representation_std)


def cond_without_floor(mp):
    """E1's condition number ``lambda_max / lambda_min`` without the paper's clamp at 1e-7."""
    import mini.collapse_metrics as CM

    wrap(mp, CM, "covariance_condition", lambda f: lambda H, floor=CM.COND_FLOOR: f(H, floor=1e-300))


def cond_of_raw_rows(mp):
    """E1's condition number of the raw rows' covariance, not the normalised rows'."""
    import mini.collapse_metrics as CM

    swap(mp, CM, "covariance_condition",
             lambda H, floor=CM.COND_FLOOR: (lambda e: float(e[-1]) / max(float(e[0]), floor))(
                 np.linalg.eigvalsh(np.cov(np.asarray(H), rowvar=False).reshape(H.shape[1], H.shape[1]))))


def head_on_raw_z(mp):
    """E4's features: the head applied to the raw ``z`` instead of the normalised ``z / |z|``."""
    import mini.invariance as Inv

    def normalized_features(Z, head_fn):
        xp = namespace(Z)
        H = head_fn(xp.reshape(Z, (-1, Z.shape[-1])))
        return Inv.l2_normalize(Z), Inv.l2_normalize(xp.reshape(H, (*Z.shape[:-1], H.shape[-1])))

    swap(mp, Inv, "normalized_features", normalized_features)
