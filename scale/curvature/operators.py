r"""Matrix-free effective-Hessian operators on the backbone output (docs/paper.md, equation (1)).

For a fixed probe batch ``z`` (n, d) of detached backbone outputs, a head ``h`` (n, d) -> (n, k)
and an objective ``L(Hb)`` (a scalar of the embeddings, anything it holds fixed already bound):

    H v = d/dt grad_z L(h(z + t v))                      Hessian-vector product of z -> L(h(z))
    G v = J^T (grad^2_H L) (J v)                         jvp(head) -> loss HVP -> vjp(head)
    M v = d/dt grad_z <stopgrad(rho), h(z + t v)>        rho = grad_H L at h(z), held fixed

all on the flattened ``z`` (``N = n*d``, index ``(i, a) -> i*d + a``, as in ``mini.hessian``), so
``H = G + M`` holds product by product (``tests/test_curvature.py``). Nothing is materialised
except by ``dense()``, which exists for small ``N`` (cross-checks against ``mini``). ``to_scipy()`` hands
an operator to SciPy (``scipy.sparse.linalg.LinearOperator``, float64 NumPy; ``eigsh`` and friends).

Products run through autograd graphs built once per state (``create_graph`` once, then one backward
per product with ``retain_graph``; ``matmat`` batches them with ``is_grads_batched``), the default
and ``mode="auto"``: 5-7x faster per product than retracing torch.func's ``jvp(grad)``, which stays
available as ``mode="forward"`` (an independent check: the two agree to round-off, tested). The mode
used is in ``info["hvp_mode"]``.

BatchNorm in the head. ``bn_mode="eval"`` (default) uses the running statistics: every BatchNorm
is a fixed affine map, the head acts row by row and ``J`` and ``M`` are block-diagonal, as eq. (1)
assumes. ``bn_mode="train"`` uses the probe batch's own statistics (what the training step sees):
the head then couples samples, and ``J`` and ``M`` are no longer block-diagonal. Running
statistics are never updated by a curvature product (the head is copied and its BatchNorms stop
tracking). The mode used is in ``info`` and is written next to every result built on it.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor, nn
from torch.func import functional_call, grad, jvp, vjp, vmap

if TYPE_CHECKING:
    from scipy.sparse.linalg import LinearOperator

BN_MODES: tuple[str, ...] = ("eval", "train")
HVP_MODES: tuple[str, ...] = ("auto", "forward", "double-backward")
MAX_DENSE = 8192  # dense() refuses larger N unless asked: N^2 float64 entries


# --------------------------------------------------------------------------------------------
# Heads as functions of z
# --------------------------------------------------------------------------------------------


def _has_batchnorm(module: nn.Module) -> bool:
    return any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in module.modules())


def functional_head(
    head: nn.Module | Callable[[Tensor], Tensor],
    bn_mode: str = "eval",
    dtype: torch.dtype | None = None,
) -> tuple[Callable[[Tensor], Tensor], dict[str, Any]]:
    """``z -> h(z)`` as a pure function of ``z`` (parameters detached), and what it assumes.

    A module is copied (its training state is never touched), cast to ``dtype`` if given, put in
    eval mode, and its BatchNorms set per ``bn_mode``. A plain callable is used as it is.
    """
    if bn_mode not in BN_MODES:
        raise ValueError(f"bn_mode must be one of {BN_MODES}, got {bn_mode!r}")
    if not isinstance(head, nn.Module):
        if not callable(head):
            raise ValueError(f"head must be an nn.Module or a callable z -> h, got {type(head).__name__}")
        return head, {"batchnorm": "unknown (callable head)", "bn_mode": "as given"}
    module = copy.deepcopy(head)
    if dtype is not None:
        module = module.to(dtype)
    module.eval()
    has_bn = _has_batchnorm(module)
    if has_bn and bn_mode == "train":
        for m in module.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm):
                # batch statistics, and nothing written back: no in-place buffer update under vmap
                m.train()
                m.track_running_stats = False
                m.running_mean = None
                m.running_var = None
    params = {name: p.detach() for name, p in module.named_parameters()}
    buffers = {name: b.detach() for name, b in module.named_buffers()}

    def head_fn(z: Tensor) -> Tensor:
        return functional_call(module, (params, buffers), (z,))

    info = {"batchnorm": has_bn, "bn_mode": bn_mode if has_bn else "none"}
    return head_fn, info


# --------------------------------------------------------------------------------------------
# Linear operators
# --------------------------------------------------------------------------------------------


@dataclass
class Operator:
    """A symmetric linear operator on ``R^N``: ``matvec`` (N,) -> (N,), ``matmat`` (N, p) -> (N, p)."""

    name: str
    N: int
    dtype: torch.dtype
    device: torch.device
    _matvec: Callable[[Tensor], Tensor] = field(repr=False)
    _matmat: Callable[[Tensor], Tensor] | None = field(default=None, repr=False)
    info: dict[str, Any] = field(default_factory=dict)
    n_products: int = 0
    _dense: Callable[[], Tensor] | None = field(default=None, repr=False)  # a cheaper exact dense route, if any
    _on_rows: Callable[[Tensor], Operator] | None = field(default=None, repr=False)  # see ``on_rows``

    @property
    def shape(self) -> tuple[int, int]:
        return (self.N, self.N)

    def _check(self, v: Tensor, ndim: int) -> Tensor:
        if v.ndim != ndim or v.shape[0] != self.N:
            want = "(N,)" if ndim == 1 else "(N, p)"
            raise ValueError(f"{self.name}: expected a vector of shape {want} with N={self.N}, got {tuple(v.shape)}")
        return v.to(dtype=self.dtype, device=self.device)

    def matvec(self, v: Tensor) -> Tensor:
        self.n_products += 1
        with torch.no_grad():  # torch.func ignores an outer no_grad; parameters record no graph
            return self._matvec(self._check(v, 1))

    def __matmul__(self, v: Tensor) -> Tensor:
        return self.matvec(v) if v.ndim == 1 else self.matmat(v)

    def matmat(self, V: Tensor, chunk: int = 64) -> Tensor:
        """``A V`` column by column, ``chunk`` columns per vmapped call (memory bound)."""
        V = self._check(V, 2)
        self.n_products += V.shape[1]
        fn = self._matmat or (lambda C: torch.stack([self._matvec(c) for c in C]))
        with torch.no_grad():
            cols = [fn(V[:, s:s + chunk].T.contiguous()) for s in range(0, V.shape[1], chunk)]
        return torch.cat(cols).T

    @property
    def restrictable(self) -> bool:
        """Whether ``on_rows`` is available (an operator block-diagonal over rows that knows how to drop rows)."""
        return self._on_rows is not None

    def on_rows(self, idx: Tensor) -> Operator:
        """The same operator on the row blocks ``idx`` alone, for an operator block-diagonal over ``n`` rows of
        ``d`` coordinates each (``N = n d``): the restriction ``A[idx, idx]`` of dimension ``len(idx) d``, whose
        products cost about ``len(idx) / n`` of a full one (e.g. ``closed_form_operator`` of a per-row loss: the
        same chain and the same ``1/n`` of the batch's mean on fewer rows)."""
        if self._on_rows is None:
            raise ValueError(f"{self.name}: no restriction to rows (not known to be block-diagonal over rows)")
        return self._on_rows(idx)

    def dense(self, force: bool = False) -> Tensor:
        """The (N, N) matrix, symmetrised (for small N: cross-checks, tests)."""
        if self.N > MAX_DENSE and not force:
            raise ValueError(f"{self.name}: dense() of N={self.N} > {MAX_DENSE}; use Lanczos or force=True")
        A = self._dense() if self._dense is not None else self.matmat(torch.eye(self.N, dtype=self.dtype,
                                                                                device=self.device))
        return 0.5 * (A + A.T)

    def to_scipy(self) -> LinearOperator:
        """This operator as a ``scipy.sparse.linalg.LinearOperator`` of float64 NumPy arrays (what
        curvlinops' ``to_scipy()`` gives), for ``scipy.sparse.linalg.eigsh`` and friends: each product
        converts its vector to this operator's dtype and device and the result back to float64 NumPy.
        Symmetric, so ``rmatvec`` is ``matvec``."""
        from scipy.sparse.linalg import LinearOperator

        def mv(v: np.ndarray) -> np.ndarray:
            out = self.matvec(torch.as_tensor(np.ascontiguousarray(v).reshape(-1)))
            return out.detach().cpu().double().numpy()

        def mm(V: np.ndarray) -> np.ndarray:
            return self.matmat(torch.as_tensor(np.ascontiguousarray(V))).detach().cpu().double().numpy()

        return LinearOperator(self.shape, matvec=mv, rmatvec=mv, matmat=mm, rmatmat=mm, dtype=np.float64)


def difference(A: Operator, B: Operator, name: str) -> Operator:
    """``A - B`` product by product (e.g. ``G = H - M`` from the closed-form ``H`` and ``M``)."""
    if (A.N, A.dtype, A.device) != (B.N, B.dtype, B.device):
        raise ValueError(f"{name}: {A.name} and {B.name} differ in dimension, dtype or device")
    return Operator(name, A.N, A.dtype, A.device, lambda v: A._matvec(v) - B._matvec(v),
                    lambda C: (A._matmat or torch.vmap(A._matvec))(C) - (B._matmat or torch.vmap(B._matvec))(C),
                    {**A.info})


def operator_from_matrix(A: Tensor, name: str = "A") -> Operator:
    """A dense symmetric matrix as an ``Operator`` (tests, and the Lanczos/power comparisons)."""
    if A.ndim != 2 or A.shape[0] != A.shape[1]:
        raise ValueError(f"{name}: need a square matrix, got shape {tuple(A.shape)}")
    return Operator(name, A.shape[0], A.dtype, A.device, lambda v: A @ v, lambda C: C @ A.T)


# --------------------------------------------------------------------------------------------
# The three products
# --------------------------------------------------------------------------------------------


def _hvp_forward(f: Callable[[Tensor], Tensor], x: Tensor) -> Callable[[Tensor], Tensor]:
    g = grad(f)
    return lambda v: jvp(g, (x,), (v,))[1]


class _GraphProduct:
    """``v -> d(out)/d(inp)^T v`` through an autograd graph built ONCE (``retain_graph``): each product is
    one backward pass, never a retrace of the function. ``batch`` maps rows of ``V`` (p, *shape) together
    (``is_grads_batched``), falling back to a loop where an op has no batching rule."""

    def __init__(self, out: Tensor, inp: Tensor):
        self.out, self.inp = out, inp

    def __call__(self, v: Tensor) -> Tensor:
        return self._grad(v, False)

    def batch(self, V: Tensor) -> Tensor:
        try:
            return self._grad(V, True)
        except RuntimeError:
            return torch.stack([self._grad(v, False) for v in V])

    def _grad(self, v: Tensor, batched: bool) -> Tensor:
        shape = (*v.shape[:1], *self.inp.shape) if batched else self.inp.shape
        if not self.out.requires_grad:  # the function is constant (or linear) here: no curvature
            return torch.zeros(shape, dtype=self.inp.dtype, device=self.inp.device)
        (g,) = torch.autograd.grad(self.out, self.inp, grad_outputs=v, retain_graph=True, allow_unused=True,
                                   is_grads_batched=batched)
        return torch.zeros(shape, dtype=self.inp.dtype, device=self.inp.device) if g is None else g.detach()


def _hvp_graph(f: Callable[[Tensor], Tensor], x: Tensor) -> _GraphProduct:
    """``v -> grad^2 f(x) v``: the gradient's graph built once, then one backward per product."""
    with torch.enable_grad():
        xg = x.detach().requires_grad_(True)
        (g,) = torch.autograd.grad(f(xg), xg, create_graph=True)
    return _GraphProduct(g, xg)


def _jvp_graph(f: Callable[[Tensor], Tensor], x: Tensor) -> tuple[_GraphProduct, _GraphProduct]:
    """``(v -> J v, u -> J^T u)`` of ``f`` at ``x`` from one graph: ``u -> J^T u`` is linear in ``u``, so
    ``J v`` is its vjp along ``v`` (the double-vjp trick)."""
    with torch.enable_grad():
        xg = x.detach().requires_grad_(True)
        y = f(xg)
        u = torch.zeros_like(y, requires_grad=True)
        (jt,) = torch.autograd.grad(y, xg, grad_outputs=u, create_graph=True)
    return _GraphProduct(jt, u), _GraphProduct(y, xg)


class EffectiveHessian:
    """``H``, ``G`` and ``M`` of ``z -> L(h(z))`` at a fixed probe batch, as ``Operator`` s (eq. (1)):

        H = d^2 L(h(z)) / dz^2 = G + M,   G = J^T (d^2 L / dh^2) J,   M = sum_{i,c} rho_ic d^2 h_ic / dz^2,

    with ``J = dh/dz`` (block-diagonal over rows for a row-wise head) and ``rho = dL/dh`` held fixed. In
    curvlinops' terms, with the representation ``z`` (all ``n d`` entries) as the parameters and the head as
    the model: ``G`` is the generalised Gauss-Newton matrix of ``L`` through ``h`` (``GGNLinearOperator``), ``H``
    the Hessian (``HessianLinearOperator``), and ``M = H - G`` the residual term the GGN drops. ``to_scipy``
    hands each to SciPy (``eigsh``).

    ``z``: ``(n, d)``, used as given: pass what the head sees in training (the backbone's raw output; nothing
    is normalised here). Two-view objectives read the rows as ``[view 1; view 2]``: ``n = 2m``, row ``i``
    pairs with row ``i + m`` (``scale.engine.objectives``; NT-Xent L2-normalises ``h`` itself).
    ``head``: an ``nn.Module`` (copied; see ``bn_mode``) or a callable ``z (n, d) -> h (n, k)``.
    ``loss``: a callable ``Hb (n, k) -> scalar`` with its fixed data (targets, predictor) bound: one of the
    objectives exported by ``scale`` (``nt_xent``, ``info_nce_cross_view``, ``vicreg``, ``barlow``, ``simsiam``,
    ``byol``, ``mse_views``), e.g. ``lambda Hb: scale.nt_xent(Hb, 0.1)``.
    ``dtype``: the dtype of every product (``z`` and a module head are cast; float64 for exact work).
    ``mode``: ``"double-backward"`` (the gradient's graph built once, one backward per product; every op
    with a backward has it), ``"forward"`` (torch.func's jvp of grad, retraced per product: several times
    slower, kept as an independent check), or ``"auto"`` (= ``"double-backward"``).
    """

    def __init__(
        self,
        z: Tensor,
        head: nn.Module | Callable[[Tensor], Tensor],
        loss: Callable[[Tensor], Tensor],
        *,
        bn_mode: str = "eval",
        dtype: torch.dtype | None = None,
        mode: str = "auto",
    ):
        if mode not in HVP_MODES:
            raise ValueError(f"mode must be one of {HVP_MODES}, got {mode!r}")
        if not isinstance(z, Tensor) or z.ndim != 2:
            raise ValueError(f"z must be a 2-D tensor (n, d), got {getattr(z, 'shape', type(z).__name__)}")
        if not torch.isfinite(z).all():
            raise ValueError("z contains NaN or infinite values")
        self.z = z.detach().to(dtype or z.dtype)
        self.n, self.d = self.z.shape
        self.head_fn, head_info = functional_head(head, bn_mode, self.z.dtype if isinstance(head, nn.Module) else None)
        self.loss_fn = loss
        with torch.no_grad():
            self.Hb = self.head_fn(self.z)
        if self.Hb.ndim != 2 or self.Hb.shape[0] != self.n:
            raise ValueError(f"head must map (n, d) to (n, k); got {tuple(self.Hb.shape)} from {tuple(self.z.shape)}")
        self.k = self.Hb.shape[1]
        with torch.no_grad():
            self.rho = grad(loss)(self.Hb).detach()  # rho = grad_H L, (n, k), held fixed in M
            self.value = float(loss(self.Hb))
        self._mode = mode
        self.info: dict[str, Any] = {
            **head_info, "n": self.n, "d": self.d, "k": self.k, "N": self.n * self.d,
            "dtype": str(self.z.dtype).removeprefix("torch."), "device": str(self.z.device), "hvp_mode": None,
        }
        with torch.no_grad():
            self._build("forward" if mode == "forward" else "double-backward")

    def _build(self, mode: str) -> None:
        n, d = self.n, self.d
        zf = self.z.reshape(-1)
        head_fn, loss_fn, rho = self.head_fn, self.loss_fn, self.rho

        def total(x: Tensor) -> Tensor:  # z -> L(h(z))
            return loss_fn(head_fn(x.reshape(n, d)))

        def interaction(x: Tensor) -> Tensor:  # z -> <stopgrad(rho), h(z)>
            return (rho * head_fn(x.reshape(n, d))).sum()

        def head_flat(x: Tensor) -> Tensor:
            return head_fn(x.reshape(n, d))

        common = (n * d, self.z.dtype, self.z.device)
        if mode == "forward":
            hv, mv = _hvp_forward(total, zf), _hvp_forward(interaction, zf)
            jv = lambda v: jvp(head_flat, (zf,), (v,))[1]  # noqa: E731  J v, (n, k)
            lv = _hvp_forward(loss_fn, self.Hb)
            _, head_vjp = vjp(head_flat, zf)  # u (n, k) -> J^T u (N,)

            def gv(v: Tensor) -> Tensor:
                return head_vjp(lv(jv(v)))[0]

            self.H = Operator("H_eff", *common, hv, vmap(hv), self.info)
            self.G = Operator("G", *common, gv, vmap(gv), self.info)
            self.M = Operator("M", *common, mv, vmap(mv), self.info)
            self.info["hvp_mode"] = "forward-over-reverse"
            return
        # double backward through graphs built once per state (a retrace per product costs several products)
        hv, mv = _hvp_graph(total, zf), _hvp_graph(interaction, zf)
        jv, jtv = _jvp_graph(head_flat, zf)
        lv = _hvp_graph(loss_fn, self.Hb)
        self.H = Operator("H_eff", *common, hv, hv.batch, self.info)
        self.G = Operator("G", *common, lambda v: jtv(lv(jv(v))), lambda V: jtv.batch(lv.batch(jv.batch(V))),
                          self.info)
        self.M = Operator("M", *common, mv, mv.batch, self.info)
        self.info["hvp_mode"] = "double-backward"

    def to_scipy(self, part: str = "H") -> LinearOperator:
        """``H_eff`` (``part="H"``), ``G`` or ``M`` as a ``scipy.sparse.linalg.LinearOperator`` (float64
        NumPy in and out; ``Operator.to_scipy``): ``eigsh(E.to_scipy(), k=1, which="SA")`` is lambda_min."""
        parts = {"H": self.H, "G": self.G, "M": self.M}
        if part not in parts:
            raise ValueError(f"part must be one of {', '.join(parts)}, got {part!r}")
        return parts[part].to_scipy()

    def gradient(self) -> Tensor:
        """``grad_z L(h(z))`` flattened (N,)."""
        n, d = self.n, self.d
        with torch.no_grad():
            return grad(lambda x: self.loss_fn(self.head_fn(x.reshape(n, d))))(self.z.reshape(-1)).detach()
