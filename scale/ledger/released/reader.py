r"""Read the paper's released arrays without executing anything in them and without trusting their layout.

Each file (``schema.FILES``) goes through the same steps, and the first that fails refuses it with one line
(``ReleasedError``, exit code ``EXIT_INPUT``) before any value is used:

    1. a regular file of at most ``schema.MAX_BYTES`` (a larger one is not read: at most that many bytes + 1 are);
    2. parsed safely: a ``.npy`` is NumPy's header (a 0-d object array) followed by a pickle read by the project's
       restricted unpickler (``scale.engine.safe_pickle``, with the ``np.save`` object shell admitted and nothing
       else: any other global is named and refused unexecuted); a ``.npz`` is a zip whose members' NumPy headers
       (dtype, shape) are checked against the schema before their data is read, with ``allow_pickle=False``;
    3. every field checked against the schema: the exact set of names, dtypes and shapes, floats finite;
    4. the file's SHA-256 against the digest of the upstream commit (a file that differs is refused, not used).

The layout checks run before the digest so that a damaged file is named by what is wrong with it; a file that
passes them but differs from the commit's by one value is still refused at step 4.
"""

from __future__ import annotations

import hashlib
import io
import math
import os
import pickle
import stat
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from scale.engine.safe_pickle import UnsafePickleError, safe_loads
from scale.ledger.released.schema import FILES, MAX_BYTES, Arr, Field, FileSpec, Scalar
from scale.runs.faults import EXIT_INPUT

VENDORED = Path(__file__).parent / "arrays"  # the copy shipped with the package (arrays/NOTICE: licence, digests)


class ReleasedError(ValueError):
    """A released file is missing, unreadable, unsafe, not in its schema or not the upstream commit's."""

    code = EXIT_INPUT


def _fail(spec: FileSpec, why: str) -> ReleasedError:
    return ReleasedError(f"released file {spec.path}: {why}; refused (nothing from it is used)")


def read_bytes(root: Path, spec: FileSpec) -> bytes:
    """Step 1: the file's bytes, at most ``MAX_BYTES`` of a regular file."""
    path = root / spec.path
    try:
        # non-blocking, so that a FIFO in the file's place is seen by fstat instead of waiting for a writer
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        with os.fdopen(fd, "rb") as fh:
            st = os.fstat(fh.fileno())
            if not stat.S_ISREG(st.st_mode):
                raise _fail(spec, "not a regular file")
            if st.st_size > MAX_BYTES:
                raise _fail(spec, f"{st.st_size} bytes, over the bound of {MAX_BYTES} (the largest released file "
                                  "is under 2 MB)")
            blob = fh.read(MAX_BYTES + 1)
    except FileNotFoundError:
        raise _fail(spec, f"missing under {root} (give a checkout of {spec.path.split('/')[0]}'s repository "
                          "root with --official, or leave it out to read the vendored copy)") from None
    except OSError as exc:
        raise _fail(spec, f"cannot be read ({exc.strerror or exc})") from None
    if len(blob) > MAX_BYTES:
        raise _fail(spec, f"over the bound of {MAX_BYTES} bytes")
    return blob


def _npy_header(fh: io.BytesIO) -> tuple[tuple[int, ...], bool, np.dtype]:
    version = np.lib.format.read_magic(fh)
    if version == (1, 0):
        return np.lib.format.read_array_header_1_0(fh)
    if version == (2, 0):
        return np.lib.format.read_array_header_2_0(fh)
    raise ValueError(f"NumPy format version {version} is not one np.save writes here")


def parse_npy_dict(blob: bytes) -> dict[str, Any]:
    """A ``.npy`` written by ``np.save(path, dict)``: a header of a 0-d object array, then the pickled shell."""
    fh = io.BytesIO(blob)
    shape, _, dtype = _npy_header(fh)
    if shape != () or dtype != np.dtype(object):
        raise ValueError(f"a {dtype} array of shape {shape}, not the 0-d object array of a saved dict")
    shell = safe_loads(fh.read(), encoding="latin1", object_shell=True)
    if not isinstance(shell, np.ndarray) or shell.shape != () or not isinstance(shell.item(), dict):
        raise ValueError("the pickle does not hold one dict")
    return shell.item()


