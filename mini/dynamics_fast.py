r"""The fast paths of the Section 4 toy (``mini.dynamics``): a hand-written backward pass and a
complex-step Hessian.

Why they exist: the grid integrates hundreds of trajectories, each needing thousands of evaluations
of the SimSiam vector field and an exact ``H_eff`` at every checkpoint. Autograd's tracing costs
several times the arithmetic at these tiny sizes, and with BatchNorm the head couples the rows, so
``mini.hessian``'s per-sample closed form does not apply. These functions compute the same numbers
with plain NumPy, which is what lets ``python -m mini.reports.dynamics`` run in minutes:

- ``simsiam_gradient``: ``grad_theta`` of ``mini.dynamics.simsiam_loss`` (targets fixed), reverse
  mode written out layer by layer (``record_forward`` records, ``hand_backward`` consumes).
- ``complex_step_curvature``: ``H_eff`` and ``J`` of ``Z -> L(pred(proj(Z)))`` from one batched
  complex-step pass, ``f'(x) = Im f(x + i h) / h`` (no cancellation, so ``h = 1e-30`` is exact up to
  rounding), for the BatchNorm heads.

They are references-checked, not trusted: ``tests/test_dynamics.py`` compares both with autograd
(``simsiam_loss``'s gradient, autograd's Hessian of the batch map) for every head and objective.
Shapes and parameter layout are those of ``mini.dynamics`` (``params["backbone" | "proj" | "pred" |
"bn_proj" | "bn_pred"]``); ``arch`` is a ``mini.dynamics.Arch`` (read: ``activation``, ``bn``).
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from mini import activations
from mini.batchnorm import BN_EPS
from mini.losses import normalize, safe_norm

Params = dict[str, Any]


class Arch(Protocol):
    """What the fast paths read of a ``mini.dynamics.Arch`` (which imports this module: no import back)."""

    @property
    def activation(self) -> str | None: ...

    bn: bool


def loss_gradient(objective: str, P: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """``grad_P L`` (..., n, k) by hand; complex ``P`` allowed (the complex step), targets real.

    ``mse``: ``(P - t) / n``. ``cosine``: ``-(t_hat - c u) / (n r)`` per row, ``r = |p|``,
    ``u = p / r``, ``c = <u, t_hat>``: the tangential part of ``t_hat``. Real rows use ``mini.losses``'
    safe norm (so a zero row has the constant ``r = NORM_EPS`` and no radial term); the complex step
    never meets a zero row, so it uses the analytic ``sqrt(sum p^2)`` (no conjugate, no clamp).
    """
    n = P.shape[-2]
    if objective == "mse":
        return (P - targets) / n
    if objective != "cosine":
        raise ValueError(f"unknown objective {objective!r}; valid choices: mse, cosine")
    T_hat = np.asarray(normalize(targets))  # (n, k), fixed
    if np.iscomplexobj(P):
        r = np.sqrt(np.sum(P * P, axis=-1, keepdims=True))  # |p| (no conjugate: complex-analytic)
        radial = np.ones(r.shape, dtype=bool)
    else:
        r = np.asarray(safe_norm(P))
        radial = np.max(np.abs(P), axis=-1, keepdims=True) > 0
    U = P / r
    c = np.sum(U * T_hat, axis=-1, keepdims=True)
    return -(T_hat - np.where(radial, c, 0.0) * U) / (n * r)


def record_forward(activation: str | None, layers: list, bn: list | None, X: np.ndarray, groups: int = 2,
                 eps: float = BN_EPS) -> tuple[np.ndarray, list, list]:
    """``mlp`` in plain NumPy, keeping what the backward pass needs. Leading batch axes are allowed
    (``X`` is (..., n, in)) and complex inputs are fine: the complex-step Hessian uses both."""
    s = activations.get(activation)
    xs, cache = [X], []
    x = X
    for l, layer in enumerate(layers):
        a = x @ layer["W"].T + layer.get("b", 0.0)
        if l == len(layers) - 1:
            return a, xs, cache
        c = sigma = None
        u = a
        if bn is not None:
            *lead, n, w = a.shape
            A = a.reshape(*lead, groups, n // groups, w)
            mu = A.mean(axis=-2, keepdims=True)
            sigma = np.sqrt(((A - mu) ** 2).mean(axis=-2, keepdims=True) + eps)  # no abs: complex-analytic
            c = (A - mu) / sigma  # (..., groups, rows, w)
            u = c.reshape(a.shape) * bn[l]["gamma"] + bn[l]["beta"]
        cache.append((u, c, sigma))
        x = np.asarray(s.value(np, u))
        xs.append(x)
    raise AssertionError("unreachable: an MLP has at least one layer")


def hand_backward(activation: str | None, layers: list, bn: list | None, xs: list, cache: list,
                  d_out: np.ndarray, groups: int = 2, params: bool = True) -> tuple[list, list | None, np.ndarray]:
    """Reverse mode through ``mlp`` by hand, from ``record_forward``'s record.

    BatchNorm backward, per group, ``c = (a - mu) / sigma``: ``da = (dc - mean(dc) - c mean(dc c)) / sigma``.
    Returns the layer gradients and the BatchNorm gradients (``None`` entries when ``params`` is
    False) and ``dL/dX``. Checked against autograd in ``tests/test_dynamics.py``.
    """
    g_layers: list = [None] * len(layers)
    g_bn: list | None = [None] * (len(layers) - 1) if bn is not None else None
    d = d_out
    for l in range(len(layers) - 1, -1, -1):
        layer = layers[l]
        if params:
            g_layers[l] = {"W": d.T @ xs[l], **({"b": d.sum(axis=0)} if "b" in layer else {})}
        d = d @ layer["W"]  # dL/dx_{l-1}
        if l == 0:
            break
        u, c, sigma = cache[l - 1]
        du = d * activations.get(activation).derivatives(np, u)[0] if activation else d
        if bn is None:
            d = du
            continue
        if params:
            g_bn[l - 1] = {"beta": du.sum(axis=0), "gamma": (du * c.reshape(du.shape)).sum(axis=0)}
        dc = (du * bn[l - 1]["gamma"]).reshape(c.shape)
        d = ((dc - dc.mean(axis=-2, keepdims=True) - c * (dc * c).mean(axis=-2, keepdims=True)) / sigma
             ).reshape(du.shape)
    return g_layers, g_bn, d


def simsiam_gradient(arch: Arch, params: Params, X: np.ndarray, targets: np.ndarray,
                     objective: str = "mse") -> Params:
    """``grad_theta`` of ``simsiam_loss`` (targets fixed), by hand: the vector field of the grid.

    The same numbers as ``autograd.grad(simsiam_loss)`` (checked in the tests for both objectives),
    several times faster, which is what lets the grid run in minutes.
    """
    bb = params["backbone"]
    a1 = X @ bb[0]["W"].T + bb[0]["b"]
    x1 = np.tanh(a1)
    Z = x1 @ bb[1]["W"].T + bb[1]["b"]
    Hb, xs_h, c_h = record_forward(arch.activation, params["proj"], params.get("bn_proj"), Z)
    P, xs_p, c_p = record_forward(arch.activation, params["pred"], params.get("bn_pred"), Hb)
    dP = loss_gradient(objective, P, targets)
    g_pred, g_bn_pred, dH = hand_backward(arch.activation, params["pred"], params.get("bn_pred"), xs_p, c_p, dP)
    g_proj, g_bn_proj, dZ = hand_backward(arch.activation, params["proj"], params.get("bn_proj"), xs_h, c_h, dH)
    da1 = (dZ @ bb[1]["W"]) * (1.0 - x1 * x1)
    out: Params = {
        "backbone": [{"W": da1.T @ X, "b": da1.sum(axis=0)}, {"W": dZ.T @ x1, "b": dZ.sum(axis=0)}],
        "proj": g_proj, "pred": g_pred,
    }
    if arch.bn:
        out["bn_proj"], out["bn_pred"] = g_bn_proj, g_bn_pred
    return out


CSTEP = 1e-30  # complex step: f'(x) = Im f(x + i h) / h with no cancellation; truncation O(h^2) = 0 in float64


def complex_step_curvature(arch: Arch, params: Params, Z: np.ndarray, targets: np.ndarray,
                           objective: str = "mse") -> tuple[np.ndarray, np.ndarray]:
    """``H_eff`` (n d, n d) and ``J`` (n k, n d) of ``Z -> L(pred(proj(Z)))`` by the complex step.

    All ``n d`` directions in one batched pass: ``Z + i h E_j`` (n d, n, d) through the hand-written
    forward and backward; ``H[:, j] = Im grad_Z L(Z + i h E_j) / h``, ``J[:, j] = Im P(Z + i h E_j) / h``.
    The map is real-analytic off ReLU kinks, so both are exact up to rounding (agreement with
    autograd's Hessian is checked in the tests); this is the fast path for BatchNorm heads.
    """
    n, d = Z.shape
    N = n * d
    Zc = Z[None] + 1j * CSTEP * np.eye(N).reshape(N, n, d)  # (N, n, d)
    bn_h, bn_p = params.get("bn_proj"), params.get("bn_pred")
    Hb, xs_h, c_h = record_forward(arch.activation, params["proj"], bn_h, Zc)
    P, xs_p, c_p = record_forward(arch.activation, params["pred"], bn_p, Hb)
    dP = loss_gradient(objective, P, targets)
    _, _, dH = hand_backward(arch.activation, params["pred"], bn_p, xs_p, c_p, dP, params=False)
    _, _, dZ = hand_backward(arch.activation, params["proj"], bn_h, xs_h, c_h, dH, params=False)
    H = dZ.imag.reshape(N, N).T / CSTEP
    J = P.imag.reshape(N, -1).T / CSTEP
    return 0.5 * (H + H.T), J
