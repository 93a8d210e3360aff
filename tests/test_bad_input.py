"""Bad input to the Hessian paths: clear exceptions naming the problem, never a NaN matrix."""

from __future__ import annotations

import numpy as np
import pytest

from mini.heads import init_head
from mini.hessian import decompose_autograd, decompose_closed_form, effective_hessian, spectrum
from mini.losses import mse_targets, nt_xent

HEAD = init_head("gelu2", 3, 2, 4, 0)
PATHS = (effective_hessian, decompose_autograd, decompose_closed_form)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize(
    ("Z", "message"),
    [(np.ones((4, 5)), "expects d=3"), (np.ones(3), "2-D"), (np.zeros((0, 3)), "empty"),
     (np.array([[0.0, np.nan, 1.0]] * 4), "NaN"), (np.array([[0.0, np.inf, 1.0]] * 4), "NaN or infinite")],
)
def test_bad_batches(path, Z, message) -> None:
    with pytest.raises(ValueError, match=message):
        path(HEAD, nt_xent(), Z)


@pytest.mark.parametrize("path", PATHS)
def test_non_finite_weights(path) -> None:
    bad = HEAD.with_layers([{**HEAD.layers[0], "W": np.full_like(HEAD.layers[0]["W"], np.nan)}, HEAD.layers[1]])
    with pytest.raises(ValueError, match="layer 0 parameter W"):
        path(bad, nt_xent(), np.ones((4, 3)))


@pytest.mark.parametrize("path", PATHS)
def test_mismatched_objective(path) -> None:
    with pytest.raises(ValueError, match="do not match"):
        path(HEAD, mse_targets(np.ones((5, 2))), np.ones((4, 3)))
    with pytest.raises(ValueError, match="even batch"):
        path(HEAD, nt_xent(), np.ones((3, 3)))


@pytest.mark.parametrize("path", PATHS)
def test_overflow_is_an_error_not_a_nan_matrix(path) -> None:
    huge = init_head("softplus2", 3, 2, 4, 0, gain=1e300)
    with pytest.raises((FloatingPointError, ValueError)):
        with np.errstate(all="ignore"):
            path(huge, mse_targets(np.ones((4, 2))), np.ones((4, 3)))


def test_spectrum_input_errors_and_floor() -> None:
    with pytest.raises(ValueError, match="square"):
        spectrum(np.ones((2, 3)))
    with pytest.raises(ValueError, match="symmetric"):
        spectrum(np.array([[0.0, 1.0], [0.0, 0.0]]))
    with pytest.raises(ValueError, match="NaN"):
        spectrum(np.array([[np.nan]]))
    s = spectrum(np.diag([-1e-14, 1.0, 2.0]))  # round-off-sized negative: not curvature
    assert s.n_negative == 0 and s.definiteness == "positive semidefinite" and s.condition is None
    s = spectrum(np.diag([-1e-3, 1.0]))
    assert s.n_negative == 1 and s.definiteness == "indefinite" and s.condition is None
    s = spectrum(np.diag([0.5, 2.0]))
    assert s.definiteness == "positive definite" and s.condition == pytest.approx(4.0)


# --------------------------------------------------------------------------------------------
# The public functions of mini: one check (mini.validation), one wording
# --------------------------------------------------------------------------------------------

BAD_ARRAYS = [
    (np.array([[0.0, np.nan, 1.0]] * 4), "NaN or infinite"),
    (np.array([[0.0, -np.inf, 1.0]] * 4), "NaN or infinite"),
    (np.zeros((0, 3)), "empty"),
    (np.ones((4, 3)) + 1j, "complex"),
]


@pytest.mark.parametrize(("Z", "message"), BAD_ARRAYS)
def test_head_forward_and_derivatives_refuse_bad_input(Z, message) -> None:
    from mini.heads import derivatives
    from mini.hessian import head_derivatives

    with pytest.raises(ValueError, match=message):
        HEAD(Z)
    with pytest.raises(ValueError, match=message):
        head_derivatives(HEAD, Z)
    with pytest.raises(ValueError, match=message):
        derivatives("gelu", Z)
    with pytest.raises(ValueError, match=message):
        decompose_closed_form(HEAD, nt_xent(), Z)


