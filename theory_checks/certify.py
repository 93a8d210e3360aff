"""Certified decisions in ball arithmetic, where float64 cannot decide a sign, a rank or an identity.

A float64 verdict is trusted only where it is far from its threshold; inside a check's *undecidable band*
(a singular value between a structural zero and a clear gap, an eigenvalue near a threshold), the quantity
is recomputed here from the instance's exact inputs in ball arithmetic (Arb, through ``python-flint``):
every number is a ball ``[mid +/- rad]`` guaranteed to contain the exact real value, so a ball that
excludes a threshold decides a comparison with it, with no tolerance of the project's choosing.

Inputs are numbers converted exactly (``exact``, ``_rational``): a float of any width (float16 to long double),
an integer of any size (Python's or NumPy's), a ``Fraction`` or a finite ``Decimal`` is the rational it holds,
and its ball contains that rational at every precision (radius 0 where the rational is dyadic: every binary
float and integer); anything else (a bool, a complex, a string, a NaN or infinite ``Decimal``) is ``Refused``,
never rounded through ``float()`` first (``2^53 + 1`` would read as ``2^53``, ``Decimal("0.1")`` as the float above
1/10, a long double ``1 + 2^-60`` as 1.0). Activations, losses and their derivatives are ball functions.
Derivatives come from truncated Taylor arithmetic (``Taylor``: the coefficients ``c0 + c1 t + c2 t^2`` of
``f(x + t v)``), so a Jacobian column is one forward pass with ``c1 = e_j`` and a quadratic form
``v^T H v = 2 c2`` one pass with ``c1 = v``. Nothing here imports
``mini``'s activation table or Hessian code: the certificate is an independent computation.

Certificates (each ``decide`` raises the working precision, ``PRECISIONS``, until the ball excludes the
threshold, or fails with ``Undecided`` at the last one):

    rank(A) >= r          an r x r minor whose ball excludes 0 (``rank_at_least``)
    lambda_min(A) < t     a Rayleigh quotient ``v^T A v / v^T v`` whose ball lies below t, ``v^T v`` a ball
                          above 0 (``below``)
    lambda_min(A) > t     an LDL^T factorisation of ``A - t I`` with every pivot's ball above 0, ``A``'s
                          balls symmetric: each off-diagonal pair the same ball (``above``)
    |x| <= b              every ball of |x| at most b, as balls (``bounded``)
    a != 0 (off a kink)   every ball excludes 0 (``off_kinks``)
    x = 0 (an identity)   balls containing 0 at >= ``IDENTITY_BITS`` bits, radius below ``IDENTITY_RADIUS``
                          of the object's scale (``vanishes``): evidence at 200 bits, not a proof of 0

Every comparison is a comparison of balls (Arb's ``<``, ``<=`` hold only when they hold for every point of
both balls), never of a float read off a ball: ``float(b.upper())`` rounds to nearest, so ``1 + 2^-60`` would
read as ``<= 1``. A NaN or infinite ball decides nothing (its comparisons are false), so every certificate
fails closed on one; and an input that breaks a certificate's contract (a matrix whose balls are not
symmetric, ``v^T v`` not above 0, a scale that is not finite and positive, nothing to certify) is
``Refused``, a kind of ``Undecided``; so is an input or threshold that is not a real number. Thresholds, bounds
and scales are converted exactly like the inputs, and their balls are taken at each precision.
``test_certify.py`` feeds each certificate such hostile inputs.

Every certificate issued is logged (``LOG``: the running check, the claim, the bits and the seconds), so
``python -m theory_checks.explore`` reports per check how many instances needed one and what they cost.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Any

import numpy as np
from flint import arb, arb_mat, ctx, fmpq

PRECISIONS = (128, 256, 512, 1024)  # bits tried in turn; the last is the stated limit
IDENTITY_BITS = 200  # an identity is decided at this precision or more ...
IDENTITY_RADIUS = 2.0**-150  # ... by balls containing 0 whose radius is below this fraction of the scale

Ball = Any  # a flint.arb


class Undecided(AssertionError):
    """The ball still contains the threshold at the last precision: the certificate could not be issued."""


class Refused(Undecided):
    """The input breaks the certificate's contract: nothing is decided (and no precision could decide it)."""


