"""Linear probe on frozen features: multinomial logistic regression, full batch, L-BFGS.

The classical SSL evaluation, here used to compare the backbone's ``z`` with the head's ``h`` on the
class labels (the head is thrown away after training because ``z`` probes better; docs/paper.md, section 5).
Features are standardised with the training set's mean and std; a small L2 penalty keeps the problem
strictly convex, so the result does not depend on the start (zeros) beyond solver tolerance.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

L2 = 1e-4  # ridge on the weights (features are standardised)
MAX_ITER = 300


@torch.no_grad()
def features(fn, x_uint8: torch.Tensor, normalize, batch: int = 1024) -> tuple[torch.Tensor, torch.Tensor]:
    """``fn(normalised images) -> (z, h)`` over ``x_uint8`` in batches; returns float32 ``(Z, H)``."""
    zs, hs = [], []
    for i in range(0, len(x_uint8), batch):
        z, h = fn(normalize(x_uint8[i : i + batch]))
        zs.append(z.float())
        hs.append(h.float())
    return torch.cat(zs), torch.cat(hs)


def linear_probe_accuracy(
    train_f: torch.Tensor, train_y: torch.Tensor, test_f: torch.Tensor, test_y: torch.Tensor, classes: int
) -> float:
    """Test accuracy (fraction) of a logistic regression fitted on ``(train_f, train_y)``."""
    mean, std = train_f.mean(0), train_f.std(0).clamp_min(1e-6)
    xtr, xte = (train_f - mean) / std, (test_f - mean) / std
    W = torch.zeros(xtr.shape[1], classes, device=xtr.device, requires_grad=True)
    b = torch.zeros(classes, device=xtr.device, requires_grad=True)
    opt = torch.optim.LBFGS([W, b], lr=1.0, max_iter=MAX_ITER, line_search_fn="strong_wolfe",
                            tolerance_grad=1e-6, tolerance_change=1e-9)

    def closure():
        opt.zero_grad()
        loss = F.cross_entropy(xtr @ W + b, train_y) + L2 * (W * W).sum()
        loss.backward()
        return loss

    with torch.enable_grad():
        opt.step(closure)
    with torch.no_grad():
        return float(((xte @ W + b).argmax(1) == test_y).float().mean())
