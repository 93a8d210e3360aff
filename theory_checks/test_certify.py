"""The certificates themselves (``certify``) can fail: each one is fed the inputs it must refuse.

A certificate is a proof only if it can fail. Each primitive is given, besides a claim it must certify (the
positive control), the hostile inputs an implementation that decides on midpoints, reads a rounded float,
drops a NaN or ignores its contract would wrongly certify; each must come out ``Undecided`` (no precision up
to the stated limit decides it) or ``Refused`` (the input breaks the certificate's contract):

    rank_at_least   a singular ball matrix whose minor's midpoint is not 0 (radius dropped: "full rank"),
                    an exactly singular matrix, a NaN entry, an infinite entry
    below           a Rayleigh near-miss (midpoint below t, ball across it), a quotient exactly at t, a zero
                    and a negative denominator, a NaN
    above           a matrix whose last pivot is negative, a PSD singular matrix at t = 0, a non-symmetric
                    matrix (``[[1, 100], [0, 1]]``: its lower triangle is positive definite), a NaN
    bounded         ``1 + 2^-60`` against 1 (rounded to nearest it reads 1.0), one float64 ulp past the
                    bound, a NaN after a small ball (Python's ``max`` keeps the first), an infinite ball, the
                    end-to-end Jacobian column ``(0, nan)`` of ``sqrt(x1^2)`` at 0
    vanishes        a NaN ball (it "contains 0"), an infinite ball, a NaN / infinite / zero scale, a ball
                    that excludes 0, a ball of 0 too wide for the scale
    off_kinks       a pre-activation ball that contains 0, a NaN

Every threshold is an exact ball (a float64 is a rational); nothing here has a tolerance.
"""

from __future__ import annotations

import certify
import numpy as np
import pytest
from flint import arb, arb_mat, ctx

NAN, INF = arb("nan"), arb("inf")


def transcendental() -> tuple[arb, arb, arb]:
    """``e``, ``pi`` and ``sqrt 2`` at the working precision: balls of positive radius."""
    return arb(1).exp(), arb.pi(), arb(2).sqrt()


def singular_balls() -> np.ndarray:
    """``[[e, pi], [e s, pi s]]`` (``s = sqrt 2``): exactly singular, but its computed determinant's midpoint is
    not 0 at any precision (``e (pi s)`` and ``pi (e s)`` round differently)."""
    e, p, s = transcendental()
    return np.array([[e, p], [e * s, p * s]], dtype=object)


# ------------------------------------------------------------------------------------------------
# rank_at_least
# ------------------------------------------------------------------------------------------------


def test_rank_certifies_a_regular_ball_matrix() -> None:
    e, p, s = transcendental()
    cert = certify.rank_at_least(lambda: np.array([[e, p], [s, e]], dtype=object), 2, "regular")
    assert cert.value is not None and not cert.value.contains(0)


def test_rank_refuses_a_singular_ball_matrix_whose_midpoint_is_not_zero() -> None:
    for bits in certify.PRECISIONS:  # the trap: a float-like determinant would say "rank 2"
        with certify.precision(bits):
            m = arb_mat(singular_balls().tolist()).det()
            assert m.mid() != 0 and m.contains(0), (bits, m)
    with pytest.raises(certify.Undecided):
        certify.rank_at_least(singular_balls, 2, "singular balls")
    assert certify.rank_at_least(singular_balls, 1, "singular balls").bits == certify.PRECISIONS[0]


@pytest.mark.parametrize("bad", ["exact singular", "nan", "inf"])
def test_rank_refuses_singular_and_non_finite_entries(bad: str) -> None:
    entry = {"exact singular": arb(4), "nan": NAN, "inf": INF}[bad]
    A = np.array([[arb(1), arb(2)], [arb(2), entry]], dtype=object)
    with pytest.raises(certify.Undecided):
        certify.rank_at_least(lambda: A, 2, bad)


def test_rank_refuses_a_minor_larger_than_the_matrix() -> None:
    with pytest.raises(certify.Refused):
        certify.rank_at_least(lambda: np.array([[arb(1), arb(2)]], dtype=object), 2, "1 x 2")


# ------------------------------------------------------------------------------------------------
# below (a Rayleigh quotient)
# ------------------------------------------------------------------------------------------------


def test_below_certifies_a_clear_quotient() -> None:
    cert = certify.below(lambda: (arb(-1), arb(2)), 0.0, "clear")
    assert cert.value < 0


