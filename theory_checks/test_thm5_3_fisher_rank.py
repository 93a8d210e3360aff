"""Theorem 5.3 (information hierarchy): ``rank(I_h) <= rank(I_z) - dim(V_aug)`` for an invariant head.

Statement (docs/paper.md, paraphrase): for the Fisher information of the head output versus the backbone
representation, ``rank(I_h(z)) <= rank(I_z) - dim(V_aug)``: the head is a geometric low-pass filter,
the backbone keeps the full dimension.

Exact setting checked here. Latent parameters ``xi = (s, t)``: semantic ``s`` in ``R^a`` and
augmentation ``t`` in ``R^g``. Representation ``z(xi) = g_t . x0(s)`` with ``x0(s) = c + B s +
tanh(C s) / 2`` (a curved a-dimensional family) and ``g_t`` a group action. Gaussian observation
models ``y = z(xi) + sigma eps`` and ``y = h(z(xi)) + sigma eps`` have Fisher informations
``I_z = J_z^T J_z / sigma^2`` and ``I_h = (J_h J_z)^T (J_h J_z) / sigma^2`` (``(a + g) x (a + g)``).
If ``h`` is invariant (``J_h V_aug = 0``) and ``V_aug(z) = span(dz/dt)`` lies in the column space of
``J_z`` (it does: its columns are the ``t``-columns of ``J_z``), then ``J_h`` maps ``col(J_z)`` through
the quotient by ``V_aug``, so ``rank(I_h) = rank(J_h J_z) <= rank(J_z) - dim(V_aug)``: the bound
always holds. Equality holds generically when the invariants separate the semantic directions and the
head is wide enough (hidden widths and ``k`` at least ``a``); the instances below are of that kind,
so equality is asserted too.

Ranks are decided, not assumed. Float64 decides a rank where the singular values of the Jacobian ``J`` of
``xi -> phi(xi)`` (autograd) leave a clear margin: every one at or below the *structural-zero level* or at or
above ``THIN_SV_RTOL x sigma_max``. The structural-zero level is float64's error bound on ``J``, not a
tolerance of the project's choosing: ``J = J_head J_reads`` is computed in float64 from products and sums, so
(Higham's bound for a product, ``|fl(AB) - AB| <= gamma_n |A| |B|``) an entry that is exactly 0 in the ideal
instance comes out at most ``c n eps F`` with ``F = |J_head|_2 |J_reads|_2`` (``|J|_2`` without a head), ``n =
q + p`` the Jacobian's dimensions and ``c`` covering the chains inside ``reads``; the instance's own float64
data (an orthogonal ``Q`` exact only to its rounding, so its head is invariant only to ~1e-16) move an exact
zero by the same order. ``STRUCTURAL_ROUNDOFF`` is that ``c``: 32, where 600 drawn instances measured at most
3.4 (``structural_zero``). It is pinned by ``test_structural_zero_level_boundary_instance``: a Jacobian with a
real singular value at three times the level, which a level 10x looser reads as a zero.

Where a singular value lies between the level and ``THIN_SV_RTOL x sigma_max`` (a rank resting on a direction
weaker than 1e-4 of the strongest, whose Fisher eigenvalue is below 1e-8 of the largest: a thin margin, met by
drawn instances too, about one in twenty heads), the rank is decided by a certificate in ball arithmetic
(``certify``): ``rank >= r`` by an ``r x r`` minor of the ball Jacobian whose ball excludes 0, and the ``m``
columns the theory says vanish (the augmentation directions of an invariant head, the fixed planes of a
degenerate orbit) certified below the structural-zero level, as balls. (Not 0: the instance's orthogonal ``Q``
is a float64 matrix; the ball computation measures that defect rather than assuming it away.) No instance is
discarded for want of precision. ``mini.invariance.fisher_rank`` (eigenvalues of ``I`` above its eigensolver's
round-off, ``p eps``) must then equal the decided rank wherever ``I``'s smallest nonzero eigenvalue lies
above ``I_RESOLVED x p eps`` of the largest (below that the float64 matrix ``I`` itself no longer carries it).

The Fisher matrices' values, not only their ranks (a ``J J^T`` / ``J^T J`` mix-up keeps the rank), are checked
against an independent computation that shares no code with ``mini``: the Jacobian in ball arithmetic (Taylor
arithmetic over Arb balls, from the instance's exact float64 inputs; its midpoint is exact to far below
float64), ``I_ref = J_ball^T J_ball / sigma^2``, entrywise within ``REF_RTOL`` of ``|I_ref|_2``; and,
at a pinned instance, the definition itself, ``I = E[s s^T]`` with the score ``s = grad_xi log p(y | xi) =
J^T (y - phi(xi)) / sigma^2`` averaged over ``MC_SAMPLES`` draws of ``y`` (within ``MC_RTOL``, five
Monte-Carlo standard errors). ``sigma`` runs over ``SIGMAS`` (ten decades): ``sigma^2 I`` must not change, nor
the ranks (a rank with an absolute tolerance would change with ``sigma``). (An earlier reference, central
differences Richardson-extrapolated under a premise that two step sizes agree, is gone: the ball Jacobian
needs no premise.)

The domain drawn (``torus_instances``): ``d`` in [3, 9], a torus ``T^g`` with ``1 <= g <= d // 2``, the
point at the centre of ``f < g`` of its rotating planes (a degenerate orbit: ``dim V_aug = g - f``, the
semantic family inside that fixed set), ``a`` in [1, d - g - f] semantic dimensions, heads of depth 2-4
of every smooth activation with hidden widths ``a + [0, 3]`` and ``k = a + [0, 2]`` outputs, and an
input offset ``spread`` in [0, 2]: the head reads ``q(z) - q(z_0) + spread u`` (``u`` a fixed random
unit-scale vector, ``z_0`` the evaluation point), so ``spread = 0`` puts every hidden unit at its bias
and larger spreads push units towards saturation (near-degenerate heads). Equality needs every hidden
unit alive (``|s'(a)| >= DEAD_SLOPE``: a unit with no slope is a unit the head does not have, and the
width premise counts units); the bound is asserted on every decidable instance.

Finding (the earlier form of this check). With the invariants fed raw into the MLP (``mlp(q(z))``, ``q``
holding squared radii of size up to ~10) and widths ``a + 2``, fresh random instances failed the
asserted equality (d=8, g=1, a=4, gelu2, seed 629: ``rank I_h = 3``, not 4): three of the
six GELU units sat at pre-activations -5 to -11, where ``s'`` is 1e-5 to 1e-26, and the fourth
direction's Fisher eigenvalue was 1.8e-13 of the largest. Decided at last: its exact rank is 4 (a certified
4 x 4 minor), the equality holds, and it was ``fisher_rank``'s own tolerance (1e-10 on ``I``) that miscounted;
with the round-off threshold ``p eps`` it counts 4. The instance is pinned.

Negative control: for a non-invariant head of the same kind (the MLP applied to ``z - z_0 + spread u``,
``k >= a + g``) the bound fails, ``rank(I_h) > rank(I_z) - dim(V_aug)``: it keeps the full rank of
``I_z``. With ``k = a + g`` outputs (square on ``col(J_z)``) and the raw ``z`` as input, fresh draws came
within the rank tolerance of losing a direction (d=6, g=1, a=5, gelu3, seed 6); the control's output is
now at least two wider than ``a + g`` and its units start at their biases.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import autograd.numpy as anp
import certify
import numpy as np
from _invariance_strategies import Torus
from autograd import jacobian
from hypothesis import currently_in_test_context, example, given, note, settings
from hypothesis import strategies as st

from conftest import boundary, examples, gate, seeds
from mini.heads import ACTIVATIONS, Head, derivatives, init_head, preactivations
from mini.invariance import fisher_information, fisher_rank
from mini.manifolds import MANIFOLDS, make_manifold

SIGMAS = 10.0 ** np.arange(-4.0, 7.0, 2.0)  # observation noise 1e-4 ... 1e6: I scales by 1 / sigma^2
REF_RTOL = 1e-10  # |I - J_ball^T J_ball|_max / |I_ref|_2: autograd's round-off against an exact reference
SCALE_RTOL = 1e-12  # |sigma^2 I(sigma) - I(1)|_max / |I(1)|_2: one division, round-off only
MC_SAMPLES = 20000
MC_RTOL = 5.0 * np.sqrt(2.0 / MC_SAMPLES)  # five standard errors of a sample second moment
STRUCTURAL_ROUNDOFF = 32.0  # c of the structural-zero level c (q + p) eps |J_head| |J_reads| (measured: <= 3.4)
THIN_SV_RTOL = 1e-4  # at or above (x sigma_max): float64 decides "nonzero"; from the level to here: a certificate
EPS = float(np.finfo(float).eps)
I_RESOLVED = 10.0  # fisher_rank is held to the exact rank where I's nonzero eigenvalues exceed 10 p eps
SMOOTH = tuple(a for a in ACTIVATIONS if a != "relu")
DEPTHS = (2, 3, 4)


@dataclass(frozen=True)
class Model:
    """``xi -> head(reads(xi))`` (``head`` None: ``xi -> reads(xi)``), with the columns of ``J`` the theory
    says vanish (augmentation directions of an invariant head, fixed planes of a degenerate orbit)."""

    name: str
    reads: Callable
    head: Head | None
    null_columns: tuple[int, ...]

    def __call__(self, xi):
        x = self.reads(xi)
        return x if self.head is None else self.head(anp.reshape(x, (1, -1)))[0]

    def ball(self, xi):
        """The same map on an object array of ``certify.Taylor`` (the head through ``certify.ball_head``)."""
        x = self.reads(xi)
        return x if self.head is None else certify.ball_head(self.head, np.reshape(x, (1, -1)))[0]

    def head_input(self, xi) -> np.ndarray:
        return np.reshape(np.asarray(self.reads(xi), dtype=float), (1, -1))


@dataclass(frozen=True)
class Rank:
    """The rank of ``J`` decided: ``lo <= rank <= hi`` (equal unless a certificate could bound one side only),
    how (``float64`` or the certificates), and ``I``'s smallest nonzero eigenvalue over its largest."""

    lo: int
    hi: int
    how: str
    smallest_rel: float


