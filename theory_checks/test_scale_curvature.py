"""Equation (1) on the routes behind the paper-scale numbers: closed-form loss Hessians, scale's operators, Lanczos.

Statement (docs/paper.md, equation (1)): for a head ``h`` acting row by row and an objective ``L(Hb)``,
the Hessian of ``z -> L(h(z))`` at a batch ``Z`` (n, d) is

    H_eff = G + M,   G = J^T (grad^2_H L) J,   M = sum_{i,c} rho_{i,c} grad^2_z h_c(z_i),   rho = grad_H L.

``mini.hessian.decompose_autograd`` computes the three dense matrices by autograd (HIPS), exactly
(``theory_checks/test_eq1_decomposition.py``). Here every faster route that ``scale`` measures with is
held to that reference on hypothesis-drawn instances (every head of the grammar, depths 1-3 with a
drawn width per hidden layer, ``d`` and ``k`` from 1 or 2 to 4, two views of 2-3 rows, every objective,
temperatures ``0.02 <= tau <= 5``, predictors of depth 1-3 or none, random targets):

(1) NT-Xent's loss curvature in closed form (``mini.loss_hessians``: ``NTXentCurvature.gradient``,
    ``.hvp`` and ``nt_xent_hessian``) equals autograd's gradient and Hessian of ``mini.losses.nt_xent``,
    on rows of norms over four decades and on nearly collapsed batches. NumPy only.
(2) SimSiam's and BYOL's per-sample curvature through a head and a predictor in closed form
    (``PredictorCosineCurvature``: the blocks ``M_i`` and ``G_i = J_i^T (grad^2_{h_i} L) J_i``, ``rho``,
    the products ``H v`` and ``M v``; and the loss blocks themselves without a head) equals the
    autograd decomposition of ``mini.losses.simsiam`` / ``byol``. NumPy only.
(3) scale's routes, one drawn per example (``test_scale_routes_are_equation_1``), on the torch head holding
    the mini head's weights (``head_from_mini``) and scale's own torch objectives
    (``scale.engine.objectives``, ``scale.engine.loss_curvature``): the matrix-free ``EffectiveHessian``
    in both product modes (``H v``, ``G v``, ``M v``, ``rho``), ``factored_operator`` (``H v``, the
    blocks ``M_i``, and ``dense()`` by both of its routes for NT-Xent) and ``closed_form_operator``
    (``H v``, ``M v``) for every objective; ``effective_hessian_blocks`` by both methods for the
    per-sample objectives (MSE to targets, SimSiam, BYOL: the blocks ``G_i``, ``M_i``, ``H_i``, zero off
    the diagonal blocks, and the whole spectrum). Lanczos on each operator's ``H`` finds both ends of
    ``eigvalsh(H_eff)`` as in (4).
(4) Lanczos (``scale.curvature.lanczos.lanczos``) on symmetric matrices of chosen spectrum (N up to 80,
    scales 1e-8 to 1e8, indefinite, semidefinite with exact zeros, clustered ends, few distinct values):
    the Ritz values interlace the spectrum (Cauchy: ``T = Q^T A Q`` with ``Q`` orthonormal), the returned
    ends lie within their residual of an eigenvalue and within Lanczos' tolerance (``tol`` of the scale)
    of ``lambda_min`` and ``lambda_max`` (of the end's cluster where eigenvalues sit closer than
    ``END_CLUSTER`` of the scale: one start vector cannot separate them), the residuals are what they
    claim, the negative count is a lower bound, exact when the Krylov space is exhausted, and then the
    Ritz values are the spectrum.

Hypotheses, exactly: off ReLU kinks (random batches: almost surely); ``k >= 2`` for the objectives that
normalise rows (NT-Xent, SimSiam, BYOL: for ``k = 1`` they are constant); two rows per view at least
(VICReg's batch statistics; NT-Xent with one pair is constant), three for Barlow Twins (batch
standardisation maps two rows to ``+-1`` up to its ``eps``: the loss is flat to ``O(eps)`` and its
derivatives are the remainders of cancelling terms of size 1, relative round-off ~1e-9); a non-zero eq. (1) scale
``max(|H_eff|_2, |G|_2, |M|_2)`` (``assume``: a head or predictor whose ReLUs are all dead on the batch
makes every matrix exactly 0, and 0 = 0 tests nothing: the premise ``curvature_nonzero``). A saturated
NT-Xent batch is not set aside: where each positive holds nearly all of its softmax the loss is flat, its
curvature the remainder of terms that cancel, ``log sum_j exp S_ij - S_{i,p(i)}`` (at ``tau = 0.05``,
``|H_eff| ~ 1e-11`` from terms of size 100), so the tolerance adds ``ROUNDOFF_REL`` of those terms' size
(``instances.nt_xent_term_scale``): the accuracy float64 has there. Lanczos: the start vector is random
(its seed drawn), so that every eigenvector
has a component in it; eigenvalues are either exactly zero or at least ``SPECTRUM_GAP`` of the scale in
magnitude, three decades above the ``1e-9`` negative-curvature floor (no rounding can move one across
it). (3) and (4) need torch (skipped without it).

Tolerances, relative to the matrix's own scale: ``LOSS_REL_TOL`` of the loss Hessian's spectral norm
(its gradient: of ``max_i 1 / (n tau |h_i|)``, the size NT-Xent's gradient has); ``OP_REL_TOL`` of the
eq. (1) scale per unit vector; Lanczos: ``RITZ_ROUNDOFF`` of the spectral scale beyond the bounds above
(``T`` is ``Q^T A Q`` to the rounding of a reorthogonalised basis and of the coupling under ``1e-12`` of
the scale that a restart after an invariant subspace drops).

Negative controls: the Hessian of NT-Xent without its positive pair differs from the closed form by more
than ``MATERIAL_REL``; the operator's ``G`` alone misses ``H_eff`` by more than ``MATERIAL_REL`` for
smooth heads (``M`` is material); Lanczos stopped after two products has unconverged ends, says so, and
misses ``lambda_min`` by more than ``MATERIAL_REL``: each comparison can fail.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from autograd import grad, hessian
from hypothesis import example, given
from hypothesis import strategies as st
from instances import ROUNDOFF_REL, nt_xent_term_scale

from conftest import ALL_SPECS, matrix_with_spectrum, premise, seeds
from mini import losses
from mini.heads import ACTIVATIONS, Head, init_head
from mini.hessian import NEG_FLOOR, decompose_autograd, head_derivatives, loss_hessian_blocks
from mini.loss_hessians import NTXentCurvature, PredictorCosineCurvature, nt_xent_hessian

LOSS_REL_TOL = 1e-10  # closed-form loss curvature against autograd: float64 round-off is ~1e-14 of the scale
OP_REL_TOL = 1e-10  # operator products and blocks against the dense autograd reference, of the eq. (1) scale
RITZ_ROUNDOFF = 1e-11  # Ritz values of the reorthogonalised T against the spectrum, of the spectral scale
MATERIAL_REL = 1e-3  # a negative control misses by this fraction of the scale: ten decades above round-off
SPECTRUM_GAP = 1e-6  # nonzero eigenvalues of the Lanczos matrices: at least this fraction of the scale
END_CLUSTER = 1e-6  # eigenvalues chained to an end by gaps below this fraction of the scale: the end's cluster
OBJECTIVES = ("mse", "mse_views", "simclr", "simsiam", "byol", "vicreg", "barlow")
PER_SAMPLE = ("mse", "simsiam", "byol")  # block-diagonal loss Hessian: effective_hessian_blocks applies
NORMALISING = ("simclr", "simsiam", "byol")  # constant in Hb for k = 1
PREDICTOR_SPECS = (None, "linear", *(f"{a}{n}" for a in ACTIVATIONS for n in (2, 3)))
temperatures = st.floats(float(np.log(0.02)), float(np.log(5.0))).map(np.exp)  # log-uniform tau


# --------------------------------------------------------------------------------------------------
# Instances
# --------------------------------------------------------------------------------------------------


@st.composite
def curvature_instances(draw, objectives=OBJECTIVES, specs=ALL_SPECS):
    """``(spec, objective, seed, params)`` for ``Built``: every head, objective and hyperparameter drawn."""
    spec, objective = draw(st.sampled_from(specs)), draw(st.sampled_from(objectives))
    depth = 1 if spec == "linear" else int(spec[-1])
    params = {
        "m": draw(st.integers(3 if objective == "barlow" else 2, 3)),
        "d": draw(st.integers(1, 4)),
        "k": draw(st.integers(2 if objective in NORMALISING else 1, 4)),
        "widths": draw(st.lists(st.integers(1, 6), min_size=depth - 1, max_size=depth - 1)),
        "tau": draw(temperatures),
        "predictor": draw(st.sampled_from(PREDICTOR_SPECS)),
        "coeffs": draw(st.tuples(st.floats(0.1, 30.0), st.floats(0.1, 30.0), st.floats(0.1, 3.0))),
        "lambd": draw(st.floats(1e-3, 1.0)),
    }
    return spec, objective, draw(seeds), params


class Built:
    """One instance: a mini head, its objective and batch, and the fixed data the torch side needs."""

    def __init__(self, spec: str, objective: str, seed: int, params: dict):
        rng = np.random.default_rng(seed)
        m, d, k = params["m"], params["d"], params["k"]
        self.name, self.params, self.seed = objective, params, seed
        self.head = init_head(spec, d, k, params["widths"], rng)
        self.Z = rng.standard_normal((2 * m, d))
        self.T = self.head(self.Z) + 0.5 * rng.standard_normal((2 * m, k))  # targets != h: rho != 0
        pspec = params["predictor"]
        self.predictor: Head | None = None
        if pspec is not None:
            depth = 1 if pspec == "linear" else int(pspec[-1])
            self.predictor = init_head(pspec, k, k, [int(w) for w in rng.integers(1, 7, depth - 1)], rng)
        sim, std, cov = params["coeffs"]
        self.objective = {
            "mse": lambda: losses.mse_targets(self.T),
            "mse_views": losses.mse_views,
            "simclr": lambda: losses.nt_xent(params["tau"]),
            "simsiam": lambda: losses.simsiam(self.T, self.predictor),
            "byol": lambda: losses.byol(self.T, self.predictor),
            "vicreg": lambda: losses.vicreg(sim, std, cov),
            "barlow": lambda: losses.barlow(params["lambd"]),
        }[objective]()

    def __repr__(self) -> str:
        return f"Built({self.head.spec.name}, {self.name}, seed={self.seed}, {self.params})"

    def reference(self):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # autograd: a linear map's Hessian is zero
            return decompose_autograd(self.head, self.objective, self.Z)

    # the torch side: scale's head module and scale's own objectives
    def torch_head(self):
        from scale.engine.heads import head_from_mini

        return head_from_mini(self.head).eval()

    def torch_loss(self):
        """scale's objective as scale measures with it: the closed-form NT-Xent and predictor-cosine objects
        (callables, with their curvature attached), scale's plain torch losses otherwise."""
        import torch

        from scale.engine import objectives as so
        from scale.engine.heads import head_from_mini
        from scale.engine.loss_curvature import NTXent, PredictorCosine

        T = torch.as_tensor(self.T)
        sim, std, cov = self.params["coeffs"]
        pred = None if self.predictor is None else head_from_mini(self.predictor).eval()
        form = "nmse" if self.name == "byol" else "cosine"
        if self.name == "simclr":
            return NTXent(self.params["tau"])
        if self.name in ("simsiam", "byol"):
            return PredictorCosine(T, pred, form)
        return {
            "mse": lambda H: so.mse_targets(H, T),
            "mse_views": so.mse_views,
            "vicreg": lambda H: so.vicreg(H, sim, std, cov),
            "barlow": lambda H: so.barlow(H, self.params["lambd"]),
        }[self.name]


