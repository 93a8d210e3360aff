"""Adding an activation is one table entry: a toy activation registered at runtime runs through
mini (forward, closed-form ``H_eff`` against autograd), scale (a torch head from the spec) and the
crosscheck's comparison of one instance, and leaves no trace once removed."""

from __future__ import annotations

import numpy as np
import pytest

from mini import activations
from mini.heads import init_head, parse_head_spec
from mini.hessian import decompose_autograd, decompose_closed_form
from mini.losses import mse_targets

REL_TOL = 1e-10  # float64 against float64, relative to the matrix's own scale


def _cubic(xp, a):
    return a + 0.1 * a * a * a  # s(a) = a + a^3 / 10: smooth, s'' = 0.6 a is not identically 0


def _cubic_d(xp, a):
    return 1.0 + 0.3 * a * a, 0.6 * a


@pytest.fixture
def cubic():
    entry = activations.register(activations.Activation("cubic", _cubic, _cubic_d))
    try:
        yield entry
    finally:
        activations.unregister("cubic")


def _rel(a, b) -> float:
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return float(np.abs(a - b).max() / np.abs(b).max())


def test_toy_activation_through_mini(cubic) -> None:
    head = init_head("cubic3", 4, 3, 5, rng=0)
    assert head.spec.smooth
    Z = np.random.default_rng(1).standard_normal((6, 4))
    x = Z
    for layer in head.layers[:-1]:
        x = _cubic(np, x @ layer["W"].T + layer["b"])
    expected = x @ head.layers[-1]["W"].T + head.layers[-1]["b"]
    assert _rel(head(Z), expected) <= REL_TOL
    objective = mse_targets(np.random.default_rng(2).standard_normal((6, 3)))
    closed, auto = decompose_closed_form(head, objective, Z), decompose_autograd(head, objective, Z)
    for name in ("H", "G", "M"):
        assert _rel(getattr(closed, name), getattr(auto, name)) <= REL_TOL, name
    assert np.abs(auto.M).max() > 1e-3 * np.abs(auto.H).max()  # the toy's s'' really enters M


def test_toy_activation_through_scale_and_crosscheck(cubic) -> None:
    torch = pytest.importorskip("torch")
    from scale import crosscheck
    from scale.engine.heads import build_head, head_from_mini

    module = build_head("cubic2", 4, 3, 5).double()
    assert module(torch.zeros(2, 4, dtype=torch.float64)).shape == (2, 3)
    head = init_head("cubic2", 4, 3, 5, rng=0)
    Z = np.random.default_rng(1).standard_normal((6, 4))
    assert _rel(head_from_mini(head)(torch.as_tensor(Z)).detach().numpy(), head(Z)) <= REL_TOL
    errors = crosscheck.check_instance(crosscheck.build_instance("cubic2", "mse", seed=7))
    for quantity, err in errors.items():
        assert err is None or err <= crosscheck.tolerance(quantity), (quantity, err)


def test_removed_activation_is_gone() -> None:
    activations.register(activations.Activation("cubic", _cubic, _cubic_d))
    activations.unregister("cubic")
    with pytest.raises(ValueError, match="unknown activation 'cubic'"):
        parse_head_spec("cubic2")
    with pytest.raises(ValueError, match="lower-case letters"):
        activations.register(activations.Activation("linear", _cubic, _cubic_d))