def ball_jacobian(model: Model, xi: np.ndarray) -> np.ndarray:
    return certify.jacobian(model.ball, xi)


def product_scale(model: Model, xi: np.ndarray) -> float:
    """``F = |J_head|_2 |J_reads|_2`` (``|J_reads|_2`` without a head): the size of the products ``J`` is summed
    from, which bounds float64's error on it."""
    J_reads = np.atleast_2d(jacobian(model.reads)(xi))
    if model.head is None:
        return float(np.linalg.norm(J_reads, 2))
    x = np.asarray(model.reads(xi), dtype=float)
    J_head = np.atleast_2d(jacobian(lambda u: model.head(anp.reshape(u, (1, -1)))[0])(x))
    return float(np.linalg.norm(J_head, 2) * np.linalg.norm(J_reads, 2))


def structural_zero(model: Model, xi: np.ndarray, shape: tuple[int, int]) -> float:
    """The structural-zero level of ``J`` (q, p): ``STRUCTURAL_ROUNDOFF (q + p) eps F`` (module docstring)."""
    return STRUCTURAL_ROUNDOFF * sum(shape) * EPS * product_scale(model, xi)


def decided_rank(model: Model, xi: np.ndarray, J_ball: np.ndarray) -> Rank:
    """Float64 where every singular value of ``J`` is at or below the structural-zero level or at or above
    ``THIN_SV_RTOL x sigma_max``; else certificates: ``rank >= p - m`` by a minor, the ``m`` null columns
    certified below the structural-zero level (so ``rank <= p - m`` at that level)."""
    J = np.atleast_2d(jacobian(model)(xi))
    sv = np.linalg.svd(J, compute_uv=False)
    level = structural_zero(model, xi, J.shape)
    rel = sv / sv[0] if sv[0] > 0 else sv
    zero, clear = sv <= level, rel >= THIN_SV_RTOL
    p = xi.size
    if np.all(zero | clear):
        r = int(np.sum(clear))
        return Rank(r, r, "float64", float(rel[r - 1] ** 2) if r else 0.0)
    hi = p - len(model.null_columns)
    how = []
    if model.null_columns:
        cols = list(model.null_columns)
        how.append(str(certify.bounded(lambda: ball_jacobian(model, xi)[:, cols], level, f"J_{model.name} e_t")))
    try:
        how.append(str(certify.rank_at_least(lambda: ball_jacobian(model, xi), hi, f"J_{model.name}")))
        lo = hi
    except certify.Undecided:  # only the float64-clear directions are certain: bound from below by them
        lo = int(np.sum(clear))
        how.append(str(certify.rank_at_least(lambda: ball_jacobian(model, xi), lo, f"J_{model.name}")))
    if currently_in_test_context():
        note(f"{model.name}: singular values in the band {rel[~(zero | clear)]}; " + "; ".join(how))
    return Rank(lo, hi, "; ".join(how), float(rel[hi - 1] ** 2) if hi else 0.0)


