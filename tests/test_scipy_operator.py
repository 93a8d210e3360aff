"""``EffectiveHessian.to_scipy``: H_eff, G and M as ``scipy.sparse.linalg.LinearOperator`` s, read by
``eigsh`` exactly as the dense matrices are read by ``eigvalsh``."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.sparse.linalg import LinearOperator, eigsh
from torch import nn

from scale import EffectiveHessian
from scale.engine.objectives import nt_xent

REL_TOL = 1e-9  # eigsh (ARPACK) and eigvalsh (LAPACK) on the same symmetric matrix, relative to its norm


@pytest.fixture(scope="module")
def hessian() -> EffectiveHessian:
    torch.manual_seed(0)
    head = nn.Sequential(nn.Linear(5, 12), nn.GELU(), nn.Linear(12, 4))
    z = torch.randn(8, 5)  # 4 pairs of views, N = 40
    return EffectiveHessian(z, head, lambda Hb: nt_xent(Hb, 0.5), dtype=torch.float64)


@pytest.mark.parametrize("part", ["H", "G", "M"])
def test_eigsh_on_the_scipy_operator_matches_the_dense_spectrum(hessian, part):
    op = hessian.to_scipy(part)
    assert isinstance(op, LinearOperator) and op.shape == (40, 40) and op.dtype == np.float64
    dense = getattr(hessian, part).dense().numpy()
    lam = np.linalg.eigvalsh(dense)
    scale = np.abs(lam).max()
    for which, ref in (("SA", lam[0]), ("LA", lam[-1])):
        got = eigsh(op, k=1, which=which, tol=1e-12, return_eigenvectors=False)[0]
        assert abs(got - ref) <= REL_TOL * scale, (part, which, got, ref)
    rng = np.random.default_rng(1)
    V = rng.standard_normal((40, 3))
    assert np.allclose(op @ V, dense @ V, rtol=0, atol=1e-12 * scale)  # matmat
    assert np.allclose(op.rmatvec(V[:, 0]), dense @ V[:, 0], rtol=0, atol=1e-12 * scale)


def test_the_parts_add_up_through_scipy(hessian):
    v = np.random.default_rng(2).standard_normal(40)
    H, G, M = (hessian.to_scipy(p) @ v for p in "HGM")
    assert np.allclose(H, G + M, rtol=0, atol=1e-12 * np.abs(H).max())


def test_an_unknown_part_is_refused(hessian):
    with pytest.raises(ValueError, match="part must be one of H, G, M"):
        hessian.to_scipy("J")
