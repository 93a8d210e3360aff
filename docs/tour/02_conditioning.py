# %% [markdown]
# # 2. Conditioning: what a linear head can and cannot fix (Theorem 3.1, Proposition 3.3)
#
# Gradient descent is slow when the curvature it sees is badly conditioned: with step `1 / lambda_max`
# the flattest direction shrinks by only `1 - lambda_min / lambda_max` per step. Chapter 1 showed that
# the backbone sees `H_eff`, not the loss Hessian itself, and `H_eff` depends on the head. So a head
# can change the conditioning of the backbone's problem. Section 3.1 of the paper says how far a
# *linear* head can go: at one point it can make the curvature perfectly isotropic on a subspace
# (Theorem 3.1), but if the loss is curved it cannot do so everywhere (Proposition 3.3).
#
# Code: `mini/whitening.py`. A linear head has `M = 0`, so here `H_eff(z) = W^T (grad^2_h L) W`.

# %%
import autograd.numpy as anp
import matplotlib.pyplot as plt
import numpy as np
from autograd import grad, hessian

from mini.hessian import NEG_FLOOR
from mini.losses import nt_xent
from mini.whitening import (
    FLAT_FACTOR_HEAD,
    attaining_head,
    defect_lower_bound,
    flat_times_curved,
    gaussian_curvature,
    gd_steps,
    gd_steps_quadratic,
    head_defect,
    isotropy_defect,
    linear_head_hessian,
    log_partition,
    pulled_back_metrics,
    quadratic_loss,
    restricted,
    whitening_head,
)

TOL = 1e-10  # "equal" means equal up to TOL, relative to the matrix's own scale


# %% [markdown]
# ## Theorem 3.1: whitening a subspace
#
# Take a loss on `R^k` (`k = 4`) whose Hessian `A` at the current embedding has condition number
# 1000, and a 4-dimensional subspace `S` of the backbone's space `R^6`. The theorem's construction:
# diagonalise `A = V diag(lam) V^T`, and map an orthonormal basis `U` of `S` onto the eigenvectors
# with the inverse square-root scaling, `W = V diag(lam^{-1/2}) U^T`. Then
# `W^T A W = U U^T`, the orthogonal projector onto `S`: on `S` the curvature is exactly the identity.
# We check it twice: once from the formula, and once from autograd's Hessian of
# `z -> L(W (z - z*) + h*)`, which never sees `W^T A W`.

# %%
rng = np.random.default_rng(0)
k, d = 4, 6
Q, _ = np.linalg.qr(rng.normal(size=(k, k)))
A = (Q * np.array([1.0, 10.0, 100.0, 1000.0])) @ Q.T  # a loss Hessian with condition number 1000
S = rng.normal(size=(d, k))                            # 4 vectors spanning S in R^6
wh = whitening_head(A, S)
h_star, z_star = rng.normal(size=k), rng.normal(size=d)
H_autograd = linear_head_hessian(quadratic_loss(A), wh.W, z_star, h_star)

print("W:", wh.W.shape, "  rank r of A's positive part:", wh.rank)
print("U^T (W^T A W) U = I on S:", np.abs(restricted(wh.W.T @ A @ wh.W, S) - np.eye(k)).max() <= TOL)
print("U^T H_eff U = I on S, H_eff from autograd:", np.abs(restricted(H_autograd, S) - np.eye(k)).max() <= TOL)
print("condition number of A:", f"{np.linalg.cond(A):.0f}", "  of H_eff restricted to S:",
      f"{np.linalg.cond(restricted(H_autograd, S)):.6f}")

# %% [markdown]
# ## The consequence: gradient descent stops depending on the condition number
#
# Minimise the quadratic loss `1/2 (h - h*)^T A (h - h*)` from a random start, to a relative error of
# `1e-6`. Without a head (`h = z`), the usual fixed step is `1 / lambda_max` and the slowest direction
# needs about `cond(A) x ln(1e6)` steps. Through the whitening head, gradient descent on `z` restricted
# to `S` sees the identity, and step 1 lands on the minimum at once. `gd_steps` runs the loop;
# `gd_steps_quadratic` counts the same steps from the exact iterates `(I - lr A)^t e_0`, which is how
# the count for condition number 1e5 (about 1.3 million steps) stays cheap.

