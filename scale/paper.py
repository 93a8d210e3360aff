r"""``python -m scale.paper``: the paper's experiment grid E1-E5 with its defaults, and the side-by-side report.

The settings are those of the paper's official code (``experiments.py``, ``hessian_tracker.py``,
``head_depth_ablations.py`` of farischaudhry/projection-head-geometry) where the paper (docs/paper.md) leaves them open:
its bias-free heads (``scale.engine.heads`` style ``paper``), its one-direction SimCLR loss (``simclr_paper``),
a constant learning rate (it has no schedule) and its E3 augmentation (crop scale 0.08-1).

    E1    collapse dynamics, SimSiam: projector 2048-2048 and predictor 512-2048 with the same activation
          (linear, ReLU, GELU, Swish), no bias, BatchNorm after every Linear when on, pseudo-collapse
          initialisation of the projector; BatchNorm off/on (the linear head has none) x lr {0.005, 0.05,
          0.5} x 3 seeds; SGD momentum 0.9, no weight decay, batch 512, 50 epochs (20 on CIFAR-100), crop + flip
    E2    Hessian tracking (H_eff w.r.t. the backbone output, once per epoch on a fixed probe batch):
          normal/Swish, collapsed/Swish, collapsed/ReLU; batch 256, SGD 0.05/0.9, no BatchNorm, 100 epochs
    E3E4  SimCLR as the official code trains it (one-direction InfoNCE, tau 0.1, Adam 1e-3, batch 256, 50
          epochs, crop 0.08-1/flip/rotation 45/colour jitter p 0.8), head Linear-BN-ReLU-Linear-BN without
          biases; every run ends with the rotation probes (E3) and orbit geometry (E4)
    E5    the E3 setup at batch 512 with a Swish + BatchNorm head of depth 1, 2, 3 = Linear layers (the
          official depth: depth 1 is Linear-BN, no activation): linear+BN, swish2, swish3

Plans share one OUT: the grid's plan (``grid-`` + the hash of dataset, backbone, --quick, --epochs) names its
own folder ``OUT/<plan>/`` (``scale.grid.unit_files``), which holds its manifest, run directories, views and job files;
only the unit files (``OUT/units/``, each named by its plan and key) sit side by side, and a plan never reads,
touches or deletes another's. Each run is one ``python -m scale.run`` in ``OUT/<plan>/runs/NAME``: in this process
(``--launcher local``), or as one job each through submitit (``--launcher slurm``: a Slurm array; ``local-jobs``:
this machine, one job per ``--node-gpus`` device; ``scale.launch``, docs/launch.md). A finished run gets one
immutable unit file holding everything the report reads; ``OUT/<plan>/results.json`` and ``report.md`` are rebuilt
from the plan's unit files (``--report-only`` rebuilds them alone, ``scale.paper_report OUT/<plan>`` the report), and
list the unit files they left out (another plan's, another key, or a content that is not the run its name says:
``scale.unit_store``, never used, never deleted; a link at ``OUT/units`` or at a folder of the plan is refused before
anything is written); ``--collect`` names the runs without a file and the one command
that runs only them (exit 3). A run with a unit file is skipped; one with a checkpoint but no summary is resumed
(``--resume``; a timed-out or preempted job is requeued and resumes so). Only if it is the planned run: a saved
config.json that differs from what the plan resolves to (the code changed a run; not the device or thread
count), or a finished run measured with other ``--probe-images``, stops the grid before anything runs (exit 2,
naming the runs and the differences; nothing is deleted). The plan is ``OUT/<plan>/manifest.json``: every run's
command line, the paper's value of every setting it checks, the assumptions where neither the paper nor its
official code decides, and ``paper_choices``: every setting where the grid's default differs from
``scale.run``'s user-facing default (also in ``--help`` and the report). Deviations (a setting whose resolved
value differs from the paper's) are computed from each run's saved config.json, kept in its unit file, and shown
in the report. The plan's settings and its runs are ``scale.experiments.catalog``; this module is the command line, each
run's execution and the checks that resolve a config through ``scale.run``.

``--quick``: 1 seed, 2 epochs, training on the first 384 images (``--train-subset``) and probes on at
most 256 training and 256 test base images; every shrink lands in the deviations. On ``digits`` and
``synthetic`` the model and batch sizes are the dataset's CPU adjustments of ``scale.run`` (also recorded
as deviations).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from scale import run as scale_run
from scale.curvature.tracking import HessianTracker
from scale.engine import disk, read
from scale.engine.config import TrainConfig
from scale.engine.data import load_dataset
from scale.engine.data_errors import DataError
from scale.engine.devices import device_type
from scale.engine.flags import MAX_COUNT, MAX_THREADS, OneLineParser, bounded
from scale.engine.train import Interrupted, NonFiniteLoss
from scale.experiments.catalog import (
    ASSUMPTIONS,
    E2_RUNS,
    EXPERIMENTS,
    PAPER_SETTINGS,
    QUICK,
    PlannedRun,
    deviations,
    plan,
)
from scale.geometry.measure import EndOfRun
from scale.grid import unit_files
from scale.grid.invocation import GridInvocation
from scale.grid.state import refuse_other_manifest, run_state
from scale.launch import resources as launch_flags
from scale.launch.cost import print_cost as launch_cost
from scale.launch.jobs import check_gpus, launch
from scale.launch.resources import LaunchError, launch_of
from scale.ledger.plan import CIFAR, Unit, estimate_seconds
from scale.paper_report import write_report
from scale.runs.faults import RunError
from scale.runs.run_report import git_commit, versions
from scale.runs.validate import plan_disagreements, read_config_json
from scale.unit_store.files import StoreError
from scale.unit_store.schema import MAX_SEEDS

# the grid's plan, re-exported: the ledger and the study build on scale.paper's plan
__all__ = ["E2_RUNS", "EXPERIMENTS", "PAPER_SETTINGS", "PlannedRun", "asdict", "deviations", "main", "paper_choices",
           "plan", "run_state"]

def paper_choices(experiment: str) -> dict[str, list[Any]]:
    """``{setting: [scale.run's default, this grid's]}`` for each setting of ``experiment`` (CIFAR sizes) where
    the paper's choice differs from what ``python -m scale.run cifar10 --method M`` gives; M is the experiment's
    method (``simclr`` for ``simclr_paper``, the user-facing SimCLR)."""
    ref = PAPER_SETTINGS[experiment]
    base = "simclr" if ref["method"] == "simclr_paper" else ref["method"]
    cfg = TrainConfig.resolve("cifar10", base, device="cpu").to_dict()
    cfg["backbone_width"] = cfg["backbone_width"] or 64  # resnet18's standard width
    return {k: [cfg.get(k), v] for k, v in ref.items() if cfg.get(k) != v}


def _choices_text() -> str:
    rows = ["the paper's choices that differ from scale.run's defaults (setting: scale.run -> this grid):"]
    for exp in EXPERIMENTS:
        diffs = paper_choices(exp)
        rows.append(f"  {exp}: " + ("; ".join(f"{k} {a} -> {b}" for k, (a, b) in diffs.items()) or "none"))
    return "\n".join(rows)


# --------------------------------------------------------------------------------------------
# Run states and deviations
# --------------------------------------------------------------------------------------------


def plan_differences(run_dir: Path, run: PlannedRun) -> list[str]:
    """Where the run saved in ``run_dir`` is not the planned one: its config.json against
    ``scale.grid.unit_files.planned_config`` (``scale.runs.validate.plan_disagreements``), and for a finished run the
    end-of-run settings its summary records (the rotation probes' image cap). Empty when it is the plan (or when
    nothing was saved yet)."""
    if not (run_dir / "config.json").is_file():
        return []
    try:
        saved = read_config_json(run_dir / "config.json")
    except RunError:
        return ["config.json (unreadable)"]
    differ = plan_disagreements(saved, unit_files.planned_config(run))
    summary = run_dir / "summary.json"
    if summary.is_file():
        try:
            measured = read.read_json(summary, dict).get("measure") or {}
        except (read.Unreadable, AttributeError):
            measured = {}
        ran = measured.get("probe_images") if isinstance(measured, dict) else None
        if ran != run.probe_images:
            differ.append(f"probe_images ({ran or 'default'} vs {run.probe_images or 'default'})")
    return differ


def refuse_other_plans(out: Path, runs: list[PlannedRun]) -> str | None:
    """One line naming the saved runs in ``out`` that another plan made (``plan_differences``), or None: such a
    run is never counted as done nor resumed, and nothing of it is deleted (the caller stops)."""
    found = [(r.name, d) for r in runs if (d := plan_differences(out / "runs" / r.name, r))]
    if not found:
        return None
    shown = "; ".join(f"{name}: {', '.join(d[:4])}" for name, d in found[:3]) + (
        f"; and {len(found) - 3} more" if len(found) > 3 else "")
    return (f"{out} holds {len(found)} run(s) planned otherwise (saved vs planned: {shown}); nothing was run or "
            "deleted. Use another --out, or move those run directories away to run them again")


# --------------------------------------------------------------------------------------------
# Execution: each run in this process (--launcher local) or as a job (scale.launch); one unit file per run
# --------------------------------------------------------------------------------------------


def _log(home: Path, record: dict[str, Any]) -> None:
    disk.append_text(home / "grid_log.jsonl", json.dumps(record, sort_keys=True) + "\n")  # append-only: one line each


def execute_in_process(run: PlannedRun, home: Path, device: str, threads: int | None = None) -> int:
    """One run through ``scale.run.train`` (the run ``python -m scale.run`` makes, from the run's settings) in this
    process, in the plan folder ``home`` (a job calls this too); its exit code as ``scale.run``'s (0 done, 1 a data
    error, 3 a non-finite loss, 130 interrupted: rerun to resume)."""
    run_dir = home / "runs" / run.name
    state = run_state(run_dir)
    if state == "done":
        return 0
    cfg = run.config(device_type(device), threads=threads or torch.get_num_threads())
    torch.set_num_threads(cfg.threads)
    try:
        data = load_dataset(cfg.dataset, run.data_dir, image_size=None if cfg.dataset in CIFAR else cfg.image_size)
        tracker = HessianTracker("epoch", run_dir=run_dir, log=None) if run.track_hessian else None
        # resume: from its checkpoint; otherwise what a killed attempt left (a config.json) is replaced, never mixed
        resume = state == "resume"
        same = f"--resume {run_dir}" if resume else " ".join(run.argv)  # the equivalent command, for the record
        scale_run.train(cfg, data, run_dir, measure=EndOfRun(probe_images=run.probe_images), resume=resume,
                        overwrite=not resume, tracker=tracker, progress=False, log=None,
                        command=f"python -m scale.run {same}")
    except NonFiniteLoss:
        return 3  # recorded in its summary: a finished state of the grid
    except (Interrupted, KeyboardInterrupt):
        return 130
    except DataError as exc:
        print(f"  {run.name}: data error: {exc}", file=sys.stderr, flush=True)
        return 1
    return 0


def record_unit(run: PlannedRun, inv: GridInvocation) -> None:
    """Once the run is done, its one immutable unit file with its deviations (``scale.grid.unit_files``)."""
    config = inv.home / "runs" / run.name / "config.json"
    if config.is_file():
        dev = deviations(read.read_json(config), run.paper, inv.dataset, run.probe_images)
        unit_files.record_run(run, inv, dev)


def run_here(runs: list[PlannedRun], inv: GridInvocation) -> int:
    """Each of ``runs`` in this process, one after another; 130 when interrupted (rerun to resume)."""
    home = inv.home
    for r in runs:
        t = time.perf_counter()
        try:
            code = execute_in_process(r, home, inv.device, inv.threads)
        except KeyboardInterrupt:
            code = 130
        except Exception as exc:  # one broken run must not lose the rest of the grid
            print(f"  {r.name}: failed: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            code = 1
        record_unit(r, inv)
        seconds = time.perf_counter() - t
        if not inv.as_job:  # concurrent appends are not atomic on network filesystems: a job's time is in its files
            _log(home, {"name": r.name, "exit_code": code, "seconds": seconds, "time": time.time()})
        print(f"  {r.name}: exit {code}, {seconds:.1f} s", flush=True)
        if code == 130:
            print("scale.paper: interrupted; rerun the same command to resume", file=sys.stderr)
            return 130
    return 0


def run_job(inv: GridInvocation) -> int:
    """A job's function (``scale.launch.jobs.UnitJob``): the invocation's runs and unit files in this process, after
    the checks a local run makes (no folder a link; no saved run planned otherwise); the views are the collecting
    invocation's."""
    unit_files.check_folders(inv.out, inv.plan)
    runs = inv.chosen(inv.planned())
    other_plan = refuse_other_plans(inv.home, runs)
    if other_plan:
        print(f"scale.paper: error: {other_plan}", file=sys.stderr)
        return 2
    return run_here(runs, inv)


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python -m scale.paper", description="Run the paper's experiment grid E1-E5 "
                                "with its defaults (docs/paper.md and the official code) and write the side-by-side "
                                "report.", epilog=_choices_text(), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", default="cifar10", choices=("cifar10", "cifar100", "digits", "synthetic"),
                   help="default: cifar10 (the paper's; digits offline on a CPU)")
    p.add_argument("--backbone", default="resnet18", choices=("resnet18", "vit_tiny"), help="default: resnet18")
    p.add_argument("--experiments", default=",".join(EXPERIMENTS),
                   help=f"comma-separated subset of {', '.join(EXPERIMENTS)} (default: all)")
    p.add_argument("--quick", action="store_true", help="smoke run: 1 seed, 2 epochs, 384 training images")
    p.add_argument("--seeds", type=int, help=f"seeds per configuration (default: 3; --quick 1; at most {MAX_SEEDS})")
    p.add_argument("--epochs", type=int, help="override every run's epochs (a recorded deviation)")
    p.add_argument("--out", default=None, help="output folder: each plan in OUT/<plan>/, unit files in OUT/units "
                   "(default: paper-DATASET-BACKBONE[-quick])")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto", help="default: auto")
    p.add_argument("--threads", type=int, help="torch CPU threads per run (default: scale.run's choice)")
    p.add_argument("--data-dir", help="folder with the CIFAR archive (passed to scale.run)")
    p.add_argument("--dry-run", action="store_true", help="write the manifest and print the plan, its estimated "
                   "cost (GPU-hours on --gpu-name with --device cuda) and the jobs --launcher would submit; run "
                   "nothing")
    p.add_argument("--no-report", action="store_true", help="do not write the report at the end")
    p.add_argument("--report-only", action="store_true", help="run nothing: rebuild the plan's views (results.json, "
                   "report.md) from its unit files")
    launch_flags.add_arguments(p)
    return p


