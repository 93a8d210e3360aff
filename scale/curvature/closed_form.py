r"""``H_eff`` and ``M`` of a row-wise head as closed-form products (nothing formed), the per-block Lanczos ends on them,
and the routes that choose between these and the exact blocks (``scale.curvature.blocks``).

    closed_form_operator   products through the head's weights in closed form (``mini.loss_hessians.ChainForward``),
                           restrictable to rows when the loss is per-row in closed form (``Operator.on_rows``)
    interaction_norm       ``|M|_2`` exactly from the streamed blocks of ``M``
    operator_route         factored (``J`` formed) or closed form, for a Lanczos over the whole operator
    blockwise_ends         ``lambda_min``, ``lambda_max`` (and ``|M|``) by a Lanczos per block on float32 products,
                           the ends refined and bounded in float64 (``scale.curvature.blockwise``)
    block_route            every block formed and solved, or a Lanczos per block
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import torch
from torch import Tensor, nn

from mini.hessian import NEG_FLOOR
from mini.loss_hessians import TRANSPOSED_ROWS, chain_forward, chain_links, interaction_chunks
from scale.curvature.blocks import block_norm, head_info, loss_product_of
from scale.curvature.blockwise import BLOCKWISE_TOL, BlockwiseResult, blockwise_lanczos
from scale.curvature.layout import transposes_pay
from scale.curvature.operators import Operator
from scale.engine.heads import mini_head_of, reused_casts


def closed_form_operator(
    z: Tensor,
    head: nn.Module,
    loss: Callable[[Tensor], Tensor],
    *,
    dtype: torch.dtype = torch.float64,
    compose: bool = True,
) -> tuple[Operator, Operator, dict[str, Any]]:
    r"""``H_eff`` and ``M`` of a row-wise ``MLPHead`` as matrix-free products in closed form; nothing formed.

    A product is one forward-mode pass and one pullback through the head's weights
    (``mini.loss_hessians.ChainForward.hvp``: ``M v = sum_l P_l^T diag(D_l) P_l v`` and ``J^T u`` share the
    pullback), ``2 n (d w_1 + sum_l w_l w_{l+1} + w_L k)`` multiply-adds, with the loss's curvature in
    closed form where it has one (NT-Xent's product; SimSiam and BYOL continue the chain through the
    predictor and the cosine, ``PredictorCosine.curvature_at``) and through its gradient graph, built once,
    otherwise. Against ``factored_operator`` (``operator_route``): no ``J`` to build, compute instead of
    reading ``J`` twice per product. ``interaction_chunks(M)`` streams ``M``'s exact blocks (for ``|M|``).
    ``compose=False``: a predictor's first map is not composed with the head's last
    (``mini.loss_hessians.chain_links``: cheaper to build, dearer per product; for a few products). With
    ``compose`` on at most ``TRANSPOSED_ROWS`` rows the links also carry their weights' transposes
    (``mini.loss_hessians.with_transposes``: one copy) where this machine's BLAS runs the forward passes faster on
    them (``scale.curvature.layout.transposes_pay``: measured once per process).
    Returns ``(H, M, info)``.
    """
    z = z.detach().to(dtype)
    mini_head = mini_head_of(head, dtype)
    n, d = z.shape
    few_rows = compose and n <= TRANSPOSED_ROWS  # many products on few rows: the weights' layout matters

    def laid_out(chain):  # the chain with its weights' transposes where they are this machine's faster layout
        return chain.with_transposes() if few_rows and transposes_pay(getattr(chain, "fwd", chain).links, n) else chain
    with torch.no_grad():
        if getattr(loss, "closed_form", False):  # SimSiam, BYOL: the chain runs on through the predictor
            curv = loss.curvature_at(mini_head, z, compose)
            curv = laid_out(curv)
            h_of, m_of, value = curv.hvp, curv.interaction_hvp, loss.value_of(curv)
            m_blocks = curv.interaction_blocks
            loss_product = "closed form (predictor and cosine in the chain, mini.loss_hessians)"
        else:  # any other loss through its gradient graph: coupled or not, no restriction to rows
            curv = None
            fwd = chain_forward(chain_links(mini_head, None, z), z)
            fwd = laid_out(fwd)
            rho, value, lv, loss_product = loss_product_of(loss, fwd.out)
            D = fwd.backward(rho)[0]

            def h_of(V: Tensor) -> Tensor:
                return fwd.hvp(D, V, top=lambda U: lv(U, batched=U.ndim == 3))

            def m_of(V: Tensor) -> Tensor:
                return fwd.hvp(D, V)

            def m_blocks():
                return interaction_chunks(fwd, D, len(fwd.s1))

    def op(name: str, f, blocks=None, rows: int = n, restrict=None) -> Operator:
        out = Operator(name, rows * d, dtype, z.device, lambda v: f(v.reshape(rows, d)).reshape(-1),
                       lambda C: f(C.reshape(C.shape[0], rows, d)).reshape(C.shape[0], rows * d),
                       info if rows == n else {**info, "N": rows * d, "rows": rows}, _on_rows=restrict)
        out.block_chunks = blocks
        return out

    def on_rows(c, name: str, product: str):  # the closed-form curvature's rows alone (``on_rows``), as operators
        def restrict(idx: Tensor) -> Operator:
            sub = c.on_rows(idx.to(device=z.device, dtype=torch.long))
            return op(f"{name} on {len(idx)} rows", getattr(sub, product), rows=len(idx),
                      restrict=on_rows(sub, name, product))
        return restrict

    info = {**head_info(head, "closed_form", dtype, z, mini_head.k), "loss": value, "N": n * d,
            "hvp_mode": f"closed form through the head's weights (loss: {loss_product})"}
    restrict_H = restrict_M = None
    if hasattr(curv, "on_rows"):  # a per-row loss in closed form: products on fewer rows at their cost
        restrict_H, restrict_M = on_rows(curv, "H_eff", "hvp"), on_rows(curv, "M", "interaction_hvp")
    H = op("H_eff (closed form)", h_of, restrict=restrict_H)
    return H, op("M (closed form)", m_of, m_blocks, restrict=restrict_M), info


def interaction_norm(M: Operator) -> float:
    """``|M|_2`` exactly from the blocks a ``closed_form_operator``'s ``M`` streams (``block_norm``)."""
    with torch.no_grad():
        return block_norm([blocks for _, blocks in M.block_chunks()])


