"""SSL objectives in torch, term by term the same as ``mini.losses`` (tested against it in float64).

Conventions as in ``mini``: embeddings ``Hb`` are ``(n, k)``; two-view objectives read rows
``[view1; view2]`` (``n = 2m``, row ``i`` pairs with row ``i + m``); norms are the safe
``sqrt(max(|x|^2, eps^2))`` with ``eps = 1e-12``. Each objective is a plain function
``f(Hb, ...) -> scalar tensor``:

    mse_targets(Hb, T)          1/(2n) sum_i |h_i - t_i|^2
    mse_views(Hb)               1/(2m) sum_i |h_i - h_{i+m}|^2
    nt_xent(Hb, tau=0.1)        1/n sum_i [-s_{i,p(i)} + log sum_{j != i} exp s_ij], s = <u_i, u_j>/tau,
                                log-sum-exp shifted by the constant 1/tau (s_ij <= 1/tau)
    info_nce_cross_view(Hb, tau=0.1)
                                the paper's official SimCLR step: 1/m sum_i [-s_{i,i} + log sum_j exp s_ij],
                                s = <u^1_i, u^2_j>/tau: view 1 anchors only, view-2 candidates only
                                (``F.cross_entropy(U1 @ U2.T / tau, arange(m))``)
    simsiam(Hb, T, pred, form)  1/2 [D(p(h^1), t^2) + D(p(h^2), t^1)], T = stopgrad(Hb) by default,
                                D = -mean cos ("cosine") or mean |p/|p| - t/|t||^2 ("nmse")
    byol(Hb, T, pred)           the "nmse" form with targets from the momentum target network
    vicreg(Hb)                  25 mean|h^1 - h^2|^2 + 25 sum_v mean_c relu(1 - sqrt(var_c + 1e-4))/2
                                + 1 sum_v sum_{c != c'} cov_cc'^2 / k        (unbiased var / cov)
    barlow(Hb, lam=5e-3)        sum_c (1 - C_cc)^2 + lam sum_{c != c'} C_cc'^2, C from views standardised
                                with the biased std (eps 1e-5)

Which method uses which objective, and whether its loss couples samples, is the method's record in
``scale.engine.methods``. Distributed training: losses that couple samples (negatives in NT-Xent, batch
statistics in VICReg and Barlow) are computed on the global batch. ``gather_views`` all-gathers each
rank's ``[view1; view2]`` into the global ``[view1 of all ranks; view2 of all ranks]`` with gradients
flowing back to every rank; each rank then evaluates the same global loss. The backward of the gather
sums the world's gradients (``W`` times the true one) and DDP's averaging divides by ``W``: the update
equals one process's on the global batch. Per-sample losses (SimSiam, BYOL, MSE) need no gather (DDP
averages the local means). """

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist
import torch.nn.functional as F