def test_below_refuses_a_near_miss() -> None:
    """Midpoint ``-1e-30`` below 0, radius ``1e-20`` across it: a midpoint comparison would certify."""
    near = arb(-1e-30, 1e-20)
    assert near.mid() < 0 and near.contains(0)
    with pytest.raises(certify.Undecided):
        certify.below(lambda: (near, arb(1)), 0.0, "near miss")
    with pytest.raises(certify.Undecided):  # exactly at the threshold: not below it
        certify.below(lambda: (arb(3), arb(2)), 1.5, "at t")
    with pytest.raises(certify.Undecided):  # one ulp of the threshold above it
        certify.below(lambda: (arb(np.nextafter(1.5, 2.0)), arb(1)), 1.5, "one ulp above t")


@pytest.mark.parametrize("vv", [arb(0), arb(-1)])
def test_below_refuses_a_denominator_that_is_not_positive(vv: arb) -> None:
    """``v^T v`` of a real vector is above 0: 0 (``v = 0``) or a negative number is no Rayleigh quotient
    (``-1 / -1 = 1`` and ``1 / -1 = -1 < 0`` would otherwise "certify")."""
    with pytest.raises(certify.Refused):
        certify.below(lambda: (arb(1), vv), 0.0, f"v^T v = {vv}")


def test_below_fails_closed_on_nan() -> None:
    with pytest.raises(certify.Undecided):
        certify.below(lambda: (NAN, arb(1)), 0.0, "nan")


# ------------------------------------------------------------------------------------------------
# above (LDL^T pivots)
# ------------------------------------------------------------------------------------------------


def test_above_certifies_a_positive_definite_matrix() -> None:
    e, p, _ = transcendental()
    cert = certify.above(lambda: np.array([[p, e - 2], [e - 2, e]], dtype=object), 0.0, "PD")
    assert cert.value > 0


def test_above_refuses_a_negative_last_pivot() -> None:
    """``[[1, 1], [1, 1/2]]``: first pivot 1, last ``-1/2``; and a PSD singular matrix at ``t = 0``."""
    with pytest.raises(certify.Undecided):
        certify.above(lambda: np.array([[arb(1), arb(1)], [arb(1), arb(0.5)]], dtype=object), 0.0, "indefinite")
    with pytest.raises(certify.Undecided):
        certify.above(lambda: np.array([[arb(1), arb(1)], [arb(1), arb(1)]], dtype=object), 0.0, "PSD singular")
    with pytest.raises(certify.Undecided):  # the shift: lambda_min = 1 is not above 1
        certify.above(lambda: np.array([[arb(2), arb(1)], [arb(1), arb(2)]], dtype=object), 1.0, "at t")


def test_above_refuses_a_matrix_that_is_not_symmetric() -> None:
    """``[[1, 100], [0, 1]]``: its lower triangle is the identity's (positive definite), the matrix is not
    symmetric (and ``x^T A x`` is negative at ``x = (1, -1)``)."""
    A = np.array([[arb(1), arb(100)], [arb(0), arb(1)]], dtype=object)
    with pytest.raises(certify.Refused, match="not symmetric"):
        certify.above(lambda: A, 0.0, "not symmetric")


def test_above_fails_closed_on_nan() -> None:
    with pytest.raises(certify.Undecided):
        certify.above(lambda: np.array([[arb(1), arb(0)], [arb(0), NAN]], dtype=object), 0.0, "nan")


# ------------------------------------------------------------------------------------------------
# bounded
# ------------------------------------------------------------------------------------------------


def test_bounded_certifies_what_is_within_its_bound() -> None:
    assert certify.bounded(lambda: [arb(1), arb(-1), arb(0.5)], 1.0, "at the bound").bits == certify.PRECISIONS[0]


def test_bounded_refuses_a_value_past_the_bound_that_rounds_onto_it() -> None:
    """``1 + 2^-60`` (exact at 128 bits): ``float(upper)`` rounds it to 1.0 and a float comparison certifies it."""
    x = lambda: [arb(1) + arb(2.0**-60)]  # noqa: E731 (recomputed at each precision)
    with certify.precision(certify.PRECISIONS[0]):
        assert float(x()[0].upper()) <= 1.0 and not abs(x()[0]) <= arb(1.0)
    with pytest.raises(certify.Undecided):
        certify.bounded(x, 1.0, "1 + 2^-60")
    with pytest.raises(certify.Undecided):  # one float64 ulp past
        certify.bounded(lambda: [arb(np.nextafter(1e-12, 1.0))], 1e-12, "one ulp past")


