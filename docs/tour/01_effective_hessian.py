# %% [markdown]
# # 1. Equation (1): the curvature a head puts on the backbone
#
# A self-supervised backbone maps an input to a representation `z` in `R^d`; the projection head `h`
# maps `z` to an embedding in `R^k`, and the loss `L` reads the embeddings of a whole batch. The
# backbone never sees `L` directly: it is trained on `z -> L(h(z))`. The paper's first move is to
# ask what curvature that composite has, as a function of `z`. Differentiating twice by the chain
# rule gives two terms:
#
#     H_eff = J^T (grad^2_h L) J  +  sum_i sum_c rho_ic grad^2 h_c(z_i)   =   G + M
#
# `J` is the head's Jacobian, `rho = grad_h L` the residual gradient. `G` (Gauss-Newton) is the loss
# curvature carried back through the head's first derivative; `M` (the interaction term) is the
# residual weighted by the head's own second derivative. This chapter builds both, exactly, on a
# batch of 8, three independent ways, and looks at where `M` comes from.
#
# Code: `mini/hessian.py` (equation (1)), `mini/heads.py` (the head grammar), `mini/losses.py`.

# %%
import matplotlib.pyplot as plt
import numpy as np

from mini import decompose_autograd, decompose_closed_form, effective_hessian, init_head, make_objective, spectrum
from mini.activations import get as activation

TOL = 1e-10  # two routes agree when they differ by less than TOL x the spectral scale of H_eff


def agree(A, B, scale):
    """Whether two matrices are equal up to round-off, relative to ``scale``."""
    return "agree" if np.abs(A - B).max() <= TOL * scale else "DIFFER"


# %% [markdown]
# ## A head, a batch, a loss
#
# `gelu2` is the grammar's name for Linear-GELU-Linear; here `d = 4 -> 16 -> k = 3`. The batch holds
# two views of 4 samples (rows `[view 1; view 2]`, so row `i` pairs with row `i + 4`), and the loss
# is SimCLR's NT-Xent at temperature 0.5. Everything is float64 and seeded.

# %%
rng = np.random.default_rng(0)
n, d, width, k = 8, 4, 16, 3
head = init_head("gelu2", d, k, width, rng)
Z = rng.normal(size=(n, d))          # the backbone's outputs, one row per sample
loss = make_objective("simclr", temperature=0.5)
print("head:", head.spec, "widths", head.widths)
print("Z:", Z.shape, "  h(Z):", head(Z).shape, "  L(h(Z)) =", f"{float(loss(head(Z))):.6f}")

# %% [markdown]
# ## Three routes to the same matrix
#
# `H_eff` is the Hessian of the batch map `vec(Z) -> L(h(Z))`, an `(n d) x (n d) = 32 x 32` matrix.
#
# 1. `effective_hessian`: autograd differentiates the whole composite twice; it knows nothing of `G`
#    and `M`, which makes it the reference.
# 2. `decompose_autograd`: autograd again, but term by term: the full Jacobian and the loss Hessian
#    for `G`, and for `M` the Hessian of `z -> <rho, h(z)>` with `rho` held fixed.
# 3. `decompose_closed_form`: the explicit formulas, per-sample blocks, no autograd at all.
#
# If the decomposition is right, all three agree to round-off.

# %%
H_ref = effective_hessian(head, loss, Z)
E_ag = decompose_autograd(head, loss, Z)
E = decompose_closed_form(head, loss, Z)
scale = spectrum(H_ref).scale
print("H_eff shape:", H_ref.shape)
print("route 1 (autograd H)      vs route 2 (autograd G + M):", agree(H_ref, E_ag.G + E_ag.M, scale))
print("route 1 (autograd H)      vs route 3 (closed-form G + M):", agree(H_ref, E.H, scale))
print("route 2 vs route 3, G alone:", agree(E_ag.G, E.G, scale), "  M alone:", agree(E_ag.M, E.M, scale))

# %% [markdown]
# ## Where `M` comes from
#
# For one hidden layer, `a_i = W1 z_i + b1` and `h(z_i) = W2 s(a_i) + b2`, so
# `J_i = W2 diag(s'(a_i)) W1`. Differentiate `J_i^T rho_i` once more: the weights are constant, and the
# only thing left that depends on `z_i` is `s'(a_i)`, whose derivative is `s''(a_i)`. So the second
# derivative of the activation sits between two copies of the first layer:
#
#     M_i = W1^T diag((W2^T rho_i) * s''(a_i)) W1          (d x d, one block per sample)
#
# For GELU, `s(a) = a Phi(a)` and `s''(a) = phi(a) (2 - a^2)`. We build `M_0` by hand from that
# formula and compare it with the block of the matrix above.

# %%
W1, b1 = head.layers[0]["W"], head.layers[0]["b"]
W2 = head.layers[1]["W"]
a0 = W1 @ Z[0] + b1                              # pre-activations of sample 0, (16,)
_, s2 = activation("gelu").derivatives(np, a0)   # s''(a0)
M0_by_hand = W1.T @ np.diag((W2.T @ E.rho[0]) * s2) @ W1
print("rho = grad_h L:", E.rho.shape, "  |rho_0| =", f"{np.linalg.norm(E.rho[0]):.4f}")
print("M_0 by hand vs block (0, 0) of M:", agree(M0_by_hand, E.block(E.M, 0, 0), scale))

# %% [markdown]
# The head acts on each sample separately, so `M` is block-diagonal. `G` need not be: it goes through
# `grad^2_h L`, and a contrastive loss compares every sample with every other. Counting the `d x d`
# blocks that are non-zero makes the difference visible; MSE to fixed targets and MSE between the two
# views are shown beside NT-Xent for contrast.

