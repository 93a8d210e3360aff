"""The paper's tracker Hessian and its estimator, re-expressed from the official ``hessian_tracker.py``.

The Hessian the paper's tracker measures: the SimSiam loss ``-1/2 [mean cos(p(h(z1)), stopgrad h(z2)) + mean
cos(p(h(z2)), stopgrad h(z1))]`` differentiated twice in the first view's representations ``z1`` only; only the
first term depends on ``z1``. Its estimator (``paper_power_iteration``): float32, the loss's gradient graph built
once (``create_graph``), 20 normalised power steps on ``H``, ``lambda_max`` as a Rayleigh quotient, 20 power steps on
``H - lambda_max I`` from a fresh random vector, ``lambda_min`` as the Rayleigh quotient of ``H`` at the result (42
products; cosine by ``F.cosine_similarity`` as there).
"""

from __future__ import annotations

import torch


def paper_power_iteration(f, z1: torch.Tensor, iters: int = 20, seed: int = 0) -> float:
    """The official tracker's ``get_min_eigenvalue_hvp`` (float32), re-expressed (module docstring)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.enable_grad():
        z = z1.detach().float().requires_grad_(True)
        (g,) = torch.autograd.grad(f(z), z, create_graph=True)

        def hv(v):
            return torch.autograd.grad(g, z, grad_outputs=v, retain_graph=True)[0]

        v = torch.randn(z.shape, generator=gen)
        v = v / (v.norm() + 1e-8)
        for _ in range(iters):
            w = hv(v)
            v = w / (w.norm() + 1e-8)
        lam_max = (v * hv(v)).sum()
        u = torch.randn(z.shape, generator=gen)
        u = u / (u.norm() + 1e-8)
        for _ in range(iters):
            w = hv(u) - lam_max * u
            u = w / (w.norm() + 1e-8)
        return float((u * hv(u)).sum())


def one_view_loss(head, pred, t2: torch.Tensor, dtype: torch.dtype):
    """``z1 -> -1/2 mean cos(p(h(z1)), t2)``: the part of the official SimSiam loss that depends on ``z1``."""
    import copy

    import torch.nn.functional as F

    head, pred = copy.deepcopy(head).to(dtype), copy.deepcopy(pred).to(dtype)
    T = t2.to(dtype)

    def f(z1: torch.Tensor) -> torch.Tensor:
        return -0.5 * F.cosine_similarity(pred(head(z1)), T).mean()

    return f


class OneView:
    """The paper's tracker objective for ``scale.curvature.tracking.measure``: ``H_eff`` of ``z1 -> -1/2 mean_i
    cos(p(h(z1_i)), t2_i)``, carrying its closed form (``PredictorCosineCurvature`` with coefficient ``-1/(2 rows)``)
    as ``scale.engine.loss_curvature.PredictorCosine`` does for the project's own symmetric objective."""

    closed_form = True

    def __init__(self, pred, t2: torch.Tensor):
        self.predictor, self.t2 = pred, t2

    def __call__(self, Hb: torch.Tensor) -> torch.Tensor:
        import torch.nn.functional as F

        return -0.5 * F.cosine_similarity(self.predictor.to(Hb.dtype)(Hb), self.t2.to(Hb.dtype)).mean()

    def curvature_at(self, head, z: torch.Tensor, compose: bool = True):
        from mini.loss_hessians import PredictorCosineCurvature
        from scale.engine.heads import mini_head_of

        return PredictorCosineCurvature(head, mini_head_of(self.predictor, z.dtype), z, self.t2.to(z.dtype),
                                        -0.5 / z.shape[0], compose)

    def value_of(self, curv) -> float:
        return float(-0.5 * curv.cos.mean())
