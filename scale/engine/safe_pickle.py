"""Read the CIFAR python-pickle batches without executing anything they contain or trusting their layout.

A pickle is a small program: its ``GLOBAL``/``STACK_GLOBAL`` opcodes import any callable by name, ``REDUCE``
calls it and ``BUILD`` hands any state to the object's ``__setstate__``. The official batches need only
builtin containers, ``str``/``bytes``/numbers and NumPy's array reconstruction, so
``RestrictedUnpickler.find_class`` answers exactly these names and refuses every other one with
``UnsafePickleError`` before anything is called:

    numpy.core.multiarray._reconstruct, numpy._core.multiarray._reconstruct   an empty array, shape (0,),
                                                                              of the class below
    numpy.ndarray                                                             that class (a marker only:
                                                                              it cannot be called)
    numpy.dtype                                                               a plain numeric dtype
    numpy.core.multiarray.scalar, numpy._core.multiarray.scalar               a NumPy scalar of one
    _codecs.encode (latin-1 only)                                             bytes written by Python 3
                                                                              at protocol 2

Names are not enough: NumPy's own ``__setstate__`` trusts its state, and a dtype whose state sets the
object flags makes the next array of it read bytes as object pointers (a segfault), while ``_reconstruct``
or ``ndarray`` called with a large shape allocates it. So ``BUILD`` is accepted only on a dtype, with the
state NumPy writes for a plain numeric dtype (only the byte order may differ), and on an array, with
a state of a plain dtype and a ``bytes``/``str`` payload (an object array's payload is a list of pickled
objects). This needs the pure-Python unpickler (``pickle._Unpickler``), whose opcodes can be overridden;
the batches are one large byte string each, so it is as fast as the C one there.

``np.save`` of a dict (the paper's released ``.npy`` results, ``scale/ledger/released``) pickles a 0-d object
array whose payload is a list holding the dict. ``safe_loads(..., object_shell=True)`` admits exactly that
shell: the object dtype, and an array of it only with shape ``()`` and a payload that is a list of one
already-unpickled object (never bytes, which NumPy would read as object pointers). Everything inside the
shell passes the same checks as a CIFAR batch; the CIFAR reader keeps the shell refused.
"""

from __future__ import annotations

import codecs
import io
import pickle
from typing import Any, ClassVar

import numpy as np

# numpy.core became numpy._core in NumPy 2; both names occur in pickles in the wild.
_multiarray = np._core.multiarray if hasattr(np, "_core") else np.core.multiarray
PLAIN_KINDS = "biuf"  # bool, signed and unsigned integers, floats: what a batch of images and labels holds
BYTE_ORDERS = ("<", ">", "|", "=")


class UnsafePickleError(pickle.UnpicklingError):
    """The pickle names a callable outside the allowed set (it would have run code), or gives NumPy a state
    it would trust to corrupt memory."""


class _ArrayClass:
    """Stands for ``numpy.ndarray`` in ``_reconstruct``'s arguments; not callable, so no array of a chosen
    shape can be allocated from the file."""


_NDARRAY = _ArrayClass()


def _latin1_encode(text: str, encoding: str = "utf-8") -> bytes:
    """``_codecs.encode`` as Python 3 pickles bytes at protocol 2; only the latin-1 codec is allowed."""
    if not isinstance(text, str) or not isinstance(encoding, str) or codecs.lookup(encoding).name != "iso8859-1":
        raise UnsafePickleError(f"_codecs.encode with codec {encoding!r} is not allowed (only latin-1)")
    return text.encode("latin-1")


def _plain(dt: Any) -> np.dtype:
    """``dt`` if it is a plain numeric dtype (no fields, sub-arrays or object references), else refused."""
    if not isinstance(dt, np.dtype) or dt.kind not in PLAIN_KINDS or dt.hasobject or dt.fields is not None \
            or dt.subdtype is not None:
        raise UnsafePickleError(f"dtype {dt!r} is refused: a CIFAR batch holds only plain numbers (kinds "
                                f"{', '.join(PLAIN_KINDS)})")
    return dt


def _dtype(obj: Any, align: Any = False, copy: Any = True) -> np.dtype:
    if not isinstance(obj, str):
        raise UnsafePickleError(f"numpy.dtype of {type(obj).__name__} is refused (only a type code string)")
    try:
        return _plain(np.dtype(obj))
    except TypeError:
        raise UnsafePickleError(f"numpy.dtype({obj!r}) is not a NumPy type code") from None


def _reconstruct(cls: Any, shape: Any, typecode: Any) -> np.ndarray:
    """NumPy's ``_reconstruct`` for what ``ndarray.__reduce__`` writes: an empty array filled by ``BUILD``."""
    if cls is not _NDARRAY or shape != (0,) or typecode not in ("b", b"b"):
        raise UnsafePickleError("_reconstruct is allowed only as ndarray pickles use it: (ndarray, (0,), 'b')")
    return _multiarray._reconstruct(np.ndarray, (0,), b"b")