# %%
def nonzero_blocks(A, scale):
    norms = np.array([[np.linalg.norm(E.block(A, i, j)) for j in range(n)] for i in range(n)])
    return int(np.sum(norms > TOL * scale))


targets = rng.normal(size=(n, k))
for name, objective in (("simclr", loss), ("mse_views", make_objective("mse_views")),
                        ("mse", make_objective("mse", targets=targets))):
    D = decompose_closed_form(head, objective, Z)
    s = spectrum(D.H).scale
    print(f"{name:>9}: non-zero blocks of G {nonzero_blocks(D.G, s):2d} of {n * n},"
          f"  of M {nonzero_blocks(D.M, s):2d} of {n * n}")

# %% [markdown]
# ## The spectra
#
# `spectrum` sorts the eigenvalues and counts an eigenvalue as negative only below `-1e-9` times the
# largest magnitude, so round-off is never read as curvature.

# %%
def describe(name, A):
    s = spectrum(A)
    print(f"{name:>5}: lambda_min {s.lambda_min:+.4f}  lambda_max {s.lambda_max:+.4f}   "
          f"negative {s.n_negative:2d}  zero {s.n_zero:2d}  positive {s.n_positive:2d}  ({s.definiteness})")


describe("G", E.G)
describe("M", E.M)
describe("H_eff", E.H)

# %% [markdown]
# Two things to notice. `M` is not a small correction: its eigenvalues are of the same order as
# `G`'s, and of both signs. And `G` itself has negative eigenvalues: the paper calls `G` the
# pullback metric, but it is a metric only when `grad^2_h L` is positive semidefinite (the MSE forms).
# NT-Xent's loss Hessian is indefinite wherever its gradient is non-zero (it depends on `h` only
# through `h / |h|`), so under SimCLR negative curvature does not need `M` at all. The 8 zero
# eigenvalues of `G` are directions the loss never sees: each sample's Jacobian is `3 x 4`, so
# `rank G <= n k = 24`. Chapter 4 returns to that null space.

# %%
fig, axes = plt.subplots(1, 3, figsize=(11, 3.2), sharey=True, num="Spectra of G, M and H_eff")
for ax, (name, A) in zip(axes, (("G", E.G), ("M", E.M), ("H_eff = G + M", E.H))):
    eig = spectrum(A).eigenvalues
    ax.axhline(0.0, color="0.6", lw=0.8)
    ax.plot(np.arange(eig.size), eig, "o", ms=3.5)
    ax.set_title(name)
    ax.set_xlabel("eigenvalue index (sorted)")
axes[0].set_ylabel("eigenvalue")
fig.suptitle("gelu2 head, NT-Xent (tau 0.5), n = 8, d = 4: the 32 eigenvalues of each matrix")
fig.tight_layout()
plt.show()

# %% [markdown]
# ## Why ReLU and linear heads have `M = 0`
#
# `M` is built from `s''`. A linear head has no activation, and ReLU's second derivative is zero
# everywhere except at the kink `a = 0`, which a random batch never hits. So for the same batch and
# loss, `M` vanishes exactly and `H_eff = G`. That is the "ReLU gap" of Section 4: whatever curvature
# a ReLU head gives the backbone comes through `G` alone.
#
# Each head below is drawn afresh with seed 1, so the `gelu2` row is a different `gelu2` head from the
# one above (same batch and loss, other weights): its `lambda_min` is not the one printed there.

# %%
for spec in ("linear", "relu2", "gelu2", "swish2"):
    h_spec = init_head(spec, d, k, width, 1)
    D = decompose_closed_form(h_spec, loss, Z)
    D_ag = decompose_autograd(h_spec, loss, Z)
    s = spectrum(D.H)
    ratio = np.linalg.norm(D.M, 2) / np.linalg.norm(D.H, 2)
    m = "0 (exactly)" if not np.any(D.M) else f"{ratio:.3f}"
    print(f"{spec:>6}: |M|_2 / |H_eff|_2 = {m:<11}  autograd's M: {agree(D.M, D_ag.M, s.scale)}"
          f"   lambda_min(H_eff) {s.lambda_min:+.4f}  ({s.n_negative} negative)")

# %% [markdown]
# The ReLU and linear heads still have negative eigenvalues here, all of them from `G` (NT-Xent's
# indefinite loss Hessian). Theorem 4.1 part 1 ("linear heads: `H_eff = G` is PSD") assumes a PSD loss
# Hessian; chapter 4 shows what happens under MSE, where that premise holds.
#
# ## What proves it, and where the paper and the instance disagree
#
# - `theory_checks/test_eq1_decomposition.py`: for every activation, depths 1-3 and every objective,
#   autograd's `H_eff` equals `G + M`, and the closed form equals autograd, to `1e-10` of the spectral
#   scale; dropping `M` is detected for smooth heads (the negative control).
# - `theory_checks/test_independent_torch.py`: the same matrices rebuilt in torch from each objective's
#   published formula, sharing no code with `mini`.
# - `theory_checks/test_relu_gap.py`: `M = 0` for linear and ReLU heads on every route, for any
#   weights and residual.
# - `theory_checks/test_negative_floor.py`: the relative floor that decides what counts as negative.
#
# Where the paper and the instance disagree: equation (1) itself holds exactly on every instance. Its
# reading does not always: `G` is a metric only under a PSD loss Hessian. NT-Xent is never PSD where
# its gradient is non-zero (`docs/section3.md`), VICReg and Barlow Twins are indefinite over a batch,
# and SimSiam's negative cosine is indefinite too: on the paper grid's digits run (50 epochs), the collapsed
# ReLU head of E2 has `M = 0` exactly and yet negative eigenvalues, from `G`, where the paper reports
# `lambda_min` exactly 0 (`docs/paper_grid/grid-54233f66ffcf/report.md`).