def _parse_experiments(text: str) -> tuple[str, ...]:
    names = tuple(t.strip() for t in text.split(",") if t.strip())
    bad = [n for n in names if n not in EXPERIMENTS]
    if bad or not names:
        raise SystemExit(f"scale.paper: error: unknown experiment(s) {bad or text!r}; valid: {', '.join(EXPERIMENTS)}")
    return names


def invocation_of(args: argparse.Namespace, raw: list[str]) -> GridInvocation:
    """The parsed flags as one typed invocation, every value checked; ``ValueError`` (``LaunchError``) with one line
    naming the bad value and the valid ones."""
    experiments = _parse_experiments(args.experiments)
    for key in ("seeds", "epochs", "threads"):
        v = getattr(args, key)
        if v is not None and v < 1:
            raise ValueError(f"--{key} must be a positive integer, got {v}")
    if args.seeds is not None and args.seeds > MAX_SEEDS:
        raise ValueError(f"--seeds {args.seeds} is above {MAX_SEEDS}, the most a plan has (1 <= N <= {MAX_SEEDS})")
    bounded("--threads", args.threads, 1, MAX_THREADS, int)
    bounded("--epochs", args.epochs, 1, MAX_COUNT, int)
    launch_spec = launch_of(vars(args))
    wanted = tuple(n.strip() for n in args.units.split(",") if n.strip()) if args.units is not None else ()
    if args.units is not None and not wanted:
        raise ValueError("--units: no run named (none given) in this plan (--dry-run lists them)")
    out = Path(args.out or f"paper-{args.dataset}-{args.backbone}{'-quick' if args.quick else ''}")
    return GridInvocation(out=out, dataset=args.dataset, backbone=args.backbone, quick=args.quick, epochs=args.epochs,
                          experiments=experiments, seeds=args.seeds, units=wanted, device=args.device,
                          threads=args.threads, data_dir=args.data_dir, no_report=args.no_report, launch=launch_spec,
                          as_job=args.as_job, command=" ".join(["python", "-m", "scale.paper", *raw]))


