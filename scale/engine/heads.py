"""Projection heads in torch, from the one head grammar of ``mini.heads``.

``build_head("gelu3", d, k, width)`` is the torch twin of ``mini.heads.init_head``: the same spec
parser (bad specs raise its ``ValueError``), the same activations (from the one table,
``mini.activations``: GELU in its exact erf form, swish = SiLU, softplus = log(1 + e^a) without
torch's linear cut-off, tanh, relu, and any entry registered there) and the same layout
(``layers[l]`` is an ``nn.Linear`` with ``weight`` (out, in), ``bias`` (out,)), so weights copy across
without transposes (``head_from_mini``) and the same parameters evaluate to the same ``h(z)`` on both
sides.

    h = W_n s(BN(... s(BN(W_1 z + b_1)) ...)) + b_n      (BN only with ``batchnorm=True``)

Options beyond the grammar: ``bias`` (E1's projector has none), ``batchnorm`` (BatchNorm1d after each
hidden Linear, before the activation, as in SimCLR/SimSiam projectors) and ``out_batchnorm`` (a
BatchNorm1d on the output, E3's "2048 BN" head). ``collapse_init_`` is the paper's pseudo-collapse
initialisation (every Linear weight times 0.1).

Two head styles (``HEAD_STYLES``); the spec means the same activation and Linear-layer count in both:

    grammar   the options above, as given (the project's default)
    paper     the heads of the paper's official code: no bias anywhere, and with ``batchnorm`` a
              BatchNorm1d after every Linear, the output one included:
                  <act><n>           Linear -> BN -> act -> ... -> Linear -> BN     (n Linear layers;
                                     n = 2 is its ``ProjectionHead``, any n its depth-ablation head)
                  linear, no BN      Linear(d, width) -> Linear(width, k)            (its "linear" head:
                                     two layers, no BatchNorm even when asked for)
                  linear, BN         Linear(d, k) -> BN                              (its depth-1 head)
              ``bias`` must be False and ``out_batchnorm`` equal ``batchnorm`` (or both left None).

Shapes: ``z`` is ``(n, d)``; ``h`` is ``(n, k)``; hidden widths are ``width`` (one int or a sequence
of ``n_layers - 1`` ints).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import numpy as np
import torch
from torch import nn

from mini import activations
from mini.heads import Head, HeadSpec, parse_head_spec

HEAD_STYLES: tuple[str, ...] = ("grammar", "paper")

MAX_LAYERS = 32  # the depth bound of a head spec (the paper's heads have 1-4 Linear layers)


class ElementwiseActivation(nn.Module):
    """A table activation without a native torch module: its array-API ``s`` run on tensors (so
    torch's autograd differentiates the same formula ``mini`` uses; e.g. softplus as the exact
    ``logaddexp(0, a)``, where torch's ``nn.Softplus`` would switch to the identity above 20)."""

    def __init__(self, entry: activations.Activation) -> None:
        super().__init__()
        self.entry = entry

    def forward(self, a: torch.Tensor) -> torch.Tensor:
        import array_api_compat

        return self.entry.value(array_api_compat.array_namespace(a), a)

    def extra_repr(self) -> str:
        return self.entry.name


def activation_module(activation: str | None) -> nn.Module:
    """The torch module of a table activation (``None`` -> identity): the entry's native
    ``torch.nn`` module when it names one, else ``ElementwiseActivation`` of its ``s``."""
    entry = activations.get(activation)
    if entry.torch_module is None:
        return ElementwiseActivation(entry)
    return getattr(nn, entry.torch_module)(**dict(entry.torch_kwargs))


def _resolve_style(spec: HeadSpec, style: str, bias: bool | None, batchnorm: bool, out_batchnorm: bool | None
                   ) -> tuple[bool, bool, int]:
    """``(bias, out_batchnorm, number of Linear layers)`` of a head of ``style`` (module docstring)."""
    if style == "grammar":
        return (True if bias is None else bool(bias)), bool(out_batchnorm), spec.n_layers
    if style != "paper":
        raise ValueError(f"unknown head style {style!r}; valid: {', '.join(HEAD_STYLES)}")
    if bias:
        raise ValueError("a paper-style head has no biases (the official ProjectionHead); pass bias=False or None")
    if out_batchnorm is not None and bool(out_batchnorm) != bool(batchnorm):
        raise ValueError("a paper-style head puts BatchNorm after every Linear or after none: out_batchnorm must "
                         f"equal batchnorm ({batchnorm}), got {out_batchnorm}")
    if spec.activation is None:
        return False, bool(batchnorm), 1 if batchnorm else 2  # depth-1 head (Linear, BN) or the linear head
    return False, bool(batchnorm), spec.n_layers


def _hidden_widths(spec: HeadSpec, width: int | Sequence[int]) -> list[int]:
    hidden = [int(width)] * (spec.n_layers - 1) if np.isscalar(width) else [int(w) for w in width]
    if len(hidden) != spec.n_layers - 1 or any(w < 1 for w in hidden):
        raise ValueError(f"head {spec.name} needs {spec.n_layers - 1} positive hidden widths, got {width!r}")
    return hidden


class MLPHead(nn.Module):
    """A head of the grammar: ``layers`` (ModuleList of Linear), ``norms`` (BatchNorm1d or Identity
    per hidden layer), one shared activation ``act``, optional ``out_norm``."""

    def __init__(
        self,
        spec: str | HeadSpec,
        d: int,
        k: int,
        width: int | Sequence[int] = 2048,
        *,
        bias: bool | None = None,
        batchnorm: bool = False,
        out_batchnorm: bool | None = None,
        style: str = "grammar",
    ) -> None:
        super().__init__()
        self.spec = parse_head_spec(spec)
        if self.spec.n_layers > MAX_LAYERS:  # every spec read (flags, config.json, OUT.json) passes here
            raise ValueError(f"head spec {spec!r} has {self.spec.n_layers} Linear layers; at most {MAX_LAYERS} are "
                             "supported")
        self.style = style
        for name, value in (("d", d), ("k", k)):
            if not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        bias, out_batchnorm, n_linear = _resolve_style(self.spec, style, bias, batchnorm, out_batchnorm)
        if n_linear == self.spec.n_layers:
            dims = [int(d), *_hidden_widths(self.spec, width), int(k)]
        else:  # the paper's two-layer linear head: d -> width -> k, no activation between
            dims = [int(d), *_hidden_widths(HeadSpec(None, n_linear), width), int(k)]
        self.layers = nn.ModuleList(nn.Linear(i, o, bias=bias) for i, o in itertools.pairwise(dims))
        self.norms = nn.ModuleList(
            nn.BatchNorm1d(o) if batchnorm else nn.Identity() for o in dims[1:-1]
        )
        self.act = activation_module(self.spec.activation)
        self.out_norm = nn.BatchNorm1d(dims[-1]) if out_batchnorm else nn.Identity()

    @property
    def d(self) -> int:
        return self.layers[0].in_features

    @property
    def k(self) -> int:
        return self.layers[-1].out_features

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        x = z
        for l, linear in enumerate(self.layers):
            x = linear(x)  # a_l = x_{l-1} W_l^T + b_l
            if l < len(self.layers) - 1:
                x = self.act(self.norms[l](x))
        return self.out_norm(x)

    def preactivations(self, z: torch.Tensor) -> list[torch.Tensor]:
        """Hidden pre-activations ``a_1 .. a_{L-1}`` (after BatchNorm when present), each ``(n, width_l)``."""
        out, x = [], z
        for l, linear in enumerate(self.layers[:-1]):
            a = self.norms[l](linear(x))
            out.append(a)
            x = self.act(a)
        return out

    def applied_modules(self) -> list[nn.Module]:
        """The modules in the order ``forward`` applies them, identities left out (for structure checks)."""
        out: list[nn.Module] = []
        for l, linear in enumerate(self.layers):
            out.append(linear)
            if l < len(self.layers) - 1:
                out += [self.norms[l], self.act]
        out.append(self.out_norm)
        return [m for m in out if not isinstance(m, nn.Identity)]

    def extra_repr(self) -> str:
        return f"spec={self.spec.name}, style={self.style}"


# ``build_head(spec, d, k, width, ...)``: the ``MLPHead`` for ``spec`` (``'linear'``, ``'gelu3'``, ...) in ``style``
# (``grammar``: bias on unless ``bias=False``; ``paper``: the official heads); torch's default Linear initialisation
build_head = MLPHead


@torch.no_grad()
def collapse_init_(module: nn.Module, factor: float = 0.1) -> nn.Module:
    """The paper's pseudo-collapse initialisation (E1): every Linear weight of ``module`` times ``factor``."""
    for sub in module.modules():
        if isinstance(sub, nn.Linear):
            sub.weight.mul_(factor)
    return module


def head_from_mini(head: Head, dtype: torch.dtype = torch.float64, device: torch.device | str = "cpu") -> MLPHead:
    """An ``MLPHead`` holding exactly ``head``'s weights (float64 by default, so values agree to rounding)."""
    layers = head.layers
    bias = all("b" in layer for layer in layers)
    if not bias and any("b" in layer for layer in layers):
        raise ValueError("head_from_mini: either every layer has a bias or none does")
    hidden = [int(layer["W"].shape[0]) for layer in layers[:-1]]
    module = MLPHead(head.spec, head.d, head.k, hidden if hidden else 1, bias=bias)
    module = module.to(device=device, dtype=dtype)
    with torch.no_grad():
        for linear, layer in zip(module.layers, layers):
            linear.weight.copy_(torch.as_tensor(np.asarray(layer["W"]), dtype=dtype))
            if bias:
                linear.bias.copy_(torch.as_tensor(np.asarray(layer["b"]), dtype=dtype))
    return module


def head_to_mini(module: MLPHead) -> Head:
    """The inverse of ``head_from_mini`` (float64 NumPy weights); refuses heads with BatchNorm."""
    if any(not isinstance(n, nn.Identity) for n in [*module.norms, module.out_norm]):
        raise ValueError("head_to_mini: a head with BatchNorm has no mini counterpart (fold BN first)")
    if len(module.layers) != module.spec.n_layers:
        raise ValueError(f"head_to_mini: the paper's {len(module.layers)}-layer linear head has no mini spec")
    layers = []
    for linear in module.layers:
        layer = {"W": linear.weight.detach().cpu().double().numpy()}
        if linear.bias is not None:
            layer["b"] = linear.bias.detach().cpu().double().numpy()
        layers.append(layer)
    return Head(module.spec, layers)


_KEPT = threading.local()  # reused_casts: this thread's buffers (``kept``), and those of the build under way (``used``)


@contextmanager
def reused_casts() -> Iterator[None]:
    """Within: ``mini_head_of``'s casts of weights to another dtype write into this thread's buffers of the last
    build made under it (by shape, dtype, device and order) instead of fresh memory; the buffers this build did not
    use are let go when it ends. Fresh memory that large is mapped page by page at every build: the float64 casts
    of the official tracker's head and predictor (58 MB) took 42 ms fresh against 3 ms into kept buffers (AMD EPYC,
    1 thread, 2026-12-04), paid at every measurement since the weights change between them. Only for a build whose
    weights are dead before the next build under it in the same thread, which overwrites them:
    ``scale.curvature.closed_form.blockwise_ends``'s own operators, used and dropped inside the call."""
    if getattr(_KEPT, "used", None) is not None:  # already within one: that build's buffers
        yield
        return
    _KEPT.used = {}
    try:
        yield
    finally:
        _KEPT.kept, _KEPT.used = _KEPT.used, None


def _cast(W: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``W.to(dtype)``, into a kept buffer under ``reused_casts``."""
    used = getattr(_KEPT, "used", None)
    if used is None or W.dtype == dtype:
        return W.to(dtype)
    key = (tuple(W.shape), dtype, W.device, len(used))
    buf = getattr(_KEPT, "kept", {}).get(key)
    if buf is None:
        buf = torch.empty(W.shape, dtype=dtype, device=W.device)
    used[key] = buf
    return buf.copy_(W)


def mini_head_of(module: MLPHead, dtype: torch.dtype = torch.float64) -> Head:
    """A ``mini.heads.Head`` whose weights are torch tensors (``dtype``, on the module's device).

    Eval-mode BatchNorm ``y = gamma (a - mu) / sqrt(var + eps) + beta`` is folded into the Linear
    before it: ``W' = diag(c) W``, ``b' = c (b - mu) + beta`` with ``c = gamma / sqrt(var + eps)``.
    """
    if not isinstance(module, MLPHead):
        raise ValueError(f"mini_head_of needs a scale.engine.heads.MLPHead, got {type(module).__name__}; "
                         "use method='autodiff' for other heads")
    norms = [*module.norms, module.out_norm]
    layers = []
    for linear, norm in zip(module.layers, norms):
        W = linear.weight.detach()
        b = linear.bias.detach().to(dtype) if linear.bias is not None else None
        if isinstance(norm, nn.BatchNorm1d):
            if norm.running_mean is None:
                raise ValueError("mini_head_of: a BatchNorm without running statistics cannot be folded")
            c = norm.running_var.to(dtype).add(norm.eps).rsqrt()
            if norm.weight is not None:
                c = c * norm.weight.detach().to(dtype)
            shift = -norm.running_mean.to(dtype) if b is None else b - norm.running_mean.to(dtype)
            b = c * shift + (norm.bias.detach().to(dtype) if norm.bias is not None else 0.0)
            W = c[:, None] * W  # in ``dtype`` or wider (type promotion): the cast and the fold in one pass
        W = _cast(W, dtype)
        layer = {"W": W}
        if b is not None:
            layer["b"] = b
        layers.append(layer)
    return Head(module.spec, layers)
