"""mini: the geometry of projection heads, exact and small (NumPy + HIPS autograd, float64).

Reading order: activations -> heads -> losses -> hessian (equation (1)) -> whitening -> capacity
(Section 3) -> collapse -> batchnorm -> dynamics (Section 4) -> manifolds -> invariance -> train
(Section 5). Each module opens with the paper section it makes executable. Beside them:
``validation`` (the one input check), ``dynamics_fast`` (the Section 4 toy's fast paths), ``atomic``
(the one atomic file writer) and ``reports/`` (the command lines and tables, ``python -m
mini.reports.<name>``).
Notation: docs/paper.md.

The public surface: the head grammar (``parse_head_spec``, ``HeadSpec``, ``Head``, ``init_head``;
a head runs as ``head(Z)``), the objectives (``make_objective``, ``Objective``), equation (1) (``effective_hessian``,
``decompose_autograd``, ``decompose_closed_form``: ``H_eff = G + M``; ``spectrum``) and the E4 orbit
metrics (``orbit_geometry``, ``OrbitGeometry``, ``compression``) on NumPy, CuPy or torch arrays.
"""

from mini.heads import Head, HeadSpec, init_head, parse_head_spec
from mini.hessian import decompose_autograd, decompose_closed_form, effective_hessian, spectrum
from mini.invariance import OrbitGeometry, compression, orbit_geometry
from mini.losses import Objective, make_objective

__all__ = [
    "Head",
    "HeadSpec",
    "Objective",
    "OrbitGeometry",
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