NORM_EPS = 1e-12  # as mini.losses.NORM_EPS
OBJECTIVES: tuple[str, ...] = ("mse", "mse_views", "simclr", "simclr_paper", "simsiam", "byol", "vicreg", "barlow")


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def safe_norm(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """``sqrt(max(|x|^2, eps^2))`` along ``dim``, kept as a column: finite value and gradient at 0."""
    return torch.sqrt(torch.clamp_min((x * x).sum(dim=dim, keepdim=True), NORM_EPS**2))


def normalize(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    return x / safe_norm(x, dim)


def split_views(Hb: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    if Hb.ndim != 2 or Hb.shape[0] % 2:
        raise ValueError(f"two-view objectives need Hb of shape (2m, k), rows [view1; view2]; got {tuple(Hb.shape)}")
    m = Hb.shape[0] // 2
    return Hb[:m], Hb[m:]


def _off_diagonal_sq_sum(C: torch.Tensor) -> torch.Tensor:
    return (C * C).sum() - (torch.diagonal(C) ** 2).sum()


def cross_off_diagonal_sq_sum(X: torch.Tensor, Y: torch.Tensor, s: float) -> torch.Tensor:
    """``sum_{a != b} C_ab^2`` of ``C = X^T Y / s`` (k, k) for ``X``, ``Y`` (m, k), without forming ``C`` when
    ``m < k``: ``|X^T Y|_F^2 = <X X^T, Y Y^T>_F`` (two (m, m) Gram matrices) and ``C_aa = sum_i X_ia Y_ia / s``,
    so the cost is ``O(m^2 k)`` instead of ``O(m k^2)`` (a batch of 256 against an 8192-wide head: 32x less, and
    no (k, k) array of 512 MB in the graph). The same number up to rounding (``tests/test_scale_objectives.py``)."""
    m, k = X.shape
    if m >= k:
        return _off_diagonal_sq_sum(X.T @ Y / s)
    diag = (X * Y).sum(dim=0) / s
    return ((X @ X.T) * (Y @ Y.T)).sum() / (s * s) - (diag * diag).sum()


# --------------------------------------------------------------------------------------------
# Objectives
# --------------------------------------------------------------------------------------------


def mse_targets(Hb: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """``1/(2n) sum_i |h_i - t_i|^2`` against fixed targets (detached here)."""
    return 0.5 * ((Hb - targets.detach()) ** 2).sum() / Hb.shape[0]


def mse_views(Hb: torch.Tensor) -> torch.Tensor:
    """``1/(2m) sum_i |h_i - h_{i+m}|^2``: the two views of each pair pulled together (rows ``[view1; view2]``)."""
    A, B = split_views(Hb)
    return 0.5 * ((A - B) ** 2).sum() / A.shape[0]


def nt_xent(Hb: torch.Tensor, temperature: float = 0.1) -> torch.Tensor:
    """SimCLR's NT-Xent over the 2m - 1 others, mean over all 2m anchors (mini.losses.nt_xent)."""
    if not temperature > 0:
        raise ValueError(f"temperature must be positive, got {temperature!r}")
    split_views(Hb)
    n = Hb.shape[0]
    m = n // 2
    U = normalize(Hb)
    S = U @ U.T / temperature  # (n, n), entries <= 1/tau
    off_diag = 1.0 - torch.eye(n, dtype=Hb.dtype, device=Hb.device)
    lse = 1.0 / temperature + torch.log((off_diag * torch.exp(S - 1.0 / temperature)).sum(dim=1))  # (n,)
    partner = torch.cat([torch.arange(m, n), torch.arange(0, m)]).to(Hb.device)
    positives = (U * U[partner]).sum(dim=1) / temperature  # (n,)
    return (lse - positives).mean()


def info_nce_cross_view(Hb: torch.Tensor, temperature: float = 0.1) -> torch.Tensor:
    """The official code's SimCLR loss: one direction, cross-view negatives only.

    With ``U1, U2`` the L2-normalised views (m, k), ``S = U1 U2^T / tau`` (m, m) and
    ``L = 1/m sum_i [log sum_j exp S_ij - S_ii]``: anchor ``i`` of view 1 against the m view-2 rows.
    NT-Xent (``nt_xent``) instead averages both directions over the 2m - 1 others of each anchor.
    """
    if not temperature > 0:
        raise ValueError(f"temperature must be positive, got {temperature!r}")
    A, B = split_views(Hb)
    logits = normalize(A) @ normalize(B).T / temperature  # (m, m), positives on the diagonal
    return F.cross_entropy(logits, torch.arange(A.shape[0], device=Hb.device))


def simsiam(
    Hb: torch.Tensor,
    targets: torch.Tensor | None = None,
    predictor: Callable[[torch.Tensor], torch.Tensor] | None = None,
    form: str = "cosine",
) -> torch.Tensor:
    """SimSiam: predictions ``p(h)`` pulled towards the other view's stop-gradient target.

    ``targets`` default to ``Hb`` itself (detached), as in SimSiam; BYOL passes the target network's.
    """
    if form not in ("cosine", "nmse"):
        raise ValueError(f"form must be 'cosine' or 'nmse', got {form!r}")
    T = (Hb if targets is None else targets).detach()
    A, B = split_views(T)
    Tn = normalize(torch.cat([B, A]))  # view 1 predicts view 2's target and vice versa
    P = normalize(Hb if predictor is None else predictor(Hb))
    cos = (P * Tn).sum(dim=1)  # (n,)
    return -cos.mean() if form == "cosine" else (2.0 - 2.0 * cos).mean()


def byol(
    Hb: torch.Tensor,
    targets: torch.Tensor,
    predictor: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> torch.Tensor:
    """BYOL: ``2 - 2 cos(p(h^v), t^{v'})`` with targets from the momentum target network."""
    return simsiam(Hb, targets, predictor, form="nmse")


def vicreg(
    Hb: torch.Tensor, sim_coeff: float = 25.0, std_coeff: float = 25.0, cov_coeff: float = 1.0, eps: float = 1e-4
) -> torch.Tensor:
    """VICReg: invariance + variance hinge + covariance decorrelation (unbiased statistics)."""
    A, B = split_views(Hb)
    if A.shape[0] < 2:
        raise ValueError("vicreg needs at least 2 samples per view for its variance")

    def one_view(X):
        m, k = X.shape
        Xc = X - X.mean(dim=0)
        std = torch.sqrt((Xc * Xc).sum(dim=0) / (m - 1) + eps)
        return F.relu(1.0 - std).mean() / 2.0, cross_off_diagonal_sq_sum(Xc, Xc, m - 1) / k  # cov = Xc^T Xc/(m-1)

    inv = ((A - B) ** 2).mean()
    std_a, cov_a = one_view(A)
    std_b, cov_b = one_view(B)
    return sim_coeff * inv + std_coeff * (std_a + std_b) + cov_coeff * (cov_a + cov_b)


def barlow(Hb: torch.Tensor, lambd: float = 5e-3, eps: float = 1e-5) -> torch.Tensor:
    """Barlow Twins: cross-correlation of batch-standardised views pushed to the identity."""
    A, B = split_views(Hb)

    def standardize(X):
        Xc = X - X.mean(dim=0)
        return Xc / torch.sqrt((Xc * Xc).mean(dim=0) + eps)

    As, Bs = standardize(A), standardize(B)  # C = As^T Bs / m (k, k), never formed when m < k
    diag = (As * Bs).sum(dim=0) / A.shape[0]
    return ((1.0 - diag) ** 2).sum() + lambd * cross_off_diagonal_sq_sum(As, Bs, A.shape[0])


# --------------------------------------------------------------------------------------------
# Distributed: the global batch
# --------------------------------------------------------------------------------------------


def _distributed() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


class _GatherWithGrad(torch.autograd.Function):
    """all_gather forward; backward sums the world's gradients and keeps this rank's slice."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:  # x (b, ...) -> (W, b, ...)
        out = [torch.empty_like(x) for _ in range(dist.get_world_size())]
        dist.all_gather(out, x.contiguous())
        return torch.stack(out)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        grad = grad.contiguous()
        dist.all_reduce(grad, op=dist.ReduceOp.SUM)
        return grad[dist.get_rank()]


def gather_views(Hb: torch.Tensor) -> torch.Tensor:
    """Local ``[view1; view2]`` (2b, k) -> global ``[view1 of ranks 0..W-1; view2 of ranks 0..W-1]``."""
    if not _distributed():
        return Hb
    b = Hb.shape[0] // 2
    views = Hb.reshape(2, b, *Hb.shape[1:])  # (2, b, k)
    g = _GatherWithGrad.apply(views)  # (W, 2, b, k)
    return g.transpose(0, 1).reshape(-1, *Hb.shape[1:])  # (2 W b, k)


def global_loss(fn: Callable[..., torch.Tensor], Hb: torch.Tensor, *args, **kwargs) -> torch.Tensor:
    """``fn`` on the global batch when running distributed (see the module docstring), else on ``Hb``."""
    return fn(gather_views(Hb), *args, **kwargs)