def check_fisher_values(model: Model, xi: np.ndarray) -> Rank:
    """``fisher_information(model, xi, sigma)`` against ``J_ball^T J_ball / sigma^2`` for every ``sigma`` in
    ``SIGMAS``, ``sigma``-independence of ``sigma^2 I`` and of ``fisher_rank``; the rank decided, and
    ``fisher_rank`` equal to it wherever ``I`` resolves it."""
    J_ball = ball_jacobian(model, xi)
    J = certify.midpoints(J_ball)  # (q, p): exact to the balls' radii, far below float64
    ref = J.T @ J  # sigma = 1
    I_1 = fisher_information(model, xi, 1.0)
    rank = fisher_rank(I_1)
    for sigma in SIGMAS:
        I = fisher_information(model, xi, sigma)
        assert I.shape == ref.shape, f"Fisher information has shape {I.shape}, the model has {xi.size} parameters"
        assert np.abs(I - ref / sigma**2).max() <= REF_RTOL * np.linalg.norm(ref, 2) / sigma**2
        assert np.abs(sigma**2 * I - I_1).max() <= SCALE_RTOL * np.linalg.norm(I_1, 2)
        assert fisher_rank(I) == rank, f"rank {fisher_rank(I)} at sigma={sigma:g}, {rank} at sigma=1"
    decided = decided_rank(model, xi, J_ball)
    resolved = decided.smallest_rel > I_RESOLVED * xi.size * np.finfo(float).eps
    if decided.lo == decided.hi and resolved:
        assert rank == decided.lo, f"fisher_rank = {rank}, the exact rank is {decided.lo} ({decided.how})"
    return decided


