"""BatchNorm with batch statistics, functional and autograd-safe (docs/paper.md, Section 4, E1 ablation).

The paper's E1 ablates BatchNorm in the head: the ReLU gap (``grad^2 ReLU = 0``, so ``M = 0``) is
said to close only through finite steps *and BatchNorm*. BatchNorm with batch statistics makes the
head act on the whole batch, not row by row: every output row depends on every input row, so
``J`` is no longer block-diagonal and ``H_eff`` couples samples even for an MSE loss.

    mu  = mean_i a_i                      (w,)      over the n rows of one batch (one view)
    var = mean_i (a_i - mu)^2             (w,)      biased, as torch uses in training mode
    bn(a)_i = gamma * (a_i - mu) / sqrt(var + eps) + beta                 a: (n, w) -> (n, w)

Near collapse (``var -> 0``) the gain ``1 / sqrt(var + eps)`` reaches ``eps^{-1/2}`` (316 for
torch's ``eps = 1e-5``): BatchNorm magnifies the tiny differences left between rows, which is the
mechanism by which it can pull a collapsed representation apart.

``batchnorm(a, gamma, beta, groups)`` normalises each of ``groups`` consecutive row blocks on its
own statistics: SimSiam feeds the two views through the network separately, so with the rows
stacked as ``[view1; view2]`` the statistics are per view (``groups=2``).
Where it sits is the caller's choice; ``mini.dynamics`` puts it after every hidden Linear of the
projector and the predictor, before the activation (the SimSiam / paper placement).
"""

from __future__ import annotations

from typing import Any

import autograd.numpy as anp

from mini.validation import check_array, value_of

Array = Any

BN_EPS = 1e-5  # torch's nn.BatchNorm1d default


def batchnorm(a: Array, gamma: Array | None = None, beta: Array | None = None, groups: int = 1,
              eps: float = BN_EPS) -> Array:
    """Batch-statistics BatchNorm of ``a`` (n, w) over ``groups`` equal row blocks; autograd-safe.

    ``gamma``, ``beta`` are (w,) or ``None`` (no affine part). No running statistics: this is the
    training-mode map, the one the gradient of a training step sees.
    """
    check_array("batchnorm input", a, ndim=2)
    n, w = value_of(a).shape
    if not isinstance(groups, int) or groups < 1 or n % groups:
        raise ValueError(f"batchnorm: groups must be a positive integer dividing n={n}, got {groups!r}")
    if n // groups < 2:
        raise ValueError(f"batchnorm: each group needs at least 2 rows for a variance, got {n // groups}")
    if not eps > 0:
        raise ValueError(f"batchnorm: eps must be positive, got {eps!r}")
    A = anp.reshape(a, (groups, n // groups, w))  # (groups, rows per group, w)
    mu = anp.mean(A, axis=1, keepdims=True)  # (groups, 1, w)
    C = A - mu
    var = anp.mean(C * C, axis=1, keepdims=True)  # biased batch variance
    out = anp.reshape(C / anp.sqrt(var + eps), (n, w))
    if gamma is not None:
        out = out * gamma
    if beta is not None:
        out = out + beta
    return out
