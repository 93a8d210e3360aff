r"""What a unit computed again changes in the ledger (``python -m scale.replicate --verify``): every statistic a
row reads from the unit, stored against recomputed and against that row's interval, and every verdict that would
change.

    shift(res, name, new)   the plan's units ``res`` (name -> record) with the unit ``name`` replaced by ``new``:
                            {"statistics": [...], "verdict_changes": [...], "rows": n}

A row reads per-seed statistics (``scale.ledger.evaluate``): its own value, its premises, controls, untrained twin
and alternatives, and the premise "the network learned". Each of them is read at the unit's seed from the stored
and from the recomputed record; one that differs is listed as

    {"row", "statistic", "stored", "recomputed", "difference", "width", "of_width"}

``width`` is the stored row's interval for that statistic (high - low, over the plan's seeds), ``of_width`` the
difference's size against it: a difference of 0.1 of the width moves the interval's ends by about a tenth of it
at most. Values that are not finite numbers (a statistic that is degenerate, an interval of fewer than two seeds)
are null, so that the record stays strict JSON. A verdict change is a row whose sign, verdict or verdict after
Holm's adjustment (``VERDICTS``) differs when every row is evaluated again with the recomputed unit; only rows whose
statistics at that seed changed are evaluated again (the others are equal by construction), and Holm's adjustment
runs over all of them, so a p-value that moves in one row can change another's adjusted verdict and is reported.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from scale.ledger.claims.base import Claim, Results
from scale.ledger.evaluate import evaluate, holm, learned_premise
from scale.ledger.verdicts import FAILS, HOLDS

VERDICTS = ("sign", "verdict", "verdict_holm")


def _scalar(v: Any) -> float:
    """A per-seed value as one number: a clustered fraction's ``(k, m)`` as k / m; NaN where not a number."""
    if isinstance(v, (tuple, list)) and len(v) == 2:
        return v[0] / v[1] if v[1] else math.nan
    return float(v) if isinstance(v, (int, float)) else math.nan


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _per_seed(claim: Claim, res: Results, seed: int) -> list[tuple[str, float, str]]:
    """Every statistic of ``claim`` at ``seed``: (label, value, the row's interval key that holds its interval)."""
    out = [("value", _scalar(claim.value(res, seed)), "interval")]
    out += [(f"premise: {p.label}", _scalar(p.value(res, seed)), f"premise_results[{i}]")
            for i, p in enumerate(claim.premises)]
    out += [(f"control: {c.label}", _scalar(c.value(res, seed)), f"control_results[{i}]")
            for i, c in enumerate(claim.controls)]
    if claim.twin is not None:
        out.append((f"twin: {claim.twin.label}", _scalar(claim.twin.value(res, seed)), "twin_result"))
    out += [(f"alternative: {a.label}", _scalar(a.value(res, seed)), f"alternative_results[{i}]")
            for i, a in enumerate(claim.alternatives)]
    learn = learned_premise(claim, res, [seed])
    if learn is not None:  # 1: every named training learned; 0: one did not; NaN: not recorded
        out.append(("premise: the network learned", {HOLDS: 1.0, FAILS: 0.0}.get(learn["outcome"], math.nan),
                    ""))
    return out


def _width(row: dict[str, Any], where: str) -> float:
    """The width (high - low) of the interval at ``where`` of an evaluated row ("" or absent: NaN)."""
    if not where:
        return math.nan
    key, _, index = where.partition("[")
    part = row.get(key)
    if index:
        part = part[int(index.rstrip("]"))] if part else None
    est = part if key == "interval" else (part or {}).get("interval")
    return est["high"] - est["low"] if est else math.nan


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


def shift(res: Results, name: str, new: dict[str, Any], claims: Sequence[Claim]) -> dict[str, Any]:
    """What replacing the unit ``name`` of ``res`` by ``new`` changes in ``claims``' rows (module docstring)."""
    seed = int(res[name]["seed"])
    after = {**res, name: {**res[name], **new}}  # what the recompute does not produce (its name, seed) is the unit's
    seeds = sorted({int(r["seed"]) for r in res.values()})
    raw = [evaluate(c, res) for c in claims]
    before = holm(raw)
    statistics, moved = [], set()
    for i, claim in enumerate(claims):
        for (label, old, where), (_, now, _) in zip(_per_seed(claim, res, seed), _per_seed(claim, after, seed)):
            if _same(old, now):
                continue
            moved.add(i)
            width = _width(before[i], where)
            diff = now - old
            of_width = abs(diff) / width if math.isfinite(diff) and math.isfinite(width) and width > 0 else math.nan
            statistics.append({"row": claim.id, "statistic": label, "seed": seed, "stored": _finite(old),
                               "recomputed": _finite(now), "difference": _finite(diff), "width": _finite(width),
                               "of_width": _finite(of_width)})
    rows_after = holm([evaluate(c, after) if i in moved else raw[i] for i, c in enumerate(claims)])
    changes = [{"row": b["id"], "what": key, "stored": str(b[key]), "recomputed": str(a[key])}
               for b, a in zip(before, rows_after) for key in VERDICTS if b[key] != a[key]]
    return {"statistics": statistics, "verdict_changes": changes, "rows": len(claims), "units": len(res),
            "seeds": len(seeds)}
