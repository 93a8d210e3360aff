r"""The paper grid's runs as units: their keys, one immutable file per finished run holding everything the report
reads, the plan's folder, the views derived from the unit files, and the cost of the runs left.

    OUT/units/<plan>--<run name>--<device>-t<threads>--<key>.json     one per finished run, of every plan
    OUT/<plan>/manifest.json                                          the plan (scale.paper writes it)
    OUT/<plan>/runs/NAME/                                             a run's work directory (scale.run)
    OUT/<plan>/results.json, report.md, *.png                         the plan's views, rebuilt from its unit files
    OUT/<plan>/launch/, jobs/, grid_log.jsonl                         its submissions, submitit's files, its log

``plan``: ``grid-`` + the hash of what makes the grid (dataset, backbone, --quick, --epochs, the layout;
``scale.grid.invocation.plan_id``); ``key``:
the hash of what shapes one run's numbers (``config_key``: its resolved ``TrainConfig`` without where it ran, the
paper's values it is checked against, whether it tracks the Hessian, its probes' image cap; ``KEY_FORMAT`` 3, as the
ledger keys its units). A plan written before (its manifest names no ``key_format``) keyed its runs by their
``scale.run`` command lines without ``--data-dir`` (``run_key``) and is read under that rule, so its unit files
(``docs/paper_grid``) stay readable as they are. Everything of a plan but its unit files lives in its own folder, so
plans share one OUT: none reads, touches or deletes another's files, and each view lists the unit files it left
out (another plan's, or a changed key), which are never deleted.

A finished run (summary.json: finished or non-finite loss) gets its file once, written whole or not at all
(``scale.unit_store.files.write_once``: a temporary, fsync, a hard link that fails if the name exists), from the job
that ran it; no file is ever rewritten, so concurrent jobs on a shared filesystem need no lock. The file holds the
run's status, summary, config, deviations, per-epoch metrics, E2's curvature records and summary, and E4's orbit
figure data (the 2-D PCA of each space's orbits), so the views need nothing else: ``results.json`` and the report
(``scale.paper_report``) are rebuilt from the unit files and the manifest at any time (``scale.paper --report-only``).

The unit files are the unit store's (``scale.unit_store``): a file is used only when its content is the run its name
says (``find``: its schema, its plan, name, device, threads and key, the plan's experiment, seed and labels, and
its config agreeing with the planned one; a plan of the earlier key format: its command line hashing to its key);
any other is left out with one line. ``check_folders``: no folder the
grid writes below OUT (``OUT/units``, the plan's folder and its ``runs/``, ``launch/``, ``jobs/``) may be a
symbolic link, checked before anything is written.
"""

from __future__ import annotations

import io
import os
import time
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch

from scale.engine import disk, read
from scale.engine.devices import device_type
from scale.experiments.catalog import DONE_STATUSES, PlannedRun
from scale.grid.invocation import KEY_FORMAT, LAYOUT, GridInvocation, plan_id  # noqa: F401 (plan_id: re-exported)
from scale.launch.jobs import job_states, rerun_command
from scale.runs.validate import plan_disagreements
from scale.unit_store import files, schema
from scale.unit_store.files import Planned, Stored, digest

FORMAT = LAYOUT  # the unit files' and results.json's format
ORBIT_SPACES = ("z", "h", "h_untrained")  # scale.geometry.measure's orbits.npz arrays, (n_orbits, P, dim) each


def plan_dir(out: Path, plan: str) -> Path:
    """The plan's own folder in ``out`` (module docstring)."""
    return Path(out) / plan


def check_folders(out: Path, plan: str) -> None:
    """``disk.NotOurs`` (exit 2) where a folder the grid writes below ``out`` is a link or not a folder."""
    disk.check_folders(out, [files.UNITS, plan, *(f"{plan}/{d}" for d in ("runs", "launch", "jobs"))])