def check_lanczos_ends(res, lam: np.ndarray, scale: float, context, matrix_error: float = 0.0) -> None:
    """The ends of a Lanczos result against the spectrum ``lam`` (ascending) of its operator's matrix, known
    to ``matrix_error`` in spectral norm (Weyl: each eigenvalue moves by at most that).

    Always (Rayleigh-Ritz): ``lambda_min <= theta_min`` and ``theta_max <= lambda_max``, and each end lies
    within its measured residual of some eigenvalue. Convergence: Lanczos stops when its residual estimates
    reach ``tol`` of the scale (or the Krylov space is the whole space), so each end is within ``tol`` of the
    scale of an eigenvalue: of the spectrum's end, or of a member of the end's cluster (the eigenvalues
    chained to it by gaps under ``END_CLUSTER`` of the scale). Inside such a cluster one start vector gives
    a Ritz vector mixing the cluster's eigenvectors in proportion to its own components, so its Ritz value
    is a cluster member's, not necessarily the end's.
    """
    tol = RITZ_ROUNDOFF * scale + matrix_error
    widths = []
    for side in (lam, -lam[::-1]):
        j = 0
        while j + 1 < len(side) and side[j + 1] - side[j] < END_CLUSTER * scale:
            j += 1
        widths.append(side[j] - side[0])
    for theta, r, end, width, sign in ((res.lambda_min, res.residuals[0], lam[0], widths[0], 1.0),
                                       (res.lambda_max, res.residuals[-1], lam[-1], widths[1], -1.0)):
        assert np.abs(lam - theta).min() <= r + tol, (theta, r, context)
        assert -tol <= sign * (theta - end) <= res.tol * scale + width + tol, (theta, end, r, width, context)


