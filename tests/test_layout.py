"""The weights' layout for few-row products (``scale.curvature.layout``): measured on whole products once per key,
followed by ``closed_form_operator``, and never a change to a product's value."""

from __future__ import annotations

import pytest
import torch

import scale.curvature.layout as layout
from mini.loss_hessians import PredictorCosineCurvature
from tests.test_blockwise import ROW_PRODUCT_RTOL, _head_and_loss


@pytest.fixture
def scripted(monkeypatch):
    """A clock that says which layout is faster (``copies_win``), counting the timings it was asked for."""
    state = {"copies_win": True, "timings": 0}

    def seconds(chain, D, V):
        state["timings"] += 1
        return 1.0 if _copied(chain) == state["copies_win"] else 2.0

    monkeypatch.setattr(layout, "_CHOICES", {})
    monkeypatch.setattr(layout, "_product_seconds", seconds)
    return state


def _copied(chain) -> bool:
    """Whether a chain carries the weights' contiguous transposes (the copies' layout)."""
    return all(link.WT is not None for link in chain.links)


def _built_with_transposes(monkeypatch) -> list[bool]:
    calls: list[bool] = []
    original = PredictorCosineCurvature.with_transposes

    def spy(self):
        calls.append(True)
        return original(self)

    monkeypatch.setattr(PredictorCosineCurvature, "with_transposes", spy)
    return calls