@dataclass(frozen=True)
class Certificate:
    claim: str
    bits: int
    evidence: str
    seconds: float
    value: Any = None  # the deciding ball where one decides (a minor, a Rayleigh quotient), for its float64 twin
    where: tuple = ()  # where it was read (a minor's rows and columns)

    def __str__(self) -> str:
        return f"{self.claim} [{self.evidence}; {self.bits} bits, {self.seconds * 1e3:.0f} ms]"


LOG: list[tuple[str, Certificate]] = []  # (running check, certificate), read by the explore plugin


@contextmanager
def precision(bits: int) -> Iterator[None]:
    old = ctx.prec
    ctx.prec = bits
    try:
        yield
    finally:
        ctx.prec = old


Evidence = str | tuple[str, Any, tuple]  # the text, or (text, the deciding ball, where it was read)


def decide(claim: str, attempt: Callable[[], Evidence | None], bits: Sequence[int] = PRECISIONS) -> Certificate:
    """Run ``attempt`` at each precision in turn; it returns the evidence once its balls decide the claim,
    ``None`` while they do not. ``Undecided`` when the last precision does not decide (``Refused`` raised by
    ``attempt`` passes through: no precision decides a claim its input cannot carry)."""
    t0 = time.perf_counter()
    for b in bits:
        with precision(b):
            evidence = attempt()
        if evidence is not None:
            text, value, where = (evidence, None, ()) if isinstance(evidence, str) else evidence
            cert = Certificate(claim, b, text, time.perf_counter() - t0, value, where)
            LOG.append((os.environ.get("PYTEST_CURRENT_TEST", "?").split(" ")[0], cert))
            return cert
    raise Undecided(f"not decided at {bits[-1]} bits: {claim}")


Number = float | int | Fraction | Decimal | np.number  # what ``_rational`` converts exactly


def _rational(x: Any, what: str = "an input") -> fmpq:
    """The rational number ``x`` holds, exactly: a binary float of any width (``as_integer_ratio``), an integer of
    any size, a ``Fraction``, a finite ``Decimal``. ``Refused`` for anything else (a bool is not a number here, a
    complex has no order) and for a NaN or infinite value, which no rational holds."""
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, float, Fraction, Decimal, np.integer, np.floating)):
        raise Refused(f"{what}: {x!r} ({type(x).__name__}) is not a real number; valid: a float, an int, a Fraction "
                      "or a finite Decimal")
    if isinstance(x, (int, np.integer)):
        return fmpq(int(x))
    finite = x.is_finite() if isinstance(x, Decimal) else isinstance(x, Fraction) or bool(np.isfinite(x))
    if not finite:
        raise Refused(f"{what}: {x!r} is not a finite number")
    p, q = x.as_integer_ratio()  # exact for every float width, Fraction and Decimal
    return fmpq(int(p), int(q))


def _arb(q: fmpq) -> Ball:
    """The ball of the rational ``q`` at the working precision: radius 0 when ``q`` is dyadic (its numerator's bits
    are kept, however many), else Arb's enclosure of ``q``, which contains it."""
    den = int(q.q)
    if den & (den - 1) == 0:  # a power of two: exact, at a precision that holds the numerator
        with precision(max(ctx.prec, int(q.p).bit_length() + 2)):
            return arb(q)
    return arb(q)


def _ball_of(x: Any, what: str = "an input") -> Ball:
    """One number as its ball: a float64 directly (exact), anything else through ``_rational``."""
    if isinstance(x, arb):
        return x
    if type(x) in (float, np.float64):
        return arb(float(x))  # exact: a float64 is a dyadic rational with 53 bits (NaN and inf stay as they are)
    return _arb(_rational(x, what))


