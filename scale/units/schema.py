r"""The records of the unit store as schemas: the type of every field a reader uses, checked before any is read.

    Schema(required, optional, rules)   a JSON object: its required and optional fields, each a type hint
                                        (``scale.engine.read.fits``: int counts as a number, bool never does),
                                        a nested ``Schema``, ``Records(schema)`` (a list of such objects) or
                                        ``Maybe(spec)`` (that, or null); ``rules``: checks across fields (ranges)
    problem(value, spec)                the first field of ``value`` that is missing or of another type, as one
                                        phrase (``history[3].h_std is str where a number belongs``); None if none
    check(value, spec, where)           ``value``, or ``scale.engine.read.Unreadable`` naming ``where`` and the
                                        problem

The schemas: a grid unit (``GRID_UNIT``, ``scale.grid.units.record``), a ledger unit (``LEDGER_UNIT``,
``scale.ledger.runner.run``), a ledger registration (``REGISTRATION``; the first ledger's converted one,
``V1_REGISTRATION``), an amendment (``AMENDMENT``, ``scale.ledger.runner.check_rules``) and a verification
(``VERIFICATION``, ``scale.ledger.store.record_verification``). Fields a record has
beyond its schema are allowed (records grow); the grid's report checks the values it reads deeper
(``scale.grid.records``) with the same reader.
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


def _between(key: str, low: int, high: int | None = None) -> Callable[[dict[str, Any]], str | None]:
    def rule(rec: dict[str, Any]) -> str | None:
        v = rec.get(key)
        if v is None or (low <= v and (high is None or v <= high)):
            return None
        return f"{key} is {v}, outside {low} .. {high if high is not None else 'any'}"

    return rule


def _not_blank(key: str) -> Callable[[dict[str, Any]], str | None]:
    return lambda rec: f"{key} is blank" if not str(rec.get(key, "")).strip() else None


# What every unit file says of itself; its file's name says the same (scale.units.store.parse_name).
IDENTITY: dict[str, Any] = {"plan": str, "name": str, "device": str, "threads": int, "key_hash": str}
DEVIATIONS = dict[str, tuple[Any, Any]]  # setting -> (paper, ours)

# A ledger unit (scale.ledger.runner.run): the fields its readers use (scale.ledger.readers, report, figures).
HISTORY = Schema({"epoch": float}, {k: NUMBER for k in ("loss", "h_std", "h_cond", "z_std", "z_cond",
                                                        "rel_update_head", "rel_update_backbone", "drift_head",
                                                        "drift_backbone")})
CURVATURE = Schema({"epoch": float}, {**{k: NUMBER for k in ("lambda_min", "lambda_max", "M_over_H", "cond_log_ratio",
                                                             "z_cov_min", "z_cov_max", "probe_rows")},
                                      "mechanism": dict[str, Any] | None})
START = Schema({}, {k: NUMBER for k in ("h_std", "z_std", "h_cond", "z_cond", "epoch")})
LEDGER_UNIT = Schema(
    required={**IDENTITY, "experiment": str, "seed": int, "labels": dict[str, Any], "key": dict[str, Any],
              "status": str, "config": dict[str, Any], "git_commit": str, "seconds": float},
    optional={"deviations": DEVIATIONS, "history": Records(HISTORY), "curvature": Records(CURVATURE),
              "start": Maybe(START), "protocols": dict[str, dict[str, Any]],
              "premise": dict[str, dict[str, Any] | None],
              "timescale": dict[str, Any] | None, "tangent": dict[str, Any] | None,
              "tangent_untrained": dict[str, Any] | None, "versions": dict[str, str], "machine": dict[str, Any],
              "torch_threads": int | None, "finished_at": str})

# A grid unit (scale.grid.units.record); its summary, metrics, curvature and orbits are checked by the report's
# reader (scale.grid.records), which reads them deeper.
GRID_UNIT = Schema(
    required={**IDENTITY, "status": str, "experiment": str, "seed": int, "labels": dict[str, Any],
              "argv": list[str]},
    optional={"summary": dict[str, Any] | None, "config": dict[str, Any] | None, "metrics": list[Any] | None,
              "curvature": list[Any] | None, "curvature_summary": dict[str, Any] | None,
              "orbits": dict[str, Any] | None, "deviations": DEVIATIONS | None, "format": str, "run_dir": str,
              "recorded_at": str})

def _strict_json(rec: dict[str, Any]) -> str | None:
    """The first number that strict JSON cannot hold (infinity, NaN: ``json.dumps`` would write ``Infinity``)."""
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


# A stored unit computed again by a later commit (scale.ledger.store.record_verification, from scale.ledger.verify):
# its numbers are finite (strict JSON), what the ledger reads is per statistic and per row (scale.ledger.sensitivity).
SHIFTED = Schema({"row": str, "statistic": str, "seed": int, "stored": NUMBER, "recomputed": NUMBER,
                  "difference": NUMBER, "width": NUMBER, "of_width": NUMBER})
VERDICT_CHANGE = Schema({"row": str, "what": str, "stored": str, "recomputed": str})
LEDGER_SHIFT = Schema({"statistics": Records(SHIFTED), "verdict_changes": Records(VERDICT_CHANGE), "rows": int,
                       "units": int, "seeds": int})
VERIFICATION = Schema(
    required={"unit": str, "plan": str, "computed_at": str, "verified_at": str, "status": str, "differences": int,
              "same_machine": bool},
    optional={"largest": tuple[str, float, NUMBER] | None, "machine": dict[str, Any] | None, "date": str,
              "texts": list[str], "ledger": Maybe(LEDGER_SHIFT)},
    rules=(_strict_json,))

# A ledger registration (scale.ledger.runner.registration_record) and its plan's settings (runner.plan_settings).
SETTINGS = Schema(
    required={"dataset": str, "quick": bool, "device": str, "threads": int, "epochs": dict[str, int | None]},
    optional={"seeds": int, "probe_images": int | None, "probe_pairs": int | None, "repeat": int, "format": int},
    rules=(_between("seeds", 1, MAX_SEEDS), _between("threads", 1), _between("repeat", 0),
           lambda s: "seeds is missing (a plan of format 3 or later registers them)"
           if (s.get("format") or 0) >= 3 and "seeds" not in s else None))
RULES = Schema({"claims": Records(Schema({"id": str}))}, {"known_before_registration": list[str]})
REGISTRATION = Schema({"plan": str, "settings": SETTINGS, "rules": RULES, "rules_hash": str, "plan_hash": str,
                       "code_commit": str, "registered_at": str, "command": str})
V1_REGISTRATION = Schema({"plan": str, "settings": SETTINGS, "rules": RULES, "rules_hash": str | None})
# An amendment of a plan's rules (scale.ledger.runner.check_rules).
AMENDMENT = Schema({"number": int, "date": str, "reason": str, "from_hash": str, "to_hash": str,
                    "claims_changed": list[str], "rules": RULES}, {"code_commit": str},
                   rules=(_between("number", 1), _not_blank("reason")))

__all__ = ["AMENDMENT", "GRID_UNIT", "IDENTITY", "LEDGER_UNIT", "MAX_SEEDS", "REGISTRATION", "V1_REGISTRATION",
           "VERIFICATION", "Maybe", "Records", "Schema", "check", "problem"]