READ_COST = 3  # operator_route: multiply-adds per float64 read in a (memory-bound) factored product, measured
OPERATOR_PRODUCTS = 100  # operator_route: Lanczos products a measurement expects (60-120 at 1e-10 on these heads)


def operator_route(n: int, d: int, widths: Sequence[int], k: int, products: int = OPERATOR_PRODUCTS) -> str:
    """``"factored"`` (``factored_operator``: ``J`` formed, each product reads it twice) or ``"closed-form"``
    (``closed_form_operator``: each product a forward-mode pass and a pullback through the weights) for
    ``products`` Lanczos products with a head ``d -> widths -> k`` on ``n`` rows. Both form ``M`` (for its
    exact norm). In multiply-adds, a factored product's reads of ``J`` (twice) and ``M`` counted at
    ``READ_COST`` each (memory-bound: at the digits shape 12.5 MB per product in 0.26 ms, against 8.4 M
    multiply-adds per closed-form product in 0.46 ms):

        factored      n k w_L d  (J: the last layer's fold)  +  products x READ_COST (2 n k d + n d^2)
        closed-form   products x 2 n (d w_1 + sum_l w_l w_{l+1} + w_L k)

    The smaller wins. Measured (1 thread): the digits head (n 32, d 128, 256/256, k 128) takes the factored
    route (products 0.26 ms against 0.46 ms, ``J`` 5 ms to form); the CIFAR head (n 32, d 512, 2048/2048,
    k 2048) the closed form: 4.4 s against 8.1 s for the same SimCLR record (``python -m
    bench.bench_tracking``, ``bench/results/tracking.md``)."""
    chain = [d, *(int(x) for x in widths), k]
    form_J = n * k * chain[-2] * d if len(chain) > 2 else 0  # one linear layer: J = W, nothing to form
    factored = form_J + products * READ_COST * (2 * n * k * d + n * d * d)
    closed = products * 2 * n * sum(a * b for a, b in itertools.pairwise(chain))
    return "factored" if factored <= closed else "closed-form"