# A grid unit (scale.grid.unit_files.record); its summary, metrics, curvature and orbits are checked by the report's
# reader (scale.grid.records), which reads them deeper.
GRID_UNIT = schema.Schema(
    required={**schema.IDENTITY, "status": str, "experiment": str, "seed": int, "labels": dict[str, Any],
              "argv": list[str]},
    optional={"summary": dict[str, Any] | None, "config": dict[str, Any] | None, "metrics": list[Any] | None,
              "curvature": list[Any] | None, "curvature_summary": dict[str, Any] | None,
              "orbits": dict[str, Any] | None, "deviations": schema.DEVIATIONS | None, "format": str, "run_dir": str,
              "recorded_at": str, "key_format": int})

WHERE_IT_RAN = ("device", "threads", "augment_path")  # a run's config fields that say where it ran: in no key


def planned_config(run: PlannedRun) -> dict[str, Any]:
    """The resolved config of the run's settings, as ``python -m scale.run`` resolves them (on a CPU; where it runs
    is not compared)."""
    return run.config("cpu").to_dict()


def config_key(run: PlannedRun) -> str:
    """The key of a run (``KEY_FORMAT`` 3): the hash of what shapes its numbers, its resolved config (where it ran
    left out), the paper's values it is checked against, whether it tracks the Hessian and its probes' image cap."""
    config = {k: v for k, v in planned_config(run).items() if k not in WHERE_IT_RAN}
    return digest({"format": KEY_FORMAT, "config": config, "paper": run.paper, "track_hessian": run.track_hessian,
                   "probe_images": run.probe_images})[:12]


def run_key(argv: list[str], paper: dict[str, Any], track_hessian: bool) -> str:
    """The key of a run of a plan before ``KEY_FORMAT`` 3 (``LEGACY_KEYS``): the hash of its ``scale.run`` command
    line (without ``--data-dir``), the paper's values and whether it tracks the Hessian."""
    keep = [a for i, a in enumerate(argv) if a != "--data-dir" and (i == 0 or argv[i - 1] != "--data-dir")]
    return digest({"argv": keep, "paper": paper, "track_hessian": track_hessian})[:12]


LEGACY_KEYS = 2  # the key format of a manifest that names none


def keys(runs: list[PlannedRun]) -> dict[str, str]:
    """name -> key of each run (``scale.experiments.catalog.PlannedRun``)."""
    return {r.name: config_key(r) for r in runs}


@dataclass(frozen=True)
class GridRun:
    """What the plan says of one run, as the store checks its unit file: its key (and the key's format), its
    command line, the paper's values and whether it tracks the Hessian, its experiment, seed and labels, and (key
    format 3) its planned config, which the unit file's must agree with."""

    name: str
    argv: list[str]
    paper: dict[str, Any]
    track_hessian: bool
    experiment: str
    seed: int | None
    labels: dict[str, Any]
    key: str
    key_format: int = KEY_FORMAT
    config: dict[str, Any] | None = None


def of_run(run: PlannedRun) -> GridRun:
    return GridRun(run.name, run.argv, run.paper, run.track_hessian, run.experiment, run.seed, run.labels,
                   config_key(run), KEY_FORMAT, planned_config(run))


def of_record(rec: dict[str, Any], key_format: int = LEGACY_KEYS) -> GridRun:
    """A manifest's run record as a ``GridRun`` keyed by the manifest's ``key_format``: 3, from its settings
    (``PlannedRun``); 2 (a manifest that names none), by its command line as recorded (manifests before the runs
    were data) or rebuilt from its settings. ``read.Unreadable`` for a record of neither kind."""
    try:
        planned = PlannedRun(**{f.name: rec[f.name] for f in fields(PlannedRun) if f.name in rec}) \
            if "settings" in rec else None
        if key_format == KEY_FORMAT:
            if planned is None:
                raise KeyError("settings")
            return of_run(planned)
        if key_format != LEGACY_KEYS:
            raise ValueError(f"key format {key_format!r}, not {LEGACY_KEYS} or {KEY_FORMAT}")
        argv = rec["argv"] if "argv" in rec else planned.argv
        paper, track = rec.get("paper") or {}, bool(rec.get("track_hessian"))
        run = GridRun(rec["name"], argv, paper, track, rec["experiment"], rec.get("seed"), rec.get("labels") or {},
                      run_key(argv, paper, track) if isinstance(argv, list) else "", LEGACY_KEYS,
                      planned_config(planned) if planned is not None else None)
    except (TypeError, KeyError, AttributeError, ValueError) as exc:
        raise read.Unreadable(f"run {rec.get('name')!r} of the manifest is not a run of scale.paper ({exc})") from None
    if schema.problem(run.argv, list[str]) or schema.problem(run.paper, dict[str, Any]) \
            or schema.problem(run.seed, int | None):
        raise read.Unreadable(f"run {run.name!r} of the manifest is not a run of scale.paper (its argv, paper or "
                              "seed)")
    return run


