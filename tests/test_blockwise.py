"""Active rows in the per-block Lanczos: products restricted to the rows of the blocks still waited for.

``Operator.on_rows`` (``closed_form_operator`` of a per-row loss in closed form: ``ChainForward.on_rows``,
``PredictorCosineCurvature.on_rows``) and ``blockwise_lanczos``'s use of it: the same products on the same rows,
the same ends to the bound, the cost counted in full-product equivalents, today's path where no restriction exists.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from scale.curvature.blockwise import BLOCKWISE_TOL, blockwise_lanczos
from scale.curvature.operators import Operator
from tests.test_lanczos import BLOCK_D, matrix_with_spectrum

ROW_PRODUCT_RTOL = 1e-13  # restricted against full products on the same rows, relative to the product's norm


def _head_and_loss(n: int, d: int, seed: int = 0):
    from scale.engine.heads import MLPHead
    from scale.engine.loss_curvature import PredictorCosine

    torch.manual_seed(seed)
    head = MLPHead("swish2", d, 48, 40).double()  # d -> 40 -> k = 48
    pred = MLPHead("swish2", 48, 48, 24).double()  # 48 -> 24 -> 48
    return torch.randn(n, d, dtype=torch.float64), head, PredictorCosine(torch.randn(n, 48, dtype=torch.float64), pred)


@pytest.mark.parametrize("compose", [True, False])
@pytest.mark.parametrize("objective", ["simsiam", "one view"])
def test_restricted_products_equal_the_full_products_on_the_same_rows(compose, objective):
    """``H`` and ``M`` of ``closed_form_operator`` on the rows ``idx`` alone give the full products' rows ``idx``
    (the same ``1/n`` of the batch's mean: a restriction that renormalised to ``1/len(idx)`` would be off by
    ``n / len(idx)``), and a restriction of a restriction is the restriction to the composed rows; for the project's
    SimSiam objective and for the benchmark's one-view loss (the official tracker's Hessian)."""
    from bench._paper_tracker import OneView
    from scale.curvature.closed_form import closed_form_operator

    n, d = 10, 16
    z, head, loss = _head_and_loss(n, d)
    if objective == "one view":
        loss = OneView(loss.predictor, loss.T)
    H, M, _ = closed_form_operator(z, head, loss, compose=compose)
    assert H.restrictable and M.restrictable
    idx = torch.tensor([7, 2, 9])
    V = torch.randn(4, n, d, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    for op in (H, M):
        full = op.matmat(V.reshape(4, -1).T).T.reshape(4, n, d)[:, idx]
        sub = op.on_rows(idx)
        assert sub.N == len(idx) * d
        part = sub.matmat(V[:, idx].reshape(4, -1).T).T.reshape(4, len(idx), d)
        assert (part - full).norm() <= ROW_PRODUCT_RTOL * full.norm()
        inner = torch.tensor([2, 0])
        twice = sub.on_rows(inner).matvec(V[0, idx[inner]].reshape(-1)).reshape(2, d)
        assert (twice - full[0, inner]).norm() <= ROW_PRODUCT_RTOL * full[0].norm()


def rows_operator(A: torch.Tensor, calls: list[int]) -> Operator:
    """The block-diagonal operator of the blocks ``A`` (a, d, d), restrictable to rows; each call of a product
    appends its rows (one entry per column) to ``calls``."""
    a = A.shape[0]

    def rows(V):  # (..., a, d): block i acts on row i only
        return torch.einsum("ide,...ie->...id", A, V)

    def mv(v):
        calls.append(a)
        return rows(v.reshape(a, -1)).reshape(-1)

    def mm(C):
        calls.extend([a] * C.shape[0])
        return rows(C.reshape(C.shape[0], a, -1)).reshape(C.shape[0], -1)

    return Operator(f"{a} blocks", a * A.shape[1], A.dtype, torch.device("cpu"), mv, mm,
                    _on_rows=lambda idx: rows_operator(A[idx], calls))


def one_crowded_block(n: int, seed: int) -> tuple[torch.Tensor, np.ndarray]:
    """``n`` blocks of ``BLOCK_D``; block 0 holds ``lambda_min = -1`` at the end of a crowd (ten eigenvalues 1e-2
    apart: many steps); block 1 holds ``lambda_max = 1``, 0.1 from its neighbour; the others' ends lie far inside
    (-0.3, 0.4) with gaps of 0.1: they settle (or are let go) early."""
    rng = np.random.default_rng(seed)
    eig = []
    for i in range(n):
        lo = list(-1.0 + 1e-2 * np.arange(10)) if i == 0 else [-0.3, -0.2]
        hi = [0.9, 1.0] if i == 1 else [0.3, 0.4]
        inner = rng.uniform(-0.2, 0.3, BLOCK_D - len(lo) - 2)
        eig.append(np.sort(np.r_[lo, inner, hi]))
    eig = np.stack(eig)
    return torch.stack([matrix_with_spectrum(e, seed + 1 + i) for i, e in enumerate(eig)]), eig


def test_restricted_run_gives_the_full_runs_ends_at_a_fraction_of_the_cost():
    """The same ends to the bound (each within ``BLOCKWISE_TOL`` of the scale of the exact ends, so within twice that
    of each other) with the products after the shrink on the crowded block's rows alone; ``product_cost`` is the sum
    of each call's rows over ``n`` (counted independently by the operator), ``n_products`` the calls. Negative
    control: ``restrict=False`` pays a full product for every step, so its cost equals its calls."""
    n = 12
    A, eig = one_crowded_block(n, seed=4)
    scale = np.abs(eig).max()
    runs = {}
    for restrict in (False, True):
        calls: list[int] = []
        res = blockwise_lanczos(rows_operator(A, calls), n, goal="ends", restrict=restrict, max_iter=BLOCK_D)
        runs[restrict] = res
        assert abs(res.lambda_min - eig.min()) <= BLOCKWISE_TOL * scale and res.answered
        assert abs(res.lambda_max - eig.max()) <= BLOCKWISE_TOL * scale
        assert res.n_products == len(calls)
        assert res.product_cost == pytest.approx(sum(calls) / n, rel=1e-12)
    full, rows = runs[False], runs[True]
    assert np.abs(full.values - rows.values).max() <= 2 * BLOCKWISE_TOL * scale
    assert full.product_cost == full.n_products and full.shrinks == ()
    assert rows.shrinks and rows.shrinks[-1][1] < n  # it did go on with fewer rows
    assert rows.n_products == full.n_products  # the same steps (the crowded block sets them) ...
    assert rows.product_cost < 0.5 * full.product_cost  # ... at a fraction of the cost (measured: 0.33)
    lengths = np.isfinite(rows.block_ritz).sum(axis=1)
    assert lengths[0] == rows.n_iter and lengths.min() < rows.n_iter  # per-block lengths in the extraction
    assert np.all(np.isfinite(rows.ritz_all)) and len(rows.ritz_all) == lengths.sum()


def test_without_a_restriction_every_step_advances_every_block():
    """An operator that cannot drop rows (``closed_form_operator`` of a loss without a closed form: through its
    gradient graph, where a coupled loss would not be block-diagonal anyway) takes today's path: no shrink, every
    call a full product, the same ends as the restrictable closed form of the same objective to the bound."""
    from scale.curvature.closed_form import closed_form_operator
    from scale.engine.objectives import simsiam

    n, d = 6, 16
    z, head, loss = _head_and_loss(n, d, seed=2)
    closed, _, _ = closed_form_operator(z, head, loss)
    graph, _, _ = closed_form_operator(z, head, lambda Hb: simsiam(Hb, loss.T, loss.predictor, loss.form))
    assert closed.restrictable and not graph.restrictable
    with pytest.raises(ValueError, match="no restriction to rows"):
        graph.on_rows(torch.tensor([0]))
    a = blockwise_lanczos(graph, n, goal="ends")
    b = blockwise_lanczos(closed, n, goal="ends")
    assert a.shrinks == () and a.product_cost == a.n_products
    assert abs(a.lambda_min - b.lambda_min) <= 2 * BLOCKWISE_TOL * b.scale
    assert abs(a.lambda_max - b.lambda_max) <= 2 * BLOCKWISE_TOL * b.scale


def test_a_discarded_float32_run_is_counted_in_the_kept_result(monkeypatch):
    """``blockwise_ends``: a float32 recurrence whose refined ends miss the bound is run again on the float64
    operator, and the kept result's ``n_products`` and ``product_cost`` include the discarded run's. The miss is
    constructed by capping the steps (``max_iter=4``: no run meets ``RECURRENCE_REACH`` in 4 steps), so both runs
    stop unanswered; the count is what is tested (it failed before the count was carried: 6 products kept of 12).
    Below ``RECURRENCE_REACH`` (the default tol) no float32 run is made: its residuals could not meet the tol."""
    import scale.curvature.closed_form as B

    runs = []
    original = B.blockwise_lanczos

    def counted(op, *args, **kwargs):
        res = original(op, *args, **kwargs)
        runs.append((op.dtype, res.answered, res.n_products, res.product_cost))
        return res

    monkeypatch.setattr(B, "blockwise_lanczos", counted)
    z, head, loss = _head_and_loss(8, 16, seed=3)
    kept, _, info = B.blockwise_ends(z, head, loss, interaction=False, max_iter=4, tol=B.RECURRENCE_REACH)
    assert [r[0] for r in runs] == [torch.float32, torch.float64] and not runs[0][1]
    assert info["recurrence"] == "float64"
    assert kept.n_products == runs[0][2] + runs[1][2]
    assert kept.product_cost == pytest.approx(runs[0][3] + runs[1][3])
    runs.clear()
    B.blockwise_ends(z, head, loss, interaction=False, max_iter=4)
    assert [r[0] for r in runs] == [torch.float64]


def test_a_block_end_near_an_inner_eigenvalue_is_not_let_go():
    """Under ``goal="ends"`` a block's lowest end is let go only when ``theta_1 - e > best`` with ``e`` the larger of
    the residual and the eigenvalue bound ``r^2 / gap``. The Ritz state of the official tracker's block that the
    residual alone let go (epoch 4, n = 128, step 15; relative to the scale): ``theta_1 = -0.0756`` with residual
    0.007, a second Ritz value 0.0056 above it with residual 0.003 (bound 0.007^2 / 0.0026 = 0.019), the best Ritz
    value of another block -0.0847; the block's lowest eigenvalue was -0.0856, below it. ``theta_1 - r = -0.0826``
    clears the best (let go before, a wrong lambda_min); ``theta_1 - bound = -0.0945`` does not. Control: the same
    block with a far second Ritz value (bound below the residual) is let go on its residual, as before, once that is
    below ``LETGO_BOUND`` of the scale."""
    from scale.curvature.blockwise import LETGO_BOUND, _end_estimates, _settled

    theta = np.array([[-0.0756, -0.0700, 0.2, 1.0]])
    r = np.array([[0.007, 0.003, 0.01, 1e-6]])
    conv = np.zeros((1, 2), dtype=bool)
    bound = _end_estimates(theta, r)
    assert float(bound[0, 0]) == pytest.approx(0.007**2 / (0.0056 - 0.003))
    assert not bool(_settled(theta, r, conv, "ends", [-0.0847, 1.0], bound)[0, 0])
    far = theta.copy()
    far[0, 1] = 0.0
    bound_far = _end_estimates(far, r)
    assert float(bound_far[0, 0]) < 0.007
    assert bool(_settled(far, r, conv, "ends", [-0.0847, 1.0], bound_far)[0, 0])
    # ... unless its interval is not yet resolved to LETGO_BOUND of the scale (here 0.007 > 1e-3 of a scale of 1)
    assert LETGO_BOUND < 0.007
    assert not bool(_settled(far, r, conv, "ends", [-0.0847, 1.0], bound_far, 1.0)[0, 0])
    assert bool(_settled(far, r, conv, "ends", [-0.0847, 1.0], bound_far, 0.007 / LETGO_BOUND)[0, 0])


def test_the_float64_refinement_measures_the_candidate_blocks_rows_alone():
    """float32 products run the recurrence; the ends are measured once with them over every row, and only the blocks
    whose lowest or highest end may hold the operator's (``_refined_blocks``) are measured again with the float64
    operator, on their rows alone: the ends to float64 accuracy, at 2 of 12 rows. Negative control: the same run
    without the refinement is off by more than 1e-9 of the scale (float32's rounding), and the blocks not refined
    keep exactly that run's float32 measurement, so the answer's accuracy is the refinement's (accurate, not
    certified: float32 vectors' residuals stall above 1e-8 of the scale, so neither run is answered). Under
    ``goal="blocks"`` every block is an answer and every row is refined in one product."""
    n = 12
    A, eig = one_crowded_block(n, seed=4)
    scale = np.abs(eig).max()
    calls64: list[int] = []
    res = blockwise_lanczos(rows_operator(A.float(), []), n, goal="ends", max_iter=BLOCK_D,
                            refine=rows_operator(A, calls64))
    assert abs(res.lambda_min - eig.min()) <= 1e-10 * scale and abs(res.lambda_max - eig.max()) <= 1e-10 * scale
    assert not res.answered  # accurate, not certified: float32 vectors' residuals stall above 1e-8 of the scale
    assert calls64 == [2, 2]  # one product, two columns (each block's two ends), on two rows: blocks 0 and 1
    alone = blockwise_lanczos(rows_operator(A.float(), []), n, goal="ends", max_iter=BLOCK_D)
    assert max(abs(alone.lambda_min - eig.min()), abs(alone.lambda_max - eig.max())) > 1e-9 * scale
    assert np.array_equal(res.block_ends[2:], alone.block_ends[2:])
    assert np.array_equal(res.block_residuals[2:], alone.block_residuals[2:])
    calls64.clear()
    every = blockwise_lanczos(rows_operator(A.float(), []), n, goal="blocks", max_iter=BLOCK_D,
                              refine=rows_operator(A, calls64))
    assert calls64 == [n, n] and not every.answered
    assert np.abs(every.block_ends - eig[:, [0, -1]]).max() <= BLOCKWISE_TOL * scale


def test_a_block_within_rounding_of_the_lowest_end_is_refined_too():
    """``_refined_blocks``: under ``"ends"`` a block is measured again when its lowest end's interval (its measured
    residual, widened by the products' rounding ``margin``) reaches the lowest end, so two blocks whose
    ends lie within the float32 measurement's rounding of each other are both refined, and the float64 values decide
    between them; a block far above is not. Under ``"norm"``, the blocks whose ``|theta| + e`` reaches the largest."""
    from scale.curvature.blockwise import _refined_blocks

    theta = np.array([[-1.0, 1.0], [-1.0 + 5e-8, 0.5], [-0.5, 0.4]])
    small = np.full((3, 2), 1e-12)
    assert list(_refined_blocks(theta, small, "ends", 1e-7)) == [0, 1]
    assert list(_refined_blocks(theta, small, "ends", 1e-9)) == [0]  # control: the tie resolved apart
    wide = small.copy()
    wide[2, 0] = 0.6  # block 2's lowest end not resolved: its interval reaches -1.1
    assert list(_refined_blocks(theta, wide, "ends", 1e-9)) == [0, 2]
    assert list(_refined_blocks(theta, small, "norm", 1e-9)) == [0]
    assert list(_refined_blocks(theta, small, "blocks", 0.0)) == [0, 1, 2]


def test_the_weights_transposes_change_no_product():
    """``closed_form_operator`` on at most ``TRANSPOSED_ROWS`` rows with ``compose`` gives its links contiguous
    transposes for the forward passes (``with_transposes``); the products equal those through the transposed views
    to round-off, as do the operator built so and the few-products build (``compose=False``: nothing composed,
    nothing copied). Negative control: a stored transpose with its rows out of order changes the products."""
    from dataclasses import replace

    from mini.loss_hessians import TRANSPOSED_ROWS
    from scale.curvature.closed_form import closed_form_operator
    from scale.engine.heads import mini_head_of

    n, d = 6, 16
    z, head, loss = _head_and_loss(n, d, seed=5)
    curv = loss.curvature_at(mini_head_of(head), z)
    fast = curv.with_transposes()
    assert n <= TRANSPOSED_ROWS and all(L.WT is not None for L in fast.fwd.links)
    assert all(L.WT is None for L in curv.fwd.links)
    V = torch.randn(3, n, d, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    ref = curv.hvp(V)
    assert (fast.hvp(V) - ref).norm() <= ROW_PRODUCT_RTOL * ref.norm()
    H, _, _ = closed_form_operator(z, head, loss)
    few, _, _ = closed_form_operator(z, head, loss, compose=False)
    v = V[0].reshape(-1)
    assert (H.matvec(v) - few.matvec(v)).norm() <= ROW_PRODUCT_RTOL * few.matvec(v).norm()
    links = list(fast.fwd.links)
    links[0] = replace(links[0], WT=links[0].WT.flip(0).contiguous())  # a copy with its rows out of order
    wrong = fast.with_transposes()
    wrong.fwd = replace(fast.fwd, links=links)
    assert (wrong.hvp(V) - ref).norm() > 1e-3 * ref.norm()


def test_the_tests_stride_while_far_saves_tests_not_steps(monkeypatch):
    """While every open end's stopping quantity is above ``FAR_BOUND`` tol, only every ``FAR_STRIDE``-th step is
    tested: on the crowded instance the run takes the same calls and gives the same ends as with a test at every
    step, with fewer tests. Control: ``FAR_BOUND`` of 0 (every end always far, every other step tested up to the stop)
    still stops correctly but no earlier, and a test at every step (``FAR_BOUND`` infinite) makes the most tests."""
    import scale.curvature.blockwise as bw

    n = 12
    A, eig = one_crowded_block(n, seed=4)
    tests: list[int] = []
    original = bw._block_tests
    monkeypatch.setattr(bw, "_block_tests", lambda *a: tests.append(1) or original(*a))
    runs, stride_bound = {}, bw.FAR_BOUND
    for far in (np.inf, stride_bound, 0.0):
        monkeypatch.setattr(bw, "FAR_BOUND", far)
        tests.clear()
        res = blockwise_lanczos(rows_operator(A, []), n, goal="ends", max_iter=BLOCK_D)
        runs[far] = (res, len(tests))
        assert abs(res.lambda_min - eig.min()) <= BLOCKWISE_TOL * np.abs(eig).max() and res.answered
    (every, n_every), (stride, n_stride), (always, n_always) = runs[np.inf], runs[stride_bound], runs[0.0]
    assert stride.n_products == every.n_products and np.array_equal(stride.values, every.values)
    assert n_stride < n_every
    assert always.n_products >= every.n_products and n_always < n_every


REORTH_RTOL = 1e-13  # _reorthogonalise_blocks: what is left along the basis, relative to the input's norm


def _orthonormal_blocks(n: int, j: int, d: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.linalg.qr(torch.randn(n, d, j, generator=gen, dtype=torch.float64))[0].transpose(1, 2)


def test_reorthogonalisation_leaves_nothing_along_each_blocks_basis():
    """Every block's vector comes out orthogonal to its own basis (n, j, d) to round-off and equal to the exact
    projection ``(I - Q^T Q) w``, its norm returned; a vector already orthogonal is kept. Negative control: the same
    products removing half of the projection (one pass: the norm barely moves, so no second pass) leave half of it."""
    from scale.curvature.blockwise import _reorthogonalise_blocks

    n, j, d = 5, 12, 40
    Q = _orthonormal_blocks(n, j, d, seed=0)
    gen = torch.Generator().manual_seed(1)
    inside = torch.einsum("njd,nj->nd", Q, torch.randn(n, j, generator=gen, dtype=torch.float64))
    outside = torch.randn(n, d, generator=gen, dtype=torch.float64)
    outside = outside - torch.einsum("njd,nj->nd", Q, torch.einsum("njd,nd->nj", Q, outside))
    w = outside + 1e-3 * inside  # mostly orthogonal already: the Lanczos case after the three-term recurrence
    out, norms = _reorthogonalise_blocks(w, Q)
    left = torch.einsum("njd,nd->nj", Q, out).norm(dim=1) / w.norm(dim=1)
    assert float(left.max()) <= REORTH_RTOL
    assert torch.allclose(out, outside, rtol=0, atol=REORTH_RTOL * float(w.norm(dim=1).max()))
    assert torch.allclose(norms, out.norm(dim=1), rtol=1e-15)
    kept, _ = _reorthogonalise_blocks(outside, Q)
    assert torch.allclose(kept, outside, rtol=0, atol=REORTH_RTOL * float(outside.norm(dim=1).max()))
    half = w - 0.5 * ((w[:, None, :] @ Q.transpose(1, 2)) @ Q)[:, 0, :]  # the control
    assert float((torch.einsum("njd,nd->nj", Q, half).norm(dim=1) / w.norm(dim=1)).min()) > 1e3 * REORTH_RTOL


def test_kept_basis_copies_the_written_vectors_of_the_kept_blocks():
    """``_kept_basis`` keeps the rows ``keep`` with their first ``used`` vectors (bit for bit) and the full capacity
    for the vectors still to come (the rest unwritten, so not compared). A copy of one vector fewer would lose the
    newest vector, the one the next step multiplies: ``test_restricted_run_gives_the_full_runs_ends_at_a_fraction_of_the
    _cost`` then fails (checked by hand on that mutant, 2026-12-04)."""
    from scale.curvature.blockwise import _kept_basis

    Q = torch.randn(6, 9, 4, dtype=torch.float64)
    keep = torch.tensor([True, False, True, True, False, False])
    out = _kept_basis(Q, keep, 5)
    assert out.shape == (3, 9, 4)
    assert torch.equal(out[:, :5], Q[keep, :5])
    assert torch.equal(_kept_basis(Q, ~keep, 9), Q[~keep])  # every slot written: the whole rows
