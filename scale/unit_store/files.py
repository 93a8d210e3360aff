r"""The unit store: one immutable file per finished unit, named by what it is, checked before it is used.

    OUT/units/<plan>--<unit name>--<device>-t<threads>--<key>.json

    names      ``unit_filename``, ``parse_name`` (None for a name the store does not write)
    writing    ``write_once``: a temporary, fsync, a hard link that fails if the name exists
               (``scale.engine.disk.write_once``), never into a folder that is a symbolic link
               (``scale.engine.disk.check_folders``, which the commands also run on every folder they write
               below OUT before anything is written)
    reading    ``read_json`` (bounded: ``scale.engine.read``), ``read_record``: the record checked against its
               schema (``scale.unit_store.schema``) before any of its fields is read
    loading    ``load``: a plan's units, each file checked against its name and its plan before it is used

A file is read only when its name is one of the plan's units at the plan's key: the units are the plan's, and
nothing is sized by a file name. Every other entry of ``OUT/units`` is left out with one line saying why, never
used, never deleted: not a unit file's name; not a regular file (a link, a folder, a FIFO); another plan;
another device or thread count (where the plan fixes them); a name the plan does not have; another key (the
unit changed); a content that is not the unit its name says (another plan, name, device, threads or key in it;
an experiment, seed or labels other than the plan's; the kind's own check: ``scale.ledger.store`` the ledger's
key and config, ``scale.grid.unit_files`` the grid's command line); a second file of a unit already found.

``StoreError`` (exit 2): a file of the store that cannot be read or is not of its schema (damaged: one line
naming it and its first bad field; it is left as it is).
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scale.engine import disk, read
from scale.unit_store import schema

UNITS = "units"  # the store's folder in OUT


class StoreError(ValueError):
    """OUT holds something the store did not write or cannot read (exit 2; left as it is)."""

    code = 2


def digest(obj: Any) -> str:
    """SHA-256 of ``obj``'s canonical JSON (sorted keys, no spaces): plans' and units' keys."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def unit_filename(plan: str, name: str, device: str, threads: int, key: str) -> str:
    """A unit file's name; ``StoreError`` for a part that would not be read back as itself (empty, holding
    ``--``, a ``/`` or a NUL, or starting with a dot)."""
    for part in (plan, name, device, key):
        if not isinstance(part, str) or not part or part.startswith(".") or any(c in part for c in ("--", "/", "\0")):
            raise StoreError(f"{part!r} cannot be part of a unit file's name (PLAN--UNIT--DEVICE-tTHREADS--KEY.json)")
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 0:
        raise StoreError(f"{threads!r} is not a thread count")
    return f"{plan}--{name}--{device}-t{threads}--{key}.json"


def parse_name(path: Path) -> dict[str, Any] | None:
    """(plan, name, device, threads, key) from a unit file's name; None for a name the store does not write."""
    path = Path(path)
    parts = path.stem.split("--")
    if path.suffix != ".json" or len(parts) != 4 or not all(parts) or "-t" not in parts[2]:
        return None
    device, _, threads = parts[2].rpartition("-t")
    if not (device and threads.isdigit() and threads.isascii()):
        return None
    return {"plan": parts[0], "name": parts[1], "device": device, "threads": int(threads), "key": parts[3]}


def read_json(path: Path, kind: type | tuple[type, ...] = (dict, list)) -> Any:
    """A store file through the bounded reader (regular files only, size and nesting capped)."""
    try:
        return read.read_json(path, kind)
    except (OSError, read.Unreadable) as exc:
        raise StoreError(f"{path} is not readable as a file of the store ({exc}); move it away or choose another "
                         "--out") from None


def read_record(path: Path, spec: Any, what: str = "unit file") -> dict[str, Any]:
    """The record in ``path``, checked against ``spec`` (``scale.unit_store.schema``) before any field is read."""
    record = read_json(path, dict)
    p = schema.problem(record, spec)
    if p:
        raise StoreError(f"{path} is not a {what} of this project ({p}); move it away or choose another --out")
    return record


def write_once(path: Path, obj: Any) -> bool:
    """Write ``obj`` as JSON at ``path`` unless the name exists; True if written. Atomic and never replacing
    (``scale.engine.disk.write_once``); its folder must not be a symbolic link (``disk.NotOurs``, exit 2)."""
    path = Path(path)
    disk.check_folders(path.parent.parent, [path.parent.name])
    data = json.dumps(obj, indent=1, sort_keys=True, default=str).encode("utf-8")
    try:
        return disk.write_once(path, data)
    except NotADirectoryError as exc:
        raise StoreError(f"{exc.filename} is not a folder; the store keeps its files there: move it away") from None