def units_alive(head, X: np.ndarray) -> float:
    """The smallest ``|s'(a)|`` over the hidden units of ``head`` at the inputs ``X`` (the alive premise)."""
    return min(float(np.abs(derivatives(head.spec.activation, a)[0]).min()) for a in preactivations(head, X))


def semantic_family(d: int, a: int, rng: np.random.Generator, basis: np.ndarray | None = None):
    """``s -> E (c + B s + tanh(C s) / 2)``: a curved ``a``-dimensional family in the span of ``E``
    (d, m) (``R^d`` when ``basis`` is None)."""
    E = np.eye(d) if basis is None else basis
    m = E.shape[1]
    c = rng.standard_normal(m)
    B = rng.standard_normal((m, a)) / np.sqrt(a)
    C = rng.standard_normal((m, a))
    return lambda s: anp.dot(E, c + anp.dot(B, s) + 0.5 * anp.tanh(anp.dot(C, s)))


@dataclass(frozen=True)
class FisherCase:
    """``z``, the invariant head ``h`` and the ``control`` as ``Model``s of ``xi``; ``dim_v`` and ``a``."""

    z: Model
    h: Model
    control: Model
    xi: np.ndarray
    dim_v: int
    a: int


@st.composite
def head_shapes(draw, a: int) -> dict:
    """A smooth head of depth 2-4 with hidden widths ``a + [0, 3]`` and ``k = a + [0, 2]`` outputs."""
    depth = draw(st.sampled_from(DEPTHS))
    return {"spec": f"{draw(st.sampled_from(SMOOTH))}{depth}", "k": a + draw(st.integers(0, 2)),
            "widths": [a + draw(st.integers(0, 3)) for _ in range(depth - 1)]}