def eq1_scale(ref) -> float:
    return max(float(np.linalg.norm(A, 2)) for A in (ref.H, ref.G, ref.M))


def rho_scale(ref) -> float:
    return max(float(np.abs(ref.rho).max()), np.finfo(float).tiny)


def unit_columns(N: int, p: int, seed: int) -> np.ndarray:
    V = np.random.default_rng(seed).standard_normal((N, p))
    return V / np.linalg.norm(V, axis=0)


def worst(apply, A: np.ndarray, V: np.ndarray) -> float:
    """``max_j |apply(v_j) - A v_j|`` over unit columns ``v_j``."""
    return max(float(np.linalg.norm(np.asarray(apply(V[:, j])) - A @ V[:, j])) for j in range(V.shape[1]))


def block_diagonal(B: np.ndarray) -> np.ndarray:
    n, d, _ = B.shape
    out = np.zeros((n * d, n * d))
    for i in range(n):
        out[i * d:(i + 1) * d, i * d:(i + 1) * d] = B[i]
    return out


# --------------------------------------------------------------------------------------------------
# (1) NT-Xent's loss curvature in closed form (NumPy)
# --------------------------------------------------------------------------------------------------


@st.composite
def embedding_batches(draw):
    """``Hb`` (2m, k): rows of norms over four decades, generic or nearly collapsed onto one direction."""
    m, k, seed = draw(st.integers(2, 5)), draw(st.integers(2, 6)), draw(seeds)
    spread = draw(st.sampled_from([1.0, 1e-2, 1e-4]))
    rng = np.random.default_rng(seed)
    Hb = rng.standard_normal(k) + spread * rng.standard_normal((2 * m, k))
    return Hb * 10.0 ** rng.uniform(-2, 2, size=(2 * m, 1))