def main(argv: list[str] | None = None) -> int:
    """``python -m scale.paper``; a file it would write through a link or replace without owning it (exit 2), a
    grid file it cannot read (exit 1) or an output it cannot write (exit 4) is one line, never a traceback; so is
    a unit file of the store it cannot read (exit 2, left as it is)."""
    try:
        return _main(argv)
    except (disk.NotOurs, read.Unreadable) as exc:
        print(f"scale.paper: error: {exc}", file=sys.stderr)
        return exc.code
    except StoreError as exc:
        print(f"scale.paper: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"scale.paper: error: cannot write {exc.filename or ''}: {exc.strerror or exc}", file=sys.stderr)
        return 4


def _main(argv: list[str] | None = None) -> int:
    raw = list(argv if argv is not None else sys.argv[1:])
    args = build_parser().parse_args(raw)
    try:
        inv = invocation_of(args, raw)
        check_gpus(inv.launch, device_type(inv.device) == "cuda")
        planned = inv.planned()
        runs = inv.chosen(planned)
    except ValueError as exc:  # LaunchError is a ValueError
        print(f"scale.paper: error: {exc}", file=sys.stderr)
        return 2
    out, pid, home = inv.out, inv.plan, inv.home  # home: everything of this plan but its unit files (OUT shared)
    unit_files.check_folders(out, pid)  # a link at OUT/units, OUT/<plan>, ...: refused before anything is written
    # a job writes no manifest: the invocation that submitted it checked and wrote the plan's
    other_plan = refuse_other_plans(home, runs) or (None if inv.as_job else refuse_other_manifest(home, planned))
    if other_plan:
        print(f"scale.paper: error: {other_plan}", file=sys.stderr)
        return 2
    if (args.collect or args.report_only) and not (home / "manifest.json").is_file():
        print(f"scale.paper: error: {out} holds no grid of this plan ({home / 'manifest.json'}): nothing submitted "
              "there to collect or report", file=sys.stderr)
        return 1
    if inv.as_job:  # one unit of a launch: its run and unit file; the collecting invocation writes the views
        return run_here(runs, inv)
    if args.report_only:
        unit_files.collect(runs, inv)
        return _report(inv)

    have, _ = unit_files.find(out, pid, [unit_files.of_run(r) for r in runs])
    states = {r.name: "done" if r.name in have else run_state(home / "runs" / r.name) for r in runs}
    todo = [r for r in runs if r.name not in have]
    print(f"scale.paper: plan {pid}: {len(runs)} runs in {home} ({len(runs) - len(todo)} stored, "
          f"{sum(states[r.name] == 'resume' for r in todo)} to resume, "
          f"{sum(states[r.name] == 'new' for r in todo)} new)", flush=True)
    if (out / "manifest.json").is_file() or (out / "runs").is_dir():  # the layout before plan folders
        print(f"scale.paper: {out} also holds a grid of the earlier layout (manifest.json, runs/ at its top): left as "
              f"it is, not read; this plan's runs are in {home}", flush=True)
    disk.make_dirs(home)
    experiments = inv.experiments
    manifest = {
        "plan": pid, "command": inv.command,
        "dataset": inv.dataset, "backbone": inv.backbone, "quick": inv.quick, "experiments": list(experiments),
        "quick_settings": QUICK if inv.quick else None, "assumptions": {e: ASSUMPTIONS[e] for e in experiments},
        "paper_settings": {e: PAPER_SETTINGS[e] for e in experiments},
        "paper_choices": {e: paper_choices(e) for e in experiments},
        "runs": [dict(asdict(r), argv=r.argv) for r in planned],  # argv: each run's command line, for people
        "key_format": unit_files.KEY_FORMAT,  # its runs keyed by their resolved configs (scale.grid.unit_files)
        "git_commit": git_commit(), "versions": versions(),
    }
    if not args.collect:
        disk.write_json(home / "manifest.json", manifest)
    if args.dry_run:
        print_cost(runs, states, inv)
        return 0
    t0 = time.perf_counter()
    code = 0
    if args.collect:
        pass
    elif inv.launch.launcher != "local":
        try:
            launch(inv, run_job, [r.name for r in todo], home)  # GPUs checked above
        except LaunchError as exc:
            print(f"scale.paper: error: {exc}", file=sys.stderr)
            return 2
        if inv.launch.no_wait:
            return 0
    else:
        code = run_here(todo, inv)
    if not args.collect:
        wall = time.perf_counter() - t0
        _log(home, {"name": "(grid)", "seconds": wall, "runs_attempted": len(todo), "time": time.time()})
        print(f"scale.paper: {len(todo)} runs attempted in {wall:.1f} s", flush=True)
    for r in runs:  # a run done by a job that died after its summary, before its unit file
        record_unit(r, inv)
    missing = unit_files.collect(runs, inv)
    return code or _report(inv) or missing


def print_cost(runs: list[PlannedRun], states: dict[str, str], inv: GridInvocation) -> None:
    """Each run's state and command, then ``scale.launch.cost``'s lines for the runs not done (the ledger's
    per-epoch cost model, ``scale.ledger.plan``, at this grid's epochs)."""
    device = "cuda" if inv.device == "cuda" else "cpu"
    costs, basis = [], "no runs"
    for r in runs:
        print(f"  [{states[r.name]:6s}] {r.name}: python -m scale.run {' '.join(r.argv)}")
        epochs = r.settings.get("epochs", r.paper.get("epochs"))
        unit = Unit(r.name, r.experiment, r.seed, r.dataset, r.backbone, dict(r.settings, epochs=epochs), r.paper)
        sec, basis = estimate_seconds(unit, inv.dataset if inv.dataset in CIFAR else "digits", False, device)
        if states[r.name] != "done":
            costs.append((r.name, sec))
    launch_cost(inv, costs, f"scale.ledger.plan's per-epoch cost model at this grid's epochs: {basis}", device)


def _report(inv: GridInvocation) -> int:
    """The plan's report.md from its unit files (``scale.paper_report``), unless --no-report."""
    if not inv.no_report and (inv.home / "manifest.json").is_file():
        print(f"scale.paper: report {write_report(inv.home)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
