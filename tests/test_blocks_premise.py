"""The block-diagonal premise of scale.curvature.blocks: verified, refused, or honestly unverifiable."""

from __future__ import annotations

import math

import pytest
import torch

from scale.curvature.blocks import effective_hessian_blocks, loss_blocks
from scale.engine.heads import build_head


def _batch(seed: int = 0) -> torch.Tensor:
    return torch.randn(6, 4, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def test_per_sample_loss_is_verified() -> None:
    T = _batch(1)[:, :3]
    _, _, res = loss_blocks(lambda H: 0.5 * ((H - T) ** 2).sum() / 6, _batch()[:, :3])
    assert res <= 1e-12


def test_coupled_loss_is_refused() -> None:
    head = build_head("gelu2", 4, 3, 5).double()
    coupled = lambda H: (H.sum(0) ** 2).sum()  # noqa: E731  couples every pair of samples
    with pytest.raises(ValueError, match="not block-diagonal"):
        effective_hessian_blocks(_batch(), head, coupled)


def test_a_loss_constant_in_the_embeddings_is_unverifiable_not_refused() -> None:
    """A dead ReLU predictor makes the loss constant in Hb: its Hessian is round-off, so the premise
    can be neither confirmed nor refuted, and it is recorded as such."""
    predictor = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.ReLU(), torch.nn.Linear(3, 3)).double()
    with torch.no_grad():
        predictor[0].weight.fill_(-1.0)
        predictor[0].bias.fill_(-1e3)  # every hidden unit dead for these inputs
    T = _batch(2)[:, :3]

    def cosine(H: torch.Tensor) -> torch.Tensor:
        P = predictor(H)
        return -(torch.nn.functional.cosine_similarity(P, T, dim=1, eps=1e-12)).mean()

    head = build_head("relu2", 4, 3, 5).double()
    blocks = effective_hessian_blocks(_batch(), head, cosine)
    assert math.isnan(blocks.premise_residual)
    assert blocks.info["block_premise"].startswith("unverifiable")
    assert float(blocks.H.abs().max()) == 0.0
