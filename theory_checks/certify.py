"""Certified decisions in ball arithmetic, where float64 cannot decide a sign, a rank or an identity.

A float64 verdict is trusted only where it is far from its threshold; inside a check's *undecidable band*
(a singular value between a structural zero and a clear gap, an eigenvalue near a threshold), the quantity
is recomputed here from the instance's exact inputs in ball arithmetic (Arb, through ``python-flint``):
every number is a ball ``[mid +/- rad]`` guaranteed to contain the exact real value, so a ball that
excludes a threshold decides a comparison with it, with no tolerance of the project's choosing.

Inputs are float64 numbers, which are exact rationals (``arb(x)`` has radius 0); activations, losses and
their derivatives are ball functions. Derivatives come from truncated Taylor arithmetic (``Taylor``: the
coefficients ``c0 + c1 t + c2 t^2`` of ``f(x + t v)``), so a Jacobian column is one forward pass with
``c1 = e_j`` and a quadratic form ``v^T H v = 2 c2`` one pass with ``c1 = v``. Nothing here imports
``mini``'s activation table or Hessian code: the certificate is an independent computation.

Certificates (each ``decide`` raises the working precision, ``PRECISIONS``, until the ball excludes the
threshold, or fails with ``Undecided`` at the last one):

    rank(A) >= r          an r x r minor whose ball excludes 0 (``rank_at_least``)
    lambda_min(A) < t     a Rayleigh quotient ``v^T A v / v^T v`` whose ball lies below t, ``v^T v`` a ball
                          above 0 (``below``)
    lambda_min(A) > t     an LDL^T factorisation of ``A - t I`` with every pivot's ball above 0, ``A``'s
                          balls symmetric (``above``)
    |x| <= b              every ball of |x| at most b, as balls (``bounded``)
    a != 0 (off a kink)   every ball excludes 0 (``off_kinks``)
    x = 0 (an identity)   balls containing 0 at >= ``IDENTITY_BITS`` bits, radius below ``IDENTITY_RADIUS``
                          of the object's scale (``vanishes``): evidence at 200 bits, not a proof of 0

Every comparison is a comparison of balls (Arb's ``<``, ``<=`` hold only when they hold for every point of
both balls), never of a float read off a ball: ``float(b.upper())`` rounds to nearest, so ``1 + 2^-60`` would
read as ``<= 1``. A NaN or infinite ball decides nothing (its comparisons are false), so every certificate
fails closed on one; and an input that breaks a certificate's contract (a matrix whose balls are not
symmetric, ``v^T v`` not above 0, a scale that is not finite and positive, nothing to certify) is
``Refused``, a kind of ``Undecided``. ``test_certify.py`` feeds each certificate such hostile inputs.

Every certificate issued is logged (``LOG``: the running check, the claim, the bits and the seconds), so
``python -m theory_checks.explore`` reports per check how many instances needed one and what they cost.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
from flint import arb, arb_mat, ctx

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


def exact(x: float | np.ndarray) -> Any:
    """A float64 number (or array of them) as exact balls (radius 0): the instance's inputs."""
    if np.ndim(x) == 0:
        return arb(float(x))
    return np.vectorize(lambda v: arb(float(v)), otypes=[object])(np.asarray(x, dtype=float))


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


def _exact_bound(x: float, what: str, positive: bool = False) -> Ball:
    """A float64 threshold as an exact ball; ``Refused`` unless finite (and positive when asked)."""
    x = float(x)
    if not np.isfinite(x) or (positive and not x > 0) or (not positive and x < 0):
        raise Refused(f"{what}: the bound {x!r} is not a finite {'positive' if positive else 'non-negative'} number")
    return arb(x)


# ------------------------------------------------------------------------------------------------
# Truncated Taylor arithmetic: x(t) = c0 + c1 t + c2 t^2, f(x(t)) to second order
# ------------------------------------------------------------------------------------------------


