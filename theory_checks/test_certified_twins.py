"""Each certified object against its float64 twin: the ball computations agree with ``mini``'s float64 values.

A certificate decides a sign or a rank from a ball computation that shares no code with ``mini`` (``certify``:
Taylor arithmetic over Arb balls). Its verdict can survive a wrong computation (a factor 2 lost in the chain
rule leaves a negative curvature negative), so the certified objects themselves are compared with ``mini``'s
float64 values on the pinned instances, within float64's error:

- the ball quadratic form ``v^T H_eff v`` (twice the ``t^2`` coefficient of ``L(h(Z + t v))``) at the tour's
  collapsed states (``certified_claims``), against ``v^T H v`` for autograd's ``H_eff`` and for mini's closed
  form ``G + M``, along the extreme eigenvectors and two fixed random directions;
- the ball Jacobian of the tour heads at ``z*`` against ``mini.hessian.head_derivatives``' closed form and
  autograd, and of the Fisher check's pinned models against autograd;
- the certified minors (the balls that decide ``rank >= r``) against float64's determinant of the same
  submatrix of the float64 Jacobian, on the Fisher check's pinned instances and the Theorem 4.1 instance whose
  null space is decided by certificate.

Tolerances: float64 evaluates a quantity summed from ``N`` terms to within ``N eps`` of the terms' scale
(Higham's ``gamma_N``), ``FLOAT64_ERROR`` times that for the chains of products: the forms to ``FLOAT64_ERROR N
eps |H|_2 |v|^2`` (``N = n d``; measured at most 0.06 ``N eps``), the Jacobians entrywise to ``FLOAT64_ERROR (q +
p) eps F`` (``F`` the size of the products ``J`` is summed from, ``|J|_2`` for a head alone; measured at most 1.6
``eps F``), and an ``r x r`` minor to ``r delta (|A|_2 + delta)^(r - 1) + FLOAT64_ERROR r eps |A|_2^r`` (the
determinant's change under an entrywise error ``delta`` of its ``r x r`` matrix ``A``, plus LU's rounding).

Negative controls: the Taylor chain rule with the ``1/2`` of ``f'' c1^2`` lost gives a ball form that still
certifies ``lambda_min < 0`` at the gelu2 state, and is far outside its twin. The allowance is pinned: a ball
Jacobian with one entry (its smallest) off by ``PAST_ERROR`` of the allowance's unit, three of today's allowances
as a number, fails its twin, which a 10x looser ``FLOAT64_ERROR`` would pass, and so would a gap read from the
smallest entry's error instead of the largest.
"""

from __future__ import annotations

import certify
import numpy as np
import pytest
from autograd import jacobian
from certified_claims import GAP_CLAIMS, SMOOTH_CLAIMS, ball_loss, negative_curvature, tour_state
from flint import arb
from test_thm4_1_collapse import saturated_gelu_state
from test_thm5_3_fisher_rank import (
    PINNED_DEGENERATE_ORBIT,
    PINNED_TORUS,
    Model,
    ball_jacobian,
    product_scale,
    torus_case,
)

from mini.hessian import decompose_closed_form, effective_hessian, head_derivatives, head_jacobian_autograd

FLOAT64_ERROR = 4.0  # float64's error on a value summed from N terms: at most FLOAT64_ERROR N eps of their scale
PAST_ERROR = 12.0  # three of today's allowances (3 x FLOAT64_ERROR), as a number: it pins the allowance
EPS = float(np.finfo(float).eps)
BITS = certify.PRECISIONS[0]


def directions(H: np.ndarray) -> list[np.ndarray]:
    """The eigenvectors of ``H``'s smallest and largest eigenvalues and two fixed random directions."""
    _, V = np.linalg.eigh(H)
    return [V[:, 0], V[:, -1], *np.random.default_rng(0).standard_normal((2, H.shape[0]))]


def ball_form(spec: str, v: np.ndarray) -> float:
    """The midpoint of the ball ``v^T H_eff v`` at the tour's collapsed ``spec`` state."""
    head, _, Z, T = tour_state(spec)
    with certify.precision(BITS):
        q = certify.quadratic_form(lambda x: ball_loss(head, x, T), Z.ravel(), v)
    assert q.is_finite() and q.rad() < EPS * abs(q.mid()) + 2.0**-100, q
    return float(q.mid())


def form_twin_gaps(spec: str) -> tuple[list[float], float]:
    """``|ball - v^T H v|`` for autograd's and the closed form's ``H``, every direction; and the tolerance."""
    head, objective, Z, _ = tour_state(spec)
    H = effective_hessian(head, objective, Z)
    H_closed = np.asarray(decompose_closed_form(head, objective, Z).H)
    scale = float(np.abs(np.linalg.eigvalsh(H)).max())
    gaps = []
    for v in directions(H):
        q = ball_form(spec, v) / (v @ v)
        gaps += [abs(q - v @ H @ v / (v @ v)), abs(q - v @ H_closed @ v / (v @ v))]
    return gaps, FLOAT64_ERROR * H.shape[0] * EPS * scale


@pytest.mark.parametrize("spec", SMOOTH_CLAIMS + GAP_CLAIMS)
def test_ball_quadratic_form_is_minis_float64_form(spec: str) -> None:
    gaps, tolerance = form_twin_gaps(spec)
    assert max(gaps) <= tolerance, f"{spec}: the ball form differs from mini's by {max(gaps):.2e} > {tolerance:.2e}"


