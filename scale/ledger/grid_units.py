r"""The paper grid's runs as units: their keys, one immutable file per finished run, the views derived from
those files, and the cost of the runs left (``scale.paper``'s --dry-run, --collect and launches).

    OUT/units/<plan>--<run name>--<device>-t<threads>--<key>.json

``plan``: ``grid-`` + the hash of what makes the grid (dataset, backbone, --quick, --epochs); ``key``: the hash of
what shapes one run's numbers (its ``scale.run`` arguments without ``--data-dir``, where the data is, and the
paper's values it is checked against). A finished run (summary.json: finished or non-finite loss) gets its file
once, written whole or not at all (``scale.ledger.store.write_once``: a temporary, fsync, a hard link that fails
if the name exists), from the job that ran it; no file is ever rewritten, so concurrent jobs on a shared
filesystem need no lock. The file holds the run's status, summary, config, deviations and where its run
directory is (curves, checkpoints and orbits stay there).

``OUT/results.json`` is a view rebuilt from the unit files at every collection: this plan's units, the unit
files left out (another plan's or a changed key: listed, never deleted) and the runs of this invocation's choice
without a file, with the one command that runs only them.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from scale.ledger import store

DONE_STATUSES = ("finished", "non-finite loss")
FORMAT = "grid-units-1"


def plan_id(dataset: str, backbone: str, quick: bool, epochs: int | None) -> str:
    from scale.ledger.plan import digest

    return "grid-" + digest({"dataset": dataset, "backbone": backbone, "quick": quick, "epochs": epochs})[:12]


def grid_plan(args: Any) -> str:
    """The plan of ``scale.paper``'s arguments."""
    return plan_id(args.dataset, args.backbone, args.quick, args.epochs)


def record_run(out: Path, run: Any, args: Any, deviations: dict[str, Any]) -> Path | None:
    """``record`` of a ``scale.paper.PlannedRun`` run by ``args`` (where it ran: the resolved device, the threads)."""
    import torch

    device = args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    return record(out, grid_plan(args), run.name, keys([run])[run.name], out / "runs" / run.name, device,
                  args.threads or torch.get_num_threads(), {"experiment": run.experiment, "seed": run.seed,
                                                            "labels": run.labels, "argv": run.argv,
                                                            "deviations": deviations})


def run_key(argv: list[str], paper: dict[str, Any], track_hessian: bool) -> str:
    from scale.ledger.plan import digest

    keep = [a for i, a in enumerate(argv) if a != "--data-dir" and (i == 0 or argv[i - 1] != "--data-dir")]
    return digest({"argv": keep, "paper": paper, "track_hessian": track_hessian})[:12]


def stored(out: Path, plan: str, keys: dict[str, str]) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """The unit files of ``plan`` whose key is the run's (``keys``: name -> key; any device or thread count: where
    a run ran is not part of the grid's plan), and one line per unit file left out."""
    units: dict[str, dict[str, Any]] = {}
    ignored: list[str] = []
    for path in store.unit_files(out):
        meta = store.parse_name(path)
        if meta is None:
            ignored.append(f"{path.name}: not a unit file name")
        elif meta["plan"] != plan:
            ignored.append(f"{path.name}: plan {meta['plan']}")
        elif keys.get(meta["name"]) != meta["key"]:
            ignored.append(f"{path.name}: not a run of this plan with this key")
        else:
            units[meta["name"]] = store.read_json(path)
    return units, ignored


def record(out: Path, plan: str, name: str, key: str, run_dir: Path, device: str, threads: int,
           extra: dict[str, Any]) -> Path | None:
    """The run's unit file, written once when its summary says it is done and none exists for (plan, name, key);
    the path written, or None."""
    from scale.engine import read

    summary_path = run_dir / "summary.json"
    try:
        summary = read.read_json(summary_path) if summary_path.is_file() else None
        config = read.read_json(run_dir / "config.json") if (run_dir / "config.json").is_file() else {}
    except (OSError, read.Unreadable):
        return None
    if not summary or summary.get("status") not in DONE_STATUSES:
        return None
    if any((m := store.parse_name(p)) and (m["plan"], m["name"], m["key"]) == (plan, name, key)
           for p in store.unit_files(out)):
        return None
    path = out / "units" / store.unit_filename(plan, name, device, threads, key)
    rec = dict(extra, name=name, plan=plan, key_hash=key, device=device, threads=threads, status=summary["status"],
               summary=summary, config=config, run_dir=str(run_dir.relative_to(out)),
               recorded_at=time.strftime("%Y-%m-%d %H:%M:%S"))
    return path if store.write_once(path, rec) else None


def write_view(out: Path, plan: str, units: dict[str, dict[str, Any]], ignored: list[str],
               missing: dict[str, str], rerun: str | None) -> Path:
    """``OUT/results.json``: the view of this plan's unit files (replaced whole; the unit files are the data)."""
    from scale.engine import disk

    path = out / "results.json"
    disk.write_json(path, {"format": FORMAT, "plan": plan, "units": units, "ignored": ignored, "missing": missing,
                           "rerun": rerun})
    return path


def keys(runs: list) -> dict[str, str]:
    """name -> key of each run (``scale.paper.PlannedRun``)."""
    return {r.name: run_key(r.argv, r.paper, r.track_hessian) for r in runs}


def collect(runs: list, out: Path, plan: str, raw: list[str]) -> int:
    """results.json from the unit files; the runs of this invocation without one, their jobs and the one command
    that runs only them (exit 3); 0 when every chosen run is stored."""
    from scale.launch.jobs import job_states, rerun_command

    units, ignored = stored(out, plan, keys(runs))
    states = job_states(out)
    missing = {r.name: states.get(r.name, "no job recorded") for r in runs if r.name not in units}
    rerun = rerun_command("scale.paper", raw, list(missing)) if missing else None
    path = write_view(out, plan, units, ignored, missing, rerun)
    for line in ignored:
        print(f"scale.paper: left out (another plan or key): {line}")
    print(f"scale.paper: {len(units)} of {len(runs)} runs stored; view {path}", flush=True)
    if missing:
        print(f"scale.paper: {len(missing)} run(s) missing: " + "; ".join(f"{n} ({w})" for n, w in missing.items()))
        print(f"scale.paper: run only them: {rerun}")
    return 3 if missing else 0


def print_cost(runs: list, states: dict[str, str], args: Any) -> None:
    """Each run's state and command, then ``scale.launch.cost``'s lines for the runs not done (the ledger's
    per-epoch cost model, ``scale.ledger.plan``, at this grid's epochs)."""
    from scale.launch import resources as launch_flags
    from scale.launch.cost import print_cost as launch_cost
    from scale.ledger.plan import CIFAR, Unit, estimate_seconds

    device = "cuda" if args.device == "cuda" else "cpu"
    costs, basis = [], "no runs"
    for r in runs:
        print(f"  [{states[r.name]:6s}] {r.name}: python -m scale.run {' '.join(r.argv)}")
        epochs = int(r.argv[r.argv.index("--epochs") + 1]) if "--epochs" in r.argv else r.paper.get("epochs")
        sec, basis = estimate_seconds(Unit(r.name, r.experiment, r.seed, (), r.paper, epochs=epochs),
                                      args.dataset if args.dataset in CIFAR else "digits", False, device)
        if states[r.name] != "done":
            costs.append((r.name, sec))
    launch_cost("scale.paper", args.raw, costs, f"scale.ledger.plan's per-epoch cost model at this grid's epochs: "
                f"{basis}", device, args.launcher, launch_flags.resources(args), args.gpu_name)
