r"""The paper grid's runs as units: their keys, one immutable file per finished run holding everything the report
reads, the plan's folder, the views derived from the unit files, and the cost of the runs left.

    OUT/units/<plan>--<run name>--<device>-t<threads>--<key>.json     one per finished run, of every plan
    OUT/<plan>/manifest.json                                          the plan (scale.paper writes it)
    OUT/<plan>/runs/NAME/                                             a run's work directory (scale.run)
    OUT/<plan>/results.json, report.md, *.png                         the plan's views, rebuilt from its unit files
    OUT/<plan>/launch/, jobs/, grid_log.jsonl                         its submissions, submitit's files, its log

``plan``: ``grid-`` + the hash of what makes the grid (dataset, backbone, --quick, --epochs, the layout); ``key``:
the hash of what shapes one run's numbers (its ``scale.run`` arguments without ``--data-dir``, where the data is,
and the paper's values it is checked against). Everything of a plan but its unit files lives in its own folder, so
plans share one OUT: none reads, touches or deletes another's files, and each view lists the unit files it left
out (another plan's, or a changed key), which are never deleted.

A finished run (summary.json: finished or non-finite loss) gets its file once, written whole or not at all
(``scale.units.store.write_once``: a temporary, fsync, a hard link that fails if the name exists), from the job
that ran it; no file is ever rewritten, so concurrent jobs on a shared filesystem need no lock. The file holds the
run's status, summary, config, deviations, per-epoch metrics, E2's curvature records and summary, and E4's orbit
figure data (the 2-D PCA of each space's orbits), so the views need nothing else: ``results.json`` and the report
(``scale.report``) are rebuilt from the unit files and the manifest at any time (``scale.paper --report-only``).

The unit files are the unit store's (``scale.units``): a file is used only when its content is the run its name
says (``find``: its schema, its plan, name, device, threads and key, the plan's experiment, seed and labels, and
its command line hashing to its key); any other is left out with one line. ``check_folders``: no folder the
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
from scale.experiments.paper import PlannedRun
from scale.launch.jobs import job_states, rerun_command
from scale.units import schema, store
from scale.units.store import Planned, Stored, digest

DONE_STATUSES = ("finished", "non-finite loss")
FORMAT = "grid-units-2"
ORBIT_SPACES = ("z", "h", "h_untrained")  # scale.geometry.measure's orbits.npz arrays, (n_orbits, P, dim) each


def plan_id(dataset: str, backbone: str, quick: bool, epochs: int | None) -> str:
    return "grid-" + digest({"dataset": dataset, "backbone": backbone, "quick": quick, "epochs": epochs,
                             "layout": FORMAT})[:12]


def grid_plan(args: Any) -> str:
    """The plan of ``scale.paper``'s arguments."""
    return plan_id(args.dataset, args.backbone, args.quick, args.epochs)


def plan_dir(out: Path, plan: str) -> Path:
    """The plan's own folder in ``out`` (module docstring)."""
    return Path(out) / plan


def check_folders(out: Path, plan: str) -> None:
    """``disk.NotOurs`` (exit 2) where a folder the grid writes below ``out`` is a link or not a folder."""
    disk.check_folders(out, [store.UNITS, plan, *(f"{plan}/{d}" for d in ("runs", "launch", "jobs"))])


def run_key(argv: list[str], paper: dict[str, Any], track_hessian: bool) -> str:
    keep = [a for i, a in enumerate(argv) if a != "--data-dir" and (i == 0 or argv[i - 1] != "--data-dir")]
    return digest({"argv": keep, "paper": paper, "track_hessian": track_hessian})[:12]


def keys(runs: list) -> dict[str, str]:
    """name -> key of each run (``scale.experiments.paper.PlannedRun``)."""
    return {r.name: run_key(r.argv, r.paper, r.track_hessian) for r in runs}


@dataclass(frozen=True)
class GridRun:
    """What the plan says of one run, as the store checks its unit file: its command line, the paper's values and
    whether it tracks the Hessian (its key), its experiment, seed and labels."""

    name: str
    argv: list[str]
    paper: dict[str, Any]
    track_hessian: bool
    experiment: str
    seed: int | None
    labels: dict[str, Any]

    @property
    def key(self) -> str:
        return run_key(self.argv, self.paper, self.track_hessian)