@st.composite
def torus_instances(draw) -> dict:
    d = draw(st.integers(3, 9), label="d")
    g = draw(st.integers(1, d // 2), label="g")
    f = draw(st.integers(0, min(g - 1, d - g - 1)), label="fixed planes")  # leaves a >= 1 and dim V_aug >= 1
    a = draw(st.integers(1, d - g - f), label="a")
    return {"d": d, "g": g, "fixed": f, "a": a, "head": draw(head_shapes(a)), "spread": draw(st.floats(0.0, 2.0)),
            "seed": draw(seeds)}


PINNED_TORUS = {"d": 5, "g": 2, "fixed": 0, "a": 2, "head": {"spec": "gelu3", "k": 3, "widths": [4, 4]},
                "spread": 0.5, "seed": 0}
PINNED_DEGENERATE_ORBIT = {"d": 7, "g": 3, "fixed": 2, "a": 2,
                           "head": {"spec": "swish2", "k": 2, "widths": [2]}, "spread": 0.0, "seed": 1}
# A head with a unit between the alive threshold and ten times it (the premise's boundary instance).
ALIVE_BOUNDARY = {"d": 5, "g": 2, "fixed": 0, "a": 2, "head": {"spec": "tanh2", "k": 2, "widths": [2]},
                  "spread": 0.0, "seed": 3, "first_bias": 9.05}  # tanh'(9.05) = 5.5e-8


def torus_case(d: int, g: int, fixed: int, a: int, head: dict, spread: float, seed: int,
               first_bias: float | None = None) -> FisherCase:
    """``z(xi) = g_t . x0(s)`` on a random ``T^g`` with ``x0`` in the fixed set of the first ``fixed`` planes;
    the invariant head ``mlp(q(z) - q(z_0) + spread u)``, the control ``mlp'(z - z_0 + spread u')``.
    ``first_bias`` replaces the first hidden unit's bias (with ``spread = 0`` it is that unit's pre-activation)."""
    rng = np.random.default_rng(seed)
    torus = Torus(d, g, rng)
    x0 = semantic_family(d, a, rng, basis=torus.Q[:, 2 * fixed:])  # zero in the first `fixed` planes

    def phi_z(xi):
        return torus.act(x0(xi[:a]), xi[a:])

    xi = np.concatenate([0.5 * rng.standard_normal(a), rng.uniform(-np.pi, np.pi, g)])
    z0 = phi_z(xi)
    V = torus.tangents(z0)
    dim_v = fisher_rank(V.T @ V)
    mlp = init_head(head["spec"], d - g, head["k"], head["widths"], rng)
    if first_bias is not None:
        first = {**mlp.layers[0], "b": np.concatenate([[first_bias], mlp.layers[0]["b"][1:]])}
        mlp = mlp.with_layers([first, *mlp.layers[1:]])
    q_in = torus.invariants(z0[None, :])[0] - spread * rng.standard_normal(d - g)  # the MLP reads q(z) - q_in
    n_out = a + g + 2 + int(rng.integers(0, 2))
    control = init_head(head["spec"], d, n_out, [n_out + 1] * (mlp.spec.n_layers - 1), rng)
    z_in = z0 - spread * rng.standard_normal(d)
    fixed_cols = tuple(range(a, a + fixed))

    def reads_h(xi):
        return torus.invariants(anp.reshape(phi_z(xi), (1, -1)))[0] - q_in

    return FisherCase(Model("z", phi_z, None, fixed_cols), Model("h", reads_h, mlp, tuple(range(a, a + g))),
                      Model("control", lambda xi: phi_z(xi) - z_in, control, fixed_cols), xi, dim_v, a)


def check_fisher_case(case: FisherCase, expected_dim_v: int) -> None:
    """Theorem 5.3's bound, equality where every unit is alive, and the control, on decided ranks."""
    r_z = check_fisher_values(case.z, case.xi)
    r_h = check_fisher_values(case.h, case.xi)
    assert case.dim_v == expected_dim_v, f"dim V_aug = {case.dim_v}, the orbit has {expected_dim_v} directions"
    assert r_z.lo == r_z.hi == case.a + case.dim_v, f"rank I_z = {r_z}: xi -> z is not an immersion here"
    assert r_h.hi <= r_z.lo - case.dim_v, f"Theorem 5.3 fails: rank I_h = {r_h} > {r_z.lo} - {case.dim_v}"
    if gate("alive_units", units_alive(case.h.head, case.h.head_input(case.xi))):
        assert r_h.lo == r_z.hi - case.dim_v, f"equality fails with every unit alive: rank I_h = {r_h}"
    # Negative control: a non-invariant head of the same kind keeps the augmentation directions.
    r_control = check_fisher_values(case.control, case.xi)
    assert r_control.lo > r_z.hi - case.dim_v, f"the control head satisfies the bound: rank {r_control}"
    if gate("alive_units", units_alive(case.control.head, case.control.head_input(case.xi))):
        assert r_control.lo == r_z.hi


@given(inst=torus_instances())
@example(inst=PINNED_TORUS)
@example(inst=PINNED_DEGENERATE_ORBIT)  # the point at the centre of two of three rotating planes: dim V_aug = 1
def test_fisher_rank_drops_by_dim_v_aug_on_torus(inst: dict) -> None:
    """Random ``T^g`` on ``R^d``, a point on an orbit of dimension ``g - fixed``: bound, equality, control."""
    check_fisher_case(torus_case(**inst), expected_dim_v=inst["g"] - inst["fixed"])


def test_alive_units_boundary_instance() -> None:
    """The alive premise's boundary: a tanh unit pushed to ``|s'| `` within (1, 10] x the threshold, where the
    equality must still be asserted and hold (a premise widened 10x sets this instance aside: a failure)."""
    case = torus_case(**ALIVE_BOUNDARY)
    boundary("alive_units", units_alive(case.h.head, case.h.head_input(case.xi)), "Fisher alive units")
    check_fisher_case(case, expected_dim_v=ALIVE_BOUNDARY["g"])


# A Jacobian (4 x 4: q + p = 8, |J|_2 = 1) with a real singular value of 1.5e-13, 2.6 times today's structural-zero
# level (32 x 8 x eps = 5.7e-14), written as a number so that the level, not the instance, moves with the constant.
STRUCTURAL_BOUNDARY = {"sigmas": (1.0, 0.5), "small": 1.5e-13, "seed": 0}


def structural_boundary_model(sigmas: tuple[float, ...], small: float, seed: int) -> Model:
    """``xi -> A xi`` with ``A = [U diag(sigmas, small) V^T, 0]``: singular values ``sigmas`` and ``small``, and an
    exact zero column (flagged null)."""
    rng = np.random.default_rng(seed)
    p = len(sigmas) + 1
    U = np.linalg.qr(rng.standard_normal((p + 1, p)))[0]  # (p + 1, p): J is square with the zero column
    V = np.linalg.qr(rng.standard_normal((p, p)))[0]
    A = np.concatenate([(U * np.array([*sigmas, small])) @ V.T, np.zeros((p + 1, 1))], axis=1)
    return Model("boundary", lambda xi: anp.dot(A, xi), None, (p,))  # A: (p + 1, p + 1)


def test_structural_zero_level_boundary_instance() -> None:
    """The structural-zero level pinned: a Jacobian with a real singular value between the level and ten times
    it (and an exact zero column) has rank ``p``, decided (by certificate: the value lies in the thin band) and
    equal to the exact rank. A level 10x looser reads that direction as a structural zero and miscounts."""
    model = structural_boundary_model(**STRUCTURAL_BOUNDARY)
    xi = np.linspace(0.5, 1.0, len(STRUCTURAL_BOUNDARY["sigmas"]) + 2)
    J = np.atleast_2d(jacobian(model)(xi))
    sv = np.linalg.svd(J, compute_uv=False)
    level = structural_zero(model, xi, J.shape)
    assert level < sv[-2] <= 10 * level and sv[-1] == 0.0, f"singular values {sv}, level {level:.2e}: not inside"
    rank = decided_rank(model, xi, ball_jacobian(model, xi))
    assert rank.lo == rank.hi == xi.size - 1, f"the direction at {sv[-2]:.2e} (level {level:.2e}) miscounted: {rank}"


def test_pinned_saturated_raw_head_is_decided_by_certificate() -> None:
    """The finding's instance in its earlier form (``mlp(q(z))``, raw invariants, widths ``a + 2``): three of
    six GELU units saturated and a singular value at 4e-7 of the largest (a thin margin: decided by
    certificate). Its rank is 4 (a 4 x 4 minor excludes 0; the augmentation column is certified below the
    structural-zero level), so the equality holds, and ``fisher_rank`` counts 4 too."""
    d, g, a, seed = 8, 1, 4, 629
    rng = np.random.default_rng(seed)
    torus = Torus(d, g, rng)
    x0 = semantic_family(d, a, rng)

    def phi_z(xi):
        return torus.act(x0(xi[:a]), xi[a:])

    xi = np.concatenate([0.5 * rng.standard_normal(a), rng.uniform(-np.pi, np.pi, g)])
    mlp = init_head("gelu2", d - g, a + 1, a + 2, rng)
    h = Model("h", lambda xi: torus.invariants(anp.reshape(phi_z(xi), (1, -1)))[0], mlp, (a,))
    pre = np.asarray(preactivations(mlp, h.head_input(xi))[0])
    assert np.sum(pre < -4.0) == 3  # three units on GELU's flat side (at -5, -7, -11: s' ~ 1e-5 ... 1e-26)
    r_h = check_fisher_values(h, xi)
    assert r_h.lo == r_h.hi == a, f"rank I_h = {r_h}"
    assert fisher_rank(fisher_information(h, xi)) == a
    # The float64 decision (a singular value at 4e-7, above the band) confirmed by certificates.
    minor = certify.rank_at_least(lambda: ball_jacobian(h, xi), a, "J_h")
    small = certify.bounded(lambda: ball_jacobian(h, xi)[:, [a]], structural_zero(h, xi, (a + 1, xi.size)),
                            "J_h e_t")
    print(f"seed-629 instance: rank I_h = {a}: {minor}; {small}")


@st.composite
def toy_instances(draw) -> dict:
    a = draw(st.integers(1, 3), label="a")
    return {"name": draw(st.sampled_from(MANIFOLDS)), "a": a, "head": draw(head_shapes(a)),
            "spread": draw(st.floats(0.0, 2.0)), "seed": draw(seeds)}


def toy_case(name: str, a: int, head: dict, spread: float, seed: int) -> FisherCase:
    """Hue, shift or scaling: ``z(xi) = g_t . (x_base + B s)``, heads centred as on the torus."""
    rng = np.random.default_rng(seed)
    M = make_manifold(name, seed=seed % 5)
    x_base = M.templates[int(rng.integers(M.n_classes))]
    B = 0.3 * rng.standard_normal((M.dim, a))

    def phi_z(xi):
        return M.act(anp.reshape(x_base + anp.dot(B, xi[:a]), (1, -1)), xi[a])[0]

    xi = np.concatenate([0.3 * rng.standard_normal(a), rng.uniform(-1.0, 1.0, 1)])
    z0 = phi_z(xi)
    q = M.invariants(z0[None, :])
    mlp = init_head(head["spec"], q.shape[1], head["k"], head["widths"], rng)
    q_in = q[0] - spread * rng.standard_normal(q.shape[1])
    n_out = a + 3 + int(rng.integers(0, 2))
    control = init_head(head["spec"], M.dim, n_out, [n_out + 1] * (mlp.spec.n_layers - 1), rng)
    z_in = z0 - spread * rng.standard_normal(M.dim)

    def reads_h(xi):
        return M.invariants(anp.reshape(phi_z(xi), (1, -1)))[0] - q_in

    V = M.tangent(z0[None, :])[0][:, None]
    return FisherCase(Model("z", phi_z, None, ()), Model("h", reads_h, mlp, (a,)),
                      Model("control", lambda xi: phi_z(xi) - z_in, control, ()), xi, fisher_rank(V.T @ V), a)


@settings(max_examples=examples(0.5))  # each example's reference Jacobians are computed in ball arithmetic
@given(inst=toy_instances())
@example(inst={"name": "hue", "a": 3, "head": {"spec": "tanh2", "k": 4, "widths": [5]}, "spread": 0.0, "seed": 0})
def test_fisher_rank_drops_by_one_on_toy_manifolds(inst: dict) -> None:
    """Hue, shift, scaling (``dim V_aug = 1``): an invariant head loses exactly the augmentation direction."""
    check_fisher_case(toy_case(**inst), expected_dim_v=1)


def test_fisher_information_is_the_expected_outer_product_of_the_score():
    """Definition check at a pinned instance: ``I = E[s s^T]``, ``s = grad_xi log N(y; phi(xi), sigma^2 I)``,
    by Monte Carlo (fixed seed), for a head with ``q != p`` and one with ``q == p`` (where ``J J^T`` would
    have the right shape and the wrong values)."""
    rng = np.random.default_rng(0)
    d, g, a = 5, 1, 2
    torus = Torus(d, g, rng)
    x0 = semantic_family(d, a, rng)
    xi = np.concatenate([0.5 * rng.standard_normal(a), rng.uniform(-np.pi, np.pi, g)])
    for k in (a + g, a + g + 2):  # q == p, q != p
        phi = Model("h", lambda xi: torus.act(x0(xi[:a]), xi[a:]), init_head("swish2", d, k, 6, rng), ())
        J = certify.midpoints(ball_jacobian(phi, xi))  # (q, p)
        for sigma in (1e-3, 1.0, 1e3):
            Y_minus_mean = sigma * rng.standard_normal((MC_SAMPLES, k))  # y - phi(xi)
            S = Y_minus_mean @ J / sigma**2  # scores (N, p)
            I_mc = S.T @ S / MC_SAMPLES
            I = fisher_information(phi, xi, sigma)
            assert I.shape == I_mc.shape
            assert np.abs(I - I_mc).max() <= MC_RTOL * np.linalg.norm(I_mc, 2)
