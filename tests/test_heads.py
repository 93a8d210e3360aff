"""The head grammar: parsing, errors, shapes, determinism, derivatives."""

from __future__ import annotations

import numpy as np
import pytest
from autograd import elementwise_grad

from mini.heads import ACTIVATIONS, HeadSpec, activation_fn, derivatives, init_head, parse_head_spec


@pytest.mark.parametrize(
    ("spec", "expected"),
    [("linear", HeadSpec(None, 1)), ("gelu3", HeadSpec("gelu", 3)), ("relu2", HeadSpec("relu", 2)),
     ("swish3", HeadSpec("swish", 3)), ("tanh2", HeadSpec("tanh", 2)), ("softplus4", HeadSpec("softplus", 4)),
     (" GELU3 ", HeadSpec("gelu", 3))],
)
def test_valid_specs(spec: str, expected: HeadSpec) -> None:
    assert parse_head_spec(spec) == expected
    assert parse_head_spec(expected.name) == expected


@pytest.mark.parametrize("bad", ["gelu0", "foo3", "relu", "gelu1", "", "linear2", "gelu-3", "3gelu", None, 3])
def test_bad_specs_raise_with_valid_forms(bad) -> None:
    with pytest.raises(ValueError, match="valid forms") as info:
        parse_head_spec(bad)
    for act in ACTIVATIONS:
        assert act in str(info.value)


def test_init_is_deterministic_and_shaped() -> None:
    a = init_head("gelu3", 5, 4, 7, rng=3)
    b = init_head("gelu3", 5, 4, 7, rng=np.random.default_rng(3))
    assert a.widths == (5, 7, 7, 4)
    for la, lb in zip(a.layers, b.layers):
        assert la["W"].shape == lb["W"].shape and np.array_equal(la["W"], lb["W"])
    Z = np.ones((6, 5))
    assert a(Z).shape == (6, 4)
    assert "b" not in init_head("relu2", 5, 4, 7, bias=False).layers[0]


@pytest.mark.parametrize("bad_width", [[3], [3, 0], 0])
def test_bad_widths(bad_width) -> None:
    with pytest.raises(ValueError, match="hidden widths"):
        init_head("gelu3", 5, 4, bad_width)


@pytest.mark.parametrize("act", ACTIVATIONS)
def test_closed_form_derivatives_match_autograd(act: str) -> None:
    a = np.linspace(-3, 3, 41) + 1e-3  # avoid the ReLU kink at exactly 0
    s = activation_fn(act)
    d1 = elementwise_grad(s)(a)
    d2 = elementwise_grad(elementwise_grad(s))(a)
    c1, c2 = derivatives(act, a)
    np.testing.assert_allclose(c1, d1, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(c2, d2, rtol=1e-12, atol=1e-14)


def test_gelu_is_the_exact_erf_form() -> None:
    from scipy.stats import norm

    a = np.linspace(-4, 4, 17)
    np.testing.assert_allclose(activation_fn("gelu")(a), a * norm.cdf(a), rtol=1e-14, atol=1e-15)


@pytest.mark.parametrize("act", [None, *ACTIVATIONS])
def test_torch_module_of_each_table_entry_computes_its_s(act) -> None:
    """The table's torch module (native or the wrapped array-API ``s``) is the same function as the
    ``s`` mini differentiates, on float64 tensors, far from 0 too (torch's Softplus would cut off at 20)."""
    torch = pytest.importorskip("torch")
    from scale.engine.heads import activation_module

    a = np.linspace(-30.0, 30.0, 121)
    out = activation_module(act)(torch.as_tensor(a)).numpy()
    np.testing.assert_allclose(out, activation_fn(act)(a), rtol=1e-14, atol=1e-14)


def test_unknown_activation_lists_the_table() -> None:
    with pytest.raises(ValueError, match="valid: relu, gelu, swish, tanh, softplus"):
        derivatives("elu", np.zeros(3))
