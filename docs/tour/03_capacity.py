# %% [markdown]
# # 3. Capacity: nonlinear heads condition a whole trajectory (Theorem 3.2, Proposition 3.4, Corollary 3.5)
#
# Chapter 2 ended with a barrier: on a curved loss no constant linear head keeps `H_eff` isotropic
# everywhere. A nonlinear head has a Jacobian that changes with `z`, so it can bend to follow the
# loss's curvature. Section 3.2 says it can, along the one curve that matters, the optimisation
# trajectory (Theorem 3.2), and says what an imperfect head costs: the error of its Jacobian bounds
# the error of `H_eff` (Proposition 3.4), and past a threshold a positive definite `H_eff` can turn
# indefinite (Corollary 3.5).
#
# Code: `mini/capacity.py`. The loss is chapter 2's curved `log_partition` on `R^2`, `k = d = 2`.

# %%
import matplotlib.pyplot as plt
import numpy as np

from mini.capacity import (
    best_linear_head,
    definiteness_loss_instance,
    effective_hessian_gap,
    exact_threshold,
    first_order_threshold,
    fit_isotropic_head,
    gauss_newton_gap,
    head_isotropy_error,
    heldout_trajectory,
    linear_certificate,
    tight_gauss_newton_instance,
    trajectory,
    trajectory_at,
    trajectory_hessians,
)
from mini.heads import init_head
from mini.hessian import decompose_closed_form
from mini.losses import mse_targets
from mini.whitening import log_partition

# %% [markdown]
# ## Theorem 3.2: a head fitted along a curve
#
# The trajectory is three quarters of the unit circle in `Z = R^2`. A head is *eps-isotropic* along
# it when `|H_eff(gamma(s)) - I|_2 <= eps` at every point of the curve. We fit heads at 12 samples
# of the curve (`fit_isotropic_head`: L-BFGS on `|H_eff - I|^2` at the samples, with gradients taken
# through the Hessian by autograd, third derivatives of the head) and then measure `eps` where they
# were *not* fitted: 8 held-out points inside every gap between samples, 88 in all. Measuring only at
# the fit samples would report a training error.

# %%
Z_fit = trajectory("arc", 12)                   # (12, 2) fit samples
Z_held = heldout_trajectory("arc", 12, 8)       # (88, 2) between them
mlp = fit_isotropic_head(log_partition, Z_fit, "tanh2", width=6, k=2, seed=0, iters=120)
lin = best_linear_head(log_partition, Z_fit, k=2, n_starts=3, seed=0, iters=30)
eps_mlp = head_isotropy_error(log_partition, mlp.head, Z_held)
eps_lin = head_isotropy_error(log_partition, lin.head, Z_held)
print(f"best linear head:  eps at the held-out points = {eps_lin:.3f}"
      f"   (Proposition 3.3's floor for this head: {linear_certificate(log_partition, lin.head, Z_held):.3f})")
print("tanh2 head, width 6:  eps < 0.1 at the 12 fit samples:", mlp.eps < 0.1,
      "  at the 88 held-out points:", eps_mlp < 0.1)
print("the MLP head is at least 10x better than the linear head at the held-out points:", 10 * eps_mlp < eps_lin)

# %% [markdown]
# The linear head's number is printed to three digits; the MLP head's is not. Its fit is a non-convex
# optimisation, and a change of its starting weights by 1e-13 (the size of round-off) moves the fitted
# `eps` by about 10 %: a printed digit there would be a property of the machine's BLAS, not of the
# head. What is stable is the comparison, and the figure below shows this run's values.
#
# Fitting at too few samples fails in a way the fit-point number hides. With 6 samples the same head
# can be nearly isotropic at each of them and far from it in between.

# %%
sparse = fit_isotropic_head(log_partition, trajectory("arc", 6), "tanh2", width=6, k=2, seed=0, iters=120)
eps_sparse = head_isotropy_error(log_partition, sparse.head, Z_held)
print("6 fit samples:  eps < 0.05 at them:", sparse.eps < 0.05, "  eps > 0.5 at held-out points:", eps_sparse > 0.5)

# %%
s = np.linspace(0.0, 1.0, 301)
curve = trajectory_at("arc", s)


def eps_along(head):
    Hs = np.asarray(trajectory_hessians(log_partition, head.spec.name, head.layers, curve))
    return [np.abs(np.linalg.eigvalsh(H - np.eye(2))).max() for H in Hs]


fig, ax = plt.subplots(figsize=(7, 3.8), num="eps along the curve")
for head, label in ((lin.head, "best linear head"), (mlp.head, "tanh2 head, fitted at 12 samples"),
                    (sparse.head, "tanh2 head, fitted at 6 samples")):
    ax.semilogy(s, eps_along(head), label=label)
for x in np.linspace(0.0, 1.0, 12):
    ax.axvline(x, color="0.85", lw=0.8, zorder=0)
ax.set_xlabel("position along the arc (grey: the 12 fit samples)")
ax.set_ylabel("|H_eff - I|_2")
ax.set_title("Theorem 3.2: isotropy along the trajectory, not only at the samples")
ax.legend(fontsize=8)
fig.tight_layout()
plt.show()

