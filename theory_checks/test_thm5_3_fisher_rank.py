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

Numerical rank: eigenvalues above ``FISHER_RANK_RTOL * lambda_max`` (``mini.invariance``, 1e-10;
exactly invariant directions sit at ~1e-30 relative, generic ones far above 1e-10 on these
well-scaled instances). ``dim(V_aug)`` is the rank of ``V^T V`` with the same tolerance.
The Fisher matrices' values, not only their ranks (a ``J J^T`` / ``J^T J`` mix-up keeps the rank), are
checked against an independent computation that shares no code with ``mini``: the Jacobian by central
finite differences (step ``FD_STEP``, plain NumPy), ``I_ref = J_fd^T J_fd / sigma^2``, entrywise within
``FD_RTOL`` of ``|I_ref|_2``; and, at a pinned instance, the definition itself, ``I = E[s s^T]`` with
the score ``s = grad_xi log p(y | xi) = J_fd^T (y - phi(xi)) / sigma^2`` averaged over ``MC_SAMPLES``
draws of ``y`` (within ``MC_RTOL``, five Monte-Carlo standard errors). ``sigma`` runs over ``SIGMAS``
(ten decades): ``sigma^2 I`` must not change, nor the ranks (a rank with an absolute tolerance would
change with ``sigma``).