def exact(x: Number | np.ndarray | Sequence) -> Any:
    """A number (or an array of them) as balls holding exactly the number given (radius 0 where it is dyadic: every
    binary float, every integer; ``_rational``): the instance's inputs. A float64 NaN or infinity stays a NaN or
    infinite ball (every certificate fails closed on it); a value that is not a real number is ``Refused``."""
    if np.ndim(x) == 0:
        return _ball_of(x.item() if isinstance(x, np.ndarray) else x)
    a = np.asarray(x)
    if a.dtype.kind not in "iufO":
        raise Refused(f"an input array of dtype {a.dtype} is not of real numbers; valid: integer, float or object")
    if a.dtype == np.float64:
        return np.vectorize(lambda v: arb(float(v)), otypes=[object])(a)
    out = np.empty(a.shape, dtype=object)
    for idx in np.ndindex(a.shape):
        v = a[idx]
        out[idx] = _ball_of(v.item() if a.dtype.kind in "iu" else v)  # NumPy ints as Python ints: no overflow
    return out


def ball_text(b: Ball) -> str:
    """``mid +/- rad`` with the radius as Arb holds it (``arb.str`` would fold its own rounding into it)."""
    return f"{float(b.mid()):.10g} +/- {float(b.rad()):.1e}"


def upper(b: Ball) -> float:
    """For printing only (rounded to nearest): decisions compare balls."""
    return float(b.upper())


def lower(b: Ball) -> float:
    """For printing only (rounded to nearest): decisions compare balls."""
    return float(b.lower())


def balls(x: Any) -> list[Ball]:
    """The balls of a scalar or an (object) array of them, flattened."""
    return list(np.asarray(x, dtype=object).ravel())


def finite(values: Sequence[Ball]) -> bool:
    """Every ball finite: a NaN or infinite ball carries no information about the exact value."""
    return all(isinstance(b, arb) and b.is_finite() for b in values)


def _threshold(x: Number, what: str, sign: str | None = None) -> fmpq:
    """A threshold, bound or scale as the exact rational it holds (``_rational``: never rounded through ``float``);
    ``Refused`` unless finite, and positive (``sign="positive"``) or non-negative (``"non-negative"``) when asked.
    The caller takes its ball at each precision (``_arb``): a rational that is not dyadic is enclosed, not read."""
    q = _rational(x, f"{what}: the bound")
    if (sign == "positive" and not q > 0) or (sign == "non-negative" and q < 0):
        raise Refused(f"{what}: the bound {x!r} is not a finite {sign} number")
    return q


# ------------------------------------------------------------------------------------------------
# Truncated Taylor arithmetic: x(t) = c0 + c1 t + c2 t^2, f(x(t)) to second order
# ------------------------------------------------------------------------------------------------


def _ball(x) -> Ball:
    return x if isinstance(x, arb) else arb(x) if type(x) in (int, float, np.float64) else _ball_of(x)


