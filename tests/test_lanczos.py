"""scale.curvature.lanczos: extreme eigenvalues by Lanczos (full reorthogonalisation, float64 accumulation)
against dense ``eigvalsh``, and the failure mode of the paper's 20-step shifted power iteration.

Tolerances are relative to the spectral scale ``max |lambda|`` of the matrix at hand.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mini.hessian import NEG_FLOOR
from scale.crosscheck import build_instance
from scale.curvature.blockwise import BLOCKWISE_TOL, blockwise_lanczos
from scale.curvature.closed_form import RECURRENCE_REACH
from scale.curvature.lanczos import TOL, lanczos, resume_floor, shifted_power_iteration
from scale.curvature.operators import EffectiveHessian, Operator, operator_from_matrix

EIG_TOL = 1e-8  # Lanczos against eigvalsh, float64, relative to the spectral scale
POWER_FAIL = 0.5  # the power iteration's lambda_min error, relative to scale, that counts as a failure


def matrix_with_spectrum(eig: np.ndarray, seed: int) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.standard_normal((len(eig), len(eig))))
    return torch.as_tensor((Q * eig) @ Q.T)


def block_diagonal_operator(A: torch.Tensor, name: str) -> Operator:
    """The block-diagonal operator of the blocks ``A`` (n, d, d) on stacked rows: block i acts on row i only (products
    block by block, nothing else formed), in ``A``'s dtype."""
    n, d, _ = A.shape

    def rows(V):
        return torch.einsum("ide,...ie->...id", A, V)

    return Operator(name, n * d, A.dtype, A.device, lambda v: rows(v.reshape(n, -1)).reshape(-1),
                    lambda C: rows(C.reshape(C.shape[0], n, -1)).reshape(C.shape[0], -1))


SPECTRA = {
    "indefinite": lambda rng: np.concatenate([rng.uniform(-3, -0.1, 20), rng.uniform(0.1, 10, 60)]),
    "clustered ends": lambda rng: np.concatenate([-1 - 1e-3 * rng.random(5), rng.uniform(-0.5, 0.5, 60),
                                                  2 + 1e-3 * rng.random(5)]),
    "psd with zeros": lambda rng: np.concatenate([np.zeros(10), rng.uniform(0.01, 1, 50)]),
    "negative dominant": lambda rng: np.concatenate([rng.uniform(-5, -1, 3), rng.uniform(-0.5, 1, 57)]),
}


@pytest.mark.parametrize("kind", list(SPECTRA))
def test_lanczos_matches_eigvalsh(kind):
    eig = np.sort(SPECTRA[kind](np.random.default_rng(len(kind))))
    op = operator_from_matrix(matrix_with_spectrum(eig, 1))
    res = lanczos(op, k=2)
    scale = np.abs(eig).max()
    assert abs(res.lambda_min - eig[0]) <= EIG_TOL * scale
    assert abs(res.lambda_max - eig[-1]) <= EIG_TOL * scale
    assert res.ends_converged
    assert res.n_products == op.n_products  # every product is counted
    # a measured residual r bounds the distance of its Ritz value to the spectrum
    for theta, r in zip(res.values, res.residuals):
        assert np.abs(eig - theta).min() <= r * (1 + 1e-6) + 1e-14 * scale


@pytest.mark.parametrize(("spec", "objective"), [("gelu3", "simsiam"), ("swish3", "simclr"), ("tanh2", "vicreg")])
def test_lanczos_on_effective_hessians(spec, objective):
    inst = build_instance(spec, objective, seed=5)
    E = EffectiveHessian(torch.as_tensor(inst.Z), inst.scale_head, inst.torch_loss)
    eig = np.linalg.eigvalsh(E.H.dense().numpy())
    res = lanczos(E.H)
    scale = np.abs(eig).max()
    assert abs(res.lambda_min - eig[0]) <= EIG_TOL * scale and abs(res.lambda_max - eig[-1]) <= EIG_TOL * scale


