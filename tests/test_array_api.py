"""The closed-form H_eff path runs unchanged on torch tensors (array API) and agrees with NumPy."""

from __future__ import annotations

import numpy as np
import pytest

from mini.heads import init_head
from mini.hessian import assemble, head_derivatives, interaction_blocks, loss_derivatives
from mini.losses import nt_xent

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("spec", ["linear", "relu3", "gelu3", "swish2", "tanh3", "softplus2"])
def test_closed_form_on_torch_matches_numpy(spec: str) -> None:
    rng = np.random.default_rng(0)
    head = init_head(spec, 4, 3, 5, rng)
    Z = rng.standard_normal((6, 4))
    der = head_derivatives(head, Z)
    rho, HL = loss_derivatives(nt_xent(), der.h)
    G, M = assemble(der.J, HL, interaction_blocks(der, rho))

    Zt = torch.from_numpy(Z)
    der_t = head_derivatives(head, Zt)
    assert isinstance(der_t.J, torch.Tensor) and der_t.J.dtype == torch.float64
    Gt, Mt = assemble(der_t.J, torch.from_numpy(HL), interaction_blocks(der_t, torch.from_numpy(rho)))
    np.testing.assert_allclose(der_t.h.numpy(), der.h, rtol=0, atol=1e-13)
    np.testing.assert_allclose(Gt.numpy(), G, rtol=0, atol=1e-13 * np.abs(G).max())
    np.testing.assert_allclose(Mt.numpy(), M, rtol=0, atol=1e-13 * max(np.abs(M).max(), 1.0))