def of_run(run: PlannedRun) -> GridRun:
    return GridRun(run.name, run.argv, run.paper, run.track_hessian, run.experiment, run.seed, run.labels)


def of_record(rec: dict[str, Any]) -> GridRun:
    """A manifest's run record as a ``GridRun``: its command line as recorded (manifests before the runs were data)
    or rebuilt from its settings (``PlannedRun.argv``); ``read.Unreadable`` for a record of neither kind."""
    try:
        argv = rec["argv"] if "argv" in rec else PlannedRun(**{f.name: rec[f.name] for f in fields(PlannedRun)
                                                                if f.name in rec}).argv
        run = GridRun(rec["name"], argv, rec.get("paper") or {}, bool(rec.get("track_hessian")), rec["experiment"],
                      rec.get("seed"), rec.get("labels") or {})
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

    def command_line(record: dict[str, Any], planned: Planned) -> str | None:
        run = by_name[record["name"]]
        if run_key(record["argv"], run.paper, run.track_hessian) != record["key_hash"]:
            return "its command line is not its key's (another run's content)"
        return None

    planned = {r.name: Planned(r.key, r.experiment, r.seed, r.labels) for r in runs}
    return store.load(Path(out), plan, planned, schema.GRID_UNIT, command_line)


def stored(out: Path, plan: str, runs: list[GridRun]) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """``find``'s unit records."""
    found, ignored = find(out, plan, runs)
    return {name: s.record for name, s in found.items()}, ignored


def record_run(out: Path, run: Any, args: Any, deviations: dict[str, Any]) -> Path | None:
    """``record`` of a ``scale.experiments.paper.PlannedRun`` run by ``args`` (where it ran: the resolved device,
    threads)."""
    device = args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    pid = grid_plan(args)
    return record(out, pid, run.name, keys([run])[run.name], plan_dir(out, pid) / "runs" / run.name, device,
                  args.threads or torch.get_num_threads(), {"experiment": run.experiment, "seed": run.seed,
                                                            "labels": run.labels, "argv": run.argv,
                                                            "deviations": deviations})


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
    if any((m := store.parse_name(p)) and (m["plan"], m["name"], m["key"]) == (plan, name, key)
           for p in store.unit_files(out)):
        return None
    curvature = run_dir / "curvature_summary.json"
    try:  # a run file that cannot be read leaves the run without a unit file: named missing, never half-recorded
        files = dict(config=read.read_json(run_dir / "config.json") if (run_dir / "config.json").is_file() else {},
                     metrics=_jsonl(run_dir / "metrics.jsonl"), curvature=_jsonl(run_dir / "curvature.jsonl"),
                     curvature_summary=read.read_json(curvature) if os.path.lexists(curvature) else None,
                     orbits=orbit_projection(run_dir / "orbits.npz"))
    except (OSError, read.Unreadable) as exc:
        print(f"scale.paper: {name}: no unit file: {exc}", flush=True)
        return None
    rec = dict(extra, name=name, plan=plan, key_hash=key, device=device, threads=threads, status=summary["status"],
               summary=summary, **files, format=FORMAT, run_dir=str(run_dir.relative_to(out)),
               recorded_at=time.strftime("%Y-%m-%d %H:%M:%S"))
    path = out / "units" / store.unit_filename(plan, name, device, threads, key)
    return path if store.write_once(path, rec) else None


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


def collect(runs: list, out: Path, plan: str, raw: list[str]) -> int:
    """results.json from the unit files; the runs of this invocation without one, their jobs and the one command
    that runs only them (exit 3); 0 when every chosen run is stored."""
    home = plan_dir(out, plan)
    units, ignored = stored(out, plan, [of_run(r) for r in runs])
    states = job_states(home)
    missing = {r.name: states.get(r.name, "no job recorded") for r in runs if r.name not in units}
    rerun = rerun_command("scale.paper", raw, list(missing)) if missing else None
    path = write_view(home, plan, units, ignored, missing, rerun)
    for line in ignored:
        print(f"scale.paper: left out: {line}")
    print(f"scale.paper: {len(units)} of {len(runs)} runs stored; view {path}", flush=True)
    if missing:
        print(f"scale.paper: {len(missing)} run(s) missing: " + "; ".join(f"{n} ({w})" for n, w in missing.items()))
        print(f"scale.paper: run only them: {rerun}")
    return 3 if missing else 0