# %%
conditions = [1e1, 1e2, 1e3, 1e4, 1e5]
with_head, without_head = [], []
for cond in conditions:
    A_c = (Q * np.geomspace(1.0, cond, k)) @ Q.T
    W = whitening_head(A_c, S).W

    def loss_of_z(z, A_c=A_c, W=W):
        e = anp.dot(W, z - z_star)  # h - h* for the linear head h(z) = W (z - z*) + h*
        return 0.5 * anp.dot(e, anp.dot(A_c, e))

    z0 = z_star + S @ rng.normal(size=k)  # a start in z* + S
    with_head.append(gd_steps(grad(loss_of_z), z0, z_star, lr=1.0, tol=1e-6, max_steps=100))
    e0 = rng.normal(size=k)
    without_head.append(gd_steps_quadratic(A_c, e0, lr=1.0 / np.linalg.eigvalsh(A_c)[-1], tol=1e-6))
print(" cond(A)   steps with the whitening head   steps without a head")
for cond, a, b in zip(conditions, with_head, without_head):
    print(f"{cond:8.0e}   {a:>28d}   {b:>20d}")

# %%
fig, ax = plt.subplots(figsize=(5.5, 3.8), num="Gradient-descent steps against the condition number")
ax.loglog(conditions, without_head, "o-", label="no head (step 1 / lambda_max)")
ax.loglog(conditions, with_head, "s-", label="whitening head (step 1)")
ax.set_xlabel("condition number of the loss Hessian A")
ax.set_ylabel("steps to relative error 1e-6")
ax.set_title("Theorem 3.1: whitening removes the condition number")
ax.legend()
fig.tight_layout()
plt.show()

# %% [markdown]
# The theorem whitens a subspace of dimension `r = rank` of the loss Hessian's positive part, and no
# more: `W^T A W` has rank at most `r`. Real SSL losses are often not PSD, and then only their positive
# part can be whitened. NT-Xent's Hessian, read as a function of one sample's embedding, is
# indefinite wherever its gradient is non-zero: it depends on `h` only through `h / |h|`.

# %%
Hb = rng.normal(size=(6, 3))  # two views of 3 samples, k = 3


def simclr_of_row0(h):
    return nt_xent(0.5)(anp.concatenate([h[None, :], Hb[1:]], axis=0))


A_simclr = hessian(simclr_of_row0)(Hb[0])
lam = np.linalg.eigvalsh(A_simclr)
r = int(np.sum(lam > NEG_FLOOR * np.abs(lam).max()))  # the positive part's rank
wh = whitening_head(A_simclr, rng.normal(size=(5, r)))
print("NT-Xent, one sample's block: eigenvalues", np.round(lam, 4))
print("whitened rank r =", wh.rank, "  negative eigenvalues left out:", wh.n_negative)
try:
    whitening_head(A_simclr, rng.normal(size=(5, r + 1)))
except ValueError as exc:
    print(f"a subspace of dimension r + 1 = {r + 1} is refused:", str(exc).split(";")[0])

# %% [markdown]
# ## Proposition 3.3: a curved loss defeats every constant `W`
#
# Read the loss Hessian `g(u) = grad^2_u L(u)` as a Riemannian metric on the embedding space. A linear
# head `h(z) = W z + b` has `H_eff(z) = W^T g(W z + b) W`: the same `W` at every point. If `g` changes
# from point to point in a way no change of coordinates undoes (non-zero curvature), no single `W`
# can make `H_eff` isotropic everywhere.
#
# `log_partition(u) = log(1 + sum_c exp u_c)` is InfoNCE's shape with the positive logit at 0. Its
# Hessian metric has constant Gaussian curvature `+1/4`; a quadratic loss has curvature 0.

# %%
points = rng.uniform(-1.5, 1.5, size=(3, 2))
flat = quadratic_loss(np.array([[2.0, 0.5], [0.5, 1.0]]))
K_flat = [round(gaussian_curvature(flat, u), 6) + 0.0 for u in points]  # + 0.0: no "-0.0"
K_curved = [round(gaussian_curvature(log_partition, u), 6) for u in points]
print("Gaussian curvature of log_partition at 3 points:", K_curved)
print("Gaussian curvature of a quadratic loss:        ", K_flat)

