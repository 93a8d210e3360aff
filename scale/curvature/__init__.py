r"""The effective Hessian ``H_eff = G + M`` of equation (1) at scale (docs/paper.md).

    operators       matrix-free H, G, M at a probe batch (torch.func)
    lanczos         extreme eigenvalues (Lanczos in float64), and the paper's shifted power iteration
    blocks          exact float64 per-sample blocks for block-diagonal objectives
    tracking        H_eff on a fixed probe batch during training (``--track-hessian-every``)
    eq1_terms       eq. (1)'s terms measured on a model: M, G's inertia, M on null(G), the residual rho
"""
