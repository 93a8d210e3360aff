r"""The activation table: every nonlinearity of the head grammar, written once.

An entry gives, for one activation ``s``, the three functions the project needs, each a function
``f(xp, a)`` of an array namespace ``xp`` and an array ``a``:

    value(xp, a)         s(a)                        heads' forward (NumPy, autograd, torch, CuPy)
    derivatives(xp, a)   (s'(a), s''(a))             the closed-form H_eff of ``mini.hessian``

``xp`` is the array-API namespace of ``a`` (``array_api_compat.array_namespace``) or, for
autograd's tracing, ``autograd.numpy``: the functions use only elementwise operations both
provide (``tanh``, ``exp``, ``logaddexp``, ``maximum``, ``where``, ``zeros_like``, ``ones_like``)
plus ``erf`` (not in the array API; ``erf`` below picks the library's own). ``torch_module``
names a native ``torch.nn`` module computing the same ``s`` (with its keyword arguments), or is
``None``: ``scale.engine.heads`` then wraps ``value`` itself as a module (one code path, any library).

    identity   s = a                      s' = 1                        s'' = 0
    relu       s = max(a, 0)              s' = 1[a > 0]                 s'' = 0 (a.e.)
    gelu       s = a Phi(a)               s' = Phi + a phi              s'' = phi (2 - a^2)
    swish      s = a sig(a)               s' = sig + a sig (1 - sig)    s'' = sig (1 - sig) (2 + a (1 - 2 sig))
    tanh       s = tanh a                 s' = 1 - t^2                  s'' = -2 t (1 - t^2)
    softplus   s = log(1 + e^a)           s' = sig(a)                   s'' = sig (1 - sig)

``Phi``/``phi`` are the standard normal cdf/pdf (GELU in its exact erf form), ``sig`` the logistic
function, written ``(1 + tanh(a/2)) / 2`` so that no ``exp(-a)`` overflows for ``a << 0``.
Softplus is ``logaddexp(0, a)`` exactly (torch's ``nn.Softplus`` turns into the identity above 20,
a 2e-9 difference the cross-checks would see, so it has no native module here).

Adding an activation is one ``register(Activation(...))``: the grammar (``mini.heads``), the
closed form (``mini.hessian``) and the torch heads (``scale.engine.heads``) all read this table.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import autograd.numpy as anp

Array = Any
Namespace = Any  # an array namespace: array_api_compat's, or autograd.numpy

_INV_SQRT2 = 1.0 / math.sqrt(2.0)
_INV_SQRT2PI = 1.0 / math.sqrt(2.0 * math.pi)


@dataclass(frozen=True)
class Activation:
    """One nonlinearity: ``value`` is ``s``, ``derivatives`` is ``(s', s'')``, both ``f(xp, a)``."""

    name: str
    value: Callable[[Namespace, Array], Array] = field(repr=False)
    derivatives: Callable[[Namespace, Array], tuple[Array, Array]] = field(repr=False)
    torch_module: str | None = None  # a torch.nn class computing the same s, or None (wrap ``value``)
    torch_kwargs: tuple[tuple[str, Any], ...] = ()
    smooth: bool = True  # False when s'' vanishes identically (a.e.): then M = 0 (Theorem 4.1)


# --------------------------------------------------------------------------------------------
# Library helpers: erf (not in the array API) and the overflow-free logistic function
# --------------------------------------------------------------------------------------------


def erf(xp: Namespace, x: Array) -> Array:
    """erf on any array library: autograd's (traced), torch's, CuPy's or SciPy's."""
    mod = type(x).__module__
    if xp is anp or mod.startswith("autograd"):
        library = "autograd"
    elif mod.startswith("torch"):
        library = "torch"
    elif mod.startswith("cupy"):
        library = "cupy"
    else:
        library = "scipy"
    fn = _ERF.get(library) or _ERF.setdefault(library, _load_erf(library))
    return fn(x)


_ERF: dict[str, Callable[[Array], Array]] = {}


def _load_erf(library: str) -> Callable[[Array], Array]:
    # Imported on first use: SciPy (and autograd's wrappers of it) take most of a second to import.
    if library == "autograd":
        from autograd.scipy.special import erf as fn
    elif library == "torch":
        import torch

        fn = torch.special.erf
    elif library == "cupy":
        import cupyx.scipy.special

        fn = cupyx.scipy.special.erf
    else:
        from scipy.special import erf as fn
    return fn


def sigmoid(xp: Namespace, a: Array) -> Array:
    """``sig(a) = (1 + tanh(a/2)) / 2``: the logistic function without ``exp(-a)`` overflowing."""
    return 0.5 * (1.0 + xp.tanh(0.5 * a))


# --------------------------------------------------------------------------------------------
# The entries
# --------------------------------------------------------------------------------------------


def _identity_d(xp, a):
    return xp.ones_like(a), xp.zeros_like(a)


def _relu(xp, a):
    return xp.maximum(a, xp.zeros_like(a))


def _relu_d(xp, a):
    return xp.where(a > 0, xp.ones_like(a), xp.zeros_like(a)), xp.zeros_like(a)


def _gelu(xp, a):
    return 0.5 * a * (1.0 + erf(xp, a * _INV_SQRT2))


def _gelu_d(xp, a):
    phi = _INV_SQRT2PI * xp.exp(-0.5 * a * a)
    Phi = 0.5 * (1.0 + erf(xp, a * _INV_SQRT2))
    return Phi + a * phi, phi * (2.0 - a * a)


def _swish(xp, a):
    return a * sigmoid(xp, a)


def _swish_d(xp, a):
    sig = sigmoid(xp, a)
    ds = sig * (1.0 - sig)
    return sig + a * ds, ds * (2.0 + a * (1.0 - 2.0 * sig))


def _tanh(xp, a):
    return xp.tanh(a)


def _tanh_d(xp, a):
    t = xp.tanh(a)
    dt = 1.0 - t * t
    return dt, -2.0 * t * dt


def _softplus(xp, a):
    return xp.logaddexp(xp.zeros_like(a), a)


def _softplus_d(xp, a):
    sig = sigmoid(xp, a)
    return sig, sig * (1.0 - sig)


IDENTITY = Activation("identity", lambda xp, a: a, _identity_d, "Identity", smooth=False)

# name -> entry, in the order the grammar lists them. ``identity`` is the activation of ``linear``
# (and of activation-free layer stacks); it is not a grammar word of its own.
TABLE: dict[str, Activation] = {}


def register(entry: Activation) -> Activation:
    """Add (or replace) a table entry; its name becomes a grammar word (``<name><n>``)."""
    if not entry.name.isalpha() or entry.name != entry.name.lower() or entry.name in ("linear", "identity"):
        raise ValueError(f"activation names are lower-case letters other than 'linear'/'identity', got {entry.name!r}")
    TABLE[entry.name] = entry
    return entry


def unregister(name: str) -> None:
    """Remove an entry (for tests that register a toy activation)."""
    TABLE.pop(name, None)


for _entry in (
    Activation("relu", _relu, _relu_d, "ReLU", smooth=False),
    Activation("gelu", _gelu, _gelu_d, "GELU", (("approximate", "none"),)),  # exact: a Phi(a)
    Activation("swish", _swish, _swish_d, "SiLU"),  # a sig(a)
    Activation("tanh", _tanh, _tanh_d, "Tanh"),
    Activation("softplus", _softplus, _softplus_d, None),  # exact logaddexp: no native module
):
    register(_entry)


def names() -> tuple[str, ...]:
    """The grammar's activation words, in table order."""
    return tuple(TABLE)


def get(activation: str | None) -> Activation:
    """The entry of ``activation`` (``None`` -> identity); ``ValueError`` listing the valid names."""
    if activation is None or activation == "identity":
        return IDENTITY
    try:
        return TABLE[activation]
    except KeyError:
        raise ValueError(f"unknown activation {activation!r}; valid: {', '.join(TABLE)}") from None
