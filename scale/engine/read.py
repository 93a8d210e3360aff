"""The one reader of the project's JSON and run files: bounded, typed, never blocking.

    read_regular(path, limit)      the bytes of a regular file: opened ``O_NONBLOCK`` and checked with ``fstat``
                                   to be a regular file before anything is read (a FIFO would wait for a writer
                                   forever, a device never end), at most ``limit`` bytes
    read_json(path, kind=...)      one JSON value of type ``kind``, its nesting at most ``MAX_DEPTH`` deep
                                   (counted before decoding: Python's decoder recurses and a deep file would
                                   end it in ``RecursionError``), with no key repeated in one object and no
                                   unpaired surrogate in any string (``loads``)
    loads(text, where)             the same rules for JSON text already in memory
    read_jsonl(path)               one JSON object per non-empty line, each bounded as above
    typed(build, where)            a dataclass built from a file's values, every field of its annotated type
    open_regular(path)             a binary file object on a regular file (for decoders that take one: Pillow)

Every failure is ``Unreadable`` (exit 1) with one line naming the file and what is wrong;
nothing here writes.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import re
import stat
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

import numpy as np

MAX_BYTES = 64 << 20  # a run's metrics.jsonl of 10^5 epochs is ~30 MB; summaries are kilobytes
MAX_DEPTH = 64  # the project's files nest at most 6 deep
T = TypeVar("T")
_STRINGS = re.compile(rb'"(?:[^"\\]|\\.)*"')


class Unreadable(ValueError):
    """A file that must be read is missing, not a regular file, too large, too deep or of the wrong shape: exit 1
    (``scale.runs.faults`` turns it into one line)."""

    code = 1
    strerror: str | None = None  # the system's reason where the file could not be opened (permissions, ...)


def open_regular(path: str | Path) -> BinaryIO:
    """``open(path, "rb")`` that refuses, without waiting, anything but a regular file (``Unreadable``)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        err = Unreadable(f"{path} cannot be read ({exc.strerror or exc})")
        err.strerror = exc.strerror
        raise err from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise Unreadable(f"{path} is not a regular file (a FIFO, device or folder); it was not read")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def read_regular(path: str | Path, limit: int = MAX_BYTES) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` of them (``Unreadable`` otherwise)."""
    with open_regular(path) as fh:
        size = os.fstat(fh.fileno()).st_size
        if size > limit:
            raise Unreadable(f"{path} is {size:,} bytes, above the {limit:,} a file of this project can have")
        try:
            data = fh.read(limit + 1)
        except OSError as exc:
            raise Unreadable(f"{path} cannot be read ({exc.strerror or exc})") from None
    if len(data) > limit:
        raise Unreadable(f"{path} grew above {limit:,} bytes while it was read")
    return data


def json_depth(data: bytes) -> int:
    """The deepest nesting of arrays and objects in the JSON text ``data`` (strings skipped)."""
    bare = np.frombuffer(_STRINGS.sub(b'""', data), dtype=np.uint8)
    step = np.isin(bare, (ord("["), ord("{"))).astype(np.int64) - np.isin(bare, (ord("]"), ord("}")))
    return int(np.cumsum(step).max(initial=0))


class Ambiguous(Unreadable):
    """JSON that Python would decode, but not to one meaning: a key twice in one object (``json`` keeps the last,
    so a second ``"history"`` appended to a unit would replace the first unseen) or a string holding an unpaired
    UTF-16 surrogate (``"\\ud800"``: valid JSON, but no UTF-8 text can hold it, so a report that prints it fails
    half-written). The ledger's commands refuse it with exit 2, as any record not of its schema."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook``: the object, or ``Ambiguous`` at the first key it repeats."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise Ambiguous(f"key {key[:60]!r} appears twice in one object")
        out[key] = value
    return out


def _unpaired_surrogate(value: Any) -> str | None:
    """The first string (a key or a value, anywhere in ``value``) that cannot be written as UTF-8, shortened."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                return ascii(v[:40])
        elif isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return None


def loads(text: str | bytes, where: str, depth: int = MAX_DEPTH) -> Any:
    """The JSON value of ``text``, bounded in depth, unique in keys and free of unpaired surrogates; ``Unreadable``
    (``Ambiguous`` for the last two) with one line naming ``where`` otherwise."""
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    if json_depth(data) > depth:
        raise Unreadable(f"{where} nests deeper than {depth} levels; not a file of this project")
    try:
        value = json.loads(data.decode("utf-8"), object_pairs_hook=_unique_keys)
    except Ambiguous as exc:
        raise Ambiguous(f"{where} is ambiguous JSON: {exc}; refused, not read") from None
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        first = str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__
        raise Unreadable(f"{where} is not readable JSON ({first})") from None
    bad = _unpaired_surrogate(value)
    if bad is not None:
        raise Ambiguous(f"{where} is ambiguous JSON: the string {bad} holds an unpaired UTF-16 surrogate, which no "
                        "UTF-8 text can hold; refused, not read")
    return value


def kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join({dict: "an object", list: "a list", str: "a string"}.get(k, k.__name__) for k in kinds)


def read_json(path: str | Path, kind: type | tuple[type, ...] = dict, *, limit: int = MAX_BYTES,
              depth: int = MAX_DEPTH) -> Any:
    """The JSON value in ``path``, which must be of type ``kind`` (``Unreadable`` otherwise)."""
    value = loads(read_regular(path, limit), str(path), depth)
    if not isinstance(value, kind):
        raise Unreadable(f"{path} holds {type(value).__name__} where {kind_name(kind)} belongs")
    return value


def read_jsonl(path: str | Path, *, limit: int = MAX_BYTES, depth: int = MAX_DEPTH) -> list[dict[str, Any]]:
    """One JSON object per non-empty line of ``path`` (``Unreadable`` naming the first line that is not one)."""
    out = []
    for i, line in enumerate(io.BytesIO(read_regular(path, limit)), 1):
        if line.strip():
            value = loads(line, f"{path} line {i}", depth)
            if not isinstance(value, dict):
                raise Unreadable(f"{path} line {i} holds {type(value).__name__} where an object belongs")
            out.append(value)
    return out


def numbers(record: dict[str, Any], keys: tuple[str, ...], where: str) -> dict[str, Any]:
    """``record`` if each of ``keys`` it holds is a number or ``None``; ``Unreadable`` naming the first that is not."""
    for k in keys:
        v = record.get(k)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
            raise Unreadable(f"{where}: {k} is {type(v).__name__} where a number belongs")
    return record


def fits(value: Any, hint: Any) -> bool:
    """Whether ``value`` is of the annotated type ``hint`` (numbers: int for float, never bool for either)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return True
    if hint is type(None):
        return value is None
    if origin in (typing.Union, types.UnionType):
        return any(fits(value, a) for a in args)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            return False
        if origin is list or (len(args) == 2 and args[1] is Ellipsis):
            return not args or all(fits(v, args[0]) for v in value)
        return len(args) == len(value) and all(map(fits, value, args))
    if origin is dict:
        return isinstance(value, dict) and all(fits(k, args[0]) and fits(v, args[1]) for k, v in value.items())
    if dataclasses.is_dataclass(hint):
        return isinstance(value, hint) and not _wrong_field(value)
    return isinstance(value, origin or hint)


def _wrong_field(obj: Any) -> str | None:
    """The first field of the dataclass instance ``obj`` (recursively) whose value is not of its annotated type."""
    hints = typing.get_type_hints(type(obj))
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            inner = _wrong_field(value)
            if inner:
                return f"{f.name}.{inner}"
        elif not fits(value, hints[f.name]):
            return f"{f.name} ({type(value).__name__})"
    return None


def typed(build: Callable[[], T], where: str) -> T:
    """``build()`` (a dataclass from a file's dict, e.g. ``RunSummary.from_dict(d)``) with every field of the
    annotated type, recursively; ``Unreadable`` naming the first field that is missing, unknown or mistyped."""
    try:
        obj = build()
    except (TypeError, KeyError, ValueError, AttributeError) as exc:
        raise Unreadable(f"{where} does not have the fields of its kind ({type(exc).__name__}: "
                         f"{str(exc).splitlines()[0][:120] if str(exc) else ''})") from None
    wrong = _wrong_field(obj)
    if wrong:
        raise Unreadable(f"{where}: {wrong} is not of the type its kind records")
    return obj