def test_negative_control_a_lost_half_keeps_the_sign_and_fails_the_twin() -> None:
    """``f(x(t))``'s ``t^2`` coefficient is ``f' c2 + f'' c1^2 / 2``; without the ``/ 2`` the gelu2 state's
    negative curvature is still certified negative, and the form is far from its float64 twin."""
    original = certify.Taylor._chain

    def chain_without_half(self, f0, f1, f2):
        return certify.Taylor(f0, f1 * self.c1, f1 * self.c2 + f2 * self.c1 * self.c1)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(certify.Taylor, "_chain", chain_without_half)
        assert negative_curvature("gelu2").claim.endswith("< 0")  # the sign survives the mistake
        gaps, tolerance = form_twin_gaps("gelu2")
    assert certify.Taylor._chain is original
    assert max(gaps) > 1e6 * tolerance, f"the lost 1/2 is within {max(gaps):.2e} of the twin"


def jacobian_gap(J_ball: np.ndarray, J: np.ndarray, scale: float) -> tuple[float, float]:
    """``max |mid(J_ball) - J|`` and the tolerance ``FLOAT64_ERROR (q + p) eps scale``."""
    return float(np.abs(certify.midpoints(J_ball) - J).max()), FLOAT64_ERROR * sum(J.shape) * EPS * scale


@pytest.mark.parametrize("spec", SMOOTH_CLAIMS + GAP_CLAIMS)
def test_ball_jacobian_of_the_tour_heads_is_minis(spec: str) -> None:
    head, _, Z, _ = tour_state(spec)
    with certify.precision(BITS):
        J_ball = certify.jacobian(lambda z: certify.ball_head(head, z[None, :])[0], Z[0])
    for J in (np.asarray(head_derivatives(head, Z).J[0]), head_jacobian_autograd(head, Z[0])):
        gap, tolerance = jacobian_gap(J_ball, J, float(np.linalg.norm(J, 2)))
        assert gap <= tolerance, f"{spec}: the ball Jacobian differs from mini's by {gap:.2e} > {tolerance:.2e}"


def test_negative_control_one_entry_three_allowances_off_fails_the_jacobian_twin() -> None:
    """The gelu2 tour head's Jacobian as exact balls, its smallest entry moved by ``PAST_ERROR (q + p) eps |J|_2``:
    the twin fails (the gap is the largest entry's error). Unmoved, it holds."""
    assert FLOAT64_ERROR < PAST_ERROR <= 10 * FLOAT64_ERROR, f"{PAST_ERROR} is not within 10x the allowance"
    head, _, Z, _ = tour_state("gelu2")
    J = np.asarray(head_derivatives(head, Z).J[0])
    scale = float(np.linalg.norm(J, 2))
    J_ball = certify.exact(J)
    assert jacobian_gap(J_ball, J, scale)[0] == 0.0
    i, j = np.unravel_index(np.argmin(np.abs(J)), J.shape)
    J_ball[i, j] = J_ball[i, j] + arb(PAST_ERROR * sum(J.shape) * EPS * scale)
    gap, tolerance = jacobian_gap(J_ball, J, scale)
    assert gap > tolerance, f"an entry {PAST_ERROR:g} allowances off passed its twin: {gap:.2e} <= {tolerance:.2e}"


def pinned_models() -> list[tuple[str, Model, np.ndarray]]:
    out = []
    for label, inst in (("torus", PINNED_TORUS), ("degenerate orbit", PINNED_DEGENERATE_ORBIT)):
        case = torus_case(**inst)
        out += [(f"{label} {m.name}", m, case.xi) for m in (case.z, case.h, case.control)]
    return out


@pytest.mark.parametrize("which", range(6))
def test_ball_jacobian_and_certified_minor_of_the_fisher_pins_are_float64s(which: int) -> None:
    name, model, xi = pinned_models()[which]
    J = np.atleast_2d(jacobian(model)(xi))
    F = product_scale(model, xi)
    with certify.precision(BITS):
        J_ball = ball_jacobian(model, xi)
    gap, tolerance = jacobian_gap(J_ball, J, F)
    assert gap <= tolerance, f"{name}: the ball Jacobian differs from autograd's by {gap:.2e} > {tolerance:.2e}"
    r = xi.size - len(model.null_columns)
    check_minor(name, certify.rank_at_least(lambda: ball_jacobian(model, xi), r, name), J, tolerance)


def check_minor(name: str, cert: certify.Certificate, J: np.ndarray, entry_error: float) -> None:
    """The certificate's deciding minor against float64's determinant of the same submatrix."""
    rows, cols = cert.where
    A = J[np.ix_(rows, cols)]
    r, norm = len(rows), float(np.linalg.norm(A, 2))
    delta = entry_error * r  # |E|_2 <= r max |E_ij| for an r x r error matrix
    tolerance = r * delta * (norm + delta) ** (r - 1) + FLOAT64_ERROR * r * EPS * norm**r
    gap = abs(float(cert.value.mid()) - float(np.linalg.det(A)))
    assert gap <= tolerance, f"{name}: the certified minor {cert.value} is {gap:.2e} off float64's ({tolerance:.2e})"


def test_certified_minor_of_the_saturated_gelu_state_is_float64s() -> None:
    """Theorem 4.1's instance decided by certificate: ``rank J(z*) >= 2`` by a minor of ~ -9e-13."""
    head, _, Z = saturated_gelu_state()
    J = np.asarray(head_derivatives(head, Z).J[0])
    cert = certify.rank_at_least(
        lambda: certify.jacobian(lambda z: certify.ball_head(head, z[None, :])[0], Z[0]), head.k, "J(z*)")
    _, tolerance = jacobian_gap(certify.jacobian(lambda z: certify.ball_head(head, z[None, :])[0], Z[0]), J,
                                float(np.linalg.norm(J, 2)))
    check_minor("saturated gelu2", cert, J, tolerance)