# %% [markdown]
# The proposition is made quantitative. Measure the failure of isotropy by the defect
# `delta(H) = log cond(H)` (zero exactly when `H = c I`). For two points `u_p, u_q` of `H` (with
# `k = d`, `W` invertible), `H_p^{-1} H_q` is similar to `g_p^{-1} g_q`, whose eigenvalues do not
# depend on `W`. That gives a lower bound `B` on the worse of the two defects that holds for *every*
# `W`, and a head attaining it. We draw 2000 random heads and none beats `B`.

# %%
g_p, g_q = (hessian(log_partition)(u) for u in points[:2])
B = defect_lower_bound([g_p, g_q])
random_defects = [head_defect(rng.normal(size=(2, 2)), [g_p, g_q]) for _ in range(2000)]
print(f"bound B                        = {B:.6f}")
print(f"defect of the attaining head   = {head_defect(attaining_head(g_p, g_q), [g_p, g_q]):.6f}")
print(f"best of 2000 random heads      = {min(random_defects):.4f}   (none below B: {min(random_defects) >= B})")

# %% [markdown]
# ## Where the statement fails: `k > d`
#
# As phrased, Proposition 3.3 speaks of the curvature of the whole embedding space. But `H_eff` only
# sees `g` on the plane `W R^d + b` that the head maps onto, and only along it. With more embedding
# dimensions than backbone dimensions, the plane can avoid the curvature. Counterexample
# (`flat_times_curved`): on `R^4`, a flat factor `|u_12|^2 / 2` times the curved `log_partition` of
# `(u_3, u_4)`. The 4 x 2 head `W = [I; 0]` maps `R^2` onto the flat factor, and `H_eff = I` at every
# point, although the space has curvature `1/4`.

# %%
b = rng.uniform(-1.5, 1.5, 4)
Zs = rng.uniform(-2.0, 2.0, size=(5, 2))
H_flat = [hessian(lambda x: flat_times_curved(anp.dot(FLAT_FACTOR_HEAD, x) + b))(z) for z in Zs]
print("curvature of the curved factor at b[2:]:", round(gaussian_curvature(log_partition, b[2:]), 6))
print("H_eff = I at all 5 points (to 1e-12):", all(np.abs(H - np.eye(2)).max() <= 1e-12 for H in H_flat))
defect = max(isotropy_defect(H) for H in H_flat)
print("largest isotropy defect log cond(H_eff) there:", "0 (below 1e-12)" if defect <= 1e-12 else f"{defect:.3g}")

# %% [markdown]
# The corrected statement uses the metric the plane itself carries: `H_eff` is the Hessian of
# `psi(z) = L(W z + b)`, so the bound `B` applies to the pulled-back metrics `W^T g W`. On the
# counterexample's flat plane that bound is 0; on a random plane through the curved loss it is
# positive, and then no re-parametrisation `W A` of that plane is isotropic everywhere.

# %%
B_flat = defect_lower_bound(pulled_back_metrics(flat_times_curved, FLAT_FACTOR_HEAD, b, Zs))
B_random = defect_lower_bound(pulled_back_metrics(log_partition, rng.normal(size=(4, 2)),
                                                  rng.uniform(-1, 1, 4), Zs))
print(f"B of the pulled-back metrics, the flat plane:        {B_flat:.1e}" if B_flat > 1e-12
      else "B of the pulled-back metrics, the flat plane:        0 (below 1e-12)")
print(f"B of the pulled-back metrics, a random plane (k = 4): {B_random:.4f}")

# %% [markdown]
# ## What proves it, and where the paper and the instance disagree
#
# - `theory_checks/test_thm3_1_whitening.py`: `U^T H_eff U = I_r` for random PSD Hessians of rank `r`
#   and for the positive parts of NT-Xent, VICReg, Barlow Twins and MSE, with `H_eff` from autograd;
#   gradient-descent steps independent of the condition number. Negative controls: a random `W`; a
#   subspace of dimension `r + 1` is refused.
# - `theory_checks/test_prop3_3_curvature_barrier.py`: the curvature formulas against known surfaces,
#   the bound never beaten from many starts and attained for two points, the flat control, the
#   `k > d` counterexample and the corrected plane statement.
#
# Where the paper and the instance disagree (`docs/section3.md`): Proposition 3.3 as phrased is false
# for `k > d` (the counterexample above); it holds for `k = d`, and for `k > d` with the plane's own
# pulled-back metric in place of the curvature of the embedding space. Theorem 3.1 needs a PSD loss
# Hessian to whiten `r = rank` directions; NT-Xent's is never PSD where its gradient is non-zero, so
# only its positive part is whitened.
