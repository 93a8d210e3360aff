r"""The ledger's files: its units in the unit store (``scale.unit_store``), its registrations and amendments, each
written once and checked against its schema and its name before it is used.

    OUT/registrations/<plan>.json     a plan's registration, written before its first unit: the plan's settings
                                      and hash, the rules (``scale.ledger.claims.rules_data``) and their hash,
                                      the code commit, the date, the command
    OUT/amendments/<plan>-<n>.json    a change of the rules after registration: date, reason, hashes, claims
    OUT/units/<plan>--<unit name>--<device>-t<threads>--<key>.json
                                      one unit's record (``scale.unit_store.files``: written once, left out with one
                                      line when it is not the unit its name says)
    OUT/verifications/<unit file's stem>--at-<commit>.json
                                      a unit computed again by a later commit (``scale.ledger.verify``): what
                                      was compared and the result, written once per unit and commit
    OUT/results.json, OUT/report.md   views of one plan, rebuilt from the files above at every change

The unit store owns the names, the writing and the loading; what is the ledger's own is here: a unit's identity
beyond its name (its ``key`` hashes to its ``key_hash``, says its experiment and seed, and holds its config less
where it ran: ``unit_identity``), a registration's (its plan is its file's name and its settings' hash) and an
amendment's (its number is its file's), and the schemas they are read by (``scale.ledger.schemas``, through
``scale.unit_store.schema``: a damaged file is one line, ``StoreError``, exit 2, left as it is). Nothing here deletes a
file but the writer's own temporary one. Shards and reruns with other ``--seeds`` or ``--experiments`` add files and
lose none, without a lock. A unit file of another plan, or whose key no longer matches the plan's unit (the code
changed the unit), is left alone and listed by the view as left out. ``FOLDERS``: every folder the ledger writes
below OUT, each refused when it is a symbolic link (``check_folders``, before anything is written).

A results.json of the first ledger format (one file holding every unit) found in OUT is converted before
anything else is written: each of its units becomes a unit file of the plan ``v1`` and its settings the
registration ``v1`` (the file itself is left in place until the view replaces it).
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from scale.engine import disk, read
from scale.ledger import schemas
from scale.ledger.plan import MACHINE_FIELDS
from scale.unit_store import files as units
from scale.unit_store import schema
from scale.unit_store.files import (  # the unit store's names, re-exported: the ledger's modules read them here
    Planned,
    StoreError,
    digest,
    parse_name,
    replace_view,
    unit_filename,
    unit_files,
    write_once,
)

V1 = "v1"
# Every folder the ledger writes below OUT (its store, checkpoints, views, jobs): none may be a link.
FOLDERS = ("units", "registrations", "amendments", "verifications", "work", "e4_study", "v1-reread", "launch",
           "jobs")

__all__ = [
    "FOLDERS",
    "V1",
    "Planned",
    "StoreError",
    "amend",
    "amendments",
    "check_folders",
    "convert_v1",
    "digest",
    "load_units",
    "load_v1",
    "parse_name",
    "plan_id",
    "read_json",
    "read_unit",
    "record_verification",
    "register",
    "registration",
    "replace_view",
    "unit_filename",
    "unit_files",
    "unit_identity",
    "verifications",
    "write_once",
]


def plan_id(settings: dict[str, Any]) -> str:
    """A plan's name: the hash of its settings (``quick-`` first for a --quick plan)."""
    return ("quick-" if settings["quick"] else "") + digest(settings)[:12]


def check_folders(out: Path) -> None:
    """``disk.NotOurs`` (exit 2) where a folder the ledger writes below ``out`` is a link or not a folder."""
    disk.check_folders(out, FOLDERS)


def read_json(path: Path) -> Any:
    """A ledger file through the bounded reader, checked as the record of its folder: a registration, an
    amendment (``read_registration``, ``read_amendment``); any other file only bounded."""
    folder = Path(path).parent.name
    if folder == "registrations":
        return read_registration(Path(path))
    if folder == "amendments":
        return read_amendment(Path(path))
    return units.read_json(Path(path))


# -- registrations and amendments --------------------------------------------------------------------------------

def registration_path(out: Path, plan: str) -> Path:
    return Path(out) / "registrations" / f"{plan}.json"