def test_a_stop_on_an_optimistic_estimate_resumes_until_the_measured_residuals_pass(monkeypatch):
    """The stop test reads residual estimates; the returned pairs' residuals are measured. Where the two disagree
    (near-repeated Ritz values make the vectors ill-determined: one such instance measured 5.06e-11 against a
    bound of 5.04e-11) the iteration must go on, never return unconverged ends before its budget is spent.
    Made to disagree here by an estimate 100x too small for the first stops."""
    import scale.curvature.lanczos as lz

    eig = np.sort(SPECTRA["clustered ends"](np.random.default_rng(4)))
    op = operator_from_matrix(matrix_with_spectrum(eig, 3))
    honest = lanczos(op, k=2)
    true_ends = lz._tridiagonal_ends
    lies = {"left": 3}

    def optimistic(a, b, k):
        theta, s = true_ends(a, b, k)
        if lies["left"] and len(a) >= 10:
            lies["left"] -= 1
            return theta, s * 1e-30  # an estimate that passes at once
        return theta, s

    monkeypatch.setattr(lz, "_tridiagonal_ends", optimistic)
    res = lanczos(op, k=2)
    assert lies["left"] == 0 and res.ends_converged
    assert res.n_iter >= honest.n_iter  # it resumed at least to where the honest estimate stops
    assert res.n_products > honest.n_products  # and the early measurements are counted
    scale = np.abs(eig).max()
    assert abs(res.lambda_min - eig[0]) <= EIG_TOL * scale and abs(res.lambda_max - eig[-1]) <= EIG_TOL * scale


def test_float32_operator_float64_accumulation_reports_honest_residuals():
    eig = np.sort(SPECTRA["indefinite"](np.random.default_rng(0)))
    A = matrix_with_spectrum(eig, 2).float()
    res = lanczos(operator_from_matrix(A), max_iter=80)
    assert res.tol == 1e-5  # the float32 default
    for theta, r in zip(res.values, res.residuals):
        assert np.abs(eig - theta).min() <= r * (1 + 1e-3) + 1e-6 * np.abs(eig).max()


F32_ROWS, F32_D = 1600, 64  # the float32 regression's operator: N = 102,400, blocks of 64
F32_TOL = 1e-7  # at float32's rounding floor (measured residuals of exact-to-float32 ends: 0.6-0.9 eps = 7-11e-8)
F32_EXTRA = 4  # products the float32 run may take beyond the float64 run's (a step and its measured ends)