@given(Hb=embedding_batches(), tau=temperatures, seed=seeds)
@example(Hb=np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [-1.0, 2.0]]), tau=0.1, seed=0)
def test_nt_xent_loss_curvature_in_closed_form(Hb: np.ndarray, tau: float, seed: int) -> None:
    n, k = Hb.shape
    fn = losses.nt_xent(tau).fn
    ref_H = hessian(fn)(Hb).reshape(n * k, n * k)
    scale = float(np.linalg.norm(ref_H, 2))
    tol = LOSS_REL_TOL * scale + ROUNDOFF_REL * nt_xent_term_scale(Hb, tau)  # the evaluation's accuracy
    closed = nt_xent_hessian(Hb, tau).reshape(n * k, n * k)
    assert np.abs(closed - ref_H).max() <= tol, (n, k, tau)
    curv = NTXentCurvature(Hb, tau)
    V = np.random.default_rng(seed).standard_normal((3, n, k))
    V /= np.linalg.norm(V.reshape(3, -1), axis=1)[:, None, None]
    for v, hv in zip(V, curv.hvp(V), strict=True):  # a batch of directions at once
        assert np.linalg.norm(hv.ravel() - ref_H @ v.ravel()) <= tol
    grad_scale = float(np.max(1.0 / (n * tau * np.linalg.norm(Hb, axis=1))))
    assert np.abs(curv.gradient() - grad(fn)(Hb)).max() <= LOSS_REL_TOL * grad_scale


