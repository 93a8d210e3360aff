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

Each run is one ``python -m scale.run`` in ``OUT/runs/NAME``: in this process (``--launcher local``), or as
one job each through submitit (``--launcher slurm``: a Slurm array; ``local-jobs``: this machine, one job per
``--node-gpus`` device; ``scale.launch``, docs/launch.md). A finished run gets one immutable unit file in
``OUT/units/`` (``scale.ledger.grid_units``); ``OUT/results.json`` is rebuilt from those files, and ``--collect``
names the runs without one and the one command that runs only them (exit 3). A run whose summary.json says it
finished (or stopped on a non-finite loss, a result in itself) is skipped; one with a checkpoint but no summary
is resumed (``--resume``; a timed-out or preempted job is requeued and resumes so). Either only
if it is the planned run: a saved config.json that differs from what the plan resolves to (another
dataset, epochs, head, ...; not the device or thread count), or a finished run measured with other
``--probe-images``, stops the grid before anything runs (exit 2, naming the runs and the differences;
nothing is deleted). The plan
is ``OUT/manifest.json``: every run's command line, the paper's value of every setting it checks, the
assumptions where neither the paper nor its official code decides, and ``paper_choices``: every setting
where the grid's default differs from ``scale.run``'s user-facing default (also in ``--help`` and the
report). Deviations (a setting whose resolved value differs from the paper's) are computed from each
run's saved config.json, listed per run, and shown in the report.

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
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

EXPERIMENTS: tuple[str, ...] = ("E1", "E2", "E3E4", "E5")
E1_HEADS: tuple[str, ...] = ("linear", "relu2", "gelu2", "swish2")  # projector 512-2048-2048: 2 Linear layers
E1_LRS: tuple[float, ...] = (0.005, 0.05, 0.5)
E2_RUNS: tuple[tuple[str, str], ...] = (("normal", "swish2"), ("collapsed", "swish2"), ("collapsed", "relu2"))
E5_DEPTHS: tuple[int, ...] = (1, 2, 3)
E5_HEADS: dict[int, str] = {1: "linear", 2: "swish2", 3: "swish3"}  # depth = Linear layers (paper style, with BN)
CIFAR = ("cifar10", "cifar100")
QUICK = dict(seeds=1, epochs=2, train_subset=384, probe_images=256)
FULL_SEEDS = 3

# The paper's settings per experiment (docs/paper.md, and its official code where the paper is silent); keys are
# TrainConfig fields. "schedule": the official code keeps the learning rate constant.
_COMMON = dict(backbone="resnet18", backbone_width=64, head_width=2048, head_out=2048, head_style="paper",
               head_bias=False, schedule="constant", weight_decay=0.0)
_SIMCLR = dict(_COMMON, method="simclr_paper", temperature=0.1, head_bn=True, head_out_bn=True, optimizer="adam",
               lr=1e-3, epochs=50, augment="e3")
PAPER_SETTINGS: dict[str, dict[str, Any]] = {
    "E1": dict(_COMMON, method="simsiam", pred_width=512, optimizer="sgd", momentum=0.9, batch_size=512, epochs=50,
               augment="e1", init="collapsed"),
    "E2": dict(_COMMON, method="simsiam", pred_width=512, head_bn=False, optimizer="sgd", lr=0.05, momentum=0.9,
               batch_size=256, epochs=100, augment="e1"),
    "E3E4": dict(_SIMCLR, head="relu2", batch_size=256),
    "E5": dict(_SIMCLR, batch_size=512),  # head_depth_ablations.py: ExperimentConfig's batch 512
}
# Where neither the paper nor its official code decides, what the grid does (manifest and report).
ASSUMPTIONS: dict[str, str] = {
    "E1": "E1 runs from the pseudo-collapse initialisation (listed under E1 in docs/paper.md). The linear head is the "
          "official two bias-free Linear layers 512-2048-2048, which take no BatchNorm there, so it runs with "
          "BatchNorm off only. The official grid is a 14-run subset of this one (GELU at lr 0.05 without "
          "BatchNorm only).",
    "E2": "E2's objective is not named in the paper: SimSiam (the official hessian_tracker.py's). Probe batch: "
          "scale.curvature.tracking's fixed view pairs of the first step (rows in the E2 table); "
          "lambda_min/lambda_max by "
          "Lanczos in float64 (the paper: 20 power iterations in float32 on the first 5 batches of each epoch); "
          "1 seed.",
    "E3E4": "Probe images: training split for fitting, test split for scoring; orbits from the test split. Images "
            "are normalised with the dataset's mean and std (the official code feeds ToTensor's [0, 1]).",
    "E5": "Depth = number of Linear layers, as in the official head_depth_ablations.py: depth 1 is Linear-BN "
          "(the paper style's 'linear' with BatchNorm), depth 2 swish2, depth 3 swish3; BatchNorm after every "
          "Linear, no biases.",
}
DONE_STATUSES = ("finished", "non-finite loss")


def paper_choices(experiment: str) -> dict[str, list[Any]]:
    """``{setting: [scale.run's default, this grid's]}`` for each setting of ``experiment`` (CIFAR sizes) where
    the paper's choice differs from what ``python -m scale.run cifar10 --method M`` gives; M is the experiment's
    method (``simclr`` for ``simclr_paper``, the user-facing SimCLR)."""
    import torch

    from scale.run import build_parser as run_parser
    from scale.run import resolve_config

    ref = PAPER_SETTINGS[experiment]
    base = "simclr" if ref["method"] == "simclr_paper" else ref["method"]
    cfg = resolve_config(run_parser().parse_args(["cifar10", "--method", base]), torch.device("cpu")).to_dict()
    cfg["backbone_width"] = cfg["backbone_width"] or 64  # resnet18's standard width
    return {k: [cfg.get(k), v] for k, v in ref.items() if cfg.get(k) != v}


def _choices_text() -> str:
    rows = ["the paper's choices that differ from scale.run's defaults (setting: scale.run -> this grid):"]
    for exp in EXPERIMENTS:
        diffs = paper_choices(exp)
        rows.append(f"  {exp}: " + ("; ".join(f"{k} {a} -> {b}" for k, (a, b) in diffs.items()) or "none"))
    return "\n".join(rows)


@dataclass
class PlannedRun:
    name: str
    experiment: str
    seed: int
    argv: list[str]  # scale.run arguments, without --out / --run-name / --device / --quiet
    paper: dict[str, Any]  # the paper's value of each checked setting
    track_hessian: bool = False
    labels: dict[str, Any] = field(default_factory=dict)


def _bool_flag(name: str, value: bool) -> str:
    return f"--{name}" if value else f"--no-{name}"


def plan(dataset: str, backbone: str, quick: bool, experiments: tuple[str, ...] = EXPERIMENTS,
         seeds: int | None = None, epochs: int | None = None) -> list[PlannedRun]:
    """Every run of the grid, in execution order."""
    n_seeds = seeds or (QUICK["seeds"] if quick else FULL_SEEDS)
    cifar = dataset in CIFAR
    runs: list[PlannedRun] = []

    def add(name: str, exp: str, seed: int, flags: dict[str, Any], paper: dict[str, Any], labels: dict[str, Any],
            track: bool = False) -> None:
        ref = dict(PAPER_SETTINGS[exp], **paper)
        if exp == "E1" and dataset == "cifar100":
            ref["epochs"] = 20
        values = {k: v for k, v in ref.items() if k != "backbone"}
        if not cifar:  # the dataset's CPU adjustments of scale.run apply to the model and batch sizes
            for k in ("backbone_width", "head_width", "head_out", "pred_width", "batch_size", "epochs"):
                values.pop(k, None)
        values.update(flags)
        if quick:
            values.update(epochs=QUICK["epochs"], train_subset=QUICK["train_subset"])
        if epochs is not None:
            values["epochs"] = epochs
        argv = [dataset, "--backbone", backbone, "--seed", str(seed)]
        for k, v in values.items():
            if v is None:
                continue
            if isinstance(v, bool):
                argv.append(_bool_flag(k.replace("_", "-"), v))
            else:
                argv += [f"--{k.replace('_', '-')}", str(v)]
        if quick:
            argv += ["--probe-images", str(QUICK["probe_images"])]
        if track:  # E2: H_eff once per epoch (scale.curvature.tracking through scale.run)
            argv += ["--track-hessian-every", "epoch"]
        runs.append(PlannedRun(name, exp, seed, argv, ref, track, labels))

    for seed in range(n_seeds):
        if "E1" in experiments:
            for head in E1_HEADS:
                for bn in (False, True) if head != "linear" else (False,):  # the official linear head has no BN
                    for lr in E1_LRS:
                        add(f"E1-{head}-bn{int(bn)}-lr{lr:g}-s{seed}", "E1", seed, dict(head=head, head_bn=bn, lr=lr),
                            dict(head=head, lr=lr), dict(head=head, bn=bn, lr=lr))
        if "E3E4" in experiments:
            add(f"E3E4-relu2-s{seed}", "E3E4", seed, {}, {}, dict(head="relu2"))
        if "E5" in experiments:
            for depth in E5_DEPTHS:
                head = E5_HEADS[depth]
                add(f"E5-depth{depth}-s{seed}", "E5", seed, dict(head=head), dict(head=head),
                    dict(depth=depth, head=head))
    if "E2" in experiments:
        for init, head in E2_RUNS:
            add(f"E2-{init}-{head}-s0", "E2", 0, dict(head=head, init=init), dict(head=head, init=init),
                dict(init=init, head=head), track=True)
    return runs


# --------------------------------------------------------------------------------------------
# Run states and deviations
# --------------------------------------------------------------------------------------------


def run_state(run_dir: Path) -> str:
    """``done`` (summary says finished or non-finite loss), ``resume`` (a checkpoint, no final summary) or ``new``."""
    summary = run_dir / "summary.json"
    if summary.is_file():
        try:
            if json.loads(summary.read_text()).get("status") in DONE_STATUSES:
                return "done"
        except (OSError, json.JSONDecodeError):
            pass
    if (run_dir / "checkpoint.pt").is_file() and (run_dir / "config.json").is_file():
        return "resume"
    return "new"


def planned_config(run: PlannedRun) -> dict[str, Any]:
    """The resolved config ``scale.run`` gives the run's arguments (on a CPU; where it runs is not compared)."""
    import torch

    from scale.run import build_parser, resolve_config

    return resolve_config(build_parser().parse_args(run.argv), torch.device("cpu")).to_dict()


def _flag(tokens: list[str], flag: str) -> str | None:
    return tokens[tokens.index(flag) + 1] if flag in tokens[:-1] else None


def plan_differences(run_dir: Path, run: PlannedRun) -> list[str]:
    """Where the run saved in ``run_dir`` is not the planned one: its config.json against ``planned_config``
    (``scale.runs.validate.plan_disagreements``), and for a finished run the measurement flag its summary's
    command line holds (``--probe-images``). Empty when it is the plan (or when nothing was saved yet)."""
    from scale.runs.faults import RunError
    from scale.runs.validate import plan_disagreements, read_config_json

    if not (run_dir / "config.json").is_file():
        return []
    try:
        saved = read_config_json(run_dir / "config.json")
    except RunError:
        return ["config.json (unreadable)"]
    differ = plan_disagreements(saved, planned_config(run))
    summary = run_dir / "summary.json"
    if summary.is_file():
        try:
            command = str(json.loads(summary.read_text()).get("command", "")).split()
        except (OSError, ValueError, AttributeError):
            command = []
        ran, plan_value = _flag(command, "--probe-images"), _flag(run.argv, "--probe-images")
        if ran != plan_value:
            differ.append(f"--probe-images ({ran or 'default'} vs {plan_value or 'default'})")
    return differ


def refuse_other_plans(out: Path, runs: list[PlannedRun]) -> str | None:
    """One line naming the saved runs in ``out`` that another plan made (``plan_differences``), or None: such a
    run is never counted as done nor resumed, and nothing of it is deleted (the caller stops)."""
    found = [(r.name, d) for r in runs if (d := plan_differences(out / "runs" / r.name, r))]
    if not found:
        return None
    shown = "; ".join(f"{name}: {', '.join(d[:4])}" for name, d in found[:3]) + (
        f"; and {len(found) - 3} more" if len(found) > 3 else "")
    return (f"{out} holds {len(found)} run(s) of another plan (saved vs planned: {shown}); nothing was run or "
            "deleted. Use another --out, or remove those run directories to run them again")


def refuse_other_manifest(out: Path, runs: list[PlannedRun]) -> str | None:
    """One line when ``out/manifest.json`` is not a manifest of scale.paper, or is one of another plan (a planned
    run it names is not in this plan, or is planned otherwise): the manifest is never rewritten then. A plan
    that adds runs to the saved one is the same grid, extended."""
    import os

    from scale.engine import read

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
    other = [r["name"] for r in records if planned.get(r["name"]) != r]
    if other:
        return (f"{path} is the manifest of another plan ({len(other)} of its runs are not planned so, e.g. "
                f"{', '.join(other[:3])}); nothing was run or rewritten. Use another --out")
    return None


def deviations(config: dict[str, Any], paper: dict[str, Any], dataset: str, argv: list[str] = ()
               ) -> dict[str, list[Any]]:
    """``{setting: [paper, ours]}`` for every checked setting whose resolved value differs from the paper's;
    the dataset itself counts (the paper's figures are CIFAR-10)."""
    out: dict[str, list[Any]] = {}
    if dataset != "cifar10":
        out["dataset"] = ["cifar10", dataset]
    for key, ref in paper.items():
        ours = config.get(key)
        if key == "backbone_width" and ours is None:
            ours = 64  # resnet18's standard width
        if key in ("lr", "momentum", "weight_decay", "temperature") and ours is not None:
            if abs(float(ours) - float(ref)) <= 1e-12 * max(1.0, abs(float(ref))):
                continue
        elif ours == ref:
            continue
        out[key] = [ref, ours]
    if config.get("train_subset") is not None:
        out["train_subset"] = ["all", config["train_subset"]]
    if "--probe-images" in argv:  # a measurement setting (not in config.json): probes on fewer images
        out["probe_images"] = ["all", int(argv[list(argv).index("--probe-images") + 1])]
    return out


# --------------------------------------------------------------------------------------------
# Execution: each run in this process (--launcher local) or as a job (scale.launch); one unit file per run
# --------------------------------------------------------------------------------------------


def _atomic_json(path: Path, obj: Any) -> None:
    from scale.engine.checkpoint import atomic_write_json

    atomic_write_json(path, obj)


def _log(out: Path, record: dict[str, Any]) -> None:
    from scale.engine import disk

    disk.append_text(out / "grid_log.jsonl", json.dumps(record, sort_keys=True) + "\n")  # append-only: one line each


def execute_in_process(run: PlannedRun, out: Path, device: str, threads: int | None = None) -> int:
    """One run through ``scale.run.main`` in this process (a job of the launcher calls this too)."""
    from scale import run as scale_run

    run_dir = out / "runs" / run.name
    state = run_state(run_dir)
    if state == "done":
        return 0
    extra = ["--quiet", "--device", device] + (["--threads", str(threads)] if threads else [])
    if state == "resume":  # the saved config holds the training settings; measurement and data flags do not
        keep = [run.argv[i : i + 2] for i, a in enumerate(run.argv)
                if a in ("--probe-images", "--data-dir", "--track-hessian-every")]
        argv = ["--resume", str(run_dir), *[a for pair in keep for a in pair], *extra]
    else:  # no checkpoint: what a killed attempt left (a config.json) is replaced, never mixed into
        argv = [*run.argv, "--out", str(out / "runs"), "--run-name", run.name, "--overwrite", *extra]
    saved, sys.argv = sys.argv, ["scale.run", *argv]  # the run's summary records its own command line
    try:
        return scale_run.main(argv)
    finally:
        sys.argv = saved


def record_unit(run: PlannedRun, out: Path, args: argparse.Namespace) -> None:
    """The run's deviations.json and, once it is done, its one immutable unit file (``scale.ledger.grid_units``)."""
    from scale.ledger import grid_units

    run_dir = out / "runs" / run.name
    if (run_dir / "config.json").is_file():
        dev = deviations(json.loads((run_dir / "config.json").read_text()), run.paper, args.dataset, run.argv)
        _atomic_json(run_dir / "deviations.json", dev)
        grid_units.record_run(out, run, args, dev)


def run_here(runs: list[PlannedRun], out: Path, args: argparse.Namespace) -> int:
    """Each of ``runs`` in this process, one after another; 130 when interrupted (rerun to resume)."""
    for r in runs:
        t = time.perf_counter()
        try:
            code = execute_in_process(r, out, args.device, args.threads)
        except KeyboardInterrupt:
            code = 130
        except Exception as exc:  # one broken run must not lose the rest of the grid
            print(f"  {r.name}: failed: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            code = 1
        record_unit(r, out, args)
        seconds = time.perf_counter() - t
        if not args.as_job:  # concurrent appends are not atomic on network filesystems: a job's time is in its files
            _log(out, {"name": r.name, "exit_code": code, "seconds": seconds, "time": time.time()})
        print(f"  {r.name}: exit {code}, {seconds:.1f} s", flush=True)
        if code == 130:
            print("scale.paper: interrupted; rerun the same command to resume", file=sys.stderr)
            return 130
    return 0


def build_parser() -> argparse.ArgumentParser:
    from scale.launch import resources as launch_flags

    p = argparse.ArgumentParser(prog="python -m scale.paper", description="Run the paper's experiment grid E1-E5 "
                                "with its defaults (docs/paper.md and the official code) and write the side-by-side "
                                "report.", epilog=_choices_text(), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", default="cifar10", choices=("cifar10", "cifar100", "digits", "synthetic"),
                   help="default: cifar10 (the paper's; digits offline on a CPU)")
    p.add_argument("--backbone", default="resnet18", choices=("resnet18", "vit_tiny"), help="default: resnet18")
    p.add_argument("--experiments", default=",".join(EXPERIMENTS),
                   help=f"comma-separated subset of {', '.join(EXPERIMENTS)} (default: all)")
    p.add_argument("--quick", action="store_true", help="smoke run: 1 seed, 2 epochs, 384 training images")
    p.add_argument("--seeds", type=int, help="seeds per configuration (default: 3; --quick 1)")
    p.add_argument("--epochs", type=int, help="override every run's epochs (a recorded deviation)")
    p.add_argument("--out", default=None, help="grid directory (default: paper-DATASET-BACKBONE[-quick])")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto", help="default: auto")
    p.add_argument("--threads", type=int, help="torch CPU threads per run (default: scale.run's choice)")
    p.add_argument("--data-dir", help="folder with the CIFAR archive (passed to scale.run)")
    p.add_argument("--dry-run", action="store_true", help="write the manifest and print the plan, its estimated "
                   "cost (GPU-hours on --gpu-name with --device cuda) and the jobs --launcher would submit; run "
                   "nothing")
    p.add_argument("--no-report", action="store_true", help="do not write the report at the end")
    launch_flags.add_arguments(p)
    return p


def _parse_experiments(text: str) -> tuple[str, ...]:
    names = tuple(t.strip() for t in text.split(",") if t.strip())
    bad = [n for n in names if n not in EXPERIMENTS]
    if bad or not names:
        raise SystemExit(f"scale.paper: error: unknown experiment(s) {bad or text!r}; valid: {', '.join(EXPERIMENTS)}")
    return names


def main(argv: list[str] | None = None) -> int:
    """``python -m scale.paper``; a file it would write through a link or replace without owning it (exit 2), a
    grid file it cannot read (exit 1) or an output it cannot write (exit 4) is one line, never a traceback; so is
    a unit file of the store it cannot read (exit 2, left as it is)."""
    from scale.engine import disk, read
    from scale.ledger.store import StoreError

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
    from scale.launch import resources as launch_flags
    from scale.launch.resources import LaunchError

    raw = list(argv if argv is not None else sys.argv[1:])
    args = build_parser().parse_args(raw)
    args.raw = raw
    experiments = _parse_experiments(args.experiments)
    for key in ("seeds", "epochs", "threads"):
        v = getattr(args, key)
        if v is not None and v < 1:
            print(f"scale.paper: error: --{key} must be a positive integer, got {v}", file=sys.stderr)
            return 2
    try:
        import torch

        from scale.launch.jobs import check_gpus

        check_gpus(args.launcher, launch_flags.check(args), args.node_gpus,
                   args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available()))
    except LaunchError as exc:
        print(f"scale.paper: error: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out or f"paper-{args.dataset}-{args.backbone}{'-quick' if args.quick else ''}")
    args.out = out
    planned = plan(args.dataset, args.backbone, args.quick, experiments, args.seeds, args.epochs)
    if args.data_dir:
        for r in planned:
            r.argv += ["--data-dir", args.data_dir]
    runs = planned
    if args.units:
        wanted = [n.strip() for n in args.units.split(",") if n.strip()]
        unknown = [n for n in wanted if n not in {r.name for r in planned}] or ([] if wanted else ["(none given)"])
        if unknown:
            print(f"scale.paper: error: --units: no run named {', '.join(unknown)} in this plan (--dry-run lists "
                  "them)", file=sys.stderr)
            return 2
        runs = [r for r in planned if r.name in wanted]
    # a job writes no manifest: the invocation that submitted it checked and wrote the plan's
    other_plan = refuse_other_plans(out, runs) or (None if args.as_job else refuse_other_manifest(out, planned))
    if other_plan:
        print(f"scale.paper: error: {other_plan}", file=sys.stderr)
        return 2
    if args.collect and not (out / "manifest.json").is_file():
        print(f"scale.paper: error: {out} holds no grid (manifest.json): nothing submitted there to collect",
              file=sys.stderr)
        return 1
    if args.as_job:  # one unit of a launch: its run and unit file; the collecting invocation writes the views
        return run_here(runs, out, args)

    from scale.engine import disk
    from scale.ledger import grid_units
    from scale.runs.run_report import git_commit, versions

    states = {r.name: run_state(out / "runs" / r.name) for r in runs}
    todo = [r for r in runs if states[r.name] != "done"]
    print(f"scale.paper: {len(runs)} runs in {out} ({len(runs) - len(todo)} done, "
          f"{sum(states[r.name] == 'resume' for r in todo)} to resume, "
          f"{sum(states[r.name] == 'new' for r in todo)} new)", flush=True)
    disk.make_dirs(out)
    manifest = {
        "command": " ".join(["python", "-m", "scale.paper", *raw]),
        "dataset": args.dataset, "backbone": args.backbone, "quick": args.quick, "experiments": list(experiments),
        "quick_settings": QUICK if args.quick else None, "assumptions": {e: ASSUMPTIONS[e] for e in experiments},
        "paper_settings": {e: PAPER_SETTINGS[e] for e in experiments},
        "paper_choices": {e: paper_choices(e) for e in experiments},
        "runs": [asdict(r) for r in planned], "git_commit": git_commit(), "versions": versions(),
    }
    if not args.collect:
        _atomic_json(out / "manifest.json", manifest)
    if args.dry_run:
        grid_units.print_cost(runs, states, args)
        return 0
    t0 = time.perf_counter()
    code = 0
    if args.collect:
        pass
    elif args.launcher != "local":
        from scale.launch.jobs import launch

        try:
            launch(args, "scale.paper", raw, [r.name for r in todo], out)  # GPUs checked above
        except LaunchError as exc:
            print(f"scale.paper: error: {exc}", file=sys.stderr)
            return 2
        if args.no_wait:
            return 0
    else:
        code = run_here(todo, out, args)
    if not args.collect:
        wall = time.perf_counter() - t0
        _log(out, {"name": "(grid)", "seconds": wall, "runs_attempted": len(todo), "time": time.time()})
        print(f"scale.paper: {len(todo)} runs attempted in {wall:.1f} s", flush=True)
    for r in runs:  # runs finished before unit files existed, or by a job that died after its summary
        record_unit(r, out, args)
    missing = grid_units.collect(runs, out, grid_units.grid_plan(args), raw)
    if not args.no_report and (out / "manifest.json").is_file():
        from scale.report import write_report

        path = write_report(out)
        print(f"scale.paper: report {path}", flush=True)
    return code or missing


if __name__ == "__main__":
    sys.exit(main())
