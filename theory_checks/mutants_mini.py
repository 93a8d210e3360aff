"""The mistakes in ``mini/``: equation (1)'s closed form, the activation table, the objectives, the collapse,
whitening and capacity constructions, the invariance measures (and scale's torch head, which mirrors mini's).
Each is a function of a ``pytest.MonkeyPatch`` that installs it; ``mutant_table`` names its killers.
"""

from __future__ import annotations

import numpy as np

from theory_checks.mutation import patch_activation, patch_objective, swap, wrap


def closed_form_without_M(mp):
    import mini.hessian as H

    wrap(mp, H, "interaction_blocks", lambda f: lambda der, rho: 0.0 * f(der, rho))


def M_wrong_sign(mp):
    import mini.hessian as H

    wrap(mp, H, "interaction_blocks", lambda f: lambda der, rho: -f(der, rho))


def G_as_J_A_JT(mp):
    """``J A J^T`` where ``J^T A J`` is meant (per-sample blocks; shapes agree only when k = d)."""
    import mini.hessian as H

    def assemble_blocks(J, loss_blocks, M_blocks):
        G = np.asarray(J) @ np.asarray(loss_blocks) @ np.swapaxes(np.asarray(J), 1, 2)
        return H.block_diagonal(G), H.block_diagonal(M_blocks)

    swap(mp, H, "assemble_blocks", assemble_blocks)


def interaction_drops_s1(mp):
    """The backward recursion of ``g`` forgets the ``s'(a_l)`` factor (wrong for depth >= 3)."""
    import mini.hessian as H

    def interaction_blocks(der, rho):
        M = np.zeros((der.J.shape[0], der.J.shape[2], der.J.shape[2]))
        g = rho @ der.W[-1]
        for l in range(len(der.P) - 1, -1, -1):
            Pl = der.P[l]
            M = M + np.swapaxes(Pl, 1, 2) @ ((g * der.s2[l])[:, :, None] * Pl)
            g = g @ der.W[l]
        return M

    swap(mp, H, "interaction_blocks", interaction_blocks)


def gelu_s2_sign(mp):
    patch_activation(mp, "gelu", lambda a, s1, s2: (s1, -s2))


def gelu_tanh_approx_s1(mp):
    """GELU's tanh approximation used for ``s'`` while ``s`` is the exact erf form."""
    c = np.sqrt(2.0 / np.pi)

    def mutate(a, s1, s2):
        u = c * (a + 0.044715 * a**3)
        t = np.tanh(u)
        return 0.5 * (1 + t) + 0.5 * a * (1 - t * t) * c * (1 + 3 * 0.044715 * a * a), s2

    patch_activation(mp, "gelu", mutate)


def swish_s2_factor(mp):
    """Swish ``s''`` with ``1 + a(1 - 2 sig)`` instead of ``2 + a(1 - 2 sig)``."""

    def mutate(a, s1, s2):
        sig = 0.5 * (1.0 + np.tanh(0.5 * a))
        ds = sig * (1 - sig)
        return s1, ds * (1.0 + a * (1.0 - 2.0 * sig))

    patch_activation(mp, "swish", mutate)


def tanh_s2_factor(mp):
    patch_activation(mp, "tanh", lambda a, s1, s2: (s1, 0.5 * s2))


def tanh_s2_sign(mp):
    """tanh ``s''`` with its sign flipped: ``+2 t (1 - t^2)``."""
    patch_activation(mp, "tanh", lambda a, s1, s2: (s1, -s2))


def softplus_s1_shift(mp):
    """Softplus ``s'`` evaluated as ``sigma(-a)`` (a sign slip in the logistic)."""
    patch_activation(mp, "softplus", lambda a, s1, s2: (1.0 - s1, s2))


def relu_s2_nonzero(mp):
    """ReLU's ``s''`` as a smoothed delta (a "helpful" soft kink) instead of 0 a.e."""
    patch_activation(mp, "relu", lambda a, s1, s2: (s1, np.exp(-0.5 * a * a) / np.sqrt(2 * np.pi)))


def loss_hessian_blocks_times_two(mp):
    import mini.hessian as H

    wrap(mp, H, "loss_hessian_blocks", lambda f: lambda obj, Hb: 2.0 * f(obj, Hb))


