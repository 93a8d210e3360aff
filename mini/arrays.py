"""The array API in one place: the namespace and the device of an array of NumPy, autograd's boxes, CuPy or torch.

The measurements written once against the array API (``heads.derivatives``, ``invariance``, ``collapse_metrics``,
``loss_hessians``, ``hessian``) ask here which library an array belongs to (``namespace``: its functions, e.g.
``xp.sum``) and where it lives (``device``: new arrays are made beside it).
"""

from __future__ import annotations

from typing import Any

import array_api_compat

Array = Any  # an array of NumPy, autograd's boxes, CuPy or torch


def namespace(x: Array) -> Any:
    """The array-API namespace of ``x`` (``array_api_compat.array_namespace``)."""
    return array_api_compat.array_namespace(x)


def device(x: Array) -> Any:
    """The device ``x`` lives on (``array_api_compat.device``)."""
    return array_api_compat.device(x)
