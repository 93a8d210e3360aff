r"""Extreme eigenvalues of a block-diagonal symmetric operator: one small Lanczos per block, all blocks in each product.

When an operator is block-diagonal over samples (``H_eff`` of a per-sample objective through a row-wise head:
``scale.curvature.blocks``), its spectrum is the union of its blocks', and one product of the operator on the stacked
vectors ``[q_1; ..; q_n]`` is one Lanczos step of every block at once (``blockwise_lanczos``). The recurrence and its
tests are ``scale.curvature.lanczos``'s, block by block: float64 basis, full reorthogonalisation, the eigenvalue
bound ``r^2 / gap`` or the residual; the ends measured with one product at the end.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import torch
from torch import Tensor

from mini.hessian import NEG_FLOOR
from scale.curvature.lanczos import STOPS, LanczosResult, SymmetricOperator

BLOCKWISE_TOL = 1e-8  # blockwise_lanczos: eigenvalue error bound, relative to the scale (max |lambda| over all blocks)
BLOCK_MIN_ITER = 6  # blockwise_lanczos: no convergence test before this many steps (the test costs a batched eigh)
ROUNDING_MARGIN = 100  # BlockwiseResult.n_negative: epsilons of the products added to each Ritz interval


@dataclass(frozen=True)
class BlockwiseResult(LanczosResult):
    """``blockwise_lanczos``'s answer: the extreme pairs of the whole operator (``values``, ``vectors`` (N, 2): the
    lowest block end and the highest, each zero outside its block; ``residuals`` measured), every block's ends
    (``block_ends`` (n, 2): lowest, highest Ritz value) with their measured residuals and error bounds."""

    block_ends: np.ndarray = field(repr=False, default=None)  # (n, 2)
    block_residuals: np.ndarray = field(repr=False, default=None)  # (n, 2), measured
    block_bounds: np.ndarray = field(repr=False, default=None)  # (n, 2): the stopping quantity, measured residuals
    block_steps: np.ndarray = field(repr=False, default=None)  # (n,): the step at which each block met the test
    block_ritz: np.ndarray = field(repr=False, default=None)  # (n, m): every block's Ritz values, ascending
    block_estimates: np.ndarray = field(repr=False, default=None)  # (n, m): their residuals (ends measured)
    recurrence_eps: float = 0.0  # machine epsilon of the products that ran the recurrence
    block_vectors: Tensor | None = field(repr=False, default=None)  # (2, n, d): every block's lowest, highest vector
    goal: str = "blocks"  # what the stop waited for (GOALS)
    warm_started: bool = False
    interaction: BlockwiseResult | None = field(repr=False, default=None)  # M's run beside H's (the tracker's warm)

    @property
    def answered(self) -> bool:
        """The ``goal`` met at the measured residuals: every block's ends (``"blocks"``), the operator's two ends
        (``"ends"``), or the end of largest ``|lambda|`` (``"norm"``)."""
        if self.goal == "blocks":
            return bool(self.ends_converged and np.all(self.block_bounds <= max(self.tol, 1e-13) * self.scale))
        if self.goal == "norm":
            return bool(self.converged[int(np.argmax(np.abs(self.values)))])
        return self.ends_converged

    @property
    def n_negative(self) -> int:
        """A lower bound on the eigenvalues below ``-floor``: in each block, Ritz intervals ``[theta - r, theta + r]``
        (each holds an eigenvalue of the block; ``r`` widened by ``ROUNDING_MARGIN`` epsilons of the recurrence's
        products, relative to the scale, whose rounding the residual estimates do not see) lying below
        ``-floor``, counted only when disjoint."""
        count, pad = 0, ROUNDING_MARGIN * self.recurrence_eps * self.scale
        for theta, r in zip(self.block_ritz, self.block_estimates + pad):
            last = -np.inf
            for t, e in zip(theta, r):
                if t + e < -self.floor and t - e > last:
                    count, last = count + 1, t + e
        return count


def _tridiagonal_batch(alpha: Tensor, beta: Tensor) -> tuple[Tensor, Tensor]:
    """Eigenvalues (b, m) ascending and eigenvectors (b, m, m) of a batch of symmetric tridiagonals (diagonals
    ``alpha`` (b, m), off-diagonals ``beta`` (b, m - 1)): one batched ``eigh`` (m is a few tens here)."""
    T = torch.diag_embed(alpha)
    if alpha.shape[1] > 1:
        T = T + torch.diag_embed(beta, 1) + torch.diag_embed(beta, -1)
    return torch.linalg.eigh(T)


def _end_bounds(theta: Tensor, r: Tensor, stop: str) -> Tensor:
    """Per block, the stopping quantity of the lowest and the highest Ritz pair (b, 2): the residual ``r``, or
    ``r^2 / gap`` with ``gap`` the distance to the next Ritz value inwards less that value's own residual (the
    residual where that estimate is not positive; ``_error_bound`` for one operator)."""
    ends = r[:, [0, -1]]
    if stop == "residual" or theta.shape[1] < 2:
        return ends
    gap = torch.stack([theta[:, 1] - theta[:, 0] - r[:, 1], theta[:, -1] - theta[:, -2] - r[:, -2]], dim=1)
    return torch.where(gap > 0, ends**2 / torch.where(gap > 0, gap, 1.0), ends)


GOALS = ("blocks", "ends", "norm")
WARM_NOISE = 1e-2  # blockwise_lanczos: the random part of a warm start vector (every direction represented)


def _block_start(n: int, d: int, warm: BlockwiseResult | None, gen: torch.Generator, device) -> Tensor:
    """Each block's first basis vector (n, d): random, or (warm) the sum of the previous run's lowest and highest
    Ritz vectors of that block plus ``WARM_NOISE`` of a random one, so that both ends start well represented."""
    q = torch.randn(n, d, generator=gen, dtype=torch.float64).to(device)
    q = q / q.norm(dim=1, keepdim=True)
    if warm is not None:
        Y = warm.block_vectors.to(device=device, dtype=torch.float64)  # (2, n, d), unit columns
        q = Y[0] + Y[1] + WARM_NOISE * q
        q = q / q.norm(dim=1, keepdim=True)
    return q


def _settled(theta: Tensor, r: Tensor, conv: Tensor, goal: str, best: list[float]) -> Tensor:
    """Which block ends (a, 2) need no more steps: converged ones, and under ``goal`` those whose Ritz interval
    ``[theta - r, theta + r]`` (the residual ``r`` bounds the distance to the block's nearest eigenvalue) lies beyond
    what some Ritz value already guarantees. A block's lowest Ritz value is at or above its lowest eigenvalue
    (Cauchy interlacing: ``theta_1 >= lambda_1``), so ``best[0]``, the lowest ``theta_1`` seen, is at or above the
    operator's ``lambda_min``, and a block whose ``theta_1 - r_1`` lies above it cannot hold ``lambda_min``; the
    highest likewise (``best[1]``, the highest ``theta_m``). For ``"norm"``: ``best[0] = max(theta_m, -theta_1)``
    over the blocks is at most ``max |lambda|``. ``best`` is updated in place."""
    done = conv.clone()
    lo, hi = theta[:, 0], theta[:, -1]
    if goal == "ends":
        best[0], best[1] = min(best[0], float(lo.min())), max(best[1], float(hi.max()))
        done[:, 0] |= lo - r[:, 0] > best[0]
        done[:, 1] |= hi + r[:, -1] < best[1]
    elif goal == "norm":
        best[0] = max(best[0], float(torch.maximum(hi, -lo).max()))
        done |= torch.stack([lo, hi], dim=1).abs() + r[:, [0, -1]] < best[0]
    return done


def blockwise_lanczos(
    op: SymmetricOperator,
    n_blocks: int,
    *,
    refine: SymmetricOperator | None = None,
    max_iter: int | None = None,
    tol: float = BLOCKWISE_TOL,
    stop: str = "eigenvalue",
    seed: int = 0,
    rel_floor: float = NEG_FLOOR,
    goal: str = "blocks",
    warm: BlockwiseResult | None = None,
) -> BlockwiseResult:
    """The extreme eigenpairs of a block-diagonal ``op`` (``n_blocks`` diagonal blocks of ``d = N / n_blocks``,
    in order, nothing between them): a Lanczos recurrence per block, all blocks advanced by each product.

    ``op``'s spectrum is the union of its blocks', so ``lambda_min`` is the lowest block's lowest eigenvalue.
    Each block runs its own Lanczos (float64 basis, full reorthogonalisation) on its own ``d``-dimensional
    space: one product of ``op`` on the stacked vectors ``[q_1; ..; q_n]`` is one step of every block at once.
    A block's spectrum is ``n`` times sparser than the whole operator's, so its extreme eigenvalues stand
    further apart from their neighbours (the gap at ``lambda_min`` relative to the scale: about 0.1 per block
    against 1e-3 for the whole, at the paper's SimSiam sizes) and converge in fewer steps; the steps needed
    are those of the slowest block, which does not grow with ``n`` as a single Krylov space over all
    ``N = n d`` coordinates does.

    Stopping: every block's lowest and highest Ritz pair pass ``stop``'s test (``lanczos``'s: ``"eigenvalue"``,
    the bound ``r^2 / gap <= tol * scale``, or ``"residual"``, ``r <= tol * scale``), ``scale`` the largest
    ``|Ritz value|`` over all blocks; a block that passed is not tested again (its Ritz values only move
    towards its ends). At the end the two ends of every block are measured with one batched product of the
    Ritz vectors (``residuals``, ``block_residuals``) and ``converged`` recomputed from the measured residuals.
    Products are counted as products of ``op`` (one per step, two for the measured ends).

    ``refine`` (the same operator in float64, e.g. when ``op``'s products are float32): the recurrence runs on
    ``op`` (its products cast to the float64 basis), and the ends are measured with ``refine`` instead: each
    end's value is the float64 Rayleigh quotient ``y^T A y`` of its Ritz vector ``y`` and its residual
    ``|A y - (y^T A y) y|`` is measured in float64, so the bound ``r^2 / gap`` certifies the value to float64
    accuracy although the vector is only as good as ``op``'s products (``r`` of their rounding, ``r^2`` far
    below ``tol``). When ``op``'s rounding keeps the bound above ``tol``, ``converged`` says so.

    ``goal``: what the stop waits for. ``"blocks"``: every block's lowest and highest end (``block_ends`` all
    converged). ``"ends"``: the operator's ``lambda_min`` and ``lambda_max`` only: a block's lowest end is no longer
    waited for once its Ritz interval lies above the lowest Ritz value of any block (``theta_1 - r_1 >`` it: that
    Ritz value is at or above ``lambda_min`` by interlacing; ``r_1`` the residual, which bounds the distance from
    ``theta_1`` to the block's nearest eigenvalue, read, like the stopping test's gap, on the premise that the Ritz
    values have not passed over an eigenvalue beyond the block's end), and its highest likewise; at crowded block
    ends far from the operator's ends this saves the steps that would resolve them. ``"norm"``: ``max |lambda|``
    only (``|M|``): an end whose ``|theta| + r`` stays below the largest ``max(theta_m, -theta_1)`` of any block (at
    most ``max |lambda|``) is no longer waited for. Under ``"ends"`` and ``"norm"``, ``block_ends`` of the blocks let
    go are Ritz values with their bounds in ``block_bounds``, not converged ends; the negative count stays a lower
    bound.

    ``warm``: a previous result on an operator of the same shape (the tracker's last measurement on the same
    probe): each block starts from its previous lowest plus highest Ritz vector (``_block_start``).
    """
    if stop not in STOPS:
        raise ValueError(f"stop must be one of {STOPS}, got {stop!r}")
    if goal not in GOALS:
        raise ValueError(f"goal must be one of {GOALS}, got {goal!r}")
    N, n = int(op.N), int(n_blocks)
    if n < 1 or N % n:
        raise ValueError(f"n_blocks must divide the operator's dimension N={N}, got {n_blocks}")
    d = N // n
    if warm is not None and (warm.block_vectors is None or tuple(warm.block_vectors.shape) != (2, n, d)):
        warm = None  # another shape (a probe of another size) or no block vectors (a checkpoint's stand-in): cold
    m_max = min(d, 200) if max_iter is None else min(int(max_iter), d)
    if m_max < 1:
        raise ValueError(f"max_iter must be >= 1, got {max_iter}")
    device, f64 = op.device, torch.float64
    gen = torch.Generator(device="cpu").manual_seed(seed)
    Q = torch.empty(m_max + 1, n, d, dtype=f64, device=device)  # Q[j, i]: block i's j-th basis vector
    Q[0] = _block_start(n, d, warm, gen, device)
    alpha = torch.zeros(n, m_max, dtype=f64)
    beta = torch.zeros(n, m_max, dtype=f64)  # beta[:, j] couples q_j and q_{j+1}
    settled = torch.zeros(n, 2, dtype=torch.bool)  # block ends no longer waited for (converged, or let go: goal)
    best = [np.inf, -np.inf] if goal == "ends" else [0.0]
    steps = np.full(n, -1)
    peak = 0.0  # the largest |Ritz value| seen: the scale of every block's test
    n_products, m = 0, 0
    for j in range(m_max):
        w = op.matvec(Q[j].reshape(-1).to(op.dtype)).to(f64).reshape(n, d)
        n_products += 1
        a = (Q[j] * w).sum(dim=1)
        alpha[:, j] = a.cpu()
        w = w - a[:, None] * Q[j] - (beta[:, j - 1].to(device)[:, None] * Q[j - 1] if j else 0.0)
        w = _reorthogonalise_blocks(w, Q[: j + 1])
        b = w.norm(dim=1)
        m = j + 1
        if m == d:  # every block's Krylov space is its whole space: the Ritz values are its spectrum
            break
        if m >= min(BLOCK_MIN_ITER, m_max):
            idx = torch.nonzero(~settled.all(dim=1)).flatten()  # the blocks still waited for at one end or both
            theta, S = _tridiagonal_batch(alpha[idx, :m], beta[idx, : m - 1])
            peak = max(peak, float(theta[:, [0, -1]].abs().max()))
            r = b.cpu()[idx, None] * S[:, -1, :].abs()  # beta_m |s_m|: the residual estimates
            conv = _end_bounds(theta, r, stop) <= tol * max(peak, np.finfo(float).tiny)  # (a, 2)
            newly = ~settled[idx].all(dim=1)
            settled[idx] |= _settled(theta, r, conv, goal, best)
            steps[idx[newly & settled[idx].all(dim=1)].numpy()] = m
            if bool(settled.all()) or m == m_max:
                break
        tiny = b <= 1e-12 * max(peak, np.finfo(float).tiny)
        if bool(tiny.any()):  # an invariant subspace in those blocks: go on from fresh orthogonal directions
            fresh = _reorthogonalise_blocks(torch.randn(n, d, generator=gen, dtype=f64).to(device), Q[: j + 1])
            w = torch.where(tiny[:, None], fresh, w)
            b = torch.where(tiny, 0.0, b)
        Q[j + 1] = w / torch.where(b > 0, b, w.norm(dim=1))[:, None]
        beta[:, j] = b.cpu()
    res = _blockwise_result(op if refine is None else refine, Q[:m], alpha[:, :m], beta[:, : m - 1], b.cpu(),
                            m == d, n_products, tol, stop, rel_floor, steps, op.dtype)
    return replace(res, goal=goal, warm_started=warm is not None)


def _reorthogonalise_blocks(w: Tensor, Q: Tensor, eta: float = 2.0**-0.5) -> Tensor:
    """``_reorthogonalise`` for every block at once: ``w`` (n, d) against each block's basis ``Q[:, i]`` (j, n, d)."""
    for _ in range(2):
        before = w.norm(dim=1)
        w = w - torch.einsum("jn,jnd->nd", torch.einsum("jnd,nd->jn", Q, w), Q)
        if bool((w.norm(dim=1) > eta * before).all()):
            break
    return w


def _blockwise_result(op, Q, alpha, beta, b_last, exhausted, n_products, tol, stop, rel_floor, steps, recurrence):
    """Ritz pairs of every block's final tridiagonal, the ends measured with one batched product of ``op``: their
    Rayleigh quotients (the Ritz values themselves when ``op`` ran the recurrence) and residuals."""
    m, n, d = Q.shape
    theta, S = _tridiagonal_batch(alpha, beta)  # (n, m), (n, m, m)
    est = torch.zeros_like(theta) if exhausted else b_last[:, None] * S[:, -1, :].abs()
    ends = S[:, :, [0, -1]].to(Q.device)  # (n, m, 2): the ends' coefficients in each block's basis
    Y = torch.einsum("jnd,njp->pnd", Q, ends)  # (2, n, d): lowest and highest Ritz vector of every block
    Y = Y / Y.norm(dim=2, keepdim=True)
    AY = op.matmat(Y.reshape(2, -1).T.to(op.dtype)).to(torch.float64).T.reshape(2, n, d)
    n_products += 2
    rayleigh = (Y * AY).sum(dim=2)  # (2, n)
    res = (AY - rayleigh[:, :, None] * Y).norm(dim=2).T.cpu()  # (n, 2), measured
    theta[:, 0], theta[:, -1] = rayleigh[0].cpu(), rayleigh[1].cpu()
    th_ends = theta[:, [0, -1]]  # (n, 2)
    scale = max(float(theta.abs().max()), np.finfo(float).tiny)
    bounds = res if exhausted else _end_bounds(theta, _with_ends(est, res), stop)
    lo, hi = int(th_ends[:, 0].argmin()), int(th_ends[:, 1].argmax())
    vectors = torch.zeros(n, d, 2, dtype=torch.float64, device=Q.device)
    vectors[lo, :, 0], vectors[hi, :, 1] = Y[0, lo], Y[1, hi]
    values = np.array([float(th_ends[lo, 0]), float(th_ends[hi, 1])])
    pick = np.array([float(bounds[lo, 0]), float(bounds[hi, 1])])
    return BlockwiseResult(
        values=values, vectors=vectors.reshape(n * d, 2), residuals=np.array([float(res[lo, 0]), float(res[hi, 1])]),
        converged=pick <= max(tol, 1e-13) * scale, ritz_all=np.sort(theta.flatten().numpy()),
        residual_estimates=est.flatten().numpy()[np.argsort(theta.flatten().numpy())], n_products=n_products,
        n_iter=m, exhausted=exhausted, tol=tol, rel_floor=rel_floor, block_ends=th_ends.numpy(),
        block_residuals=res.numpy(), block_bounds=bounds.numpy(), block_steps=steps, block_ritz=theta.numpy(),
        block_estimates=_with_ends(est, res).numpy(), recurrence_eps=float(torch.finfo(recurrence).eps),
        block_vectors=Y)


def _with_ends(est: Tensor, res: Tensor) -> Tensor:
    """The residual estimates (n, m) with the two ends replaced by their measured residuals (n, 2)."""
    out = est.clone()
    out[:, 0], out[:, -1] = res[:, 0], res[:, 1]
    return out
