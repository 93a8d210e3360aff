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
    inputs          every number that is not a float64 (a Python int past 2^53, an int64 array, a long double, a
                    ``Fraction``, a ``Decimal``) held exactly by ``exact`` and by every threshold, bound and scale
                    (each probe a claim that a rounding ``float()`` would certify falsely); a bool, a complex, a
                    string, a NaN or infinite ``Decimal`` refused by every primitive
    scales          ``vanishes`` at scales 2^-100 and 2^100 (a radius divided by the scale, not multiplied, flips both)
    thresholds      ``above`` at a non-dyadic threshold (float64's 0.1 is not 1/10: a decimal string would read it
                    as 1/10 and certify ``0.1 > 0.1``)
    symmetry        ``above`` on balls that overlap but differ (they can hold a non-symmetric matrix): refused

Every threshold is an exact ball (a float64 is a rational); nothing here has a tolerance.
"""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

import certify
import numpy as np
import pytest
from flint import arb, arb_mat, ctx, fmpq

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


# ------------------------------------------------------------------------------------------------
# Inputs that are not float64: held exactly, or refused
# ------------------------------------------------------------------------------------------------

BIG = 2**53 + 1  # the first integer float64 cannot hold: float() reads it as 2^53
LONG = np.longdouble(1) + np.longdouble(2) ** -60  # float() reads it as 1.0 (x87 long double: 64-bit mantissa)


def holds(ball: arb, q: fmpq) -> bool:
    """``ball`` contains the rational ``q``, exactly (a radius-0 ball: it is ``q``)."""
    return ball.contains(arb(q)) if ball.rad() == 0 else ball.contains(q)


@pytest.mark.parametrize("given, rational", [
    (BIG, fmpq(BIG)),
    (np.int64(BIG), fmpq(BIG)),
    (2**80 + 1, fmpq(2**80 + 1)),
    (Fraction(1, 10), fmpq(1, 10)),
    (Decimal("0.1"), fmpq(1, 10)),
    (np.float32(0.1), fmpq(*np.float32(0.1).as_integer_ratio())),
], ids=["int 2^53+1", "int64 2^53+1", "int 2^80+1", "Fraction 1/10", "Decimal 0.1", "float32 0.1"])
def test_exact_holds_the_number_given(given, rational: fmpq) -> None:
    """Each ball contains the number given and not its float64 rounding (which differs from it for each)."""
    with certify.precision(certify.PRECISIONS[0]):
        b = certify.exact(given)
        assert holds(b, rational), (given, b)
        if fmpq(*float(given).as_integer_ratio()) != rational:
            assert not b.contains(arb(float(given))), f"{given!r}: the ball holds float()'s rounding {b}"


@pytest.mark.skipif(np.finfo(np.longdouble).nmant < 60, reason="long double is float64 here")
def test_exact_holds_a_long_double_and_an_int64_array() -> None:
    with certify.precision(certify.PRECISIONS[0]):
        b = certify.exact(LONG)
        assert b.rad() == 0 and b == arb(1) + arb(2.0**-60), b
        arr = certify.exact(np.array([BIG, -BIG], dtype=np.int64))
        assert arr[0] == arb(BIG) and arr[1] == arb(-BIG) and arr[0].rad() == 0, arr
        ld = certify.exact(np.array([LONG], dtype=np.longdouble))
        assert ld[0] == arb(1) + arb(2.0**-60), ld


def test_thresholds_are_the_numbers_given() -> None:
    """The probes of rounding thresholds, each a false claim a ``float()`` conversion certifies: ``2^53 + 1/2 >
    2^53 + 1`` (the int threshold rounds to 2^53), ``|0.1| <= Decimal("0.1")`` (float64's 0.1 exceeds 1/10, and
    ``float(Decimal("0.1"))`` is it), ``1 + 2^-61 > 1 + 2^-60`` (a long double threshold read as 1.0), and in a
    Rayleigh quotient ``2^53 + 1 < 2^53 + 1`` read as ``< 2^53 + 2``. The true claims beside them are certified."""
    half = lambda: np.array([[arb(fmpq(2 * BIG - 1, 2))]], dtype=object)  # noqa: E731  2^53 + 1/2
    with pytest.raises(certify.Undecided):
        certify.above(half, BIG, "2^53 + 1/2 > 2^53 + 1")
    assert certify.above(half, 2**53, "2^53 + 1/2 > 2^53").bits == certify.PRECISIONS[0]
    with pytest.raises(certify.Undecided):
        certify.bounded(lambda: [arb(0.1)], Decimal("0.1"), "float64 0.1 <= 1/10")
    below_tenth = np.nextafter(0.1, 0.0)  # the float64 below 0.1: 1/10 - 8.3e-18
    assert certify.bounded(lambda: [arb(below_tenth)], Decimal("0.1"), "0.1 - ulp <= 1/10").bits >= 0
    with pytest.raises(certify.Undecided):
        certify.below(lambda: (arb(BIG), arb(1)), BIG, "2^53 + 1 < 2^53 + 1")
    if np.finfo(np.longdouble).nmant >= 60:
        just_above_1 = lambda: np.array([[arb(1) + arb(2.0**-61)]], dtype=object)  # noqa: E731
        with pytest.raises(certify.Undecided):
            certify.above(just_above_1, LONG, "1 + 2^-61 > 1 + 2^-60")
        with pytest.raises(certify.Undecided):
            certify.bounded(lambda: [arb(1) + arb(2.0**-60)], np.longdouble(1), "1 + 2^-60 <= 1 (long double)")


NOT_NUMBERS = [True, 1j, "0.1", None, Decimal("NaN"), Decimal("Infinity")]


@pytest.mark.parametrize("bad", NOT_NUMBERS, ids=[repr(b) for b in NOT_NUMBERS])
def test_every_primitive_refuses_what_is_not_a_real_number(bad) -> None:
    """No primitive rounds, coerces or compares what is not a finite real number: each says so (``Refused``)."""
    calls = {
        "exact": lambda: certify.exact(bad),
        "exact array": lambda: certify.exact(np.array([1.0, bad], dtype=object)),
        "bounded": lambda: certify.bounded(lambda: [arb(0)], bad, "bound"),
        "vanishes": lambda: certify.vanishes(lambda: [arb(0)], bad, "scale"),
        "below": lambda: certify.below(lambda: (arb(-1), arb(1)), bad, "t"),
        "above": lambda: certify.above(lambda: np.array([[arb(1)]], dtype=object), bad, "t"),
        "jacobian": lambda: certify.jacobian(lambda x: x, np.array([bad], dtype=object)),
    }
    for name, call in calls.items():
        with pytest.raises(certify.Refused):
            call()
            pytest.fail(f"{name} took {bad!r}")


def test_vanishes_reads_its_radius_relative_to_a_non_unit_scale() -> None:
    """The radius allowed is ``2^-150 x scale``: ``[0 +/- 2^-60]`` vanishes at scale 2^100 (allowed 2^-50) and not
    at 2^-100 (allowed 2^-250). A radius divided by the scale instead swaps the two verdicts."""
    ball = lambda: [arb(0, 2.0**-60)]  # noqa: E731
    assert certify.vanishes(ball, 2.0**100, "at scale 2^100").bits >= certify.IDENTITY_BITS
    assert certify.vanishes(ball, 2**100, "at the int scale 2^100").bits >= certify.IDENTITY_BITS
    with pytest.raises(certify.Undecided):
        certify.vanishes(ball, 2.0**-100, "at scale 2^-100")


def test_above_compares_with_the_float64_threshold_itself_not_its_decimal_reading() -> None:
    """float64's ``0.1`` is ``3602879701896397 / 2^55``, above 1/10 by 5.6e-18: ``lambda_min([[0.1]]) > 0.1`` is
    false (equal), ``> Fraction(1, 10)`` true. A threshold read through its decimal string (1/10, enclosed at 128 bits
    in a ball of radius ~1e-39) would certify the false claim."""
    A = lambda: np.array([[arb(0.1)]], dtype=object)  # noqa: E731
    with pytest.raises(certify.Undecided):
        certify.above(A, 0.1, "0.1 > 0.1")
    assert certify.above(A, Fraction(1, 10), "0.1 > 1/10").value > 0


def test_above_refuses_balls_that_overlap_but_differ() -> None:
    """``[[3/2, 0 +/- 1], [1.9 +/- 1, 3/2]]``: the balls overlap on ``[0.9, 1]``, and they hold the non-symmetric
    ``[[3/2, 1], [2.9, 3/2]]``, whose eigenvalues ``3/2 +/- sqrt(2.9)`` include -0.2. Their intersection would
    certify ``lambda_min > 0``; the balls are refused. Symmetrised (``(A + A^T) / 2``) they are not certified."""
    A = np.array([[arb(1.5), arb(0, 1)], [arb(1.9, 1), arb(1.5)]], dtype=object)
    assert A[0, 1].overlaps(A[1, 0]) and np.min(np.linalg.eigvals([[1.5, 1.0], [2.9, 1.5]]).real) < 0
    with pytest.raises(certify.Refused, match="not symmetric"):
        certify.above(lambda: A, 0.0, "overlapping balls")
    S = np.array([[A[0, 0], (A[0, 1] + A[1, 0]) / 2], [(A[0, 1] + A[1, 0]) / 2, A[1, 1]]], dtype=object)
    with pytest.raises(certify.Undecided):
        certify.above(lambda: S, 0.0, "symmetrised")