class Taylor:
    """``c0 + c1 t + c2 t^2`` with ball coefficients; ``f(x(t)) = f(c0) + f'(c0) c1 t + (f'(c0) c2 +
    f''(c0) c1^2 / 2) t^2``. Method names follow NumPy's ufuncs (``tanh``, ``exp``, ``cos``, ...), so
    object arrays of ``Taylor`` run through ``autograd.numpy`` code unchanged."""

    __slots__ = ("c0", "c1", "c2")
    __array_priority__ = 100

    def __init__(self, c0, c1=0, c2=0):
        self.c0, self.c1, self.c2 = _ball(c0), _ball(c1), _ball(c2)

    @staticmethod
    def lift(x) -> Taylor:
        return x if isinstance(x, Taylor) else Taylor(x)

    def _chain(self, f0, f1, f2) -> Taylor:  # f(c0), f'(c0), f''(c0)
        return Taylor(f0, f1 * self.c1, f1 * self.c2 + f2 * self.c1 * self.c1 / 2)

    def __add__(self, o):
        if isinstance(o, np.ndarray):
            return NotImplemented  # elementwise, by the array
        o = Taylor.lift(o)
        return Taylor(self.c0 + o.c0, self.c1 + o.c1, self.c2 + o.c2)

    __radd__ = __add__

    def __neg__(self):
        return Taylor(-self.c0, -self.c1, -self.c2)

    def __sub__(self, o):
        if isinstance(o, np.ndarray):
            return NotImplemented  # elementwise, by the array
        return self + (-Taylor.lift(o))

    def __rsub__(self, o):
        if isinstance(o, np.ndarray):
            return NotImplemented  # elementwise, by the array
        return Taylor.lift(o) - self

    def __mul__(self, o):
        if isinstance(o, np.ndarray):
            return NotImplemented  # elementwise, by the array
        o = Taylor.lift(o)
        return Taylor(self.c0 * o.c0, self.c0 * o.c1 + self.c1 * o.c0, self.c0 * o.c2 + self.c1 * o.c1 + self.c2 * o.c0)

    __rmul__ = __mul__

    def reciprocal(self) -> Taylor:
        r = 1 / self.c0
        return self._chain(r, -r * r, 2 * r * r * r)

    def __truediv__(self, o):
        if isinstance(o, np.ndarray):
            return NotImplemented  # elementwise, by the array
        return self * Taylor.lift(o).reciprocal()

    def __rtruediv__(self, o):
        if isinstance(o, np.ndarray):
            return NotImplemented  # elementwise, by the array
        return Taylor.lift(o) * self.reciprocal()

    def __pow__(self, p: int):
        if p != int(p) or p < 0:
            raise ValueError(f"Taylor ** {p}: only non-negative integer powers")
        out = Taylor(1)
        for _ in range(int(p)):
            out = out * self
        return out

    def exp(self):
        e = self.c0.exp()
        return self._chain(e, e, e)

    def log(self):
        return self._chain(self.c0.log(), 1 / self.c0, -1 / (self.c0 * self.c0))

    def sqrt(self):
        s = self.c0.sqrt()
        return self._chain(s, 1 / (2 * s), -1 / (4 * s * self.c0))

    def tanh(self):
        t = self.c0.tanh()
        dt = 1 - t * t
        return self._chain(t, dt, -2 * t * dt)

    def cos(self):
        c, s = self.c0.cos(), self.c0.sin()
        return self._chain(c, -s, -c)

    def sin(self):
        c, s = self.c0.cos(), self.c0.sin()
        return self._chain(s, c, -s)

    def erf(self):
        g = 2 / arb.pi().sqrt() * (-self.c0 * self.c0).exp()
        return self._chain(self.c0.erf(), g, -2 * self.c0 * g)

    def sigmoid(self):
        s = 1 / (1 + (-self.c0).exp())
        ds = s * (1 - s)
        return self._chain(s, ds, ds * (1 - 2 * s))

    def relu(self):
        """Decided only off the kink: a ball that straddles 0 raises ``Undecided``."""
        if self.c0 > 0:
            return self
        if self.c0 < 0:
            return Taylor(0)
        raise Undecided(f"a ReLU pre-activation's ball {self.c0} contains the kink")


# The activations as ball functions of a Taylor number, written from their definitions (not mini's table).
BALL_ACTIVATIONS: dict[str | None, Callable[[Taylor], Taylor]] = {
    None: lambda a: a,
    "relu": Taylor.relu,
    "gelu": lambda a: a * (1 + (a / arb(2).sqrt()).erf()) / 2,  # a Phi(a)
    "swish": lambda a: a * a.sigmoid(),
    "tanh": Taylor.tanh,
    "softplus": lambda a: (1 + a.exp()).log() if a.c0 < 30 else a + (1 + (-a).exp()).log(),
}


