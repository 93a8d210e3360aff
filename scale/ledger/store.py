r"""The ledger's store: one immutable file per unit, registrations and amendments, each written once.

    OUT/registrations/<plan>.json     a plan's registration, written before its first unit: the plan's settings
                                      and hash, the rules (``scale.ledger.claims.rules_data``) and their hash,
                                      the code commit, the date, the command
    OUT/amendments/<plan>-<n>.json    a change of the rules after registration: date, reason, hashes, claims
    OUT/units/<plan>--<unit name>--<device>-t<threads>--<key>.json
                                      one unit's record (its key: the plan, the unit's experiment and seed in
                                      its name, where it ran, the hash of everything that shapes its numbers)
    OUT/results.json, OUT/report.md   views of one plan, rebuilt from the files above at every change

Every store file is written to a temporary name and linked to its final name (``os.link`` fails if the name
exists), so it appears whole or not at all and is never replaced (``mini.atomic``'s writer replaces, so the
write-once primitive lives here); the views go through ``mini.atomic``. Nothing here deletes a file but its own
temporary one. Shards and reruns with other ``--seeds`` or ``--experiments`` add files and lose none, without a lock. A
unit file of another plan, or whose key no longer matches the plan's unit (the code changed the unit), is
left alone and listed by the view as ignored.

A results.json of the first ledger format (one file holding every unit) found in OUT is converted before
anything else is written: each of its units becomes a unit file of the plan ``v1`` and its settings the
registration ``v1`` (the file itself is left in place until the view replaces it).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

V1 = "v1"


class StoreError(ValueError):
    """OUT holds something the ledger did not write or cannot read (exit 2; left as it is)."""


def write_once(path: Path, obj: Any) -> bool:
    """Write ``obj`` as JSON at ``path`` unless the name exists; True if written. Atomic and never replacing."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "x", encoding="utf-8") as fh:
            json.dump(obj, fh, indent=1, sort_keys=True, default=str)
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        return True
    finally:
        if tmp.exists():  # our own temporary name, made with "x" above
            tmp.unlink()


def replace_view(path: Path, text: str) -> None:
    """A view (results.json, report.md): rebuilt from the store, replaced through the project's one atomic writer
    (``mini.atomic``); never through a symbolic link."""
    from mini.atomic import atomic_write_text

    if path.is_symlink():
        raise StoreError(f"{path} is a symbolic link; the ledger writes no view through one: move it away")
    atomic_write_text(path, text)


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise StoreError(f"{path} is not readable as a ledger file ({type(exc).__name__}); move it away or choose "
                         "another --out") from None


def unit_filename(plan: str, name: str, device: str, threads: int, key: str) -> str:
    return f"{plan}--{name}--{device}-t{threads}--{key}.json"


def registration_path(out: Path, plan: str) -> Path:
    return out / "registrations" / f"{plan}.json"


def registration(out: Path, plan: str) -> dict[str, Any] | None:
    path = registration_path(out, plan)
    return read_json(path) if path.is_file() else None


def register(out: Path, plan: str, record: dict[str, Any]) -> dict[str, Any]:
    """The plan's registration: the stored one if there is one, else ``record`` written now."""
    write_once(registration_path(out, plan), record)
    return read_json(registration_path(out, plan))


def amendments(out: Path, plan: str) -> list[dict[str, Any]]:
    folder = out / "amendments"
    if not folder.is_dir():
        return []
    found = [read_json(p) for p in sorted(folder.glob(f"{plan}-*.json"))]
    return sorted(found, key=lambda a: a.get("number", 0))


def amend(out: Path, plan: str, record: dict[str, Any]) -> dict[str, Any]:
    """Log an amendment of the plan's rules (numbered after the existing ones)."""
    number = len(amendments(out, plan)) + 1
    while not write_once(out / "amendments" / f"{plan}-{number:03d}.json", dict(record, number=number)):
        number += 1
    return dict(record, number=number)


def save_unit(out: Path, plan: str, name: str, device: str, threads: int, key: str, record: dict[str, Any]) -> Path:
    path = out / "units" / unit_filename(plan, name, device, threads, key)
    if not write_once(path, dict(record, plan=plan, key_hash=key, device=device, threads=threads)):
        raise StoreError(f"{path} exists already: a unit file is written once")
    return path


def unit_files(out: Path) -> list[Path]:
    folder = out / "units"
    return sorted(p for p in folder.glob("*.json") if not p.name.startswith(".")) if folder.is_dir() else []


def parse_name(path: Path) -> dict[str, Any] | None:
    """(plan, name, device, threads, key) from a unit file's name; None for a name the ledger did not write."""
    parts = path.stem.split("--")
    if len(parts) != 4 or "-t" not in parts[2]:
        return None
    device, _, threads = parts[2].rpartition("-t")
    if not threads.isdigit():
        return None
    return {"plan": parts[0], "name": parts[1], "device": device, "threads": int(threads), "key": parts[3]}


def load_units(out: Path, plan: str, keys: dict[str, str], device: str, threads: int
               ) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """The units of ``plan`` run on ``device`` at ``threads`` whose key is the plan's (``keys``: name -> key hash),
    and one line per unit file left out (another plan, another device or thread count, a changed key)."""
    units: dict[str, dict[str, Any]] = {}
    ignored: list[str] = []
    for path in unit_files(out):
        meta = parse_name(path)
        if meta is None:
            ignored.append(f"{path.name}: not a unit file name")
        elif meta["plan"] != plan:
            ignored.append(f"{path.name}: plan {meta['plan']}")
        elif (meta["device"], meta["threads"]) != (device, threads):
            ignored.append(f"{path.name}: {meta['device']}, {meta['threads']} threads (this plan: {device}, "
                           f"{threads})")
        elif keys.get(meta["name"]) != meta["key"]:
            ignored.append(f"{path.name}: its key is not this plan's unit's (the unit changed)")
        else:
            units[meta["name"]] = read_json(path)
    return units, ignored


def convert_v1(out: Path) -> int:
    """Convert a first-format ``OUT/results.json`` into unit files of plan ``v1`` (module docstring); the number of
    units converted (0 if there is none to convert). A results.json that is neither format raises."""
    path = out / "results.json"
    if not path.is_file():
        return 0
    saved = read_json(path)
    if isinstance(saved, dict) and saved.get("format") == 2:
        return 0
    if not (isinstance(saved, dict) and saved.get("format") == 1 and isinstance(saved.get("units"), dict)):
        raise StoreError(f"{path} is not a ledger written by scale.replicate; move it away or choose another --out")
    settings = {k: v for k, v in saved.items() if k not in ("units", "claims")}
    register(out, V1, {"plan": V1, "settings": settings, "rules": {"claims": saved.get("claims", [])},
                       "rules_hash": None, "converted_at": time.strftime("%Y-%m-%d %H:%M:%S"),
                       "note": "the first ledger format, converted: its rules were committed in code before it "
                       "ran, no hash was recorded"})
    n = 0
    for name, rec in saved["units"].items():
        key = (rec.get("key_hash") or _v1_key(rec))
        target = out / "units" / unit_filename(V1, name, saved.get("device", "cpu"),
                                               int(rec.get("torch_threads") or saved.get("threads") or 1), key)
        if write_once(target, dict(rec, plan=V1, key_hash=key)) or target.is_file():
            n += 1
    return n


def _v1_key(rec: dict[str, Any]) -> str:
    from scale.ledger.plan import digest

    return digest(rec.get("key", {}))[:12]