# %% [markdown]
# ## Proposition 3.4: what a head's error costs
#
# Compare a fitted head `phi` with an ideal head `*` at the same batch. If the loss Hessian `A` is
# common to both, `G_phi - G_* = E^T A J_* + J_*^T A E + E^T A E` with `E = J_phi - J_*`, hence
#
#     |G_phi - G_*|_2 <= 2 L M eps + M eps^2,      eps = |E|_2,  L = |J_*|_2,  M = |A|_2.
#
# For two real heads the interaction terms differ too, and the bound gains a term for it (3.4'); with
# a loss whose Hessian depends on the embeddings (NT-Xent, VICReg) a third term counts the change of
# `A` (`effective_hessian_gap` adds all three). We take a GELU head and a copy with its weights
# perturbed by 1 %, under MSE to fixed targets, whose Hessian `I / n` is common to both.

# %%
rng = np.random.default_rng(0)
Z = rng.normal(size=(8, 4))
head_star = init_head("gelu2", 4, 3, 16, rng)
head_phi = head_star.with_layers([{key: w + 0.01 * rng.normal(size=w.shape) for key, w in layer.items()}
                                  for layer in head_star.layers])
loss = mse_targets(rng.normal(size=(8, 3)))
g = effective_hessian_gap(head_phi, head_star, loss, Z)
print(f"|H_*|_2 = {np.linalg.norm(decompose_closed_form(head_star, loss, Z).H, 2):.4f}"
      f"   |H_phi - H_*|_2 = {g.gap:.4f}")
print(f"bound = {g.bound:.4f} = Gauss-Newton {g.gauss_newton:.4f} + interaction {g.interaction:.4f}"
      f" + loss-Hessian change {g.loss_hessian_change:.1f};   gap / bound = {g.gap / g.bound:.3f}")

# %% [markdown]
# The bound is not loose by construction: with `A u = M u`, `J_* = L u v^T + ...` and `E = eps u v^T`
# every inequality becomes an equality.

# %%
tight = gauss_newton_gap(*tight_gauss_newton_instance(3, 3, L=1.3, M=2.0, eps=0.05, rng=rng))
print(f"tight instance: gap {tight.gap:.6f}, bound 2 L M eps + M eps^2 = {tight.bound:.6f}")

# %% [markdown]
# ## Corollary 3.5: the threshold, exactly
#
# By Weyl's inequality every eigenvalue of `H_phi` is within `|H_phi - H_*|_2` of the matching one of
# `H_*`. So if `H_*` is positive definite with smallest eigenvalue `lambda_min`, `H_phi` stays positive
# definite while `2 L M eps + M eps^2 < lambda_min`. Solving the quadratic gives the exact threshold
#
#     eps* = sqrt(L^2 + lambda_min / M) - L,
#
# while the paper's paraphrase states `lambda_min / (2 L M)`, which drops the `M eps^2` term and is
# larger. On the tight instance (`definiteness_loss_instance`, `L = 1.3`, `M = 2`, `lambda_min = 0.5`)
# `lambda_min(H_phi) = lambda_min - bound` exactly, so an error between the two thresholds already
# loses definiteness.

# %%
L, M, lam0 = 1.3, 2.0, 0.5
eps_exact, eps_paper = exact_threshold(L, M, lam0), first_order_threshold(L, M, lam0)
print(f"exact threshold eps* = {eps_exact:.4f}    paraphrased lambda_min / (2 L M) = {eps_paper:.4f}")
for label, eps in (("0.99 eps*", 0.99 * eps_exact), ("midway between the two", 0.5 * (eps_exact + eps_paper)),
                   ("the paraphrased threshold", eps_paper)):
    H_star, H_phi, gap = definiteness_loss_instance(3, 4, L, M, lam0, eps, np.random.default_rng(1))
    lam_phi = np.linalg.eigvalsh(H_phi)[0]
    print(f"eps = {eps:.4f} ({label:>26}):  lambda_min(H_phi) = {lam_phi:+.5f}"
          f"  ({'positive definite' if lam_phi > 0 else 'indefinite'})")

# %% [markdown]
# ## What proves it, and where the paper and the instance disagree
#
# - `theory_checks/test_thm3_2_trajectory_isotropy.py`: a fitted MLP head at least 10x below the best
#   linear head at 88 held-out points of the arc; the linear head above its Proposition 3.3
#   certificate. Negative controls: the unfitted head; the 6-sample fit above, isotropic at its
#   samples but not in between.
# - `theory_checks/test_prop3_4_capacity.py`: the bound, its interaction-term extension, sharpness on
#   tight instances (between 0.99 x bound and the bound), and the exact threshold `eps*` through Weyl;
#   negative controls: a bound 1 % smaller, differing loss Hessians, an instance past `eps*`.
#
# Where the paper and the instance disagree (`docs/section3.md`): Theorem 3.2 holds on these instances
# only when it is measured where the head was not fitted, and then not always: with 12 samples, 5 of
# the 21 heads of `python -m mini.reports.capacity` are not 10x better than the linear head on
# held-out points (on the spiral two are worse), while all 21 are at their fit samples; with 24
# samples all 21 are. Corollary 3.5's paraphrased threshold `lambda_min / (2 L M)` is not sufficient;
# the sharp threshold is `eps* = sqrt(L^2 + lambda_min / M) - L`, and the instance above loses
# definiteness between the two.
