"""The raw-input baseline of a ledger row, beside the initialisation baseline: over the trainings a row's premise
reads (``Claim.learned``), z's class probes (linear and kNN) against the same probes of the backbone at
initialisation and of the raw input, the flattened pixels (``scale.geometry.probes.raw_input_features``), as each
unit recorded them in its premise record (``scale.ledger.unit_record``: ``premise[training]["class_probe"]``).

"The network learned" is measured against the initialisation; the raw input answers another question, whether z
reads the classes better than the pixels it was computed from. It is reported, never part of a verdict: a
training counts as above (below) the pixels where z minus the pixels' paired 95 % interval lies above (below) 0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from scale.engine.markdown import escape as md
from scale.ledger.readers import Results, premise_part

PROBES = (("linear", None), ("kNN", "knn"))  # the probe's name, and where it sits in a ClassProbe record


def _number(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else None


def raw_input_baseline(trainings: Sequence[tuple[str, str]], res: Results, seeds: Sequence[int]
                       ) -> dict[str, Any] | None:
    """Over ``trainings`` (``(unit name template with {s}, training)``, a claim's ``learned``) at ``seeds``: per
    probe, how many trainings recorded the raw input, the means of z, of z at initialisation and of the raw input
    (percent), and in how many z's paired interval against the raw input lies above or below 0. ``None`` where
    the row reads no training."""
    names = [(t.format(s=s), training) for s in seeds for t, training in trainings]
    if not names:
        return None
    out: dict[str, Any] = {"trainings": len(names)}
    for label, key in PROBES:
        rows = []
        for name, training in names:
            p = premise_part(res, name, training, "class_probe")
            p = p.get(key) if key else p
            if not isinstance(p, dict):
                continue
            z, z0, raw = _number((p.get("accuracy") or {}).get("z")), _number(p.get("initial_z")), \
                _number(p.get("raw_input"))
            gain = p.get("raw_input_gain") or {}
            if z is None or raw is None:
                continue
            rows.append((z, z0, raw, _number(gain.get("low")), _number(gain.get("high"))))
        out[label] = None if not rows else {
            "n": len(rows), "z": sum(r[0] for r in rows) / len(rows), "raw_input": sum(r[2] for r in rows) / len(rows),
            "initial_z": (sum(r[1] for r in rows) / len(rows)) if all(r[1] is not None for r in rows) else None,
            "above": sum(r[3] is not None and r[3] > 0 for r in rows),
            "below": sum(r[4] is not None and r[4] < 0 for r in rows)}
    return out


def raw_input_text(b: dict[str, Any] | None) -> str:
    """The baseline in a row's cell: z against the initialisation and the raw input, per probe ('' without a
    training)."""
    if b is None:
        return ""
    parts = []
    for label, _ in PROBES:
        p = b.get(label)
        if p is None:
            continue
        init = "" if p["initial_z"] is None else f", at initialisation {p['initial_z']:.2f} %"
        parts.append(f"{label} z {p['z']:.2f} %{init}, the raw input {p['raw_input']:.2f} % (z above it in "
                     f"{p['above']}, below in {p['below']} of {p['n']})")
    if not parts:
        return md(f"the raw input (pixels): not recorded in the {b['trainings']} trainings' units")
    return md("the raw input (pixels), beside the initialisation, means over the trainings: " + "; ".join(parts))