RECURRENCE_DTYPE = torch.float32  # blockwise_ends: the recurrence's products where they can meet ``tol``
RECURRENCE_REACH = 1e-5  # blockwise_ends: the smallest tol (relative) RECURRENCE_DTYPE's products are asked to meet
# (float32 Ritz vectors' float64-measured residuals stall at 0.9-1e-7 of the scale on tests/test_lanczos's blocks:
# below this tol the float32 run could only be discarded; a miss above it costs a float64 rerun, never a wrong flag)


def blockwise_ends(
    z: Tensor,
    head: nn.Module,
    loss: Callable[[Tensor], Tensor],
    *,
    dtype: torch.dtype = torch.float64,
    tol: float = BLOCKWISE_TOL,
    max_iter: int | None = None,
    rel_floor: float = NEG_FLOOR,
    interaction: bool = True,
    goal: str = "ends",
) -> tuple[BlockwiseResult, BlockwiseResult | None, dict[str, Any]]:
    """The extreme eigenvalues of a block-diagonal objective's ``H_eff`` (and of ``M``, for ``|M|``, when
    ``interaction``) by a Lanczos per block (``scale.curvature.blockwise.blockwise_lanczos``) on closed-form products,
    each to the residual bound ``tol`` of the scale (an eigenvalue within it), without forming a block.

    Where ``tol`` is at least ``RECURRENCE_REACH``, the recurrence runs on ``RECURRENCE_DTYPE`` (float32) products:
    half the float64 products' cost whether they are memory-bound (few rows) or not. The ends are then measured in
    ``dtype``: their Rayleigh quotients and residuals from one product of a ``dtype`` operator (on the rows of the
    blocks that may hold them: ``blockwise_lanczos``'s ``refine``) built without composing the predictor's first map
    (``compose=False``: one product does not pay for the composition), and ``converged`` read off those residuals
    alone. A run whose ends miss ``tol`` there (the float32 products' rounding in the way) runs again on the
    ``dtype`` operator alone. Below ``RECURRENCE_REACH`` (the default ``BLOCKWISE_TOL`` among them) the float32
    Ritz vectors' residuals cannot meet ``tol`` (they stall at about 1e-7 of the scale), so the recurrence runs on
    the ``dtype`` operator from the start. Until 2026-12-06 the float32 ends were certified by the estimate ``r^2 /
    gap``, which is not a bound (``scale.curvature.blockwise._certificates``). Returns ``(H's result, M's or None,
    info)`` (``info["recurrence"]``: the products' dtype of the runs kept).

    ``goal`` (``blockwise_lanczos``): ``"ends"`` (default) waits for ``H``'s ``lambda_min`` and ``lambda_max`` only,
    ``"blocks"`` for every block's ends; ``M``'s run waits for ``|M|`` only (``"norm"``) unless ``"blocks"``. Every
    run starts cold: a start steered by a previous measurement's Ritz vectors can fool the let-go at an eigenvalue
    crossing (``blockwise_lanczos``, ``warm``)."""
    n = z.shape[0]
    fast32 = torch.finfo(RECURRENCE_DTYPE).eps > torch.finfo(dtype).eps and tol >= RECURRENCE_REACH
    with reused_casts():  # the float64 weights in this thread's buffers: the operator does not leave this call
        # composed when it runs the recurrence itself (many products), not when it only measures the ends
        H, M, info = closed_form_operator(z, head, loss, dtype=dtype, compose=not fast32)
    exact = [H, M] if interaction else [H]
    fast = exact
    if fast32:
        fast = list(closed_form_operator(z, head, loss, dtype=RECURRENCE_DTYPE)[:len(exact)])
    goals = [goal, "blocks" if goal == "blocks" else "norm"]
    out, used = [], set()
    for op, ref, g in zip(fast, exact, goals):
        refine = None if op is ref else ref
        kw = dict(max_iter=max_iter, tol=tol, rel_floor=rel_floor, goal=g)
        res = blockwise_lanczos(op, n, refine=refine, **kw)
        if refine is not None and not res.answered:  # float64 products, from the float32 run's Ritz vectors
            spent, spent_cost = res.n_products, res.product_cost  # the discarded run's products count in the kept
            op, res = ref, blockwise_lanczos(ref, n, **kw, warm=res)
            res = replace(res, n_products=res.n_products + spent, product_cost=res.product_cost + spent_cost)
        out.append(res)
        used.add(str(op.dtype).removeprefix("torch."))
    return out[0], out[1] if interaction else None, {**info, "recurrence": ", ".join(sorted(used))}


