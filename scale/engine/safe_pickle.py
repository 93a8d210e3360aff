"""Read the CIFAR python-pickle batches without executing anything they contain.

A pickle is a small program: its ``GLOBAL``/``STACK_GLOBAL`` opcodes import any callable by name and
``REDUCE`` calls it, so ``pickle.loads`` on a crafted batch file runs the attacker's code. The official
batches need only builtin containers, ``str``/``bytes``/numbers and NumPy's array reconstruction, so
``RestrictedUnpickler.find_class`` answers exactly those names and refuses every other one with
``UnsafePickleError`` before anything is called:

    numpy.core.multiarray._reconstruct, numpy._core.multiarray._reconstruct   empty array of a dtype
    numpy.ndarray, numpy.dtype                                                its class and dtype
    numpy.core.multiarray.scalar, numpy._core.multiarray.scalar               a NumPy scalar
    _codecs.encode (latin-1 only)                                             bytes written by Python 3
                                                                              at protocol 2

The array's payload is then set by ``ndarray.__setstate__`` (``BUILD``), NumPy's own code, on
bytes; ``dtype('O')`` arrays are refused because their payload is itself a pickle.
"""

from __future__ import annotations

import codecs
import io
import pickle
from typing import Any

import numpy as np

# numpy.core became numpy._core in NumPy 2; both names occur in pickles in the wild.
_multiarray = np._core.multiarray if hasattr(np, "_core") else np.core.multiarray


class UnsafePickleError(pickle.UnpicklingError):
    """The pickle names a callable outside the allowed set (it would have run code)."""


def _latin1_encode(text: str, encoding: str = "utf-8") -> bytes:
    """``_codecs.encode`` as Python 3 pickles bytes at protocol 2; only the latin-1 codec is allowed."""
    if codecs.lookup(encoding).name != "iso8859-1" or not isinstance(text, str):
        raise UnsafePickleError(f"_codecs.encode with codec {encoding!r} is not allowed (only latin-1)")
    return text.encode("latin-1")


def _dtype(*args: Any) -> np.dtype:
    dt = np.dtype(*args)
    if dt.hasobject:  # an object array's payload is another pickle
        raise UnsafePickleError("NumPy object arrays are not allowed (their contents are pickled objects)")
    return dt


ALLOWED: dict[tuple[str, str], Any] = {
    ("numpy.core.multiarray", "_reconstruct"): _multiarray._reconstruct,
    ("numpy._core.multiarray", "_reconstruct"): _multiarray._reconstruct,
    ("numpy.core.multiarray", "scalar"): _multiarray.scalar,
    ("numpy._core.multiarray", "scalar"): _multiarray.scalar,
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): _dtype,
    ("_codecs", "encode"): _latin1_encode,
}


class RestrictedUnpickler(pickle.Unpickler):
    """``pickle.Unpickler`` whose imports are limited to ``ALLOWED`` (no ``builtins`` callables at all)."""

    def find_class(self, module: str, name: str) -> Any:
        try:
            return ALLOWED[(module, name)]
        except KeyError:
            raise UnsafePickleError(
                f"it references {module}.{name}, which a CIFAR batch never contains (loading it could run code); "
                "refused without executing anything"
            ) from None

    def persistent_load(self, pid: Any) -> Any:
        raise UnsafePickleError("persistent references are not allowed in a CIFAR batch")


def safe_loads(blob: bytes, encoding: str = "latin1") -> Any:
    """``pickle.loads`` restricted to containers, strings, numbers and NumPy arrays (see the module doc)."""
    return RestrictedUnpickler(io.BytesIO(blob), encoding=encoding).load()