@pytest.mark.parametrize("name", ["mse", "mse_views", "simclr", "simsiam", "byol", "vicreg", "barlow"])
@pytest.mark.parametrize(("Hb", "message"), [(np.array([[0.0, np.nan]] * 4), "NaN or infinite"),
                                              (np.array([[np.inf, 1.0]] * 4), "NaN or infinite"),
                                              (np.zeros((0, 2)), "empty"), (np.ones((4, 2)) * 1j, "complex")])
def test_objectives_refuse_bad_embeddings(name, Hb, message) -> None:
    from mini.losses import make_objective

    targets = np.ones((4, 2)) if name in ("mse", "simsiam", "byol") else None
    obj = make_objective(name, targets=targets)
    with pytest.raises(ValueError, match=message):
        obj(Hb)


def test_complex_targets_are_refused_not_reduced_to_their_real_part() -> None:
    with pytest.raises(ValueError, match="complex"):
        mse_targets(np.ones((4, 2)) * (1 + 1j))


SCALES = (1e-300, 1e-155, 1e-12, 1.0, 1e155, 1e300)


@pytest.mark.parametrize("scale", SCALES)
def test_scale_invariant_losses_are_exact_over_the_float64_range(scale) -> None:
    """NT-Xent and the cosine forms depend on h only through h / |h|: every scale of the same
    embeddings gives the same value (the overflow of |h|^2 once returned log(2m - 1) = 1.609 at 1e155)."""
    from mini.losses import simsiam

    H = np.random.default_rng(0).standard_normal((6, 3))
    T = np.random.default_rng(1).standard_normal((6, 3))
    with np.errstate(all="raise"):
        assert nt_xent()(H * scale) == pytest.approx(nt_xent()(H), rel=1e-14)
        assert simsiam(T)(H * scale) == pytest.approx(simsiam(T)(H), rel=1e-14)
        assert simsiam(T * scale)(H) == pytest.approx(simsiam(T)(H), rel=1e-14)
    assert nt_xent()(H) == pytest.approx(10.330279312338, rel=1e-12)  # the value at every scale


def test_safe_norm_is_exact_and_finite_at_zero() -> None:
    from autograd import grad

    from mini.losses import NORM_EPS, safe_norm

    x = np.array([[3.0, 4.0], [0.0, 0.0], [3e-200, 4e-200], [3e300, 4e300]])
    np.testing.assert_allclose(safe_norm(x)[:, 0], [5.0, NORM_EPS, 5e-200, 5e300], rtol=1e-15)
    g = grad(lambda v: np.sum(safe_norm(v)))(x)
    assert np.all(np.isfinite(g))
    np.testing.assert_allclose(g[[0, 2, 3]], np.array([[0.6, 0.8]] * 3), rtol=1e-15)


@pytest.mark.parametrize(("name", "limit"), [("mse", 1e150), ("mse_views", 1e150), ("barlow", 1e150),
                                             ("vicreg", 1e75)])
def test_power_losses_refuse_what_would_overflow(name, limit) -> None:
    from mini.losses import make_objective

    obj = make_objective(name, targets=np.zeros((4, 2)) if name == "mse" else None)
    Hb = np.random.default_rng(0).standard_normal((4, 2))
    assert np.isfinite(obj(Hb / np.abs(Hb).max() * limit))  # at the limit: finite
    with pytest.raises(ValueError, match="overflow"):
        obj(Hb / np.abs(Hb).max() * limit * 10)


def test_loss_derivatives_refuse_complex_embeddings_instead_of_dropping_their_imaginary_part() -> None:
    """``np.asarray(Hb, dtype=float)`` would keep the real part of a complex batch (a ComplexWarning at best): the
    batch is checked before the conversion."""
    import warnings

    from mini import make_objective
    from mini.hessian import loss_derivatives, loss_gradient

    Hb = np.random.default_rng(0).normal(size=(4, 3))
    objective = make_objective("vicreg")
    with warnings.catch_warnings():  # negative control: the conversion alone silently loses the imaginary part
        warnings.simplefilter("ignore")
        assert np.array_equal(np.asarray(Hb + 1j, dtype=float), Hb)
    for f in (loss_gradient, loss_derivatives):
        with pytest.raises(ValueError, match="vicreg: embeddings is complex"):
            f(objective, Hb + 1j)
    assert loss_gradient(objective, Hb).shape == Hb.shape  # real input as before
