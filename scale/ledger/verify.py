r"""A stored unit, computed again by the code now: does HEAD reproduce it? (``python -m scale.replicate --verify``.)

The unit file is read through the store's bounded reader and checked as the store checks every unit file before
use (``scale.ledger.store.read_unit``: its schema, what its name says, its key and config); its plan's
registration (``OUT/registrations/<plan>.json`` beside ``OUT/units/``) gives the plan's settings (of this code's
ledger edition, ``plan.EDITION``: an earlier edition's units are verified at their own commit), from which
today's code plans the unit again: a unit whose key today differs from the stored one is another unit (the code
changed what it trains), said and not rerun. Otherwise the unit runs again in memory
(no work folder) at its own device and thread count, and every number of the new record is compared with the
stored one, timings left out (``TIMING``: seconds, dates, versions, the commit). The result: the count of values
that differ, the largest numeric difference (absolute, and relative to the stored value: null where that is 0),
and the text fields that differ, named as text (a finding's sentence, a verdict's word), never as a number.

Bitwise equality is expected on a processor of the same kind at the same thread count (``machine``: torch's CPU
capability, which selects the kernels, and the processor's name, both recorded in every unit since v3); on another
kind the float kernels may round differently, and what matters there is what the ledger reads: the plan's stored
units are read, the unit is replaced by its recomputed record, and every statistic a row reads from it is reported
against that row's interval, with every verdict that would change (``scale.ledger.sensitivity``).
``report_lines(result)`` is the report a person reads; the result is strict JSON (no infinity, no NaN), as its
record must be.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import torch

from scale.engine.data import load_dataset
from scale.ledger import plan, runner, sensitivity, store
from scale.ledger.claims import CLAIMS
from scale.ledger.runner import machine
from scale.ledger.store import StoreError
from scale.ledger.unit_record import run_unit
from scale.unit_store import files as units_store

# What may differ between two computations of one unit: where and when it ran, and how long it took.
TIMING = frozenset({"seconds", "curvature_seconds", "finished_at", "git_commit", "versions", "torch_threads",
                    "machine", "registered_at", "epoch_seconds", "images_per_s", "wall_seconds",
                    "end_of_run_seconds"})


Number = tuple[str, float, float | None]  # (path, absolute difference, relative to the stored value or None)
SHOWN = 12  # statistics listed by ``report_lines``, largest against their row's interval first


def differences(old: Any, new: Any, path: str = "") -> tuple[list[Number], list[str]]:
    """Every place the two records differ: numbers as ``(path, absolute, relative)`` (relative None where the
    stored value is 0), everything else as one phrase naming the path and what differs (a text, a type, a key, a
    length); ``TIMING`` keys are skipped."""
    if isinstance(old, dict) and isinstance(new, dict):
        numbers: list[Number] = []
        texts: list[str] = []
        for k in sorted(set(old) | set(new), key=str):
            if k in TIMING:
                continue
            if k not in old or k not in new:
                texts.append(f"{path}.{k}: only in the {'stored' if k in old else 'recomputed'} record")
            else:
                n, t = differences(old[k], new[k], f"{path}.{k}")
                numbers += n
                texts += t
        return numbers, texts
    if isinstance(old, (list, tuple)) and isinstance(new, (list, tuple)):
        if len(old) != len(new):
            return [], [f"{path}: length {len(old)} stored, {len(new)} recomputed"]
        numbers, texts = [], []
        for i, (a, b) in enumerate(zip(old, new)):
            n, t = differences(a, b, f"{path}[{i}]")
            numbers += n
            texts += t
        return numbers, texts
    number = (int, float)
    if isinstance(old, bool) or isinstance(new, bool) or not (isinstance(old, number) and isinstance(new, number)):
        if old == new:
            return [], []
        what = "text" if isinstance(old, str) and isinstance(new, str) else (
            f"{type(old).__name__} stored, {type(new).__name__} recomputed")
        return [], [f"{path}: {what}"]
    a, b = float(old), float(new)
    if a == b or (math.isnan(a) and math.isnan(b)):
        return [], []
    if not (math.isfinite(a) and math.isfinite(b)):  # one side not finite: no difference to measure, say which
        return [], [f"{path}: {a} stored, {b} recomputed"]
    diff = abs(a - b)
    return [(path, diff, diff / abs(a) if a else None)], []


def _normalized(record: Any) -> Any:
    """A record as it is stored (JSON: tuples become lists, non-finite floats stay floats)."""
    return json.loads(json.dumps(record, default=str))


def verify(unit_file: Path, log=print) -> dict[str, Any]:
    """Rerun the unit of ``unit_file`` with the code now and compare (module docstring). Returns ``{"status":
    "equal" | "differs" | "another unit", "differences": n, "largest": (path, abs, rel) | None, "same_machine":
    bool, ...}``; ``StoreError`` for a file that is not a unit of a registered plan in its store."""
    unit_file = Path(unit_file)
    out = unit_file.parent.parent
    store.check_folders(out)  # units/, verifications/, ... a link: disk.NotOurs (exit 2) before anything runs
    if unit_file.parent.name != "units" or not units_store.regular(unit_file):
        raise StoreError(f"{unit_file} is not a plain file in a store's units/ folder (a link, a folder, a FIFO or "
                         "missing): the store's own view leaves it out; not verified")
    digest = store.unit_digest(unit_file)  # the bytes this verification vouches for
    stored = store.read_unit(unit_file)  # its schema, its name, its key: the store's checks
    meta = store.parse_name(unit_file)
    reg = store.registration(out, meta["plan"])
    if reg is None:
        raise StoreError(f"no registration of plan {meta['plan']} in {out / 'registrations'}: the unit's settings "
                         "are unknown")
    settings = reg["settings"]
    if (meta["device"], meta["threads"]) != (settings["device"], settings["threads"]):
        raise StoreError(f"{unit_file.name} is named for {meta['device']} with {meta['threads']} thread(s), but plan "
                         f"{meta['plan']} runs on {settings['device']} with {settings['threads']}: not a unit of it; "
                         "not verified")
    if settings.get("format") != plan.KEY_FORMAT:
        raise StoreError(f"plan {meta['plan']} is of format {settings.get('format')}; this code plans format "
                         f"{plan.KEY_FORMAT} units (v3): an older ledger's units are verified at their own commit")
    if settings.get("edition") != plan.EDITION:
        raise StoreError(f"plan {meta['plan']} is of ledger edition {settings.get('edition', 'before 4')}; this code "
                         f"measures edition {plan.EDITION} units (more measurements, today's premise): an older "
                         "edition's units are verified at their own commit")
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
    new = _normalized(run_unit(unit, data, int(meta["threads"]), bool(settings["quick"]), None, log=lambda _: None))
    numbers, texts = differences({k: v for k, v in stored.items() if k in new}, new)
    largest = max(numbers, key=lambda d: d[1]) if numbers else None
    here = machine()
    ledger = None
    if numbers or texts:
        res, _ = store.load_units(out, meta["plan"], runner.expected(settings), meta["device"], int(meta["threads"]))
        res[meta["name"]] = stored
        ledger = sensitivity.shift(res, meta["name"], new, CLAIMS)
    return {"unit_sha256": digest,
            "status": "equal" if not (numbers or texts) else "differs", "differences": len(numbers) + len(texts),
            "largest": largest, "texts": texts, "ledger": ledger, "same_machine": stored.get("machine") == here,
            "machine": here, "stored_machine": stored.get("machine"), "commit": stored.get("git_commit")}


def record_of(unit_file: Path, r: dict[str, Any], commit: str) -> dict[str, Any]:
    """The stored record of ``verify``'s result ``r`` for ``unit_file`` by the code at ``commit``
    (``scale.ledger.schemas.VERIFICATION``): bound to the unit it vouches for by the SHA-256 of the file it
    recomputed and the commit that computed it (``store.unbound``), with the text fields that differ and what the
    ledger reads (strict JSON: ``sensitivity`` writes null for a value that is not finite)."""
    return {"unit": Path(unit_file).name, "plan": store.parse_name(Path(unit_file))["plan"],
            "unit_sha256": r["unit_sha256"], "computed_at": str(r["commit"]), "verified_at": commit,
            "status": r["status"], "differences": r["differences"],
            "largest": list(r["largest"]) if r["largest"] else None, "same_machine": bool(r["same_machine"]),
            "machine": r["machine"], "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "texts": list(r["texts"]), "ledger": r["ledger"]}


def report_lines(r: dict[str, Any]) -> list[str]:
    """The verification of a unit that differs, for a person: the text fields, then what the ledger reads from the
    unit (each statistic stored and recomputed against its row's interval, largest first) and its verdicts."""
    out = []
    if r["texts"]:
        out.append(f"  text fields that differ ({len(r['texts'])}): " + "; ".join(r["texts"][:5])
                   + (f"; and {len(r['texts']) - 5} more" if len(r["texts"]) > 5 else ""))
    ledger = r["ledger"]
    if ledger is None:
        return out
    stats = sorted(ledger["statistics"], key=lambda s: -(s["of_width"] if s["of_width"] is not None else math.inf))
    out.append(f"  the ledger ({ledger['rows']} rows over {ledger['units']} stored units of {ledger['seeds']} "
               f"seed(s)): {len(stats)} statistic(s) read from this unit differ"
               + (f"; the {SHOWN} largest against their row's interval:" if len(stats) > SHOWN else
                  (":" if stats else "")))
    for s in stats[:SHOWN]:
        width = "no interval" if s["width"] is None else (
            f"{_num(s['of_width'])} of the interval's width {_num(s['width'])}" if s["of_width"] is not None
            else f"interval width {_num(s['width'])}")
        out.append(f"    {s['row']} {s['statistic']} (seed {s['seed']}): stored {_num(s['stored'])}, recomputed "
                   f"{_num(s['recomputed'])}, difference {_num(s['difference'])}: {width}")
    changes = ledger["verdict_changes"]
    out.append("  no verdict changes" if not changes else
               f"  verdicts that would change ({len(changes)}): " + "; ".join(
                   f"{c['row']} {c['what']} {c['stored']} -> {c['recomputed']}" for c in changes))
    return out


def largest_text(r: dict[str, Any]) -> str:
    """The largest numeric difference as a phrase ("no number differs" where only texts do)."""
    if r["largest"] is None:
        return "no number differs"
    path, a, rel = r["largest"]
    return f"the largest number at {path}: {a:.3g} ({'stored 0' if rel is None else f'{rel:.3g} relative'})"


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.3g}"