def find(out: Path, plan: str, runs: list[GridRun]) -> tuple[dict[str, Stored], list[str]]:
    """The unit files of ``plan`` that are its runs' (any device or thread count: where a run ran is not part of the
    grid's plan), each checked before it is used (module docstring), and one line per unit file left out.
    ``StoreError`` for a file of a run of this plan that is damaged (not of its schema)."""
    by_name = {r.name: r for r in runs}

    def identity(record: dict[str, Any], planned: Planned) -> str | None:
        run = by_name[record["name"]]
        legacy_key = run.key_format == LEGACY_KEYS and run_key(record["argv"], run.paper, run.track_hessian)
        if legacy_key and legacy_key != record["key_hash"]:
            return "its command line is not its key's (another run's content)"
        config = record.get("config")
        if run.config is not None:  # the planned settings resolved (both key formats, where the manifest has them)
            differ = plan_disagreements(config, run.config) if config else ["no config"]
            if differ:
                return f"its config is not its key's ({', '.join(differ[:3])})"
        summary = (record.get("summary") or {}).get("config")
        if summary is not None and config is not None and (differ := plan_disagreements(summary, config)):
            return f"its summary's config is not its config ({', '.join(differ[:3])}): another run's summary"
        return None

    planned = {r.name: Planned(r.key, r.experiment, r.seed, r.labels) for r in runs}
    return files.load(Path(out), plan, planned, GRID_UNIT, identity)


def stored(out: Path, plan: str, runs: list[GridRun]) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """``find``'s unit records."""
    found, ignored = find(out, plan, runs)
    return {name: s.record for name, s in found.items()}, ignored


def record_run(run: PlannedRun, inv: GridInvocation, deviations: dict[str, Any]) -> Path | None:
    """``record`` of a ``scale.experiments.catalog.PlannedRun`` run by ``inv`` (where it ran: the resolved device,
    threads)."""
    return record(Path(inv.out), inv.plan, run.name, keys([run])[run.name], inv.home / "runs" / run.name,
                  device_type(inv.device), inv.threads or torch.get_num_threads(),
                  {"experiment": run.experiment, "seed": run.seed, "labels": run.labels, "argv": run.argv,
                   "deviations": deviations, "key_format": KEY_FORMAT})


def _jsonl(path: Path) -> list[Any]:
    return read.read_jsonl(path) if os.path.lexists(path) else []


def orbit_projection(npz: Path) -> dict[str, Any] | None:
    """E4's orbit figure data from a run's orbits.npz: each space's points projected on its own first two principal
    axes, (n_orbits, P, 2) as nested lists, and each orbit's class label; None without the file. ``read.Unreadable``
    for a file that is not scale.geometry.measure's arrays (loaded without pickle)."""
    if not os.path.lexists(npz):
        return None
    try:
        with read.open_regular(npz) as fh:
            data = dict(np.load(io.BytesIO(fh.read()), allow_pickle=False))
        if not all(isinstance(data.get(k), np.ndarray) and data[k].ndim == 3 for k in ORBIT_SPACES) \
                or data.get("labels") is None or len(data["labels"]) != len(data["z"]):
            raise ValueError("not the arrays of scale.geometry.measure")
    except (OSError, ValueError, EOFError, KeyError) as exc:
        raise read.Unreadable(f"{npz} is not an orbits file of this project ({exc})") from None
    out: dict[str, Any] = {"labels": [int(v) for v in data["labels"]]}
    for key in ORBIT_SPACES:
        F = data[key].astype(np.float64)  # (n_orbits, P, dim)
        n, P, _ = F.shape
        X = F.reshape(n * P, -1)
        Xc = X - X.mean(0)
        _, _, Vt = np.linalg.svd(Xc, full_matrices=False)
        out[key] = (Xc @ Vt[:2].T).reshape(n, P, -1).tolist()  # (n, P, 2): PCA of the space's own points
    return out