def _scalar(dt: Any, data: Any = None) -> Any:
    _plain(dt)
    if not isinstance(data, bytes) or len(data) != dt.itemsize:
        raise UnsafePickleError(f"a NumPy scalar of {dt} needs {dt.itemsize} bytes")
    return _multiarray.scalar(dt, data)


ALLOWED: dict[tuple[str, str], Any] = {
    ("numpy.core.multiarray", "_reconstruct"): _reconstruct,
    ("numpy._core.multiarray", "_reconstruct"): _reconstruct,
    ("numpy.core.multiarray", "scalar"): _scalar,
    ("numpy._core.multiarray", "scalar"): _scalar,
    ("numpy", "ndarray"): _NDARRAY,
    ("numpy", "dtype"): _dtype,
    ("_codecs", "encode"): _latin1_encode,
}


def _check_dtype_state(dt: np.dtype, state: Any) -> None:
    """The state NumPy writes for ``dt`` itself (``dt.__reduce__()``), up to the byte order."""
    own = dt.__reduce__()[2]  # (version, byte order, subarray, names, fields, elsize, alignment, flags)
    if not (isinstance(state, tuple) and len(state) == len(own) and state[1] in BYTE_ORDERS
            and state[:1] + state[2:] == own[:1] + own[2:]
            and all(type(a) is type(b) for a, b in zip(state, own))):
        raise UnsafePickleError(f"a dtype state other than a plain {dt}'s ({state!r:.120}) is refused")


def _check_array_state(state: Any, object_shell: bool = False) -> None:
    """``(version, shape, dtype, fortran, payload)`` with a plain dtype and a byte payload; with
    ``object_shell``, also the 0-d object array ``np.save`` wraps an object in (module docstring)."""
    if object_shell and isinstance(state, tuple) and len(state) == 5 and isinstance(state[2], np.dtype) \
            and state[2] == np.dtype(object):
        if state[1] != () or not isinstance(state[4], list) or len(state[4]) != 1:
            raise UnsafePickleError("an object array is allowed only as the 0-d shell np.save writes around one "
                                    "object (shape (), a list of one item)")
        return
    if not (isinstance(state, tuple) and len(state) == 5 and isinstance(state[1], tuple)
            and all(type(n) is int and n >= 0 for n in state[1]) and isinstance(state[2], np.dtype)
            and isinstance(state[4], (bytes, str))):
        raise UnsafePickleError("an array state other than (version, shape, dtype, fortran, bytes) is refused "
                                "(an object array's payload would be a list of pickled objects)")
    _plain(state[2])


class RestrictedUnpickler(pickle._Unpickler):
    """The pure-Python unpickler, imports limited to ``ALLOWED`` and ``BUILD`` to plain dtypes and arrays."""

    dispatch: ClassVar[dict[int, Any]] = dict(pickle._Unpickler.dispatch)

    def __init__(self, file: Any, *, encoding: str = "latin1", object_shell: bool = False) -> None:
        super().__init__(file, encoding=encoding)
        self.object_shell = object_shell

    def _dtype_or_shell(self, obj: Any, align: Any = False, copy: Any = True) -> np.dtype:
        """``numpy.dtype``: the object dtype only for the shell (``O8`` is how NumPy pickles it)."""
        return np.dtype(object) if isinstance(obj, str) and obj == "O8" else _dtype(obj, align, copy)

    def find_class(self, module: str, name: str) -> Any:
        if self.object_shell and (module, name) == ("numpy", "dtype"):
            return self._dtype_or_shell
        try:
            return ALLOWED[(module, name)]
        except KeyError:
            raise UnsafePickleError(
                f"it references {module}.{name}, which no CIFAR batch or released result array contains (loading "
                "it could run code); refused without executing anything"
            ) from None

    def persistent_load(self, pid: Any) -> Any:
        raise UnsafePickleError("persistent references are not allowed in a CIFAR batch")

    def load_build(self) -> None:
        state, inst = self.stack[-1], self.stack[-2]
        if isinstance(inst, np.dtype):
            _check_dtype_state(inst, state)
        elif isinstance(inst, np.ndarray):
            _check_array_state(state, self.object_shell)
        else:
            raise UnsafePickleError(f"BUILD on a {type(inst).__name__} is refused (only NumPy dtypes and arrays)")
        super().load_build()

    dispatch[pickle.BUILD[0]] = load_build


def safe_loads(blob: bytes, encoding: str = "latin1", object_shell: bool = False) -> Any:
    """``pickle.loads`` restricted to containers, strings, numbers and plain NumPy arrays (module docstring);
    ``object_shell`` also admits the 0-d object array ``np.save`` wraps a dict in."""
    return RestrictedUnpickler(io.BytesIO(blob), encoding=encoding, object_shell=object_shell).load()
