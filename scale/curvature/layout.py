r"""Which layout of a chain's weights BLAS multiplies faster in a forward pass on few rows, measured once per process.

A forward pass computes ``x W^T`` (x: rows x in). Stored as ``W`` (out, in), BLAS reads a transposed view; a
contiguous copy ``W^T`` (in, out) (``mini.loss_hessians.with_transposes``) is the other layout. Which is faster on
a few rows is a property of the BLAS build and the processor, not of the mathematics, and it goes both ways
(float32, 8 rows, 1 thread, 2048 x 2048): torch's MKL on an Intel Xeon with AMX ran the view 2.0-2.2x slower than
the copy; the same MKL on an AMD EPYC (its AVX2 path) ran the copy 1.15-1.25x slower than the view, and a whole
8-row product of the official tracker's chain 1.25x slower (7.9 ms against 6.3 ms, medians of 40 interleaved
rounds). So ``transposes_pay`` times
the chain's own forward matmuls both ways, ``LAYOUT_REPEATS`` alternating rounds, best of each, and the copy itself,
and keeps the answer for the process, keyed by dtype, device, the links' shapes and the rows: a tracker measuring
every epoch pays it once (about 15 forward passes), a product never. The copies are made anew at every build (the
weights change between measurements), so they pay only when what they save over ``LAYOUT_PASSES`` forward passes
exceeds their own cost. On an AMD EPYC with AVX-512 the views were faster by 0.15 ms a pass, the copy cost 7-47 ms,
and 3 rounds had chosen the copies in one process: its cold exact ends took 0.96x-1.03x of the paper's estimator's
time, against 0.87x on the views (2026-12-04, BENCHMARKS.md). The two layouts round differently, so a tracker's
checkpoint carries the answers (``answers``, ``adopt``) and a resumed run multiplies in the layouts of the run it
continues.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import torch

from mini.loss_hessians import Link

LAYOUT_REPEATS = 7  # transposes_pay: alternating rounds of each layout; the best of each is compared
# the forward passes the copies must pay for, within one build: about a measurement's products mid-training (the
# cold exact ends took a median of 50-58 calls over 32 probes at epochs 2-5, 13-14 at init; a middle figure)
LAYOUT_PASSES = 32
_CHOICES: dict[tuple, bool] = {}  # transposes_pay's measured answers, for this process


def transposes_pay(links: Sequence[Link], rows: int) -> bool:
    """Whether the forward passes of ``links`` on ``rows`` rows run faster on contiguous transposes of the weights
    than on their transposed views (measured once per key, module docstring)."""
    W = links[0].W
    key = (W.dtype, W.device.type, tuple(tuple(L.W.shape) for L in links), int(rows))
    if key not in _CHOICES:
        _CHOICES[key] = _copies_faster([L.W for L in links], int(rows))
    return _CHOICES[key]


def _copies_faster(weights: list[torch.Tensor], rows: int) -> bool:
    """Time the forward matmuls ``x W^T`` of every weight on ``rows`` random rows, on the views and on contiguous
    copies, alternating, and the copying once (fresh memory, as at every build); ``True`` when the copies' best
    round saves more over ``LAYOUT_PASSES`` passes than the copy costs."""
    gen = torch.Generator().manual_seed(0)
    xs = [torch.randn(rows, W.shape[1], generator=gen, dtype=W.dtype).to(W.device) for W in weights]
    views = [W.T for W in weights]
    copies, copy_seconds = _timed(lambda: [W.T.contiguous() for W in weights], weights[0])
    best = {"views": float("inf"), "copies": float("inf")}
    for _ in range(LAYOUT_REPEATS):
        for name, mats in (("views", views), ("copies", copies)):
            best[name] = min(best[name], _forward_seconds(xs, mats))
    return LAYOUT_PASSES * (best["views"] - best["copies"]) > copy_seconds


def _timed(fn, like: torch.Tensor):
    """``(fn(), wall seconds)``, the device of ``like`` synchronised around it."""
    sync = torch.cuda.synchronize if like.is_cuda else (lambda: None)
    sync()
    t = time.perf_counter()
    out = fn()
    sync()
    return out, time.perf_counter() - t


def _forward_seconds(xs: list[torch.Tensor], mats: list[torch.Tensor]) -> float:
    """Wall seconds of ``x @ m`` for each pair (the device synchronised around them)."""
    return _timed(lambda: [x @ m for x, m in zip(xs, mats)], xs[0])[1]


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
