r"""Extreme eigenvalues of a block-diagonal symmetric operator: one small Lanczos per block, the blocks still waited
for advanced together by each product.

When an operator is block-diagonal over samples (``H_eff`` of a per-sample objective through a row-wise head:
``scale.curvature.blocks``), its spectrum is the union of its blocks', and one product of the operator on the stacked
vectors ``[q_1; ..; q_n]`` is one Lanczos step of every block at once (``blockwise_lanczos``); once few blocks are
still waited for, a product on their rows alone (``Operator.on_rows``) steps them at their share of the cost. The
recurrence and its tests are ``scale.curvature.lanczos``'s, block by block: float64 basis, full
reorthogonalisation, the eigenvalue bound ``r^2 / gap`` or the residual; the ends measured with one product at the
end.
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
    product_cost: float = 0.0  # the products in full-product equivalents (a product on a of n rows: a / n)
    shrinks: tuple = ()  # (step, active blocks) each time the recurrence went on with fewer blocks' rows

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
RESTRICT_SHARE = 0.5  # blockwise_lanczos: go on with the active blocks' rows alone once at most this share remain
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


LETGO_BOUND = 1e-3  # _settled: an end is let go only once its eigenvalue bound is this small, relative to the scale


def _settled(theta: Tensor, r: Tensor, conv: Tensor, goal: str, best: list[float], bound: Tensor | None = None,
             scale: float = np.inf) -> Tensor:
    """Which block ends (a, 2) need no more steps: converged ones, and under ``goal`` those whose Ritz interval
    ``[theta - e, theta + e]`` lies beyond what some Ritz value already guarantees. A block's lowest Ritz value is at
    or above its lowest eigenvalue (Cauchy interlacing: ``theta_1 >= lambda_1``), so ``best[0]``, the lowest
    ``theta_1`` seen, is at or above the operator's ``lambda_min``, and a block whose ``theta_1 - e_1`` lies above it
    cannot hold ``lambda_min`` if ``e_1`` bounds ``theta_1 - lambda_1``; the highest likewise (``best[1]``, the highest
    ``theta_m``). For ``"norm"``: ``best[0] = max(theta_m, -theta_1)`` over the blocks is at most ``max |lambda|``.

    ``e`` is the larger of the residual ``r`` and the end's eigenvalue bound ``bound`` (``_end_bounds``: ``r^2 /
    gap``, ``r`` where no gap is positive), on the stopping test's premise (the Ritz values have not passed over an
    eigenvalue beyond the block's end). The residual alone bounds the distance to the block's *nearest* eigenvalue,
    not to its end: it let a block go whose lowest Ritz value still stood near its third eigenvalue with a small
    residual and a bound twice its margin, its lowest eigenvalue below the reported ``lambda_min`` (8.6e-4 of the
    scale off at the official tracker's sizes, ``BENCHMARKS.md``). Nor was that enough: at step 12-15 a block's
    lowest Ritz value can stand above three of its eigenvalues with a bound of 1e-2 of the scale that looks tight
    (3.1e-3 of the scale off, epoch 2, n = 32): an end is let go only once its bound is below ``LETGO_BOUND`` of the
    ``scale`` as well, where the Krylov space has resolved the block's end region. ``best`` is updated in place."""
    done = conv.clone()
    lo, hi = theta[:, 0], theta[:, -1]
    e = r[:, [0, -1]] if bound is None else torch.maximum(r[:, [0, -1]], bound)  # (a, 2)
    e = torch.where(e <= LETGO_BOUND * scale, e, torch.inf)  # not resolved enough to be let go
    if goal == "ends":
        best[0], best[1] = min(best[0], float(lo.min())), max(best[1], float(hi.max()))
        done[:, 0] |= lo - e[:, 0] > best[0]
        done[:, 1] |= hi + e[:, 1] < best[1]
    elif goal == "norm":
        best[0] = max(best[0], float(torch.maximum(hi, -lo).max()))
        done |= torch.stack([lo, hi], dim=1).abs() + e < best[0]
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
    restrict: bool = True,
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

    ``refine`` (the same operator in float64, e.g. when ``op``'s products are float32): the recurrence runs on
    ``op`` (its products cast to the float64 basis), and the ends are measured with ``refine`` instead: each
    end's value is the float64 Rayleigh quotient ``y^T A y`` of its Ritz vector ``y`` and its residual
    ``|A y - (y^T A y) y|`` is measured in float64, so the bound ``r^2 / gap`` certifies the value to float64
    accuracy although the vector is only as good as ``op``'s products (``r`` of their rounding, ``r^2`` far
    below ``tol``). When ``op``'s rounding keeps the bound above ``tol``, ``converged`` says so.

    ``goal``: what the stop waits for. ``"blocks"``: every block's lowest and highest end (``block_ends`` all
    converged). ``"ends"``: the operator's ``lambda_min`` and ``lambda_max`` only: a block's lowest end is no longer
    waited for once its Ritz interval lies above the lowest Ritz value of any block (``theta_1 - e_1 >`` it: that
    Ritz value is at or above ``lambda_min`` by interlacing; ``e_1`` the larger of the residual and the bound
    ``r^2 / gap``, once below ``LETGO_BOUND`` of the scale: ``_settled``), and its highest likewise; at crowded block
    ends far from the operator's ends this saves the steps that would resolve them. ``"norm"``: ``max |lambda|``
    only (``|M|``): an end whose ``|theta| + e`` stays below the largest ``max(theta_m, -theta_1)`` of any block (at
    most ``max |lambda|``) is no longer waited for. Under ``"ends"`` and ``"norm"``, ``block_ends`` of the blocks let
    go are Ritz values with their bounds in ``block_bounds``, not converged ends; the negative count stays a lower
    bound.

    Active rows: ``op`` is block-diagonal over rows, so a product on the rows of some blocks alone is those blocks'
    part of a full product, at about their share of its cost. Once at most ``RESTRICT_SHARE`` of the blocks still
    advanced are waited for (and ``restrict`` and ``op.restrictable``: ``Operator.on_rows``), the settled blocks stop
    with their tridiagonals and the recurrence goes on through ``op.on_rows`` of the others; the final extraction
    takes each block's Ritz pairs at its own length and measures every block's ends with one full product.
    ``n_products`` counts the calls of ``op`` (one per step, two for the ends), ``product_cost`` the same in full
    products (a call on ``a`` of ``n`` blocks' rows counts ``a / n``), ``shrinks`` the steps where the set shrank.
    Without a restriction (``op`` not restrictable: a coupled loss, an autograd product) every step advances every
    block, as ``restrict=False`` does.

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
    Q = torch.empty(m_max + 1, n, d, dtype=f64, device=device)  # Q[j, i]: active block i's j-th basis vector
    Q[0] = _block_start(n, d, warm, gen, device)
    alpha = torch.zeros(n, m_max, dtype=f64)
    beta = torch.zeros(n, m_max, dtype=f64)  # beta[:, j] couples q_j and q_{j+1}
    settled = torch.zeros(n, 2, dtype=torch.bool)  # block ends no longer waited for (converged, or let go: goal)
    best = [np.inf, -np.inf] if goal == "ends" else [0.0]
    steps = np.full(n, -1)
    peak = 0.0  # the largest |Ritz value| seen: the scale of every block's test
    ids = torch.arange(n)  # the active blocks (global indices): the rows ``cur`` acts on
    cur, frozen, shrinks = op, [], []
    n_products, cost, m = 0, 0.0, 0
    for j in range(m_max):
        a = len(ids)
        w = cur.matvec(Q[j].reshape(-1).to(cur.dtype)).to(f64).reshape(a, d)
        n_products, cost = n_products + 1, cost + a / n
        al = (Q[j] * w).sum(dim=1)
        alpha[:, j] = al.cpu()
        w = w - al[:, None] * Q[j] - (beta[:, j - 1].to(device)[:, None] * Q[j - 1] if j else 0.0)
        w = _reorthogonalise_blocks(w, Q[: j + 1])
        b = w.norm(dim=1)
        m = j + 1
        if m == d:  # every block's Krylov space is its whole space: the Ritz values are its spectrum
            break
        if m >= min(BLOCK_MIN_ITER, m_max):
            live = torch.nonzero(~settled[ids].all(dim=1)).flatten()  # active blocks still waited for (local)
            theta, S = _tridiagonal_batch(alpha[live, :m], beta[live, : m - 1])
            peak = max(peak, float(theta[:, [0, -1]].abs().max()))
            r = b.cpu()[live, None] * S[:, -1, :].abs()  # beta_m |s_m|: the residual estimates
            bound = _end_bounds(theta, r, "eigenvalue")  # (l, 2): the let-go's interval (also under "residual")
            conv = (bound if stop == "eigenvalue" else r[:, [0, -1]]) <= tol * max(peak, np.finfo(float).tiny)
            g = ids[live]
            newly = ~settled[g].all(dim=1)
            settled[g] |= _settled(theta, r, conv, goal, best, bound, peak)
            steps[g[newly & settled[g].all(dim=1)].numpy()] = m
            if bool(settled.all()) or m == m_max:
                break
        tiny = b <= 1e-12 * max(peak, np.finfo(float).tiny)
        if bool(tiny.any()):  # an invariant subspace in those blocks: go on from fresh orthogonal directions
            fresh = _reorthogonalise_blocks(torch.randn(a, d, generator=gen, dtype=f64).to(device), Q[: j + 1])
            w = torch.where(tiny[:, None], fresh, w)
            b = torch.where(tiny, 0.0, b)
        Q[j + 1] = w / torch.where(b > 0, b, w.norm(dim=1))[:, None]
        beta[:, j] = b.cpu()
        keep = ~settled[ids].all(dim=1)
        if restrict and cur.restrictable and m >= BLOCK_MIN_ITER and int(keep.sum()) <= RESTRICT_SHARE * a:
            # the settled blocks stop here with their tridiagonals; the rest go on through products on their rows
            drop = ~keep
            frozen.append(_Segment(ids[drop], Q[:m, drop.to(device)], alpha[drop, :m], beta[drop, : m - 1],
                                   b.cpu()[drop]))
            ids, Q, alpha, beta = ids[keep], Q[:, keep.to(device)], alpha[keep], beta[keep]
            cur = cur.on_rows(torch.nonzero(keep).flatten())
            shrinks.append((m, len(ids)))
    segments = [*frozen, _Segment(ids, Q[:m], alpha[:, :m], beta[:, : m - 1], b.cpu())]
    res = _blockwise_result(op if refine is None else refine, segments, n, d, n_products, cost, tol, stop,
                            rel_floor, steps, op.dtype)
    return replace(res, goal=goal, warm_started=warm is not None, shrinks=tuple(shrinks))


def _reorthogonalise_blocks(w: Tensor, Q: Tensor, eta: float = 2.0**-0.5) -> Tensor:
    """``_reorthogonalise`` for every block at once: ``w`` (n, d) against each block's basis ``Q[:, i]`` (j, n, d)."""
    for _ in range(2):
        before = w.norm(dim=1)
        w = w - torch.einsum("jn,jnd->nd", torch.einsum("jnd,nd->jn", Q, w), Q)
        if bool((w.norm(dim=1) > eta * before).all()):
            break
    return w


@dataclass(frozen=True)
class _Segment:
    """Blocks whose recurrence stopped at the same step: global indices (a,), basis (m, a, d), tridiagonals
    (``alpha`` (a, m), ``beta`` (a, m - 1)) and the last ``beta_m`` (a,) (the residual estimates' factor)."""

    ids: Tensor
    Q: Tensor
    alpha: Tensor
    beta: Tensor
    b_last: Tensor


def _blockwise_result(op: SymmetricOperator, segments: list[_Segment], n: int, d: int, n_products: int, cost: float,
                      tol: float, stop: str, rel_floor: float, steps: np.ndarray,
                      recurrence: torch.dtype) -> BlockwiseResult:
    """Ritz pairs of every block's final tridiagonal (per segment: blocks stopped at different steps), the ends
    measured with one batched product of ``op`` over all rows: their Rayleigh quotients (the Ritz values themselves
    when ``op`` ran the recurrence) and residuals. Blocks shorter than the longest are padded with NaN in
    ``block_ritz`` and ``block_estimates`` (no Ritz value there)."""
    Y = torch.zeros(2, n, d, dtype=torch.float64, device=segments[0].Q.device)
    parts = []
    for seg in segments:
        theta, S = _tridiagonal_batch(seg.alpha, seg.beta)  # (a, m), (a, m, m)
        exhausted = seg.Q.shape[0] == d
        est = torch.zeros_like(theta) if exhausted else seg.b_last[:, None] * S[:, -1, :].abs()
        ends = S[:, :, [0, -1]].to(seg.Q.device)  # (a, m, 2): the ends' coefficients in each block's basis
        Ys = torch.einsum("jnd,njp->pnd", seg.Q, ends)  # (2, a, d): lowest and highest Ritz vector of each block
        Y[:, seg.ids.to(Y.device)] = Ys / Ys.norm(dim=2, keepdim=True)
        parts.append((seg.ids, theta, est, exhausted))
    AY = op.matmat(Y.reshape(2, -1).T.to(op.dtype)).to(torch.float64).T.reshape(2, n, d)
    n_products, cost = n_products + 2, cost + 2.0
    rayleigh = (Y * AY).sum(dim=2)  # (2, n)
    res = (AY - rayleigh[:, :, None] * Y).norm(dim=2).T.cpu()  # (n, 2), measured
    rayleigh = rayleigh.cpu()
    m_all = max(theta.shape[1] for _, theta, _, _ in parts)
    ritz = torch.full((n, m_all), float("nan"), dtype=torch.float64)
    est_all, with_ends = ritz.clone(), ritz.clone()
    th_ends, bounds = torch.zeros(n, 2, dtype=torch.float64), torch.zeros(n, 2, dtype=torch.float64)
    for ids, theta, est, exhausted in parts:
        theta[:, 0], theta[:, -1] = rayleigh[0, ids], rayleigh[1, ids]
        m = theta.shape[1]
        ritz[ids, :m], est_all[ids, :m], with_ends[ids, :m] = theta, est, _with_ends(est, res[ids])
        th_ends[ids] = theta[:, [0, -1]]
        bounds[ids] = res[ids] if exhausted else _end_bounds(theta, with_ends[ids, :m], stop)
    scale = max(float(th_ends.abs().max()), float(np.nanmax(np.abs(ritz.numpy()))), np.finfo(float).tiny)
    lo, hi = int(th_ends[:, 0].argmin()), int(th_ends[:, 1].argmax())
    vectors = torch.zeros(n, d, 2, dtype=torch.float64, device=Y.device)
    vectors[lo, :, 0], vectors[hi, :, 1] = Y[0, lo], Y[1, hi]
    values = np.array([float(th_ends[lo, 0]), float(th_ends[hi, 1])])
    pick = np.array([float(bounds[lo, 0]), float(bounds[hi, 1])])
    flat, flat_est = ritz.flatten().numpy(), est_all.flatten().numpy()
    order = np.argsort(flat)[: int(np.isfinite(flat).sum())]  # NaN (padding) sorts last
    lengths = [theta.shape[1] for _, theta, _, _ in parts]
    return BlockwiseResult(
        values=values, vectors=vectors.reshape(n * d, 2), residuals=np.array([float(res[lo, 0]), float(res[hi, 1])]),
        converged=pick <= max(tol, 1e-13) * scale, ritz_all=flat[order], residual_estimates=flat_est[order],
        n_products=n_products, n_iter=max(lengths), exhausted=all(e for _, _, _, e in parts), tol=tol,
        rel_floor=rel_floor, block_ends=th_ends.numpy(), block_residuals=res.numpy(), block_bounds=bounds.numpy(),
        block_steps=steps, block_ritz=ritz.numpy(), block_estimates=with_ends.numpy(),
        recurrence_eps=float(torch.finfo(recurrence).eps), block_vectors=Y, product_cost=cost)


def _with_ends(est: Tensor, res: Tensor) -> Tensor:
    """The residual estimates (n, m) with the two ends replaced by their measured residuals (n, 2)."""
    out = est.clone()
    out[:, 0], out[:, -1] = res[:, 0], res[:, 1]
    return out
