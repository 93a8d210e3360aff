r"""A grid plan as its report reads it: the plan folder's manifest and each planned run's unit file
(``scale.grid.unit_files``), every value the report reads checked for its type first. Anything that is not what
``scale.paper`` writes is ``scale.engine.read.Unreadable`` with one line naming the file
(``scale.paper_report``: exit 1).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from scale.engine import read
from scale.grid import unit_files
from scale.grid.unit_files import ORBIT_SPACES
from scale.runs.summary import CurvatureSummary, RunSummary
from scale.unit_store.files import StoreError
from scale.unit_store.schema import Schema, problem

# Keys of the run files the report reads as numbers: a file whose values there are not numbers is refused.
METRIC_KEYS = ("h_std", "h_cond", "loss", "epoch")
# The labels each experiment's section reads, and their types (bool is not a number here).
LABEL_TYPES: dict[str, tuple[type, ...]] = {"head": (str,), "lr": (int, float), "bn": (bool,), "depth": (int,),
                                            "init": (str,)}
LABELS = {"E1": ("head", "bn", "lr"), "E2": ("init", "head"), "E5": ("depth", "head")}
# The manifest's entries the report reads, with their types (scale.paper writes them): one schema mechanism with
# the unit files' (scale.unit_store.schema).
MANIFEST = Schema({"dataset": str, "backbone": str, "quick": bool, "command": str, "experiments": list[str],
                   "assumptions": dict[str, str], "versions": dict[str, str], "git_commit": str},
                  {"paper_choices": dict[str, dict[str, list[Any]]] | None, "key_format": int})
DEVIATIONS = dict[str, tuple[Any, Any]]  # setting -> (paper, ours), a unit file's deviations
CURVATURE_KEYS = ("lambda_min", "lambda_max", "M_over_H", "n_negative", "n_negative_G", "epoch", "step")


def _read_json(path: Path, kind: type = dict) -> Any:
    return read.read_json(path, kind) if os.path.lexists(path) else None


def _manifest_runs(manifest: dict[str, Any], where: Path) -> list[dict[str, Any]]:
    """The manifest's run records, each with a plain-name ``name``, a string ``experiment`` and ``labels``."""
    runs = manifest.get("runs")
    if not isinstance(runs, list):
        raise read.Unreadable(f"{where}: 'runs' is {type(runs).__name__} where a list of runs belongs")
    for i, r in enumerate(runs):
        ok = (isinstance(r, dict) and isinstance(r.get("name"), str) and isinstance(r.get("experiment"), str)
              and isinstance(r.get("labels"), dict) and r["name"] not in ("", ".", "..") and "/" not in r["name"]
              and "\0" not in r["name"])
        if not ok:
            raise read.Unreadable(f"{where}: run {i} is not a record of scale.paper (a plain 'name', an "
                                  "'experiment' and 'labels')")
        for key in LABELS.get(r["experiment"], ()):
            v = r["labels"].get(key)
            if isinstance(v, bool) is not (LABEL_TYPES[key] == (bool,)) or not isinstance(v, LABEL_TYPES[key]):
                raise read.Unreadable(f"{where}: run {r['name']!r}: label {key!r} is {type(v).__name__}, not "
                                      f"{' or '.join(t.__name__ for t in LABEL_TYPES[key])}")
    wrong = problem(manifest, MANIFEST)
    if wrong:
        raise read.Unreadable(f"{where}: {wrong}, not what scale.paper writes there")
    return runs


def load_grid(home: Path) -> dict[str, Any]:
    """The grid plan in ``home`` (``OUT/<plan>``, ``scale.grid.unit_files``) as the report reads it: its manifest and,
    for each planned run, its unit file in ``OUT/units`` (none: not run), and one line per unit file left out
    (another plan's, a changed key, a content that is not the run its name says: ``scale.grid.unit_files.find``).
    ``read.Unreadable`` (exit 1) with one line for any file that is not what scale.paper writes (not JSON, too
    deep or large, a FIFO, values of the wrong type, unreadable)."""
    if not os.path.lexists(home / "manifest.json"):
        raise FileNotFoundError(f"{home} has no manifest.json: not a grid plan folder of python -m scale.paper "
                                "(OUT/grid-...)")
    manifest = _read_json(home / "manifest.json")
    records = _manifest_runs(manifest, home / "manifest.json")
    try:
        planned = [unit_files.of_record(r, manifest.get("key_format", unit_files.LEGACY_KEYS)) for r in records]
    except read.Unreadable as exc:
        raise read.Unreadable(f"{home / 'manifest.json'}: {exc}") from None
    if home.parent.is_dir() and (home.parent / "units").is_dir() \
            and not os.access(home.parent / "units", os.R_OK | os.X_OK):
        raise read.Unreadable(f"{home.parent / 'units'} cannot be read (permission denied); give it read permission")
    try:  # each unit file checked against its schema, its name and this plan before it is used (scale.unit_store)
        found, ignored = unit_files.find(home.parent, home.name, planned)
    except StoreError as exc:
        raise read.Unreadable(str(exc)) from None
    runs = []
    for r in records:
        stored = found.get(r["name"])
        path, u = (stored.path, stored.record) if stored is not None else (None, {})
        where = str(path)
        summary, curvature = u.get("summary"), u.get("curvature_summary")
        runs.append(dict(r, unit=path, config=u.get("config"),
                         summary=None if summary is None else read.typed(lambda s=summary: RunSummary.from_dict(s),
                                                                         f"{where}: summary"),
                         metrics=_records(u.get("metrics"), METRIC_KEYS, f"{where}: metrics"),
                         deviations=_deviations(u.get("deviations"), where),
                         curvature=_records(u.get("curvature"), CURVATURE_KEYS, f"{where}: curvature"),
                         curvature_summary=None if curvature is None else read.typed(
                             lambda c=curvature: CurvatureSummary.from_dict(c), f"{where}: curvature_summary"),
                         orbits=_orbits(u.get("orbits"), where)))
    return {"manifest": manifest, "runs": runs, "ignored": ignored}


def _records(found: Any, keys: tuple[str, ...], where: str) -> list[dict[str, Any]]:
    """A unit file's list of per-epoch records, each checked to hold numbers at ``keys``."""
    if found is None:
        return []
    if not isinstance(found, list) or not all(isinstance(r, dict) for r in found):
        raise read.Unreadable(f"{where} is not a list of records")
    return [read.numbers(r, keys, f"{where} record {i}") for i, r in enumerate(found, 1)]


def _orbits(found: Any, where: str) -> dict[str, np.ndarray] | None:
    """E4's orbit figure data of a unit file (``scale.grid.unit_files.orbit_projection``) as arrays."""
    if found is None:
        return None
    try:
        data = {k: np.asarray(found[k], dtype=float) for k in ORBIT_SPACES}
        labels = np.asarray(found["labels"], dtype=int)
        if not all(a.ndim == 3 and a.shape[2] == 2 and len(a) == len(labels) for a in data.values()):
            raise ValueError("not (orbits, points, 2) arrays")
    except (TypeError, ValueError, KeyError) as exc:
        raise read.Unreadable(f"{where}: orbits is not the orbit figure data of scale.paper ({exc})") from None
    return dict(data, labels=labels)


def _deviations(found: Any, where: str) -> dict[str, Any] | None:
    if found is not None and not read.fits(found, DEVIATIONS):
        raise read.Unreadable(f"{where}: deviations is not a deviations record of scale.paper (setting -> [paper, "
                              "ours])")
    return found