def separated_block_operator(dtype: torch.dtype):
    """A block-diagonal operator at N >= 100k whose ends stand apart (-1 and 2 against the rest in [-0.5, 1.5]):
    Lanczos reaches them in a few tens of products whatever the dtype. Products are one batched (64, 64) matmul."""
    rng = np.random.default_rng(0)
    eig = rng.uniform(-0.5, 1.5, (F32_ROWS, F32_D))
    eig[0, 0], eig[1, -1] = -1.0, 2.0
    G = torch.randn(F32_ROWS, F32_D, F32_D, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    Q = torch.linalg.qr(G)[0]
    A = ((Q * torch.as_tensor(eig)[:, None, :]) @ Q.transpose(1, 2)).to(dtype)
    return block_diagonal_operator(A, "separated blocks")


def test_float32_products_at_their_rounding_floor_stop_near_the_float64_count():
    """A float32 operator's measured residuals cannot fall below its products' rounding; the estimates can. With
    ``tol`` at that floor the resume rule (halve the estimate's target while the measured residuals miss ``tol``)
    used to spin to ``max_iter``: 850 products where float64 takes 28 at this N (and 1132 in the curvature bench).
    The resumes now stop at ``resume_floor``: the float32 run costs about what the float64 run does, and says
    honestly whether its ends met ``tol``; its eigenvalues lie within their measured residuals."""
    r64 = lanczos(separated_block_operator(torch.float64), tol=F32_TOL)
    r32 = lanczos(separated_block_operator(torch.float32), tol=F32_TOL)
    assert r64.ends_converged and r32.n_iter < 200
    assert r32.n_products <= r64.n_products + F32_EXTRA
    scale = r32.scale
    assert list(r32.converged) == [bool(r <= F32_TOL * scale) for r in r32.residuals]
    assert abs(r32.lambda_min + 1.0) <= r32.residuals[0] * (1 + 1e-3) + 1e-12
    assert abs(r32.lambda_max - 2.0) <= r32.residuals[-1] * (1 + 1e-3) + 1e-12
    assert 0 < resume_floor(torch.float64) < resume_floor(torch.float32) < TOL[torch.float32]


def test_warm_start_needs_fewer_products():
    eig = np.sort(SPECTRA["indefinite"](np.random.default_rng(3)))
    A = matrix_with_spectrum(eig, 4)
    first = lanczos(operator_from_matrix(A))
    drift = matrix_with_spectrum(np.random.default_rng(5).uniform(-1, 1, len(eig)), 6)
    B = A + 1e-3 * drift  # the next measurement: a nearby operator
    cold = lanczos(operator_from_matrix(B), seed=7)
    warm = lanczos(operator_from_matrix(B), warm=first)
    exact = np.linalg.eigvalsh(B.numpy())
    assert abs(warm.lambda_min - exact[0]) <= EIG_TOL * np.abs(exact).max()
    assert warm.n_products < cold.n_products


def test_negative_count_uses_relative_floor_and_condition_only_when_pd():
    # eigenvalues at -1e-12 * scale are round-off (not counted); -1e-6 * scale are curvature (counted)
    eig = np.array([-1e-6, -1e-12, *np.linspace(0.1, 1.0, 18)]) * 4.0
    res = lanczos(operator_from_matrix(matrix_with_spectrum(eig, 8)), max_iter=20)
    assert res.exhausted and res.n_negative == 1 == int((eig < -NEG_FLOOR * 4.0).sum())
    assert res.condition is None  # indefinite: no condition number
    pd = np.linspace(0.5, 4.0, 20)
    res_pd = lanczos(operator_from_matrix(matrix_with_spectrum(pd, 9)))
    assert res_pd.condition == pytest.approx(8.0, rel=1e-8)
    psd = np.r_[0.0, pd[1:]]  # a zero eigenvalue: semidefinite, no condition number either
    assert lanczos(operator_from_matrix(matrix_with_spectrum(psd, 10))).condition is None


def test_bad_arguments_are_named():
    op = operator_from_matrix(torch.eye(4, dtype=torch.float64))
    with pytest.raises(ValueError, match="k must be"):
        lanczos(op, k=0)
    with pytest.raises(ValueError, match="start vector"):
        lanczos(op, v0=torch.zeros(4))
    with pytest.raises(ValueError, match="square"):
        operator_from_matrix(torch.zeros(3, 4))


# --------------------------------------------------------------------------------------------
# The paper's estimator and its failure mode
# --------------------------------------------------------------------------------------------

SIMSIAM_TOYS = [(spec, seed) for spec in ("gelu3", "swish3", "tanh2", "softplus2") for seed in range(4)]


def test_shifted_power_iteration_fails_when_the_dominant_eigenvalue_is_negative():
    """On toy SimSiam instances (negative cosine: indefinite loss Hessian) whose largest-magnitude
    eigenvalue is negative, the 20-step shifted power iteration's "lambda_min" is off by at least
    POWER_FAIL x scale and lands nearer lambda_max than lambda_min; Lanczos is within EIG_TOL."""
    failures = 0
    for spec, seed in SIMSIAM_TOYS:
        inst = build_instance(spec, "simsiam", seed=seed)
        E = EffectiveHessian(torch.as_tensor(inst.Z), inst.scale_head, inst.torch_loss)
        eig = np.linalg.eigvalsh(E.H.dense().numpy())
        scale = np.abs(eig).max()
        lz = lanczos(E.H)
        assert abs(lz.lambda_min - eig[0]) <= EIG_TOL * scale
        if -eig[0] <= eig[-1]:
            continue  # dominant eigenvalue positive: not the case under test
        pw = shifted_power_iteration(E.H, 20)
        err = abs(pw.lambda_min - eig[0]) / scale
        assert err >= POWER_FAIL, (spec, seed, err)
        assert abs(pw.lambda_min - eig[-1]) < abs(pw.lambda_min - eig[0])
        failures += 1
    assert failures >= 4  # the case is common on these instances, not a curiosity


def test_shifted_power_iteration_works_when_the_dominant_eigenvalue_is_positive():
    """Control: with a positive dominant eigenvalue and a lambda_min well separated after the shift
    (ratios 0.5 and 2/3 per step) the same estimator is accurate."""
    eig = np.r_[-10.0, np.linspace(0.0, 1.0, 28), 20.0]
    pw = shifted_power_iteration(operator_from_matrix(matrix_with_spectrum(eig, 12)), 20)
    assert abs(pw.lambda_min - eig[0]) <= 0.05 * np.abs(eig).max()


# --------------------------------------------------------------------------------------------
# Block-diagonal operators: a Lanczos per block
# --------------------------------------------------------------------------------------------

BLOCK_D = 60  # each block's size


def block_operator(n: int, seed: int, dtype=torch.float64):
    """``n`` symmetric (d, d) blocks, each with an indefinite spectrum drawn afresh (ends 0.05 of the scale from
    their neighbours), as an operator on the stacked rows; and the blocks' spectra (n, d) ascending."""
    rng = np.random.default_rng(seed)
    eig = np.sort(np.stack([np.r_[-1.0, rng.uniform(-0.95, 0.95, BLOCK_D - 2), 1.0] * rng.uniform(0.5, 1.0)
                            for _ in range(n)]), axis=1)
    A = torch.stack([matrix_with_spectrum(e, seed + 1 + i) for i, e in enumerate(eig)]).to(dtype)  # (n, d, d)
    return block_diagonal_operator(A, "blocks"), eig


def test_blockwise_lanczos_finds_the_ends_in_steps_that_do_not_grow_with_the_blocks():
    """The lowest and highest eigenvalue of the whole operator within BLOCKWISE_TOL of the scale, measured
    residuals at the ends, a negative count that is a lower bound; the steps of 2 and of 24 blocks alike,
    where one Lanczos over all coordinates needs more products as the blocks add eigenvalues near the ends."""
    steps = {}
    for n in (2, 24):
        op, eig = block_operator(n, seed=n)
        res = blockwise_lanczos(op, n)
        scale = np.abs(eig).max()
        assert abs(res.lambda_min - eig.min()) <= BLOCKWISE_TOL * scale
        assert abs(res.lambda_max - eig.max()) <= BLOCKWISE_TOL * scale
        assert np.abs(res.block_ends - eig[:, [0, -1]]).max() <= BLOCKWISE_TOL * scale  # every block's ends
        assert res.ends_converged and res.n_products == op.n_products
        assert n <= res.n_negative <= int((eig < -NEG_FLOOR * scale).sum())
        steps[n] = res.n_iter
        whole = lanczos(op, tol=BLOCKWISE_TOL, max_iter=400)
        assert abs(whole.lambda_min - eig.min()) <= BLOCKWISE_TOL * scale
        if n == 24:
            assert whole.n_products > 1.5 * res.n_products
    assert steps[24] <= steps[2] + 8


def test_blockwise_lanczos_float32_products_refined_in_float64():
    """float32 products run the recurrence; the ends' Rayleigh quotients and residuals from the float64 operator
    give float64 accuracy (measured: 5e-12 of the scale). The flag is the measured residual's: the float32 Ritz
    vectors' residuals stall near 1e-7 of the scale (measured 0.9-1e-7), so at ``BLOCKWISE_TOL`` the ends are
    accurate but not certified (not converged: ``blockwise_ends`` runs such a tol in float64), and at
    ``RECURRENCE_REACH`` they are. Negative control: the float32 recurrence alone stays at float32's rounding
    (measured: 1.8e-8), so the accuracy comes from the refinement."""

    n = 6
    op64, eig = block_operator(n, seed=3)
    op32, _ = block_operator(n, seed=3, dtype=torch.float32)
    scale = np.abs(eig).max()
    refined = blockwise_lanczos(op32, n, refine=op64)
    assert abs(refined.lambda_min - eig.min()) <= 1e-10 * scale and not refined.converged.any()
    assert abs(refined.lambda_max - eig.max()) <= 1e-10 * scale
    assert np.all(refined.residuals > BLOCKWISE_TOL * refined.scale)  # what the flag reads
    assert blockwise_lanczos(op32, n, refine=op64, tol=RECURRENCE_REACH).ends_converged
    alone = blockwise_lanczos(op32, n)
    assert np.abs(alone.block_ends - eig[:, [0, -1]]).max() > 1e-9 * scale
    with pytest.raises(ValueError, match="n_blocks must divide"):
        blockwise_lanczos(op64, 7)


CROWD = 1e-4  # the crowded blocks' spacing at their ends, relative to the scale (measured mid-training: 4e-4-1.5e-3)


def crowded_block_operator(n: int, seed: int, shift: float = 0.0):
    """``n`` blocks of ``BLOCK_D``: block 0 holds ``lambda_min = -1`` and block 1 ``lambda_max = 1``, each 0.05 from its
    neighbour; every other block's ends are crowded (``CROWD`` apart) at -0.5 and 0.6, far inside. ``shift``: every
    block's eigenvectors rotated a little (a nearby operator: the next measurement)."""
    rng = np.random.default_rng(seed)
    eig = []
    for i in range(n):
        inner = rng.uniform(-0.4, 0.5, BLOCK_D - 6)
        lo = [-1.0, -0.95, -0.9] if i == 0 else list(-0.5 + CROWD * np.arange(3))
        hi = [0.9, 0.95, 1.0] if i == 1 else list(0.6 - CROWD * np.arange(3))
        eig.append(np.sort(np.r_[lo, inner, hi]))
    eig = np.stack(eig)
    A = torch.stack([matrix_with_spectrum(e, seed + 1 + i) for i, e in enumerate(eig)])
    if shift:
        K = torch.as_tensor(rng.standard_normal((n, BLOCK_D, BLOCK_D)))
        R = torch.linalg.matrix_exp(shift * (K - K.transpose(1, 2)))  # a small rotation of each block
        A = R @ A @ R.transpose(1, 2)
    return block_diagonal_operator(A, "crowded blocks"), eig


def test_blockwise_goal_ends_lets_go_of_crowded_blocks_far_from_the_operators_ends():
    """``goal="ends"`` gives the operator's lambda_min and lambda_max to BLOCKWISE_TOL while the crowded blocks
    (ends 0.5 of the scale inside) are let go unresolved; ``goal="blocks"`` waits for them. Negative control: the
    crowded blocks' own ends are not converged under ``"ends"``, so the saving is the letting go, not luck."""
    n = 8
    op, eig = crowded_block_operator(n, seed=11)
    scale = np.abs(eig).max()
    every = blockwise_lanczos(op, n, max_iter=BLOCK_D)
    ends = blockwise_lanczos(op, n, goal="ends", max_iter=BLOCK_D)
    for res in (every, ends):
        assert abs(res.lambda_min - eig.min()) <= BLOCKWISE_TOL * scale
        assert abs(res.lambda_max - eig.max()) <= BLOCKWISE_TOL * scale
        assert res.ends_converged and res.answered
    assert ends.n_products < every.n_products
    assert np.any(ends.block_bounds[2:] > BLOCKWISE_TOL * scale)  # crowded blocks left unresolved
    norm = blockwise_lanczos(op, n, goal="norm", max_iter=BLOCK_D)
    assert abs(np.abs(norm.values).max() - scale) <= BLOCKWISE_TOL * scale and norm.answered
    assert norm.n_products < every.n_products
    with pytest.raises(ValueError, match="goal must be one of"):
        blockwise_lanczos(op, n, goal="spectrum")


def test_blockwise_warm_start_from_a_run_on_the_same_operator_needs_fewer_products():
    """``warm`` is for a rerun on the same operator (``blockwise_ends``' float64 rerun of a float32 run): starting each
    block from the run's Ritz vectors reaches the same ends in fewer products than a random start; a result of
    another shape is ignored."""
    n = 6
    op, eig = crowded_block_operator(n, seed=5)
    scale = np.abs(eig).max()
    first = blockwise_lanczos(op, n, goal="ends")
    again = blockwise_lanczos(op, n, goal="ends", warm=first)
    assert again.warm_started and not first.warm_started
    for res in (first, again):
        assert abs(res.lambda_min - eig.min()) <= BLOCKWISE_TOL * scale and res.answered
    assert again.n_products < first.n_products
    other, _ = crowded_block_operator(3, seed=5)
    assert not blockwise_lanczos(other, 3, warm=first).warm_started


CROSSING_D = 120  # crossing_operator: each block's size
CROSSING_GAP = 4e-3  # crossing_operator: block 0's lowest two eigenvalues apart (mid-training: 2e-4-8e-3 of the scale)


def crossing_operator(n: int, seed: int):
    """``n`` blocks of ``CROSSING_D``: block 0 holds ``lambda_min = -1`` with its second eigenvalue ``CROSSING_GAP``
    above; every other block's lowest lies between them, and 20 eigenvalues of each crowd the low end, as
    mid-training. Returns the operator, the spectra (n, d) and every block's eigenvectors (n, d, d)."""
    rng = np.random.default_rng(seed)
    g, eig = CROSSING_GAP, []
    for i in range(n):
        inner = np.r_[rng.uniform(-1 + 2 * g, -0.5, 20), rng.uniform(-0.5, 0.9, CROSSING_D - 24)]
        lo = [-1.0, -1.0 + g] if i == 0 else [-1.0 + g / 2, -1.0 + 1.5 * g]
        eig.append(np.sort(np.r_[lo, inner, [0.95, 1.0] if i == 1 else [0.9, 0.92]]))
    eig = np.stack(eig)
    A = torch.stack([matrix_with_spectrum(e, seed + 1 + i) for i, e in enumerate(eig)])
    return block_diagonal_operator(A, "crossing blocks"), eig, torch.linalg.eigh(A)[1]


CROSSING_SEEDS = range(10)


CROSSING_TOL = 1e-4  # the crossing finding's tol: the residual stop met before a steered start shows lambda_min


def test_finding_a_start_steered_past_a_crossing_fools_the_stop():
    """Why measurements start cold (``blockwise_ends`` takes no warm start). Between two measurements a block's
    eigenvalues may cross: its previous lowest Ritz vector is then its new *second* eigenvector. Started there (plus
    the highest, plus ``WARM_NOISE`` of a random vector, as a warm start from the previous measurement would be),
    block 0's lowest Ritz value meets the residual stop at ``CROSSING_TOL`` at its second eigenvalue (an eigenvalue
    within tol, as ``converged`` says, but not the lowest), and ``lambda_min`` comes out ``CROSSING_GAP`` off,
    reported answered, under ``goal="ends"`` and ``"blocks"`` alike: at least half of the 20 runs (measured 20 of 20;
    at ``BLOCKWISE_TOL`` none: the residual stop took the steps that show the lowest eigenvector). Control: cold
    starts on the same operators are never fooled."""
    from dataclasses import replace

    n, fooled = 4, 0
    for seed in CROSSING_SEEDS:
        op, eig, V = crossing_operator(n, seed)
        cold = blockwise_lanczos(op, n, goal="ends", tol=CROSSING_TOL)
        assert abs(cold.lambda_min - eig.min()) <= CROSSING_TOL * np.abs(eig).max()  # never fooled
        steered = replace(cold, block_vectors=torch.stack([V[:, :, 1], V[:, :, -1]]))  # a crossing in every block
        for goal in ("ends", "blocks"):
            res = blockwise_lanczos(op, n, goal=goal, warm=steered, tol=CROSSING_TOL)
            fooled += bool(res.answered and abs(res.lambda_min - eig.min()) > CROSSING_GAP / 2)
    assert fooled >= len(CROSSING_SEEDS), fooled


WRONG_END = 1e-6  # a reported lambda_min this far from the exact one (relative to the scale) is a wrong answer


def test_finding_a_whole_operator_start_steered_past_a_crossing_fools_a_loose_residual_stop():
    """Why ``measure`` starts the whole-operator Lanczos cold too. On the crossing instance as one operator, a start
    at the operator's *second* eigenvector (plus the highest and ``lanczos``'s 1e-2 of a random vector: a warm start
    from a previous measurement after a crossing) meets the residual stop at float32's default ``tol`` (``TOL``: 1e-5)
    on a Ritz value at the second eigenvalue before the lowest eigenvector shows: ``lambda_min`` reported converged
    and ``CROSSING_GAP / 2`` off in at least half of ``CROSSING_SEEDS`` (9 of 10 measured). Controls: cold starts at
    the same ``tol`` are never fooled, and at float64's default (1e-10, the tracker's) neither start is: the stop is
    met only once the start's random part has brought out the lowest eigenvector."""
    from dataclasses import replace

    n, d = 4, CROSSING_D
    fooled = {tol: {"cold": 0, "steered": 0} for tol in (TOL[torch.float32], TOL[torch.float64])}
    for seed in CROSSING_SEEDS:
        op, eig, V = crossing_operator(n, seed)
        exact, scale = eig.min(), np.abs(eig).max()
        second, top = int(np.argsort(eig[:, 0])[1]), int(np.argmax(eig[:, -1]))
        Y = torch.zeros(n, d, 2, dtype=torch.float64)
        Y[second, :, 0], Y[top, :, 1] = V[second, :, 0], V[top, :, -1]  # the second eigenvector, the highest
        for tol, count in fooled.items():
            cold = lanczos(op, k=1, max_iter=120, tol=tol)
            steered = lanczos(op, k=1, max_iter=120, tol=tol, warm=replace(cold, vectors=Y.reshape(n * d, 2)))
            for name, res in (("cold", cold), ("steered", steered)):
                count[name] += bool(res.ends_converged and abs(res.lambda_min - exact) > WRONG_END * scale)
    loose, tight = fooled[TOL[torch.float32]], fooled[TOL[torch.float64]]
    assert loose["steered"] >= len(CROSSING_SEEDS) // 2, fooled
    assert loose["cold"] == 0 and tight == {"cold": 0, "steered": 0}, fooled