def record(out: Path, plan: str, name: str, key: str, run_dir: Path, device: str, threads: int,
           extra: dict[str, Any]) -> Path | None:
    """The run's unit file, written once when its summary says it is done and none exists for (plan, name, key);
    the path written, or None. It holds every file of the run directory the report reads (module docstring)."""
    summary_path = run_dir / "summary.json"
    try:
        summary = read.read_json(summary_path) if summary_path.is_file() else None
    except (OSError, read.Unreadable):
        return None
    if not summary or summary.get("status") not in DONE_STATUSES:
        return None
    if any((m := files.parse_name(p)) and (m["plan"], m["name"], m["key"]) == (plan, name, key)
           for p in files.unit_files(out)):
        return None
    curvature = run_dir / "curvature_summary.json"
    try:  # a run file that cannot be read leaves the run without a unit file: named missing, never half-recorded
        parts = dict(config=read.read_json(run_dir / "config.json") if (run_dir / "config.json").is_file() else {},
                     metrics=_jsonl(run_dir / "metrics.jsonl"), curvature=_jsonl(run_dir / "curvature.jsonl"),
                     curvature_summary=read.read_json(curvature) if os.path.lexists(curvature) else None,
                     orbits=orbit_projection(run_dir / "orbits.npz"))
    except (OSError, read.Unreadable) as exc:
        print(f"scale.paper: {name}: no unit file: {exc}", flush=True)
        return None
    rec = dict(extra, name=name, plan=plan, key_hash=key, device=device, threads=threads, status=summary["status"],
               summary=summary, **parts, format=FORMAT, run_dir=str(run_dir.relative_to(out)),
               recorded_at=time.strftime("%Y-%m-%d %H:%M:%S"))
    path = out / "units" / files.unit_filename(plan, name, device, threads, key)
    return path if files.write_once(path, rec) else None


def write_view(home: Path, plan: str, units: dict[str, dict[str, Any]], ignored: list[str],
               missing: dict[str, str], rerun: str | None) -> Path:
    """``OUT/<plan>/results.json``: the view of this plan's unit files (replaced whole; the unit files are the
    data). The unit files are named, not copied: each is the record of its run."""
    path = home / "results.json"
    disk.write_json(path, {"format": FORMAT, "plan": plan, "units": {
        n: {k: u.get(k) for k in ("status", "experiment", "seed", "labels", "device", "threads", "key_hash",
                                  "run_dir", "recorded_at")} for n, u in units.items()},
        "ignored": ignored, "missing": missing, "rerun": rerun})
    return path


def collect(runs: list[PlannedRun], inv: GridInvocation) -> int:
    """results.json from the unit files; the runs of this invocation without one, their jobs and the one command
    that runs only them (exit 3); 0 when every chosen run is stored."""
    home = inv.home
    units, ignored = stored(Path(inv.out), inv.plan, [of_run(r) for r in runs])
    states = job_states(home)
    missing = {r.name: states.get(r.name, "no job recorded") for r in runs if r.name not in units}
    rerun = rerun_command(inv, list(missing)) if missing else None
    path = write_view(home, inv.plan, units, ignored, missing, rerun)
    for line in ignored:
        print(f"scale.paper: left out: {line}")
    print(f"scale.paper: {len(units)} of {len(runs)} runs stored; view {path}", flush=True)
    if missing:
        print(f"scale.paper: {len(missing)} run(s) missing: " + "; ".join(f"{n} ({w})" for n, w in missing.items()))
        print(f"scale.paper: run only them: {rerun}")
    return 3 if missing else 0