BLOCK_STEPS = 40  # block_route: steps of each per-block Lanczos run (measured 31-53 for H and M, 18-27 for H alone)
EIG_COST = 4  # block_route: eigvalsh of a (d, d) block, in multiply-adds per d^3 (fitted: 4.06)
STEP_COST = 1.6e7  # block_route: a per-block Lanczos step's fixed cost (batched eigh, Python), multiply-adds (fitted)


def block_route(n: int, d: int, chain: Sequence[int], n_head: int, steps: int = BLOCK_STEPS) -> str:
    """``"blocks"`` (every per-sample block formed and solved: the whole spectrum) or ``"block-lanczos"``
    (``blockwise_ends``: a Lanczos per block on closed-form products, the ends of ``H`` and of ``M``) for ``n``
    rows of a block-diagonal objective through the chain ``d -> chain[0] -> ... -> chain[-1]`` (the head and
    whatever the loss runs through, links composed as ``mini.loss_hessians.chain_links`` composes them:
    ``chain[:-1]`` are the hidden widths), ``n_head`` of whose hidden layers are the head's (``M``'s). In
    multiply-adds (a float32 product's counted as a float64 sandwich's: at these sizes they ran at the same
    measured rate, 1.1e-10 s each, the products being memory-bound):

        blocks          n [sum_l d w_l (d + w_{l+1}) + EIG_COST d^3]       the streamed sandwiches, then eigvalsh
        block-lanczos   steps [2 n sum_links w_in w_out + 2 n sum_{head's links} w_in w_out + 2 STEP_COST]
                        (the runs on H and on M; a product is a forward-mode pass and a pullback)

    Fitted and checked on 9 shapes (1 thread, ``measure(path=...)`` on SimSiam heads with their predictors, best
    of 3; block-lanczos / blocks time): (n, d, head, predictor) (8, 128, swish3 256/128, 64) 1.68,
    (32, ...) 1.06, (128, ...) 0.68; (8, 256, swish3 1024/1024, 256) 0.67, (32, ...) 0.61;
    (8, 256, swish2 512/512, 128) 0.70, (32, ...) 0.53; (8, 512, swish2 2048/2048, 512) 0.32, (32, ...) 0.21.
    The rule picks the faster at 8 of them; at (8, 256, swish2 512) it takes the blocks (0.70: 1.4x slower)."""
    widths = [d, *(int(w) for w in chain)]
    hidden = widths[1:-1]
    blocks = n * (sum(d * w * (d + nxt) for w, nxt in zip(hidden, [*hidden[1:], hidden[-1]])) if hidden else 0)
    blocks += n * EIG_COST * d**3
    links = list(itertools.pairwise(widths))
    per_step = 2 * n * sum(a * b for a, b in links) + 2 * n * sum(a * b for a, b in links[:n_head])
    return "block-lanczos" if steps * (per_step + 2 * STEP_COST) < blocks else "blocks"