@pytest.mark.parametrize("seed", range(3))
def test_negative_control_nt_xent_without_its_positive_pair_is_another_hessian(seed: int) -> None:
    """The Hessian of NT-Xent whose denominator leaves out the positive pair and which drops the positive
    term: the closed form misses it by more than ``MATERIAL_REL`` of the scale."""
    import autograd.numpy as anp

    rng = np.random.default_rng(seed)
    Hb, tau = rng.standard_normal((6, 3)), 0.5
    n, m = 6, 3
    partner = np.concatenate([np.arange(m, n), np.arange(0, m)])
    negatives = 1.0 - np.eye(n) - np.eye(n)[partner]

    def without_positive(H):
        U = H / anp.sqrt(anp.sum(H * H, axis=1, keepdims=True))
        return anp.mean(anp.log(anp.sum(negatives * anp.exp(anp.dot(U, U.T) / tau), axis=1)))

    wrong = hessian(without_positive)(Hb).reshape(18, 18)
    closed = nt_xent_hessian(Hb, tau).reshape(18, 18)
    assert np.abs(closed - wrong).max() > MATERIAL_REL * float(np.linalg.norm(closed, 2))


# --------------------------------------------------------------------------------------------------
# (2) SimSiam and BYOL through a head and a predictor in closed form (NumPy)
# --------------------------------------------------------------------------------------------------