@pytest.mark.parametrize("bad", [[arb(0), NAN], [NAN, arb(0)], [arb(0), INF]])
def test_bounded_fails_closed_on_non_finite_balls(bad: list) -> None:
    with pytest.raises(certify.Undecided):
        certify.bounded(lambda: bad, 1e-12, "non-finite")


def test_bounded_refuses_the_nan_column_of_sqrt_x_squared_at_zero() -> None:
    """End to end, the Fisher rank's pattern: the column of ``J`` along ``x1`` of ``(x0, sqrt(x1^2))`` at
    ``x1 = 0`` is ``(0, nan)`` in Taylor arithmetic (``d sqrt(u) = du / 2 sqrt(u)``, 0 / 0): it is not small."""

    def column():
        J = certify.jacobian(lambda x: np.array([x[0], (x[1] * x[1]).sqrt()], dtype=object), np.array([1.0, 0.0]))
        return J[:, [1]]

    with certify.precision(certify.PRECISIONS[0]):
        col = column().ravel()
        assert col[0].is_zero() and col[1].is_nan(), col
    with pytest.raises(certify.Undecided):
        certify.bounded(column, 1e-12, "J e_1 of sqrt(x1^2) at 0")


@pytest.mark.parametrize("bound", [float("nan"), float("inf"), -1.0])
def test_bounded_refuses_a_bound_that_is_not_a_finite_non_negative_number(bound: float) -> None:
    with pytest.raises(certify.Refused):
        certify.bounded(lambda: [arb(0)], bound, "bad bound")


def test_bounded_refuses_nothing_to_certify() -> None:
    with pytest.raises(certify.Refused):
        certify.bounded(lambda: [], 1.0, "empty")


# ------------------------------------------------------------------------------------------------
# vanishes (an identity, as 200-bit evidence)
# ------------------------------------------------------------------------------------------------


def test_vanishes_certifies_balls_of_zero() -> None:
    cert = certify.vanishes(lambda: [arb(1).exp() - transcendental()[0], arb(0)], 1.0, "e - e")
    assert cert.bits >= certify.IDENTITY_BITS


@pytest.mark.parametrize("bad", [[arb(0), NAN], [NAN, arb(0)], [arb(0), INF]])
def test_vanishes_fails_closed_on_non_finite_balls(bad: list) -> None:
    assert NAN.contains(0)  # the trap: a NaN ball "contains 0"
    with pytest.raises(certify.Undecided):
        certify.vanishes(lambda: bad, 1.0, "non-finite")


@pytest.mark.parametrize("scale", [float("nan"), float("inf"), 0.0, -1.0])
def test_vanishes_refuses_a_scale_that_is_not_finite_and_positive(scale: float) -> None:
    """An infinite or NaN scale would make any ball containing 0 "small enough"."""
    with pytest.raises(certify.Refused):
        certify.vanishes(lambda: [arb(0, 1.0)], scale, "bad scale")


def test_vanishes_refuses_a_ball_away_from_zero_and_one_too_wide() -> None:
    with pytest.raises(certify.Undecided, match="excludes 0"):
        certify.vanishes(lambda: [arb(0), arb(2.0**-200)], 1.0, "2^-200")
    with pytest.raises(certify.Undecided):  # contains 0, but wider than 2^-150 of the scale at every precision
        certify.vanishes(lambda: [arb(0, 2.0**-140)], 1.0, "too wide")


# ------------------------------------------------------------------------------------------------
# off_kinks
# ------------------------------------------------------------------------------------------------


def test_off_kinks_certifies_balls_away_from_zero_and_an_affine_head() -> None:
    assert "pre-activation" in certify.off_kinks(lambda: [arb(-0.25), arb(1e-300)], "clear").evidence
    assert "affine" in certify.off_kinks(lambda: [], "no hidden layer").evidence


@pytest.mark.parametrize("bad", [arb(0), arb(1e-30, 1e-20), NAN])
def test_off_kinks_refuses_a_ball_at_a_kink(bad: arb) -> None:
    with pytest.raises(certify.Undecided):
        certify.off_kinks(lambda: [arb(1), bad], "at a kink")


def test_the_working_precision_is_restored() -> None:
    before = ctx.prec
    with pytest.raises(certify.Undecided):
        certify.rank_at_least(singular_balls, 2, "singular balls")
    assert ctx.prec == before
