r"""Exact float64 per-sample blocks of ``G``, ``M`` and ``H_eff`` for block-diagonal objectives.

When the objective is a sum of per-sample terms (MSE to fixed targets; SimSiam and BYOL with their
stop-gradient targets and fixed predictor), ``grad^2_H L`` has no cross-sample blocks, and since the
head acts row by row (BatchNorm in eval mode) every piece of eq. (1) is block-diagonal:

    H_i = G_i + M_i,   G_i = J_i^T (grad^2_{h_i} L) J_i,   M_i = sum_c rho_{i,c} grad^2 h_c(z_i)     (d, d)

so the whole spectrum of ``H_eff`` (n*d eigenvalues) is the union of ``n`` eigendecompositions of
``d x d`` matrices: exact, in float64, at the width of a real network (d = 512, n in the hundreds).

Two paths to ``J_i`` and ``M_i``:

- ``"closed_form"``: ``mini.hessian``'s recursion, streamed by ``mini.loss_hessians`` (``chain_forward``,
  ``head_jacobian_and_interaction``: the array-API code, in chunks of rows, never keeping a (n, w, d) Jacobian)
  on torch tensors, on the tensors' device, with weights read from the torch head (``scale.engine.heads.mini_head_of``;
  eval-mode BatchNorm is an affine map and is folded into its Linear layer).
- ``"autodiff"``: per-sample ``torch.func.jacrev`` (``J_i``) and reverse-over-reverse Hessians of
  ``<rho_i, h(z_i)>`` (``M_i``) under ``vmap`` (some activations' backward ops lack forward-mode rules).

The Gauss-Newton blocks ``G_i = J_i^T (grad^2_{h_i} L) J_i`` take the cheapest exact route:

- an objective carrying ``curvature_at`` (``scale.engine.loss_curvature.PredictorCosine``: SimSiam, BYOL): ``H_i``
  in one forward-mode sweep through the head, the predictor and the cosine (``mini.loss_hessians``), no (k, k)
  block and no head Jacobian ``J`` formed;
- ``k > d`` and only ``H``'s spectrum wanted: ``d`` batched loss Hessian-vector products along the columns
  of ``J`` (row ``i`` of the product along ``J[:, :, a]`` is ``HL_i J_i[:, a]`` for a per-sample loss);
- otherwise the loss blocks ``grad^2_{h_i} L`` (n, k, k) from ``k`` Hessian-vector products of the batch
  loss (batched backward passes through its gradient graph, built once), one per output coordinate
  ``c`` with the direction ``e_c`` in every row: for a block-diagonal loss the product's row ``i`` is
  column ``c`` of block ``i``.

On the autograd routes the premise is checked, not assumed: one product along a random direction must
equal the blocks' action (``premise_residual``); a loss that couples samples is refused with a clear error.

Coupled objectives (SimCLR, VICReg, Barlow) still have a block-diagonal head part: ``factored_operator``
is ``H_eff`` as ``blockdiag(M) + J^T (grad^2_H L) J`` with ``J`` and ``M`` computed once, exact, so that a
product costs one Hessian-vector product of the loss alone (through a gradient graph built once) and
a few small batched matmuls; ``scale.curvature.closed_form.closed_form_operator`` forms nothing and runs each
product through the head's weights in closed form (its ``operator_route`` picks the cheaper of the two for Lanczos,
``block_route`` the exact blocks or a Lanczos per block, ``blockwise_ends``). ``dense_route`` picks the cheaper
exact way to the dense matrix; each rule carries its measured crossover.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn
from torch.func import jacrev, vmap

from mini.hessian import NEG_FLOOR, assemble
from mini.loss_hessians import chain_forward, chain_links, head_jacobian_and_interaction
from scale.curvature.operators import Operator, functional_head
from scale.engine.heads import mini_head_of

BLOCK_TOL = 1e-10  # relative mismatch above which the loss is not block-diagonal
ROUNDOFF_REL = 1e3 * torch.finfo(torch.float64).eps  # a Hessian product this small is round-off
METHODS = ("closed_form", "autodiff")
CHOL_MARGIN = 1e-14  # block_norm's Cholesky test runs at (1 + this) times the largest norm found (round-off)


def loss_blocks(loss: Callable[[Tensor], Tensor], Hb: Tensor, seed: int = 0) -> tuple[Tensor, Tensor, float]:
    """``rho`` (n, k), the diagonal blocks ``grad^2_{h_i} L`` (n, k, k), and the premise residual.

    ``premise_residual = |HVP(U) - blocks U| / |HVP(U)|`` for a random ``U``: zero (to round-off)
    exactly when the loss Hessian is block-diagonal along that direction. It is ``nan`` when the
    product itself is at round-off, below ``ROUNDOFF_REL * max(|rho|/|Hb|, |L|/|Hb|^2) |U|`` (the
    curvature a loss of value ``L`` and gradient ``rho`` at scale ``|Hb|`` shows; e.g. a dead ReLU
    predictor makes the loss constant in ``Hb``): there a ratio of round-off to round-off says
    nothing, and the premise is recorded as unverifiable rather than failed or passed.
    """
    rho, HL, res, _ = _loss_blocks_and_value(loss, Hb, seed)
    return rho, HL, res


def _loss_blocks_and_value(loss: Callable[[Tensor], Tensor], Hb: Tensor, seed: int = 0):
    """``loss_blocks`` and the loss value ``L(Hb)`` from the same forward pass."""
    n, k = Hb.shape
    rho, value, hvp, _ = loss_product_of(loss, Hb)  # the gradient graph, built once: a backward per column

    E = torch.eye(k, dtype=Hb.dtype, device=Hb.device)[:, None, :].expand(k, n, k)  # e_c in every row
    cols = hvp(E.contiguous(), batched=True)  # (c, i, e): row i of HVP(e_c) = HL_ii[:, c]
    HL = cols.permute(1, 2, 0).contiguous()  # (i, e, c)
    HL = 0.5 * (HL + HL.transpose(1, 2))
    gen = torch.Generator(device="cpu").manual_seed(seed)
    U = torch.randn(n, k, generator=gen, dtype=torch.float64).to(Hb)
    return rho, HL, _premise_residual(hvp(U), torch.einsum("iec,ic->ie", HL, U), U, rho, value, Hb), value


def _premise_residual(full: Tensor, diag: Tensor, U: Tensor, rho: Tensor, value: float, Hb: Tensor) -> float:
    """``|full - diag| / |full|`` (the loss product along ``U`` against the blocks' action), or ``nan`` when the
    product is at round-off (see ``loss_blocks``)."""
    h_norm = float(Hb.norm().clamp_min(torch.finfo(Hb.dtype).tiny))
    curvature_scale = float(U.norm()) * max(float(rho.norm()) / h_norm, abs(value) / h_norm**2)
    if float(full.norm()) <= ROUNDOFF_REL * max(curvature_scale, torch.finfo(Hb.dtype).eps):
        return float("nan")
    return float((full - diag).norm() / full.norm())


@dataclass(frozen=True)
class Blocks:
    """Per-sample blocks (n, d, d) of ``G``, ``M``, ``H = G + M``, their eigenvalues, and the context.

    ``eig_G`` and ``loss_hessian_eig`` are ``None`` when only ``H``'s spectrum was asked for
    (``spectra="H"``); ``G``, ``M``, ``H`` are ``None`` when the blocks were not kept (``keep_blocks=False``:
    the tracker's lean measurement, reduced chunk by chunk to ``eig_H`` and ``norm_M``)."""

    G: Tensor | None
    M: Tensor | None
    H: Tensor | None
    eig_G: Tensor | None  # (n, d) ascending per sample
    eig_H: Tensor
    loss_hessian_eig: Tensor | None  # (n, k): eigenvalues of grad^2_{h_i} L
    premise_residual: float
    info: dict[str, Any]
    norm_M: float | None = None  # |M|_2 (``block_norm``), when computed along the way

    def audit(self, rel_floor: float = NEG_FLOOR) -> dict[str, Any]:
        """The audit table's row: ``|M|/|H_eff|``, negative counts of ``G`` and ``H_eff`` (relative floor),
        extreme eigenvalues, scale, condition (only when positive definite), and the PSD premise."""
        eH = self.eig_H.flatten()
        scale_H = float(eH.abs().max())
        norm_M = block_norm(self.M) if self.norm_M is None else self.norm_M
        lam_min, lam_max = float(eH.min()), float(eH.max())
        floor = rel_floor * scale_H
        out = {
            "lambda_min": lam_min, "lambda_max": lam_max, "scale": scale_H,
            "M_over_H": norm_M / scale_H if scale_H else float("nan"), "M_over_H_is": "exact (spectral norms, blocks)",
            "n_negative_H": int((eH < -floor).sum()), "N": int(eH.numel()),
            "condition": lam_max / lam_min if lam_min > floor else None,
            "lambda_min_G": None, "n_negative_G": None, "loss_hessian_psd_measured": None,
            "premise_residual": self.premise_residual, "rel_floor": rel_floor, **self.info,
        }
        if self.eig_G is not None:
            eG = self.eig_G.flatten()
            out.update(lambda_min_G=float(eG.min()), n_negative_G=int((eG < -rel_floor * float(eG.abs().max())).sum()))
        if self.loss_hessian_eig is not None:
            eL = self.loss_hessian_eig.flatten()
            out["loss_hessian_psd_measured"] = bool(eL.min() >= -rel_floor * float(eL.abs().max()))
        return out


def block_norm(blocks: Tensor | Sequence[Tensor]) -> float:
    """Spectral norm of a block-diagonal symmetric matrix from its blocks (n, d, d), or from a sequence of
    chunks of them: the largest |eigenvalue| of any block, solving as few blocks as possible.

    ``|A|_2 <= |A|_F``, so a block whose Frobenius norm is at most a norm already found cannot hold the
    maximum. The block of largest Frobenius norm is solved first (``eigvalsh``): its norm ``l`` is a lower
    bound on the answer. Every other block is then tested at ``t = 1 + CHOL_MARGIN`` after scaling by ``l``:
    ``t^2 I - (A/l)^2`` admits a Cholesky factor exactly when every eigenvalue of ``A`` lies in ``(-t l, t l)``
    (up to the factorisation's backward error, a few ``d eps`` of the scale; one batched matmul and one
    Cholesky factorisation per block, instead of a tridiagonal reduction each). The blocks that fail are
    solved by ``eigvalsh``: the result is the same maximum as ``eigvalsh`` of every block, to that round-off."""
    chunks = [blocks] if isinstance(blocks, Tensor) else list(blocks)
    chunks = [c for c in chunks if c.shape[0]]
    if not chunks:
        return 0.0
    fro = [torch.linalg.matrix_norm(c) for c in chunks]  # (m,) per chunk, >= |A_i|_2
    peak = max(float(f.max()) for f in fro)
    if peak == 0.0:
        return 0.0
    if not math.isfinite(peak):
        return max(float(torch.linalg.eigvalsh(c).abs().max()) for c in chunks)
    first = max(range(len(chunks)), key=lambda j: float(fro[j].max()))
    i = int(fro[first].argmax())
    best = float(torch.linalg.eigvalsh(chunks[first][i]).abs().max())
    for j, (c, f) in enumerate(zip(chunks, fro)):
        keep = f > best  # a block with |A|_F <= best cannot exceed best
        if j == first:
            keep[i] = False
        if not bool(keep.any()):
            continue
        A = c[keep] / best  # scaled: the test is against 1, and squaring cannot overflow
        eye = torch.eye(A.shape[-1], dtype=A.dtype, device=A.device)
        fails = torch.linalg.cholesky_ex((1.0 + CHOL_MARGIN) ** 2 * eye - A @ A).info != 0
        if bool(fails.any()):
            best = max(best, float(torch.linalg.eigvalsh(c[keep][fails]).abs().max()))
    return best


def head_info(head: nn.Module, method: str, dtype: torch.dtype, z: Tensor, k: int) -> dict[str, Any]:
    has_bn = any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in head.modules())
    return {"batchnorm": has_bn, "bn_mode": "eval" if has_bn else "none", "method": method,
            "dtype": str(dtype).removeprefix("torch."), "n": z.shape[0], "d": z.shape[1], "k": k}


def head_blocks(z: Tensor, head: nn.Module, method: str = "closed_form", dtype: torch.dtype = torch.float64):
    """``(Hb, JM_of, info)`` at ``z`` (n, d): embeddings (n, k), and ``JM_of(rho)`` -> the per-sample Jacobians
    ``J`` (n, k, d) and interaction blocks ``M`` (n, d, d) for a residual ``rho = dL/dh`` (n, k) (one
    forward-mode sweep gives both). BatchNorm in eval mode (the only mode in which the head acts row by row)."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    z = z.detach().to(dtype)
    with torch.no_grad():  # torch.func transforms still differentiate; parameters record no graph
        if method == "closed_form":  # weights read straight from the module: no functional copy of the head
            fwd = chain_forward(chain_links(mini_head_of(head, dtype), None, z), z)
            Hb = fwd.out
        else:
            head_fn, _ = functional_head(head, "eval", dtype)
            one = lambda x: head_fn(x[None])[0]  # noqa: E731  (d,) -> (k,)
            Hb = head_fn(z)

    def JM_of(rho: Tensor) -> tuple[Tensor, Tensor]:
        with torch.no_grad():
            if method == "closed_form":
                return head_jacobian_and_interaction(fwd, rho)
            # reverse-over-reverse: some activations' backward ops have no forward-mode rule
            M = vmap(jacrev(jacrev(lambda x, r: (r * one(x)).sum())))(z, rho)
            return vmap(jacrev(one))(z), 0.5 * (M + M.transpose(1, 2))

    return Hb.detach(), JM_of, head_info(head, method, dtype, z, Hb.shape[1])


def effective_hessian_blocks(
    z: Tensor,
    head: nn.Module,
    loss: Callable[[Tensor], Tensor],
    *,
    method: str = "closed_form",
    dtype: torch.dtype = torch.float64,
    declared_psd: bool | None = None,
    spectra: str = "all",
    keep_blocks: bool = True,
) -> Blocks:
    """Exact per-sample blocks of eq. (1) at ``z`` (n, d), in ``dtype`` (float64 by default).

    The head is evaluated with BatchNorm in eval mode (the only mode in which it acts row by row).
    ``declared_psd`` records what the objective claims about ``grad^2_H L`` (``mini``'s
    ``Objective.hessian_psd``) next to what is measured on the blocks. ``spectra``: ``"all"``
    (eigenvalues of ``H``, ``G`` and the loss blocks) or ``"H"`` (``H`` only: the tracker's needs).
    ``keep_blocks=False`` (with ``spectra="H"``): the blocks are reduced chunk by chunk to ``H``'s
    eigenvalues and ``|M|_2`` and not kept (``Blocks.G/M/H`` are ``None``).
    """
    if spectra not in ("all", "H"):
        raise ValueError(f"spectra must be 'all' or 'H', got {spectra!r}")
    if not keep_blocks and spectra != "H":
        raise ValueError("keep_blocks=False keeps H's spectrum only: use spectra='H'")
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    full = spectra == "all"
    if method == "closed_form" and getattr(loss, "closed_form", False):  # SimSiam, BYOL: one sweep
        return _closed_form_blocks(z.detach().to(dtype), head, loss, declared_psd, full, keep_blocks)
    Hb, JM_of, info = head_blocks(z, head, method, dtype)
    k, d = Hb.shape[1], z.shape[1]
    if not full and k > d:  # G from d products along J's columns instead of the k loss-block columns
        return _gauss_newton_blocks(Hb, JM_of, info, loss, declared_psd)
    with torch.no_grad():
        rho, HL, premise, value = _loss_blocks_and_value(loss, Hb)
    if premise > BLOCK_TOL:
        raise _not_block_diagonal(premise)
    J, M = JM_of(rho)
    G = J.transpose(1, 2) @ (HL @ J)
    G = 0.5 * (G + G.transpose(1, 2))
    H = G + M
    info = {**info, "loss": value, "loss_hessian_psd_declared": declared_psd, "gauss_newton": "k loss-block columns",
            "block_premise": "unverifiable: loss Hessian at round-off" if math.isnan(premise) else "verified"}
    return Blocks(G, M, H, torch.linalg.eigvalsh(G) if full else None, torch.linalg.eigvalsh(H),
                  torch.linalg.eigvalsh(HL) if full else None, premise, info)


def _not_block_diagonal(premise: float) -> ValueError:
    return ValueError(
        f"the objective's Hessian is not block-diagonal over samples (relative mismatch {premise:.2e}); "
        "exact blocks exist only for per-sample objectives (mse to targets, simsiam, byol); "
        "use scale.curvature.operators.EffectiveHessian with scale.curvature.lanczos for coupled objectives"
    )


def _closed_form_blocks(z: Tensor, head: nn.Module, loss, declared_psd, full: bool, keep: bool) -> Blocks:
    """Predictor-cosine objectives (``scale.engine.loss_curvature.PredictorCosine``): ``M_i`` and ``G_i`` in one
    forward-mode sweep through head, predictor and cosine (per-sample by construction), reduced chunk by
    chunk when the blocks are not kept."""
    with torch.no_grad():
        mini_head = mini_head_of(head, z.dtype)
        curv = loss.curvature_at(mini_head, z)
        rho, value = curv.rho, loss.value_of(curv)
        n, d = z.shape
        if keep:  # filled chunk by chunk: no concatenation (a second full-size copy) at the end
            G, M, H = (torch.empty(n, d, d, dtype=z.dtype, device=z.device) for _ in range(3))
        Ms, eig_H, norm_M = [], [], None
        for rows, M_c, G_c in curv.blocks():
            H_c = G_c + M_c
            eig_H.append(torch.linalg.eigvalsh(H_c))
            if keep:
                G[rows], M[rows], H[rows] = G_c, M_c, H_c
            else:
                Ms.append(M_c)
        eig_H = torch.cat(eig_H)
        if not keep:
            G = M = H = None
            norm_M = block_norm(Ms)
        HL_eig = None
        if full:  # the loss blocks themselves: the same sweep without the head
            Hb = chain_forward(chain_links(mini_head, None, z), z).out
            HL_eig = torch.cat([torch.linalg.eigvalsh(GL) for _, _, GL in loss.curvature_at(None, Hb).blocks()])
    info = {**head_info(head, "closed_form", z.dtype, z, int(rho.shape[1])), "loss": value,
            "loss_hessian_psd_declared": declared_psd,
            "gauss_newton": "closed form (head, predictor and cosine in one sweep, mini.loss_hessians)",
            "block_premise": "per-sample by construction (closed form)"}
    return Blocks(G, M, H, torch.linalg.eigvalsh(G) if full else None, eig_H, HL_eig, float("nan"), info, norm_M)


def _gauss_newton_blocks(Hb, JM_of, info, loss, declared_psd) -> Blocks:
    """``G_i = J_i^T (grad^2 L J)_i`` from ``d`` batched loss Hessian-vector products along the columns
    of ``J`` (direction ``J[:, :, a]``, row ``i``'s part of the product is ``HL_i J_i[:, a]`` when the loss
    is per-sample): ``d`` products instead of ``k`` when the head widens (``k > d``).

    Premise check: along ``U = J w`` (``w`` random, (n, d)), the product must equal ``(HL J)_i w_i`` row by
    row; a loss coupling samples breaks it (``premise_residual``, as in ``loss_blocks``)."""
    rho, value, hvp, _ = loss_product_of(loss, Hb)
    with torch.no_grad():
        J, M = JM_of(rho)
        n, k, d = J.shape
        HJ = hvp(J.permute(2, 0, 1).contiguous(), batched=True).permute(1, 2, 0)  # (n, k, d): HL_i J_i
        G = J.transpose(1, 2) @ HJ
        G = 0.5 * (G + G.transpose(1, 2))
        w = torch.randn(n, d, generator=torch.Generator(device="cpu").manual_seed(0), dtype=torch.float64).to(J)
        U = (J @ w[:, :, None])[:, :, 0]
        premise = _premise_residual(hvp(U), (HJ @ w[:, :, None])[:, :, 0], U, rho, value, Hb)
        if premise > BLOCK_TOL:
            raise _not_block_diagonal(premise)
        H = G + M
    info = {**info, "loss": value, "loss_hessian_psd_declared": declared_psd,
            "gauss_newton": f"{d} loss Hessian-vector products along J's columns (k = {k} > d)",
            "block_premise": "unverifiable: loss Hessian at round-off" if math.isnan(premise) else "verified"}
    return Blocks(G, M, H, None, torch.linalg.eigvalsh(H), None, premise, info)


def factored_operator(
    z: Tensor,
    head: nn.Module,
    loss: Callable[[Tensor], Tensor],
    *,
    method: str = "closed_form",
    dtype: torch.dtype = torch.float64,
    dense: str = "auto",
) -> tuple[Operator, Tensor, dict[str, Any]]:
    r"""``H_eff`` of any objective (coupled or not) for a row-wise head, as a cheap operator.

    The head's part of eq. (1) is block-diagonal whatever the loss: with ``J`` (n, k, d) and the
    interaction blocks ``M`` (n, d, d) computed once (exact, ``dtype``),

        H v = blockdiag(M) v + J^T (grad^2_H L) (J v)          v reshaped (n, d)

    so a product costs two batched ``(k, d)`` matmuls, one ``(d, d)`` and one Hessian-vector product
    of the loss alone (no pass through the head). Returns the operator, ``M`` and the context.
    ``dense``: how the operator's ``dense()`` is built when the loss has a dense closed-form Hessian
    (``"auto"``: ``dense_route``'s cost rule; ``"assemble"`` or ``"products"`` force one).
    """
    if dense not in ("auto", *DENSE_ROUTES):
        raise ValueError(f"dense must be one of ('auto', {', '.join(map(repr, DENSE_ROUTES))}), got {dense!r}")
    Hb, JM_of, info = head_blocks(z, head, method, dtype)
    rho, value, lv, loss_product = loss_product_of(loss, Hb)
    J, M = JM_of(rho)
    n, _, d = J.shape

    # every product as row vectors against contiguous matrices (one bmm of (1, b) x (b, a) per sample): on
    # CPU about 3x faster than broadcast-and-sum or a bmm against a column vector at these shapes.
    # M is symmetric (M v = (v^T M)^T); J v = (v^T J^T)^T from a transposed copy made once.
    J = J.contiguous()
    Jt = J.transpose(1, 2).contiguous()  # (n, d, k)

    def rows(x: Tensor, A: Tensor) -> Tensor:  # (n, a) x (n, a, b) -> (n, b)
        return (x[:, None, :] @ A)[:, 0, :]

    def hv(v: Tensor) -> Tensor:  # (N,) -> (N,)
        V = v.reshape(n, d)
        return (rows(V, M) + rows(lv(rows(V, Jt)), J)).reshape(-1)

    def hm(C: Tensor) -> Tensor:  # (p, N) -> (p, N), the columns batched
        p = C.shape[0]
        V = C.reshape(p, n, d)
        JV = torch.einsum("ikd,pid->pik", J, V)
        out = torch.einsum("ide,pie->pid", M, V) + torch.einsum("ikd,pik->pid", J, lv(JV, batched=True))
        return out.reshape(p, n * d)

    route = "products" if not hasattr(loss, "dense_hessian") else (
        dense_route(n, d, J.shape[1]) if dense == "auto" else dense)

    def assembled() -> Tensor:  # G = J^T (grad^2_H L) J from the loss's dense Hessian, plus blockdiag(M)
        G, Md = assemble(J, loss.dense_hessian(Hb), M)
        return G + Md

    info = {**info, "loss": value, "N": n * d, "dense_route": route,
            "hvp_mode": f"factored: blockdiag(M) + J^T (loss HVP, {loss_product}) J"}
    return Operator("H_eff (factored)", n * d, J.dtype, J.device, hv, hm, info,
                    _dense=assembled if route == "assemble" else None), M, info


DENSE_ROUTES = ("assemble", "products")
ASSEMBLE_FACTOR = 8  # dense_route: the measured crossover lies between P/A = 2.8 and 17 (see there)


def dense_route(n: int, d: int, k: int) -> str:
    """How ``factored_operator(...).dense()`` builds the dense ``H_eff`` of a coupled loss whose Hessian is known
    in closed form (NT-Xent): ``"assemble"`` (the loss Hessian (n, k, n, k) from ``n k`` products, then
    ``G = J^T (grad^2_H L) J``, ``mini.hessian.assemble``) or ``"products"`` (``N = n d`` batched products of
    the factored operator). Multiply-adds of what differs (``J`` and ``M`` are built either way):

        assemble   n k products of O(n^2 k) + the (n k) x (n k) x d contraction:  A = n^3 k^2 + n^2 k^2 d
        products   n d products of J, J^T (n k d each), M (n d^2) and the loss (n^2 k):
                   P = n d (2 n k d + n d^2 + n^2 k)

    Assemble when ``P > ASSEMBLE_FACTOR * A``: the assembled route's multiply-adds run at about an eighth of
    the products' rate (its batched loss products move (n k, n, n) and (n k, n, k) temporaries). Measured
    (``python -m bench.bench_hessian --threads 1``, commit 98f575c68264; (n, d, width, k), P/A, speed-up):

        products faster:  (32, 16, 64, 32) 0.75 2.2x;  (32, 16, 64, 128) 0.17 29x;  (32, 32, 128, 32) 2.0 1.09x;
                          (32, 64, 32, 64) 2.3 1.18x;  (16, 128, 16, 128) 2.8 2.2x
        assemble faster:  (32, 64, 16, 16) 17 1.68x;  (32, 128, 32, 32) 20 1.13x

    so the crossover lies between P/A = 2.8 and 17 (near ``k = d/2``); 8 sits between them. Against
    ``torch.func.hessian`` the better route was ahead at every measured size (2.85x-14.1x)."""
    assemble_cost = n**3 * k**2 + n**2 * k**2 * d
    products_cost = n * d * (2 * n * k * d + n * d**2 + n**2 * k)
    return "assemble" if products_cost > ASSEMBLE_FACTOR * assemble_cost else "products"


def loss_product_of(loss: Callable[[Tensor], Tensor], Hb: Tensor):
    """``(rho, L, lv, how)`` at ``Hb``: the loss gradient and value, and ``lv(U, batched)``, its Hessian applied
    to ``U`` ((n, k), or (p, n, k) when ``batched``): NT-Xent's product in closed form (no autograd graph);
    any other loss through its gradient graph, built once, one backward per product (double backward:
    retracing torch.func's jvp of grad per product costs more than the product)."""
    if hasattr(loss, "curvature"):
        curv = loss.curvature(Hb)
        return curv.gradient(), float(loss(Hb)), lambda U, batched=False: curv.hvp(U), \
            "closed form (mini.loss_hessians)"
    with torch.enable_grad():
        Hg = Hb.detach().requires_grad_(True)
        value_t = loss(Hg)
        (gH,) = torch.autograd.grad(value_t, Hg, create_graph=True)

    def lv(U: Tensor, batched: bool = False) -> Tensor:
        if not gH.requires_grad:  # a loss linear in H: no curvature
            return torch.zeros_like(U)
        (out,) = torch.autograd.grad(gH, Hg, grad_outputs=U, retain_graph=True, allow_unused=True,
                                     is_grads_batched=batched)
        return torch.zeros_like(U) if out is None else out.detach()

    return gH.detach(), float(value_t.detach()), lv, "double backward through a graph built once"


def block_diag(blocks: Tensor) -> Tensor:
    """(n, d, d) -> the (n*d, n*d) block-diagonal matrix (small sizes: tests)."""
    return torch.block_diag(*blocks)
