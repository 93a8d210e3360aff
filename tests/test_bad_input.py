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
