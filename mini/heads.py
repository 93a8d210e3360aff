"""Projection heads: the one head grammar of the project (docs/paper.md, "Setting and notation").

A head ``h_phi: R^d -> R^k`` maps backbone representations ``z`` to embeddings ``h``. Heads are
named by a short spec that means the same thing in ``mini`` and in ``scale``:

    linear          one Linear layer                         h = W1 z + b1
    <act><n>        n >= 2 Linear layers, <act> between them  h = W_n s(... s(W1 z + b1) ...) + b_n

with ``<act>`` a name of the activation table (``mini.activations``: ``relu``, ``gelu`` (exact
erf form), ``swish`` (= SiLU), ``tanh``, ``softplus``, and any entry registered there). So
``gelu3`` is Linear-GELU-Linear-GELU-Linear, the paper's "3-layer MLP". Widths (input ``d``,
hidden ``width``, output ``k``) and bias on/off are parameters, not part of the spec.

Objects and shapes
------------------
- ``HeadSpec``: the parsed spec (activation name or ``None`` for ``linear``, number of layers).
- ``Head``: a spec plus its weights, ``layers[l] = {"W": (out_l, in_l), "b": (out_l,)}``. The
  weight layout is torch's ``nn.Linear`` (``a = x @ W.T + b``), so that ``J = W2 diag(s'(a)) W1``
  reads exactly as in docs/paper.md and ``scale`` can copy weights without transposes.
- ``head(Z)``: the one way to run a head. ``Z`` is ``(n, d)`` (or one sample ``(d,)``), the
  result ``(n, k)``; rows are independent. Autograd-safe: to differentiate with respect to the
  weights, call ``Head(spec, layers)(Z)`` (or ``head.with_layers(layers)(Z)``) inside the traced
  function.

``s, s'`` and ``s''`` come from the activation table (the closed-form Hessian in ``hessian.py``
needs all three); ``derivatives`` and ``activation_fn`` are its checked public face.
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

from mini import activations
from mini.arrays import namespace
from mini.validation import check_array

Array = Any  # an array of NumPy, autograd's boxes, CuPy or torch

ACTIVATIONS: tuple[str, ...] = activations.names()  # the built-in activations (the table may grow)
_SPEC_RE = re.compile(r"^(?P<act>[a-z]+)(?P<n>\d+)$")


def valid_forms() -> str:
    """The grammar in one line, listing the activation table's current names."""
    return (
        "'linear' (one Linear layer) or '<act><n>' with <act> in {"
        + ", ".join(activations.names())
        + "} and n >= 2 Linear layers, e.g. 'relu2', 'gelu3', 'swish3'"
    )



# --------------------------------------------------------------------------------------------
# The grammar
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HeadSpec:
    """A parsed head spec: ``activation`` is ``None`` for ``linear``; ``n_layers`` Linear layers."""

    activation: str | None
    n_layers: int

    @property
    def name(self) -> str:
        return "linear" if self.activation is None else f"{self.activation}{self.n_layers}"

    @property
    def smooth(self) -> bool:
        """True when ``s''`` is not identically zero (so the interaction term ``M`` can live)."""
        return activations.get(self.activation).smooth

    def __str__(self) -> str:
        return self.name


def parse_head_spec(spec: str | HeadSpec) -> HeadSpec:
    """Parse ``'linear'`` or ``'<act><n>'`` (n >= 2); raise ``ValueError`` listing valid forms."""
    if isinstance(spec, HeadSpec):
        return spec
    if not isinstance(spec, str):
        raise ValueError(f"head spec must be a string, got {type(spec).__name__}; valid forms: {valid_forms()}")
    text = spec.strip().lower()
    if text == "linear":
        return HeadSpec(None, 1)
    match = _SPEC_RE.match(text)
    if match is None:
        raise ValueError(f"invalid head spec {spec!r}; valid forms: {valid_forms()}")
    act, n = match["act"], int(match["n"])
    if act not in activations.TABLE:
        raise ValueError(f"invalid head spec {spec!r}: unknown activation {act!r}; valid forms: {valid_forms()}")
    if n < 2:
        raise ValueError(
            f"invalid head spec {spec!r}: an activation needs n >= 2 Linear layers around it "
            f"(use 'linear' for one layer); valid forms: {valid_forms()}"
        )
    return HeadSpec(act, n)


# --------------------------------------------------------------------------------------------
# Activations: the table's s (autograd) and s', s'' (array API), with checked input
# --------------------------------------------------------------------------------------------


def derivatives(activation: str | None, a: Array) -> tuple[Array, Array]:
    """``(s'(a), s''(a))`` elementwise, closed form (``mini.activations``), on any array-API array."""
    entry = activations.get(activation)
    check_array("pre-activations", a)
    return entry.derivatives(namespace(a), a)


def activation_fn(activation: str | None) -> Callable[[Array], Array]:
    """``s`` as an autograd-safe function of an array (identity for ``None``)."""
    entry = activations.get(activation)
    return lambda a: entry.value(anp, a)


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

    def __call__(self, Z: Array, *, hidden: Callable[[int, Array], Array] | None = None) -> Array:
        """``h(Z)``: ``a_l = x_{l-1} W_l^T + b_l``, hidden ``x_l = s(hidden(l, a_l))``, ``h = a_L``.

        ``Z`` is (n, d) or (d,). ``hidden`` (default: the identity) sees each hidden
        pre-activation before ``s``: a BatchNorm (``mini.dynamics``) or a recorder
        (``preactivations``). Autograd-safe; ``ValueError`` on complex, empty or non-finite ``Z``.
        """
        check_array("Z", Z, ndim=(1, 2))
        s = activations.get(self.spec.activation).value
        x = Z
        for l, layer in enumerate(self.layers):
            x = anp.dot(x, layer["W"].T)
            if "b" in layer:
                x = x + layer["b"]
            if l < len(self.layers) - 1:
                x = s(anp, x if hidden is None else hidden(l, x))
        return x


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


def preactivations(head: Head, Z: Array) -> list[Array]:
    """Hidden pre-activations ``a_1, ..., a_{L-1}``, each ``(n, width_l)`` (for kink checks, etc.)."""
    out: list[Array] = []

    def record(_: int, a: Array) -> Array:
        out.append(a)
        return a

    head(Z, hidden=record)
    return out
