"""Projection heads: the one head grammar of the project (docs/paper.md, "Setting and notation").

A head ``h_phi: R^d -> R^k`` maps backbone representations ``z`` to embeddings ``h``. Heads are
named by a short spec that means the same thing in ``mini`` and in ``scale``:

    linear          one Linear layer                         h = W1 z + b1
    <act><n>        n >= 2 Linear layers, <act> between them  h = W_n s(... s(W1 z + b1) ...) + b_n

with ``<act>`` one of ``relu``, ``gelu`` (exact erf form), ``swish`` (= SiLU), ``tanh``,
``softplus``. So ``gelu3`` is Linear-GELU-Linear-GELU-Linear, the paper's "3-layer MLP".
Widths (input ``d``, hidden ``width``, output ``k``) and bias on/off are parameters, not part of
the spec. ``HeadSpec.batchnorm`` is reserved for a BatchNorm marker; the grammar has none yet.

Objects and shapes
------------------
- ``HeadSpec``: the parsed spec (activation name or ``None`` for ``linear``, number of layers).
- ``Head``: a spec plus its weights, ``layers[l] = {"W": (out_l, in_l), "b": (out_l,)}``. The
  weight layout is torch's ``nn.Linear`` (``a = x @ W.T + b``), so that ``J = W2 diag(s'(a)) W1``
  reads exactly as in docs/paper.md and ``scale`` can copy weights without transposes.
- ``apply_head(head, Z)``: ``Z`` is ``(n, d)``, the result ``(n, k)``; rows are independent.
- ``forward(spec, layers, Z)``: the same, functional in ``layers`` for autograd training.

Each activation carries ``s``, ``s'`` and ``s''`` (the closed-form Hessian in ``hessian.py`` needs
all three). ``s, s', s''`` are written against the array API so that they run on NumPy, CuPy and
torch arrays; ``s`` is also autograd-safe.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import autograd.numpy as anp
import numpy as np
from autograd.scipy.special import erf as _autograd_erf

Array = Any  # an array of NumPy, autograd's boxes, CuPy or torch

ACTIVATIONS: tuple[str, ...] = ("relu", "gelu", "swish", "tanh", "softplus")
VALID_FORMS = (
    "'linear' (one Linear layer) or '<act><n>' with <act> in {"
    + ", ".join(ACTIVATIONS)
    + "} and n >= 2 Linear layers, e.g. 'relu2', 'gelu3', 'swish3'"
)
_SPEC_RE = re.compile(r"^(?P<act>[a-z]+)(?P<n>\d+)$")


# --------------------------------------------------------------------------------------------
# The grammar
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HeadSpec:
    """A parsed head spec: ``activation`` is ``None`` for ``linear``; ``n_layers`` Linear layers."""

    activation: str | None
    n_layers: int
    batchnorm: bool = False  # reserved for a BatchNorm marker in the grammar

    @property
    def name(self) -> str:
        return "linear" if self.activation is None else f"{self.activation}{self.n_layers}"

    @property
    def smooth(self) -> bool:
        """True when ``s''`` is not identically zero (so the interaction term ``M`` can live)."""
        return self.activation not in (None, "relu")

    def __str__(self) -> str:
        return self.name


def parse_head_spec(spec: str | HeadSpec) -> HeadSpec:
    """Parse ``'linear'`` or ``'<act><n>'`` (n >= 2); raise ``ValueError`` listing valid forms."""
    if isinstance(spec, HeadSpec):
        return spec
    if not isinstance(spec, str):
        raise ValueError(f"head spec must be a string, got {type(spec).__name__}; valid forms: {VALID_FORMS}")
    text = spec.strip().lower()
    if text == "linear":
        return HeadSpec(None, 1)
    match = _SPEC_RE.match(text)
    if match is None:
        raise ValueError(f"invalid head spec {spec!r}; valid forms: {VALID_FORMS}")
    act, n = match["act"], int(match["n"])
    if act not in ACTIVATIONS:
        raise ValueError(f"invalid head spec {spec!r}: unknown activation {act!r}; valid forms: {VALID_FORMS}")
    if n < 2:
        raise ValueError(
            f"invalid head spec {spec!r}: an activation needs n >= 2 Linear layers around it "
            f"(use 'linear' for one layer); valid forms: {VALID_FORMS}"
        )
    return HeadSpec(act, n)


# --------------------------------------------------------------------------------------------
# Activations: s, s', s'' (array API) and s (autograd)
# --------------------------------------------------------------------------------------------


def _namespace(x: Array):
    import array_api_compat

    return array_api_compat.array_namespace(x)


def _erf(x: Array) -> Array:
    """erf on any array library (the array API standard has none)."""
    mod = type(x).__module__
    if mod.startswith("torch"):
        import torch

        return torch.special.erf(x)
    if mod.startswith("cupy"):
        import cupyx.scipy.special

        return cupyx.scipy.special.erf(x)
    from scipy.special import erf

    return erf(x)


_INV_SQRT2 = 1.0 / math.sqrt(2.0)
_INV_SQRT2PI = 1.0 / math.sqrt(2.0 * math.pi)


def _sigmoid(xp, a):
    # sigma(a) = (1 + tanh(a/2)) / 2: the same function, without exp(-a) overflowing for a << 0
    return 0.5 * (1.0 + xp.tanh(0.5 * a))


def derivatives(activation: str | None, a: Array) -> tuple[Array, Array]:
    """``(s'(a), s''(a))`` elementwise, closed form, on any array-API array.

    relu:     s' = 1[a > 0],                     s'' = 0 (a.e.)
    gelu:     s' = Phi(a) + a phi(a),           s'' = phi(a) (2 - a^2)
    swish:    s' = sig + a sig (1 - sig),       s'' = sig (1 - sig) (2 + a (1 - 2 sig))
    tanh:     s' = 1 - t^2,                      s'' = -2 t (1 - t^2)
    softplus: s' = sig(a),                       s'' = sig (1 - sig)
    identity: s' = 1,                            s'' = 0
    """
    xp = _namespace(a)
    if activation is None:
        return xp.ones_like(a), xp.zeros_like(a)
    if activation == "relu":
        return xp.astype(a > 0, a.dtype), xp.zeros_like(a)
    if activation == "gelu":
        phi = _INV_SQRT2PI * xp.exp(-0.5 * a * a)
        Phi = 0.5 * (1.0 + _erf(a * _INV_SQRT2))
        return Phi + a * phi, phi * (2.0 - a * a)
    if activation == "swish":
        sig = _sigmoid(xp, a)
        ds = sig * (1.0 - sig)
        return sig + a * ds, ds * (2.0 + a * (1.0 - 2.0 * sig))
    if activation == "tanh":
        t = xp.tanh(a)
        dt = 1.0 - t * t
        return dt, -2.0 * t * dt
    if activation == "softplus":
        sig = _sigmoid(xp, a)
        return sig, sig * (1.0 - sig)
    raise ValueError(f"unknown activation {activation!r}; valid: {ACTIVATIONS}")


def _gelu(a):
    return 0.5 * a * (1.0 + _autograd_erf(a * _INV_SQRT2))


def _swish(a):
    return a * 0.5 * (1.0 + anp.tanh(0.5 * a))  # a sigma(a), overflow-free


def _softplus(a):
    return anp.logaddexp(0.0, a)


def _relu(a):
    return anp.maximum(a, 0.0)


_ACT_FN: dict[str, Callable[[Array], Array]] = {
    "relu": _relu,
    "gelu": _gelu,
    "swish": _swish,
    "tanh": anp.tanh,
    "softplus": _softplus,
}


def activation_fn(activation: str | None) -> Callable[[Array], Array]:
    """``s`` as an autograd-safe function (identity for ``None``)."""
    if activation is None:
        return lambda a: a
    return _ACT_FN[activation]


# --------------------------------------------------------------------------------------------
# Heads
# --------------------------------------------------------------------------------------------

Layers = list[dict[str, Array]]


@dataclass(frozen=True)
class Head:
    """A head: its spec and weights ``layers[l] = {"W": (out, in), "b": (out,)}`` (``b`` optional)."""

    spec: HeadSpec
    layers: Layers = field(repr=False)

    @property
    def d(self) -> int:
        return int(self.layers[0]["W"].shape[1])

    @property
    def k(self) -> int:
        return int(self.layers[-1]["W"].shape[0])

    @property
    def widths(self) -> tuple[int, ...]:
        return (self.d, *(int(layer["W"].shape[0]) for layer in self.layers))

    def with_layers(self, layers: Layers) -> Head:
        return Head(self.spec, layers)

    def __call__(self, Z: Array) -> Array:
        return apply_head(self, Z)


def init_head(
    spec: str | HeadSpec,
    d: int,
    k: int,
    width: int | Sequence[int] = 64,
    rng: np.random.Generator | int | None = 0,
    *,
    bias: bool = True,
    gain: float = 1.0,
) -> Head:
    """Random head: ``W ~ N(0, gain^2 / fan_in)``, ``b ~ N(0, 0.1^2)`` (deterministic given ``rng``).

    ``width`` is one hidden width or a sequence of ``n_layers - 1`` of them. LeCun-normal scaling
    keeps pre-activations O(1) so that smooth activations are in their curved regime.
    """
    spec = parse_head_spec(spec)
    for name, value in (("d", d), ("k", k)):
        if not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    hidden = [int(width)] * (spec.n_layers - 1) if np.isscalar(width) else [int(w) for w in width]
    if len(hidden) != spec.n_layers - 1 or any(w < 1 for w in hidden):
        raise ValueError(
            f"head {spec.name} needs {spec.n_layers - 1} positive hidden widths, got {width!r}"
        )
    rng = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
    dims = [int(d), *hidden, int(k)]
    layers: Layers = []
    for fan_in, fan_out in itertools.pairwise(dims):
        layer = {"W": gain * rng.standard_normal((fan_out, fan_in)) / math.sqrt(fan_in)}
        if bias:
            layer["b"] = 0.1 * rng.standard_normal(fan_out)
        layers.append(layer)
    return Head(spec, layers)


def mlp_forward(
    activation: str | None, layers: Layers, Z: Array, hidden: Callable[[int, Array], Array] | None = None
) -> Array:
    """The layer loop of every MLP in mini: ``a_l = x_{l-1} W_l^T + b_l``; hidden layers
    ``x_l = s(hidden(l, a_l))`` (``hidden``, e.g. a BatchNorm, defaults to the identity); ``h = a_L``."""
    s = activation_fn(activation)
    x = Z
    for l, layer in enumerate(layers):
        x = anp.dot(x, layer["W"].T)
        if "b" in layer:
            x = x + layer["b"]
        if l < len(layers) - 1:
            x = s(x if hidden is None else hidden(l, x))
    return x


def forward(spec: str | HeadSpec, layers: Layers, Z: Array) -> Array:
    """``h(Z)`` row by row: ``a_l = x_{l-1} W_l^T + b_l``, ``x_l = s(a_l)``, ``h = a_L``. Autograd-safe."""
    return mlp_forward(parse_head_spec(spec).activation, layers, Z)


def apply_head(head: Head, Z: Array) -> Array:
    """``h(Z)`` for a batch ``Z`` of shape ``(n, d)`` (or one sample ``(d,)``); returns ``(n, k)``."""
    return forward(head.spec, head.layers, Z)


def preactivations(head: Head, Z: Array) -> list[Array]:
    """Hidden pre-activations ``a_1, ..., a_{L-1}``, each ``(n, width_l)`` (for kink checks, etc.)."""
    s = activation_fn(head.spec.activation)
    out, x = [], Z
    for layer in head.layers[:-1]:
        a = anp.dot(x, layer["W"].T) + layer.get("b", 0.0)
        out.append(a)
        x = s(a)
    return out