def coupled_loss_hessian_times_two(mp):
    import mini.hessian as H

    def wrapper(f):
        def loss_derivatives(obj, Hb):
            rho, HL = f(obj, Hb)
            return rho, 2.0 * HL

        return loss_derivatives

    wrap(mp, H, "loss_derivatives", wrapper)


def nt_xent_no_positive(mp):
    """NT-Xent's denominator without the positive pair (only the 2m - 2 negatives)."""
    import autograd.numpy as anp

    import mini.losses as L

    def builder(temperature=0.1):
        tau = float(temperature)

        def fn(Hb):
            n = Hb.shape[0]
            m = n // 2
            U = L.normalize(Hb)
            S = anp.dot(U, U.T) / tau
            partner = np.concatenate([np.arange(m, n), np.arange(0, m)])
            neg = 1.0 - np.eye(n) - np.eye(n)[partner]
            lse = 1.0 / tau + anp.log(anp.sum(neg * anp.exp(S - 1.0 / tau), axis=1))
            return anp.mean(lse - anp.sum(U * U[partner], axis=1) / tau)

        return fn

    patch_objective(mp, "nt_xent", builder)


def vicreg_variance_wrong_axis(mp):
    """VICReg's variance hinge over the features of each sample instead of over the batch."""
    import autograd.numpy as anp

    import mini.losses as L

    def builder(sim_coeff=25.0, std_coeff=25.0, cov_coeff=1.0, eps=1e-4):
        def one_view(X):
            m, k = X.shape
            Xc = X - anp.mean(X, axis=0)
            Xr = X - anp.mean(X, axis=1, keepdims=True)
            std = anp.sqrt(anp.sum(Xr * Xr, axis=1) / (k - 1) + eps)
            cov = anp.dot(Xc.T, Xc) / (m - 1)
            return anp.mean(anp.maximum(1.0 - std, 0.0)) / 2.0, L._off_diagonal_sq_sum(cov) / k

        def fn(Hb):
            A, B = L.split_views(Hb)
            std_a, cov_a = one_view(A)
            std_b, cov_b = one_view(B)
            return sim_coeff * anp.mean((A - B) ** 2) + std_coeff * (std_a + std_b) + cov_coeff * (cov_a + cov_b)

        return fn

    patch_objective(mp, "vicreg", builder)


def barlow_lambda_on_diagonal(mp):
    """Barlow Twins with the off-diagonal weight applied to the diagonal term too."""
    import autograd.numpy as anp

    import mini.losses as L

    def builder(lambd=5e-3, eps=1e-5):
        def standardize(X):
            Xc = X - anp.mean(X, axis=0)
            return Xc / anp.sqrt(anp.mean(Xc * Xc, axis=0) + eps)

        def fn(Hb):
            A, B = L.split_views(Hb)
            C = anp.dot(standardize(A).T, standardize(B)) / A.shape[0]
            return lambd * anp.sum((1.0 - anp.diag(C)) ** 2) + lambd * L._off_diagonal_sq_sum(C)

        return fn

    patch_objective(mp, "barlow", builder)


def floor_1e3(mp):
    import mini.hessian as H

    wrap(mp, H, "spectrum", lambda f: lambda A, rel_floor=1e-3: f(A, 1e-3))


def floor_absolute(mp):
    """The negative-curvature floor as an absolute 1e-9 instead of 1e-9 x the spectral scale."""
    import mini.hessian as H

    def wrapper(f):
        def spectrum(A, rel_floor=H.NEG_FLOOR):
            s = f(A, rel_floor)
            return H.Spectrum(s.eigenvalues, s.scale, rel_floor, rel_floor)

        return spectrum

    wrap(mp, H, "spectrum", wrapper)


def restricted_min_returns_max(mp):
    import mini.collapse as C

    def restricted_min(M, basis):
        if basis.shape[1] == 0:
            return float("inf")
        return float(np.linalg.eigvalsh(basis.T @ M @ basis)[-1])

    swap(mp, C, "restricted_min", restricted_min)


def null_space_absolute(mp):
    """The null space of ``G`` with an absolute tolerance 1e-9 instead of a relative one."""
    import mini.collapse as C

    def null_space(A, rel_floor=1e-9):
        w, V = np.linalg.eigh(A)
        return V[:, np.abs(w) <= 1e-9]

    swap(mp, C, "null_space", null_space)


