r"""Extreme eigenvalues of a block-diagonal symmetric operator: one small Lanczos per block, the blocks still waited
for advanced together by each product.

When an operator is block-diagonal over samples (``H_eff`` of a per-sample objective through a row-wise head:
``scale.curvature.blocks``), its spectrum is the union of its blocks', and one product of the operator on the stacked
vectors ``[q_1; ..; q_n]`` is one Lanczos step of every block at once (``blockwise_lanczos``); once few blocks are
still waited for, a product on their rows alone (``Operator.on_rows``) steps them at their share of the cost. The
recurrence is ``scale.curvature.lanczos``'s, block by block: float64 basis, full reorthogonalisation; the stop the
residual (``_certificates``: an eigenvalue of the block within it, whatever the rest of the spectrum); the ends
measured with one product at the end, and ``converged`` read off those measured residuals alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import torch
from torch import Tensor

from mini.hessian import NEG_FLOOR
from scale.curvature.lanczos import LanczosResult, SymmetricOperator, _tridiagonal_ends

BLOCKWISE_TOL = 1e-8  # blockwise_lanczos: residual bound (so eigenvalue error bound), relative to the scale
BLOCK_MIN_ITER = 6  # blockwise_lanczos: no convergence test before this many steps (a test costs a dstemr a block)
ROUNDING_MARGIN = 100  # BlockwiseResult.n_negative: epsilons of the products added to each Ritz interval


@dataclass(frozen=True)
class BlockwiseResult(LanczosResult):
    """``blockwise_lanczos``'s answer: the extreme pairs of the whole operator (``values``, ``vectors`` (N, 2): the
    lowest block end and the highest, each zero outside its block; ``residuals`` measured), every block's ends
    (``block_ends`` (n, 2): lowest, highest Ritz value) with their measured residuals and error bounds."""

    block_ends: np.ndarray = field(repr=False, default=None)  # (n, 2)
    block_residuals: np.ndarray = field(repr=False, default=None)  # (n, 2), measured
    block_bounds: np.ndarray = field(repr=False, default=None)  # (n, 2): the certificates, measured residuals
    block_steps: np.ndarray = field(repr=False, default=None)  # (n,): the step at which each block met the test
    block_ritz: np.ndarray = field(repr=False, default=None)  # (n, m): every block's Ritz values, ascending
    block_estimates: np.ndarray = field(repr=False, default=None)  # (n, m): their residuals (ends measured)
    recurrence_eps: float = 0.0  # machine epsilon of the products that ran the recurrence
    block_vectors: Tensor | None = field(repr=False, default=None)  # (2, n, d): every block's lowest, highest vector
    goal: str = "blocks"  # what the stop waited for (GOALS)
    warm_started: bool = False
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


def _certificates(theta: np.ndarray, r: np.ndarray) -> np.ndarray:
    """Per block, what ``converged`` may be read off for the lowest and the highest Ritz pair (b, 2): the residual
    ``r = |A y - theta y|`` (``theta`` a Rayleigh quotient of the unit ``y``, ``A`` symmetric: an eigenvalue lies in
    ``[theta - r, theta + r]``, whatever the rest of the spectrum). ``theta`` and ``r`` (b, m) as ``_end_estimates``.

    Not ``r^2 / gap`` (Kato-Temple): that bound needs a lower bound on the gap from ``theta`` to every other
    eigenvalue, and Ritz values bound eigenvalues from the inside only, so no gap read off them is one (an
    unresolved eigenvalue can sit inside it). Flagged on that estimate, a block (``N = 60``, seed 18, ``tol = 1e-4``:
    ``theory_checks/test_lanczos_contract.py``) was ``answered`` with an end 12 tol from every eigenvalue."""
    return r[:, [0, -1]]


def _end_estimates(theta: np.ndarray, r: np.ndarray) -> np.ndarray:
    """Per block, an estimate of the lowest and the highest Ritz value's eigenvalue error (b, 2), for the let-go
    alone (``_settled``), never for ``converged``: ``r^2 / gap`` with ``gap`` the distance to the next Ritz value
    inwards less that value's own residual (the residual where that estimate is not positive). ``theta`` and ``r``
    (b, m): every Ritz value of each block, or its two lowest and two highest (``_block_tests``)."""
    ends = r[:, [0, -1]]
    if theta.shape[1] < 2:
        return ends
    gap = np.stack([theta[:, 1] - theta[:, 0] - r[:, 1], theta[:, -1] - theta[:, -2] - r[:, -2]], axis=1)
    return np.where(gap > 0, ends**2 / np.where(gap > 0, gap, 1.0), ends)


GOALS = ("blocks", "ends", "norm")
RESTRICT_SHARE = 0.5  # blockwise_lanczos: go on with the active blocks' rows alone once at most this share remain
WARM_NOISE = 1e-2  # blockwise_lanczos: the random part of a warm start vector (every direction represented)


def _block_start(n: int, d: int, warm: BlockwiseResult | None, gen: torch.Generator, device) -> Tensor:
    """Each block's first basis vector (n, d): random, or (warm: a run on the same operator) the sum of that run's
    lowest and highest Ritz vectors of the block plus ``WARM_NOISE`` of a random one, so that both ends start well
    represented."""
    q = torch.randn(n, d, generator=gen, dtype=torch.float64).to(device)
    q = q / q.norm(dim=1, keepdim=True)
    if warm is not None:
        Y = warm.block_vectors.to(device=device, dtype=torch.float64)  # (2, n, d), unit columns
        q = Y[0] + Y[1] + WARM_NOISE * q
        q = q / q.norm(dim=1, keepdim=True)
    return q


FAR_BOUND = 1e4  # blockwise_lanczos: while every open end's residual estimate exceeds this many tol, test every
FAR_STRIDE = 2  # FAR_STRIDE-th step only (a skipped test can delay a stop by a step, never make one)
LETGO_BOUND = 1e-3  # _settled: an end is let go only once its eigenvalue estimate is this small, relative to the scale


def _settled(theta: np.ndarray, r: np.ndarray, conv: np.ndarray, goal: str, best: list[float],
             bound: np.ndarray | None = None, scale: float = np.inf) -> np.ndarray:
    """Which block ends (a, 2) need no more steps: converged ones, and under ``goal`` those whose Ritz interval
    ``[theta - e, theta + e]`` lies beyond what some Ritz value already guarantees. A block's lowest Ritz value is at
    or above its lowest eigenvalue (Cauchy interlacing: ``theta_1 >= lambda_1``), so ``best[0]``, the lowest
    ``theta_1`` seen, is at or above the operator's ``lambda_min``, and a block whose ``theta_1 - e_1`` lies above it
    cannot hold ``lambda_min`` if ``e_1`` bounds ``theta_1 - lambda_1``; the highest likewise (``best[1]``, the highest
    ``theta_m``). For ``"norm"``: ``best[0] = max(theta_m, -theta_1)`` over the blocks is at most ``max |lambda|``.

    ``e`` is the larger of the residual ``r`` and the end's eigenvalue estimate ``bound`` (``_end_estimates``: ``r^2 /
    gap``, ``r`` where no gap is positive), on the let-go's premise (the Ritz values have not passed over an
    eigenvalue beyond the block's end). The residual alone bounds the distance to the block's *nearest* eigenvalue,
    not to its end: it let a block go whose lowest Ritz value still stood near its third eigenvalue with a small
    residual and a bound twice its margin, its lowest eigenvalue below the reported ``lambda_min`` (8.6e-4 of the
    scale off at the official tracker's sizes, run B: ``bench/results/curvature_history.md``). Nor was that enough: at
    step 12-15 a block's lowest Ritz value can stand above three of its eigenvalues with a bound of 1e-2 of the scale
    that looks tight (3.1e-3 of the scale off, epoch 2, n = 32): an end is let go only once its bound is below
    ``LETGO_BOUND`` of the ``scale`` as well, where the Krylov space has resolved the block's end region. ``best``
    is updated in place."""
    done = conv.copy()
    lo, hi = theta[:, 0], theta[:, -1]
    e = r[:, [0, -1]] if bound is None else np.maximum(r[:, [0, -1]], bound)  # (a, 2)
    e = np.where(e <= LETGO_BOUND * scale, e, np.inf)  # not resolved enough to be let go
    if goal == "ends":
        best[0], best[1] = min(best[0], float(lo.min())), max(best[1], float(hi.max()))
        done[:, 0] |= lo - e[:, 0] > best[0]
        done[:, 1] |= hi + e[:, 1] < best[1]
    elif goal == "norm":
        best[0] = max(best[0], float(np.maximum(hi, -lo).max()))
        done |= np.abs(np.stack([lo, hi], axis=1)) + e < best[0]
    return done


def blockwise_lanczos(
    op: SymmetricOperator,
    n_blocks: int,
    *,
    refine: SymmetricOperator | None = None,
    max_iter: int | None = None,
    tol: float = BLOCKWISE_TOL,
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

    Stopping: every block's lowest and highest Ritz pair pass the residual test ``r <= tol * scale``
    (``_certificates``: an eigenvalue within ``r`` of the Ritz value, whatever the rest of the spectrum), ``scale``
    the largest ``|Ritz value|`` over all blocks; a block that passed is not tested again (its Ritz values only move
    towards its ends). No stop on the estimate ``r^2 / gap``: its gap, read off the block's Ritz values, is not a
    lower bound on the gap to the block's other eigenvalues (``_certificates``). While every open end's residual
    estimate stands above ``FAR_BOUND`` times ``tol`` of the scale, only every ``FAR_STRIDE``-th step is tested (a
    test costs a ``dstemr`` an open end): a stop or a let-go may come a step later, never earlier. At the end the two
    ends of every block are measured with one batched product of the Ritz vectors (``residuals``,
    ``block_residuals``) and ``converged`` read off the measured residuals alone (``block_bounds``).

    ``refine`` (the same operator in float64, e.g. when ``op``'s products are float32): the recurrence runs on
    ``op`` (its products cast to the float64 basis), and the ends are measured with ``refine`` instead: each
    end's value is the float64 Rayleigh quotient ``y^T A y`` of its Ritz vector ``y`` and its residual
    ``|A y - (y^T A y) y|`` is measured in float64, so ``converged`` holds for the float64 operator; the vector is
    only as good as ``op``'s products, so that residual stalls near their rounding (about 1e-7 of the scale for
    float32), and where that keeps it above ``tol`` ``converged`` says so (``blockwise_ends`` then runs again in
    float64, or asks float32 for no less than it can meet: ``RECURRENCE_REACH`` there). Only the blocks
    that may hold what ``goal`` waits for are measured with ``refine``, on their rows (``_refined_blocks``; every
    row under ``"blocks"`` or when ``refine`` cannot be restricted); the others keep ``op``'s measurement.

    ``goal``: what the stop waits for. ``"blocks"``: every block's lowest and highest end (``block_ends`` all
    converged). ``"ends"``: the operator's ``lambda_min`` and ``lambda_max`` only: a block's lowest end is no longer
    waited for once its Ritz interval lies above the lowest Ritz value of any block (``theta_1 - e_1 >`` it: that
    Ritz value is at or above ``lambda_min`` by interlacing; ``e_1`` the larger of the residual and the estimate
    ``r^2 / gap``, once below ``LETGO_BOUND`` of the scale: ``_settled``; a premise, not a bound: the let-go picks
    which block's end is reported, ``converged`` stays the residual's), and its highest likewise; at crowded block
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

    ``warm``: a previous result on the same operator (``blockwise_ends``' float64 rerun of a float32 run): each
    block starts from that run's lowest plus highest Ritz vector (``_block_start``). Not a previous measurement's
    result: between measurements a block's eigenvalues may cross, its old lowest Ritz vector is then nearly
    orthogonal to its new lowest eigenvector, and the let-go's premise fails on the start it steers: the block's
    lowest Ritz value settles at its second eigenvalue with a small bound, the block holding ``lambda_min`` is let
    go, and the answer is off, reported converged. Started at every block's second eigenvector (a crossing in every
    block), the official tracker's sizes gave ``lambda_min`` up to 1.6e-2 of the scale off in 6 of 16 snapshots, and
    up to 1.8e-3 in 2 of 16 with the random part as large as the steered one; random starts were never fooled
    (``python -m bench.bench_warm_crossing``, 2026-12-04, under the estimate stop; ``tests/test_lanczos.py`` keeps a
    small instance: under the residual stop at tol 1e-4 a steered start is fooled with or without the let-go, at 1e-8
    it was not). So measurements start cold (``blockwise_ends`` takes no warm start).
    """
    if goal not in GOALS:
        raise ValueError(f"goal must be one of {GOALS}, got {goal!r}")
    N, n = int(op.N), int(n_blocks)
    if n < 1 or N % n:
        raise ValueError(f"n_blocks must divide the operator's dimension N={N}, got {n_blocks}")
    d = N // n
    if warm is not None and (warm.block_vectors is None or tuple(warm.block_vectors.shape) != (2, n, d)):
        warm = None  # another shape (a probe of another size) or no block vectors: cold
    m_max = min(d, 200) if max_iter is None else min(int(max_iter), d)
    if m_max < 1:
        raise ValueError(f"max_iter must be >= 1, got {max_iter}")
    device, f64 = op.device, torch.float64
    gen = torch.Generator(device="cpu").manual_seed(seed)
    # Q[i, j]: active block i's j-th basis vector, each block's basis contiguous (one bmm reorthogonalises them all)
    Q = torch.empty(n, m_max + 1, d, dtype=f64, device=device)
    Q[:, 0] = _block_start(n, d, warm, gen, device)
    alpha = np.zeros((n, m_max))
    beta = np.zeros((n, m_max))  # beta[:, j] couples q_j and q_{j+1}
    settled = np.zeros((n, 2), dtype=bool)  # block ends no longer waited for (converged, or let go: goal)
    tests = np.full((2, n, 4), np.nan)  # the last tests' extreme Ritz values and estimates (``_block_tests``)
    best = [np.inf, -np.inf] if goal == "ends" else [0.0]
    steps = np.full(n, -1)
    peak = 0.0  # the largest |Ritz value| seen: the scale of every block's test
    ids = np.arange(n)  # the active blocks (global indices): the rows ``cur`` acts on
    cur, frozen, shrinks = op, [], []
    n_products, cost, m = 0, 0.0, 0
    b_prev, far = None, False
    for j in range(m_max):
        a = len(ids)
        q = Q[:, j]
        w = cur.matvec(q.reshape(-1).to(cur.dtype)).to(f64).reshape(a, d)
        n_products, cost = n_products + 1, cost + a / n
        al = (q * w).sum(dim=1)
        w = w - al[:, None] * q
        if j:
            w = w - b_prev[:, None] * Q[:, j - 1]
        w, b = _reorthogonalise_blocks(w, Q[:, : j + 1])
        alpha[:, j], b_np = torch.stack([al, b]).cpu().numpy()
        m = j + 1
        if m == d:  # every block's Krylov space is its whole space: the Ritz values are its spectrum
            break
        if m >= min(BLOCK_MIN_ITER, m_max) and (not far or m == m_max or (m - BLOCK_MIN_ITER) % FAR_STRIDE == 0):
            live = np.flatnonzero(~settled[ids].all(axis=1))  # active blocks still waited for (local)
            g = ids[live]
            theta, r = _block_tests(alpha[live, :m], beta[live, : m - 1], b_np[live], ~settled[g], tests[0][g],
                                    tests[1][g])
            c = theta.shape[1]
            four = [0, min(1, c - 1), max(c - 2, 0), c - 1]  # the ends' columns (every Ritz value below 5 steps)
            tests[0][g], tests[1][g] = theta[:, four], r[:, four]
            peak = max(peak, float(np.abs(theta[:, [0, -1]]).max()))
            bound = _end_estimates(theta, r)  # (l, 2): the let-go's interval, an estimate (never a stop)
            quantity = _certificates(theta, r)  # the stopping test's, (l, 2): the residual estimates
            conv = quantity <= tol * max(peak, np.finfo(float).tiny)
            newly = ~settled[g].all(axis=1)
            settled[g] |= _settled(theta, r, conv, goal, best, bound, peak)
            far = bool(np.all(quantity[~settled[g]] > FAR_BOUND * tol * peak))  # the next step's test may wait
            steps[g[newly & settled[g].all(axis=1)]] = m
            if settled.all() or m == m_max:
                break
        tiny = b_np <= 1e-12 * max(peak, np.finfo(float).tiny)
        if tiny.any():  # an invariant subspace in those blocks: go on from fresh orthogonal directions
            fresh, size = _reorthogonalise_blocks(torch.randn(a, d, generator=gen, dtype=f64).to(device),
                                                  Q[:, : j + 1])
            t = torch.from_numpy(tiny).to(device)
            Q[:, j + 1] = torch.where(t[:, None], fresh / size[:, None], w / torch.where(t, 1.0, b)[:, None])
            b = torch.where(t, 0.0, b)
            b_np = np.where(tiny, 0.0, b_np)
        else:
            Q[:, j + 1] = w / b[:, None]
        beta[:, j] = b_np
        b_prev = b
        keep = ~settled[ids].all(axis=1)
        if restrict and cur.restrictable and m >= BLOCK_MIN_ITER and int(keep.sum()) <= RESTRICT_SHARE * a:
            # the settled blocks stop here with their tridiagonals; the rest go on through products on their rows
            drop = ~keep
            dq, kq = torch.from_numpy(drop).to(device), torch.from_numpy(keep).to(device)
            frozen.append(_Segment(ids[drop], Q[dq, :m], alpha[drop, :m], beta[drop, : m - 1], b_np[drop]))
            ids, Q, alpha, beta, b_prev = ids[keep], _kept_basis(Q, kq, m + 1), alpha[keep], beta[keep], b_prev[kq]
            cur = cur.on_rows(torch.from_numpy(np.flatnonzero(keep)))
            shrinks.append((m, len(ids)))
    segments = [*frozen, _Segment(ids, Q[:, :m], alpha[:, :m], beta[:, : m - 1], b_np)]
    res = _blockwise_result(op, refine, segments, n, d, n_products, cost, tol, rel_floor, steps, goal)
    return replace(res, goal=goal, warm_started=warm is not None, shrinks=tuple(shrinks))


def _kept_basis(Q: Tensor, keep: Tensor, used: int) -> Tensor:
    """The rows ``keep`` of the basis ``Q`` (n, m_max + 1, d), of which the first ``used`` vectors are written: a fresh
    buffer with those vectors copied and the rest left unwritten. ``Q[keep]`` copied every slot, touching the
    memory of vectors never computed page by page: with it the recurrence took 1.4e3 page faults a call at n = 8
    (epoch 5 of the official tracker's run), with this 0.6e3 (about 2 ms on an AMD EPYC)."""
    out = torch.empty(int(keep.sum()), *Q.shape[1:], dtype=Q.dtype, device=Q.device)
    out[:, :used] = Q[keep, :used]
    return out


def _block_tests(alpha: np.ndarray, beta: np.ndarray, b_last: np.ndarray, open_ends: np.ndarray,
                 theta: np.ndarray, r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The stopping tests' Ritz values (l, 4): each block's two lowest and two highest (every Ritz value (l, m)
    below 5 steps), with their residual estimates ``beta_m |s_m|``, from LAPACK's ``dstemr`` on each block's
    tridiagonal (``lanczos``'s ``_tridiagonal_ends``) for the ends still ``open_ends`` (l, 2) alone: the tests read
    nothing else, the whole eigendecomposition of every block at every step cost more than the step's product once
    few rows were left, and a settled end is never tested again. ``theta`` and ``r`` (l, 4): the previous tests'
    values, kept at the settled ends; filled where computed and returned."""
    if alpha.shape[1] <= 4:  # ``_tridiagonal_ends`` returns every pair of so short a tridiagonal
        pairs = [_tridiagonal_ends(a, b, 2) for a, b in zip(alpha, beta)]
        return np.stack([t for t, _ in pairs]), b_last[:, None] * np.abs(np.stack([s for _, s in pairs]))
    for i, (a, b, ends) in enumerate(zip(alpha, beta, open_ends)):
        t, s = _tridiagonal_ends(a, b, 2, (bool(ends[0]), bool(ends[1])))
        fresh = ~np.isnan(t)
        theta[i, fresh], r[i, fresh] = t[fresh], b_last[i] * np.abs(s[fresh])
    return theta, r


def _reorthogonalise_blocks(w: Tensor, Q: Tensor, eta: float = 2.0**-0.5) -> tuple[Tensor, Tensor]:
    """``_reorthogonalise`` for every block at once: ``w`` (n, d) against each block's basis ``Q[i]`` (n, j, d), by
    classical Gram-Schmidt, a second pass only where the first removed more than ``1 - eta`` of a norm. Returns
    ``w`` and its norms (n,). Both products as row vectors against ``Q`` (``(1, d) x (d, j)``, ``(1, j) x (j, d)`` per
    block): batched matrix-column products of these shapes ran 4-11x slower at j = 10-80 (MKL, 1 thread; j = 40:
    0.43 ms a pass against 0.043 ms), which made the reorthogonalisation a tenth of the per-block Lanczos' time."""
    before = w.norm(dim=1)
    Qt = Q.transpose(1, 2)
    for _ in range(2):
        w = w - ((w[:, None, :] @ Qt) @ Q)[:, 0, :]
        after = w.norm(dim=1)
        if bool((after > eta * before).all()):
            break
        before = after
    return w, after


@dataclass(frozen=True)
class _Segment:
    """Blocks whose recurrence stopped at the same step: global indices (a,), basis (a, m, d), tridiagonals
    (``alpha`` (a, m), ``beta`` (a, m - 1)) and the last ``beta_m`` (a,) (the residual estimates' factor)."""

    ids: np.ndarray
    Q: Tensor
    alpha: np.ndarray
    beta: np.ndarray
    b_last: np.ndarray


def _measure(op: SymmetricOperator, Y: Tensor) -> tuple[Tensor, Tensor]:
    """The Rayleigh quotients (2, a) of the unit vectors ``Y`` (2, a, d) (each block's lowest and highest Ritz vector)
    and their residuals ``|A y - (y^T A y) y|`` (a, 2), in float64 from one product of ``op`` on both columns."""
    _, a, d = Y.shape
    AY = op.matmat(Y.reshape(2, -1).T.to(op.dtype)).to(torch.float64).T.reshape(2, a, d)
    rayleigh = (Y * AY).sum(dim=2)
    return rayleigh.cpu(), (AY - rayleigh[:, :, None] * Y).norm(dim=2).T.cpu()


def _refined_blocks(theta: np.ndarray, res: np.ndarray, goal: str, margin: float) -> np.ndarray:
    """The blocks whose ends a refinement must measure again (indices): every block under ``"blocks"``; under
    ``"ends"`` those whose lowest end may hold ``lambda_min`` (its interval ``theta_1 - e``, ``e`` the larger of the
    measured residual and bound, reaching down to the lowest ``theta_1``) and likewise at the top; under ``"norm"``
    those whose ``|theta| + e`` may reach the largest. ``margin`` widens every interval by the products' rounding,
    which the recurrence's measurement carries."""
    if goal == "blocks":
        return np.arange(len(theta))
    e = res + margin
    lo, hi = theta[:, 0], theta[:, 1]
    if goal == "ends":
        near = (lo - e[:, 0] <= lo.min() + margin) | (hi + e[:, 1] >= hi.max() - margin)
    else:
        top = np.maximum(hi, -lo).max()
        near = ((np.abs(np.stack([lo, hi], axis=1)) + e) >= top - margin).any(axis=1)
    return np.flatnonzero(near)


def _blockwise_result(op: SymmetricOperator, refine: SymmetricOperator | None, segments: list[_Segment], n: int,
                      d: int, n_products: int, cost: float, tol: float, rel_floor: float,
                      steps: np.ndarray, goal: str) -> BlockwiseResult:
    """Ritz pairs of every block's final tridiagonal (per segment: blocks stopped at different steps), the ends
    measured with one batched product of ``op`` over all rows: their Rayleigh quotients and residuals. With
    ``refine`` (``op`` in float64), the blocks that may hold what ``goal`` waits for (``_refined_blocks``) are
    measured again with one product of ``refine`` on their rows alone (all rows when it cannot be restricted), so the
    answer's bounds are float64's while the other blocks keep the recurrence's measurement. Blocks shorter than the
    longest are padded with NaN in ``block_ritz`` and ``block_estimates`` (no Ritz value there)."""
    Y = torch.zeros(2, n, d, dtype=torch.float64, device=segments[0].Q.device)
    parts = []
    for seg in segments:
        theta, S = _tridiagonal_batch(torch.from_numpy(seg.alpha), torch.from_numpy(seg.beta))  # (a, m), (a, m, m)
        theta = theta.numpy()
        exhausted = seg.Q.shape[1] == d
        est = np.zeros_like(theta) if exhausted else seg.b_last[:, None] * S[:, -1, :].abs().numpy()
        ends = S[:, :, [0, -1]].to(seg.Q.device)  # (a, m, 2): the ends' coefficients in each block's basis
        Ys = torch.einsum("njd,njp->pnd", seg.Q, ends)  # (2, a, d): lowest and highest Ritz vector of each block
        Y[:, torch.from_numpy(seg.ids).to(Y.device)] = Ys / Ys.norm(dim=2, keepdim=True)
        parts.append((seg.ids, theta, est, exhausted))
    every = refine is None or goal == "blocks" or not refine.restrictable  # one measurement answers for all
    rayleigh, res = _measure(refine if every and refine is not None else op, Y)
    n_products, cost = n_products + 2, cost + 2.0
    rayleigh, res = rayleigh.numpy().T.copy(), res.numpy().copy()  # (n, 2) each

    def ends_and_bounds():
        m_all = max(theta.shape[1] for _, theta, _, _ in parts)
        ritz = np.full((n, m_all), np.nan)
        est_all, with_ends = ritz.copy(), ritz.copy()
        bounds = np.zeros((n, 2))
        for ids, theta, est, _ in parts:
            theta = theta.copy()
            theta[:, 0], theta[:, -1] = rayleigh[ids, 0], rayleigh[ids, 1]
            m = theta.shape[1]
            ritz[ids, :m], est_all[ids, :m], with_ends[ids, :m] = theta, est, _with_ends(est, res[ids])
            bounds[ids] = _certificates(theta, with_ends[ids, :m])  # the measured residuals
        scale = max(float(np.abs(rayleigh).max()), float(np.nanmax(np.abs(ritz))), np.finfo(float).tiny)
        return ritz, est_all, with_ends, bounds, scale

    ritz, est_all, with_ends, bounds, scale = ends_and_bounds()
    if not every:
        margin = ROUNDING_MARGIN * float(torch.finfo(op.dtype).eps) * scale
        idx = _refined_blocks(rayleigh, res, goal, margin)
        rows = torch.from_numpy(idx)
        rq, rr = _measure(refine.on_rows(rows), Y[:, rows.to(Y.device)])
        n_products, cost = n_products + 2, cost + 2.0 * len(idx) / n
        rayleigh[idx], res[idx] = rq.numpy().T, rr.numpy()
        ritz, est_all, with_ends, bounds, scale = ends_and_bounds()
    lo, hi = int(rayleigh[:, 0].argmin()), int(rayleigh[:, 1].argmax())
    vectors = torch.zeros(n, d, 2, dtype=torch.float64, device=Y.device)
    vectors[lo, :, 0], vectors[hi, :, 1] = Y[0, lo], Y[1, hi]
    values = np.array([float(rayleigh[lo, 0]), float(rayleigh[hi, 1])])
    pick = np.array([float(bounds[lo, 0]), float(bounds[hi, 1])])
    flat, flat_est = ritz.flatten(), est_all.flatten()
    order = np.argsort(flat)[: int(np.isfinite(flat).sum())]  # NaN (padding) sorts last
    lengths = [theta.shape[1] for _, theta, _, _ in parts]
    return BlockwiseResult(
        values=values, vectors=vectors.reshape(n * d, 2), residuals=np.array([float(res[lo, 0]), float(res[hi, 1])]),
        converged=pick <= max(tol, 1e-13) * scale, ritz_all=flat[order], residual_estimates=flat_est[order],
        n_products=n_products, n_iter=max(lengths), exhausted=all(e for _, _, _, e in parts), tol=tol,
        rel_floor=rel_floor, block_ends=rayleigh, block_residuals=res, block_bounds=bounds,
        block_steps=steps, block_ritz=ritz, block_estimates=with_ends,
        recurrence_eps=float(torch.finfo(op.dtype).eps), block_vectors=Y, product_cost=cost)


def _with_ends(est: np.ndarray, res: np.ndarray) -> np.ndarray:
    """The residual estimates (n, m) with the two ends replaced by their measured residuals (n, 2)."""
    out = est.copy()
    out[:, 0], out[:, -1] = res[:, 0], res[:, 1]
    return out