Negative control: for a non-invariant head of the same kind (the MLP applied to ``z``, ``k >= a + g``)
the bound fails, ``rank(I_h) > rank(I_z) - dim(V_aug)``. Generically it keeps the full rank, but a
small random head can come within the rank tolerance of losing a direction (pinned: gelu3, d=7, g=2,
a=5, seed=0, whose control Fisher matrix has a relative eigenvalue 6e-12), so full rank is not asserted.
"""

from __future__ import annotations

import autograd.numpy as anp
import numpy as np
from _invariance_strategies import Torus
from conftest import seeds, smooth_specs
from hypothesis import example, given
from hypothesis import strategies as st

from mini.heads import init_head
from mini.invariance import fisher_information, fisher_rank, invariant_head
from mini.manifolds import MANIFOLDS, make_manifold

SIGMAS = 10.0 ** np.arange(-4.0, 7.0, 2.0)  # observation noise 1e-4 ... 1e6: I scales by 1 / sigma^2
FD_STEP = 1e-5  # central differences: truncation ~ FD_STEP^2, rounding ~ 1e-16 / FD_STEP
FD_RTOL = 1e-7  # |I - I_ref|_max / |I_ref|_2 with the finite-difference Jacobian
SCALE_RTOL = 1e-12  # |sigma^2 I(sigma) - I(1)|_max / |I(1)|_2: one division, round-off only
MC_SAMPLES = 20000
MC_RTOL = 5.0 * np.sqrt(2.0 / MC_SAMPLES)  # five standard errors of a sample second moment


def fd_jacobian(f, x: np.ndarray, step: float = FD_STEP) -> np.ndarray:
    """``d f / d x`` (q, p) by central differences, plain NumPy (no autograd, nothing from ``mini``)."""
    cols = [(np.asarray(f(x + step * e), dtype=float) - np.asarray(f(x - step * e), dtype=float)) / (2 * step)
            for e in np.eye(x.size)]
    return np.stack(cols, axis=1)


def check_fisher_values(phi, xi: np.ndarray) -> int:
    """``fisher_information(phi, xi, sigma)`` against ``J_fd^T J_fd / sigma^2`` for every ``sigma`` in
    ``SIGMAS``, and ``sigma``-independence of ``sigma^2 I`` and of the rank; returns the rank."""
    J = fd_jacobian(phi, xi)  # (q, p)
    ref = J.T @ J  # sigma = 1
    I_1 = fisher_information(phi, xi, 1.0)
    rank = fisher_rank(I_1)
    for sigma in SIGMAS:
        I = fisher_information(phi, xi, sigma)
        assert I.shape == ref.shape, f"Fisher information has shape {I.shape}, the model has {xi.size} parameters"
        assert np.abs(I - ref / sigma**2).max() <= FD_RTOL * np.linalg.norm(ref, 2) / sigma**2
        assert np.abs(sigma**2 * I - I_1).max() <= SCALE_RTOL * np.linalg.norm(I_1, 2)
        assert fisher_rank(I) == rank, f"rank {fisher_rank(I)} at sigma={sigma:g}, {rank} at sigma=1"
    return rank


def ranks(act, x0, head_fn, a: int, g: int, xi: np.ndarray) -> tuple[int, int]:
    """``(rank I_z, rank I_h)`` at ``xi = (s, t)`` for ``z(xi) = act(x0(s), t)``, values checked over ``SIGMAS``."""

    def z_of(xi):
        return act(x0(xi[:a]), xi[a:])

    r_z = check_fisher_values(z_of, xi)
    r_h = check_fisher_values(lambda xi: head_fn(anp.reshape(z_of(xi), (1, -1)))[0], xi)
    return r_z, r_h


def semantic_family(d: int, a: int, rng: np.random.Generator):
    c = rng.standard_normal(d)
    B = rng.standard_normal((d, a)) / np.sqrt(a)
    C = rng.standard_normal((d, a))
    return lambda s: c + anp.dot(B, s) + 0.5 * anp.tanh(anp.dot(C, s))


@given(d=st.integers(3, 9), data=st.data(), spec=smooth_specs, seed=seeds)
@example(d=5, data=None, spec="gelu3", seed=0)
def test_fisher_rank_drops_by_dim_v_aug_on_torus(d, data, spec, seed):
    """Random ``T^g`` on ``R^d``, ``a`` semantic dimensions with ``a + g <= d``: bound and equality."""
    g = data.draw(st.integers(1, d // 2), label="g") if data is not None else 2
    a = data.draw(st.integers(1, d - g), label="a") if data is not None else 2
    check_torus_instance(d, g, a, spec, seed)


def test_pinned_control_with_a_nearly_degenerate_random_head():
    """Regression: the control head here nearly loses rank; the bound must still be violated."""
    check_torus_instance(d=7, g=2, a=5, spec="gelu3", seed=0)


def check_torus_instance(d: int, g: int, a: int, spec: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    torus = Torus(d, g, rng)
    x0 = semantic_family(d, a, rng)
    xi = np.concatenate([0.5 * rng.standard_normal(a), rng.uniform(-np.pi, np.pi, g)])
    dim_v = fisher_rank(torus.tangents(torus.act(x0(xi[:a]), xi[a:])).T @ torus.tangents(torus.act(x0(xi[:a]), xi[a:])))
    mlp = init_head(spec, d - g, a + 1, a + 2, rng)
    r_z, r_h = ranks(torus.act, x0, invariant_head(torus.invariants, mlp), a, g, xi)
    assert dim_v == g and r_z == a + g  # the instance is generic: V_aug is g-dim, xi -> z an immersion
    assert r_h <= r_z - dim_v  # Theorem 5.3
    assert r_h == r_z - dim_v  # equality in the generic case
    # Negative control: a non-invariant head (on z itself, wide enough) violates the bound.
    control = init_head(spec, d, a + g, a + g + 1, rng)
    _, r_control = ranks(torus.act, x0, control, a, g, xi)
    assert r_control > r_z - dim_v


@given(name=st.sampled_from(MANIFOLDS), a=st.integers(1, 3), spec=smooth_specs, seed=seeds)
@example(name="hue", a=3, spec="tanh2", seed=0)
def test_fisher_rank_drops_by_one_on_toy_manifolds(name, a, spec, seed):
    """Hue, shift, scaling (``dim V_aug = 1``): an invariant head loses exactly the augmentation direction."""
    rng = np.random.default_rng(seed)
    M = make_manifold(name, seed=seed % 5)
    x_base = M.templates[int(rng.integers(M.n_classes))]
    B = 0.3 * rng.standard_normal((M.dim, a))

    def x0(s):
        return x_base + anp.dot(B, s)

    def act(x, t):
        return M.act(anp.reshape(x, (1, -1)), t[0])[0]

    xi = np.concatenate([0.3 * rng.standard_normal(a), rng.uniform(-1.0, 1.0, 1)])
    q = M.invariants(x_base[None, :]).shape[1]
    r_z, r_h = ranks(act, x0, invariant_head(M.invariants, init_head(spec, q, a + 1, a + 2, rng)), a, 1, xi)
    assert r_z == a + 1
    assert r_h <= r_z - 1
    assert r_h == r_z - 1
    _, r_control = ranks(act, x0, init_head(spec, M.dim, a + 1, a + 2, rng), a, 1, xi)
    assert r_control == r_z > r_z - 1


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
        head = init_head("swish2", d, k, 6, rng)

        def phi(xi, head=head):
            return head(anp.reshape(torus.act(x0(xi[:a]), xi[a:]), (1, -1)))[0]

        J = fd_jacobian(phi, xi)  # (q, p)
        for sigma in (1e-3, 1.0, 1e3):
            Y_minus_mean = sigma * rng.standard_normal((MC_SAMPLES, k))  # y - phi(xi)
            S = Y_minus_mean @ J / sigma**2  # scores (N, p)
            I_mc = S.T @ S / MC_SAMPLES
            I = fisher_information(phi, xi, sigma)
            assert I.shape == I_mc.shape
            assert np.abs(I - I_mc).max() <= MC_RTOL * np.linalg.norm(I_mc, 2)
