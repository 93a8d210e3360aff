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
    lambda_min(A) < t     a Rayleigh quotient ``v^T A v / v^T v`` whose ball lies below t (``below``)
    lambda_min(A) > t     an LDL^T factorisation of ``A - t I`` with every pivot's ball above 0 (``above``)
    |x| <= b              every ball's upper end at most b (``bounded``)
    x = 0 (an identity)   balls containing 0 at >= ``IDENTITY_BITS`` bits, radius below ``IDENTITY_RADIUS``
                          of the object's scale (``vanishes``): evidence at 200 bits, not a proof of 0

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


@dataclass(frozen=True)
class Certificate:
    claim: str
    bits: int
    evidence: str
    seconds: float

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


def decide(claim: str, attempt: Callable[[], str | None], bits: Sequence[int] = PRECISIONS) -> Certificate:
    """Run ``attempt`` at each precision in turn; it returns the evidence (a string) once its balls decide
    the claim, ``None`` while they do not. ``Undecided`` when the last precision does not decide."""
    t0 = time.perf_counter()
    for b in bits:
        with precision(b):
            evidence = attempt()
        if evidence is not None:
            cert = Certificate(claim, b, evidence, time.perf_counter() - t0)
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
    return float(b.upper())


def lower(b: Ball) -> float:
    return float(b.lower())


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
    whose ball excludes 0."""
    if r == 0:
        return Certificate(f"rank({what}) >= 0", 0, "trivial", 0.0)
    choice: list[tuple[np.ndarray, np.ndarray]] = []

    def attempt() -> str | None:
        A = compute()
        if not choice:
            choice.append(pivots(midpoints(A), r))
        rows, cols = choice[0]
        m = minor(A, rows, cols)
        return None if m.contains(0) else f"minor rows {rows.tolist()} cols {cols.tolist()} = {ball_text(m)}"

    return decide(f"rank({what}) >= {r}", attempt)


def vanishes(compute: Callable[[], np.ndarray], scale: float, what: str) -> Certificate:
    """An identity: every ball of ``compute()`` contains 0 with radius below ``IDENTITY_RADIUS x scale``,
    at ``IDENTITY_BITS`` bits or more (the float64 scale of the object, ``scale > 0``)."""

    def attempt() -> str | None:
        values = np.asarray(compute(), dtype=object).ravel()
        if not all(b.contains(0) for b in values):
            raise Undecided(f"{what}: a ball excludes 0, the identity fails: "
                            f"{next(b for b in values if not b.contains(0))}")
        worst = max((upper(abs(b)) for b in values), default=0.0)
        return None if worst > IDENTITY_RADIUS * scale else f"{values.size} balls contain 0, |x| <= {worst:.1e}"

    return decide(f"{what} = 0", attempt, bits=[b for b in PRECISIONS if b >= IDENTITY_BITS])


def bounded(compute: Callable[[], np.ndarray], bound: float, what: str) -> Certificate:
    """``|x| <= bound`` for every ball of ``compute()`` (its upper end): a quantity certified small, not zero
    (an instance built from rounded float64 data, an orthogonal matrix say, is exact only to its rounding)."""

    def attempt() -> str | None:
        worst = max((upper(abs(b)) for b in np.asarray(compute(), dtype=object).ravel()), default=0.0)
        return f"|x| <= {worst:.2e}" if worst <= bound else None

    return decide(f"|{what}| <= {bound:.2e}", attempt)


def below(compute: Callable[[], tuple[Ball, Ball]], t: float, what: str) -> Certificate:
    """``lambda_min < t`` by a Rayleigh quotient: ``compute()`` returns ``(v^T A v, v^T v)`` as balls."""

    def attempt() -> str | None:
        q, vv = compute()
        rq = q / vv
        return f"v^T A v / v^T v = {ball_text(rq)}" if rq < t else None

    return decide(f"lambda_min({what}) < {t:g}", attempt)


def ldl_pivots(A: np.ndarray) -> list[Ball]:
    """The pivots ``D`` of ``A = L D L^T`` (symmetric ``A`` as an object array of balls), no pivoting.
    All of them above 0 if and only if ``A`` is positive definite (Sylvester: ``D_j`` are ratios of
    leading principal minors)."""
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


def above(compute: Callable[[], np.ndarray], t: float, what: str) -> Certificate:
    """``lambda_min(A) > t``: every pivot of ``A - t I = L D L^T`` (``A = compute()``, balls) above 0."""

    def attempt() -> str | None:
        A = np.array(compute(), dtype=object)
        for i in range(A.shape[0]):
            A[i, i] = A[i, i] - t
        D = ldl_pivots(A)
        if len(D) < A.shape[0] or not D[-1] > 0:
            return None
        low = min(lower(d) for d in D)
        return f"LDL^T of A - t I: {len(D)} pivots, the smallest >= {low:.3e}"

    return decide(f"lambda_min({what}) > {t:g}", attempt)

