"""The negative-curvature floor of ``mini.hessian.spectrum`` (docs/paper.md, Section 4).

Statement checked: an eigenvalue counts as negative exactly when it lies below ``-NEG_FLOOR x scale``,
``scale = max |lambda|`` (relative, so the verdict does not change when the matrix is multiplied by
any positive factor), with ``NEG_FLOOR = 1e-9``. A symmetric matrix is built from a chosen spectrum
in a Haar-random orthogonal basis: one eigenvalue at ``-1e-6 x scale`` (curvature: counted), one at
``-1e-12 x scale`` (round-off level: not counted), the rest positive up to ``scale``.

Tolerance: eigenvalues are recovered to ``~ 1e-15 x scale`` by a backward-stable solver, six decades
from either chosen eigenvalue to the floor, so no LAPACK build can move one across it.

Negative controls: a floor of ``1e-3`` (too coarse) misses the ``-1e-6`` eigenvalue; an absolute
floor of ``1e-9`` changes its verdict when the same matrix is rescaled.
"""

from __future__ import annotations

import numpy as np
import pytest

from conftest import matrix_with_spectrum
from mini.hessian import NEG_FLOOR, spectrum

CURVATURE = -1e-6  # x scale: real negative curvature
ROUNDOFF = -1e-12  # x scale: below the floor's resolution, read as zero
RESCALES = (1e-8, 1.0, 1e8)


def _matrix(scale: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    eigenvalues = np.concatenate([[CURVATURE * scale, ROUNDOFF * scale], scale * np.linspace(0.1, 1.0, 6)])
    return matrix_with_spectrum(eigenvalues, rng)


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("scale", RESCALES)
def test_floor_counts_minus_1e6_and_not_minus_1e12(scale: float, seed: int) -> None:
    s = spectrum(_matrix(scale, seed))
    assert NEG_FLOOR == 1e-9 and s.rel_floor == NEG_FLOOR
    assert abs(s.scale - scale) <= 1e-12 * scale
    assert s.n_negative == 1, f"scale {scale:g}: eigenvalues {s.eigenvalues[:3]}"
    assert s.lambda_min < -NEG_FLOOR * s.scale  # the -1e-6 one
    assert abs(s.eigenvalues[1]) <= NEG_FLOOR * s.scale  # the -1e-12 one sits inside the floor
    assert s.n_zero == 1 and s.definiteness == "indefinite"


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("scale", RESCALES)
def test_scale_is_the_largest_magnitude_of_either_sign(scale: float, seed: int) -> None:
    """The same matrix negated: ``scale`` is ``max |lambda|`` (now a negative eigenvalue), so the
    ``+1e-6 x scale`` eigenvalue counts as positive and the ``+1e-12 x scale`` one as zero."""
    s = spectrum(-_matrix(scale, seed))
    assert abs(s.scale - scale) <= 1e-12 * scale
    assert s.n_positive == 1 and s.n_zero == 1 and s.n_negative == 6, f"scale {scale:g}: {s.eigenvalues[-3:]}"


def test_negative_control_coarse_floor_misses_real_curvature() -> None:
    assert spectrum(_matrix(1.0, 0), rel_floor=1e-3).n_negative == 0


def test_negative_control_absolute_floor_depends_on_units() -> None:
    counts = set()
    for scale in RESCALES:
        eig = np.linalg.eigvalsh(_matrix(scale, 0))
        counts.add(int(np.sum(eig < -NEG_FLOOR)))  # absolute floor: not what spectrum does
    assert len(counts) > 1
