r"""A grid run directory's state, and the plan folder's manifest checked against the plan (``scale.paper``).

A run whose summary.json says it finished (or stopped on a non-finite loss) is done; one with a checkpoint but no
summary is resumed. A manifest that is not scale.paper's, or is of another plan (a run it names is planned
otherwise: the code changed the run), is never rewritten: the command stops.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path

from scale.engine import read
from scale.experiments.catalog import DONE_STATUSES, PlannedRun


def run_state(run_dir: Path) -> str:
    """``done`` (summary says finished or non-finite loss), ``resume`` (a checkpoint, no final summary) or ``new``."""
    summary = run_dir / "summary.json"
    if summary.is_file():
        try:
            if read.read_json(summary, dict).get("status") in DONE_STATUSES:
                return "done"
        except (OSError, read.Unreadable):
            pass
    if (run_dir / "checkpoint.pt").is_file() and (run_dir / "config.json").is_file():
        return "resume"
    return "new"


def refuse_other_manifest(out: Path, runs: list[PlannedRun]) -> str | None:
    """One line when ``out/manifest.json`` is not a manifest of scale.paper, or is one of another plan (a planned
    run it names is not in this plan, or is planned otherwise): the manifest is never rewritten then. A plan
    that adds runs to the saved one is the same grid, extended."""
    path = out / "manifest.json"
    if not os.path.lexists(path):
        return None
    try:
        saved = read.read_json(path, dict)
    except read.Unreadable as exc:
        return f"{exc}; it was left as it is. Use another --out"
    planned = {r.name: json.loads(json.dumps(asdict(r))) for r in runs}  # as the manifest holds them
    records = saved.get("runs")
    if not isinstance(records, list) or not all(isinstance(r, dict) and isinstance(r.get("name"), str)
                                                for r in records):
        return f"{path} is not a manifest of scale.paper; it was left as it is. Use another --out"
    # a run's argv is its settings as a command line, recorded beside them (manifests before it lack it)
    other = [r["name"] for r in records if planned.get(r["name"]) != {k: v for k, v in r.items() if k != "argv"}]
    if other:
        return (f"{path} is the manifest of another plan ({len(other)} of its runs are not planned so, e.g. "
                f"{', '.join(other[:3])}); nothing was run or rewritten. Use another --out")
    return None
