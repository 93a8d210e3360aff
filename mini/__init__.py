"""mini: the geometry of projection heads, exact and small (NumPy + HIPS autograd, float64).

Reading order: heads -> losses -> hessian (equation (1)) -> whitening -> capacity (Section 3) ->
collapse -> batchnorm -> dynamics (Section 4) -> manifolds -> invariance -> train (Section 5).
Each module opens with the paper section it makes executable; notation: docs/paper.md.

The public surface: the head grammar (``parse_head_spec``, ``HeadSpec``, ``Head``, ``init_head``,
``apply_head``), the objectives (``make_objective``, ``Objective``), equation (1) (``effective_hessian``,
``decompose_autograd``, ``decompose_closed_form``: ``H_eff = G + M``; ``spectrum``) and the E4 orbit
metrics (``orbit_geometry``, ``OrbitGeometry``, ``compression``) on NumPy, CuPy or torch arrays.
"""

from mini.heads import Head, HeadSpec, apply_head, init_head, parse_head_spec
from mini.hessian import decompose_autograd, decompose_closed_form, effective_hessian, spectrum
from mini.invariance import OrbitGeometry, compression, orbit_geometry
from mini.losses import Objective, make_objective

__all__ = [
    "Head",
    "HeadSpec",
    "Objective",
    "OrbitGeometry",
    "apply_head",
    "compression",
    "decompose_autograd",
    "decompose_closed_form",
    "effective_hessian",
    "init_head",
    "make_objective",
    "orbit_geometry",
    "parse_head_spec",
    "spectrum",
]