def parse_npz(blob: bytes, fields: dict[str, Field]) -> dict[str, np.ndarray]:
    """A ``.npz`` of plain arrays: each member's header checked against ``fields`` before its data is read."""
    out: dict[str, np.ndarray] = {}
    with zipfile.ZipFile(io.BytesIO(blob)) as zf:
        names = [i.filename for i in zf.infolist()]
        want = {f"{k}.npy" for k in fields}
        if set(names) != want or len(names) != len(want):
            raise ValueError(f"members {sorted(names)}, expected {sorted(want)}")
        for info in zf.infolist():
            key = info.filename[:-4]
            if info.file_size > MAX_BYTES:
                raise ValueError(f"member {key} declares {info.file_size} bytes, over the bound")
            with zf.open(info) as member:
                head = io.BytesIO(member.read(4096))
            shape, _, dtype = _npy_header(head)
            spec = fields[key]
            if not isinstance(spec, Arr) or dtype != np.dtype(spec.dtype) or tuple(shape) != spec.shape:
                raise ValueError(f"{key} is {dtype} {tuple(shape)}, expected {_expected(spec)}")
            with zf.open(info) as member:
                out[key] = np.lib.format.read_array(io.BytesIO(member.read(MAX_BYTES + 1)), allow_pickle=False)
    return out


def _expected(spec: Field) -> str:
    if isinstance(spec, Arr):
        return f"{spec.dtype} {spec.shape}"
    return f"{spec.n} x {spec.kind}" if spec.n is not None else spec.kind


def _scalar_ok(v: Any, kind: str) -> bool:
    if kind == "str":
        return isinstance(v, str)
    if kind == "int":
        return isinstance(v, (int, np.integer)) and not isinstance(v, bool)
    return isinstance(v, (float, np.floating)) and math.isfinite(float(v))


def check_field(name: str, value: Any, spec: Field) -> None:
    """Step 3 for one field: its type, dtype, shape and finiteness (``ValueError`` naming what differs)."""
    if isinstance(spec, Arr):
        if not isinstance(value, np.ndarray) or value.dtype != np.dtype(spec.dtype) or value.shape != spec.shape:
            got = f"{value.dtype} {value.shape}" if isinstance(value, np.ndarray) else type(value).__name__
            raise ValueError(f"field {name} is {got}, expected {_expected(spec)}")
        if value.dtype.kind == "f" and not np.all(np.isfinite(value)):
            raise ValueError(f"field {name} holds {int(np.sum(~np.isfinite(value)))} non-finite values")
        return
    assert isinstance(spec, Scalar)
    items = value if spec.n is not None else [value]
    if spec.n is not None and (not isinstance(value, list) or len(value) != spec.n):
        raise ValueError(f"field {name} is not a list of {spec.n}")
    if not all(_scalar_ok(v, spec.kind) for v in items):
        raise ValueError(f"field {name} is not {_expected(spec)} (finite where float)")


def check_fields(where: str, data: Any, fields: dict[str, Field]) -> None:
    if not isinstance(data, dict) or set(data) != set(fields):
        got = sorted(map(str, data)) if isinstance(data, dict) else type(data).__name__
        missing = sorted(set(fields) - set(data)) if isinstance(data, dict) else []
        extra = sorted(set(map(str, data)) - set(fields)) if isinstance(data, dict) else []
        raise ValueError(f"{where} fields differ from the schema (missing {missing}, unexpected {extra})"
                         if isinstance(data, dict) else f"{where} is {got}, not a dict")
    for name, spec in fields.items():
        check_field(f"{where}{name}" if where else name, data[name], spec)


def read_file(root: Path, spec: FileSpec) -> dict[str, Any]:
    """One released file, through steps 1-4 (module docstring)."""
    blob = read_bytes(root, spec)
    try:
        if spec.pickled:
            data = parse_npy_dict(blob)
            if spec.configs:  # E1: configuration -> its trajectories
                if list(data) != list(spec.configs):
                    raise ValueError(f"configurations {list(data)}, expected {list(spec.configs)}")
                for cfg in spec.configs:
                    check_fields(f"{cfg}.", data[cfg], spec.fields)
            else:
                check_fields("", data, spec.fields)
        else:
            data = parse_npz(blob, spec.fields)
            check_fields("", data, spec.fields)
    except UnsafePickleError as exc:
        raise _fail(spec, f"unsafe pickle: {exc}") from None
    except (ValueError, TypeError, EOFError, KeyError, IndexError, pickle.UnpicklingError, zipfile.BadZipFile,
            OverflowError, UnicodeDecodeError, AttributeError) as exc:
        raise _fail(spec, f"not in the released layout ({type(exc).__name__}: {str(exc)[:200] or 'truncated'})") \
            from None
    digest = hashlib.sha256(blob).hexdigest()
    if digest != spec.sha256:
        raise _fail(spec, f"SHA-256 {digest[:16]}... differs from the upstream commit's {spec.sha256[:16]}...")
    return data


def read_all(root: Path | None = None, files: tuple[FileSpec, ...] = FILES) -> dict[str, dict[str, Any]]:
    """Every released file under ``root`` (default: the vendored copy), as ``{run: {role: data}}``."""
    root = VENDORED if root is None else Path(root)
    out: dict[str, dict[str, Any]] = {}
    for spec in files:
        out.setdefault(spec.run, {})[spec.role] = read_file(root, spec)
    return out
