r"""A stored unit, computed again by the code now: does HEAD reproduce it? (``python -m scale.replicate --verify``.)

The unit file is read through the store's bounded reader and checked as the store checks every unit file before
use (``scale.ledger.store.read_unit``: its schema, what its name says, its key and config); its plan's
registration (``OUT/registrations/<plan>.json`` beside ``OUT/units/``) gives the plan's settings, from which
today's code plans the unit again: a unit whose key today differs from the stored one is another unit (the code
changed what it trains), said and not rerun. Otherwise the unit runs again in memory
(no work folder) at its own device and thread count, and every number of the new record is compared with the
stored one, timings left out (``TIMING``: seconds, dates, versions, the commit). The result: the count of values
that differ and the largest difference, absolute and relative to the stored value.

Bitwise equality is expected on a processor of the same kind at the same thread count (``machine``: torch's CPU
capability, which selects the kernels, and the processor's name, both recorded in every unit since v3); on another
kind the float kernels may round differently, and the comparison is reported as such.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import torch

from scale.engine.data import load_dataset
from scale.ledger import plan, runner, store
from scale.ledger.runner import machine
from scale.ledger.store import StoreError
from scale.ledger.units import run_unit

# What may differ between two computations of one unit: where and when it ran, and how long it took.
TIMING = frozenset({"seconds", "curvature_seconds", "finished_at", "git_commit", "versions", "torch_threads",
                    "machine", "registered_at", "epoch_seconds", "images_per_s", "wall_seconds",
                    "end_of_run_seconds"})


def differences(old: Any, new: Any, path: str = "") -> list[tuple[str, float, float]]:
    """Every place the two records differ, as ``(path, absolute difference, relative difference)`` (inf for a
    difference that is not numeric: a type, a key, a string, a length); ``TIMING`` keys are skipped."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for k in sorted(set(old) | set(new), key=str):
            if k in TIMING:
                continue
            if k not in old or k not in new:
                out.append((f"{path}.{k}", math.inf, math.inf))
            else:
                out += differences(old[k], new[k], f"{path}.{k}")
        return out
    if isinstance(old, (list, tuple)) and isinstance(new, (list, tuple)):
        if len(old) != len(new):
            return [(f"{path}[len]", math.inf, math.inf)]
        return [d for i, (a, b) in enumerate(zip(old, new)) for d in differences(a, b, f"{path}[{i}]")]
    if isinstance(old, bool) or isinstance(new, bool) or not (isinstance(old, (int, float))
                                                               and isinstance(new, (int, float))):
        return [] if old == new else [(path, math.inf, math.inf)]
    a, b = float(old), float(new)
    if a == b or (math.isnan(a) and math.isnan(b)):
        return []
    diff = abs(a - b)
    return [(path, diff, diff / abs(a) if a else math.inf)]


def _normalized(record: Any) -> Any:
    """A record as it is stored (JSON: tuples become lists, non-finite floats stay floats)."""
    return json.loads(json.dumps(record, default=str))


def verify(unit_file: Path, log=print) -> dict[str, Any]:
    """Rerun the unit of ``unit_file`` with the code now and compare (module docstring). Returns ``{"status":
    "equal" | "differs" | "another unit", "differences": n, "largest": (path, abs, rel) | None, "same_machine":
    bool, ...}``; ``StoreError`` for a file that is not a unit of a registered plan in its store."""
    unit_file = Path(unit_file)
    stored = store.read_unit(unit_file)  # its schema, its name, its key: the store's checks
    meta = store.parse_name(unit_file)
    out = unit_file.parent.parent
    reg = store.registration(out, meta["plan"])
    if reg is None:
        raise StoreError(f"no registration of plan {meta['plan']} in {out / 'registrations'}: the unit's settings "
                         "are unknown")
    settings = reg["settings"]
    if settings.get("format") != plan.KEY_FORMAT:
        raise StoreError(f"plan {meta['plan']} is of format {settings.get('format')}; this code plans format "
                         f"{plan.KEY_FORMAT} units (v3): an older ledger's units are verified at their own commit")
    units = {u.name: u for u in runner.settings_units(settings, int(settings["seeds"]))}
    unit = units.get(meta["name"])
    if unit is None:
        raise StoreError(f"{meta['name']} is not a unit of plan {meta['plan']}")
    said = store.Planned(meta["key"], unit.experiment, unit.seed, unit.labels).disagreement(stored)
    if said:
        raise StoreError(f"{unit_file}: {said}: not the unit its name says")
    if unit.key_hash() != meta["key"]:
        return {"status": "another unit", "differences": 0, "largest": None, "same_machine": False,
                "why": f"today's code plans {meta['name']} with key {unit.key_hash()}, the file holds {meta['key']}: "
                       "the code changed what the unit trains"}
    torch.set_num_threads(int(meta["threads"]))
    data = load_dataset(settings["dataset"], None, image_size=16 if settings["dataset"] == "digits" else None)
    log(f"scale.replicate: verifying {meta['name']} of plan {meta['plan']} ({meta['device']}, {meta['threads']} "
        f"thread(s)), computed at {stored.get('git_commit', '?')}")
    new = run_unit(unit, data, int(meta["threads"]), bool(settings["quick"]), None, log=lambda _: None)
    diffs = differences({k: v for k, v in stored.items() if k in new}, _normalized(new))
    largest = max(diffs, key=lambda d: (d[1], d[2])) if diffs else None
    here = machine()
    return {"status": "equal" if not diffs else "differs", "differences": len(diffs), "largest": largest,
            "same_machine": stored.get("machine") == here, "machine": here, "stored_machine": stored.get("machine"),
            "commit": stored.get("git_commit")}