def taylor_array(x: np.ndarray, c1: np.ndarray | None = None) -> np.ndarray:
    """``x + t c1`` elementwise as an object array of ``Taylor`` (``x``, ``c1`` as ``exact`` balls)."""
    x0 = np.asarray(exact(x), dtype=object)
    x1 = np.full(x0.shape, arb(0), dtype=object) if c1 is None else np.asarray(exact(c1), dtype=object)
    if x1.shape != x0.shape:
        raise Refused(f"taylor_array: the direction's shape {x1.shape} is not the point's {x0.shape}")
    out = np.empty(x0.shape, dtype=object)
    for idx in np.ndindex(x0.shape):
        out[idx] = Taylor(x0[idx], x1[idx])
    return out


def ball_head(head, X: np.ndarray, pre: list | None = None) -> np.ndarray:
    """``h(X)`` for an object array ``X`` (n, d) of ``Taylor``: ``a_l = x W_l^T + b_l``, ``x_l = s(a_l)``,
    the weights as exact balls. ``pre`` collects the hidden pre-activations when given."""
    s = BALL_ACTIVATIONS[head.spec.activation]
    x = X
    for l, layer in enumerate(head.layers):
        x = np.dot(x, exact(layer["W"]).T)
        if "b" in layer:
            x = x + exact(layer["b"])
        if l < len(head.layers) - 1:
            if pre is not None:
                pre.append(x)
            x = np.vectorize(s, otypes=[object])(x)
    return x


def coefficient(y: np.ndarray, order: int) -> np.ndarray:
    """The ``t^order`` coefficients of an object array of ``Taylor`` (or of plain numbers: 0 for order > 0)."""
    name = ("c0", "c1", "c2")[order]
    return np.vectorize(lambda v: getattr(v, name) if isinstance(v, Taylor) else (v if order == 0 else arb(0)),
                        otypes=[object])(np.asarray(y, dtype=object))


def jacobian(fn: Callable[[np.ndarray], np.ndarray], x: np.ndarray) -> np.ndarray:
    """``d fn / d x`` (q, p) as balls, one Taylor pass per input coordinate; ``x`` (p,) exact (``exact``)."""
    x = np.asarray(x)
    cols = [coefficient(fn(taylor_array(x, e)), 1).ravel() for e in np.eye(x.size)]
    return np.stack(cols, axis=1)


def quadratic_form(fn: Callable[[np.ndarray], Any], x: np.ndarray, v: np.ndarray) -> Ball:
    """``v^T (grad^2 fn)(x) v`` for a scalar ``fn`` as a ball: twice the ``t^2`` coefficient of ``fn(x + t v)``."""
    return 2 * Taylor.lift(fn(taylor_array(x, v))).c2


# ------------------------------------------------------------------------------------------------
# Decisions on ball matrices
# ------------------------------------------------------------------------------------------------


def midpoints(A: np.ndarray) -> np.ndarray:
    return np.vectorize(lambda b: float(b.mid()), otypes=[float])(A)