def _ball(x) -> Ball:
    return x if isinstance(x, arb) else arb(float(x)) if isinstance(x, (float, np.floating)) else arb(x)


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
    """``x + t c1`` elementwise as an object array of ``Taylor`` (``x``, ``c1`` float64: exact)."""
    x = np.asarray(x, dtype=float)
    c1 = np.zeros_like(x) if c1 is None else np.asarray(c1, dtype=float)
    out = np.empty(x.shape, dtype=object)
    for idx in np.ndindex(x.shape):
        out[idx] = Taylor(arb(float(x[idx])), arb(float(c1[idx])))
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
    """``d fn / d x`` (q, p) as balls, one Taylor pass per input coordinate; ``x`` (p,) float64, exact."""
    x = np.asarray(x, dtype=float)
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
    positive). A ball that excludes 0 disproves the identity (``Undecided`` at once); a NaN or infinite ball
    leaves it undecided."""
    radius = arb(IDENTITY_RADIUS) * _exact_bound(scale, f"{what} = 0: scale", positive=True)  # exact: 2^-150 x

    def attempt() -> Evidence | None:
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
    matrix say, is exact only to its rounding). A NaN or infinite ball is never bounded."""
    b = _exact_bound(bound, f"|{what}|")

    def attempt() -> Evidence | None:
        values = balls(compute())
        if not values:
            raise Refused(f"|{what}| <= {bound:.2e}: no balls to certify")
        if not finite(values) or not all(abs(x) <= b for x in values):
            return None
        return f"|x| <= {max(upper(abs(x)) for x in values):.2e}"

    return decide(f"|{what}| <= {bound:.2e}", attempt)


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
    ``t`` (every point of it)."""
    if not np.isfinite(t):
        raise Refused(f"lambda_min({what}) < {t}: the threshold is not finite")
    t_ball = arb(float(t))  # exact

    def attempt() -> Evidence | None:
        q, vv = compute()
        if not finite([q, vv]):
            return None
        if vv <= 0:  # every point of it: v = 0, or not a square norm
            raise Refused(f"lambda_min({what}) < {t:g}: v^T v = {vv} is not positive")
        if not vv > 0:
            return None
        rq = q / vv
        if not rq < t_ball:
            return None
        return f"v^T A v / v^T v = {ball_text(rq)}", rq, ()

    return decide(f"lambda_min({what}) < {t:g}", attempt)


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
    """``A`` (square, balls) with each off-diagonal pair replaced by the intersection of its two balls (the
    exact symmetric matrix's entry lies in both); ``Refused`` when a pair's balls are disjoint (``A`` is not
    symmetric) or ``A`` is not square."""
    A = np.array(A, dtype=object)
    if A.ndim != 2 or A.shape[0] != A.shape[1]:
        raise Refused(f"{what}: not a square matrix (shape {A.shape})")
    for i in range(A.shape[0]):
        for j in range(i):
            if A[i, j].is_finite() and A[j, i].is_finite() and not A[i, j].overlaps(A[j, i]):
                raise Refused(f"{what}: not symmetric at ({i}, {j}): {A[i, j]} and {A[j, i]}")
            if A[i, j].is_finite() and A[j, i].is_finite():
                A[i, j] = A[j, i] = A[i, j].intersection(A[j, i])
    return A


def above(compute: Callable[[], np.ndarray], t: float, what: str) -> Certificate:
    """``lambda_min(A) > t`` for a symmetric ``A = compute()`` (balls; ``Refused`` when not symmetric): every
    pivot of ``A - t I = L D L^T`` above 0."""
    if not np.isfinite(t):
        raise Refused(f"lambda_min({what}) > {t}: the threshold is not finite")
    t_ball = arb(float(t))  # exact

    def attempt() -> Evidence | None:
        A = symmetric_balls(compute(), f"lambda_min({what}) > {t:g}")
        if not finite(balls(A)):
            return None
        for i in range(A.shape[0]):
            A[i, i] = A[i, i] - t_ball
        D = ldl_pivots(A)
        if len(D) < A.shape[0] or not all(d > 0 for d in D):
            return None
        return f"LDL^T of A - t I: {len(D)} pivots, the smallest >= {min(lower(d) for d in D):.3e}", D[-1], ()

    return decide(f"lambda_min({what}) > {t:g}", attempt)