def predictor_cosine_curvature(b: Built, with_head: bool = True) -> PredictorCosineCurvature:
    """The objective of ``mini.losses.simsiam`` / ``byol`` as ``sum_i coef <t_i^, p_i^>``: row ``i`` pulled to
    the other view's target (the halves of ``T`` swapped), ``coef = -1/n`` (``-mean cos``) or ``-2/n``
    (``mean(2 - 2 cos)``)."""
    n = b.Z.shape[0]
    T_other = np.concatenate([b.T[n // 2:], b.T[: n // 2]])
    coef = (-2.0 if b.name == "byol" else -1.0) / n
    if with_head:
        return PredictorCosineCurvature(b.head, b.predictor, b.Z, T_other, coef)
    return PredictorCosineCurvature(None, b.predictor, b.head(b.Z), T_other, coef)


@given(inst=curvature_instances(objectives=("simsiam", "byol")))
@example(inst=("gelu3", "byol", 0, {"m": 2, "d": 3, "k": 3, "widths": [4, 2], "tau": 0.1, "predictor": "tanh3",
                                    "coeffs": (25.0, 25.0, 1.0), "lambd": 5e-3}))
def test_predictor_cosine_curvature_in_closed_form(inst) -> None:
    b = Built(*inst)
    n, d = b.Z.shape
    ref = b.reference()
    scale = eq1_scale(ref)
    premise("curvature_nonzero", scale, f"every ReLU dead on the batch: H_eff = G = M = 0 at {b}")
    curv = predictor_cosine_curvature(b)
    M, G = (np.concatenate(parts) for parts in zip(*((Mc, Gc) for _, Mc, Gc in curv.blocks())))
    assert np.abs(block_diagonal(G) - ref.G).max() <= OP_REL_TOL * scale, b  # G off its blocks is zero too
    assert np.abs(block_diagonal(M) - ref.M).max() <= OP_REL_TOL * scale, b
    assert np.abs(curv.rho - ref.rho).max() <= OP_REL_TOL * rho_scale(ref)
    V = unit_columns(n * d, 2, b.seed)
    assert worst(lambda v: curv.hvp(v.reshape(n, d)).ravel(), ref.H, V) <= OP_REL_TOL * scale, b
    assert worst(lambda v: curv.interaction_hvp(v.reshape(n, d)).ravel(), ref.M, V) <= OP_REL_TOL * scale, b
    # without a head: the loss blocks grad^2_{h_i} L themselves (through the predictor, if any)
    Hb = b.head(b.Z)
    ref_L = loss_hessian_blocks(b.objective, Hb)
    loss_scale = max(float(np.linalg.norm(B, 2)) for B in ref_L)
    premise("curvature_nonzero", loss_scale, f"the loss blocks vanish at {b}")
    GL = np.concatenate([Gc for _, _, Gc in predictor_cosine_curvature(b, with_head=False).blocks()])
    assert np.abs(GL - ref_L).max() <= LOSS_REL_TOL * loss_scale, b


# --------------------------------------------------------------------------------------------------
# (3), (4) scale's operators and exact routes against the dense reference, and Lanczos on them (torch)
# --------------------------------------------------------------------------------------------------

OPERATOR_ROUTES = ("operator", "operator-forward", "factored", "closed-form")
BLOCK_ROUTES = ("blocks", "blocks-autodiff")


@st.composite
def routed_instances(draw):
    """An instance and one of scale's routes to its curvature (the exact blocks for per-sample objectives)."""
    spec, objective, seed, params = draw(curvature_instances())
    routes = OPERATOR_ROUTES + (BLOCK_ROUTES if objective in PER_SAMPLE else ())
    return draw(st.sampled_from(routes)), (spec, objective, seed, params)


def _torch():
    return pytest.importorskip("torch")


def route_operators(route: str, b: Built) -> dict:
    """``{"H": op, "G": op, "M": op}`` (operators) or ``{"blocks": Blocks}`` of one route at ``b``."""
    torch = _torch()
    from scale.curvature.blocks import effective_hessian_blocks, factored_operator
    from scale.curvature.closed_form import closed_form_operator
    from scale.curvature.operators import EffectiveHessian

    z, head, loss = torch.as_tensor(b.Z), b.torch_head(), b.torch_loss()
    if route.startswith("operator"):
        E = EffectiveHessian(z, head, loss, mode="forward" if route == "operator-forward" else "auto")
        return {"H": E.H, "G": E.G, "M": E.M, "rho": E.rho}
    if route == "factored":
        H, M, _ = factored_operator(z, head, loss)
        return {"H": H, "M_blocks": M}
    if route == "closed-form":
        H, M, _ = closed_form_operator(z, head, loss)
        return {"H": H, "M": M}
    method = "autodiff" if route == "blocks-autodiff" else "closed_form"
    return {"blocks": effective_hessian_blocks(z, head, loss, method=method)}


def _ex(route, spec, objective, seed, **kw):
    params = {"m": 2, "d": 3, "k": 3, "widths": [4] * (0 if spec == "linear" else int(spec[-1]) - 1), "tau": 0.1,
              "predictor": None, "coeffs": (25.0, 25.0, 1.0), "lambd": 5e-3, **kw}
    return (route, (spec, objective, seed, params))


@given(inst=routed_instances())
@example(inst=_ex("operator", "swish2", "simclr", 1, tau=0.5))
@example(inst=_ex("operator-forward", "gelu3", "vicreg", 2))
@example(inst=_ex("factored", "gelu2", "simclr", 4, m=3, d=4, k=2, tau=0.5))
@example(inst=_ex("closed-form", "tanh2", "byol", 5, predictor="gelu2"))
@example(inst=_ex("blocks", "tanh3", "simsiam", 2, predictor="swish2", widths=[3, 5]))
@example(inst=_ex("blocks-autodiff", "softplus2", "byol", 3, predictor="linear"))
def test_scale_routes_are_equation_1(inst) -> None:
    """Each route's products (one random unit vector per operator), blocks and ``rho`` against autograd's
    dense ``H_eff``, ``G``, ``M``; Lanczos on each operator ``H`` finds both ends of ``eigvalsh(H_eff)``;
    the blocks' eigenvalues are the whole spectrum. ``factored`` also builds ``dense()`` by its routes."""
    torch = _torch()
    from scale.curvature.blocks import factored_operator
    from scale.curvature.lanczos import lanczos

    route, built = inst
    b = Built(*built)
    n, d = b.Z.shape
    ref = b.reference()
    scale = eq1_scale(ref)
    premise("curvature_nonzero", scale, f"every ReLU dead on the batch: H_eff = G = M = 0 at {b}")
    tol = OP_REL_TOL * scale  # ... plus, for NT-Xent, the round-off of the terms its curvature cancels
    if b.name == "simclr":
        J_norm = max(np.linalg.norm(J, 2) for J in np.asarray(head_derivatives(b.head, b.Z).J))
        tol += ROUNDOFF_REL * nt_xent_term_scale(b.head(b.Z), b.params["tau"], J_norm)
    eig = np.linalg.eigvalsh(ref.H)
    got = route_operators(route, b)
    if "blocks" in got:
        blk = got["blocks"]
        for part, want in ((blk.G, ref.G), (blk.M, ref.M), (blk.H, ref.H)):  # zero off the blocks too
            assert np.abs(block_diagonal(part.numpy()) - want).max() <= tol, (route, b)
        assert np.abs(np.sort(blk.eig_H.numpy().ravel()) - eig).max() <= tol, (route, b)
        return
    v = unit_columns(n * d, 1, b.seed)[:, 0]
    for name, A in (("H", ref.H), ("G", ref.G), ("M", ref.M)):
        if name in got:
            err = float(np.linalg.norm(got[name].matvec(torch.as_tensor(v)).numpy() - A @ v))
            assert err <= tol, (route, name, err / scale, b)
    if "M_blocks" in got:
        assert np.abs(block_diagonal(got["M_blocks"].numpy()) - ref.M).max() <= tol, (route, b)
    if "rho" in got:
        assert np.abs(got["rho"].numpy() - ref.rho).max() <= OP_REL_TOL * rho_scale(ref)
    if route == "factored":
        for dense in ("assemble", "products") if b.name == "simclr" else ("products",):
            z, head, loss = torch.as_tensor(b.Z), b.torch_head(), b.torch_loss()
            H_dense = factored_operator(z, head, loss, dense=dense)[0].dense().numpy()
            assert np.abs(H_dense - ref.H).max() <= tol, (dense, b)
    spec_scale = max(abs(eig[0]), abs(eig[-1]))
    premise("curvature_nonzero", spec_scale, f"H_eff = 0 while G, M are not at {b}")
    # the operator is H_eff to OP_REL_TOL of the eq. (1) scale (the products above), so is its spectrum
    check_lanczos_ends(lanczos(got["H"], seed=b.seed % 2**31), eig, spec_scale, (route, b), tol)


@pytest.mark.parametrize("spec", ("gelu2", "swish3", "tanh2"))
@pytest.mark.parametrize("objective", ("simclr", "simsiam", "byol", "vicreg"))
def test_negative_control_the_operators_gauss_newton_part_alone_misses_H_eff(spec: str, objective: str) -> None:
    """Smooth heads with ``rho != 0``: ``G v`` differs from ``H_eff v`` by more than ``MATERIAL_REL`` of the
    scale for some unit ``v`` (``M`` is material), so the product comparison can fail."""
    torch = _torch()
    from scale.curvature.operators import EffectiveHessian

    b = Built(spec, objective, 3, {"m": 3, "d": 3, "k": 3, "widths": [5] * (int(spec[-1]) - 1), "tau": 0.2,
                                   "predictor": f"{spec[:-1]}2", "coeffs": (25.0, 25.0, 1.0), "lambd": 5e-3})
    ref = b.reference()
    E = EffectiveHessian(torch.as_tensor(b.Z), b.torch_head(), b.torch_loss())
    V = unit_columns(b.Z.size, 4, 0)
    assert worst(lambda v: E.G.matvec(torch.as_tensor(v)).numpy(), ref.H, V) > MATERIAL_REL * eq1_scale(ref)


# --------------------------------------------------------------------------------------------------
# (5) Lanczos against eigvalsh on matrices of chosen spectrum (torch)
# --------------------------------------------------------------------------------------------------


@st.composite
def lanczos_spectra(draw) -> np.ndarray:
    """Spectra of ``N`` in [2, 80] eigenvalues: magnitudes log-uniform in ``[SPECTRUM_GAP, 1]`` with random
    signs, ``n_zero`` exact zeros; shapes: generic, clustered ends (a pair ``1e-8`` apart at each end),
    few distinct values (multiplicities); times a scale from 1e-8 to 1e8."""
    N = draw(st.integers(2, 80))
    rng = np.random.default_rng(draw(seeds))
    shape = draw(st.sampled_from(["generic", "clustered", "repeated", "definite"]))
    mags = 10.0 ** rng.uniform(np.log10(SPECTRUM_GAP), 0.0, N)
    signs = np.ones(N) if shape == "definite" else rng.choice([-1.0, 1.0], N)
    eig = signs * mags
    if shape == "repeated":
        eig = rng.choice(eig[: max(1, N // 8)], N)
    if shape == "clustered" and N >= 4:
        eig = np.sort(eig)
        eig[1], eig[-2] = eig[0] + 1e-8 * abs(eig[0]), eig[-1] - 1e-8 * abs(eig[-1])
    n_zero = draw(st.integers(0, N // 4))
    eig[rng.permutation(N)[:n_zero]] = 0.0  # at most N // 4 of them: the spectrum is never all zero
    return np.sort(eig) * 10.0 ** draw(st.floats(-8.0, 8.0))


@given(eig=lanczos_spectra(), k=st.integers(1, 3), seed=seeds)
@example(eig=np.array([-2.0, -1.0, 0.0, 0.0, 1.0, 1.0, 3.0]), k=1, seed=0)
@example(  # an end pair 1e-8 apart: theta_min is the upper member's, 3.6e-11 of the scale above lambda_min
    eig=np.array([-7.82582215e-05, -7.82582207e-05, -4.14394960e-05, -2.78232481e-05, -2.70436559e-05,
                  -2.46080217e-05, -2.89727075e-06, -2.74697728e-06, 1.28552508e-05, 1.58104657e-02,
                  1.58104659e-02]), k=1, seed=1)
@example(  # multiplicities: stopped on its residual estimate, the returned top pair's residual is 1.003 tol
    eig=np.repeat([-7.32753120e-06, 7.42999826e-05, 3.46703874e-04, 1.17741550e-03, 4.91922495e-01, 5.04408246e-01],
                  [9, 10, 6, 8, 9, 7]), k=1, seed=8191)
def test_lanczos_ends_are_the_spectrum_ends(eig: np.ndarray, k: int, seed: int) -> None:
    torch = _torch()
    from scale.curvature.lanczos import lanczos
    from scale.curvature.operators import operator_from_matrix

    rng = np.random.default_rng(seed)
    A = matrix_with_spectrum(eig, rng)
    A = 0.5 * (A + A.T)
    lam = np.linalg.eigvalsh(A)  # the spectrum of the matrix as built, to its rounding
    scale = float(np.abs(lam).max())
    N = len(lam)
    res = lanczos(operator_from_matrix(torch.as_tensor(A)), k=k, seed=seed % 2**31)
    theta, m = res.ritz_all, res.n_iter
    tol = RITZ_ROUNDOFF * scale
    # Cauchy interlacing: theta_j >= lambda_j and theta_{m-1-j} <= lambda_{N-1-j}
    assert len(theta) == m and np.all(np.diff(theta) >= 0)
    assert np.all(theta >= lam[:m] - tol) and np.all(theta[::-1] <= lam[::-1][:m] + tol), (theta, lam)
    # both ends: within the tolerance (and the end's cluster) of the spectrum's ends
    check_lanczos_ends(res, lam, scale, (N, k, seed))
    # the residuals are what they claim: |A y - theta y| for unit Ritz vectors y
    Y = res.vectors.numpy()
    assert np.allclose(np.linalg.norm(Y, axis=0), 1.0, rtol=0, atol=1e-12)
    assert np.all(np.abs(np.linalg.norm(A @ Y - Y * res.values, axis=0) - res.residuals) <= tol)
    # negative curvature: a lower bound, exact once the Krylov space is the whole space
    n_neg = int(np.sum(lam < -NEG_FLOOR * scale))
    assert res.n_negative <= n_neg
    if res.exhausted:
        assert m == N and np.all(np.abs(theta - lam) <= tol) and res.n_negative == n_neg


def test_negative_control_lanczos_stopped_early_misses_the_ends_and_says_so() -> None:
    """Two products on a generic spectrum of 40: the ends are not converged, the result says so, and
    ``lambda_min`` is missed by more than ``MATERIAL_REL`` of the scale."""
    torch = _torch()
    from scale.curvature.lanczos import lanczos
    from scale.curvature.operators import operator_from_matrix

    rng = np.random.default_rng(0)
    eig = np.linspace(-1.0, 2.0, 40)
    res = lanczos(operator_from_matrix(torch.as_tensor(matrix_with_spectrum(eig, rng))), max_iter=2)
    assert not res.ends_converged and not res.exhausted
    assert abs(res.lambda_min - eig[0]) > MATERIAL_REL * 2.0