def pivots(A: np.ndarray, r: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows and columns of an ``r x r`` submatrix of ``A`` (float) likely to be far from singular: the first
    ``r`` pivots of column-pivoted QR on ``A`` (columns) and on its selected columns' transpose (rows)."""
    from scipy.linalg import qr

    _, _, cols = qr(A, pivoting=True, mode="economic")
    _, _, rows = qr(A[:, cols[:r]].T, pivoting=True, mode="economic")
    return np.sort(rows[:r]), np.sort(cols[:r])


def minor(A: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> Ball:
    return arb_mat([[A[i, j] for j in cols] for i in rows]).det()


def rank_at_least(compute: Callable[[], np.ndarray], r: int, what: str) -> Certificate:
    """``rank >= r`` of the ball matrix ``compute()`` (recomputed at each precision): an ``r x r`` minor
    whose ball excludes 0. Undecided on a NaN or infinite entry (its minors' balls contain everything)."""
    if r != int(r) or r < 0:
        raise Refused(f"rank({what}) >= {r}: r must be a non-negative integer")
    if r == 0:
        return Certificate(f"rank({what}) >= 0", 0, "trivial", 0.0)
    choice: list[tuple[np.ndarray, np.ndarray]] = []

    def attempt() -> Evidence | None:
        A = np.asarray(compute(), dtype=object)
        if A.ndim != 2 or r > min(A.shape):
            raise Refused(f"rank({what}) >= {r}: a matrix of shape {A.shape} has no {r} x {r} minor")
        if not finite(balls(A)):
            return None
        if not choice:
            choice.append(pivots(midpoints(A), r))
        rows, cols = choice[0]
        m = minor(A, rows, cols)
        if m.contains(0):
            return None
        return f"minor rows {rows.tolist()} cols {cols.tolist()} = {ball_text(m)}", m, (rows, cols)

    return decide(f"rank({what}) >= {r}", attempt)


def vanishes(compute: Callable[[], np.ndarray], scale: float, what: str) -> Certificate:
    """An identity: every ball of ``compute()`` contains 0 with ``|x| <= IDENTITY_RADIUS x scale`` (a ball
    comparison), at ``IDENTITY_BITS`` bits or more (``scale``, the float64 scale of the object, finite and
    positive, converted exactly: ``_threshold``). A ball that excludes 0 disproves the identity (``Undecided`` at
    once); a NaN or infinite ball leaves it undecided."""
    s = _threshold(scale, f"{what} = 0: scale", "positive")

    def attempt() -> Evidence | None:
        radius = arb(IDENTITY_RADIUS) * _arb(s)  # 2^-150 x the scale (exact when the scale is dyadic)
        values = balls(compute())
        if not values:
            raise Refused(f"{what} = 0: no balls to certify")
        if not finite(values):
            return None
        excluding = [b for b in values if not b.contains(0)]
        if excluding:
            raise Undecided(f"{what}: a ball excludes 0, the identity fails: {excluding[0]}")
        if not all(abs(b) <= radius for b in values):
            return None
        return f"{len(values)} balls contain 0, |x| <= {max(upper(abs(b)) for b in values):.1e}"

    return decide(f"{what} = 0", attempt, bits=[b for b in PRECISIONS if b >= IDENTITY_BITS])


def bounded(compute: Callable[[], np.ndarray], bound: float, what: str) -> Certificate:
    """``|x| <= bound`` for every ball of ``compute()``, compared as balls (``abs(x) <= bound`` holds for every
    point): a quantity certified small, not zero (an instance built from rounded float64 data, an orthogonal
    matrix say, is exact only to its rounding). A NaN or infinite ball is never bounded; ``bound`` is converted
    exactly (``_threshold``)."""
    q = _threshold(bound, f"|{what}|", "non-negative")

    def attempt() -> Evidence | None:
        b = _arb(q)
        values = balls(compute())
        if not values:
            raise Refused(f"|{what}| <= {float(q):.2e}: no balls to certify")
        if not finite(values) or not all(abs(x) <= b for x in values):
            return None
        return f"|x| <= {max(upper(abs(x)) for x in values):.2e}"

    return decide(f"|{what}| <= {float(q):.2e}", attempt)


def off_kinks(compute: Callable[[], Sequence[Ball]], what: str) -> Certificate:
    """Every ball of ``compute()`` (a head's hidden pre-activations) excludes 0, so a piecewise-linear
    activation is on one linear piece on a neighbourhood of the point. An empty list (no hidden layer: the
    head is affine) is said so; a ball that contains 0, or is NaN, leaves it undecided."""

    def attempt() -> Evidence | None:
        values = balls(compute())
        if not values:
            return "no hidden layer: h is affine"
        if not finite(values) or any(x.contains(0) for x in values):
            return None
        return f"{len(values)} pre-activation balls, |a| >= {min(lower(abs(x)) for x in values):.3e}"

    return decide(f"{what} off its kink", attempt)


def below(compute: Callable[[], tuple[Ball, Ball]], t: float, what: str) -> Certificate:
    """``lambda_min < t`` by a Rayleigh quotient: ``compute()`` returns ``(v^T A v, v^T v)`` as balls, with
    ``v^T v`` above 0 (``Refused`` otherwise: ``v = 0`` or not a square norm), and the quotient's ball below
    ``t`` (every point of it; ``t`` converted exactly: ``_threshold``)."""
    tq = _threshold(t, f"lambda_min({what}) < t")

    def attempt() -> Evidence | None:
        t_ball = _arb(tq)
        q, vv = compute()
        if not finite([q, vv]):
            return None
        if vv <= 0:  # every point of it: v = 0, or not a square norm
            raise Refused(f"lambda_min({what}) < {float(tq):g}: v^T v = {vv} is not positive")
        if not vv > 0:
            return None
        rq = q / vv
        if not rq < t_ball:
            return None
        return f"v^T A v / v^T v = {ball_text(rq)}", rq, ()

    return decide(f"lambda_min({what}) < {float(tq):g}", attempt)


def ldl_pivots(A: np.ndarray) -> list[Ball]:
    """The pivots ``D`` of ``A = L D L^T`` (symmetric ``A`` as an object array of balls, its lower triangle
    read), no pivoting. All of them above 0 if and only if ``A`` is positive definite (Sylvester: ``D_j``
    are ratios of leading principal minors)."""
    n = A.shape[0]
    Lm = [[arb(0)] * n for _ in range(n)]
    D: list[Ball] = []
    for j in range(n):
        dj = A[j, j] - sum((Lm[j][m] * Lm[j][m] * D[m] for m in range(j)), arb(0))
        D.append(dj)
        if not dj > 0:
            return D  # undecided (or not positive): stop, the caller sees the last pivot
        for i in range(j + 1, n):
            Lm[i][j] = (A[i, j] - sum((Lm[i][m] * Lm[j][m] * D[m] for m in range(j)), arb(0))) / dj
    return D


def symmetric_balls(A: np.ndarray, what: str) -> np.ndarray:
    """``A`` (square, balls) checked symmetric as balls: each off-diagonal pair the same ball (midpoint and radius).
    ``Refused`` otherwise, or when ``A`` is not square. Overlapping balls are not enough: they may enclose a
    non-symmetric exact matrix (``[0 +/- 1]`` over ``[1.9 +/- 1]`` holds 1 and 2.9), and their intersection holds
    neither entry. A caller whose exactly symmetric matrix comes out of two computations passes ``(A + A^T) / 2``,
    which encloses the exact matrix; with equal balls the certificate holds for every matrix they enclose, its
    symmetric part included (so ``x^T A x > t |x|^2`` even for a non-symmetric one)."""
    A = np.array(A, dtype=object)
    if A.ndim != 2 or A.shape[0] != A.shape[1]:
        raise Refused(f"{what}: not a square matrix (shape {A.shape})")
    for i in range(A.shape[0]):
        for j in range(i):
            a, b = A[i, j], A[j, i]
            if a.is_finite() and b.is_finite() and not (a.mid() == b.mid() and a.rad() == b.rad()):
                raise Refused(f"{what}: not symmetric at ({i}, {j}): {a} and {b}")
    return A


def above(compute: Callable[[], np.ndarray], t: float, what: str) -> Certificate:
    """``lambda_min(A) > t`` for a symmetric ``A = compute()`` (balls; ``Refused`` when not symmetric): every
    pivot of ``A - t I = L D L^T`` above 0 (``t`` converted exactly: ``_threshold``)."""
    tq = _threshold(t, f"lambda_min({what}) > t")
    claim = f"lambda_min({what}) > {float(tq):g}"

    def attempt() -> Evidence | None:
        shift = _arb(tq)
        A = symmetric_balls(compute(), claim)
        if not finite(balls(A)):
            return None
        for i in range(A.shape[0]):
            A[i, i] = A[i, i] - shift
        D = ldl_pivots(A)
        if len(D) < A.shape[0] or not all(d > 0 for d in D):
            return None
        return f"LDL^T of A - t I: {len(D)} pivots, the smallest >= {min(lower(d) for d in D):.3e}", D[-1], ()

    return decide(claim, attempt)
