"""Theorem 3.2 (an MLP head can be epsilon-isotropic along a trajectory).

Statement (docs/paper.md, paraphrase): for any smooth, non-self-intersecting optimisation trajectory
``gamma(t)`` there is an MLP head whose ``H_eff`` is epsilon-isotropic along ``gamma``.

Made precise (``mini/capacity.py``): at samples ``z_j = gamma(t_j)``,
``eps(h, gamma) = max_j |H_eff(z_j) - I|_2`` with ``H_eff(z) = grad^2_z phi(h(z))`` for a per-point
loss ``phi`` on ``H = R^k``. The identity (not ``c I``) is the target, so a head cannot win by
shrinking the curve's image.

Checked, for the curved loss ``phi(u) = log(1 + sum_c exp u_c)`` (constant curvature 1/4, k = d = 2)
on a 3/4 arc of the unit circle (``T_POINTS`` samples):
(a) the per-point Hessians used in fitting equal autograd's Hessian at each point (``HESS_REL_TOL``),
    and the linear-head shortcut ``W^T g W`` equals differentiating through the head;
(b) an MLP head (tanh, one hidden layer of ``WIDTH``) fitted by L-BFGS reaches an ``eps`` at least
    ``ADVANTAGE`` = 10 times smaller than the best linear head found from ``LINEAR_STARTS`` starts;
(c) consistency with Proposition 3.3: the best linear head's ``eps`` is at least ``tanh(B/2)``, ``B``
    the W-independent bound at its own image points; and ``eps < 1`` gives ``H_eff`` positive
    definite with ``cond <= (1 + eps)/(1 - eps)`` at every sample.
Negative control: the same MLP head before fitting is not isotropic (``eps > UNFITTED_EPS``).
The full table over trajectories, widths and depths is ``python -m mini.capacity`` (docs/section3.md).
"""

from __future__ import annotations

import autograd.numpy as anp
import numpy as np
import pytest
from autograd import hessian

from mini.capacity import (
    best_linear_head,
    fit_isotropic_head,
    isotropy_error,
    linear_certificate,
    pointwise_hessians,
    trajectory,
    trajectory_hessians,
)
from mini.heads import init_head
from mini.whitening import log_partition

T_POINTS = 6
WIDTH = 6
MLP_ITERS = 60
LINEAR_STARTS = 3
LINEAR_ITERS = 30
ADVANTAGE = 10.0  # the MLP's eps must be at least this many times smaller than the linear head's
HESS_REL_TOL = 1e-10
CERT_REL_TOL = 1e-9
UNFITTED_EPS = 0.1


@pytest.fixture(scope="module")
def fits():
    Z = trajectory("arc", T_POINTS)
    mlp = fit_isotropic_head(log_partition, Z, "tanh2", WIDTH, 2, seed=0, iters=MLP_ITERS)
    lin = best_linear_head(log_partition, Z, 2, LINEAR_STARTS, seed=0, iters=LINEAR_ITERS)
    return Z, mlp, lin


def test_pointwise_hessians_equal_autograd_per_point() -> None:
    """(a) The separable-batch trick gives each point's own Hessian."""
    Z = trajectory("spiral", 5)
    head = init_head("swish3", 2, 2, 5, 1)
    Hs = trajectory_hessians(log_partition, "swish3", head.layers, Z)
    for z, H in zip(Z, Hs):
        ref = hessian(lambda x: log_partition(head(x[None, :])[0]))(z)
        assert np.abs(H - ref).max() <= HESS_REL_TOL * np.abs(ref).max()
    lin = init_head("linear", 2, 2, 1, 2)  # the linear shortcut W^T g W against differentiating the head
    fast = trajectory_hessians(log_partition, "linear", lin.layers, Z)
    slow = pointwise_hessians(lambda X: anp.sum(log_partition(lin(X))), Z)
    assert np.abs(fast - slow).max() <= HESS_REL_TOL * np.abs(slow).max()


def test_mlp_head_beats_best_linear_head_tenfold(fits) -> None:
    """(b) ``eps(MLP) * ADVANTAGE <= eps(best linear)`` on the same samples of the same trajectory."""
    _, mlp, lin = fits
    assert mlp.eps * ADVANTAGE <= lin.eps, f"MLP eps {mlp.eps:.3e}, linear eps {lin.eps:.3e}"


def test_linear_head_respects_proposition_3_3_and_eps_bounds_condition(fits) -> None:
    """(c) ``eps(linear) >= tanh(B/2)``; ``eps < 1`` implies PD and ``cond <= (1 + eps)/(1 - eps)``."""
    Z, mlp, lin = fits
    assert lin.eps >= linear_certificate(log_partition, lin.head, Z) * (1.0 - CERT_REL_TOL)
    Hs = trajectory_hessians(log_partition, mlp.head.spec.name, mlp.head.layers, Z)
    assert mlp.eps < 1.0
    for H in Hs:
        lam = np.linalg.eigvalsh(H)
        assert lam[0] > 0 and lam[-1] / lam[0] <= (1 + mlp.eps) / (1 - mlp.eps) * (1 + CERT_REL_TOL)


def test_negative_control_unfitted_head_is_not_isotropic(fits) -> None:
    """Control: the initial head of the fit (same seed, spec, width) is far from isotropic."""
    Z, _, _ = fits
    head = init_head("tanh2", 2, 2, WIDTH, 0)
    assert isotropy_error(trajectory_hessians(log_partition, "tanh2", head.layers, Z)) > UNFITTED_EPS
