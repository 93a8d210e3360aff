"""``scale.engine.heads.reused_casts``: the weights' dtype casts of a build written into the buffers of the last
build in the same thread (no fresh memory to map), with the same values, and only where it is safe: inside
``blockwise_ends``, whose operators do not outlive the call."""

from __future__ import annotations

import threading

import torch

from scale.engine.heads import MLPHead, mini_head_of, reused_casts


def _head(seed: int = 0, width: int = 24) -> MLPHead:
    torch.manual_seed(seed)
    return MLPHead("swish2", 8, width, 16)  # float32 weights: a float64 build casts every one


def _storages(head) -> list[int]:
    return [layer["W"].data_ptr() for layer in head.layers]


def test_a_second_build_reuses_the_first_ones_buffers_with_the_new_values():
    """Two builds under ``reused_casts``: the second's float64 weights lie in the first's memory and equal
    ``.to(float64)`` of the weights as they are now, bit for bit (the head trained in between). Control: without
    the context every build gets fresh memory (the first build's weights, still held, keep their values)."""
    head = _head()
    with reused_casts():
        first = mini_head_of(head, torch.float64)
    ptrs = _storages(first)
    with torch.no_grad():
        for p in head.parameters():
            p.add_(0.5)
    with reused_casts():
        second = mini_head_of(head, torch.float64)
    assert _storages(second) == ptrs
    for layer, linear in zip(second.layers, head.layers):
        assert torch.equal(layer["W"], linear.weight.detach().to(torch.float64))
    held = mini_head_of(head, torch.float64)
    again = mini_head_of(head, torch.float64)
    assert not set(_storages(held)) & set(_storages(again)) and not set(_storages(held)) & set(ptrs)


def test_other_shapes_get_their_own_buffers_and_unused_ones_are_let_go():
    """A build of other shapes reuses only the buffers of its shapes, in order; the buffers a build did not use are
    not kept for the next (memory bounded by one build's weights). Every build is held, so no memory is freed and
    handed out again at the same address."""
    with reused_casts():
        small = mini_head_of(_head(width=24), torch.float64)  # 8 -> 16 -> 24
    with reused_casts():
        wide = mini_head_of(_head(width=40), torch.float64)  # 8 -> 16 -> 40
    assert [tuple(L["W"].shape) for L in wide.layers] == [(16, 8), (40, 16)]
    (s0, s1), (w0, w1) = _storages(small), _storages(wide)
    assert w0 == s0 and w1 != s1
    with reused_casts():
        again = mini_head_of(_head(width=24), torch.float64)
    a0, a1 = _storages(again)
    assert a0 == w0 and a1 not in (s1, w1)  # the 24-wide buffer was let go by the 40-wide build


def test_a_cast_to_the_weights_own_dtype_and_a_nested_context_change_nothing():
    """A float32 build of float32 weights casts nothing (the module's own tensors, as without the context); a
    context entered within another is that one (the inner build's buffers are the outer build's, kept after)."""
    head = _head()
    with reused_casts():
        same = mini_head_of(head, torch.float32)
        assert _storages(same) == [L.weight.data_ptr() for L in head.layers]
        outer = mini_head_of(head, torch.float64)
        with reused_casts():
            inner = mini_head_of(head, torch.float64)
    assert not set(_storages(inner)) & set(_storages(outer))  # two casts of one build: two buffers
    with reused_casts():
        next_a, next_b = mini_head_of(head, torch.float64), mini_head_of(head, torch.float64)
    assert _storages(next_a) == _storages(outer) and _storages(next_b) == _storages(inner)


def test_threads_do_not_share_buffers():
    """Each thread keeps its own buffers: a build in another thread never writes into this thread's."""
    head = _head()
    with reused_casts():
        here = mini_head_of(head, torch.float64)
    seen: list[list[int]] = []

    def build():
        with reused_casts():
            seen.append(_storages(mini_head_of(head, torch.float64)))

    t = threading.Thread(target=build)
    t.start()
    t.join()
    assert seen and not set(seen[0]) & set(_storages(here))


def test_blockwise_ends_is_the_same_with_its_casts_reused():
    """``blockwise_ends`` builds its float64 operator under ``reused_casts``: two calls in a row (the second on the
    first one's buffers) give the same ends bit for bit as a call in a fresh thread (fresh buffers)."""
    from scale.curvature.closed_form import blockwise_ends
    from tests.test_blockwise import _head_and_loss

    z, head, loss = _head_and_loss(6, 12, seed=2)
    head = head.float()  # float32 weights: the float64 build casts them

    def ends() -> torch.Tensor:
        res = blockwise_ends(z, head, loss, tol=1e-8, interaction=False)[0]
        return torch.as_tensor([res.lambda_min, res.lambda_max], dtype=torch.float64)

    first, second = ends(), ends()
    fresh: list[torch.Tensor] = []
    t = threading.Thread(target=lambda: fresh.append(ends()))
    t.start()
    t.join()
    assert torch.equal(first, second) and torch.equal(second, fresh[0])