def read_registration(path: Path) -> dict[str, Any]:
    """A registration, of its schema, whose plan is its file's name and (but v1's) its settings' hash."""
    plan = path.stem
    rec = units.read_record(path, schemas.V1_REGISTRATION if plan == V1 else schemas.REGISTRATION, "registration")
    why = None
    if rec["plan"] != plan:
        why = f"its content says plan {rec['plan']!r}, its name {plan!r}"
    elif plan != V1 and (plan_id(rec["settings"]) != plan or rec["plan_hash"] != digest(rec["settings"])):
        why = f"its settings hash to plan {plan_id(rec['settings'])!r}, not to its name"
    if why:
        raise StoreError(f"{path}: {why}: not the registration its name says; move it away or choose another --out")
    return rec


def registration(out: Path, plan: str) -> dict[str, Any] | None:
    path = registration_path(out, plan)
    return read_registration(path) if os.path.lexists(path) else None


def register(out: Path, plan: str, record: dict[str, Any]) -> dict[str, Any]:
    """The plan's registration: the stored one if there is one, else ``record`` written now."""
    write_once(registration_path(out, plan), record)
    return read_registration(registration_path(out, plan))


def read_amendment(path: Path) -> dict[str, Any]:
    """An amendment, of its schema, whose number is its file's (``<plan>-<number>.json``)."""
    rec = units.read_record(path, schemas.AMENDMENT, "amendment")
    named = path.stem.rpartition("-")[2]
    if not (named.isdigit() and int(named) == rec["number"]):
        raise StoreError(f"{path}: its content says number {rec['number']}, its name {named!r}: not the amendment "
                         "its name says; move it away or choose another --out")
    return rec


def amendments(out: Path, plan: str) -> list[dict[str, Any]]:
    """The plan's amendments (``OUT/amendments/<plan>-<n>.json``), in their order."""
    folder = Path(out) / "amendments"
    if not folder.is_dir():
        return []
    name = re.compile(rf"^{re.escape(plan)}-[0-9]+\.json$")
    found = [read_amendment(p) for p in sorted(folder.iterdir()) if name.match(p.name)]
    return sorted(found, key=lambda a: a["number"])


def amend(out: Path, plan: str, record: dict[str, Any]) -> dict[str, Any]:
    """Log an amendment of the plan's rules (numbered after the existing ones); its reason must say something."""
    if not str(record.get("reason") or "").strip():
        raise StoreError("an amendment needs a reason (what changed in the rules and why); got a blank one")
    number = len(amendments(out, plan)) + 1
    while not write_once(Path(out) / "amendments" / f"{plan}-{number:03d}.json", dict(record, number=number)):
        number += 1
    return dict(record, number=number)


# -- units -----------------------------------------------------------------------------------------------------

def unit_identity(record: dict[str, Any], planned: Planned) -> str | None:
    """Where a ledger unit's record is not the unit of its key: its ``key`` does not hash to its ``key_hash``, its
    experiment or seed is not its key's, or its config (less where it ran) is not its key's config, or says
    another device or thread count than its record; None when it is."""
    key, config = record["key"], record["config"]
    if digest(key)[:12] != record["key_hash"]:
        return f"its key hashes to {digest(key)[:12]}, not to its key_hash {record['key_hash']!r}"
    for field in ("experiment", "seed"):
        if field in key and key[field] != record[field]:
            return f"its content says {field} {record[field]!r}, its key {key[field]!r}"
    if isinstance(key.get("config"), dict):
        ran = {k: v for k, v in config.items() if k not in MACHINE_FIELDS}
        if ran != key["config"]:
            differ = sorted(k for k in ran.keys() | key["config"].keys() if ran.get(k) != key["config"].get(k))
            return f"its config differs from its key's at {', '.join(differ[:4])}"
    for field in MACHINE_FIELDS:
        if field in config and config[field] is not None and config[field] != record[field]:
            return f"its config says {field} {config[field]!r}, its record {record[field]!r}"
    return None


def load_units(out: Path, plan: str, keys: Mapping[str, str | Planned], device: str, threads: int
               ) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """The units of ``plan`` run on ``device`` at ``threads`` whose key is the plan's (``keys``: name -> key hash,
    or what the plan says of the unit: ``Planned``), each checked before it is used (``scale.unit_store.files.load``,
    ``unit_identity``), and one line per unit file left out."""
    planned = {n: k if isinstance(k, Planned) else Planned(k) for n, k in keys.items()}
    found, left = units.load(Path(out), plan, planned, schemas.LEDGER_UNIT, unit_identity, (device, threads))
    return {n: s.record for n, s in found.items()}, left