@pytest.mark.parametrize("copies_win", [True, False])
def test_the_operator_takes_the_measured_layout_and_measures_it_once(scripted, monkeypatch, copies_win):
    """``closed_form_operator`` on few rows gives its chain the weights' transposes exactly when the measurement says
    the copies are faster; a second build of the same shapes and rows measures nothing; another row count is measured
    anew; the products are the same either way (to round-off). Control: the opposite clock, the opposite layout."""
    from scale.curvature.closed_form import closed_form_operator

    scripted["copies_win"] = copies_win
    calls = _built_with_transposes(monkeypatch)
    n, d = 6, 16
    z, head, loss = _head_and_loss(n, d, seed=3)
    H, _, _ = closed_form_operator(z, head, loss)
    first = scripted["timings"]
    assert first == 2 * layout.LAYOUT_REPEATS and len(calls) == int(copies_win)
    H2, _, _ = closed_form_operator(z, head, loss)
    assert scripted["timings"] == first and len(calls) == 2 * int(copies_win)  # the answer kept, not measured again
    closed_form_operator(*_head_and_loss(4, d, seed=4))
    assert scripted["timings"] == 2 * first  # another row count: its own measurement
    plain, _, _ = closed_form_operator(z, head, loss, compose=False)  # few products: no layout question asked
    assert scripted["timings"] == 2 * first
    v = torch.randn(n * d, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    ref = plain.matvec(v)
    assert (H.matvec(v) - ref).norm() <= ROW_PRODUCT_RTOL * ref.norm()
    assert (H2.matvec(v) - ref).norm() <= ROW_PRODUCT_RTOL * ref.norm()


def test_the_choice_follows_the_faster_best_round(monkeypatch):
    """``_copies_faster`` compares the best round of each layout, alternating: a layout that lost its first round
    (a cold cache) but won every later one is chosen. Control: the same rounds the other way round."""
    monkeypatch.setattr(layout, "LAYOUT_REPEATS", 3)
    for copies_rounds, views_rounds, want in [([9.0, 1.0, 1.0], [2.0, 2.0, 2.0], True),
                                              ([2.0, 2.0, 2.0], [9.0, 1.0, 1.0], False)]:
        script = {"copies": iter(copies_rounds), "views": iter(views_rounds)}

        def seconds(chain, D, V, script=script):
            return next(script["copies" if _copied(chain) else "views"])

        monkeypatch.setattr(layout, "_product_seconds", seconds)
        assert layout._copies_faster(_links(), 2) is want


def test_copies_are_taken_only_when_they_save_more_than_they_cost(monkeypatch):
    """The copies are made at every build, so a layout faster by 1 ms a product is taken when the copy costs less than
    ``LAYOUT_PRODUCTS`` such savings, and not when it costs more (control: the same clock, the copy's cost the
    deciding difference)."""
    monkeypatch.setattr(layout, "_product_seconds", lambda chain, D, V: 1e-3 if _copied(chain) else 2e-3)
    saving = layout.LAYOUT_PRODUCTS * 1e-3
    for copy_seconds, want in [(0.5 * saving, True), (2.0 * saving, False)]:
        monkeypatch.setattr(layout, "synced_seconds", lambda fn, device, s=copy_seconds: (fn(), s))
        assert layout._copies_faster(_links(), 2) is want


def _links():
    """A two-link chain (one hidden layer) of small random weights."""
    from mini import activations
    from mini.loss_hessians import Link

    gen = torch.Generator().manual_seed(0)
    return [Link(torch.randn(7, 3, generator=gen), torch.randn(7, generator=gen), activations.get("gelu")),
            Link(torch.randn(4, 7, generator=gen), None, None)]


def test_the_timed_product_reads_every_link_both_ways():
    """What ``_copies_faster`` times is a whole product: ``ChainForward.hvp`` with the identity at the top is
    ``J^T J v + sum_l P_l^T diag(D_l) P_l v``, which reads every link in the forward pass and in the pullback, on the
    copies as on the views. Checked against autograd's ``J`` of the chain (``J^T J`` alone with ``D = 0``) and the
    two layouts against each other. Control: a product that stopped short of the last link (no ``top``) misses it."""
    from mini.loss_hessians import chain_forward

    links, gen = _links(), torch.Generator().manual_seed(1)
    Z, V = torch.randn(2, 3, generator=gen), torch.randn(2, 3, generator=gen)
    views = chain_forward(links, Z)
    zeros = [torch.zeros_like(s) for s in views.s1]

    def out(z):  # the chain's output of one row
        x = z
        for link in links[:-1]:
            x = link.act.value(torch, x @ link.W.T + link.b)
        return x @ links[-1].W.T
    for i in range(2):
        J = torch.autograd.functional.jacobian(out, Z[i])
        want = J.T @ (J @ V[i])
        for chain in (views, views.with_transposes()):
            got = chain.hvp(zeros, V, top=lambda U: U)[i]
            assert torch.allclose(got, want, rtol=1e-5, atol=1e-6)
        assert not torch.allclose(views.hvp(zeros, V)[i], want, rtol=1e-5, atol=1e-6)


def test_the_clock_times_that_product(monkeypatch):
    """``_product_seconds`` runs the chain's ``hvp`` on the given directions with a ``top`` (the whole chain, above),
    on each layout ``_copies_faster`` compares. Control: the spy sees both layouts, each ``LAYOUT_REPEATS`` times."""
    from mini.loss_hessians import ChainForward

    seen, original = [], ChainForward.hvp

    def spy(self, D, V, top=None, upto=None):
        seen.append((_copied(self), top is not None, tuple(V.shape)))
        return original(self, D, V, top=top, upto=upto)

    monkeypatch.setattr(ChainForward, "hvp", spy)
    layout._copies_faster(_links(), 2)
    assert sorted(seen) == sorted([(c, True, (2, 3)) for c in (False, True)] * layout.LAYOUT_REPEATS)


def test_a_real_measurement_answers_and_is_kept(monkeypatch):
    """With the real clock: the answer is a bool, stored under the links' dtype, device, shapes and rows."""
    from mini.loss_hessians import Link

    monkeypatch.setattr(layout, "_CHOICES", {})
    from mini import activations

    links = [Link(torch.randn(32, 16), None, activations.get("gelu")), Link(torch.randn(8, 32), None, None)]
    got = layout.transposes_pay(links, 4)
    assert isinstance(got, bool)
    assert layout._CHOICES == {(torch.float32, "cpu", ((32, 16), (8, 32)), 4): got}


def test_a_checkpoints_answers_are_adopted_and_malformed_ones_skipped(monkeypatch):
    """``adopt(answers())`` restores the answers (a resumed run's layouts); entries that do not parse (a name that is
    not a dtype: nothing is looked up beyond torch's dtypes, a wrong arity, a choice that is not a bool, ``None``)
    are skipped, so that key would be measured again."""
    monkeypatch.setattr(layout, "_CHOICES", {(torch.float32, "cpu", ((8, 4), (2, 8)), 3): True})
    saved = layout.answers()
    assert saved == [["float32", "cpu", [[8, 4], [2, 8]], 3, True]]
    monkeypatch.setattr(layout, "_CHOICES", {})
    layout.adopt([*saved, ["nn", "cpu", [[1, 1]], 1, True], ["float64", "cpu", [[1, 1]], 1, "yes"], [1, 2], None])
    assert layout._CHOICES == {(torch.float32, "cpu", ((8, 4), (2, 8)), 3): True}
    layout.adopt(None)
    assert len(layout._CHOICES) == 1
