r"""Which layout of a chain's weights a closed-form product on few rows runs faster with, measured once per process.

A product's forward pass computes ``x W^T`` (x: rows x in), its pullback ``g W``. Stored as ``W`` (out, in), the
forward pass reads a transposed view; a contiguous copy ``W^T`` (in, out) (``mini.loss_hessians.with_transposes``)
is the other layout, read by the forward pass while the pullback keeps reading ``W``. Which is faster on a few rows
is a property of the BLAS build and the processor, not of the mathematics, and it goes both ways (float32, 8 rows,
1 thread): torch's MKL on an Intel Xeon with AMX ran a 2048 x 2048 forward matmul on the view 2.0-2.2x slower than
on the copy, and a whole 8-row product of the official tracker's chain took 2.34 ms on the views against 1.47 ms
with the copies; the same MKL on an AMD EPYC ran the copy 1.15-1.25x slower than the view.

The copies also double what a product reads from: the forward pass reads one copy of every weight, the pullback the
other, where on the views both passes read the same memory. A forward matmul timed alone does not see that. On an
AMD EPYC with AVX-512, the forward matmuls of the official chain (composed for the float32 recurrence: 12 MiB of
weights) ran 1.02x-1.29x faster on the copies at 1-32 rows, while whole products ran 1.1x-1.6x *slower* with them
(``python -m bench.bench_layout``, 2026-12-04): timed on forward matmuls, the copies would have been taken at 8
rows, their 0.08 ms a pass over 32 passes outweighing the 1.9 ms copy, and every product made 1.25x slower. So
``transposes_pay`` times whole products of the chain itself (``ChainForward.hvp``: the forward-mode pass and the
pullback through every link) both ways, ``LAYOUT_REPEATS`` alternating rounds, best of each, and the copying, and
keeps the answer for the process, keyed by dtype, device, the links' shapes and the rows: a tracker measuring every
epoch pays it once (about 15 products), a product never. The copies are made anew at every build (the weights change
between measurements), so they are taken only when what they save over ``LAYOUT_PRODUCTS`` products exceeds their
own measured cost. On an AMD EPYC with AVX-512 the views were faster, the copy cost 7-47 ms, and a decision without
that cost had chosen the copies in one process: its cold exact ends took 0.96x-1.03x of the paper's estimator's
time, against 0.87x on the views (2026-12-04, run E: bench/results/curvature_history.md). The two layouts round
differently, so a tracker's checkpoint carries the answers (``answers``, ``adopt``) and a resumed run multiplies in
the layouts of the run it continues.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from mini.loss_hessians import ChainForward, Link, chain_forward
from scale.engine.timing import synced_seconds

LAYOUT_REPEATS = 7  # transposes_pay: alternating rounds of each layout; the best of each is compared
# the products the copies must pay for within one build: about a measurement's products mid-training (the cold exact
# ends took 39-43 full products' worth at the slowest probes of epoch 5, n = 8; 13-14 calls at init; a middle figure)
LAYOUT_PRODUCTS = 32
_CHOICES: dict[tuple, bool] = {}  # transposes_pay's measured answers, for this process


def transposes_pay(links: Sequence[Link], rows: int) -> bool:
    """Whether products of the chain ``links`` on ``rows`` rows run faster with contiguous transposes of the weights
    than on their transposed views, the copy's cost counted (measured once per key, module docstring)."""
    W = links[0].W
    key = (W.dtype, W.device.type, tuple(tuple(L.W.shape) for L in links), int(rows))
    if key not in _CHOICES:
        _CHOICES[key] = _copies_faster(list(links), int(rows))
    return _CHOICES[key]


def _copies_faster(links: list[Link], rows: int) -> bool:
    """Time whole products of the chain on ``rows`` random rows (``ChainForward.hvp`` with the identity at the top:
    every link read by the forward pass and by the pullback; a product's cost does not depend on the values), on the
    views and on the contiguous copies, alternating, and the copying once (fresh memory, as at every build); ``True``
    when the copies' best round saves more over ``LAYOUT_PRODUCTS`` products than the copy costs."""
    W = links[0].W
    gen = torch.Generator().manual_seed(0)
    Z, V = (torch.randn(rows, W.shape[1], generator=gen, dtype=W.dtype).to(W.device) for _ in range(2))
    views = chain_forward(links, Z)
    copies, copy_seconds = synced_seconds(views.with_transposes, W.device)
    D = [torch.ones_like(s) for s in views.s1]
    best = {"views": float("inf"), "copies": float("inf")}
    for _ in range(LAYOUT_REPEATS):
        for name, chain in (("views", views), ("copies", copies)):
            best[name] = min(best[name], _product_seconds(chain, D, V))
    return LAYOUT_PRODUCTS * (best["views"] - best["copies"]) > copy_seconds


def _product_seconds(chain: ChainForward, D: list[torch.Tensor], V: torch.Tensor) -> float:
    """Wall seconds of one product of ``chain`` on ``V`` (the device synchronised around it)."""
    return synced_seconds(lambda: chain.hvp(D, V, top=lambda U: U), V.device)[1]


def answers() -> list[list]:
    """This process's measured answers as plain lists (for a checkpoint): dtype name, device type, the links'
    shapes, rows, whether the copies pay."""
    return [[str(k[0]).removeprefix("torch."), k[1], [list(s) for s in k[2]], k[3], v] for k, v in _CHOICES.items()]


def adopt(saved: list | None) -> None:
    """A checkpoint's answers (``answers``) taken as this process's, so that a resumed run multiplies in the layouts
    the run it continues chose: the two layouts round differently, and a fresh measurement may choose the other
    where they run at nearly the same speed, which would change a resumed tracker's records in their last bits.
    An entry that does not parse is skipped (that key is then measured again)."""
    for entry in saved or []:
        try:
            dt, dev, shapes, rows, choice = entry
            dtype = getattr(torch, str(dt), None)
            if not isinstance(dtype, torch.dtype) or not isinstance(choice, bool):
                continue
            _CHOICES[(dtype, str(dev), tuple(tuple(int(x) for x in s) for s in shapes), int(rows))] = choice
        except (TypeError, ValueError):
            continue
