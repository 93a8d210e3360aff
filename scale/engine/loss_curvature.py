r"""Objectives whose loss Hessian is known in closed form (``mini.loss_hessians``), as torch callables.

Each object is the objective itself (``Hb -> scalar``, the same function as ``scale.engine.objectives``) and
carries the exact second-order algebra the curvature paths use instead of autograd:

    NTXent(tau)                         ``curvature(Hb)``: NT-Xent's gradient and exact Hessian-vector
                                        products (``O(n^2 k)`` each, no autograd graph): the factored
                                        operator's loss product for SimCLR; ``dense_hessian(Hb)``
    PredictorCosine(T, predictor, form) ``curvature_at(head, z)``: the per-sample blocks of ``H_eff`` through
                                        an MLP head, an MLP predictor and the cosine in one forward-mode
                                        sweep, and matrix-free products in closed form
                                        (``mini.loss_hessians.PredictorCosineCurvature``), never forming
                                        the (k, k) loss blocks: SimSiam and BYOL's exact path

``scale.curvature.blocks`` looks for these methods and falls back to autograd for any other callable.
"""

from __future__ import annotations

import copy

import torch
from torch import Tensor, nn

from mini.heads import Head
from mini.loss_hessians import NTXentCurvature, PredictorCosineCurvature, nt_xent_hessian
from scale.engine import objectives as so
from scale.engine.heads import MLPHead, mini_head_of


class NTXent:
    """SimCLR's NT-Xent at temperature ``tau`` (``scale.engine.objectives.nt_xent``) with closed-form curvature."""

    def __init__(self, temperature: float = 0.1):
        self.temperature = float(temperature)

    def __call__(self, Hb: Tensor) -> Tensor:
        return so.nt_xent(Hb, self.temperature)

    def curvature(self, Hb: Tensor) -> NTXentCurvature:
        return NTXentCurvature(Hb.detach(), self.temperature)

    def dense_hessian(self, Hb: Tensor) -> Tensor:
        """The loss Hessian (n, k, n, k) at ``Hb``: ``n k`` closed-form products (``mini.loss_hessians``)."""
        return nt_xent_hessian(Hb.detach(), self.temperature)


class PredictorCosine:
    """SimSiam (``form="cosine"``) and BYOL (``"nmse"``) with fixed targets ``T`` and a fixed predictor.

    ``__call__`` is ``scale.engine.objectives.simsiam(Hb, T, predictor, form)``; ``curvature_at`` needs an ``MLPHead``
    predictor (BatchNorm in eval mode, folded) or none, else ``closed_form`` is False.
    """

    def __init__(self, targets: Tensor, predictor: nn.Module | None = None, form: str = "cosine"):
        if form not in ("cosine", "nmse"):
            raise ValueError(f"form must be 'cosine' or 'nmse', got {form!r}")
        self.T = targets.detach()
        self.form = form
        self.predictor = None if predictor is None else copy.deepcopy(predictor).to(self.T.dtype).eval()
        self.closed_form = self.predictor is None or isinstance(self.predictor, MLPHead)

    def __call__(self, Hb: Tensor) -> Tensor:
        pred = self.predictor
        if pred is not None and Hb.dtype != self.T.dtype:  # products in another dtype (float32 Lanczos)
            pred = copy.deepcopy(pred).to(Hb.dtype)
        return so.simsiam(Hb, self.T.to(Hb.dtype), pred, self.form)

    def curvature_at(self, head: Head | None, z: Tensor, compose: bool = True) -> PredictorCosineCurvature:
        """The closed-form curvature at ``z`` (n, d) through a ``mini.heads.Head`` with torch weights (``None``:
        ``z`` is the embeddings themselves): exact per-sample blocks (``blocks()``), matrix-free products
        (``hvp``, ``interaction_hvp``), ``rho = dL/dh``, in ``z``'s dtype. ``compose``: as in
        ``mini.loss_hessians.chain_links`` (False: cheaper to build, for a few products)."""
        if not self.closed_form:
            raise ValueError(f"no closed form through a {type(self.predictor).__name__} predictor; use autograd")
        n = z.shape[0]
        A, B = so.split_views(self.T.to(z.dtype))
        T = torch.cat([B, A])  # row i is pulled to the other view's target
        coef = (-1.0 if self.form == "cosine" else -2.0) / n
        pred = None if self.predictor is None else mini_head_of(self.predictor, z.dtype)
        return PredictorCosineCurvature(head, pred, z, T, coef, compose)

    def value_of(self, curv: PredictorCosineCurvature) -> float:
        """The objective's value from the curvature's cosines (``L = -mean cos`` or ``mean(2 - 2 cos)``)."""
        return float(-curv.cos.mean()) if self.form == "cosine" else float((2.0 - 2.0 * curv.cos).mean())