def load_v1(out: Path) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Every unit file of plan v1, checked as every unit is (its keys are its own: v1 registered none to check
    them against, so the names are the files' own, as many as there are files)."""
    names = {m["name"]: Planned(m["key"]) for p in unit_files(Path(out)) if (m := parse_name(p)) and m["plan"] == V1}
    found, left = units.load(Path(out), V1, names, schemas.LEDGER_UNIT, unit_identity)
    return {n: s.record for n, s in found.items()}, [line for line in left if line.startswith(f"{V1}--")]


def read_unit(path: Path) -> dict[str, Any]:
    """One unit file, checked against its schema, its name and its key (``StoreError`` naming the mismatch)."""
    path = Path(path)
    meta = parse_name(path)
    if meta is None:
        raise StoreError(f"{path} is not a unit file's name (PLAN--UNIT--DEVICE-tTHREADS--KEY.json)")
    record = units.read_record(path, schemas.LEDGER_UNIT)
    why = units.name_mismatch(meta, record) or unit_identity(record, Planned(meta["key"]))
    if why:
        raise StoreError(f"{path}: {why}: not the unit its name says")
    return record


def save_unit(out: Path, plan: str, name: str, device: str, threads: int, key: str, record: dict[str, Any]) -> Path:
    """Write a unit's file once, after checking its record as every reader will (its schema, its key)."""
    path = Path(out) / "units" / unit_filename(plan, name, device, threads, key)
    full = dict(record, plan=plan, name=name, key_hash=key, device=device, threads=threads)
    wrong = schema.problem(full, schemas.LEDGER_UNIT) or unit_identity(full, Planned(key))
    if wrong:
        raise StoreError(f"unit {name}: its record is not one the store would read back ({wrong}); not written")
    if not write_once(path, full):
        raise StoreError(f"{path} exists already: a unit file is written once")
    return path


# -- the first format ----------------------------------------------------------------------------------------------

def convert_v1(out: Path) -> int:
    """Convert a first-format ``OUT/results.json`` into unit files of plan ``v1`` (module docstring); the number of
    units converted (0 if there is none to convert). A results.json that is neither format raises."""
    path = Path(out) / "results.json"
    if not path.is_file():
        return 0
    saved = units.read_json(path)
    if isinstance(saved, dict) and saved.get("format") == 2:
        return 0
    if not (isinstance(saved, dict) and saved.get("format") == 1 and schema.problem(
            saved.get("units"), dict[str, dict[str, Any]]) is None):
        raise StoreError(f"{path} is not a ledger written by scale.replicate; move it away or choose another --out")
    settings = {k: v for k, v in saved.items() if k not in ("units", "claims")}
    register(out, V1, {"plan": V1, "settings": settings, "rules": {"claims": saved.get("claims", [])},
                       "rules_hash": None, "converted_at": time.strftime("%Y-%m-%d %H:%M:%S"),
                       "note": "the first ledger format, converted: its rules were committed in code before it "
                       "ran, no hash was recorded"})
    n = 0
    for name, rec in saved["units"].items():
        key = rec.get("key_hash") or digest(rec.get("key", {}))[:12]
        device, threads = saved.get("device", "cpu"), rec.get("torch_threads") or saved.get("threads") or 1
        if not (isinstance(device, str) and isinstance(threads, int) and isinstance(key, str)):
            raise StoreError(f"{path}: unit {name!r} is not a unit of the first ledger format; move it away")
        target = Path(out) / "units" / unit_filename(V1, name, device, threads, key)
        if write_once(target, dict(rec, plan=V1, name=name, key_hash=key, device=device, threads=threads)) \
                or target.is_file():
            n += 1
    return n


def verification_name(record: dict[str, Any]) -> str:
    """A verification's file name: its unit file's stem and the verifying commit (once per unit and commit)."""
    return f"{Path(record['unit']).stem}--at-{record['verified_at'][:12]}.json"


def check_writable(out: Path) -> None:
    """``OSError`` (naming the folder) where a verification could not be written into ``OUT/verifications`` (or,
    before it exists, ``OUT``): a file of ours is created there and removed, so permissions, a read-only file system
    or a missing folder are found before a unit is computed again, not after."""
    folder = Path(out) / "verifications"
    where = folder if folder.is_dir() else Path(out)
    probe = where / f".verify-probe.{os.getpid()}.tmp"
    fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    os.close(fd)
    os.unlink(probe)


def record_verification(out: Path, record: dict[str, Any]) -> Path | None:
    """Write a verification (``schemas.VERIFICATION``; ``scale.ledger.verify``) once per unit and verifying commit,
    after checking it as its reader will: its path, None when that commit's verification of the unit is already
    recorded."""
    wrong = schema.problem(record, schemas.VERIFICATION)
    if wrong:
        raise StoreError(f"a verification of {record.get('unit')!r} is not one the store would read back ({wrong}); "
                         "not written")
    path = Path(out) / "verifications" / verification_name(record)
    if write_once(path, record):
        return path
    _, why = read_verification(out, record["plan"], path)
    if why:  # a file at its name that is not this commit's verification of the unit: never replaced, said
        raise StoreError(f"{path} holds a record that is not this verification ({why}); it is left out of the "
                         "report and left as it is: move it away to record this one")
    return None


def unit_digest(path: Path) -> str:
    """The SHA-256 of a unit file's bytes: what a verification vouches for."""
    return hashlib.sha256(read.read_regular(path)).hexdigest()


def unbound(out: Path, rec: dict[str, Any]) -> str | None:
    """Why a verification (of ``schemas.VERIFICATION``) does not vouch for its unit as the store holds it now, as
    one phrase; None when it does: its verifying commit is a commit (40 hex digits: ``--verify`` records nothing
    for uncommitted code), its status one ``--verify`` writes with counts that fit it, and its unit file, a plain
    file in ``OUT/units/``, still has the bytes it recomputed (their SHA-256) and the commit that computed them."""
    if not re.fullmatch(r"[0-9a-f]{40}", rec["verified_at"]):
        return f"verified at {rec['verified_at'][:50]!r}, not a commit (--verify records only code at a commit)"
    if rec["status"] not in schemas.VERIFICATION_STATUSES:
        return f"status {rec['status'][:40]!r} is not one --verify writes ({', '.join(schemas.VERIFICATION_STATUSES)})"
    equal = rec["status"] == "equal"
    if rec["differences"] < 0 or equal != (rec["differences"] == 0) or (equal and rec.get("largest")):
        return f"{rec['differences']} values differing do not fit its status {rec['status']!r}"
    if "unit_sha256" not in rec:
        return "it names no SHA-256 of the unit file it recomputed (written before verifications were bound to it)"
    unit = Path(out) / "units" / rec["unit"]
    if parse_name(unit) is None or Path(rec["unit"]).name != rec["unit"] or not units.regular(unit):
        return f"its unit file units/{rec['unit'][:80]} is gone or not a plain file"
    try:
        if unit_digest(unit) != rec["unit_sha256"]:
            return "its unit file changed since it was verified (another SHA-256)"
        commit = units.read_json(unit, dict).get("git_commit")
    except (OSError, read.Unreadable, StoreError) as exc:
        return f"its unit file cannot be read ({str(exc)[:120]})"
    if commit != rec["computed_at"]:
        return f"computed at {rec['computed_at'][:50]!r}, but its unit file says {str(commit)[:50]!r}"
    return None


def read_verification(out: Path, plan: str, path: Path) -> tuple[dict[str, Any] | None, str | None]:
    """The verification in ``path`` and None, or None and why it is left out: not of ``schemas.VERIFICATION``, not
    the verification its name says (another plan, unit or commit in it), or no longer vouching for its unit as the
    store holds it (``unbound``)."""
    try:
        rec = units.read_json(path, dict)
    except StoreError as exc:
        return None, str(exc)
    wrong = schema.problem(rec, schemas.VERIFICATION)
    if wrong:
        return None, f"not a verification ({wrong})"
    if rec["plan"] != plan or verification_name(rec) != path.name:
        return None, (f"not the verification its name says (its content: plan {rec['plan']!r}, "
                      f"{verification_name(rec)})")
    why = unbound(out, rec)
    return (None, why) if why else (rec, None)


def verifications(out: Path, plan: str) -> tuple[list[dict[str, Any]], list[str]]:
    """The verifications of ``plan``'s units (``read_verification``), and one line per file left out."""
    folder = Path(out) / "verifications"
    found, left = [], []
    for path in sorted(folder.glob(f"{plan}--*.json")) if folder.is_dir() else []:
        rec, why = read_verification(out, plan, path)
        if rec is not None:
            found.append(rec)
        else:
            left.append(f"{path.name}: {why}")
    return found, left