def replace_view(path: Path, text: str) -> None:
    """A view (results.json, report.md): rebuilt from the store and replaced through the one owner of the disk,
    which refuses a symbolic link, a hard link or anything but a regular file there."""
    try:
        disk.write_text(path, text)
    except disk.NotOurs as exc:
        raise StoreError(f"{exc}; no view is written over it: move it away") from None


def unit_files(out: Path) -> list[Path]:
    """Every entry of ``OUT/units`` named ``*.json`` (temporaries of a write in progress aside)."""
    folder = Path(out) / UNITS
    return sorted(p for p in folder.glob("*.json") if not p.name.startswith(".")) if folder.is_dir() else []


@dataclass(frozen=True)
class Planned:
    """What a plan says of one of its units: the key its file is named by, and what its content must say
    (None: the plan does not say)."""

    key: str
    experiment: str | None = None
    seed: int | None = None
    labels: dict[str, Any] | None = None

    def disagreement(self, record: dict[str, Any]) -> str | None:
        for field in ("experiment", "seed", "labels"):
            want = getattr(self, field)
            if want is not None and record.get(field) != want:
                return f"its content says {field} {record.get(field)!r}, its plan {want!r}"
        return None


@dataclass(frozen=True)
class Stored:
    """A unit file found and checked: where it is and its record."""

    path: Path
    record: dict[str, Any]


def name_mismatch(meta: dict[str, Any], record: dict[str, Any]) -> str | None:
    """Where a record (of ``schema.IDENTITY``) says another plan, unit, device, thread count or key than its file's
    name (``parse_name``'s ``meta``); None when they agree."""
    said = {"plan": record["plan"], "name": record["name"], "device": record["device"],
            "threads": record["threads"], "key": record["key_hash"]}
    differ = [k for k, v in said.items() if v != meta[k]]
    if not differ:
        return None
    return ("its content says " + ", ".join(f"{k} {said[k]!r}" for k in differ) + "; its name "
            + ", ".join(f"{k} {meta[k]!r}" for k in differ))


def regular(path: Path) -> bool:
    """Whether ``path`` is itself a regular file (a symbolic link to one is not: the store never follows links)."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def load(out: Path, plan: str, planned: Mapping[str, Planned], spec: Any,
         identity: Callable[[dict[str, Any], Planned], str | None] | None = None,
         where: tuple[str, int] | None = None) -> tuple[dict[str, Stored], list[str]]:
    """The unit files of ``plan`` in ``out`` that are its units (``planned``: name -> what the plan says), each
    read, checked against ``spec`` (``StoreError`` when it is not of it) and against its name, its plan and
    ``identity`` (the kind's own check: a reason, or None) before it is used; ``where``: the (device, threads)
    the plan fixes, if it does. Returns the units found and one line per file left out (module docstring)."""
    found: dict[str, Stored] = {}
    left: list[str] = []
    for path in unit_files(out):
        meta = parse_name(path)
        if meta is None:
            left.append(f"{path.name}: not a unit file's name (PLAN--UNIT--DEVICE-tTHREADS--KEY.json)")
        elif meta["plan"] != plan:
            left.append(f"{path.name}: plan {meta['plan']}")
        elif where is not None and (meta["device"], meta["threads"]) != tuple(where):
            left.append(f"{path.name}: {meta['device']}, {meta['threads']} threads (this plan: {where[0]}, "
                        f"{where[1]})")
        elif meta["name"] not in planned:
            left.append(f"{path.name}: no unit of this plan is named {meta['name']}")
        elif planned[meta["name"]].key != meta["key"]:
            left.append(f"{path.name}: its key is not this plan's unit's (the unit changed)")
        elif not regular(path):
            left.append(f"{path.name}: not a regular file (a link, a folder or a FIFO): not written by the store")
        else:
            unit = planned[meta["name"]]
            record = read_record(path, spec)
            why = name_mismatch(meta, record) or unit.disagreement(record) or (
                identity(record, unit) if identity is not None else None)
            if why:
                left.append(f"{path.name}: {why}: not the unit its name says, not used")
            elif meta["name"] in found:
                left.append(f"{path.name}: a second file of unit {meta['name']} ({found[meta['name']].path.name} is "
                            "used)")
            else:
                found[meta["name"]] = Stored(path, record)
    return found, left