def collapsed_not_collapsed(mp):
    """A "collapsed" batch whose rows differ slightly (jitter 1e-3)."""
    import mini.collapse as C

    def collapsed_batch(z_star, n):
        z_star = np.asarray(z_star, dtype=float)
        rng = np.random.default_rng(0)
        return np.tile(z_star, (n, 1)) + 1e-3 * rng.standard_normal((n, z_star.size))

    swap(mp, C, "collapsed_batch", collapsed_batch)


def whitening_inverse(mp):
    """The whitening head built with ``A^{-1}`` instead of ``A^{-1/2}``."""
    import mini.whitening as W

    def wrapper(f):
        def whitening_head(A, subspace, rel_floor=W.NEG_FLOOR):
            w = f(A, subspace, rel_floor)
            lam = w.eigenvalues
            keep = lam > rel_floor * float(np.abs(lam).max(initial=0.0))
            _, V = np.linalg.eigh(0.5 * (np.asarray(A) + np.asarray(A).T))
            U = W.orthonormal_basis(subspace)
            return W.Whitening((V[:, keep] / lam[keep]) @ U.T, w.rank, w.n_negative, lam)

        return whitening_head

    wrap(mp, W, "whitening_head", wrapper)


def restricted_transposed(mp):
    """``U H U^T`` (d, d) where ``U^T H U`` (r, r) is meant."""
    import mini.whitening as W

    def restricted(H, subspace):
        U = W.orthonormal_basis(subspace)
        R = np.asarray(H, dtype=float)
        return (U @ U.T @ R @ U @ U.T)[: U.shape[1], : U.shape[1]]

    swap(mp, W, "restricted", restricted)


def gn_bound_without_square(mp):
    """Proposition 3.4's bound as ``2 L M eps`` (the ``M eps^2`` term dropped)."""
    import mini.capacity as Cap

    swap(mp, Cap, "gauss_newton_bound", lambda L, M, eps: 2.0 * L * M * eps)


def threshold_first_order(mp):
    """Corollary 3.5's threshold from the first-order expansion instead of the exact root."""
    import mini.capacity as Cap

    swap(mp, Cap, "exact_threshold", Cap.first_order_threshold)


def spectral_norm_frobenius(mp):
    import mini.capacity as Cap

    swap(mp, Cap, "spectral_norm", lambda A: float(np.linalg.norm(np.asarray(A))))


def fisher_JJt(mp):
    """The Fisher information as ``J J^T`` instead of ``J^T J``."""
    import mini.invariance as Inv

    def fisher_information(phi, xi, sigma=1.0):
        from autograd import jacobian

        J = jacobian(phi)(np.asarray(xi, dtype=float))
        return J @ J.T / sigma**2

    swap(mp, Inv, "fisher_information", fisher_information)


def fisher_rank_absolute(mp):
    """Fisher rank with an absolute tolerance 1e-10 instead of one relative to lambda_max."""
    import mini.invariance as Inv

    def fisher_rank(I, rtol=1e-10):
        eig = np.linalg.eigvalsh(0.5 * (I + I.T))
        return int(np.sum(eig > 1e-10))

    swap(mp, Inv, "fisher_rank", fisher_rank)


def pullback_JJt(mp):
    import mini.invariance as Inv

    def pullback_metric(fn, z):
        J = Inv.head_jacobian(fn, z)
        return J @ J.T

    swap(mp, Inv, "pullback_metric", pullback_metric)


def flow_ascends(mp):
    """The gradient flow integrated with the wrong sign (ascent)."""
    import mini.dynamics as D

    def wrapper(f):
        def z_flow(head, objective, Z0, t, *args, **kwargs):
            out = f(head, objective, Z0, t, *args, **kwargs)
            Z0 = np.asarray(Z0, dtype=float)
            return 2.0 * Z0 - out if np.ndim(t) == 0 else 2.0 * Z0[None] - out

        return z_flow

    wrap(mp, D, "z_flow", wrapper)


def orthonormal_basis_raw(mp):
    """The subspace's columns used as they come (no orthonormalisation)."""
    import mini.whitening as W

    def orthonormal_basis(subspace):
        return np.asarray(subspace, dtype=float)

    swap(mp, W, "orthonormal_basis", orthonormal_basis)


