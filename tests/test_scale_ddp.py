"""DDP: two CPU processes (gloo) give the loss and gradients of one process on the same global batch.

Both paths run the trainer's own step (``Trainer.step_loss`` + backward, DDP-wrapped under torch.distributed),
in float64 so that the only differences are summation order. SimCLR, VICReg and Barlow all-gather the
embeddings (negatives and batch statistics); SimSiam and BYOL are per-sample losses averaged by DDP.
The backbone is the ViT (LayerNorm, no BatchNorm: per-rank BatchNorm statistics would legitimately differ).
"""

from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from scale.engine.config import TrainConfig
from scale.engine.data import load_synthetic
from scale.engine.train import Trainer

METHODS = ("simclr", "vicreg", "barlow", "simsiam", "byol")
GLOBAL_BATCH = 8
WORLD = 2
LOSS_RTOL = 1e-12  # float64; the same sums in a different order
GRAD_RTOL = 1e-10  # relative to the whole model gradient's norm (some exact gradients are 0:
#                   VICReg and Barlow are invariant to the last bias)


def _config(method: str) -> TrainConfig:
    return TrainConfig(dataset="synthetic", method=method, backbone="vit_tiny", backbone_width=12, image_size=8,
                       head="gelu2", head_width=16, head_out=8, pred_width=8, batch_size=GLOBAL_BATCH,
                       head_bias=True, optimizer="sgd", lr=0.1, epochs=1, probe_size=8, seed=3)


def _global_views() -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    return torch.randn(2 * GLOBAL_BATCH, 3, 8, 8, generator=g, dtype=torch.float64)  # [view1; view2]


def _loss_and_grads(method: str, rank: int, world: int) -> tuple[float, dict[str, torch.Tensor]]:
    trainer = Trainer(_config(method), load_synthetic(n_train=32, n_test=8, image_size=8), torch.device("cpu"),
                      log=None)
    x = _global_views()
    b = GLOBAL_BATCH // world
    v1, v2 = x[:GLOBAL_BATCH], x[GLOBAL_BATCH:]
    local = torch.cat([v1[rank * b : (rank + 1) * b], v2[rank * b : (rank + 1) * b]])
    loss, *_ = trainer.step_loss(local)
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in trainer.model.named_parameters() if p.grad is not None}
    return float(loss.detach()), grads


def _worker(rank: int, world: int, init_file: str, out_dir: str) -> None:
    torch.set_default_dtype(torch.float64)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        results = {m: _loss_and_grads(m, rank, world) for m in METHODS}
        torch.save(results, os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_two_processes_match_one(tmp_path):
    mp.spawn(_worker, args=(WORLD, str(tmp_path / "init"), str(tmp_path)), nprocs=WORLD, join=True)
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in range(WORLD)]
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        single = {m: _loss_and_grads(m, 0, 1) for m in METHODS}
    finally:
        torch.set_default_dtype(default)
    for m in METHODS:
        loss1, grads1 = single[m]
        loss2 = sum(r[m][0] for r in ranks) / WORLD  # coupled losses: every rank holds the global value
        assert abs(loss2 - loss1) <= LOSS_RTOL * abs(loss1), (m, loss1, loss2)
        assert set(grads1) == set(ranks[0][m][1])
        scale = torch.linalg.vector_norm(torch.cat([g.ravel() for g in grads1.values()]))
        for name, g1 in grads1.items():
            for r in ranks:  # DDP leaves the averaged gradient on every rank
                err = float(torch.linalg.vector_norm(r[m][1][name] - g1) / scale)
                assert err <= GRAD_RTOL, (m, name, err)


def test_without_gather_the_contrastive_gradient_differs():
    """Negative control: a rank that saw only its half of the batch (no gather) has another SimCLR loss."""
    torch.set_default_dtype(torch.float64)
    try:
        full, _ = _loss_and_grads("simclr", 0, 1)
        half, _ = _loss_and_grads("simclr", 0, 2)  # not distributed: the local half alone
    finally:
        torch.set_default_dtype(torch.float32)
    assert abs(full - half) > 1e-6 * abs(full)
