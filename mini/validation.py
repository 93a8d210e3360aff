"""Input checks shared by the public functions of ``mini``: one place, one wording.

``check_array(name, x)`` refuses what would otherwise come back as a silent NaN or a silently
dropped imaginary part: complex, empty, NaN or infinite input, and (optionally) a wrong number of
axes. It reads through autograd's tracing boxes (checks run on the values inside), and works on
any array-API array (NumPy, CuPy, torch), so the same check guards the autograd and the array-API
paths.
"""

from __future__ import annotations

from typing import Any

import numpy as np

Array = Any


def value_of(x: Array) -> Array:
    """The plain array inside autograd's (possibly nested) tracing boxes; ``x`` itself otherwise."""
    while hasattr(x, "_value") and type(x).__module__.startswith("autograd"):
        x = x._value
    return x


def check_array(name: str, x: Array, ndim: int | tuple[int, ...] | None = None) -> Array:
    """Return ``x`` unchanged if it is a finite, non-empty, real array (with ``ndim`` axes when
    given); otherwise raise ``ValueError`` naming ``name`` and the problem."""
    v = value_of(x)
    shape = getattr(v, "shape", None)
    if shape is None:
        v = np.asarray(v)
        shape = v.shape
    allowed = (ndim,) if isinstance(ndim, int) else ndim
    if allowed is not None and len(shape) not in allowed:
        axes = " or ".join(f"{a}-D" for a in allowed)
        raise ValueError(f"{name} must be a {axes} array, got shape {tuple(shape)}")
    if any(int(s) == 0 for s in shape):
        raise ValueError(f"{name} is empty (shape {tuple(shape)})")
    if isinstance(v, np.ndarray):  # the common case, without the array-API dispatch
        if v.dtype.kind == "c":
            raise ValueError(f"{name} is complex ({v.dtype}); mini works on real arrays")
        if v.dtype.kind not in "fiub":
            raise ValueError(f"{name} must be a real numeric array, got dtype {v.dtype}")
        if v.dtype.kind == "f" and not np.isfinite(v).all():
            raise ValueError(f"{name} contains NaN or infinite values")
        return x
    import array_api_compat

    xp = array_api_compat.array_namespace(v)
    if xp.isdtype(v.dtype, "complex floating"):
        raise ValueError(f"{name} is complex ({v.dtype}); mini works on real arrays")
    if not xp.isdtype(v.dtype, ("real floating", "integral", "bool")):
        raise ValueError(f"{name} must be a real numeric array, got dtype {v.dtype}")
    if xp.isdtype(v.dtype, "real floating") and not bool(xp.all(xp.isfinite(v))):
        raise ValueError(f"{name} contains NaN or infinite values")
    return x