def spectrum_scale_from_max(mp):
    """The spectral scale as the largest eigenvalue instead of the largest ``|eigenvalue|``."""
    import mini.hessian as H

    def wrapper(f):
        def spectrum(A, rel_floor=H.NEG_FLOOR):
            s = f(A, rel_floor)
            scale = max(float(s.eigenvalues[-1]), 0.0)
            return H.Spectrum(s.eigenvalues, scale, rel_floor * scale, rel_floor)

        return spectrum

    wrap(mp, H, "spectrum", wrapper)


def torch_gelu_tanh(mp):
    """scale's torch GELU module in its tanh approximation while mini's ``s`` is the exact erf form."""
    import dataclasses

    from mini import activations

    entry = activations.TABLE["gelu"]
    mp.setitem(activations.TABLE, "gelu", dataclasses.replace(entry, torch_kwargs=(("approximate", "tanh"),)))



def nt_xent_fixed_temperature(mp):
    """NT-Xent that ignores the temperature it is given (always 0.1, the default)."""
    import mini.losses as L

    original = L.nt_xent
    patch_objective(mp, "nt_xent", lambda temperature=0.1: original(0.1).fn)


def vicreg_coefficients_swapped(mp):
    """VICReg with the invariance and variance coefficients swapped (equal at the defaults, 25 / 25)."""
    import mini.losses as L

    original = L.vicreg
    patch_objective(mp, "vicreg", lambda sim_coeff=25.0, std_coeff=25.0, cov_coeff=1.0, eps=1e-4:
                     original(std_coeff, sim_coeff, cov_coeff, eps).fn)


def barlow_lambda_ignored(mp):
    """Barlow Twins with its off-diagonal weight fixed at the default 5e-3 whatever it is given."""
    import mini.losses as L

    original = L.barlow
    patch_objective(mp, "barlow", lambda lambd=5e-3, eps=1e-5: original(5e-3, eps).fn)


def wilson_wald(mp):
    """The Wald interval ``p -+ z sqrt(p (1 - p) / N)`` where the Wilson score interval is meant."""
    import mini.collapse as C

    def wilson_interval(hits, total, z=C.WILSON_Z95):
        p = hits / total
        half = z * np.sqrt(p * (1 - p) / total)
        return float(max(0.0, p - half)), float(min(1.0, p + half))

    swap(mp, C, "wilson_interval", wilson_interval)


def wilson_by_subtraction(mp):
    """The Wilson ends as ``(c -+ h) / (1 + z^2/N)`` evaluated as written: at ``0/N`` the lower end rounds to
    ~1e-17 instead of 0 (and the upper to 1 - 1e-16 at ``N/N``)."""
    import mini.collapse as C

    def wilson_interval(hits, total, z=C.WILSON_Z95):
        p, z2 = hits / total, z * z
        centre, denom = p + z2 / (2 * total), 1 + z2 / total
        half = z * np.sqrt(p * (1 - p) / total + z2 / (4 * total * total))
        return float(max(0.0, (centre - half) / denom)), float(min(1.0, (centre + half) / denom))

    swap(mp, C, "wilson_interval", wilson_interval)


def orbit_gain_unnormalised(mp):
    """The orbit gain as ``v^T G v / |v|^2``, without dividing by the mean ``tr G / d``."""
    import mini.invariance as Inv

    def orbit_gain(G, V):
        V = np.atleast_2d(np.asarray(V, dtype=float))
        return np.einsum("md,de,me->m", V, np.asarray(G, dtype=float), V) / np.sum(V * V, axis=1)

    swap(mp, Inv, "orbit_gain", orbit_gain)


def orbit_displacement_from_centroid(mp):
    """Orbit displacement measured from the orbit's centroid instead of from ``h(z)``."""
    import mini.invariance as Inv

    def orbit_displacement(fn, orbit):
        H = np.asarray(fn(np.asarray(orbit, dtype=float)), dtype=float)
        return np.linalg.norm(H - H.mean(axis=0), axis=1)

    swap(mp, Inv, "orbit_displacement", orbit_displacement)


def leak_quadratic(mp):
    """The approximately invariant head leaking ``delta^2 P z`` instead of ``delta P z``."""
    import mini.invariance as Inv

    def approximately_invariant_head(invariants, head, P, delta):
        P = np.asarray(P, dtype=float)
        return lambda Z: head(invariants(Z) + delta**2 * Z @ P.T)

    swap(mp, Inv, "approximately_invariant_head", approximately_invariant_head)
