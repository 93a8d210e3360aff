r"""The records of the unit store as schemas: the type of every field a reader uses, checked before any is read.

    Schema(required, optional, rules)   a JSON object: its required and optional fields, each a type hint
                                        (``scale.engine.read.fits``: int counts as a number, bool never does),
                                        a nested ``Schema``, ``Records(schema)`` (a list of such objects) or
                                        ``Maybe(spec)`` (that, or null); ``rules``: checks across fields (ranges)
    problem(value, spec)                the first field of ``value`` that is missing or of another type, as one
                                        phrase (``history[3].h_std is str where a number belongs``); None if none
    check(value, spec, where)           ``value``, or ``scale.engine.read.Unreadable`` naming ``where`` and the
                                        problem

Each kind's schema sits beside its writer: a grid unit's (``GRID_UNIT``) in ``scale.grid.unit_files``, the ledger's
records' (a unit, a registration, an amendment, a verification) in ``scale.ledger.schemas``; here are the reader
and what every unit file says of itself (``IDENTITY``). Fields a record has beyond its schema are allowed (records
grow); the grid's report checks the values it reads deeper (``scale.grid.records``) with the same reader.
"""

from __future__ import annotations

import math
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from scale.engine import read

MAX_SEEDS = 1000  # a plan's seeds: at most this many (the commands' --seeds and a registration's settings)
NUMBER = float | None  # a number (int or float, never bool) or null


@dataclass(frozen=True)
class Schema:
    """A JSON object's fields (module docstring)."""

    required: dict[str, Any]
    optional: dict[str, Any] = field(default_factory=dict)
    rules: tuple[Callable[[dict[str, Any]], str | None], ...] = ()


@dataclass(frozen=True)
class Records:
    """A list of JSON objects, each of ``schema``."""

    schema: Schema


@dataclass(frozen=True)
class Maybe:
    """``spec`` or null."""

    spec: Any


def _hint_name(hint: Any) -> str:
    if hint is float or hint == NUMBER:
        return "a number" if hint is float else "a number or null"
    if isinstance(hint, type) and typing.get_origin(hint) is None:
        return read.kind_name(hint)
    text = str(hint).replace("typing.", "")
    return text


def _at(where: str, key: Any) -> str:
    return f"{where}.{key}" if where else str(key)


def problem(value: Any, spec: Any, where: str = "") -> str | None:
    """The first place where ``value`` is not of ``spec`` (module docstring), or None."""
    if isinstance(spec, Maybe):
        return None if value is None else problem(value, spec.spec, where)
    if isinstance(spec, Records):
        if not isinstance(value, list):
            return f"{where or 'the record'} is {type(value).__name__} where a list of objects belongs"
        for i, v in enumerate(value):
            p = problem(v, spec.schema, f"{where}[{i}]")
            if p:
                return p
        return None
    if isinstance(spec, Schema):
        if not isinstance(value, dict):
            return f"{where or 'the record'} is {type(value).__name__} where an object belongs"
        missing = [k for k in spec.required if k not in value]
        if missing:
            return f"{_at(where, missing[0])} is missing"
        for k, s in (*spec.required.items(), *spec.optional.items()):
            if k in value:
                p = problem(value[k], s, _at(where, k))
                if p:
                    return p
        for rule in spec.rules:
            p = rule(value)
            if p:
                return f"{where}: {p}" if where else p
        return None
    if not read.fits(value, spec):
        return f"{where or 'the record'} is {type(value).__name__} where {_hint_name(spec)} belongs"
    return None


def check(value: Any, spec: Any, where: str) -> Any:
    """``value`` if it is of ``spec``; ``read.Unreadable`` naming ``where`` and the first problem otherwise."""
    p = problem(value, spec)
    if p:
        raise read.Unreadable(f"{where}: {p}")
    return value


def between(key: str, low: int, high: int | None = None) -> Callable[[dict[str, Any]], str | None]:
    def rule(rec: dict[str, Any]) -> str | None:
        v = rec.get(key)
        if v is None or (low <= v and (high is None or v <= high)):
            return None
        return f"{key} is {v}, outside {low} .. {high if high is not None else 'any'}"

    return rule


def not_blank(key: str) -> Callable[[dict[str, Any]], str | None]:
    return lambda rec: f"{key} is blank" if not str(rec.get(key, "")).strip() else None


# What every unit file says of itself; its file's name says the same (scale.unit_store.files.parse_name).
def strict_json(rec: dict[str, Any]) -> str | None:
    """A rule: the first number that strict JSON cannot hold (infinity, NaN: ``json.dumps`` would write
    ``Infinity``, which a strict parser refuses)."""
    stack: list[tuple[str, Any]] = [("", rec)]
    while stack:
        where, v = stack.pop()
        if isinstance(v, float) and not math.isfinite(v):
            return f"{where or 'the record'} is {v}, which strict JSON cannot hold"
        if isinstance(v, dict):
            stack += [(_at(where, k), x) for k, x in v.items()]
        elif isinstance(v, (list, tuple)):
            stack += [(f"{where}[{i}]", x) for i, x in enumerate(v)]
    return None


IDENTITY: dict[str, Any] = {"plan": str, "name": str, "device": str, "threads": int, "key_hash": str}
DEVIATIONS = dict[str, tuple[Any, Any]]  # setting -> (paper, ours)

__all__ = ["DEVIATIONS", "IDENTITY", "MAX_SEEDS", "NUMBER", "Maybe", "Records", "Schema", "between", "check",
           "not_blank", "problem", "strict_json"]
